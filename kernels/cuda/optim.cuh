/*
 * optim.cuh — global gradient norm, clip + AdamW, and target updates on the
 * GPU: the twins of kernels/cpu/optim.c. Hyperparameters, the step count and
 * the norm are read from device memory, so a captured graph sees every
 * SetHyperparams without re-capture. n = number of parameters.
 */
#ifndef DQN_CUDA_OPTIM_CUH
#define DQN_CUDA_OPTIM_CUH

#include <cuda_runtime.h>

#include "learner_types.h"
#include "pz.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* *norm_dev = sqrt(sum g^2): fixed partition, double accumulation, two
 * stages; scratch holds CUDA_NORM_SCRATCH doubles on the device (the
 * partial sums, then cuda_norm_adamw_target's counter and scalars: zero it
 * once before that function's first use). */
#define CUDA_NORM_SCRATCH 132
#define CUDA_NORM_PARTS 128 /* the partial sums; then the counter and the AdamW scalars (adam_scalars.cuh) */
int cuda_grad_norm(const float *g, long long n, float *norm_dev, double *scratch, cudaStream_t st);
/* clip by *norm_dev (hp->grad_clip), then AdamW with t = *step_dev + 1. */
int cuda_adamw_update(float *p, const float *g, float *m, float *v, long long n, const float *norm_dev,
                      const unsigned long long *step_dev, const learner_hparams_t *hp_dev, cudaStream_t st);
/* cuda_adamw_update followed by cuda_target_update (no override) in one pass:
 * the same results, one launch. */
int cuda_adamw_target(float *p, const float *g, float *m, float *v, float *target, long long n, const float *norm_dev,
                      const unsigned long long *step_dev, const learner_hparams_t *hp_dev, cudaStream_t st);
/* cuda_grad_norm then cuda_adamw_target in two launches (the norm's final
 * stage and the clip scale done once, by the last block of the first):
 * the same results. scratch zeroed before the first call. prepped: the
 * caller enqueued cuda_adam_prep (the scalars that need only the step count
 * and the hyperparameters) earlier in the step, off the critical path; 0:
 * this call enqueues it first; 2: as 1, and the norm too, as launches of
 * cuda_norm_partial that cover every gradient and all CUDA_NORM_PARTS slots,
 * ordered before this call. norm_done (may be NULL): recorded once *norm_dev
 * is written, before the update. halt (may be NULL; device memory, set by
 * the host when a stop fires, step.cu): read by the norm's final stage; nonzero, the norm is written as CUDA_HALT_NORM, a
 * NaN, so that the step's guards apply nothing of it, as for a diverged step
 * (learner.h, learner_step_until; finish_kernel counts it as halted).
 * tg_stale (may be NULL; device memory, dev_state_t's): set to whether the
 * update changed the target, so the next step packs it again or not
 * (pack.cu); left alone when nothing is applied.
 * pz (pz.cuh): the members each launch runs; every pointer is member 0's. */
#define CUDA_HALT_BITS 0x7fc0dea1u
int cuda_norm_adamw_target(float *p, const float *g, float *m, float *v, float *target, long long n, float *norm_dev,
                           double *scratch, const unsigned long long *step_dev, const learner_hparams_t *hp_dev,
                           int prepped, cudaEvent_t norm_done, const volatile int *halt, int *tg_stale, cuda_pz_t pz,
                           cudaStream_t st);
/* one launch of the norm's partial sums: g[0, n) over nblk blocks written to
 * slots slot0 .. slot0 + nblk - 1 of the CUDA_NORM_PARTS; the last block of
 * the launches that fill all the slots (on any streams) does the final stage
 * and the clip scale, as cuda_norm_adamw_target's norm launch does. The
 * slots' sum is fixed by the partition, so the norm does not depend on
 * which launch finishes first. */
int cuda_norm_partial(const float *g, long long n, double *scratch, int slot0, int nblk, float *norm_dev,
                      const unsigned long long *step_dev, const learner_hparams_t *hp_dev, const volatile int *halt,
                      cuda_pz_t pz, cudaStream_t st);
int cuda_adam_prep(double *scratch, const unsigned long long *step_dev, const learner_hparams_t *hp_dev,
                   cudaStream_t st);
/* tau_override > 0: target = tau o + (1 - tau) target now (>= 1: copy).
 * Else the per-step rule: Polyak with hp->tau, or a copy when
 * (*step_dev + 1) % hp->target_period == 0. */
int cuda_target_update(float *target, const float *online, long long n, const unsigned long long *step_dev,
                       const learner_hparams_t *hp_dev, float tau_override, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
