/*
 * test-adamw.c — AdamW (kernels/cpu/optim.c) against closed forms:
 * decoupled decay (g = 0, theta0 = 1, lr 0.1, wd 0.1 -> 0.99), a constant
 * gradient (bias-corrected moments equal g and g^2 exactly, so each step
 * moves lr * g / (|g| + eps')), an independent double-precision re-derivation
 * over k steps of varying gradients, the clip factor, and target updates.
 */
#include <check.h>
#include <math.h>

#include "optim.h"
#include "testutil.h"

START_TEST(test_decoupled_decay) {
  float p = 1, g = 0, m = 0, v = 0;
  adamw_update(&p, &g, &m, &v, 1, 1.0f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  ck_assert_msg(fabsf(p - 0.99f) < 1e-7f, "theta1 = %.9g", p);
}
END_TEST

START_TEST(test_constant_gradient) {
  /* with g constant, m_t/(1-b1^t) = g and v_t/(1-b2^t) = g^2 for every t */
  float p = 2, g = 0.5f, m = 0, v = 0, lr = 0.01f, eps = 1e-8f;
  for (int t = 1; t <= 50; t++) adamw_update(&p, &g, &m, &v, 1, 1.0f, lr, 0.9f, 0.999f, eps, 0, (uint64_t)t);
  double want = 2 - 50 * 0.01 * 0.5 / (0.5 + 1e-8);
  ck_assert_msg(fabs(p - want) < 1e-5, "theta50 = %.9g, expected %.9g", p, want);
}
END_TEST

START_TEST(test_against_double_rederivation) {
  enum { N = 7, K = 25 };
  float p[N], m[N] = {0}, v[N] = {0}, g[N];
  double pd[N], md[N] = {0}, vd[N] = {0};
  const double lr = 3e-3, b1 = 0.85, b2 = 0.99, eps = 1e-6, wd = 0.05, scale = 0.7;
  for (int i = 0; i < N; i++) p[i] = (float)(pd[i] = 0.3 * i - 1);
  for (int t = 1; t <= K; t++) {
    for (int i = 0; i < N; i++) g[i] = (float)sin(1.7 * t + i);
    adamw_update(p, g, m, v, N, (float)scale, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, (uint64_t)t);
    for (int i = 0; i < N; i++) {
      double gi = scale * (double)g[i];
      pd[i] *= 1 - lr * wd;
      md[i] = b1 * md[i] + (1 - b1) * gi;
      vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
      double mh = md[i] / (1 - pow(b1, t)), vh = vd[i] / (1 - pow(b2, t));
      pd[i] -= lr * mh / (sqrt(vh) + eps);
    }
  }
  for (int i = 0; i < N; i++) ck_assert_msg(fabs(p[i] - pd[i]) < 1e-6, "param %d: %.9g vs %.9g", i, p[i], pd[i]);
}
END_TEST

START_TEST(test_clip_and_norm) {
  float g[4] = {3, 4, 0, 0};
  ck_assert(fabs(grad_norm(g, 4) - 5) < 1e-12);
  ck_assert(grad_clip_scale(5, 10) == 1.0f);
  ck_assert(fabsf(grad_clip_scale(5, 1) - 1.0f / (5 + 1e-6f)) < 1e-7f);
  ck_assert(grad_clip_scale(5, 0) == 1.0f);
}
END_TEST

START_TEST(test_target_updates) {
  float t[3] = {1, 2, 3}, o[3] = {3, 2, 1};
  target_update(t, o, 3, 0.25f);
  ck_assert(t[0] == 1.5f && t[1] == 2.0f && t[2] == 2.5f);
  target_update(t, o, 3, 1.0f);
  ck_assert(t[0] == 3 && t[1] == 2 && t[2] == 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("adamw");
  TCase *tc = tcase_create("closed-form");
  tcase_add_test(tc, test_decoupled_decay);
  tcase_add_test(tc, test_constant_gradient);
  tcase_add_test(tc, test_against_double_rederivation);
  tcase_add_test(tc, test_clip_and_norm);
  tcase_add_test(tc, test_target_updates);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
