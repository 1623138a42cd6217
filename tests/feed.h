/*
 * feed.h — n made-up transitions into a learner (states and next states
 * uniform in [-1, 1], actions uniform over the joint actions, rewards in
 * [-2, 2], 20% terminal), the same for the same tag: what the CPU learner
 * tests (test-state, test-population) train on; and transitions in
 * episodes (HER, n-step and the DT read their bounds), whose last one may
 * run on into the next call's.
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

/* transitions in episodes of 1..16 steps (random states, actions and
 * rewards; a reward is a function of its action), every other one truncated
 * (episode_ends) rather than terminal (the call's last episode may end in a
 * later call), submitted in chunks of the given sizes
 * so episodes cross submits (and, with a small ring, the wrap-around) */
static inline void tu_feed_episodes(learner_t *l, const int *chunks, int n_chunks, uint64_t tag) {
  const learner_config_t *c = learner_config(l);
  int S = c->state_dim, A = learner_config_joint_actions(c), total = 0;
  for (int k = 0; k < n_chunks; k++) total += chunks[k];
  float *s = malloc(sizeof(float) * (size_t)total * S), *s2 = malloc(sizeof(float) * (size_t)total * S);
  float *r = malloc(sizeof(float) * (size_t)total);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)total);
  uint8_t *d = calloc((size_t)total, 1), *e = calloc((size_t)total, 1);
  double *u = malloc(sizeof(double) * 2 * (size_t)total);
  tu_fill_uniform_f32(s, (int64_t)total * S, -1, 1, 31, tag);
  tu_fill_uniform_f32(s2, (int64_t)total * S, -1, 1, 32, tag);
  tu_fill_uniform_f64(u, 2 * total, 0, 1, 33, tag);
  int left = 0, ep = 0;
  for (int i = 0; i < total; i++) {
    if (left == 0) left = 1 + (int)(u[total + i] * 16), ep++;
    a[i] = (int32_t)(u[i] * A) % A;
    r[i] = (float)(u[i] * 2 - 1);
    if (--left == 0) (ep % 2 ? d : e)[i] = 1;
  }
  for (int k = 0, off = 0; k < n_chunks; off += chunks[k++]) {
    learner_transitions_t t = {chunks[k], s + (size_t)off * S, a + off, r + off, s2 + (size_t)off * S, d + off, NULL, e + off};
    char err[256];
    ck_assert_msg(learner_submit(l, &t, err, sizeof err) == 0, "%s", err);
  }
  free(s), free(s2), free(r), free(a), free(d), free(e), free(u);
}

#endif
