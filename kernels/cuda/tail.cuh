/*
 * tail.cuh — the dueling combine and log-softmax of one (row, branch) by one
 * warp: dueling_log_softmax (kernels/cpu/heads_impl.h) in its order, lane l
 * holding atoms l, l + 32, ... (ZL of them). The forward's tail kernel
 * (step_forward.cu) runs it for every action of every row; the loss kernel
 * (step_loss.cu, fused_loss_kernel<1>) runs it for only the rows and actions
 * the loss reads, where they fit its shared memory. Both call these two
 * functions, so the loss gets the same bits either way. Included by .cu files
 * only.
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

/* out[z] = log_softmax_z(Aq + base)[z]; each lane reads and writes only its
 * own atoms, so out may be Aq itself */
template <int ZL>
__device__ __forceinline__ void tail_action(const float *Aq, const float (&base)[ZL], int Z, int lane, float *out) {
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
    if (z < Z) out[z] = v[zi] - lse;
  }
}

#endif
