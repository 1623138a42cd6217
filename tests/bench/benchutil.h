/* benchutil.h — the clock, the median and the timed Step calls the
 * benchmarks share. */
#ifndef DQND_BENCHUTIL_H
#define DQND_BENCHUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "learner.h"

/* the GPU benches: the usable device's name into dev, or a line saying why
 * none is and exit 77 (meson: skipped). cuda_probe is the CUDA backend's
 * (kernels/cuda/probe.cu); the CPU benches never call this. */
int cuda_probe(char *name, size_t namelen);
static inline void bench_gpu_or_skip(char *dev, size_t n) {
  if (!cuda_probe(dev, n)) {
    printf("no usable CUDA device (%s): skipped\n", dev);
    exit(77);
  }
}

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

/* seconds per training step: `warm` steps first (a CUDA learner captures its
 * graph there), then `reps` Step(steps) calls timed one by one, their
 * median; st holds the last call's stats. -1 after printing the error. */
static inline double bench_step_time(learner_t *l, int warm, int steps, int reps, learner_stats_t *st) {
  char err[256];
  double t[16];
  if (reps > 16) reps = 16;
  if (learner_step(l, warm, st, err, sizeof err)) {
    fprintf(stderr, "bench: %s\n", err);
    return -1;
  }
  for (int k = 0; k < reps; k++) {
    double t0 = bench_now();
    if (learner_step(l, steps, st, err, sizeof err)) {
      fprintf(stderr, "bench: %s\n", err);
      return -1;
    }
    t[k] = (bench_now() - t0) / steps;
  }
  return bench_median(t, reps);
}

#endif
