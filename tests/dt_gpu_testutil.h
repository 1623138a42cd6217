/*
 * dt_gpu_testutil.h — shared by the DT's GPU tests (test-gpu-dt.c,
 * test-gpu-dt-attn.c): a CUDA call checked, a DT layout of chosen shapes,
 * and TF32 rounding as the kernels do it.
 */
#ifndef DQND_DT_GPU_TESTUTIL_H
#define DQND_DT_GPU_TESTUTIL_H

#include <check.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "dt.h"
#include "model.h"

#define CK(x)                                                               \
  do {                                                                      \
    cudaError_t e_ = (x);                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #x, cudaGetErrorString(e_)); \
  } while (0)

/* a DT registry (a minimal DQN beside it) of state S and branches n, and its layout */
static inline void dtu_build(model_t *reg, dt_layout_t *l, int S, int D, const int *n, int layers, int embed,
                             int max_ep_len, int K, int heads) {
  model_desc_t d;
  memset(&d, 0, sizeof d);
  d.S = S, d.H1 = 4, d.H2 = 4, d.VH = 4, d.AH = 4, d.Z = 2, d.D = D, d.ensemble_k = 1;
  for (int i = 0; i < D; i++) d.n[i] = n[i];
  d.dt_layers = layers, d.dt_embed = embed, d.dt_max_ep_len = max_ep_len;
  char err[256];
  ck_assert_msg(model_build(reg, &d, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(dt_layout_init(l, reg, K, heads, err, sizeof err) == 0, "%s", err);
}

/* TF32 as cvt.rna.tf32.f32 rounds: to nearest, ties away from zero, 10
 * mantissa bits */
static inline float dtu_tf32(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x1000u) & ~0x1FFFu;
  memcpy(&x, &u, 4);
  return x;
}

#endif
