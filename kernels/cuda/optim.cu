/*
 * optim.cu — see optim.cuh. Same arithmetic as kernels/cpu/optim.c (torch's
 * AdamW: decay first, bias-corrected moments); tests/test-gpu-optim.c holds
 * the two to 1e-6.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "optim.cuh"
#include "adam_scalars.cuh"

// kernels

/* sum of squares in two deterministic stages: NORM_BLOCKS partial sums over a
 * fixed grid-stride partition, then one block adds them in a fixed tree */
#define NORM_BLOCKS CUDA_NORM_PARTS
/* the final stage: NORM_BLOCKS threads add the partial sums in a fixed tree */
__device__ float norm_final(const double *part_in, double *part) {
  if (threadIdx.x < NORM_BLOCKS) part[threadIdx.x] = __ldcg(part_in + threadIdx.x);
  __syncthreads();
  for (int h = NORM_BLOCKS / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  return (float)sqrt(part[0]);
}

/* fin != NULL (the training step): the last block to finish also does the
 * final stage and the AdamW scalars, once, for adamw_target_kernel to read
 * (fin: the arrival counter, zero between launches, then 7 floats) */
/* slot0, total: this launch's blocks write partial sums slot0.. and the last
 * of `total` blocks (over every launch of the step: cuda_norm_partial) does
 * the final stage */
__global__ void grad_norm_partial_kernel(const float *__restrict__ g, long long n, double *__restrict__ part_out,
                                         unsigned *fin, float *__restrict__ norm,
                                         const unsigned long long *__restrict__ step,
                                         const learner_hparams_t *__restrict__ hp, int slot0, unsigned total) {
  __shared__ double part[256];
  __shared__ int last;
  double s = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    s += (double)g[i] * g[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) part_out[slot0 + blockIdx.x] = part[0];
  if (!fin) return;
  __threadfence();
  if (threadIdx.x == 0) {
    last = atomicAdd(fin, 1u) == total - 1;
    if (last) *fin = 0; /* ready for the next launch */
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float nrm = norm_final(part_out, part);
  if (threadIdx.x == 0) { /* the clip scale; adam_prep_kernel wrote the rest */
    float scale = 1.0f;
    if (hp->grad_clip > 0) {
      double c = hp->grad_clip / ((double)nrm + 1e-6);
      scale = c < 1 ? (float)c : 1.0f;
    }
    *norm = nrm;
    ((float *)(fin + 1))[0] = scale;
  }
}

/* the AdamW scalars that do not need the norm (adam_prep in adam_scalars.cuh) */
__global__ void adam_prep_kernel(unsigned *fin, const unsigned long long *__restrict__ step,
                                 const learner_hparams_t *__restrict__ hp) {
  adam_prep(fin, step, hp);
}

__global__ void grad_norm_final_kernel(const double *__restrict__ part_in, float *__restrict__ out) {
  __shared__ double part[NORM_BLOCKS];
  const float nrm = norm_final(part_in, part);
  if (threadIdx.x == 0) *out = nrm;
}

__global__ void adamw_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                             float *__restrict__ v, long long n, const float *__restrict__ norm,
                             const unsigned long long *__restrict__ step, const learner_hparams_t *__restrict__ hp) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sc[6];
  int mode;
  adam_scalars(*norm, step, hp, sc, &mode);
  const float b1 = hp->adam_beta1, b2 = hp->adam_beta2, scale = sc[0], bc2_sqrt = sc[1], step_size = sc[2];
  const float decay = sc[3];
  float gi = g[i] * scale;
  /* the CPU's expressions, with no fused multiply-adds, so the two agree */
  float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(1.0f - b1, gi));
  float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(1.0f - b2, gi), gi));
  m[i] = mi;
  v[i] = vi;
  float denom = __fadd_rn(__fdiv_rn(sqrtf(vi), bc2_sqrt), hp->adam_eps);
  p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fdiv_rn(__fmul_rn(step_size, mi), denom));
}

/* adamw_kernel then the per-step target rule (target_kernel with no
 * override) on the same element: one pass over p, g, m, v and the target.
 * The step's scalars are computed once per block, by the same expressions. */
__global__ void adamw_target_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                                    float *__restrict__ v, float *__restrict__ tg, long long n,
                                    const float *__restrict__ norm, const float *__restrict__ scal,
                                    const unsigned long long *__restrict__ step,
                                    const learner_hparams_t *__restrict__ hp) {
  __shared__ float sc[6];
  __shared__ int mode; /* 0 none, 1 Polyak, 2 copy */
  if (threadIdx.x == 0) {
    if (scal) { /* computed once by grad_norm_partial_kernel's last block */
      for (int k = 0; k < 6; k++) sc[k] = scal[k];
      mode = __float_as_int(scal[6]);
    } else {
      adam_scalars(*norm, step, hp, sc, &mode);
    }
  }
  __syncthreads();
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float b1 = hp->adam_beta1, b2 = hp->adam_beta2;
  float gi = g[i] * sc[0];
  float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(1.0f - b1, gi));
  float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(1.0f - b2, gi), gi));
  m[i] = mi;
  v[i] = vi;
  float denom = __fadd_rn(__fdiv_rn(sqrtf(vi), sc[1]), sc[5]);
  float pi = __fsub_rn(__fmul_rn(p[i], sc[3]), __fdiv_rn(__fmul_rn(sc[2], mi), denom));
  p[i] = pi;
  float tau = sc[4];
  if (mode == 1) tg[i] = tau >= 1.0f ? pi : __fadd_rn(__fmul_rn(tau, pi), __fmul_rn(1.0f - tau, tg[i]));
  else if (mode == 2) tg[i] = pi;
}

__global__ void target_kernel(float *__restrict__ tg, const float *__restrict__ on, long long n,
                              const unsigned long long *__restrict__ step, const learner_hparams_t *__restrict__ hp,
                              float tau_override) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float tau = tau_override > 0 ? tau_override : hp->tau;
  if (tau > 0) {
    tg[i] = tau >= 1.0f ? on[i] : __fadd_rn(__fmul_rn(tau, on[i]), __fmul_rn(1.0f - tau, tg[i]));
  } else if (hp->target_period > 0 && (*step + 1) % (unsigned long long)hp->target_period == 0) {
    tg[i] = on[i];
  }
}

// launchers

extern "C" int cuda_grad_norm(const float *g, long long n, float *norm_dev, double *scratch, cudaStream_t st) {
  grad_norm_partial_kernel<<<NORM_BLOCKS, 256, 0, st>>>(g, n, scratch, NULL, NULL, NULL, NULL, 0, NORM_BLOCKS);
  grad_norm_final_kernel<<<1, NORM_BLOCKS, 0, st>>>(scratch, norm_dev);
  return (int)cudaGetLastError();
}

extern "C" int cuda_adamw_update(float *p, const float *g, float *m, float *v, long long n, const float *norm_dev,
                                 const unsigned long long *step_dev, const learner_hparams_t *hp_dev,
                                 cudaStream_t st) {
  adamw_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(p, g, m, v, n, norm_dev, step_dev, hp_dev);
  return (int)cudaGetLastError();
}

extern "C" int cuda_adamw_target(float *p, const float *g, float *m, float *v, float *target, long long n,
                                 const float *norm_dev, const unsigned long long *step_dev,
                                 const learner_hparams_t *hp_dev, cudaStream_t st) {
  adamw_target_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(p, g, m, v, target, n, norm_dev, NULL, step_dev,
                                                                    hp_dev);
  return (int)cudaGetLastError();
}

extern "C" int cuda_adam_prep(double *scratch, const unsigned long long *step_dev, const learner_hparams_t *hp_dev,
                              cudaStream_t st) {
  adam_prep_kernel<<<1, 1, 0, st>>>((unsigned *)(scratch + NORM_BLOCKS), step_dev, hp_dev);
  return (int)cudaGetLastError();
}

extern "C" int cuda_norm_adamw_target(float *p, const float *g, float *m, float *v, float *target, long long n,
                                      float *norm_dev, double *scratch, const unsigned long long *step_dev,
                                      const learner_hparams_t *hp_dev, int prepped, cudaEvent_t norm_done,
                                      cudaStream_t st) {
  unsigned *fin = (unsigned *)(scratch + NORM_BLOCKS);
  if (!prepped) adam_prep_kernel<<<1, 1, 0, st>>>(fin, step_dev, hp_dev);
  if (prepped != 2)
    grad_norm_partial_kernel<<<NORM_BLOCKS, 256, 0, st>>>(g, n, scratch, fin, norm_dev, step_dev, hp_dev, 0,
                                                          NORM_BLOCKS);
  if (norm_done) {
    cudaError_t e = cudaEventRecord(norm_done, st);
    if (e != cudaSuccess) return (int)e;
  }
  adamw_target_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(p, g, m, v, target, n, norm_dev,
                                                                    (const float *)(fin + 1), step_dev, hp_dev);
  return (int)cudaGetLastError();
}

extern "C" int cuda_norm_partial(const float *g, long long n, double *scratch, int slot0, int nblk, float *norm_dev,
                                 const unsigned long long *step_dev, const learner_hparams_t *hp_dev, cudaStream_t st) {
  if (slot0 < 0 || nblk < 1 || slot0 + nblk > NORM_BLOCKS) return (int)cudaErrorInvalidValue;
  grad_norm_partial_kernel<<<nblk, 256, 0, st>>>(g, n, scratch, (unsigned *)(scratch + NORM_BLOCKS), norm_dev,
                                                 step_dev, hp_dev, slot0, NORM_BLOCKS);
  return (int)cudaGetLastError();
}

extern "C" int cuda_target_update(float *target, const float *online, long long n, const unsigned long long *step_dev,
                                  const learner_hparams_t *hp_dev, float tau_override, cudaStream_t st) {
  target_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(target, online, n, step_dev, hp_dev, tau_override);
  return (int)cudaGetLastError();
}
