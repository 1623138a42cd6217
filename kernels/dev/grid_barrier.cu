// Go/no-go probe for a persistent step kernel (DEVICE_NOTES.md, plan after
// item 27): what does a phase boundary cost as a kernel boundary in a CUDA
// graph, and what as a grid barrier inside one resident kernel?
//
// Each "phase" is the smallest dependent step: every block reads one float
// that another block wrote in the previous phase and writes its own. The
// graph replays P phases (P kernel nodes, or one kernel with P - 1 barriers)
// and we time many replays. Blocks are 128 threads with the layer-GEMM
// kernels' 55 KB of dynamic shared memory so occupancy is the real one.
//
//   bench-grid-barrier [phases=14] [reps=2000]
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "dev_check.h"

namespace cg = cooperative_groups;

#define NT 128
#define SMEM (55 * 1024)

__device__ __forceinline__ void phase_work(float *buf, int ph, int nb, int b) {
  if (threadIdx.x == 0) {
    const float v = __ldcg(buf + (size_t)ph * nb + (b + 1) % nb);
    buf[(size_t)(ph + 1) * nb + b] = v * 0.5f + 1.0f;
  }
}

__global__ void __launch_bounds__(NT) phase_kernel(float *buf, int ph, int nb) {
  extern __shared__ float sh[];
  if (threadIdx.x == 0) sh[0] = 0.0f;
  phase_work(buf, ph, nb, blockIdx.x);
}

/* sense-free generation barrier: count arrivals, the last bumps the generation */
__device__ __forceinline__ void grid_bar(unsigned *bar, unsigned nb) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned *gen = bar + 1;
    const unsigned g = *gen;
    __threadfence();
    if (atomicAdd(bar, 1u) == nb - 1) {
      bar[0] = 0;
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*gen == g) __nanosleep(32);
    }
    __threadfence();
  }
  __syncthreads();
}

__global__ void __launch_bounds__(NT) persistent_kernel(float *buf, int phases, unsigned *bar, int mode) {
  extern __shared__ float sh[];
  if (threadIdx.x == 0) sh[0] = 0.0f;
  const int nb = gridDim.x;
  for (int ph = 0; ph < phases; ph++) {
    if (ph) {
      if (mode == 0) grid_bar(bar, nb);
      else cg::this_grid().sync();
    }
    phase_work(buf, ph, nb, blockIdx.x);
  }
}

int main(int argc, char **argv) {
  const int P = argc > 1 ? atoi(argv[1]) : 14, reps = argc > 2 ? atoi(argv[2]) : 2000;
  int n;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("no GPU\n");
    return 77;
  }
  cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 0));
  CK(cudaFuncSetAttribute(phase_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  CK(cudaFuncSetAttribute(persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  int per_sm;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, NT, SMEM));
  printf("%s, %d SMs, %d blocks of %d threads per SM at %d KB shared; %d phases\n", pr.name, pr.multiProcessorCount,
         per_sm, NT, SMEM / 1024, P);
  float *buf;
  unsigned *bar;
  CK(cudaMalloc(&buf, sizeof(float) * (size_t)(P + 1) * pr.multiProcessorCount * per_sm));
  CK(cudaMemset(buf, 0, sizeof(float) * (size_t)(P + 1) * pr.multiProcessorCount * per_sm));
  CK(cudaMalloc(&bar, 2 * sizeof(unsigned)));
  CK(cudaMemset(bar, 0, 2 * sizeof(unsigned)));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int k = 1; k <= per_sm; k *= 2) {
    const int nb = pr.multiProcessorCount * k;
    double t[4];
    for (int v = 0; v < 4; v++) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      if (v == 0) {
        for (int ph = 0; ph < P; ph++) phase_kernel<<<nb, NT, SMEM, st>>>(buf, ph, nb);
        CK(cudaGetLastError());
      } else {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeCooperative, at[0].val.cooperative = 1;
        cfg.gridDim = dim3(nb), cfg.blockDim = dim3(NT), cfg.dynamicSmemBytes = SMEM, cfg.stream = st;
        cfg.attrs = at, cfg.numAttrs = v >= 2 ? 1 : 0; /* v 1: our barrier, plain launch */
        CK(cudaLaunchKernelEx(&cfg, persistent_kernel, buf, P, bar, v == 3 ? 1 : 0));
      }
      CK(cudaStreamEndCapture(st, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      t[v] = time_graph(ge, st, 50, reps);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
    float chk;
    CK(cudaMemcpy(&chk, buf + (size_t)P * nb, sizeof chk, cudaMemcpyDeviceToHost));
    printf("blocks %4d: %2d kernel nodes %7.2f us (%.2f per boundary) | one kernel, own barrier %7.2f us "
           "(%.2f per barrier), cooperative %7.2f, cg grid.sync %7.2f | check %.3f\n",
           nb, P, t[0], t[0] / P, t[1], (t[1]) / (P - 1), t[2], t[3], chk);
  }
  return 0;
}
