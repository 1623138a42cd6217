/*
 * act_rows.h — the check that Act is independent of the other states in the
 * request, bit for bit (docs/learner.md, "Act"), shared by the CPU suite
 * (test-state) and the GPU suite (test-gpu-learner).
 *
 * One Act of n states is compared with Acts of the same states cut into
 * pieces of uneven sizes (1, 2, 3, 5, 7, 64, 100, 1000, 1499, then the rest),
 * and with a sample of single states asked for alone: actions, the Q values
 * and (K > 1) the variance over heads must be equal bit for bit (memcmp), so
 * a state's answer cannot depend on how many states came with it or where
 * it sat among them.
 */
#ifndef DQND_ACT_ROWS_H
#define DQND_ACT_ROWS_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "learner.h"

/* s: [n, state_dim] finite states; fails the running check test on any
 * difference, naming the state and the piece. Returns the number of states
 * whose greedy action differs from state 0's (the caller asserts it is > 0,
 * so a row shift could not go unseen). */
static inline int tu_check_act_rows(learner_t *l, const float *s, int n, int64_t episode) {
  static const int cuts[] = {1, 2, 3, 5, 7, 64, 100, 1000, 1499};
  const learner_config_t *c = learner_config(l);
  const int S = c->state_dim;
  int W = 0;
  for (int d = 0; d < c->n_branches; d++) W += c->branch_sizes[d];
  float *q = malloc(sizeof(float) * (size_t)n * W), *v = malloc(sizeof(float) * (size_t)n * W);
  float *q2 = malloc(sizeof(float) * (size_t)n * W), *v2 = malloc(sizeof(float) * (size_t)n * W);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)n), *a2 = malloc(sizeof(int32_t) * (size_t)n);
  ck_assert(q && v && q2 && v2 && a && a2);
  char err[256];
  ck_assert_msg(learner_act_episode(l, s, n, 0, episode, a, q, v, err, sizeof err) == 0, "%s", err);
  /* the same states in uneven pieces */
  int i0 = 0;
  for (size_t k = 0; i0 < n; k++) {
    int m = k < sizeof cuts / sizeof cuts[0] ? cuts[k] : n - i0;
    if (m > n - i0) m = n - i0;
    ck_assert_msg(learner_act_episode(l, s + (size_t)i0 * S, m, 0, episode, a2 + i0, q2 + (size_t)i0 * W,
                                      v2 + (size_t)i0 * W, err, sizeof err) == 0,
                  "%s", err);
    i0 += m;
  }
  for (int i = 0; i < n; i++) {
    ck_assert_msg(a[i] == a2[i], "state %d: action %d in one Act of %d, %d in pieces", i, a[i], n, a2[i]);
    ck_assert_msg(!memcmp(q + (size_t)i * W, q2 + (size_t)i * W, sizeof(float) * W),
                  "state %d: Q differs between one Act of %d states and Acts of pieces", i, n);
    ck_assert_msg(!memcmp(v + (size_t)i * W, v2 + (size_t)i * W, sizeof(float) * W),
                  "state %d: the variance over heads differs between one Act of %d and pieces", i, n);
  }
  /* single states alone: the first, the last and every 97th */
  for (int j = 0; j <= n / 97; j++) {
    const int i = j < n / 97 ? j * 97 : n - 1;
    int32_t a1;
    ck_assert_msg(learner_act_episode(l, s + (size_t)i * S, 1, 0, episode, &a1, q2, v2, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(a1 == a[i], "state %d alone: action %d, %d among %d states", i, a1, a[i], n);
    ck_assert_msg(!memcmp(q2, q + (size_t)i * W, sizeof(float) * W), "state %d alone: Q differs from its row among %d",
                  i, n);
    ck_assert_msg(!memcmp(v2, v + (size_t)i * W, sizeof(float) * W),
                  "state %d alone: the variance differs from its row among %d", i, n);
  }
  int distinct = 0;
  for (int i = 1; i < n; i++) distinct += a[i] != a[0];
  free(q), free(v), free(q2), free(v2), free(a), free(a2);
  return distinct;
}

#endif
