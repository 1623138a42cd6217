/*
 * gemm.cu — the layer GEMM every phase of the step runs on (step_phases.cuh): the
 * twin of linear_forward / linear_backward (kernels/cpu/linear_impl.h) for
 * all rows and, where a layer is split into segments (the heads side by
 * side), all segments at once.
 *
 * Each phase is one launch whose blocks each compute a 32 x 64 tile of
 * outputs for every row of the phase (online s and s', target s' as separate
 * problems of the same launch), so a layer spreads over the whole GPU. A
 * thread keeps a 4 x 4 register tile; operands stream through a GNS-stage
 * cp.async ring of GBK-deep k chunks, so GNS - 1 chunks are in flight while
 * one is multiplied (the first version, one chunk ahead, was bound by one L2
 * round trip per 16 k: kernels/dev/DEVICE_NOTES.md item 23). Deep, narrow
 * products are split over k (split-K) to fill the GPU; the last block of a
 * tile to arrive adds the splits' partial sums in split order, so every sum
 * has one fixed order and reruns are bit-identical. The weight gradients are
 * the same kernel with A = dY^T (TA = 1). Phases with two 64 x 128 tiles per
 * SM at least run fused_gemm_big_kernel instead (FFMA, no split-K). A
 * population (pz.cuh) runs each tile's split-K parts in one block (SER), from
 * 8 members on two row tiles a block (SER2). gemm_plan.cu plans each phase;
 * the tile shapes are gemm_tiles.cuh's.
 *
 * Shapes: a problem is C [M][N] = A [M][K] W [K][N] (gemm_table.cuh's gprob_t);
 * tiles GBM x GBN (GBM2 x GBN2 big), k chunks of GBK. Every output is
 * overwritten: C, or the gradients at grad + gw/gb/gsw/gsb (TA 1).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arrive.cuh"
#include "cp_async.cuh"
#include "gemm_table.cuh"
#include "gemm_dev.cuh"
#include "gemm_tiles.cuh"

// kernels

/* Every tile load is one shape: NR rows of NC contiguous floats,
 * src[(row0 + r) ld + col0 + c] -> s[r ss + c], zeros past rowmax and colmax.
 * A chunk of A or of the forward's W is GBM / GBN rows along k (cols = k,
 * bounded by kend); the backward's W and the weight gradients' A are GBK
 * rows of k (rows = k) along n or m. V16: 16-byte copies (rows 16-byte
 * aligned), else 4-byte ones. */
template <int NR, int NC, bool V16, int NT = GNT>
__device__ __forceinline__ void cp_tile(float *__restrict__ s, int ss, const float *src, size_t ld, int row0,
                                        int rowmax, int col0, int colmax) {
  const int tid = threadIdx.x;
  constexpr int W = V16 ? 4 : 1, PER = NC / W;
#pragma unroll(V16 ? 8 : 4) /* the 4-byte fallbacks: full unrolling spills the large tiles */
  for (int l = 0; l < NR * PER / NT; l++) {
    const int e = tid + NT * l, r = e / PER, c = W * (e % PER);
    const int v = row0 + r < rowmax ? max(0, min(W, colmax - (col0 + c))) : 0;
    const float *p = v ? src + (size_t)(row0 + r) * ld + col0 + c : src;
    if (V16) cp_async16z(s + r * ss + c, p, 4 * v);
    else cp_async4z(s + r * ss + c, p, 4 * v);
  }
}
/* R rows along k; GBK rows of k along C columns */
template <int R, bool V16, int NT = GNT>
__device__ __forceinline__ void cp_rows_k(float *s, int ss, const float *src, size_t ld, int r0, int rmax, int k0,
                                          int kend) {
  cp_tile<R, GBK, V16, NT>(s, ss, src, ld, r0, rmax, k0, kend);
}
template <int C, bool V16, int NT = GNT>
__device__ __forceinline__ void cp_k_cols(float *s, int ss, const float *src, size_t ld, int c0, int cmax, int k0,
                                          int kend) {
  cp_tile<GBK, C, V16, NT>(s, ss, src, ld, k0, kend, c0, cmax);
}

/* Per-thread copy plan of the 16-byte path, fixed for a block: each thread
 * copies GA16 float4s of A and GW16 of W per chunk at the same offsets, so
 * their source rows, bounds and shared offsets are computed once (computing
 * them per chunk was ~190 of ~820 instructions a chunk: item 23). A block
 * of MR row tiles (SER2: MR x GNT threads, A MR x GBM rows) copies as many
 * float4s of A a thread and GW16 / MR of W. */
#define GA16 (GBM * GBK / 4 / GNT)
#define GW16 (GBK * GBN / 4 / GNT)
struct gplan {
  const float *a[GA16], *w[GW16]; /* sources at k0 = 0 */
  int ao[GA16], wo[GW16];         /* shared offsets */
  int acap[GA16], wcap[GW16];     /* floats valid by M or N (TA 0 A: by M only, 0 or 4) */
  int ak[GA16], wk[GW16];         /* k of the row within the chunk */
};

template <int TA, int TW, int MR>
__device__ __forceinline__ void g_plan(gplan &pl, const gprob_t &g, int m0, int n0) {
  const int tid = threadIdx.x;
  constexpr int NT = GNT * MR, BM = GBM * MR;
#pragma unroll
  for (int l = 0; l < GA16; l++) {
    const int e = tid + NT * l;
    if (TA == 0) {
      const int m = e / (GBK / 4), k = 4 * (e % (GBK / 4));
      const bool ok = m0 + m < g.M;
      pl.a[l] = ok ? g.A + (size_t)(m0 + m) * g.lda + k : g.A;
      pl.ao[l] = m * GSA0 + k, pl.acap[l] = ok ? 4 : 0, pl.ak[l] = k;
    } else {
      const int k = e / (BM / 4), m = 4 * (e % (BM / 4));
      pl.acap[l] = max(0, min(4, g.M - (m0 + m)));
      pl.a[l] = pl.acap[l] ? g.A + (size_t)k * g.lda + m0 + m : g.A;
      pl.ao[l] = k * GSA1M(MR) + m, pl.ak[l] = k;
    }
  }
#pragma unroll
  for (int l = 0; l < GW16 / MR; l++) {
    const int e = tid + NT * l;
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
template <int TA, int TW, int MR>
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
    cp_rows_k<GBM * MR, false, GNT * MR>(sa, GSA0, A, g.lda, m0, g.M, k0, kend);
  } else { /* sa [k][GSA1M] */
    cp_k_cols<GBM * MR, false, GNT * MR>(sa, GSA1M(MR), A, g.lda, m0, g.M, k0, kend);
  }
  if (g.al & 2) {
    const size_t kw = TW == 0 ? (size_t)k0 * g.ldw : (size_t)k0;
#pragma unroll
    for (int l = 0; l < GW16 / MR; l++) {
      const int v = TW == 0 ? (k0 + pl.wk[l] < kend ? pl.wcap[l] : 0)
                            : min(pl.wcap[l], max(0, kend - (k0 + pl.wk[l])));
      cp_async16z(sw + pl.wo[l], v ? pl.w[l] + kw : W, 4 * v);
    }
  } else if (TW == 1) { /* sw [n][GSA0] */
    cp_rows_k<GBN, false, GNT * MR>(sw, GSA0, W, g.ldw, n0, g.N, k0, kend);
  } else { /* sw [k][GSW] */
    cp_k_cols<GBN, false, GNT * MR>(sw, GSW, W, g.ldw, n0, g.N, k0, kend);
  }
}

/* this thread's e-th output (0..15) within the tile: FFMA 4 x 4 patches;
 * tensor cores (TC > 0): warp w owns columns [16 w, 16 w + 16) of all 32
 * rows, as 2 x 2 m16n8 accumulators in the mma.sync layout */
template <int TC, int TW>
__device__ __forceinline__ void g_elem(int e, int &ml, int &nl) {
  const int tid = threadIdx.x % GNT; /* within its row tile (SER2 blocks hold two) */
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

/* One tile (and k part) of a phase's problems. TC: arithmetic, 0 fp32 FFMA
 * (sums over k in order), 1 TF32 mma.sync (the tensor_cores config).
 * SER (a population's launch, pz.cuh): a block per tile (the launch
 * numbered by gprob_t.sblk) runs every split in turn and adds them as the
 * split-K reduction below does, in split order (so a member's bits are its
 * lone twin's), with no partials in memory. MR 2 (SER2, with SER only): a
 * block of two row tiles, 2 x GNT threads, each half exactly one tile's
 * threads on its rows (the same sums in the same order), sharing the W chunk:
 * half the W traffic through L2 of two blocks. */
template <int TA, int TW, int TC, int SER, int MR>
__global__ void __launch_bounds__(GNT * MR, SER ? 4 / MR : 1) fused_gemm_kernel(const gprob_t *__restrict__ probs, const __grid_constant__ gidx_t ix, float slope,
                                                         float *__restrict__ grad, const float *__restrict__ fn,
                                                         float *__restrict__ part, int *__restrict__ cnt,
                                                         long long ps) {
  static_assert(MR == 1 || (MR == 2 && SER), "two row tiles a block only in a population's SER launch");
  constexpr int AFL = GA_FLOATSM(MR), SA1 = GSA1M(MR);
  extern __shared__ float4 gsh4[];
  float *sA = reinterpret_cast<float *>(gsh4), *sW = sA + GNS * AFL;
  probs = pz_at(probs, ps), grad = pz_at(grad, ps), fn = pz_at(fn, ps), part = pz_at(part, ps), cnt = pz_at(cnt, ps);
  const int p = g_find<SER ? MR : 0>(ix, probs);
  /* a copy in registers: through a reference every field would be reloaded
   * from global memory after each barrier (measured: half the instructions) */
  const gprob_t g = probs[p];
  const int local = (int)blockIdx.x - (SER ? g.sblk[MR - 1] : g.blk0);
  const int tile = SER ? local : local % g.tiles, split = SER ? 0 : local / g.tiles;
  const int m0 = (tile / g.tn) * GBM * MR, n0 = (tile % g.tn) * GBN; /* the block's */
  const int half = MR == 1 ? 0 : (int)threadIdx.x / GNT;
  const int mh = m0 + GBM * half; /* this half's row tile */
  const int klo = SER ? 0 : split * g.kper, khi = SER ? g.K : min(g.K, klo + g.kper);
  const int cps = g.kper / GBK; /* chunks per split */
  const int tid = (int)threadIdx.x % GNT, tx = tid % 16, ty = tid / 16;
  const int wq = tid / 32, gq = (tid % 32) / 4, tq = tid % 4;
  /* weight gradients: the bias gradient of row tid is the sum over k of A,
   * kept by the first warp of the tiles at n0 = 0, in k order */
  const bool bias_sums = TA == 1 && n0 == 0 && tid < GBM && g.gb >= 0;
  float acc[16], bsum = 0.0f, tot[SER ? 16 : 1], tbs = 0.0f;
#pragma unroll
  for (int e = 0; e < 16; e++) acc[e] = 0.0f;
#pragma unroll
  for (int e = 0; e < (SER ? 16 : 1); e++) tot[e] = 0.0f;
  const int nk = khi > klo ? (khi - klo + GBK - 1) / GBK : 0;
  gplan pl;
  g_plan<TA, TW, MR>(pl, g, m0, n0);
#pragma unroll
  for (int q = 0; q < GNS - 1; q++) {
    if (q < nk) g_issue<TA, TW, MR>(sA + q * AFL, sW + q * GW_FLOATS, g, pl, m0, n0, klo + q * GBK, khi);
    cp_async_commit();
  }
  /* the epilogue's operands (the forward's bias, the backward's LeakyReLU
   * mask: gemm_plan checks that no phase has the other) loaded now, so
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
      const int m = mh + ml, n = n0 + nl;
      pm[e] = m < g.M && n < g.N && g.mask ? g.mask[(size_t)m * g.ldm + n] : 1.0f;
    }
  }
  for (int c = 0; c < nk; c++) {
    if (SER && g.splits > 1 && c > 0 && c % cps == 0) { /* a split ends: its sums into the total */
#pragma unroll
      for (int e = 0; e < (SER ? 16 : 1); e++) tot[e] += acc[e], acc[e] = 0.0f;
      tbs += bsum, bsum = 0.0f;
    }
    cp_async_wait<GNS - 2>(); /* chunk c has landed (this thread's copies) */
    __syncthreads();          /* everyone's; and chunk c - 1's buffer is free */
    const int nx = c + GNS - 1;
    if (nx < nk)
      g_issue<TA, TW, MR>(sA + (nx % GNS) * AFL, sW + (nx % GNS) * GW_FLOATS, g, pl, m0, n0, klo + nx * GBK, khi);
    cp_async_commit();
    /* this half's rows of the A chunk */
    const float *__restrict__ a = sA + (c % GNS) * AFL + (TA == 0 ? GBM * half * GSA0 : GBM * half);
    const float *__restrict__ w = sW + (c % GNS) * GW_FLOATS;
    if (bias_sums)
#pragma unroll 8
      for (int k = 0; k < GBK; k++) bsum += a[k * SA1 + tid];
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
        const float4 a4 = *reinterpret_cast<const float4 *>(a + k * SA1 + 4 * ty);
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
        unsigned ah[2][4], bh[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
          const int r = 16 * mi + gq;
          float x[4];
          if (TA == 0) {
            x[0] = a[r * GSA0 + k8 + tq], x[1] = a[(r + 8) * GSA0 + k8 + tq];
            x[2] = a[r * GSA0 + k8 + tq + 4], x[3] = a[(r + 8) * GSA0 + k8 + tq + 4];
          } else {
            x[0] = a[(k8 + tq) * SA1 + r], x[1] = a[(k8 + tq) * SA1 + r + 8];
            x[2] = a[(k8 + tq + 4) * SA1 + r], x[3] = a[(k8 + tq + 4) * SA1 + r + 8];
          }
#pragma unroll
          for (int q = 0; q < 4; q++) ah[mi][q] = f2tf32(x[q]);
        }
#pragma unroll
        for (int ni = 0; ni < 2; ni++) {
          const int n = 16 * wq + 8 * ni + gq;
          const float y0 = TW == 0 ? w[(k8 + tq) * GSW + n] : w[n * GSA0 + k8 + tq];
          const float y1 = TW == 0 ? w[(k8 + tq + 4) * GSW + n] : w[n * GSA0 + k8 + tq + 4];
          bh[ni][0] = f2tf32(y0), bh[ni][1] = f2tf32(y1);
        }
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
          for (int ni = 0; ni < 2; ni++) {
            float(&d)[4] = *reinterpret_cast<float(*)[4]>(&acc[8 * mi + 4 * ni]);
            mma_tf32(d, ah[mi], bh[ni][0], bh[ni][1]);
          }
      }
    }
  }
  cp_async_wait<0>();
  if (SER && g.splits > 1) { /* the last split with chunks, then the empty ones (zeros, as their parts are) */
    for (int s = nk ? (nk - 1) / cps : 0; s < g.splits; s++) {
#pragma unroll
      for (int e = 0; e < (SER ? 16 : 1); e++) tot[e] += acc[e], acc[e] = 0.0f;
      tbs += bsum, bsum = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < (SER ? 16 : 1); e++) acc[e] = tot[e];
    bsum = tbs;
  } else if (g.splits > 1) {
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
     * barrier (arrive.cuh: one fence a block, not one a thread: the membar
     * stalls); MR is 1 here, so thread 0 is the tile's */
    __syncthreads();
    if (!arrive_last(cnt + g.cnt0 + tile, (unsigned)g.splits)) return;
    const float *pt = part + ((size_t)g.poff + (size_t)tile * g.splits) * GPART;
#pragma unroll
    for (int e = 0; e < 16; e++) acc[e] = 0.0f;
    bsum = 0.0f;
    /* GPB parts' loads in flight before their adds (a loop over the parts
     * waited out one L2 round trip per part); the adds stay in split order.
     * Four (as float4, the loop not unrolled: the FFMA variants within 128
     * registers; four parts of scalar loads took 168-251 and halved the
     * blocks per SM: DEVICE_NOTES.md item 41). The mma variants loaded one
     * part at a time until item 175 (B2 at batch 64 with K head sets, 32
     * parts, waited out 32 round trips in its last block): four, with 2 more
     * registers and the same bits, took 3 us off the TF32 ensemble +
     * attention step at batch 64 and 1.5 off the plain TF32 step */
    constexpr int GPB = 4;
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
      const int m = mh + ml, n = n0 + nl;
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
      const int o = mh + ml, in = n0 + nl;
      if (o >= g.M || in >= g.N) continue;
      const size_t k = (size_t)o * g.N + in;
      grad[g.gw + k] = acc[e];
      if (g.gsw >= 0) grad[g.gsw + k] = acc[e] * (fn[g.fo + o] * fn[g.fi + in]);
    }
    if (bias_sums && mh + tid < g.M) {
      grad[g.gb + mh + tid] = bsum;
      if (g.gsb >= 0) grad[g.gsb + mh + tid] = bsum * fn[g.fo + mh + tid];
    }
  }
}

/* ---- Large-batch tiles: 64 x 128 outputs per block, 8 x 8 per thread
 * (FFMA, no split-K), for phases with at least two such tiles per SM. The
 * 4 x 4 patches above need two float4 shared loads per 16 FMAs, which keeps
 * the load pipe ~75% as busy as the FMA pipe; 8 x 8 needs half that per FMA
 * (DEVICE_NOTES.md item 27). A thread's rows are 8 apart (ty + 8 i) so the
 * two rows a warp reads at once fall in different banks. */

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
                                                             const __grid_constant__ gidx_t ix, float slope,
                                                             long long ps) {
  extern __shared__ float4 gsh4[];
  float *sA = reinterpret_cast<float *>(gsh4), *sW = sA + GNS2 * GA2_FLOATS;
  probs = pz_at(probs, ps);
  const gprob_t g = probs[g_find(ix, probs)];
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


// launchers

template <int TC>
static cudaError_t gemm_smem(void) {
  cudaError_t e = cudaSuccess;
#define GEMM_SMEM(TA, TW)                                                                                              \
  if (e == cudaSuccess)                                                                                                \
    e = cudaFuncSetAttribute(fused_gemm_kernel<TA, TW, TC, 0, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                             (int)GSMEM);                                                                              \
  if (e == cudaSuccess)                                                                                                \
    e = cudaFuncSetAttribute(fused_gemm_kernel<TA, TW, TC, 1, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                             (int)GSMEM);                                                                              \
  if (e == cudaSuccess)                                                                                                \
    e = cudaFuncSetAttribute(fused_gemm_kernel<TA, TW, TC, 1, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                             (int)GSMEMM(2));
  GEMM_SMEM(0, 1) GEMM_SMEM(0, 0) GEMM_SMEM(1, 0)
#undef GEMM_SMEM
  return e;
}

/* every layer-GEMM kernel's shared-memory limit (gemm_plan.cu, once a plan) */
cudaError_t gemm_kernel_attrs(void) {
  cudaError_t e = cudaFuncSetAttribute(fused_gemm_big_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GSMEM2);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fused_gemm_big_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GSMEM2);
  if (e == cudaSuccess) e = gemm_smem<0>();
  if (e == cudaSuccess) e = gemm_smem<1>();
  return e;
}

/* ---- a phase's launch */

extern "C" int cuda_gemm_phase(const cuda_fused_t *f, int ph, float slope, float *grad, const float *fn,
                               cudaStream_t st) {
  const gprob_t *probs = (const gprob_t *)f->probs + f->ph[ph][0];
  const long long ps = f->pz.stride;
  /* SER from 8 members on, and below that where the members' tiles alone
   * give the planner's blocks per SM; else each member's parts in blocks of
   * their own, as alone (both add the parts in split order: the same bits).
   * Measured (kernels/dev/DEVICE_NOTES.md item 74): SER everywhere cost 2
   * members 101 us a member-step against 82 so, and the rule everywhere cost
   * 8 members 54.1 against 51.9 with SER everywhere. */
  const int ser = f->pz.n > 1 && !f->ph_big[ph] &&
                  (f->pz.n >= POP_SER_ALWAYS || (long long)f->ph_tiles[ph] * f->pz.n >= (long long)f->ph_occ * f->nsm);
  /* SER2 (two row tiles a block) from POP_SER_PAIRS members on */
  const int mr = ser && f->pz.n >= POP_SER_PAIRS ? 2 : 1;
  const dim3 nb((unsigned)(ser ? f->ph_sblocks[mr - 1][ph] : f->ph_blocks[ph]), 1, (unsigned)f->pz.n);
  gidx_t ix;
  ix.np = f->ph[ph][1];
  if (ix.np == 0) return 0;
  ix.stride = f->ph_stride[ph];
  ix.nix = (ix.np + ix.stride - 1) / ix.stride;
  memcpy(ix.blk0, ser ? f->ph_sblk[mr - 1][ph] : f->ph_blk0[ph], sizeof ix.blk0);
#define GEMM_LAUNCH(TA, TW, TC)                                                                                        \
  do {                                                                                                                 \
    if (mr == 2)                                                                                                       \
      fused_gemm_kernel<TA, TW, TC, 1, 2><<<nb, 2 * GNT, GSMEMM(2), st>>>(probs, ix, slope, grad, fn, f->gpart,       \
                                                                          f->gcnt, ps);                                \
    else if (ser)                                                                                                      \
      fused_gemm_kernel<TA, TW, TC, 1, 1><<<nb, GNT, GSMEM, st>>>(probs, ix, slope, grad, fn, f->gpart, f->gcnt, ps); \
    else fused_gemm_kernel<TA, TW, TC, 0, 1><<<nb, GNT, GSMEM, st>>>(probs, ix, slope, grad, fn, f->gpart, f->gcnt, ps); \
  } while (0)
  if (f->ph_big[ph] == 2) {
    gemm_wgmma_launch(probs, ix, (const char *)f->wg_maps + gemm_wgmma_map_bytes() * 2 * (size_t)f->ph[ph][0], nb,
                      slope, ps, st);
  } else if (f->ph_big[ph]) {
    if (ph < PH_B1) fused_gemm_big_kernel<1><<<nb, GNT, GSMEM2, st>>>(probs, ix, slope, ps);
    else fused_gemm_big_kernel<0><<<nb, GNT, GSMEM2, st>>>(probs, ix, slope, ps);
  } else if (ph < PH_B1) { /* forward: W pack rows [out][in] */
    if (f->tc) GEMM_LAUNCH(0, 1, 1);
    else GEMM_LAUNCH(0, 1, 0);
  } else if (ph < PH_WG) { /* backward: W pack as [k = out][n = in] */
    if (f->tc) GEMM_LAUNCH(0, 0, 1);
    else GEMM_LAUNCH(0, 0, 0);
  } else { /* weight gradients: A = dY^T */
    if (f->tc) GEMM_LAUNCH(1, 0, 1);
    else GEMM_LAUNCH(1, 0, 0);
  }
#undef GEMM_LAUNCH
  return (int)cudaGetLastError();
}
