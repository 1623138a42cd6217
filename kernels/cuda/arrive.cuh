/*
 * arrive.cuh — "the last block to finish does the rest": a block's arrival
 * on a counter after its results are stored, the last of `total` arrivals
 * resetting the counter for the next launch. The split-K GEMM tiles
 * (gemm.cu), the attention's weight-gradient parts (attn.cu), the DQN
 * gradient norm (optim.cu) and the DT's (dt_train.cu) finish this way.
 * Included by .cu files only.
 */
#ifndef DQN_CUDA_ARRIVE_CUH
#define DQN_CUDA_ARRIVE_CUH

/* Every thread of the block calls it, after a barrier that follows the
 * block's stores (or with them all made by thread 0). Thread 0's fence
 * releases them (fences are cumulative: CUTLASS's semaphore pattern, one
 * fence a block instead of one a thread), its atomic counts the block in,
 * and the last block's zeroes *cnt and fences again (the acquire, passed on
 * by the barrier). 1 in every thread of the last block, else 0. */
template <typename T>
static __device__ __forceinline__ int arrive_last(T *cnt, unsigned total) {
  __shared__ int last;
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(cnt, (T)1) == (T)(total - 1);
    if (last) {
      *cnt = 0; /* ready for the next launch */
      __threadfence();
    }
  }
  __syncthreads();
  return last;
}

#endif
