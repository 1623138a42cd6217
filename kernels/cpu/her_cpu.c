/* her_cpu.c — see her_cpu.h and ../her.h. */
#include "her_cpu.h"

#include <string.h>

#include "../her.h"

int her_batch_cpu(const replay_t *rp, const learner_config_t *c, uint64_t step, int B, const int64_t *idx, float *x,
                  float *r, float *done, float *gdisc) {
  const learner_hparams_t *hp = &c->hp;
  const int G = c->her_goal_dim, S = c->state_dim, n = hp->n_step, O = S - 2 * G;
  if (G == 0 && n <= 1) return 0;
  int any = 0;
  for (int i = 0; i < B; i++) {
    const int64_t j = idx[i], cnt = replay_insertion_count(rp, j);
    const int64_t first = rp->ep_first[j], last = rp->ep_last[j];
    float *xs = x + (size_t)i * S, *xs2 = x + (size_t)(B + i) * S;
    gdisc[i] = hp->gamma;
    if (G > 0 && her_row_relabelled(i, B, hp->her_ratio, first, last, rp->total, rp->size)) {
      int64_t d = her_donor_slot(c->seed, step, i, hp->her_strategy, cnt, first, last, rp->head, rp->total, rp->size,
                                 rp->cap);
      const float *g = rp->s2 + (size_t)d * S + O; /* the donor's achieved goal */
      memcpy(xs + O + G, g, sizeof(float) * (size_t)G);
      memcpy(xs2 + O + G, g, sizeof(float) * (size_t)G);
      int ok;
      r[i] = her_reward(xs2 + O, g, G, hp->her_norm, hp->her_eps, hp->her_reward_scale, &ok);
      if (hp->her_done_on_success) done[i] = (float)ok;
      continue; /* m = 1 */
    }
    if (n > 1) {
      int m = her_nstep_m(n, cnt, last, rp->total);
      if (m > 1) {
        float disc;
        r[i] = her_nstep_return(rp->r, m, cnt, hp->gamma, rp->head, rp->total, rp->cap, &disc);
        int64_t e = her_slot(cnt + m - 1, rp->head, rp->total, rp->cap);
        memcpy(xs2, rp->s2 + (size_t)e * S, sizeof(float) * (size_t)S);
        done[i] = (float)rp->done[e];
        gdisc[i] = disc;
        any = 1;
      }
    }
  }
  return any;
}
