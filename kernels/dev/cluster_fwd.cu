// Go/no-go probe (issue 29 item 1; kernels/dev/DEVICE_NOTES.md item 172):
// the ref network's forward F1-F4 over the 3B rows of a step (online s,
// target s', online s') as ONE kernel of thread-block clusters, against the
// library's four fused_gemm launches (ncu: 4.8 / 7.0 / 9.1 / 8.5 µs at batch
// 64, 5.1 / 11.8 / 14.3 / 12.0 at 256; BENCHMARKS.md "The step by phase").
//
// Item 168 found a persistent grid no faster than the graph: each phase paid
// a load round trip, an epilogue and a grid barrier. Here a cluster of 16
// CTAs (one an SM) owns a sixteenth of every layer's output columns; each
// CTA loads its weight slices (80 KB) into shared memory once, before the
// first layer; the activations stay in shared memory, each CTA's slice
// written into all 16 CTAs' copies through distributed shared memory, one
// cluster barrier a layer. G clusters split the rows, 28 rows a chunk.
//
// Not the learner: random weights and inputs, the target net shares the
// online weights, fp32 FFMA only. The output is checked against a double
// CPU forward so the time is of a kernel that computes the right thing.
//
//   bench-cluster-fwd [batches=64,256] [reps=2000]
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_check.h"

#ifndef CLUSTER_TF32
#define CLUSTER_TF32 0 /* 1: the layers on mma.sync TF32 (bench-cluster-fwd-tf32) */
#endif

namespace cg = cooperative_groups;

#define CL 16  /* CTAs a cluster */
#define NT 256 /* threads a CTA */
#if CLUSTER_TF32
#define RC 32 /* rows a chunk: two m16 tiles; 6 clusters for 192 rows */
#else
#define RC 28 /* rows a chunk: 7 clusters of 16 fit an H200 at once, 7 x 28 >= 192 */
#endif
#define S_IN 64
#define H1 256
#define H2 256
#define HH 128 /* a head's hidden width */
#define NH 4   /* value + 3 branches */
#define H3 (NH * HH)
#define NO 816 /* 51 + 9*51 + 3*51 + 3*51 */
#define N1 (H1 / CL)
#define N2 (H2 / CL)
#define N3 (H3 / CL)
#define N4 (NO / CL) /* 51: each CTA's output columns lie in one head */
#define N4P 56        /* N4 rounded up to whole n8 tiles (the TF32 tiles read rows 51-55, and drop them) */
#define LX (S_IN + 4)
#define L1W (S_IN + 4)
#define L2W (H1 + 4)
#define L3W (H2 + 4)
#define L4W (HH + 4)
#define LH1 (H1 + 4)
#define LH2 (H2 + 4)
#define LH3 (H3 + 4)
#define RED 3584

/* modes: the measured form is 0 (each output stored to all 16 CTAs' copies
 * by the epilogue, 4 bytes a store); the rest are for timing */
enum {
  F_NOCOMPUTE = 1, /* no arithmetic: the exchange, the barriers and the loads alone */
  F_LOCAL = 2,     /* no exchange: each CTA's slice stays in its own shared memory */
  F_PUSH = 4,      /* the exchange as a pass after the epilogue: the local slice pushed 16 bytes a store */
  F_NOWLOAD = 8    /* no weight loads (the numbers are wrong): the kernel as if its weights had landed before */
};
/* stamp points: entry, inputs landed, L1 done, sync, L2 done, sync, L3 done, sync, L4 done, exit */
#define NEV 10
static const char *ev_name[NEV] = {"entry", "landed", "L1", "sync1", "L2", "sync2", "L3", "sync3", "L4", "exit"};

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

struct Smem {
  float w1[N1 * L1W], w2[N2 * L2W], w3[N3 * L3W], w4[N4P * L4W];
  float b1[N1], b2[N2], b3[N3], b4[(N4 + 3) / 4 * 4]; /* float4-aligned arrays follow */
  float x0[RC * LX], h1[RC * LH1], h2[RC * LH2], h3[RC * LH3];
#if !CLUSTER_TF32
  float red[RED];
#endif
};

__device__ __forceinline__ void cp16(float *s, const float *g) {
  unsigned a = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

/* rows [r0, r0 + n) of a [*][k] global matrix into shared rows of ld */
__device__ void load_rows(float *s, int ld, const float *g, int k, int n) {
  const int q = k / 4;
  for (int i = threadIdx.x; i < n * q; i += NT) cp16(s + (i / q) * ld + (i % q) * 4, g + (size_t)(i / q) * k + (i % q) * 4);
}

/* out[r][c] = act(sum_k x[r][k] w[c][k] + b[c]) for the chunk's RC rows and
 * N columns: MR x NR sums a thread (rows tr + TR i, columns tc + TC j, so a
 * quarter-warp reads consecutive weight rows), the K range split over KS
 * groups summed in group order through red. store(r, c, v) takes each
 * output once. */
template <int N, int K, int LDX, int LDW, int MR, int NR, int KS, bool RELU, class St>
__device__ __forceinline__ void layer(const float *x, const float *w, const float *b, float *red, int mode, St store) {
  constexpr int TR = RC / MR, TC = N / NR, T = TR * TC, KP = K / KS;
  static_assert(RC % MR == 0 && N % NR == 0 && K % (4 * KS) == 0 && T * KS <= NT && T * KS * MR * NR <= RED, "shape");
  const int t = threadIdx.x;
  if (!(mode & F_NOCOMPUTE) && t < T * KS) {
    const int tile = t % T, kg = t / T, tr = tile / TC, tc = tile % TC;
    float acc[MR][NR] = {};
    const float *xr = x + tr * LDX + kg * KP, *wr = w + tc * LDW + kg * KP;
#pragma unroll 4
    for (int k = 0; k < KP; k += 4) {
      float4 a[MR], c[NR];
#pragma unroll
      for (int i = 0; i < MR; i++) a[i] = *(const float4 *)(xr + i * TR * LDX + k);
#pragma unroll
      for (int j = 0; j < NR; j++) c[j] = *(const float4 *)(wr + j * TC * LDW + k);
#pragma unroll
      for (int i = 0; i < MR; i++)
#pragma unroll
        for (int j = 0; j < NR; j++) {
          acc[i][j] = fmaf(a[i].x, c[j].x, acc[i][j]);
          acc[i][j] = fmaf(a[i].y, c[j].y, acc[i][j]);
          acc[i][j] = fmaf(a[i].z, c[j].z, acc[i][j]);
          acc[i][j] = fmaf(a[i].w, c[j].w, acc[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < MR; i++)
#pragma unroll
      for (int j = 0; j < NR; j++) red[(kg * MR * NR + i * NR + j) * T + tile] = acc[i][j];
  }
  __syncthreads();
  for (int o = t; o < RC * N; o += NT) {
    const int r = o / N, c = o % N;
    const int tile = (r % TR) * TC + c % TC, e = (r / TR) * NR + c / TC;
    float v = 0.f;
    if (!(mode & F_NOCOMPUTE)) {
#pragma unroll
      for (int kg = 0; kg < KS; kg++) v += red[(kg * MR * NR + e) * T + tile];
    }
    v += b[c];
    if (RELU) v = fmaxf(v, 0.f);
    store(r, c, v);
  }
}

/* this CTA's slice (columns [c N, c N + N) of RC rows of ld LH) from its own
 * shared memory into the other CTAs', 16 bytes a store */
template <int N, int LH>
__device__ __forceinline__ void push_slice(const cg::cluster_group &cl, float *loc, int c) {
  constexpr int Q = N / 4, PER = RC * Q;
  __syncthreads();
  for (int i = threadIdx.x; i < (CL - 1) * PER; i += NT) {
    int d = i / PER;
    const int e = i % PER, o = (e / Q) * LH + c * N + 4 * (e % Q);
    d += d >= c;
    *(float4 *)(cl.map_shared_rank(loc, d) + o) = *(const float4 *)(loc + o);
  }
}

/* TF32: out = act(x w^T + b) on mma.sync m16n8k8 (operands rounded to
 * nearest), a warp an m16 x n8 tile over the whole K (no split: K summed in
 * the tile's order), the epilogue straight from the accumulators. NP: N in
 * whole n8 tiles (columns past N read spare weight rows and are dropped). */
__device__ __forceinline__ unsigned tf32(float x) {
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return u;
}
template <int N, int NP, int K, int LDX, int LDW, bool RELU, class St>
__device__ __forceinline__ void layer_tc(const float *x, const float *w, const float *b, int mode, St store) {
  constexpr int MT = RC / 16, TILES = MT * (NP / 8);
  static_assert(RC % 16 == 0 && NP % 8 == 0 && K % 8 == 0, "shape");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane >> 2, tq = lane & 3;
  for (int tile = warp; tile < TILES; tile += NT / 32) {
    const int mt = tile % MT, nt = tile / MT;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const float *xa = x + (mt * 16 + gq) * LDX + tq, *wb = w + (nt * 8 + gq) * LDW + tq;
    if (!(mode & F_NOCOMPUTE)) {
#pragma unroll 8
      for (int k = 0; k < K; k += 8) {
        const unsigned a0 = tf32(xa[k]), a1 = tf32(xa[8 * LDX + k]), a2 = tf32(xa[k + 4]),
                       a3 = tf32(xa[8 * LDX + k + 4]), b0 = tf32(wb[k]), b1 = tf32(wb[k + 4]);
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int r = mt * 16 + gq + 8 * (i >> 1), col = nt * 8 + 2 * tq + (i & 1);
      if (col < N) {
        float v = acc[i] + b[col];
        if (RELU) v = fmaxf(v, 0.f);
        store(r, col, v);
      }
    }
  }
}

#if CLUSTER_TF32
#define LAYER(N, NP, K, LDX, LDW, MR, NR, KS, RELU) layer_tc<N, NP, K, LDX, LDW, RELU>
#define RED_ARG
#else
#define LAYER(N, NP, K, LDX, LDW, MR, NR, KS, RELU) layer<N, K, LDX, LDW, MR, NR, KS, RELU>
#define RED_ARG s.red,
#endif

__global__ void __launch_bounds__(NT, 1)
    cluster_fwd_kernel(const float *X, int R, const float *W1, const float *B1, const float *W2, const float *B2,
                       const float *W3, const float *B3, const float *W4, const float *B4, float *Y, int mode,
                       unsigned long long *stamps) {
  /* stamps (or NULL): [block][NEV] globaltimer ns at the points below, thread 0, the first chunk */
  unsigned long long *sp = stamps ? stamps + (size_t)blockIdx.x * NEV : NULL;
#define STAMP(e)                                                                 \
  do {                                                                           \
    if (sp && threadIdx.x == 0 && r0 == g * RC) sp[e] = globaltimer();           \
  } while (0)
  extern __shared__ __align__(16) unsigned char smraw[];
  Smem &s = *(Smem *)smraw;
  cg::cluster_group cl = cg::this_cluster();
  const int c = (int)cl.block_rank(), g = blockIdx.x / CL, G = gridDim.x / CL;
  int r0 = g * RC;
  STAMP(0);
  const int head = c == 0 ? 0 : c <= 9 ? 1 : c <= 12 ? 2 : 3;
  /* this CTA's weight slices, once (F_NOWLOAD: not at all, the time of a kernel whose weights arrived before) */
  if (!(mode & F_NOWLOAD)) {
  load_rows(s.w1, L1W, W1 + (size_t)c * N1 * S_IN, S_IN, N1);
  load_rows(s.w2, L2W, W2 + (size_t)c * N2 * H1, H1, N2);
  load_rows(s.w3, L3W, W3 + (size_t)c * N3 * H2, H2, N3);
  load_rows(s.w4, L4W, W4 + (size_t)c * N4 * HH, HH, N4);
  for (int i = threadIdx.x; i < N1; i += NT) s.b1[i] = B1[c * N1 + i];
  for (int i = threadIdx.x; i < N2; i += NT) s.b2[i] = B2[c * N2 + i];
  for (int i = threadIdx.x; i < N3; i += NT) s.b3[i] = B3[c * N3 + i];
  for (int i = threadIdx.x; i < N4; i += NT) s.b4[i] = B4[c * N4 + i];
  }
  float *h1r[CL], *h2r[CL], *h3r[CL];
#pragma unroll
  for (int d = 0; d < CL; d++) {
    h1r[d] = cl.map_shared_rank(s.h1, d);
    h2r[d] = cl.map_shared_rank(s.h2, d);
    h3r[d] = cl.map_shared_rank(s.h3, d);
  }
  const bool scalar = !(mode & (F_PUSH | F_LOCAL)), push = (mode & (F_PUSH | F_LOCAL)) == F_PUSH;
  for (; r0 < R; r0 += G * RC) {
    const int nr = min(RC, R - r0);
    load_rows(s.x0, LX, X + (size_t)r0 * S_IN, S_IN, nr);
    cp_commit();
    cp_wait_all();
    __syncthreads();
    STAMP(1);
    LAYER(N1, N1, S_IN, LX, L1W, 4, 4, 8, true)(s.x0, s.w1, s.b1, RED_ARG mode, [&](int r, int cc, float v) {
      const int o = r * LH1 + c * N1 + cc;
      if (scalar)
#pragma unroll
        for (int d = 0; d < CL; d++) h1r[d][o] = v;
      else
        s.h1[o] = v;
    });
    if (push) push_slice<N1, LH1>(cl, s.h1, c);
    STAMP(2);
    cl.sync();
    STAMP(3);
    LAYER(N2, N2, H1, LH1, L2W, 4, 4, 8, true)(s.h1, s.w2, s.b2, RED_ARG mode, [&](int r, int cc, float v) {
      const int o = r * LH2 + c * N2 + cc;
      if (scalar)
#pragma unroll
        for (int d = 0; d < CL; d++) h2r[d][o] = v;
      else
        s.h2[o] = v;
    });
    if (push) push_slice<N2, LH2>(cl, s.h2, c);
    STAMP(4);
    cl.sync();
    STAMP(5);
    LAYER(N3, N3, H2, LH2, L3W, 4, 4, 4, true)(s.h2, s.w3, s.b3, RED_ARG mode, [&](int r, int cc, float v) {
      const int o = r * LH3 + c * N3 + cc;
      if (scalar)
#pragma unroll
        for (int d = 0; d < CL; d++) h3r[d][o] = v;
      else
        s.h3[o] = v;
    });
    if (push) push_slice<N3, LH3>(cl, s.h3, c);
    STAMP(6);
    cl.sync();
    STAMP(7);
    LAYER(N4, N4P, HH, LH3, L4W, 4, 3, 2, false)(s.h3 + head * HH, s.w4, s.b4, RED_ARG mode, [&](int r, int cc, float v) {
      if (r < nr) Y[(size_t)(r0 + r) * NO + c * N4 + cc] = v;
    });
    STAMP(8);
    __syncthreads(); /* red and x0 are reused by the next chunk */
  }
  cl.sync(); /* no CTA leaves while another may still write its shared memory */
  if (sp && threadIdx.x == 0) sp[9] = globaltimer();
}

static void fill(float *p, size_t n, float a, unsigned *st) {
  for (size_t i = 0; i < n; i++) {
    *st = *st * 1664525u + 1013904223u;
    p[i] = a * ((float)(*st >> 8) / 16777216.0f * 2.f - 1.f);
  }
}

static void cpu_fwd(const float *X, int R, const float *W1, const float *B1, const float *W2, const float *B2,
                    const float *W3, const float *B3, const float *W4, const float *B4, double *Y) {
  double h1[H1], h2[H2], h3[H3];
  for (int r = 0; r < R; r++) {
    for (int o = 0; o < H1; o++) {
      double v = B1[o];
      for (int k = 0; k < S_IN; k++) v += (double)X[r * S_IN + k] * W1[o * S_IN + k];
      h1[o] = v > 0 ? v : 0;
    }
    for (int o = 0; o < H2; o++) {
      double v = B2[o];
      for (int k = 0; k < H1; k++) v += h1[k] * W2[o * H1 + k];
      h2[o] = v > 0 ? v : 0;
    }
    for (int o = 0; o < H3; o++) {
      double v = B3[o];
      for (int k = 0; k < H2; k++) v += h2[k] * W3[o * H2 + k];
      h3[o] = v > 0 ? v : 0;
    }
    for (int o = 0; o < NO; o++) {
      const int hd = o < 51 ? 0 : o < 510 ? 1 : o < 663 ? 2 : 3;
      double v = B4[o];
      for (int k = 0; k < HH; k++) v += h3[hd * HH + k] * W4[o * HH + k];
      Y[(size_t)r * NO + o] = v;
    }
  }
}

static float run(int R, int G, int mode, int reps, float *const dev[10], cudaStream_t st, unsigned long long *stamps) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = CL, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(G * CL), cfg.blockDim = dim3(NT), cfg.dynamicSmemBytes = sizeof(Smem), cfg.stream = st;
  cfg.attrs = at, cfg.numAttrs = 1;
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 10; i++)
    CK(cudaLaunchKernelEx(&cfg, cluster_fwd_kernel, (const float *)dev[0], R, (const float *)dev[1],
                          (const float *)dev[2], (const float *)dev[3], (const float *)dev[4], (const float *)dev[5],
                          (const float *)dev[6], (const float *)dev[7], (const float *)dev[8], dev[9], mode,
                          stamps ? stamps + (size_t)i * G * CL * NEV : (unsigned long long *)NULL));
  CK(cudaStreamEndCapture(st, &gr));
  CK(cudaGraphInstantiate(&ge, gr, 0));
  const double us = time_graph(ge, st, 5, reps / 10);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(gr));
  return (float)(us / 10); /* ten launches a replay */
}

/* the last graph replay's stamps: for each point, the spread over the CTAs
 * (min / max, µs from the launch's first entry), and the gap from each
 * launch's last exit to the next launch's first entry */
static void print_stamps(int R, int G, int reps, float *const dev[10], cudaStream_t st) {
  const size_t n = (size_t)10 * G * CL * NEV;
  unsigned long long *ds, *hs = (unsigned long long *)malloc(n * sizeof *hs);
  CK(cudaMalloc(&ds, n * sizeof *ds));
  run(R, G, 0, reps < 200 ? reps : 200, dev, st, ds);
  CK(cudaMemcpy(hs, ds, n * sizeof *hs, cudaMemcpyDeviceToHost));
  double gap = 0, span = 0;
  for (int l = 1; l < 10; l++) {
    unsigned long long e0 = ~0ull, x1 = 0, x0 = 0;
    for (int b = 0; b < G * CL; b++) {
      const unsigned long long *p = hs + ((size_t)l * G * CL + b) * NEV, *q = hs + ((size_t)(l - 1) * G * CL + b) * NEV;
      if (p[0] < e0) e0 = p[0];
      if (q[9] > x0) x0 = q[9];
      if (p[9] > x1) x1 = p[9];
    }
    gap += (double)(e0 - x0) / 1e3 / 9, span += (double)(x1 - e0) / 1e3 / 9;
  }
  printf("  stamps (launch 9 of a replay of 10, us from its first entry; min / max over %d CTAs), entry to exit %.2f us, "
         "gap from a launch's last exit to the next's first entry %.2f us (means over launches 1-9)\n",
         G * CL, span, gap);
  unsigned long long e0 = ~0ull;
  const unsigned long long *L = hs + (size_t)9 * G * CL * NEV;
  for (int b = 0; b < G * CL; b++)
    if (L[b * NEV] < e0) e0 = L[b * NEV];
  for (int e = 0; e < NEV; e++) {
    double lo = 1e30, hi = 0;
    for (int b = 0; b < G * CL; b++) {
      const double v = (double)(L[b * NEV + e] - e0) / 1e3;
      lo = v < lo ? v : lo, hi = v > hi ? v : hi;
    }
    printf("    %-7s %6.2f / %6.2f\n", ev_name[e], lo, hi);
  }
  CK(cudaFree(ds));
  free(hs);
}

int main(int argc, char **argv) {
  const char *bl = argc > 1 ? argv[1] : "64,256";
  const int reps = argc > 2 ? atoi(argv[2]) : 2000;
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  printf("bench-cluster-fwd (%s): %s, %d SMs; cluster %d CTAs, %d rows a chunk, shared %zu B a CTA\n", CLUSTER_TF32 ? "TF32" : "fp32", p.name,
         p.multiProcessorCount, CL, RC, sizeof(Smem));
  CK(cudaFuncSetAttribute(cluster_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(Smem)));
  CK(cudaFuncSetAttribute(cluster_fwd_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int maxg = 0;
  {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = CL, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(CL * 8), cfg.blockDim = dim3(NT), cfg.dynamicSmemBytes = sizeof(Smem);
    cfg.attrs = at, cfg.numAttrs = 1;
    CK(cudaOccupancyMaxActiveClusters(&maxg, cluster_fwd_kernel, &cfg));
    printf("clusters resident at once: %d\n", maxg);
  }
  const size_t nw[10] = {0, (size_t)H1 * S_IN, H1, (size_t)H2 * H1, H2, (size_t)H3 * H2, H3, (size_t)NO * HH, NO, 0};
  const float sc[10] = {1.f, 0.125f, 0.1f, 0.0625f, 0.1f, 0.0625f, 0.1f, 0.088f, 0.1f, 0.f};
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  char buf[256];
  strncpy(buf, bl, sizeof buf - 1);
  buf[sizeof buf - 1] = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    const int B = atoi(tok), R = 3 * B;
    size_t n[10];
    memcpy(n, nw, sizeof n);
    n[0] = (size_t)R * S_IN, n[9] = (size_t)R * NO;
    float *h[10], *d[10];
    unsigned seed = 12345u;
    for (int i = 0; i < 10; i++) {
      h[i] = (float *)malloc(n[i] * sizeof(float));
      fill(h[i], n[i], sc[i], &seed);
      CK(cudaMalloc(&d[i], n[i] * sizeof(float)));
      CK(cudaMemcpy(d[i], h[i], n[i] * sizeof(float), cudaMemcpyHostToDevice));
    }
    double *ref = (double *)malloc(n[9] * sizeof(double));
    cpu_fwd(h[0], R, h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], ref);
    const int gs[3] = {(R + RC - 1) / RC < maxg ? (R + RC - 1) / RC : maxg, 4, 2};
    for (int gi = 0; gi < 3; gi++) {
      const int G = gs[gi];
      if (gi > 0 && G >= gs[0]) continue;
      CK(cudaMemset(d[9], 0, n[9] * sizeof(float)));
      const float t0 = run(R, G, 0, reps, d, st, NULL);
      CK(cudaMemcpy(h[9], d[9], n[9] * sizeof(float), cudaMemcpyDeviceToHost));
      double err = 0, mag = 0;
      for (size_t i = 0; i < n[9]; i++) {
        err = fmax(err, fabs(h[9][i] - ref[i]));
        mag = fmax(mag, fabs(ref[i]));
      }
      const float t1 = run(R, G, F_NOCOMPUTE, reps, d, st, NULL);
      const float t2 = run(R, G, F_LOCAL, reps, d, st, NULL);
      const float t3 = run(R, G, F_PUSH, reps, d, st, NULL);
      const float t4 = run(R, G, F_NOWLOAD, reps, d, st, NULL);
      printf("batch %d (%d rows), %d clusters (%d CTAs), %d chunks a cluster: full %.2f us, no compute %.2f, "
             "no exchange %.2f, 16-byte push %.2f, no weight loads %.2f; max |err| %.2e of max |y| %.2e %s\n",
             B, R, G, G * CL, (R + G * RC - 1) / (G * RC), t0, t1, t2, t3, t4, err, mag, err <= (CLUSTER_TF32 ? 1e-2 : 1e-4) * mag ? "ok" : "WRONG");
      if (gi == 0) print_stamps(R, G, reps, d, st);
    }
    for (int i = 0; i < 10; i++) {
      free(h[i]);
      CK(cudaFree(d[i]));
    }
    free(ref);
  }
  CK(cudaStreamDestroy(st));
  return 0;
}
