/*
 * test-fastexp.c — fast_expf (kernels/cpu/fast_expf.h) against libm's double
 * exp: at most 2 ulp (of the float result) over [-87, 88] on a dense grid,
 * exact at 0, clamped (finite, >= 0) outside the range, NaN for NaN.
 */
#include <check.h>
#include <math.h>

#include "fast_expf.h"
#include "testutil.h"

START_TEST(test_ulp) {
  double worst = 0;
  float wx = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.000731f) {
    double e = exp((double)x), f = fast_expf(x);
    double ulp = fabs(f - e) / (nextafterf((float)e, INFINITY) - (float)e);
    if (ulp > worst) worst = ulp, wx = x;
  }
  ck_assert_msg(worst <= 2.0, "max error %.2f ulp at x = %g", worst, wx);
  ck_assert(fast_expf(0.0f) == 1.0f);
  ck_assert(fast_expf(-INFINITY) >= 0 && fast_expf(-INFINITY) < 1e-37f);
  ck_assert(isfinite(fast_expf(1000.0f)) && fast_expf(1000.0f) > 1e38f);
  ck_assert(isnan(fast_expf(NAN))); /* and no float-to-int conversion of NaN on the way (UBSan) */
}
END_TEST

int main(void) {
  Suite *s = suite_create("fastexp");
  TCase *tc = tcase_create("ulp");
  tcase_add_test(tc, test_ulp);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
