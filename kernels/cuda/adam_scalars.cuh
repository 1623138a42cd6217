/*
 * adam_scalars.cuh — the training step's AdamW scalars, shared by optim.cu
 * and the learner's sample kernel (which computes the norm-free ones beside
 * its sampling, off the critical path); the clip's scale, the decay and
 * AdamW's element update, shared by optim.cu and the DT's dt_train.cu.
 * Included by .cu files only.
 */
#ifndef DQN_CUDA_ADAM_SCALARS_CUH
#define DQN_CUDA_ADAM_SCALARS_CUH

#include "learner_types.h"

/* the gradient's scale for a norm: grad_clip / (norm + 1e-6) when that is
 * below 1 and clipping is on (grad_clip > 0), else 1 (kernels/cpu/optim.c's
 * grad_clip_scale) */
static __device__ __forceinline__ float clip_scale(float nrm, float grad_clip) {
  if (!(grad_clip > 0)) return 1.0f;
  double c = grad_clip / ((double)nrm + 1e-6);
  return c < 1 ? (float)c : 1.0f;
}

/* the decoupled decay factor 1 - lr weight_decay, the product rounded before
 * the subtraction as the CPU rounds it (kernels/cpu/optim.c): written as one
 * expression, ptxas fuses the two into an FFMA, which differs for some lr
 * and weight decay (kernels/dev/DEVICE_NOTES.md item 253). The DQN's scalars
 * and the DT's (dt_train.cu) both take it */
static __device__ __forceinline__ float adamw_decay(float lr, float weight_decay) {
  return __fsub_rn(1.0f, __fmul_rn(lr, weight_decay));
}

/* The step's AdamW scalars from the norm, the step count and the
 * hyperparameters: clip scale, sqrt of the second bias correction, step
 * size, decay factor, tau, eps; and the target rule (0 none, 1 Polyak, 2 copy). */
static __device__ __forceinline__ void adam_scalars(float nrm, const unsigned long long *step,
                                                    const learner_hparams_t *hp, float sc[6], int *mode) {
  const float scale = clip_scale(nrm, hp->grad_clip);
  double t = (double)(*step + 1);
  float b1 = hp->adam_beta1, b2 = hp->adam_beta2;
  float bc1 = (float)(1.0 - pow((double)b1, t));
  sc[0] = scale;
  sc[1] = (float)sqrt(1.0 - pow((double)b2, t));
  sc[2] = hp->lr / bc1;
  sc[3] = adamw_decay(hp->lr, hp->weight_decay);
  sc[4] = hp->tau;
  sc[5] = hp->adam_eps;
  *mode = hp->tau > 0 ? 1
          : (hp->target_period > 0 && (*step + 1) % (unsigned long long)hp->target_period == 0) ? 2
                                                                                               : 0;
}

/* the scalars that need only the step count and the hyperparameters, into
 * the norm scratch's floats 1..6 after its counter (cuda_norm_adamw_target
 * reads them; float 0, the clip scale, comes with the norm) */
static __device__ __forceinline__ void adam_prep(unsigned *fin, const unsigned long long *step,
                                                 const learner_hparams_t *hp) {
  float sc[6];
  int mode;
  adam_scalars(0.0f, step, hp, sc, &mode);
  float *out = (float *)(fin + 1);
  for (int k = 1; k < 6; k++) out[k] = sc[k];
  out[6] = __int_as_float(mode);
}

/* One element of kernels/cpu/optim.c's adamw_update: the moments m and v
 * and the parameter p from the clipped gradient gi (g x the clip's scale),
 * given the step's bc2_sqrt (sqrt(1 - beta2^t)), step_size (lr / (1 -
 * beta1^t)) and decay (1 - lr weight_decay). The CPU's expressions in the
 * CPU's order with every product and sum rounded on its own (no fused
 * multiply-adds; the CPU build does not fuse), so the two agree bit for bit
 * (docs/learner.md's optimiser section). */
static __device__ __forceinline__ void adamw_element(float gi, float b1, float b2, float bc2_sqrt, float step_size,
                                                     float decay, float eps, float &p, float &m, float &v) {
  m = __fadd_rn(__fmul_rn(b1, m), __fmul_rn(1.0f - b1, gi));
  v = __fadd_rn(__fmul_rn(b2, v), __fmul_rn(__fmul_rn(1.0f - b2, gi), gi));
  const float denom = __fadd_rn(__fdiv_rn(sqrtf(v), bc2_sqrt), eps);
  p = __fsub_rn(__fmul_rn(p, decay), __fdiv_rn(__fmul_rn(step_size, m), denom));
}

#endif
