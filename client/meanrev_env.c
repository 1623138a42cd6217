/* meanrev_env.c — see meanrev_env.h. Randomness is Philox (kernels/philox.h) keyed
 * by (seed, stream, episode, step), so every episode is reproducible alone. */
#include "meanrev_env.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"

#define RHO 0.9f
#define SIGMA 0.5f
#define LAMBDA 0.5f
#define STREAM_ENV 100u
#define STREAM_CLIENT 101u

static void draw_exogenous(meanrev_env_t *e, float *eps) {
  float g[4];
  philox4_t d = philox_draw(e->seed, STREAM_ENV, e->episode, (uint32_t)e->t);
  philox_normal4(d, g);
  *eps = g[0];
  philox4_t d2 = philox_draw(e->seed, STREAM_ENV + 1, e->episode, (uint32_t)e->t);
  e->s = philox_uniform(d2.v[0]);
  e->v = philox_uniform(d2.v[1]);
}

void meanrev_reset(meanrev_env_t *e, uint64_t seed, uint64_t episode) {
  memset(e, 0, sizeof *e);
  e->seed = seed;
  e->episode = episode;
  float eps;
  draw_exogenous(e, &eps);
  e->x = eps * SIGMA / sqrtf(1.0f - RHO * RHO); /* stationary start */
}

void meanrev_observe(const meanrev_env_t *e, float *obs) {
  obs[0] = e->x;
  obs[1] = e->s;
  obs[2] = e->v;
  obs[3] = 1.0f - (float)e->t / MEANREV_T;
}

static float order_cost(int o, float s) { return o == 0 ? 0.3f * s : (o == 1 ? 0.1f : 0.3f * (1.0f - s)); }
static float urgency_cost(int u, float v) { return u == 0 ? 0.3f * v : (u == 1 ? 0.1f : 0.3f * (1.0f - v)); }

float meanrev_reward(const meanrev_env_t *e, int32_t a) {
  int ex = a / 9, o = (a % 9) / 3, u = a % 3;
  float p = (float)(ex - 4) / 4.0f;
  return -p * e->x - LAMBDA * p * p - order_cost(o, e->s) - urgency_cost(u, e->v);
}

int32_t meanrev_optimal_action(const meanrev_env_t *e) {
  int best[3] = {0, 0, 0};
  float bv = INFINITY;
  for (int ex = 0; ex < 9; ex++) {
    float p = (float)(ex - 4) / 4.0f, c = p * e->x + LAMBDA * p * p;
    if (c < bv) bv = c, best[0] = ex;
  }
  bv = INFINITY;
  for (int o = 0; o < 3; o++)
    if (order_cost(o, e->s) < bv) bv = order_cost(o, e->s), best[1] = o;
  bv = INFINITY;
  for (int u = 0; u < 3; u++)
    if (urgency_cost(u, e->v) < bv) bv = urgency_cost(u, e->v), best[2] = u;
  return best[0] * 9 + best[1] * 3 + best[2];
}

float meanrev_step(meanrev_env_t *e, int32_t a, int *done) {
  float r = meanrev_reward(e, a);
  e->t++;
  float eps;
  float x = e->x;
  draw_exogenous(e, &eps);
  e->x = RHO * x + SIGMA * eps;
  *done = e->t >= MEANREV_T;
  return r;
}

void meanrev_learner_config(learner_config_t *c) {
  learner_config_default(c);
  c->state_dim = MEANREV_STATE_DIM;
  c->trunk_h1 = 64;
  c->trunk_h2 = 64;
  c->value_hidden = 32;
  c->adv_hidden = 32;
  c->atoms = 51;
  c->v_min = -10.0f;
  c->v_max = 10.0f;
  c->batch = 128;
  c->replay_capacity = 100000;
  c->noisy = 0; /* measured: NoisyNet + per-branch epsilon learns slower here */
  c->noisy_sigma0 = 0.5f;
  c->prioritized = 1;
  c->per_alpha = 0.5f;
  c->seed = 7;
  c->hp.lr = 1e-3f;
  c->hp.gamma = 0.5f;
  c->hp.target_period = 50;
  c->hp.per_beta_steps = 4000;
}

void meanrev_opts_default(meanrev_opts_t *o) {
  o->iterations = MEANREV_ITERATIONS;
  o->envs = 64;
  o->collect_steps = 4;
  o->train_steps = 16;
  o->eps_start = 0.5f;
  o->eps_end = 0.02f;
  o->eval_every = 50;
  o->eval_episodes = 32;
  o->seed = 2026;
}

int meanrev_evaluate(const demo_driver_t *drv, uint64_t seed, int episodes, meanrev_point_t *p) {
  /* all evaluation episodes step in lockstep: one act call per time step */
  meanrev_env_t *env = calloc((size_t)episodes, sizeof *env);
  float *obs = calloc((size_t)episodes * MEANREV_STATE_DIM, sizeof(float));
  int32_t *act = calloc((size_t)episodes, sizeof(int32_t));
  int rc = -1;
  if (!env || !obs || !act) goto out;
  double ret = 0, opt = 0, rnd = 0;
  for (int i = 0; i < episodes; i++) meanrev_reset(&env[i], seed, (1ULL << 40) + (uint64_t)i);
  for (int t = 0; t < MEANREV_T; t++) {
    for (int i = 0; i < episodes; i++) meanrev_observe(&env[i], obs + i * MEANREV_STATE_DIM);
    if ((rc = drv->act(drv->ctx, obs, episodes, 0, 0, act))) goto out;
    for (int i = 0; i < episodes; i++) {
      philox4_t d = philox_draw(seed, STREAM_CLIENT + 1, (uint64_t)t, (uint32_t)i);
      opt += meanrev_reward(&env[i], meanrev_optimal_action(&env[i]));
      rnd += meanrev_reward(&env[i], (int32_t)philox_below(d.v[0], MEANREV_ACTIONS));
      int done;
      ret += meanrev_step(&env[i], act[i], &done);
    }
  }
  p->policy_return = ret / episodes;
  p->optimal_return = opt / episodes;
  p->random_return = rnd / episodes;
  rc = 0;
out:
  free(env);
  free(obs);
  free(act);
  return rc;
}

int meanrev_train(const demo_driver_t *drv, const meanrev_opts_t *o, meanrev_progress_cb cb, void *cb_ctx,
               meanrev_point_t *final) {
  const int E = o->envs, K = o->collect_steps, S = MEANREV_STATE_DIM, N = E * K;
  meanrev_env_t *env = calloc((size_t)E, sizeof *env);
  float *obs = calloc((size_t)E * S, sizeof(float));
  int32_t *act = calloc((size_t)E, sizeof(int32_t));
  float *s = calloc((size_t)N * S, sizeof(float)), *s2 = calloc((size_t)N * S, sizeof(float));
  float *r = calloc((size_t)N, sizeof(float));
  int32_t *a = calloc((size_t)N, sizeof(int32_t));
  uint8_t *dn = calloc((size_t)N, 1);
  int64_t *ep = calloc((size_t)N, sizeof(int64_t));
  int rc = -1;
  if (!env || !obs || !act || !s || !s2 || !r || !a || !dn || !ep) goto out;
  uint64_t next_episode = 0;
  for (int i = 0; i < E; i++) meanrev_reset(&env[i], o->seed, next_episode++);
  learner_stats_t st;
  memset(&st, 0, sizeof st);
  meanrev_point_t pt;
  memset(&pt, 0, sizeof pt);
  uint64_t draws = 0;
  for (int it = 0; it < o->iterations; it++) {
    float frac = o->iterations > 1 ? (float)it / (float)(o->iterations - 1) : 1.0f;
    float eps = o->eps_start + (o->eps_end - o->eps_start) * frac;
    int n = 0;
    for (int k = 0; k < K; k++) {
      for (int i = 0; i < E; i++) meanrev_observe(&env[i], obs + i * S);
      if ((rc = drv->act(drv->ctx, obs, E, 1, (uint64_t)it, act))) goto out;
      for (int i = 0; i < E; i++, n++) {
        /* epsilon-greedy per branch: each sub-action is replaced by a random
         * one on its own, so exploring the order type does not also scramble
         * the exposure (whose reward noise would drown the cost signal) */
        philox4_t coin = philox_draw(o->seed, STREAM_CLIENT, draws, 0);
        philox4_t pick = philox_draw(o->seed, STREAM_CLIENT, draws++, 1);
        int sub[3] = {act[i] / 9, (act[i] % 9) / 3, act[i] % 3};
        static const uint32_t nsub[3] = {9, 3, 3};
        for (int b = 0; b < 3; b++)
          if (philox_uniform(coin.v[b]) < eps) sub[b] = (int)philox_below(pick.v[b], nsub[b]);
        act[i] = sub[0] * 9 + sub[1] * 3 + sub[2];
        memcpy(s + n * S, obs + i * S, sizeof(float) * S);
        a[n] = act[i];
        ep[n] = (int64_t)env[i].episode;
        int done;
        r[n] = meanrev_step(&env[i], act[i], &done);
        meanrev_observe(&env[i], s2 + n * S);
        /* the episode end is a time limit, not a terminal state: bootstrap through it */
        dn[n] = 0;
        if (done) meanrev_reset(&env[i], o->seed, next_episode++);
      }
    }
    learner_transitions_t t = {N, s, a, r, s2, dn, ep, NULL};
    if ((rc = drv->submit(drv->ctx, &t))) goto out;
    if ((rc = drv->step(drv->ctx, o->train_steps, &st))) goto out;
    int last = it + 1 == o->iterations;
    if (last || (o->eval_every > 0 && (it + 1) % o->eval_every == 0)) {
      if ((rc = meanrev_evaluate(drv, o->seed, o->eval_episodes, &pt))) goto out;
      pt.iteration = it + 1;
      pt.learner_step = st.step;
      pt.loss = st.loss_mean;
      if (cb) cb(cb_ctx, &pt);
    }
  }
  if (final) *final = pt;
  rc = 0;
out:
  free(env);
  free(obs);
  free(act);
  free(s);
  free(s2);
  free(r);
  free(a);
  free(dn);
  free(ep);
  return rc;
}
