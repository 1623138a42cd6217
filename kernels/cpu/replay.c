/* replay.c — see replay.h. */
#include "replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../her.h"
#include "../philox.h"

int replay_init(replay_t *rp, int64_t cap, int S, int prioritized, float alpha) {
  memset(rp, 0, sizeof *rp);
  rp->cap = cap;
  rp->S = S;
  rp->prioritized = prioritized;
  rp->alpha = alpha;
  rp->max_leaf = 1.0f;
  /* calloc: pages are touched only as the ring fills */
  rp->s = calloc((size_t)cap * S, sizeof(float));
  rp->s2 = calloc((size_t)cap * S, sizeof(float));
  rp->r = calloc((size_t)cap, sizeof(float));
  rp->a = calloc((size_t)cap, sizeof(int32_t));
  rp->done = calloc((size_t)cap, 1);
  rp->ep = calloc((size_t)cap, sizeof(int64_t));
  rp->epend = calloc((size_t)cap, 1);
  rp->ep_first = calloc((size_t)cap, sizeof(int64_t));
  rp->ep_last = calloc((size_t)cap, sizeof(int64_t));
  if (!rp->s || !rp->s2 || !rp->r || !rp->a || !rp->done || !rp->ep || !rp->epend || !rp->ep_first || !rp->ep_last)
    goto fail;
  if (prioritized) {
    rp->T = 1;
    while (rp->T < cap) rp->T <<= 1;
    rp->sum = calloc((size_t)(2 * rp->T), sizeof(float));
    rp->mn = malloc((size_t)(2 * rp->T) * sizeof(float));
    if (!rp->sum || !rp->mn) goto fail;
    for (int64_t k = 0; k < 2 * rp->T; k++) rp->mn[k] = INFINITY;
  }
  return 0;
fail:
  replay_free(rp);
  return -1;
}

void replay_free(replay_t *rp) {
  free(rp->s);
  free(rp->s2);
  free(rp->r);
  free(rp->a);
  free(rp->done);
  free(rp->ep);
  free(rp->epend);
  free(rp->ep_first);
  free(rp->ep_last);
  free(rp->sum);
  free(rp->mn);
  memset(rp, 0, sizeof *rp);
}

void replay_tree_set(replay_t *rp, int64_t i, float v) {
  int64_t k = rp->T + i;
  rp->sum[k] = v;
  rp->mn[k] = v;
  for (k >>= 1; k >= 1; k >>= 1) {
    rp->sum[k] = rp->sum[2 * k] + rp->sum[2 * k + 1];
    float a = rp->mn[2 * k], b = rp->mn[2 * k + 1];
    rp->mn[k] = a < b ? a : b;
  }
}

void replay_rebuild(replay_t *rp) {
  if (!rp->prioritized) return;
  for (int64_t i = rp->size; i < rp->T; i++) {
    rp->sum[rp->T + i] = 0;
    rp->mn[rp->T + i] = INFINITY;
  }
  for (int64_t k = rp->T - 1; k >= 1; k--) {
    rp->sum[k] = rp->sum[2 * k] + rp->sum[2 * k + 1];
    float a = rp->mn[2 * k], b = rp->mn[2 * k + 1];
    rp->mn[k] = a < b ? a : b;
  }
}

/* Internal nodes over leaves [lo, hi] (inclusive), level by level: O(n + log C)
 * for a contiguous run instead of O(n log C) one leaf at a time. Each node is
 * still left + right, so the bits equal replay_tree_set's. */
static void tree_fix_range(replay_t *rp, int64_t lo, int64_t hi) {
  lo = (rp->T + lo) >> 1;
  hi = (rp->T + hi) >> 1;
  for (; lo >= 1; lo >>= 1, hi >>= 1) {
    for (int64_t k = lo; k <= hi; k++) {
      rp->sum[k] = rp->sum[2 * k] + rp->sum[2 * k + 1];
      float a = rp->mn[2 * k], b = rp->mn[2 * k + 1];
      rp->mn[k] = a < b ? a : b;
    }
    if (lo == 1) break;
  }
}

/* The transition of count c just stored at slot: it joins the open episode,
 * and closes it when it is terminal or marked as an episode end (every slot
 * of the episode still in the ring learns its last count). */
static void episode_add(replay_t *rp, int64_t slot, int64_t c) {
  rp->ep_first[slot] = rp->open_first;
  rp->ep_last[slot] = -1;
  if (!rp->done[slot] && !rp->epend[slot]) return;
  int64_t from = rp->open_first > rp->total - rp->size ? rp->open_first : rp->total - rp->size;
  for (int64_t x = from; x <= c; x++) rp->ep_last[her_slot(x, rp->head, rp->total, rp->cap)] = c;
  rp->open_first = c + 1;
}

void replay_rebuild_episodes(replay_t *rp) {
  rp->open_first =
      her_rebuild_episodes(rp->done, rp->epend, rp->head, rp->total, rp->size, rp->cap, rp->ep_first, rp->ep_last);
}

void replay_add(replay_t *rp, const learner_transitions_t *t) {
  size_t S = (size_t)rp->S;
  int64_t done = 0;
  while (done < t->n) {
    /* the longest run that does not wrap around the ring */
    int64_t h = rp->head, run = t->n - done;
    if (run > rp->cap - h) run = rp->cap - h;
    memcpy(rp->s + h * S, t->states + done * S, (size_t)run * S * sizeof(float));
    memcpy(rp->s2 + h * S, t->next_states + done * S, (size_t)run * S * sizeof(float));
    memcpy(rp->a + h, t->actions + done, (size_t)run * sizeof(int32_t));
    memcpy(rp->r + h, t->rewards + done, (size_t)run * sizeof(float));
    for (int64_t j = 0; j < run; j++) {
      rp->done[h + j] = t->dones[done + j] ? 1 : 0;
      rp->ep[h + j] = t->episode_ids ? t->episode_ids[done + j] : 0;
      rp->epend[h + j] = t->episode_ends && t->episode_ends[done + j] ? 1 : 0;
    }
    if (rp->prioritized) {
      for (int64_t j = 0; j < run; j++) rp->sum[rp->T + h + j] = rp->mn[rp->T + h + j] = rp->max_leaf;
      tree_fix_range(rp, h, h + run - 1);
    }
    rp->head = (h + run) % rp->cap;
    rp->size = rp->size + run < rp->cap ? rp->size + run : rp->cap;
    int64_t c0 = rp->total;
    rp->total += run;
    for (int64_t j = 0; j < run; j++) episode_add(rp, h + j, c0 + j);
    done += run;
  }
}

int64_t replay_tree_find(const replay_t *rp, float target) {
  int64_t k = 1;
  while (k < rp->T) {
    float left = rp->sum[2 * k], right = rp->sum[2 * k + 1];
    /* an empty right subtree is never entered, whatever rounding did to target */
    if ((target < left && left > 0) || !(right > 0)) {
      k = 2 * k;
    } else {
      target -= left;
      k = 2 * k + 1;
    }
  }
  int64_t i = k - rp->T;
  return i < rp->size ? i : rp->size - 1;
}

float replay_beta(float beta0, int64_t steps, uint64_t t) {
  if (steps <= 0) return beta0;
  double f = (double)t / (double)steps;
  if (f > 1) f = 1;
  return (float)(beta0 + (1.0 - beta0) * f);
}

void replay_sample(const replay_t *rp, uint64_t seed, uint64_t step, int B, float beta, int64_t *idx,
                   float *w) {
  if (!rp->prioritized) {
    for (int i = 0; i < B; i++) {
      philox4_t d = philox_draw(seed, PHILOX_STREAM_REPLAY, step, (uint32_t)i);
      idx[i] = (int64_t)(((uint64_t)d.v[0] * (uint64_t)rp->size) >> 32);
      w[i] = 1.0f;
    }
    return;
  }
  float total = rp->sum[1], seg = total / (float)B, leaf_min = rp->mn[1];
  for (int i = 0; i < B; i++) {
    philox4_t d = philox_draw(seed, PHILOX_STREAM_REPLAY, step, (uint32_t)i);
    float target = ((float)i + philox_uniform(d.v[1])) * seg;
    int64_t j = replay_tree_find(rp, target);
    idx[i] = j;
    w[i] = powf(leaf_min / rp->sum[rp->T + j], beta);
  }
}

void replay_update_priorities(replay_t *rp, const int64_t *idx, const float *prio, int B) {
  for (int i = 0; i < B; i++) {
    float v = fminf(fmaxf(powf(prio[i], rp->alpha), REPLAY_LEAF_MIN), REPLAY_LEAF_MAX); /* backend.h */
    if (v > rp->max_leaf) rp->max_leaf = v;
    replay_tree_set(rp, idx[i], v);
  }
}
