/*
 * test-gpu-everything.c — every feature on at once on the CUDA backend
 * (issue 31 item 2; docs/testing.md): attention (4 tokens, 2 heads), K = 3
 * head sets with priors, HER (future, ratio 0.3), 3-step returns, PER,
 * NoisyNet and a Decision Transformer handed to trunk1, on odd shapes
 * (state 13, branches 4,7, 21 atoms, batch 37), trained on episodes of 1-16
 * steps (tests/feed.h; they may cross submits):
 *  - lockstep with the CPU (the oracle): 40 DT pre-training steps (each
 *    call's mean loss within 1e-5), then 100 DQN steps, more episodes
 *    submitted at step 50, each step's loss within 1e-5 and the parameters
 *    after within 1e-4 (test-gpu-learner.c's bounds for the odd shapes with
 *    the ensemble or attention; measured on the H200: 3.0e-7 and 4.4e-6,
 *    the hand-over starting the two trunks 1.1e-8 apart, kernels/dev/
 *    DEVICE_NOTES.md item 84), unless PER's sampling parts as
 *    test-gpu-learner.c describes (not before step 20, then each step
 *    within 10% and the parameters within 0.1);
 *  - two GPU runs of the same pipeline bit-identical (DQN, target and DT
 *    parameters), a run with the next seed not;
 *  - a population of 4 such members on CUDA: each pre-trains and trains on
 *    its own episodes, every loss finite, and member 2 is bit-identical to
 *    a lone CUDA trainer of its seed fed the same.
 * Exits 77 with no usable GPU.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "feed.h"
#include "gpu_testutil.h"
#include "learner.h"
#include "learner_impl.h"
#include "population.h"
#include "state_format.h"
#include "testutil.h"

static learner_config_t all_config(void) {
  learner_config_t c;
  learner_config_default(&c);
  const char *f[][2] = {{"state_dim", "13"},     {"trunk_h1", "40"},       {"trunk_h2", "24"},
                        {"value_hidden", "10"},  {"adv_hidden", "18"},     {"atoms", "21"},
                        {"branches", "4,7"},     {"batch", "37"},          {"replay_capacity", "700"},
                        {"prioritized", "1"},    {"noisy", "1"},           {"seed", "11"},
                        {"lr", "0.001"},         {"target_period", "25"},  {"attn_tokens", "4"},
                        {"attn_heads", "2"},     {"ensemble_k", "3"},      {"ensemble_prior_scale", "1"},
                        {"her_goal_dim", "4"},   {"her_ratio", "0.3"},     {"her_strategy", "future"},
                        {"n_step", "3"},         {"dt_layers", "1"},       {"dt_context", "4"},
                        {"dt_embed", "40"},      {"dt_heads", "2"},        {"dt_max_ep_len", "17"},
                        {"dt_batch", "8"},       {"dt_rtg_scale", "4"},    {"dt_lr", "0.003"},
                        {"dt_warmup", "5"},      {"dt_handover", "trunk1"}};
  char err[256];
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    ck_assert_msg(learner_config_set(&c, f[i][0], f[i][1], err, sizeof err) == 0, "%s", err);
  return c;
}

static const int CHUNKS[] = {37, 200, 1, 150, 313}, MORE[] = {5, 400, 11};

static learner_t *make(const learner_config_t *c, learner_backend_t be) {
  learner_t *l;
  char err[256];
  ck_assert_msg(learner_create(c, be, &l, err, sizeof err) == 0, "%s", err);
  tu_feed_episodes(l, CHUNKS, 5, 1); /* 701 transitions: the ring (700) wraps */
  return l;
}

static float *section(learner_t *l, int sec) {
  const int64_t n = learner_section_bytes(l, sec);
  float *p = malloc((size_t)n);
  ck_assert_int_eq(learner_section_read(l, sec, 0, n, p), 0);
  return p;
}

/* relative L2 distance of section sec (floats) between a and b */
static double sec_err(learner_t *a, learner_t *b, int sec) {
  const int64_t n = learner_section_bytes(a, sec) / (int64_t)sizeof(float);
  float *x = section(a, sec), *y = section(b, sec);
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]), den += (double)y[i] * y[i];
  free(x), free(y);
  return sqrt(num / den);
}

static int sec_same(learner_t *a, learner_t *b, int sec) {
  const int64_t n = learner_section_bytes(a, sec);
  float *x = section(a, sec), *y = section(b, sec);
  const int same = n == learner_section_bytes(b, sec) && memcmp(x, y, (size_t)n) == 0;
  free(x), free(y);
  return same;
}

static double rel(double a, double b) { return fabs(a - b) / fabs(a); }

START_TEST(test_lockstep) {
  learner_config_t c = all_config();
  learner_t *l[2] = {make(&c, LEARNER_BACKEND_CPU), make(&c, LEARNER_BACKEND_CUDA)};
  char err[256];
  ck_assert_msg(sec_err(l[0], l[1], SEC_ONLINE) == 0, "initial weights differ");
  for (int k = 0; k < 4; k++) {
    learner_dt_stats_t s[2];
    for (int b = 0; b < 2; b++)
      ck_assert_msg(learner_pretrain_dt(l[b], 10, NULL, &s[b], err, sizeof err) == 0, "%s: %s", b ? "cuda" : "cpu",
                    err);
    ck_assert_msg(isfinite(s[1].loss_mean) && rel(s[0].loss_mean, s[1].loss_mean) <= 1e-5,
                  "DT call %d: loss cpu %.8g cuda %.8g", k, s[0].loss_mean, s[1].loss_mean);
    ck_assert_msg(s[0].handed_over && s[1].handed_over, "DT call %d: not handed over", k);
    if (k == 0) printf("everything: DT loss %.6f (cpu) %.6f (cuda) at the first call\n", s[0].loss_mean, s[1].loss_mean);
  }
  const double dt_drift = sec_err(l[0], l[1], SEC_DT_PARAMS), trunk = sec_err(l[0], l[1], SEC_ONLINE);
  double worst = 0;
  int diverged = -1;
  for (int k = 0; k < 100; k++) {
    if (k == 50)
      for (int b = 0; b < 2; b++) tu_feed_episodes(l[b], MORE, 3, 2);
    learner_stats_t s[2];
    for (int b = 0; b < 2; b++)
      ck_assert_msg(learner_step(l[b], 1, &s[b], err, sizeof err) == 0, "%s step %d: %s", b ? "cuda" : "cpu", k, err);
    ck_assert_msg(isfinite(s[1].loss_last) && isfinite(s[1].grad_norm_last) && isfinite(s[1].q_mean),
                  "step %d: GPU stats not finite", k);
    const double e = rel(s[0].loss_last, s[1].loss_last);
    if (diverged < 0 && k >= 20 && e > 1e-5 && e <= 2.0 / c.batch) diverged = k; /* PER, as test-gpu-learner.c */
    if (diverged >= 0) {
      ck_assert_msg(e <= 0.1, "step %d (after PER divergence at %d): cpu %.8g gpu %.8g", k, diverged, s[0].loss_last,
                    s[1].loss_last);
      continue;
    }
    worst = e > worst ? e : worst;
    ck_assert_msg(e <= 1e-5, "step %d: loss cpu %.8g gpu %.8g (rel %.3g)", k, s[0].loss_last, s[1].loss_last, e);
  }
  const double pe = sec_err(l[0], l[1], SEC_ONLINE), te = sec_err(l[0], l[1], SEC_TARGET);
  printf("everything: DT params %.2e apart after 40 steps, online %.2e after the hand-over; 100 DQN steps: worst "
         "step-loss rel diff %.2e%s, params %.2e, target %.2e\n",
         dt_drift, trunk, worst, diverged >= 0 ? " (until PER sampling parted)" : "", pe, te);
  /* (a divergence before step 20 failed above: e > 1e-5 there) after one, the
   * parameters are held to sanity as in test-gpu-learner.c */
  const double bound = diverged >= 0 ? 0.1 : 1e-4;
  ck_assert_msg(pe <= bound && te <= bound, "parameters %.3g, target %.3g apart after 100 steps", pe, te);
  learner_destroy(l[0]), learner_destroy(l[1]);
}
END_TEST

/* the pipeline of test_lockstep on one learner: 2 x 10 DT steps, 60 DQN
 * steps with more episodes at 30 */
static void pipeline(learner_t *l, const char *what) {
  char err[256];
  learner_dt_stats_t d;
  learner_stats_t s;
  for (int k = 0; k < 2; k++)
    ck_assert_msg(learner_pretrain_dt(l, 10, NULL, &d, err, sizeof err) == 0, "%s: %s", what, err);
  ck_assert_msg(learner_step(l, 30, &s, err, sizeof err) == 0, "%s: %s", what, err);
  tu_feed_episodes(l, MORE, 3, 2);
  ck_assert_msg(learner_step(l, 30, &s, err, sizeof err) == 0, "%s: %s", what, err);
  ck_assert_msg(isfinite(s.loss_mean) && isfinite(d.loss_mean), "%s: loss not finite", what);
}

START_TEST(test_reruns) {
  learner_config_t c = all_config();
  learner_t *a = make(&c, LEARNER_BACKEND_CUDA), *b = make(&c, LEARNER_BACKEND_CUDA);
  c.seed += 1;
  learner_t *o = make(&c, LEARNER_BACKEND_CUDA);
  pipeline(a, "run 1"), pipeline(b, "run 2"), pipeline(o, "next seed");
  ck_assert_msg(sec_same(a, b, SEC_ONLINE) && sec_same(a, b, SEC_TARGET), "two GPU runs differ in the DQN's parameters");
  ck_assert_msg(sec_same(a, b, SEC_DT_PARAMS), "two GPU runs differ in the DT's parameters");
  ck_assert_msg(!sec_same(a, o, SEC_ONLINE), "the next seed gives the same bits");
  learner_destroy(a), learner_destroy(b), learner_destroy(o);
}
END_TEST

START_TEST(test_population) {
  learner_config_t c = all_config();
  learner_pop_t *p;
  char err[256];
  ck_assert_msg(learner_pop_create(&c, 4, NULL, LEARNER_BACKEND_CUDA, &p, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < 4; i++) tu_feed_episodes(learner_pop_member(p, i), CHUNKS, 5, 10 + (uint64_t)i);
  learner_dt_stats_t d[4];
  learner_stats_t s[4];
  ck_assert_msg(learner_pop_pretrain_dt(p, 20, NULL, d, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_pop_step_until(p, 40, NULL, s, NULL, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < 4; i++)
    ck_assert_msg(isfinite(d[i].loss_mean) && isfinite(s[i].loss_mean) && s[i].steps_run == 40,
                  "member %d: DT loss %g, loss %g, %d steps", i, d[i].loss_mean, s[i].loss_mean, s[i].steps_run);
  ck_assert_msg(s[0].loss_mean != s[1].loss_mean, "members 0 and 1 trained alike on different data");
  learner_config_t c2 = c;
  c2.seed = c.seed + 2;
  learner_t *lone;
  ck_assert_msg(learner_create(&c2, LEARNER_BACKEND_CUDA, &lone, err, sizeof err) == 0, "%s", err);
  tu_feed_episodes(lone, CHUNKS, 5, 12);
  learner_dt_stats_t dl;
  learner_stats_t sl;
  ck_assert_msg(learner_pretrain_dt(lone, 20, NULL, &dl, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_step(lone, 40, &sl, err, sizeof err) == 0, "%s", err);
  learner_t *m2 = learner_pop_member(p, 2);
  ck_assert_msg(sl.loss_mean == s[2].loss_mean && dl.loss_mean == d[2].loss_mean,
                "member 2: loss %.9g / DT %.9g, alone %.9g / %.9g", s[2].loss_mean, d[2].loss_mean, sl.loss_mean,
                dl.loss_mean);
  ck_assert_msg(sec_same(m2, lone, SEC_ONLINE) && sec_same(m2, lone, SEC_DT_PARAMS),
                "member 2 differs from its lone twin");
  printf("everything: a population of 4 on CUDA, member 2 bit-identical to its lone twin (loss %.6f)\n",
         s[2].loss_mean);
  learner_destroy(lone);
  learner_pop_destroy(p);
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-everything");
  TCase *tc = tcase_create("everything");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_lockstep);
  tcase_add_test(tc, test_reruns);
  tcase_add_test(tc, test_population);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
