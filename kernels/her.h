/*
 * her.h — the replay's episodes, hindsight relabelling and n-step returns
 * (docs/learner.md §9), as inline rules both backends run: the CPU's spec
 * (cpu/her_cpu.c) and the CUDA graph's kernels call these same functions, so
 * they draw the same donors and form the same targets.
 *
 * Episodes: the replay's transitions carry insertion counts (0-based over the
 * trainer's life; replay_insertion_count). An episode is a run of consecutive
 * insertions closed by a transition with done = 1 or episode_end = 1. Each
 * slot keeps its episode's first and last insertion count (last = -1 while
 * the episode is open), written at insertion. The slot of a count is found
 * from the ring's head and total, so nothing is ever scanned.
 *
 * Eligible for relabelling: the episode has ended and its first transition
 * is still in the ring (count >= total - size): an episode any of whose
 * slots was overwritten never is, across the ring's wrap-around.
 *
 * Donors (one Philox word per row: (seed, HER, training step, lane = row)):
 * future uniform on [c, last] (the row itself included), final = last,
 * episode uniform on [first, last], random uniform over the ring's slots.
 * Goal g = achieved goal of the donor's s'. Reward (success ? 0 : -1) *
 * scale, success = ||achieved(s'_i) - g|| <= eps (inf or l2 norm, summed in
 * index order).
 *
 * n-step: m = min(n, last - c + 1) with last the episode's end, or the newest
 * transition while it is open; target sum_{k<m} gamma^k r_{c+k} and the
 * bootstrap from s'_{c+m-1} with its done and gamma^m (powers by repeated
 * multiplication, so m = 1 gives exactly r and gamma). Relabelled rows use m = 1.
 */
#ifndef DQN_HER_H
#define DQN_HER_H

#include <math.h>
#include <stdint.h>

#include "learner_types.h"
#include "philox.h"

/* the ring slot holding insertion count cnt (cnt in [total - size, total),
 * so head - (total - cnt) lies in [head - cap, head): no division) */
PHILOX_FN int64_t her_slot(int64_t cnt, int64_t head, int64_t total, int64_t cap) {
  int64_t s = head - (total - cnt);
  return s < 0 ? s + cap : s;
}

PHILOX_FN int her_eligible(int64_t first, int64_t last, int64_t total, int64_t size) {
  return last >= 0 && first >= total - size;
}

/* whether batch row i is relabelled (its slot's episode bounds given) */
PHILOX_FN int her_row_relabelled(int i, int B, float ratio, int64_t first, int64_t last, int64_t total, int64_t size) {
  return (float)i < floorf(ratio * (float)B) && her_eligible(first, last, total, size);
}

/* the donor's slot for row i (count c, its episode [first, last]) */
PHILOX_FN int64_t her_donor_slot(uint64_t seed, uint64_t step, int i, int strategy, int64_t c, int64_t first,
                                 int64_t last, int64_t head, int64_t total, int64_t size, int64_t cap) {
  uint32_t u = philox_draw(seed, PHILOX_STREAM_HER, step, (uint32_t)i).v[0];
  int64_t d;
  switch (strategy) {
  case LEARNER_HER_FINAL: d = last; break;
  case LEARNER_HER_EPISODE: d = first + (int64_t)philox_below(u, (uint32_t)(last - first + 1)); break;
  case LEARNER_HER_RANDOM: return (int64_t)philox_below(u, (uint32_t)size);
  default: d = c + (int64_t)philox_below(u, (uint32_t)(last - c + 1)); break; /* future */
  }
  return her_slot(d, head, total, cap);
}

/* the relabelled reward for achieved goal a and goal g (G floats each); *success set */
PHILOX_FN float her_reward(const float *a, const float *g, int G, int norm, float eps, float scale, int *success) {
  float dist = 0;
  if (norm == LEARNER_HER_NORM_L2) {
    float s = 0;
    for (int k = 0; k < G; k++) {
      float e = a[k] - g[k];
      s += e * e;
    }
    dist = sqrtf(s);
  } else {
    for (int k = 0; k < G; k++) {
      float e = fabsf(a[k] - g[k]);
      dist = e > dist ? e : dist;
    }
  }
  *success = dist <= eps;
  return *success ? 0.0f : -scale;
}

/* m for a row of count c in an episode ending at last (-1: open; the newest is total - 1) */
PHILOX_FN int her_nstep_m(int n, int64_t c, int64_t last, int64_t total) {
  int64_t end = last >= 0 ? last : total - 1, m = end - c + 1;
  return m < n ? (int)m : n;
}

/* sum_{k<m} gamma^k r[slot(c + k)]; returns gamma^m in *disc */
PHILOX_FN float her_nstep_return(const float *r, int m, int64_t c, float gamma, int64_t head, int64_t total,
                                 int64_t cap, float *disc) {
  float R = 0, g = 1;
  for (int k = 0; k < m; k++) {
    R += g * r[her_slot(c + k, head, total, cap)];
    g *= gamma;
  }
  *disc = g;
  return R;
}

/* The episode bounds of every stored transition from the stored dones and
 * end markers (after a restore), oldest to newest; returns the count the
 * open episode began at. The oldest stored episode counts as overwritten
 * (first = oldest - 1) only when the ring is full: its start may be gone.
 * A replay not full has dropped nothing since it was last empty (a state
 * loaded without its replay starts one empty, and the next transition then
 * starts an episode), so its oldest transition starts an episode, whatever
 * the count before it; with nothing stored the next transition starts one. */
static inline int64_t her_rebuild_episodes(const uint8_t *done, const uint8_t *epend, int64_t head, int64_t total,
                                           int64_t size, int64_t cap, int64_t *first, int64_t *last) {
  const int64_t oldest = total - size;
  int64_t open = size < cap ? oldest : oldest - 1;
  for (int64_t c = oldest; c < total; c++) {
    int64_t slot = her_slot(c, head, total, cap);
    first[slot] = open;
    last[slot] = -1;
    if (done[slot] || epend[slot]) {
      for (int64_t x = open > oldest ? open : oldest; x <= c; x++) last[her_slot(x, head, total, cap)] = c;
      open = c + 1;
    }
  }
  return open;
}

#endif
