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
 * K head sets (docs/learner.md §8) repeat the head part set after set: bhc1 and
 * hc1 rows k SW1 .., bhc2 k SO .., hc2 k SH2 .. (step_phases.cuh). Fixed priors are
 * merged into their head set: prior k's first layers are VH (AH) more hidden
 * units of set k, beside the trained ones (value hidden VHp = 2 VH, branch
 * hidden AHp = 2 AH), and its second layers more input columns of set k's
 * second layers, times beta_p, whose biases add beta_p x the prior's. The
 * set's outputs are then V + beta_p Vp and A_d + beta_p Ap_d, and dueling is
 * linear: the logits of docs/learner.md §8. The sets pack with
 * fused_pack_sets_kernel (a block per job of a layer's rows, from a job
 * table built at alloc): the trained layers every step, the priors once
 * (cuda_pack_priors), as they never change. A lone learner's one head set
 * without priors keeps the flat kernel (fused_pack_kernel); a population's
 * members pack by the jobs (the same values: at 32 members the flat kernel's
 * per-element layer search took 149 us a step). With tensor_cores (f->tc) the
 * weights, not the biases, are rounded to TF32 here, once, as every layer
 * GEMM would round them (f2tf32): the wgmma tiles (gemm_wgmma.cu) read them
 * as they are.
 *
 * Shapes: P parameters (net_layout.h), N noise length, n elements.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "../philox.h"
#include "arena.cuh"
#include "cuda_check.h"
#include "generic_loss.cuh"
#include "gemm_dev.cuh"

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

/* One block's copy job of the pack (fused_pack_sets_kernel): rows [r0, r1)
 * of one layer's weight, and its bias with the job at r0 = 0; in device
 * memory, a job per block, so a block reads one descriptor and every thread
 * knows its layer (the first version found each element's layer by a binary
 * search over the table in global memory and divided 64-bit integers: 22.5
 * us for the K = 5 ensemble's 2 x 1.3M elements, on the critical path). */
typedef struct pack_entry {
  long long src_w, src_b, src_sw, src_sb, src_pb; /* src_b -1: no bias here; src_pb: prior bias, x beta, or -1 */
  long long fi, fo;
  long long w_dst, w_ld, b_dst;
  int in, out, r0, r1;
  int prior;  /* 1: the weights and bias come from the prior vector */
  int wbeta;  /* 1: the weights are times beta (a prior's second layer) */
} pack_entry_t;

#define PACK_JOB_ELEMS 4096 /* weight elements per job, about */
#define PACK_U 16           /* loads in flight per thread */

// kernels

/* Effective weights of every layer into the packs: block row y = 0 online,
 * y = 1 target. Element e of the flat parameter order (each layer's weight
 * then bias) goes to its place in the pack. */
__global__ void fused_pack_kernel(pack_args_t a, const float *__restrict__ p_on, const float *__restrict__ fn_on,
                                  float *__restrict__ w_on, const float *__restrict__ p_tg,
                                  const float *__restrict__ fn_tg, float *__restrict__ w_tg, int tf32,
                                  const int *__restrict__ tg_stale, long long ps) {
  if (blockIdx.y && tg_stale && !*pz_at(tg_stale, ps)) return; /* the target's pack is already its own */
  const float *P = pz_at(blockIdx.y ? p_tg : p_on, ps), *fn = pz_at(blockIdx.y ? fn_tg : fn_on, ps);
  float *W = pz_at(blockIdx.y ? w_tg : w_on, ps);
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < a.total;
       e += (long long)gridDim.x * blockDim.x) {
    int li = 0;
    while (li + 1 < a.n_layers && e >= a.l[li + 1].begin) li++;
    const pack_layer_t *l = &a.l[li];
    long long k = e - l->begin, nw = (long long)l->in * l->out;
    if (k < nw) { /* 32-bit: a layer's weights are fewer than 2^31 (64-bit division is a long call) */
      const int kk = (int)k, o = kk / l->in, i = kk % l->in;
      float v = P[l->src_w + k];
      if (l->src_sw >= 0) v = v + P[l->src_sw + k] * (fn[l->fo + o] * fn[l->fi + i]);
      W[l->w_dst + (long long)o * l->w_ld + i] = tf32 ? __uint_as_float(f2tf32(v)) : v;
    } else {
      int o = (int)(k - nw);
      float v = P[l->src_b + o];
      if (l->src_sb >= 0) v = v + P[l->src_sb + o] * fn[l->fo + o];
      W[l->b_dst + o] = v;
    }
  }
}

/* Every layer's effective weights into both packs, over jobs [j0, j0 +
 * gridDim.x): a block per job, block row y = network (0 online, 1 target);
 * the priors are shared by both. */
__global__ void fused_pack_sets_kernel(const pack_entry_t *__restrict__ tab, int j0, const float *__restrict__ p_on,
                                       const float *__restrict__ fn_on, float *__restrict__ w_on,
                                       const float *__restrict__ p_tg, const float *__restrict__ fn_tg,
                                       float *__restrict__ w_tg, const float *__restrict__ prior, float beta,
                                       int noisy, int tf32, const int *__restrict__ tg_stale, long long ps) {
  if (blockIdx.y && tg_stale && !*pz_at(tg_stale, ps)) return; /* the target's pack is already its own */
  const pack_entry_t l = pz_at(tab, ps)[j0 + blockIdx.x];
  prior = pz_at(prior, ps);
  const float *__restrict__ P = l.prior ? prior : pz_at(blockIdx.y ? p_tg : p_on, ps);
  const float *__restrict__ fn = pz_at(blockIdx.y ? fn_tg : fn_on, ps);
  float *__restrict__ W = pz_at(blockIdx.y ? w_tg : w_on, ps);
  const bool nz = noisy && l.src_sw >= 0;
  const int n = (l.r1 - l.r0) * l.in;
  const float *src = P + l.src_w + (size_t)l.r0 * l.in;
  /* PACK_U loads in flight before their stores (a load then its store per
   * iteration waited out one L2 round trip each: 18.7 us; so 10.5 us) */
  for (int k0 = threadIdx.x; k0 < n; k0 += PACK_U * blockDim.x) {
    float v[PACK_U];
#pragma unroll
    for (int u = 0; u < PACK_U; u++) {
      const int k = k0 + u * (int)blockDim.x;
      v[u] = k < n ? src[k] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < PACK_U; u++) {
      const int k = k0 + u * (int)blockDim.x;
      if (k >= n) break;
      const int o = l.r0 + k / l.in, i = k % l.in;
      float x = v[u];
      if (nz) x = x + P[l.src_sw + (size_t)o * l.in + i] * (fn[l.fo + o] * fn[l.fi + i]);
      if (l.wbeta) x = beta * x;
      W[l.w_dst + (long long)o * l.w_ld + i] = tf32 ? __uint_as_float(f2tf32(x)) : x;
    }
  }
  if (l.r0 == 0 && l.src_b >= 0)
    for (int o = threadIdx.x; o < l.out; o += blockDim.x) {
      float v = P[l.src_b + o];
      if (noisy && l.src_sb >= 0) v = v + P[l.src_sb + o] * fn[l.fo + o];
      if (l.src_pb >= 0) v = v + beta * prior[l.src_pb + o];
      W[l.b_dst + o] = v;
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
__global__ void noise_kernel(const unsigned long long *step, unsigned long long seed,
                             const unsigned long long *seed_dev, unsigned stream, int use_act_counter,
                             unsigned long long act_counter, float *eps, long long n, long long ps) {
  long long lane = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (lane * 4 >= n) return;
  eps = pz_at(eps, ps);
  if (seed_dev) seed = *pz_at(seed_dev, ps);
  unsigned long long ctr = use_act_counter ? act_counter : *pz_at(step, ps);
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
  f->pw.total = (f->pw.hc2 + (long long)f->K * f->SH2 + 3) / 4 * 4;
}

/* Set k's layer j (0 value1, 1 value2, 2 + 2d branch{d}_1, 3 + 2d branch{d}_2)
 * in the pack: weight row 0, row stride, bias (-1: none) and the column
 * offset of a prior's part (VH or AH, 0 for the trained one). */
static void set_dst(const net_layout_t *L, const cuda_fused_t *f, int k, int j, int prior, long long *w_dst,
                    long long *w_ld, long long *b_dst) {
  const long long s1 = (long long)k * f->SW1, s2 = f->pw.hc2 + (long long)k * f->SH2, so = (long long)k * f->SO;
  if (j == 0) { /* value1: rows [VH trained | VH prior] of the set's first VHp */
    long long row = s1 + (prior ? L->VH : 0);
    *w_dst = f->pw.hc1 + row * L->H2, *w_ld = L->H2, *b_dst = f->pw.bhc1 + row;
  } else if (j == 1) { /* value2 [Z][VHp]: the trained columns, then the prior's */
    *w_dst = s2 + (prior ? L->VH : 0), *w_ld = f->VHp, *b_dst = prior ? -1 : f->pw.bhc2 + so;
  } else {
    const int d = (j - 2) / 2;
    if ((j - 2) % 2 == 0) {
      long long row = s1 + f->VHp + (long long)d * f->AHp + (prior ? L->AH : 0);
      *w_dst = f->pw.hc1 + row * L->H2, *w_ld = L->H2, *b_dst = f->pw.bhc1 + row;
    } else {
      *w_dst = s2 + (long long)L->Z * f->VHp + (long long)f->aoff[d] * f->AHp + (prior ? L->AH : 0);
      *w_ld = f->AHp, *b_dst = prior ? -1 : f->pw.bhc2 + so + L->Z + f->aoff[d];
    }
  }
}

/* The sets' pack job table (K > 1 or priors): the trunk, every head set's
 * layers, then every prior layer, each split into jobs of about
 * PACK_JOB_ELEMS weight elements; into f->pack_tab (device). 0 or a
 * cudaError_t. */
extern "C" int cuda_pack_table(const net_layout_t *L, cuda_fused_t *f) {
  const int HL = NET_HEAD_LAYERS(L->D);
  const int n = L->n_layers + (f->pr ? f->K * HL : 0);
  pack_entry_t *t = (pack_entry_t *)calloc((size_t)n, sizeof *t);
  if (!t) return (int)cudaErrorMemoryAllocation;
  int e = 0;
  for (int li = 0; li < L->n_layers; li++, e++) {
    const net_layer_t *l = &L->layer[li];
    pack_entry_t *p = &t[e];
    p->src_w = l->off_w, p->src_b = l->off_b, p->src_pb = -1;
    p->src_sw = l->noisy ? l->off_sw : -1, p->src_sb = l->noisy ? l->off_sb : -1;
    p->fi = l->noisy ? l->noise_off : -1, p->fo = l->noisy ? l->noise_off + l->in : -1;
    p->in = l->in, p->out = l->out;
    if (li == NET_TRUNK1) {
      p->w_dst = f->pw.t1, p->w_ld = L->S, p->b_dst = f->pw.bt1;
    } else if (li == NET_TRUNK2) {
      p->w_dst = f->pw.t2, p->w_ld = L->H1, p->b_dst = f->pw.bt2;
    } else {
      const int k = (li - NET_VALUE1) / HL, j = (li - NET_VALUE1) % HL;
      set_dst(L, f, k, j, 0, &p->w_dst, &p->w_ld, &p->b_dst);
      /* a second layer's bias carries beta x its prior's */
      if (f->pr && (j == 1 || (j >= 2 && (j - 2) % 2 == 1))) p->src_pb = L->prior_off_b[li];
    }
  }
  const int trained = e;
  for (int k = 0; f->pr && k < f->K; k++)
    for (int j = 0; j < HL; j++, e++) {
      const int li = NET_HEAD_LAYER(L, k, j);
      const net_layer_t *l = &L->layer[li];
      pack_entry_t *p = &t[e];
      const int second = j == 1 || (j >= 2 && (j - 2) % 2 == 1);
      p->prior = 1, p->wbeta = second;
      p->src_w = L->prior_off_w[li], p->src_b = second ? -1 : L->prior_off_b[li], p->src_pb = -1;
      p->src_sw = p->src_sb = p->fi = p->fo = -1;
      p->in = l->in, p->out = l->out;
      long long bd;
      set_dst(L, f, k, j, 1, &p->w_dst, &p->w_ld, &bd);
      p->b_dst = second ? -1 : bd;
    }
  /* the jobs: each layer's rows in runs of about PACK_JOB_ELEMS elements */
  int nj = 0, nj_train = 0;
  for (int i = 0; i < n; i++) {
    const int rows = t[i].in >= PACK_JOB_ELEMS ? 1 : PACK_JOB_ELEMS / t[i].in;
    nj += (t[i].out + rows - 1) / rows;
    if (i + 1 == trained) nj_train = nj;
  }
  pack_entry_t *jobs = (pack_entry_t *)calloc((size_t)nj, sizeof *jobs);
  if (!jobs) return free(t), (int)cudaErrorMemoryAllocation;
  for (int i = 0, j = 0; i < n; i++) {
    const int rows = t[i].in >= PACK_JOB_ELEMS ? 1 : PACK_JOB_ELEMS / t[i].in;
    for (int r = 0; r < t[i].out; r += rows, j++) {
      jobs[j] = t[i];
      jobs[j].r0 = r, jobs[j].r1 = r + rows < t[i].out ? r + rows : t[i].out;
    }
  }
  free(t);
  cudaError_t err = dev_alloc_t(&f->pack_tab, sizeof(pack_entry_t) * (size_t)nj);
  if (err == cudaSuccess) err = cudaMemcpy(f->pack_tab, jobs, sizeof(pack_entry_t) * (size_t)nj, cudaMemcpyHostToDevice);
  f->pack_n = nj, f->pack_train = nj_train;
  free(jobs);
  return (int)err;
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
                                 const int *tg_stale, cudaStream_t st) {
  if (f->K == 1 && !f->pr && f->pz.n == 1) { /* a lone learner's one head set without priors: the flat kernel */
    pack_args_t pa; /* noise composed when noisy; fn pointers unused otherwise */
    pack_args(L, f, &pa);
    if (!noisy)
      for (int li = 0; li < pa.n_layers; li++) pa.l[li].src_sw = pa.l[li].src_sb = -1;
    dim3 pg((unsigned)((pa.total + 255) / 256 < 1024 ? (pa.total + 255) / 256 : 1024), 2, (unsigned)f->pz.n);
    fused_pack_kernel<<<pg, 256, 0, st>>>(pa, online, fn_on, f->w_on, target, fn_tg, f->w_tg, f->tc, tg_stale,
                                          f->pz.stride);
    return (int)cudaGetLastError();
  }
  /* K head sets or priors: the trained layers (the priors are packed once); noise composed when noisy */
  fused_pack_sets_kernel<<<dim3((unsigned)f->pack_train, 2, (unsigned)f->pz.n), 256, 0, st>>>(
      (const pack_entry_t *)f->pack_tab, 0, online, fn_on, f->w_on, target, fn_tg, f->w_tg, f->prior, f->beta, noisy, f->tc,
      tg_stale, f->pz.stride);
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

extern "C" int cuda_noise(const unsigned long long *step, unsigned long long seed, const unsigned long long *seed_dev,
                          cuda_pz_t pz, unsigned stream, int use_act_counter, unsigned long long act_counter, float *eps,
                          long long n, cudaStream_t st) {
  const long long lanes = (n + 3) / 4;
  noise_kernel<<<dim3((unsigned)((lanes + 127) / 128), 1, (unsigned)pz.n), 128, 0, st>>>(
      step, seed, seed_dev, stream, use_act_counter, act_counter, eps, n, pz.stride);
  return (int)cudaGetLastError();
}

/* the fixed priors' part of both packs (after the priors are set or loaded) */
extern "C" int cuda_pack_priors(const cuda_fused_t *f, cudaStream_t st) {
  if (!f->pack_tab || f->pack_n == f->pack_train || !f->prior) return 0;
  fused_pack_sets_kernel<<<dim3((unsigned)(f->pack_n - f->pack_train), 2), 256, 0, st>>>(
      (const pack_entry_t *)f->pack_tab, f->pack_train, NULL, NULL, f->w_on, NULL, NULL, f->w_tg, f->prior, f->beta, 0, f->tc,
      NULL, 0);
  return (int)cudaGetLastError();
}
