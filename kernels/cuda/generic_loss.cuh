/*
 * generic_loss.cuh — the C51 Double-DQN loss and its exact backward on the GPU,
 * the twin of dqn_loss_grad_f32 (kernels/cpu/loss_impl.h): same inputs,
 * same outputs, same layouts. Two implementations behind one call: the
 * step's phases (step_phases.cuh: layer-GEMM forward, fused loss, backward), and the
 * generic kernels of generic_loss.cu (one plain GEMM per matrix product, the
 * CPU's order), which run the shapes the fused loss kernel cannot stage;
 * tests/test-gpu-loss.c holds both to the CPU.
 *
 * Shapes: B = batch, S = state_dim, P = parameters, N = noise length,
 * Z = atoms, D = branches. Device buffers in the workspace: x [2B, S] (s then
 * s'), a [B] int32, r, done, w [B]; outputs loss [1], loss_i [B], best [D, B],
 * q_taken [1] (mean over batch and branches of Q_d(s, a_d)), grad [P].
 * Every output is overwritten; reductions run in a fixed order, so reruns are
 * bit-identical.
 */
#ifndef DQN_CUDA_GENERIC_LOSS_CUH
#define DQN_CUDA_GENERIC_LOSS_CUH

#include "generic_forward.cuh"
#include "step_phases.cuh"

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
  cuda_fused_t fused; /* the phases' buffers and plan (step_phases.cuh) */
} cuda_dqn_ws_t;

/* weff = params with every NoisyNet layer composed from the noise fn (device; pack.cu). */
int cuda_effective_weights(const net_layout_t *L, const float *params, const float *fn, float *weff,
                           cudaStream_t stream);

/* Buffers for batch B. tensor_cores: the phases in TF32 (ws->fused.tc == 1
 * when they can run these shapes, else ws->fused.ok == 0); gemm_occupancy:
 * blocks per SM the split-K planner aims for (the config's
 * cuda_gemm_occupancy, 2 by default). 0 or a cudaError_t. */
int cuda_dqn_ws_alloc(cuda_dqn_ws_t *ws, const net_layout_t *L, int B, int tensor_cores, int gemm_occupancy);
void cuda_dqn_ws_free(cuda_dqn_ws_t *ws);
/* the floats cuda_dqn_ws_alloc's buffers take, its phases' one buffer
 * included (not their plan's split-K scratch: the memory estimate's slack) */
size_t cuda_dqn_ws_floats(const net_layout_t *L, int B);

/* Loss and gradient w.r.t. the online parameters (grad may be NULL: loss only).
 * noisy: use ws->fn_on / ws->fn_tg (already f-transformed) for the NoisyNet
 * layers. The phases (step.cu) when ws->fused.ok and grad != NULL, else the
 * generic kernels. Asynchronous on `stream` (the phases fork onto
 * ws->fused.side and join before the return); returns the first launch error. */
int cuda_dqn_loss_grad(const net_layout_t *L, const cuda_dqn_hp_t *hp, const float *online, const float *target,
                       int noisy, cuda_dqn_ws_t *ws, float *grad, cudaStream_t stream);

/* The same on the generic kernels (generic_loss.cu), whatever the shapes. */
int cuda_dqn_loss_grad_generic(const net_layout_t *L, const cuda_dqn_hp_t *hp, const float *online,
                               const float *target, int noisy, cuda_dqn_ws_t *ws, float *grad, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
