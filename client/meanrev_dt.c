/* meanrev_dt.c — see meanrev_dt.h. Randomness is Philox keyed by (seed,
 * stream, episode, step), so every episode of the dataset and of the
 * evaluation is reproducible alone. */
#include "meanrev_dt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meanrev_env.h"
#include "philox.h"

#define STREAM_DT_POLICY 110u     /* the dataset's random actions and epsilon draws */
#define STREAM_DT_EVAL_RANDOM 111u /* the evaluation's random-policy baseline */
#define EVAL_EPISODE0 (1ULL << 41) /* held-out episodes: disjoint from the dataset's and meanrev_evaluate's */
#define LOCKSTEP 64                /* episodes collected side by side (one act call per time step) */

void meanrev_dt_config(learner_config_t *c) {
  meanrev_learner_config(c);
  c->dt_layers = 1;
  c->dt_context = 4; /* meanrev is Markov: the last few steps are enough context */
  c->dt_embed = 32;
  c->dt_heads = 2;
  c->dt_max_ep_len = MEANREV_T;
  c->dt_rtg_scale = 10.0f; /* episode returns span about -25 .. 20 */
  c->dt_batch = 64;
  c->hp.dt_lr = 3e-3f; /* measured on seeds 1-3: 1e-3 reached 83-85% of optimal, 3e-3 85-88% (512 episodes) */
  c->hp.dt_warmup = 100;
}

void meanrev_dt_opts_default(meanrev_dt_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->random_episodes = 1024; /* measured on seeds 1-3 (lr 3e-3, 1,500 steps): 256 + 256 episodes */
  o->dqn_episodes = 1024;    /* reached 85-88% of optimal, 1,024 + 1,024 reached 88-94% */
  o->dqn_eps = 0.5f;
  o->pretrain_steps = 1500;
  o->pretrain_chunk = 250;
  o->eval_episodes = 100;
  o->target_return = NAN;
  o->context = 4;
  o->seed = 1;
}

/* n episodes from first on, LOCKSTEP at a time, each submitted whole (one
 * request per batch, episode after episode); returns[i] gets episode i's */
static int collect(const demo_driver_t *dqn, const demo_driver_t *dt, uint64_t seed, uint64_t first, int n,
                   int use_dqn, float eps, double *returns) {
  const int S = MEANREV_STATE_DIM, T = MEANREV_T;
  meanrev_env_t env[LOCKSTEP];
  float *obs = malloc(sizeof(float) * LOCKSTEP * S), *s = malloc(sizeof(float) * LOCKSTEP * T * S);
  float *s2 = malloc(sizeof(float) * LOCKSTEP * T * S), *r = malloc(sizeof(float) * LOCKSTEP * T);
  int32_t *act = malloc(sizeof(int32_t) * LOCKSTEP), *a = malloc(sizeof(int32_t) * LOCKSTEP * T);
  uint8_t *dn = malloc((size_t)LOCKSTEP * T);
  int rc = -1;
  if (!obs || !s || !s2 || !r || !act || !a || !dn) goto out;
  for (int e0 = 0; e0 < n; e0 += LOCKSTEP) {
    const int nb = n - e0 < LOCKSTEP ? n - e0 : LOCKSTEP;
    for (int i = 0; i < nb; i++) meanrev_reset(&env[i], seed, first + (uint64_t)(e0 + i)), returns[e0 + i] = 0;
    for (int t = 0; t < T; t++) {
      for (int i = 0; i < nb; i++) meanrev_observe(&env[i], obs + i * S);
      if (use_dqn && (rc = dqn->act(dqn->ctx, obs, nb, 0, 0, act))) goto out;
      for (int i = 0; i < nb; i++) {
        const size_t k = (size_t)i * T + (size_t)t; /* episode-major: each episode's steps consecutive */
        philox4_t d = philox_draw(seed, STREAM_DT_POLICY, first + (uint64_t)(e0 + i), (uint32_t)t);
        if (!use_dqn || philox_uniform(d.v[1]) < eps) act[i] = (int32_t)philox_below(d.v[0], MEANREV_ACTIONS);
        memcpy(s + k * S, obs + i * S, sizeof(float) * S);
        int done = 0;
        r[k] = meanrev_step(&env[i], act[i], &done);
        returns[e0 + i] += r[k];
        a[k] = act[i];
        dn[k] = (uint8_t)(done != 0);
        meanrev_observe(&env[i], s2 + k * S);
      }
    }
    learner_transitions_t tr = {(int64_t)nb * T, s, a, r, s2, dn, NULL, NULL};
    if ((rc = dt->submit(dt->ctx, &tr))) goto out;
  }
  rc = 0;
out:
  free(obs), free(s), free(s2), free(r), free(act), free(a), free(dn);
  return rc;
}

int meanrev_dt_evaluate(const demo_driver_t *dt, const meanrev_dt_opts_t *o, double target, meanrev_dt_result_t *res) {
  const int S = MEANREV_STATE_DIM, T = MEANREV_T, K = o->context;
  float hs[MEANREV_T * MEANREV_STATE_DIM], hr[MEANREV_T];
  int32_t ha[MEANREV_T], ht[MEANREV_T];
  double ret = 0, opt = 0, rnd = 0;
  for (int i = 0; i < o->eval_episodes; i++) {
    meanrev_env_t env;
    meanrev_reset(&env, o->seed, EVAL_EPISODE0 + (uint64_t)i);
    double got = 0;
    for (int t = 0; t < T; t++) {
      meanrev_observe(&env, hs + t * S);
      hr[t] = (float)(target - got), ht[t] = t, ha[t] = 0;
      const int n = t + 1 < K ? t + 1 : K, t0 = t + 1 - n;
      learner_dt_window_t w = {n, hr + t0, hs + t0 * S, ha + t0, ht + t0};
      int rc = dt->act_dt(dt->ctx, &w, &ha[t]);
      if (rc) return rc;
      philox4_t d = philox_draw(o->seed, STREAM_DT_EVAL_RANDOM, EVAL_EPISODE0 + (uint64_t)i, (uint32_t)t);
      opt += meanrev_reward(&env, meanrev_optimal_action(&env));
      rnd += meanrev_reward(&env, (int32_t)philox_below(d.v[0], MEANREV_ACTIONS));
      int done;
      const float r = meanrev_step(&env, ha[t], &done);
      got += r;
    }
    ret += got;
  }
  res->dt_return = ret / o->eval_episodes;
  res->optimal_return = opt / o->eval_episodes;
  res->random_return = rnd / o->eval_episodes;
  return 0;
}

int meanrev_dt_run(const demo_driver_t *dqn, const demo_driver_t *dt, const meanrev_dt_opts_t *o,
                   meanrev_dt_progress_cb cb, void *cb_ctx, meanrev_dt_result_t *res) {
  memset(res, 0, sizeof *res);
  const int ne = o->random_episodes + o->dqn_episodes;
  if (o->context < 1 || o->context > MEANREV_T || ne < 1 || o->eval_episodes < 1 || o->pretrain_chunk < 1) return -1;
  double *rets = calloc((size_t)ne, sizeof(double));
  if (!rets) return -1;
  int rc = collect(dqn, dt, o->seed, 0, o->random_episodes, 0, 1.0f, rets);
  if (!rc) rc = collect(dqn, dt, o->seed, (uint64_t)o->random_episodes, o->dqn_episodes, 1, o->dqn_eps,
                        rets + o->random_episodes);
  if (rc) {
    free(rets);
    return rc;
  }
  res->episodes = ne;
  res->dataset_best = -INFINITY;
  for (int i = 0; i < ne; i++) {
    res->dataset_mean += rets[i] / ne;
    if (rets[i] > res->dataset_best) res->dataset_best = rets[i];
    if (i >= o->random_episodes) res->dqn_mean += rets[i] / o->dqn_episodes;
  }
  free(rets);
  if (cb) cb(cb_ctx, "dataset", NULL);
  for (int done = 0; done < o->pretrain_steps; done += o->pretrain_chunk) {
    const int k = o->pretrain_steps - done < o->pretrain_chunk ? o->pretrain_steps - done : o->pretrain_chunk;
    learner_dt_stats_t st;
    if ((rc = dt->pretrain_dt(dt->ctx, k, &st))) return rc;
    if (!done) res->loss_first = st.loss_mean;
    res->loss_last = st.loss_mean, res->dt_steps = st.dt_step;
    if (cb) cb(cb_ctx, "pretrain", &st);
  }
  res->target = isnan(o->target_return) ? res->dataset_best : o->target_return;
  return meanrev_dt_evaluate(dt, o, res->target, res);
}
