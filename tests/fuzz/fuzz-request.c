/*
 * fuzz-request.c — libFuzzer harness over a request's whole path in the
 * daemon: the receive decode (wire_decode_request: size limit, decode
 * budget, NUL check), dispatch()'s central validation and routing, and the
 * handlers on the daemon's real worker threads, against a real CPU learner.
 * Only the sockets are replaced (fuzz_rpc.c): each input is one received
 * message; the harness waits for its one reply.
 *
 * The server is set up once, as daemon/main.c does (opts_default, a state
 * directory of its own, the admin worker, the CPU backend), with one trainer
 * FUZZ_TRAINER of the tiny config holding 16 transitions and a checkpoint.
 * After every input the harness waits until every queue is idle, then puts
 * the server back: trainers the input made are stopped, an upload it left
 * open is finished (refused), and FUZZ_TRAINER gets the same fresh learner
 * again (re-registered if the input destroyed it), so an input does the
 * same thing whatever ran before it (a crash reproduces from its one file).
 *
 * Requests the harness does not dispatch (the input is dropped, returning
 * -1 so libFuzzer does not keep it), each being legitimate work that is only
 * slow or large, not a path of its own:
 *   - Step with n in (STEP_MAX, 1000000]: the daemon would run them all
 *     (seconds to minutes under ASan); n = 0 and n > 1000000 are dispatched
 *     (refused by the check);
 *   - CreateTrainer, and LoadCheckpoint of uploaded bytes, whose config
 *     needs more than LEARNER_MAX_BYTES (the daemon would allocate it).
 * LoadCheckpoint's paths need no filter: the daemon confines them to its
 * state directory (ckpt_path_confine), the harness's own.
 * The daemon's limits are set small (max_message_bytes 1 MiB, decode_budget
 * 4 MiB) so an upload's announced total stays under 64 MiB.
 *
 * FUZZ_REQUEST_LOG=1 keeps the daemon's log on stderr (else it goes to
 * /dev/null) and prints every reply's status.
 */
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dispatch.h"
#include "fuzz_common.h"
#include "fuzz_rpc.h"
#include "log.h"
#include "trainer.h"

#define STEP_MAX 64
#define LEARNER_MAX_BYTES (64LL << 20)
#define REPLY_TIMEOUT_S 60
#define WIPE_RETIRED_EVERY 256

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static server_t srv;
static char base_dir[512];
static uint8_t *base_state; /* FUZZ_TRAINER's learner, saved with its replay */
static size_t base_len;
static learner_config_t base_cfg;
static unsigned long runs;
static int verbose;

static void die(const char *what) {
  fprintf(stderr, "fuzz-request: %s\n", what);
  abort();
}

/* ------------------------------------------------------------ the server */

/* every queue idle and every stopped trainer's worker gone */
static void quiesce(void) {
  for (;;) {
    trainer_t **ts;
    int n = trainer_list(&srv, &ts), busy = workq_pending(&srv.admin);
    for (int i = 0; i < n; i++) {
      busy += workq_pending(&ts[i]->q);
      trainer_put(ts[i]);
    }
    free(ts);
    if (!busy && atomic_load(&srv.live_trainers) == n) return;
    usleep(50);
  }
}

static void run_stop(trainer_job_t *j) {
  char moved[1300];
  trainer_retire(j->t, "fuzz", moved, sizeof moved);
  trainer_stop(j->t, "stopped by the fuzz harness");
}

/* FUZZ_TRAINER's population is replaced on its worker, like LoadCheckpoint's swap */
static void run_reset(trainer_job_t *j) {
  trainer_t *t = j->t;
  learner_pop_destroy(t->p);
  t->p = j->loaded;
  j->loaded = NULL;
  memset(t->train_credit, 0, sizeof *t->train_credit * (size_t)t->population);
  pthread_mutex_lock(&t->mu);
  t->error[0] = 0;
  pthread_mutex_unlock(&t->mu);
  trainer_snapshot(t, 0);
}

static void run_save(trainer_job_t *j) {
  ckpt_info_t info;
  char err[512];
  if (trainer_save(j->t, 0, 0, &info, err, sizeof err)) die(err);
}

static learner_pop_t *base_learner(void) {
  learner_pop_t *l;
  char err[512];
  if (ckpt_load_mem(base_state, base_len, LEARNER_BACKEND_CPU, &l, err, sizeof err)) die(err);
  return l;
}

static void enqueue(trainer_t *t, trainer_job_fn fn, learner_pop_t *loaded) {
  trainer_job_t *j = trainer_job_new(&srv, t, NULL, fn);
  if (!j) die("out of memory");
  j->loaded = loaded;
  j->any_state = 1;
  if (trainer_enqueue(j)) die("cannot queue a harness job");
}

static void register_base(int restoring) {
  trainer_t *t;
  char err[512];
  learner_pop_t *l = base_learner();
  if (trainer_register(&srv, FUZZ_TRAINER, l, &base_cfg, restoring, &t, err, sizeof err)) die(err);
  enqueue(t, run_save, NULL); /* takes the caller's reference */
}

/* base.dqnd in the state dir, where a relative LoadCheckpoint path is looked
 * up; written again when an input moved it (a trainer named "base.dqnd"
 * retires whatever has its name) */
static void write_base_file(void) {
  char path[1100];
  snprintf(path, sizeof path, "%s/base.dqnd", srv.opts.state_dir);
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) return;
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(base_state, 1, base_len, f) != base_len || fclose(f)) die(path);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  remove(path);
  return 0;
}

/* puts the server back to where every input starts */
static void reset(void) {
  trainer_t **ts, *base = NULL;
  int n = trainer_list(&srv, &ts);
  for (int i = 0; i < n; i++) {
    if (!strcmp(ts[i]->name, FUZZ_TRAINER)) base = ts[i];
    else enqueue(ts[i], run_stop, NULL); /* the job takes the list's reference */
  }
  free(ts);
  if (base) enqueue(base, run_reset, base_learner());
  quiesce();
  if (!base) register_base(1);
  write_base_file();
  if (++runs % WIPE_RETIRED_EVERY == 0) {
    char retired[1100];
    snprintf(retired, sizeof retired, "%s/.retired", srv.opts.state_dir);
    nftw(retired, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  }
  quiesce();
}

/* at exit (libFuzzer's end of run); the workers are idle between inputs */
static void remove_dir(void) { nftw(base_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(base_dir, sizeof base_dir, "%s/dqnd-fuzz-request-XXXXXX", tmp);
  if (!mkdtemp(base_dir)) die("mkdtemp");
  atexit(remove_dir);
  server_t *s = &srv;
  opts_default(&s->opts);
  snprintf(s->opts.state_dir, sizeof s->opts.state_dir, "%s/state", base_dir);
  snprintf(s->opts.backend, sizeof s->opts.backend, "cpu");
  s->opts.max_message_bytes = 1 << 20;
  s->opts.decode_budget = 4 << 20;
  s->opts.max_trainers = 8;
  s->opts.queue_depth = 8;
  s->opts.checkpoint_interval = 0;
  s->opts.keep_checkpoints = 2;
  s->opts.restore = 0;
  s->opts.listener_check = 0;
  const char *keep_log = getenv("FUZZ_REQUEST_LOG");
  verbose = keep_log && *keep_log == '1';
  if (!verbose) log_open("/dev/null");
  log_level = LOG_ERROR;
  s->start_time = now_s();
  s->refuse = dispatch_refuse;
  s->backend = LEARNER_BACKEND_CPU;
  snprintf(s->device, sizeof s->device, "none");
  pthread_mutex_init(&s->reg_mu, NULL);
  pthread_mutex_init(&s->up_mu, NULL);
  s->trainers = calloc((size_t)s->opts.max_trainers, sizeof *s->trainers);
  char err[512];
  if (!s->trainers || ckpt_mkdirs(s->opts.state_dir, err, sizeof err)) die("state dir");
  if (workq_init(&s->admin, s->opts.queue_depth, NULL, NULL)) die("admin worker");

  learner_t *l;
  if (fuzz_tiny_learner(0, 16, 2, &l)) die("tiny learner");
  if (fuzz_save_mem(l, 1, &base_state, &base_len)) die("saving the tiny learner");
  base_cfg = *learner_config(l);
  learner_destroy(l);
  write_base_file();
  register_base(0);
  quiesce();
  return 0;
}

/* ------------------------------------------------------------ the filter */

static int send_request(Dqnd__V1__Request *req);

/* why the harness does not dispatch r (see the top), or NULL */
static const char *too_costly(const Dqnd__V1__Request *r) {
  char err[512];
  switch (r->command_case) {
  case DQND__V1__REQUEST__COMMAND_STEP:
    return r->step->n > STEP_MAX && r->step->n <= 1000000 ? "step.n" : NULL;
  case DQND__V1__REQUEST__COMMAND_CREATE_TRAINER: {
    const Dqnd__V1__CreateTrainer *m = r->create_trainer;
    learner_config_t c;
    learner_config_default(&c);
    for (size_t i = 0; i < m->n_config; i++)
      if (learner_config_set(&c, m->config[i]->name, m->config[i]->value, err, sizeof err)) return NULL;
    if (learner_config_validate(&c, err, sizeof err)) return NULL; /* refused by the check */
    return learner_memory_estimate(&c, LEARNER_BACKEND_CPU) > LEARNER_MAX_BYTES ? "create_trainer.config" : NULL;
  }
  case DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT: {
    const Dqnd__V1__LoadCheckpoint *m = r->load_checkpoint;
    if (m->path && m->path[0]) return NULL;
    learner_config_t c;
    int with_replay;
    fuzz_reader_t rd = {m->data.data, m->data.len, 0};
    if (m->offset == 0 && m->last && !learner_peek_config(fuzz_read, &rd, &c, &with_replay, err, sizeof err) &&
        learner_memory_estimate(&c, LEARNER_BACKEND_CPU) > LEARNER_MAX_BYTES)
      return "load_checkpoint.data";
    return NULL;
  }
  default: return NULL;
  }
}

/* ------------------------------------------------------------ the input */

/* One message through the daemon: decode, filter, dispatch, the reply, every
 * queue idle again. *code: the reply's; the return: 1 when filtered out.
 * follow (65 bytes, may be NULL) receives the trainer to exercise next: the
 * one a CreateTrainer or LoadCheckpoint made or filled, or a SetHyperparams
 * changed, when it answered OK. */
static int one_request(const uint8_t *data, size_t size, int *code, char *follow) {
  rpc_call_t *c = fuzz_call_new(&srv, data, size);
  if (!c) die("out of memory");
  const Dqnd__V1__Request *r = fuzz_call_request(c);
  int skipped = 0, cs = r ? (int)r->command_case : -1;
  char upload[65] = "", name[65] = "";
  if (r) {
    const char *why = too_costly(r);
    if (why) {
      skipped = 1;
      rpc_reply_error(c, DQND__V1__CODE__CANCELLED, "%s: skipped by the fuzz harness", why);
    } else {
      const Dqnd__V1__LoadCheckpoint *lc = r->command_case == DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT ? r->load_checkpoint : NULL;
      if (lc && !(lc->path && lc->path[0]) && !lc->last) snprintf(upload, sizeof upload, "%s", lc->name);
      if (lc) snprintf(name, sizeof name, "%s", lc->name);
      if (r->command_case == DQND__V1__REQUEST__COMMAND_CREATE_TRAINER)
        snprintf(name, sizeof name, "%s", r->create_trainer->name);
      if (r->command_case == DQND__V1__REQUEST__COMMAND_SET_HYPERPARAMS)
        snprintf(name, sizeof name, "%s", r->set_hyperparams->name);
      dispatch(&srv, c); /* r belongs to the call's reply from here */
    }
  }
  *code = fuzz_call_wait(c, REPLY_TIMEOUT_S);
  if (verbose) fprintf(stderr, "fuzz-request: command %d: code %d %s\n", cs, *code, fuzz_call_message(c));
  quiesce();
  fuzz_call_free(c);
  if (follow) snprintf(follow, 65, "%s", *code == DQND__V1__CODE__OK && !upload[0] ? name : "");
  if (upload[0] && *code == DQND__V1__CODE__OK) {
    /* an upload left open: a last one-byte chunk at offset 0 replaces and ends it (DATA_LOSS) */
    Dqnd__V1__LoadCheckpoint lc = DQND__V1__LOAD_CHECKPOINT__INIT;
    uint8_t byte = 0;
    lc.name = upload;
    lc.data.data = &byte;
    lc.data.len = 1;
    lc.total = 1;
    lc.last = 1;
    Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
    req.command_case = DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT;
    req.load_checkpoint = &lc;
    if (send_request(&req) != DQND__V1__CODE__DATA_LOSS) die("an open upload was not ended");
  }
  return skipped;
}

static int send_request(Dqnd__V1__Request *req) {
  req->version = 1;
  size_t n = dqnd__v1__request__get_packed_size(req);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) die("out of memory");
  dqnd__v1__request__pack(req, buf);
  int code;
  one_request(buf, n, &code, NULL);
  free(buf);
  return code;
}

/* A trainer the input made or changed is used: transitions, two steps and
 * Act with Q values, as a client would next (so a config or state the
 * daemon accepted also trains and acts, on its worker). Each must answer
 * OK (Step: or FAILED_PRECONDITION, a divergence). Skipped where it would be long work: a batch over FOLLOW_MAX_BATCH,
 * continuous training owed over STEP_MAX steps, or a submit over half
 * max_message_bytes. */
#define FOLLOW_MAX_BATCH 64
static void follow_up(const char *name) {
  trainer_t *t = trainer_get(&srv, name);
  if (!t) die("a trainer that answered OK is gone");
  learner_config_t cfg = t->cfg;
  pthread_mutex_lock(&t->mu);
  learner_hparams_t hp = t->hp;
  pthread_mutex_unlock(&t->mu);
  trainer_put(t);
  int S = cfg.state_dim, A = learner_config_joint_actions(&cfg), n = cfg.batch + 3;
  if (cfg.batch > FOLLOW_MAX_BATCH || (double)hp.samples_per_insert * n / cfg.batch > STEP_MAX ||
      (int64_t)n * S * 8 + 64 * n > srv.opts.max_message_bytes / 2)
    return;
  float *x = malloc(sizeof(float) * (size_t)n * (size_t)S * 2), r[FOLLOW_MAX_BATCH + 3];
  int32_t a[FOLLOW_MAX_BATCH + 3];
  uint8_t d[FOLLOW_MAX_BATCH + 3];
  if (!x) die("out of memory");
  for (int i = 0; i < n * S * 2; i++) x[i] = (float)((i * 7) % 11) * 0.2f - 1.0f;
  for (int i = 0; i < n; i++) a[i] = (int32_t)((i * 5) % A), r[i] = (float)(i % 3) - 1, d[i] = i % 4 == 3;
  Dqnd__V1__SubmitTransitions st = DQND__V1__SUBMIT_TRANSITIONS__INIT;
  st.name = (char *)name;
  st.count = (uint32_t)n;
  st.states = (ProtobufCBinaryData){sizeof(float) * (size_t)n * (size_t)S, (uint8_t *)x};
  st.next_states = (ProtobufCBinaryData){sizeof(float) * (size_t)n * (size_t)S, (uint8_t *)(x + (size_t)n * (size_t)S)};
  st.actions = (ProtobufCBinaryData){sizeof(int32_t) * (size_t)n, (uint8_t *)a};
  st.rewards = (ProtobufCBinaryData){sizeof(float) * (size_t)n, (uint8_t *)r};
  st.dones = (ProtobufCBinaryData){(size_t)n, d};
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_SUBMIT_TRANSITIONS;
  req.submit_transitions = &st;
  if (send_request(&req) != DQND__V1__CODE__OK) die("follow-up: SubmitTransitions was refused");
  Dqnd__V1__Step sp = DQND__V1__STEP__INIT;
  sp.name = (char *)name;
  sp.n = 2;
  req = (Dqnd__V1__Request)DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_STEP;
  req.step = &sp;
  int code = send_request(&req);
  /* FAILED_PRECONDITION: the step diverged (a fuzzed lr may do that) and the
   * trainer's training stopped, which is the daemon's answer to it */
  if (code != DQND__V1__CODE__OK && code != DQND__V1__CODE__FAILED_PRECONDITION) die("follow-up: Step was refused");
  Dqnd__V1__Act ac = DQND__V1__ACT__INIT;
  ac.name = (char *)name;
  ac.count = 2;
  ac.states = (ProtobufCBinaryData){sizeof(float) * 2 * (size_t)S, (uint8_t *)x};
  ac.noisy = cfg.noisy;
  ac.want_q = 1;
  ac.episode = 5;
  req = (Dqnd__V1__Request)DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_ACT;
  req.act = &ac;
  if (send_request(&req) != DQND__V1__CODE__OK) die("follow-up: Act was refused");
  free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int code;
  char follow[65];
  int skipped = one_request(data, size, &code, follow);
  if (follow[0]) follow_up(follow);
  reset();
  return skipped ? -1 : 0;
}
