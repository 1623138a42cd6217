/*
 * pdl.cuh — programmatic dependent launch: the launch helper and the two
 * device calls every kernel launched through it makes. Included by .cu
 * files only.
 */
#ifndef DQN_CUDA_PDL_CUH
#define DQN_CUDA_PDL_CUH

#include <cuda_runtime.h>

/* Programmatic dependent launch (docs/learner.md §16, "Launches"):
 * pdl_launch launches a kernel with programmatic stream serialisation, so
 * in a captured graph its blocks may be placed while the kernel before it
 * on its stream finishes, and wait there (griddepcontrol.wait: that
 * kernel complete and its writes visible) before they read or write
 * anything a kernel wrote. A kernel lets the next one's blocks be placed
 * (launch_dependents) at its start (PDL_ENTER: its wait, then that), or,
 * in the GEMM tiles, once its mainloop is done, so the next kernel's launch
 * and placement overlap its epilogue. Since each kernel waits before it
 * lets the next start, all the kernels before it have completed too: what
 * only an earlier kernel wrote may be read before the wait (dt_head.cu's
 * staged weights; docs/learner.md §16, "Launches"). */
static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_go() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
#define PDL_ENTER() (pdl_wait(), pdl_go())
/* pdl_launch (below) in thread-block clusters of cx blocks along x (g.x
 * a multiple of cx; cx 1: no clusters, pdl_launch itself) */
template <typename... P, typename... A>
static inline void pdl_launch_cluster(void (*k)(P...), unsigned cx, dim3 g, dim3 b, size_t sm, cudaStream_t st,
                                      A &&...a) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  at[1].id = cudaLaunchAttributeClusterDimension;
  at[1].val.clusterDim.x = cx, at[1].val.clusterDim.y = 1, at[1].val.clusterDim.z = 1;
  cfg.gridDim = g, cfg.blockDim = b, cfg.dynamicSmemBytes = sm, cfg.stream = st, cfg.attrs = at;
  cfg.numAttrs = cx > 1 ? 2 : 1;
  /* a launch error reaches cudaGetLastError, as a <<< >>> launch's does (a
   * null pointer argument is nullptr: NULL would deduce an integer) */
  (void)cudaLaunchKernelEx(&cfg, k, static_cast<A &&>(a)...);
}
template <typename... P, typename... A>
static inline void pdl_launch(void (*k)(P...), dim3 g, dim3 b, size_t sm, cudaStream_t st, A &&...a) {
  pdl_launch_cluster(k, 1u, g, b, sm, st, static_cast<A &&>(a)...);
}

#endif
