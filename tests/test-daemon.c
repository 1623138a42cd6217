/*
 * test-daemon.c — integration: a real dqnd on a temporary ipc socket, driven
 * through libdqnd (and dqnctl in test_dqnctl). Every command works end to
 * end. SIGTERM with requests in flight answers all of them and writes a final
 * checkpoint holding exactly the steps answered OK; SIGKILL during checkpoint
 * writes never leaves a checkpoint that loads wrongly; concurrent submitters
 * lose and double nothing; periodic checkpoints, SIGHUP and the idle unload
 * happen when they should. Bad input is test-bad-input.c's, the auth token
 * test-security.c's.
 *
 * The oracle is the client's record of what it sent and the checkpoint
 * format's CRCs.
 */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
  /* a command to it is NOT_FOUND saying it was unloaded and where its
   * checkpoints went; from that path a LoadCheckpoint brings it back */
  learner_stats_t ls;
  ck_assert_int_eq(dqnd_get_stats(c, "idle", &ls), 5);
  const char *why = dqnd_last_error(c), *at = strstr(why, "moved to ");
  ck_assert_msg(strstr(why, "it was unloaded, idle") && at, "%s", why);
  char back[1500];
  snprintf(back, sizeof back, "%.*s", (int)strcspn(at + 9, " "), at + 9);
  char ls_cmd[1700], ck_path[1700] = "";
  snprintf(ls_cmd, sizeof ls_cmd, "ls %s/ckpt-*.dqnd 2>/dev/null | tail -1", back);
  FILE *lp = popen(ls_cmd, "r");
  ck_assert_ptr_nonnull(lp);
  ck_assert_ptr_nonnull(fgets(ck_path, sizeof ck_path, lp));
  pclose(lp);
  ck_path[strcspn(ck_path, "\n")] = 0;
  ck_assert_msg(dqnd_load_checkpoint_path(c, "idle", ck_path, 1, NULL) == 0, "%s: %s", ck_path, dqnd_last_error(c));
  ck_assert_int_eq(dqnd_get_stats(c, "idle", &ls), 0);
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
  tcase_add_test(tc, test_sigterm_answers_in_flight);
  tcase_add_test(tc, test_sigkill_during_checkpoints);
  tcase_add_test(tc, test_concurrent_submitters);
  tcase_add_test(tc, test_dqnctl);
  tcase_add_test(tc, test_timers_sighup_tcp);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
