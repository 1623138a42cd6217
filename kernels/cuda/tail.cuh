/*
 * tail.cuh — the dueling combine and log-softmax of one (row, branch) by one
 * warp: dueling_log_softmax (kernels/cpu/heads_impl.h) in its order, lane l
 * holding atoms l, l + 32, ... (ZL of them). The forward's tail kernel
 * (step_forward.cu) runs it for every action of every row; the loss kernel
 * (step_loss.cu: fused_loss_kernel<1>, fused_loss_tail_kernel) runs it for
 * only the rows and actions the loss reads (tail_action2, tail_action2x:
 * two actions at a time), where they fit its shared memory. Each action's operations are the same in all three
 * functions, so the loss gets the same bits either way. Included by .cu
 * files only.
 */
#ifndef DQN_CUDA_TAIL_CUH
#define DQN_CUDA_TAIL_CUH

#include <math.h>

/* base[z] = V[z] - mean_a A[a][z] for the lane's atoms (the mean serial, in
 * action order); Ad: n_d rows of Z */
template <int ZL>
__device__ __forceinline__ void tail_base(const float *V, const float *Ad, int nd, int Z, int lane, float (&base)[ZL]) {
  float vz[ZL];
#pragma unroll
  for (int zi = 0; zi < ZL; zi++) vz[zi] = lane + 32 * zi < Z ? V[lane + 32 * zi] : 0.0f;
  __syncwarp();
#pragma unroll
  for (int zi = 0; zi < ZL; zi++) {
    const int z = lane + 32 * zi;
    base[zi] = 0.0f;
    if (z < Z) {
      float m = 0.0f;
      for (int k = 0; k < nd; k++) m += Ad[(size_t)k * Z + z];
      base[zi] = vz[zi] - m / (float)nd;
    }
  }
}

/* out[z] = log_softmax_z(Aq + base)[z], or with ex its exp (the same
 * float the exp of the stored log-probability gives); each lane reads and
 * writes only its own atoms, so out may be Aq itself */
template <int ZL>
__device__ __forceinline__ void tail_actionx(const float *Aq, const float (&base)[ZL], int Z, int lane, float *out,
                                             int ex) {
  float v[ZL], mx = -INFINITY;
#pragma unroll
  for (int zi = 0; zi < ZL; zi++) {
    const int z = lane + 32 * zi;
    v[zi] = z < Z ? Aq[z] + base[zi] : -INFINITY;
    mx = fmaxf(mx, v[zi]);
  }
  for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float s = 0.0f;
#pragma unroll
  for (int zi = 0; zi < ZL; zi++)
    if (lane + 32 * zi < Z) s += expf(v[zi] - mx);
  for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  const float lse = mx + logf(s);
#pragma unroll
  for (int zi = 0; zi < ZL; zi++) {
    const int z = lane + 32 * zi;
    if (z < Z) out[z] = ex ? expf(v[zi] - lse) : v[zi] - lse;
  }
}
template <int ZL, int EXP = 0>
__device__ __forceinline__ void tail_action(const float *Aq, const float (&base)[ZL], int Z, int lane, float *out) {
  tail_actionx<ZL>(Aq, base, Z, lane, out, EXP);
}

/* two actions' tail_actionx side by side, each with its own base and exp
 * flag: the same operations on each, the two dependent chains (shuffles,
 * exp, log) interleaved */
template <int ZL>
__device__ __forceinline__ void tail_action2x(const float *A0, const float *A1, const float (&b0)[ZL],
                                              const float (&b1)[ZL], int Z, int lane, float *o0, float *o1, int x0,
                                              int x1) {
  float v0[ZL], v1[ZL], m0 = -INFINITY, m1 = -INFINITY;
#pragma unroll
  for (int zi = 0; zi < ZL; zi++) {
    const int z = lane + 32 * zi;
    v0[zi] = z < Z ? A0[z] + b0[zi] : -INFINITY;
    v1[zi] = z < Z ? A1[z] + b1[zi] : -INFINITY;
    m0 = fmaxf(m0, v0[zi]);
    m1 = fmaxf(m1, v1[zi]);
  }
  for (int off = 16; off; off >>= 1) {
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, off));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, off));
  }
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
  for (int zi = 0; zi < ZL; zi++)
    if (lane + 32 * zi < Z) s0 += expf(v0[zi] - m0), s1 += expf(v1[zi] - m1);
  for (int off = 16; off; off >>= 1) {
    s0 += __shfl_xor_sync(0xffffffffu, s0, off);
    s1 += __shfl_xor_sync(0xffffffffu, s1, off);
  }
  const float l0 = m0 + logf(s0), l1 = m1 + logf(s1);
#pragma unroll
  for (int zi = 0; zi < ZL; zi++) {
    const int z = lane + 32 * zi;
    if (z < Z) {
      o0[z] = x0 ? expf(v0[zi] - l0) : v0[zi] - l0;
      o1[z] = x1 ? expf(v1[zi] - l1) : v1[zi] - l1;
    }
  }
}
template <int ZL, int EXP = 0>
__device__ __forceinline__ void tail_action2(const float *A0, const float *A1, const float (&base)[ZL], int Z, int lane,
                                             float *o0, float *o1) {
  tail_action2x<ZL>(A0, A1, base, base, Z, lane, o0, o1, EXP, EXP);
}

#endif
