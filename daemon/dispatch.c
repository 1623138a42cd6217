/*
 * dispatch.c — the command table and the handlers.
 *
 * Each entry, indexed by the Request oneof case: flags, the function that
 * reads the trainer's name from the request (or NULL), an optional
 * `check` that runs on the nng thread (it may only read the request and the
 * trainer's immutable config, and keeps what it parsed in the job, so no
 * handler parses again), and `run`, which runs where the flags say:
 *   F_NOW     on the nng thread (cheap, non-blocking, no trainer, no check:
 *             Health, ServerInfo, List)
 *   F_QUEUE   on the trainer's worker, in order with its other commands
 *   F_ADMIN   on the admin worker (blocking work with no trainer yet)
 *   F_DIRECT  on the nng thread after the lookup and check, never queued
 *             (Cancel: it must not wait behind the Step it stops)
 * F_TRAINER: the request names an existing trainer (looked up centrally).
 * F_ANY_STATE: runs on a trainer in an error state too.
 * F_LONG: a long command (Step, PretrainDT), which stops at the request's
 * deadline between whole steps; any other queued command whose deadline
 * passed while it waited is answered DEADLINE_EXCEEDED and never runs (its
 * client gave up: a retried Submit must not store the rows twice).
 * The queues, workers and internal jobs are the trainer module's (trainer.c).
 */
#include "dispatch.h"
#include "dispatch_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dqnd_build_config.h"
#include "log.h"
#include "metrics.h"
#include "trainer.h"
#include "wire.h"

/* ------------------------------------------------------------- helpers */

void dispatch_reply_ok(rpc_call_t *c, rep_t *r) {
  Dqnd__V1__Status st = DQND__V1__STATUS__INIT;
  r->status = &st;
  rpc_reply(c, r);
}

void dispatch_reply_done(rpc_call_t *c) {
  Dqnd__V1__Empty e = DQND__V1__EMPTY__INIT;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_DONE;
  r.done = &e;
  dispatch_reply_ok(c, &r);
}

int dispatch_learner_code(int rc) {
  switch (rc) {
  case LEARNER_EINVAL: return CODE_INVALID_ARGUMENT;
  case LEARNER_ENOMEM: return CODE_RESOURCE_EXHAUSTED;
  case LEARNER_EEMPTY: return CODE_FAILED_PRECONDITION;
  case LEARNER_EDIVERGED: return CODE_FAILED_PRECONDITION;
  case LEARNER_ECORRUPT: return CODE_DATA_LOSS;
  case LEARNER_EUNSUPPORTED: return CODE_FAILED_PRECONDITION;
  case LEARNER_EDEVICE: return CODE_UNAVAILABLE;
  default: return CODE_INTERNAL;
  }
}

/* TrainerStats has the fields of learner_stats_t by name (LEARNER_STATS_FIELDS),
 * each as wide as the learner's */
#define STATS_SAME_WIDTH(type, name, kind)                                                                        \
  _Static_assert(sizeof(((Dqnd__V1__TrainerStats *)0)->name) == sizeof(type), "TrainerStats." #name);
LEARNER_STATS_FIELDS(STATS_SAME_WIDTH)
#undef STATS_SAME_WIDTH

static void stats_to_pb(const learner_stats_t *st, Dqnd__V1__TrainerStats *p) {
  dqnd__v1__trainer_stats__init(p);
#define STATS_TO_PB(type, name, kind) p->name = st->name;
  LEARNER_STATS_FIELDS(STATS_TO_PB)
#undef STATS_TO_PB
}

/* TrainerInfo with every config field; the storage lives in `ti` */
#define TINFO_FIELDS 128 /* room for every config field (63 with the Decision Transformer's; test_dt_daemon sees the last) */
typedef struct tinfo {
  Dqnd__V1__TrainerInfo info;
  Dqnd__V1__TrainerStats stats;
  Dqnd__V1__Field fields[TINFO_FIELDS];
  Dqnd__V1__Field *fptr[TINFO_FIELDS];
  char values[TINFO_FIELDS][80];
  uint32_t branches[LEARNER_MAX_BRANCHES];
  char state[600];
} tinfo_t;

/* cfg: the trainer's shapes (immutable after registration) with its current
 * hyperparameters from the snapshot */
static void trainer_info(trainer_t *t, const learner_config_t *cfg, const learner_stats_t *st, learner_backend_t be,
                         int member, tinfo_t *ti) {
  dqnd__v1__trainer_info__init(&ti->info);
  ti->info.name = t->name;
  ti->info.backend = (char *)learner_backend_name(be);
  int n = learner_num_fields < TINFO_FIELDS ? learner_num_fields : TINFO_FIELDS;
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
  ti->info.population = (uint32_t)t->population;
  ti->info.member = (uint32_t)member;
}

learner_backend_t dispatch_parse_backend(const char *b, int *ok) {
  *ok = 1;
  if (!b || !*b || !strcmp(b, "auto")) return LEARNER_BACKEND_AUTO;
  if (!strcmp(b, "cpu")) return LEARNER_BACKEND_CPU;
  if (!strcmp(b, "cuda")) return LEARNER_BACKEND_CUDA;
  *ok = 0;
  return LEARNER_BACKEND_AUTO;
}

/* A field named twice in one request is refused, not "last wins". */
static int fields_unique(Dqnd__V1__Field **f, size_t n, const char *what, char *err, size_t errlen) {
  /* first, so that the pairwise check stays small: a million names would
   * hold this thread for ~10^11 comparisons (a review find) */
  if (n > (size_t)learner_num_fields)
    return snprintf(err, errlen, "%s: %zu fields given, more than the %d there are", what, n, learner_num_fields),
           CODE_INVALID_ARGUMENT;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++)
      if (!strcmp(f[i]->name, f[j]->name))
        return snprintf(err, errlen, "%s: field '%s' is given twice (%s[%zu] and %s[%zu])", what, f[i]->name, what, j,
                        what, i),
               CODE_INVALID_ARGUMENT;
  return 0;
}

/* Builds a config from the daemon default (the `ref` config) and the fields;
 * 0 or INVALID_ARGUMENT. */
static int config_from_fields(Dqnd__V1__Field **f, size_t n, learner_config_t *cfg, char *err, size_t errlen) {
  learner_config_default(cfg);
  if (fields_unique(f, n, "config", err, errlen)) return CODE_INVALID_ARGUMENT;
  for (size_t i = 0; i < n; i++) {
    if (learner_config_set(cfg, f[i]->name, f[i]->value, err, errlen)) return CODE_INVALID_ARGUMENT;
  }
  if (learner_config_validate(cfg, err, errlen)) return CODE_INVALID_ARGUMENT;
  return 0;
}


/* ------------------------------------------------------------ accessors */

#define NAME_GETTER(fn, field)                                                                                    \
  static const char *fn(const req_t *r) { return r->field ? r->field->name : NULL; }
NAME_GETTER(name_create, create_trainer)
NAME_GETTER(name_destroy, destroy_trainer)
NAME_GETTER(name_submit, submit_transitions)
NAME_GETTER(name_step, step)
NAME_GETTER(name_cancel, cancel)
NAME_GETTER(name_act, act)
NAME_GETTER(name_sync, sync_target)
NAME_GETTER(name_hparams, set_hyperparams)
NAME_GETTER(name_save, save_checkpoint)
NAME_GETTER(name_fetch, fetch_checkpoint)
NAME_GETTER(name_load, load_checkpoint)
NAME_GETTER(name_stats, get_stats)
NAME_GETTER(name_list_ckpt, list_checkpoints)
NAME_GETTER(name_copy, copy_member)
NAME_GETTER(name_pretrain_dt, pretrain_dt)

/* ------------------------------------------------------------- handlers */

static void run_health(trainer_job_t *j) {
  server_t *s = j->s;
  Dqnd__V1__HealthResult h = DQND__V1__HEALTH_RESULT__INIT;
  h.serving = !atomic_load(&s->draining);
  h.uptime_s = now_s() - s->start_time;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_HEALTH;
  r.health = &h;
  dispatch_reply_ok(j->c, &r);
}

static void run_server_info(trainer_job_t *j) {
  server_t *s = j->s;
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
  dispatch_reply_ok(j->c, &r);
}

static void run_list(trainer_job_t *j) {
  rpc_call_t *c = j->c;
  trainer_t **ts;
  int n = trainer_list(j->s, &ts);
  tinfo_t *ti = calloc((size_t)(n ? n : 1), sizeof *ti);
  Dqnd__V1__TrainerInfo **ptr = calloc((size_t)(n ? n : 1), sizeof *ptr);
  if (!ti || !ptr) {
    for (int i = 0; i < n; i++) trainer_put(ts[i]);
    free(ts), free(ti), free(ptr);
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (int i = 0; i < n; i++) {
    learner_stats_t st;
    learner_config_t cfg = ts[i]->cfg; /* shapes are immutable after registration; backend likewise */
    pthread_mutex_lock(&ts[i]->mu);
    st = ts[i]->stats;
    cfg.hp = ts[i]->hp;
    learner_backend_t be = ts[i]->backend;
    pthread_mutex_unlock(&ts[i]->mu);
    trainer_info(ts[i], &cfg, &st, be, 0, &ti[i]);
    ptr[i] = &ti[i].info;
  }
  Dqnd__V1__ListTrainersResult l = DQND__V1__LIST_TRAINERS_RESULT__INIT;
  l.n_trainers = (size_t)n;
  l.trainers = ptr;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_LIST;
  r.list = &l;
  dispatch_reply_ok(c, &r);
  for (int i = 0; i < n; i++) trainer_put(ts[i]);
  free(ts), free(ti), free(ptr);
}

void dispatch_reply_trainer(rpc_call_t *c, trainer_t *t, int created) {
  tinfo_t *ti = calloc(1, sizeof *ti);
  if (!ti) {
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  learner_stats_t st;
  learner_config_t cfg = t->cfg;
  pthread_mutex_lock(&t->mu);
  st = t->stats;
  cfg.hp = t->hp;
  learner_backend_t be = t->backend;
  pthread_mutex_unlock(&t->mu);
  trainer_info(t, &cfg, &st, be, 0, ti);
  ti->info.created = created;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_TRAINER;
  r.trainer = &ti->info;
  dispatch_reply_ok(c, &r);
  free(ti);
}

void dispatch_reply_member(rpc_call_t *c, trainer_t *t, int member) {
  if (t->population == 1) {
    dispatch_reply_trainer(c, t, 0);
    return;
  }
  tinfo_t *ti = calloc(1, sizeof *ti);
  if (!ti) {
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  learner_t *l = trainer_member(t, member);
  learner_config_t cfg = *learner_config(l); /* its seed and hyperparameters */
  learner_stats_t st;
  int src = learner_get_stats(l, &st);
  if (src) {
    char err[200];
    snprintf(err, sizeof err, "device: reading the learner's statistics failed (learner code %d)", src);
    trainer_note_error(t, src, err);
    free(ti);
    rpc_reply_error(c, dispatch_learner_code(src), "%s", err);
    return;
  }
  trainer_info(t, &cfg, &st, t->backend, member, ti);
  if (learner_pop_diverged(t->p, member)) snprintf(ti->state, sizeof ti->state, "member %d diverged", member);
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_TRAINER;
  r.trainer = &ti->info;
  dispatch_reply_ok(c, &r);
  free(ti);
}

/* the config and backend, parsed into j->cfg and j->backend */
static int check_create(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const Dqnd__V1__CreateTrainer *m = r->create_trainer;
  int ok;
  j->backend = dispatch_parse_backend(m->backend, &ok);
  if (!ok) return snprintf(err, errlen, "backend: '%s' is not auto, cpu or cuda", m->backend), CODE_INVALID_ARGUMENT;
  if (m->population > LEARNER_MAX_POPULATION)
    return snprintf(err, errlen, "population: %u is outside [1, %d]", m->population, LEARNER_MAX_POPULATION),
           CODE_INVALID_ARGUMENT;
  j->population = m->population ? (int)m->population : 1;
  return config_from_fields(m->config, m->n_config, &j->cfg, err, errlen);
}

/* admin worker: build the learner, register it; idempotent on the same config */
static void run_create(trainer_job_t *j) {
  server_t *s = j->s;
  rpc_call_t *c = j->c;
  const Dqnd__V1__CreateTrainer *m = rpc_request(c)->create_trainer;
  const learner_config_t *cfg = &j->cfg; /* validated by check_create */
  char err[512];
  trainer_t *t = trainer_get(s, m->name);
  if (t) {
    int same = t->cfg_hash == learner_config_hash(cfg) && t->population == j->population;
    if (same)
      dispatch_reply_trainer(c, t, 0);
    else if (t->population != j->population)
      rpc_reply_error(c, CODE_ALREADY_EXISTS, "name: trainer '%s' exists with a population of %d", m->name,
                      t->population);
    else
      rpc_reply_error(c, CODE_ALREADY_EXISTS,
                      "name: trainer '%s' exists with a different config (hash %016" PRIx64 ")", m->name, t->cfg_hash);
    trainer_put(t);
    return;
  }
  learner_backend_t be = j->backend == LEARNER_BACKEND_AUTO ? s->backend : j->backend;
  if (ckpt_fits(cfg, j->population, be, err, sizeof err)) {
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "%s", err);
    return;
  }
  learner_pop_t *p;
  int rc = learner_pop_create(cfg, j->population, NULL, be, &p, err, sizeof err);
  if (rc) {
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
    return;
  }
  int code = trainer_register(s, m->name, p, cfg, 0, &t, err, sizeof err);
  if (code) {
    learner_pop_destroy(p);
    rpc_reply_error(c, code, "%s", err);
    return;
  }
  if (t->population > 1)
    log_info(t->name, "created: %s backend, a population of %d, %lld parameters and a replay of %lld each",
             learner_backend_name(be), t->population, (long long)learner_config_num_params(cfg),
             (long long)cfg->replay_capacity);
  else
    log_info(t->name, "created: %s backend, %lld parameters, replay %lld", learner_backend_name(be),
             (long long)learner_config_num_params(cfg), (long long)cfg->replay_capacity);
  dispatch_reply_trainer(c, t, 1);
  trainer_put(t);
}


static void run_destroy(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  const Dqnd__V1__DestroyTrainer *m = rpc_request(c)->destroy_trainer;
  ckpt_info_t info;
  char err[512], moved[1300];
  int src = m->save_final ? trainer_save(t, j->s->opts.checkpoint_replay, 0, &info, err, sizeof err) : 0;
  if (src) {
    rpc_reply_error(c, src > 0 ? CODE_FAILED_PRECONDITION : CODE_INTERNAL,
                    "save_final: %s (trainer kept)", err);
    return;
  }
  if (trainer_retire(t, "destroyed", moved, sizeof moved)) {
    rpc_reply_error(c, CODE_INTERNAL, "name: cannot move trainer '%s''s directory aside (trainer kept; "
                    "see the daemon's log)", t->name);
    return;
  }
  trainer_stop(t, "destroyed");
  log_info(t->name, "destroyed");
  if (m->save_final) {
    snprintf(info.path, sizeof info.path, "%.*s/%s", (int)(sizeof info.path - sizeof info.id - 2), moved, info.id);
    dispatch_reply_checkpoint(c, &info);
  } else
    dispatch_reply_done(c);
}

/* every array's length, then the values (the learner's check); the arrays go to j->tr */
static int check_submit(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const Dqnd__V1__SubmitTransitions *m = r->submit_transitions;
  uint64_t n = m->count, S = (uint64_t)j->t->cfg.state_dim;
  int mc = dispatch_check_member(j->t, m->member, j, err, errlen);
  if (mc) return mc;
  if (n == 0) return snprintf(err, errlen, "count: must be >= 1"), CODE_INVALID_ARGUMENT;
#define LEN(f, want)                                                                                              \
  if ((uint64_t)m->f.len != (want))                                                                              \
    return snprintf(err, errlen, #f ": %zu bytes, expected %llu (count %llu)", m->f.len,                         \
                    (unsigned long long)(want), (unsigned long long)n),                                           \
           CODE_INVALID_ARGUMENT;
  LEN(states, n * S * 4)
  LEN(next_states, n * S * 4)
  LEN(actions, n * 4)
  LEN(rewards, n * 4)
  LEN(dones, n)
  if (m->episode_ids.len) LEN(episode_ids, n * 8)
  if (m->episode_ends.len) LEN(episode_ends, n)
#undef LEN
  j->tr = (learner_transitions_t){(int64_t)n, (const float *)m->states.data, (const int32_t *)m->actions.data,
                                  (const float *)m->rewards.data, (const float *)m->next_states.data, m->dones.data,
                                  m->episode_ids.len ? (const int64_t *)m->episode_ids.data : NULL,
                                  m->episode_ends.len ? m->episode_ends.data : NULL};
  return learner_transitions_validate(&j->t->cfg, &j->tr, err, errlen) ? CODE_INVALID_ARGUMENT : 0;
}

static void run_submit(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  char err[512];
  if (dispatch_member_diverged(j)) return;
  int rc = learner_submit_checked(trainer_member(t, j->member), &j->tr, err, sizeof err); /* check_submit validated it */
  if (rc) {
    trainer_note_error(t, rc, err);
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
    return;
  }
  learner_stats_t st;
  rc = learner_get_stats(trainer_member(t, j->member), &st);
  if (rc) {
    snprintf(err, sizeof err, "device: reading the replay's size after the insert failed (learner code %d)", rc);
    trainer_note_error(t, rc, err);
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
    return;
  }
  Dqnd__V1__SubmitResult sr = DQND__V1__SUBMIT_RESULT__INIT;
  uint32_t inserted = (uint32_t)j->tr.n;
  metrics_transitions(inserted);
  sr.accepted = inserted;
  sr.replay_size = st.replay_size;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_SUBMIT;
  r.submit = &sr;
  dispatch_reply_ok(c, &r); /* frees the request (j->tr with it); the driver goes on streaming while this worker trains */
  trainer_train_continuous(t, j->member, inserted, st.replay_size);
}

static int check_step(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  uint32_t n = r->step->n;
  if (n < 1 || n > LEARNER_MAX_STEPS)
    return snprintf(err, errlen, "n: %u is outside [1, %d]", n, LEARNER_MAX_STEPS), CODE_INVALID_ARGUMENT;
  return 0;
}

static void run_step(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  char err[512];
  learner_stats_t *sts = calloc((size_t)t->population, sizeof *sts);
  if (!sts) {
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "Step: out of memory");
    return;
  }
  int code = trainer_long_begin(t, rpc_request(c)->request_id, j->deadline, err, sizeof err);
  if (code) { /* cancelled or expired while queued, or shutdown: nothing ran */
    free(sts);
    rpc_reply_error(c, code, "Step: %s", err);
    return;
  }
  double t0 = now_s();
  learner_stop_t stop = {j->deadline, 0};
  int rc = learner_pop_step_until(t->p, (int)rpc_request(c)->step->n, &stop, sts, NULL, err, sizeof err);
  const int why = trainer_long_end(t);
  const int P = t->population;
  int64_t ran = 0;
  const int n_div = learner_pop_n_diverged(t->p);
  for (int i = 0; i < P; i++) ran += sts[i].steps_run;
  metrics_steps((int)ran, now_s() - t0); /* the steps applied, also when a later one failed */
  if (rc == LEARNER_EDIVERGED && P > 1 && n_div < P) { /* the others trained on: an answer, not an error */
    log_warn(t->name, "%s; %d of %d members diverged (skipped until SetHyperparams or CopyMember)", err, n_div, P);
    rc = LEARNER_OK;
  }
  if (rc == LEARNER_EDIVERGED) {
    free(sts);
    char msg[1600];
    trainer_note_diverged(t, err, msg, sizeof msg);
    rpc_reply_error(c, CODE_FAILED_PRECONDITION, "trainer '%s' %s", t->name, msg);
    return;
  }
  if (rc && rc != LEARNER_ESTOPPED) {
    free(sts);
    trainer_note_error(t, rc, err);
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
    return;
  }
  Dqnd__V1__TrainerStats ps, *mps = NULL, **mpp = NULL;
  uint32_t *div = NULL;
  stats_to_pb(&sts[0], &ps); /* member 0's (a trainer of one's) */
  Dqnd__V1__StepResult sr = DQND__V1__STEP_RESULT__INIT;
  sr.stats = &ps;
  if (P > 1) { /* every member's, and which diverged */
    mps = calloc((size_t)P, sizeof *mps), mpp = calloc((size_t)P, sizeof *mpp), div = calloc((size_t)P, sizeof *div);
    if (!mps || !mpp || !div) {
      free(sts), free(mps), free(mpp), free(div);
      rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "Step: out of memory for the reply (the steps ran)");
      return;
    }
    for (int i = 0; i < P; i++) {
      stats_to_pb(&sts[i], &mps[i]);
      mpp[i] = &mps[i];
      if (learner_pop_diverged(t->p, i)) div[sr.n_diverged++] = (uint32_t)i;
    }
    sr.n_members = (size_t)P;
    sr.members = mpp;
    sr.diverged = div;
  }
  if (rc == LEARNER_ESTOPPED) { /* OK: the steps that ran are whole and kept */
    sr.stopped = 1;
    sr.stop_reason = (char *)dispatch_stop_reason(&stop, why);
    log_info(t->name, "Step %s: %s", sr.stop_reason, err);
  }
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_STEP;
  r.step = &sr;
  dispatch_reply_ok(c, &r);
  free(sts), free(mps), free(mpp), free(div);
}

const char *dispatch_stop_reason(const learner_stop_t *stop, int why) {
  return stop->why == LEARNER_STOP_DEADLINE ? "deadline" : why == TRAINER_STOP_SHUTDOWN ? "shutdown" : "cancelled";
}

/* Cancel: answered on the nng thread (F_DIRECT), never queued behind the
 * Step it stops */
static void run_cancel(trainer_job_t *j) {
  const Dqnd__V1__Cancel *m = rpc_request(j->c)->cancel;
  Dqnd__V1__CancelResult cr = DQND__V1__CANCEL_RESULT__INIT;
  cr.found = (char *)trainer_cancel(j->t, m->request_id);
  log_info(j->t->name, "Cancel (request %llu): %s", (unsigned long long)m->request_id, cr.found);
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_CANCEL;
  r.cancel = &cr;
  dispatch_reply_ok(j->c, &r);
}

static int check_sync(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  float tau = r->sync_target->tau;
  if (!(tau >= 0 && tau <= 1)) return snprintf(err, errlen, "tau: %g is outside [0, 1]", (double)tau), CODE_INVALID_ARGUMENT;
  return dispatch_check_member(j->t, r->sync_target->member, j, err, errlen);
}

static void run_sync(trainer_job_t *j) {
  rpc_call_t *c = j->c;
  if (dispatch_member_diverged(j)) return;
  int rc = learner_sync_target(trainer_member(j->t, j->member), rpc_request(c)->sync_target->tau);
  if (rc) { /* tau was checked (check_sync): what is left is the device's */
    char err[200];
    snprintf(err, sizeof err, "%s", rc == LEARNER_EDEVICE ? "device: the target copy failed" : "tau: rejected by the learner");
    trainer_note_error(j->t, rc, err);
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
  } else
    dispatch_reply_done(c);
}

/* Names and values, parsed once into j->cfg (the fields given in j->fields),
 * each checked against its bounds. The worker applies them onto the member's
 * current ones (an earlier queued Set may have changed those), where the
 * learner checks their combination. */
static int check_hparams(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const Dqnd__V1__SetHyperparams *m = r->set_hyperparams;
  int mc = dispatch_check_member(j->t, m->member, j, err, errlen);
  if (mc) return mc;
  if (m->n_hparams == 0) return snprintf(err, errlen, "hparams: no fields given (name=value pairs)"), CODE_INVALID_ARGUMENT;
  if (fields_unique(m->hparams, m->n_hparams, "hparams", err, errlen)) return CODE_INVALID_ARGUMENT;
  learner_config_default(&j->cfg);
  for (size_t i = 0; i < m->n_hparams; i++) {
    const learner_field_t *f = learner_field_find(m->hparams[i]->name);
    if (!f) {
      learner_config_set(&j->cfg, m->hparams[i]->name, "", err, errlen); /* names it, with the nearest field */
      return CODE_INVALID_ARGUMENT;
    }
    if (!f->hparam)
      return snprintf(err, errlen, "%s: fixed at creation (changes a shape or the replay); not a hyperparameter", f->name),
             CODE_INVALID_ARGUMENT;
    if (learner_config_set(&j->cfg, f->name, m->hparams[i]->value, err, errlen)) return CODE_INVALID_ARGUMENT;
    if (j->n_fields == TRAINER_JOB_MAX_FIELDS) return snprintf(err, errlen, "hparams: too many fields"), CODE_INVALID_ARGUMENT;
    j->fields[j->n_fields++] = f;
  }
  /* each field is within its bounds (learner_config_set); how they combine
   * (tau 0 needs target_period >= 1) is the worker's to check, on the
   * member's current values (learner_pop_set_hparams), not the creation ones */
  return 0;
}

/* a field's value from one config into another (hyperparameters are scalars) */
static void field_copy(learner_config_t *dst, const learner_config_t *src, const learner_field_t *f) {
  size_t n = f->type == LCF_INT64 || f->type == LCF_UINT64 ? 8 : 4; /* never LCF_BRANCHES: not a hyperparameter */
  memcpy((char *)dst + f->offset, (const char *)src + f->offset, n);
}

static void run_hparams(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  learner_config_t now;
  learner_get_hparams(trainer_member(t, j->member), &now.hp);
  for (int i = 0; i < j->n_fields; i++) field_copy(&now, &j->cfg, j->fields[i]);
  char err[512];
  int rc = learner_pop_set_hparams(t->p, j->member, &now.hp, err, sizeof err); /* a diverged member trains again */
  if (rc) {
    trainer_note_error(t, rc, err); /* (a device error only) */
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
    return;
  }
  log_info(t->name, "hyperparameters changed (%d fields)", j->n_fields);
  trainer_resume(t); /* new hyperparameters resume a diverged trainer from its last good state */
  trainer_snapshot(t, 1); /* the reply shows the new values */
  dispatch_reply_member(c, t, j->member);
}

static int check_stats(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  return dispatch_check_member(j->t, r->get_stats->member, j, err, errlen);
}

static void run_stats(trainer_job_t *j) { dispatch_reply_member(j->c, j->t, j->member); }

/* ------------------------------------------------------------------ table */

static const cmd_t commands[] = {
    [DQND__V1__REQUEST__COMMAND_HEALTH] = {F_NOW, NULL, NULL, run_health},
    [DQND__V1__REQUEST__COMMAND_SERVER_INFO] = {F_NOW, NULL, NULL, run_server_info},
    [DQND__V1__REQUEST__COMMAND_LIST_TRAINERS] = {F_NOW, NULL, NULL, run_list},
    [DQND__V1__REQUEST__COMMAND_CREATE_TRAINER] = {F_ADMIN, name_create, check_create, run_create},
    [DQND__V1__REQUEST__COMMAND_DESTROY_TRAINER] = {F_QUEUE | F_TRAINER | F_ANY_STATE, name_destroy,
                                                    NULL, run_destroy},
    [DQND__V1__REQUEST__COMMAND_SUBMIT_TRANSITIONS] = {F_QUEUE | F_TRAINER, name_submit, check_submit,
                                                       run_submit},
    [DQND__V1__REQUEST__COMMAND_STEP] = {F_QUEUE | F_TRAINER | F_LONG, name_step, check_step, run_step},
    [DQND__V1__REQUEST__COMMAND_ACT] = {F_QUEUE | F_TRAINER | F_DIVERGED_OK, name_act, dispatch_check_act, dispatch_run_act},
    [DQND__V1__REQUEST__COMMAND_SYNC_TARGET] = {F_QUEUE | F_TRAINER, name_sync, check_sync, run_sync},
    [DQND__V1__REQUEST__COMMAND_SET_HYPERPARAMS] = {F_QUEUE | F_TRAINER | F_DIVERGED_OK, name_hparams, check_hparams,
                                                    run_hparams},
    [DQND__V1__REQUEST__COMMAND_SAVE_CHECKPOINT] = {F_QUEUE | F_TRAINER | F_DIVERGED_OK, name_save, NULL, dispatch_run_save},
    [DQND__V1__REQUEST__COMMAND_FETCH_CHECKPOINT] = {F_QUEUE | F_TRAINER | F_DIVERGED_OK, name_fetch, dispatch_check_fetch,
                                                     dispatch_run_fetch},
    [DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT] = {F_ADMIN, name_load, dispatch_check_load, dispatch_run_load},
    [DQND__V1__REQUEST__COMMAND_GET_STATS] = {F_QUEUE | F_TRAINER | F_DIVERGED_OK, name_stats, check_stats, run_stats},
    [DQND__V1__REQUEST__COMMAND_LIST_CHECKPOINTS] = {F_QUEUE | F_TRAINER | F_DIVERGED_OK, name_list_ckpt, NULL,
                                                     dispatch_run_list_checkpoints},
    [DQND__V1__REQUEST__COMMAND_CANCEL] = {F_DIRECT | F_TRAINER | F_ANY_STATE, name_cancel, NULL, run_cancel},
    [DQND__V1__REQUEST__COMMAND_COPY_MEMBER] = {F_QUEUE | F_TRAINER | F_DIVERGED_OK, name_copy, dispatch_check_copy,
                                                dispatch_run_copy},
    [DQND__V1__REQUEST__COMMAND_PRETRAIN_DT] = {F_QUEUE | F_TRAINER | F_LONG, name_pretrain_dt, dispatch_check_pretrain_dt,
                                                dispatch_run_pretrain_dt},
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))


/* --------------------------------------------------------------- routing */

/* NOT_FOUND for a name no trainer has; one the idle timeout unloaded says
 * so, and where its checkpoints went (the newest retired directory of that
 * name, if its reason is "unloaded"), so a driver does not recreate it from
 * scratch unawares */
static void run_not_found(trainer_job_t *j) {
  const req_t *r = rpc_request(j->c);
  const char *name = commands[r->command_case].get_name(r);
  char gone[1400], why[32];
  if (ckpt_find_retired(j->s->opts.state_dir, name, why, sizeof why, gone, sizeof gone) == 0 && !strcmp(why, "unloaded"))
    rpc_reply_error(j->c, CODE_NOT_FOUND,
                    "name: no trainer '%s': it was unloaded, idle (idle-timeout), its checkpoints moved to %s "
                    "(LoadCheckpoint with create and a path there brings it back)",
                    name, gone);
  else
    rpc_reply_error(j->c, CODE_NOT_FOUND, "name: no trainer '%s'", name);
}

void dispatch_refuse(rpc_call_t *c, int code, const char *msg) { rpc_reply_error(c, code, "%s", msg); }

void dispatch(server_t *s, rpc_call_t *c) {
  const req_t *r = rpc_request(c);
  if (r->version != PROTOCOL_VERSION) {
    rpc_reply_error(c, CODE_FAILED_PRECONDITION, "version: %u is not supported (this daemon speaks %u)",
                    r->version, PROTOCOL_VERSION);
    return;
  }
  if (s->opts.auth_token[0] && strcmp(r->auth_token, s->opts.auth_token)) {
    rpc_reply_error(c, CODE_UNAUTHENTICATED, "auth_token: %s", r->auth_token[0] ? "wrong" : "missing");
    return;
  }
  int cs = (int)r->command_case;
  if (cs <= 0 || cs >= N_COMMANDS || !commands[cs].run) {
    rpc_reply_error(c, CODE_UNIMPLEMENTED, "command: %s", cs ? "unknown to this daemon" : "not set (or unknown to this daemon)");
    return;
  }
  const cmd_t *cmd = &commands[cs];
  if (atomic_load(&s->draining) && !(cmd->flags & F_NOW)) {
    rpc_reply_error(c, CODE_UNAVAILABLE, "%s: the daemon is shutting down", wire_command_name(cs));
    return;
  }
  if (cmd->flags & F_NOW) { /* no trainer, no check: answered here */
    trainer_job_t now = {.run = cmd->run, .s = s, .c = c};
    cmd->run(&now);
    return;
  }
  trainer_t *t = NULL;
  if (cmd->get_name) {
    const char *name = cmd->get_name(r);
    if (!name || !trainer_name_ok(name)) {
      if (name && trainer_name_reserved(name))
        rpc_reply_error(c, CODE_INVALID_ARGUMENT, "name: '%s' is reserved (the state directory's lock file)", name);
      else
        rpc_reply_error(c, CODE_INVALID_ARGUMENT, "name: '%s' is not 1-64 of [A-Za-z0-9_.-] (not starting with '.')",
                        name ? name : "");
      return;
    }
    if (cmd->flags & F_TRAINER) {
      t = trainer_get(s, name);
      if (!t) { /* answered on the admin worker: its look into .retired is file I/O */
        trainer_job_t *nf = trainer_job_new(s, NULL, c, run_not_found);
        if (!nf || trainer_enqueue(nf)) {
          trainer_job_free(nf);
          rpc_reply_error(c, CODE_NOT_FOUND, "name: no trainer '%s'", name);
        }
        return;
      }
    }
  }
  trainer_job_t *j = trainer_job_new(s, t, c, cmd->run); /* t's reference is the job's from here */
  if (j) j->request_id = r->request_id;
  if (!j) {
    if (t) trainer_put(t);
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  j->any_state = (cmd->flags & F_ANY_STATE) != 0;
  j->diverged_ok = (cmd->flags & F_DIVERGED_OK) != 0;
  j->expires = (cmd->flags & (F_QUEUE | F_LONG)) == F_QUEUE;
  if (r->timeout_ms) j->deadline = now_s() + r->timeout_ms / 1000.0; /* the client waits no longer */
  char err[512] = "";
  int code = cmd->check ? cmd->check(r, j, err, sizeof err) : 0;
  if (code) {
    trainer_job_free(j);
    rpc_reply_error(c, code, "%s", err);
    return;
  }
  if (cmd->flags & F_DIRECT) { /* here, now: not behind the trainer's queue */
    cmd->run(j);
    trainer_job_free(j);
    return;
  }
  int rc = trainer_enqueue(j);
  if (rc) {
    trainer_job_free(j);
    if (rc == WORKQ_FULL)
      rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "%s: the queue is full (%d); retry later", wire_command_name(cs),
                      s->opts.queue_depth);
    else
      rpc_reply_error(c, CODE_UNAVAILABLE, "%s: the %s is shutting down", wire_command_name(cs),
                      t ? "trainer" : "daemon");
  }
}
