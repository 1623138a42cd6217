/*
 * deepsea_env.h — bsuite's deep sea (Osband et al. 2019), the exploration
 * test of DESIGN.md §6.2's ensemble heads: an N x N grid, the agent starts in
 * the top-left cell and moves down one row every step, left or right as it
 * chooses; reaching the bottom-right corner pays +1, and every move right
 * costs 0.01 / N. An episode is N steps. Which of the two actions means
 * "right" differs from cell to cell (a fixed random map from the seed, as in
 * bsuite), so no action bias solves it. The only return above zero needs N - 1
 * moves right in N steps: 1 - 0.01 (N - 1) / N; going left always gives 0.
 *
 * Observation: the grid one-hot, N * N floats, row-major, 1 at the agent.
 * Actions: one branch of 2 (flat action 0 or 1).
 */
#ifndef DQND_DEEPSEA_ENV_H
#define DQND_DEEPSEA_ENV_H

#include <stdint.h>

#define DEEPSEA_MAX_N 64

typedef struct deepsea_env {
  int n;          /* grid size N (2..DEEPSEA_MAX_N) */
  uint64_t seed;  /* the action map's seed */
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

#endif
