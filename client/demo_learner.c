/* demo_learner.c — demo_driver_learner (demo_driver.h): the environments'
 * training loops over an in-process learner (dqn-demo, the learning test).
 * Its own file, and its own library, because it links the learner's
 * backends: dqnctl drives a remote trainer and links only the environments. */
#include <stdio.h>

#include "demo_driver.h"
#include "learner.h"

static int local_submit(void *ctx, const learner_transitions_t *t) {
  char err[256];
  int rc = learner_submit(ctx, t, err, sizeof err);
  if (rc) fprintf(stderr, "submit: %s\n", err);
  return rc;
}
static int local_step(void *ctx, int n, learner_stats_t *st) {
  char err[256];
  int rc = learner_step(ctx, n, st, err, sizeof err);
  if (rc == LEARNER_EEMPTY) return 0;
  if (rc) fprintf(stderr, "step: %s\n", err);
  return rc;
}
static int local_act(void *ctx, const float *s, int n, int noisy, uint64_t episode, int32_t *a) {
  char err[256];
  int rc = learner_act_episode(ctx, s, n, noisy, (int64_t)episode, a, NULL, NULL, err, sizeof err);
  if (rc) fprintf(stderr, "act: %s\n", err);
  return rc;
}

static int local_pretrain_dt(void *ctx, int n, learner_dt_stats_t *st) {
  char err[256];
  int rc = learner_pretrain_dt(ctx, n, NULL, st, err, sizeof err);
  if (rc) fprintf(stderr, "pretrain: %s\n", err);
  return rc;
}
static int local_act_dt(void *ctx, const learner_dt_window_t *w, int32_t *a) {
  char err[256];
  int rc = learner_act_dt(ctx, w, a, err, sizeof err);
  if (rc) fprintf(stderr, "act (dt): %s\n", err);
  return rc;
}

void demo_driver_learner(demo_driver_t *d, learner_t *l) {
  d->ctx = l;
  d->submit = local_submit;
  d->step = local_step;
  d->act = local_act;
  d->pretrain_dt = local_pretrain_dt;
  d->act_dt = local_act_dt;
}
