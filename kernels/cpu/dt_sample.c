/* dt_sample.c — a Decision Transformer batch from the CPU replay: the
 * windows of dt_window.h (docs/learner.md §16, "Windows"). */
#include <string.h>

#include "dt.h"
#include "dt_window.h"
#include "replay.h"

int dt_replay_has_episode(const replay_t *rp) {
  for (int64_t j = 0; j < rp->size; j++)
    if (her_eligible(rp->ep_first[j], rp->ep_last[j], rp->total, rp->size)) return 1;
  return 0;
}

int dt_sample(const replay_t *rp, uint64_t seed, uint64_t step, int B, int K, float rtg_scale, float *states,
              float *rtg, int32_t *actions, int32_t *timesteps, float *mask) {
  const int S = rp->S;
  int rows = 0;
  memset(states, 0, sizeof(float) * (size_t)B * K * S);
  memset(rtg, 0, sizeof(float) * (size_t)B * K);
  memset(actions, 0, sizeof(int32_t) * (size_t)B * K);
  memset(timesteps, 0, sizeof(int32_t) * (size_t)B * K);
  memset(mask, 0, sizeof(float) * (size_t)B * K);
  if (rp->size < 1) return 0;
  for (int i = 0; i < B; i++) {
    int64_t first, last;
    const int64_t j = dt_window_end(seed, step, i, rp->ep_first, rp->ep_last, rp->total, rp->size, &first, &last);
    if (j < 0) continue;
    rows++;
    const int64_t end = replay_insertion_count(rp, j);
    float g = dt_rtg_from(rp->r, end, last, rp->head, rp->total, rp->cap);
    for (int q = K - 1; q >= 0; q--) {
      const int64_t c = end - (K - 1 - q);
      if (c < first) break; /* the padding on the left */
      const int64_t slot = her_slot(c, rp->head, rp->total, rp->cap);
      if (c < end) g = rp->r[slot] + g;
      const size_t o = (size_t)i * K + q;
      memcpy(states + o * S, rp->s + (size_t)slot * S, sizeof(float) * S);
      rtg[o] = g / rtg_scale;
      actions[o] = rp->a[slot];
      timesteps[o] = (int32_t)(c - first);
      mask[o] = 1;
    }
  }
  return rows;
}
