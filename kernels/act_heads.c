/*
 * act_heads.c — Act over K head sets (docs/learner.md §8), one code for both
 * backends: from each head's Q of one state, per branch the mean over heads
 * and the population variance (divided by K), and the action by act_select:
 * the argmax of the mean, of mean + ucb_c std (ucb), or of one head's Q
 * (thompson: head philox(seed, ACT_HEAD, episode) mod K, learner_act_head).
 */
#include <math.h>

#include "backend.h"
#include "philox.h"

int learner_act_head(const learner_config_t *c, int64_t episode) {
  const int K = c->ensemble_k < 1 ? 1 : c->ensemble_k;
  if (K == 1 || c->hp.act_select != LEARNER_ACT_THOMPSON) return 0;
  return (int)(philox_draw(c->seed, PHILOX_STREAM_ACT_HEAD, (uint64_t)episode, 0).v[0] % (uint32_t)K);
}

int32_t learner_act_heads(const net_layout_t *L, int sel, float ucb_c, int head, const float *qh, size_t kstride,
                          float *qrow, float *var) {
  const int K = L->K < 1 ? 1 : L->K;
  if (K == 1) sel = LEARNER_ACT_MEAN;
  int32_t flat = 0;
  for (int d = 0, off = 0; d < L->D; off += L->n[d], d++) {
    const int nd = L->n[d];
    for (int j = 0; j < nd; j++) {
      float mu = qh[off + j];
      for (int k = 1; k < K; k++) mu += qh[(size_t)k * kstride + off + j];
      if (K > 1) mu /= (float)K;
      float v = 0;
      for (int k = 0; k < K; k++) {
        float e = qh[(size_t)k * kstride + off + j] - mu;
        v += e * e;
      }
      qrow[off + j] = mu;
      var[off + j] = v / (float)K;
    }
    const float *score = sel == LEARNER_ACT_THOMPSON ? qh + (size_t)head * kstride + off : qrow + off;
    int best = 0;
    float bs = score[0] + (sel == LEARNER_ACT_UCB ? ucb_c * sqrtf(var[off]) : 0.0f);
    for (int k = 1; k < nd; k++) {
      float sk = score[k] + (sel == LEARNER_ACT_UCB ? ucb_c * sqrtf(var[off + k]) : 0.0f);
      if (sk > bs) best = k, bs = sk;
    }
    flat = flat * nd + best;
  }
  return flat;
}
