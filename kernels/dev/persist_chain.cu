// Go/no-go probe for a persistent DQN step (issue 29 item 1; DEVICE_NOTES.md
// item 167): the ref network's GEMM chain, sampled rows to AdamW, run as
// stages of ONE resident kernel with grid barriers between them, against the
// same stages as kernel nodes of a CUDA graph. Item 28 measured bare phases
// (a barrier ~1.3 µs, a graph boundary ~1.2 µs); this measures phases with
// their real work, shaped for latency: every block takes at most one tile a
// stage where it can, loads its whole K range at once (no split-K across
// blocks, the K split across the block's warps and summed in shared memory),
// and may prefetch its next stage's weight tile before the barrier.
//
// Not the learner: the tail and the C51 loss are one stand-in row-local
// stage (softmax minus one-hot), F4 and B1 are dense stand-ins with the
// block-diagonal layers' FLOPs, and the target net shares the online
// weights. Everything runs on random data.
//
//   bench-persist-chain [batches=64,256] [steps=300]
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_check.h"

namespace cg = cooperative_groups;

#define NT 256
#define MAXG 4 /* GEMMs in one stage (the weight gradients) */
#define MAXS 16

enum { ST_GEMM = 0, ST_GATHER, ST_ROWLOSS, ST_ADAM, ST_EMPTY };

struct Gemm {
  const float *A; /* A(r,k) = tA ? A[k*lda + r] : A[r*lda + k] */
  const float *B; /* B(k,n) = B[k*ldb + n] (weights pre-transposed where needed) */
  const float *bias;
  float *C; /* C[r*ldc + n] */
  float *sq; /* per-tile sum of squares of C (weight gradients), or NULL */
  int lda, ldb, ldc, tA, R, K, N, relu, Rt, Ct, items, static_b;
};

struct Stage {
  int kind, ng;
  Gemm g[MAXG];
  /* gather: rows of `replay` into C; rowloss: A rows of N -> C; adam */
  const float *src;
  float *dst;
  int rows, width, nparam, nsq;
  float *w, *grad, *m, *v, *tgt;
  const float *sqs;
};

struct Plan {
  int ns;
  Stage s[MAXS];
};

__device__ Plan g_plan; /* global, not __constant__: the blocks copy it to shared memory coalesced */

__device__ __forceinline__ void cp16(float *s, const float *g) {
  unsigned a = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

/* shared layout: As [K][Rt+4], Bs [K][Ct], red [NT*16] */
__device__ void load_b(const Gemm &g, int item, float *Bs) {
  const int ct = item % (g.N / g.Ct);
  const int n0 = ct * g.Ct, q = g.Ct / 4;
  for (int i = threadIdx.x; i < g.K * q; i += NT) {
    const int k = i / q, c = (i % q) * 4;
    cp16(Bs + k * g.Ct + c, g.B + (size_t)k * g.ldb + n0 + c);
  }
  cp_commit();
}

__device__ void load_a(const Gemm &g, int item, float *As) {
  const int rt = item / (g.N / g.Ct);
  const int r0 = rt * g.Rt, lds = g.Rt + 4;
  if (g.tA) {
    const int q = g.Rt / 4;
    for (int i = threadIdx.x; i < g.K * q; i += NT) {
      const int k = i / q, c = (i % q) * 4;
      cp16(As + k * lds + c, g.A + (size_t)k * g.lda + r0 + c);
    }
    cp_commit();
  } else {
    const int q = g.K / 4;
    for (int i = threadIdx.x; i < g.Rt * q; i += NT) {
      const int r = i / q, k = (i % q) * 4;
      const float4 x = __ldcg((const float4 *)(g.A + (size_t)(r0 + r) * g.lda + k));
      As[(k + 0) * lds + r] = x.x;
      As[(k + 1) * lds + r] = x.y;
      As[(k + 2) * lds + r] = x.z;
      As[(k + 3) * lds + r] = x.w;
    }
  }
}

/* 4x4 outputs a thread; the K range split over NT / (Rt*Ct/16) groups */
__device__ void compute(const Gemm &g, int item, const float *As, const float *Bs, float *red,
                        float *sqacc) {
  const int tr = g.Rt / 4, tc = g.Ct / 4, per = tr * tc, ngrp = NT / per;
  const int lds = g.Rt + 4;
  const int t = threadIdx.x, grp = t / per, l = t % per, ry = (l / tc) * 4, cx = (l % tc) * 4;
  const int kpg = (g.K + ngrp - 1) / ngrp, k0 = grp * kpg, k1 = min(g.K, k0 + kpg);
  float acc[4][4] = {};
  if (grp < ngrp) {
#pragma unroll 4
    for (int k = k0; k < k1; k++) {
      const float4 a = *(const float4 *)(As + k * lds + ry);
      const float4 b = *(const float4 *)(Bs + k * g.Ct + cx);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
  __syncthreads(); /* As/Bs may be reused by the caller's next prefetch after this */
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) red[(size_t)(i * 4 + j) * NT + t] = acc[i][j];
  __syncthreads();
  const int rt = item / (g.N / g.Ct), ct = item % (g.N / g.Ct);
  float sq = 0.f;
  for (int o = t; o < g.Rt * g.Ct; o += NT) {
    const int r = o / g.Ct, c = o % g.Ct;
    const int li = (r / 4) * tc + c / 4, slot = (r % 4) * 4 + (c % 4);
    float s = 0.f;
    for (int q = 0; q < ngrp; q++) s += red[(size_t)slot * NT + q * per + li];
    const int n = ct * g.Ct + c;
    if (g.bias) s += g.bias[n];
    if (g.relu) s = fmaxf(s, 0.f);
    g.C[(size_t)(rt * g.Rt + r) * g.ldc + n] = s;
    sq += s * s;
  }
  *sqacc += sq;
  __syncthreads();
}

/* the item of stage si (GEMM gi, tile) that block b takes first, or -1 */
__device__ int first_item(const Stage &s, int b, int *gi) {
  for (int i = 0; i < s.ng; i++) {
    if (b < s.g[i].items) {
      *gi = i;
      return b;
    }
    b -= s.g[i].items;
  }
  return -1;
}

__device__ float block_sum(float x, float *tmp) {
  for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  if ((threadIdx.x & 31) == 0) tmp[threadIdx.x >> 5] = x;
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < NT / 32; i++) s += tmp[i];
  __syncthreads();
  return s;
}

#define AS_CAP 24576
#define BS_CAP 20480
#define RED_OFF (AS_CAP + BS_CAP)
#define SMEM_FLOATS (RED_OFF + NT * 16 + 64)

__device__ unsigned long long *g_stamp; /* [MAXS][4][blocks], the last step, or NULL */

__device__ __forceinline__ void stamp(int si, int k, unsigned long long *sp) {
  if (sp && threadIdx.x == 0) {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    sp[(si * 4 + k) * gridDim.x + blockIdx.x] = ns;
  }
}

__device__ void run_stage(const Stage &s, float *sm, int prefetched, int si, unsigned long long *sp) {
  float *As = sm, *Bs = sm + AS_CAP, *red = sm + RED_OFF;
  const int b = blockIdx.x, nb = gridDim.x, t = threadIdx.x;
  if (s.kind == ST_EMPTY) return;
  if (s.kind == ST_GATHER) {
    /* rows drawn by a hash, as the sampler's indices are */
    const int q = s.width / 4;
    for (int i = b * NT + t; i < s.rows * q; i += nb * NT) {
      const int r = i / q, c = (i % q) * 4;
      const unsigned h = (unsigned)r * 2654435761u + 12345u;
      const size_t row = h % 100000u;
      *(float4 *)(s.dst + (size_t)r * s.width + c) = __ldcg((const float4 *)(s.src + row * s.width + c));
    }
    return;
  }
  if (s.kind == ST_ROWLOSS) {
    /* a warp a row: softmax of the row's first 51, minus one-hot, into dst */
    const int w = b * (NT / 32) + t / 32, lane = t & 31;
    for (int r = w; r < s.rows; r += nb * (NT / 32)) {
      const float *x = s.src + (size_t)r * s.width;
      float v0 = lane < 51 ? x[lane] : -1e30f, v1 = lane + 32 < 51 ? x[lane + 32] : -1e30f;
      float mx = fmaxf(v0, v1);
      for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      float e0 = __expf(v0 - mx), e1 = __expf(v1 - mx), z = e0 + e1;
      for (int o = 16; o; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
      for (int c = lane; c < s.width; c += 32) {
        const float p = c < 51 ? (c < 32 ? e0 : e1) / z : 0.01f * x[c];
        s.dst[(size_t)r * s.width + c] = p - (c == r % 51 ? 1.f : 0.f);
      }
    }
    return;
  }
  if (s.kind == ST_ADAM) {
    /* every block sums the weight-gradient tiles' squares in one order */
    float n2 = 0.f;
    for (int i = t; i < s.nsq; i += NT) n2 += s.sqs[i];
    n2 = block_sum(n2, red);
    const float clip = fminf(1.f, 10.f / (sqrtf(n2) + 1e-6f));
    for (int i = b * NT + t; i < s.nparam; i += nb * NT) {
      const float gr = s.grad[i] * clip, mm = 0.9f * s.m[i] + 0.1f * gr;
      const float vv = 0.999f * s.v[i] + 0.001f * gr * gr;
      const float w = s.w[i] * (1.f - 1e-6f) - 1e-6f * mm / (sqrtf(vv) + 1e-8f);
      s.m[i] = mm;
      s.v[i] = vv;
      s.w[i] = w;
      s.tgt[i] = 0.995f * s.tgt[i] + 0.005f * w;
    }
    return;
  }
  /* GEMM stage: items across its GEMMs, block-strided */
  int base = 0;
  float sq = 0.f;
  for (int gi = 0; gi < s.ng; gi++) {
    const Gemm &g = s.g[gi];
    for (int it = b - base; it < g.items; it += nb) {
      if (it < 0) continue;
      if (!(prefetched && gi == 0 && it == b)) load_b(g, it, Bs);
      load_a(g, it, As);
      cp_wait_all();
      __syncthreads();
      if (it == b) stamp(si, 1, sp);
      compute(g, it, As, Bs, red, &sq);
      if (it == b) stamp(si, 2, sp);
      if (g.sq) {
        sq = block_sum(sq, red + NT * 16);
        if (t == 0) g.sq[it] = sq;
        sq = 0.f;
      }
    }
    base += g.items;
  }
}

/* stages [s0, s1) for `steps` steps; between stages a grid barrier when the
 * launch is cooperative (s1 - s0 > 1 or steps > 1), before it the next
 * stage's first weight tile may be prefetched */
__global__ void __launch_bounds__(NT, 1) chain_kernel(int s0, int s1, int steps, int prefetch) {
  extern __shared__ __align__(16) float sm[];
  __shared__ Plan plan; /* the stage descriptors read from shared memory, not the constant cache */
  cg::grid_group grid = cg::this_grid();
  /* the stages this launch runs, to shared memory (a graph node copies its one stage) */
  for (int i = threadIdx.x; i < (int)((s1 - s0) * sizeof(Stage) / 4); i += NT)
    ((int *)&plan.s[s0])[i] = ((const int *)&g_plan.s[s0])[i];
  __syncthreads();
  int pre = 0;
  unsigned long long *const gsp = g_stamp;
  for (int st = 0; st < steps; st++) {
    unsigned long long *const sp = st == steps - 1 ? gsp : NULL;
    for (int si = s0; si < s1; si++) {
      stamp(si, 0, sp);
      run_stage(plan.s[si], sm, pre, si, sp);
      stamp(si, 3, sp);
      pre = 0;
      if (si + 1 < s1 || st + 1 < steps) {
        const Stage &n = plan.s[si + 1 < s1 ? si + 1 : s0];
        int gi = 0, it = -1;
        if (prefetch && n.kind == ST_GEMM) it = first_item(n, blockIdx.x, &gi);
        if (it >= 0 && gi == 0 && n.g[0].static_b) {
          load_b(n.g[0], it, sm + AS_CAP);
          pre = 1;
        }
        grid.sync();
      }
    }
  }
}

/* ---- host ---- */
static float *dev_rand(size_t n, float scale, unsigned seed) {
  float *h = (float *)malloc(n * sizeof(float)), *d;
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    h[i] = scale * ((float)(seed >> 8) / 16777216.0f - 0.5f);
  }
  CK(cudaMalloc(&d, n * sizeof(float)));
  CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static int nblocks;

/* the tile with the least work for the busiest block, given `share` blocks */
static void pick_tile(Gemm *g, int share) {
  long best = -1;
  for (int rt = 4; rt <= 256; rt *= 2)
    for (int ct = 4; ct <= 64; ct *= 2) {
      if (g->R % rt || g->N % ct || rt * ct < 16 || rt * ct > 16 * NT) continue;
      if (g->K * (rt + 4) > AS_CAP || g->K * ct > BS_CAP) continue;
      /* a tile costs ~1,500 cycles of loads and barriers plus its FMAs at
       * ~64 a cycle an SM */
      const int items = (g->R / rt) * (g->N / ct);
      const long cost = (long)((items + share - 1) / share) * (1500 + (long)rt * ct * g->K / 64);
      if (best < 0 || cost < best) {
        best = cost;
        g->Rt = rt;
        g->Ct = ct;
        g->items = items;
      }
    }
  if (best < 0) {
    fprintf(stderr, "no tile for R=%d K=%d N=%d\n", g->R, g->K, g->N);
    exit(1);
  }
}

static Gemm gemm(const float *A, int lda, int tA, const float *B, int ldb, const float *bias, float *C,
                 int ldc, int R, int K, int N, int relu, int static_b) {
  return Gemm{A, B, bias, C, NULL, lda, ldb, ldc, tA, R, K, N, relu, 0, 0, 0, static_b};
}

static Stage gemm_stage(int ng, const Gemm *gs) {
  Stage s{};
  s.kind = ST_GEMM, s.ng = ng;
  double tot = 0;
  for (int i = 0; i < ng; i++) tot += (double)gs[i].R * gs[i].K * gs[i].N;
  for (int i = 0; i < ng; i++) {
    s.g[i] = gs[i];
    int share = (int)(nblocks * (double)gs[i].R * gs[i].K * gs[i].N / tot);
    pick_tile(&s.g[i], share < 1 ? 1 : share);
  }
  return s;
}

static const char *names[MAXS];

/* appends stage st, named, to the plan */
static void add(Plan *p, const char *name, Stage st) {
  names[p->ns] = name;
  p->s[p->ns++] = st;
}

/* a stage of one GEMM */
static Stage one(Gemm g) { return gemm_stage(1, &g); }

/* a row stage (kind ST_GATHER, ST_ROWLOSS, ST_EMPTY): rows of width from src into dst */
static Stage rows_stage(int kind, const float *src, float *dst, int rows, int width) {
  Stage s{};
  s.kind = kind, s.src = src, s.dst = dst, s.rows = rows, s.width = width;
  return s;
}

static double run(Plan *p, int steps, int mode) {
  /* mode 0: one kernel node a stage in a graph; 1: persistent; 2: persistent + prefetch */
  const size_t smem = SMEM_FLOATS * sizeof(float);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float ms = 0;
  if (mode == 0) {
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int si = 0; si < p->ns; si++)
      chain_kernel<<<nblocks, NT, smem, st>>>(si, si + 1, 1, 0);
    CK(cudaStreamEndCapture(st, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    for (int i = 0; i < 20; i++) CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < steps; i++) CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(gr));
  } else {
    int s0 = 0, s1 = p->ns, pf = mode == 2, one = 20;
    void *a0[] = {&s0, &s1, &one, &pf};
    CK(cudaLaunchCooperativeKernel((void *)chain_kernel, nblocks, NT, a0, smem, st));
    void *a1[] = {&s0, &s1, &steps, &pf};
    CK(cudaEventRecord(e0, st));
    CK(cudaLaunchCooperativeKernel((void *)chain_kernel, nblocks, NT, a1, smem, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
  }
  CK(cudaGetLastError());
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaStreamDestroy(st));
  return 1000.0 * ms / steps;
}

/* the last step's stamps g4 [stage][4][block] (stage start, tile loaded,
 * tile computed, stage work done), in µs from each stage's first barrier
 * exit; a stage's whole time with its barrier is block 0's start to start */
static void print_stamps(const Plan *p, const unsigned long long *g4) {
  static unsigned long long st4[MAXS * 4 * 1024];
  const int n = p->ns;
  CK(cudaMemcpy(st4, g4, (size_t)MAXS * 4 * nblocks * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  printf("    last step, us from the stage's first barrier exit: exits (first..last) | loaded (block 0, max) | "
         "computed (block 0, max) | work done (max) | the stage with its barrier (block 0)\n");
  for (int i = 0; i < n; i++) {
    const unsigned long long *x = st4 + (size_t)i * 4 * nblocks;
    unsigned long long t0 = ~0ull, e1 = 0, l1 = 0, c1 = 0, d1 = 0;
    for (int b = 0; b < nblocks; b++) t0 = x[b] < t0 ? x[b] : t0;
    for (int b = 0; b < nblocks; b++) {
      e1 = x[b] > e1 ? x[b] : e1;
      d1 = x[3 * nblocks + b] > d1 ? x[3 * nblocks + b] : d1;
      if (x[nblocks + b] >= t0 && x[nblocks + b] > l1) l1 = x[nblocks + b];
      if (x[2 * nblocks + b] >= t0 && x[2 * nblocks + b] > c1) c1 = x[2 * nblocks + b];
    }
    printf("    %-20s exits 0..%5.2f", names[i], (e1 - t0) / 1000.0);
    if (p->s[i].kind == ST_GEMM)
      printf(" | loaded %5.2f, %5.2f | computed %5.2f, %5.2f", (x[nblocks] - t0) / 1000.0, (l1 - t0) / 1000.0,
             (x[2 * nblocks] - t0) / 1000.0, (c1 - t0) / 1000.0);
    printf(" | done %5.2f", (d1 - t0) / 1000.0);
    if (i + 1 < n) printf(" | %6.2f", (st4[(size_t)(i + 1) * 4 * nblocks] - x[0]) / 1000.0);
    printf("\n");
  }
}

int main(int argc, char **argv) {
  const char *bl = argc > 1 ? argv[1] : "64,256";
  const int steps = argc > 2 ? atoi(argv[2]) : 300;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  nblocks = prop.multiProcessorCount;
  printf("device: %s (sm_%d%d, %d SMs), %d threads a block, one block an SM\n", prop.name, prop.major,
         prop.minor, nblocks, NT);
  CK(cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int)(SMEM_FLOATS * sizeof(float))));
  char buf[256];
  snprintf(buf, sizeof buf, "%s", bl);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    const int B = atoi(tok), R3 = 3 * B;
    float *replay = dev_rand((size_t)100000 * 64, 2.f, 1);
    float *X0 = dev_rand((size_t)R3 * 64, 1.f, 2), *H1 = dev_rand((size_t)R3 * 256, 1.f, 3);
    float *H2 = dev_rand((size_t)R3 * 256, 1.f, 4), *H3 = dev_rand((size_t)R3 * 512, 1.f, 5);
    float *O = dev_rand((size_t)R3 * 816, 1.f, 6), *dO = dev_rand((size_t)B * 816, 1.f, 7);
    float *dH3 = dev_rand((size_t)B * 512, 1.f, 8), *dH2 = dev_rand((size_t)B * 256, 1.f, 9);
    float *dH1 = dev_rand((size_t)B * 256, 1.f, 10);
    const int np = 64 * 256 + 256 * 256 + 256 * 512 + 128 * 816;
    float *w = dev_rand(np, 0.1f, 11), *grad = dev_rand(np, 0.01f, 12), *m = dev_rand(np, 0.001f, 13);
    float *v = dev_rand(np, 0.001f, 14), *tgt = dev_rand(np, 0.1f, 15), *sqs = dev_rand(4096, 0.f, 16);
    float *W1 = w, *W2 = W1 + 64 * 256, *W3 = W2 + 256 * 256, *W4 = W3 + 256 * 512;
    float *G1 = grad, *G2 = G1 + 64 * 256, *G3 = G2 + 256 * 256, *G4 = G3 + 256 * 512;
    float *W4t = dev_rand(204 * 512, 0.1f, 17), *W3t = dev_rand(512 * 256, 0.1f, 18);
    float *W2t = dev_rand(256 * 256, 0.1f, 19), *bias = dev_rand(1024, 0.1f, 20);
    Plan p;
    memset(&p, 0, sizeof p);
    add(&p, "sample+gather", rows_stage(ST_GATHER, replay, X0, R3, 64));
    add(&p, "empty", rows_stage(ST_EMPTY, NULL, NULL, 0, 0));
    add(&p, "F1 64->256", one(gemm(X0, 64, 0, W1, 256, bias, H1, 256, R3, 64, 256, 1, 1)));
    add(&p, "F2 256->256", one(gemm(H1, 256, 0, W2, 256, bias, H2, 256, R3, 256, 256, 1, 1)));
    add(&p, "F3 256->512", one(gemm(H2, 256, 0, W3, 512, bias, H3, 512, R3, 256, 512, 1, 1)));
    add(&p, "F4 128->816", one(gemm(H3, 512, 0, W4, 816, bias, O, 816, R3, 128, 816, 0, 1)));
    add(&p, "row loss stand-in", rows_stage(ST_ROWLOSS, O, dO, B, 816));
    add(&p, "B1 (204)->512", one(gemm(dO, 816, 0, W4t, 512, NULL, dH3, 512, B, 204, 512, 0, 1)));
    add(&p, "B2 512->256", one(gemm(dH3, 512, 0, W3t, 256, NULL, dH2, 256, B, 512, 256, 0, 1)));
    add(&p, "B3 256->256", one(gemm(dH2, 256, 0, W2t, 256, NULL, dH1, 256, B, 256, 256, 0, 1)));
    const Gemm g[4] = {gemm(X0, 64, 1, dH1, 256, NULL, G1, 256, 64, B, 256, 0, 0),
                       gemm(H1, 256, 1, dH2, 256, NULL, G2, 256, 256, B, 256, 0, 0),
                       gemm(H2, 256, 1, dH3, 512, NULL, G3, 512, 256, B, 512, 0, 0),
                       gemm(H3, 512, 1, dO, 816, NULL, G4, 816, 128, B, 816, 0, 0)};
    Stage dw = gemm_stage(4, g);
    int nsq = 0;
    for (int i = 0; i < 4; i++) {
      dw.g[i].sq = sqs + nsq;
      nsq += dw.g[i].items;
    }
    add(&p, "dW (4 layers)", dw);
    Stage s{};
    s.kind = ST_ADAM, s.w = w, s.grad = grad, s.m = m, s.v = v, s.tgt = tgt;
    s.sqs = sqs, s.nsq = nsq, s.nparam = np;
    add(&p, "norm+AdamW+target", s);
    const int n = p.ns;
    CK(cudaMemcpyToSymbol(g_plan, &p, sizeof p));
    printf("B=%d: %d stages\n", B, n);
    for (int i = 0; i < n; i++) {
      if (p.s[i].kind != ST_GEMM) continue;
      printf("  %-18s", names[i]);
      for (int j = 0; j < p.s[i].ng; j++)
        printf(" [%dx%dx%d tile %dx%d, %d items]", p.s[i].g[j].R, p.s[i].g[j].K, p.s[i].g[j].N,
               p.s[i].g[j].Rt, p.s[i].g[j].Ct, p.s[i].g[j].items);
      printf("\n");
    }
    const char *mn[] = {"graph, a node a stage", "persistent, grid.sync", "persistent + weight prefetch"};
    unsigned long long *g4, *nul = NULL;
    CK(cudaMalloc(&g4, (size_t)MAXS * 4 * nblocks * sizeof(unsigned long long)));
    CK(cudaMemset(g4, 0, (size_t)MAXS * 4 * nblocks * sizeof(unsigned long long)));
    for (int rep = 0; rep < 2; rep++)
      for (int mode = 0; mode < 3; mode++) {
        CK(cudaMemcpyToSymbol(g_stamp, (mode == 2 && rep == 1) ? &g4 : &nul, sizeof g4));
        const double us = run(&p, steps, mode);
        printf("B=%4d %-30s %8.1f us/step\n", B, mn[mode], us);
        if (mode == 2 && rep == 1) {
          print_stamps(&p, g4);
        }
      }
    CK(cudaFree(g4));
    void *all[] = {replay, X0, H1, H2, H3, O, dO, dH3, dH2, dH1, w, grad, m, v, tgt, sqs, W4t, W3t, W2t, bias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CK(cudaFree(all[i]));
  }
  return 0;
}
