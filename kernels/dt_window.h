/*
 * dt_window.h — where a Decision Transformer window comes from (docs/
 * learner.md §16, "Windows"): the rule both backends run, so that they draw
 * the same windows (the CPU in kernels/cpu/dt_sample.c, the CUDA kernels in
 * kernels/cuda/dt_train.cu call these same functions).
 *
 * Row i of pre-training step t ends its window at a slot drawn uniformly from
 * the ring (Philox stream DT, counter t, lane i x DT_TRIES + try, word 0),
 * taking the first of up to DT_TRIES draws whose episode has ended and is
 * stored whole (her_eligible); when none is, the row is all padding. The
 * window is the K insertion counts ending there, those before the episode's
 * first left as padding (mask 0); the timestep of count c is c - first, its
 * return-to-go the sum of the episode's rewards from c to its last
 * transition, divided by the scale.
 */
#ifndef DQN_DT_WINDOW_H
#define DQN_DT_WINDOW_H

#include <stdio.h>

#include "her.h"
#include "philox.h"

#define DT_TRIES 16


/* Why a pre-training step drew no window, for both backends' refusal: the
 * replay holds no whole ended episode (has 0), or step t's B rows each missed
 * them in all DT_TRIES draws (they are few among the replay's slots). The
 * draws depend only on the seed, t and the replay's size, so the step is
 * refused the same way until more ended episodes arrive. */
static inline void dt_no_window_message(char *err, size_t n, int has, unsigned long long t, int B, long long size) {
  if (!has)
    snprintf(err, n, "the replay holds no whole episode that has ended: a Decision Transformer window needs one "
                     "(submit episodes that end in done or episode_ends)");
  else
    snprintf(err, n,
             "pre-training step %llu drew no window: each of its %d rows missed, in all %d draws, the slots of "
             "whole ended episodes among the replay's %lld (they are too few; submit more episodes that end in "
             "done or episode_ends)",
             t + 1, B, DT_TRIES, size);
}

/* the window's last slot for row i, or -1 (no eligible draw); its episode's
 * bounds through *first, *last (insertion counts) */
PHILOX_FN int64_t dt_window_end(uint64_t seed, uint64_t step, int i, const int64_t *ep_first, const int64_t *ep_last,
                                int64_t total, int64_t size, int64_t *first, int64_t *last) {
  for (int k = 0; k < DT_TRIES; k++) {
    const uint32_t u = philox_draw(seed, PHILOX_STREAM_DT, step, (uint32_t)i * DT_TRIES + (uint32_t)k).v[0];
    const int64_t j = (int64_t)philox_below(u, (uint32_t)size);
    if (her_eligible(ep_first[j], ep_last[j], total, size)) {
      *first = ep_first[j], *last = ep_last[j];
      return j;
    }
  }
  return -1;
}

/* the return-to-go of count c: sum of r over counts [c, last], in count order
 * from the end back (as the window fills it: rtg_c = r_c + rtg_{c+1}) */
PHILOX_FN float dt_rtg_from(const float *r, int64_t c, int64_t last, int64_t head, int64_t total, int64_t cap) {
  float g = 0;
  for (int64_t x = last; x >= c; x--) g = r[her_slot(x, head, total, cap)] + g;
  return g;
}

#endif
