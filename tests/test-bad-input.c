/*
 * test-bad-input.c — integration: every kind of bad input a client can send a
 * real dqnd (wrong sizes and ranges in every command's fields, malformed and
 * oversized messages, unfinished and oversized uploads, loads from outside the
 * state directory) gets its proper code and a message naming the field, and
 * leaves the trainer as it was: checked against a twin trainer (same seed,
 * same data) that never saw the bad input. GetStats reports the same step and
 * replay counts, and a Step of 2 gives the same mean loss and last gradient
 * norm, bit for bit.
 *
 * The oracle is the daemon's own twin trainer.
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dqnd.h"
#include "testutil.h"
#include "harness.h"

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void same_state(dqnd_client_t *c, const char *what) {
  learner_stats_t x, y;
  ck_assert_int_eq(dqnd_get_stats(c, "victim", &x), 0);
  ck_assert_int_eq(dqnd_get_stats(c, "twin", &y), 0);
  ck_assert_msg(x.step == y.step && x.replay_size == y.replay_size && x.replay_total == y.replay_total,
                "%s changed the trainer: step %llu/%llu replay %lld/%lld", what, (unsigned long long)x.step,
                (unsigned long long)y.step, (long long)x.replay_size, (long long)y.replay_size);
  ck_assert_int_eq(dqnd_step(c, "victim", 2, &x), 0);
  ck_assert_int_eq(dqnd_step(c, "twin", 2, &y), 0);
  ck_assert_msg(memcmp(&x.loss_mean, &y.loss_mean, 4) == 0 && memcmp(&x.grad_norm_last, &y.grad_norm_last, 4) == 0,
                "%s: the next step differs from the twin's (%.9g vs %.9g)", what, x.loss_mean, y.loss_mean);
}

/* Sends a prepared request and expects `code` with `needle` in the message. */
static void raw_expect(dqnd_client_t *c, const void *buf, size_t n, int code, const char *needle, const char *what) {
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call_raw(c, buf, n, &rep);
  dqnd_reply_free(rep);
  expect_code(c, rc, code, needle, what);
}

/* trainers "victim" and "twin" of the small config on d, each given b
 * (64 transitions) and `steps` steps: the oracle pair of same_state */
static dqnd_client_t *victim_and_twin(daemon_t *d, batch_t *b, int steps) {
  dqnd_client_t *c = connect_to(d);
  make_batch(b, 64, 3);
  for (int k = 0; k < 2; k++) {
    const char *nm = k ? "twin" : "victim";
    ck_assert_int_eq(dqnd_create_trainer(c, nm, small_fields, N_SMALL, NULL, NULL), 0);
    ck_assert_int_eq(submit(c, nm, b), 0);
    learner_stats_t st;
    if (steps) ck_assert_int_eq(dqnd_step(c, nm, steps, &st), 0);
  }
  return c;
}

START_TEST(test_bad_input) {
  daemon_t d = {0};
  start_daemon(&d);
  batch_t b;
  dqnd_client_t *c = victim_and_twin(&d, &b, 3);
  same_state(c, "setup");

  /* SubmitTransitions */
  learner_transitions_t t = {10, b.s, b.a, b.r, b.s2, b.d, NULL, NULL};
  expect_code(c, dqnd_submit(c, "victim", S_DIM + 1, &t, NULL), 3, "states", "submit wrong state size");
  batch_t bad = b;
  bad.a[3] = N_ACT;
  learner_transitions_t tb = {10, bad.s, bad.a, bad.r, bad.s2, bad.d, NULL, NULL};
  expect_code(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "actions[3]", "submit action out of range");
  bad = b;
  bad.a[2] = -1;
  expect_code(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "actions[2]", "submit negative action");
  bad = b;
  bad.s2[4 * S_DIM + 1] = NAN;
  expect_code(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "next_states[4][1]", "submit NaN");
  bad = b;
  bad.r[7] = INFINITY;
  expect_code(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "rewards[7]", "submit Inf reward");
  bad = b;
  bad.d[1] = 2;
  expect_code(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "dones[1]", "submit done flag 2");
  expect_code(c, dqnd_submit(c, "nobody", S_DIM, &t, NULL), 5, "nobody", "submit unknown trainer");
  uint8_t ends[10] = {0, 0, 0, 0, 0, 0, 2, 0, 0, 0};
  learner_transitions_t te = {10, b.s, b.a, b.r, b.s2, b.d, NULL, ends};
  expect_code(c, dqnd_submit(c, "victim", S_DIM, &te, NULL), 3, "episode_ends[6]: 2 is not 0 or 1", "submit end marker 2");
  /* HER and n-step settings that cannot work */
  const char *her_big[] = {"state_dim=6", "her_goal_dim=4"};
  expect_code(c, dqnd_create_trainer(c, "her", her_big, 2, NULL, NULL), 3, "her_goal_dim", "create: goals do not fit");
  const char *nstep0[] = {"state_dim=6", "n_step=0"};
  expect_code(c, dqnd_create_trainer(c, "her", nstep0, 2, NULL, NULL), 3, "n_step", "create: n_step 0");
  const char *set0[] = {"n_step=0"};
  expect_code(c, dqnd_set_hparams(c, "victim", set0, 1), 3, "n_step", "set n_step 0");
  const char *strat[] = {"her_strategy=sometimes"};
  expect_code(c, dqnd_set_hparams(c, "victim", strat, 1), 3, "her_strategy", "set an unknown strategy");
  /* each array's length on its own, sent raw past the client's checks, with
   * the exact message: a check of one array can never pass for another's */
  {
    static const char *arrays[] = {"states", "actions", "rewards", "next_states", "dones", "episode_ids", "episode_ends"};
    static const size_t per[] = {S_DIM * 4, 4, 4, S_DIM * 4, 1, 8, 1};
    uint8_t no_ends[10] = {0};
    for (int k = 0; k < 7; k++) {
      Dqnd__V1__SubmitTransitions sm = DQND__V1__SUBMIT_TRANSITIONS__INIT;
      sm.name = "victim";
      sm.count = 10;
      ProtobufCBinaryData *f[7] = {&sm.states, &sm.actions, &sm.rewards, &sm.next_states, &sm.dones, &sm.episode_ids,
                                   &sm.episode_ends};
      const void *src[7] = {b.s, b.a, b.r, b.s2, b.d, b.ep, no_ends};
      for (int j = 0; j < 7; j++) *f[j] = (ProtobufCBinaryData){10 * per[j] - (j == k ? 1 : 0), (uint8_t *)src[j]};
      Dqnd__V1__Request rq = DQND__V1__REQUEST__INIT;
      rq.command_case = DQND__V1__REQUEST__COMMAND_SUBMIT_TRANSITIONS;
      rq.submit_transitions = &sm;
      Dqnd__V1__Reply *rp;
      int rc = dqnd_call(c, &rq, &rp);
      dqnd_reply_free(rp);
      char want[160];
      snprintf(want, sizeof want, "%s: %zu bytes, expected %zu (count 10)", arrays[k], 10 * per[k] - 1, 10 * per[k]);
      ck_assert_int_eq(rc, 3);
      ck_assert_str_eq(dqnd_last_error(c), want);
    }
    /* count = 0 with empty arrays: refused, not a no-op success */
    Dqnd__V1__SubmitTransitions sm = DQND__V1__SUBMIT_TRANSITIONS__INIT;
    sm.name = "victim";
    Dqnd__V1__Request rq = DQND__V1__REQUEST__INIT;
    rq.command_case = DQND__V1__REQUEST__COMMAND_SUBMIT_TRANSITIONS;
    rq.submit_transitions = &sm;
    Dqnd__V1__Reply *rp;
    int rc = dqnd_call(c, &rq, &rp);
    dqnd_reply_free(rp);
    ck_assert_int_eq(rc, 3);
    ck_assert_str_eq(dqnd_last_error(c), "count: must be >= 1");
  }
  same_state(c, "SubmitTransitions");

  /* strings with a NUL byte inside are refused, not cut at the NUL */
  {
    /* hand-encoded: Request{version 1, request_id 7, step{name "victim\0x", n 1}} */
    const uint8_t raw[] = {0x08, 0x01, 0x10, 0x07, 0x82, 0x01, 0x0c, 0x0a, 0x08, 'v', 'i', 'c', 't', 'i', 'm', 0x00,
                           'x', 0x10, 0x01};
    raw_expect(c, raw, sizeof raw, 3, "step.name: contains a NUL byte", "step name with a NUL byte");
    /* Request{version 1, request_id 8, auth_token "t\0k", health{}} */
    const uint8_t raw2[] = {0x08, 0x01, 0x10, 0x08, 0x1a, 0x03, 't', 0x00, 'k', 0x52, 0x00};
    raw_expect(c, raw2, sizeof raw2, 3, "auth_token: contains a NUL byte", "auth token with a NUL byte");
  }
  same_state(c, "NUL bytes");

  /* Step */
  Dqnd__V1__Step sm = DQND__V1__STEP__INIT;
  sm.name = "victim";
  sm.n = 0;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_STEP;
  req.step = &sm;
  Dqnd__V1__Reply *rep;
  expect_code(c, dqnd_call(c, &req, &rep), 3, "n:", "step 0");
  dqnd_reply_free(rep);
  sm.n = 2000000;
  expect_code(c, dqnd_call(c, &req, &rep), 3, "n:", "step too many");
  dqnd_reply_free(rep);
  sm.name = "bad name!";
  sm.n = 1;
  expect_code(c, dqnd_call(c, &req, &rep), 3, "name", "step bad name");
  dqnd_reply_free(rep);
  expect_code(c, dqnd_step(c, "ghost", 1, NULL), 5, "ghost", "step unknown trainer");
  same_state(c, "Step");

  /* Act */
  int32_t acts[8];
  expect_code(c, dqnd_act(c, "victim", b.s, 2, S_DIM - 1, 0, acts, NULL, 0), 3, "states", "act wrong size");
  bad = b;
  bad.s[S_DIM + 2] = NAN;
  expect_code(c, dqnd_act(c, "victim", bad.s, 2, S_DIM, 0, acts, NULL, 0), 3, "states[1][2]", "act NaN");
  Dqnd__V1__Act am = DQND__V1__ACT__INIT;
  am.name = "victim";
  am.count = 0;
  req = (Dqnd__V1__Request)DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_ACT;
  req.act = &am;
  expect_code(c, dqnd_call(c, &req, &rep), 3, "count", "act count 0");
  dqnd_reply_free(rep);
  const char *plain[] = {"state_dim=6", "branches=3,4", "batch=8", "replay_capacity=100", "noisy=0"};
  ck_assert_int_eq(dqnd_create_trainer(c, "plain", plain, 5, NULL, NULL), 0);
  expect_code(c, dqnd_act(c, "plain", b.s, 2, S_DIM, 1, acts, NULL, 0), 3, "noisy: trainer 'plain' has no NoisyNet",
         "act noisy on a plain trainer");
  same_state(c, "Act");

  /* SyncTarget */
  expect_code(c, dqnd_sync_target(c, "victim", 2.0f), 3, "tau", "sync tau 2");
  expect_code(c, dqnd_sync_target(c, "victim", NAN), 3, "tau", "sync tau NaN");
  expect_code(c, dqnd_sync_target(c, "victim", -0.5f), 3, "tau", "sync tau negative");
  same_state(c, "SyncTarget");

  /* SetHyperparams */
  const char *h1[] = {"bogus=1"}, *h2[] = {"batch=4"}, *h3[] = {"lr=abc"}, *h4[] = {"lr=0.1", "gamma=7"},
             *h5[] = {"tau=0", "target_period=0"};
  expect_code(c, dqnd_set_hparams(c, "victim", h1, 1), 3, "bogus", "set unknown field");
  expect_code(c, dqnd_set_hparams(c, "victim", h2, 1), 3, "batch", "set a fixed field");
  expect_code(c, dqnd_set_hparams(c, "victim", h3, 1), 3, "lr", "set bad value");
  expect_code(c, dqnd_set_hparams(c, "victim", h4, 2), 3, "gamma", "set all-or-nothing");
  expect_code(c, dqnd_set_hparams(c, "victim", h5, 2), 3, "target_period", "set inconsistent");
  const char *h6[] = {"lr=0.1", "lr=0.2"}, *h7[] = {"lrr=0.1"};
  expect_code(c, dqnd_set_hparams(c, "victim", h6, 2), 3, "hparams: field 'lr' is given twice", "set a field twice");
  expect_code(c, dqnd_set_hparams(c, "victim", h7, 1), 3, "lrr: unknown config field (did you mean 'lr'?)",
         "set a misspelt field");
  expect_code(c, dqnd_set_hparams(c, "victim", NULL, 0), 3, "hparams: no fields", "set nothing");
  {
    /* more names than there are fields: refused before the pairwise check */
    enum { MANY = 5000 };
    static char names[MANY][16];
    static const char *many[MANY];
    for (int i = 0; i < MANY; i++) snprintf(names[i], sizeof names[i], "f%d=1", i), many[i] = names[i];
    expect_code(c, dqnd_set_hparams(c, "victim", many, MANY), 3, "hparams: 5000 fields given, more than the",
           "set too many fields");
    expect_code(c, dqnd_create_trainer(c, "new", many, MANY, NULL, NULL), 3, "config: 5000 fields given",
           "create with too many fields");
  }
  same_state(c, "SetHyperparams");

  /* CreateTrainer */
  const char *cf1[] = {"atoms=1"}, *cf2[] = {"branches=9,x"}, *cf3[] = {"replay_capacity=4", "batch=8"};
  expect_code(c, dqnd_create_trainer(c, "new", cf1, 1, NULL, NULL), 3, "atoms", "create atoms 1");
  expect_code(c, dqnd_create_trainer(c, "new", cf2, 1, NULL, NULL), 3, "branches", "create bad branches");
  expect_code(c, dqnd_create_trainer(c, "new", cf3, 2, NULL, NULL), 3, "batch", "create batch > capacity");
  const char *cf4[] = {"batch=8", "batch=16"};
  expect_code(c, dqnd_create_trainer(c, "new", cf4, 2, NULL, NULL), 3, "config: field 'batch' is given twice",
         "create with a field twice");
  expect_code(c, dqnd_destroy_trainer(c, "nosuch", 0, NULL), 5, "name: no trainer 'nosuch'", "destroy unknown");
  expect_code(c, dqnd_create_trainer(c, "", small_fields, N_SMALL, NULL, NULL), 3, "name", "create empty name");
  /* a name that is no UTF-8 comes back in the message as '?'s: a reply's
     strings must be UTF-8 (Python's and Go's protobuf refuse it otherwise) */
  expect_code(c, dqnd_create_trainer(c, "a\xff\xc3", small_fields, N_SMALL, NULL, NULL), 3, "name: 'a?" "?' is not",
         "create with a name that is no UTF-8");
  /* the state directory's lock file is no trainer's name (such a trainer once
   * moved the lock away, and every restart after failed on it) */
  expect_code(c, dqnd_create_trainer(c, "dqnd.lock", small_fields, N_SMALL, NULL, NULL), 3,
              "name: 'dqnd.lock' is reserved", "create dqnd.lock");
  expect_code(c, dqnd_create_trainer(c, "new", small_fields, N_SMALL, "tpu", NULL), 3, "backend", "create bad backend");
  const char *huge[] = {"replay_capacity=2000000000", "state_dim=4096"};
  expect_code(c, dqnd_create_trainer(c, "new", huge, 2, NULL, NULL), 8, "replay_capacity: the trainer needs",
              "create too big for memory");
  ck_assert_msg(strstr(dqnd_last_error(c), "(the replay ~"), "no breakdown: %s", dqnd_last_error(c));
  /* the field behind the largest part is named: here the step's attention (16,384 tokens) */
  const char *wide[] = {"trunk_h2=16384", "attn_tokens=16384", "attn_heads=1", "batch=256", "replay_capacity=1000"};
  expect_code(c, dqnd_create_trainer(c, "new", wide, 5, NULL, NULL), 8, "batch: the trainer needs",
              "create with a workspace too big for memory");

  /* checkpoints */
  char local[400];
  snprintf(local, sizeof local, "%s/x.dqnd", d.dir);
  expect_code(c, dqnd_fetch_checkpoint(c, "victim", NULL, local, 0, NULL), 5, "checkpoint", "fetch before any save");
  expect_code(c, dqnd_fetch_checkpoint(c, "victim", "../../etc/passwd", local, 0, NULL), 3, "checkpoint", "fetch path id");
  expect_code(c, dqnd_load_checkpoint_path(c, "victim", "/nonexistent/file", 0, NULL), 7, "not inside the state directory",
         "load a path outside the state directory");
  expect_code(c, dqnd_load_checkpoint_path(c, "victim", "/etc/passwd", 0, NULL), 7, "not inside the state directory",
         "load an existing file outside the state directory (the same answer: no existence oracle)");
  expect_code(c, dqnd_load_checkpoint_path(c, "victim", "../../../../../../etc/passwd", 0, NULL), 7,
         "not inside the state directory", "load a relative path that climbs out");
  expect_code(c, dqnd_load_checkpoint_path(c, "victim", "victim/none.dqnd", 0, NULL), 5, "does not exist",
         "load a missing file inside the state directory");
  char link[400];
  snprintf(link, sizeof link, "%s/passwd.dqnd", d.state);
  ck_assert_int_eq(symlink("/etc/passwd", link), 0);
  expect_code(c, dqnd_load_checkpoint_path(c, "victim", link, 0, NULL), 7, "not inside the state directory",
         "load a symlink in the state directory that points out of it");
  /* a FIFO must not block the admin worker (nothing would ever be created again) */
  char fifo[400];
  snprintf(fifo, sizeof fifo, "%s/fifo", d.state);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  expect_code(c, dqnd_load_checkpoint_path(c, "fromfifo", fifo, 1, NULL), 3, "is not a regular file", "load a FIFO");
  const char *fifo_ok[] = {"state_dim=6", "batch=8", "replay_capacity=100"};
  ck_assert_int_eq(dqnd_create_trainer(c, "afterfifo", fifo_ok, 3, NULL, NULL), 0);
  FILE *f = fopen(local, "wb");
  for (int i = 0; i < 10; i++) fputs("not a checkpoint at all ", f);
  fclose(f);
  expect_code(c, dqnd_load_checkpoint_file(c, "victim", local, 0, NULL, 0), 15, "magic", "load garbage upload");
  char inside[400];
  snprintf(inside, sizeof inside, "%s/garbage.dqnd", d.state);
  ck_assert_int_eq(rename(local, inside), 0);
  expect_code(c, dqnd_load_checkpoint_path(c, "fresh", "garbage.dqnd", 1, NULL), 15, "magic",
         "load garbage path (relative: from the state directory)");
  ck_assert_int_eq(rename(inside, local), 0);
  Dqnd__V1__LoadCheckpoint lm = DQND__V1__LOAD_CHECKPOINT__INIT;
  lm.name = "victim";
  req = (Dqnd__V1__Request)DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT;
  req.load_checkpoint = &lm;
  expect_code(c, dqnd_call(c, &req, &rep), 3, "path", "load with neither path nor data");
  dqnd_reply_free(rep);
  /* a checkpoint of another shape cannot replace the victim's state */
  const char *shape2[] = {"state_dim=6", "branches=5", "batch=8", "replay_capacity=100"};
  ck_assert_int_eq(dqnd_create_trainer(c, "other", shape2, 4, NULL, NULL), 0);
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "other", 0, &ck), 0);
  expect_code(c, dqnd_load_checkpoint_path(c, "victim", ck.path, 0, NULL), 9,
              "path: the checkpoint's trunk_h1 is 256, trainer 'victim''s 16", "load other shape");
  /* nor of another seed, and the message names the field */
  {
    const char *seeded[N_SMALL];
    for (int k = 0; k < N_SMALL; k++) seeded[k] = strncmp(small_fields[k], "seed=", 5) ? small_fields[k] : "seed=7";
    ck_assert_int_eq(dqnd_create_trainer(c, "seed7", seeded, N_SMALL, NULL, NULL), 0);
    dqnd_checkpoint_t k7;
    ck_assert_int_eq(dqnd_save_checkpoint(c, "seed7", 0, &k7), 0);
    expect_code(c, dqnd_load_checkpoint_path(c, "victim", k7.path, 0, NULL), 9,
                "the checkpoint's seed is 7, trainer 'victim''s 42", "load another seed");
    /* a member index of 2^31 and up is named as sent, not as a negative int */
    Dqnd__V1__FetchCheckpoint fm = DQND__V1__FETCH_CHECKPOINT__INIT;
    fm.name = "seed7", fm.checkpoint = k7.id, fm.member = 0x80000000u, fm.member_only = 1;
    Dqnd__V1__Request fr = DQND__V1__REQUEST__INIT;
    fr.command_case = DQND__V1__REQUEST__COMMAND_FETCH_CHECKPOINT;
    fr.fetch_checkpoint = &fm;
    Dqnd__V1__Reply *frep;
    expect_code(c, dqnd_call(c, &fr, &frep), 3, "member: 2147483648 is outside [0, 1)", "fetch member 2^31");
    dqnd_reply_free(frep);
    ck_assert_int_eq(dqnd_destroy_trainer(c, "seed7", 0, NULL), 0);
  }
  /* an upload whose CRC does not match */
  ck_assert_int_eq(dqnd_fetch_checkpoint(c, "other", NULL, local, 0, NULL), 0);
  f = fopen(local, "r+b");
  fseek(f, 300, SEEK_SET);
  fputc(0x5a, f);
  fclose(f);
  /* a corrupted file: its section CRC32C catches it */
  expect_code(c, dqnd_load_checkpoint_file(c, "victim", local, 0, NULL, 0), 15, "CRC32C", "load corrupted file");
  /* damage in transit: the whole-file CRC-32 sent with the last chunk catches it */
  {
    FILE *cf = fopen(ck.path, "rb");
    ck_assert_ptr_nonnull(cf);
    fseek(cf, 0, SEEK_END);
    size_t len = (size_t)ftell(cf);
    rewind(cf);
    uint8_t *data = malloc(len);
    ck_assert(data && fread(data, 1, len, cf) == len);
    fclose(cf);
    Dqnd__V1__LoadCheckpoint up = DQND__V1__LOAD_CHECKPOINT__INIT;
    up.name = "victim";
    up.data = (ProtobufCBinaryData){len, data};
    up.total = len;
    up.last = 1;
    up.crc32 = learner_crc32(0, data, len) ^ 1u;
    Dqnd__V1__Request lr = DQND__V1__REQUEST__INIT;
    lr.command_case = DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT;
    lr.load_checkpoint = &up;
    expect_code(c, dqnd_call(c, &lr, &rep), 15, "crc32", "upload with a wrong CRC-32");
    dqnd_reply_free(rep);
    /* empty chunks (no data: protobuf-c leaves data.data NULL) are legal anywhere in an upload
       (a fuzz find: the daemon passed that NULL to memcpy) */
    up.crc32 = learner_crc32(0, data, len);
    up.name = "fromchunks";
    up.create = 1;
    size_t cut = len / 3;
    const struct { size_t off, n; int last; } chunk[] = {{0, 0, 0}, {0, cut, 0}, {cut, 0, 0}, {cut, len - cut, 1}};
    for (int k = 0; k < 4; k++) {
      up.offset = chunk[k].off;
      up.data = (ProtobufCBinaryData){chunk[k].n, chunk[k].n ? data + chunk[k].off : NULL};
      up.last = chunk[k].last;
      ck_assert_msg(dqnd_call(c, &lr, &rep) == 0, "chunk %d: %s", k, dqnd_last_error(c));
      dqnd_reply_free(rep);
    }
    learner_stats_t fs;
    ck_assert_int_eq(dqnd_get_stats(c, "fromchunks", &fs), 0);
    ck_assert_int_eq(dqnd_destroy_trainer(c, "fromchunks", 0, NULL), 0);
    /* an empty last chunk that ends an upload short of its total */
    up.offset = 0;
    up.data = (ProtobufCBinaryData){0, NULL};
    up.last = 1;
    expect_code(c, dqnd_call(c, &lr, &rep), 15, "received 0 of", "empty upload");
    dqnd_reply_free(rep);
    /* a checkpoint whose config asks for more memory than the machine has (its
       config section rewritten and resealed): refused before anything is
       allocated, as CreateTrainer refuses it (it built the replay first) */
    {
      size_t clen = (size_t)le64(data + 32), big_n = 0;
      ck_assert_uint_eq(le32(data + 24), 1); /* SEC_CONFIG first */
      char *text = malloc(clen + 64), *o = text;
      const char *p = (const char *)data + 40, *end = p + clen;
      while (p < end) { /* line by line: state_dim and replay_capacity replaced */
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ll = (size_t)(nl - p) + 1;
        if (!strncmp(p, "state_dim=", 10)) o += sprintf(o, "state_dim=65536\n");
        else if (!strncmp(p, "replay_capacity=", 16)) o += sprintf(o, "replay_capacity=2147483648\n");
        else memcpy(o, p, ll), o += ll;
        p += ll;
      }
      big_n = (size_t)(o - text);
      const size_t rest = 40 + clen + 4;
      uint8_t *big = malloc(len - rest + 44 + big_n);
      memcpy(big, data, 24);
      uint64_t h = 1469598103934665603ULL; /* the header's FNV-1a of the config text */
      for (size_t i = 0; i < big_n; i++) h = (h ^ (uint8_t)text[i]) * 1099511628211ULL;
      for (int i = 0; i < 8; i++) big[16 + i] = (uint8_t)(h >> (8 * i));
      memcpy(big + 24, data + 24, 8);
      for (int i = 0; i < 8; i++) big[32 + i] = (uint8_t)((uint64_t)big_n >> (8 * i));
      memcpy(big + 40, text, big_n);
      uint32_t cc = learner_crc32c(0, text, big_n);
      for (int i = 0; i < 4; i++) big[40 + big_n + (size_t)i] = (uint8_t)(cc >> (8 * i));
      memcpy(big + 44 + big_n, data + rest, len - rest);
      const size_t bn = len - rest + 44 + big_n;
      Dqnd__V1__LoadCheckpoint bu = DQND__V1__LOAD_CHECKPOINT__INIT;
      bu.name = "huge", bu.create = 1, bu.data = (ProtobufCBinaryData){bn, big}, bu.total = bn, bu.last = 1;
      bu.crc32 = learner_crc32(0, big, bn);
      lr.load_checkpoint = &bu;
      expect_code(c, dqnd_call(c, &lr, &rep), 8, "replay_capacity: the trainer needs", "upload of a huge trainer");
      dqnd_reply_free(rep);
      lr.load_checkpoint = &up;
      /* the same bytes where the daemon reads a path (over its own checkpoint of "other") */
      FILE *hf = fopen(ck.path, "wb");
      ck_assert(hf && fwrite(big, 1, bn, hf) == bn && fclose(hf) == 0);
      expect_code(c, dqnd_load_checkpoint_path(c, "huge", ck.path, 1, NULL), 8, "replay_capacity", "load a huge trainer");
      free(big);
      free(text);
    }
    /* bounded uploads: at most 16 unfinished at once, their totals summing to
       at most 16 x decode-budget (8 GiB by default), a refused one changing
       nothing; bytes held as they arrive, not the claimed total up front */
    {
      char un[20][16];
      Dqnd__V1__LoadCheckpoint o = DQND__V1__LOAD_CHECKPOINT__INIT;
      lr.load_checkpoint = &o;
      uint8_t one = 7;
      for (int k = 0; k <= 16; k++) {
        snprintf(un[k], sizeof un[k], "up%d", k);
        o.name = un[k], o.total = 100, o.offset = 0, o.data = (ProtobufCBinaryData){1, &one}, o.last = 0;
        if (k < 16) {
          ck_assert_msg(dqnd_call(c, &lr, &rep) == 0, "upload %d: %s", k, dqnd_last_error(c));
        } else
          expect_code(c, dqnd_call(c, &lr, &rep), 8, "name: 16 other checkpoint uploads are unfinished", "a 17th upload");
        dqnd_reply_free(rep);
      }
      o.name = un[0]; /* restarting one of the 16 is no 17th */
      ck_assert_msg(dqnd_call(c, &lr, &rep) == 0, "restart up0: %s", dqnd_last_error(c));
      dqnd_reply_free(rep);
      for (int k = 0; k < 16; k++) { /* an empty last chunk ends each (short of its total) */
        o.name = un[k], o.offset = 1, o.data = (ProtobufCBinaryData){0, NULL}, o.last = 1;
        expect_code(c, dqnd_call(c, &lr, &rep), 15, "received 1 of 100", "end an upload");
        dqnd_reply_free(rep);
      }
      const uint64_t most = 16ull * (512ull << 20);
      o.name = "big1", o.total = most - 10, o.offset = 0, o.data = (ProtobufCBinaryData){1, &one}, o.last = 0;
      ck_assert_msg(dqnd_call(c, &lr, &rep) == 0, "big1: %s", dqnd_last_error(c));
      dqnd_reply_free(rep);
      o.name = "big2", o.total = 11;
      expect_code(c, dqnd_call(c, &lr, &rep), 8, "total: 11 bytes beside the 8589934582 of unfinished uploads",
             "uploads past the bound");
      dqnd_reply_free(rep);
      o.total = 10;
      ck_assert_msg(dqnd_call(c, &lr, &rep) == 0, "big2: %s", dqnd_last_error(c));
      dqnd_reply_free(rep);
      o.name = "big1", o.offset = 1, o.data = (ProtobufCBinaryData){1, &one}, o.total = most - 10;
      ck_assert_msg(dqnd_call(c, &lr, &rep) == 0, "big1 continues: %s", dqnd_last_error(c)); /* intact */
      dqnd_reply_free(rep);
      const char *bn[2] = {"big1", "big2"};
      const uint64_t at[2] = {2, 1}, tot[2] = {most - 10, 10};
      for (int k = 0; k < 2; k++) {
        o.name = (char *)bn[k], o.offset = at[k], o.total = tot[k], o.data = (ProtobufCBinaryData){0, NULL}, o.last = 1;
        expect_code(c, dqnd_call(c, &lr, &rep), 15, "total: received", "end a big upload");
        dqnd_reply_free(rep);
      }
      lr.load_checkpoint = &up;
    }
    /* an offset past the total, even one whose sum with the chunk wraps around */
    up.offset = UINT64_MAX;
    up.data = (ProtobufCBinaryData){2, data};
    expect_code(c, dqnd_call(c, &lr, &rep), 3, "total", "chunk offset past the total");
    dqnd_reply_free(rep);
    free(data);
  }
  same_state(c, "checkpoints");

  /* envelope: version, garbage, unknown command, oversized */
  Dqnd__V1__Health hm = DQND__V1__HEALTH__INIT;
  Dqnd__V1__Request r2 = DQND__V1__REQUEST__INIT;
  r2.command_case = DQND__V1__REQUEST__COMMAND_HEALTH;
  r2.health = &hm;
  r2.version = 7;
  size_t n = dqnd__v1__request__get_packed_size(&r2);
  uint8_t buf[256];
  dqnd__v1__request__pack(&r2, buf);
  raw_expect(c, buf, n, 9, "version", "wrong protocol version");
  uint8_t garbage[512];
  for (int i = 0; i < 512; i++) garbage[i] = (uint8_t)(philox_draw(1, 2, 3, (uint32_t)i).v[0]);
  raw_expect(c, garbage, sizeof garbage, 3, "message", "random garbage");
  raw_expect(c, "", 0, 9, "version", "empty message"); /* decodes as an empty Request: version 0 */
  /* field 99 (a command this daemon does not know), as a length-delimited field */
  uint8_t unk[] = {0x08, 0x01, 0x9a, 0x06, 0x00}; /* version=1, field 99 wire type 2, len 0 */
  raw_expect(c, unk, sizeof unk, 12, "command", "unknown command case");
  size_t big = 4100000;
  uint8_t *huge_msg = calloc(1, big);
  raw_expect(c, huge_msg, big, 8, "max_message_bytes", "oversized message");
  free(huge_msg);
  same_state(c, "envelope");
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* An Act reply stays within max-message-bytes, as a fetched chunk does: Q
 * values for many states on a wide network could ask a 4 KB request for a
 * 512 MiB reply. Here, at --max-message-bytes 65536: 1,200 states with Q (a
 * 72 KB reply) are refused naming count, without Q (5 KB) answered, and the
 * trainer is as its twin. A checkpoint of 80 KB then goes back and forth in
 * chunks that fit. */
START_TEST(test_act_reply_bound) {
  daemon_t d = {0};
  start_daemon_args(&d, "--max-message-bytes", "65536");
  batch_t b;
  dqnd_client_t *c = victim_and_twin(&d, &b, 0);
  enum { N = 1200 };
  float *s = malloc(sizeof(float) * N * S_DIM), *q = malloc(sizeof(float) * N * N_ACT);
  int32_t *acts = malloc(sizeof(int32_t) * N);
  for (int i = 0; i < N * S_DIM; i++) s[i] = (float)(i % 97) / 97.0f - 0.5f;
  expect_code(c, dqnd_act(c, "victim", s, N, S_DIM, 0, acts, q, (size_t)N * N_ACT), 8, "count: 1200 states with want_q",
              "Q values over max-message-bytes");
  ck_assert_int_eq(dqnd_act(c, "victim", s, N, S_DIM, 0, acts, NULL, 0), 0);
  same_state(c, "a refused Act");
  free(s), free(q), free(acts);
  /* a checkpoint bigger than a message goes back and forth: the fetch's
   * chunks and, with chunk_bytes 0, the upload's fit the daemon's limit
   * (the upload's were 4 MiB whatever the daemon took) */
  for (int k = 0; k < 20; k++) ck_assert_int_eq(submit(c, "twin", &b), 0);
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "twin", 1, &ck), 0);
  char local[300];
  snprintf(local, sizeof local, "%s/twin.ckpt", d.dir);
  ck_assert_int_eq(dqnd_fetch_checkpoint(c, "twin", NULL, local, 0, NULL), 0);
  struct stat sb;
  ck_assert_int_eq(stat(local, &sb), 0);
  ck_assert_msg(sb.st_size > 65536, "the checkpoint (%lld bytes) fits one message: nothing tested",
                (long long)sb.st_size);
  ck_assert_msg(dqnd_load_checkpoint_file(c, "copy", local, 1, NULL, 0) == 0, "upload of %lld bytes: %s",
                (long long)sb.st_size, dqnd_last_error(c));
  learner_stats_t x, y;
  ck_assert_int_eq(dqnd_get_stats(c, "copy", &x), 0);
  ck_assert_int_eq(dqnd_get_stats(c, "twin", &y), 0);
  ck_assert(x.replay_total == y.replay_total && x.step == y.step);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

int main(void) {
  harness_init();
  Suite *s = suite_create("bad-input");
  TCase *tc = tcase_create("integration");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_bad_input);
  tcase_add_test(tc, test_act_reply_bound);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
