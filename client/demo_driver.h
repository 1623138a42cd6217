/*
 * demo_driver.h — what the built-in environments' training loops (meanrev,
 * deep sea, bit flipping: meanrev_env.h, deepsea_env.h, bitflip_env.h) run
 * against: a learner in this process (tests, dqn-demo) or a trainer on a
 * daemon (dqnctl demo), behind the same three callbacks.
 */
#ifndef DQND_DEMO_DRIVER_H
#define DQND_DEMO_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "learner_types.h"

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
  /* the Decision Transformer (docs/learner.md §16): n pre-training steps, and
   * Act by return conditioning on one window; NULL where not offered */
  int (*pretrain_dt)(void *ctx, int n, learner_dt_stats_t *st);
  int (*act_dt)(void *ctx, const learner_dt_window_t *w, int32_t *action);
} demo_driver_t;

/* A driver over an in-process learner (tests, dqn-demo). Errors go to stderr;
 * a step before the replay holds a batch counts as warm-up, not an error.
 * Defined in demo_learner.c (dqnutil_dep, which links the learner). */
struct learner; /* learner.h: only demo_learner.c, which links the learner, needs its API */
void demo_driver_learner(demo_driver_t *d, struct learner *l);

/* Applies "name=value" strings onto c, then validates it: 0, or
 * LEARNER_EINVAL with err naming the field (the demos' and benches' fields). */
int demo_config_set_fields(learner_config_t *c, const char *const *fields, int n, char *err, size_t errlen);

#endif
