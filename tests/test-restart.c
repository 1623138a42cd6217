/*
 * test-restart.c — integration: trainers survive a restart of dqnd on the
 * same state directory (systemd restart, crash, reboot).
 * - After SIGTERM (final checkpoints with the replay), every trainer comes
 *   back and its next steps are bit-identical to a learner here that was fed
 *   the same data and never stopped (the oracle).
 * - After SIGKILL with the newest checkpoint corrupted, the trainer comes
 *   back from the next-newest, and the log names the file it skipped.
 * - Destroyed trainers do not come back; --restore 0 brings nothing back, and
 *   a new trainer of an old name starts clean (the old directory is moved to
 *   .retired, not mixed with the new one's checkpoints).
 * - A trainer or member that diverged is still stopped after a restart, at
 *   its step, until resumed; a verdict whose state was never saved is not,
 *   and its file goes even where the first try to remove it fails.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "testutil.h"

static void config_of(learner_config_t *cfg) {
  learner_config_default(cfg);
  char err[256];
  for (int i = 0; i < N_SMALL; i++) {
    char k[64];
    const char *eq = strchr(small_fields[i], '=');
    snprintf(k, sizeof k, "%.*s", (int)(eq - small_fields[i]), small_fields[i]);
    ck_assert_int_eq(learner_config_set(cfg, k, eq + 1, err, sizeof err), 0);
  }
}

START_TEST(test_sigterm_then_restart_continues_exactly) {
  daemon_t d = {0};
  const char *replay[] = {"--checkpoint-replay", "1", NULL};
  start_daemon_argv(&d, replay);
  dqnd_client_t *c = connect_to(&d);
  /* the oracle: a learner here with the same config and data */
  learner_config_t cfg;
  config_of(&cfg);
  learner_t *twin;
  char err[256];
  ck_assert_int_eq(learner_create(&cfg, LEARNER_BACKEND_CPU, &twin, err, sizeof err), 0);
  const char *names[2] = {"alpha", "beta"};
  for (int k = 0; k < 2; k++) ck_assert_int_eq(dqnd_create_trainer(c, names[k], small_fields, N_SMALL, NULL, NULL), 0);
  for (int r = 0; r < 3; r++) {
    batch_t b;
    make_batch(&b, 64, (uint64_t)(r + 1));
    for (int k = 0; k < 2; k++) ck_assert_int_eq(submit(c, names[k], &b), 0);
    learner_transitions_t t = {b.n, b.s, b.a, b.r, b.s2, b.d, b.ep, NULL};
    ck_assert_int_eq(learner_submit(twin, &t, err, sizeof err), 0);
  }
  learner_stats_t st;
  ck_assert_int_eq(dqnd_step(c, "alpha", 17, &st), 0);
  ck_assert_int_eq(dqnd_step(c, "beta", 4, &st), 0);
  ck_assert_int_eq(learner_step(twin, 17, NULL, err, sizeof err), 0);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);

  start_daemon_argv(&d, replay);
  c = connect_to(&d);
  ck_assert_int_eq(dqnd_get_stats(c, "alpha", &st), 0);
  ck_assert_int_eq(st.step, 17);
  ck_assert_int_eq(st.replay_size, 192);
  ck_assert_int_eq(dqnd_get_stats(c, "beta", &st), 0);
  ck_assert_int_eq(st.step, 4);
  ck_assert_msg(log_has(&d, "[alpha] restored from ckpt-"), "the log does not name alpha's restore");
  /* the next steps are the twin's, bit for bit */
  learner_stats_t ts;
  ck_assert_int_eq(dqnd_step(c, "alpha", 5, &st), 0);
  ck_assert_int_eq(learner_step(twin, 5, &ts, err, sizeof err), 0);
  ck_assert_msg(memcmp(&st.loss_mean, &ts.loss_mean, 4) == 0 && memcmp(&st.grad_norm_last, &ts.grad_norm_last, 4) == 0,
                "after the restart: loss %.9g, twin %.9g", st.loss_mean, ts.loss_mean);
  learner_destroy(twin);

  /* CreateTrainer with the creation config is still idempotent after
   * SetHyperparams and a restart (the checkpoint holds the new lr) */
  const char *lr[] = {"lr=0.003"};
  ck_assert_int_eq(dqnd_set_hparams(c, "beta", lr, 1), 0);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  start_daemon_argv(&d, replay);
  c = connect_to(&d);
  int created = -1;
  ck_assert_int_eq(dqnd_create_trainer(c, "beta", small_fields, N_SMALL, NULL, &created), 0);
  ck_assert_int_eq(created, 0);
  /* a destroyed trainer does not come back */
  ck_assert_int_eq(dqnd_destroy_trainer(c, "beta", 0, NULL), 0);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  start_daemon_argv(&d, replay);
  c = connect_to(&d);
  ck_assert_int_eq(dqnd_get_stats(c, "beta", &st), 5);
  ck_assert_int_eq(dqnd_get_stats(c, "alpha", &st), 0);
  ck_assert_int_eq(st.step, 22);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* newest checkpoint file in dir (by name: the sequence sorts) */
static int newest(const char *dir, char *path, size_t n, int skip) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls %s | grep '^ckpt-' | sort -r | sed -n %dp", dir, skip + 1);
  FILE *p = popen(cmd, "r");
  char name[200] = "";
  int ok = fgets(name, sizeof name, p) != NULL;
  pclose(p);
  name[strcspn(name, "\n")] = 0;
  snprintf(path, n, "%s/%s", dir, name);
  return ok && name[0] ? 0 : -1;
}

/* a flipped bit at `off`: inside the online parameters of these small files */
static void flip_bit(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  fseek(f, off, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(ch ^ 0x01, f);
  fclose(f);
}

START_TEST(test_sigkill_with_a_corrupt_newest_checkpoint) {
  daemon_t d = {0};
  batch_t b;
  dqnd_client_t *c = start_with_trainer(&d, "k", &b, 9);
  ck_assert_int_eq(dqnd_step(c, "k", 6, NULL), 0);
  ck_assert_int_eq(dqnd_save_checkpoint(c, "k", 1, NULL), 0); /* step 6 */
  ck_assert_int_eq(dqnd_step(c, "k", 4, NULL), 0);
  ck_assert_int_eq(dqnd_save_checkpoint(c, "k", 1, NULL), 0); /* step 10 */
  ck_assert_int_eq(dqnd_step(c, "k", 3, NULL), 0);             /* lost with the kill */
  dqnd_close(c);
  kill(d.pid, SIGKILL);
  waitpid(d.pid, NULL, 0);
  /* the newest file is damaged (a flipped byte in its parameters) */
  char dir[400], path[700];
  snprintf(dir, sizeof dir, "%s/k", d.state);
  ck_assert_int_eq(newest(dir, path, sizeof path, 0), 0);
  flip_bit(path, 1500);
  start_daemon(&d);
  c = connect_to(&d);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_get_stats(c, "k", &st), 0);
  ck_assert_int_eq(st.step, 6);
  ck_assert_int_eq(st.replay_size, 64);
  ck_assert_msg(log_has(&d, "[k] skipping checkpoint ckpt-00000002-000000000010-"), "the skip is not logged");
  ck_assert_msg(log_has(&d, "fails its CRC32C check (trying the next-newest)"), "the reason is not logged");
  ck_assert_int_eq(dqnd_step(c, "k", 2, &st), 0); /* it trains on */
  ck_assert_int_eq(st.step, 8);
  /* the damaged file is kept, not deleted */
  ck_assert_int_eq(access(path, F_OK), 0);
  dqnd_close(c);
  kill(d.pid, SIGKILL);
  waitpid(d.pid, NULL, 0);
  /* every checkpoint damaged: not restored, files kept, the daemon serves */
  char older[700];
  ck_assert_int_eq(newest(dir, older, sizeof older, 1), 0);
  flip_bit(older, 1500);
  start_daemon(&d);
  c = connect_to(&d);
  ck_assert_int_eq(dqnd_get_stats(c, "k", &st), 5);
  ck_assert_msg(log_has(&d, "[k] not restored: none of its 2 checkpoints loads"), "not logged");
  ck_assert_int_eq(access(older, F_OK), 0);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

START_TEST(test_restore_off_and_a_name_reused) {
  daemon_t d = {0};
  batch_t b;
  dqnd_client_t *c = start_with_trainer(&d, "old", &b, 2);
  ck_assert_int_eq(dqnd_step(c, "old", 9, NULL), 0);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  const char *off[] = {"--restore", "0", NULL};
  start_daemon_argv(&d, off);
  c = connect_to(&d);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_get_stats(c, "old", &st), 5); /* not brought back */
  /* a new trainer of that name starts clean; the old directory moves aside */
  ck_assert_int_eq(dqnd_create_trainer(c, "old", small_fields, N_SMALL, NULL, NULL), 0);
  dqnd_checkpoint_t *cs;
  int n;
  ck_assert_int_eq(dqnd_list_checkpoints(c, "old", &cs, &n), 0);
  ck_assert_int_eq(n, 0);
  free(cs);
  ck_assert_int_eq(dqnd_get_stats(c, "old", &st), 0);
  ck_assert_int_eq(st.step, 0);
  char pat[600];
  snprintf(pat, sizeof pat, "ls %s/.retired/old-*-replaced/ckpt-* >/dev/null 2>&1", d.state);
  ck_assert_msg(system(pat) == 0, "the old trainer's checkpoints are not in .retired");
  ck_assert_msg(log_has(&d, "[old] a directory left under this name moved to"), "the move is not logged");
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* what the systemd units pass: a config file that may be missing, a socket
 * the daemon's group may use; a bad mode is a clear start-up error */
START_TEST(test_service_options) {
  daemon_t d = {0};
  const char *opts[] = {"--config-optional", "/nonexistent/dqnd.conf", "--socket-mode", "0660", NULL};
  start_daemon_argv(&d, opts);
  struct stat st;
  ck_assert_int_eq(stat(d.url + 6, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0660);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  char cmd[2000], out[2000];
  snprintf(cmd, sizeof cmd, "'%s' --listen ipc://%s/x.sock --state-dir %s/st --socket-mode 0999 2>&1", dqnd_bin, d.dir,
           d.dir);
  FILE *p = popen(cmd, "r");
  size_t k = fread(out, 1, sizeof out - 1, p);
  out[k] = 0;
  int rc = pclose(p);
  ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "status %d: %s", rc, out);
  ck_assert_msg(strstr(out, "socket-mode: '0999' is not an octal mode"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' --config %s/missing.conf 2>&1", dqnd_bin, d.dir);
  p = popen(cmd, "r");
  k = fread(out, 1, sizeof out - 1, p);
  out[k] = 0;
  rc = pclose(p);
  ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 2 && strstr(out, "missing.conf: No such file"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' --restor 0 2>&1", dqnd_bin);
  p = popen(cmd, "r");
  k = fread(out, 1, sizeof out - 1, p);
  out[k] = 0;
  rc = pclose(p);
  ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 2 && strstr(out, "did you mean --restore?"), "%s", out);
  rm_rf(d.dir);
}
END_TEST

/* dqnd ARGS (a shell fragment) with stdout and stderr into out: its exit status */
static int run_dqnd(const char *args, char *out, size_t n) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", dqnd_bin, args);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t k = fread(out, 1, n - 1, p);
  out[k] = 0;
  int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* Config files as the units stack them: a line longer than the parser's
 * buffer is refused whole (its tail was once read as a line of its own, so a
 * long comment ending in "insecure = 1" set it); listen URLs from a later
 * file, or from the command line, replace the earlier ones, as every other
 * option's value does (they were added up: each dqnd@N bound dqnd.conf's
 * URL too); a listen URL longer than its field is refused, not cut. */
START_TEST(test_config_files) {
  char dir[] = "/tmp/dqnd-conf-XXXXXX", a[100], b[100], args[3000], out[8192];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(a, sizeof a, "%s/a.conf", dir);
  snprintf(b, sizeof b, "%s/b.conf", dir);
  char longline[2200];
  memset(longline, 'x', sizeof longline);
  longline[0] = '#';
  snprintf(longline + 2040, sizeof longline - 2040, " insecure = 1\nlisten = tcp://0.0.0.0:7777\n");
  write_text(a, longline);
  snprintf(args, sizeof args, "--config %s --state-dir %s/st --print-config", a, dir);
  int rc = run_dqnd(args, out, sizeof out);
  ck_assert_msg(rc == 2 && strstr(out, "a.conf:1: line longer than 2046 bytes"), "rc %d: %s", rc, out);
  ck_assert_msg(!strstr(out, "insecure = 1"), "%s", out);

  write_text(a, "listen = tcp://127.0.0.1:7001\nlisten = tcp://127.0.0.1:7002\n");
  write_text(b, "listen = tcp://127.0.0.1:7003\n");
  snprintf(args, sizeof args, "--config %s --state-dir %s/st --print-config", a, dir);
  ck_assert_int_eq(run_dqnd(args, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "listen = tcp://127.0.0.1:7001\nlisten = tcp://127.0.0.1:7002\n"), "%s", out);
  snprintf(args, sizeof args, "--config %s --config %s --state-dir %s/st --print-config", a, b, dir);
  ck_assert_int_eq(run_dqnd(args, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "listen = tcp://127.0.0.1:7003\n") && !strstr(out, ":7001") && !strstr(out, ":7002"),
                "the later file's listen did not replace the earlier's: %s", out);
  snprintf(args, sizeof args, "--config %s --listen ipc://%s/x.sock --state-dir %s/st --print-config", a, dir, dir);
  ck_assert_int_eq(run_dqnd(args, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "/x.sock\n") && !strstr(out, "tcp://"), "the command line's listen did not replace the file's: %s",
                out);

  char url[700];
  snprintf(url, sizeof url, "ipc://%s/", dir);
  memset(url + strlen(url), 'y', 600);
  url[sizeof url - 1] = 0;
  snprintf(args, sizeof args, "--listen %s --state-dir %s/st --print-config", url, dir);
  rc = run_dqnd(args, out, sizeof out);
  ck_assert_msg(rc == 2 && strstr(out, "listen: longer than 511 bytes"), "rc %d: %s", rc, out);
  rm_rf(dir);
}
END_TEST

/* A final checkpoint that cannot be written (here the trainer's directory
 * replaced by a file, which root cannot write through either) is not a clean
 * shutdown: the log names the cause and the trainers it cost, and dqnd exits
 * 1, so systemd and a script see it (it said "all trainers saved" and exited
 * 0, and a restart quietly went back to an older checkpoint) */
START_TEST(test_final_save_failure) {
  daemon_t d = {0};
  batch_t b;
  dqnd_client_t *c = start_with_trainer(&d, "f", &b, 5);
  dqnd_close(c);
  char dir[400], moved[420];
  snprintf(dir, sizeof dir, "%s/f", d.state);
  snprintf(moved, sizeof moved, "%s/f.moved", d.state);
  ck_assert_int_eq(rename(dir, moved), 0);
  write_text(dir, "not a directory\n");
  int st = stop_daemon(&d, SIGTERM);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
  ck_assert_msg(log_has(&d, "1 trainer's final checkpoint could not be written"), "the log does not say so");
  ck_assert_msg(log_has(&d, "Not a directory"), "the log does not name the cause");
  ck_assert_msg(!log_has(&d, "all trainers saved"), "the log says all were saved");
  rm_rf(d.dir);
}
END_TEST

/* ids of the trainer's checkpoints, oldest first, "*" after the pinned one */
static void ckpt_ids(dqnd_client_t *c, const char *name, char *out, size_t n) {
  dqnd_checkpoint_t *cs;
  int k;
  ck_assert_int_eq(dqnd_list_checkpoints(c, name, &cs, &k), 0);
  out[0] = 0;
  for (int i = 0; i < k; i++)
    snprintf(out + strlen(out), n - strlen(out), "%s%llu%s", i ? " " : "", (unsigned long long)cs[i].seq,
             cs[i].pinned ? "*" : "");
  free(cs);
}

/* Retention: the newest --keep-checkpoints (2 here) are kept, and a pinned
 * one (SaveCheckpoint pin: a client's resume point) besides, through
 * periodic-style saves, the final save at SIGTERM and a restart, until the
 * next pinned one; then it is pruned as any other. */
START_TEST(test_pinned_checkpoint) {
  daemon_t d = {0};
  const char *keep[] = {"--keep-checkpoints", "2", NULL};
  start_daemon_argv(&d, keep);
  dqnd_client_t *c = connect_to(&d);
  ck_assert_int_eq(dqnd_create_trainer(c, "p", small_fields, N_SMALL, NULL, NULL), 0);
  batch_t b;
  make_batch(&b, 64, 6);
  ck_assert_int_eq(submit(c, "p", &b), 0);
  dqnd_checkpoint_t pin, x;
  ck_assert_int_eq(dqnd_save_checkpoint_pinned(c, "p", 1, &pin), 0);
  ck_assert(pin.pinned && pin.seq == 1);
  learner_stats_t st;
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(dqnd_step(c, "p", 2, &st), 0);
    ck_assert_int_eq(dqnd_save_checkpoint(c, "p", 0, &x), 0);
    ck_assert(!x.pinned);
  }
  char ids[200];
  ckpt_ids(c, "p", ids, sizeof ids);
  ck_assert_str_eq(ids, "1* 3 4");
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0); /* the final save: 5 */
  start_daemon_argv(&d, keep);
  c = connect_to(&d);
  ckpt_ids(c, "p", ids, sizeof ids);
  ck_assert_str_eq(ids, "1* 4 5");
  ck_assert_int_eq(dqnd_get_stats(c, "p", &st), 0);
  ck_assert_int_eq((int)st.step, 6); /* restored from the newest, not the pinned */
  ck_assert_int_eq(dqnd_load_checkpoint_path(c, "p", pin.path, 0, NULL), 0); /* the resume point loads */
  ck_assert_int_eq(dqnd_get_stats(c, "p", &st), 0);
  ck_assert_int_eq((int)st.step, 0);
  ck_assert_int_eq(dqnd_save_checkpoint_pinned(c, "p", 0, &x), 0); /* 6 pinned: 1 is an ordinary one again */
  ckpt_ids(c, "p", ids, sizeof ids);
  ck_assert_str_eq(ids, "4 5 6*"); /* the newest two besides the pinned one */
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* a peer that connects and leaves during the handshake (a port scan, a bare
 * connect(), a second dqnd on the same socket) must not leave the daemon
 * deaf: Debian's nng 1.5.2 stops serving such a listener (nng#1518), and the
 * listener check starts it again within a few seconds */
static int serves_within(const char *url, int seconds) {
  seconds *= harness_slow(); /* under valgrind the listener guard's probes and restart run slower too */
  for (int i = 0; i < seconds * 4; i++) {
    dqnd_client_t *c;
    char err[256];
    if (dqnd_connect(url, 250, &c, err, sizeof err) == 0) {
      int serving = 0, rc = dqnd_health(c, &serving, NULL);
      dqnd_close(c);
      if (rc == 0 && serving) return 1;
    }
    usleep(100000);
  }
  return 0;
}

/* A client whose daemon restarted behind its back (SIGKILL, a new process on
 * the same URL and state) is told so (Reply.instance changed): the first
 * reply from the new process is UNAVAILABLE "the daemon restarted", not the
 * silent success of a request that ran on trainers rolled back to their last
 * checkpoint; the call after it is answered normally. The trainer's submit
 * after its checkpoint is the work the restart lost. */
START_TEST(test_restart_behind_a_client_is_reported) {
  daemon_t d = {0};
  const char *replay[] = {"--checkpoint-replay", "1", NULL};
  start_daemon_argv(&d, replay);
  dqnd_client_t *c = connect_to(&d);
  ck_assert_int_eq(dqnd_create_trainer(c, "t", small_fields, N_SMALL, NULL, NULL), 0);
  batch_t b;
  make_batch(&b, 64, 1);
  ck_assert_int_eq(submit(c, "t", &b), 0);
  dqnd_checkpoint_t k;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "t", 1, &k), 0);
  ck_assert_int_eq(submit(c, "t", &b), 0); /* after the checkpoint: the restart loses it */
  int ks = stop_daemon(&d, SIGKILL);
  ck_assert(WIFSIGNALED(ks) && WTERMSIG(ks) == SIGKILL);
  start_daemon_argv(&d, replay);
  learner_stats_t st;
  int rc = dqnd_get_stats(c, "t", &st); /* the same client, its socket redialled */
  ck_assert_msg(rc == 14 && strstr(dqnd_last_error(c), "the daemon restarted"), "rc %d (%s): %s", rc,
                dqnd_strerror(rc), dqnd_last_error(c));
  ck_assert_int_eq(dqnd_get_stats(c, "t", &st), 0);
  ck_assert_int_eq((long long)st.replay_total, 64); /* the checkpoint's, the second submit gone */
  /* a new client learns the new daemon from its first reply: nothing to report */
  dqnd_client_t *c2 = connect_to(&d);
  ck_assert_int_eq(dqnd_get_stats(c2, "t", &st), 0);
  dqnd_close(c2), dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* whether STATE/<name>/diverged exists once it is `want` or 10 s have
 * passed: the worker writes it after the command's reply */
static int verdict_file(const daemon_t *d, const char *name, int want) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s/diverged", d->state, name);
  for (int i = 0; i < 100 && (access(p, F_OK) == 0) != want; i++) usleep(100000);
  return access(p, F_OK) == 0;
}

static void info_of(dqnd_client_t *c, const char *name, uint32_t member, dqnd_trainer_info_t *ti) {
  dqnd_use_member(c, member);
  ck_assert_msg(dqnd_trainer_info(c, name, ti) == 0, "%s", dqnd_last_error(c));
  dqnd_use_member(c, 0);
}

/* A divergence outlives a restart (daemon/verdict.h): a lone trainer that
 * diverged, and a population's member that diverged alone, are still
 * stopped after SIGTERM and a restart, at the steps they stopped at, and
 * refuse training as before; once resumed (SetHyperparams, CopyMember) a
 * restart brings them back ready. A verdict whose state was never saved (a
 * member diverged, then SIGKILL) does not mark the older state restored. */
START_TEST(test_divergence_survives_restart) {
  daemon_t d = {0};
  const char *replay[] = {"--checkpoint-replay", "1", NULL};
  const char *absurd[] = {"lr=10", "weight_decay=10"}, *sane[] = {"lr=0.001", "weight_decay=0"};
  start_daemon_argv(&d, replay);
  dqnd_client_t *c = connect_to(&d);
  ck_assert_int_eq(dqnd_create_trainer(c, "wild", small_fields, N_SMALL, NULL, NULL), 0);
  ck_assert_int_eq(dqnd_create_population(c, "pop", small_fields, N_SMALL, NULL, 3, NULL), 0);
  batch_t b;
  make_batch(&b, 64, 3);
  ck_assert_int_eq(submit(c, "wild", &b), 0);
  for (uint32_t i = 0; i < 3; i++) {
    dqnd_use_member(c, i);
    ck_assert_int_eq(submit(c, "pop", &b), 0);
  }
  dqnd_use_member(c, 0);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_step(c, "wild", 5, &st), 0);
  ck_assert_int_eq(dqnd_set_hparams(c, "wild", absurd, 2), 0);
  ck_assert_int_eq(dqnd_step(c, "wild", 100, &st), 9);
  ck_assert_int_eq(dqnd_step(c, "pop", 5, &st), 0);
  dqnd_use_member(c, 1);
  ck_assert_int_eq(dqnd_set_hparams(c, "pop", absurd, 2), 0);
  dqnd_use_member(c, 0);
  ck_assert_int_eq(dqnd_step(c, "pop", 30, &st), 0); /* member 1 diverges alone, the others train on */
  dqnd_trainer_info_t ti;
  info_of(c, "wild", 0, &ti);
  ck_assert_msg(strstr(ti.state, "diverged"), "%s", ti.state);
  const uint64_t wild_step = ti.stats.step;
  info_of(c, "pop", 1, &ti);
  ck_assert_msg(strstr(ti.state, "member 1 diverged"), "%s", ti.state);
  const uint64_t m1_step = ti.stats.step;
  ck_assert_msg(m1_step < 40 && wild_step < 105, "member 1 at %llu, wild at %llu", (unsigned long long)m1_step,
                (unsigned long long)wild_step);
  ck_assert(verdict_file(&d, "wild", 1) && verdict_file(&d, "pop", 1));
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);

  start_daemon_argv(&d, replay);
  c = connect_to(&d);
  ck_assert_msg(log_has(&d, "[wild] restored as diverged before the restart: 1 of 1 member"), "wild's log line");
  ck_assert_msg(log_has(&d, "[pop] restored as diverged before the restart: 1 of 3 members"), "pop's log line");
  info_of(c, "wild", 0, &ti);
  ck_assert_msg(strstr(ti.state, "diverged"), "after the restart: %s", ti.state);
  ck_assert_int_eq((long long)ti.stats.step, (long long)wild_step);
  int rc = dqnd_step(c, "wild", 1, &st);
  ck_assert_msg(rc == 9 && strstr(dqnd_last_error(c), "stopped training: diverged"), "%d %s", rc,
                dqnd_last_error(c));
  ck_assert_int_eq(submit(c, "wild", &b), 9);
  info_of(c, "pop", 1, &ti);
  ck_assert_msg(strstr(ti.state, "member 1 diverged"), "after the restart: %s", ti.state);
  ck_assert_int_eq((long long)ti.stats.step, (long long)m1_step);
  info_of(c, "pop", 0, &ti);
  ck_assert_str_eq(ti.state, "ready");
  dqnd_use_member(c, 1);
  ck_assert_int_eq(submit(c, "pop", &b), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "member 1 of trainer 'pop' diverged"), "%s", dqnd_last_error(c));
  dqnd_use_member(c, 0);
  ck_assert_int_eq(dqnd_step(c, "pop", 2, &st), 0);
  ck_assert_int_eq((long long)st.step, 37);
  info_of(c, "pop", 1, &ti);
  ck_assert_int_eq((long long)ti.stats.step, (long long)m1_step); /* skipped */
  /* resumed: the files stay until a checkpoint holds the resumed state (the
   * newest one is still the state that diverged: a crash now restores it,
   * and the files must still stop it), then go, and the next restart brings
   * both back ready */
  ck_assert_int_eq(dqnd_set_hparams(c, "wild", sane, 2), 0);
  ck_assert_int_eq(dqnd_copy_member(c, "pop", 1, 0, 0, NULL, 0), 0);
  ck_assert_int_eq(dqnd_step(c, "pop", 1, &st), 0);
  ck_assert(verdict_file(&d, "wild", 1) && verdict_file(&d, "pop", 1));
  int kr = stop_daemon(&d, SIGKILL);
  ck_assert(WIFSIGNALED(kr) && WTERMSIG(kr) == SIGKILL);
  start_daemon_argv(&d, replay);
  c = connect_to(&d);
  info_of(c, "wild", 0, &ti);
  ck_assert_msg(strstr(ti.state, "diverged") && ti.stats.step == wild_step, "after the crash: %s", ti.state);
  info_of(c, "pop", 1, &ti);
  ck_assert_msg(strstr(ti.state, "member 1 diverged") && ti.stats.step == m1_step, "after the crash: %s", ti.state);
  ck_assert_int_eq(dqnd_set_hparams(c, "wild", sane, 2), 0);
  ck_assert_int_eq(dqnd_copy_member(c, "pop", 1, 0, 0, NULL, 0), 0);
  ck_assert_int_eq(dqnd_step(c, "pop", 2, &st), 0); /* the crash took the 2 steps above */
  ck_assert_int_eq((long long)st.step, 37);
  dqnd_checkpoint_t kw, kp;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "wild", 0, &kw), 0);
  ck_assert(!verdict_file(&d, "wild", 0) && verdict_file(&d, "pop", 1));
  ck_assert_int_eq(dqnd_save_checkpoint(c, "pop", 0, &kp), 0);
  ck_assert(!verdict_file(&d, "pop", 0));
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);

  start_daemon_argv(&d, replay);
  c = connect_to(&d);
  info_of(c, "wild", 0, &ti);
  ck_assert_str_eq(ti.state, "ready");
  info_of(c, "pop", 1, &ti);
  ck_assert_str_eq(ti.state, "ready");
  /* member 2 diverges, and the daemon dies before anything saves that state */
  dqnd_use_member(c, 2);
  ck_assert_int_eq(dqnd_set_hparams(c, "pop", absurd, 2), 0);
  dqnd_use_member(c, 0);
  ck_assert_int_eq(dqnd_step(c, "pop", 30, &st), 0);
  info_of(c, "pop", 2, &ti);
  ck_assert_msg(strstr(ti.state, "member 2 diverged"), "%s", ti.state);
  ck_assert(verdict_file(&d, "pop", 1));
  int ks = stop_daemon(&d, SIGKILL);
  ck_assert(WIFSIGNALED(ks) && WTERMSIG(ks) == SIGKILL);
  /* and the verdict's removal at restore fails (fault-unlink.c, while the
   * flag file exists): the stale line stays on disk until the next command
   * removes it (else a member reaching step 37 again by a later save would
   * be stopped by it at the restart after) */
  const char *shim = getenv("DQND_FAULT_UNLINK");
  ck_assert_msg(shim && shim[0], "DQND_FAULT_UNLINK (meson test sets it) names tests/fault-unlink.c's module");
  char flag[600];
  snprintf(flag, sizeof flag, "%s/unlink-fails", d.dir);
  FILE *ff = fopen(flag, "w");
  ck_assert_ptr_nonnull(ff);
  fclose(ff);
  setenv("DQND_TEST_UNLINK_FAILS", flag, 1);
  d.preload = shim;
  start_daemon_argv(&d, replay);
  d.preload = NULL;
  unsetenv("DQND_TEST_UNLINK_FAILS");
  c = connect_to(&d);
  ck_assert_msg(log_has(&d, "[pop] member 2 diverged at step"), "the log says why the verdict was not applied");
  ck_assert_msg(log_has(&d, "/diverged: Input/output error (tried again after the next command)"),
                "the failed removal is logged");
  info_of(c, "pop", 2, &ti);
  ck_assert_msg(!strcmp(ti.state, "ready") && ti.stats.step == 37, "member 2: %s at step %llu", ti.state,
                (unsigned long long)ti.stats.step);
  ck_assert(verdict_file(&d, "pop", 1)); /* still there: its removal failed */
  ck_assert_int_eq(unlink(flag), 0);
  ck_assert_int_eq(dqnd_step(c, "pop", 1, &st), 0);
  ck_assert(!verdict_file(&d, "pop", 0)); /* rewritten as what holds: nothing */
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

START_TEST(test_half_open_connections_do_not_wedge) {
  daemon_t d = {0};
  int port = 21000 + (int)(getpid() % 20000);
  char tcp[64], opt[80];
  snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", port);
  snprintf(opt, sizeof opt, "--listen=%s", tcp);
  const char *extra[] = {"--listener-check", "1", opt, NULL};
  start_daemon_argv(&d, extra);
  /* a bare connect and close on the ipc socket, then on the tcp port */
  char cmd[3000];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('%s'); s.close(); "
           "t=socket.create_connection(('127.0.0.1', %d)); t.close()\"",
           d.url + 6, port);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_msg(serves_within(d.url, 10), "the ipc listener did not serve again");
  ck_assert_msg(serves_within(tcp, 10), "the tcp listener did not serve again");
  /* a second dqnd on the same socket refuses to start, and the first serves on */
  snprintf(cmd, sizeof cmd, "'%s' --listen '%s' --state-dir '%s/other' --backend cpu >/dev/null 2>&1", dqnd_bin,
           d.url, d.dir);
  int st = system(cmd);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "a second dqnd on the socket exited %d", st);
  ck_assert_msg(serves_within(d.url, 10), "the first daemon stopped serving");
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

int main(void) {
  harness_init();
  Suite *s = suite_create("restart");
  TCase *tc = tcase_create("integration");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_sigterm_then_restart_continues_exactly);
  tcase_add_test(tc, test_sigkill_with_a_corrupt_newest_checkpoint);
  tcase_add_test(tc, test_restore_off_and_a_name_reused);
  tcase_add_test(tc, test_service_options);
  tcase_add_test(tc, test_config_files);
  tcase_add_test(tc, test_final_save_failure);
  tcase_add_test(tc, test_pinned_checkpoint);
  tcase_add_test(tc, test_restart_behind_a_client_is_reported);
  tcase_add_test(tc, test_divergence_survives_restart);
  tcase_add_test(tc, test_half_open_connections_do_not_wedge);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
