/*
 * cuda_check.h — the one CUDA error check (docs/architecture.md, "Conventions"): CUDA_TRY returns
 * LEARNER_EDEVICE upward with "file:line: call: error" in the caller's err
 * buffer; the daemon turns that into the trainer's error state (CUDA_RET,
 * for the kernel launchers, passes the error code up as it is). Only tests
 * and benchmarks may exit on an error.
 */
#ifndef DQN_CUDA_CHECK_H
#define DQN_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>

#define CUDA_TRY(call, err, errlen)                                                                     \
  do {                                                                                                  \
    cudaError_t e_ = (call);                                                                            \
    if (e_ != cudaSuccess) {                                                                            \
      snprintf((err), (errlen), "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));   \
      return -3; /* LEARNER_EDEVICE */                                                                  \
    }                                                                                                   \
  } while (0)

/* The launchers' form (they report a code, not a message): return a
 * non-zero int error code (a cudaError_t) upward as it is. */
#define CUDA_RET(x)                                                                                     \
  do {                                                                                                  \
    int e_ = (int)(x);                                                                                  \
    if (e_) return e_;                                                                                  \
  } while (0)

#endif
