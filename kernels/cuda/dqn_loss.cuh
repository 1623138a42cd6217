/*
 * dqn_loss.cuh — the C51 Double-DQN loss and its exact backward on the GPU,
 * the twin of dqn_loss_grad_f32 (kernels/cpu/dqn_math_impl.h): same inputs,
 * same outputs, same layouts. Correct first (plain kernels, one GEMM kernel
 * for every matrix product); tests/test-gpu-loss.c holds it to the CPU.
 *
 * Shapes: B = batch, S = state_dim, P = parameters, N = noise vector length,
 * Z = atoms, D = branches. Device buffers in the workspace: x [2B, S] (s then
 * s'), a [B] int32, r, done, w [B]; outputs loss [1], loss_i [B], best [D, B],
 * q_taken [1] (mean over batch and branches of Q_d(s, a_d)), grad [P].
 * Every output is overwritten; reductions run in a fixed order, so reruns are
 * bit-identical.
 */
#ifndef DQN_CUDA_DQN_LOSS_CUH
#define DQN_CUDA_DQN_LOSS_CUH

#include "net_forward.cuh"
#include "step_fused.cuh"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_dqn_ws {
  int B;
  cuda_acts_t on, tg;  /* online on 2B rows, target on B rows */
  float *x;            /* [2B, S] */
  int32_t *a;          /* [B] */
  float *r, *done, *w; /* [B] */
  float *weff_on, *weff_tg; /* [P] effective NoisyNet weights */
  float *fn_on, *fn_tg;     /* [N] transformed noise f(eps), device */
  float *dV, *dA, *dhv, *dh, *dh1, *dhb;
  float *loss_i, *loss, *q_taken; /* [B], [1], [1] */
  int32_t *best;                  /* [D, B] */
  float *splitk;                  /* split-K partial sums of the weight gradients */
  size_t splitk_floats;
  float *mem;
  cuda_fused_t fused; /* the fused kernels' buffers (step_fused.cuh) */
  int version;        /* 2: fused kernels when fused.ok (default); 1: the generic
                         kernels (env DQN_CUDA_KERNELS=v1, or set by tests) */
} cuda_dqn_ws_t;

typedef struct cuda_dqn_hp {
  float gamma, v_min, v_max, slope;
  int double_dqn;
  const float *gamma_dev; /* if set, gamma is read from device memory (graphs: no re-capture) */
} cuda_dqn_hp_t;

/* weff = params with every NoisyNet layer composed from the noise fn (device). */
int cuda_effective_weights(const net_layout_t *L, const float *params, const float *fn, float *weff,
                           cudaStream_t stream);

int cuda_dqn_ws_alloc(cuda_dqn_ws_t *ws, const net_layout_t *L, int B);
/* the same with the fused kernels' arithmetic (cuda_fused_alloc's mode):
 * 0 fp32 (layer-GEMM phases), 1 TF32 (ws->fused.tc == 1 when they can, else
 * ws->fused.ok == 0), 2 fp32 row tiles, 3 3xTF32, 4 fp32 clusters */
int cuda_dqn_ws_alloc_tc(cuda_dqn_ws_t *ws, const net_layout_t *L, int B, int mode);
void cuda_dqn_ws_free(cuda_dqn_ws_t *ws);

/* Loss and gradient w.r.t. the online parameters (grad may be NULL: loss only).
 * noisy: use ws->fn_on / ws->fn_tg (already f-transformed) for the NoisyNet
 * layers. Asynchronous on `stream`; returns the first launch error. */
int cuda_dqn_loss_grad(const net_layout_t *L, const cuda_dqn_hp_t *hp, const float *online, const float *target,
                       int noisy, cuda_dqn_ws_t *ws, float *grad, cudaStream_t stream);

/* The fused path (step_fused.cu); cuda_dqn_loss_grad calls it when
 * ws->version == 2, ws->fused.ok and grad != NULL. */
int cuda_fused_loss_grad(const net_layout_t *L, const cuda_dqn_hp_t *hp, const float *online, const float *target,
                         int noisy, cuda_dqn_ws_t *ws, float *grad, cudaStream_t stream);

/* Its first launch alone: the step's weight packs (noise composed when
 * noisy). A caller that enqueues it ahead (the learner: beside the replay
 * sample, on ws->fused.side) sets ws->fused.prepacked for the next
 * cuda_fused_loss_grad, which then skips it. */
int cuda_fused_pack(const net_layout_t *L, const float *online, const float *target, int noisy, cuda_dqn_ws_t *ws,
                    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
