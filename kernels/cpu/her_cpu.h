/*
 * her_cpu.h — the CPU's spec of hindsight relabelling and n-step returns
 * on a gathered batch (docs/learner.md §9; the rules are ../her.h, shared with
 * the CUDA graph).
 */
#ifndef DQN_CPU_HER_CPU_H
#define DQN_CPU_HER_CPU_H

#include "replay.h"

/* Rewrites batch rows in place: x [2B, S] (s rows then s' rows), r [B],
 * done [B] as the replay gathered them for indices idx at training step
 * `step`. Relabelled rows get the donor's goal in s and s', the goal reward
 * and, with her_done_on_success, done = success; other rows with n_step > 1
 * get the n-step return, s' and done of the m-th transition, and discount
 * gamma^m in gdisc [B]. Returns 1 when gdisc holds a row's discount other
 * than gamma (the loss must read it), else 0; does nothing with HER off and
 * n_step = 1 (today's step, bit for bit). */
int her_batch_cpu(const replay_t *rp, const learner_config_t *c, uint64_t step, int B, const int64_t *idx, float *x,
                  float *r, float *done, float *gdisc);

#endif
