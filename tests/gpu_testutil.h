/*
 * gpu_testutil.h — shared by the gpu suite: skip (exit 77) without a usable
 * device, and run check in-process (CUDA does not survive fork()).
 */
#ifndef DQND_GPU_TESTUTIL_H
#define DQND_GPU_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

int cuda_probe(char *name, size_t namelen);

/* Returns only when a device is usable; prints which one. */
static inline void tu_gpu_or_skip(void) {
  char why[256];
  if (!cuda_probe(why, sizeof why)) {
    printf("no usable CUDA device (%s): skipped\n", why);
    exit(77);
  }
  printf("device: %s\n", why);
  setenv("CK_FORK", "no", 1); /* the probe initialised CUDA; a forked child could not use it */
}

#endif
