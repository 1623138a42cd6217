/*
 * bench-gpu-multi — many trainers on one GPU (issue 5 item 3): 1, 2, 4, 8
 * and 16 CUDA learners of the `ref` config at batch 256, each driven by its
 * own thread (as the daemon's workers do) on its own stream, each running
 * Step(200) calls; aggregate steps/s against one trainer alone. Argument:
 * the trainers' cuda_gemm_occupancy (default 2; 1 suits four or more
 * trainers per GPU). Exits 77 with no usable GPU.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "learner.h"
#include "philox.h"

typedef struct {
  learner_t *l;
  int calls, rc;
} worker_t;

static void *drive(void *p) {
  worker_t *w = p;
  char err[256];
  for (int k = 0; k < w->calls && !w->rc; k++) w->rc = learner_step(w->l, 200, NULL, err, sizeof err);
  return NULL;
}

static learner_t *make(int seed, int occupancy) {
  learner_config_t c;
  learner_config_default(&c);
  c.cuda_gemm_occupancy = occupancy;
  c.replay_capacity = 20000;
  c.prioritized = 0;
  c.seed = (uint64_t)seed;
  learner_t *l;
  char err[256];
  if (learner_create(&c, LEARNER_BACKEND_CUDA, &l, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  const int n = 20000, S = c.state_dim;
  float *s = malloc(sizeof(float) * n * S), *s2 = malloc(sizeof(float) * n * S), *r = malloc(sizeof(float) * n);
  int32_t *a = malloc(sizeof(int32_t) * n);
  uint8_t *d = calloc(n, 1);
  for (int i = 0; i < n * S; i += 4) {
    float g[4];
    philox_normal4(philox_draw((uint64_t)seed, 80, 0, (uint32_t)(i / 4)), g);
    for (int k = 0; k < 4; k++) s[i + k] = g[k], s2[i + k] = g[3 - k];
  }
  for (int i = 0; i < n; i++) a[i] = i % 81, r[i] = (float)(i % 7) - 3;
  learner_transitions_t t = {n, s, a, r, s2, d, NULL, NULL};
  learner_submit(l, &t, err, sizeof err);
  free(s), free(s2), free(r), free(a), free(d);
  learner_step(l, 20, NULL, err, sizeof err); /* capture + warm-up */
  return l;
}

int main(int argc, char **argv) {
  char dev[256];
  const int occ = argc > 1 ? atoi(argv[1]) : 2;
  bench_gpu_or_skip(dev, sizeof dev);
  printf("device: %s; ref config, batch 256, uniform replay, Step(200) calls per thread, cuda_gemm_occupancy %d\n",
         dev, occ);
  learner_t *ls[16];
  for (int i = 0; i < 16; i++) ls[i] = make(i + 1, occ);
  double base = 0;
  int counts[] = {1, 2, 4, 8, 16};
  for (int ci = 0; ci < 5; ci++) {
    int n = counts[ci];
    worker_t w[16];
    pthread_t th[16];
    double t0 = bench_now();
    for (int i = 0; i < n; i++) {
      w[i] = (worker_t){ls[i], 5, 0};
      pthread_create(&th[i], NULL, drive, &w[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    double dt = bench_now() - t0, sps = (double)n * 5 * 200 / dt;
    if (n == 1) base = sps;
    printf("trainers %2d: aggregate %8.0f steps/s (%.2fx one trainer)\n", n, sps, sps / base);
    fflush(stdout);
  }
  for (int i = 0; i < 16; i++) learner_destroy(ls[i]);
  return 0;
}
