/*
 * test-cli.c — integration: dqnctl as a user drives it, against a real dqnd.
 * Each test is one promise of the README or `dqnctl --help`, checked by its
 * effect rather than its exit code alone:
 * - fetch never destroys a file: a failed fetch leaves whatever was at -o
 *   byte for byte, and no temporary file beside it;
 * - act --q / --q-out / --json return the Q values libdqnd receives
 *   (the oracle), laid out [n, branches, max actions] with NaN padding, and
 *   each action is the per-branch argmax of them; stats (text and --json)
 *   names every stats field with libdqnd's value;
 * - no argument is silently ignored: each malformed one is exit 2 naming
 *   it, and the daemon is left exactly as it was (no trainer created);
 * - demo never destroys or trains a trainer it did not create;
 * - checkpoints lists what the daemon holds, short ids work in fetch,
 *   inspect prints a file's header and sections and catches a flipped byte;
 * - submit's shape and dtype errors name the file and the shape (exit 4);
 *   per-branch actions encode to the same transitions as flat ones;
 * - --version, --help, fields and --json fields;
 * - pretrain: the Decision Transformer's steps, their stats as libdqnd
 *   reads them after, and its errors.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "npy.h"
#include "testutil.h"

static const char *plain_fields = "state_dim=6 trunk_h1=16 trunk_h2=12 value_hidden=8 adv_hidden=10 atoms=11 "
                                  "branches=3,4 batch=8 replay_capacity=1000 seed=5";

static int slurp(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t k = fread(buf, 1, n - 1, f);
  buf[k] = 0;
  fclose(f);
  return (int)k;
}

/* the .npy files of one batch, written under d->dir as <tag>.s.npy, ... */
static void write_batch(const daemon_t *d, const batch_t *b, const char *tag, char p[5][400]) {
  const char *names[5] = {"s", "s2", "a", "r", "d"};
  for (int i = 0; i < 5; i++) snprintf(p[i], sizeof p[i], "%s/%s.%s.npy", d->dir, tag, names[i]);
  int64_t s2[2] = {b->n, S_DIM}, s1[1] = {b->n};
  char err[256];
  ck_assert_int_eq(npy_write(p[0], NPY_F4, 2, s2, b->s, err, sizeof err), 0);
  ck_assert_int_eq(npy_write(p[1], NPY_F4, 2, s2, b->s2, err, sizeof err), 0);
  ck_assert_int_eq(npy_write(p[2], NPY_I4, 1, s1, b->a, err, sizeof err), 0);
  ck_assert_int_eq(npy_write(p[3], NPY_F4, 1, s1, b->r, err, sizeof err), 0);
  ck_assert_int_eq(npy_write(p[4], NPY_U1, 1, s1, b->d, err, sizeof err), 0);
}

static int submit_files(const daemon_t *d, const char *name, char p[5][400], char *out, size_t n) {
  char args[3000];
  snprintf(args, sizeof args, "submit %s --states %s --next-states %s --actions %s --rewards %s --dones %s", name, p[0],
           p[1], p[2], p[3], p[4]);
  return run_ctl(d, args, out, n);
}

static int n_trainers(const daemon_t *d) {
  char out[8192];
  ck_assert_int_eq(run_ctl(d, "--json list", out, sizeof out), 0);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  ck_assert_msg(j && json_is_array(j), "list --json: %s", out);
  int n = (int)json_array_size(j);
  json_decref(j);
  return n;
}

/* ------------------------------------------------------------------ fetch */

START_TEST(test_fetch_never_destroys_a_file) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[8192], args[2000], keep[400], good[400], copy[400], buf[64];
  snprintf(keep, sizeof keep, "%s/keep.txt", d.dir);
  FILE *f = fopen(keep, "w");
  fputs("precious\n", f);
  fclose(f);
  /* an unknown trainer */
  snprintf(args, sizeof args, "fetch nosuch -o %s", keep);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 1);
  ck_assert_int_eq(slurp(keep, buf, sizeof buf), 9);
  ck_assert_str_eq(buf, "precious\n");
  /* a trainer with no checkpoint yet */
  snprintf(args, sizeof args, "create c %s", plain_fields);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  snprintf(args, sizeof args, "fetch c -o %s", keep);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 1);
  ck_assert_str_eq((slurp(keep, buf, sizeof buf), buf), "precious\n");
  /* a good fetch, then a failed one over it (an id that does not exist) */
  ck_assert_int_eq(run_ctl(&d, "save c", out, sizeof out), 0);
  snprintf(good, sizeof good, "%s/good.dqnd", d.dir);
  snprintf(copy, sizeof copy, "%s/copy.dqnd", d.dir);
  snprintf(args, sizeof args, "fetch c -o %s", good);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  snprintf(args, sizeof args, "cp %s %s", good, copy);
  ck_assert_int_eq(system(args), 0);
  snprintf(args, sizeof args, "fetch c --checkpoint 99 -o %s", good);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 1);
  ck_assert_msg(strstr(out, "NOT_FOUND") && strstr(out, "'99' not found"), "%s", out);
  snprintf(args, sizeof args, "cmp -s %s %s", good, copy);
  ck_assert_msg(system(args) == 0, "a failed fetch changed %s", good);
  /* through a symlink: the file it names gets the checkpoint, the link stays;
   * the new file has 0666 less the umask (0022 here), like any file a tool writes */
  char link[400], target[400];
  snprintf(target, sizeof target, "%s/target.dqnd", d.dir);
  snprintf(link, sizeof link, "%s/link.dqnd", d.dir);
  ck_assert_int_eq(symlink(target, link), 0);
  snprintf(args, sizeof args, "umask 022; '%s' --url '%s' fetch c -o %s >/dev/null", dqnctl_bin, d.url, link);
  ck_assert_int_eq(system(args), 0);
  struct stat lst, tst;
  ck_assert_int_eq(lstat(link, &lst), 0);
  ck_assert(S_ISLNK(lst.st_mode));
  ck_assert_int_eq(stat(target, &tst), 0);
  ck_assert_int_eq(tst.st_mode & 0777, 0644);
  snprintf(args, sizeof args, "cmp -s %s %s", target, copy);
  ck_assert_msg(system(args) == 0, "the symlink's target is not the checkpoint");
  /* a fetch over an existing file keeps that file's mode (0600 stays 0600,
   * whatever the umask); a new file under umask 077 is 0600 */
  ck_assert_int_eq(chmod(target, 0600), 0);
  snprintf(args, sizeof args, "umask 022; '%s' --url '%s' fetch c -o %s >/dev/null", dqnctl_bin, d.url, target);
  ck_assert_int_eq(system(args), 0);
  ck_assert_int_eq(stat(target, &tst), 0);
  ck_assert_int_eq(tst.st_mode & 0777, 0600);
  /* --json with a path that is not UTF-8: the fetch is done, the JSON cannot
   * hold the path: said on stderr, exit 4 (it printed nothing and exited 0) */
  snprintf(args, sizeof args, "fetch c -o '%s/\xff.dqnd' --json", d.dir);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "the JSON output could not be made") && strstr(out, "not UTF-8"), "%s", out);
  snprintf(args, sizeof args, "inspect '%s/\xff.dqnd' --json", d.dir);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "is not UTF-8: JSON cannot hold it"), "%s", out);
  char fresh[420];
  snprintf(fresh, sizeof fresh, "%s/fresh.dqnd", d.dir);
  snprintf(args, sizeof args, "umask 077; '%s' --url '%s' fetch c -o %s >/dev/null", dqnctl_bin, d.url, fresh);
  ck_assert_int_eq(system(args), 0);
  ck_assert_int_eq(stat(fresh, &tst), 0);
  ck_assert_int_eq(tst.st_mode & 0777, 0600);
  /* into a stream (a FIFO, not a regular file): written straight through */
  char full[4000];
  snprintf(full, sizeof full,
           "cd '%s' && mkfifo pipe && (cat pipe > piped.dqnd &) && '%s' --url '%s' fetch c -o pipe >/dev/null && "
           "sleep 0.2 && cmp -s piped.dqnd '%s'",
           d.dir, dqnctl_bin, d.url, copy);
  ck_assert_msg(system(full) == 0, "fetch into a FIFO differs from the file");
  /* into a directory that cannot take it: nothing is created, nothing left */
  snprintf(args, sizeof args, "fetch c -o %s/no/such/dir/x.dqnd", d.dir);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 4);
  /* no temporary file is left beside the target */
  snprintf(args, sizeof args, "ls -A %s | grep -q part", d.dir);
  ck_assert_msg(system(args) != 0, "a .part file was left in %s", d.dir);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* -------------------------------------------------------------------- act */

START_TEST(test_act_returns_q_values) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[65536], args[3000], p[5][400], err[256];
  snprintf(args, sizeof args, "create c %s", plain_fields);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  batch_t b;
  make_batch(&b, 40, 3);
  write_batch(&d, &b, "b", p);
  ck_assert_int_eq(submit_files(&d, "c", p, out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "step c 20", out, sizeof out), 0);
  /* the oracle: libdqnd's own Act reply for the same states */
  enum { N = 5, W = 7 };
  float q[N * W];
  int32_t acts[N];
  dqnd_client_t *c = connect_to(&d);
  ck_assert_int_eq(dqnd_act(c, "c", b.s, N, S_DIM, 0, acts, q, N * W), 0);
  /* stats and --json stats name every field of LEARNER_STATS_FIELDS, with
   * libdqnd's values */
  learner_stats_t st;
  ck_assert_int_eq(dqnd_get_stats(c, "c", &st), 0);
  dqnd_close(c);
  char stj[4096], stt[4096];
  ck_assert_int_eq(run_ctl(&d, "--json stats c", stj, sizeof stj), 0);
  ck_assert_int_eq(run_ctl(&d, "stats c", stt, sizeof stt), 0);
  json_error_t sje;
  json_t *js = json_loads(stj, 0, &sje);
  ck_assert_msg(js && st.step == 20, "%s", stj);
#define CHECK_STAT(type, name, kind)                                                                              \
  ck_assert_msg(json_number_value(json_object_get(js, #name)) == (double)st.name, #name ": %s", stj);             \
  ck_assert_msg(strstr(stt, " " #name " "), #name ": %s", stt);
  LEARNER_STATS_FIELDS(CHECK_STAT)
#undef CHECK_STAT
  json_decref(js);
  char sp[400], qp[400], ap[400];
  snprintf(sp, sizeof sp, "%s/five.npy", d.dir);
  snprintf(qp, sizeof qp, "%s/q.npy", d.dir);
  snprintf(ap, sizeof ap, "%s/a.npy", d.dir);
  int64_t shp[2] = {N, S_DIM};
  ck_assert_int_eq(npy_write(sp, NPY_F4, 2, shp, b.s, err, sizeof err), 0);
  snprintf(args, sizeof args, "act c --states %s --q-out %s -o %s", sp, qp, ap);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  npy_array_t qa, aa;
  ck_assert_int_eq(npy_read(qp, &qa, err, sizeof err), 0);
  ck_assert_int_eq(npy_read(ap, &aa, err, sizeof err), 0);
  ck_assert_int_eq(qa.dtype, NPY_F4);
  ck_assert_int_eq(qa.ndim, 3);
  ck_assert(qa.shape[0] == N && qa.shape[1] == 2 && qa.shape[2] == 4);
  const float *qf = qa.data;
  const int32_t *af = aa.data;
  const int sizes[2] = {3, 4}, offs[2] = {0, 3};
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(af[i], acts[i]);
    int best[2];
    for (int br = 0; br < 2; br++) {
      best[br] = 0;
      for (int k = 0; k < 4; k++) {
        float v = qf[(i * 2 + br) * 4 + k];
        if (k >= sizes[br]) {
          ck_assert_msg(isnan(v), "q[%d][%d][%d] = %g: padding must be NaN", i, br, k, v);
          continue;
        }
        ck_assert_msg(memcmp(&v, &q[i * W + offs[br] + k], 4) == 0, "q[%d][%d][%d]: %g, libdqnd %g", i, br, k, v,
                      q[i * W + offs[br] + k]);
        if (v > qf[(i * 2 + br) * 4 + best[br]]) best[br] = k;
      }
    }
    ck_assert_int_eq(acts[i], best[0] * 4 + best[1]); /* first branch most significant */
  }
  npy_free(&qa), npy_free(&aa);
  /* --json carries them per branch, unpadded */
  snprintf(args, sizeof args, "--json act c --states %s --q", sp);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  ck_assert_msg(j != NULL, "%s", out);
  json_t *jq = json_object_get(j, "q");
  ck_assert_int_eq(json_array_size(jq), N);
  for (int i = 0; i < N; i++)
    for (int br = 0; br < 2; br++) {
      json_t *row = json_array_get(json_array_get(jq, (size_t)i), (size_t)br);
      ck_assert_int_eq(json_array_size(row), sizes[br]);
      for (int k = 0; k < sizes[br]; k++)
        ck_assert(fabs(json_real_value(json_array_get(row, (size_t)k)) - q[i * W + offs[br] + k]) <= 1e-6);
    }
  json_decref(j);
  /* --q in text: the values follow each action */
  snprintf(args, sizeof args, "act c --states %s --q", sp);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "q: ") && strstr(out, " | "), "%s", out);
  /* --noisy on a trainer without NoisyNet layers says so */
  snprintf(args, sizeof args, "act c --states %s --noisy", sp);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 1);
  ck_assert_msg(strstr(out, "noisy: trainer 'c' has no NoisyNet layers"), "%s", out);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* -------------------------------------------------------- strict arguments */

START_TEST(test_no_argument_ignored) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[8192];
  static const struct {
    const char *args, *needle;
  } bad[] = {
      {"create t lr 0.0005", "did you mean lr=0.0005?"},
      {"create t batch=128 --backend", "--backend needs a value"},
      {"create t lrr=0.1", "lrr: unknown config field (did you mean 'lr'?)"},
      {"create t lr=0.1 lr=0.2", "lr: given twice"},
      {"create t lr=abc", "lr: 'abc' is not a valid number"},
      {"create t batch=0", "batch: 0 is outside [1, 65536]"},
      {"create t --bakend cpu", "unknown option '--bakend' (did you mean --backend?)"},
      {"create t extra words", "unexpected argument 'extra': fields are name=value"},
      {"create", "needs NAME"},
      {"set t lr 0.0002", "did you mean lr=0.0002?"},
      {"set t batch=8", "batch: fixed when the trainer is created"},
      {"set t", "needs at least one field=value"},
      {"sync t --tau abc", "--tau: 'abc' is not a number"},
      {"sync t --tau 2", "--tau: 2 is outside [0, 1]"},
      {"step t", "needs NAME N"},
      {"step t 10x", "N: '10x' is not an integer"},
      {"step t 5 6", "unexpected argument '6'"},
      {"save t --with-replay=1", "--with-replay takes no value"},
      {"fetch t", "-o FILE is required"},
      {"stepp t 1", "unknown command 'stepp' (did you mean step?)"},
      {"demo --iterations 0", "--iterations: 0 is outside"},
      {"--timeout soon health", "--timeout: 'soon' is not an integer"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = run_ctl(&d, bad[i].args, out, sizeof out);
    ck_assert_msg(rc == 2, "'dqnctl %s' exited %d, expected 2 (usage): %s", bad[i].args, rc, out);
    ck_assert_msg(strstr(out, bad[i].needle), "'dqnctl %s': '%s' lacks '%s'", bad[i].args, out, bad[i].needle);
  }
  ck_assert_int_eq(n_trainers(&d), 0); /* none of them reached the daemon as a create */
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* ------------------------------------------------------------------- demo */

START_TEST(test_demo_never_replaces_a_trainer) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[65536];
  /* someone's trainer named demo, trained to step 30 */
  dqnd_client_t *c = connect_to(&d);
  ck_assert_int_eq(dqnd_create_trainer(c, "demo", small_fields, N_SMALL, NULL, NULL), 0);
  batch_t b;
  make_batch(&b, 64, 1);
  ck_assert_int_eq(submit(c, "demo", &b), 0);
  learner_stats_t before, after;
  ck_assert_int_eq(dqnd_step(c, "demo", 30, &before), 0);
  /* the default name moves on to a free one */
  int rc = run_ctl(&d, "demo --iterations 1", out, sizeof out);
  ck_assert_msg(rc == 0 || rc == 5, "demo: %d: %s", rc, out); /* 5: one round learns too little */
  ck_assert_msg(strstr(out, "new trainer 'demo-2'"), "%s", out);
  ck_assert_int_eq(dqnd_get_stats(c, "demo", &after), 0);
  ck_assert_int_eq(after.step, 30);
  ck_assert_int_eq(after.replay_total, before.replay_total);
  ck_assert_int_eq(dqnd_get_stats(c, "demo-2", &after), 0);
  ck_assert_int_gt(after.replay_total, 0);
  /* an explicit name that exists is refused, and left alone */
  ck_assert_int_eq(run_ctl(&d, "demo --name demo --iterations 1", out, sizeof out), 1);
  ck_assert_msg(strstr(out, "trainer 'demo' already exists"), "%s", out);
  ck_assert_int_eq(dqnd_get_stats(c, "demo", &after), 0);
  ck_assert_int_eq(after.step, 30);
  ck_assert_int_eq(after.replay_total, before.replay_total);
  /* deep sea: a new trainer of its shapes, the share of episodes that reach the reward */
  ck_assert_int_eq(run_ctl(&d, "demo --env deepsea --size 5 --episodes 200", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "deepsea N=5") && strstr(out, "episodes    200  reached the reward in"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "demo --env deepsea --iterations 3", out, sizeof out), 2);
  ck_assert_int_eq(run_ctl(&d, "demo --env nope", out, sizeof out), 2);
  ck_assert_msg(strstr(out, "--env: 'nope' is not one of meanrev deepsea bitflip"), "%s", out);
  /* an option of another environment is refused, naming whose it is */
  ck_assert_int_eq(run_ctl(&d, "demo --bits 3", out, sizeof out), 2);
  ck_assert_msg(strstr(out, "--bits is for --env bitflip, not meanrev"), "%s", out);
  /* bit flipping with HER through the daemon (episode ends travel in SubmitTransitions) */
  ck_assert_int_eq(run_ctl(&d, "demo --name flips --env bitflip --bits 4 --episodes 100 batch=32", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "bitflip n=4 (HER: future, ratio 0.8)") && strstr(out, "episodes    100  reached the goal in"),
                "%s", out);
  dqnd_trainer_info_t ti;
  ck_assert_int_eq(dqnd_trainer_info(c, "flips", &ti), 0);
  ck_assert_int_eq(ti.state_dim, 8);
  ck_assert_int_eq(run_ctl(&d, "demo --env bitflip --bits 1", out, sizeof out), 2);
  ck_assert_int_eq(run_ctl(&d, "demo --env bitflip --bits 4 her_goal_dim=5", out, sizeof out), 2); /* checked before any request */
  ck_assert_msg(strstr(out, "her_goal_dim"), "%s", out);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* ----------------------------------------------- checkpoints and inspect */

START_TEST(test_checkpoints_and_inspect) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[65536], args[3000], p[5][400];
  snprintf(args, sizeof args, "create c %s", plain_fields);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  batch_t b;
  make_batch(&b, 40, 4);
  write_batch(&d, &b, "b", p);
  ck_assert_int_eq(submit_files(&d, "c", p, out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "checkpoints c", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "no checkpoints yet"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "step c 3", out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "save c", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "checkpoint 1 (ckpt-00000001-000000000003-"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "step c 4", out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "save c --with-replay", out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "--json checkpoints c", out, sizeof out), 0);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  ck_assert_msg(j && json_array_size(j) == 2, "%s", out);
  for (int i = 0; i < 2; i++) {
    json_t *e = json_array_get(j, (size_t)i);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "seq")), i + 1);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "step")), i ? 7 : 3);
    ck_assert_int_gt(json_integer_value(json_object_get(e, "bytes")), 1000);
    ck_assert_msg(strlen(json_string_value(json_object_get(e, "time"))) == 20, "%s", out); /* 2026-12-01 02:03:04Z */
  }
  json_decref(j);
  ck_assert_int_eq(run_ctl(&d, "checkpoints c", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "ckpt-00000002-000000000007-"), "%s", out);
  /* the short id as printed, in fetch; the right file comes back */
  char f1[400];
  snprintf(f1, sizeof f1, "%s/one.dqnd", d.dir);
  snprintf(args, sizeof args, "fetch c --checkpoint 1 -o %s", f1);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  learner_t *l;
  char err[256];
  ck_assert_int_eq(load_file(f1, &l, err, sizeof err), 0);
  learner_stats_t st;
  learner_get_stats(l, &st);
  ck_assert_int_eq(st.step, 3);
  learner_destroy(l);
  /* inspect: header, config, sections; every check passes */
  char f2[400];
  snprintf(f2, sizeof f2, "%s/two.dqnd", d.dir);
  snprintf(args, sizeof args, "fetch c --checkpoint 2 -o %s", f2);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  snprintf(args, sizeof args, "inspect %s", f2);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "format version 1, flags 0x1 (with replay)") && strstr(out, "matches the config") &&
                    strstr(out, "branches=3,4") && strstr(out, "replay priorities") && strstr(out, "every check passed"),
                "%s", out);
  snprintf(args, sizeof args, "--json inspect %s", f1);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  j = json_loads(out, 0, &je);
  ck_assert_msg(j != NULL, "%s", out);
  ck_assert(json_is_false(json_object_get(j, "with_replay")));
  ck_assert(json_is_true(json_object_get(j, "config_hash_ok")));
  json_decref(j);
  /* a flipped byte inside the online parameters: inspect names the section */
  FILE *f = fopen(f2, "r+b");
  fseek(f, 2000, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, 2000, SEEK_SET);
  fputc(ch ^ 0x10, f);
  fclose(f);
  snprintf(args, sizeof args, "inspect %s", f2);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "BAD") && strstr(out, "fails its CRC32C check"), "%s", out);
  /* destroy --save prints where the final checkpoint went, and it is there */
  ck_assert_int_eq(run_ctl(&d, "--json destroy c --save", out, sizeof out), 0);
  j = json_loads(out, 0, &je);
  ck_assert_msg(j != NULL, "%s", out);
  const char *path = json_string_value(json_object_get(json_object_get(j, "checkpoint"), "path"));
  ck_assert_msg(path && strstr(path, "/.retired/c-") && access(path, R_OK) == 0, "%s", out);
  ck_assert_int_eq(load_file(path, &l, err, sizeof err), 0);
  learner_get_stats(l, &st);
  ck_assert_int_eq(st.step, 7);
  learner_destroy(l);
  json_decref(j);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* ------------------------------------------------------- submit's formats */

START_TEST(test_submit_formats) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[65536], args[3000], p[5][400], q[5][400], err[256];
  for (int k = 0; k < 2; k++) {
    snprintf(args, sizeof args, "create %s %s", k ? "flat" : "per", plain_fields);
    ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  }
  batch_t b;
  make_batch(&b, 50, 6);
  write_batch(&d, &b, "b", p);
  /* per-branch indices [n, 2] encode to the flat actions (first branch most significant) */
  memcpy(q, p, sizeof q);
  snprintf(q[2], sizeof q[2], "%s/per.a.npy", d.dir);
  int32_t per[50 * 2];
  for (int i = 0; i < 50; i++) per[2 * i] = b.a[i] / 4, per[2 * i + 1] = b.a[i] % 4;
  int64_t s2[2] = {50, 2};
  ck_assert_int_eq(npy_write(q[2], NPY_I4, 2, s2, per, err, sizeof err), 0);
  ck_assert_int_eq(submit_files(&d, "flat", p, out, sizeof out), 0);
  ck_assert_int_eq(submit_files(&d, "per", q, out, sizeof out), 0);
  dqnd_client_t *c = connect_to(&d);
  learner_stats_t x, y;
  ck_assert_int_eq(dqnd_step(c, "flat", 10, &x), 0);
  ck_assert_int_eq(dqnd_step(c, "per", 10, &y), 0);
  ck_assert(memcmp(&x.loss_mean, &y.loss_mean, 4) == 0 && memcmp(&x.q_mean, &y.q_mean, 4) == 0);
  dqnd_close(c);
  /* shape and dtype errors name the file and what it has: exit 4, nothing stored */
  char bad[400];
  snprintf(bad, sizeof bad, "%s/bad.npy", d.dir);
  int64_t s3[2] = {50, 3};
  float zeros[50 * 8] = {0};
  ck_assert_int_eq(npy_write(bad, NPY_I4, 2, s3, zeros, err, sizeof err), 0);
  memcpy(q, p, sizeof q);
  snprintf(q[2], sizeof q[2], "%s", bad);
  ck_assert_int_eq(submit_files(&d, "flat", q, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "bad.npy: shape (50, 3), expected (50,) flat joint actions, or (50, 2) per-branch"), "%s",
                out);
  int64_t s5[2] = {50, 5};
  ck_assert_int_eq(npy_write(bad, NPY_F4, 2, s5, zeros, err, sizeof err), 0);
  memcpy(q, p, sizeof q);
  snprintf(q[0], sizeof q[0], "%s", bad);
  ck_assert_int_eq(submit_files(&d, "flat", q, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "bad.npy: shape (50, 5), expected (n, 6): trainer 'flat' has state_dim 6"), "%s", out);
  int64_t s49[1] = {49};
  ck_assert_int_eq(npy_write(bad, NPY_F4, 1, s49, zeros, err, sizeof err), 0);
  memcpy(q, p, sizeof q);
  snprintf(q[3], sizeof q[3], "%s", bad);
  ck_assert_int_eq(submit_files(&d, "flat", q, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "bad.npy: shape (49,), expected (50,)"), "%s", out);
  /* a dtype the reader does not take: float16, named as NumPy writes it */
  FILE *f = fopen(bad, "wb");
  const char hdr[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f2', 'fortran_order': False, 'shape': (50,), }";
  fwrite(hdr, 1, sizeof hdr - 1, f);
  for (size_t i = sizeof hdr - 1; i < 127; i++) fputc(' ', f); /* 10 + 118 header bytes, the last a newline */
  fputc('\n', f);
  for (int i = 0; i < 100; i++) fputc(0, f);
  fclose(f);
  ck_assert_int_eq(submit_files(&d, "flat", q, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "bad.npy: dtype '<f2' is not supported"), "%s", out);
  /* a done flag that is not 0 or 1 */
  float dn[50];
  for (int i = 0; i < 50; i++) dn[i] = i == 7 ? 0.5f : 0.0f;
  int64_t s50[1] = {50};
  ck_assert_int_eq(npy_write(bad, NPY_F4, 1, s50, dn, err, sizeof err), 0);
  memcpy(q, p, sizeof q);
  snprintf(q[4], sizeof q[4], "%s", bad);
  ck_assert_int_eq(submit_files(&d, "flat", q, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "bad.npy[7]: 0.5 is not 0 or 1"), "%s", out);
  c = connect_to(&d);
  ck_assert_int_eq(dqnd_get_stats(c, "flat", &x), 0);
  ck_assert_int_eq(x.replay_total, 50); /* none of the bad submits stored anything */
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* ---------------------------------------------------- help, version, fields */

/* a .npy file of header dict (padded as NumPy pads it) and two float64s:
 * npy_read's code, err its message, *a read when 0 */
static int npy_of_dict(const char *path, const char *dict, npy_array_t *a, char *err, size_t errlen) {
  char hdr[128];
  int w = snprintf(hdr, sizeof hdr, "%s", dict);
  while ((10 + w + 1) % 64) hdr[w++] = ' ';
  hdr[w++] = '\n';
  FILE *f = fopen(path, "wb");
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(w & 0xff), (unsigned char)(w >> 8)};
  double data[2] = {1.5, -2.5};
  ck_assert(f && fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)w, f) == (size_t)w &&
            fwrite(data, 8, 2, f) == 2 && fclose(f) == 0);
  err[0] = 0;
  return npy_read(path, a, err, errlen);
}

/* A .npy header whose shape claims more elements than the file holds
 * (2^62 float64s: count x 8 wrapped around to a small allocation that the
 * read and the conversions wrote past) is refused as truncated; the same
 * header with its data whole reads. */
START_TEST(test_npy_shape_beyond_the_file) {
  char path[] = "/tmp/dqnd-npy-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  npy_array_t a;
  char err[256];
  int rc = npy_of_dict(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 1), }", &a, err,
                       sizeof err);
  ck_assert_msg(rc != 0 && strstr(err, "truncated"), "rc %d: %s", rc, err);
  rc = npy_of_dict(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1), }", &a, err, sizeof err);
  ck_assert_msg(rc == 0, "%s", err);
  ck_assert(a.count == 2 && ((double *)a.data)[1] == -2.5);
  npy_free(&a);
  /* Fortran order refused wherever the key stands, the last one too (NumPy
   * reads such a header; the check looked for a ',' after it) */
  const char *dicts[3] = {"{'descr': '<f8', 'shape': (2, 1), 'fortran_order': True}",
                          "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 1), }",
                          "{'descr': '<f8', 'shape': (2, 1), 'fortran_order': False}"};
  for (int k = 0; k < 3; k++) {
    rc = npy_of_dict(path, dicts[k], &a, err, sizeof err);
    if (k < 2) {
      ck_assert_msg(rc != 0 && strstr(err, "Fortran-order arrays are not supported"), "%s: rc %d: %s", dicts[k], rc, err);
    } else {
      ck_assert_msg(rc == 0, "%s", err);
      npy_free(&a);
    }
  }
  unlink(path);
}
END_TEST

START_TEST(test_help_version_fields) {
  daemon_t d = {0};
  snprintf(d.url, sizeof d.url, "ipc:///nonexistent/dqnd.sock"); /* none of these needs the daemon */
  char out[65536];
  ck_assert_int_eq(run_ctl(&d, "--help", out, sizeof out), 0);
  ck_assert_msg(!strstr(out, "%%") && strstr(out, "below 90% of") && strstr(out, "default 60000 ms"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "--version", out, sizeof out), 0);
  ck_assert_msg(!strncmp(out, "dqnctl 0.", 9) && strstr(out, "(protocol 1)"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "submit --help", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "first branch most significant") && strstr(out, "[n, state_dim]") &&
                    strstr(out, "float32") && strstr(out, "per-branch indices"),
                "%s", out);
  ck_assert_int_eq(run_ctl(&d, "help act", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "--q-out Q.npy"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "fields", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "[2, 256]") && strstr(out, "any time") && strstr(out, "create"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "--json fields", out, sizeof out), 0);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  ck_assert_msg(j && json_array_size(j) == (size_t)learner_num_fields, "%s", out);
  for (size_t i = 0; i < json_array_size(j); i++) {
    json_t *e = json_array_get(j, i);
    const learner_field_t *f = learner_field_find(json_string_value(json_object_get(e, "name")));
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(json_is_true(json_object_get(e, "changeable")), f->hparam);
    ck_assert(json_real_value(json_object_get(e, "min")) == f->min);
  }
  json_decref(j);
  /* an unreachable daemon is exit 3, saying so */
  ck_assert_int_eq(run_ctl(&d, "--timeout 300 health", out, sizeof out), 3);
  ck_assert_msg(strstr(out, "is dqnd running?"), "%s", out);
}
END_TEST

/* ------------------------------------------------------------ populations */

/* create --population, the global --member on submit, set and stats (and
 * refused elsewhere), and copy-member, against libdqnd's view of each member */
START_TEST(test_population_commands) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[8192], args[3000], p[5][400];
  snprintf(args, sizeof args, "create pop --population 3 %s", plain_fields);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "pop: created (a population of 3)"), "%s", out);
  batch_t b;
  make_batch(&b, 30, 4);
  write_batch(&d, &b, "m", p);
  snprintf(args, sizeof args, "--member 1 submit pop --states %s --next-states %s --actions %s --rewards %s --dones %s",
           p[0], p[1], p[2], p[3], p[4]);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "set pop lr=0.02 --member 2", out, sizeof out), 0);
  dqnd_client_t *c = connect_to(&d);
  dqnd_trainer_info_t ti;
  for (uint32_t m = 0; m < 3; m++) {
    dqnd_use_member(c, m);
    ck_assert_int_eq(dqnd_trainer_info(c, "pop", &ti), 0);
    ck_assert_int_eq(ti.population, 3);
    ck_assert_int_eq(ti.member, (int)m);
    ck_assert_int_eq((int)ti.stats.replay_size, m == 1 ? 30 : 0);
  }
  /* member 0 takes member 1's replay, and half member 2's lr: read back through --json stats and libdqnd */
  ck_assert_int_eq(run_ctl(&d, "copy-member pop 0 1 --with-replay", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "member 0 copied from member 1 with its replay, 0 hyperparameters scaled"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "--json --member 0 stats pop", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "\"replay_size\": 30"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "copy-member pop 1 2 lr=0.5", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "member 1 copied from member 2, 1 hyperparameter scaled"), "%s", out);
  dqnd_use_member(c, 1); /* its own replay kept */
  ck_assert_int_eq(dqnd_trainer_info(c, "pop", &ti), 0);
  ck_assert_int_eq((int)ti.stats.replay_size, 30);
  /* --member is refused where nothing reads it, and a member the trainer
   * lacks before a step runs, not after; sync --tau 0 says it is the hard copy */
  ck_assert_int_eq(run_ctl(&d, "--member 2 destroy pop", out, sizeof out), 2);
  ck_assert_msg(strstr(out, "--member: destroy does not take a member"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "--member 5 step pop 3", out, sizeof out), 1);
  ck_assert_msg(strstr(out, "member: 5 is outside [0, 3)"), "%s", out);
  ck_assert_int_eq(dqnd_trainer_info(c, "pop", &ti), 0);
  ck_assert_int_eq((int)ti.stats.step, 0);
  ck_assert_int_eq(run_ctl(&d, "sync pop --tau 0", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "pop: target = online (hard copy)"), "%s", out);
  /* inspect walks every member of a population's checkpoint */
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "pop", 1, &ck), 0);
  dqnd_close(c);
  snprintf(args, sizeof args, "inspect %s", ck.path);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "a population of 3 members") && strstr(out, "member 2, at byte ") &&
                    strstr(out, "every check passed"),
                "%s", out);
  snprintf(args, sizeof args, "--json inspect %s", ck.path);
  char *big = malloc(1 << 18);
  ck_assert_int_eq(run_ctl(&d, args, big, 1 << 18), 0);
  json_error_t je;
  json_t *js = json_loads(big, 0, &je);
  ck_assert_msg(js && json_integer_value(json_object_get(js, "population")) == 3 &&
                    json_array_size(json_object_get(js, "members")) == 3,
                "%.300s", big);
  free(big);
  json_decref(js);
  size_t fn;
  char *fb = read_file(ck.path, &fn), bad[500];
  ck_assert_ptr_nonnull(fb);
  fb[fn / 2] ^= 1; /* in member 1's sections */
  snprintf(bad, sizeof bad, "%s/bad-pop.dqnd", d.dir);
  FILE *bf = fopen(bad, "wb");
  ck_assert_int_eq((int)fwrite(fb, 1, fn, bf), (int)fn);
  fclose(bf);
  free(fb);
  snprintf(args, sizeof args, "inspect %s", bad);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 4);
  ck_assert_msg(strstr(out, "BAD") && strstr(out, "member "), "%s", out);
  /* one member's state: fetched (--member 2) it is member 2's bytes of the
   * population's checkpoint; loaded into member 0 (--member 0 load --file),
   * member 0 acts as member 2 does */
  {
    char m2[500];
    snprintf(m2, sizeof m2, "%s/m2.dqnd", d.dir);
    snprintf(args, sizeof args, "--member 2 fetch pop --checkpoint %s -o %s", ck.id, m2);
    ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
    size_t pn, mn;
    char *pb = read_file(ck.path, &pn), *mb = read_file(m2, &mn);
    ck_assert_ptr_nonnull(pb);
    ck_assert_ptr_nonnull(mb);
    ck_assert_msg(mn < pn && memmem(pb, pn, mb, mn) && !memcmp(mb, "DQNDLRN", 8), "member 2's %zu bytes", mn);
    free(pb), free(mb);
    snprintf(args, sizeof args, "--member 0 load pop --file %s", m2);
    ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
    dqnd_client_t *c2 = connect_to(&d);
    float st[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f}, q0[64] = {0}, q2[64] = {0};
    int32_t a0, a2;
    dqnd_use_member(c2, 0);
    ck_assert_int_eq(dqnd_act(c2, "pop", st, 1, 6, 0, &a0, q0, 64), 0);
    dqnd_use_member(c2, 2);
    ck_assert_int_eq(dqnd_act(c2, "pop", st, 1, 6, 0, &a2, q2, 64), 0);
    ck_assert_int_eq(a0, a2);
    ck_assert_int_eq(memcmp(q0, q2, sizeof q0), 0);
    dqnd_close(c2);
  }
  /* refusals: a bad member, factor or population */
  ck_assert_int_eq(run_ctl(&d, "--member 3 stats pop", out, sizeof out), 1);
  ck_assert_msg(strstr(out, "member: 3 is outside [0, 3)"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "copy-member pop 1 2 n_step=2", out, sizeof out), 2);
  ck_assert_msg(strstr(out, "n_step: not a float hyperparameter"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "copy-member pop 1 1", out, sizeof out), 1);
  ck_assert_msg(strstr(out, "dst: 1 is src too"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "create q --population 1025", out, sizeof out), 2);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* dqnctl pretrain (issue 30): text and --json, counted on by libdqnd's own
 * PretrainDT after; a trainer without a DT and N 0 refused */
START_TEST(test_pretrain_command) {
  daemon_t d = {0};
  start_daemon(&d);
  char out[8192], args[3000], p[5][400];
  snprintf(args, sizeof args, "create dt --backend cpu %s dt_layers=1 dt_context=3 dt_embed=8 dt_heads=2 dt_batch=4 "
                              "dt_max_ep_len=10", plain_fields);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  snprintf(args, sizeof args, "create plain %s", plain_fields);
  ck_assert_int_eq(run_ctl(&d, args, out, sizeof out), 0);
  batch_t b;
  make_batch(&b, 40, 2); /* an episode ends every 5th transition */
  write_batch(&d, &b, "dt", p);
  ck_assert_int_eq(submit_files(&d, "dt", p, out, sizeof out), 0);
  ck_assert_int_eq(run_ctl(&d, "pretrain dt 10", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "dt: dt step 10 (+10)  loss ") && strstr(out, "tokens/s"), "%s", out);
  ck_assert_int_eq(run_ctl(&d, "--json pretrain dt 5", out, sizeof out), 0);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  ck_assert_msg(j && json_integer_value(json_object_get(j, "dt_step")) == 15 &&
                    json_integer_value(json_object_get(j, "steps_run")) == 5 &&
                    json_real_value(json_object_get(j, "loss_mean")) > 0 && !json_is_true(json_object_get(j, "stopped")),
                "%s", out);
  json_decref(j);
  dqnd_client_t *c = connect_to(&d);
  learner_dt_stats_t st;
  double tps = 0;
  ck_assert_int_eq(dqnd_pretrain_dt(c, "dt", 1, &st, &tps), 0);
  ck_assert_int_eq((int)st.dt_step, 16);
  ck_assert(tps > 0);
  dqnd_close(c);
  ck_assert_int_ne(run_ctl(&d, "pretrain plain 3", out, sizeof out), 0);
  ck_assert_msg(strstr(out, "FAILED_PRECONDITION") && strstr(out, "trainer 'plain' has no Decision Transformer"), "%s",
                out);
  ck_assert_int_eq(run_ctl(&d, "pretrain dt 0", out, sizeof out), 2);
  ck_assert_msg(strstr(out, "N: 0 is outside [1, 1000000]"), "%s", out);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
}
END_TEST

int main(void) {
  harness_init();
  Suite *s = suite_create("cli");
  TCase *tc = tcase_create("integration");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_fetch_never_destroys_a_file);
  tcase_add_test(tc, test_act_returns_q_values);
  tcase_add_test(tc, test_no_argument_ignored);
  tcase_add_test(tc, test_demo_never_replaces_a_trainer);
  tcase_add_test(tc, test_checkpoints_and_inspect);
  tcase_add_test(tc, test_submit_formats);
  tcase_add_test(tc, test_help_version_fields);
  tcase_add_test(tc, test_npy_shape_beyond_the_file);
  tcase_add_test(tc, test_population_commands);
  tcase_add_test(tc, test_pretrain_command);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
