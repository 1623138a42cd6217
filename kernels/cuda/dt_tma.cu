/*
 * dt_tma.cu — the DT GEMMs whose operands are both K-major (op(A) = A [m][k]
 * and op(B) = B^T, B [n][k]: every linear layer's forward, and the heads')
 * on wgmma with the operands brought by the tensor memory accelerator (TMA)
 * into a ring of stages (DT_TMA_NS, or up to DT_TMA_DEEP where a launch is
 * one block an SM: dt_tma_stages; docs/learner.md §16, "The GEMMs").
 *
 * dt_wgmma.cu's tile stages each chunk through registers, one chunk ahead:
 * at one or two blocks an SM every chunk waits for its own L2 round trip
 * (kernels/dev/DEVICE_NOTES.md items 102, 123). Here one thread issues the
 * ring's first chunks' boxes at once (32 k x 64 rows of A and of B, in
 * the 128-byte swizzle wgmma reads; zeros outside the matrices, so partial
 * tiles and any K need no bounds code) and each later chunk as its stage
 * frees. Each thread rounds its share of a landed chunk to TF32 in place
 * (f2tf32, round to nearest, as dt_wgmma.cu rounds: wgmma alone would
 * truncate) and fences it for the async proxy before the block's barrier;
 * an operand its producer wrote rounded already (rnd, dt_tf32_ops) is not
 * rounded again, and a chunk with neither to round goes from its mbarrier
 * straight to wgmma (the rounding pass cost 6-8% of a TF32 step:
 * kernels/dev/DEVICE_NOTES.md items 135-136).
 * The same 64 x 64 tiles, the same rounded operands, the same four
 * m64n64k8 a chunk in k order and the same epilogue (dt_ep_store) as
 * dt_wgmma.cu's tile: the same bits. A population's members are the maps'
 * third dimension (pz.stride bytes apart), block z member z.
 */
#include <cuda.h> /* CUtensorMap and its encoder's types (the encoder from the runtime's driver entry point) */
#include <cuda_runtime.h>
#include <stdint.h>

#include "dqnd_build_config.h"
#include "dt_cuda.cuh"
#include "gemm_dev.cuh"
#include "wgmma.cuh"

#define DT_TMA_T 64                          /* tile rows and columns (m64n64) */
#define DT_TMA_BK 32                         /* k a chunk: one 128-byte swizzle row */
#define DT_TMA_NS 3                          /* stages: 3 x 16 KB, four blocks an SM as dt_wgmma.cu's tile */
#define DT_TMA_DEEP 6                        /* the most stages: a launch of one block an SM at most (dt_tma_stages) */
#define DT_TMA_OP (DT_TMA_T * 128)           /* bytes: one operand's chunk */
#define DT_TMA_STAGE (2 * DT_TMA_OP)         /* A's and B's */
#define DT_TMA_SMEM(ns) ((ns) * DT_TMA_STAGE + 1024 + 8 * (ns)) /* ns stages + alignment slack, the mbarriers */
/* the staged epilogue's 64 rows of DT_WG_SLD floats fit the ring's first two stages, and no ring is shallower than two */
static_assert(64 * DT_WG_SLD * 4 <= 2 * DT_TMA_STAGE && DT_TMA_NS >= 2, "the staged epilogue fits the ring");

// kernels

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* chunk q of A's rows from m0 and B's from n0 into the stage at st */
static __device__ __forceinline__ void dtm_issue(uint32_t st, uint32_t bar, const CUtensorMap *ma,
                                                 const CUtensorMap *mb, int q, int m0, int n0, int z) {
  mbar_expect_tx(bar, DT_TMA_STAGE);
  tma_load_3d(st, ma, q * DT_TMA_BK, m0, z, bar); /* boxes of 32 k x 64 rows */
  tma_load_3d(st + DT_TMA_OP, mb, q * DT_TMA_BK, n0, z, bar);
}
#endif

/* C (=, += with acc) A B^T + bias + R (dt_ep_store's op, OP: one
 * instantiation an epilogue, so each holds only its own code; with op a
 * runtime value all three epilogues in one kernel cost the plain launches
 * 1-5 us each at batch 64: kernels/dev/DEVICE_NOTES.md item 140) for the
 * tile (blockIdx.x n, blockIdx.y m) of member blockIdx.z; a ring of NS
 * stages, or with NS 0 of ns (the deep ring: dt_tma_stages). The default
 * ring's count is a constant, as before the deep ring: with a runtime count
 * in every launch a TF32 step at batch 256 measured +0.6%, with the
 * constant +0.3% (kernels/dev/DEVICE_NOTES.md items 229-230) */
template <int OP, int NS>
__global__ void __launch_bounds__(128, 4)
    dt_gemm_tma_kernel(const __grid_constant__ CUtensorMap ma, const __grid_constant__ CUtensorMap mb, int M, int N,
                       int K, float *C, int ldc, const float *bias, const float *R, int ldr, int acc, float *G,
                       cuda_pz_t pz, int rnd, int ns_arg) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int op = OP, ns = NS ? NS : ns_arg;
  extern __shared__ float4 dtm_sh[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(dtm_sh), base = (raw + 1023u) & ~1023u;
  unsigned char *sm = reinterpret_cast<unsigned char *>(dtm_sh) + (base - raw);
  const uint32_t bars = base + ns * DT_TMA_STAGE; /* stage s's chunk has landed */
  const int m0 = blockIdx.y * DT_TMA_T, n0 = blockIdx.x * DT_TMA_T, z = (int)blockIdx.z, tid = threadIdx.x;
  const int nk = (K + DT_TMA_BK - 1) / DT_TMA_BK;
  if (tid == 0) {
    for (int s = 0; s < ns; s++) mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  pdl_wait(); /* the mbarriers set up beside the kernel before */
  if (tid == 0)
    for (int q = 0; q < ns && q < nk; q++)
      dtm_issue(base + q * DT_TMA_STAGE, bars + 8 * q, &ma, &mb, q, m0, n0, z);
  const long long mo = (long long)z * pz.stride;
  bias = dt_off0(bias, mo), R = dt_off0(R, mo), C = dt_off(C, mo), G = dt_off0(G, mo);
  dt_wg_pf pf;
  dt_wg_prefetch(pf, m0, n0, M, N, C, ldc, bias, R, ldr, acc, op, G);
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; i++) d[i] = 0.0f;
  for (int c = 0; c < nk; c++) {
    const int s = c % ns; /* chunk c's stage, on its mbarrier's phase (c / ns) & 1 */
    while (!mbar_try(bars + 8 * s, (unsigned)(c / ns) & 1u)) {
    }
    if (rnd) {
      /* round this thread's 4 of each operand's 512 16-byte pieces (pieces
       * 0-511 A's, 512-1,023 B's; the swizzle moves pieces within a row,
       * rounding does not care where) */
      float4 *pc = reinterpret_cast<float4 *>(sm + s * DT_TMA_STAGE);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        if (!(rnd >> (i / 4) & 1)) continue;
        float4 v = pc[tid + 128 * i];
        v.x = __uint_as_float(f2tf32(v.x)), v.y = __uint_as_float(f2tf32(v.y));
        v.z = __uint_as_float(f2tf32(v.z)), v.w = __uint_as_float(f2tf32(v.w));
        pc[tid + 128 * i] = v;
      }
      fence_proxy_async(); /* the rounded operands visible to wgmma */
      __syncthreads();
    }
    const uint32_t sa = base + (uint32_t)(s * DT_TMA_STAGE);
    const unsigned long long da = wg_desc(sa), db = wg_desc(sa + DT_TMA_OP);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_tf32_m64n64k8(d, da + 2 * kk, db + 2 * kk);
    wgmma_commit();
    wgmma_wait<0>();
    /* every warp past this chunk's wgmma before its stage is refilled */
    __syncthreads();
    const int nx = c + ns;
    if (tid == 0 && nx < nk) dtm_issue(sa, bars + 8 * s, &ma, &mb, nx, m0, n0, z);
  }
  pdl_go(); /* the next kernel's blocks may start beside this epilogue */
  if (pf.on) /* a bias, a residual or an accumulation's old C, read before the mainloop (never the GELU's) */
    dt_wg_epilogue_pf(pf, d, m0, n0, M, C, ldc, bias, R, acc, op);
  else
    /* staged through the ring's first two stages (free: the last chunk's
     * barrier is past every wgmma read, and no load is in flight) and run
     * in dt_wg_epilogue_staged's rolled loop, each output with
     * dt_ep_store's arithmetic, so the same bits. Unrolled, the GELU's 32
     * tanhs a thread stood 16 times in the kernel (4,816 SASS instructions
     * against 1,016) and its launch took 13.7 µs against 10.0; the plain
     * instances shrink by half (kernels/dev/DEVICE_NOTES.md items 243-245) */
    dt_wg_epilogue_staged(d, reinterpret_cast<float *>(sm), m0, n0, M, N, C, ldc, bias, R, ldr, acc, op, G);
#else
  (void)ma, (void)mb, (void)M, (void)N, (void)K, (void)C, (void)ldc, (void)bias, (void)R, (void)ldr, (void)acc;
  (void)G, (void)pz, (void)rnd, (void)ns_arg;
  __trap(); /* never launched: dt_tma_setup() is NULL without sm_90a code */
#endif
}

// launchers

typedef CUresult (*dtm_encode_t)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

void *dt_tma_setup(void) {
#if DQN_SM90A
  if (!dt_wg_setup()) return NULL; /* an sm_90 device */
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
#define DTM_K(NS)                                                                                             \
  {(const void *)dt_gemm_tma_kernel<DT_EP_PLAIN, NS>, (const void *)dt_gemm_tma_kernel<DT_EP_GELU, NS>,       \
   (const void *)dt_gemm_tma_kernel<DT_EP_DGELU, NS>, (const void *)dt_gemm_tma_kernel<DT_EP_GELU_T, NS>,     \
   (const void *)dt_gemm_tma_kernel<DT_EP_PLAIN_T, NS>}
  const void *k[2][5] = {DTM_K(DT_TMA_NS), DTM_K(0)};
#undef DTM_K
  int ok = 1;
  for (int r = 0; r < 2; r++) /* every instance dt_tma_launch may take: each ring's shared memory */
    for (int i = 0; i < 5; i++)
      ok = ok && cudaFuncSetAttribute(k[r][i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)DT_TMA_SMEM(r ? DT_TMA_DEEP : DT_TMA_NS)) == cudaSuccess;
  if (!ok ||
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError(); /* the register-staged tile takes the calls: no error left pending */
    return NULL;
  }
  return fn;
#else
  return NULL;
#endif
}

int dt_tma_fits(int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
                const cuda_pz_t *pz) {
  (void)M, (void)N;
  return !ta && tb && dt_wg_fits(M, N, K, A, lda, ta, B, ldb, tb) && pz->stride % 16 == 0;
}

int dt_tma_map(void *enc, void *map, const float *p, int inner, int outer, int ld, int box_inner, int box_outer,
               int n, long long stride) {
  const cuuint64_t dim[3] = {(cuuint64_t)inner, (cuuint64_t)outer, (cuuint64_t)n};
  const cuuint64_t str[2] = {(cuuint64_t)ld * sizeof(float), (cuuint64_t)(n > 1 ? stride : (long long)ld * 4 * outer)};
  const cuuint32_t box[3] = {(cuuint32_t)box_inner, (cuuint32_t)box_outer, 1}, es[3] = {1, 1, 1};
  return ((dtm_encode_t)enc)((CUtensorMap *)map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)p, dim, str, box, es,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* the ring's stages for a launch of tiles blocks (members' included) over
 * nk chunks on nsm SMs: where every block has an SM of its own (one wave),
 * a stage for each chunk up to DT_TMA_DEEP (96 KB, beside a weight-gradient
 * tile's 97 KB on one SM): the loads of a long k (K = 512: 16 chunks) then
 * wait for about three L2 round trips instead of six, with the same chunks
 * in the same order (the same bits); else DT_TMA_NS, four blocks an SM */
int dt_tma_stages(long long tiles, int nk, int nsm) {
  return tiles <= nsm && nk > DT_TMA_NS ? (nk < DT_TMA_DEEP ? nk : DT_TMA_DEEP) : DT_TMA_NS;
}

int dt_tma_launch(void *enc, dim3 grid, cudaStream_t st, int M, int N, int K, const float *A, int lda, const float *B,
                  int ldb, float *C, int ldc, const float *bias, const float *R, int ldr, int acc, int op, float *G,
                  cuda_pz_t pz, int rnd, int nsm) {
  const int ns = dt_tma_stages((long long)grid.x * grid.y * grid.z, (K + DT_TMA_BK - 1) / DT_TMA_BK, nsm);
  CUtensorMap ma, mb;
  /* each operand K-major, [rows][K], in boxes of 32 k x 64 rows */
  if (!dt_tma_map(enc, &ma, A, K, M, lda, DT_TMA_BK, DT_TMA_T, pz.n, pz.stride) ||
      !dt_tma_map(enc, &mb, B, K, N, ldb, DT_TMA_BK, DT_TMA_T, pz.n, pz.stride))
    return 1; /* not encodable: the caller takes the register-staged tile */
#define DTM_GO(OP)                                                                                                  \
  if (ns == DT_TMA_NS)                                                                                              \
    pdl_launch(dt_gemm_tma_kernel<OP, DT_TMA_NS>, grid, 128, DT_TMA_SMEM(ns), st, ma, mb, M, N, K, C, ldc, bias, R, ldr, \
               acc, G, pz, rnd, ns);                                                                                \
  else                                                                                                              \
    pdl_launch(dt_gemm_tma_kernel<OP, 0>, grid, 128, DT_TMA_SMEM(ns), st, ma, mb, M, N, K, C, ldc, bias, R, ldr, acc, G, \
               pz, rnd, ns)
  switch (op) {
    case DT_EP_GELU: DTM_GO(DT_EP_GELU); break;
    case DT_EP_DGELU: DTM_GO(DT_EP_DGELU); break;
    case DT_EP_GELU_T: DTM_GO(DT_EP_GELU_T); break;
    case DT_EP_PLAIN_T: DTM_GO(DT_EP_PLAIN_T); break;
    default: DTM_GO(DT_EP_PLAIN); break;
  }
#undef DTM_GO
  return 0;
}
