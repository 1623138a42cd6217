/*
 * optim.h — global gradient norm, AdamW and target-network updates (CPU).
 * Shapes: n = number of parameters; p, g, m, v [n].
 */
#ifndef DQN_CPU_OPTIM_H
#define DQN_CPU_OPTIM_H

#include <stdint.h>

/* sqrt(sum g^2), accumulated in double in index order. */
double grad_norm(const float *g, int64_t n);
/* The factor torch.nn.utils.clip_grad_norm_ applies: min(1, clip/(norm+1e-6)); 1 when clip <= 0. */
float grad_clip_scale(double norm, float clip);
/* One AdamW step (Loshchilov & Hutter; torch.optim.AdamW) on g' = scale * g,
 * t = step number starting at 1:
 *   p <- p (1 - lr wd)              (decoupled decay, before the moment update)
 *   m <- b1 m + (1 - b1) g' ; v <- b2 v + (1 - b2) g'^2
 *   p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
void adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float scale, float lr, float b1,
                  float b2, float eps, float wd, uint64_t t);
/* target <- tau * online + (1 - tau) * target; tau >= 1 copies. */
void target_update(float *target, const float *online, int64_t n, float tau);

#endif
