/*
 * gemm_pop.cu — a population's fp32 FFMA tiles for the forward and backward
 * phases (docs/population.md, "Same sums, fewer blocks"): 128 x 64 outputs a
 * block of 128 threads, 8 x 8 outputs a thread, from POP_SER_QUADS members
 * on. gemm.cu's SER2 blocks hold 4 x 4 outputs a thread: two 16-byte shared
 * loads per 16 FMAs keep the load pipe about as busy as the FMA pipe, and a
 * 32-member step ran its FFMA tiles at ~19 TFLOP/s of the H200's 67
 * (kernels/dev/DEVICE_NOTES.md items 72, 106, 112). Here a thread's 64 sums
 * take 16 loads per 4 k (256 FMAs), and a warp's loads touch 4 rows of A and
 * 8 of W, one shared-memory wavefront each.
 *
 * The same bits as the lone learner's split-K tiles (gemm.cu), so each
 * member stays its lone twin: every output is summed over k in order, one
 * FMA a k, from 0 within each split-K part, in GBK chunks with the same zero
 * fill past K; the parts are added in split order after 0 (0 + p0 + p1 ...,
 * the split-K reduction's order), the running total kept in the output
 * itself (each thread's own elements: no barrier, no scratch); then the
 * layer epilogue, as gemm.cu's. Two GBK stages: a chunk is 2,048 FMAs a
 * thread, more than an L2 round trip, so one chunk in flight hides it.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cp_async.cuh"
#include "gemm_table.cuh"
#include "gemm_dev.cuh"
#include "gemm_tiles.cuh"
#include "gemm_pop.cuh"

#define QBM (GBM * 4) /* tile rows: four of gemm.cu's row tiles */
#define QBN GBN       /* tile outputs */
#define QNT 128       /* threads: 8 along n x 16 along m */
#define QNS 2         /* stages */
#define QSW (QBN + 8) /* W [k][n] row stride (TW 0) */
#define QA_FLOATS (QBM * GSA0)
#define QW_FLOATS (QBN * GSA0 > GBK * QSW ? QBN * GSA0 : GBK * QSW)
#define QSMEM (sizeof(float) * QNS * (QA_FLOATS + QW_FLOATS))

/* NR rows of NC floats from src (row stride ld) at (r0, c0), bounded by rmax
 * rows and cmax columns, into s (row stride ss); zeros past the bounds.
 * V16: 16-byte copies (rows 16-byte aligned), else 4-byte ones. */
template <int NR, int NC, bool V16>
__device__ __forceinline__ void q_tile(float *__restrict__ s, int ss, const float *src, size_t ld, int r0, int rmax,
                                       int c0, int cmax) {
  constexpr int W = V16 ? 4 : 1, PER = NC / W;
#pragma unroll 4
  for (int l = 0; l < NR * PER / QNT; l++) {
    const int e = (int)threadIdx.x + QNT * l, r = e / PER, c = W * (e % PER);
    const int v = r0 + r < rmax ? max(0, min(W, cmax - (c0 + c))) : 0;
    const float *p = v ? src + (size_t)(r0 + r) * ld + c0 + c : src;
    if (V16) cp_async16z(s + r * ss + c, p, 4 * v);
    else cp_async4z(s + r * ss + c, p, 4 * v);
  }
}

/* Chunk [k0, k0 + GBK) of A (rows [m0, m0 + QBM), as [m][GSA0]) and of W:
 * TW 1 (the forward's pack rows [n][k]) as [n][GSA0], TW 0 (the backward's
 * [k][n]) as [k][QSW]; zeros past kend, M and N. */
template <int TW>
__device__ __forceinline__ void q_issue(float *__restrict__ sa, float *__restrict__ sw, const gprob_t &g, int m0,
                                        int n0, int k0, int kend) {
  if (g.al & 1) q_tile<QBM, GBK, true>(sa, GSA0, g.A, g.lda, m0, g.M, k0, kend);
  else q_tile<QBM, GBK, false>(sa, GSA0, g.A, g.lda, m0, g.M, k0, kend);
  if (TW == 1) {
    if (g.al & 2) q_tile<QBN, GBK, true>(sw, GSA0, g.W, g.ldw, n0, g.N, k0, kend);
    else q_tile<QBN, GBK, false>(sw, GSA0, g.W, g.ldw, n0, g.N, k0, kend);
  } else {
    if (g.al & 2) q_tile<GBK, QBN, true>(sw, QSW, g.W, g.ldw, k0, kend, n0, g.N);
    else q_tile<GBK, QBN, false>(sw, QSW, g.W, g.ldw, k0, kend, n0, g.N);
  }
}

/* output (i, j) of this thread: rows ty + 16 i; columns tx + 8 j (TW 1: W's
 * rows 8 apart, one wavefront for the warp's 8) or 4 tx + 32 (j / 4) + j % 4
 * (TW 0: two 16-byte loads along n) */
template <int TW>
__device__ __forceinline__ void q_elem(int i, int j, int &ml, int &nl) {
  const int tx = (int)threadIdx.x % 8, ty = (int)threadIdx.x / 8;
  ml = ty + 16 * i;
  nl = TW == 1 ? tx + 8 * j : 4 * tx + 32 * (j / 4) + j % 4;
}

/* A split-K part ends: this thread's sums into the running total, kept in
 * its own elements of C: 0 + p0 first, then total + p (the split-K
 * reduction's order). store: write the total and start the next part at 0;
 * else (the last part) the total into acc. */
template <int TW>
__device__ __forceinline__ void q_fold(float (&acc)[8][8], const gprob_t &g, int m0, int n0, int folded, bool store) {
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) {
      int ml, nl;
      q_elem<TW>(i, j, ml, nl);
      const int m = m0 + ml, n = n0 + nl;
      if (m >= g.M || n >= g.N) continue;
      float *c = g.C + (size_t)m * g.ldc + n;
      const float t = (folded ? *c : 0.0f) + acc[i][j];
      if (store) *c = t;
      acc[i][j] = store ? 0.0f : t;
    }
}

/* A [m][k] times W ([n][k] for TW 1, the forward; [k][n] for TW 0, the
 * backward) over every split-K part of the tile in turn; blockIdx.z the
 * member (pz.cuh), the launch numbered by gprob_t.sblk[2]. */
template <int TW>
__global__ void __launch_bounds__(QNT, 3) gemm_pop_kernel(const gprob_t *__restrict__ probs,
                                                          const __grid_constant__ gidx_t ix, float slope,
                                                          long long ps) {
  extern __shared__ float4 qsh4[];
  float *sA = reinterpret_cast<float *>(qsh4), *sW = sA + QNS * QA_FLOATS;
  probs = pz_at(probs, ps);
  const gprob_t g = probs[g_find<3>(ix, probs)];
  const int tile = (int)blockIdx.x - g.sblk[2];
  const int m0 = (tile / g.tn) * QBM, n0 = (tile % g.tn) * QBN;
  const int tx = (int)threadIdx.x % 8, ty = (int)threadIdx.x / 8;
  const int cps = g.kper / GBK; /* chunks per split-K part */
  const int nk = (g.K + GBK - 1) / GBK;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
  int folded = 0; /* split-K parts added into the running total (in C) */
  if (nk > 0) q_issue<TW>(sA, sW, g, m0, n0, 0, g.K);
  cp_async_commit();
  for (int c = 0; c < nk; c++) {
    if (g.splits > 1 && c > 0 && c % cps == 0) q_fold<TW>(acc, g, m0, n0, folded++, true); /* a part ends */
    cp_async_wait<0>(); /* chunk c has landed (this thread's copies) */
    __syncthreads();    /* everyone's; and chunk c - 1's buffer is free */
    if (c + 1 < nk) q_issue<TW>(sA + ((c + 1) % QNS) * QA_FLOATS, sW + ((c + 1) % QNS) * QW_FLOATS, g, m0, n0,
                                (c + 1) * GBK, g.K);
    cp_async_commit();
    const float *__restrict__ a = sA + (c % QNS) * QA_FLOATS;
    const float *__restrict__ w = sW + (c % QNS) * QW_FLOATS;
#pragma unroll 1
    for (int k = 0; k < GBK; k += 4) {
      float av[8][4];
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const float4 v = *reinterpret_cast<const float4 *>(a + (ty + 16 * i) * GSA0 + k);
        av[i][0] = v.x, av[i][1] = v.y, av[i][2] = v.z, av[i][3] = v.w;
      }
      if (TW == 1) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const float4 v = *reinterpret_cast<const float4 *>(w + (tx + 8 * j) * GSA0 + k);
          const float wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int u = 0; u < 4; u++)
#pragma unroll
            for (int i = 0; i < 8; i++) acc[i][j] += av[i][u] * wv[u];
        }
      } else {
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const float4 v0 = *reinterpret_cast<const float4 *>(w + (k + u) * QSW + 4 * tx);
          const float4 v1 = *reinterpret_cast<const float4 *>(w + (k + u) * QSW + 4 * tx + 32);
          const float wv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
          for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[i][j] += av[i][u] * wv[j];
        }
      }
    }
  }
  cp_async_wait<0>();
  if (g.splits > 1) {
    /* the last part with chunks, then the empty ones (zeros, as their parts
     * are): the running total read once, each part added in order */
    const int s0 = nk ? (nk - 1) / cps : 0;
    q_fold<TW>(acc, g, m0, n0, folded, false);
    for (int s = s0 + 1; s < g.splits; s++)
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] += 0.0f;
  }
  const float *__restrict__ bias = g.bias;
  const float *__restrict__ mask = g.mask;
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) {
      int ml, nl;
      q_elem<TW>(i, j, ml, nl);
      const int m = m0 + ml, n = n0 + nl;
      if (m >= g.M || n >= g.N) continue;
      float v = acc[i][j];
      if (TW == 1) v += bias ? bias[n] : 0.0f;
      if (g.act) v = v > 0.0f ? v : slope * v;
      if (TW == 0 && mask && !(mask[(size_t)m * g.ldm + n] > 0.0f)) v *= slope;
      g.C[(size_t)m * g.ldc + n] = v;
    }
}

cudaError_t gemm_pop_attrs(void) {
  cudaError_t e = cudaFuncSetAttribute(gemm_pop_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)QSMEM);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(gemm_pop_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)QSMEM);
  return e;
}

void gemm_pop_launch(const gprob_t *probs, const gidx_t &ix, int tw, dim3 blocks, float slope, long long ps,
                     cudaStream_t st) {
  if (tw) gemm_pop_kernel<1><<<blocks, QNT, QSMEM, st>>>(probs, ix, slope, ps);
  else gemm_pop_kernel<0><<<blocks, QNT, QSMEM, st>>>(probs, ix, slope, ps);
}
