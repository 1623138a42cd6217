/*
 * test-hparams.c — integration: commands that change how a trainer trains,
 * checked by their effect against an independent oracle rather than by a
 * status code. SyncTarget: the target equals the online net bit for bit after
 * a hard sync, and moves by tau towards it after a Polyak one (read back
 * through a fetched checkpoint). SetHyperparams: the next step equals a local
 * learner given the same new values, and the trainer's info shows them.
 * Continuous training (samples_per_insert): the exact number of steps owed.
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "net_layout.h"
#include "testutil.h"

/* ------------------------------------- SyncTarget and SetHyperparams work */

/* the daemon's trainer parameters, through a checkpoint fetched and loaded here */
static float *remote_params(dqnd_client_t *c, daemon_t *d, const char *name, int which, int64_t *n) {
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, name, 0, &ck), 0);
  char local[400], err[256];
  snprintf(local, sizeof local, "%s/params.dqnd", d->dir);
  ck_assert_int_eq(dqnd_fetch_checkpoint(c, name, ck.id, local, 0, NULL), 0);
  learner_t *l;
  ck_assert_msg(load_file(local, &l, err, sizeof err) == 0, "%s", err);
  *n = learner_config_num_params(learner_config(l));
  float *p = malloc(sizeof(float) * (size_t)*n);
  ck_assert_int_eq(learner_get_params(l, which, p, *n), 0);
  learner_destroy(l);
  return p;
}

START_TEST(test_sync_and_hparams_take_effect) {
  daemon_t d = {0};
  /* SyncTarget: after a hard sync the target equals the online net, bit for
   * bit; Polyak moves it by tau towards the online net */
  batch_t b;
  dqnd_client_t *c = start_with_trainer(&d, "e", &b, 5);
  ck_assert_int_eq(dqnd_step(c, "e", 5, NULL), 0);
  int64_t n;
  float *on = remote_params(c, &d, "e", 0, &n), *tg = remote_params(c, &d, "e", 1, &n);
  ck_assert_msg(memcmp(on, tg, sizeof(float) * (size_t)n) != 0, "precondition: target already equals online");
  ck_assert_int_eq(dqnd_sync_target(c, "e", 0), 0);
  float *tg2 = remote_params(c, &d, "e", 1, &n);
  ck_assert_msg(memcmp(on, tg2, sizeof(float) * (size_t)n) == 0, "hard sync: target != online");
  ck_assert_int_eq(dqnd_step(c, "e", 3, NULL), 0);
  float *on3 = remote_params(c, &d, "e", 0, &n), *tg3 = remote_params(c, &d, "e", 1, &n);
  ck_assert_int_eq(dqnd_sync_target(c, "e", 0.25f), 0);
  float *tg4 = remote_params(c, &d, "e", 1, &n);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double want = 0.25 * on3[i] + 0.75 * tg3[i], e = fabs(tg4[i] - want) / (fabs(want) + 1e-6);
    if (e > worst) worst = e;
  }
  ck_assert_msg(worst < 1e-5, "Polyak sync: worst relative error %g", worst);
  free(on), free(tg), free(tg2), free(on3), free(tg3), free(tg4);

  /* SetHyperparams: the next step uses the new lr and gamma, set by two
   * commands (the second combines with the first, not with the creation
   * values). Oracle: a learner here, same config and data, given the same lr
   * and gamma; a control keeps the old ones. */
  ck_assert_int_eq(dqnd_create_trainer(c, "h", small_fields, N_SMALL, NULL, NULL), 0);
  ck_assert_int_eq(submit(c, "h", &b), 0);
  ck_assert_int_eq(dqnd_step(c, "h", 4, NULL), 0);
  const char *lr[] = {"lr=0.0002"}, *gamma[] = {"gamma=0.95"};
  ck_assert_int_eq(dqnd_set_hparams(c, "h", lr, 1), 0);
  ck_assert_int_eq(dqnd_set_hparams(c, "h", gamma, 1), 0);
  { /* the trainer's info shows the values it now trains with, not those it was created with */
    Dqnd__V1__GetStats gs = DQND__V1__GET_STATS__INIT;
    gs.name = "h";
    Dqnd__V1__Request rq = DQND__V1__REQUEST__INIT;
    rq.command_case = DQND__V1__REQUEST__COMMAND_GET_STATS;
    rq.get_stats = &gs;
    Dqnd__V1__Reply *rp;
    ck_assert_int_eq(dqnd_call(c, &rq, &rp), 0);
    int found = 0;
    for (size_t i = 0; i < rp->trainer->n_config; i++) {
      const Dqnd__V1__Field *f = rp->trainer->config[i];
      if (!strcmp(f->name, "lr")) {
        found++;
        ck_assert_str_eq(f->value, "0.000199999995"); /* float32 0.0002 */
      }
      if (!strcmp(f->name, "gamma")) {
        found++;
        ck_assert_str_eq(f->value, "0.949999988"); /* float32 0.95, as the canonical text writes it */
      }
    }
    ck_assert_int_eq(found, 2);
    dqnd_reply_free(rp);
  }
  learner_stats_t rs;
  ck_assert_int_eq(dqnd_step(c, "h", 1, &rs), 0);
  float *rp = remote_params(c, &d, "h", 0, &n);
  learner_config_t cfg;
  learner_config_default(&cfg);
  char err[256];
  for (int i = 0; i < N_SMALL; i++) {
    char k[64];
    const char *eq = strchr(small_fields[i], '=');
    snprintf(k, sizeof k, "%.*s", (int)(eq - small_fields[i]), small_fields[i]);
    ck_assert_int_eq(learner_config_set(&cfg, k, eq + 1, err, sizeof err), 0);
  }
  float *lp[2];
  for (int v = 0; v < 2; v++) {
    learner_t *l;
    ck_assert_int_eq(learner_create(&cfg, LEARNER_BACKEND_CPU, &l, err, sizeof err), 0);
    learner_transitions_t t = {b.n, b.s, b.a, b.r, b.s2, b.d, b.ep, NULL};
    ck_assert_int_eq(learner_submit(l, &t, err, sizeof err), 0);
    ck_assert_int_eq(learner_step(l, 4, NULL, err, sizeof err), 0);
    if (v == 0) {
      learner_hparams_t hp;
      learner_get_hparams(l, &hp);
      hp.lr = 0.0002f;
      hp.gamma = 0.95f;
      ck_assert_int_eq(learner_set_hparams(l, &hp, err, sizeof err), 0);
    }
    learner_stats_t ls;
    ck_assert_int_eq(learner_step(l, 1, &ls, err, sizeof err), 0);
    if (v == 0) ck_assert(memcmp(&ls.loss_last, &rs.loss_last, 4) == 0);
    lp[v] = malloc(sizeof(float) * (size_t)n);
    ck_assert_int_eq(learner_get_params(l, 0, lp[v], n), 0);
    learner_destroy(l);
  }
  ck_assert_msg(memcmp(rp, lp[0], sizeof(float) * (size_t)n) == 0,
                "the step after SetHyperparams differs from lr=0.0002 gamma=0.95");
  ck_assert_msg(memcmp(rp, lp[1], sizeof(float) * (size_t)n) != 0, "the step after SetHyperparams used the old values");
  free(rp), free(lp[0]), free(lp[1]);
  /* a checkpoint file with bytes after its end section is refused, not half-read */
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "h", 0, &ck), 0);
  char padded[600], cmd[3000];
  snprintf(padded, sizeof padded, "%s/padded.dqnd", d.state);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s' && printf x >> '%s'", ck.path, padded, padded);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(dqnd_load_checkpoint_path(c, "h2", padded, 1, NULL), 15);
  ck_assert_msg(strstr(dqnd_last_error(c), "bytes after its end section"), "%s", dqnd_last_error(c));
  ck_assert_int_eq(dqnd_load_checkpoint_path(c, "h2", ck.path, 1, NULL), 0); /* the file itself loads */
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* ------------------------------------------------- continuous training */

/* the smallest trainer (state_dim 1, two actions, batch 1) with fields
 * `more` besides, and three transitions submitted to it (one terminal) */
static const float tiny_s[3] = {0.1f, 0.2f, 0.3f}, tiny_r[3] = {1, 0, 1};
static const uint8_t tiny_d[3] = {0, 0, 1};
static const int32_t tiny_a[3] = {0, 1, 0};
static const learner_transitions_t tiny_tr = {3, tiny_s, tiny_a, tiny_r, tiny_s, tiny_d, NULL, NULL};

static void tiny_trainer(dqnd_client_t *c, const char *name, const char *m1, const char *m2, const char *m3) {
  const char *f[] = {"state_dim=1", "trunk_h1=2", "trunk_h2=2", "value_hidden=2", "adv_hidden=2", "atoms=2",
                     "branches=2", "batch=1", m1, m2, m3};
  ck_assert_msg(dqnd_create_trainer(c, name, f, 11, NULL, NULL) == 0, "%s", dqnd_last_error(c));
  ck_assert_int_eq(dqnd_submit(c, name, 1, &tiny_tr, NULL), 0);
}

START_TEST(test_continuous_training) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  const char *f[N_SMALL + 2];
  for (int i = 0; i < N_SMALL; i++) f[i] = small_fields[i];
  f[N_SMALL] = "samples_per_insert=2";
  f[N_SMALL + 1] = "min_replay=50";
  ck_assert_int_eq(dqnd_create_trainer(c, "stream", f, N_SMALL + 2, NULL, NULL), 0);
  batch_t b;
  for (int k = 0; k < 10; k++) {
    make_batch(&b, 30, (uint64_t)(k + 1));
    ck_assert_int_eq(submit(c, "stream", &b), 0);
  }
  /* from the 2nd submit on (replay 60 >= 50): 2 x 30 / batch 8 = 7.5 steps a
   * submit, fractions carried: floor(9 x 7.5) = 67 */
  learner_stats_t st;
  ck_assert_int_eq(dqnd_get_stats(c, "stream", &st), 0);
  ck_assert_int_eq(st.step, 67);
  ck_assert_int_eq(st.replay_size, 300);
  /* off again: submits only insert */
  const char *off[] = {"samples_per_insert=0"};
  ck_assert_int_eq(dqnd_set_hparams(c, "stream", off, 1), 0);
  ck_assert_int_eq(submit(c, "stream", &b), 0);
  ck_assert_int_eq(dqnd_get_stats(c, "stream", &st), 0);
  ck_assert_int_eq(st.step, 67);
  /* a backlog past one learner_step call's limit (1e6 steps): those run, the
   * rest is dropped (it was cast to an int that overflowed) */
  tiny_trainer(c, "owed", "replay_capacity=100", "min_replay=1", "samples_per_insert=1e6"); /* 1e6 x 3 / 1 owed */
  ck_assert_int_eq(dqnd_get_stats(c, "owed", &st), 0);
  ck_assert_int_eq(st.step, 1000000);
  ck_assert_msg(log_has(&d, "continuous training: 2000000 owed steps dropped"), "the log says what was dropped");
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST


/* the parameters of checkpoint `path` (a file on this machine), malloc'd */
static float *ckpt_params(const char *path, int64_t *n, uint64_t *step) {
  learner_t *l;
  char err[512];
  ck_assert_msg(load_file(path, &l, err, sizeof err) == 0, "%s: %s", path, err);
  net_layout_t L;
  net_layout_init(&L, learner_config(l));
  *n = L.n_params;
  learner_stats_t st;
  learner_get_stats(l, &st);
  *step = st.step;
  float *p = malloc(sizeof(float) * (size_t)*n);
  ck_assert_int_eq(learner_get_params(l, 0, p, *n), 0);
  ck_assert_int_eq(learner_params_finite(l), 1);
  learner_destroy(l);
  return p;
}

/* An absurd learning rate and weight decay (x -99 per step) drive the
 * parameters up until the forward overflows: that step is refused, the
 * trainer stops training with FAILED_PRECONDITION naming the step, and its
 * state — saved at once — is exactly a twin's after the steps before it. */
START_TEST(test_divergence) {
  daemon_t d = {0};
  batch_t b;
  dqnd_client_t *c = start_with_trainer(&d, "wild", &b, 7);
  ck_assert_int_eq(dqnd_create_trainer(c, "twin", small_fields, N_SMALL, NULL, NULL), 0);
  ck_assert_int_eq(submit(c, "twin", &b), 0);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_step(c, "wild", 5, &st), 0);
  dqnd_checkpoint_t early;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "wild", 0, &early), 0);
  const char *absurd[] = {"lr=10", "weight_decay=10"};
  ck_assert_int_eq(dqnd_set_hparams(c, "wild", absurd, 2), 0);
  int rc = dqnd_step(c, "wild", 1000, &st);
  ck_assert_msg(rc == 9, "Step with an absurd lr: %s (%s)", dqnd_strerror(rc), dqnd_last_error(c));
  const char *msg = dqnd_last_error(c);
  ck_assert_msg(strstr(msg, "diverged") && strstr(msg, "saved as checkpoint"), "%s", msg);
  unsigned long long bad = 0;
  ck_assert_msg(sscanf(strstr(msg, "step "), "step %llu diverged", &bad) == 1, "%s", msg);
  /* x (1 - lr wd) = x -99 a step from step 6 on: the forward of step 11
   * overflows, whatever order the GEMMs sum in (measured under every OpenBLAS
   * kernel set the test machine can run) */
  ck_assert_msg(bad == 11, "diverged at step %llu, not 11", bad);
  /* stopped: training commands answer FAILED_PRECONDITION; reads still work */
  ck_assert_int_eq(dqnd_step(c, "wild", 1, &st), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "stopped training"), "%s", dqnd_last_error(c));
  ck_assert_int_eq(submit(c, "wild", &b), 9);
  /* Act reads the kept state, whose forward overflows: no action chosen among NaNs, with or without Q */
  int32_t acts[2];
  float q[2 * 7];
  rc = dqnd_act(c, "wild", b.s, 2, S_DIM, 0, acts, q, 14);
  ck_assert_msg(rc == 9 && strstr(dqnd_last_error(c), "Q values are not finite"), "Act with Q: %s (%s)",
                dqnd_strerror(rc), dqnd_last_error(c));
  rc = dqnd_act(c, "wild", b.s, 2, S_DIM, 0, acts, NULL, 0);
  ck_assert_msg(rc == 9 && strstr(dqnd_last_error(c), "Q values are not finite"), "Act: %s (%s)", dqnd_strerror(rc),
                dqnd_last_error(c));
  dqnd_trainer_info_t ti;
  ck_assert_int_eq(dqnd_trainer_info(c, "wild", &ti), 0);
  ck_assert_msg(strstr(ti.state, "diverged"), "%s", ti.state);
  ck_assert_int_eq((long long)ti.stats.step, (long long)bad - 1);
  dqnd_checkpoint_t *cks;
  int nck;
  ck_assert_int_eq(dqnd_list_checkpoints(c, "wild", &cks, &nck), 0);
  ck_assert_int_ge(nck, 2);
  dqnd_checkpoint_t good = cks[nck - 1];
  free(cks);
  ck_assert_int_eq((long long)good.step, (long long)bad - 1);
  /* the oracle: a twin with the same steps and hyperparameters, stopped just before */
  ck_assert_int_eq(dqnd_step(c, "twin", 5, &st), 0);
  ck_assert_int_eq(dqnd_set_hparams(c, "twin", absurd, 2), 0);
  ck_assert_int_eq(dqnd_step(c, "twin", (int)bad - 6, &st), 0);
  dqnd_checkpoint_t tw;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "twin", 0, &tw), 0);
  int64_t n1, n2;
  uint64_t s1, s2;
  float *p1 = ckpt_params(good.path, &n1, &s1), *p2 = ckpt_params(tw.path, &n2, &s2);
  ck_assert_int_eq(n1, n2);
  ck_assert_int_eq((long long)s1, (long long)bad - 1);
  ck_assert_int_eq((long long)s2, (long long)bad - 1);
  ck_assert_msg(memcmp(p1, p2, sizeof(float) * (size_t)n1) == 0, "the kept state is not the twin's after step %llu",
                bad - 1);
  free(p1), free(p2);
  /* and the whole file, byte for byte: moments, counters, RNG keys, config */
  size_t f1, f2;
  char *b1 = read_file(good.path, &f1), *b2 = read_file(tw.path, &f2);
  ck_assert_msg(b1 && b2, "reading %s and %s", good.path, tw.path);
  ck_assert_msg(f1 == f2 && memcmp(b1, b2, f1) == 0, "the saved file (%zu bytes) differs from the twin's (%zu bytes)",
                f1, f2);
  free(b1), free(b2);
  /* the twin's next step diverges the same way: the guard's verdict is the step's, not luck */
  ck_assert_int_eq(dqnd_step(c, "twin", 1, &st), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "diverged"), "%s", dqnd_last_error(c));
  /* SetHyperparams resumes (this state still overflows: it diverges again at the same step) */
  const char *sane[] = {"lr=0.001", "weight_decay=0"};
  ck_assert_int_eq(dqnd_set_hparams(c, "wild", sane, 2), 0);
  rc = dqnd_step(c, "wild", 1, &st);
  ck_assert_int_eq(rc, 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "diverged"), "%s", dqnd_last_error(c));
  /* LoadCheckpoint replaces it with the early state: training works again */
  ck_assert_msg(dqnd_load_checkpoint_path(c, "wild", early.path, 0, NULL) == 0, "%s", dqnd_last_error(c));
  ck_assert_int_eq(dqnd_set_hparams(c, "wild", sane, 2), 0);
  ck_assert_int_eq(submit(c, "wild", &b), 0); /* that checkpoint has no replay */
  ck_assert_msg(dqnd_step(c, "wild", 3, &st) == 0, "%s", dqnd_last_error(c));
  ck_assert_int_eq((long long)st.step, 8);
  ck_assert_msg(log_has(&d, "training diverged"), "the log says so");
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* A diverged trainer whose kept Adam moments overflowed (its parameters
 * still finite: batch 1, no gradient clip, lr 10, weight decay 10) has no
 * state that loads again: nothing is saved, not at the divergence, nor by
 * SaveCheckpoint, DestroyTrainer's save_final or the final save at shutdown,
 * and the checkpoint from before it is kept and still loads (saving such
 * states pruned the good ones: a review find). */
START_TEST(test_divergence_moments) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  tiny_trainer(c, "adam", "replay_capacity=10", "noisy=0", "grad_clip=0");
  dqnd_checkpoint_t early;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "adam", 0, &early), 0);
  const char *absurd[] = {"lr=10", "weight_decay=10"};
  ck_assert_int_eq(dqnd_set_hparams(c, "adam", absurd, 2), 0);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_step(c, "adam", 200, &st), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "Adam moments are not finite either") &&
                    strstr(dqnd_last_error(c), "nothing was saved"),
                "%s", dqnd_last_error(c));
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "adam", 0, &ck), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "not finite (it diverged), so it was not saved"), "%s", dqnd_last_error(c));
  ck_assert_int_eq(dqnd_destroy_trainer(c, "adam", 1, &ck), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "save_final: state:") && strstr(dqnd_last_error(c), "trainer kept"), "%s",
                dqnd_last_error(c));
  dqnd_checkpoint_t *cks;
  int nck;
  ck_assert_int_eq(dqnd_list_checkpoints(c, "adam", &cks, &nck), 0);
  ck_assert_int_eq(nck, 1);
  ck_assert_str_eq(cks[0].id, early.id);
  free(cks);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0); /* its final save is refused too */
  ck_assert_msg(log_has(&d, "checkpoint not written"), "the log says so");
  /* a restart brings the trainer back from the early checkpoint */
  start_daemon(&d);
  c = connect_to(&d);
  dqnd_trainer_info_t ti;
  ck_assert_int_eq(dqnd_trainer_info(c, "adam", &ti), 0);
  ck_assert_int_eq((long long)ti.stats.step, 0);
  ck_assert_int_eq(dqnd_submit(c, "adam", 1, &tiny_tr, NULL), 0); /* the checkpoint holds no replay */
  ck_assert_msg(dqnd_step(c, "adam", 2, &st) == 0, "%s", dqnd_last_error(c));
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  /* idle, such a trainer is unloaded all the same (it stayed loaded, failing
   * its save at every idle check) */
  start_daemon_args(&d, "--idle-timeout=2", NULL);
  c = connect_to(&d);
  ck_assert_int_eq(dqnd_set_hparams(c, "adam", absurd, 2), 0);
  ck_assert_int_eq(dqnd_submit(c, "adam", 1, &tiny_tr, NULL), 0);
  ck_assert_int_eq(dqnd_step(c, "adam", 200, &st), 9);
  int gone = 0;
  for (int i = 0; i < 100 && !gone; i++) {
    usleep(100000);
    gone = trainers_loaded(c) == 0;
  }
  ck_assert_msg(gone, "the diverged trainer was not unloaded");
  ck_assert_msg(log_has(&d, "unloaded with no new checkpoint"), "the log says so");
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

int main(void) {
  harness_init();
  Suite *s = suite_create("hparams");
  TCase *tc = tcase_create("integration");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_sync_and_hparams_take_effect);
  tcase_add_test(tc, test_continuous_training);
  tcase_add_test(tc, test_divergence);
  tcase_add_test(tc, test_divergence_moments);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
