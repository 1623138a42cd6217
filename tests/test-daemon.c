/*
 * test-daemon.c — integration: a real dqnd on a temporary ipc socket, driven
 * through libdqnd (and dqnctl in test_dqnctl). Every command works end to
 * end; every bad input gets its proper code and a message naming the field,
 * and leaves the trainer as it was — checked against a twin trainer (same
 * seed, same data) that never saw the bad input: GetStats reports the same
 * step and replay counts, and a Step of 2 gives the same mean loss and last
 * gradient norm, bit for bit. SIGTERM with requests in flight answers all of
 * them and writes a final checkpoint holding exactly the steps answered OK;
 * SIGKILL during checkpoint writes never leaves a checkpoint that loads
 * wrongly; concurrent submitters lose and double nothing.
 *
 * The oracle is the daemon's own twin trainer, the client's record of what it
 * sent, and the checkpoint format's CRCs.
 */
#include <check.h>
#include <math.h>
#include <errno.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dqnd.h"
#include "npy.h"
#include "testutil.h"

#include "harness.h"

/* ---------------------------------------------------------------- happy */

START_TEST(test_every_command) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  int serving = 0;
  ck_assert_int_eq(dqnd_health(c, &serving, NULL), 0);
  ck_assert(serving);
  /* ServerInfo through the raw call */
  Dqnd__V1__Reply *rep = server_info(c);
  ck_assert_str_eq(rep->server_info->default_backend, "cpu");
  ck_assert_uint_eq(rep->server_info->protocol, 1);
  dqnd_reply_free(rep);

  int created = -1;
  ck_assert_int_eq(dqnd_create_trainer(c, "a", small_fields, N_SMALL, "cpu", &created), 0);
  ck_assert_int_eq(created, 1);
  ck_assert_int_eq(dqnd_create_trainer(c, "a", small_fields, N_SMALL, "cpu", &created), 0); /* idempotent */
  ck_assert_int_eq(created, 0);
  const char *other[] = {"state_dim=6", "batch=16"};
  ck_assert_int_eq(dqnd_create_trainer(c, "a", other, 2, NULL, NULL), 6); /* ALREADY_EXISTS */
  ck_assert(strstr(dqnd_last_error(c), "different config"));

  batch_t b;
  make_batch(&b, 100, 1);
  ck_assert_int_eq(submit(c, "a", &b), 0);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_step(c, "a", 20, &st), 0);
  ck_assert_int_eq(st.step, 20);
  ck_assert_int_eq(st.replay_size, 100);
  ck_assert(st.loss_mean > 0 && st.loss_mean < 10);

  float q[4 * 7];
  int32_t acts[4];
  ck_assert_int_eq(dqnd_act(c, "a", b.s, 4, S_DIM, 0, acts, q, 28), 0);
  for (int i = 0; i < 4; i++) {
    ck_assert(acts[i] >= 0 && acts[i] < N_ACT);
    /* the action is the per-branch argmax of the returned Q values (branches 3, 4) */
    int b0 = 0, b1 = 0;
    for (int k = 1; k < 3; k++) b0 = q[i * 7 + k] > q[i * 7 + b0] ? k : b0;
    for (int k = 1; k < 4; k++) b1 = q[i * 7 + 3 + k] > q[i * 7 + 3 + b1] ? k : b1;
    ck_assert_int_eq(acts[i], b0 * 4 + b1);
  }
  ck_assert_int_eq(dqnd_sync_target(c, "a", 0.0f), 0);
  ck_assert_int_eq(dqnd_sync_target(c, "a", 0.5f), 0);
  const char *hp[] = {"lr=0.001", "gamma=0.9"};
  ck_assert_int_eq(dqnd_set_hparams(c, "a", hp, 2), 0);
  ck_assert_int_eq(dqnd_get_stats(c, "a", &st), 0);
  ck_assert_int_eq(st.step, 20);

  dqnd_checkpoint_t ck, fk;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "a", 1, &ck), 0);
  ck_assert_int_eq(ck.step, 20);
  char local[400];
  snprintf(local, sizeof local, "%s/fetched.dqnd", d.dir);
  ck_assert_int_eq(dqnd_fetch_checkpoint(c, "a", NULL, local, 4096, &fk), 0); /* many small chunks */
  ck_assert_int_eq(fk.bytes, ck.bytes);
  ck_assert_uint_eq(fk.crc32, ck.crc32);
  char cmp[3000];
  snprintf(cmp, sizeof cmp, "cmp -s '%s' '%s'", local, ck.path);
  ck_assert_int_eq(system(cmp), 0);

  /* restore into a new trainer from the upload and from the daemon path: both continue like the original */
  ck_assert_int_eq(dqnd_load_checkpoint_file(c, "b", local, 1, NULL, 5000), 0);
  ck_assert_int_eq(dqnd_load_checkpoint_path(c, "b2", ck.path, 1, NULL), 0);
  learner_stats_t sa, sb, sb2;
  ck_assert_int_eq(dqnd_step(c, "a", 5, &sa), 0);
  ck_assert_int_eq(dqnd_step(c, "b", 5, &sb), 0);
  ck_assert_int_eq(dqnd_step(c, "b2", 5, &sb2), 0);
  ck_assert(memcmp(&sa.loss_mean, &sb.loss_mean, 4) == 0 && memcmp(&sa.loss_mean, &sb2.loss_mean, 4) == 0);
  /* restore into the existing trainer a: it goes back to step 20 */
  ck_assert_int_eq(dqnd_load_checkpoint_path(c, "a", ck.path, 0, NULL), 0);
  ck_assert_int_eq(dqnd_get_stats(c, "a", &st), 0);
  ck_assert_int_eq(st.step, 20);

  dqnd_checkpoint_t fin;
  ck_assert_int_eq(dqnd_destroy_trainer(c, "b2", 1, &fin), 0);
  ck_assert_int_eq(dqnd_get_stats(c, "b2", &st), 5); /* NOT_FOUND */
  /* save_final wrote one, and the reply says where it went: the trainer's
   * directory is gone and the checkpoint, at step 25, is under .retired/ and
   * loads (the point: a restart would not bring it back; not restarted here) */
  char b2dir[400];
  snprintf(b2dir, sizeof b2dir, "%s/b2", d.state);
  ck_assert_ptr_null(opendir(b2dir));
  char retired[400];
  snprintf(retired, sizeof retired, "%s/.retired/b2-", d.state);
  ck_assert_msg(!strncmp(fin.path, retired, strlen(retired)), "final checkpoint at %s", fin.path);
  ck_assert_int_eq(fin.step, 25);
  learner_t *lf;
  char lerr[256];
  ck_assert_msg(load_file(fin.path, &lf, lerr, sizeof lerr) == 0, "%s: %s", fin.path, lerr);
  learner_destroy(lf);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* ------------------------------------------------------------- bad input */

/* Sends a prepared request and expects `code` with `needle` in the message. */
static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void expect(dqnd_client_t *c, int rc, int code, const char *needle, const char *what) {
  ck_assert_msg(rc == code, "%s: got %s (%s), expected %s", what, dqnd_strerror(rc), dqnd_last_error(c),
                dqnd_strerror(code));
  ck_assert_msg(strstr(dqnd_last_error(c), needle) != NULL, "%s: message '%s' lacks '%s'", what, dqnd_last_error(c),
                needle);
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

static void raw_expect(dqnd_client_t *c, const void *buf, size_t n, int code, const char *needle, const char *what) {
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call_raw(c, buf, n, &rep);
  dqnd_reply_free(rep);
  expect(c, rc, code, needle, what);
}

START_TEST(test_bad_input) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  batch_t b;
  make_batch(&b, 64, 3);
  for (int k = 0; k < 2; k++) {
    const char *nm = k ? "twin" : "victim";
    ck_assert_int_eq(dqnd_create_trainer(c, nm, small_fields, N_SMALL, NULL, NULL), 0);
    ck_assert_int_eq(submit(c, nm, &b), 0);
    learner_stats_t st;
    ck_assert_int_eq(dqnd_step(c, nm, 3, &st), 0);
  }
  same_state(c, "setup");

  /* SubmitTransitions */
  learner_transitions_t t = {10, b.s, b.a, b.r, b.s2, b.d, NULL, NULL};
  expect(c, dqnd_submit(c, "victim", S_DIM + 1, &t, NULL), 3, "states", "submit wrong state size");
  batch_t bad = b;
  bad.a[3] = N_ACT;
  learner_transitions_t tb = {10, bad.s, bad.a, bad.r, bad.s2, bad.d, NULL, NULL};
  expect(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "actions[3]", "submit action out of range");
  bad = b;
  bad.a[2] = -1;
  expect(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "actions[2]", "submit negative action");
  bad = b;
  bad.s2[4 * S_DIM + 1] = NAN;
  expect(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "next_states[4][1]", "submit NaN");
  bad = b;
  bad.r[7] = INFINITY;
  expect(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "rewards[7]", "submit Inf reward");
  bad = b;
  bad.d[1] = 2;
  expect(c, dqnd_submit(c, "victim", S_DIM, &tb, NULL), 3, "dones[1]", "submit done flag 2");
  expect(c, dqnd_submit(c, "nobody", S_DIM, &t, NULL), 5, "nobody", "submit unknown trainer");
  uint8_t ends[10] = {0, 0, 0, 0, 0, 0, 2, 0, 0, 0};
  learner_transitions_t te = {10, b.s, b.a, b.r, b.s2, b.d, NULL, ends};
  expect(c, dqnd_submit(c, "victim", S_DIM, &te, NULL), 3, "episode_ends[6]: 2 is not 0 or 1", "submit end marker 2");
  /* HER and n-step settings that cannot work */
  const char *her_big[] = {"state_dim=6", "her_goal_dim=4"};
  expect(c, dqnd_create_trainer(c, "her", her_big, 2, NULL, NULL), 3, "her_goal_dim", "create: goals do not fit");
  const char *nstep0[] = {"state_dim=6", "n_step=0"};
  expect(c, dqnd_create_trainer(c, "her", nstep0, 2, NULL, NULL), 3, "n_step", "create: n_step 0");
  const char *set0[] = {"n_step=0"};
  expect(c, dqnd_set_hparams(c, "victim", set0, 1), 3, "n_step", "set n_step 0");
  const char *strat[] = {"her_strategy=sometimes"};
  expect(c, dqnd_set_hparams(c, "victim", strat, 1), 3, "her_strategy", "set an unknown strategy");
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
  expect(c, dqnd_call(c, &req, &rep), 3, "n:", "step 0");
  dqnd_reply_free(rep);
  sm.n = 2000000;
  expect(c, dqnd_call(c, &req, &rep), 3, "n:", "step too many");
  dqnd_reply_free(rep);
  sm.name = "bad name!";
  sm.n = 1;
  expect(c, dqnd_call(c, &req, &rep), 3, "name", "step bad name");
  dqnd_reply_free(rep);
  expect(c, dqnd_step(c, "ghost", 1, NULL), 5, "ghost", "step unknown trainer");
  same_state(c, "Step");

  /* Act */
  int32_t acts[8];
  expect(c, dqnd_act(c, "victim", b.s, 2, S_DIM - 1, 0, acts, NULL, 0), 3, "states", "act wrong size");
  bad = b;
  bad.s[S_DIM + 2] = NAN;
  expect(c, dqnd_act(c, "victim", bad.s, 2, S_DIM, 0, acts, NULL, 0), 3, "states[1][2]", "act NaN");
  Dqnd__V1__Act am = DQND__V1__ACT__INIT;
  am.name = "victim";
  am.count = 0;
  req = (Dqnd__V1__Request)DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_ACT;
  req.act = &am;
  expect(c, dqnd_call(c, &req, &rep), 3, "count", "act count 0");
  dqnd_reply_free(rep);
  const char *plain[] = {"state_dim=6", "branches=3,4", "batch=8", "replay_capacity=100", "noisy=0"};
  ck_assert_int_eq(dqnd_create_trainer(c, "plain", plain, 5, NULL, NULL), 0);
  expect(c, dqnd_act(c, "plain", b.s, 2, S_DIM, 1, acts, NULL, 0), 3, "noisy: trainer 'plain' has no NoisyNet",
         "act noisy on a plain trainer");
  same_state(c, "Act");

  /* SyncTarget */
  expect(c, dqnd_sync_target(c, "victim", 2.0f), 3, "tau", "sync tau 2");
  expect(c, dqnd_sync_target(c, "victim", NAN), 3, "tau", "sync tau NaN");
  expect(c, dqnd_sync_target(c, "victim", -0.5f), 3, "tau", "sync tau negative");
  same_state(c, "SyncTarget");

  /* SetHyperparams */
  const char *h1[] = {"bogus=1"}, *h2[] = {"batch=4"}, *h3[] = {"lr=abc"}, *h4[] = {"lr=0.1", "gamma=7"},
             *h5[] = {"tau=0", "target_period=0"};
  expect(c, dqnd_set_hparams(c, "victim", h1, 1), 3, "bogus", "set unknown field");
  expect(c, dqnd_set_hparams(c, "victim", h2, 1), 3, "batch", "set a fixed field");
  expect(c, dqnd_set_hparams(c, "victim", h3, 1), 3, "lr", "set bad value");
  expect(c, dqnd_set_hparams(c, "victim", h4, 2), 3, "gamma", "set all-or-nothing");
  expect(c, dqnd_set_hparams(c, "victim", h5, 2), 3, "target_period", "set inconsistent");
  const char *h6[] = {"lr=0.1", "lr=0.2"}, *h7[] = {"lrr=0.1"};
  expect(c, dqnd_set_hparams(c, "victim", h6, 2), 3, "hparams: field 'lr' is given twice", "set a field twice");
  expect(c, dqnd_set_hparams(c, "victim", h7, 1), 3, "lrr: unknown config field (did you mean 'lr'?)",
         "set a misspelt field");
  expect(c, dqnd_set_hparams(c, "victim", NULL, 0), 3, "hparams: no fields", "set nothing");
  {
    /* more names than there are fields: refused before the pairwise check */
    enum { MANY = 5000 };
    static char names[MANY][16];
    static const char *many[MANY];
    for (int i = 0; i < MANY; i++) snprintf(names[i], sizeof names[i], "f%d=1", i), many[i] = names[i];
    expect(c, dqnd_set_hparams(c, "victim", many, MANY), 3, "hparams: 5000 fields given, more than the",
           "set too many fields");
    expect(c, dqnd_create_trainer(c, "new", many, MANY, NULL, NULL), 3, "config: 5000 fields given",
           "create with too many fields");
  }
  same_state(c, "SetHyperparams");

  /* CreateTrainer */
  const char *cf1[] = {"atoms=1"}, *cf2[] = {"branches=9,x"}, *cf3[] = {"replay_capacity=4", "batch=8"};
  expect(c, dqnd_create_trainer(c, "new", cf1, 1, NULL, NULL), 3, "atoms", "create atoms 1");
  expect(c, dqnd_create_trainer(c, "new", cf2, 1, NULL, NULL), 3, "branches", "create bad branches");
  expect(c, dqnd_create_trainer(c, "new", cf3, 2, NULL, NULL), 3, "batch", "create batch > capacity");
  const char *cf4[] = {"batch=8", "batch=16"};
  expect(c, dqnd_create_trainer(c, "new", cf4, 2, NULL, NULL), 3, "config: field 'batch' is given twice",
         "create with a field twice");
  expect(c, dqnd_destroy_trainer(c, "nosuch", 0, NULL), 5, "name: no trainer 'nosuch'", "destroy unknown");
  expect(c, dqnd_create_trainer(c, "", small_fields, N_SMALL, NULL, NULL), 3, "name", "create empty name");
  /* a name that is no UTF-8 comes back in the message as '?'s: a reply's
     strings must be UTF-8 (Python's and Go's protobuf refuse it otherwise) */
  expect(c, dqnd_create_trainer(c, "a\xff\xc3", small_fields, N_SMALL, NULL, NULL), 3, "name: 'a?" "?' is not",
         "create with a name that is no UTF-8");
  expect(c, dqnd_create_trainer(c, "new", small_fields, N_SMALL, "tpu", NULL), 3, "backend", "create bad backend");
  const char *huge[] = {"replay_capacity=2000000000", "state_dim=4096"};
  expect(c, dqnd_create_trainer(c, "new", huge, 2, NULL, NULL), 8, "replay_capacity", "create too big for memory");

  /* checkpoints */
  char local[400];
  snprintf(local, sizeof local, "%s/x.dqnd", d.dir);
  expect(c, dqnd_fetch_checkpoint(c, "victim", NULL, local, 0, NULL), 5, "checkpoint", "fetch before any save");
  expect(c, dqnd_fetch_checkpoint(c, "victim", "../../etc/passwd", local, 0, NULL), 3, "checkpoint", "fetch path id");
  expect(c, dqnd_load_checkpoint_path(c, "victim", "/nonexistent/file", 0, NULL), 7, "not inside the state directory",
         "load a path outside the state directory");
  expect(c, dqnd_load_checkpoint_path(c, "victim", "/etc/passwd", 0, NULL), 7, "not inside the state directory",
         "load an existing file outside the state directory (the same answer: no existence oracle)");
  expect(c, dqnd_load_checkpoint_path(c, "victim", "../../../../../../etc/passwd", 0, NULL), 7,
         "not inside the state directory", "load a relative path that climbs out");
  expect(c, dqnd_load_checkpoint_path(c, "victim", "victim/none.dqnd", 0, NULL), 5, "does not exist",
         "load a missing file inside the state directory");
  char link[400];
  snprintf(link, sizeof link, "%s/passwd.dqnd", d.state);
  ck_assert_int_eq(symlink("/etc/passwd", link), 0);
  expect(c, dqnd_load_checkpoint_path(c, "victim", link, 0, NULL), 7, "not inside the state directory",
         "load a symlink in the state directory that points out of it");
  /* a FIFO must not block the admin worker (nothing would ever be created again) */
  char fifo[400];
  snprintf(fifo, sizeof fifo, "%s/fifo", d.state);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  expect(c, dqnd_load_checkpoint_path(c, "fromfifo", fifo, 1, NULL), 3, "is not a regular file", "load a FIFO");
  const char *fifo_ok[] = {"state_dim=6", "batch=8", "replay_capacity=100"};
  ck_assert_int_eq(dqnd_create_trainer(c, "afterfifo", fifo_ok, 3, NULL, NULL), 0);
  FILE *f = fopen(local, "wb");
  for (int i = 0; i < 10; i++) fputs("not a checkpoint at all ", f);
  fclose(f);
  expect(c, dqnd_load_checkpoint_file(c, "victim", local, 0, NULL, 0), 15, "magic", "load garbage upload");
  char inside[400];
  snprintf(inside, sizeof inside, "%s/garbage.dqnd", d.state);
  ck_assert_int_eq(rename(local, inside), 0);
  expect(c, dqnd_load_checkpoint_path(c, "fresh", "garbage.dqnd", 1, NULL), 15, "magic",
         "load garbage path (relative: from the state directory)");
  ck_assert_int_eq(rename(inside, local), 0);
  Dqnd__V1__LoadCheckpoint lm = DQND__V1__LOAD_CHECKPOINT__INIT;
  lm.name = "victim";
  req = (Dqnd__V1__Request)DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT;
  req.load_checkpoint = &lm;
  expect(c, dqnd_call(c, &req, &rep), 3, "path", "load with neither path nor data");
  dqnd_reply_free(rep);
  /* a checkpoint of another shape cannot replace the victim's state */
  const char *shape2[] = {"state_dim=6", "branches=5", "batch=8", "replay_capacity=100"};
  ck_assert_int_eq(dqnd_create_trainer(c, "other", shape2, 4, NULL, NULL), 0);
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "other", 0, &ck), 0);
  expect(c, dqnd_load_checkpoint_path(c, "victim", ck.path, 0, NULL), 9, "shapes", "load other shape");
  /* an upload whose CRC does not match */
  ck_assert_int_eq(dqnd_fetch_checkpoint(c, "other", NULL, local, 0, NULL), 0);
  f = fopen(local, "r+b");
  fseek(f, 300, SEEK_SET);
  fputc(0x5a, f);
  fclose(f);
  /* a corrupted file: its section CRC32C catches it */
  expect(c, dqnd_load_checkpoint_file(c, "victim", local, 0, NULL, 0), 15, "CRC32C", "load corrupted file");
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
    expect(c, dqnd_call(c, &lr, &rep), 15, "crc32", "upload with a wrong CRC-32");
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
    expect(c, dqnd_call(c, &lr, &rep), 15, "received 0 of", "empty upload");
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
      expect(c, dqnd_call(c, &lr, &rep), 8, "replay_capacity: the trainer needs", "upload of a huge trainer");
      dqnd_reply_free(rep);
      lr.load_checkpoint = &up;
      /* the same bytes where the daemon reads a path (over its own checkpoint of "other") */
      FILE *hf = fopen(ck.path, "wb");
      ck_assert(hf && fwrite(big, 1, bn, hf) == bn && fclose(hf) == 0);
      expect(c, dqnd_load_checkpoint_path(c, "huge", ck.path, 1, NULL), 8, "replay_capacity", "load a huge trainer");
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
          expect(c, dqnd_call(c, &lr, &rep), 8, "name: 16 other checkpoint uploads are unfinished", "a 17th upload");
        dqnd_reply_free(rep);
      }
      o.name = un[0]; /* restarting one of the 16 is no 17th */
      ck_assert_msg(dqnd_call(c, &lr, &rep) == 0, "restart up0: %s", dqnd_last_error(c));
      dqnd_reply_free(rep);
      for (int k = 0; k < 16; k++) { /* an empty last chunk ends each (short of its total) */
        o.name = un[k], o.offset = 1, o.data = (ProtobufCBinaryData){0, NULL}, o.last = 1;
        expect(c, dqnd_call(c, &lr, &rep), 15, "received 1 of 100", "end an upload");
        dqnd_reply_free(rep);
      }
      const uint64_t most = 16ull * (512ull << 20);
      o.name = "big1", o.total = most - 10, o.offset = 0, o.data = (ProtobufCBinaryData){1, &one}, o.last = 0;
      ck_assert_msg(dqnd_call(c, &lr, &rep) == 0, "big1: %s", dqnd_last_error(c));
      dqnd_reply_free(rep);
      o.name = "big2", o.total = 11;
      expect(c, dqnd_call(c, &lr, &rep), 8, "total: 11 bytes beside the 8589934582 of unfinished uploads",
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
        expect(c, dqnd_call(c, &lr, &rep), 15, "total: received", "end a big upload");
        dqnd_reply_free(rep);
      }
      lr.load_checkpoint = &up;
    }
    /* an offset past the total, even one whose sum with the chunk wraps around */
    up.offset = UINT64_MAX;
    up.data = (ProtobufCBinaryData){2, data};
    expect(c, dqnd_call(c, &lr, &rep), 3, "total", "chunk offset past the total");
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

START_TEST(test_auth_token) {
  /* the token given as --auth-token, then read by --auth-token-file from a
   * file only its owner may read (its first line), so it is not in argv for
   * ps to show; either way a request needs it */
  char tdir[] = "/tmp/dqnd-tok-XXXXXX", tf[200], opt[260]; /* mkdtemp's template */
  ck_assert_ptr_nonnull(mkdtemp(tdir));
  snprintf(tf, sizeof tf, "%s/token", tdir);
  FILE *f = fopen(tf, "w");
  ck_assert(f && fputs("s3cret\nsecond line ignored\n", f) >= 0 && fclose(f) == 0);
  ck_assert_int_eq(chmod(tf, 0600), 0);
  snprintf(opt, sizeof opt, "--auth-token-file=%s", tf);
  const char *how[2][2] = {{"--auth-token", "s3cret"}, {opt, NULL}};
  for (int k = 0; k < 2; k++) {
    daemon_t d = {0};
    start_daemon_args(&d, how[k][0], how[k][1]);
    dqnd_client_t *c = connect_to(&d);
    expect(c, dqnd_health(c, NULL, NULL), 16, "auth_token", "no token");
    dqnd_set_token(c, "wrong");
    expect(c, dqnd_health(c, NULL, NULL), 16, "auth_token", "wrong token");
    dqnd_set_token(c, "s3cret");
    ck_assert_int_eq(dqnd_health(c, NULL, NULL), 0);
    dqnd_close(c);
    ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
    rm_rf(d.dir);
  }
  /* a token file others may read is refused at start, naming the option */
  ck_assert_int_eq(chmod(tf, 0644), 0);
  const char *bad[] = {"--auth-token-file", tf, NULL};
  char want[300];
  snprintf(want, sizeof want, "auth-token-file: %s is readable or writable by group or others", tf);
  refuses_with(bad, want, 2);
  rm_rf(tdir);
}
END_TEST

/* ------------------------------------------------------ queue and SIGTERM */

typedef struct worker_arg {
  daemon_t *d;
  const char *name;
  int calls, ok, unavailable, exhausted, other;
  uint64_t tag;
  uint64_t steps; /* the steps the OK replies counted */
} worker_arg_t;

static void *stepper(void *p) {
  worker_arg_t *w = p;
  dqnd_client_t *c = connect_to(w->d);
  for (int i = 0; i < w->calls; i++) {
    learner_stats_t st;
    int rc = dqnd_step(c, w->name, 50, &st);
    if (rc == 0) w->ok++, w->steps += (uint64_t)st.steps_run;
    else if (rc == 14) w->unavailable++;
    else if (rc == 8) w->exhausted++;
    else w->other++;
    if (rc == 14 || rc < 0) break;
  }
  dqnd_close(c);
  return NULL;
}

START_TEST(test_sigterm_answers_in_flight) {
  daemon_t d = {0};
  batch_t b;
  dqnd_client_t *c = start_with_trainer(&d, "t", &b, 5);
  pthread_t th[6];
  worker_arg_t w[6];
  for (int i = 0; i < 6; i++) {
    w[i] = (worker_arg_t){&d, "t", 1000, 0, 0, 0, 0, 0, 0};
    pthread_create(&th[i], NULL, stepper, &w[i]);
  }
  usleep(300000);
  kill(d.pid, SIGTERM);
  for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
  int st = wait_exit(d.pid, 60);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "dqnd exit status %d", st);
  int ok = 0;
  uint64_t steps = 0;
  for (int i = 0; i < 6; i++) {
    /* every request got an answer: OK, RESOURCE_EXHAUSTED, or UNAVAILABLE once draining; no transport errors */
    ck_assert_msg(w[i].other == 0, "worker %d: %d unexpected replies", i, w[i].other);
    ok += w[i].ok;
    steps += w[i].steps;
  }
  ck_assert_int_gt(ok, 0);
  /* the final checkpoint exists and holds every step that was answered OK */
  char dir[400];
  snprintf(dir, sizeof dir, "%s/t", d.state);
  DIR *dd = opendir(dir);
  ck_assert_ptr_nonnull(dd);
  struct dirent *e;
  char newest[600] = "";
  while ((e = readdir(dd)))
    if (!strncmp(e->d_name, "ckpt-", 5) && strcmp(e->d_name, newest) > 0) snprintf(newest, sizeof newest, "%s", e->d_name);
  closedir(dd);
  ck_assert_msg(newest[0], "no final checkpoint");
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, newest);
  learner_t *l;
  char err[256];
  ck_assert_msg(load_file(path, &l, err, sizeof err) == 0, "%s: %s", newest, err);
  learner_stats_t ls;
  learner_get_stats(l, &ls);
  /* the final checkpoint holds exactly the steps the OK replies counted
   * (50 each, fewer for the one SIGTERM stopped); UNAVAILABLE ran none */
  ck_assert_msg(ls.step == steps, "final checkpoint at step %llu, the %d OK replies counted %llu steps",
                (unsigned long long)ls.step, ok, (unsigned long long)steps);
  learner_destroy(l);
  dqnd_close(c);
  rm_rf(d.dir);
}
END_TEST

/* ------------------------------------------------- SIGKILL during saves */

static void *save_loop(void *p) {
  daemon_t *d = p;
  dqnd_client_t *c;
  char err[256];
  if (dqnd_connect(d->url, 2000, &c, err, sizeof err) == 0) {
    for (int k = 0; k < 50; k++)
      if (dqnd_save_checkpoint(c, "k", 1, NULL) < 0) break; /* the daemon is gone */
    dqnd_close(c);
  }
  return NULL;
}

START_TEST(test_sigkill_during_checkpoints) {
  daemon_t d = {0};
  const char *big[] = {"state_dim=6", "trunk_h1=16", "trunk_h2=12", "value_hidden=8", "adv_hidden=10", "atoms=11",
                       "branches=3,4", "batch=8", "replay_capacity=200000", "seed=3"};
  int rounds = 12, killed_mid_write = 0, loaded = 0, restored = 0;
  for (int round = 0; round < rounds; round++) {
    start_daemon(&d);
    dqnd_client_t *c = connect_to(&d);
    ck_assert_int_eq(dqnd_create_trainer(c, "k", big, 10, NULL, NULL), 0);
    batch_t b;
    for (int k = 0; k < 40; k++) {
      make_batch(&b, 256, (uint64_t)(round * 100 + k));
      ck_assert_int_eq(submit(c, "k", &b), 0);
    }
    dqnd_set_timeout(c, 2000);
    /* a save with the replay takes a few ms; kill at a random moment of it */
    philox4_t r = philox_draw(99, 1, (uint64_t)round, 0);
    /* saves from a thread (nng is not fork-safe) until the daemon dies */
    pthread_t saver;
    pthread_create(&saver, NULL, save_loop, &d);
    usleep(1000 + philox_below(r.v[0], 60000));
    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    pthread_join(saver, NULL);
    dqnd_close(c);
    /* every file under a checkpoint name loads; leftovers are only .tmp files */
    char dir[400];
    snprintf(dir, sizeof dir, "%s/k", d.state);
    DIR *dd = opendir(dir);
    if (!dd) continue;
    struct dirent *e;
    int complete = 0;
    while ((e = readdir(dd))) {
      char path[1100];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      killed_mid_write += strstr(e->d_name, ".tmp") != NULL;
      if (strncmp(e->d_name, "ckpt-", 5)) continue;
      learner_t *l;
      char err[256];
      ck_assert_msg(load_file(path, &l, err, sizeof err) == 0, "round %d: %s does not load: %s", round, e->d_name, err);
      learner_stats_t st;
      learner_get_stats(l, &st);
      ck_assert_int_eq(st.replay_size, 40 * 256);
      learner_destroy(l);
      loaded++, complete++;
    }
    closedir(dd);
    /* a daemon restarted on what the kill left brings the trainer back from
     * its newest checkpoint, replay included, and clears the torn .tmp files */
    start_daemon(&d);
    c = connect_to(&d);
    learner_stats_t st;
    int rc = dqnd_get_stats(c, "k", &st);
    if (complete) {
      ck_assert_msg(rc == 0, "round %d: trainer k not restored: %s", round, dqnd_last_error(c));
      ck_assert_int_eq(st.replay_size, 40 * 256);
      restored++;
    } else
      ck_assert_int_eq(rc, 5); /* NOT_FOUND: nothing to restore from */
    dqnd_close(c);
    char tmps[600];
    snprintf(tmps, sizeof tmps, "ls -A %s | grep -q '\\.tmp'", dir);
    ck_assert_msg(system(tmps) != 0, "round %d: torn .tmp files left after the restart", round);
    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    rm_rf(dir); /* the next round starts without trainer k */
  }
  /* the test must have hit both: complete checkpoints and interrupted writes */
  ck_assert_msg(loaded > 0, "no checkpoint completed in %d rounds", rounds);
  ck_assert_msg(killed_mid_write > 0, "no write was interrupted in %d rounds", rounds);
  ck_assert_int_gt(restored, 0);
  rm_rf(d.dir);
}
END_TEST

/* ------------------------------------------------- concurrent submitters */

typedef struct sub_arg {
  daemon_t *d;
  int id, batches, rc;
} sub_arg_t;

static void *submitter(void *p) {
  sub_arg_t *a = p;
  dqnd_client_t *c = connect_to(a->d);
  batch_t *b = malloc(sizeof *b);
  for (int k = 0; k < a->batches && !a->rc; k++) {
    make_batch(b, 100, (uint64_t)(a->id * 1000 + k + 1));
    do {
      a->rc = submit(c, "shared", b);
      if (a->rc == 8) usleep(1000); /* queue full: retry, as a client should */
    } while (a->rc == 8);
  }
  free(b);
  dqnd_close(c);
  return NULL;
}

START_TEST(test_concurrent_submitters) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  ck_assert_int_eq(dqnd_create_trainer(c, "shared", small_fields, N_SMALL, NULL, NULL), 0);
  enum { T = 4, K = 12 };
  pthread_t th[T];
  sub_arg_t a[T];
  for (int i = 0; i < T; i++) {
    a[i] = (sub_arg_t){&d, i, K, 0};
    pthread_create(&th[i], NULL, submitter, &a[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    ck_assert_msg(a[i].rc == 0, "submitter %d: %s", i, dqnd_strerror(a[i].rc));
  }
  /* fetch the replay through a checkpoint and count every transition */
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "shared", 1, &ck), 0);
  char local[400];
  snprintf(local, sizeof local, "%s/shared.dqnd", d.dir);
  ck_assert_int_eq(dqnd_fetch_checkpoint(c, "shared", ck.id, local, 0, NULL), 0);
  learner_t *l;
  char err[256];
  ck_assert_msg(load_file(local, &l, err, sizeof err) == 0, "%s", err);
  learner_stats_t st;
  learner_get_stats(l, &st);
  ck_assert_int_eq(st.replay_size, T * K * 100);
  ck_assert_int_eq(st.replay_total, T * K * 100);
  float *r = malloc(sizeof(float) * T * K * 100);
  int64_t *ep = malloc(sizeof(int64_t) * T * K * 100);
  ck_assert_int_eq(learner_read_replay(l, 0, T * K * 100, NULL, NULL, r, NULL, NULL, ep), 0);
  /* reward = i + 1000 * tag, episode id = tag: each (tag, i) exactly once, in order within a batch */
  static unsigned char seen[T * 1000 + K + 1][100];
  memset(seen, 0, sizeof seen);
  for (int64_t j = 0; j < T * K * 100; j++) {
    int64_t tag = ep[j];
    int i = (int)(r[j] - 1000.0f * (float)tag);
    ck_assert(tag >= 1 && tag <= T * 1000 + K && i >= 0 && i < 100);
    ck_assert_msg(!seen[tag][i], "transition (%lld, %d) stored twice", (long long)tag, i);
    seen[tag][i] = 1;
    if (i > 0) ck_assert_msg(ep[j - 1] == tag, "a batch was interleaved with another");
  }
  free(r), free(ep);
  learner_destroy(l);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* ------------------------------------------------------------- dqnctl */

START_TEST(test_dqnctl) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[65536], args[3000];
  ck_assert_int_eq(run_ctl(&d, "health", out, sizeof out), 0);
  ck_assert(strstr(out, "serving"));
  ck_assert_int_eq(run_ctl(&d, "--json info", out, sizeof out), 0);
  ck_assert(strstr(out, "\"protocol\": 1"));
  ck_assert_int_eq(run_ctl(&d, "create c state_dim=6 branches=3,4 batch=8 replay_capacity=1000 atoms=11", out, sizeof out), 0);
  ck_assert(strstr(out, "created"));
  /* transitions from .npy files */
  batch_t b;
  make_batch(&b, 50, 9);
  int64_t s2[2] = {50, S_DIM}, s1[1] = {50};
  char p[6][400], err[256];
  const char *names[6] = {"s", "s2", "a", "r", "d", "bad"};
  for (int i = 0; i < 6; i++) snprintf(p[i], sizeof p[i], "%s/%s.npy", d.dir, names[i]);
  ck_assert_int_eq(npy_write(p[0], NPY_F4, 2, s2, b.s, err, sizeof err), 0);
  ck_assert_int_eq(npy_write(p[1], NPY_F4, 2, s2, b.s2, err, sizeof err), 0);
  ck_assert_int_eq(npy_write(p[2], NPY_I4, 1, s1, b.a, err, sizeof err), 0);
  ck_assert_int_eq(npy_write(p[3], NPY_F4, 1, s1, b.r, err, sizeof err), 0);
  ck_assert_int_eq(npy_write(p[4], NPY_U1, 1, s1, b.d, err, sizeof err), 0);
  snprintf(args, sizeof args, "submit c --states %s --next-states %s --actions %s --rewards %s --dones %s", p[0], p[1],
           p[2], p[3], p[4]);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "50 transitions accepted"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "--json step c 10", out, sizeof out), 0);
  ck_assert(strstr(out, "\"step\": 10"));
  snprintf(args, sizeof args, "act c --states %s --q -o %s", p[0], p[5]);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  npy_array_t acts;
  ck_assert_int_eq(npy_read(p[5], &acts, err, sizeof err), 0);
  ck_assert_int_eq(acts.count, 50);
  npy_free(&acts);
  ck_assert_int_eq(run_ctl(&d, "set c lr=0.002", out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "sync c --tau 0.1", out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "save c", out, sizeof out), 0);
  snprintf(args, sizeof args, "fetch c -o %s/c.dqnd", d.dir);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  snprintf(args, sizeof args, "load c2 --file %s/c.dqnd --create", d.dir);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "--json list", out, sizeof out), 0);
  ck_assert(strstr(out, "\"c2\""));
  ck_assert_int_eq(run_ctl(&d, "stats c2", out, sizeof out), 0);
  ck_assert(strstr(out, "step 10"));
  /* exit codes: server error 1 with the message, usage 2, unreachable 3 */
  ck_assert_int_eq(run_ctl(&d, "step nosuch 5", out, sizeof out), 1);
  ck_assert_msg(strstr(out, "NOT_FOUND") && strstr(out, "name: no trainer 'nosuch'"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "step c 2000000", out, sizeof out), 2);
  ck_assert_msg(strstr(out, "N: 2000000 is outside [1, 1000000]"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "set c batch=3", out, sizeof out), 2);
  ck_assert_msg(strstr(out, "batch: fixed when the trainer is created"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "frobnicate", out, sizeof out), 2);
  ck_assert_int_eq(run_ctl(&d, "destroy c2", out, sizeof out), 0);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  ck_assert_int_eq(run_ctl(&d, "--timeout 500 health", out, sizeof out), 3);
  rm_rf(d.dir);
}
END_TEST

/* ------------------------------------------- timers, SIGHUP, tcp listener */

static int count_ckpts(const char *dir) {
  DIR *dd = opendir(dir);
  if (!dd) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dd))) n += !strncmp(e->d_name, "ckpt-", 5);
  closedir(dd);
  return n;
}

START_TEST(test_timers_sighup_tcp) {
  daemon_t d = {0};
  int port = 20000 + (int)(getpid() % 20000);
  char tcp[64], opt[80];
  snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", port);
  snprintf(opt, sizeof opt, "--listen=%s", tcp);
  /* a config file for the timers: exercises --config too */
  char conf[400];
  d.dir[0] = 0;
  snprintf(d.dir, sizeof d.dir, "/tmp/dqnd-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(d.dir));
  snprintf(conf, sizeof conf, "%s/dqnd.conf", d.dir);
  FILE *f = fopen(conf, "w");
  fprintf(f, "# timers\ncheckpoint-interval = 1\nidle-timeout = 3\n");
  fclose(f);
  char confopt[450];
  snprintf(confopt, sizeof confopt, "--config=%s", conf);
  start_daemon_args(&d, confopt, opt);
  /* the same daemon answers on tcp too */
  dqnd_client_t *c;
  char err[256];
  ck_assert_msg(dqnd_connect(tcp, 5000, &c, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(dqnd_create_trainer(c, "idle", small_fields, N_SMALL, NULL, NULL), 0);
  char dir[400];
  snprintf(dir, sizeof dir, "%s/idle", d.state);
  /* a periodic checkpoint (interval 1 s) within 4 s */
  for (int i = 0; i < 40 && count_ckpts(dir) == 0; i++) usleep(100000);
  ck_assert_int_gt(count_ckpts(dir), 0);
  /* SIGHUP reopens the log: move it away, signal, a new file appears */
  char log[300], moved[320];
  snprintf(log, sizeof log, "%s/dqnd.log", d.dir);
  snprintf(moved, sizeof moved, "%s/dqnd.log.1", d.dir);
  ck_assert_int_eq(rename(log, moved), 0);
  kill(d.pid, SIGHUP);
  struct stat st;
  int reopened = 0;
  for (int i = 0; i < 40 && !reopened; i++) {
    usleep(50000);
    reopened = stat(log, &st) == 0;
  }
  ck_assert_msg(reopened, "SIGHUP did not reopen the log file");
  /* idle for > 3 s (periodic checkpoints do not count as activity):
   * unloaded within 10 s. Polled with ServerInfo, which does not touch the
   * trainer. */
  int gone = 0;
  for (int i = 0; i < 100 && !gone; i++) {
    usleep(100000);
    gone = trainers_loaded(c) == 0;
  }
  ck_assert_msg(gone, "the idle trainer was not unloaded");
  /* no checkpoint left in its directory, and a directory
   * .retired/idle-*-unloaded exists (what it holds is not checked) */
  ck_assert_int_eq(count_ckpts(dir), 0);
  char pat[600];
  snprintf(pat, sizeof pat, "ls -d %s/.retired/idle-*-unloaded >/dev/null 2>&1", d.state);
  ck_assert_msg(system(pat) == 0, "no %s/.retired/idle-*-unloaded", d.state);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST


int main(void) {
  harness_init();
  Suite *s = suite_create("daemon");
  TCase *tc = tcase_create("integration");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_every_command);
  tcase_add_test(tc, test_bad_input);
  tcase_add_test(tc, test_auth_token);
  tcase_add_test(tc, test_sigterm_answers_in_flight);
  tcase_add_test(tc, test_sigkill_during_checkpoints);
  tcase_add_test(tc, test_concurrent_submitters);
  tcase_add_test(tc, test_dqnctl);
  tcase_add_test(tc, test_timers_sighup_tcp);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
