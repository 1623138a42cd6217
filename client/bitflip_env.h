/*
 * bitflip_env.h — the bit-flipping environment of the HER paper (Andrychowicz
 * et al. 2017; Stable-Baselines3's BitFlippingEnv): n bits, a random start
 * and a random goal (different from the start), action i flips bit i, reward
 * -1 on every step that does not end equal to the goal and 0 on the one that
 * does (which ends the episode, terminal); an episode that has not reached
 * the goal after n steps ends truncated. Without hindsight the reward is
 * almost never seen for n >= 10; HER (her_goal_dim = n) makes it learnable.
 *
 * Observation (state_dim 2n): achieved goal (the bits, 0/1) ‖ desired goal:
 * no other observation (HER's obs part O is 0). Actions: one branch of n.
 */
#ifndef DQND_BITFLIP_ENV_H
#define DQND_BITFLIP_ENV_H

#include <stdint.h>

#define BITFLIP_MAX_N 64

typedef struct bitflip_env {
  int n;
  uint64_t seed;
  uint64_t episode;
  uint8_t bits[BITFLIP_MAX_N], goal[BITFLIP_MAX_N];
  int t;
} bitflip_env_t;

/* 0, or -1 when n is outside [2, BITFLIP_MAX_N] */
int bitflip_init(bitflip_env_t *e, int n, uint64_t seed);
/* a new start and goal for episode number `episode` (from the seed) */
void bitflip_reset(bitflip_env_t *e, uint64_t episode);
void bitflip_observe(const bitflip_env_t *e, float *obs); /* 2n floats */
/* Flips bit `action` (0 <= action < n, checked by the caller); the reward;
 * *done = 1 on success (terminal), *truncated = 1 after n steps without it. */
float bitflip_step(bitflip_env_t *e, int32_t action, int *done, int *truncated);

/* The training loop of `dqnctl demo --env bitflip` and the learning test,
 * against meanrev_env.h's driver. Each episode: act greedily on every step (the
 * trainer's Act), epsilon-greedy with epsilon from 1 down to eps_final over
 * the first eps_episodes episodes, submit the episode's transitions (its end
 * marked: terminal on success, truncated after n steps), then train one
 * learner step per transition. Every 100 episodes (and after the last) cb
 * gets the window's success rate and mean episode length. */
typedef struct bitflip_opts {
  int n;
  long long episodes;
  uint64_t seed;           /* starts, goals and epsilon's coins */
  long long eps_episodes;  /* epsilon decays over these (0: 40% of the episodes) */
  float eps_final;         /* epsilon after that */
  int train_ratio;         /* learner steps per transition (0: 1) */
} bitflip_opts_t;

typedef struct bitflip_point {
  long long episodes;
  int window;
  double success;     /* share of the window's episodes that reached the goal */
  double mean_steps;  /* their mean length */
} bitflip_point_t;

struct demo_driver;
struct learner_config;
/* The learner config the demo and the learning test start from: state_dim
 * 2n, one branch of n, HER on the whole state (her_goal_dim n; future, ratio
 * 0.8, exact match, done on success), 51 atoms on [-n, 0], gamma 0.98,
 * batch 256, lr 0.002, Polyak tau 0.05 (BENCHMARKS.md: the variants tried). */
void bitflip_learner_config(struct learner_config *c, int n);
typedef void (*bitflip_progress_cb)(void *ctx, const bitflip_point_t *p);
/* 0, the first driver error, or -1 when out of memory or o->n is out of range */
int bitflip_train(const struct demo_driver *drv, const bitflip_opts_t *o, bitflip_progress_cb cb, void *cb_ctx);

#endif
