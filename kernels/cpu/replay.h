/*
 * replay.h — the CPU replay ring with prioritised (sum-tree) or uniform
 * sampling. docs/learner.md §5.
 *
 * Storage is a ring of capacity C in structure-of-arrays form:
 *   s, s2 [C, S] float; a [C] int32 flat action; r [C] float; done [C] u8;
 *   ep [C] int64 episode id.
 * Entries [0, size) are always the valid ones (the ring fills from 0).
 *
 * Priorities: the trees hold leaf = priority^alpha, priority = loss + eps.
 * sum[] and mn[] are implicit binary trees over T = next power of two >= C
 * leaves: node 1 is the root, node k has children 2k, 2k+1, leaf i is node
 * T + i. An internal node is always recomputed as left + right (never
 * incremented), so the float sums never drift and both backends, doing the
 * same additions, hold the same bits.
 */
#ifndef DQN_CPU_REPLAY_H
#define DQN_CPU_REPLAY_H

#include "../learner.h"

typedef struct replay {
  int64_t cap, size, head, total;
  int32_t S;
  float *s, *s2, *r;
  int32_t *a;
  uint8_t *done;
  int64_t *ep;
  /* episodes (her.h): the stored end markers (truncations) and, per slot, its
   * episode's first and last insertion count (last -1 while open) */
  uint8_t *epend;
  int64_t *ep_first, *ep_last;
  int64_t open_first; /* the insertion count the open episode began at */
  int32_t prioritized;
  float alpha;
  int64_t T;      /* tree leaves: power of two >= cap */
  float *sum;     /* [2T] */
  float *mn;      /* [2T], empty leaves = +inf */
  float max_leaf; /* largest leaf ever set; new items get it (starts at 1) */
} replay_t;

int replay_init(replay_t *rp, int64_t cap, int S, int prioritized, float alpha);
void replay_free(replay_t *rp);
/* Appends n transitions (already validated). */
void replay_add(replay_t *rp, const learner_transitions_t *t);
/* Sets leaf i to value v (already ^alpha) and fixes its ancestors. */
void replay_tree_set(replay_t *rp, int64_t i, float v);
/* Leaf index whose prefix-sum interval holds `target` in [0, total). */
int64_t replay_tree_find(const replay_t *rp, float target);
/* Draws B indices for training step `step` from Philox stream REPLAY (lane =
 * sample) and their IS weights w_i = (leaf_min / leaf_i)^beta (max weight over
 * the buffer normalised to 1); uniform: w_i = 1. Stratified for PER: sample i
 * falls in [i, i+1) * total / B. Needs size > 0. */
void replay_sample(const replay_t *rp, uint64_t seed, uint64_t step, int B, float beta, int64_t *idx,
                   float *w);
/* New priorities (loss_i + eps) for the sampled indices, in batch order (a
 * duplicate index keeps its last value). */
void replay_update_priorities(replay_t *rp, const int64_t *idx, const float *prio, int B);
/* Recomputes every internal node from the leaves (after a restore). */
void replay_rebuild(replay_t *rp);
/* Rebuilds the episode bounds from the stored dones and end markers (after a
 * restore): the oldest stored episode counts as overwritten unless the ring
 * has never wrapped (its first transition may be gone). */
void replay_rebuild_episodes(replay_t *rp);
/* beta at step t: beta0 + (1 - beta0) * min(1, t / steps) */
/* The insertion count (0-based, over the replay's life: total at insertion
 * + its index in the submit) of the transition at ring position j: the newest
 * is total - 1 at head - 1, and positions count back from there. */
static inline int64_t replay_insertion_count(const replay_t *rp, int64_t j) {
  int64_t back = ((rp->head - 1 - j) % rp->cap + rp->cap) % rp->cap;
  return rp->total - 1 - back;
}
float replay_beta(float beta0, int64_t steps, uint64_t t);

#endif
