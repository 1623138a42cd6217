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
 * TMA through a ring of DTM_NS stages in the order they are used; the
 * ring's first boxes are asked for before the block waits for the kernel
 * before it (the weights were written before that kernel began: pdl.cuh).
 * The epilogue stages X_{l+1}'s rows in shared memory for LN1.
 *
 * The same bits as the three launches (dt_ln_kernel, the TMA tile's W_1
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

#include "dqnd_build_config.h"
#include "dt_cuda.cuh"
#include "wgmma.cuh"

#define DTM_BM 64                                  /* tokens a block */
#define DTM_E 128                                  /* the embedding the launch takes */
#define DTM_F (4 * DTM_E)                          /* the MLP's width */
#define DTM_BOX 8192                               /* bytes: 64 rows x 32 k, one TMA box, one wgmma operand */
#define DTM_NS 7                                   /* the weights' ring, in boxes: two blocks an SM */
#define DTM_NB (DTM_F / 64 * 8)                    /* boxes a launch: a chunk's 4 of W_1 and 4 of W_2 */
#define DTM_SLD 136                                /* floats between X_{l+1}'s staged rows (no bank conflicts) */
#define DTM_SMEM ((6 + DTM_NS) * DTM_BOX + 1024 + 8 * DTM_NS) /* h2's 4 boxes, gl's 2, the ring, slack, mbarriers */

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
/* box b (of chunk b / 8: W_1's rows 64 j.. in k boxes 0-3, then W_2's k
 * 64 j + 32 kk.. for its rows 0-63 and 64-127) into its stage */
static __device__ __forceinline__ void dtm_issue(uint32_t ring, uint32_t bars, const CUtensorMap *m1,
                                                 const CUtensorMap *m2, int b, int z) {
  const int s = b % DTM_NS, j = b >> 3, i = b & 7;
  const uint32_t dst = ring + (uint32_t)s * DTM_BOX, bar = bars + 8 * s;
  mbar_expect_tx(bar, DTM_BOX);
  if (i < 4)
    tma_load_3d(dst, m1, 32 * i, 64 * j, z, bar);
  else
    tma_load_3d(dst, m2, 64 * j + 32 * ((i - 4) >> 1), 64 * ((i - 4) & 1), z, bar);
}
static __device__ __forceinline__ void dtm_wait(uint32_t bars, int b) {
  while (!mbar_try(bars + 8 * (b % DTM_NS), (unsigned)(b / DTM_NS) & 1u)) {
  }
}
#endif

__global__ void __launch_bounds__(128, 2) dt_mlp_kernel(const __grid_constant__ CUtensorMap m1,
                                                        const __grid_constant__ CUtensorMap m2, dtm_args a,
                                                        cuda_pz_t pz) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ float4 dtm_sh[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(dtm_sh), base = (raw + 1023u) & ~1023u;
  unsigned char *sm = reinterpret_cast<unsigned char *>(dtm_sh) + (base - raw);
  const uint32_t sA = base, sG = base + 4 * DTM_BOX, ring = base + 6 * DTM_BOX, bars = ring + DTM_NS * DTM_BOX;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, z = (int)blockIdx.z, m0 = (int)blockIdx.y * DTM_BM;
  const int M = a.M, E = DTM_E, F = DTM_F;
  if (tid == 0) {
    for (int s = 0; s < DTM_NS; s++) mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (tid == 0)
    for (int b = 0; b < DTM_NS; b++) dtm_issue(ring, bars, &m1, &m2, b, z);
  pdl_wait();
  const long long mo = (long long)z * pz.stride;
  const float *xm = dt_off(a.xm, mo), *b1 = dt_off(a.b1, mo), *b2 = dt_off(a.b2, mo);
  float *gd = dt_off(a.gd, mo), *gl = dt_off(a.gl, mo);
  {
    /* LN2: warp w's 16 rows, eight at a time with all their loads in flight */
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
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const int r = 16 * w + 8 * h + i, m = m0 + r;
        if (m < M) {
          float *hr = h2 + (size_t)m * E;
          const float rs = dt_ln_row_core<4>(x[i], g, be, E, lane, xh2 + (size_t)m * E, [&](int e, float o) {
            hr[e] = o;
            *reinterpret_cast<float *>(sm + dtm_sw(r, e)) = o;
          }, 1);
          if (lane == 0) r2[m] = rs;
        } else {
#pragma unroll
          for (int q = 0; q < 4; q++) *reinterpret_cast<float *>(sm + dtm_sw(r, lane + 32 * q)) = 0.0f;
        }
      }
    }
  }
  fence_proxy_async(); /* h2's tile visible to wgmma */
  __syncthreads();
  float dy[2][32];
#pragma unroll
  for (int i = 0; i < 32; i++) dy[0][i] = 0.0f, dy[1][i] = 0.0f;
#pragma unroll 1
  for (int j = 0; j < DTM_F / 64; j++) {
    /* u's columns 64 j.. over E's four boxes */
    float du[32];
#pragma unroll
    for (int i = 0; i < 32; i++) du[i] = 0.0f;
    for (int i = 0; i < 4; i++) dtm_wait(bars, 8 * j + i);
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int b = 8 * j + i;
      const unsigned long long da = wg_desc(sA + i * DTM_BOX), db = wg_desc(ring + (uint32_t)(b % DTM_NS) * DTM_BOX);
#pragma unroll
      for (int q = 0; q < 4; q++) wgmma_tf32_m64n64k8(du, da + 2 * q, db + 2 * q);
    }
    wgmma_commit();
    wgmma_wait<0>();
    __syncthreads(); /* every warp past these stages before they are refilled */
    if (tid == 0)
      for (int i = 0; i < 4; i++)
        if (8 * j + i + DTM_NS < DTM_NB) dtm_issue(ring, bars, &m1, &m2, 8 * j + i + DTM_NS, z);
    /* the GELU epilogue (dt_ep_storev's: u = v + b_1, gd, gl rounded) and
     * gl's tile for W_2 */
#pragma unroll
    for (int e = 0; e < 32; e += 2) {
      const int r = 16 * w + lane / 4 + 8 * (e % 4 / 2), c = 8 * (e / 4) + 2 * (lane % 4), n = 64 * j + c,
                m = m0 + r;
      const float2 bb = *reinterpret_cast<const float2 *>(b1 + n);
      float v0 = du[e], v1 = du[e + 1], g0, g1;
      v0 += bb.x, v1 += bb.y;
      const float d0 = dt_gelu_both(v0, &g0), d1 = dt_gelu_both(v1, &g1);
      g0 = dt_tf32(g0), g1 = dt_tf32(g1);
      if (m < M) {
        *reinterpret_cast<float2 *>(gd + (size_t)m * F + n) = make_float2(d0, d1);
        *reinterpret_cast<float2 *>(gl + (size_t)m * F + n) = make_float2(g0, g1);
      }
      *reinterpret_cast<float2 *>(sm + 4 * DTM_BOX + dtm_sw(r, c)) = make_float2(g0, g1);
    }
    fence_proxy_async(); /* gl's tile visible to wgmma */
    __syncthreads();
    /* X_{l+1}'s two tiles += gl's 64 k, 32 at a time */
    for (int i = 4; i < 8; i++) dtm_wait(bars, 8 * j + i);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
      const unsigned long long da = wg_desc(sG + kk * DTM_BOX);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int b = 8 * j + 4 + 2 * kk + h;
        const unsigned long long db = wg_desc(ring + (uint32_t)(b % DTM_NS) * DTM_BOX);
#pragma unroll
        for (int q = 0; q < 4; q++) wgmma_tf32_m64n64k8(dy[h], da + 2 * q, db + 2 * q);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    __syncthreads(); /* the stages and gl's tile free */
    if (tid == 0)
      for (int i = 4; i < 8; i++)
        if (8 * j + i + DTM_NS < DTM_NB) dtm_issue(ring, bars, &m1, &m2, 8 * j + i + DTM_NS, z);
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
#pragma unroll 4
  for (int i = 0; i < 16; i++) {
    const int r = 16 * w + i, m = m0 + r;
    if (m >= M) break;
    float x[4];
    dt_ln_load<4>(stg + r * DTM_SLD, E, lane, x);
    float *hr = h1n + (size_t)m * E;
    const float rs =
        dt_ln_row_core<4>(x, g, be, E, lane, xh1n + (size_t)m * E, [hr](int e, float o) { hr[e] = o; }, 1);
    if (lane == 0) r1n[m] = rs;
  }
#else
  (void)m1, (void)m2, (void)a, (void)pz;
  __trap(); /* never launched: dt_mlp_setup() is 0 without sm_90a code */
#endif
}

// launchers

int dt_mlp_setup(void) {
#if DQN_SM90A
  if (!dt_wg_setup()) return 0; /* an sm_90 device */
  if (cudaFuncSetAttribute(dt_mlp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, DTM_SMEM) != cudaSuccess) {
    (void)cudaGetLastError(); /* the three launches take the forward: no error left pending */
    return 0;
  }
  return 1;
#else
  return 0;
#endif
}

int dt_mlp_takes(const cuda_dt_t *d) { return d->mlp && dt_pre(d) && d->L.E == DTM_E && d->pz.stride % 16 == 0; }

int dt_mlp_launch(const cuda_dt_t *d, int l, int *done, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const dt_block_off_t *o = &L->blk[l];
  const int T = d->B * 3 * L->K, E = L->E, F = 4 * E;
  const size_t NE = (size_t)T * E, NF = (size_t)T * F, EE = (size_t)E * E;
  const float *wl = d->wr + (size_t)l * DT_WT_FLOATS * EE, *p = d->p;
  *done = 0;
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
  pdl_launch(dt_mlp_kernel, dt_grid(d, dim3(1, (unsigned)((T + DTM_BM - 1) / DTM_BM))), 128, DTM_SMEM, st, m1, m2, a,
             d->pz);
  *done = 1;
  return (int)cudaGetLastError();
}

extern "C" int cuda_dt_mlp_takes(const cuda_dt_t *d) { return dt_mlp_takes(d); }
