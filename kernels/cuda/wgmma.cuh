/*
 * wgmma.cuh — Hopper's warpgroup MMA (sm_90a) as the CUDA side uses it:
 * TF32 operands, both K-major in shared memory in the 128-byte swizzle
 * (16-byte piece c of row r at r 128 + 16 (c ^ r % 8), 8-row groups 1,024
 * bytes apart, a row 32 k), fp32 sums in registers. gemm_wgmma.cu's forward
 * phases and dt_wgmma.cu's DT GEMMs use it. Device code for sm_90a only
 * (__CUDA_ARCH_FEAT_SM90_ALL); .cu files only.
 */
#ifndef DQN_CUDA_WGMMA_CUH
#define DQN_CUDA_WGMMA_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* a K-major operand's descriptor: start address, leading offset 16 (unused
 * by K-major swizzled layouts), 1,024 bytes between 8-row groups, 128-byte
 * swizzle; + 2 moves it 8 k (32 bytes) along a row */
__device__ __forceinline__ unsigned long long wg_desc(uint32_t saddr) {
  return (unsigned long long)((saddr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
         (1ull << 62);
}

/* D[64][N] += A[64][8] B[N][8]^T (warpgroup: warp w rows 16 w.., d[4 j + q]
 * at row 16 w + lane / 4 + 8 (q / 2), column 8 j + 2 (lane % 4) + q % 2),
 * both operands K-major in shared memory behind the descriptors; TF32 has no
 * transposes */
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
/* the 32 accumulators of an m64n64 wgmma: their operand list and outputs */
#define WG_D32_REGS                                                                                                 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define WG_D32_OUT(d)                                                                                               \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),     \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
__device__ __forceinline__ void wgmma_tf32_m64n64k8(float (&d)[32], unsigned long long da, unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
               WG_D32_REGS "%32, %33, 1, 1, 1;\n"
      : WG_D32_OUT(d)
      : "l"(da), "l"(db));
}
/* wgmma_tf32_m64n64k8 with A from registers: a[q] (TF32 bit patterns) is
 * row 16 w + lane / 4 + 8 (q % 2), k lane % 4 + 4 (q / 2) of warp w's
 * rows (the layout of mma.sync's m16n8k8 A, a warp a 16-row slab); the
 * registers are read asynchronously, so they must hold until the group's
 * wait */
__device__ __forceinline__ void wgmma_tf32_m64n64k8_rs(float (&d)[32], const uint32_t (&a)[4],
                                                       unsigned long long db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
               WG_D32_REGS "{%32, %33, %34, %35}, %36, 1, 1, 1;\n"
      : WG_D32_OUT(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
/* before a warpgroup's first wgmma on registers it wrote; after its wgmma
 * (one group); wait until at most n groups are in flight */
__device__ __forceinline__ void wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int n> __device__ __forceinline__ void wgmma_wait(void) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(n) : "memory");
}
/* mbarriers, by PTX: init, arrive expecting bytes (TMA's), try a phase */
static __device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ bool mbar_try(uint32_t bar, unsigned parity) {
  uint32_t ok;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
/* the tensor memory accelerator: the box of a 3-D tensor map (map: its
 * CUtensorMap, a __grid_constant__ parameter) at coordinates (c0 innermost,
 * c1, c2) into shared dst, its bytes counted on mbarrier bar */
static __device__ __forceinline__ void tma_load_3d(uint32_t dst, const void *map, int c0, int c1, int c2,
                                                   uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
/* this thread's shared-memory writes visible to the async proxy (wgmma,
 * TMA): each writer, before the barrier the wgmma's issue follows */
__device__ __forceinline__ void fence_proxy_async(void) {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

#endif
