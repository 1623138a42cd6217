/*
 * dispatch.c — the command table and the handlers.
 *
 * Each entry: the Request oneof case, the command's name, flags, an optional
 * `check` that runs on the nng thread (it may only read the request and the
 * trainer's immutable config), and `run`, which runs where the flags say:
 *   F_NOW     on the nng thread (cheap, non-blocking: Health, ServerInfo, List)
 *   F_QUEUE   on the trainer's worker, in order with its other commands
 *   F_ADMIN   on the admin worker (blocking work with no trainer yet)
 * F_TRAINER: the request names an existing trainer (looked up centrally).
 */
#include "dispatch.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dqnd_build_config.h"
#include "log.h"
#include "trainer.h"

#define PROTOCOL_VERSION 1u
#define ACT_MAX_STATES (1 << 20)
#define FETCH_DEFAULT_BYTES (4u << 20)

typedef Dqnd__V1__Request req_t;
typedef Dqnd__V1__Reply rep_t;

enum { F_NOW = 1, F_QUEUE = 2, F_ADMIN = 4, F_TRAINER = 8 };

typedef struct cmd {
  const char *name;
  int flags;
  const char *(*get_name)(const req_t *r); /* trainer name, or NULL */
  /* 0, or a code with err set; runs on the nng thread */
  int (*check)(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen);
  void (*run)(server_t *s, trainer_t *t, rpc_call_t *c);
} cmd_t;

/* a queued job: the call and the trainer it runs on (referenced) */
typedef struct job {
  const cmd_t *cmd;
  server_t *s;
  trainer_t *t;
  rpc_call_t *c;
  learner_t *loaded; /* LoadCheckpoint into an existing trainer: built by the admin worker */
} job_t;

void dispatch_job_run(void *owner, void *arg);

/* ------------------------------------------------------------- helpers */

static void reply_ok(rpc_call_t *c, rep_t *r) {
  Dqnd__V1__Status st = DQND__V1__STATUS__INIT;
  r->status = &st;
  rpc_reply(c, r);
}

static void reply_done(rpc_call_t *c) {
  Dqnd__V1__Empty e = DQND__V1__EMPTY__INIT;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_DONE;
  r.done = &e;
  reply_ok(c, &r);
}

static int learner_code(int rc) {
  switch (rc) {
  case LEARNER_EINVAL: return DQND__V1__CODE__INVALID_ARGUMENT;
  case LEARNER_ENOMEM: return DQND__V1__CODE__RESOURCE_EXHAUSTED;
  case LEARNER_EEMPTY: return DQND__V1__CODE__FAILED_PRECONDITION;
  case LEARNER_ECORRUPT: return DQND__V1__CODE__DATA_LOSS;
  case LEARNER_EUNSUPPORTED: return DQND__V1__CODE__FAILED_PRECONDITION;
  case LEARNER_EDEVICE: return DQND__V1__CODE__UNAVAILABLE;
  default: return DQND__V1__CODE__INTERNAL;
  }
}

static void stats_to_pb(const learner_stats_t *st, Dqnd__V1__TrainerStats *p) {
  dqnd__v1__trainer_stats__init(p);
  p->step = st->step;
  p->replay_size = st->replay_size;
  p->replay_total = st->replay_total;
  p->steps_run = (uint32_t)st->steps_run;
  p->loss_mean = st->loss_mean;
  p->loss_last = st->loss_last;
  p->grad_norm_mean = st->grad_norm_mean;
  p->grad_norm_last = st->grad_norm_last;
  p->q_mean = st->q_mean;
  p->per_beta = st->per_beta;
}

/* TrainerInfo with every config field; the storage lives in `ti` */
typedef struct tinfo {
  Dqnd__V1__TrainerInfo info;
  Dqnd__V1__TrainerStats stats;
  Dqnd__V1__Field fields[64];
  Dqnd__V1__Field *fptr[64];
  char values[64][80];
  uint32_t branches[LEARNER_MAX_BRANCHES];
  char state[300];
} tinfo_t;

static void trainer_info(trainer_t *t, const learner_config_t *cfg, const learner_stats_t *st, learner_backend_t be,
                         tinfo_t *ti) {
  dqnd__v1__trainer_info__init(&ti->info);
  ti->info.name = t->name;
  ti->info.backend = (char *)learner_backend_name(be);
  int n = learner_num_fields < 64 ? learner_num_fields : 64;
  for (int i = 0; i < n; i++) {
    dqnd__v1__field__init(&ti->fields[i]);
    ti->fields[i].name = (char *)learner_fields[i].name;
    learner_config_get(cfg, &learner_fields[i], ti->values[i], sizeof ti->values[i]);
    ti->fields[i].value = ti->values[i];
    ti->fptr[i] = &ti->fields[i];
  }
  ti->info.n_config = (size_t)n;
  ti->info.config = ti->fptr;
  ti->info.config_hash = t->cfg_hash;
  stats_to_pb(st, &ti->stats);
  ti->info.stats = &ti->stats;
  ti->info.queued = (uint32_t)workq_pending(&t->q);
  pthread_mutex_lock(&t->mu);
  snprintf(ti->state, sizeof ti->state, "%s%s", t->error[0] ? "error: " : "ready", t->error);
  pthread_mutex_unlock(&t->mu);
  ti->info.state = ti->state;
  ti->info.state_dim = (uint32_t)cfg->state_dim;
  for (int d = 0; d < cfg->n_branches; d++) ti->branches[d] = (uint32_t)cfg->branch_sizes[d];
  ti->info.n_branches = (size_t)cfg->n_branches;
  ti->info.branches = ti->branches;
}

/* A device error leaves the learner in an unknown state: the trainer answers
 * UNAVAILABLE from now on (until a LoadCheckpoint replaces its state); the
 * daemon and the other trainers carry on. */
static void note_learner_error(trainer_t *t, int rc, const char *err) {
  if (rc != LEARNER_EDEVICE) return;
  pthread_mutex_lock(&t->mu);
  snprintf(t->error, sizeof t->error, "%.200s", err);
  pthread_mutex_unlock(&t->mu);
  log_error(t->name, "device error, trainer disabled: %s", err);
}

static learner_backend_t parse_backend(const char *b, int *ok) {
  *ok = 1;
  if (!b || !*b || !strcmp(b, "auto")) return LEARNER_BACKEND_AUTO;
  if (!strcmp(b, "cpu")) return LEARNER_BACKEND_CPU;
  if (!strcmp(b, "cuda")) return LEARNER_BACKEND_CUDA;
  *ok = 0;
  return LEARNER_BACKEND_AUTO;
}

/* A field named twice in one request is refused, not "last wins". */
static int fields_unique(Dqnd__V1__Field **f, size_t n, const char *what, char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++)
      if (!strcmp(f[i]->name, f[j]->name))
        return snprintf(err, errlen, "%s: field '%s' is given twice (%s[%zu] and %s[%zu])", what, f[i]->name, what, j,
                        what, i),
               DQND__V1__CODE__INVALID_ARGUMENT;
  return 0;
}

/* Builds a config from the daemon default (the `ref` config) and the fields. */
static int config_from_fields(Dqnd__V1__Field **f, size_t n, learner_config_t *cfg, char *err, size_t errlen) {
  learner_config_default(cfg);
  if (fields_unique(f, n, "config", err, errlen)) return DQND__V1__CODE__INVALID_ARGUMENT;
  for (size_t i = 0; i < n; i++) {
    if (learner_config_set(cfg, f[i]->name, f[i]->value, err, errlen)) return DQND__V1__CODE__INVALID_ARGUMENT;
  }
  if (learner_config_validate(cfg, err, errlen)) return DQND__V1__CODE__INVALID_ARGUMENT;
  return 0;
}

/* Bytes of memory available to a new learner (host memory for the CPU backend). */
static int64_t memory_available(void) {
  long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return pages > 0 && psz > 0 ? (int64_t)pages * psz : INT64_MAX;
}

/* ------------------------------------------------------------ accessors */

#define NAME_GETTER(fn, field)                                                                                    \
  static const char *fn(const req_t *r) { return r->field ? r->field->name : NULL; }
NAME_GETTER(name_create, create_trainer)
NAME_GETTER(name_destroy, destroy_trainer)
NAME_GETTER(name_submit, submit_transitions)
NAME_GETTER(name_step, step)
NAME_GETTER(name_act, act)
NAME_GETTER(name_sync, sync_target)
NAME_GETTER(name_hparams, set_hyperparams)
NAME_GETTER(name_save, save_checkpoint)
NAME_GETTER(name_fetch, fetch_checkpoint)
NAME_GETTER(name_load, load_checkpoint)
NAME_GETTER(name_stats, get_stats)
NAME_GETTER(name_list_ckpt, list_checkpoints)

/* ------------------------------------------------------------- handlers */

static void run_health(server_t *s, trainer_t *t, rpc_call_t *c) {
  Dqnd__V1__HealthResult h = DQND__V1__HEALTH_RESULT__INIT;
  h.serving = !atomic_load(&s->draining);
  h.uptime_s = now_s() - s->start_time;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_HEALTH;
  r.health = &h;
  reply_ok(c, &r);
}

static void run_server_info(server_t *s, trainer_t *t, rpc_call_t *c) {
  Dqnd__V1__ServerInfoResult i = DQND__V1__SERVER_INFO_RESULT__INIT;
  i.version = DQND_VERSION;
  i.protocol = PROTOCOL_VERSION;
  i.default_backend = (char *)learner_backend_name(s->backend);
  i.device = s->device;
  pthread_mutex_lock(&s->reg_mu);
  i.trainers = (uint32_t)s->n_trainers;
  pthread_mutex_unlock(&s->reg_mu);
  i.max_trainers = (uint32_t)s->opts.max_trainers;
  i.max_message_bytes = (uint64_t)s->opts.max_message_bytes;
  i.queue_depth = (uint32_t)s->opts.queue_depth;
  i.state_dir = s->opts.state_dir;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_SERVER_INFO;
  r.server_info = &i;
  reply_ok(c, &r);
}

static void run_list(server_t *s, trainer_t *t0, rpc_call_t *c) {
  trainer_t **ts;
  int n = trainer_list(s, &ts);
  tinfo_t *ti = calloc((size_t)(n ? n : 1), sizeof *ti);
  Dqnd__V1__TrainerInfo **ptr = calloc((size_t)(n ? n : 1), sizeof *ptr);
  if (!ti || !ptr) {
    for (int i = 0; i < n; i++) trainer_put(ts[i]);
    free(ts), free(ti), free(ptr);
    rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (int i = 0; i < n; i++) {
    learner_stats_t st;
    pthread_mutex_lock(&ts[i]->mu);
    st = ts[i]->stats;
    pthread_mutex_unlock(&ts[i]->mu);
    /* cfg is immutable after registration; backend likewise */
    trainer_info(ts[i], &ts[i]->cfg, &st, learner_backend(ts[i]->l), &ti[i]);
    ptr[i] = &ti[i].info;
  }
  Dqnd__V1__ListTrainersResult l = DQND__V1__LIST_TRAINERS_RESULT__INIT;
  l.n_trainers = (size_t)n;
  l.trainers = ptr;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_LIST;
  r.list = &l;
  reply_ok(c, &r);
  for (int i = 0; i < n; i++) trainer_put(ts[i]);
  free(ts), free(ti), free(ptr);
}

static void reply_trainer(rpc_call_t *c, trainer_t *t, int created) {
  tinfo_t *ti = calloc(1, sizeof *ti);
  if (!ti) {
    rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  learner_stats_t st;
  pthread_mutex_lock(&t->mu);
  st = t->stats;
  pthread_mutex_unlock(&t->mu);
  trainer_info(t, &t->cfg, &st, learner_backend(t->l), ti);
  ti->info.created = created;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_TRAINER;
  r.trainer = &ti->info;
  reply_ok(c, &r);
  free(ti);
}

static int check_create(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen) {
  const Dqnd__V1__CreateTrainer *m = r->create_trainer;
  int ok;
  parse_backend(m->backend, &ok);
  if (!ok) return snprintf(err, errlen, "backend: '%s' is not auto, cpu or cuda", m->backend), 3;
  learner_config_t cfg;
  return config_from_fields(m->config, m->n_config, &cfg, err, errlen);
}

/* admin worker: build the learner, register it; idempotent on the same config */
static void run_create(server_t *s, trainer_t *t0, rpc_call_t *c) {
  const Dqnd__V1__CreateTrainer *m = rpc_request(c)->create_trainer;
  char err[512];
  learner_config_t cfg;
  config_from_fields(m->config, m->n_config, &cfg, err, sizeof err); /* checked already */
  trainer_t *t = trainer_get(s, m->name);
  if (t) {
    int same = t->cfg_hash == learner_config_hash(&cfg);
    if (same)
      reply_trainer(c, t, 0);
    else
      rpc_reply_error(c, DQND__V1__CODE__ALREADY_EXISTS,
                      "name: trainer '%s' exists with a different config (hash %016" PRIx64 ")", m->name, t->cfg_hash);
    trainer_put(t);
    return;
  }
  int ok;
  learner_backend_t be = parse_backend(m->backend, &ok);
  if (be == LEARNER_BACKEND_AUTO) be = s->backend;
  /* the CPU backend holds everything in host memory; the CUDA backend checks
   * free GPU memory itself when it creates the learner */
  int64_t need = learner_memory_estimate(&cfg), avail = memory_available();
  if ((be == LEARNER_BACKEND_CPU || (be == LEARNER_BACKEND_AUTO && learner_backend_default() == LEARNER_BACKEND_CPU)) &&
      need > avail) {
    rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED,
                    "replay_capacity: this trainer needs ~%lld MiB, %lld MiB are available", (long long)(need >> 20),
                    (long long)(avail >> 20));
    return;
  }
  learner_t *l;
  int rc = learner_create(&cfg, be, &l, err, sizeof err);
  if (rc) {
    rpc_reply_error(c, learner_code(rc), "%s", err);
    return;
  }
  int code = trainer_register(s, m->name, l, &cfg, 0, &t, err, sizeof err);
  if (code) {
    learner_destroy(l);
    rpc_reply_error(c, code, "%s", err);
    return;
  }
  log_info(t->name, "created: %s backend, %lld parameters, replay %lld", learner_backend_name(be),
           (long long)learner_config_num_params(&cfg), (long long)cfg.replay_capacity);
  reply_trainer(c, t, 1);
  trainer_put(t);
}

/* worker: every remaining queued job is answered UNAVAILABLE */
static void fail_queued(trainer_t *t, const char *why);

static void save_now(trainer_t *t, int with_replay, ckpt_info_t *info, char *err, size_t errlen, int *rc) {
  *rc = ckpt_write(t->dir, t->l, with_replay, t->srv->opts.keep_checkpoints, info, err, errlen);
  if (*rc == 0) log_info(t->name, "checkpoint %s (%llu bytes)", info->id, (unsigned long long)info->bytes);
  else log_error(t->name, "checkpoint failed: %s", err);
}

static void reply_checkpoint(rpc_call_t *c, const ckpt_info_t *info);

/* Moves the trainer's directory to STATE/.retired/ (the worker, before it
 * unregisters: no periodic save can run in between, and the name is not free
 * yet, so a new trainer of that name cannot race for the directory). */
static int retire(trainer_t *t, const char *why, char *moved, size_t n) {
  char err[512];
  if (ckpt_retire(t->srv->opts.state_dir, t->name, why, moved, n, err, sizeof err)) {
    log_error(t->name, "%s", err);
    return -1;
  }
  if (moved[0]) log_info(t->name, "checkpoints moved to %s", moved);
  return 0;
}

static void run_destroy(server_t *s, trainer_t *t, rpc_call_t *c) {
  const Dqnd__V1__DestroyTrainer *m = rpc_request(c)->destroy_trainer;
  ckpt_info_t info;
  char err[512], moved[1300];
  if (m->save_final) {
    int rc;
    save_now(t, s->opts.checkpoint_replay, &info, err, sizeof err, &rc);
    if (rc) {
      rpc_reply_error(c, DQND__V1__CODE__INTERNAL, "save_final: %s (trainer kept)", err);
      return;
    }
  }
  if (retire(t, "destroyed", moved, sizeof moved)) {
    rpc_reply_error(c, DQND__V1__CODE__INTERNAL, "name: cannot move trainer '%s''s directory aside (trainer kept; "
                    "see the daemon's log)", t->name);
    return;
  }
  trainer_unregister(t);
  workq_close(&t->q);
  fail_queued(t, "destroyed");
  log_info(t->name, "destroyed");
  if (m->save_final) {
    snprintf(info.path, sizeof info.path, "%.*s/%s", (int)(sizeof info.path - sizeof info.id - 2), moved, info.id);
    reply_checkpoint(c, &info);
  } else
    reply_done(c);
}

static int check_submit(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen) {
  const Dqnd__V1__SubmitTransitions *m = r->submit_transitions;
  uint64_t n = m->count, S = (uint64_t)t->cfg.state_dim;
  if (n == 0) return snprintf(err, errlen, "count: must be >= 1"), 3;
#define LEN(f, want)                                                                                              \
  if ((uint64_t)m->f.len != (want))                                                                              \
    return snprintf(err, errlen, #f ": %zu bytes, expected %llu (count %llu)", m->f.len,                         \
                    (unsigned long long)(want), (unsigned long long)n),                                           \
           3;
  LEN(states, n * S * 4)
  LEN(next_states, n * S * 4)
  LEN(actions, n * 4)
  LEN(rewards, n * 4)
  LEN(dones, n)
  if (m->episode_ids.len) LEN(episode_ids, n * 8)
#undef LEN
  learner_transitions_t tr = {(int64_t)n, (const float *)m->states.data, (const int32_t *)m->actions.data,
                              (const float *)m->rewards.data, (const float *)m->next_states.data, m->dones.data,
                              m->episode_ids.len ? (const int64_t *)m->episode_ids.data : NULL};
  return learner_transitions_validate(&t->cfg, &tr, err, errlen) ? 3 : 0;
}

/* Continuous training: steps owed accrue as samples_per_insert x inserted /
 * batch and are paid right after the submit, on this worker, so later
 * commands queue behind them (the rate limit). Fractions carry over. */
static void continuous_train(trainer_t *t, uint32_t inserted, int64_t replay_size) {
  learner_hparams_t hp;
  learner_get_hparams(t->l, &hp);
  if (!(hp.samples_per_insert > 0)) return;
  int batch = t->cfg.batch;
  if (replay_size < batch || replay_size < hp.min_replay) return;
  t->train_credit += (double)hp.samples_per_insert * inserted / batch;
  int n = (int)t->train_credit;
  if (n <= 0) return;
  t->train_credit -= n;
  char err[512];
  int rc = learner_step(t->l, n, NULL, err, sizeof err);
  if (rc) {
    note_learner_error(t, rc, err);
    log_warn(t->name, "continuous training: %s", err);
  }
}

static void run_submit(server_t *s, trainer_t *t, rpc_call_t *c) {
  const Dqnd__V1__SubmitTransitions *m = rpc_request(c)->submit_transitions;
  learner_transitions_t tr = {(int64_t)m->count, (const float *)m->states.data, (const int32_t *)m->actions.data,
                              (const float *)m->rewards.data, (const float *)m->next_states.data, m->dones.data,
                              m->episode_ids.len ? (const int64_t *)m->episode_ids.data : NULL};
  char err[512];
  int rc = learner_submit(t->l, &tr, err, sizeof err);
  if (rc) {
    note_learner_error(t, rc, err);
    rpc_reply_error(c, learner_code(rc), "%s", err);
    return;
  }
  learner_stats_t st;
  learner_get_stats(t->l, &st);
  Dqnd__V1__SubmitResult sr = DQND__V1__SUBMIT_RESULT__INIT;
  sr.accepted = m->count;
  sr.replay_size = st.replay_size;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_SUBMIT;
  r.submit = &sr;
  uint32_t inserted = m->count;
  reply_ok(c, &r); /* the driver goes on streaming while this worker trains */
  continuous_train(t, inserted, st.replay_size);
}

static int check_step(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen) {
  uint32_t n = r->step->n;
  if (n < 1 || n > 1000000) return snprintf(err, errlen, "n: %u is outside [1, 1000000]", n), 3;
  return 0;
}

static void run_step(server_t *s, trainer_t *t, rpc_call_t *c) {
  char err[512];
  learner_stats_t st;
  int rc = learner_step(t->l, (int)rpc_request(c)->step->n, &st, err, sizeof err);
  if (rc) {
    note_learner_error(t, rc, err);
    rpc_reply_error(c, learner_code(rc), "%s", err);
    return;
  }
  Dqnd__V1__TrainerStats ps;
  stats_to_pb(&st, &ps);
  Dqnd__V1__StepResult sr = DQND__V1__STEP_RESULT__INIT;
  sr.stats = &ps;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_STEP;
  r.step = &sr;
  reply_ok(c, &r);
}

static int check_act(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen) {
  const Dqnd__V1__Act *m = r->act;
  if (m->noisy && !t->cfg.noisy)
    return snprintf(err, errlen, "noisy: trainer '%s' has no NoisyNet layers (created with noisy=0)", t->name), 3;
  if (m->count < 1 || m->count > ACT_MAX_STATES)
    return snprintf(err, errlen, "count: %u is outside [1, %d]", m->count, ACT_MAX_STATES), 3;
  uint64_t want = (uint64_t)m->count * (uint64_t)t->cfg.state_dim * 4;
  if (m->states.len != want)
    return snprintf(err, errlen, "states: %zu bytes, expected count*state_dim*4 = %llu", m->states.len,
                    (unsigned long long)want),
           3;
  const float *x = (const float *)m->states.data;
  for (uint64_t i = 0; i < want / 4; i++)
    if (!isfinite(x[i]))
      return snprintf(err, errlen, "states[%llu][%llu]: not finite", (unsigned long long)(i / t->cfg.state_dim),
                      (unsigned long long)(i % t->cfg.state_dim)),
             3;
  return 0;
}

static void run_act(server_t *s, trainer_t *t, rpc_call_t *c) {
  const Dqnd__V1__Act *m = rpc_request(c)->act;
  int n = (int)m->count, qw = learner_config_q_width(&t->cfg);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)n);
  float *q = m->want_q ? malloc(sizeof(float) * (size_t)n * (size_t)qw) : NULL;
  if (!a || (m->want_q && !q)) {
    free(a), free(q);
    rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED, "count: out of memory for %d states", n);
    return;
  }
  char err[512];
  int rc = learner_act(t->l, (const float *)m->states.data, n, m->noisy, a, q, err, sizeof err);
  if (rc) {
    note_learner_error(t, rc, err);
    free(a), free(q);
    rpc_reply_error(c, learner_code(rc), "%s", err);
    return;
  }
  Dqnd__V1__ActResult ar = DQND__V1__ACT_RESULT__INIT;
  ar.count = (uint32_t)n;
  ar.actions.data = (uint8_t *)a;
  ar.actions.len = sizeof(int32_t) * (size_t)n;
  if (q) {
    ar.q.data = (uint8_t *)q;
    ar.q.len = sizeof(float) * (size_t)n * (size_t)qw;
  }
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_ACT;
  r.act = &ar;
  reply_ok(c, &r);
  free(a), free(q);
}

static int check_sync(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen) {
  float tau = r->sync_target->tau;
  if (!(tau >= 0 && tau <= 1)) return snprintf(err, errlen, "tau: %g is outside [0, 1]", (double)tau), 3;
  return 0;
}

static void run_sync(server_t *s, trainer_t *t, rpc_call_t *c) {
  int rc = learner_sync_target(t->l, rpc_request(c)->sync_target->tau);
  if (rc) rpc_reply_error(c, learner_code(rc), "tau: rejected by the learner");
  else reply_done(c);
}

/* applies the fields onto hp; 0 or INVALID_ARGUMENT */
static int apply_hparams(const Dqnd__V1__SetHyperparams *m, learner_hparams_t *hp, char *err, size_t errlen) {
  learner_config_t tmp;
  learner_config_default(&tmp);
  tmp.hp = *hp;
  if (m->n_hparams == 0) return snprintf(err, errlen, "hparams: no fields given (name=value pairs)"), 3;
  if (fields_unique(m->hparams, m->n_hparams, "hparams", err, errlen)) return 3;
  for (size_t i = 0; i < m->n_hparams; i++) {
    const learner_field_t *f = learner_field_find(m->hparams[i]->name);
    if (!f) {
      learner_config_set(&tmp, m->hparams[i]->name, "", err, errlen); /* names it, with the nearest field */
      return 3;
    }
    if (!f->hparam)
      return snprintf(err, errlen, "%s: fixed at creation (changes a shape or the replay); not a hyperparameter", f->name),
             3;
    if (learner_config_set(&tmp, f->name, m->hparams[i]->value, err, errlen)) return 3;
  }
  if (learner_hparams_validate(&tmp.hp, err, errlen)) return 3;
  *hp = tmp.hp;
  return 0;
}

static int check_hparams(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen) {
  learner_hparams_t hp = t->cfg.hp; /* names and values now; the combination again on the worker */
  return apply_hparams(r->set_hyperparams, &hp, err, errlen);
}

static void run_hparams(server_t *s, trainer_t *t, rpc_call_t *c) {
  learner_hparams_t hp;
  learner_get_hparams(t->l, &hp);
  char err[512];
  if (apply_hparams(rpc_request(c)->set_hyperparams, &hp, err, sizeof err)) {
    rpc_reply_error(c, DQND__V1__CODE__INVALID_ARGUMENT, "%s", err);
    return;
  }
  int rc = learner_set_hparams(t->l, &hp, err, sizeof err);
  if (rc) {
    rpc_reply_error(c, learner_code(rc), "%s", err);
    return;
  }
  log_info(t->name, "hyperparameters changed (%zu fields)", rpc_request(c)->set_hyperparams->n_hparams);
  reply_trainer(c, t, 0);
}

static void reply_checkpoint(rpc_call_t *c, const ckpt_info_t *info) {
  Dqnd__V1__CheckpointInfo ci = DQND__V1__CHECKPOINT_INFO__INIT;
  ci.checkpoint = (char *)info->id;
  ci.path = (char *)info->path;
  ci.bytes = info->bytes;
  ci.crc32 = info->crc32;
  ci.step = info->step;
  ci.seq = info->seq;
  ci.mtime_unix = info->mtime;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_CHECKPOINT;
  r.checkpoint = &ci;
  reply_ok(c, &r);
}

static void run_save(server_t *s, trainer_t *t, rpc_call_t *c) {
  ckpt_info_t info;
  char err[512];
  int rc;
  save_now(t, rpc_request(c)->save_checkpoint->with_replay, &info, err, sizeof err, &rc);
  if (rc) rpc_reply_error(c, DQND__V1__CODE__INTERNAL, "%s", err);
  else reply_checkpoint(c, &info);
}

static void run_list_checkpoints(server_t *s, trainer_t *t, rpc_call_t *c) {
  ckpt_info_t *all;
  int n;
  if (ckpt_list(t->dir, &all, &n)) {
    rpc_reply_error(c, DQND__V1__CODE__INTERNAL, "name: cannot read trainer '%s''s checkpoint directory", t->name);
    return;
  }
  Dqnd__V1__CheckpointInfo *ci = calloc((size_t)(n ? n : 1), sizeof *ci);
  Dqnd__V1__CheckpointInfo **ptr = calloc((size_t)(n ? n : 1), sizeof *ptr);
  if (!ci || !ptr) {
    free(all), free(ci), free(ptr);
    rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (int i = 0; i < n; i++) {
    dqnd__v1__checkpoint_info__init(&ci[i]);
    ci[i].checkpoint = all[i].id;
    ci[i].path = all[i].path;
    ci[i].bytes = all[i].bytes;
    ci[i].crc32 = all[i].crc32;
    ci[i].step = all[i].step;
    ci[i].seq = all[i].seq;
    ci[i].mtime_unix = all[i].mtime;
    ptr[i] = &ci[i];
  }
  Dqnd__V1__ListCheckpointsResult lr = DQND__V1__LIST_CHECKPOINTS_RESULT__INIT;
  lr.n_checkpoints = (size_t)n;
  lr.checkpoints = ptr;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_CHECKPOINTS;
  r.checkpoints = &lr;
  reply_ok(c, &r);
  free(all), free(ci), free(ptr);
}

static int check_fetch(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen) {
  const char *id = r->fetch_checkpoint->checkpoint;
  if (id[0] && (strchr(id, '/') || id[0] == '.')) return snprintf(err, errlen, "checkpoint: '%s' is not a checkpoint id", id), 3;
  return 0;
}

static void run_fetch(server_t *s, trainer_t *t, rpc_call_t *c) {
  const Dqnd__V1__FetchCheckpoint *m = rpc_request(c)->fetch_checkpoint;
  ckpt_info_t info;
  char err[512];
  if (ckpt_find(t->dir, m->checkpoint, &info, err, sizeof err)) {
    rpc_reply_error(c, DQND__V1__CODE__NOT_FOUND, "%s", err);
    return;
  }
  if (m->offset > info.bytes) {
    rpc_reply_error(c, DQND__V1__CODE__OUT_OF_RANGE, "offset: %llu is past the end (%llu bytes)",
                    (unsigned long long)m->offset, (unsigned long long)info.bytes);
    return;
  }
  uint64_t cap = (uint64_t)s->opts.max_message_bytes - 4096, want = m->max_bytes ? m->max_bytes : FETCH_DEFAULT_BYTES;
  if (want > cap) want = cap;
  if (want > info.bytes - m->offset) want = info.bytes - m->offset;
  uint8_t *buf = malloc(want ? want : 1);
  size_t got = 0;
  if (!buf || ckpt_read_chunk(&info, m->offset, buf, want, &got) || got != want) {
    free(buf);
    rpc_reply_error(c, DQND__V1__CODE__INTERNAL, "checkpoint: reading %s failed", info.id);
    return;
  }
  Dqnd__V1__CheckpointChunk ch = DQND__V1__CHECKPOINT_CHUNK__INIT;
  ch.checkpoint = info.id;
  ch.offset = m->offset;
  ch.total = info.bytes;
  ch.data.data = buf;
  ch.data.len = got;
  ch.crc32 = info.crc32;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_CHUNK;
  r.chunk = &ch;
  reply_ok(c, &r);
  free(buf);
}

/* --------------------------------------------------------- LoadCheckpoint */

struct upload {
  upload_t *next;
  char name[65];
  uint8_t *data;
  uint64_t n, total;
};

static int check_load(server_t *s, trainer_t *t, const req_t *r, char *err, size_t errlen) {
  const Dqnd__V1__LoadCheckpoint *m = r->load_checkpoint;
  int ok;
  parse_backend(m->backend, &ok);
  if (!ok) return snprintf(err, errlen, "backend: '%s' is not auto, cpu or cuda", m->backend), 3;
  int has_path = m->path && m->path[0];
  if (has_path == (m->data.len > 0 || m->total > 0))
    return snprintf(err, errlen, "path: give either path or data chunks, not %s", has_path ? "both" : "neither"), 3;
  if (!has_path && (m->total > (uint64_t)s->opts.decode_budget * 16 || m->offset + m->data.len > m->total))
    return snprintf(err, errlen, "total: %llu bytes (chunk at %llu + %zu) is inconsistent or too large",
                    (unsigned long long)m->total, (unsigned long long)m->offset, m->data.len),
           3;
  return 0;
}

static void run_swap(server_t *s, trainer_t *t, rpc_call_t *c);

/* admin worker: assemble uploads, build the learner, then create or hand it to the trainer */
static void run_load(server_t *s, trainer_t *t0, rpc_call_t *c) {
  const Dqnd__V1__LoadCheckpoint *m = rpc_request(c)->load_checkpoint;
  char err[512];
  learner_t *l = NULL;
  int ok;
  learner_backend_t be = parse_backend(m->backend, &ok);
  if (be == LEARNER_BACKEND_AUTO) be = s->backend;
  if (m->path && m->path[0]) {
    int lrc = ckpt_load_file(m->path, be, &l, err, sizeof err);
    if (lrc) {
      rpc_reply_error(c,
                      lrc == CKPT_ENOENT   ? DQND__V1__CODE__NOT_FOUND
                      : lrc == CKPT_EACCES ? DQND__V1__CODE__PERMISSION_DENIED
                                           : DQND__V1__CODE__DATA_LOSS,
                      "%s", err);
      return;
    }
  } else {
    pthread_mutex_lock(&s->up_mu);
    upload_t **pp = &s->uploads, *u;
    while (*pp && strcmp((*pp)->name, m->name)) pp = &(*pp)->next;
    u = *pp;
    if (m->offset == 0) { /* a new upload replaces an unfinished one */
      if (u) {
        *pp = u->next;
        free(u->data);
        free(u);
      }
      u = calloc(1, sizeof *u);
      if (u) u->data = malloc(m->total ? m->total : 1);
      if (!u || !u->data) {
        if (u) free(u);
        pthread_mutex_unlock(&s->up_mu);
        rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED, "total: cannot hold %llu bytes",
                        (unsigned long long)m->total);
        return;
      }
      snprintf(u->name, sizeof u->name, "%s", m->name);
      u->total = m->total;
      u->next = s->uploads;
      s->uploads = u;
    } else if (!u || u->n != m->offset || u->total != m->total) {
      pthread_mutex_unlock(&s->up_mu);
      rpc_reply_error(c, DQND__V1__CODE__FAILED_PRECONDITION, "offset: %llu does not continue an upload for '%s' (at %llu)",
                      (unsigned long long)m->offset, m->name, u ? (unsigned long long)u->n : 0ULL);
      return;
    }
    memcpy(u->data + u->n, m->data.data, m->data.len);
    u->n += m->data.len;
    if (!m->last) {
      pthread_mutex_unlock(&s->up_mu);
      reply_done(c);
      return;
    }
    /* last chunk: detach the upload and load it */
    for (pp = &s->uploads; *pp != u; pp = &(*pp)->next) {}
    *pp = u->next;
    pthread_mutex_unlock(&s->up_mu);
    int bad = u->n != u->total;
    if (bad) snprintf(err, sizeof err, "total: received %llu of %llu bytes", (unsigned long long)u->n, (unsigned long long)u->total);
    else if (learner_crc32(0, u->data, u->n) != m->crc32) {
      bad = 1;
      snprintf(err, sizeof err, "crc32: the uploaded bytes do not match %08x", m->crc32);
    } else if (ckpt_load_mem(u->data, u->n, be, &l, err, sizeof err))
      bad = 1;
    free(u->data);
    free(u);
    if (bad) {
      rpc_reply_error(c, DQND__V1__CODE__DATA_LOSS, "%s", err);
      return;
    }
  }
  if (m->create) {
    learner_config_t cfg = *learner_config(l);
    trainer_t *t;
    int code = trainer_register(s, m->name, l, &cfg, 0, &t, err, sizeof err);
    if (code) {
      learner_destroy(l);
      rpc_reply_error(c, code, "%s", err);
      return;
    }
    log_info(t->name, "created from a checkpoint at step %llu", (unsigned long long)t->stats.step);
    reply_trainer(c, t, 1);
    trainer_put(t);
    return;
  }
  trainer_t *t = trainer_get(s, m->name);
  if (!t) {
    learner_destroy(l);
    rpc_reply_error(c, DQND__V1__CODE__NOT_FOUND, "name: no trainer '%s' (set create to make one)", m->name);
    return;
  }
  if (!learner_config_same_shape(&t->cfg, learner_config(l))) {
    learner_destroy(l);
    rpc_reply_error(c, DQND__V1__CODE__FAILED_PRECONDITION,
                    "path: the checkpoint's shapes differ from trainer '%s' (create a new trainer from it instead)", m->name);
    trainer_put(t);
    return;
  }
  job_t *j = calloc(1, sizeof *j);
  static const cmd_t swap = {"LoadCheckpoint", F_QUEUE, NULL, NULL, run_swap};
  if (!j) {
    learner_destroy(l);
    trainer_put(t);
    rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  *j = (job_t){&swap, s, t, c, l};
  int rc = workq_push(&t->q, dispatch_job_run, j);
  if (rc) {
    learner_destroy(l);
    trainer_put(t);
    free(j);
    rpc_reply_error(c, rc == WORKQ_FULL ? DQND__V1__CODE__RESOURCE_EXHAUSTED : DQND__V1__CODE__UNAVAILABLE,
                    "name: trainer '%s' %s", m->name, rc == WORKQ_FULL ? "queue is full" : "is shutting down");
  }
}

/* trainer worker: swap in the learner the admin worker built. dispatch_job_run
 * sets swap_in from the job just before, on this same thread. */
static _Thread_local learner_t *swap_in;
static void run_swap(server_t *s, trainer_t *t, rpc_call_t *c) {
  learner_t *old = t->l;
  t->l = swap_in;
  learner_destroy(old);
  pthread_mutex_lock(&t->mu);
  t->error[0] = 0; /* a good state replaces an errored one */
  pthread_mutex_unlock(&t->mu);
  log_info(t->name, "state replaced from a checkpoint");
  trainer_snapshot(t, 1);
  reply_trainer(c, t, 0);
}

static void run_stats(server_t *s, trainer_t *t, rpc_call_t *c) { reply_trainer(c, t, 0); }

/* ------------------------------------------------------------------ table */

static const cmd_t commands[] = {
    [DQND__V1__REQUEST__COMMAND_HEALTH] = {"Health", F_NOW, NULL, NULL, run_health},
    [DQND__V1__REQUEST__COMMAND_SERVER_INFO] = {"ServerInfo", F_NOW, NULL, NULL, run_server_info},
    [DQND__V1__REQUEST__COMMAND_LIST_TRAINERS] = {"ListTrainers", F_NOW, NULL, NULL, run_list},
    [DQND__V1__REQUEST__COMMAND_CREATE_TRAINER] = {"CreateTrainer", F_ADMIN, name_create, check_create, run_create},
    [DQND__V1__REQUEST__COMMAND_DESTROY_TRAINER] = {"DestroyTrainer", F_QUEUE | F_TRAINER, name_destroy, NULL, run_destroy},
    [DQND__V1__REQUEST__COMMAND_SUBMIT_TRANSITIONS] = {"SubmitTransitions", F_QUEUE | F_TRAINER, name_submit, check_submit,
                                                       run_submit},
    [DQND__V1__REQUEST__COMMAND_STEP] = {"Step", F_QUEUE | F_TRAINER, name_step, check_step, run_step},
    [DQND__V1__REQUEST__COMMAND_ACT] = {"Act", F_QUEUE | F_TRAINER, name_act, check_act, run_act},
    [DQND__V1__REQUEST__COMMAND_SYNC_TARGET] = {"SyncTarget", F_QUEUE | F_TRAINER, name_sync, check_sync, run_sync},
    [DQND__V1__REQUEST__COMMAND_SET_HYPERPARAMS] = {"SetHyperparams", F_QUEUE | F_TRAINER, name_hparams, check_hparams,
                                                    run_hparams},
    [DQND__V1__REQUEST__COMMAND_SAVE_CHECKPOINT] = {"SaveCheckpoint", F_QUEUE | F_TRAINER, name_save, NULL, run_save},
    [DQND__V1__REQUEST__COMMAND_FETCH_CHECKPOINT] = {"FetchCheckpoint", F_QUEUE | F_TRAINER, name_fetch, check_fetch,
                                                     run_fetch},
    [DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT] = {"LoadCheckpoint", F_ADMIN, name_load, check_load, run_load},
    [DQND__V1__REQUEST__COMMAND_GET_STATS] = {"GetStats", F_QUEUE | F_TRAINER, name_stats, NULL, run_stats},
    [DQND__V1__REQUEST__COMMAND_LIST_CHECKPOINTS] = {"ListCheckpoints", F_QUEUE | F_TRAINER, name_list_ckpt, NULL,
                                                     run_list_checkpoints},
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

/* --------------------------------------------------------------- routing */

static void fail_queued(trainer_t *t, const char *why) {
  workq_job_t jobs[64];
  int n;
  while ((n = workq_drain(&t->q, jobs, 64)) > 0)
    for (int i = 0; i < n; i++) {
      job_t *j = jobs[i].arg;
      if (j->c) rpc_reply_error(j->c, DQND__V1__CODE__UNAVAILABLE, "name: trainer '%s' was %s", t->name, why);
      if (j->loaded) learner_destroy(j->loaded);
      if (j->t) trainer_put(j->t);
      free(j);
    }
}

void dispatch_job_run(void *owner, void *arg) {
  job_t *j = arg;
  trainer_t *t = j->t;
  if (t && j->c) {
    char why[300] = "";
    pthread_mutex_lock(&t->mu);
    if (t->error[0] && j->cmd->run != run_swap && j->cmd->run != run_destroy) snprintf(why, sizeof why, "%s", t->error);
    pthread_mutex_unlock(&t->mu);
    if (why[0]) {
      rpc_reply_error(j->c, DQND__V1__CODE__UNAVAILABLE, "name: trainer '%s' is in an error state: %s", t->name, why);
      goto done;
    }
  }
  if (j->loaded) swap_in = j->loaded; /* run_swap runs next, on this same worker */
  j->cmd->run(j->s, t, j->c);
  if (t && !t->removed) trainer_snapshot(t, j->c != NULL);
done:
  if (t) trainer_put(t);
  free(j);
}

void dispatch(server_t *s, rpc_call_t *c) {
  const req_t *r = rpc_request(c);
  if (r->version != PROTOCOL_VERSION) {
    rpc_reply_error(c, DQND__V1__CODE__FAILED_PRECONDITION, "version: %u is not supported (this daemon speaks %u)",
                    r->version, PROTOCOL_VERSION);
    return;
  }
  if (s->opts.auth_token[0] && strcmp(r->auth_token, s->opts.auth_token)) {
    rpc_reply_error(c, DQND__V1__CODE__UNAUTHENTICATED, "auth_token: %s", r->auth_token[0] ? "wrong" : "missing");
    return;
  }
  int cs = (int)r->command_case;
  if (cs <= 0 || cs >= N_COMMANDS || !commands[cs].run) {
    rpc_reply_error(c, DQND__V1__CODE__UNIMPLEMENTED, "command: %s", cs ? "unknown to this daemon" : "not set (or unknown to this daemon)");
    return;
  }
  const cmd_t *cmd = &commands[cs];
  if (atomic_load(&s->draining) && !(cmd->flags & F_NOW)) {
    rpc_reply_error(c, DQND__V1__CODE__UNAVAILABLE, "%s: the daemon is shutting down", cmd->name);
    return;
  }
  trainer_t *t = NULL;
  if (cmd->get_name) {
    const char *name = cmd->get_name(r);
    if (!name || !trainer_name_ok(name)) {
      rpc_reply_error(c, DQND__V1__CODE__INVALID_ARGUMENT, "name: '%s' is not 1-64 of [A-Za-z0-9_.-]", name ? name : "");
      return;
    }
    if (cmd->flags & F_TRAINER) {
      t = trainer_get(s, name);
      if (!t) {
        rpc_reply_error(c, DQND__V1__CODE__NOT_FOUND, "name: no trainer '%s'", name);
        return;
      }
    }
  }
  char err[512] = "";
  int code = cmd->check ? cmd->check(s, t, r, err, sizeof err) : 0;
  if (code) {
    if (t) trainer_put(t);
    rpc_reply_error(c, code, "%s", err);
    return;
  }
  if (cmd->flags & F_NOW) {
    cmd->run(s, t, c);
    if (t) trainer_put(t);
    return;
  }
  job_t *j = calloc(1, sizeof *j);
  if (!j) {
    if (t) trainer_put(t);
    rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  *j = (job_t){cmd, s, t, c, NULL};
  workq_t *q = (cmd->flags & F_ADMIN) ? &s->admin : &t->q;
  int rc = workq_push(q, dispatch_job_run, j);
  if (rc) {
    free(j);
    if (t) trainer_put(t);
    if (rc == WORKQ_FULL)
      rpc_reply_error(c, DQND__V1__CODE__RESOURCE_EXHAUSTED, "%s: the queue is full (%d); retry later", cmd->name,
                      s->opts.queue_depth);
    else
      rpc_reply_error(c, DQND__V1__CODE__UNAVAILABLE, "%s: the trainer is shutting down", cmd->name);
  }
}

/* ------------------------------------------------------- internal jobs */

static void run_periodic_save(server_t *s, trainer_t *t, rpc_call_t *c) {
  ckpt_info_t info;
  char err[512];
  int rc;
  save_now(t, s->opts.checkpoint_replay, &info, err, sizeof err, &rc);
}

/* shutdown: the final checkpoint stays where a restart finds it */
static void run_final(server_t *s, trainer_t *t, rpc_call_t *c) {
  ckpt_info_t info;
  char err[512];
  int rc;
  save_now(t, s->opts.checkpoint_replay, &info, err, sizeof err, &rc);
  trainer_unregister(t);
  workq_close(&t->q);
  fail_queued(t, "unloaded");
}

/* idle timeout: saved and unloaded for good (a restart does not bring it back;
 * LoadCheckpoint from the retired directory does) */
static void run_unload(server_t *s, trainer_t *t, rpc_call_t *c) {
  ckpt_info_t info;
  char err[512], moved[1300];
  int rc;
  save_now(t, s->opts.checkpoint_replay, &info, err, sizeof err, &rc);
  if (rc || retire(t, "unloaded", moved, sizeof moved)) {
    log_warn(t->name, "idle, but kept loaded: its checkpoint could not be written or moved aside");
    return;
  }
  trainer_unregister(t);
  workq_close(&t->q);
  fail_queued(t, "unloaded");
}

static int enqueue_internal(trainer_t *t, void (*run)(server_t *, trainer_t *, rpc_call_t *), int force) {
  static const cmd_t save_cmd = {"checkpoint", F_QUEUE, NULL, NULL, run_periodic_save};
  static const cmd_t final_cmd = {"final", F_QUEUE, NULL, NULL, run_final};
  static const cmd_t unload_cmd = {"unload", F_QUEUE, NULL, NULL, run_unload};
  job_t *j = calloc(1, sizeof *j);
  if (!j) return -1;
  atomic_fetch_add(&t->refs, 1);
  *j = (job_t){run == run_final ? &final_cmd : (run == run_unload ? &unload_cmd : &save_cmd), t->srv, t, NULL, NULL};
  int rc = force ? workq_push_force(&t->q, dispatch_job_run, j) : workq_push(&t->q, dispatch_job_run, j);
  if (rc) {
    trainer_put(t);
    free(j);
  }
  return rc;
}

int dispatch_enqueue_save(trainer_t *t) { return enqueue_internal(t, run_periodic_save, 0); }
int dispatch_enqueue_final(trainer_t *t) { return enqueue_internal(t, run_final, 1); }
int dispatch_enqueue_unload(trainer_t *t) { return enqueue_internal(t, run_unload, 0); }
