/* bitflip_env.c — see bitflip_env.h. */
#include "bitflip_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_driver.h"
#include "philox.h"

#define STREAM_BITFLIP_RESET 50 /* Philox stream of starts and goals: step = episode */
#define STREAM_BITFLIP_EPS 51   /* epsilon-greedy's coins: step = episode, lane = t */

int bitflip_init(bitflip_env_t *e, int n, uint64_t seed) {
  if (n < 2 || n > BITFLIP_MAX_N) return -1;
  memset(e, 0, sizeof *e);
  e->n = n;
  e->seed = seed;
  return 0;
}

void bitflip_reset(bitflip_env_t *e, uint64_t episode) {
  e->episode = episode;
  e->t = 0;
  for (uint32_t lane = 0;; lane++) { /* a goal different from the start */
    int same = 1;
    for (int i = 0; i < e->n; i += 2) {
      philox4_t d = philox_draw(e->seed, STREAM_BITFLIP_RESET, episode, lane * 32 + (uint32_t)i / 2);
      e->bits[i] = (uint8_t)(d.v[0] & 1u), e->goal[i] = (uint8_t)(d.v[1] & 1u);
      if (i + 1 < e->n) e->bits[i + 1] = (uint8_t)(d.v[2] & 1u), e->goal[i + 1] = (uint8_t)(d.v[3] & 1u);
    }
    for (int i = 0; i < e->n; i++) same &= e->bits[i] == e->goal[i];
    if (!same) return;
  }
}

void bitflip_observe(const bitflip_env_t *e, float *obs) {
  for (int i = 0; i < e->n; i++) obs[i] = e->bits[i], obs[e->n + i] = e->goal[i];
}

float bitflip_step(bitflip_env_t *e, int32_t action, int *done, int *truncated) {
  e->bits[action] ^= 1u;
  e->t++;
  int same = 1;
  for (int i = 0; i < e->n; i++) same &= e->bits[i] == e->goal[i];
  *done = same;
  *truncated = !same && e->t >= e->n;
  return same ? 0.0f : -1.0f;
}

void bitflip_learner_config(learner_config_t *c, int n) {
  learner_config_default(c);
  char sd[16], nb[16], g[16], vmin[16];
  snprintf(sd, sizeof sd, "%d", 2 * n);
  snprintf(nb, sizeof nb, "%d", n);
  snprintf(g, sizeof g, "%d", n);
  snprintf(vmin, sizeof vmin, "%d", -n);
  const char *base[][2] = {{"state_dim", sd},       {"branches", nb},          {"her_goal_dim", g},
                           {"her_strategy", "future"}, {"her_ratio", "0.8"},   {"her_eps", "0"},
                           {"her_done_on_success", "1"}, {"atoms", "51"},      {"v_min", vmin},
                           {"v_max", "0"},          {"gamma", "0.98"},         {"trunk_h1", "128"},
                           {"trunk_h2", "128"},     {"value_hidden", "64"},    {"adv_hidden", "64"},
                           {"batch", "256"},        {"replay_capacity", "100000"}, {"prioritized", "0"},
                           {"lr", "0.002"},         {"tau", "0.05"}};
  for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) learner_config_set(c, base[i][0], base[i][1], NULL, 0);
}

int bitflip_train(const demo_driver_t *drv, const bitflip_opts_t *o, bitflip_progress_cb cb, void *cb_ctx) {
  bitflip_env_t env;
  if (bitflip_init(&env, o->n, o->seed)) return -1;
  const int N = o->n, S = 2 * N;
  int rc = 0;
  float *s = malloc(sizeof(float) * (size_t)(N + 1) * S), *s2 = malloc(sizeof(float) * (size_t)N * S);
  float *r = malloc(sizeof(float) * (size_t)N);
  int32_t *act = malloc(sizeof(int32_t) * (size_t)N);
  uint8_t *done = malloc((size_t)N), *end = malloc((size_t)N);
  int64_t *ep = malloc(sizeof(int64_t) * (size_t)N);
  if (!s || !s2 || !r || !act || !done || !end || !ep) {
    rc = -1;
    goto out;
  }
  long long decay = o->eps_episodes > 0 ? o->eps_episodes : (o->episodes * 2) / 5;
  int successes = 0, window = 0;
  double steps_sum = 0;
  for (long long e = 0; e < o->episodes && !rc; e++) {
    bitflip_reset(&env, (uint64_t)e);
    bitflip_observe(&env, s);
    float eps = e < decay ? 1.0f - (1.0f - o->eps_final) * (float)e / (float)decay : o->eps_final;
    int T = 0, fin = 0, trunc = 0;
    while (!fin && !trunc) {
      if ((rc = drv->act(drv->ctx, s + (size_t)T * S, 1, 0, (uint64_t)e, &act[T]))) goto out;
      philox4_t d = philox_draw(o->seed, STREAM_BITFLIP_EPS, (uint64_t)e, (uint32_t)T);
      if (philox_uniform(d.v[0]) < eps) act[T] = (int32_t)philox_below(d.v[1], (uint32_t)N);
      r[T] = bitflip_step(&env, act[T], &fin, &trunc);
      done[T] = (uint8_t)fin, end[T] = (uint8_t)trunc, ep[T] = e;
      bitflip_observe(&env, s + (size_t)(T + 1) * S);
      T++;
    }
    learner_transitions_t tr = {T, s, act, r, s + S, done, ep, end};
    if ((rc = drv->submit(drv->ctx, &tr))) break;
    if ((rc = drv->step(drv->ctx, T * (o->train_ratio > 0 ? o->train_ratio : 1), NULL))) break;
    successes += fin;
    steps_sum += T;
    if (++window == 100 || e + 1 == o->episodes) {
      bitflip_point_t p = {e + 1, window, (double)successes / window, steps_sum / window};
      if (cb) cb(cb_ctx, &p);
      successes = window = 0;
      steps_sum = 0;
    }
  }
out:
  free(s), free(s2), free(r), free(act), free(done), free(end), free(ep);
  return rc;
}
