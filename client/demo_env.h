/*
 * demo_env.h — "meanrev", a small built-in trading environment with factored
 * 9 x 3 x 3 actions whose optimal policy is known in closed form. It is the
 * learning test of the CPU learner and the environment of `dqnctl demo`.
 *
 * State (4 floats): x (price deviation from its mean), spread s in [0,1],
 * volatility v in [0,1], time left in the episode (1 -> 0).
 * Dynamics: x' = rho x + sigma eps (rho 0.9, sigma 0.5), s and v fresh U[0,1]
 * each step, episodes of DEMO_ENV_T steps; nothing the agent does moves them.
 * Action (flat, first branch most significant, a = 9e + 3o + u):
 *   exposure e in 0..8 -> position p = (e - 4)/4 in [-1, 1]
 *   order type o: market / limit / passive; urgency u: low / normal / high.
 * Reward (mark-to-model: the expected one-step P&L of the position)
 *   r = K p (E[x'] - x) - LAMBDA p^2 - c_o(s) - c_u(v)
 *     = -p x - 0.5 p^2 - c_o(s) - c_u(v)            (K (1 - rho) = 1)
 *   c_o(s): market 0.3 s, limit 0.1, passive 0.3 (1 - s)
 *   c_u(v): low 0.3 v, normal 0.1, high 0.3 (1 - v)
 * The exposure branch carries the reward, order type and urgency carry costs.
 * Since actions do not move the state, the optimal policy is greedy per step:
 * p* = the level minimising p x + 0.5 p^2, o* = argmin c_o, u* = argmin c_u.
 */
#ifndef DQND_DEMO_ENV_H
#define DQND_DEMO_ENV_H

#include <stdint.h>

#include "learner.h"

#define DEMO_ENV_STATE_DIM 4
#define DEMO_ENV_ACTIONS 81
#define DEMO_ENV_T 32

typedef struct demo_env {
  uint64_t seed, episode;
  int t;
  float x, s, v;
} demo_env_t;

void demo_env_reset(demo_env_t *e, uint64_t seed, uint64_t episode);
void demo_env_observe(const demo_env_t *e, float *obs);
/* Applies a flat action; returns the reward, sets *done at the episode's end. */
float demo_env_step(demo_env_t *e, int32_t action, int *done);
float demo_env_reward(const demo_env_t *e, int32_t action);
int32_t demo_env_optimal_action(const demo_env_t *e);
/* The learner config the demo trains with (small net, gamma 0.9, support [-10, 10]). */
void demo_env_learner_config(learner_config_t *c);
/* Applies "name=value" strings onto c, then validates it: 0, or
 * LEARNER_EINVAL with err naming the field (the demos' and benches' fields). */
int demo_config_set_fields(learner_config_t *c, const char *const *fields, int n, char *err, size_t errlen);

/* The training loop, written once against callbacks so the same code drives
 * an in-process learner (tests) and a remote trainer (dqnctl demo). Each
 * callback returns 0 or an error code that stops the loop. */
typedef struct demo_driver {
  void *ctx;
  int (*submit)(void *ctx, const learner_transitions_t *t);
  int (*step)(void *ctx, int n, learner_stats_t *st);
  /* episode: names the episode for an ensemble's thompson act_select (one
   * head per episode); other learners ignore it */
  int (*act)(void *ctx, const float *states, int n, int noisy, uint64_t episode, int32_t *actions);
} demo_driver_t;

/* A driver over an in-process learner (tests, dqn-demo). Errors go to stderr;
 * a step before the replay holds a batch counts as warm-up, not an error.
 * Defined in demo_learner.c (dqnutil_dep, which links the learner). */
void demo_driver_learner(demo_driver_t *d, learner_t *l);

typedef struct demo_opts {
  int iterations;       /* collect + train rounds */
  int envs;             /* parallel environments */
  int collect_steps;    /* env steps per env per round */
  int train_steps;      /* learner steps per round */
  float eps_start, eps_end; /* client-side epsilon-greedy, decayed linearly over the rounds */
  int eval_every;       /* rounds between evaluations (0 = only at the end) */
  int eval_episodes;
  uint64_t seed;
} demo_opts_t;

typedef struct demo_point {
  int iteration;
  uint64_t learner_step;
  float loss;
  double policy_return, optimal_return, random_return; /* mean per episode */
} demo_point_t;

typedef void (*demo_progress_cb)(void *ctx, const demo_point_t *p);

/* the default number of rounds (demo_opts_default; the help texts print it) */
#define DEMO_ITERATIONS 450
#define DEMO_STR_(x) #x
#define DEMO_STR(x) DEMO_STR_(x)
void demo_opts_default(demo_opts_t *o);
/* Mean episode return of the greedy policy (via drv->act, noisy = 0), of the
 * optimal policy and of a uniform random policy on the same evaluation
 * episodes (seeds disjoint from training). */
int demo_evaluate(const demo_driver_t *drv, uint64_t seed, int episodes, demo_point_t *p);
/* Runs the loop; *final gets the last evaluation. */
int demo_train(const demo_driver_t *drv, const demo_opts_t *o, demo_progress_cb cb, void *cb_ctx,
               demo_point_t *final);

#endif
