/*
 * fast_expf.h — expf that the compiler can vectorise (libm's is a call per
 * element, ~10% of a CPU training step). Cephes' single-precision method:
 * x = n ln2 + r with n = round(x / ln2) and |r| <= ln2/2 (ln2 split in two
 * parts so r is exact), e^r by a degree-6 polynomial, times 2^n built in the
 * exponent bits. Max error ~2 ulp on [-87, 88]; inputs are clamped there,
 * so e^-inf gives ~1e-38 instead of 0 (a softmax term that small is 0 to
 * float precision anyway); NaN stays NaN. Plain C: no intrinsics, no libm.
 */
#ifndef DQN_FAST_EXPF_H
#define DQN_FAST_EXPF_H

#include <stdint.h>

static inline float fast_expf(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  /* round to nearest with the 1.5 * 2^23 trick (no libm rint call) */
  float t = x * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  /* NaN in, NaN out (p is NaN then), without converting NaN to an integer,
   * which is undefined (UBSan; found by tests/fuzz on a loaded state) */
  int32_t k = n == n ? (int32_t)n : 0;
  union { int32_t i; float f; } s;
  s.i = (k + 127) << 23;
  return p * s.f;
}

#endif
