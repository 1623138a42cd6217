/*
 * meanrev_env.h — "meanrev", a small built-in trading environment with factored
 * 9 x 3 x 3 actions whose optimal policy is known in closed form. It is the
 * learning test of the CPU learner and the environment of `dqnctl demo`.
 *
 * State (4 floats): x (price deviation from its mean), spread s in [0,1],
 * volatility v in [0,1], time left in the episode (1 -> 0).
 * Dynamics: x' = rho x + sigma eps (rho 0.9, sigma 0.5), s and v fresh U[0,1]
 * each step, episodes of MEANREV_T steps; nothing the agent does moves them.
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
#ifndef DQND_MEANREV_ENV_H
#define DQND_MEANREV_ENV_H

#include <stdint.h>

#include "demo_driver.h"
#include "learner_types.h"

#define MEANREV_STATE_DIM 4
#define MEANREV_ACTIONS 81
#define MEANREV_T 32

typedef struct meanrev_env {
  uint64_t seed, episode;
  int t;
  float x, s, v;
} meanrev_env_t;

void meanrev_reset(meanrev_env_t *e, uint64_t seed, uint64_t episode);
void meanrev_observe(const meanrev_env_t *e, float *obs);
/* Applies a flat action; returns the reward, sets *done at the episode's end. */
float meanrev_step(meanrev_env_t *e, int32_t action, int *done);
float meanrev_reward(const meanrev_env_t *e, int32_t action);
int32_t meanrev_optimal_action(const meanrev_env_t *e);
/* The learner config the demo trains with (small net, gamma 0.9, support [-10, 10]). */
void meanrev_learner_config(learner_config_t *c);

typedef struct meanrev_opts {
  int iterations;       /* collect + train rounds */
  int envs;             /* parallel environments */
  int collect_steps;    /* env steps per env per round */
  int train_steps;      /* learner steps per round */
  float eps_start, eps_end; /* client-side epsilon-greedy, decayed linearly over the rounds */
  int eval_every;       /* rounds between evaluations (0 = only at the end) */
  int eval_episodes;
  uint64_t seed;
} meanrev_opts_t;

typedef struct meanrev_point {
  int iteration;
  uint64_t learner_step;
  float loss;
  double policy_return, optimal_return, random_return; /* mean per episode */
} meanrev_point_t;

typedef void (*meanrev_progress_cb)(void *ctx, const meanrev_point_t *p);

/* the default number of rounds (meanrev_opts_default; the help texts print it) */
#define MEANREV_ITERATIONS 450
#define MEANREV_STR_(x) #x
#define MEANREV_STR(x) MEANREV_STR_(x)
void meanrev_opts_default(meanrev_opts_t *o);
/* Mean episode return of the greedy policy (via drv->act, noisy = 0), of the
 * optimal policy and of a uniform random policy on the same evaluation
 * episodes (seeds disjoint from training). */
int meanrev_evaluate(const demo_driver_t *drv, uint64_t seed, int episodes, meanrev_point_t *p);
/* Runs the loop; *final gets the last evaluation. */
int meanrev_train(const demo_driver_t *drv, const meanrev_opts_t *o, meanrev_progress_cb cb, void *cb_ctx,
               meanrev_point_t *final);

#endif
