/*
 * optim.cu — see optim.cuh. Same arithmetic as kernels/cpu/optim.c (torch's
 * AdamW: decay first, bias-corrected moments); tests/test-gpu-optim.c holds
 * the two to 1e-6.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "optim.cuh"
#include "adam_scalars.cuh"
#include "arrive.cuh"

// kernels

/* sum of squares in two deterministic stages: NORM_BLOCKS partial sums over a
 * fixed grid-stride partition, then one block adds them in a fixed order */
#define NORM_BLOCKS CUDA_NORM_PARTS

/* the block's sum in thread 0: a shuffle tree per warp, then the warps' sums
 * in warp order (fixed, so deterministic; one barrier where a shared-memory
 * tree took eight). wsum: 32 doubles of shared memory. Every thread of the
 * block calls it. */
static __device__ __forceinline__ double block_sum(double s, double *wsum) {
  for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (threadIdx.x % 32 == 0) wsum[threadIdx.x / 32] = s;
  __syncthreads();
  double t = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; w++) t += wsum[w];
  return t;
}

/* nparts partial sums added by block_sum (a block of nparts threads at
 * least): the norm, in thread 0 */
static __device__ __forceinline__ float norm_of_parts(const double *part, int nparts, double *wsum) {
  const double v = (int)threadIdx.x < nparts ? __ldcg(part + threadIdx.x) : 0.0;
  return (float)sqrt(block_sum(v, wsum));
}

/* A block's partial sum s (in thread 0) stored at part[slot]; the last of
 * `total` arrivals on *fin (over every launch of the step) adds all `total`
 * slots, writes the norm and, at fin + 1, the clip scale, and zeroes *fin
 * for the next step. Every thread of the block calls it. */
static __device__ __forceinline__ void norm_arrive(double s, double *part, int slot, unsigned *fin, unsigned total,
                                                   float *norm, float grad_clip, int halted, double *wsum) {
  if (threadIdx.x == 0) part[slot] = s;
  if (!arrive_last(fin, total)) return;
  float nrm = norm_of_parts(part, (int)total, wsum);
  if (threadIdx.x == 0) {
    /* a stop requested (learner_step_until): this replay applies nothing */
    if (halted) nrm = __uint_as_float(CUDA_HALT_BITS);
    *norm = nrm;
    ((float *)(fin + 1))[0] = clip_scale(nrm, grad_clip);
  }
}

/* the final stage: the NORM_BLOCKS partial sums */
__device__ float norm_final(const double *part_in, double *wsum) { return norm_of_parts(part_in, NORM_BLOCKS, wsum); }

/* fin != NULL (the training step): the last of `total` blocks (this launch's
 * and, on the layer-GEMM path, the other cuda_norm_partial launch's of the
 * same step) also does the final stage and the clip scale, once, for
 * adamw_target_kernel to read (fin: the arrival counter, zero between steps,
 * then 7 floats). This launch's partial sums go to slots slot0 ..
 * slot0 + gridDim.x - 1. */
__global__ void grad_norm_partial_kernel(const float *__restrict__ g, long long n, double *__restrict__ part_out,
                                         unsigned *fin, float *__restrict__ norm,
                                         const unsigned long long *__restrict__ step,
                                         const learner_hparams_t *__restrict__ hp, int slot0, unsigned total,
                                         const volatile int *halt, long long ps) {
  __shared__ double wsum[32];
  g = pz_at(g, ps), part_out = pz_at(part_out, ps), fin = pz_at(fin, ps), norm = pz_at(norm, ps);
  step = pz_at(step, ps), hp = pz_at(hp, ps), halt = pz_at(halt, ps);
  /* the halt word (device memory, step.cu), read by every block before its
   * sum, so the last block does not wait on a load after its arrival */
  const int halted = fin && halt && threadIdx.x == 0 ? *halt : 0;
  double s = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    s += (double)g[i] * g[i];
  s = block_sum(s, wsum);
  if (!fin) {
    if (threadIdx.x == 0) part_out[slot0 + blockIdx.x] = s;
    return;
  }
  norm_arrive(s, part_out, slot0 + (int)blockIdx.x, fin, total, norm, hp->grad_clip, halted, wsum);
}

/* the AdamW scalars that do not need the norm (adam_prep in adam_scalars.cuh) */
__global__ void adam_prep_kernel(unsigned *fin, const unsigned long long *__restrict__ step,
                                 const learner_hparams_t *__restrict__ hp, long long ps) {
  adam_prep(pz_at(fin, ps), pz_at(step, ps), pz_at(hp, ps));
}

__global__ void grad_norm_final_kernel(const double *__restrict__ part_in, float *__restrict__ out) {
  __shared__ double wsum[32];
  const float nrm = norm_final(part_in, wsum);
  if (threadIdx.x == 0) *out = nrm;
}

__global__ void adamw_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                             float *__restrict__ v, long long n, const float *__restrict__ norm,
                             const unsigned long long *__restrict__ step, const learner_hparams_t *__restrict__ hp) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || !isfinite(*norm)) return; /* the divergence guard */
  float sc[6];
  int mode;
  adam_scalars(*norm, step, hp, sc, &mode);
  const float b1 = hp->adam_beta1, b2 = hp->adam_beta2, scale = sc[0], bc2_sqrt = sc[1], step_size = sc[2];
  const float decay = sc[3];
  float gi = g[i] * scale;
  float mi = m[i], vi = v[i], pi = p[i];
  adamw_element(gi, b1, b2, bc2_sqrt, step_size, decay, hp->adam_eps, pi, mi, vi); /* the CPU's order */
  m[i] = mi;
  v[i] = vi;
  p[i] = pi;
}

/* four floats at s (16-byte aligned) into x, and back */
static __device__ __forceinline__ void ld4(const float *s, float (&x)[4]) {
  const float4 t = *reinterpret_cast<const float4 *>(s);
  x[0] = t.x, x[1] = t.y, x[2] = t.z, x[3] = t.w;
}
static __device__ __forceinline__ void st4(float *d, const float (&x)[4]) {
  *reinterpret_cast<float4 *>(d) = make_float4(x[0], x[1], x[2], x[3]);
}

/* adamw_kernel then the per-step target rule (target_kernel with no
 * override) on the same element: one pass over p, g, m, v and the target.
 * The step's scalars are computed once per block, by the same expressions.
 * V elements a thread: 4 where every vector is 16-byte aligned (float4
 * loads and stores, the same arithmetic element by element, so the same
 * bits), issued before the block waits for its scalars. */
template <int V>
__global__ void adamw_target_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                                    float *__restrict__ v, float *__restrict__ tg, long long n,
                                    const float *__restrict__ norm, const float *__restrict__ scal,
                                    const unsigned long long *__restrict__ step,
                                    const learner_hparams_t *__restrict__ hp, int *tg_stale, long long ps) {
  __shared__ float sc[6];
  __shared__ int mode, ok; /* mode 0 none, 1 Polyak, 2 copy; ok: the norm is finite */
  p = pz_at(p, ps), g = pz_at(g, ps), m = pz_at(m, ps), v = pz_at(v, ps), tg = pz_at(tg, ps);
  norm = pz_at(norm, ps), scal = pz_at(scal, ps), step = pz_at(step, ps), hp = pz_at(hp, ps);
  if (threadIdx.x == 0) {
    if (scal) { /* computed once by grad_norm_partial_kernel's last block */
      for (int k = 0; k < 6; k++) sc[k] = scal[k];
      mode = __float_as_int(scal[6]);
    } else {
      adam_scalars(*norm, step, hp, sc, &mode);
    }
    ok = isfinite(*norm);
  }
  const long long i0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * V;
  const bool full = V == 4 && i0 + 3 < n;
  float pv[4], gv[4], mv[4], vv[4], tv[4]; /* the first V used */
  if (full) {
    ld4(p + i0, pv), ld4(g + i0, gv), ld4(m + i0, mv), ld4(v + i0, vv);
  } else {
#pragma unroll
    for (int u = 0; u < V; u++) {
      const bool in = i0 + u < n;
      pv[u] = in ? p[i0 + u] : 0.0f, gv[u] = in ? g[i0 + u] : 0.0f, mv[u] = in ? m[i0 + u] : 0.0f;
      vv[u] = in ? v[i0 + u] : 0.0f;
    }
  }
  __syncthreads();
  if (i0 >= n || !ok) return; /* the divergence guard (learner.h): nothing of the step is applied */
  const float b1 = hp->adam_beta1, b2 = hp->adam_beta2, tau = sc[4];
#pragma unroll
  for (int u = 0; u < V; u++) {
    adamw_element(gv[u] * sc[0], b1, b2, sc[1], sc[2], sc[3], sc[5], pv[u], mv[u], vv[u]); /* the CPU's order */
  }
  if (mode == 1 && tau < 1.0f) {
    if (full) {
      ld4(tg + i0, tv);
    } else {
#pragma unroll
      for (int u = 0; u < V; u++) tv[u] = i0 + u < n ? tg[i0 + u] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < V; u++) tv[u] = __fadd_rn(__fmul_rn(tau, pv[u]), __fmul_rn(1.0f - tau, tv[u]));
  } else {
#pragma unroll
    for (int u = 0; u < V; u++) tv[u] = pv[u];
  }
  const bool wt = mode == 1 || mode == 2;
  /* whether the next step must pack the target again (pack.cu) */
  if (tg_stale && i0 == 0) *pz_at(tg_stale, ps) = wt;
  if (full) {
    st4(p + i0, pv), st4(m + i0, mv), st4(v + i0, vv);
    if (wt) st4(tg + i0, tv);
  } else {
#pragma unroll
    for (int u = 0; u < V; u++)
      if (i0 + u < n) {
        p[i0 + u] = pv[u], m[i0 + u] = mv[u], v[i0 + u] = vv[u];
        if (wt) tg[i0 + u] = tv[u];
      }
  }
}

/* 16-byte vectors: every one of them (a population's members lie a multiple
 * of 256 bytes apart, arena.cuh) */
static int al16v(const float *p, const float *g, const float *m, const float *v, const float *tg) {
  return ((uintptr_t)p | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v | (uintptr_t)tg) % 16 == 0;
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
  grad_norm_partial_kernel<<<NORM_BLOCKS, 256, 0, st>>>(g, n, scratch, NULL, NULL, NULL, NULL, 0, NORM_BLOCKS, NULL,
                                                        0);
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
  adamw_target_kernel<1><<<(unsigned)((n + 255) / 256), 256, 0, st>>>(p, g, m, v, target, n, norm_dev, NULL, step_dev,
                                                                       hp_dev, NULL, 0);
  return (int)cudaGetLastError();
}

extern "C" int cuda_adam_prep(double *scratch, const unsigned long long *step_dev, const learner_hparams_t *hp_dev,
                              cudaStream_t st) {
  adam_prep_kernel<<<1, 1, 0, st>>>((unsigned *)(scratch + NORM_BLOCKS), step_dev, hp_dev, 0);
  return (int)cudaGetLastError();
}

extern "C" int cuda_norm_adamw_target(float *p, const float *g, float *m, float *v, float *target, long long n,
                                      float *norm_dev, double *scratch, const unsigned long long *step_dev,
                                      const learner_hparams_t *hp_dev, int prepped, cudaEvent_t norm_done,
                                      const volatile int *halt, int *tg_stale, cuda_pz_t pz, cudaStream_t st) {
  unsigned *fin = (unsigned *)(scratch + NORM_BLOCKS);
  const unsigned z = (unsigned)pz.n;
  if (!prepped) adam_prep_kernel<<<dim3(1, 1, z), 1, 0, st>>>(fin, step_dev, hp_dev, pz.stride);
  if (prepped != 2)
    grad_norm_partial_kernel<<<dim3(NORM_BLOCKS, 1, z), 256, 0, st>>>(g, n, scratch, fin, norm_dev, step_dev, hp_dev, 0,
                                                                      NORM_BLOCKS, halt, pz.stride);
  if (norm_done) {
    cudaError_t e = cudaEventRecord(norm_done, st);
    if (e != cudaSuccess) return (int)e;
  }
  if (al16v(p, g, m, v, target))
    adamw_target_kernel<4><<<dim3((unsigned)((n + 1023) / 1024), 1, z), 256, 0, st>>>(
        p, g, m, v, target, n, norm_dev, (const float *)(fin + 1), step_dev, hp_dev, tg_stale, pz.stride);
  else
    adamw_target_kernel<1><<<dim3((unsigned)((n + 255) / 256), 1, z), 256, 0, st>>>(
        p, g, m, v, target, n, norm_dev, (const float *)(fin + 1), step_dev, hp_dev, tg_stale, pz.stride);
  return (int)cudaGetLastError();
}

extern "C" int cuda_norm_partial(const float *g, long long n, double *scratch, int slot0, int nblk, float *norm_dev,
                                 const unsigned long long *step_dev, const learner_hparams_t *hp_dev,
                                 const volatile int *halt, cuda_pz_t pz, cudaStream_t st) {
  if (slot0 < 0 || nblk < 1 || slot0 + nblk > NORM_BLOCKS) return (int)cudaErrorInvalidValue;
  grad_norm_partial_kernel<<<dim3((unsigned)nblk, 1, (unsigned)pz.n), 256, 0, st>>>(
      g, n, scratch, (unsigned *)(scratch + NORM_BLOCKS), norm_dev, step_dev, hp_dev, slot0, NORM_BLOCKS, halt,
      pz.stride);
  return (int)cudaGetLastError();
}

extern "C" int cuda_target_update(float *target, const float *online, long long n, const unsigned long long *step_dev,
                                  const learner_hparams_t *hp_dev, float tau_override, cudaStream_t st) {
  target_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(target, online, n, step_dev, hp_dev, tau_override);
  return (int)cudaGetLastError();
}
