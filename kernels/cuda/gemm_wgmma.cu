/*
 * gemm_wgmma.cu — the forward phases of the layer GEMM (gemm.cu's problem
 * table: C = act(A W^T + b), A [m][k] and W [n][k], both k-contiguous) on
 * Hopper's warpgroup MMA, for the tensor_cores config (TF32 operands, fp32
 * sums). gemm.cu's mma.sync tiles (32 x 64, four warps) stream 98 KB of
 * operands through L2 per 1 MFLOP tile: the ensemble's head layers (F3, F4 at
 * batch 256: 1,800-1,920 tiles) ran at 65-71% of L2 throughput with the
 * tensor pipe 13% busy (DEVICE_NOTES.md item 62: here 29 and 39 us). Here a block of two
 * warpgroups computes 128 x 128 outputs: a third of the L2 traffic per FLOP,
 * and the operands go from shared memory to the tensor cores with no
 * register fragments.
 *
 * A chunk of 32 k (128 bytes a row) is one row of the 128-byte swizzle
 * pattern wgmma reads K-major operands in: 16-byte piece c of row r sits at
 * r 128 + 16 (c ^ r % 8), 8-row groups 1,024 bytes apart. cp.async fills the
 * chunks (WG_NS stages, WG_NS - 1 in flight); each thread then rounds the
 * pieces it copied to TF32 (round to nearest, as gemm.cu's f2tf32: wgmma
 * alone would truncate) and fences them for the async proxy before the
 * block's barrier. Each warpgroup multiplies its 64 rows by the 128 outputs
 * in four k8 steps per chunk (one wgmma each: the descriptor's start moves 32
 * bytes). No split-K, no atomics: every output is one fixed sum, so reruns
 * are bit-identical. sm_90a only: the build defines DQN_SM90A when it
 * compiles for it, and gemm_wgmma_usable() checks the device.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cp_async.cuh"
#include "dqnd_build_config.h"
#include "gemm_dev.cuh"

#define WG_BK 32  /* k per chunk: one 128-byte swizzle row */
#define WG_NS 3   /* stages: 3 x 32 KB, two blocks per SM (four stages, one block: 25% slower) */
#define WG_MINB 2
#define WG_NT 256 /* two warpgroups */
#define WG_A_BYTES (WG_BM * 128)
#define WG_STAGE (WG_A_BYTES + WG_BN * 128)
#define WG_SMEM (WG_NS * WG_STAGE + 1024) /* + the slack to align the stages to 1,024 bytes */
#define WG_CP 4 /* 16-byte pieces per thread per operand per chunk: 128 rows x 8 / 256 */

// kernels

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* a K-major operand's descriptor: start address, leading offset 16 (unused
 * by K-major swizzled layouts), 1,024 bytes between 8-row groups, 128-byte
 * swizzle */
__device__ __forceinline__ unsigned long long wg_desc(uint32_t saddr) {
  return (unsigned long long)((saddr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
         (1ull << 62);
}

/* D[64][128] += A[64][8] B[128][8]^T (warpgroup: warp w rows 16 w.., d[4 j + q] at row
 * 16 w + lane / 4 + 8 (q / 2), column 8 j + 2 (lane % 4) + q % 2), both operands
 * K-major in shared memory behind the descriptors; TF32 has no transposes */
__device__ __forceinline__ void wgmma_tf32_m64n128k8(float (&d)[64], unsigned long long da, unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "%64, %65, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db));
}

/* this thread's pieces of chunk k0 into stage s: rows r0 + 32 l of A and of
 * W, piece cc of each, zeros past M, N and K (K is a multiple of 4) */
__device__ __forceinline__ void wg_issue(unsigned char *st, const gprob_t &g, const float *const (&pa)[WG_CP],
                                         const float *const (&pw)[WG_CP], int r0, int sw, int k0, int kin) {
#pragma unroll
  for (int l = 0; l < WG_CP; l++) {
    const int o = (r0 + 32 * l) * 128 + sw;
    const bool a = pa[l] && kin > 0, w = pw[l] && kin > 0;
    cp_async16z(reinterpret_cast<float *>(st + o), a ? pa[l] + k0 : g.A, a ? 16 : 0);
    cp_async16z(reinterpret_cast<float *>(st + WG_A_BYTES + o), w ? pw[l] + k0 : g.W, w ? 16 : 0);
  }
}

/* round this thread's pieces of stage st to TF32 */
__device__ __forceinline__ void wg_round(unsigned char *st, int r0, int sw) {
#pragma unroll
  for (int l = 0; l < 2 * WG_CP; l++) {
    float4 *p = reinterpret_cast<float4 *>(st + (l >= WG_CP ? WG_A_BYTES : 0) + (r0 + 32 * (l % WG_CP)) * 128 + sw);
    float4 v = *p;
    v.x = __uint_as_float(f2tf32(v.x)), v.y = __uint_as_float(f2tf32(v.y));
    v.z = __uint_as_float(f2tf32(v.z)), v.w = __uint_as_float(f2tf32(v.w));
    *p = v;
  }
}
#endif

__global__ void __launch_bounds__(WG_NT, WG_MINB) fused_gemm_wgmma_kernel(const gprob_t *__restrict__ probs,
                                                                    const __grid_constant__ gidx_t ix, float slope) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ float4 wsh4[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(wsh4), base = (raw + 1023u) & ~1023u;
  unsigned char *sm = reinterpret_cast<unsigned char *>(wsh4) + (base - raw);
  const gprob_t g = probs[g_find(ix, probs)];
  const int tile = (int)blockIdx.x - g.blk0;
  const int m0 = (tile / g.tn) * WG_BM, n0 = (tile % g.tn) * WG_BN;
  const int tid = threadIdx.x, wg = tid / 128, w = (tid / 32) % 4, lane = tid % 32;
  const int cc = tid % 8, r0 = tid / 8, sw = (cc ^ (r0 & 7)) << 4;
  const float *pa[WG_CP], *pw[WG_CP]; /* NULL: the row is past M (N) */
#pragma unroll
  for (int l = 0; l < WG_CP; l++) {
    const int ra = m0 + r0 + 32 * l, rw = n0 + r0 + 32 * l;
    pa[l] = ra < g.M ? g.A + (size_t)ra * g.lda + 4 * cc : NULL;
    pw[l] = rw < g.N ? g.W + (size_t)rw * g.ldw + 4 * cc : NULL;
  }
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d[i] = 0.0f;
  const int nk = (g.K + WG_BK - 1) / WG_BK;
#pragma unroll
  for (int q = 0; q < WG_NS - 1; q++) {
    if (q < nk) wg_issue(sm + q * WG_STAGE, g, pa, pw, r0, sw, q * WG_BK, g.K - (q * WG_BK + 4 * cc));
    cp_async_commit();
  }
  for (int c = 0; c < nk; c++) {
    cp_async_wait<WG_NS - 2>(); /* this thread's pieces of chunk c have landed */
    wg_round(sm + (c % WG_NS) * WG_STAGE, r0, sw);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* visible to wgmma */
    __syncthreads(); /* everyone's; and chunk c - 1's wgmma are done (waited below), so its stage is free */
    const int nx = c + WG_NS - 1;
    if (nx < nk) wg_issue(sm + (nx % WG_NS) * WG_STAGE, g, pa, pw, r0, sw, nx * WG_BK, g.K - (nx * WG_BK + 4 * cc));
    cp_async_commit();
    const uint32_t sa = base + (uint32_t)((c % WG_NS) * WG_STAGE);
    const unsigned long long da = wg_desc(sa + (uint32_t)(wg * 64 * 128)), db = wg_desc(sa + WG_A_BYTES);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < WG_BK / 8; kk++) wgmma_tf32_m64n128k8(d, da + 2 * kk, db + 2 * kk);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  cp_async_wait<0>();
  /* the epilogue: bias, LeakyReLU (act), as fused_gemm_kernel's */
  const int mr = m0 + 64 * wg + 16 * w + lane / 4;
#pragma unroll
  for (int j = 0; j < WG_BN / 8; j++) {
    const int n = n0 + 8 * j + 2 * (lane % 4);
    if (n >= g.N) continue;
    const bool two = n + 1 < g.N;
    const float b0 = g.bias ? g.bias[n] : 0.0f, b1 = g.bias && two ? g.bias[n + 1] : 0.0f;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int m = mr + 8 * h;
      if (m >= g.M) continue;
      float v0 = d[4 * j + 2 * h] + b0, v1 = d[4 * j + 2 * h + 1] + b1;
      if (g.act) v0 = v0 > 0.0f ? v0 : slope * v0, v1 = v1 > 0.0f ? v1 : slope * v1;
      float *cr = g.C + (size_t)m * g.ldc + n;
      cr[0] = v0;
      if (two) cr[1] = v1;
    }
  }
#else
  (void)probs, (void)ix, (void)slope;
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

cudaError_t gemm_wgmma_setup(void) {
  return cudaFuncSetAttribute(fused_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM);
}

void gemm_wgmma_launch(const gprob_t *probs, const gidx_t &ix, unsigned blocks, float slope, cudaStream_t st) {
  fused_gemm_wgmma_kernel<<<blocks, WG_NT, WG_SMEM, st>>>(probs, ix, slope);
}
