/*
 * smem_optin.cuh — a kernel allowed the device's whole opt-in shared memory
 * (cudaFuncAttributeMaxDynamicSharedMemorySize). The attribute belongs to
 * the kernel, shared by every learner in the process, and only permits, so
 * it is set once to the most the device allows, never to one learner's size
 * (tests/test-gpu-shared.c): the opt-in limit less the kernel's static
 * shared memory, since CUDA refuses a dynamic limit that leaves it no room
 * (cudaErrorInvalidValue; attn_wgrad_kernel's arrive_last flag, found by
 * test-gpu-shared's first run). Host side; .cu files only.
 */
#ifndef DQN_CUDA_SMEM_OPTIN_CUH
#define DQN_CUDA_SMEM_OPTIN_CUH

#include <cuda_runtime.h>

template <typename Kernel> static inline cudaError_t cuda_allow_optin(Kernel k, int optin) {
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, k);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int)fa.sharedSizeBytes);
}

#endif
