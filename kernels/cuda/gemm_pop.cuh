/*
 * gemm_pop.cuh — a population's fp32 FFMA tiles for the forward and backward
 * phases (gemm_pop.cu), which gemm.cu launches from POP_SER_QUADS members on.
 * Included by .cu files only.
 */
#ifndef DQN_CUDA_GEMM_POP_CUH
#define DQN_CUDA_GEMM_POP_CUH

#include <cuda_runtime.h>

#include "gemm_dev.cuh"

/* the kernels' shared-memory limit (gemm_kernel_attrs, once a plan) */
cudaError_t gemm_pop_attrs(void);
/* one phase: A [m][k] times W ([n][k] for tw 1, the forward; [k][n] for tw
 * 0, the backward), a block per 128 x 64 tile (the launch numbered by
 * gprob_t.sblk[2], blocks.z members, ps their stride: pz.cuh), each tile's
 * split-K parts in turn and added in split order */
void gemm_pop_launch(const gprob_t *probs, const gidx_t &ix, int tw, dim3 blocks, float slope, long long ps,
                     cudaStream_t st);

#endif
