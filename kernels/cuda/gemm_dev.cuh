/*
 * gemm_dev.cuh — what the layer GEMM's kernels share (gemm.cu's mma.sync and
 * FFMA tiles, gemm_wgmma.cu's warpgroup tiles): the launch's block-to-problem
 * lookup, the TF32 rounding and mma.sync (dt_gemm.cu uses these two too); and the
 * wgmma launcher gemm.cu calls. Included by .cu files only.
 */
#ifndef DQN_CUDA_GEMM_DEV_CUH
#define DQN_CUDA_GEMM_DEV_CUH

#include <cuda_runtime.h>

#include "gemm_table.cuh"

/* A launch's lookup from block to problem, passed as a grid constant: the
 * first-block offsets are compared all at once (independent loads from the
 * constant cache) instead of walking the problem table in global memory, one
 * dependent L2 round trip per problem passed. */
typedef struct gidx {
  int nix;    /* entries in blk0 */
  int stride; /* problems per entry: entry e is problem e * stride's first block */
  int np;     /* problems */
  int blk0[GEMM_IX];
} gidx_t;

/* The block's problem: with stride 1 (every phase of one head set) a count
 * over the first blocks; with K head sets the count finds the group of
 * `stride` problems, and a second count over their first blocks in the
 * problem table (independent loads, so one round trip) the problem. */
template <int F = 0> /* which numbering: 0 the planner's (blk0), 1 / 2 a population's SER / SER2 launch (sblk) */
__device__ __forceinline__ int g_find(const gidx_t &ix, const gprob_t *__restrict__ probs) {
  int p = 0;
#pragma unroll 8
  for (int i = 1; i < ix.nix; i++) p += (int)blockIdx.x >= ix.blk0[i];
  if (ix.stride == 1) return p;
  const int base = p * ix.stride, end = min(ix.np, base + ix.stride);
  int q = base;
  for (int j = base + 1; j < end; j++) q += (int)blockIdx.x >= (F == 0 ? probs[j].blk0 : probs[j].sblk[F - 1]);
  return q;
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

/* gemm.cu: every layer-GEMM kernel's shared-memory limit set (once a plan) */
cudaError_t gemm_kernel_attrs(void);

/* ---- gemm_wgmma.cu: forward phases (C = act(A W^T + b), A [m][k], W [n][k])
 * on 128 x 128 tiles of wgmma (sm_90a), TF32 operands rounded like f2tf32 */
#define WG_BM 128 /* tile rows: two warpgroups of 64 */
#define WG_BN 128 /* tile outputs */
/* 1 when this build has the wgmma kernel and the current device runs it */
int gemm_wgmma_usable(void);
/* a problem it takes: rows of A and W 16-byte aligned (TMA's rule for the
 * descriptors' base and strides), k a multiple of 4 (the shapes it is tested on) */
int gemm_wgmma_fits(const gprob_t *g);
/* once per plan: the kernel's shared memory set, and the driver's descriptor
 * encoder; NULL (no error left pending) when either is refused */
void *gemm_wgmma_setup(void);
/* the TMA descriptors (A, then W) of problems pr[0..n) by the encoder enc into
 * host memory (2 n of gemm_wgmma_map_bytes() each, 64-byte aligned); 0 when
 * the driver refuses one */
int gemm_wgmma_encode(void *enc, const gprob_t *pr, int n, void *host);
size_t gemm_wgmma_map_bytes(void);
/* maps: the phase's first problem's descriptors; blocks.z members, ps their
 * stride (pz.cuh) */
void gemm_wgmma_launch(const gprob_t *probs, const gidx_t &ix, const void *maps, dim3 blocks, float slope,
                       long long ps, cudaStream_t st);

#endif
