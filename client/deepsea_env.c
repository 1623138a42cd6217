/* deepsea_env.c — see deepsea_env.h. */
#include "deepsea_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_driver.h"
#include "philox.h"

#define STREAM_DEEPSEA_MAP 40 /* Philox stream of the per-cell action map */

int deepsea_init(deepsea_env_t *e, int n, uint64_t seed) {
  if (n < 2 || n > DEEPSEA_MAX_N) return -1;
  memset(e, 0, sizeof *e);
  e->n = n;
  e->seed = seed;
  e->obs_scale = 1.0f;
  return 0;
}

void deepsea_reset(deepsea_env_t *e) { e->row = e->col = e->t = 0; }

void deepsea_observe(const deepsea_env_t *e, float *obs) {
  memset(obs, 0, sizeof(float) * (size_t)(e->n * e->n));
  if (e->row < e->n) obs[e->row * e->n + e->col] = e->obs_scale;
}

int32_t deepsea_right_action(const deepsea_env_t *e) {
  philox4_t d = philox_draw(e->seed, STREAM_DEEPSEA_MAP, (uint64_t)(e->row * e->n + e->col), 0);
  return (int32_t)(d.v[0] & 1u);
}

float deepsea_step(deepsea_env_t *e, int32_t action, int *done) {
  float r = 0;
  if (action == deepsea_right_action(e)) {
    r -= 0.01f / (float)e->n;
    if (e->col < e->n - 1) e->col++;
  } else if (e->col > 0) {
    e->col--;
  }
  e->row++;
  e->t++;
  *done = e->t >= e->n;
  if (*done && e->col == e->n - 1) r += 1.0f;
  return r;
}

float deepsea_optimal_return(int n) { return 1.0f - 0.01f * (float)(n - 1) / (float)n; }

void deepsea_learner_config(learner_config_t *c, int n) {
  learner_config_default(c);
  char sd[16];
  snprintf(sd, sizeof sd, "%d", n * n);
  /* Two atoms: with C51 on deep sea's deterministic returns the target of a
   * state worth 0 is one atom, the logits sharpen on it without bound, and a
   * fixed prior added to the logits (docs/learner.md §8) then moves Q less and
   * less: with 11 atoms the spread of Q between heads fell 100x in 200
   * episodes and no seed reached the reward at N = 20 (BENCHMARKS.md). On two
   * atoms {-1, 1} a value of 0 is p = 1/2, the flattest distribution, where
   * a logit moves Q most: the prior keeps its say. lr 1e-4: the trained
   * heads read the same trunk features as their priors, so fitting
   * "head = -prior" on the visited cells generalises to the unvisited ones at
   * a rate set by the step size; at lr 1e-3 the spread of Q between heads on
   * unvisited cells fell from 0.12 to 0.004 in 800 episodes and seeds 2 and
   * 3 never reached the reward at N = 20, at 1e-4 it stays ~0.14 and seeds
   * 1-10 reach it in every episode from episode ~700-900 (BENCHMARKS.md). */
  const char *base[][2] = {{"state_dim", sd},      {"branches", "2"},        {"atoms", "2"},
                           {"v_min", "-1"},        {"v_max", "1"},           {"trunk_h1", "64"},
                           {"trunk_h2", "64"},     {"value_hidden", "32"},   {"adv_hidden", "32"},
                           {"batch", "64"},        {"replay_capacity", "100000"}, {"prioritized", "0"},
                           {"lr", "0.0001"},       {"target_period", "50"},  {"ensemble_k", "10"},
                           {"ensemble_prior_scale", "10"}, {"ensemble_mask_p", "0.5"}, {"act_select", "thompson"}};
  for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) learner_config_set(c, base[i][0], base[i][1], NULL, 0);
}

#define STREAM_DEEPSEA_EPS 41 /* Philox stream of epsilon-greedy's coins */

int deepsea_train(const demo_driver_t *drv, const deepsea_opts_t *o, deepsea_progress_cb cb, void *cb_ctx) {
  deepsea_env_t env;
  if (deepsea_init(&env, o->n, o->seed)) return -1;
  if (o->obs_scale > 0) env.obs_scale = o->obs_scale;
  int N = o->n, S = N * N, rc = 0;
  int steps = o->train_steps > 0 ? o->train_steps : N;
  float *s = malloc(sizeof(float) * (size_t)(N + 1) * S), *r = malloc(sizeof(float) * (size_t)N);
  int32_t *act = malloc(sizeof(int32_t) * (size_t)N);
  uint8_t *done = malloc((size_t)N);
  int64_t *ep = malloc(sizeof(int64_t) * (size_t)N);
  if (!s || !r || !act || !done || !ep) {
    rc = -1;
    goto out;
  }
  int successes = 0, window = 0;
  double ret_sum = 0;
  long long half = o->episodes / 2 + 1;
  for (long long e = 0; e < o->episodes && !rc; e++) {
    deepsea_reset(&env);
    deepsea_observe(&env, s);
    float eps = !o->epsilon ? 0.0f : (e < half ? 1.0f - 0.95f * (float)e / (float)half : 0.05f);
    double ret = 0;
    for (int t = 0; t < N; t++) {
      if ((rc = drv->act(drv->ctx, s + (size_t)t * S, 1, o->noisy, (uint64_t)e, &act[t]))) goto out;
      philox4_t d = philox_draw(o->seed, STREAM_DEEPSEA_EPS, (uint64_t)e, (uint32_t)t);
      if (philox_uniform(d.v[0]) < eps) act[t] = (int32_t)(d.v[1] & 1u);
      int fin = 0;
      r[t] = deepsea_step(&env, act[t], &fin);
      done[t] = (uint8_t)fin;
      ep[t] = e;
      ret += r[t];
      deepsea_observe(&env, s + (size_t)(t + 1) * S);
    }
    /* transitions (s_t, a_t, r_t, s_t+1); the episode's last one is terminal */
    learner_transitions_t tr = {N, s, act, r, s + S, done, ep, NULL};
    if ((rc = drv->submit(drv->ctx, &tr))) break;
    if ((rc = drv->step(drv->ctx, steps, NULL))) break;
    successes += ret > 0.5;
    ret_sum += ret;
    if (++window == 100 || e + 1 == o->episodes) {
      deepsea_point_t p = {e + 1, window, (double)successes / window, ret_sum / window};
      if (cb) cb(cb_ctx, &p);
      successes = window = 0;
      ret_sum = 0;
    }
  }
out:
  free(s), free(r), free(act), free(done), free(ep);
  return rc;
}
