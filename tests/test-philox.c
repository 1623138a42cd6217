/*
 * test-philox.c — Philox4x32-10 against three known-answer vectors published
 * with Random123 (counter[4] key[2] -> output[4]), plus the properties dqnd
 * relies on: the (seed, stream, step, lane) mapping (one draw against the
 * third vector, its first and last words); the uniform conversions at the
 * extreme words (philox_uniform in [0, 1), philox_uniform_open in (0, 1))
 * and philox_below's ends; and the normal conversion over 400,000 draws:
 * every value finite, the mean and variance within 5 standard errors of 0
 * and 1.
 */
#include <check.h>
#include <math.h>

#include "philox.h"
#include "testutil.h"

START_TEST(test_kat) {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
       0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
       0x24126ea1},
  };
  for (int i = 0; i < 3; i++) {
    philox4_t c = {{kat[i][0], kat[i][1], kat[i][2], kat[i][3]}};
    philox4_t o = philox4x32_10(c, kat[i][4], kat[i][5]);
    for (int k = 0; k < 4; k++)
      ck_assert_msg(o.v[k] == kat[i][6 + k], "vector %d word %d: %08x, expected %08x", i, k, o.v[k], kat[i][6 + k]);
  }
}
END_TEST

START_TEST(test_mapping) {
  /* philox_draw(seed, stream, step, lane) is philox4x32_10 on
   * counter {lane, step_lo, step_hi, stream}, key {seed_lo, seed_hi} */
  uint64_t seed = 0x299f31d0a4093822ULL, step = 0x85a308d3ULL | (0x13198a2eULL << 32);
  philox4_t o = philox_draw(seed, 0x03707344, step, 0x243f6a88);
  ck_assert_uint_eq(o.v[0], 0xd16cfe09);
  ck_assert_uint_eq(o.v[3], 0x24126ea1);
}
END_TEST

START_TEST(test_conversions) {
  ck_assert(philox_uniform(0) == 0.0f);
  ck_assert(philox_uniform(0xffffffffu) < 1.0f);
  ck_assert(philox_uniform_open(0) > 0.0f);
  ck_assert(philox_uniform_open(0xffffffffu) < 1.0f);
  ck_assert_uint_eq(philox_below(0xffffffffu, 81), 80);
  ck_assert_uint_eq(philox_below(0, 81), 0);
  /* N(0,1) moments over 400k draws: mean within 5 sigma of 0, variance of 1 */
  double s = 0, s2 = 0;
  int n = 0;
  for (uint32_t lane = 0; lane < 100000; lane++) {
    float g[4];
    philox_normal4(philox_draw(42, 2, 0, lane), g);
    for (int k = 0; k < 4; k++, n++) {
      ck_assert(isfinite(g[k]));
      s += g[k];
      s2 += (double)g[k] * g[k];
    }
  }
  double mean = s / n, var = s2 / n - mean * mean;
  ck_assert_msg(fabs(mean) < 5.0 / sqrt(n), "mean %g", mean);
  ck_assert_msg(fabs(var - 1) < 5.0 * sqrt(2.0 / n), "variance %g", var);
}
END_TEST

int main(void) {
  Suite *s = suite_create("philox");
  TCase *tc = tcase_create("philox4x32-10");
  tcase_add_test(tc, test_kat);
  tcase_add_test(tc, test_mapping);
  tcase_add_test(tc, test_conversions);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
