/* benchutil.h — the clock and the median the benchmarks share. */
#ifndef DQND_BENCHUTIL_H
#define DQND_BENCHUTIL_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* median of n values (sorts them) */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], bench_cmp);
  return v[n / 2];
}

#endif
