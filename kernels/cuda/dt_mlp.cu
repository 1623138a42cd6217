/*
 * dt_mlp.cu — the second half of a DT block in one launch (TF32, sm_90a):
 * LN2 of xm, the MLP (u = h2 W_1^T + b_1; gd = gelu'(u) and gl = gelu(u),
 * kept for the backward; X_{l+1} = xm + gl W_2^T + b_2) and the next
 * block's LN1 of X_{l+1}, where the forward otherwise runs four launches
 * (docs/learner.md §16, "The MLP in one launch").
 *
 * A block takes 64 tokens (wgmma's m64) and every column of them, so each
 * LayerNorm has its whole row in the block and u never leaves it but for
 * gd and gl. LN2 writes h2 (TF32-rounded, dt_pre) into shared memory in
 * the 128-byte swizzle as wgmma's A operand (four 32-k boxes); then for
 * each 64 columns of F, in order: u's 64 x 64 tile on m64n64k8 over E's
 * four boxes, its GELU epilogue (gd, gl to global memory, gl rounded into
 * a two-box A tile), and gl's 64 k of the product with W_2, summed into
 * two 64 x 64 accumulators (X_{l+1}'s columns 0-63 and 64-127) that live
 * across the chunks. W_1's and W_2's boxes (32 k x 64 rows, 8 KB) come by
 * TMA through a ring of stages (DTM_NS) in the order they are used; the
 * ring's first boxes are asked for before the block waits for the kernel
 * before it (the weights were written before that kernel began: pdl.cuh).
 * The epilogue stages X_{l+1}'s rows in shared memory for LN1.
 *
 * Where a launch's blocks would leave half the SMs idle (a lone step at
 * batch 64: 60 blocks), it runs as a pair of blocks a 64 tokens instead
 * (PAIR: a thread-block cluster of two): block 0 takes F's columns 0-255 as
 * above, block 1 makes u, gd and gl of columns 256-511 meanwhile and keeps
 * gl's four tiles; block 0 then hands its two X_{l+1} accumulators to
 * block 1 in distributed shared memory, and block 1 goes on summing its
 * 256 k into them and finishes as above: the same chunks in the same order
 * into the same sums, so the same bits, with the GELU epilogues of the
 * two halves side by side on two SMs.
 *
 * The same bits as the four launches (dt_ln_kernel, the TMA tile's W_1
 * and W_2 products, dt_ln_kernel): the LayerNorms are dt_ln_row_r's
 * arithmetic, u's tile is the TMA tile's four m64n64k8 a chunk over the
 * same rounded operands, X_{l+1}'s tiles sum W_2's 32-k chunks in the same
 * order, and each epilogue is dt_ep_storev's arithmetic (test-gpu-dt's
 * same_step, mlp 0 against 1). A population's members are the maps' third
 * dimension and block z member z.
 */
#include <cuda.h> /* CUtensorMap */
#include <cuda_runtime.h>
#include <stdint.h>

#include <cooperative_groups.h>

#include "dqnd_build_config.h"
#include "dt_cuda.cuh"
#include "wgmma.cuh"

#define DTM_BM 64                                  /* tokens a block */
#define DTM_E 128                                  /* the embedding the launch takes */
#define DTM_F (4 * DTM_E)                          /* the MLP's width */
#define DTM_BOX 8192                               /* bytes: 64 rows x 32 k, one TMA box, one wgmma operand */
/* the weights' ring, in boxes: two chunks' worth in one block a 64
 * tokens, the rest of the opt-in in the pair (a stage's refill waits for
 * its box's use, and each chunk uses eight: a ring shorter than a chunk
 * left every chunk waiting for two L2 round trips, DEVICE_NOTES.md item
 * 234) */
#define DTM_NS(PAIR) ((PAIR) ? 11 : 16)
#define DTM_NB (DTM_F / 64 * 8)                    /* boxes a block: a chunk's 4 of W_1 and 4 of W_2 (a pair's: half) */
#define DTM_SLD 136                                /* floats between X_{l+1}'s staged rows (no bank conflicts) */
/* shared memory: h2's 4 boxes, gl's 2 (a pair's block 1: 4 chunks' 8, then
 * the handed-over accumulators' 4), the ring, slack, the mbarriers */
#define DTM_GLB(PAIR) ((PAIR) ? 8 : 2)
#define DTM_RING(PAIR) (4 + DTM_GLB(PAIR) + ((PAIR) ? 4 : 0))
#define DTM_SMEM(PAIR) ((DTM_RING(PAIR) + DTM_NS(PAIR)) * DTM_BOX + 1024 + 8 * DTM_NS(PAIR))

/* the launch's buffers (member 0's; NULL g1n: no LN1 after, the last block) */
struct dtm_args {
  const float *xm, *g2, *be2, *b1, *b2, *g1n, *be1n;
  float *xh2, *h2, *r2, *gd, *gl, *Xn, *xh1n, *h1n, *r1n;
  int M;
};

// kernels

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* the byte of (row r, k c) in a run of 32-k boxes of 64 rows in the
 * 128-byte swizzle (wgmma.cuh): box c / 32, 16-byte piece (c % 32) / 4
 * moved by r % 8 */
static __device__ __forceinline__ uint32_t dtm_sw(int r, int c) {
  return (uint32_t)((c >> 5) * DTM_BOX + r * 128 + ((((c & 31) >> 2) ^ (r & 7)) << 4) + (c & 3) * 4);
}
/* a block's box b into its stage, in the order the block uses them: box i
 * of chunk j (W_1's rows 64 j.. in k boxes i 0-3, then W_2's k 64 j + 32
 * kk.. for its rows 0-63 and 64-127, i = 4 + 2 kk + h); chunk after chunk
 * (b = 8 j + i), or in a pair's block 1 (hi) the W_1 boxes of chunks 4-7,
 * then their W_2 boxes */
template <int NS>
static __device__ __forceinline__ void dtm_issue(uint32_t ring, uint32_t bars, const CUtensorMap *m1,
                                                 const CUtensorMap *m2, int b, int z, int hi) {
  const int s = b % NS, j = hi ? 4 + ((b & 15) >> 2) : b >> 3, i = hi ? (b & 3) + (b & 16) / 4 : b & 7;
  const uint32_t dst = ring + (uint32_t)s * DTM_BOX, bar = bars + 8 * s;
  mbar_expect_tx(bar, DTM_BOX);
  if (i < 4)
    tma_load_3d(dst, m1, 32 * i, 64 * j, z, bar);
  else
    tma_load_3d(dst, m2, 64 * j + 32 * ((i - 4) >> 1), 64 * ((i - 4) & 1), z, bar);
}
template <int NS>
static __device__ __forceinline__ void dtm_wait(uint32_t bars, int b) {
  while (!mbar_try(bars + 8 * (b % NS), (unsigned)(b / NS) & 1u)) {
  }
}
/* u's 64 x 64 tile of chunk j (its W_1 boxes b0 .. b0 + 3), its GELU
 * epilogue (dt_ep_storev's: u = v + b_1; gd, gl rounded) and gl's tile at
 * g for W_2; the stages refilled with the boxes NS on */
template <int NS>
static __device__ __forceinline__ void dtm_u(uint32_t sA, uint32_t ring, uint32_t bars, unsigned char *g, int j,
                                             int b0, int nb, int hi, const CUtensorMap *m1, const CUtensorMap *m2,
                                             int z, int m0, int M, const float *b1, float *gd, float *gl) {
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, F = DTM_F;
  float du[32];
#pragma unroll
  for (int i = 0; i < 32; i++) du[i] = 0.0f;
  for (int i = 0; i < 4; i++) dtm_wait<NS>(bars, b0 + i);
  wgmma_fence();
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const unsigned long long da = wg_desc(sA + i * DTM_BOX);
    const unsigned long long db = wg_desc(ring + (uint32_t)((b0 + i) % NS) * DTM_BOX);
#pragma unroll
    for (int q = 0; q < 4; q++) wgmma_tf32_m64n64k8(du, da + 2 * q, db + 2 * q);
  }
  wgmma_commit();
  wgmma_wait<0>();
  __syncthreads(); /* every warp past these stages before they are refilled */
  if (tid == 0)
    for (int i = 0; i < 4; i++)
      if (b0 + i + NS < nb) dtm_issue<NS>(ring, bars, m1, m2, b0 + i + NS, z, hi);
#pragma unroll
  for (int e = 0; e < 32; e += 2) {
    const int r = 16 * w + lane / 4 + 8 * (e % 4 / 2), c = 8 * (e / 4) + 2 * (lane % 4), n = 64 * j + c, m = m0 + r;
    const float2 bb = *reinterpret_cast<const float2 *>(b1 + n);
    float v0 = du[e], v1 = du[e + 1], g0, g1;
    v0 += bb.x, v1 += bb.y;
    const float d0 = dt_gelu_both(v0, &g0), d1 = dt_gelu_both(v1, &g1);
    g0 = dt_tf32(g0), g1 = dt_tf32(g1);
    if (m < M) {
      *reinterpret_cast<float2 *>(gd + (size_t)m * F + n) = make_float2(d0, d1);
      *reinterpret_cast<float2 *>(gl + (size_t)m * F + n) = make_float2(g0, g1);
    }
    *reinterpret_cast<float2 *>(g + dtm_sw(r, c)) = make_float2(g0, g1);
  }
}
/* X_{l+1}'s two tiles += gl's 64 k of a chunk (its tile at sg, its W_2
 * boxes b0 .. b0 + 3), 32 at a time; the stages refilled */
template <int NS>
static __device__ __forceinline__ void dtm_y(float (&dy)[2][32], uint32_t sg, uint32_t ring, uint32_t bars, int b0,
                                             int nb, int hi, const CUtensorMap *m1, const CUtensorMap *m2, int z) {
  for (int i = 0; i < 4; i++) dtm_wait<NS>(bars, b0 + i);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 2; kk++) {
    const unsigned long long da = wg_desc(sg + kk * DTM_BOX);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const unsigned long long db = wg_desc(ring + (uint32_t)((b0 + 2 * kk + h) % NS) * DTM_BOX);
#pragma unroll
      for (int q = 0; q < 4; q++) wgmma_tf32_m64n64k8(dy[h], da + 2 * q, db + 2 * q);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  __syncthreads(); /* the stages and gl's tile free */
  if (threadIdx.x == 0)
    for (int i = 0; i < 4; i++)
      if (b0 + i + NS < nb) dtm_issue<NS>(ring, bars, m1, m2, b0 + i + NS, z, hi);
}
#endif

template <int PAIR>
__global__ void __launch_bounds__(128, 2) dt_mlp_kernel(const __grid_constant__ CUtensorMap m1,
                                                        const __grid_constant__ CUtensorMap m2, dtm_args a,
                                                        cuda_pz_t pz) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ float4 dtm_sh[];
  constexpr int NS = DTM_NS(PAIR);
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(dtm_sh), base = (raw + 1023u) & ~1023u;
  unsigned char *sm = reinterpret_cast<unsigned char *>(dtm_sh) + (base - raw);
  const uint32_t sA = base, sG = base + 4 * DTM_BOX, ring = base + DTM_RING(PAIR) * DTM_BOX;
  const uint32_t bars = ring + NS * DTM_BOX;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, z = (int)blockIdx.z, m0 = (int)blockIdx.y * DTM_BM;
  const int M = a.M, E = DTM_E, hi = PAIR ? (int)(blockIdx.x & 1u) : 0, nb = PAIR ? DTM_NB / 2 : DTM_NB;
  if (tid == 0) {
    for (int s = 0; s < NS; s++) mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (tid == 0)
    for (int b = 0; b < NS; b++) dtm_issue<NS>(ring, bars, &m1, &m2, b, z, hi);
  if (PAIR) pair_arrive_relaxed(); /* this block started */
  pdl_wait();
  const long long mo = (long long)z * pz.stride;
  const float *xm = dt_off(a.xm, mo), *b1 = dt_off(a.b1, mo), *b2 = dt_off(a.b2, mo);
  float *gd = dt_off(a.gd, mo), *gl = dt_off(a.gl, mo);
  {
    /* LN2 (both blocks of a pair: the same bits twice): warp w's 16 rows,
     * eight at a time with all their loads in flight */
    const float *g2 = dt_off(a.g2, mo), *be2 = dt_off(a.be2, mo);
    float *xh2 = dt_off(a.xh2, mo), *h2 = dt_off(a.h2, mo), *r2 = dt_off(a.r2, mo);
    float g[4], be[4];
    dt_ln_load<4>(g2, E, lane, g), dt_ln_load<4>(be2, E, lane, be);
#pragma unroll 1
    for (int h = 0; h < 2; h++) {
      float x[8][4];
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const int m = m0 + 16 * w + 8 * h + i;
        if (m < M)
          dt_ln_load<4>(xm + (size_t)m * E, E, lane, x[i]);
        else
#pragma unroll
          for (int q = 0; q < 4; q++) x[i][q] = 0.0f;
      }
      float rs[8];
      dt_ln_rows_core<4, 8>(x, g, be, E, lane, [&](int i, int e, float hx, float y) {
        const int r = 16 * w + 8 * h + i, m = m0 + r;
        if (m < M) xh2[(size_t)m * E + e] = hx, h2[(size_t)m * E + e] = y;
        *reinterpret_cast<float *>(sm + dtm_sw(r, e)) = m < M ? y : 0.0f;
      }, rs, 1);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const int m = m0 + 16 * w + 8 * h + i;
        if (lane == 0 && m < M) r2[m] = rs[i];
      }
    }
  }
  fence_proxy_async(); /* h2's tile visible to wgmma */
  __syncthreads();
  float dy[2][32];
#pragma unroll
  for (int i = 0; i < 32; i++) dy[0][i] = 0.0f, dy[1][i] = 0.0f;
  if (!hi) {
    /* chunk after chunk: u's tile, its GELU, gl's 64 k into X_{l+1}'s tiles */
#pragma unroll 1
    for (int j = 0; j < nb / 8; j++) {
      dtm_u<NS>(sA, ring, bars, sm + 4 * DTM_BOX, j, 8 * j, nb, 0, &m1, &m2, z, m0, M, b1, gd, gl);
      fence_proxy_async(); /* gl's tile visible to wgmma */
      __syncthreads();
      dtm_y<NS>(dy, sG, ring, bars, 8 * j + 4, nb, 0, &m1, &m2, z);
    }
  }
  if constexpr (PAIR) {
    namespace cg = cooperative_groups;
    float4 *hand = reinterpret_cast<float4 *>(sm + 12 * DTM_BOX); /* block 1's: X_{l+1}'s sums so far */
    if (!hi) {
      /* hand the sums over (each thread's 64 to the same thread there) */
      pair_wait(); /* both started: block 1's shared memory is there */
      float4 *to = cg::this_cluster().map_shared_rank(hand, 1);
#pragma unroll
      for (int q = 0; q < 16; q++)
        to[q * 128 + tid] = make_float4(dy[q / 8][4 * (q % 8)], dy[q / 8][4 * (q % 8) + 1],
                                        dy[q / 8][4 * (q % 8) + 2], dy[q / 8][4 * (q % 8) + 3]);
      pair_arrive();
      pair_wait(); /* block 1 arrived to read them (it reads none of this block's shared memory) */
      pdl_go();
      return;
    }
    /* block 1: chunks 4-7's u, gd and gl meanwhile, gl's tiles kept */
#pragma unroll 1
    for (int j = 0; j < 4; j++)
      dtm_u<NS>(sA, ring, bars, sm + (4 + 2 * j) * DTM_BOX, 4 + j, 4 * j, nb, 1, &m1, &m2, z, m0, M, b1, gd, gl);
    fence_proxy_async(); /* gl's tiles visible to wgmma, */
    __syncthreads();     /* every thread's (the cluster's relaxed arrival orders no writes) */
    pair_wait();
    pair_arrive_relaxed();
    pair_wait(); /* block 0's sums in hand */
#pragma unroll
    for (int q = 0; q < 16; q++) {
      const float4 v = hand[q * 128 + tid];
      dy[q / 8][4 * (q % 8)] = v.x, dy[q / 8][4 * (q % 8) + 1] = v.y;
      dy[q / 8][4 * (q % 8) + 2] = v.z, dy[q / 8][4 * (q % 8) + 3] = v.w;
    }
#pragma unroll 1
    for (int j = 0; j < 4; j++) dtm_y<NS>(dy, sG + 2 * j * DTM_BOX, ring, bars, 16 + 4 * j, nb, 1, &m1, &m2, z);
  }
  pdl_go();
  /* X_{l+1} = v + b_2 + xm (dt_wg_epilogue_pf's order), staged for LN1
   * over h2's and gl's tiles (free: every wgmma is done) */
  float *Xn = dt_off(a.Xn, mo), *stg = reinterpret_cast<float *>(sm);
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float2 rv[16], bv[8];
#pragma unroll
    for (int p = 0; p < 16; p++) {
      const int m = m0 + 16 * w + lane / 4 + 8 * (p % 2), c = 64 * h + 8 * (p / 2) + 2 * (lane % 4);
      rv[p] = m < M ? *reinterpret_cast<const float2 *>(xm + (size_t)m * E + c) : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int q = 0; q < 8; q++) bv[q] = *reinterpret_cast<const float2 *>(b2 + 64 * h + 8 * q + 2 * (lane % 4));
#pragma unroll
    for (int p = 0; p < 16; p++) {
      const int r = 16 * w + lane / 4 + 8 * (p % 2), m = m0 + r, c = 64 * h + 8 * (p / 2) + 2 * (lane % 4);
      float2 v = make_float2(dy[h][2 * p], dy[h][2 * p + 1]);
      v.x += bv[p / 2].x, v.y += bv[p / 2].y;
      v.x += rv[p].x, v.y += rv[p].y;
      if (m < M) *reinterpret_cast<float2 *>(Xn + (size_t)m * E + c) = v;
      *reinterpret_cast<float2 *>(stg + r * DTM_SLD + c) = v;
    }
  }
  if (!a.g1n) return;
  __syncwarp(); /* warp w staged its own 16 rows */
  const float *g1n = dt_off(a.g1n, mo), *be1n = dt_off(a.be1n, mo);
  float *xh1n = dt_off(a.xh1n, mo), *h1n = dt_off(a.h1n, mo), *r1n = dt_off(a.r1n, mo);
  float g[4], be[4];
  dt_ln_load<4>(g1n, E, lane, g), dt_ln_load<4>(be1n, E, lane, be);
#pragma unroll 1
  for (int h = 0; h < 2; h++) { /* eight rows at a time */
    float x[8][4], rs[8];
#pragma unroll
    for (int i = 0; i < 8; i++) dt_ln_load<4>(stg + (16 * w + 8 * h + i) * DTM_SLD, E, lane, x[i]);
    dt_ln_rows_core<4, 8>(x, g, be, E, lane, [&](int i, int e, float hx, float y) {
      const int m = m0 + 16 * w + 8 * h + i;
      if (m < M) xh1n[(size_t)m * E + e] = hx, h1n[(size_t)m * E + e] = y;
    }, rs, 1);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int m = m0 + 16 * w + 8 * h + i;
      if (lane == 0 && m < M) r1n[m] = rs[i];
    }
  }
#else
  (void)m1, (void)m2, (void)a, (void)pz;
  __trap(); /* never launched: dt_mlp_setup() is 0 without sm_90a code */
#endif
}

// launchers

int dt_mlp_setup(int *pair) {
  *pair = 0;
#if DQN_SM90A
  if (!dt_wg_setup()) return 0; /* an sm_90 device */
  if (cudaFuncSetAttribute(dt_mlp_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, DTM_SMEM(0)) != cudaSuccess) {
    (void)cudaGetLastError(); /* the four launches take the forward: no error left pending */
    return 0;
  }
  /* the pair: clusters of two such blocks placed on this device */
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = 2, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(2, 1, 1), cfg.blockDim = dim3(128), cfg.dynamicSmemBytes = DTM_SMEM(1), cfg.attrs = at;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaFuncSetAttribute(dt_mlp_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, DTM_SMEM(1)) ==
          cudaSuccess &&
      cudaOccupancyMaxActiveClusters(&clusters, dt_mlp_kernel<1>, &cfg) == cudaSuccess && clusters > 0)
    *pair = 1;
  (void)cudaGetLastError(); /* no clusters: the one-block form alone, no error left pending */
  return 1;
#else
  return 0;
#endif
}

int dt_mlp_takes(const cuda_dt_t *d) { return d->mlp && dt_pre(d) && d->L.E == DTM_E && d->pz.stride % 16 == 0; }

/* the pair where a launch of one block a 64 tokens (members included)
 * would fill at most half the SMs (a lone step at batch 64), so that two
 * blocks a 64 tokens still run at once (mlp_form: the tests' forced form) */
int dt_mlp_pair(const cuda_dt_t *d) {
  const long long blocks = (long long)(d->B * 3 * d->L.K + DTM_BM - 1) / DTM_BM * d->pz.n;
  if (!d->mlp_pair || d->mlp_form == 0) return 0;
  return d->mlp_form == 1 || 2 * blocks <= d->nsm;
}

int dt_mlp_launch(const cuda_dt_t *d, int l, int *done, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const dt_block_off_t *o = &L->blk[l];
  const int T = d->B * 3 * L->K, E = L->E, F = 4 * E;
  const size_t NE = (size_t)T * E, NF = (size_t)T * F, EE = (size_t)E * E;
  const float *wl = d->wr + (size_t)l * DT_WT_FLOATS * EE, *p = d->p;
  *done = 0;
  if (((uintptr_t)(p + o->m1_b) | (uintptr_t)(p + o->m2_b)) % 8) return 0; /* the epilogues' bias pairs */
  CUtensorMap m1, m2;
  /* W_1 [F][E] and W_2 [E][F], TF32-rounded (dt_pre's wr), in boxes of 32 k x 64 rows */
  if (!dt_tma_map(d->tma, &m1, wl + DT_WT_1 * EE, E, F, E, 32, 64, d->pz.n, d->pz.stride) ||
      !dt_tma_map(d->tma, &m2, wl + DT_WT_2 * EE, F, E, F, 32, 64, d->pz.n, d->pz.stride))
    return 0;
  dtm_args a = {};
  a.xm = d->xm + l * NE, a.g2 = p + o->ln2_w, a.be2 = p + o->ln2_b, a.b1 = p + o->m1_b, a.b2 = p + o->m2_b;
  a.xh2 = d->xh2 + l * NE, a.h2 = d->h2 + l * NE, a.r2 = d->r2 + (size_t)l * T, a.gd = d->gd + l * NF;
  a.gl = d->gl + l * NF, a.Xn = d->X + (size_t)(l + 1) * NE, a.M = T;
  if (l + 1 < L->L) {
    const dt_block_off_t *n = &L->blk[l + 1];
    a.g1n = p + n->ln1_w, a.be1n = p + n->ln1_b, a.xh1n = d->xh1 + (l + 1) * NE, a.h1n = d->h1 + (l + 1) * NE;
    a.r1n = d->r1 + (size_t)(l + 1) * T;
  }
  const unsigned rows = (unsigned)((T + DTM_BM - 1) / DTM_BM);
  if (dt_mlp_pair(d))
    pdl_launch_cluster(dt_mlp_kernel<1>, 2u, dt_grid(d, dim3(2, rows)), 128, DTM_SMEM(1), st, m1, m2, a, d->pz);
  else
    pdl_launch(dt_mlp_kernel<0>, dt_grid(d, dim3(1, rows)), 128, DTM_SMEM(0), st, m1, m2, a, d->pz);
  *done = 1;
  return (int)cudaGetLastError();
}

extern "C" int cuda_dt_mlp_takes(const cuda_dt_t *d) { return dt_mlp_takes(d) ? 1 + dt_mlp_pair(d) : 0; }
