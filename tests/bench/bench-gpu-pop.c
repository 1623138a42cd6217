/*
 * bench-gpu-pop — populations on one GPU (issue 28 item 7): a population of
 * N members of the `ref` config at batch 256 (uniform replay, as the JAX
 * vmap peer samples) steps all of them in the same launches
 * (docs/population.md); aggregate member-steps/s against the population of
 * one (a lone trainer), µs per member-step, and the arithmetic rate reached
 * (5 B F flops per member-step: the forward of 3B rows and the backward of B,
 * F = 2 x the network's weights; 0.81 GFLOP at batch 256). Arguments: the
 * sizes (default 1,2,4,8,16,32,64), tensor_cores (0 fp32, 1 TF32), and a JSON
 * file for the results. Each size: a warm-up call, then the median of 3
 * timed calls of enough steps for ~0.3 s. Exits 77 with no usable GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "learner.h"
#include "net_layout.h"
#include "philox.h"
#include "population.h"

#define FILL 20000

static void feed(learner_t *l, uint64_t seed) {
  const learner_config_t *c = learner_config(l);
  const int n = FILL, S = c->state_dim;
  float *s = malloc(sizeof(float) * n * S), *s2 = malloc(sizeof(float) * n * S), *r = malloc(sizeof(float) * n);
  int32_t *a = malloc(sizeof(int32_t) * n);
  uint8_t *d = calloc(n, 1);
  if (!s || !s2 || !r || !a || !d) exit(1);
  for (int i = 0; i < n * S; i += 4) {
    float g[4];
    philox_normal4(philox_draw(seed, 80, 0, (uint32_t)(i / 4)), g);
    for (int k = 0; k < 4; k++) s[i + k] = g[k], s2[i + k] = g[3 - k];
  }
  for (int i = 0; i < n; i++) a[i] = i % 81, r[i] = (float)(i % 7) - 3;
  learner_transitions_t t = {n, s, a, r, s2, d, NULL, NULL};
  char err[256];
  if (learner_submit(l, &t, err, sizeof err)) fprintf(stderr, "submit: %s\n", err), exit(1);
  free(s), free(s2), free(r), free(a), free(d);
}

/* flops of one member-step at batch B: 5 B F (F = 2 x weights of the layers) */
static double step_flops(const learner_config_t *c) {
  net_layout_t L;
  net_layout_init(&L, c);
  double w = 0;
  for (int i = 0; i < L.n_layers; i++) w += (double)L.layer[i].in * L.layer[i].out;
  return 5.0 * c->batch * 2.0 * w;
}

int main(int argc, char **argv) {
  char dev[256];
  bench_gpu_or_skip(dev, sizeof dev);
  const char *sizes = argc > 1 ? argv[1] : "1,2,4,8,16,32,64";
  const int tc = argc > 2 ? atoi(argv[2]) : 0;
  FILE *js = argc > 3 ? fopen(argv[3], "w") : NULL;
  learner_config_t c;
  learner_config_default(&c);
  c.replay_capacity = FILL, c.prioritized = 0, c.tensor_cores = tc, c.seed = 1;
  const double flops = step_flops(&c);
  printf("device: %s; ref config, batch %d, uniform replay, %s; %.3f GFLOP per member-step\n", dev, c.batch,
         tc ? "TF32" : "fp32", flops / 1e9);
  if (js) fprintf(js, "{\"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, \"gflop_per_member_step\": %.4f, \"rows\": [", dev,
                  tc ? "tf32" : "fp32", c.batch, flops / 1e9);
  double base = 0;
  int first = 1;
  for (const char *p = sizes; *p;) {
    const int N = atoi(p);
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
    if (N < 1) continue;
    learner_pop_t *pop;
    char err[512];
    if (learner_pop_create(&c, N, NULL, LEARNER_BACKEND_CUDA, &pop, err, sizeof err)) {
      printf("members %3d: %s\n", N, err);
      continue;
    }
    for (int i = 0; i < N; i++) feed(learner_pop_member(pop, i), (uint64_t)i + 1);
    int steps = 20;
    double t0 = bench_now();
    if (learner_pop_step_until(pop, steps, NULL, NULL, NULL, err, sizeof err)) printf("step: %s\n", err), exit(1);
    double dt = bench_now() - t0;
    /* a warm-up call long enough to time, then ~0.3 s calls */
    steps = 200;
    t0 = bench_now();
    if (learner_pop_step_until(pop, steps, NULL, NULL, NULL, err, sizeof err)) printf("step: %s\n", err), exit(1);
    dt = bench_now() - t0;
    steps = (int)(0.3 / (dt / steps));
    steps = steps < 50 ? 50 : steps > 20000 ? 20000 : steps;
    double t[3];
    for (int k = 0; k < 3; k++) {
      t0 = bench_now();
      if (learner_pop_step_until(pop, steps, NULL, NULL, NULL, err, sizeof err)) printf("step: %s\n", err), exit(1);
      t[k] = (bench_now() - t0) / steps;
    }
    const double per_step = bench_median(t, 3), mps = N / per_step;
    if (N == 1) base = mps;
    const double tflops = flops * mps / 1e12;
    printf("members %3d: %9.1f us per population step, %7.2f us per member-step, %9.0f member-steps/s (%.2fx one "
           "trainer), %5.1f TFLOP/s, grouped %d\n",
           N, per_step * 1e6, per_step * 1e6 / N, mps, base > 0 ? mps / base : 0.0, tflops, learner_pop_grouped(pop));
    fflush(stdout);
    if (js)
      fprintf(js, "%s\n {\"members\": %d, \"us_per_pop_step\": %.2f, \"us_per_member_step\": %.3f, \"member_steps_per_s\": %.0f, "
                  "\"x_one_trainer\": %.3f, \"tflops\": %.2f, \"grouped\": %d}",
              first ? "" : ",", N, per_step * 1e6, per_step * 1e6 / N, mps, base > 0 ? mps / base : 0.0, tflops,
              learner_pop_grouped(pop));
    first = 0;
    learner_pop_destroy(pop);
  }
  if (js) fprintf(js, "\n]}\n"), fclose(js);
  return 0;
}
