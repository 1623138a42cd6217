/*
 * pack.cu — the step's weights and noise: NoisyNet noise from Philox (the
 * CPU's draw_noise + noisy_transform, kernels/cpu/learner_cpu.c and
 * linear_impl.h), and the effective weights W = mu + sigma (f(eps_out)
 * f(eps_in)^T), b = mu_b + sigma_b f(eps_out) (net_weights in linear_impl.h),
 * either in the parameters' own layout (cuda_effective_weights: Act and the
 * generic kernels) or packed for the layer GEMM (cuda_pack_weights).
 *
 * Pack (floats): biases first — bt1 [H1], bt2 [H2], bhc1 [HC] (value1 then
 * branch1_d), bhc2 [O2] (value2 then branch2_d) — then the weights in
 * nn.Linear layout: t1 [H1][S], t2 [H2][H1], hc1 [HC][H2] (all head-1 layers
 * side by side), hc2: value2 [Z][VH] then branch2_d [n_d Z][AH]. Every
 * element is overwritten.
 *
 * Shapes: P parameters (net_layout.h), N noise length, n elements.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "../philox.h"
#include "cuda_check.h"
#include "dqn_loss.cuh"

typedef struct pack_layer {
  long long src_w, src_b, src_sw, src_sb; /* params; sw/sb -1 unless noisy */
  long long fi, fo;                       /* noise offsets (fn), -1 unless noisy */
  long long w_dst, w_ld, b_dst;           /* in the pack: weight row 0, row stride, bias */
  long long begin;                        /* first flat element of this layer */
  int in, out;
} pack_layer_t;

typedef struct pack_args {
  pack_layer_t l[NET_MAX_LAYERS];
  int n_layers;
  long long total;
} pack_args_t;

// kernels

/* Effective weights of every layer into the packs: block row y = 0 online,
 * y = 1 target. Element e of the flat parameter order (each layer's weight
 * then bias) goes to its place in the pack. */
__global__ void fused_pack_kernel(pack_args_t a, const float *__restrict__ p_on, const float *__restrict__ fn_on,
                                  float *__restrict__ w_on, const float *__restrict__ p_tg,
                                  const float *__restrict__ fn_tg, float *__restrict__ w_tg) {
  const float *P = blockIdx.y ? p_tg : p_on, *fn = blockIdx.y ? fn_tg : fn_on;
  float *W = blockIdx.y ? w_tg : w_on;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < a.total;
       e += (long long)gridDim.x * blockDim.x) {
    int li = 0;
    while (li + 1 < a.n_layers && e >= a.l[li + 1].begin) li++;
    const pack_layer_t *l = &a.l[li];
    long long k = e - l->begin, nw = (long long)l->in * l->out;
    if (k < nw) {
      int o = (int)(k / l->in), i = (int)(k % l->in);
      float v = P[l->src_w + k];
      if (l->src_sw >= 0) v = v + P[l->src_sw + k] * (fn[l->fo + o] * fn[l->fi + i]);
      W[l->w_dst + (long long)o * l->w_ld + i] = v;
    } else {
      int o = (int)(k - nw);
      float v = P[l->src_b + o];
      if (l->src_sb >= 0) v = v + P[l->src_sb + o] * fn[l->fo + o];
      W[l->b_dst + o] = v;
    }
  }
}

/* W = mu + sigma * (f(eps_out) f(eps_in)^T), b = mu_b + sigma_b f(eps_out) for one layer */
__global__ void noisy_weights_kernel(const float *__restrict__ mw, const float *__restrict__ sw,
                                     const float *__restrict__ mb, const float *__restrict__ sb,
                                     const float *__restrict__ fi, const float *__restrict__ fo, float *__restrict__ W,
                                     float *__restrict__ b, int in, int out) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < in * out) {
    int o = k / in, i = k % in;
    W[k] = mw[k] + sw[k] * (fo[o] * fi[i]);
  }
  if (k < out) b[k] = mb[k] + sb[k] * fo[k];
}

/* NoisyNet noise: N(0,1) from (seed, stream, counter, lane = element/4), then f(x) = sign(x) sqrt|x| */
__global__ void noise_kernel(const unsigned long long *step, unsigned long long seed, unsigned stream,
                             int use_act_counter, unsigned long long act_counter, float *eps, long long n) {
  long long lane = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (lane * 4 >= n) return;
  unsigned long long ctr = use_act_counter ? act_counter : *step;
  float g[4];
  philox_normal4(philox_draw(seed, stream, ctr, (uint32_t)lane), g);
  for (int k = 0; k < 4 && lane * 4 + k < n; k++) {
    float v = g[k];
    eps[lane * 4 + k] = v >= 0 ? sqrtf(v) : -sqrtf(-v);
  }
}

// launchers

/* biases first, then the weights */
extern "C" void cuda_pack_layout(const net_layout_t *L, cuda_fused_t *f) {
  long long b = 0;
  f->pw.bt1 = b, b += L->H1;
  f->pw.bt2 = b, b += L->H2;
  f->pw.bhc1 = b, b += f->HC;
  f->pw.bhc2 = b, b += f->O2;
  b = (b + 3) / 4 * 4;
  f->pw.t1 = b, f->pw.t2 = b + (long long)L->H1 * L->S, f->pw.hc1 = f->pw.t2 + (long long)L->H2 * L->H1,
  f->pw.hc2 = f->pw.hc1 + (long long)f->HC * L->H2;
  f->pw.total = (f->pw.hc2 + (long long)L->Z * L->VH + (long long)f->AW * L->AH + 3) / 4 * 4;
}

/* where each layer's elements go in the pack */
static void pack_args(const net_layout_t *L, const cuda_fused_t *f, pack_args_t *a) {
  memset(a, 0, sizeof *a);
  long long begin = 0;
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    pack_layer_t *p = &a->l[li];
    p->src_w = l->off_w, p->src_b = l->off_b;
    p->src_sw = l->noisy ? l->off_sw : -1, p->src_sb = l->noisy ? l->off_sb : -1;
    p->fi = l->noisy ? l->noise_off : -1, p->fo = l->noisy ? l->noise_off + l->in : -1;
    p->in = l->in, p->out = l->out;
    p->begin = begin;
    begin += (long long)l->in * l->out + l->out;
    if (li == NET_TRUNK1) {
      p->w_dst = f->pw.t1, p->w_ld = L->S, p->b_dst = f->pw.bt1;
    } else if (li == NET_TRUNK2) {
      p->w_dst = f->pw.t2, p->w_ld = L->H1, p->b_dst = f->pw.bt2;
    } else if (li == NET_VALUE1) {
      p->w_dst = f->pw.hc1, p->w_ld = L->H2, p->b_dst = f->pw.bhc1;
    } else if (li == NET_VALUE2) {
      p->w_dst = f->pw.hc2, p->w_ld = L->VH, p->b_dst = f->pw.bhc2;
    } else {
      int d = (li - NET_BRANCH0) / 2, k = (li - NET_BRANCH0) % 2 + 1;
      if (k == 1) {
        long long row = L->VH + (long long)d * L->AH;
        p->w_dst = f->pw.hc1 + row * L->H2, p->w_ld = L->H2, p->b_dst = f->pw.bhc1 + row;
      } else {
        p->w_dst = f->pw.hc2 + (long long)L->Z * L->VH + (long long)f->aoff[d] * L->AH, p->w_ld = L->AH;
        p->b_dst = f->pw.bhc2 + L->Z + f->aoff[d];
      }
    }
  }
  a->n_layers = L->n_layers;
  a->total = begin;
}

extern "C" int cuda_pack_weights(const net_layout_t *L, const cuda_fused_t *f, const float *online,
                                 const float *target, int noisy, const float *fn_on, const float *fn_tg,
                                 cudaStream_t st) {
  pack_args_t pa; /* noise composed when noisy; fn pointers unused otherwise */
  pack_args(L, f, &pa);
  if (!noisy)
    for (int li = 0; li < pa.n_layers; li++) pa.l[li].src_sw = pa.l[li].src_sb = -1;
  dim3 pg((unsigned)((pa.total + 255) / 256 < 1024 ? (pa.total + 255) / 256 : 1024), 2);
  fused_pack_kernel<<<pg, 256, 0, st>>>(pa, online, fn_on, f->w_on, target, fn_tg, f->w_tg);
  return (int)cudaGetLastError();
}

/* Effective weights: NoisyNet layers composed into weff (params layout); the
 * other layers' slots copied, so weff is a complete plain-weight vector. */
extern "C" int cuda_effective_weights(const net_layout_t *L, const float *P, const float *fn, float *weff,
                                      cudaStream_t st) {
  CUDA_RET(cudaMemcpyAsync(weff, P, sizeof(float) * (size_t)L->n_params, cudaMemcpyDeviceToDevice, st));
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    if (!l->noisy) continue;
    int n = l->in * l->out;
    noisy_weights_kernel<<<(n + 255) / 256, 256, 0, st>>>(P + l->off_w, P + l->off_sw, P + l->off_b, P + l->off_sb,
                                                          fn + l->noise_off, fn + l->noise_off + l->in, weff + l->off_w,
                                                          weff + l->off_b, l->in, l->out);
    CUDA_RET(cudaGetLastError());
  }
  return 0;
}

extern "C" int cuda_noise(const unsigned long long *step, unsigned long long seed, unsigned stream,
                          int use_act_counter, unsigned long long act_counter, float *eps, long long n,
                          cudaStream_t st) {
  const long long lanes = (n + 3) / 4;
  noise_kernel<<<(unsigned)((lanes + 127) / 128), 128, 0, st>>>(step, seed, stream, use_act_counter, act_counter,
                                                                 eps, n);
  return (int)cudaGetLastError();
}
