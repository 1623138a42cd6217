/*
 * test-sumtree.c — prioritised replay (kernels/cpu/replay.c) against closed
 * forms: sampling frequencies P(i) = p_i^alpha / sum p^alpha by a chi-square
 * test over 100k draws, alpha = 0 is uniform, IS weights at beta = 1, 0.7,
 * 0.4 and 0 against a double-precision brute force of the definition
 * w_i = (N P(i))^-beta / max_j (N P(j))^-beta (max over the buffer),
 * new items at the max priority, the tree's sums and minima against brute
 * force after many random updates, uniform sampling frequencies, the ring's
 * overwrite order, and beta annealing.
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "backend.h"
#include "replay.h"
#include "testutil.h"

static void fill(replay_t *rp, int n) {
  static int counter; /* s[0] of each new item: 0, 1, 2, ... across calls */
  float s[64] = {0};
  int32_t a = 0;
  float r = 0;
  uint8_t d = 0;
  for (int i = 0; i < n; i++) {
    s[0] = (float)counter++;
    (void)i;
    learner_transitions_t t = {1, s, &a, &r, s, &d, NULL, NULL};
    replay_add(rp, &t);
  }
}

/* chi-square of counts against probabilities; df = n - 1 */
static double chi2(const int64_t *cnt, const double *p, int n, int64_t draws) {
  double x = 0;
  for (int i = 0; i < n; i++) {
    double e = p[i] * (double)draws;
    x += (cnt[i] - e) * (cnt[i] - e) / e;
  }
  return x;
}

static void frequencies(replay_t *rp, int n, int64_t draws, int64_t *cnt) {
  memset(cnt, 0, sizeof(int64_t) * (size_t)n);
  for (int64_t k = 0; k < draws; k++) {
    int64_t idx;
    float w;
    replay_sample(rp, 77, (uint64_t)k, 1, 1.0f, &idx, &w); /* B = 1: independent draws */
    ck_assert(idx >= 0 && idx < n);
    cnt[idx]++;
  }
}

/* Four items with priorities 1,2,3,4 under exponent alpha: 100k independent
 * draws must match p within the chi-square bound (3 dof, p = 0.001 -> 16.27). */
static void priorities_1234(replay_t *rp, float alpha, const double *p) {
  ck_assert_int_eq(replay_init(rp, 4, 1, 1, alpha), 0);
  fill(rp, 4);
  int64_t idx[4] = {0, 1, 2, 3};
  float pr[4] = {1, 2, 3, 4};
  replay_update_priorities(rp, idx, pr, 4);
  int64_t cnt[4];
  frequencies(rp, 4, 100000, cnt);
  double x = chi2(cnt, p, 4, 100000);
  ck_assert_msg(x < 16.27, "alpha %g: chi2 %.2f counts %lld %lld %lld %lld", alpha, x, (long long)cnt[0],
                (long long)cnt[1], (long long)cnt[2], (long long)cnt[3]);
}

START_TEST(test_alpha1_frequencies) {
  replay_t rp;
  priorities_1234(&rp, 1.0f, (double[]){.1, .2, .3, .4});
  /* IS weights with beta = 1: (p_min / p_i); every index must be drawn */
  double want[4] = {1, .5, 1.0 / 3, .25};
  int seen[4] = {0};
  for (uint64_t k = 0; k < 400; k++) {
    int64_t j;
    float w;
    replay_sample(&rp, 5, k, 1, 1.0f, &j, &w);
    ck_assert_msg(fabs(w - want[j]) < 1e-6, "w[%lld] = %.7g", (long long)j, w);
    seen[j] = 1;
  }
  ck_assert(seen[0] && seen[1] && seen[2] && seen[3]);
  replay_free(&rp);
}
END_TEST

/* IS weights for beta < 1 (and 0) against a brute-force oracle in double from
 * the priorities themselves, not from the tree: P(i) = p_i^alpha / sum_j p_j^alpha
 * over the N items in the buffer, w_i = (N P(i))^-beta normalised by the
 * largest w_j over the whole buffer (replay.h: "max weight over the buffer
 * normalised to 1"; it equals (leaf_min / leaf_i)^beta) -- not over the
 * batch: with B = 1 a batch normalisation would give 1 every time. Draws
 * with B = 1 over many steps reach every item (asserted), and B = 8
 * stratified batches must give the same per-item weights. Tolerance: 1e-6 relative (float leaves, powf and one
 * division: a few ulp); dropping ^beta is off by tens of percent. */
static void is_weights_case(int cap, int n, const float *prio, float alpha, float beta) {
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, cap, 1, 1, alpha), 0);
  fill(&rp, n);
  ck_assert_int_eq(rp.size, n);
  int64_t idx[16];
  for (int i = 0; i < n; i++) idx[i] = i;
  replay_update_priorities(&rp, idx, prio, n);

  double pa[16], sum = 0, want[16], wmax = 0;
  for (int i = 0; i < n; i++) sum += pa[i] = pow((double)prio[i], (double)alpha);
  for (int i = 0; i < n; i++) {
    double P = pa[i] / sum;
    want[i] = pow((double)n * P, -(double)beta);
    if (want[i] > wmax) wmax = want[i];
  }
  double wmin = 1;
  for (int i = 0; i < n; i++) {
    want[i] /= wmax;
    if (want[i] < wmin) wmin = want[i];
  }
  /* the case discriminates: for beta > 0 the weights spread well below 1, so
   * a constant 1 (batch normalisation, beta ignored as 0) cannot match */
  if (beta > 0) ck_assert_msg(wmin < 0.5, "beta %g: oracle weights only reach down to %g", beta, wmin);

  int seen[16] = {0};
  for (uint64_t k = 0; k < 4000; k++) {
    int64_t j;
    float w;
    replay_sample(&rp, 11, k, 1, beta, &j, &w);
    ck_assert(j >= 0 && j < n);
    if (beta == 0.0f)
      ck_assert_msg(w == 1.0f, "beta 0: w[%lld] = %.9g, want exactly 1", (long long)j, w);
    ck_assert_msg(fabs(w - want[j]) <= 1e-6 * want[j], "alpha %g beta %g: w[%lld] = %.9g, oracle %.9g", alpha,
                  beta, (long long)j, w, want[j]);
    seen[j]++;
  }
  for (int i = 0; i < n; i++) ck_assert_msg(seen[i] > 0, "item %d never drawn", i);
  for (uint64_t k = 0; k < 200; k++) {
    int64_t j[8];
    float w[8];
    replay_sample(&rp, 12, k, 8, beta, j, w);
    for (int b = 0; b < 8; b++)
      ck_assert_msg(fabs(w[b] - want[j[b]]) <= 1e-6 * want[j[b]], "B=8 beta %g: w[%lld] = %.9g, oracle %.9g", beta,
                    (long long)j[b], w[b], want[j[b]]);
  }
  replay_free(&rp);
}

START_TEST(test_is_weights_beta) {
  /* a partly filled ring (7 of 10, empty leaves in the tree) and a full one;
   * priorities span 400x so the weights spread well below 1 */
  const float p7[7] = {0.05f, 0.3f, 1.0f, 2.5f, 7.0f, 20.0f, 0.8f};
  const float p8[8] = {3.0f, 0.5f, 0.125f, 9.0f, 1.5f, 0.2f, 4.0f, 6.0f};
  const float betas[4] = {0.4f, 0.7f, 1.0f, 0.0f};
  for (int b = 0; b < 4; b++) {
    is_weights_case(10, 7, p7, 0.6f, betas[b]);
    is_weights_case(8, 8, p8, 1.0f, betas[b]);
  }
}
END_TEST

START_TEST(test_alpha0_uniform) {
  replay_t rp;
  priorities_1234(&rp, 0.0f, (double[]){.25, .25, .25, .25});
  replay_free(&rp);
}
END_TEST

START_TEST(test_uniform_replay) {
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, 10, 1, 0, 0.5f), 0);
  fill(&rp, 7);
  int64_t cnt[7] = {0};
  for (uint64_t k = 0; k < 70000; k++) {
    int64_t j[4];
    float w[4];
    replay_sample(&rp, 3, k, 4, 0.4f, j, w);
    for (int i = 0; i < 4; i++) {
      ck_assert(j[i] >= 0 && j[i] < 7 && w[i] == 1.0f);
      cnt[j[i]]++;
    }
  }
  double p[7];
  for (int i = 0; i < 7; i++) p[i] = 1.0 / 7;
  ck_assert(chi2(cnt, p, 7, 280000) < 22.46); /* 6 dof, p = 0.001 */
  replay_free(&rp);
}
END_TEST

START_TEST(test_max_priority_and_ring) {
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, 5, 1, 1, 0.5f), 0);
  fill(&rp, 3);
  float base = rp.s[0];
  for (int i = 0; i < 3; i++) ck_assert(rp.sum[rp.T + i] == 1.0f); /* initial max priority 1 */
  int64_t idx = 1;
  float pr = 16;
  replay_update_priorities(&rp, &idx, &pr, 1);
  ck_assert(rp.sum[rp.T + 1] == 4.0f); /* 16^0.5 */
  fill(&rp, 4);                         /* wraps: 7 items into 5 slots */
  ck_assert_int_eq(rp.size, 5);
  ck_assert_int_eq(rp.head, 2);
  ck_assert(rp.s[0] == base + 5 && rp.s[1] == base + 6 && rp.s[2] == base + 2); /* oldest overwritten first */
  ck_assert(rp.sum[rp.T + 0] == 4.0f && rp.sum[rp.T + 4] == 4.0f);  /* new items get the max */
  replay_free(&rp);
}
END_TEST

/* per_alpha up to 10: leaves that would underflow to 0 or overflow to inf
 * stay in [REPLAY_LEAF_MIN, REPLAY_LEAF_MAX], the sums finite, sampling and
 * the weights defined (a saved state with a 0 or infinite leaf is refused) */
START_TEST(test_leaf_clamp) {
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, 4, 1, 1, 10.0f), 0);
  fill(&rp, 4);
  int64_t idx[4] = {0, 1, 2, 3};
  float pr[4] = {1e-12f, 1e5f, 0.5f, 1e-6f};
  replay_update_priorities(&rp, idx, pr, 4);
  ck_assert(rp.sum[rp.T + 0] == REPLAY_LEAF_MIN && rp.sum[rp.T + 3] == REPLAY_LEAF_MIN); /* 1e-120, 1e-60 */
  ck_assert(rp.sum[rp.T + 1] == REPLAY_LEAF_MAX);                                         /* 1e50 */
  ck_assert(rp.sum[rp.T + 2] == powf(0.5f, 10.0f));
  ck_assert(rp.max_leaf == REPLAY_LEAF_MAX && isfinite(rp.sum[1]));
  int64_t j[4];
  float w[4];
  replay_sample(&rp, 5, 0, 4, 1.0f, j, w);
  for (int i = 0; i < 4; i++) ck_assert(j[i] >= 0 && j[i] < 4 && isfinite(w[i]) && w[i] >= 0 && w[i] <= 1);
  fill(&rp, 1); /* a new item gets the (finite) max */
  ck_assert(rp.sum[rp.T + 0] == REPLAY_LEAF_MAX);
  replay_free(&rp);
}
END_TEST

START_TEST(test_tree_against_brute_force) {
  replay_t rp;
  const int C = 1000;
  ck_assert_int_eq(replay_init(&rp, C, 1, 1, 0.7f), 0);
  fill(&rp, C);
  double u[512];
  for (int round = 0; round < 200; round++) {
    tu_fill_uniform_f64(u, 512, 0, 1, 9, (uint64_t)round);
    int64_t idx[256];
    float pr[256];
    for (int i = 0; i < 256; i++) {
      idx[i] = (int64_t)(u[i] * C);
      pr[i] = (float)(1e-3 + 10 * u[256 + i] * u[256 + i]);
    }
    replay_update_priorities(&rp, idx, pr, 256);
  }
  double s = 0, mn = INFINITY;
  for (int i = 0; i < C; i++) {
    s += rp.sum[rp.T + i];
    mn = fmin(mn, rp.sum[rp.T + i]);
  }
  ck_assert_msg(fabs(rp.sum[1] - s) <= 1e-5 * s, "root %.9g vs brute force %.9g", rp.sum[1], s);
  ck_assert(rp.mn[1] == (float)mn);
  /* every internal node is exactly its children's sum (recomputed, not incremented) */
  for (int64_t k = 1; k < rp.T; k++) ck_assert(rp.sum[k] == rp.sum[2 * k] + rp.sum[2 * k + 1]);
  /* a rebuild from the leaves gives the same bits */
  float root = rp.sum[1];
  replay_rebuild(&rp);
  ck_assert(rp.sum[1] == root);
  /* find: prefix sums map to the right leaves */
  double acc = 0;
  for (int i = 0; i < C; i += 37) {
    acc = 0;
    for (int j = 0; j < i; j++) acc += rp.sum[rp.T + j];
    int64_t f = replay_tree_find(&rp, (float)(acc + 0.5 * rp.sum[rp.T + i]));
    ck_assert_msg(f == i, "find(prefix of %d) = %lld", i, (long long)f);
  }
  replay_free(&rp);
}
END_TEST

START_TEST(test_beta_anneal) {
  ck_assert(replay_beta(0.4f, 100, 0) == 0.4f);
  ck_assert(fabsf(replay_beta(0.4f, 100, 50) - 0.7f) < 1e-6f);
  ck_assert(replay_beta(0.4f, 100, 1000) == 1.0f);
  ck_assert(replay_beta(0.4f, 0, 1000) == 0.4f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sumtree");
  TCase *tc = tcase_create("per");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_alpha1_frequencies);
  tcase_add_test(tc, test_is_weights_beta);
  tcase_add_test(tc, test_alpha0_uniform);
  tcase_add_test(tc, test_uniform_replay);
  tcase_add_test(tc, test_max_priority_and_ring);
  tcase_add_test(tc, test_tree_against_brute_force);
  tcase_add_test(tc, test_beta_anneal);
  tcase_add_test(tc, test_leaf_clamp);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
