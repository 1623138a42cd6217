/*
 * gemm_wgmma.cu — the forward phases of the layer GEMM (gemm.cu's problem
 * table: C = act(A W^T + b), A [m][k] and W [n][k], both k-contiguous) on
 * Hopper's warpgroup MMA, for the tensor_cores config (TF32 operands, fp32
 * sums). gemm.cu's mma.sync tiles (32 x 64, four warps) stream 98 KB of
 * operands through L2 per 1 MFLOP tile: the ensemble's head layers (F3, F4 at
 * batch 256: 1,800-1,920 tiles) ran at 65-71% of L2 throughput with the
 * tensor pipe 13% busy, 48 us each. Here a block of two warpgroups computes
 * 128 x 128 outputs: a third of the L2 traffic per FLOP, the operands from
 * shared memory straight to the tensor cores: 17.3 and 24.8 us
 * (DEVICE_NOTES.md item 62 has each step and what lost).
 *
 * A chunk of 32 k (128 bytes a row) is one row of the 128-byte swizzle
 * pattern wgmma reads K-major operands in: 16-byte piece c of row r sits at
 * r 128 + 16 (c ^ r % 8), 8-row groups 1,024 bytes apart. The tensor memory
 * accelerator (TMA) writes it so: one thread issues each chunk's two boxes
 * (32 k x 128 rows of A and of W, zeros outside the matrices, so partial
 * tiles and any K need no bounds code) against an mbarrier, WG_NS - 1
 * chunks ahead. (The first version copied with cp.async, 16 bytes a thread,
 * at about the same speed; TMA needs no per-thread copy plan: 99 registers
 * instead of 128.) The pack
 * rounds W to TF32 once; each thread rounds its share of the A tile (round
 * to nearest, as gemm.cu's f2tf32: wgmma alone would truncate) and fences it
 * for the async proxy before the block's barrier. Each warpgroup multiplies
 * its 64 rows by the 128 outputs in four k8 steps per chunk (one wgmma each:
 * the descriptor's start moves 32 bytes). The epilogue goes through shared
 * memory so that each store writes 32 consecutive floats of a row (the
 * accumulators' own layout spreads a store over 8 rows: 9-10 us more in
 * F3). No split-K, no atomics: every output is one fixed sum, so reruns
 * are bit-identical. sm_90a only: the build defines DQN_SM90A when it
 * compiles for it, and gemm_wgmma_usable() checks the device.
 */
#include <cuda.h> /* CUtensorMap and its encoder's types (the encoder from the runtime's driver entry point) */
#include <cuda_runtime.h>
#include <stdint.h>

#include "dqnd_build_config.h"
#include "gemm_dev.cuh"
#include "wgmma.cuh"

#define WG_BK 32  /* k per chunk: one 128-byte swizzle row */
#define WG_NS 3   /* stages: 3 x 32 KB, two blocks per SM (four stages at one block per SM: 25-30% slower) */
#define WG_MINB 2 /* blocks per SM (__launch_bounds__) */
#define WG_NT 256 /* two warpgroups */
#define WG_A_BYTES (WG_BM * 128)
#define WG_STAGE (WG_A_BYTES + WG_BN * 128)
#define WG_SMEM (WG_NS * WG_STAGE + 1024 + 8 * WG_NS) /* + the slack to align the stages to 1,024 bytes, the mbarriers */
#define WG_CP 4 /* 16-byte pieces of A per thread per chunk: 128 rows x 8 / 256 */
#define WG_EST (WG_BN + 8) /* the epilogue's row stride in shared memory: its float2 stores free of bank conflicts */

static_assert(WG_BM * WG_EST * sizeof(float) <= WG_NS * WG_STAGE, "the epilogue's tile fits in the stages");

// kernels

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* the tensor memory accelerator (TMA), by PTX (the mbarriers: wgmma.cuh) */
/* box {32 k, 128 rows} at (k0, r0) of the map's tensor into shared dst (zeros
 * outside the tensor), counted on bar */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int k0, int r0, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(k0), "r"(r0), "r"(bar)
               : "memory");
}

/* chunk q (k from q WG_BK) of A and W into stage st, by one thread */
__device__ __forceinline__ void wg_issue(uint32_t st, uint32_t bar, const CUtensorMap *maps, int q, int m0, int n0) {
  mbar_expect_tx(bar, WG_STAGE);
  tma_load(st, maps, q * WG_BK, m0, bar);
  tma_load(st + WG_A_BYTES, maps + 1, q * WG_BK, n0, bar);
}

/* round this thread's pieces of stage st's A tile to TF32 (W comes rounded
 * from the pack): rows r0 + 32 l, piece cc, at the swizzled offset sw */
__device__ __forceinline__ void wg_round(unsigned char *st, int r0, int sw) {
#pragma unroll
  for (int l = 0; l < WG_CP; l++) {
    float4 *p = reinterpret_cast<float4 *>(st + (r0 + 32 * l) * 128 + sw);
    float4 v = *p;
    v.x = __uint_as_float(f2tf32(v.x)), v.y = __uint_as_float(f2tf32(v.y));
    v.z = __uint_as_float(f2tf32(v.z)), v.w = __uint_as_float(f2tf32(v.w));
    *p = v;
  }
}
#endif

/* maps: the phase's tensor maps, A then W for each of its problems */
__global__ void __launch_bounds__(WG_NT, WG_MINB) fused_gemm_wgmma_kernel(const gprob_t *__restrict__ probs,
                                                                    const __grid_constant__ gidx_t ix,
                                                                    const CUtensorMap *__restrict__ maps, float slope,
                                                                    long long ps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ float4 wsh4[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(wsh4), base = (raw + 1023u) & ~1023u;
  unsigned char *sm = reinterpret_cast<unsigned char *>(wsh4) + (base - raw);
  const uint32_t bars = base + WG_NS * WG_STAGE; /* WG_NS mbarriers: stage s's chunk has landed */
  probs = pz_at(probs, ps), maps = pz_at(maps, ps);
  const int p = g_find(ix, probs);
  const gprob_t g = probs[p];
  const CUtensorMap *pm = maps + 2 * p;
  const int tile = (int)blockIdx.x - g.blk0;
  const int m0 = (tile / g.tn) * WG_BM, n0 = (tile % g.tn) * WG_BN;
  const int tid = threadIdx.x, wg = tid / 128, w = (tid / 32) % 4, lane = tid % 32;
  const int cc = tid % 8, r0 = tid / 8, sw = (cc ^ (r0 & 7)) << 4;
  const int nk = (g.K + WG_BK - 1) / WG_BK;
  if (tid == 0) {
    for (int s = 0; s < WG_NS; s++) mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(pm)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(pm + 1)) : "memory");
  }
  __syncthreads();
  if (tid == 0)
    for (int q = 0; q < WG_NS - 1 && q < nk; q++) wg_issue(base + q * WG_STAGE, bars + 8 * q, pm, q, m0, n0);
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d[i] = 0.0f;
  for (int c = 0; c < nk; c++) {
    const int s = c % WG_NS;
    while (!mbar_try(bars + 8 * s, (unsigned)(c / WG_NS) & 1u)) {
    }
    wg_round(sm + s * WG_STAGE, r0, sw);
    fence_proxy_async(); /* the rounded A visible to wgmma */
    __syncthreads(); /* everyone's; and chunk c - 1's wgmma are done (waited below), so its stage is free */
    const int nx = c + WG_NS - 1;
    if (tid == 0 && nx < nk) wg_issue(base + (nx % WG_NS) * WG_STAGE, bars + 8 * (nx % WG_NS), pm, nx, m0, n0);
    const uint32_t sa = base + (uint32_t)(s * WG_STAGE);
    const unsigned long long da = wg_desc(sa + (uint32_t)(wg * 64 * 128)), db = wg_desc(sa + WG_A_BYTES);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < WG_BK / 8; kk++) wgmma_tf32_m64n128k8(d, da + 2 * kk, db + 2 * kk);
    wgmma_commit();
    wgmma_wait<0>();
  }
  /* the epilogue through shared memory (the stages are free once every
   * warpgroup is past its last wgmma): the accumulators as they lie, then
   * each warp 16 whole rows, lane L columns L + 32 q, so every store writes
   * 32 consecutive floats whatever the alignment of C (the accumulators'
   * own layout put 8 rows x 8 bytes in a store: 9-10 us of F3's 28) */
  __syncthreads();
  float *st = reinterpret_cast<float *>(sm);
  const int rl = 64 * wg + 16 * w + lane / 4;
#pragma unroll
  for (int j = 0; j < WG_BN / 8; j++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *reinterpret_cast<float2 *>(st + (rl + 8 * h) * WG_EST + 8 * j + 2 * (lane % 4)) =
          make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
  __syncthreads();
  float bq[WG_BN / 32];
#pragma unroll
  for (int q = 0; q < WG_BN / 32; q++) {
    const int n = n0 + lane + 32 * q;
    bq[q] = g.bias && n < g.N ? g.bias[n] : 0.0f;
  }
  const int wr = tid / 32;
#pragma unroll 4
  for (int r = 0; r < WG_BM / 8; r++) {
    const int ml = wr * (WG_BM / 8) + r, m = m0 + ml;
    if (m >= g.M) break;
    float *cr = g.C + (size_t)m * g.ldc;
#pragma unroll
    for (int q = 0; q < WG_BN / 32; q++) {
      const int nl = lane + 32 * q;
      if (n0 + nl >= g.N) break;
      float v = st[ml * WG_EST + nl] + bq[q];
      if (g.act) v = v > 0.0f ? v : slope * v;
      cr[n0 + nl] = v;
    }
  }
#else
  (void)probs, (void)ix, (void)maps, (void)slope;
  __trap(); /* never launched: gemm_wgmma_usable() is 0 without sm_90a code */
#endif
}

// launchers

int gemm_wgmma_usable(void) {
#if DQN_SM90A
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return 0;
  return major == 9 && minor == 0;
#else
  return 0;
#endif
}

int gemm_wgmma_fits(const gprob_t *g) {
  const int al = (uintptr_t)g->A % 16 == 0 && g->lda % 4 == 0 && (uintptr_t)g->W % 16 == 0 && g->ldw % 4 == 0;
  return al && g->K % 4 == 0 && !g->mask;
}

void *gemm_wgmma_setup(void) {
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaFuncSetAttribute(fused_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM) !=
          cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError(); /* the caller falls back: no error left pending for the step's launch checks */
    return NULL;
  }
  return fn;
}

typedef CUresult (*wg_encode_t)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* a K-contiguous [rows][K] fp32 matrix (row stride ld) as TMA boxes of 32 k x
 * 128 rows in the 128-byte swizzle; reads outside it are zeros */
static int wg_map(wg_encode_t enc, CUtensorMap *m, const float *p, int K, int rows, int ld) {
  const cuuint64_t dim[2] = {(cuuint64_t)K, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)ld * sizeof(float)};
  const cuuint32_t box[2] = {WG_BK, 128}, es[2] = {1, 1};
  return enc(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)p, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
         CUDA_SUCCESS;
}

int gemm_wgmma_encode(void *enc, const gprob_t *pr, int n, void *host) {
  CUtensorMap *m = (CUtensorMap *)host;
  for (int i = 0; i < n; i++)
    if (!wg_map((wg_encode_t)enc, &m[2 * i], pr[i].A, pr[i].K, pr[i].M, pr[i].lda) ||
        !wg_map((wg_encode_t)enc, &m[2 * i + 1], pr[i].W, pr[i].K, pr[i].N, pr[i].ldw))
      return 0;
  return 1;
}

size_t gemm_wgmma_map_bytes(void) { return sizeof(CUtensorMap); }

void gemm_wgmma_launch(const gprob_t *probs, const gidx_t &ix, const void *maps, dim3 blocks, float slope,
                       long long ps, cudaStream_t st) {
  fused_gemm_wgmma_kernel<<<blocks, WG_NT, WG_SMEM, st>>>(probs, ix, (const CUtensorMap *)maps, slope, ps);
}
