/*
 * cp_async.cuh — the asynchronous global-to-shared copies (sm_80+) the
 * layer GEMM (gemm.cu) and the loss kernel (step_loss.cu) stage their operands
 * with. Included by .cu files only.
 */
#ifndef DQN_CUDA_CP_ASYNC_CUH
#define DQN_CUDA_CP_ASYNC_CUH

/* 4 bytes, through L1 */
__device__ __forceinline__ void cp_async4(float *dst, const float *src) {
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
/* 16 bytes, of which the first `bytes` are read and the rest zero-filled */
__device__ __forceinline__ void cp_async16z(float *dst, const float *src, int bytes) {
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
/* 4 bytes, 0 of them read when bytes == 0 (zero-filled) */
__device__ __forceinline__ void cp_async4z(float *dst, const float *src, int bytes) {
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* this thread's copies but the newest N groups have landed */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#endif
