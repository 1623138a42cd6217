/*
 * arena.cuh — where the CUDA learner's device buffers come from: cudaMalloc,
 * or, while a population's member is created (group.cu), the member's slice
 * of the population's one allocation. Every member allocates the same
 * buffers in the same order, so member i's buffer lies at member 0's plus i x
 * the slice's size: the stride of pz.cuh. Buffers allocated later (Act's,
 * grown on demand) come from cudaMalloc. Host side; .cu files only.
 */
#ifndef DQN_CUDA_ARENA_CUH
#define DQN_CUDA_ARENA_CUH

#include <cuda_runtime.h>
#include <stddef.h>

/* bytes at *p: cudaMalloc, or the next 256-byte-aligned piece of the arena
 * this thread is filling */
cudaError_t dev_alloc(void **p, size_t bytes);
/* cudaFree, unless p lies in an arena (freed with it) */
void dev_free(void *p);

template <typename T> static inline cudaError_t dev_alloc_t(T **p, size_t bytes) {
  return dev_alloc((void **)p, bytes);
}

#endif
