/*
 * testutil.h — small helpers shared by the check suites: random inputs from
 * Philox (reproducible), relative-error norms, and a golden-case loader.
 */
#ifndef DQND_TESTUTIL_H
#define DQND_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "philox.h"

/* Runs a suite and returns main's exit status (check prints the summary line). */
/* The golden files (tests/golden): $DQND_GOLDEN_DIR when set (meson test
 * sets it), else the source tree's, whose path the build compiles in
 * (DQND_GOLDEN_DEFAULT, tests/meson.build): a test binary run by hand, from
 * any directory and under any OPENBLAS_CORETYPE, finds them too. */
static inline const char *tu_golden_dir(void) {
  const char *gd = getenv("DQND_GOLDEN_DIR");
  return gd && *gd ? gd : DQND_GOLDEN_DEFAULT;
}

static inline int tu_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

/* uniform in [lo, hi) from (seed, stream 999, step = tag, lane = i/4) */
static inline void tu_fill_uniform_f64(double *x, int64_t n, double lo, double hi, uint64_t seed, uint64_t tag) {
  for (int64_t i = 0; i < n; i++) {
    philox4_t d = philox_draw(seed, 999, tag, (uint32_t)(i / 4));
    x[i] = lo + (hi - lo) * (d.v[i % 4] / 4294967296.0);
  }
}
static inline void tu_fill_uniform_f32(float *x, int64_t n, float lo, float hi, uint64_t seed, uint64_t tag) {
  for (int64_t i = 0; i < n; i++) {
    philox4_t d = philox_draw(seed, 999, tag, (uint32_t)(i / 4));
    x[i] = lo + (hi - lo) * (float)(d.v[i % 4] / 4294967296.0);
  }
}
static inline void tu_fill_normal_f64(double *x, int64_t n, uint64_t seed, uint64_t tag) {
  for (int64_t i = 0; i < n; i += 4) {
    float g[4];
    philox_normal4(philox_draw(seed, 998, tag, (uint32_t)(i / 4)), g);
    for (int k = 0; k < 4 && i + k < n; k++) x[i + k] = g[k];
  }
}

/* ||a - b|| / ||b|| (b the reference); 0 when both are 0. *worst gets the index of the largest |a-b|. */
static inline double tu_rel_err(const double *a, const double *b, int64_t n, int64_t *worst) {
  double num = 0, den = 0, wmax = -1;
  for (int64_t i = 0; i < n; i++) {
    double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
    if (fabs(d) > wmax) {
      wmax = fabs(d);
      if (worst) *worst = i;
    }
  }
  if (den == 0) return sqrt(num);
  return sqrt(num / den);
}

/* A growing byte buffer behind learner_save / learner_load's callbacks. */
typedef struct {
  unsigned char *p;
  size_t n, cap, pos;
} membuf_t;

/* The chi-square upper tail P(X >= x) for df degrees of freedom: the
 * regularised upper incomplete gamma Q(df/2, x/2), by its series below
 * a + 1 and its continued fraction above (Numerical Recipes' gser/gcf), to
 * ~1e-14. A sampling test states the p below which it fails. */
static inline double tu_chi2_pvalue(double x, int df) {
  const double a = 0.5 * df, y = 0.5 * x;
  if (y <= 0) return 1;
  const double lg = lgamma(a);
  if (y < a + 1) { /* P(a, y) by its series, Q = 1 - P */
    double ap = a, sum = 1 / a, del = sum;
    for (int n = 0; n < 10000 && fabs(del) > fabs(sum) * 1e-15; n++) del *= y / ++ap, sum += del;
    return 1 - sum * exp(-y + a * log(y) - lg);
  }
  double b = y + 1 - a, c = 1 / 1e-300, d = 1 / b, h = d; /* Lentz's continued fraction for Q */
  for (int i = 1; i < 10000; i++) {
    double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    double del = d * c;
    h *= del;
    if (fabs(del - 1) < 1e-15) break;
  }
  return exp(-y + a * log(y) - lg) * h;
}

static inline int mem_write(void *ctx, const void *buf, size_t n) {
  membuf_t *m = ctx;
  if (m->n + n > m->cap) {
    size_t c = (m->cap + n) * 2;
    unsigned char *q = realloc(m->p, c);
    if (!q) return -1;
    m->p = q;
    m->cap = c;
  }
  memcpy(m->p + m->n, buf, n);
  m->n += n;
  return 0;
}
static inline int mem_read(void *ctx, void *buf, size_t n) {
  membuf_t *m = ctx;
  if (m->pos + n > m->n) return -1;
  memcpy(buf, m->p + m->pos, n);
  m->pos += n;
  return 0;
}

#endif
