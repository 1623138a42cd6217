/*
 * bench-gpu-dt — the Decision Transformer's pre-training step on the GPU
 * (issue 30 item 7): the reference sizes (context 20, embed 128, 3 layers, 1
 * head, the ref config's state 64 and branches 9,3,3) at each batch, µs per
 * PretrainDT step and the TFLOP/s reached (the GEMMs' and attention's
 * multiply-adds x 2, forward and twice that backward: the same count as
 * tests/bench/peers/dt_torch.py prints). The replay holds 2,000 episodes of
 * 100 steps. Arguments: the batches (default 64,256), tensor_cores (0 fp32,
 * 1 the GEMMs with TF32 operands), a JSON file, and the population sizes
 * (default 1: one trainer; N > 1: a population of N members, every
 * member's step in the same launches, reported as µs per member-step and
 * the aggregate against one trainer of the same batch and precision). A
 * warm-up call, then the median of 3 timed calls of 50 steps. Exits 77 with
 * no usable GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "learner.h"
#include "philox.h"
#include "population.h"

#define EPISODES 2000
#define EP_LEN 100

static void feed(learner_t *l) {
  const learner_config_t *c = learner_config(l);
  const int n = EPISODES * EP_LEN, S = c->state_dim;
  float *s = malloc(sizeof(float) * (size_t)n * S), *r = malloc(sizeof(float) * n);
  int32_t *a = malloc(sizeof(int32_t) * n);
  uint8_t *d = calloc(n, 1);
  if (!s || !r || !a || !d) exit(1);
  for (int i = 0; i < n * S; i += 4) {
    float g[4];
    philox_normal4(philox_draw(9, 80, 0, (uint32_t)(i / 4)), g);
    for (int k = 0; k < 4 && i + k < n * S; k++) s[i + k] = g[k];
  }
  for (int i = 0; i < n; i++) a[i] = (i * 7) % 81, r[i] = (float)(i % 7) - 3, d[i] = i % EP_LEN == EP_LEN - 1;
  learner_transitions_t t = {n, s, a, r, s, d, NULL, NULL};
  char err[256];
  if (learner_submit(l, &t, err, sizeof err)) fprintf(stderr, "submit: %s\n", err), exit(1);
  free(s), free(r), free(a), free(d);
}

static double median3(const double *t) {
  return t[0] < t[1] ? (t[1] < t[2] ? t[1] : (t[0] < t[2] ? t[2] : t[0]))
                     : (t[0] < t[2] ? t[0] : (t[1] < t[2] ? t[2] : t[1]));
}

/* n steps of the learner (pop NULL) or of every member; exits on an error */
static void pretrain(learner_t *l, learner_pop_t *pop, int n, learner_dt_stats_t *st) {
  char err[512];
  const int rc = pop ? learner_pop_pretrain_dt(pop, n, NULL, st, err, sizeof err)
                     : learner_pretrain_dt(l, n, NULL, st, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err), exit(1);
}

static double step_flops(int B, int K, int E, int L, int nh, int S, int A) {
  const double N = 3.0 * K, T = B * N;
  const double per_layer = T * (12.0 * E * E) + (double)B * nh * N * N * (E / nh) * 2;
  return 2 * 3 * (L * per_layer + (double)B * K * ((double)S * E + (double)E * A));
}

int main(int argc, char **argv) {
  char dev[256];
  bench_gpu_or_skip(dev, sizeof dev);
  const char *batches = argc > 1 ? argv[1] : "64,256";
  const int tc = argc > 2 ? atoi(argv[2]) : 0;
  const char *prec = tc ? "tf32" : "fp32";
  FILE *js = argc > 3 && argv[3][0] ? fopen(argv[3], "w") : NULL;
  const char *pops = argc > 4 ? argv[4] : "1";
  printf("device: %s; Decision Transformer, context 20, embed 128, 3 layers, 1 head, state 64, branches 9,3,3, %s\n",
         dev, prec);
  if (js) fprintf(js, "[\n");
  int first = 1;
  for (const char *p = batches; *p;) {
    const int B = atoi(p);
    learner_config_t c;
    learner_config_default(&c);
    c.replay_capacity = EPISODES * EP_LEN;
    c.dt_layers = 3, c.dt_context = 20, c.dt_embed = 128, c.dt_heads = 1, c.dt_max_ep_len = 1000, c.dt_batch = B;
    c.hp.dt_warmup = 1000;
    c.tensor_cores = tc;
    double lone = 0; /* this batch's one-trainer µs a step */
    for (const char *q = pops; *q;) {
      const int P = atoi(q);
      learner_t *l = NULL;
      learner_pop_t *pop = NULL;
      char err[512];
      if (P > 1) {
        if (learner_pop_create(&c, P, NULL, LEARNER_BACKEND_CUDA, &pop, err, sizeof err))
          fprintf(stderr, "%s\n", err), exit(1);
        if (!learner_pop_grouped(pop)) fprintf(stderr, "population of %d: not in shared launches\n", P), exit(1);
        for (int i = 0; i < P; i++) feed(learner_pop_member(pop, i));
      } else {
        if (learner_create(&c, LEARNER_BACKEND_CUDA, &l, err, sizeof err)) fprintf(stderr, "%s\n", err), exit(1);
        feed(l);
      }
      learner_dt_stats_t *st = calloc((size_t)(P > 1 ? P : 1), sizeof *st);
      if (!st) exit(1);
      pretrain(l, pop, 20, st);
      double t[3];
      for (int k = 0; k < 3; k++) {
        const double t0 = bench_now();
        pretrain(l, pop, 50, st);
        t[k] = (bench_now() - t0) / 50 / (P > 1 ? P : 1);
      }
      const double med = median3(t);
      if (P <= 1) lone = med;
      const double tf = step_flops(B, 20, 128, 3, 1, 64, 15) / med / 1e12;
      if (P > 1)
        printf("B=%5d dqnd cuda %s population %3d %9.1f us/member-step %6.2f TFLOP/s (%.2fx one trainer) loss %.4f\n",
               B, prec, P, med * 1e6, tf, lone > 0 ? lone / med : 0.0, (double)st[0].loss_last);
      else
        printf("B=%5d dqnd cuda %s %9.1f us/step %6.2f TFLOP/s loss %.4f\n", B, prec, med * 1e6, tf,
               (double)st[0].loss_last);
      if (js)
        fprintf(js,
                "%s {\"batch\": %d, \"precision\": \"%s\", \"members\": %d, \"us_per_step\": %.2f, "
                "\"tflops\": %.3f}",
                first ? "" : ",\n", B, prec, P > 1 ? P : 1, med * 1e6, tf);
      first = 0;
      free(st);
      if (pop) learner_pop_destroy(pop);
      if (l) learner_destroy(l);
      while (*q && *q != ',') q++;
      if (*q == ',') q++;
    }
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
  }
  if (js) fprintf(js, "\n]\n"), fclose(js);
  return 0;
}
