/*
 * step_fused.cu — see step_fused.cuh for the plan. The same loss and
 * gradient as the generic kernels of dqn_loss.cu (tests/test-gpu-loss.c
 * holds both to the CPU reference), in five launches.
 *
 * Packs (floats): biases first, at the same offsets in both packs —
 *   bt1 [H1], bt2 [H2], bhc1 [HC] (value1 then branch1_d), bhc2 [O2]
 *   (value2 then branch2_d) — then the weights:
 *   W pack   t1 [H1][S], t2 [H2][H1], hc1 [HC][H2], hc2: value2 [Z][VH]
 *            then branch2_d [n_d Z][AH] (nn.Linear layout, composed)
 *   W^T pack t1 [S][H1], t2 [H1][H2], hc1 [H2][HC], hc2 [KH][O2] with
 *            KH = max(VH, AH) (column o uses its layer's first K rows)
 * Shared-memory activations are feature-major, [feature][R], so the R rows
 * of one feature are one float4 load (R = 4 or 8).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cooperative_groups.h>

#include "cuda_check.h"
#include "c51.cuh"
#include "dqn_loss.cuh"
#include "step_fused.cuh"

#define MAXB LEARNER_MAX_BRANCHES
#define NT 512 /* threads per forward/backward block */
#define NOUT (1024 / NT) /* outputs per thread: layers up to 1024 wide */
#define NSTAGE 2          /* weight pipeline stages (FFMA path) */
#define NSTAGE_TC 2       /* weight pipeline stages (tensor-core path) */
#define STAGE_FLOATS 16384 /* target floats per stage (64 KiB): kc ~ STAGE_FLOATS / N rows */
#define TC_MAXT 9         /* output tiles of 8 per warp: (1024 / 8 + 9 segments) / 16 warps */

/* one output segment of a layer: outputs [o0, next seg's o0) read inputs
 * [koff, koff + K) of the input activations, weight column (o - o0) of
 * base + woff with row stride ldw */
typedef struct seg {
  int o0, koff, K, ldw;
  long long woff;
} seg_t;

/* one copy segment: outputs [o0, o0 + w) have their weights in K rows of w
 * contiguous floats at woff (row k of the segment at woff + k * w) */
typedef struct cseg {
  int o0, w, K, al16;
  long long woff;
} cseg_t;

typedef struct segtab {
  seg_t s[1 + MAXB];
  cseg_t c[1 + MAXB];
  int n, nc, N;      /* segments, copy segments, outputs */
  int kc;            /* weight rows per pipeline stage */
  long long bias;    /* bias offset in the pack, or -1 */
} segtab_t;

typedef struct pack_layer {
  long long src_w, src_b, src_sw, src_sb; /* params; sw/sb -1 unless noisy */
  long long fi, fo;                       /* noise offsets (fn), -1 unless noisy */
  long long w_dst, w_ld, t_dst, t_ld, b_dst;
  long long begin;                        /* first flat element of this layer */
  int in, out;
} pack_layer_t;

typedef struct pack_args {
  pack_layer_t l[NET_MAX_LAYERS];
  int n_layers;
  long long total;
} pack_args_t;

typedef struct wtile {
  long long dy, x;      /* offsets: dY in the fused buffer set, X likewise (see build_tiles) */
  int ybuf, xbuf;       /* which buffer: 0 ws->x, 1 h1, 2 h, 3 hh, 4 g2, 5 g1, 6 gh, 7 gt1 */
  int ldy, ldx, o0, no, i0, ni, in;
  long long gw, gb, gsw, gsb; /* gradient offsets; gb/gsw/gsb -1 when absent */
  long long fi, fo;           /* noise offsets in fn_on, -1 unless noisy */
} wtile_t;

typedef struct fwd_args {
  int B, S, H1, H2, HC, O2, Z, AW, D, nblk_on;
  int n[MAXB], aoff[MAXB];
  float slope;
  const float *x, *t_on, *t_tg;
  float *logp, *h1, *h, *hh;
  const segtab_t *tabs; /* device: l1, l2, c1, c2 (forward), then the backward's c2, c1, t2 */
  int stage; /* floats per weight stage */
  int dbg;   /* kernels/dev experiments (DQN_CUDA_FUSED_DEBUG): 1 no arithmetic, 2 no weight loads */
} fwd_args_t;

typedef struct bwd_args {
  int B, H1, H2, HC, O2;
  float slope;
  const float *w_on, *g2, *hh, *h, *h1;
  float *g1, *gh, *gt1;
  const segtab_t *tabs; /* device: the backward's c2, c1, t2 */
  int N1;    /* activation floats per row before the weight stages */
  int stage; /* floats per weight stage */
} bwd_args_t;

typedef struct loss_args {
  int B, Z, AW, O2, D, double_dqn, nmax;
  int n[MAXB], aoff[MAXB], radix_after[MAXB];
  float vmin, vmax, gamma;
  const float *gamma_dev, *logp, *r, *done, *w;
  const int32_t *a;
  float *g2, *loss_i, *qsum_i;
  int32_t *best;
} loss_args_t;

// kernels

/* Effective weights of every layer into the packs: block row y = 0 online,
 * y = 1 target; each into its W pack and W^T pack where given (the
 * layer-GEMM phases read W packs only; the row tiles the online W pack and
 * both W^T packs). */
__global__ void fused_pack_kernel(pack_args_t a, const float *__restrict__ p_on, const float *__restrict__ fn_on,
                                  float *__restrict__ w_on, float *__restrict__ t_on, const float *__restrict__ p_tg,
                                  const float *__restrict__ fn_tg, float *__restrict__ w_tg, float *__restrict__ t_tg) {
  const float *P = blockIdx.y ? p_tg : p_on, *fn = blockIdx.y ? fn_tg : fn_on;
  float *W = blockIdx.y ? w_tg : w_on, *T = blockIdx.y ? t_tg : t_on;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < a.total;
       e += (long long)gridDim.x * blockDim.x) {
    int li = 0;
    while (li + 1 < a.n_layers && e >= a.l[li + 1].begin) li++;
    const pack_layer_t *l = &a.l[li];
    long long k = e - l->begin, nw = (long long)l->in * l->out;
    if (k < nw) {
      int o = (int)(k / l->in), i = (int)(k % l->in);
      float v = P[l->src_w + k];
      if (l->src_sw >= 0) v = v + P[l->src_sw + k] * (fn[l->fo + o] * fn[l->fi + i]);
      if (W) W[l->w_dst + (long long)o * l->w_ld + i] = v;
      if (T) T[l->t_dst + (long long)i * l->t_ld + o] = v; /* row tiles only: strided stores */
    } else {
      int o = (int)(k - nw);
      float v = P[l->src_b + o];
      if (l->src_sb >= 0) v = v + P[l->src_sb + o] * fn[l->fo + o];
      if (W) W[l->b_dst + o] = v;
      if (T) T[l->b_dst + o] = v;
    }
  }
}

__device__ __forceinline__ void cp_async4(float *dst, const float *src) {
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async16(float *dst, const float *src) {
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Stage k0 of a layer's weights into wb: KC rows of every copy segment (see
 * segtab_t), contiguous in both places, 16-byte copies when aligned. */
__device__ __forceinline__ void stage_weights(float *__restrict__ wb, const segtab_t &t,
                                              const float *__restrict__ pack, int k0, int KC) {
  for (int c = 0; c < t.nc; c++) {
    int rows = min(KC, t.c[c].K - k0);
    if (rows <= 0) continue;
    int n = rows * t.c[c].w;
    const float *src = pack + t.c[c].woff + (long long)k0 * t.c[c].w;
    float *dst = wb + (size_t)KC * t.c[c].o0;
    if (t.c[c].al16) {
      for (int e = 4 * threadIdx.x; e < n; e += 4 * blockDim.x) cp_async16(dst + e, src + e);
    } else {
      for (int e = threadIdx.x; e < n; e += blockDim.x) cp_async4(dst + e, src + e);
    }
  }
}

/* out[o][r] = sum_k in[koff + k][r] * W[k][o - o0] (+ bias[o]) for the R rows
 * of a block, then LeakyReLU (act) or times lrelu'(mask[o][r]) (mask), and a
 * copy of rows r < nsave to gout[r * gld + o]. The weights stream through
 * shared memory with cp.async: a ring of NSTAGE stages of t.kc rows (about
 * STAGE_FLOATS floats each), NSTAGE - 1 of them in flight while one is used —
 * enough bytes in flight to cover the L2 latency (DEVICE_NOTES.md, run 15).
 * Sums run over k in order. NO outputs per thread at most (N <= NO * blockDim.x). */
template <int R, int NO, int NS>
__device__ __forceinline__ void seg_linear(const float *__restrict__ in, float *__restrict__ out,
                                           const segtab_t &t, const float *__restrict__ pack, int act,
                                           const float *__restrict__ mask, float slope, float *__restrict__ gout,
                                           int gld, int nsave, float *__restrict__ wbuf, int stage_floats) {
  const int KC = t.kc;
  int koff[NO], K[NO], wb[NO], ws[NO];
  int Kmax = 0;
#pragma unroll
  for (int j = 0; j < NO; j++) {
    int o = threadIdx.x + j * blockDim.x;
    K[j] = 0, koff[j] = 0, wb[j] = 0, ws[j] = 1;
    if (o < t.N) {
      int s = 0;
      while (s + 1 < t.n && o >= t.s[s + 1].o0) s++;
      int c = 0;
      while (c + 1 < t.nc && o >= t.c[c + 1].o0) c++;
      K[j] = t.s[s].K, koff[j] = t.s[s].koff;
      wb[j] = KC * t.c[c].o0 + (o - t.c[c].o0), ws[j] = t.c[c].w;
    }
  }
  for (int c = 0; c < t.nc; c++) Kmax = max(Kmax, t.c[c].K);
  float acc[NO][R];
#pragma unroll
  for (int j = 0; j < NO; j++)
#pragma unroll
    for (int r = 0; r < R; r++) acc[j][r] = 0.0f;
  const int nst = (Kmax + KC - 1) / KC;
#pragma unroll
  for (int p = 0; p < NS - 1; p++) {
    if (p < nst) stage_weights(wbuf + (size_t)p * stage_floats, t, pack, p * KC, KC);
    cp_async_commit();
  }
  for (int st = 0; st < nst; st++) {
    int nx = st + NS - 1;
    if (nx < nst) stage_weights(wbuf + (size_t)(nx % NS) * stage_floats, t, pack, nx * KC, KC);
    cp_async_commit();
    cp_async_wait<NS - 1>();
    __syncthreads();
    const float *__restrict__ w = wbuf + (size_t)(st % NS) * stage_floats;
    const int k0 = st * KC;
#pragma unroll
    for (int j = 0; j < NO; j++) {
      int kend = min(KC, K[j] - k0);
      const float *__restrict__ wj = w + wb[j];
      const float4 *__restrict__ x4 = reinterpret_cast<const float4 *>(in + (size_t)(koff[j] + k0) * R);
      const int wsj = ws[j];
      int kk = 0;
      /* four k at a time, every shared load issued before the FMAs that use
       * them: the loop is latency-bound otherwise (2 warps per scheduler) */
      for (; kk + 4 <= kend; kk += 4) {
        float wk[4];
        float4 xv[4][R / 4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          wk[u] = wj[(kk + u) * wsj];
#pragma unroll
          for (int q = 0; q < R / 4; q++) xv[u][q] = x4[(kk + u) * (R / 4) + q];
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
          for (int q = 0; q < R / 4; q++) {
            acc[j][4 * q + 0] += xv[u][q].x * wk[u];
            acc[j][4 * q + 1] += xv[u][q].y * wk[u];
            acc[j][4 * q + 2] += xv[u][q].z * wk[u];
            acc[j][4 * q + 3] += xv[u][q].w * wk[u];
          }
      }
      for (; kk < kend; kk++) {
        float wk = wj[kk * wsj];
#pragma unroll
        for (int q = 0; q < R / 4; q++) {
          float4 xv = x4[kk * (R / 4) + q];
          acc[j][4 * q + 0] += xv.x * wk;
          acc[j][4 * q + 1] += xv.y * wk;
          acc[j][4 * q + 2] += xv.z * wk;
          acc[j][4 * q + 3] += xv.w * wk;
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < NO; j++) {
    int o = threadIdx.x + j * blockDim.x;
    if (o >= t.N) continue;
    float b = t.bias >= 0 ? __ldg(pack + t.bias + o) : 0.0f;
#pragma unroll
    for (int r = 0; r < R; r++) {
      float v = acc[j][r] + b;
      if (act) v = v > 0.0f ? v : slope * v;
      if (mask && !(mask[(size_t)o * R + r] > 0.0f)) v *= slope;
      if (out) out[(size_t)o * R + r] = v;
      if (r < nsave) gout[(size_t)r * gld + o] = v;
    }
  }
}


__device__ __forceinline__ unsigned f2tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

/* D += A B, A 16 x 8 (rows x k), B 8 x 8 (k x outputs), TF32 operands, fp32
 * accumulation. Fragments (PTX ISA, m16n8k8 .tf32): lane = 4 g + t4;
 * a = A[g][t4], A[g+8][t4], A[g][t4+4], A[g+8][t4+4]; b = B[t4][g], B[t4+4][g];
 * d = D[g][2t4], D[g][2t4+1], D[g+8][2t4], D[g+8][2t4+1]. */
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Output tile T (8 outputs each, never crossing a segment) of a table: its
 * segment s, the segment's end o1, and its index within the segment. */
__device__ __forceinline__ int tile_segment(const segtab_t &t, int T, int *s_out, int *o1_out) {
  int s = 0, o1 = 0;
  for (;; s++) {
    o1 = s + 1 < t.n ? t.s[s + 1].o0 : t.N;
    int nt = (o1 - t.s[s].o0 + 7) / 8;
    if (T < nt) break;
    T -= nt;
  }
  *s_out = s, *o1_out = o1;
  return T;
}

/* seg_linear on the tensor cores for R = 16 rows: each warp owns output
 * tiles of 8 (never crossing a segment, so one tile reads one input slice)
 * and walks k in steps of 8 with mma.sync m16n8k8. TC = 1: TF32 operands
 * (10-bit mantissa; the tensor_cores config). TC = 3: each operand split as
 * hi + lo, both TF32, and D += lo_a hi_b + hi_a lo_b + hi_a hi_b — about
 * fp32 accuracy (the 3xTF32 of CUTLASS) at three MMAs a step. Weights stream
 * through NS stages of t.kc rows (a multiple of 8) like seg_linear. */
template <int TC, int NS, int MAXT>
__device__ __noinline__ void seg_linear_tc(const float *__restrict__ in, float *__restrict__ out,
                                           const segtab_t &t, const float *__restrict__ pack, int act,
                                           const float *__restrict__ mask, float slope, float *__restrict__ gout,
                                           int gld, int nsave, float *__restrict__ wbuf, int stage_floats,
                                           int dbg) {
  constexpr int R = 16;
  const int KC = t.kc, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  const int g = lane >> 2, t4 = lane & 3;
  /* per tile: kk_ = koff << 16 | K of its input slice; wq_ = weight base of
   * column g << 12 | stride (-1: column past the segment) */
  int kk_[MAXT], wq_[MAXT];
  int ntiles = 0;
  for (int s = 0; s < t.n; s++) {
    int o1 = s + 1 < t.n ? t.s[s + 1].o0 : t.N;
    ntiles += (o1 - t.s[s].o0 + 7) / 8;
  }
#pragma unroll
  for (int j = 0; j < MAXT; j++) {
    int T = warp + j * nw;
    kk_[j] = 0, wq_[j] = -1;
    if (T >= ntiles) continue;
    int s, o1;
    T = tile_segment(t, T, &s, &o1);
    int ob = t.s[s].o0 + 8 * T, o = ob + g;
    kk_[j] = (t.s[s].koff << 16) | t.s[s].K;
    if (o < o1) {
      int c = 0;
      while (c + 1 < t.nc && o >= t.c[c + 1].o0) c++;
      wq_[j] = ((KC * t.c[c].o0 + (o - t.c[c].o0)) << 12) | t.c[c].w;
    }
  }
  int Kmax = 0;
  for (int c = 0; c < t.nc; c++) Kmax = max(Kmax, t.c[c].K);
  float acc[MAXT][4];
#pragma unroll
  for (int j = 0; j < MAXT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const int nst = (Kmax + KC - 1) / KC;
#pragma unroll
  for (int p = 0; p < NS - 1; p++) {
    if (p < nst && dbg != 2) stage_weights(wbuf + (size_t)p * stage_floats, t, pack, p * KC, KC);
    cp_async_commit();
  }
  for (int st = 0; st < nst; st++) {
    int nx = st + NS - 1;
    if (nx < nst && dbg != 2)
      stage_weights(wbuf + (size_t)(nx % NS) * stage_floats, t, pack, nx * KC, KC);
    cp_async_commit();
    cp_async_wait<NS - 1>();
    __syncthreads();
    const float *__restrict__ w = wbuf + (size_t)(st % NS) * stage_floats;
    const int k0 = st * KC;
    if (dbg == 1) {
      __syncthreads();
      continue;
    }
    /* k outer, tiles inner: the A fragments (this warp's 16 rows x 8 k of
     * one input slice) are loaded and split once per slice and k step and
     * shared by every tile of that slice (a warp's tiles are in slice order) */
    for (int kb = 0; kb < KC; kb += 8) {
      int cur = -1;
      unsigned ah[4], al[4];
#pragma unroll
      for (int j = 0; j < MAXT; j++) {
        const int K = kk_[j] & 0xffff, koff = kk_[j] >> 16;
        const int kend = min(KC, K - k0);
        if (kb >= kend) continue;
        const bool k1 = kb + t4 < kend, k2 = kb + t4 + 4 < kend;
        if (kk_[j] != cur) {
          cur = kk_[j];
          const float *__restrict__ xa = in + (size_t)(koff + k0 + kb) * R;
          float af[4] = {k1 ? xa[t4 * R + g] : 0.0f, k1 ? xa[t4 * R + g + 8] : 0.0f,
                         k2 ? xa[(t4 + 4) * R + g] : 0.0f, k2 ? xa[(t4 + 4) * R + g + 8] : 0.0f};
#pragma unroll
          for (int q = 0; q < 4; q++) {
            ah[q] = f2tf32(af[q]);
            if (TC == 3) al[q] = f2tf32(af[q] - __uint_as_float(ah[q]));
          }
        }
        const bool col = wq_[j] >= 0;
        const int wst = wq_[j] & 0xfff;
        const float *__restrict__ wj = w + (col ? (wq_[j] >> 12) : 0) + kb * wst;
        float b0 = (col && k1) ? wj[t4 * wst] : 0.0f, b1 = (col && k2) ? wj[(t4 + 4) * wst] : 0.0f;
        unsigned bh0 = f2tf32(b0), bh1 = f2tf32(b1);
        if (TC == 3) {
          unsigned bl0 = f2tf32(b0 - __uint_as_float(bh0)), bl1 = f2tf32(b1 - __uint_as_float(bh1));
          mma_tf32(acc[j], al, bh0, bh1);
          mma_tf32(acc[j], ah, bl0, bl1);
        }
        mma_tf32(acc[j], ah, bh0, bh1);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < MAXT; j++) {
    int T = warp + j * nw;
    if (T >= ntiles) continue;
    int s, o1;
    T = tile_segment(t, T, &s, &o1);
    int ob = t.s[s].o0 + 8 * T;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      int r = g + (q >> 1) * 8, o = ob + 2 * t4 + (q & 1);
      if (o >= o1) continue;
      float v = acc[j][q] + (t.bias >= 0 ? __ldg(pack + t.bias + o) : 0.0f);
      if (act) v = v > 0.0f ? v : slope * v;
      if (mask && !(mask[(size_t)o * R + r] > 0.0f)) v *= slope;
      if (out) out[(size_t)o * R + r] = v;
      if (r < nsave) gout[(size_t)r * gld + o] = v;
    }
  }
}

/* one layer through the chosen arithmetic: TC = 0 FFMA (any R), 1 or 3 the
 * tensor cores (R = 16) */
template <int R, int TC>
__device__ __forceinline__ void layer(const float *in, float *out, const segtab_t &t, const float *pack, int act,
                                      const float *mask, float slope, float *gout, int gld, int nsave, float *wbuf,
                                      int stage_floats, int dbg = 0) {
  if constexpr (TC == 0)
    seg_linear<R, NOUT, NSTAGE>(in, out, t, pack, act, mask, slope, gout, gld, nsave, wbuf, stage_floats);
  else
  {
    /* tiles per warp decide the register arrays: small layers get small ones */
    int nt = 0;
    for (int s = 0; s < t.n; s++) nt += ((s + 1 < t.n ? t.s[s + 1].o0 : t.N) - t.s[s].o0 + 7) / 8;
    int per = (nt + blockDim.x / 32 - 1) / (blockDim.x / 32);
    if (per <= 2)
      seg_linear_tc<TC, NSTAGE_TC, 2>(in, out, t, pack, act, mask, slope, gout, gld, nsave, wbuf, stage_floats, dbg);
    else if (per <= 4)
      seg_linear_tc<TC, NSTAGE_TC, 4>(in, out, t, pack, act, mask, slope, gout, gld, nsave, wbuf, stage_floats, dbg);
    else
      seg_linear_tc<TC, NSTAGE_TC, TC_MAXT>(in, out, t, pack, act, mask, slope, gout, gld, nsave, wbuf, stage_floats,
                                            dbg);
  }
}

/* rows [row0, row0 + nrows) of G [*, ld] into feature-major s [F][R] (zeros past nrows) */
template <int R>
__device__ __forceinline__ void load_rows(float *__restrict__ s, const float *__restrict__ G, int ld, int F, int row0,
                                          int nrows) {
  for (int e = threadIdx.x; e < R * F; e += blockDim.x) {
    int r = e / F, f = e % F;
    s[(size_t)f * R + r] = r < nrows ? G[(size_t)(row0 + r) * ld + f] : 0.0f;
  }
}

/* Dueling combine and log-softmax of the rows r < nrows with r % mod == rem
 * of os [O2][R] (V then every A_d): base [D][Z][R] scratch, logp rows from
 * lrow0. The CPU's order for the mean over actions. */
template <int R>
__device__ __forceinline__ void dueling_tail(const float *__restrict__ os, float *__restrict__ base,
                                             const fwd_args_t &a, int nrows, int lrow0, int mod, int rem) {
  const int Z = a.Z;
  for (int e = threadIdx.x; e < a.D * Z * R; e += blockDim.x) {
    int r = e % R, z = (e / R) % Z, d = e / (R * Z);
    if (r % mod != rem) continue;
    const float *Ad = os + (size_t)(Z + a.aoff[d]) * R;
    float m = 0.0f;
    for (int k = 0; k < a.n[d]; k++) m += Ad[((size_t)k * Z + z) * R + r];
    base[e] = os[(size_t)z * R + r] - m / (float)a.n[d];
  }
  __syncthreads();
  /* log-softmax over z, one warp per (row, branch, action) */
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  int qw = 0;
  for (int d = 0; d < a.D; d++) qw += a.n[d];
  int nr = nrows > rem ? (nrows - rem + mod - 1) / mod : 0; /* rows rem, rem + mod, ... below nrows */
  for (int task = warp; task < nr * qw; task += nw) {
    int r = rem + (task / qw) * mod, q = task % qw, d = 0;
    while (q >= a.n[d]) q -= a.n[d], d++;
    const float *Aq = os + (size_t)(Z + a.aoff[d] + q * Z) * R + r;
    const float *bd = base + (size_t)d * Z * R + r;
    float mx = -INFINITY;
    for (int z = lane; z < Z; z += 32) mx = fmaxf(mx, Aq[(size_t)z * R] + bd[(size_t)z * R]);
    for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float s = 0.0f;
    for (int z = lane; z < Z; z += 32) s += expf(Aq[(size_t)z * R] + bd[(size_t)z * R] - mx);
    for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    float lse = mx + logf(s);
    float *lp = a.logp + (size_t)(lrow0 + r) * a.AW + a.aoff[d] + q * Z;
    for (int z = lane; z < Z; z += 32) lp[z] = Aq[(size_t)z * R] + bd[(size_t)z * R] - lse;
  }
}

/* Blocks [0, nblk_on): online network on rows of x [2B, S] (s then s');
 * blocks after: target network on s' rows. logp rows: online 0..2B-1,
 * target 2B..3B-1. Online-s rows (< B) keep h1, h, hh for the backward. */
template <int R, int TC>
__global__ void __launch_bounds__(NT) fused_forward_kernel(fwd_args_t a) {
  extern __shared__ float4 sh4[];
  float *xs = reinterpret_cast<float *>(sh4);
  float *h1s = xs + (size_t)a.S * R, *hs = h1s + (size_t)a.H1 * R, *hhs = hs + (size_t)a.H2 * R;
  float *os = hhs + (size_t)a.HC * R, *base = os + (size_t)a.O2 * R;
  float *wbuf = base + (size_t)a.D * a.Z * R; /* NSTAGE weight stages */
  int online = blockIdx.x < a.nblk_on;
  int row0 = online ? blockIdx.x * R : (blockIdx.x - a.nblk_on) * R; /* row of this pass */
  int rows_pass = online ? 2 * a.B : a.B;
  int nrows = min(R, rows_pass - row0);
  int xrow0 = online ? row0 : a.B + row0;
  int lrow0 = online ? row0 : 2 * a.B + row0;
  int nsave = online ? max(0, min(nrows, a.B - row0)) : 0;
  const float *T = online ? a.t_on : a.t_tg;
  load_rows<R>(xs, a.x, a.S, a.S, xrow0, nrows);
  __syncthreads();
  const segtab_t *tb = a.tabs;
  layer<R, TC>(xs, h1s, tb[0], T, 1, NULL, a.slope, a.h1 + (size_t)row0 * a.H1, a.H1, nsave, wbuf, a.stage, a.dbg);
  __syncthreads();
  layer<R, TC>(h1s, hs, tb[1], T, 1, NULL, a.slope, a.h + (size_t)row0 * a.H2, a.H2, nsave, wbuf, a.stage, a.dbg);
  __syncthreads();
  layer<R, TC>(hs, hhs, tb[2], T, 1, NULL, a.slope, a.hh + (size_t)row0 * a.HC, a.HC, nsave, wbuf, a.stage, a.dbg);
  __syncthreads();
  layer<R, TC>(hhs, os, tb[3], T, 0, NULL, a.slope, NULL, 0, 0, wbuf, a.stage, a.dbg);
  __syncthreads();
  dueling_tail<R>(os, base, a, nrows, lrow0, 1, 0);
}

/* Per-warp shared floats of fused_loss_kernel: lt, sel [nmax Z], lps, m, pj,
 * bj, ez, g, lj [Z], q [nmax]. */
/* A warp copies n floats from global to shared memory, 16 loads per lane in
 * flight before the first store (a plain loop waits out one L2 round trip
 * per iteration: the store needs the load). */
__device__ __forceinline__ void warp_copy(float *__restrict__ dst, const float *__restrict__ src, int n) {
  const int lane = threadIdx.x % 32;
  for (int k0 = 0; k0 < n; k0 += 32 * 16) {
    float t[16];
#pragma unroll
    for (int u = 0; u < 16; u++) {
      const int k = k0 + lane + 32 * u;
      t[u] = k < n ? src[k] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 16; u++) {
      const int k = k0 + lane + 32 * u;
      if (k < n) dst[k] = t[u];
    }
  }
}

__host__ __device__ static inline int loss_warp_floats(int nmax, int Z) { return 2 * nmax * Z + 7 * Z + nmax; }

/* One block per sample, one warp per branch: the Double-DQN action (Q sums
 * serial over z, the CPU's order), the C51 projection as a gather (lane z adds
 * source atoms in ascending j, c51_project's order), cross-entropy and
 * dlogits; then dV (sum over branches in order), loss_i and the Q sum. */
__global__ void fused_loss_kernel(loss_args_t a) {
  extern __shared__ float sh[];
  __shared__ float ce_s[MAXB], qa_s[MAXB];
  const int Z = a.Z, d = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x, B = a.B;
  float *g_all = sh; /* [D][Z]: each branch's dlogit at its taken action */
  float *wsh = sh + (size_t)a.D * Z + (size_t)d * loss_warp_floats(a.nmax, Z);
  float *lts = wsh, *sels = lts + (size_t)a.nmax * Z, *lps = sels + (size_t)a.nmax * Z;
  float *m = lps + Z, *pj = m + Z, *bj = pj + Z, *ez = bj + Z;
  int *lj = (int *)(ez + Z);
  float *q = ez + 2 * Z;
  float dz = (a.vmax - a.vmin) / (float)(Z - 1);
  /* this sample's scalars first: their L2 round trips overlap the copies'
   * instead of each following the arithmetic before its use */
  const int ai = a.a[i];
  const float ri = a.r[i], donei = a.done[i], wi = a.w[i];
  const float gamma = a.gamma_dev ? *a.gamma_dev : a.gamma;
  if (d < a.D) {
    const int n = a.n[d], nz = n * Z;
    const float *lp_s = a.logp + (size_t)i * a.AW + a.aoff[d];
    const float *lp_s2 = a.logp + ((size_t)B + i) * a.AW + a.aoff[d];
    const float *lt_s2 = a.logp + ((size_t)2 * B + i) * a.AW + a.aoff[d];
    const int ad = (ai / a.radix_after[d]) % n;
    /* the three rows' copies all in flight at once (cp.async, one wait):
     * copied one after another they waited out three L2 round trips */
    {
      const float *lp_a = lp_s + (size_t)ad * Z;
      for (int k = lane; k < nz; k += 32) cp_async4(lts + k, lt_s2 + k);
      if (a.double_dqn)
        for (int k = lane; k < nz; k += 32) cp_async4(sels + k, lp_s2 + k);
      for (int k = lane; k < Z; k += 32) cp_async4(lps + k, lp_a + k);
      cp_async_commit();
      cp_async_wait<0>();
    }
    __syncwarp();
    /* the probabilities of every (action, atom) by all 32 lanes first (in
     * place), then each action's Q as the same serial sum over z as before:
     * a lane per action alone computing its 51 expf was ~1/3 of the kernel */
    float *sel = a.double_dqn ? sels : lts;
    for (int k = lane; k < nz; k += 32) sel[k] = expf(sel[k]);
    __syncwarp();
    for (int k = lane; k < n; k += 32) {
      float s = 0.0f;
#pragma unroll 8
      for (int z = 0; z < Z; z++) s += sel[k * Z + z] * (a.vmin + dz * (float)z);
      q[k] = s;
    }
    __syncwarp();
    int bst = 0;
    for (int k = 1; k < n; k++)
      if (q[k] > q[bst]) bst = k;
    if (lane == 0) a.best[(size_t)d * B + i] = bst;
    float disc = gamma * (1.0f - donei);
    for (int j = lane; j < Z; j += 32) {
      pj[j] = a.double_dqn ? expf(lts[bst * Z + j]) : lts[bst * Z + j]; /* lts holds probabilities without */
      lj[j] = c51_source(ri, disc, a.vmin, a.vmax, dz, Z, j, &bj[j]);
      ez[j] = expf(lps[j]);
    }
    __syncwarp();
    float ce = 0.0f, qa = 0.0f, msum = 0.0f;
    const float c0 = (ri + disc * a.vmin - a.vmin) / dz; /* b_j before clamping: c0 + disc j */
    for (int z = lane; z < Z; z += 32) {
      const float acc = c51_gather(z, Z, lj, pj, bj, c0, disc);
      m[z] = acc;
      ce -= acc * lps[z];
      qa += ez[z] * (a.vmin + dz * (float)z);
      msum += acc;
    }
    for (int off = 16; off; off >>= 1) {
      ce += __shfl_xor_sync(0xffffffffu, ce, off);
      qa += __shfl_xor_sync(0xffffffffu, qa, off);
      msum += __shfl_xor_sync(0xffffffffu, msum, off);
    }
    __syncwarp();
    float c = wi / ((float)B * (float)a.D);
    float *g = g_all + (size_t)d * Z;
    for (int z = lane; z < Z; z += 32) g[z] = c * (ez[z] * msum - m[z]);
    __syncwarp();
    float *dA = a.g2 + (size_t)i * a.O2 + Z + a.aoff[d];
    for (int z = lane; z < Z; z += 32) { /* by atom, then action: no index division */
      const float gz = g[z], gm = gz / (float)n;
      for (int act = 0; act < n; act++) dA[(size_t)act * Z + z] = (act == ad ? gz : 0.0f) - gm;
    }
    if (lane == 0) ce_s[d] = ce, qa_s[d] = qa;
  }
  __syncthreads();
  for (int z = threadIdx.x; z < Z; z += blockDim.x) {
    float v = 0.0f;
    for (int e = 0; e < a.D; e++) v += g_all[(size_t)e * Z + z];
    a.g2[(size_t)i * a.O2 + z] = v;
  }
  if (threadIdx.x == 0) {
    float li = 0.0f, qs = 0.0f;
    for (int e = 0; e < a.D; e++) li = li + ce_s[e] / (float)a.D, qs = qs + qa_s[e];
    a.loss_i[i] = li;
    a.qsum_i[i] = qs;
  }
}

/* loss = sum_i w_i loss_i / B, q_taken = sum_i qsum_i / (B D): each thread a
 * strided run in order, then a fixed tree (1024 threads) */
__global__ void fused_batch_loss_kernel(const float *__restrict__ loss_i, const float *__restrict__ qsum_i,
                                        const float *__restrict__ w, int B, int D, float *__restrict__ loss,
                                        float *__restrict__ q_taken) {
  __shared__ float sl[1024], sq[1024];
  float l = 0.0f, q = 0.0f;
  for (int i = threadIdx.x; i < B; i += blockDim.x) {
    l += w[i] * loss_i[i];
    q += qsum_i[i];
  }
  sl[threadIdx.x] = l, sq[threadIdx.x] = q;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) sl[threadIdx.x] += sl[threadIdx.x + h], sq[threadIdx.x] += sq[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss = sl[0] / (float)B;
    *q_taken = sq[0] / ((float)B * (float)D);
  }
}

/* R online-s rows per block: g1 = (g2 . W_hc2) * lrelu'(hh), gh = (g1 . W_hc1)
 * * lrelu'(h), gt1 = (gh . W_t2) * lrelu'(h1), each kept for the weight
 * gradients. */
template <int R, int TC>
__global__ void __launch_bounds__(NT) fused_backward_kernel(bwd_args_t a) {
  /* shared: P = g2s, later ghs [max(O2, H2)]; Q = hhs, later h1s [max(HC, H1)];
   * g1s [HC]; hs [H2]; then the weight stages (a.N1 floats per row before them) */
  extern __shared__ float4 sh4[];
  float *P = reinterpret_cast<float *>(sh4);
  float *Q = P + (size_t)max(a.O2, a.H2) * R, *g1s = Q + (size_t)max(a.HC, a.H1) * R, *hs = g1s + (size_t)a.HC * R;
  float *wbuf = P + (size_t)a.N1 * R;
  int row0 = blockIdx.x * R, nrows = min(R, a.B - row0);
  load_rows<R>(P, a.g2, a.O2, a.O2, row0, nrows);
  load_rows<R>(Q, a.hh, a.HC, a.HC, row0, nrows);
  load_rows<R>(hs, a.h, a.H2, a.H2, row0, nrows);
  __syncthreads();
  const segtab_t *tb = a.tabs;
  layer<R, TC>(P, g1s, tb[0], a.w_on, 0, Q, a.slope, a.g1 + (size_t)row0 * a.HC, a.HC, nrows, wbuf, a.stage);
  __syncthreads();
  load_rows<R>(Q, a.h1, a.H1, a.H1, row0, nrows); /* hh is no longer needed */
  layer<R, TC>(g1s, P, tb[1], a.w_on, 0, hs, a.slope, a.gh + (size_t)row0 * a.H2, a.H2, nrows, wbuf, a.stage);
  __syncthreads();
  layer<R, TC>(P, NULL, tb[2], a.w_on, 0, Q, a.slope, a.gt1 + (size_t)row0 * a.H1, a.H1, nrows, wbuf, a.stage);
}

/* One block per 32 x 32 tile of one weight matrix: dW[o][i] = sum_b dY[b][o]
 * X[b][i] over b in order (the next 32 rows' loads issued before this chunk's
 * arithmetic), the bias gradient (tiles with i0 == 0) and NoisyNet sigma
 * gradients in the epilogue. bufs: the 8 buffers wtile_t names. */
struct wbufs {
  const float *p[8];
};

/* ---- Thread-block clusters: each layer's outputs split over the CL CTAs of a
 * cluster working on the same CL_R rows, so a CTA streams only its eighth
 * of the weights (the single-block kernels above stream all of them, and
 * that stream, ~16 GB/s per SM, is their time: DEVICE_NOTES.md item 19).
 * Activations are complete in every CTA: each CTA writes its outputs into
 * all the cluster's shared memories (distributed shared memory), and a
 * cluster barrier ends each layer. FFMA arithmetic, sums over k in order. */
#define CL 8          /* CTAs per cluster (the portable maximum) */
#define CL_R 16       /* rows per cluster */
#define CL_NT 256     /* threads per CTA */
#define CL_STAGE 8192 /* floats per weight stage (two stages) */
#define CL_NI 3       /* (output, row quad) items per thread: W * R / 4 <= CL_NI * CL_NT */

__host__ __device__ static inline void cl_chunk(int N, int rank, int *lo, int *W) {
  int a = rank ? (rank * N / CL) & ~3 : 0, b = rank + 1 < CL ? ((rank + 1) * N / CL) & ~3 : N;
  *lo = a, *W = b - a;
}

/* rows [k0, k0 + kc) of the columns [lo, lo + W) of every copy segment into wb [kc][W] */
__device__ __forceinline__ void cl_stage(float *__restrict__ wb, const segtab_t &t, const float *__restrict__ pack,
                                         int k0, int kc, int lo, int W) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  for (int c = 0; c < t.nc; c++) {
    int a = max(lo, t.c[c].o0), b = min(lo + W, t.c[c].o0 + t.c[c].w);
    if (a >= b) continue;
    int rows = min(kc, t.c[c].K - k0);
    for (int r = warp; r < rows; r += nw) {
      const float *src = pack + t.c[c].woff + (long long)(k0 + r) * t.c[c].w + (a - t.c[c].o0);
      float *dst = wb + r * W + (a - lo);
      for (int e = lane; e < b - a; e += 32) cp_async4(dst + e, src + e);
    }
  }
}

/* Outputs [lo, lo + W) of one layer for the cluster's R rows from the full
 * input in (local [K][R]); each value (bias, LeakyReLU or times lrelu' of
 * gmask[(mrow0 + r) * mld + o]) goes to out [N][R] in every CTA of the
 * cluster (out == NULL: none) and rows r < nsave to gout[r * gld + o]. */
template <int R>
__device__ __forceinline__ void cl_layer(const float *__restrict__ in, float *out, const segtab_t &t,
                                         const float *__restrict__ pack, int act, const float *__restrict__ gmask,
                                         int mld, int mrow0, int nrows, float slope, float *__restrict__ gout,
                                         int gld, int nsave, float *__restrict__ wbuf, int kc,
                                         cooperative_groups::cluster_group &cl) {
  int lo, W;
  cl_chunk(t.N, (int)cl.block_rank(), &lo, &W);
  const int items = W * (R / 4);
  int ol[CL_NI], qd[CL_NI], kof[CL_NI], kn[CL_NI];
#pragma unroll
  for (int j = 0; j < CL_NI; j++) {
    int it = threadIdx.x + j * blockDim.x;
    ol[j] = it % max(W, 1), qd[j] = it / max(W, 1), kof[j] = 0, kn[j] = 0;
    if (it < items) {
      int o = lo + ol[j], sg = 0;
      while (sg + 1 < t.n && o >= t.s[sg + 1].o0) sg++;
      kof[j] = t.s[sg].koff, kn[j] = t.s[sg].K;
    }
  }
  int Kmax = 0;
  for (int c = 0; c < t.nc; c++) Kmax = max(Kmax, t.c[c].K);
  float acc[CL_NI][4];
#pragma unroll
  for (int j = 0; j < CL_NI; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const int nst = (Kmax + kc - 1) / kc;
  cl_stage(wbuf, t, pack, 0, kc, lo, W);
  cp_async_commit();
  for (int st = 0; st < nst; st++) {
    if (st + 1 < nst) {
      cl_stage(wbuf + (size_t)((st + 1) & 1) * CL_STAGE, t, pack, (st + 1) * kc, kc, lo, W);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const float *__restrict__ w = wbuf + (size_t)(st & 1) * CL_STAGE;
    const int k0 = st * kc;
#pragma unroll
    for (int j = 0; j < CL_NI; j++) {
      const int kend = min(kc, kn[j] - k0);
      const float *__restrict__ wj = w + ol[j];
      const float4 *__restrict__ x4 = reinterpret_cast<const float4 *>(in + (size_t)(kof[j] + k0) * R) + qd[j];
      int kk = 0;
      for (; kk + 4 <= kend; kk += 4) {
        float wk[4];
        float4 xv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) wk[u] = wj[(kk + u) * W], xv[u] = x4[(kk + u) * (R / 4)];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          acc[j][0] += xv[u].x * wk[u];
          acc[j][1] += xv[u].y * wk[u];
          acc[j][2] += xv[u].z * wk[u];
          acc[j][3] += xv[u].w * wk[u];
        }
      }
      for (; kk < kend; kk++) {
        float wk = wj[kk * W];
        float4 xv = x4[kk * (R / 4)];
        acc[j][0] += xv.x * wk, acc[j][1] += xv.y * wk, acc[j][2] += xv.z * wk, acc[j][3] += xv.w * wk;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < CL_NI; j++) {
    int it = threadIdx.x + j * blockDim.x;
    if (it >= items) continue;
    int o = lo + ol[j];
    float b = t.bias >= 0 ? __ldg(pack + t.bias + o) : 0.0f;
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      int r = 4 * qd[j] + u;
      v[u] = acc[j][u] + b;
      if (act) v[u] = v[u] > 0.0f ? v[u] : slope * v[u];
      if (gmask) {
        float m = r < nrows ? gmask[(size_t)(mrow0 + r) * mld + o] : 1.0f;
        if (!(m > 0.0f)) v[u] *= slope;
      }
      if (r < nsave) gout[(size_t)r * gld + o] = v[u];
    }
    if (out) {
      float4 v4 = make_float4(v[0], v[1], v[2], v[3]);
      for (int q = 0; q < CL; q++) {
        float *dst = cl.map_shared_rank(out, q);
        *reinterpret_cast<float4 *>(dst + (size_t)o * R + 4 * qd[j]) = v4;
      }
    }
  }
}

/* fused_forward_kernel with a cluster of CL CTAs per CL_R rows. Shared:
 * A [max(S, H2, O2)][R] (x, then h, then the head outputs), B [max(H1, HC)][R]
 * (h1, then the head hidden units), base [D Z][R], two weight stages. */
__global__ void __launch_bounds__(CL_NT) fused_forward_cluster_kernel(fwd_args_t a, int nA, int nB, int4 kc) {
  constexpr int R = CL_R;
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  extern __shared__ float4 sh4[];
  float *A = reinterpret_cast<float *>(sh4), *Bf = A + (size_t)nA * R, *base = Bf + (size_t)nB * R;
  float *wbuf = base + (size_t)a.D * a.Z * R;
  const int cid = blockIdx.x / CL;
  int online = cid < a.nblk_on;
  int row0 = online ? cid * R : (cid - a.nblk_on) * R;
  int rows_pass = online ? 2 * a.B : a.B;
  int nrows = min(R, rows_pass - row0);
  int xrow0 = online ? row0 : a.B + row0, lrow0 = online ? row0 : 2 * a.B + row0;
  int nsave = online ? max(0, min(nrows, a.B - row0)) : 0;
  const float *T = online ? a.t_on : a.t_tg;
  const segtab_t *tb = a.tabs;
  load_rows<R>(A, a.x, a.S, a.S, xrow0, nrows);
  cl.sync(); /* every CTA of the cluster runs (and its x is loaded) before any writes into it */
  cl_layer<R>(A, Bf, tb[0], T, 1, NULL, 0, 0, nrows, a.slope, a.h1 + (size_t)row0 * a.H1, a.H1, nsave, wbuf, kc.x, cl);
  cl.sync();
  cl_layer<R>(Bf, A, tb[1], T, 1, NULL, 0, 0, nrows, a.slope, a.h + (size_t)row0 * a.H2, a.H2, nsave, wbuf, kc.y, cl);
  cl.sync();
  cl_layer<R>(A, Bf, tb[2], T, 1, NULL, 0, 0, nrows, a.slope, a.hh + (size_t)row0 * a.HC, a.HC, nsave, wbuf, kc.z,
              cl);
  cl.sync();
  cl_layer<R>(Bf, A, tb[3], T, 0, NULL, 0, 0, nrows, a.slope, NULL, 0, 0, wbuf, kc.w, cl);
  cl.sync();
  dueling_tail<R>(A, base, a, nrows, lrow0, CL, (int)cl.block_rank());
}

/* fused_backward_kernel with clusters. Shared: A [max(O2, H2)][R] (g2, then
 * gh), B [HC][R] (g1), two weight stages; the lrelu' masks come from the
 * saved activations in global memory. */
__global__ void __launch_bounds__(CL_NT) fused_backward_cluster_kernel(bwd_args_t a, int nA, int4 kc) {
  constexpr int R = CL_R;
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  extern __shared__ float4 sh4[];
  float *A = reinterpret_cast<float *>(sh4), *Bf = A + (size_t)nA * R, *wbuf = Bf + (size_t)a.HC * R;
  const int cid = blockIdx.x / CL;
  int row0 = cid * R, nrows = min(R, a.B - row0);
  const segtab_t *tb = a.tabs;
  load_rows<R>(A, a.g2, a.O2, a.O2, row0, nrows);
  cl.sync();
  cl_layer<R>(A, Bf, tb[0], a.w_on, 0, a.hh, a.HC, row0, nrows, a.slope, a.g1 + (size_t)row0 * a.HC, a.HC, nrows,
              wbuf, kc.x, cl);
  cl.sync();
  cl_layer<R>(Bf, A, tb[1], a.w_on, 0, a.h, a.H2, row0, nrows, a.slope, a.gh + (size_t)row0 * a.H2, a.H2, nrows,
              wbuf, kc.y, cl);
  cl.sync();
  cl_layer<R>(A, NULL, tb[2], a.w_on, 0, a.h1, a.H1, row0, nrows, a.slope, a.gt1 + (size_t)row0 * a.H1, a.H1,
              nrows, wbuf, kc.z, cl);
}

/* the 4 x 4 patch (and bias sums) of thread (to, ti) of tile t into grad */
__device__ __forceinline__ void wgrad_store(const wtile_t &t, int to, int ti, const float (&acc)[4][4],
                                            const float (&bsum)[4], const float *__restrict__ fn,
                                            float *__restrict__ grad) {
#pragma unroll
  for (int u = 0; u < 4; u++)
#pragma unroll
    for (int v = 0; v < 4; v++) {
      int oo = 4 * to + u, ii = 4 * ti + v;
      if (oo >= t.no || ii >= t.ni) continue;
      int o = t.o0 + oo, i = t.i0 + ii;
      size_t k = (size_t)o * t.in + i;
      grad[t.gw + k] = acc[u][v];
      if (t.gsw >= 0) grad[t.gsw + k] = acc[u][v] * (fn[t.fo + o] * fn[t.fi + i]);
    }
  if (t.gb >= 0 && ti == 0)
#pragma unroll
    for (int u = 0; u < 4; u++) {
      int oo = 4 * to + u;
      if (oo >= t.no) continue;
      int o = t.o0 + oo;
      grad[t.gb + o] = bsum[u];
      if (t.gsb >= 0) grad[t.gsb + o] = bsum[u] * fn[t.fo + o];
    }
}

#define WG_PART 1056 /* floats per tile and split: 32 x 32 + 32 bias sums */

/* One block (64 threads, 4 x 4 each) per 32 x 32 tile of one weight matrix
 * and per batch split (blockIdx.y of gridDim.y, `chunk` rows each):
 * dW[o][i] = sum_b dY[b][o] X[b][i] over b in order (the next 32 rows' loads
 * issued before this chunk's arithmetic), and the bias sums. One split: the
 * gradients (with NoisyNet sigma) are written here; several: partial sums go
 * to part and fused_wgrad_reduce_kernel adds them in split order. */
__global__ void __launch_bounds__(64) fused_wgrad_kernel(const wtile_t *__restrict__ tiles, wbufs bufs, int B,
                                                         int chunk, const float *__restrict__ fn,
                                                         float *__restrict__ grad, float *__restrict__ part) {
  __shared__ __align__(16) float ys[32][32], xs[32][32];
  const wtile_t t = tiles[blockIdx.x];
  const float *__restrict__ Y = bufs.p[t.ybuf] + t.dy;
  const float *__restrict__ X = bufs.p[t.xbuf] + t.x;
  const int tid = threadIdx.x, to = tid / 8, ti = tid % 8;
  const int bbeg = blockIdx.y * chunk, bend = min(B, bbeg + chunk);
  float acc[4][4], bsum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int u = 0; u < 4; u++)
#pragma unroll
    for (int v = 0; v < 4; v++) acc[u][v] = 0.0f;
  float ry[16], rx[16];
  auto load = [&](int b0) {
#pragma unroll
    for (int l = 0; l < 16; l++) {
      int e = tid + 64 * l, bb = e / 32, c = e % 32, b = b0 + bb;
      ry[l] = (b < bend && c < t.no) ? Y[(size_t)b * t.ldy + t.o0 + c] : 0.0f;
      rx[l] = (b < bend && c < t.ni) ? X[(size_t)b * t.ldx + t.i0 + c] : 0.0f;
    }
  };
  load(bbeg);
  for (int b0 = bbeg; b0 < bend; b0 += 32) {
#pragma unroll
    for (int l = 0; l < 16; l++) {
      int e = tid + 64 * l;
      ys[e / 32][e % 32] = ry[l];
      xs[e / 32][e % 32] = rx[l];
    }
    __syncthreads();
    if (b0 + 32 < bend) load(b0 + 32);
#pragma unroll 4
    for (int bb = 0; bb < 32; bb++) {
      float4 y = *reinterpret_cast<const float4 *>(&ys[bb][4 * to]);
      float4 x = *reinterpret_cast<const float4 *>(&xs[bb][4 * ti]);
      float yv[4] = {y.x, y.y, y.z, y.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int u = 0; u < 4; u++) {
#pragma unroll
        for (int v = 0; v < 4; v++) acc[u][v] += yv[u] * xv[v];
        bsum[u] += yv[u]; /* kept by the ti == 0 threads of bias tiles */
      }
    }
    __syncthreads();
  }
  if (gridDim.y == 1) {
    wgrad_store(t, to, ti, acc, bsum, fn, grad);
    return;
  }
  float *pp = part + ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * WG_PART;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    *reinterpret_cast<float4 *>(pp + (4 * to + u) * 32 + 4 * ti) = make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
    if (ti == 0) pp[1024 + 4 * to + u] = bsum[u];
  }
}

/* the splits of fused_wgrad_kernel added in split order, then stored */
__global__ void __launch_bounds__(64) fused_wgrad_reduce_kernel(const wtile_t *__restrict__ tiles, int S,
                                                                const float *__restrict__ part,
                                                                const float *__restrict__ fn, float *__restrict__ grad) {
  const wtile_t t = tiles[blockIdx.x];
  const int tid = threadIdx.x, to = tid / 8, ti = tid % 8;
  float acc[4][4], bsum[4];
#pragma unroll
  for (int u = 0; u < 4; u++) {
    bsum[u] = 0.0f;
#pragma unroll
    for (int v = 0; v < 4; v++) acc[u][v] = 0.0f;
  }
  for (int z = 0; z < S; z++) {
    const float *pp = part + ((size_t)z * gridDim.x + blockIdx.x) * WG_PART;
#pragma unroll
    for (int u = 0; u < 4; u++) {
      float4 v = *reinterpret_cast<const float4 *>(pp + (4 * to + u) * 32 + 4 * ti);
      acc[u][0] += v.x, acc[u][1] += v.y, acc[u][2] += v.z, acc[u][3] += v.w;
      if (ti == 0) bsum[u] += pp[1024 + 4 * to + u];
    }
  }
  wgrad_store(t, to, ti, acc, bsum, fn, grad);
}

/* ---- Layer-GEMM phases (the default fp32 path since DEVICE_NOTES.md item 23).
 * The row-tile kernels above run the whole network per block of R rows and
 * measured ~80-90 µs per block whatever the arithmetic: one block's serial
 * chain of layers, 2-4 warps per scheduler and three shared loads per eight
 * FMAs. Here each layer is one launch whose blocks each compute a 32 x 64
 * tile of outputs for every row of the phase (online s and s', target s' as
 * separate problems of the same launch), so a layer spreads over the whole
 * GPU. A thread keeps a 4 x 4 register tile; operands stream through a
 * GNS-stage cp.async ring of GBK-deep k chunks, so GNS - 1 chunks are in
 * flight while one is multiplied (the first version, one chunk ahead, was
 * bound by one L2 round trip per 16 k: item 23). Deep, narrow products are
 * split over k (split-K) to fill the GPU; the last block of a tile to arrive
 * adds the splits' partial sums in split order, so every sum has one fixed
 * order and reruns are bit-identical. The weight gradients are the same
 * kernel with A = dY^T (TA = 1). */
#define GBM 32  /* tile rows */
#define GBN 64  /* tile outputs */
#define GBK 32  /* k per chunk */
#define GNS 4   /* pipeline stages */
#define GNT 128 /* threads: 16 x 8, 4 x 4 outputs each */
#define GEMM_FP32_DEFAULT 0 /* fp32 arithmetic of mode 0: 0 FFMA, 3 3xTF32 (no faster, and less close to the CPU: DEVICE_NOTES.md item 23) */
/* shared row strides, padded so the tensor cores' fragment loads (lane = 4 g
 * + t: rows g, columns t) hit 32 different banks and float4 loads stay aligned */
#define GSA0 (GBK + 4) /* A [m][k] (TA 0) */
#define GSA1 (GBM + 8) /* A [k][m] (TA 1) */
#define GSW (GBN + 8)  /* W [k][n] */
#define GA_FLOATS (GBK * GSA1 > GBM * GSA0 ? GBK * GSA1 : GBM * GSA0)
#define GW_FLOATS (GBK * GSW)
#define GPART (GBM * GBN + GBM)     /* partial floats per tile and split: outputs, then bias sums */
#define GSMEM (sizeof(float) * GNS * (GA_FLOATS + GW_FLOATS))

/* one matrix product of a phase: C[m][n] = sum_k A(m, k) W[k][n] (+ bias[n]),
 * then LeakyReLU (act) or times lrelu'(mask[m][n]) where mask <= 0. TA 0: A
 * is [m][k] (lda); TA 1: A is [k][m] and the product is a weight gradient
 * dW[o = m][i = n] written at grad + gw (row stride N), with the bias
 * gradient (sum over k of A) and NoisyNet sigma gradients. */
typedef struct gprob {
  const float *A, *W, *bias, *mask;
  float *C;
  int lda, ldw, ldc, ldm;
  int M, N, K, act;
  int blk0;   /* first block of this problem in its launch */
  int tn;     /* tiles along n */
  int tiles;  /* tiles (tm * tn) */
  int splits; /* split-K parts */
  int kper;   /* k per part (a multiple of GBK) */
  int al;     /* bit 0: A rows take 16-byte copies; bit 1: W rows do */
  int cnt0;   /* this problem's first tile among the launch's arrival counters */
  long long poff; /* its first partial tile (GPART floats each) in the split-K scratch */
  long long gw, gb, gsw, gsb, fi, fo; /* TA 1: offsets in grad and fn, -1 when absent */
} gprob_t;

/* A launch's lookup from block to problem, passed as a grid constant: the
 * first-block offsets are compared all at once (independent loads from the
 * constant cache) instead of walking the problem table in global memory, one
 * dependent L2 round trip per problem passed. */
typedef struct gidx {
  int np;
  int blk0[GEMM_MAXP];
} gidx_t;

__device__ __forceinline__ int g_find(const gidx_t &ix) {
  int p = 0;
#pragma unroll 8
  for (int i = 1; i < ix.np; i++) p += (int)blockIdx.x >= ix.blk0[i];
  return p;
}

__device__ __forceinline__ void cp_async16z(float *dst, const float *src, int bytes) {
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async4z(float *dst, const float *src, int bytes) {
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}

/* Every tile load is one shape: NR rows of NC contiguous floats,
 * src[(row0 + r) ld + col0 + c] -> s[r ss + c], zeros past rowmax and colmax.
 * A chunk of A or of the forward's W is GBM / GBN rows along k (cols = k,
 * bounded by kend); the backward's W and the weight gradients' A are GBK
 * rows of k (rows = k) along n or m. V16: 16-byte copies (rows 16-byte
 * aligned), else 4-byte ones. */
template <int NR, int NC, bool V16>
__device__ __forceinline__ void cp_tile(float *__restrict__ s, int ss, const float *src, size_t ld, int row0,
                                        int rowmax, int col0, int colmax) {
  const int tid = threadIdx.x;
  constexpr int W = V16 ? 4 : 1, PER = NC / W;
#pragma unroll(V16 ? 8 : 4) /* the 4-byte fallbacks: full unrolling spills the large tiles */
  for (int l = 0; l < NR * PER / GNT; l++) {
    const int e = tid + GNT * l, r = e / PER, c = W * (e % PER);
    const int v = row0 + r < rowmax ? max(0, min(W, colmax - (col0 + c))) : 0;
    const float *p = v ? src + (size_t)(row0 + r) * ld + col0 + c : src;
    if (V16) cp_async16z(s + r * ss + c, p, 4 * v);
    else cp_async4z(s + r * ss + c, p, 4 * v);
  }
}
/* R rows along k; GBK rows of k along C columns */
template <int R, bool V16>
__device__ __forceinline__ void cp_rows_k(float *s, int ss, const float *src, size_t ld, int r0, int rmax, int k0,
                                          int kend) {
  cp_tile<R, GBK, V16>(s, ss, src, ld, r0, rmax, k0, kend);
}
template <int C, bool V16>
__device__ __forceinline__ void cp_k_cols(float *s, int ss, const float *src, size_t ld, int c0, int cmax, int k0,
                                          int kend) {
  cp_tile<GBK, C, V16>(s, ss, src, ld, k0, kend, c0, cmax);
}

/* Per-thread copy plan of the 16-byte path, fixed for a block: each thread
 * copies GA16 float4s of A and GW16 of W per chunk at the same offsets, so
 * their source rows, bounds and shared offsets are computed once (computing
 * them per chunk was ~190 of ~820 instructions a chunk: item 23). */
#define GA16 (GBM * GBK / 4 / GNT)
#define GW16 (GBK * GBN / 4 / GNT)
struct gplan {
  const float *a[GA16], *w[GW16]; /* sources at k0 = 0 */
  int ao[GA16], wo[GW16];         /* shared offsets */
  int acap[GA16], wcap[GW16];     /* floats valid by M or N (TA 0 A: by M only, 0 or 4) */
  int ak[GA16], wk[GW16];         /* k of the row within the chunk */
};

template <int TA, int TW>
__device__ __forceinline__ void g_plan(gplan &pl, const gprob_t &g, int m0, int n0) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int l = 0; l < GA16; l++) {
    const int e = tid + GNT * l;
    if (TA == 0) {
      const int m = e / (GBK / 4), k = 4 * (e % (GBK / 4));
      const bool ok = m0 + m < g.M;
      pl.a[l] = ok ? g.A + (size_t)(m0 + m) * g.lda + k : g.A;
      pl.ao[l] = m * GSA0 + k, pl.acap[l] = ok ? 4 : 0, pl.ak[l] = k;
    } else {
      const int k = e / (GBM / 4), m = 4 * (e % (GBM / 4));
      pl.acap[l] = max(0, min(4, g.M - (m0 + m)));
      pl.a[l] = pl.acap[l] ? g.A + (size_t)k * g.lda + m0 + m : g.A;
      pl.ao[l] = k * GSA1 + m, pl.ak[l] = k;
    }
  }
#pragma unroll
  for (int l = 0; l < GW16; l++) {
    const int e = tid + GNT * l;
    if (TW == 0) { /* W [k][n] -> sw [k][GSW] */
      const int k = e / (GBN / 4), n = 4 * (e % (GBN / 4));
      pl.wcap[l] = max(0, min(4, g.N - (n0 + n)));
      pl.w[l] = pl.wcap[l] ? g.W + (size_t)k * g.ldw + n0 + n : g.W;
      pl.wo[l] = k * GSW + n, pl.wk[l] = k;
    } else { /* W [n][k] -> sw [n][GSA0] */
      const int n = e / (GBK / 4), k = 4 * (e % (GBK / 4));
      const bool ok = n0 + n < g.N;
      pl.w[l] = ok ? g.W + (size_t)(n0 + n) * g.ldw + k : g.W;
      pl.wo[l] = n * GSA0 + k, pl.wcap[l] = ok ? 4 : 0, pl.wk[l] = k;
    }
  }
}

/* issue the copies of k chunk [k0, k0 + GBK) (zeros past kend, M, N) */
template <int TA, int TW>
__device__ __forceinline__ void g_issue(float *__restrict__ sa, float *__restrict__ sw, const gprob_t &g,
                                        const gplan &pl, int m0, int n0, int k0, int kend) {
  const float *A = g.A, *W = g.W;
  if (g.al & 1) {
    const size_t ka = TA == 0 ? (size_t)k0 : (size_t)k0 * g.lda;
#pragma unroll
    for (int l = 0; l < GA16; l++) {
      const int v = TA == 0 ? min(pl.acap[l], max(0, kend - (k0 + pl.ak[l])))
                            : (k0 + pl.ak[l] < kend ? pl.acap[l] : 0);
      cp_async16z(sa + pl.ao[l], v ? pl.a[l] + ka : A, 4 * v);
    }
  } else if (TA == 0) { /* sa [m][GSA0] */
    cp_rows_k<GBM, false>(sa, GSA0, A, g.lda, m0, g.M, k0, kend);
  } else { /* sa [k][GSA1] */
    cp_k_cols<GBM, false>(sa, GSA1, A, g.lda, m0, g.M, k0, kend);
  }
  if (g.al & 2) {
    const size_t kw = TW == 0 ? (size_t)k0 * g.ldw : (size_t)k0;
#pragma unroll
    for (int l = 0; l < GW16; l++) {
      const int v = TW == 0 ? (k0 + pl.wk[l] < kend ? pl.wcap[l] : 0)
                            : min(pl.wcap[l], max(0, kend - (k0 + pl.wk[l])));
      cp_async16z(sw + pl.wo[l], v ? pl.w[l] + kw : W, 4 * v);
    }
  } else if (TW == 1) { /* sw [n][GSA0] */
    cp_rows_k<GBN, false>(sw, GSA0, W, g.ldw, n0, g.N, k0, kend);
  } else { /* sw [k][GSW] */
    cp_k_cols<GBN, false>(sw, GSW, W, g.ldw, n0, g.N, k0, kend);
  }
}

/* this thread's e-th output (0..15) within the tile: FFMA 4 x 4 patches;
 * tensor cores (TC > 0): warp w owns columns [16 w, 16 w + 16) of all 32
 * rows, as 2 x 2 m16n8 accumulators in the mma.sync layout */
template <int TC, int TW>
__device__ __forceinline__ void g_elem(int e, int &ml, int &nl) {
  const int tid = threadIdx.x;
  if (TC == 0 && TW == 0) {
    ml = 4 * (tid / 16) + e / 4, nl = 4 * (tid % 16) + e % 4;
  } else if (TC == 0) { /* W rows read along k: columns 16 apart spread the banks */
    ml = 4 * (tid / 16) + e / 4, nl = tid % 16 + 16 * (e % 4);
  } else {
    const int w = tid / 32, lane = tid % 32, c = e % 4;
    ml = 16 * (e / 8) + lane / 4 + 8 * (c >> 1);
    nl = 16 * w + 8 * ((e / 4) % 2) + 2 * (lane % 4) + (c & 1);
  }
}

/* TF32 hi and lo parts of x (3xTF32: x ~ hi + lo to ~fp32 accuracy) */
__device__ __forceinline__ void tf32_split(float x, unsigned &hi, unsigned &lo) {
  hi = f2tf32(x);
  lo = f2tf32(x - __uint_as_float(hi));
}

/* One tile (and k part) of a phase's problems. TC: arithmetic, 0 fp32 FFMA
 * (sums over k in order), 1 TF32 mma.sync (the tensor_cores config), 3
 * 3xTF32 mma.sync (hi/lo split, fp32 accuracy). */
template <int TA, int TW, int TC>
__global__ void __launch_bounds__(GNT) fused_gemm_kernel(const gprob_t *__restrict__ probs, const __grid_constant__ gidx_t ix, float slope,
                                                         float *__restrict__ grad, const float *__restrict__ fn,
                                                         float *__restrict__ part, int *__restrict__ cnt) {
  extern __shared__ float4 gsh4[];
  float *sA = reinterpret_cast<float *>(gsh4), *sW = sA + GNS * GA_FLOATS;
  __shared__ int last;
  const int p = g_find(ix);
  /* a copy in registers: through a reference every field would be reloaded
   * from global memory after each barrier (measured: half the instructions) */
  const gprob_t g = probs[p];
  const int local = (int)blockIdx.x - g.blk0, tile = local % g.tiles, split = local / g.tiles;
  const int m0 = (tile / g.tn) * GBM, n0 = (tile % g.tn) * GBN;
  const int klo = split * g.kper, khi = min(g.K, klo + g.kper);
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int wq = tid / 32, gq = (tid % 32) / 4, tq = tid % 4;
  /* weight gradients: the bias gradient of row tid is the sum over k of A,
   * kept by the first warp of the tiles at n0 = 0, in k order */
  const bool bias_sums = TA == 1 && n0 == 0 && tid < GBM && g.gb >= 0;
  float acc[16], bsum = 0.0f;
#pragma unroll
  for (int e = 0; e < 16; e++) acc[e] = 0.0f;
  const int nk = khi > klo ? (khi - klo + GBK - 1) / GBK : 0;
  gplan pl;
  g_plan<TA, TW>(pl, g, m0, n0);
#pragma unroll
  for (int q = 0; q < GNS - 1; q++) {
    if (q < nk) g_issue<TA, TW>(sA + q * GA_FLOATS, sW + q * GW_FLOATS, g, pl, m0, n0, klo + q * GBK, khi);
    cp_async_commit();
  }
  /* the epilogue's operands (the forward's bias, the backward's LeakyReLU
   * mask: build_probs checks that no phase has the other) loaded now, so
   * their L2 round trip overlaps the first chunks' instead of following the
   * last one: they do not depend on this launch's results */
  float pb[4], pm[16];
  if (TA == 0 && TW == 1) {
#pragma unroll
    for (int c = 0; c < 4; c++) {
      int ml, nl;
      g_elem<TC, TW>(TC ? (c & 1) + 4 * (c >> 1) : c, ml, nl);
      pb[c] = n0 + nl < g.N && g.bias ? g.bias[n0 + nl] : 0.0f;
    }
  }
  if (TA == 0 && TW == 0) {
#pragma unroll
    for (int e = 0; e < 16; e++) {
      int ml, nl;
      g_elem<TC, TW>(e, ml, nl);
      const int m = m0 + ml, n = n0 + nl;
      pm[e] = m < g.M && n < g.N && g.mask ? g.mask[(size_t)m * g.ldm + n] : 1.0f;
    }
  }
  for (int c = 0; c < nk; c++) {
    cp_async_wait<GNS - 2>(); /* chunk c has landed (this thread's copies) */
    __syncthreads();          /* everyone's; and chunk c - 1's buffer is free */
    const int nx = c + GNS - 1;
    if (nx < nk)
      g_issue<TA, TW>(sA + (nx % GNS) * GA_FLOATS, sW + (nx % GNS) * GW_FLOATS, g, pl, m0, n0, klo + nx * GBK, khi);
    cp_async_commit();
    const float *__restrict__ a = sA + (c % GNS) * GA_FLOATS;
    const float *__restrict__ w = sW + (c % GNS) * GW_FLOATS;
    if (bias_sums)
#pragma unroll 8
      for (int k = 0; k < GBK; k++) bsum += a[k * GSA1 + tid];
    if (TC == 0 && TA == 0) {
      /* A [m][k] float4 along k; W [n][k] (forward, TW 1) float4 along k or
       * [k][n] (backward) float4 along n, both held as wv[column][k] */
#pragma unroll 2
      for (int k = 0; k < GBK; k += 4) {
        float av[4][4], wv[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const float4 v = *reinterpret_cast<const float4 *>(a + (4 * ty + i) * GSA0 + k);
          av[i][0] = v.x, av[i][1] = v.y, av[i][2] = v.z, av[i][3] = v.w;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
          /* TW 1: row tx + 16 j of W (columns 16 apart spread the banks);
           * TW 0: row k + j of W, columns 4 tx .. 4 tx + 3 */
          const float *wr = TW ? w + (tx + 16 * j) * GSA0 + k : w + (k + j) * GSW + 4 * tx;
          const float4 v = *reinterpret_cast<const float4 *>(wr);
          if (TW) wv[j][0] = v.x, wv[j][1] = v.y, wv[j][2] = v.z, wv[j][3] = v.w;
          else wv[0][j] = v.x, wv[1][j] = v.y, wv[2][j] = v.z, wv[3][j] = v.w;
        }
        /* k outermost: 16 independent FMAs between two on one accumulator */
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
          for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[4 * i + j] += av[i][u] * wv[j][u];
      }
    } else if (TC == 0) {
#pragma unroll 4
      for (int k = 0; k < GBK; k++) {
        const float4 a4 = *reinterpret_cast<const float4 *>(a + k * GSA1 + 4 * ty);
        const float4 w4 = *reinterpret_cast<const float4 *>(w + k * GSW + 4 * tx);
        const float av[4] = {a4.x, a4.y, a4.z, a4.w}, wv[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < 4; j++) acc[4 * i + j] += av[i] * wv[j];
      }
    } else {
#pragma unroll
      for (int k8 = 0; k8 < GBK; k8 += 8) {
        unsigned ah[2][4], al[2][4], bh[2][2], bl[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
          const int r = 16 * mi + gq;
          float x[4];
          if (TA == 0) {
            x[0] = a[r * GSA0 + k8 + tq], x[1] = a[(r + 8) * GSA0 + k8 + tq];
            x[2] = a[r * GSA0 + k8 + tq + 4], x[3] = a[(r + 8) * GSA0 + k8 + tq + 4];
          } else {
            x[0] = a[(k8 + tq) * GSA1 + r], x[1] = a[(k8 + tq) * GSA1 + r + 8];
            x[2] = a[(k8 + tq + 4) * GSA1 + r], x[3] = a[(k8 + tq + 4) * GSA1 + r + 8];
          }
#pragma unroll
          for (int q = 0; q < 4; q++) {
            if (TC == 3) tf32_split(x[q], ah[mi][q], al[mi][q]);
            else ah[mi][q] = f2tf32(x[q]);
          }
        }
#pragma unroll
        for (int ni = 0; ni < 2; ni++) {
          const int n = 16 * wq + 8 * ni + gq;
          const float y0 = TW == 0 ? w[(k8 + tq) * GSW + n] : w[n * GSA0 + k8 + tq];
          const float y1 = TW == 0 ? w[(k8 + tq + 4) * GSW + n] : w[n * GSA0 + k8 + tq + 4];
          if (TC == 3) tf32_split(y0, bh[ni][0], bl[ni][0]), tf32_split(y1, bh[ni][1], bl[ni][1]);
          else bh[ni][0] = f2tf32(y0), bh[ni][1] = f2tf32(y1);
        }
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
          for (int ni = 0; ni < 2; ni++) {
            float(&d)[4] = *reinterpret_cast<float(*)[4]>(&acc[8 * mi + 4 * ni]);
            if (TC == 3) {
              mma_tf32(d, al[mi], bh[ni][0], bh[ni][1]);
              mma_tf32(d, ah[mi], bl[ni][0], bl[ni][1]);
            }
            mma_tf32(d, ah[mi], bh[ni][0], bh[ni][1]);
          }
      }
    }
  }
  cp_async_wait<0>();
  if (g.splits > 1) {
    /* split-K: store this part; the tile's last part to arrive adds them all
     * in split order (its own read back too, so the order never varies). A
     * part is private to its tile: thread tid's 16 sums at 16 tid, in its own
     * element order (4 float4 stores and, per part, 4 float4 loads: what
     * were 16 scalar ones with their address arithmetic) */
    float *pp = part + ((size_t)g.poff + (size_t)tile * g.splits + split) * GPART;
#pragma unroll
    for (int e = 0; e < 16; e += 4)
      *reinterpret_cast<float4 *>(pp + 16 * tid + e) = make_float4(acc[e], acc[e + 1], acc[e + 2], acc[e + 3]);
    if (bias_sums) pp[GBM * GBN + tid] = bsum;
    /* the release: the block's stores ordered before thread 0's fence by the
     * barrier (fences are cumulative: CUTLASS's semaphore pattern), one
     * fence per block instead of one per thread (the membar stalls) */
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      const int old = atomicAdd(cnt + g.cnt0 + tile, 1);
      last = old == g.splits - 1;
      if (last) {
        cnt[g.cnt0 + tile] = 0; /* ready for the next launch */
        __threadfence();        /* the acquire, passed on by the barrier */
      }
    }
    __syncthreads();
    if (!last) return;
    const float *pt = part + ((size_t)g.poff + (size_t)tile * g.splits) * GPART;
#pragma unroll
    for (int e = 0; e < 16; e++) acc[e] = 0.0f;
    bsum = 0.0f;
    /* GPB parts' loads in flight before their adds (a loop over the parts
     * waited out one L2 round trip per part); the adds stay in split order.
     * FFMA: four (as float4, the loop not unrolled, within 128 registers;
     * four parts of scalar loads took 168-251 and halved the blocks per SM:
     * DEVICE_NOTES.md item 41); the mma variants one (more put them above 128) */
    constexpr int GPB = TC ? 1 : 4;
#pragma unroll 1
    for (int s0 = 0; s0 < g.splits; s0 += GPB) {
      float t[GPB][16], tb[GPB];
#pragma unroll
      for (int q = 0; q < GPB; q++) {
        const float *ps = pt + (size_t)(s0 + q) * GPART;
        const bool in = s0 + q < g.splits;
#pragma unroll
        for (int e = 0; e < 16; e += 4) {
          const float4 v = in ? __ldcg(reinterpret_cast<const float4 *>(ps + 16 * tid + e)) : make_float4(0, 0, 0, 0);
          t[q][e] = v.x, t[q][e + 1] = v.y, t[q][e + 2] = v.z, t[q][e + 3] = v.w;
        }
        tb[q] = bias_sums && in ? __ldcg(ps + GBM * GBN + tid) : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < GPB; q++) {
        if (s0 + q >= g.splits) break;
#pragma unroll
        for (int e = 0; e < 16; e++) acc[e] += t[q][e];
        bsum += tb[q];
      }
    }
  }
  if (TA == 0) {
    float *__restrict__ C = g.C;
#pragma unroll
    for (int e = 0; e < 16; e++) {
      int ml, nl;
      g_elem<TC, TW>(e, ml, nl);
      const int m = m0 + ml, n = n0 + nl;
      if (m >= g.M || n >= g.N) continue;
      float v = acc[e];
      if (TW == 1) v += pb[TC ? 2 * ((e >> 2) & 1) + (e & 1) : e & 3];
      if (g.act) v = v > 0.0f ? v : slope * v;
      if (TW == 0 && !(pm[e] > 0.0f)) v *= slope;
      C[(size_t)m * g.ldc + n] = v;
    }
  } else {
#pragma unroll
    for (int e = 0; e < 16; e++) {
      int ml, nl;
      g_elem<TC, TW>(e, ml, nl);
      const int o = m0 + ml, in = n0 + nl;
      if (o >= g.M || in >= g.N) continue;
      const size_t k = (size_t)o * g.N + in;
      grad[g.gw + k] = acc[e];
      if (g.gsw >= 0) grad[g.gsw + k] = acc[e] * (fn[g.fo + o] * fn[g.fi + in]);
    }
    if (bias_sums && m0 + tid < g.M) {
      grad[g.gb + m0 + tid] = bsum;
      if (g.gsb >= 0) grad[g.gsb + m0 + tid] = bsum * fn[g.fo + m0 + tid];
    }
  }
}

/* ---- Large-batch tiles: 64 x 128 outputs per block, 8 x 8 per thread
 * (FFMA, no split-K), for phases with at least two such tiles per SM. The
 * 4 x 4 patches above need two float4 shared loads per 16 FMAs, which keeps
 * the load pipe ~75% as busy as the FMA pipe; 8 x 8 needs half that per FMA
 * (DEVICE_NOTES.md item 27). A thread's rows are 8 apart (ty + 8 i) so the
 * two rows a warp reads at once fall in different banks. */
#define GBM2 64
#define GBN2 128
#define GNS2 3
#define GA2_FLOATS (GBM2 * GSA0) /* A [m][GSA0] */
#define GW2_FLOATS (GBN2 * GSA0 > GBK * (GBN2 + 8) ? GBN2 * GSA0 : GBK * (GBN2 + 8)) /* W [n][GSA0] or [k][GBN2 + 8] */
#define GSMEM2 (sizeof(float) * GNS2 * (GA2_FLOATS + GW2_FLOATS))

template <int TW>
__device__ __forceinline__ void g2_issue(float *__restrict__ sa, float *__restrict__ sw, const gprob_t &g, int m0,
                                         int n0, int k0, int kend) {
  if (g.al & 1) cp_rows_k<GBM2, true>(sa, GSA0, g.A, g.lda, m0, g.M, k0, kend);
  else cp_rows_k<GBM2, false>(sa, GSA0, g.A, g.lda, m0, g.M, k0, kend);
  if (TW == 1) { /* W [n][k] -> sw [n][GSA0] */
    if (g.al & 2) cp_rows_k<GBN2, true>(sw, GSA0, g.W, g.ldw, n0, g.N, k0, kend);
    else cp_rows_k<GBN2, false>(sw, GSA0, g.W, g.ldw, n0, g.N, k0, kend);
  } else { /* W [k][n] -> sw [k][GBN2 + 8] */
    if (g.al & 2) cp_k_cols<GBN2, true>(sw, GBN2 + 8, g.W, g.ldw, n0, g.N, k0, kend);
    else cp_k_cols<GBN2, false>(sw, GBN2 + 8, g.W, g.ldw, n0, g.N, k0, kend);
  }
}

/* output (i, j) of this thread in a 64 x 128 tile */
template <int TW>
__device__ __forceinline__ void g2_elem(int i, int j, int &ml, int &nl) {
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  ml = ty + 8 * i;
  nl = TW == 1 ? tx + 16 * j : 4 * tx + 64 * (j / 4) + j % 4;
}

/* A [m][k] times W ([n][k] for TW 1, the forward; [k][n] for TW 0, the
 * backward), FFMA, sums over k in order, then the layer epilogue. */
template <int TW>
__global__ void __launch_bounds__(GNT) fused_gemm_big_kernel(const gprob_t *__restrict__ probs,
                                                             const __grid_constant__ gidx_t ix, float slope) {
  extern __shared__ float4 gsh4[];
  float *sA = reinterpret_cast<float *>(gsh4), *sW = sA + GNS2 * GA2_FLOATS;
  const gprob_t g = probs[g_find(ix)];
  const int tile = (int)blockIdx.x - g.blk0;
  const int m0 = (tile / g.tn) * GBM2, n0 = (tile % g.tn) * GBN2;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
  const int nk = (g.K + GBK - 1) / GBK;
#pragma unroll
  for (int q = 0; q < GNS2 - 1; q++) {
    if (q < nk) g2_issue<TW>(sA + q * GA2_FLOATS, sW + q * GW2_FLOATS, g, m0, n0, q * GBK, g.K);
    cp_async_commit();
  }
  for (int c = 0; c < nk; c++) {
    cp_async_wait<GNS2 - 2>(); /* chunk c has landed (this thread's copies) */
    __syncthreads();           /* everyone's; and chunk c - 1's buffer is free */
    const int nx = c + GNS2 - 1;
    if (nx < nk) g2_issue<TW>(sA + (nx % GNS2) * GA2_FLOATS, sW + (nx % GNS2) * GW2_FLOATS, g, m0, n0, nx * GBK, g.K);
    cp_async_commit();
    const float *__restrict__ a = sA + (c % GNS2) * GA2_FLOATS;
    const float *__restrict__ w = sW + (c % GNS2) * GW2_FLOATS;
#pragma unroll 1
    for (int k = 0; k < GBK; k += 4) {
      float av[8][4], wv[8][4];
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const float4 v = *reinterpret_cast<const float4 *>(a + (ty + 8 * i) * GSA0 + k);
        av[i][0] = v.x, av[i][1] = v.y, av[i][2] = v.z, av[i][3] = v.w;
      }
      if (TW == 1) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const float4 v = *reinterpret_cast<const float4 *>(w + (tx + 16 * j) * GSA0 + k);
          wv[j][0] = v.x, wv[j][1] = v.y, wv[j][2] = v.z, wv[j][3] = v.w;
        }
      } else {
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
          for (int c2 = 0; c2 < 2; c2++) {
            const float4 v = *reinterpret_cast<const float4 *>(w + (k + u) * (GBN2 + 8) + 4 * tx + 64 * c2);
            wv[4 * c2 + 0][u] = v.x, wv[4 * c2 + 1][u] = v.y, wv[4 * c2 + 2][u] = v.z, wv[4 * c2 + 3][u] = v.w;
          }
      }
      /* k outermost: 64 independent FMAs between two on one accumulator */
#pragma unroll
      for (int u = 0; u < 4; u++)
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
          for (int j = 0; j < 8; j++) acc[i][j] += av[i][u] * wv[j][u];
    }
  }
  cp_async_wait<0>();
  const float *__restrict__ bias = g.bias;
  const float *__restrict__ mask = g.mask;
  float *__restrict__ C = g.C;
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) {
      int ml, nl;
      g2_elem<TW>(i, j, ml, nl);
      const int m = m0 + ml, n = n0 + nl;
      if (m >= g.M || n >= g.N) continue;
      float v = acc[i][j] + (bias ? bias[n] : 0.0f);
      if (g.act) v = v > 0.0f ? v : slope * v;
      if (mask && !(mask[(size_t)m * g.ldm + n] > 0.0f)) v *= slope;
      C[(size_t)m * g.ldc + n] = v;
    }
}

typedef struct tail_args {
  int rows, Z, O2, AW, D;
  int stage; /* 1: each warp first copies its branch's advantages to shared memory (nmax x Z floats) */
  int n[MAXB], aoff[MAXB];
  int nmax;
  const float *O;
  float *logp;
} tail_args_t;

#define TAIL_ZL (LEARNER_MAX_ATOMS / 32)

/* Dueling combine and log-softmax, one warp per (row, branch), from the
 * second head layers' outputs O [rows][O2] (V then every A_d) to logp
 * [rows][AW]: the same operations in the same order as dueling_tail. */
template <int ZL> /* atoms per lane: Z <= 32 ZL */
__global__ void fused_tail_kernel(tail_args_t a) {
  extern __shared__ float tsh[];
  const int wib = threadIdx.x / 32, w = (int)(blockIdx.x * (blockDim.x / 32)) + wib, lane = threadIdx.x % 32;
  const int r = w / a.D, d = w % a.D;
  if (r >= a.rows) return;
  const int Z = a.Z, nd = a.n[d];
  const float *__restrict__ V = a.O + (size_t)r * a.O2;
  const float *Ad = V + Z + a.aoff[d];
  /* every load at once into shared memory, then the arithmetic: reading the
   * advantages from L2 action by action put one round trip per action (two
   * passes) on each warp's path */
  if (a.stage) {
    float *sa = tsh + (size_t)wib * a.nmax * Z;
    warp_copy(sa, Ad, nd * Z);
    Ad = sa;
  }
  float vz[ZL];
#pragma unroll
  for (int zi = 0; zi < ZL; zi++) vz[zi] = lane + 32 * zi < Z ? V[lane + 32 * zi] : 0.0f;
  __syncwarp();
  float base[ZL];
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
  float *lp0 = a.logp + (size_t)r * a.AW + a.aoff[d];
  for (int q = 0; q < nd; q++) {
    const float *Aq = Ad + (size_t)q * Z;
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
      if (z < Z) lp0[(size_t)q * Z + z] = v[zi] - lse;
    }
  }
}

// launchers

static void fused_dims(const net_layout_t *L, int *HC, int *O2, int *KH, int *AW, int aoff[MAXB]) {
  *HC = L->VH + L->D * L->AH;
  *AW = L->a_width;
  *O2 = L->Z + L->a_width;
  *KH = L->VH > L->AH ? L->VH : L->AH;
  int o = 0;
  for (int d = 0; d < L->D; d++) aoff[d] = o, o += L->n[d] * L->Z;
}

static int nmax_of(const net_layout_t *L, int HC, int O2) {
  int n = L->H1 > L->H2 ? L->H1 : L->H2;
  n = HC > n ? HC : n;
  return O2 > n ? O2 : n;
}

/* weight rows per pipeline stage for a layer of N outputs and K inputs:
 * about STAGE_FLOATS floats; a multiple of 8 on the tensor cores (k steps of 8) */
static int stage_target(void) {
  const char *e = getenv("DQN_CUDA_STAGE_FLOATS"); /* kernels/dev experiments */
  int v = e ? atoi(e) : 0;
  return v >= 1024 && v <= 65536 ? v : STAGE_FLOATS;
}

static int kc_rule(int N, int K, int tc) {
  int tgt = stage_target();
  if (tc && tgt > 11264) tgt = 11264; /* two stages beside 16 rows of activations */
  int kc = tgt / N;
  if (tc) return kc / 8 * 8 > 8 ? kc / 8 * 8 : 8;
  kc = kc < K ? kc : K;
  return kc < 1 ? 1 : kc;
}

/* floats per stage: the largest kc x N over the seven layers the kernels run */
static int stage_floats(const net_layout_t *L, int HC, int O2, int KH, int tc) {
  int nk[7][2] = {{L->H1, L->S}, {L->H2, L->H1}, {HC, L->H2}, {O2, KH}, {HC, 0}, {L->H2, HC}, {L->H1, L->H2}};
  int kmax = 0;
  for (int d = 0; d < L->D; d++) kmax = L->n[d] * L->Z > kmax ? L->n[d] * L->Z : kmax;
  nk[4][1] = kmax > L->Z ? kmax : L->Z;
  int m = 0;
  for (int i = 0; i < 7; i++) {
    int v = kc_rule(nk[i][0], nk[i][1], tc) * nk[i][0];
    m = v > m ? v : m;
  }
  return (m + 3) / 4 * 4;
}

static int nstage(int tc) { return tc ? NSTAGE_TC : NSTAGE; }

/* activations (feature-major, R rows) then the weight stages */
static size_t smem_fwd(const net_layout_t *L, int R, int HC, int O2, int tc, int stage) {
  return sizeof(float) * ((size_t)R * (size_t)(L->S + L->H1 + L->H2 + HC + O2 + L->D * L->Z) +
                          (size_t)nstage(tc) * stage);
}

static int bwd_n1(const net_layout_t *L, int HC, int O2) {
  return (O2 > L->H2 ? O2 : L->H2) + (HC > L->H1 ? HC : L->H1) + HC + L->H2;
}

static size_t smem_bwd(const net_layout_t *L, int R, int HC, int O2, int tc, int stage) {
  return sizeof(float) * ((size_t)R * (size_t)bwd_n1(L, HC, O2) + (size_t)nstage(tc) * stage);
}

/* copy segments: one block of shared rows (every segment reads row k of the
 * same [K][N] matrix), or each segment its own contiguous [K_s][w_s] matrix */
static void copy_segs(segtab_t *t, int shared, int tc) {
  if (shared) {
    int K = 0;
    for (int s = 0; s < t->n; s++) K = t->s[s].K > K ? t->s[s].K : K;
    t->nc = 1;
    t->c[0].o0 = 0, t->c[0].w = t->N, t->c[0].K = K, t->c[0].woff = t->s[0].woff - t->s[0].o0;
  } else {
    t->nc = t->n;
    for (int s = 0; s < t->n; s++) {
      int o1 = s + 1 < t->n ? t->s[s + 1].o0 : t->N;
      t->c[s].o0 = t->s[s].o0, t->c[s].w = o1 - t->s[s].o0, t->c[s].K = t->s[s].K, t->c[s].woff = t->s[s].woff;
    }
  }
  int K = 0;
  for (int c = 0; c < t->nc; c++) K = t->c[c].K > K ? t->c[c].K : K;
  t->kc = kc_rule(t->N, K, tc);
  for (int c = 0; c < t->nc; c++)
    t->c[c].al16 = t->c[c].woff % 4 == 0 && t->c[c].w % 4 == 0 && (t->kc * t->c[c].o0) % 4 == 0;
}

/* biases first (same offsets in both packs), then the weights */
static void pack_layouts(const net_layout_t *L, cuda_fused_t *f) {
  long long b = 0;
  f->pw.bt1 = b, b += L->H1;
  f->pw.bt2 = b, b += L->H2;
  f->pw.bhc1 = b, b += f->HC;
  f->pw.bhc2 = b, b += f->O2;
  b = (b + 3) / 4 * 4;
  f->pt = f->pw;
  f->pw.t1 = b, f->pw.t2 = b + (long long)L->H1 * L->S, f->pw.hc1 = f->pw.t2 + (long long)L->H2 * L->H1,
  f->pw.hc2 = f->pw.hc1 + (long long)f->HC * L->H2;
  f->pw.total = (f->pw.hc2 + (long long)L->Z * L->VH + (long long)f->AW * L->AH + 3) / 4 * 4;
  f->pt.t1 = b, f->pt.t2 = b + (long long)L->S * L->H1, f->pt.hc1 = f->pt.t2 + (long long)L->H1 * L->H2,
  f->pt.hc2 = f->pt.hc1 + (long long)L->H2 * f->HC;
  f->pt.total = (f->pt.hc2 + (long long)f->KH * f->O2 + 3) / 4 * 4;
}

/* where each layer's elements go in the two packs */
static void pack_args(const net_layout_t *L, const cuda_fused_t *f, pack_args_t *a) {
  memset(a, 0, sizeof *a);
  int aoff[MAXB], HC, O2, KH, AW;
  fused_dims(L, &HC, &O2, &KH, &AW, aoff);
  long long begin = 0;
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    pack_layer_t *p = &a->l[li];
    p->src_w = l->off_w, p->src_b = l->off_b;
    p->src_sw = l->noisy ? l->off_sw : -1, p->src_sb = l->noisy ? l->off_sb : -1;
    p->fi = l->noisy ? l->noise_off : -1, p->fo = l->noisy ? l->noise_off + l->in : -1;
    p->in = l->in, p->out = l->out;
    p->begin = begin;
    begin += (long long)l->in * l->out + l->out;
    if (li == NET_TRUNK1) {
      p->w_dst = f->pw.t1, p->w_ld = L->S, p->t_dst = f->pt.t1, p->t_ld = L->H1, p->b_dst = f->pw.bt1;
    } else if (li == NET_TRUNK2) {
      p->w_dst = f->pw.t2, p->w_ld = L->H1, p->t_dst = f->pt.t2, p->t_ld = L->H2, p->b_dst = f->pw.bt2;
    } else if (li == NET_VALUE1) {
      p->w_dst = f->pw.hc1, p->w_ld = L->H2, p->t_dst = f->pt.hc1, p->t_ld = HC, p->b_dst = f->pw.bhc1;
    } else if (li == NET_VALUE2) {
      p->w_dst = f->pw.hc2, p->w_ld = L->VH, p->t_dst = f->pt.hc2, p->t_ld = O2, p->b_dst = f->pw.bhc2;
    } else {
      int d = (li - NET_BRANCH0) / 2, k = (li - NET_BRANCH0) % 2 + 1;
      if (k == 1) {
        long long row = L->VH + (long long)d * L->AH;
        p->w_dst = f->pw.hc1 + row * L->H2, p->w_ld = L->H2;
        p->t_dst = f->pt.hc1 + row, p->t_ld = HC, p->b_dst = f->pw.bhc1 + row;
      } else {
        p->w_dst = f->pw.hc2 + (long long)L->Z * L->VH + (long long)aoff[d] * L->AH, p->w_ld = L->AH;
        p->t_dst = f->pt.hc2 + L->Z + aoff[d], p->t_ld = O2, p->b_dst = f->pw.bhc2 + L->Z + aoff[d];
      }
    }
  }
  a->n_layers = L->n_layers;
  a->total = begin;
}

static segtab_t seg1(int N, int K, long long woff, int ldw, long long bias, int tc) {
  segtab_t t;
  memset(&t, 0, sizeof t);
  t.n = 1, t.N = N, t.bias = bias;
  t.s[0].o0 = 0, t.s[0].koff = 0, t.s[0].K = K, t.s[0].ldw = ldw, t.s[0].woff = woff;
  copy_segs(&t, 1, tc);
  return t;
}

/* where layer li's output gradient dY and input X live: buffer (0 ws->x,
 * 1 h1, 2 h, 3 hh, 4 g2, 5 g1, 6 gh, 7 gt1), row stride, first column */
static void layer_bufs(const net_layout_t *L, int li, int *ybuf, int *ldy, long long *dy, int *xbuf, int *ldx,
                       long long *x) {
  int aoff[MAXB], HC, O2, KH, AW;
  fused_dims(L, &HC, &O2, &KH, &AW, aoff);
  *dy = 0, *x = 0;
  if (li == NET_TRUNK1) *ybuf = 7, *ldy = L->H1, *xbuf = 0, *ldx = L->S;
  else if (li == NET_TRUNK2) *ybuf = 6, *ldy = L->H2, *xbuf = 1, *ldx = L->H1;
  else if (li == NET_VALUE1) *ybuf = 5, *ldy = HC, *xbuf = 2, *ldx = L->H2;
  else if (li == NET_VALUE2) *ybuf = 4, *ldy = O2, *xbuf = 3, *ldx = HC;
  else {
    int d = (li - NET_BRANCH0) / 2, k = (li - NET_BRANCH0) % 2 + 1;
    if (k == 1) *ybuf = 5, *ldy = HC, *dy = L->VH + (long long)d * L->AH, *xbuf = 2, *ldx = L->H2;
    else *ybuf = 4, *ldy = O2, *dy = L->Z + aoff[d], *xbuf = 3, *ldx = HC, *x = L->VH + (long long)d * L->AH;
  }
}

/* Weight-gradient tiles: per layer, its dY and X buffers (offsets name a
 * column of a shared row) and 32 x 32 tiles over [out, in]. */
static int build_tiles(const net_layout_t *L, wtile_t **out) {
  int aoff[MAXB], HC, O2, KH, AW;
  fused_dims(L, &HC, &O2, &KH, &AW, aoff);
  int cap = 0;
  for (int li = 0; li < L->n_layers; li++)
    cap += ((L->layer[li].out + 31) / 32) * ((L->layer[li].in + 31) / 32);
  wtile_t *t = (wtile_t *)calloc((size_t)cap, sizeof *t);
  if (!t) return -1;
  int n = 0;
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    int ybuf, xbuf, ldy, ldx;
    long long dy, x;
    layer_bufs(L, li, &ybuf, &ldy, &dy, &xbuf, &ldx, &x);
    for (int o0 = 0; o0 < l->out; o0 += 32)
      for (int i0 = 0; i0 < l->in; i0 += 32) {
        wtile_t *w = &t[n++];
        w->ybuf = ybuf, w->xbuf = xbuf, w->ldy = ldy, w->ldx = ldx, w->dy = dy, w->x = x;
        w->o0 = o0, w->no = l->out - o0 < 32 ? l->out - o0 : 32;
        w->i0 = i0, w->ni = l->in - i0 < 32 ? l->in - i0 : 32;
        w->in = l->in;
        w->gw = l->off_w;
        w->gb = i0 == 0 ? l->off_b : -1;
        w->gsw = l->noisy ? l->off_sw : -1;
        w->gsb = (l->noisy && i0 == 0) ? l->off_sb : -1;
        w->fi = l->noisy ? l->noise_off : -1;
        w->fo = l->noisy ? l->noise_off + l->in : -1;
      }
  }
  *out = t;
  return n;
}

template <int R, int TC>
static cudaError_t set_smem(size_t fwd, size_t bwd) {
  cudaError_t e =
      cudaFuncSetAttribute(fused_forward_kernel<R, TC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fused_backward_kernel<R, TC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd);
  return e;
}

/* The seven layers the kernels run, as segment tables: forward l1, l2, c1,
 * c2 (reading the W^T pack), backward c2, c1, t2 (reading the W pack). They
 * depend only on the shapes and packs, so they are built once and kept in
 * device memory (kernel parameters would be copied to the stack by the
 * out-of-line tensor-core layer). */
static void build_tabs(const net_layout_t *L, const cuda_fused_t *f, segtab_t *tb) {
  int aoff[MAXB], HC, O2, KH, AW;
  fused_dims(L, &HC, &O2, &KH, &AW, aoff);
  const int tc = f->tc;
  memset(tb, 0, 7 * sizeof *tb);
  tb[0] = seg1(L->H1, L->S, f->pt.t1, L->H1, f->pt.bt1, tc);
  tb[1] = seg1(L->H2, L->H1, f->pt.t2, L->H2, f->pt.bt2, tc);
  tb[2] = seg1(HC, L->H2, f->pt.hc1, HC, f->pt.bhc1, tc);
  segtab_t *c2 = &tb[3];
  c2->n = 1 + L->D, c2->N = O2, c2->bias = f->pt.bhc2;
  c2->s[0].o0 = 0, c2->s[0].koff = 0, c2->s[0].K = L->VH, c2->s[0].ldw = O2, c2->s[0].woff = f->pt.hc2;
  for (int d = 0; d < L->D; d++) {
    seg_t *s = &c2->s[1 + d];
    s->o0 = L->Z + aoff[d], s->koff = L->VH + d * L->AH, s->K = L->AH, s->ldw = O2;
    s->woff = f->pt.hc2 + L->Z + aoff[d];
  }
  copy_segs(c2, 1, tc); /* rows of hc2T hold every output's weights */
  segtab_t *b2 = &tb[4];
  b2->n = 1 + L->D, b2->N = HC, b2->bias = -1;
  b2->s[0].o0 = 0, b2->s[0].koff = 0, b2->s[0].K = L->Z, b2->s[0].ldw = L->VH, b2->s[0].woff = f->pw.hc2;
  for (int d = 0; d < L->D; d++) {
    seg_t *s = &b2->s[1 + d];
    s->o0 = L->VH + d * L->AH, s->koff = L->Z + aoff[d], s->K = L->n[d] * L->Z, s->ldw = L->AH;
    s->woff = f->pw.hc2 + (long long)L->Z * L->VH + (long long)aoff[d] * L->AH;
  }
  copy_segs(b2, 0, tc); /* value2 [Z][VH], branch2_d [n_d Z][AH]: each its own matrix */
  tb[5] = seg1(L->H2, HC, f->pw.hc1, L->H2, -1, tc);
  tb[6] = seg1(L->H1, L->H2, f->pw.t2, L->H1, -1, tc);
}

/* the matrix products of one segment table (every segment one problem),
 * appended to pr */
static void add_probs(gprob_t *pr, int *np, const segtab_t *t, const float *pack, const float *A, int lda, int M,
                      float *C, int ldc, const float *mask, int ldm, int act) {
  for (int s = 0; s < t->n; s++) {
    gprob_t *g = &pr[(*np)++];
    memset(g, 0, sizeof *g);
    const int o0 = t->s[s].o0, o1 = s + 1 < t->n ? t->s[s + 1].o0 : t->N;
    g->A = A + t->s[s].koff, g->lda = lda;
    g->W = pack + t->s[s].woff, g->ldw = t->s[s].ldw;
    g->bias = t->bias >= 0 ? pack + t->bias + o0 : NULL;
    g->C = C + o0, g->ldc = ldc;
    g->mask = mask ? mask + o0 : NULL, g->ldm = ldm;
    g->M = M, g->N = o1 - o0, g->K = t->s[s].K, g->act = act;
    g->gw = g->gb = g->gsw = g->gsb = g->fi = g->fo = -1;
  }
}

static int al16(const float *p, int ld) { return (uintptr_t)p % 16 == 0 && ld % 4 == 0; }

/* Blocks of one launch: tiles, alignment, and split-K parts for problems
 * [p0, p1): about two blocks per SM at least, and at most 512 k per part. */
static void plan_phase(gprob_t *pr, int p0, int p1, int nsm, int big, int *blocks, int *ntiles,
                       size_t *part_floats) {
  int tiles = 0;
  const int bm = big ? GBM2 : GBM, bn = big ? GBN2 : GBN;
  for (int i = p0; i < p1; i++) {
    gprob_t *g = &pr[i];
    g->tn = (g->N + bn - 1) / bn;
    g->tiles = (g->M + bm - 1) / bm * g->tn;
    g->al = al16(g->A, g->lda) | al16(g->W, g->ldw) << 1;
    tiles += g->tiles;
  }
  if (big) { /* large tiles run only where there are plenty: no split-K */
    int blk = 0;
    for (int i = p0; i < p1; i++) {
      gprob_t *g = &pr[i];
      g->kper = g->K, g->splits = 1, g->blk0 = blk, g->cnt0 = 0, g->poff = 0;
      blk += g->tiles;
    }
    *blocks = blk, *ntiles = 0, *part_floats = 0;
    return;
  }
  /* split-K target: about `occ` blocks per SM over the phase, each part
   * `minch` k chunks at least (DQN_CUDA_GEMM_OCC / DQN_CUDA_GEMM_MINCH:
   * kernels/dev sweeps; defaults measured in DEVICE_NOTES.md item 40) */
  const char *oe = getenv("DQN_CUDA_GEMM_OCC"), *ce = getenv("DQN_CUDA_GEMM_MINCH");
  const int occ = oe && atoi(oe) > 0 ? atoi(oe) : 2, minch = ce && atoi(ce) > 0 ? atoi(ce) : 2;
  const int want = (occ * nsm + tiles - 1) / tiles;
  int blk = 0, cnt = 0;
  size_t pf = 0;
  for (int i = p0; i < p1; i++) {
    gprob_t *g = &pr[i];
    int sp = want;
    const int kmax = g->K / (minch * GBK); /* minch chunks per part at least */
    if (sp > kmax) sp = kmax;
    if (g->K > 512 * sp) sp = (g->K + 511) / 512;
    if (sp < 1) sp = 1;
    g->kper = ((g->K + sp - 1) / sp + GBK - 1) / GBK * GBK;
    g->splits = (g->K + g->kper - 1) / g->kper;
    if (g->splits < 1) g->splits = 1;
    g->blk0 = blk, blk += g->tiles * g->splits;
    g->cnt0 = cnt, cnt += g->tiles;
    g->poff = (long long)(pf / GPART);
    if (g->splits > 1) pf += (size_t)g->tiles * g->splits * GPART;
  }
  *blocks = blk, *ntiles = cnt, *part_floats = pf;
}

template <int TC>
static cudaError_t gemm_smem(void) {
  cudaError_t e = cudaFuncSetAttribute(fused_gemm_kernel<0, 1, TC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GSMEM);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fused_gemm_kernel<0, 0, TC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GSMEM);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fused_gemm_kernel<1, 0, TC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GSMEM);
  return e;
}

/* the eight phases' problems (forward F1..F4 over online s and s' and target
 * s', backward B1..B3 over online s, then every weight gradient) into device
 * memory, with the split-K scratch */
static int build_probs(const net_layout_t *L, cuda_fused_t *f, const segtab_t *tb, int B, const float *x) {
  gprob_t pr[64 + NET_MAX_LAYERS];
  int np = 0;
  const size_t b = (size_t)B;
  const int HC = f->HC, O2 = f->O2, H1 = L->H1, H2 = L->H2;
  int dev = 0, nsm = 132;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return (int)cudaGetLastError();
  size_t part = 0;
  int cnt = 0;
  const char *bigenv = getenv("DQN_CUDA_GEMM_BIG");
  /* the forward reads the W packs ([out][in] rows, k contiguous): the
   * forward tables with the W pack's offsets and strides (the backward's) */
  segtab_t fw[4] = {tb[0], tb[1], tb[2], tb[3]};
  fw[0].s[0].woff = f->pw.t1, fw[0].s[0].ldw = L->S;
  fw[1].s[0].woff = f->pw.t2, fw[1].s[0].ldw = H1;
  fw[2].s[0].woff = f->pw.hc1, fw[2].s[0].ldw = H2;
  for (int q = 0; q < fw[3].n; q++) fw[3].s[q].woff = tb[4].s[q].woff, fw[3].s[q].ldw = tb[4].s[q].ldw;
  size_t part_side = 0, part_t1 = 0;
  int cnt_side = 0, cnt_t1 = 0;
  for (int ph = 0; ph < GEMM_PHASES; ph++) {
    const int p0 = np;
    for (int net = 0; ph < 4 && net < 2; net++) {
      const float *pk = net ? f->w_tg : f->w_on;
      const size_t r0 = net ? 2 * b : 0; /* first activation row of this pass */
      const int M = net ? B : 2 * B;
      if (ph == 0) add_probs(pr, &np, &fw[0], pk, x + (net ? b * L->S : 0), L->S, M, f->h1 + r0 * H1, H1, NULL, 0, 1);
      if (ph == 1) add_probs(pr, &np, &fw[1], pk, f->h1 + r0 * H1, H1, M, f->h + r0 * H2, H2, NULL, 0, 1);
      if (ph == 2) add_probs(pr, &np, &fw[2], pk, f->h + r0 * H2, H2, M, f->hh + r0 * HC, HC, NULL, 0, 1);
      if (ph == 3) add_probs(pr, &np, &fw[3], pk, f->hh + r0 * HC, HC, M, f->O + r0 * O2, O2, NULL, 0, 0);
    }
    if (ph == 4) add_probs(pr, &np, &tb[4], f->w_on, f->g2, O2, B, f->g1, HC, f->hh, HC, 0);
    if (ph == 5) add_probs(pr, &np, &tb[5], f->w_on, f->g1, HC, B, f->gh, H2, f->h, H2, 0);
    if (ph == 6) add_probs(pr, &np, &tb[6], f->w_on, f->gh, H2, B, f->gt1, H1, f->h1, H1, 0);
    if (ph >= 7) { /* the layers whose output gradient is g2, g1, gh, gt1 (ybuf 4..7) */
      const float *bufs[8] = {x, f->h1, f->h, f->hh, f->g2, f->g1, f->gh, f->gt1};
      for (int li = 0; li < L->n_layers; li++) {
        const net_layer_t *l = &L->layer[li];
        int ybuf, xbuf, ldy, ldx;
        long long dy, xo;
        layer_bufs(L, li, &ybuf, &ldy, &dy, &xbuf, &ldx, &xo);
        if (ybuf != ph - 3) continue;
        gprob_t *g = &pr[np++];
        memset(g, 0, sizeof *g);
        g->A = bufs[ybuf] + dy, g->lda = ldy, g->W = bufs[xbuf] + xo, g->ldw = ldx;
        g->M = l->out, g->N = l->in, g->K = B;
        g->gw = l->off_w, g->gb = l->off_b;
        g->gsw = l->noisy ? l->off_sw : -1, g->gsb = l->noisy ? l->off_sb : -1;
        g->fi = l->noisy ? l->noise_off : -1, g->fo = l->noisy ? l->noise_off + l->in : -1;
      }
    }
    int blocks, tiles;
    size_t pf;
    /* large tiles (fp32 FFMA forward and backward phases) when they give
     * every SM two blocks at least; DQN_CUDA_GEMM_BIG=0 never, =1 always
     * (the tests: their batches are too small to choose them) */
    int big = 0;
    if (np - p0 > GEMM_MAXP) return (int)cudaErrorInvalidValue; /* cannot happen within LEARNER_MAX_BRANCHES */
    for (int i = p0; i < np; i++) /* the layer-GEMM kernel's epilogue: a bias only forward, a mask only backward */
      if ((ph < 4 && pr[i].mask) || (ph >= 4 && ph < 7 && pr[i].bias)) return (int)cudaErrorInvalidValue;
    if (f->gtc == 0 && ph < 7 && !(bigenv && bigenv[0] == '0')) {
      int bt = 0;
      for (int i = p0; i < np; i++) bt += (pr[i].M + GBM2 - 1) / GBM2 * ((pr[i].N + GBN2 - 1) / GBN2);
      big = bt >= 2 * nsm || (bigenv && bigenv[0] == '1');
    }
    f->ph_big[ph] = big;
    plan_phase(pr, p0, np, nsm, big, &blocks, &tiles, &pf);
    f->ph[ph][0] = p0, f->ph[ph][1] = np - p0, f->ph_blocks[ph] = blocks;
    for (int i = p0; i < np; i++) f->ph_blk0[ph][i - p0] = pr[i].blk0;
    /* split-K scratch: the main stream's phases (0..6) run one after
     * another and share one region; the weight-gradient groups 7..9 (one
     * after another on the side stream) run beside them: a second region;
     * group 10 (trunk-1) runs on either stream (after B3 on the main one
     * with a norm_hook), so beside group 9 possibly: a third */
    if (ph < 7) {
      part = pf > part ? pf : part;
      cnt = tiles > cnt ? tiles : cnt;
    } else if (ph < 10) {
      part_side = pf > part_side ? pf : part_side;
      cnt_side = tiles > cnt_side ? tiles : cnt_side;
    } else {
      part_t1 = pf, cnt_t1 = tiles;
    }
  }
  for (int ph = 7; ph < GEMM_PHASES; ph++)
    for (int i = f->ph[ph][0]; i < f->ph[ph][0] + f->ph[ph][1]; i++) {
      pr[i].poff += (long long)(part / GPART), pr[i].cnt0 += cnt;
      if (ph == 10) pr[i].poff += (long long)(part_side / GPART), pr[i].cnt0 += cnt_side;
    }
  part += part_side + part_t1, cnt += cnt_side + cnt_t1;
  cudaError_t e = cudaMalloc(&f->probs, sizeof(gprob_t) * (size_t)np);
  if (e == cudaSuccess) e = cudaMemcpy(f->probs, pr, sizeof(gprob_t) * (size_t)np, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && part) e = cudaMalloc(&f->gpart, sizeof(float) * part);
  if (e == cudaSuccess) e = cudaMalloc(&f->gcnt, sizeof(int) * (size_t)cnt);
  if (e == cudaSuccess) e = cudaMemset(f->gcnt, 0, sizeof(int) * (size_t)cnt);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fused_gemm_big_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GSMEM2);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fused_gemm_big_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GSMEM2);
  if (e == cudaSuccess) e = gemm_smem<0>();
  if (e == cudaSuccess) e = gemm_smem<1>();
  if (e == cudaSuccess) e = gemm_smem<3>();
  return (int)e;
}

extern "C" int cuda_fused_alloc(cuda_fused_t *f, const net_layout_t *L, int B, int mode, const float *x) {
  memset(f, 0, sizeof *f);
  int aoff[MAXB];
  fused_dims(L, &f->HC, &f->O2, &f->KH, &f->AW, aoff);
  int dev = 0, maxsh = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&maxsh, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return (int)cudaGetLastError();
  /* every layer's outputs fit NOUT per thread; the loss kernel's staging fits */
  const int rows_fit = nmax_of(L, f->HC, f->O2) <= NOUT * NT; /* row-tile kernels: every layer's outputs */
  int nmax = 0;
  for (int d = 0; d < L->D; d++) nmax = L->n[d] > nmax ? L->n[d] : nmax;
  if (sizeof(float) * ((size_t)L->D * L->Z + (size_t)L->D * loss_warp_floats(nmax, L->Z)) > 48 * 1024)
    return 0;
  /* arithmetic (mode): 1 TF32 on the tensor cores (the tensor_cores config);
   * 0 fp32: FFMA, the fastest fp32 path measured (kernels/dev/DEVICE_NOTES.md),
   * or 3xTF32 on the tensor cores (3, fp32 accuracy) when asked for by mode
   * or DQN_CUDA_FUSED_MODE=tf32x3. The tensor-core path runs 16 rows per block. */
  const char *mv = getenv("DQN_CUDA_FUSED_MODE");
  const int tensor_cores = mode == 1 || mode == 5;
  f->tc = mode == 1 || mode == 5 ? 1 : mode == 3 || (mv && !strcmp(mv, "tf32x3")) ? 3 : 0;
  /* layer-GEMM phases: the fp32 default (mode 0); DQN_CUDA_FUSED_GEMM=0 or
   * mode 2 select the row-tile kernels (kernels/dev/DEVICE_NOTES.md item 23) */
  const char *gv = getenv("DQN_CUDA_FUSED_GEMM"), *ga = getenv("DQN_CUDA_GEMM_ARITH");
  f->gemm = (mode == 0 || mode == 1 || mode == 6 || mode == 7) && !(gv && gv[0] == '0') && L->Z <= LEARNER_MAX_ATOMS;
  if (f->gemm) {
    /* arithmetic of the layer-GEMM phases: TF32 for the tensor_cores config;
     * fp32 as FFMA (6) or 3xTF32 (7), mode 0 taking GEMM_FP32_DEFAULT unless
     * DQN_CUDA_GEMM_ARITH=ffma|tf32x3 says otherwise */
    f->gtc = mode == 1 ? 1 : mode == 6 ? 0 : mode == 7 ? 3 : GEMM_FP32_DEFAULT;
    if (mode == 0 && ga) f->gtc = !strcmp(ga, "tf32x3") ? 3 : !strcmp(ga, "ffma") ? 0 : f->gtc;
    if (mode == 1) f->tc = 1; /* what the learner checks for tensor_cores */
  } else if (!rows_fit) {
    return 0; /* generic kernels */
  }
  const char *dbg = getenv("DQN_CUDA_FUSED_DEBUG"); /* kernels/dev experiments only */
  f->dbg = dbg ? atoi(dbg) : 0;
  if (f->gemm) f->R = 16; /* unused by the layer-GEMM phases */
  cudaError_t e;
  /* the row-tile and cluster kernels' rows per block and shared memory */
  if (!f->gemm) {
    if (f->tc) {
      f->R = 16;
      f->stage = stage_floats(L, f->HC, f->O2, f->KH, f->tc);
      f->smem_fwd = smem_fwd(L, 16, f->HC, f->O2, f->tc, f->stage);
      f->smem_bwd = smem_bwd(L, 16, f->HC, f->O2, f->tc, f->stage);
      if ((f->smem_fwd > f->smem_bwd ? f->smem_fwd : f->smem_bwd) > (size_t)maxsh) {
        if (tensor_cores) return 0; /* generic kernels, which refuse tensor_cores: the learner reports it */
        f->tc = 0;
      }
    }
    if (!f->tc) {
      /* rows per block: every block streams all weights once, so more rows per
       * block means fewer bytes from L2 per row; fewer rows means more blocks
       * for small batches. 4 up to batch 128, 8 up to 1024, 16 above
       * (DQN_CUDA_FUSED_R overrides; kernels/dev/DEVICE_NOTES.md) */
      const char *ev = getenv("DQN_CUDA_FUSED_R");
      int re = ev ? atoi(ev) : 0;
      f->R = (re == 4 || re == 8 || re == 16) ? re : B <= 128 ? 4 : B <= 1024 ? 8 : 16;
      f->stage = stage_floats(L, f->HC, f->O2, f->KH, 0);
      for (;;) {
        f->smem_fwd = smem_fwd(L, f->R, f->HC, f->O2, 0, f->stage);
        f->smem_bwd = smem_bwd(L, f->R, f->HC, f->O2, 0, f->stage);
        size_t need = f->smem_fwd > f->smem_bwd ? f->smem_fwd : f->smem_bwd;
        if (need <= (size_t)maxsh) break;
        if (f->R == 4) return 0; /* does not fit: generic kernels */
        f->R /= 2;
      }
    }
    e = f->tc == 1   ? set_smem<16, 1>(f->smem_fwd, f->smem_bwd)
        : f->tc == 3 ? set_smem<16, 3>(f->smem_fwd, f->smem_bwd)
        : f->R == 4  ? set_smem<4, 0>(f->smem_fwd, f->smem_bwd)
        : f->R == 8  ? set_smem<8, 0>(f->smem_fwd, f->smem_bwd)
                     : set_smem<16, 0>(f->smem_fwd, f->smem_bwd);
    if (e != cudaSuccess) return (int)e;
    /* clusters (FFMA only; mode 4 or DQN_CUDA_FUSED_CLUSTER=1): a measured
     * experiment, slower than the single-block kernels above batch 64
     * (kernels/dev/README.md), kept selectable and tested */
    const char *cv = getenv("DQN_CUDA_FUSED_CLUSTER");
    if (f->tc == 0 && (mode == 4 || (cv && cv[0] == '1'))) {
      int nA = L->S > L->H2 ? L->S : L->H2, nB = L->H1 > f->HC ? L->H1 : f->HC;
      nA = f->O2 > nA ? f->O2 : nA;
      size_t sf = sizeof(float) * ((size_t)CL_R * (nA + nB + L->D * L->Z) + 2 * (size_t)CL_STAGE);
      int nA2 = f->O2 > L->H2 ? f->O2 : L->H2;
      size_t sb = sizeof(float) * ((size_t)CL_R * (nA2 + f->HC) + 2 * (size_t)CL_STAGE);
      if (sf <= (size_t)maxsh && sb <= (size_t)maxsh &&
          cudaFuncSetAttribute(fused_forward_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sf) ==
              cudaSuccess &&
          cudaFuncSetAttribute(fused_backward_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sb) ==
              cudaSuccess) {
        f->cluster = 1, f->smem_cfwd = sf, f->smem_cbwd = sb, f->cl_nA = nA, f->cl_nB = nB, f->cl_nA2 = nA2;
      }
      (void)cudaGetLastError();
    }
  }
  pack_layouts(L, f);
  size_t b = (size_t)B, ab = f->gemm ? 3 * b : b; /* activation rows kept */
  /* the transposed packs only feed the row-tile kernels: the layer-GEMM
   * phases read the W packs as they are */
  const size_t tpack = f->gemm ? 0 : (size_t)f->pt.total;
  size_t need = (size_t)f->pw.total + 2 * tpack + 3 * b * f->AW +
                ab * ((size_t)L->H1 + L->H2 + f->HC) + b * ((size_t)f->O2 + f->HC + L->H2 + L->H1) +
                (f->gemm ? 3 * b * f->O2 + (size_t)f->pw.total : 0);
  if ((e = cudaMalloc(&f->mem, need * sizeof(float))) != cudaSuccess) return (int)e;
  float *p = f->mem;
  f->w_on = p, p += f->pw.total;
  f->t_on = tpack ? p : NULL, p += tpack;
  f->t_tg = tpack ? p : NULL, p += tpack;
  f->logp = p, p += 3 * b * f->AW;
  f->h1 = p, p += ab * L->H1;
  f->h = p, p += ab * L->H2;
  f->hh = p, p += ab * f->HC;
  if (f->gemm) f->O = p, p += 3 * b * f->O2, f->w_tg = p, p += f->pw.total;
  f->g2 = p, p += b * f->O2;
  f->g1 = p, p += b * f->HC;
  f->gh = p, p += b * L->H2;
  f->gt1 = p;
  wtile_t *t = NULL;
  int n = build_tiles(L, &t);
  if (n < 0) return (int)cudaErrorMemoryAllocation;
  if ((e = cudaMalloc(&f->tiles, sizeof(wtile_t) * (size_t)n)) == cudaSuccess)
    e = cudaMemcpy(f->tiles, t, sizeof(wtile_t) * (size_t)n, cudaMemcpyHostToDevice);
  free(t);
  if (e != cudaSuccess) return (int)e;
  f->n_tiles = n;
  segtab_t tb[7];
  build_tabs(L, f, tb);
  if (f->cluster) { /* weight rows per stage: CL_STAGE floats over the widest chunk of each layer */
    int kcs[7];
    for (int i = 0; i < 7; i++) {
      int wmax = 1;
      for (int q = 0; q < CL; q++) {
        int lo, W;
        cl_chunk(tb[i].N, q, &lo, &W);
        wmax = W > wmax ? W : wmax;
      }
      kcs[i] = CL_STAGE / wmax > 0 ? CL_STAGE / wmax : 1;
      if (wmax * CL_R / 4 > CL_NI * CL_NT) f->cluster = 0; /* more items than threads can hold */
    }
    f->cl_kcf = make_int4(kcs[0], kcs[1], kcs[2], kcs[3]);
    f->cl_kcb = make_int4(kcs[4], kcs[5], kcs[6], 0);
  }
  if ((e = cudaMalloc(&f->tabs, sizeof tb)) != cudaSuccess ||
      (e = cudaMemcpy(f->tabs, tb, sizeof tb, cudaMemcpyHostToDevice)) != cudaSuccess)
    return (int)e;
  int rc;
  if (f->gemm && (rc = build_probs(L, f, tb, B, x)) != 0) return rc;
  if (f->gemm) {
    if ((e = cudaStreamCreateWithFlags(&f->side, cudaStreamNonBlocking)) != cudaSuccess) return (int)e;
    for (int i = 0; i < 7; i++)
      if ((e = cudaEventCreateWithFlags(&f->ev[i], cudaEventDisableTiming)) != cudaSuccess) return (int)e;
  }
  /* batch splits for the weight gradients: enough blocks to fill the GPU at
   * large batches (a tile alone is 2 warps); 256 rows per split at least */
  f->wg_splits = B >= 512 ? (B / 256 < 16 ? B / 256 : 16) : 1;
  if (f->wg_splits > 1 &&
      (e = cudaMalloc(&f->wg_part, sizeof(float) * (size_t)f->wg_splits * n * WG_PART)) != cudaSuccess)
    return (int)e;
  f->ok = 1;
  return 0;
}

extern "C" void cuda_fused_free(cuda_fused_t *f) {
  cudaFree(f->mem);
  cudaFree(f->tiles);
  cudaFree(f->wg_part);
  cudaFree(f->tabs);
  cudaFree(f->probs);
  cudaFree(f->gpart);
  cudaFree(f->gcnt);
  for (int i = 0; i < 7; i++)
    if (f->ev[i]) cudaEventDestroy(f->ev[i]);
  if (f->side) cudaStreamDestroy(f->side);
  memset(f, 0, sizeof *f);
}

/* a kernel launched as clusters of CL CTAs (the graph captures it like any launch) */
template <typename... Args>
static cudaError_t launch_clusters(void (*kernel)(Args...), unsigned nclusters, size_t smem, cudaStream_t st,
                                   Args... args) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = CL, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(nclusters * CL), cfg.blockDim = dim3(CL_NT), cfg.dynamicSmemBytes = smem, cfg.stream = st;
  cfg.attrs = at, cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* one layer-GEMM phase (0..3 forward, 4..6 backward, 7..10 weight gradients) */
static int gemm_phase(const cuda_fused_t *f, int ph, float slope, float *grad, const float *fn, cudaStream_t st) {
  const gprob_t *probs = (const gprob_t *)f->probs + f->ph[ph][0];
  const unsigned nb = (unsigned)f->ph_blocks[ph];
  gidx_t ix;
  ix.np = f->ph[ph][1];
  if (ix.np == 0) return 0;
  memcpy(ix.blk0, f->ph_blk0[ph], sizeof ix.blk0);
#define GEMM_LAUNCH(TA, TW, TC) \
  fused_gemm_kernel<TA, TW, TC><<<nb, GNT, GSMEM, st>>>(probs, ix, slope, grad, fn, f->gpart, f->gcnt)
  if (f->ph_big[ph]) {
    if (ph < 4) fused_gemm_big_kernel<1><<<nb, GNT, GSMEM2, st>>>(probs, ix, slope);
    else fused_gemm_big_kernel<0><<<nb, GNT, GSMEM2, st>>>(probs, ix, slope);
  } else if (ph < 4) { /* forward: W pack rows [out][in] */
    if (f->gtc == 3) GEMM_LAUNCH(0, 1, 3);
    else if (f->gtc == 1) GEMM_LAUNCH(0, 1, 1);
    else GEMM_LAUNCH(0, 1, 0);
  } else if (ph < 7) { /* backward: W pack as [k = out][n = in] */
    if (f->gtc == 3) GEMM_LAUNCH(0, 0, 3);
    else if (f->gtc == 1) GEMM_LAUNCH(0, 0, 1);
    else GEMM_LAUNCH(0, 0, 0);
  } else { /* weight gradients: A = dY^T */
    if (f->gtc == 3) GEMM_LAUNCH(1, 0, 3);
    else if (f->gtc == 1) GEMM_LAUNCH(1, 0, 1);
    else GEMM_LAUNCH(1, 0, 0);
  }
#undef GEMM_LAUNCH
  return (int)cudaGetLastError();
}

extern "C" int cuda_fused_pack(const net_layout_t *L, const float *online, const float *target, int noisy,
                               cuda_dqn_ws_t *ws, cudaStream_t st) {
  cuda_fused_t *f = &ws->fused;
  pack_args_t pa; /* noise composed when noisy; fn pointers unused otherwise */
  pack_args(L, f, &pa);
  if (!noisy)
    for (int li = 0; li < pa.n_layers; li++) pa.l[li].src_sw = pa.l[li].src_sb = -1;
  dim3 pg((unsigned)((pa.total + 255) / 256 < 1024 ? (pa.total + 255) / 256 : 1024), 2);
  if (f->gemm)
    fused_pack_kernel<<<pg, 256, 0, st>>>(pa, online, ws->fn_on, f->w_on, NULL, target, ws->fn_tg, f->w_tg, NULL);
  else
    fused_pack_kernel<<<pg, 256, 0, st>>>(pa, online, ws->fn_on, f->w_on, f->t_on, target, ws->fn_tg, NULL, f->t_tg);
  return (int)cudaGetLastError();
}

extern "C" int cuda_fused_loss_grad(const net_layout_t *L, const cuda_dqn_hp_t *hp, const float *online,
                                    const float *target, int noisy, cuda_dqn_ws_t *ws, float *grad,
                                    cudaStream_t st) {
  cuda_fused_t *f = &ws->fused;
  const int B = ws->B, R = f->R;
  int aoff[MAXB], HC, O2, KH, AW;
  fused_dims(L, &HC, &O2, &KH, &AW, aoff);
  /* 1. packs, unless the caller enqueued them ahead */
  if (!f->prepacked) CUDA_RET(cuda_fused_pack(L, online, target, noisy, ws, st));
  /* 2. forward, three passes */
  fwd_args_t fa;
  memset(&fa, 0, sizeof fa);
  fa.B = B, fa.S = L->S, fa.H1 = L->H1, fa.H2 = L->H2, fa.HC = HC, fa.O2 = O2, fa.Z = L->Z, fa.AW = AW, fa.D = L->D;
  for (int d = 0; d < L->D; d++) fa.n[d] = L->n[d], fa.aoff[d] = aoff[d];
  fa.slope = hp->slope;
  fa.x = ws->x, fa.t_on = f->t_on, fa.t_tg = f->t_tg;
  fa.logp = f->logp, fa.h1 = f->h1, fa.h = f->h, fa.hh = f->hh;
  const int tc = f->tc;
  fa.tabs = (const segtab_t *)f->tabs;
  fa.stage = f->stage;
  fa.dbg = f->dbg;
  fa.nblk_on = (2 * B + R - 1) / R;
  unsigned nblk = (unsigned)(fa.nblk_on + (B + R - 1) / R);
  if (f->gemm) {
    for (int ph = 0; ph < 4; ph++) CUDA_RET(gemm_phase(f, ph, hp->slope, grad, ws->fn_on, st));
    tail_args_t ta;
    memset(&ta, 0, sizeof ta);
    ta.rows = 3 * B, ta.Z = L->Z, ta.O2 = O2, ta.AW = AW, ta.D = L->D;
    for (int d = 0; d < L->D; d++) ta.n[d] = L->n[d], ta.aoff[d] = aoff[d];
    ta.O = f->O, ta.logp = f->logp;
    for (int d = 0; d < L->D; d++) ta.nmax = L->n[d] > ta.nmax ? L->n[d] : ta.nmax;
    /* staged through shared memory when a warp's copy fits in 48 KB */
    const size_t wfl = sizeof(float) * (size_t)ta.nmax * L->Z;
    const int wpb = wfl <= 12288 ? 4 : wfl <= 49152 ? (int)(49152 / wfl) : 4;
    ta.stage = wfl <= 49152;
    const size_t warps = 3 * (size_t)B * L->D;
    const dim3 tg((unsigned)((warps + wpb - 1) / wpb)), tb(32 * wpb);
    const size_t tsm = ta.stage ? wpb * wfl : 0;
    if (L->Z <= 64) fused_tail_kernel<2><<<tg, tb, tsm, st>>>(ta);
    else if (L->Z <= 128) fused_tail_kernel<4><<<tg, tb, tsm, st>>>(ta);
    else fused_tail_kernel<TAIL_ZL><<<tg, tb, tsm, st>>>(ta);
  } else if (f->cluster) {
    fa.nblk_on = (2 * B + CL_R - 1) / CL_R;
    unsigned ncl = (unsigned)(fa.nblk_on + (B + CL_R - 1) / CL_R);
    CUDA_RET(launch_clusters(fused_forward_cluster_kernel, ncl, f->smem_cfwd, st, fa, f->cl_nA, f->cl_nB, f->cl_kcf));
  } else if (tc == 1) fused_forward_kernel<16, 1><<<nblk, NT, f->smem_fwd, st>>>(fa);
  else if (tc == 3) fused_forward_kernel<16, 3><<<nblk, NT, f->smem_fwd, st>>>(fa);
  else if (R == 4) fused_forward_kernel<4, 0><<<nblk, NT, f->smem_fwd, st>>>(fa);
  else if (R == 8) fused_forward_kernel<8, 0><<<nblk, NT, f->smem_fwd, st>>>(fa);
  else fused_forward_kernel<16, 0><<<nblk, NT, f->smem_fwd, st>>>(fa);
  CUDA_RET(cudaGetLastError());
  /* 3. loss, all branches */
  loss_args_t la;
  memset(&la, 0, sizeof la);
  la.B = B, la.Z = L->Z, la.AW = AW, la.O2 = O2, la.D = L->D, la.double_dqn = hp->double_dqn;
  int nmax = 0, radix = 1;
  for (int d = L->D - 1; d >= 0; d--) la.radix_after[d] = radix, radix *= L->n[d];
  for (int d = 0; d < L->D; d++) la.n[d] = L->n[d], la.aoff[d] = aoff[d], nmax = L->n[d] > nmax ? L->n[d] : nmax;
  la.vmin = hp->v_min, la.vmax = hp->v_max, la.gamma = hp->gamma, la.gamma_dev = hp->gamma_dev;
  la.logp = f->logp, la.r = ws->r, la.done = ws->done, la.w = ws->w, la.a = ws->a;
  la.g2 = f->g2, la.loss_i = ws->loss_i, la.qsum_i = ws->loss_i + B, la.best = ws->best;
  la.nmax = nmax;
  size_t lsh = sizeof(float) * ((size_t)L->D * L->Z + (size_t)L->D * loss_warp_floats(nmax, L->Z));
  fused_loss_kernel<<<B, 32 * L->D, lsh, st>>>(la);
  CUDA_RET(cudaGetLastError());
  if (f->gemm) {
    /* the side stream: the batch loss (statistics only) and each weight-
     * gradient group as soon as the gradient it reads exists, beside the
     * backward phases (each latency-bound, leaving most of the GPU idle) */
    cudaStream_t sd = f->side;
    CUDA_RET(cudaEventRecord(f->ev[0], st));
    CUDA_RET(cudaStreamWaitEvent(sd, f->ev[0], 0));
    fused_batch_loss_kernel<<<1, 1024, 0, sd>>>(ws->loss_i, ws->loss_i + B, ws->w, B, L->D, ws->loss, ws->q_taken);
    CUDA_RET(cudaGetLastError());
    CUDA_RET(gemm_phase(f, 7, hp->slope, grad, ws->fn_on, sd));
    for (int ph = 4; ph < 7; ph++) {
      CUDA_RET(gemm_phase(f, ph, hp->slope, grad, ws->fn_on, st));
      if (ph == 6 && f->norm_hook) {
        /* the norm in two parts: the other layers' on the side stream
         * beside B3, after their gradients; trunk-1's weight gradient right
         * after B3 on this stream, then its part of the norm (the norm
         * launch that followed the join was ~5 µs on the critical path) */
        CUDA_RET(f->norm_hook(f->side_arg, sd, 0));
        CUDA_RET(gemm_phase(f, 10, hp->slope, grad, ws->fn_on, st));
        CUDA_RET(f->norm_hook(f->side_arg, st, 1));
        break;
      }
      CUDA_RET(cudaEventRecord(f->ev[ph - 3], st));
      CUDA_RET(cudaStreamWaitEvent(sd, f->ev[ph - 3], 0));
      CUDA_RET(gemm_phase(f, ph + 4, hp->slope, grad, ws->fn_on, sd));
    }
    CUDA_RET(cudaEventRecord(f->ev[4], sd));
    CUDA_RET(cudaStreamWaitEvent(st, f->ev[4], 0));
    /* after the join point: beside what the caller enqueues next (the
     * optimiser); the caller joins the side stream again before its end */
    if (f->side_hook) CUDA_RET(f->side_hook(f->side_arg, sd));
    return 0;
  }
  fused_batch_loss_kernel<<<1, 1024, 0, st>>>(ws->loss_i, ws->loss_i + B, ws->w, B, L->D, ws->loss, ws->q_taken);
  CUDA_RET(cudaGetLastError());
  /* 4. backward to every layer's pre-activation gradient */
  bwd_args_t ba;
  memset(&ba, 0, sizeof ba);
  ba.B = B, ba.H1 = L->H1, ba.H2 = L->H2, ba.HC = HC, ba.O2 = O2, ba.slope = hp->slope;
  ba.w_on = f->w_on, ba.g2 = f->g2, ba.hh = f->hh, ba.h = f->h, ba.h1 = f->h1;
  ba.g1 = f->g1, ba.gh = f->gh, ba.gt1 = f->gt1;
  ba.tabs = (const segtab_t *)f->tabs + 4;
  ba.N1 = bwd_n1(L, HC, O2), ba.stage = f->stage;
  unsigned bblk = (unsigned)((B + R - 1) / R);
  if (f->cluster) {
    unsigned ncl = (unsigned)((B + CL_R - 1) / CL_R);
    CUDA_RET(launch_clusters(fused_backward_cluster_kernel, ncl, f->smem_cbwd, st, ba, f->cl_nA2, f->cl_kcb));
  } else if (tc == 1) fused_backward_kernel<16, 1><<<bblk, NT, f->smem_bwd, st>>>(ba);
  else if (tc == 3) fused_backward_kernel<16, 3><<<bblk, NT, f->smem_bwd, st>>>(ba);
  else if (R == 4) fused_backward_kernel<4, 0><<<bblk, NT, f->smem_bwd, st>>>(ba);
  else if (R == 8) fused_backward_kernel<8, 0><<<bblk, NT, f->smem_bwd, st>>>(ba);
  else fused_backward_kernel<16, 0><<<bblk, NT, f->smem_bwd, st>>>(ba);
  CUDA_RET(cudaGetLastError());
  /* 5. weight, bias and sigma gradients */
  wbufs wb = {{ws->x, f->h1, f->h, f->hh, f->g2, f->g1, f->gh, f->gt1}};
  const int S = f->wg_splits, chunk = (B + S - 1) / S;
  fused_wgrad_kernel<<<dim3((unsigned)f->n_tiles, (unsigned)S), 64, 0, st>>>((const wtile_t *)f->tiles, wb, B, chunk,
                                                                            ws->fn_on, grad, f->wg_part);
  CUDA_RET(cudaGetLastError());
  if (S > 1) {
    fused_wgrad_reduce_kernel<<<(unsigned)f->n_tiles, 64, 0, st>>>((const wtile_t *)f->tiles, S, f->wg_part,
                                                                  ws->fn_on, grad);
    CUDA_RET(cudaGetLastError());
  }
  return 0;
}
