/*
 * test-projection.c — the C51 projection (c51_project) against Dopamine's
 * projection test table (dopamine/tests/.../rainbow_agent_test.py) and closed
 * forms: a target exactly on an atom, rewards beyond v_max and v_min,
 * terminal transitions (all mass on the atom nearest r), rows summing to 1.
 */
#include <check.h>
#include <math.h>

#include "dqn_math.h"
#include "testutil.h"

static void expect(const double *got, const double *want, int n, const char *what) {
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) < 1e-12, "%s: atom %d = %.15g, expected %.15g", what, i, got[i], want[i]);
}

START_TEST(test_dopamine_table) {
  /* supports [0,2,4,6,8] weights [.1,.6,.1,.1,.1] onto [4..8] -> [.8,0,.1,0,.1] */
  double tz[5] = {0, 2, 4, 6, 8}, p1[5] = {.1, .6, .1, .1, .1}, out[5];
  c51_project_f64(tz, p1, 5, 4, 8, 5, out);
  expect(out, (double[]){.8, 0, .1, 0, .1}, 5, "dopamine 1");
  /* supports [0,2,4,6,8] weights [.1,.2,.2,.2,.3] onto [0,4,8,12,16] -> [.2,.4,.4,0,0] */
  double p2[5] = {.1, .2, .2, .2, .3};
  c51_project_f64(tz, p2, 5, 0, 16, 5, out);
  expect(out, (double[]){.2, .4, .4, 0, 0}, 5, "dopamine 2");
  /* float instance agrees */
  float tzf[5] = {0, 2, 4, 6, 8}, pf[5] = {.1f, .2f, .2f, .2f, .3f}, of[5];
  c51_project_f32(tzf, pf, 5, 0, 16, 5, of);
  double want[5] = {.2, .4, .4, 0, 0};
  for (int i = 0; i < 5; i++) ck_assert(fabs(of[i] - want[i]) < 1e-6);
}
END_TEST

START_TEST(test_on_atom_and_between) {
  /* support [-10,10], 51 atoms (dz 0.4): 2.0 is atom 30 exactly; 2.1 splits .75/.25 */
  double tz[2] = {2.0, 2.1}, p[2] = {0.5, 0.5}, out[51];
  c51_project_f64(tz, p, 2, -10, 10, 51, out);
  ck_assert(fabs(out[30] - (0.5 + 0.5 * 0.75)) < 1e-12);
  ck_assert(fabs(out[31] - 0.5 * 0.25) < 1e-12);
  double s = 0;
  for (int i = 0; i < 51; i++) s += out[i];
  ck_assert(fabs(s - 1) < 1e-12);
}
END_TEST

START_TEST(test_clamping) {
  /* everything beyond v_max lands on the last atom, below v_min on the first */
  double tz[4] = {25, 10.0000001, -10.5, -1e9}, p[4] = {.1, .2, .3, .4}, out[11];
  c51_project_f64(tz, p, 4, -10, 10, 11, out);
  ck_assert(fabs(out[10] - .3) < 1e-12);
  ck_assert(fabs(out[0] - .7) < 1e-12);
  for (int i = 1; i < 10; i++) ck_assert(out[i] == 0);
}
END_TEST

START_TEST(test_terminal_row) {
  /* a terminal transition: Tz_j = r for every j, so the whole distribution
   * collapses onto r's two neighbouring atoms; with r = 0.3 on [-1,1], 5 atoms
   * (dz 0.5): b = 2.6 -> atom 2 gets 0.4, atom 3 gets 0.6 */
  double tz[5] = {.3, .3, .3, .3, .3}, p[5] = {.3, .1, .2, .25, .15}, out[5];
  c51_project_f64(tz, p, 5, -1, 1, 5, out);
  expect(out, (double[]){0, 0, .4, .6, 0}, 5, "terminal");
}
END_TEST

START_TEST(test_rows_sum_to_one_random) {
  /* many random rewards, gammas, supports: every row sums to 1 and is >= 0 */
  for (int t = 0; t < 2000; t++) {
    int Z = 2 + t % 60;
    double vmin = -1 - (t % 7), vmax = 1 + (t % 5), r = sin(t * 1.3) * 15, g = (t % 3) * 0.45;
    double z[64], tz[64], p[64], out[64], ps = 0;
    for (int j = 0; j < Z; j++) {
      z[j] = vmin + (vmax - vmin) * j / (Z - 1);
      tz[j] = r + g * z[j];
      p[j] = 1 + cos(j * 0.7 + t);
      ps += p[j];
    }
    for (int j = 0; j < Z; j++) p[j] /= ps;
    c51_project_f64(tz, p, Z, vmin, vmax, Z, out);
    double s = 0;
    for (int j = 0; j < Z; j++) {
      ck_assert(out[j] >= 0);
      s += out[j];
    }
    ck_assert_msg(fabs(s - 1) < 1e-12, "case %d: sum %.17g", t, s);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("projection");
  TCase *tc = tcase_create("c51");
  tcase_add_test(tc, test_dopamine_table);
  tcase_add_test(tc, test_on_atom_and_between);
  tcase_add_test(tc, test_clamping);
  tcase_add_test(tc, test_terminal_row);
  tcase_add_test(tc, test_rows_sum_to_one_random);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
