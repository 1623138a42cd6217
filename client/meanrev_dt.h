/*
 * meanrev_dt.h — Decision Transformer pre-training on meanrev (docs/learner.md
 * §16; issue 30): a dataset of whole episodes from a mix of policies (uniform
 * random, and a trained DQN acting epsilon-greedily), submitted to a trainer
 * with a DT, pre-trained, then evaluated by return conditioning against the
 * closed-form optimal policy on held-out episodes. Written against
 * demo_driver_t, so the learning test runs it on in-process learners and
 * `dqnctl demo --dt` on a daemon's trainers.
 */
#ifndef DQND_MEANREV_DT_H
#define DQND_MEANREV_DT_H

#include <stdint.h>

#include "demo_driver.h"
#include "learner_types.h"

typedef struct meanrev_dt_opts {
  int random_episodes;  /* episodes of the uniform random policy */
  int dqn_episodes;     /* episodes of the trained DQN, epsilon-greedy */
  float dqn_eps;        /* its epsilon: a uniform random action with this probability */
  int pretrain_steps;   /* PretrainDT steps in all ... */
  int pretrain_chunk;   /* ... this many per call (a progress line each) */
  int eval_episodes;    /* held-out episodes (seeds disjoint from the dataset's) */
  float target_return;  /* the return the DT is conditioned on; NAN: the dataset's best episode */
  int context;          /* the trainer's dt_context: a window's steps at most */
  uint64_t seed;
} meanrev_dt_opts_t;

typedef struct meanrev_dt_result {
  int episodes;                     /* in the dataset */
  double dataset_mean, dataset_best; /* episode returns of the dataset */
  double dqn_mean;                  /* of its epsilon-greedy DQN episodes */
  double target;                    /* the return the DT was conditioned on */
  double dt_return, optimal_return, random_return; /* mean per held-out episode */
  float loss_first, loss_last;      /* pre-training loss of the first and the last call */
  uint64_t dt_steps;
} meanrev_dt_result_t;

/* the demo's DT fields for a meanrev trainer (meanrev_learner_config plus these) */
void meanrev_dt_config(learner_config_t *c);
void meanrev_dt_opts_default(meanrev_dt_opts_t *o);
typedef void (*meanrev_dt_progress_cb)(void *ctx, const char *phase, const learner_dt_stats_t *st);
/* dqn: a trained DQN (its act); dt: a trainer with a Decision Transformer
 * (submit, pretrain_dt, act_dt), whose replay the dataset fills. 0 or the
 * first callback's error. */
int meanrev_dt_run(const demo_driver_t *dqn, const demo_driver_t *dt, const meanrev_dt_opts_t *o,
                   meanrev_dt_progress_cb cb, void *cb_ctx, meanrev_dt_result_t *res);

/* o->eval_episodes held-out episodes acted on by return conditioning (dt's
 * act_dt): each step's window is the episode's last <= o->context steps, the
 * return-to-go still wanted being target less the rewards received; fills
 * res's dt_return, optimal_return and random_return. */
int meanrev_dt_evaluate(const demo_driver_t *dt, const meanrev_dt_opts_t *o, double target, meanrev_dt_result_t *res);

#endif
