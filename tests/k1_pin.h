/*
 * k1_pin.h — the pinned step: two configurations with K = 1 and attention
 * off, trained 50 steps on fixed data, whose parameters were computed by the
 * commit before the ensemble existed (cc56e22) and stored in
 * tests/golden/k1pin/ (tests/golden/k1_pin_gen.c wrote them; its comment says
 * how). test-state trains the same with today's code and compares.
 *
 * Only the learner API both commits have is used here (designated
 * initialisers for the transitions, whose struct grew fields since).
 */
#ifndef DQND_K1_PIN_H
#define DQND_K1_PIN_H

#include <stdint.h>
#include <stdlib.h>

#include "learner.h"

#define K1_PIN_CONFIGS 2
#define K1_PIN_STEPS 50
static const char *const k1_pin_names[K1_PIN_CONFIGS] = {"small", "mid"};

/* 0 "small": the small net with NoisyNet and PER (batch 8);
 * 1 "mid": a wider net of three branches, uniform replay, batch 32 */
static inline void k1_pin_config(learner_config_t *c, int which) {
  learner_config_default(c);
  if (which == 0) {
    c->state_dim = 6, c->trunk_h1 = 16, c->trunk_h2 = 12, c->value_hidden = 8, c->adv_hidden = 10, c->atoms = 11;
    c->n_branches = 2, c->branch_sizes[0] = 3, c->branch_sizes[1] = 4, c->batch = 8;
    c->noisy = 1, c->prioritized = 1;
  } else {
    c->state_dim = 16, c->trunk_h1 = 64, c->trunk_h2 = 64, c->value_hidden = 32, c->adv_hidden = 32, c->atoms = 21;
    c->n_branches = 3, c->branch_sizes[0] = 5, c->branch_sizes[1] = 3, c->branch_sizes[2] = 2, c->batch = 32;
    c->noisy = 0, c->prioritized = 0;
  }
  c->replay_capacity = 2000;
  c->seed = 1234;
  c->hp.lr = 1e-3f;
  c->hp.gamma = 0.97f;
  c->hp.target_period = 20;
}

/* 600 transitions from a fixed 64-bit LCG: states in [-1, 1), rewards in
 * [-2, 2), one terminal in ten */
static inline int k1_pin_feed(learner_t *l, const learner_config_t *c, char *err, size_t errlen) {
  enum { N = 600 };
  const int S = c->state_dim;
  int A = 1;
  for (int d = 0; d < c->n_branches; d++) A *= c->branch_sizes[d];
  float *s = malloc(sizeof(float) * N * (size_t)S), *s2 = malloc(sizeof(float) * N * (size_t)S);
  float *r = malloc(sizeof(float) * N);
  int32_t *a = malloc(sizeof(int32_t) * N);
  uint8_t *d = malloc(N);
  uint64_t x = 0x243F6A8885A308D3ULL;
#define K1_NEXT() ((x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 40) /* 24 bits */
  for (int i = 0; i < N * S; i++) s[i] = (float)K1_NEXT() / 8388608.0f - 1.0f;
  for (int i = 0; i < N * S; i++) s2[i] = (float)K1_NEXT() / 8388608.0f - 1.0f;
  for (int i = 0; i < N; i++) {
    a[i] = (int32_t)(K1_NEXT() % (uint64_t)A);
    r[i] = (float)K1_NEXT() / 4194304.0f - 2.0f;
    d[i] = K1_NEXT() % 10 == 0;
  }
#undef K1_NEXT
  learner_transitions_t t = {.n = N, .states = s, .actions = a, .rewards = r, .next_states = s2, .dones = d};
  int rc = learner_submit(l, &t, err, errlen);
  free(s), free(s2), free(r), free(a), free(d);
  return rc;
}

/* create, feed, K1_PIN_STEPS steps; online then target parameters into
 * p [2 * n_params] (malloc'd); 0 or the learner's error */
static inline int k1_pin_train(int which, float **p, int64_t *n_params, char *err, size_t errlen) {
  learner_config_t c;
  k1_pin_config(&c, which);
  learner_t *l;
  int rc = learner_create(&c, LEARNER_BACKEND_CPU, &l, err, errlen);
  if (rc) return rc;
  if ((rc = k1_pin_feed(l, &c, err, errlen)) || (rc = learner_step(l, K1_PIN_STEPS, NULL, err, errlen))) {
    learner_destroy(l);
    return rc;
  }
  const int64_t P = learner_config_num_params(&c);
  *n_params = P;
  *p = malloc(sizeof(float) * 2 * (size_t)P);
  if (!*p || learner_get_params(l, 0, *p, P) || learner_get_params(l, 1, *p + P, P)) rc = -1;
  learner_destroy(l);
  return rc;
}

#endif
