/*
 * deepsea_env.h — bsuite's deep sea (Osband et al. 2019), the exploration
 * test of the ensemble heads (docs/learner.md §8): an N x N grid, the agent starts in
 * the top-left cell and moves down one row every step, left or right as it
 * chooses; reaching the bottom-right corner pays +1, and every move right
 * costs 0.01 / N. An episode is N steps. Which of the two actions means
 * "right" differs from cell to cell (a fixed random map from the seed, as in
 * bsuite), so no action bias solves it. The only return above zero needs N - 1
 * moves right in N steps: 1 - 0.01 (N - 1) / N; going left always gives 0.
 *
 * Observation: the grid one-hot, N * N floats, row-major: obs_scale at the
 * agent's cell, 0 elsewhere. bsuite's is 0/1 (obs_scale 1, deepsea_init's
 * default). The demo and the learning test use obs_scale = N, so that each
 * cell's feature has unit mean square over the N^2 cells: a 0/1 one-hot of
 * N^2 cells gives a fan-in-initialised first layer inputs N times smaller
 * than it assumes, the trunk's features then hardly depend on the state, and
 * neither do the ensemble's priors, which read them (docs/learner.md §8).
 * Actions: one branch of 2 (flat action 0 or 1).
 */
#ifndef DQND_DEEPSEA_ENV_H
#define DQND_DEEPSEA_ENV_H

#include <stdint.h>

#define DEEPSEA_MAX_N 64

typedef struct deepsea_env {
  int n;          /* grid size N (2..DEEPSEA_MAX_N) */
  uint64_t seed;  /* the action map's seed */
  float obs_scale; /* the one-hot's value (1: bsuite's) */
  int row, col, t;
} deepsea_env_t;

/* 0, or -1 when n is outside [2, DEEPSEA_MAX_N] */
int deepsea_init(deepsea_env_t *e, int n, uint64_t seed);
void deepsea_reset(deepsea_env_t *e);
void deepsea_observe(const deepsea_env_t *e, float *obs); /* N*N floats */
/* Applies action 0 or 1; the reward; *done after the N-th step. -1 for a bad action
 * is not possible here: callers check 0 <= action < 2 first. */
float deepsea_step(deepsea_env_t *e, int32_t action, int *done);
/* The action that moves right from the current cell. */
int32_t deepsea_right_action(const deepsea_env_t *e);
/* The best return of an episode: 1 - 0.01 (N - 1) / N. */
float deepsea_optimal_return(int n);

/* The training loop of `dqnctl demo --env deepsea` and the learning test,
 * written once against meanrev_env.h's driver. Each episode: act on every step
 * (naming the episode, so an ensemble's thompson keeps one head all episode;
 * fresh noise when noisy; epsilon-greedy from 1 to 0.05 over the first half
 * of the episodes when epsilon is set), submit the episode's N transitions
 * (the last one terminal), then train train_steps steps. Every 100 episodes
 * (and after the last) cb gets the window's share of episodes that reached
 * the reward and its mean return. */
typedef struct deepsea_opts {
  int n;              /* grid size */
  long long episodes;
  uint64_t seed;      /* the action map's and epsilon's seed */
  int noisy;          /* act with fresh NoisyNet noise */
  int epsilon;        /* epsilon-greedy exploration (a single head without noise) */
  int train_steps;    /* learner steps per episode (0: N) */
  float obs_scale;    /* the observation's one-hot value (0: 1, bsuite's) */
} deepsea_opts_t;

typedef struct deepsea_point {
  long long episodes; /* episodes played so far (the window ends here) */
  int window;         /* episodes in the window */
  double success;     /* share of the window's episodes that reached the reward */
  double mean_return;
} deepsea_point_t;

struct demo_driver;
struct learner_config;
/* The learner config the demo and the learning test start from: state_dim
 * N*N, one branch of 2, two atoms on [-1, 1] (deepsea_env.c says why), a
 * small net, lr 1e-4, uniform replay, and an ensemble of 10 thompson heads
 * with priors (scale 10) and bootstrap masks (p 0.5); deepsea_env.c says why. */
void deepsea_learner_config(struct learner_config *c, int n);
typedef void (*deepsea_progress_cb)(void *ctx, const deepsea_point_t *p);
/* 0, the first driver error, or -1 when out of memory or o->n is out of range. */
int deepsea_train(const struct demo_driver *drv, const deepsea_opts_t *o, deepsea_progress_cb cb, void *cb_ctx);

#endif
