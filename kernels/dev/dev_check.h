/* dev_check.h — the kernels/dev probes' CUDA check (a probe only prints
 * times, so it exits on the first error, naming the call) and their graph
 * timer. */
#ifndef DQN_DEV_CHECK_H
#define DQN_DEV_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

/* µs a replay of ge on st: warm replays first, then reps between two events */
static inline double time_graph(cudaGraphExec_t ge, cudaStream_t st, int warm, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warm; i++) CK(cudaGraphLaunch(ge, st));
  CK(cudaEventRecord(a, st));
  for (int i = 0; i < reps; i++) CK(cudaGraphLaunch(ge, st));
  CK(cudaEventRecord(b, st));
  CK(cudaEventSynchronize(b));
  float ms;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return 1000.0 * ms / reps;
}

#endif
