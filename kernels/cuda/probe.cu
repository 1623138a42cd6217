/*
 * probe.cu — is a CUDA device usable here? Used to choose the backend
 * (docs/architecture.md, "Threads": CUDA when a usable GPU is present, else the CPU) and by the
 * GPU tests, which exit 77 (meson: skipped) when it says no.
 */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int cuda_probe(char *name, size_t namelen) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    if (name && namelen)
      snprintf(name, namelen, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
    cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
    return 0;
  }
  cudaDeviceProp p;
  e = cudaGetDeviceProperties(&p, 0);
  if (e != cudaSuccess) {
    if (name && namelen) snprintf(name, namelen, "%s", cudaGetErrorString(e));
    return 0;
  }
  if (name && namelen) snprintf(name, namelen, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                                (double)p.totalGlobalMem / (1 << 30));
  return 1;
}

extern "C" int cuda_mem_info(size_t *free_b, size_t *total_b) {
  if (cudaMemGetInfo(free_b, total_b) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 0;
}
