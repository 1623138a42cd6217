/*
 * test-client-replies.c — the C client library against a peer that is not
 * dqnd (or a buggy one): a REP socket here answers each request with a
 * crafted reply, and every call must fail with DQND_EPROTO (or succeed
 * within its buffers) instead of reading or writing out of bounds:
 * SaveCheckpoint without its checkpoint, Act replies whose q is short, ragged
 * or too long, a GetStats reply with an empty branch, and FetchCheckpoint
 * chunks that change files, grow the total or overrun it.
 * And a Step the peer leaves unanswered past the client's timeout: the
 * client cancels it and waits up to 2 s for its late reply (libnng 1.5 can
 * hang closing a pipe that is receiving); a reply that never comes is given
 * up by the next Step, which gets its own, or by dqnd_close after 2 s; one
 * that comes after the timeout is quoted in the error.
 */
#include <check.h>
#include <stdatomic.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "dqnd.h"

static nng_socket srv;
static char url[200], dir[64];
/* what the fake daemon answers: set by the test before each call */
static int scenario;
static uint8_t payload[64];
/* Reply.instance, the daemon process's id: a test changes it to play a
 * daemon that restarted between two replies */
static _Atomic uint64_t instance = 1;

/* scenarios 8-10, a Step: 8 never answered, 9 answered 700 ms late (7
 * steps), 10 answered at once (3 steps); a Cancel finds "running" in 8,
 * else "none" */
enum { STEP_SILENT = 8, STEP_LATE = 9, STEP_NOW = 10, STEP_EMPTY = 11 /* OK, no result */ };
#define LATE_US 700000

/* fills r; returns the microseconds to wait before sending it, or -1: none */
static long answer(const Dqnd__V1__Request *q, Dqnd__V1__Reply *r, Dqnd__V1__Status *st) {
  static Dqnd__V1__StepResult sr;
  static Dqnd__V1__TrainerStats ts;
  static Dqnd__V1__CancelResult cr;
  static Dqnd__V1__ActResult act;
  static Dqnd__V1__TrainerInfo ti;
  static Dqnd__V1__CheckpointChunk ch;
  static uint32_t br[2];
  r->request_id = q->request_id;
  r->status = st;
  if (q->command_case == DQND__V1__REQUEST__COMMAND_CANCEL) {
    dqnd__v1__cancel_result__init(&cr);
    cr.found = scenario == STEP_SILENT ? "running" : "none";
    r->result_case = DQND__V1__REPLY__RESULT_CANCEL;
    r->cancel = &cr;
    return 0;
  }
  if (q->command_case == DQND__V1__REQUEST__COMMAND_STEP) {
    if (scenario == STEP_SILENT) return -1;
    if (scenario == STEP_EMPTY) return 0;
    dqnd__v1__step_result__init(&sr);
    dqnd__v1__trainer_stats__init(&ts);
    ts.steps_run = scenario == STEP_LATE ? 7 : 3;
    sr.stats = &ts;
    r->result_case = DQND__V1__REPLY__RESULT_STEP;
    r->step = &sr;
    return scenario == STEP_LATE ? LATE_US : 0;
  }
  switch (scenario) {
  case 0: break; /* OK, no result */
  case 1: case 2: case 3: /* Act, 2 states, q of 2 x 7 wanted */
    dqnd__v1__act_result__init(&act);
    act.actions = (ProtobufCBinaryData){8, payload};
    act.q = (ProtobufCBinaryData){scenario == 1 ? 4 * 13 : scenario == 2 ? 4 * 16 : 4 * 10, payload};
    r->result_case = DQND__V1__REPLY__RESULT_ACT;
    r->act = &act;
    break;
  case 4: /* GetStats with a branch of 0 actions */
    dqnd__v1__trainer_info__init(&ti);
    ti.name = "t", ti.state_dim = 3, ti.n_branches = 2, ti.branches = br, br[0] = 4, br[1] = 0;
    r->result_case = DQND__V1__REPLY__RESULT_TRAINER;
    r->trainer = &ti;
    break;
  case 5: case 6: case 7: /* FetchCheckpoint: 6 bytes of 10 first, then a chunk that breaks the file */
    dqnd__v1__checkpoint_chunk__init(&ch);
    ch.checkpoint = "ckpt-00000001-000000000000-00000000.dqnd";
    ch.offset = q->fetch_checkpoint->offset;
    ch.total = 10;
    ch.data = (ProtobufCBinaryData){6, payload};
    if (ch.offset) {
      if (scenario == 5) ch.total = 1u << 30;                    /* the total grows */
      if (scenario == 6) ch.checkpoint = "ckpt-00000002-000000000000-00000000.dqnd"; /* another file */
      /* scenario 7: the same file, but its second 6 bytes pass the total (6 + 6 > 10) */
    }
    r->result_case = DQND__V1__REPLY__RESULT_CHUNK;
    r->chunk = &ch;
    break;
  }
  return 0;
}

static void *serve(void *arg) {
  (void)arg;
  for (;;) {
    nng_msg *m;
    if (nng_recvmsg(srv, &m, 0)) return NULL;
    Dqnd__V1__Request *q = dqnd__v1__request__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    if (!q) return NULL;
    Dqnd__V1__Reply r = DQND__V1__REPLY__INIT;
    Dqnd__V1__Status st = DQND__V1__STATUS__INIT;
    st.message = "";
    const long wait_us = answer(q, &r, &st);
    r.instance = atomic_load(&instance);
    if (wait_us < 0) { /* unanswered: the REP socket drops it at the next receive */
      dqnd__v1__request__free_unpacked(q, NULL);
      continue;
    }
    size_t n = dqnd__v1__reply__get_packed_size(&r);
    nng_msg *o;
    if (nng_msg_alloc(&o, n)) return NULL;
    dqnd__v1__reply__pack(&r, nng_msg_body(o));
    dqnd__v1__request__free_unpacked(q, NULL);
    if (wait_us) usleep((useconds_t)wait_us);
    if (nng_sendmsg(srv, o, 0)) nng_msg_free(o);
  }
}

static pthread_t fake_th;

/* the fake daemon listening in a new directory, and a client of it */
static dqnd_client_t *fake_up(int timeout_ms) {
  snprintf(dir, sizeof dir, "/tmp/dqnd-fake-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(url, sizeof url, "ipc://%s/s.sock", dir);
  ck_assert_int_eq(nng_rep0_open(&srv), 0);
  ck_assert_int_eq(nng_listen(srv, url, NULL, 0), 0);
  ck_assert_int_eq(pthread_create(&fake_th, NULL, serve, NULL), 0);
  for (int i = 0; i < 64; i++) payload[i] = (uint8_t)i;
  dqnd_client_t *c;
  char err[512];
  ck_assert_int_eq(dqnd_connect(url, timeout_ms, &c, err, sizeof err), 0);
  return c;
}

static void fake_down(void) {
  nng_close(srv);
  pthread_join(fake_th, NULL);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_bad_replies) {
  dqnd_client_t *c = fake_up(5000);

  scenario = 0;
  dqnd_checkpoint_t ck;
  memset(&ck, 0x5a, sizeof ck);
  ck_assert_int_eq(dqnd_save_checkpoint(c, "t", 0, &ck), DQND_EPROTO);
  ck_assert(ck.id[0] == 0 && ck.bytes == 0); /* zeroed, never stale */
  /* an OK without its result is not taken for one (it was: stats left
   * unwritten, "shutting down, up 0 s", "replay holds 0") */
  int serving = 7;
  ck_assert_int_eq(dqnd_health(c, &serving, NULL), DQND_EPROTO);
  const char *fields[] = {"state_dim=3"};
  int created = 7;
  ck_assert_int_eq(dqnd_create_trainer(c, "t", fields, 1, "cpu", &created), DQND_EPROTO);
  float st3[3] = {0}, r1[1] = {0};
  int32_t a1[1] = {0};
  uint8_t d1[1] = {0};
  learner_transitions_t tr = {1, st3, a1, r1, st3, d1, NULL, NULL};
  int64_t size = 7;
  ck_assert_int_eq(dqnd_submit(c, "t", 3, &tr, &size), DQND_EPROTO);
  memset(&ck, 0x5a, sizeof ck);
  ck_assert_int_eq(dqnd_destroy_trainer(c, "t", 1, &ck), DQND_EPROTO);
  ck_assert(ck.id[0] == 0 && ck.bytes == 0);
  learner_stats_t sts;
  scenario = STEP_EMPTY;
  ck_assert_int_eq(dqnd_step(c, "t", 3, &sts), DQND_EPROTO);
  ck_assert_msg(strstr(dqnd_last_error(c), "no StepResult"), "%s", dqnd_last_error(c));

  float s[6] = {0}, q[14];
  int32_t a[2];
  scenario = 1; /* 13 floats: not whole rows */
  ck_assert_int_eq(dqnd_act(c, "t", s, 2, 3, 0, a, q, 14), DQND_EPROTO);
  scenario = 2; /* 16 floats: more than q holds */
  ck_assert_int_eq(dqnd_act(c, "t", s, 2, 3, 0, a, q, 14), DQND_EPROTO);
  scenario = 3; /* 10 floats (rows of 5) into rows of 7: each row copied, its last 2 NaN */
  ck_assert_int_eq(dqnd_act(c, "t", s, 2, 3, 0, a, q, 14), 0);
  ck_assert(memcmp(q, payload, 20) == 0 && memcmp(q + 7, payload + 20, 20) == 0);
  ck_assert(isnan(q[5]) && isnan(q[6]) && isnan(q[12]) && isnan(q[13]));

  scenario = 4;
  dqnd_trainer_info_t ti;
  ck_assert_int_eq(dqnd_trainer_info(c, "t", &ti), DQND_EPROTO);
  ck_assert_msg(strstr(dqnd_last_error(c), "branch of 0 actions"), "%s", dqnd_last_error(c));

  char local[300];
  snprintf(local, sizeof local, "%s/fetched.dqnd", dir);
  const char *why[3] = {"another file", "another file", "6 bytes at 6 of 10"};
  for (int k = 0; k < 3; k++) {
    scenario = 5 + k;
    ck_assert_int_eq(dqnd_fetch_checkpoint(c, "t", NULL, local, 6, NULL), DQND_EPROTO);
    ck_assert_msg(strstr(dqnd_last_error(c), why[k]), "scenario %d: %s", scenario, dqnd_last_error(c));
    struct stat sb;
    ck_assert_msg(stat(local, &sb) != 0, "a failed fetch left %s", local);
  }
  /* the daemon restarted before an upload's chunk-size probe (ServerInfo):
   * the notice, said once, reaches the caller (it was dropped, the upload
   * went on, and the load returned 0) */
  FILE *lf = fopen(local, "wb");
  ck_assert(lf && fwrite(payload, 1, 64, lf) == 64 && fclose(lf) == 0);
  scenario = 0;
  atomic_store(&instance, 3);
  ck_assert_int_eq(dqnd_load_checkpoint_file(c, "t", local, 0, "cpu", 0), DQND__V1__CODE__UNAVAILABLE);
  ck_assert_msg(strstr(dqnd_last_error(c), "the daemon restarted"), "%s", dqnd_last_error(c));
  dqnd_close(c);
  atomic_store(&instance, 1); /* (the next test's daemon) */
  fake_down();
}
END_TEST

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

START_TEST(test_unanswered_step) {
  dqnd_client_t *c = fake_up(500);
  learner_stats_t st;
  /* never answered: cancelled ("running"), 2 s for its reply, then kept */
  scenario = STEP_SILENT;
  double t0 = mono();
  ck_assert_int_eq(dqnd_step(c, "t", 5, &st), DQND_ETIMEDOUT);
  double took = mono() - t0;
  ck_assert_msg(strstr(dqnd_last_error(c), "(the Step was cancelled on the daemon)"), "%s", dqnd_last_error(c));
  ck_assert_msg(took >= 2.4 && took < 3.5, "returned after %.2f s (0.5 s timeout, the Cancel, 2 s settling)", took);
  ck_assert_int_eq(dqnd_reply_in_flight(c), 1);
  /* the next Step gives that reply up and gets its own */
  scenario = STEP_NOW;
  ck_assert_msg(dqnd_step(c, "t", 3, &st) == 0, "%s", dqnd_last_error(c));
  ck_assert_int_eq(st.steps_run, 3);
  ck_assert_int_eq(dqnd_reply_in_flight(c), 0);
  /* answered 700 ms late, before the Cancel ("none"): taken and quoted */
  scenario = STEP_LATE;
  ck_assert_int_eq(dqnd_step(c, "t", 7, &st), DQND_ETIMEDOUT);
  ck_assert_msg(strstr(dqnd_last_error(c), "(the Step was already over on the daemon; its late reply counted 7 steps)"),
                "%s", dqnd_last_error(c));
  ck_assert_int_eq(dqnd_reply_in_flight(c), 0);
  /* the connection goes on */
  scenario = STEP_NOW;
  ck_assert_msg(dqnd_step(c, "t", 3, &st) == 0, "%s", dqnd_last_error(c));
  /* never answered, and the daemon restarted before the Cancel's reply: the
   * caller hears of the restart (UNAVAILABLE), not a timeout */
  atomic_store(&instance, 2);
  scenario = STEP_SILENT;
  ck_assert_int_eq(dqnd_step(c, "t", 5, &st), DQND__V1__CODE__UNAVAILABLE);
  ck_assert_msg(strstr(dqnd_last_error(c), "the daemon restarted") && strstr(dqnd_last_error(c), "the Step had no reply"),
                "%s", dqnd_last_error(c));
  /* (the new daemon, instance 2, is the one from here) */
  /* never answered, then closed: dqnd_close waits its 2 s and returns */
  scenario = STEP_SILENT;
  ck_assert_int_eq(dqnd_step(c, "t", 5, &st), DQND_ETIMEDOUT);
  ck_assert_int_eq(dqnd_reply_in_flight(c), 1);
  t0 = mono();
  dqnd_close(c);
  took = mono() - t0;
  ck_assert_msg(took >= 1.9 && took < 3.0, "dqnd_close took %.2f s", took);
  fake_down();
}
END_TEST

int main(void) {
  Suite *su = suite_create("client-replies");
  TCase *tc = tcase_create("fake daemon");
  tcase_add_test(tc, test_bad_replies);
  tcase_add_test(tc, test_unanswered_step);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf ? 1 : 0;
}
