/*
 * feed.h — n made-up transitions into a learner (states and next states
 * uniform in [-1, 1], actions uniform over the joint actions, rewards in
 * [-2, 2], 20% terminal), the same for the same tag: what the CPU learner
 * tests (test-state, test-population) train on.
 */
#ifndef DQND_TEST_FEED_H
#define DQND_TEST_FEED_H

#include <check.h>
#include <stdlib.h>

#include "learner.h"
#include "testutil.h"

static inline void tu_feed(learner_t *l, int n, uint64_t tag) {
  const learner_config_t *c = learner_config(l);
  const int S = c->state_dim, A = learner_config_joint_actions(c);
  float *s = malloc(sizeof(float) * (size_t)(n * S)), *s2 = malloc(sizeof(float) * (size_t)(n * S));
  float *r = malloc(sizeof(float) * (size_t)n);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)n);
  uint8_t *d = malloc((size_t)n);
  double *u = malloc(sizeof(double) * (size_t)(3 * n));
  tu_fill_uniform_f32(s, (int64_t)n * S, -1, 1, 3, tag);
  tu_fill_uniform_f32(s2, (int64_t)n * S, -1, 1, 4, tag);
  tu_fill_uniform_f64(u, 3 * n, 0, 1, 5, tag);
  for (int i = 0; i < n; i++) {
    a[i] = (int32_t)(u[i] * A);
    r[i] = (float)(u[n + i] * 4 - 2);
    d[i] = u[2 * n + i] < 0.2;
  }
  learner_transitions_t t = {n, s, a, r, s2, d, NULL, NULL};
  char err[256];
  ck_assert_msg(learner_submit(l, &t, err, sizeof err) == 0, "%s", err);
  free(s), free(s2), free(r), free(a), free(d), free(u);
}

#endif
