/* dev_check.h — the kernels/dev probes' CUDA check: a probe only prints
 * times, so it exits on the first error, naming the call. */
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

#endif
