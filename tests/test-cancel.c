/*
 * test-cancel.c — integration: a daemon that stops when asked.
 * - A Step stops at its request's deadline (answered 1.2 to 1.5 s into a
 *   1350 ms deadline) and on a Cancel from another client (running, or
 *   queued: then CANCELLED with nothing run); each reply counts the steps
 *   that ran, and the trainer's state is then, byte for byte, a twin's that
 *   ran exactly as many (their checkpoint files compared whole). A Cancel
 *   with nothing to cancel finds "none"; one for an unknown trainer is
 *   NOT_FOUND. A client that times out waiting cancels its Step on the
 *   daemon and takes the late CANCELLED reply before it returns.
 * - SIGTERM with a Step of 10^6 steps running: the Step answers "shutdown",
 *   a Step queued behind it UNAVAILABLE, the daemon exits 0 within 10 s, and
 *   after a restart the trainer is at the step the reply reported, byte for
 *   byte the twin's after as many steps.
 * - One daemon per state directory: a second refuses, naming the pid.
 * - dqnctl: Ctrl-C during a step cancels it (exit 130, the steps printed);
 *   options after the command; submit --episode-ends; a URL with no scheme.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "testutil.h"

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* a daemon (its final checkpoints with the replay, so that a restarted
 * trainer can step on) and trainers `name` and `twin`, created alike and fed
 * the same batch */
static dqnd_client_t *two_alike(daemon_t *d, const char *name, const char *twin) {
  batch_t b;
  start_daemon_args(d, "--checkpoint-replay", "1");
  dqnd_client_t *c = connect_to(d);
  make_batch(&b, 64, 3);
  const char *both[] = {name, twin};
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(dqnd_create_trainer(c, both[i], small_fields, N_SMALL, NULL, NULL), 0);
    ck_assert_int_eq(submit(c, both[i], &b), 0);
  }
  return c;
}

/* steps `twin` by as many as `name` holds, saves both and compares the files */
static void twin_catches_up(dqnd_client_t *c, const char *name, const char *twin) {
  learner_stats_t a, b;
  ck_assert_int_eq(dqnd_get_stats(c, name, &a), 0);
  ck_assert_int_eq(dqnd_get_stats(c, twin, &b), 0);
  ck_assert_int_gt((long long)a.step, (long long)b.step);
  int rc = dqnd_step(c, twin, (int)(a.step - b.step), &b);
  ck_assert_msg(rc == 0, "stepping %s: %s", twin, dqnd_last_error(c));
  /* its last call must have run as many as the stopped one, for the stats
   * kept in the checkpoint to match: the caller arranges one stop per twin */
  dqnd_checkpoint_t ka, kb;
  ck_assert_int_eq(dqnd_save_checkpoint(c, name, 1, &ka), 0);
  ck_assert_int_eq(dqnd_save_checkpoint(c, twin, 1, &kb), 0);
  size_t na, nb;
  char *fa = read_file(ka.path, &na), *fb = read_file(kb.path, &nb);
  ck_assert_msg(fa && fb, "reading the checkpoints");
  ck_assert_msg(na == nb && !memcmp(fa, fb, na), "'%s' after its stop is not '%s' after as many steps (%zu / %zu bytes)",
                name, twin, na, nb);
  free(fa), free(fb);
}

START_TEST(test_deadline) {
  daemon_t d = {0};
  dqnd_client_t *c = two_alike(&d, "long", "twin");
  dqnd_set_timeout(c, 1500); /* the request carries 1350 ms */
  learner_stats_t st;
  double t0 = mono();
  int rc = dqnd_step(c, "long", 1000000, &st);
  double took = mono() - t0;
  ck_assert_msg(rc == 0, "%s: %s", dqnd_strerror(rc), dqnd_last_error(c));
  ck_assert_str_eq(dqnd_last_stop(c), "deadline");
  ck_assert_msg(took >= 1.2 && took < 1.5, "answered after %.2f s", took);
  ck_assert_msg(st.steps_run > 0 && st.steps_run < 1000000 && st.step == (uint64_t)st.steps_run, "%u steps, step %llu",
                st.steps_run, (unsigned long long)st.step);
  dqnd_set_timeout(c, 60000);
  twin_catches_up(c, "long", "twin");
  ck_assert_msg(log_has(&d, "[long] Step deadline: stopped after"), "the log says so");
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

typedef struct stepper {
  daemon_t *d;
  const char *name;
  int n, rc;
  uint64_t rid;
  learner_stats_t st;
  char stop[32], err[600];
  dqnd_client_t *c;
} stepper_t;

static void *step_thread(void *arg) {
  stepper_t *s = arg;
  s->rc = dqnd_step(s->c, s->name, s->n, &s->st);
  snprintf(s->stop, sizeof s->stop, "%s", dqnd_last_stop(s->c));
  snprintf(s->err, sizeof s->err, "%s", dqnd_last_error(s->c));
  return NULL;
}

/* a Step of n on its own connection, in a thread; returns once it was sent */
static void step_async(stepper_t *s, daemon_t *d, const char *name, int n, pthread_t *th) {
  memset(s, 0, sizeof *s);
  s->d = d, s->name = name, s->n = n;
  s->c = connect_to(d);
  uint64_t before = dqnd_pending_request_id(s->c);
  ck_assert_int_eq(pthread_create(th, NULL, step_thread, s), 0);
  for (int k = 0; k < 2000 && dqnd_pending_request_id(s->c) == before; k++) usleep(1000);
  s->rid = dqnd_pending_request_id(s->c);
  ck_assert(s->rid != before);
}

START_TEST(test_cancel_running_and_queued) {
  daemon_t d = {0};
  dqnd_client_t *c = two_alike(&d, "long", "twin");
  stepper_t run, queued;
  pthread_t t1, t2;
  step_async(&run, &d, "long", 1000000, &t1);
  usleep(300000);
  step_async(&queued, &d, "long", 1000000, &t2); /* behind the first */
  usleep(200000);
  char found[32];
  /* the queued one first: it never runs */
  ck_assert_int_eq(dqnd_cancel(c, "long", queued.rid, found, sizeof found), 0);
  ck_assert_str_eq(found, "queued");
  ck_assert_int_eq(dqnd_cancel(c, "long", run.rid, found, sizeof found), 0);
  ck_assert_str_eq(found, "running");
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  ck_assert_msg(run.rc == 0, "%s", run.err);
  ck_assert_str_eq(run.stop, "cancelled");
  ck_assert_msg(run.st.steps_run > 0 && run.st.steps_run < 1000000, "%u steps", run.st.steps_run);
  ck_assert_msg(queued.rc == 1 && strstr(queued.err, "cancelled while it was queued"), "rc %d: %s", queued.rc,
                queued.err);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_get_stats(c, "long", &st), 0);
  ck_assert_int_eq((long long)st.step, (long long)run.st.steps_run); /* the queued one added nothing */
  twin_catches_up(c, "long", "twin");
  /* nothing to cancel: "none", and an unknown trainer is NOT_FOUND */
  ck_assert_int_eq(dqnd_cancel(c, "long", 0, found, sizeof found), 0);
  ck_assert_str_eq(found, "none");
  ck_assert_int_eq(dqnd_cancel(c, "nosuch", 0, found, sizeof found), 5);
  dqnd_close(run.c), dqnd_close(queued.c), dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* A Submit whose client gave up (its 1 s timeout) while it waited behind a
 * running Step never runs: its deadline had passed when its turn came, so
 * the client's retry stores the rows once (the rows were stored after the
 * Step, and a retry doubled them). A Submit in time still stores them. */
START_TEST(test_expired_submit_never_runs) {
  daemon_t d = {0};
  dqnd_client_t *c = two_alike(&d, "long", "twin");
  stepper_t run;
  pthread_t th;
  step_async(&run, &d, "long", 1000000, &th);
  usleep(200000);
  dqnd_client_t *late = connect_to(&d);
  dqnd_set_timeout(late, 1000);
  batch_t b;
  make_batch(&b, 100, 9);
  int rc = submit(late, "long", &b);
  ck_assert_msg(rc == DQND_ETIMEDOUT, "the Submit behind the Step: %s (%s)", dqnd_strerror(rc), dqnd_last_error(late));
  usleep(300000);
  char found[32];
  ck_assert_int_eq(dqnd_cancel(c, "long", run.rid, found, sizeof found), 0);
  pthread_join(th, NULL);
  ck_assert_msg(run.rc == 0, "%s", run.err);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_get_stats(c, "long", &st), 0);
  ck_assert_msg(st.replay_total == 64, "the expired Submit ran: replay_total %lld", (long long)st.replay_total);
  ck_assert_msg(log_has(&d, "past its deadline"), "the log does not say why");
  ck_assert_int_eq(submit(c, "long", &b), 0); /* the retry: stored once */
  ck_assert_int_eq(dqnd_get_stats(c, "long", &st), 0);
  ck_assert_int_eq((long long)st.replay_total, 164);
  dqnd_close(late), dqnd_close(run.c), dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* A client that stops waiting (its timeout, 1 s) for a Step queued behind a
 * running one: the Step is cancelled on the daemon before dqnd_step returns
 * DQND_ETIMEDOUT, so it never runs; its CANCELLED reply was taken too
 * (nothing in flight when the socket closes: libnng 1.5 can hang closing a
 * pipe that is receiving), and the connection carries the next calls. */
START_TEST(test_client_timeout_cancels) {
  daemon_t d = {0};
  dqnd_client_t *c = two_alike(&d, "long", "twin");
  stepper_t run;
  pthread_t t1;
  step_async(&run, &d, "long", 1000000, &t1);
  usleep(300000);
  dqnd_client_t *w = connect_to(&d);
  dqnd_set_timeout(w, 1000);
  learner_stats_t st;
  double t0 = mono();
  int rc = dqnd_step(w, "long", 5, &st);
  double took = mono() - t0;
  ck_assert_msg(rc == DQND_ETIMEDOUT, "rc %d: %s", rc, dqnd_last_error(w));
  ck_assert_msg(took >= 0.95 && took < 3.5, "returned after %.2f s", took); /* nng_clock counts whole ms */
  /* the late reply itself was taken: the message quotes it */
  ck_assert_msg(strstr(dqnd_last_error(w), "(the Step was cancelled on the daemon; its late reply: CANCELLED: "),
                "%s", dqnd_last_error(w));
  ck_assert_msg(!dqnd_reply_in_flight(w), "its CANCELLED reply was taken before dqnd_step returned");
  /* the connection goes on: a short call, then a long one that runs */
  dqnd_set_timeout(w, 5000);
  int serving = 0;
  ck_assert_int_eq(dqnd_health(w, &serving, NULL), 0);
  ck_assert_int_eq(serving, 1);
  char found[32];
  ck_assert_int_eq(dqnd_cancel(c, "long", run.rid, found, sizeof found), 0);
  ck_assert_str_eq(found, "running");
  pthread_join(t1, NULL);
  ck_assert_msg(run.rc == 0, "%s", run.err);
  ck_assert_str_eq(run.stop, "cancelled");
  ck_assert_int_eq(dqnd_get_stats(c, "long", &st), 0);
  ck_assert_int_eq((long long)st.step, (long long)run.st.steps_run); /* the timed-out Step never ran */
  rc = dqnd_step(w, "long", 3, &st);
  ck_assert_msg(rc == 0, "%s", dqnd_last_error(w));
  ck_assert_int_eq((long long)st.step, (long long)run.st.steps_run + 3);
  ck_assert(!dqnd_reply_in_flight(w));
  dqnd_close(w), dqnd_close(run.c), dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* SIGTERM with a Step of 10^6 steps (the most one takes) running: the Step
 * answers with the steps that ran (stop "shutdown"), the Step queued behind
 * it is refused UNAVAILABLE ("shutting down"), the daemon exits 0 within
 * 10 s, and a restarted daemon brings the trainer back at the step the reply
 * counted, byte for byte the twin's after as many steps (the final
 * checkpoint, restored, saved again and compared whole). */
START_TEST(test_shutdown_in_seconds) {
  daemon_t d = {0};
  dqnd_client_t *c = two_alike(&d, "long", "twin");
  stepper_t run, queued;
  pthread_t t1, t2;
  step_async(&run, &d, "long", 1000000, &t1);
  step_async(&queued, &d, "long", 5, &t2);
  usleep(500000);
  double t0 = mono();
  ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
  int status = wait_exit(d.pid, 10);
  double took = mono() - t0;
  d.pid = 0;
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
  ck_assert_msg(took < 10, "shutdown took %.1f s", took);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  ck_assert_msg(run.rc == 0, "%s", run.err);
  ck_assert_str_eq(run.stop, "shutdown");
  ck_assert_msg(queued.rc == 14 && strstr(queued.err, "shutting down"), "rc %d: %s", queued.rc, queued.err);
  printf("SIGTERM during a Step of 10^6: exit 0 after %.2f s, the Step answered after %u steps\n", took,
         run.st.steps_run);
  dqnd_close(run.c), dqnd_close(queued.c), dqnd_close(c);
  /* the restart restores it at the step the reply counted */
  start_daemon_args(&d, "--checkpoint-replay", "1");
  c = connect_to(&d);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_get_stats(c, "long", &st), 0);
  ck_assert_int_eq((long long)st.step, (long long)run.st.step);
  /* and whole: byte for byte the twin's after as many steps */
  twin_catches_up(c, "long", "twin");
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

START_TEST(test_one_daemon_per_state_dir) {
  daemon_t d = {0};
  start_daemon(&d);
  char url[400], cmd[2000], out[2000];
  snprintf(url, sizeof url, "ipc://%s/second.sock", d.dir);
  snprintf(cmd, sizeof cmd, "'%s' --listen '%s' --state-dir '%s' --backend cpu 2>&1; echo \"exit $?\"", dqnd_bin, url,
           d.state);
  FILE *p = popen(cmd, "r");
  size_t k = fread(out, 1, sizeof out - 1, p);
  out[k] = 0;
  pclose(p);
  char want[100];
  snprintf(want, sizeof want, "is in use by another dqnd (pid %d)", (int)d.pid);
  ck_assert_msg(strstr(out, want) && strstr(out, d.state) && strstr(out, "exit 1"), "%s", out);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  /* once it is gone the directory is free again */
  start_daemon(&d);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* write an .npy of n uint8 values */
static void npy_u8(const char *path, const uint8_t *v, int n) {
  char hdr[128];
  int hl = snprintf(hdr, sizeof hdr, "{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }", n);
  int total = 10 + hl + 1, pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  uint16_t len = (uint16_t)(hl + pad + 1);
  fwrite(&len, 2, 1, f);
  fwrite(hdr, 1, (size_t)hl, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(v, 1, (size_t)n, f);
  fclose(f);
}

START_TEST(test_dqnctl_stop_and_options) {
  daemon_t d = {0};
  batch_t b;
  dqnd_client_t *c = start_with_trainer(&d, "t", &b, 4);
  char out[8192], args[4000];
  /* Ctrl-C during a long step: cancelled on the daemon, the steps printed, exit 130 */
  char cmd[3000], path[400];
  snprintf(path, sizeof path, "%s/ctl.out", d.dir);
  snprintf(cmd, sizeof cmd, "exec '%s' --url '%s' step t 1000000 >'%s' 2>&1", dqnctl_bin, d.url, path);
  pid_t p = fork();
  if (p == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  usleep(700000);
  double t0 = mono();
  kill(p, SIGINT);
  int status = wait_exit(p, 10);
  double took = mono() - t0;
  size_t n;
  char *txt = read_file(path, &n);
  ck_assert_ptr_nonnull(txt);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130, "status %d: %s", status, txt);
  ck_assert_msg(strstr(txt, "interrupted: the Step is cancelled on the daemon (it was running)") &&
                    strstr(txt, "stopped after") && strstr(txt, "(cancelled)"),
                "%s", txt);
  ck_assert_msg(took < 3, "dqnctl took %.1f s to stop", took);
  free(txt);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_get_stats(c, "t", &st), 0);
  ck_assert_int_gt((long long)st.step, 0);
  /* the trainer is free again at once */
  ck_assert_int_eq(dqnd_step(c, "t", 2, &st), 0);
  /* Ctrl-C before the Step is sent: --member's check (a GetStats) waits in the
   * trainer's queue behind another dqnctl's long Step; dqnctl exits 130 at
   * once, having started nothing (it waited for the check's deadline, then
   * cancelled the check's request id, not the Step's) */
  char path2[400];
  snprintf(path2, sizeof path2, "%s/ctl2.out", d.dir);
  pid_t blocker = fork();
  if (blocker == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  usleep(500000);
  snprintf(cmd, sizeof cmd, "exec '%s' --url '%s' --member 0 step t 5 >'%s' 2>&1", dqnctl_bin, d.url, path2);
  p = fork();
  if (p == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  usleep(700000);
  t0 = mono();
  kill(p, SIGINT);
  status = wait_exit(p, 20);
  took = mono() - t0;
  txt = read_file(path2, &n);
  ck_assert_ptr_nonnull(txt);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130, "status %d: %s", status, txt);
  ck_assert_msg(strstr(txt, "interrupted before the command was sent: nothing was started"), "%s", txt);
  ck_assert_msg(took < 3, "dqnctl took %.1f s to stop", took);
  free(txt);
  kill(blocker, SIGINT); /* the other dqnctl's Step is still running, and is cancelled as before */
  status = wait_exit(blocker, 10);
  txt = read_file(path, &n);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130 && strstr(txt, "(it was running)"), "status %d: %s",
                status, txt);
  free(txt);
  ck_assert_int_eq(dqnd_step(c, "t", 2, &st), 0);
  /* options after the command */
  ck_assert_int_eq(run_ctl(&d, "stats t --json", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "\"replay_total\": 64") && strstr(out, "\"name\": \"t\""), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "stats --json t --timeout 5000", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "\"step\""), "%s", out);
  /* a URL with no scheme: a usage error naming the schemes */
  snprintf(args, sizeof args, "'%s' --url localhost:5555 health 2>&1", dqnctl_bin);
  FILE *f = popen(args, "r");
  size_t k = fread(out, 1, sizeof out - 1, f);
  out[k] = 0;
  ck_assert_int_eq(WEXITSTATUS(pclose(f)), 2);
  ck_assert_msg(strstr(out, "has no scheme") && strstr(out, "tls+tcp://"), "%s", out);
  /* submit --episode-ends: accepted, and the wrong length refused naming the file */
  char sp[8][400];
  const char *nm[8] = {"s", "s2", "a", "r", "d", "e", "bad", "q"};
  for (int i = 0; i < 8; i++) snprintf(sp[i], sizeof sp[i], "%s/%s.npy", d.dir, nm[i]);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c \"import numpy as np; n=20; np.save('%s', np.zeros((n,6),np.float32)); "
           "np.save('%s', np.ones((n,6),np.float32)); np.save('%s', np.arange(n,dtype=np.int32)%%12); "
           "np.save('%s', np.ones(n,np.float32))\"",
           sp[0], sp[1], sp[2], sp[3]);
  ck_assert_int_eq(system(cmd), 0);
  uint8_t dn[20] = {0}, en[20] = {0};
  en[9] = en[19] = 1;
  npy_u8(sp[4], dn, 20);
  npy_u8(sp[5], en, 20);
  npy_u8(sp[6], en, 19);
  snprintf(args, sizeof args, "submit t --states %s --next-states %s --actions %s --rewards %s --dones %s "
           "--episode-ends %s", sp[0], sp[1], sp[2], sp[3], sp[4], sp[5]);
  ck_assert_msg(run_ctl(&d, args, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, "20 transitions accepted"), "%s", out);
  snprintf(args, sizeof args, "submit t --states %s --next-states %s --actions %s --rewards %s --dones %s "
           "--episode-ends %s", sp[0], sp[1], sp[2], sp[3], sp[4], sp[6]);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 4);
  ck_assert_msg(strstr(out, sp[6]), "%s", out);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

int main(void) {
  harness_init();
  Suite *s = suite_create("cancel");
  TCase *tc = tcase_create("cancel");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_deadline);
  tcase_add_test(tc, test_cancel_running_and_queued);
  tcase_add_test(tc, test_expired_submit_never_runs);
  tcase_add_test(tc, test_client_timeout_cancels);
  tcase_add_test(tc, test_shutdown_in_seconds);
  tcase_add_test(tc, test_one_daemon_per_state_dir);
  tcase_add_test(tc, test_dqnctl_stop_and_options);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
