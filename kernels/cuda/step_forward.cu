/*
 * step_forward.cu — the step's forward (step_phases.cuh): net_forward of
 * kernels/cpu/heads_impl.h for the online network on s and s' and the target
 * network on s', as four layer-GEMM phases, then the tail.
 *   F1  h1 = lrelu(x W_t1^T + b)           [rows, H1]
 *   F2  h  = lrelu(h1 W_t2^T + b)          [rows, H2]
 *   F3  hh = lrelu(h W_hc1^T + b)          [rows, HC]  every head's first layer side by side
 *   F4  O  = hh W_hc2^T + b                [rows, O2]  value2 (V) then branch2_d (A_d), each
 *                                                      reading its own columns of hh
 *   tail  logp = log_softmax_z(V + A_d - mean_a A_d)  [rows, AW]
 * With K head sets (step_phases.cuh, pack.cu) F3 is still one product (HC = K SW1
 * hidden units), F4 has K (1 + D) segments per network, and the tail a warp
 * per (row, set, branch): logp [rows, K AW].
 * Rows: online s then s' (2B, x rows 0..2B-1), then target s' (B, x rows
 * B..2B-1); each phase's two networks are problems of one launch. The
 * backward reads the first B rows of h1, h, hh. Every output is overwritten.
 *
 * Shapes: B batch, S state, H1/H2 trunk, VH/AH head widths, HC = VH + D AH,
 * Z atoms, AW = sum_d n_d Z, O2 = Z + AW.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "gemm_table.cuh"
#include "tail.cuh"

#define MAXB LEARNER_MAX_BRANCHES

typedef struct tail_args {
  int rows, Z, O2, AW, D;
  int K, SO, LW; /* head sets: set k's outputs at column k SO of O, its logp at k AW of a LW-wide row */
  int stage; /* 1: each warp first copies its branch's advantages to shared memory (nmax x Z floats) */
  int n[MAXB], aoff[MAXB];
  int nmax;
  const float *O;
  float *logp;
  long long ps; /* members' stride (pz.cuh) */
} tail_args_t;

// kernels

/* A warp copies n floats from global to shared memory, 16 loads per lane in
 * flight before the first store (a plain loop waits out one L2 round trip
 * per iteration: the store needs the load). */
__device__ __forceinline__ void warp_copy(float *__restrict__ dst, const float *__restrict__ src, int n) {
  const int lane = threadIdx.x % 32;
  for (int k0 = 0; k0 < n; k0 += 32 * 16) {
    float t[16];
#pragma unroll
    for (int u = 0; u < 16; u++) {
      const int k = k0 + lane + 32 * u;
      t[u] = k < n ? src[k] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 16; u++) {
      const int k = k0 + lane + 32 * u;
      if (k < n) dst[k] = t[u];
    }
  }
}

#define TAIL_ZL (LEARNER_MAX_ATOMS / 32)

/* Dueling combine and log-softmax, one warp per (row, branch), from the
 * second head layers' outputs O [rows][O2] (V then every A_d) to logp
 * [rows][AW]: dueling_log_softmax's operations in its order (tail.cuh). */
template <int ZL> /* atoms per lane: Z <= 32 ZL */
__global__ void fused_tail_kernel(tail_args_t a) {
  auto *const p_O = pz_at(a.O, a.ps);
  auto *const p_logp = pz_at(a.logp, a.ps);
  extern __shared__ float tsh[];
  const int wib = threadIdx.x / 32, w = (int)(blockIdx.x * (blockDim.x / 32)) + wib, lane = threadIdx.x % 32;
  const int r = w / (a.D * a.K), kd = w % (a.D * a.K), k = kd / a.D, d = kd % a.D;
  if (r >= a.rows) return;
  const int Z = a.Z, nd = a.n[d];
  const float *__restrict__ V = p_O + (size_t)r * a.O2 + (size_t)k * a.SO;
  const float *Ad = V + Z + a.aoff[d];
  /* every load at once into shared memory, then the arithmetic: reading the
   * advantages from L2 action by action put one round trip per action (two
   * passes) on each warp's path */
  if (a.stage) {
    float *sa = tsh + (size_t)wib * a.nmax * Z;
    warp_copy(sa, Ad, nd * Z);
    Ad = sa;
  }
  float base[ZL];
  tail_base<ZL>(V, Ad, nd, Z, lane, base);
  float *lp0 = p_logp + (size_t)r * a.LW + (size_t)k * a.AW + a.aoff[d];
  for (int q = 0; q < nd; q++) tail_action<ZL>(Ad + (size_t)q * Z, base, Z, lane, lp0 + (size_t)q * Z);
}

// launchers

/* F1..F4 into the problem table: the W packs' layers ([out][in] rows, k
 * contiguous), online s and s' (2B rows) then target s' (B rows) */
int forward_problems(const net_layout_t *L, const cuda_fused_t *f, int B, const float *x, gemm_table_t *t) {
  const size_t b = (size_t)B;
  const int HC = f->HC, O2 = f->O2, H1 = L->H1, H2 = L->H2;
  glayer_t *fw = (glayer_t *)calloc(4, sizeof(glayer_t)); /* large with K head sets: not on the stack */
  if (!fw) return (int)cudaErrorMemoryAllocation;
  const long long w[3] = {f->pw.t1, f->pw.t2, f->pw.hc1}, bias[3] = {f->pw.bt1, f->pw.bt2, f->pw.bhc1};
  const int N[3] = {H1, H2, HC}, K[3] = {L->S, H1, H2};
  for (int q = 0; q < 3; q++) {
    fw[q].n = 1, fw[q].N = N[q], fw[q].bias = bias[q];
    fw[q].s[0].K = K[q], fw[q].s[0].ldw = K[q], fw[q].s[0].woff = w[q];
  }
  glayer_t *c2 = &fw[3]; /* set k's value2 reads its VHp value columns of hh, branch2_d its AHp of branch d */
  c2->n = f->K * (1 + L->D), c2->N = O2, c2->bias = f->pw.bhc2;
  for (int k = 0; k < f->K; k++) {
    const long long w2 = f->pw.hc2 + (long long)k * f->SH2;
    const int s0 = k * (1 + L->D), o = k * f->SO, h = k * f->SW1;
    c2->s[s0].o0 = o, c2->s[s0].koff = h, c2->s[s0].K = f->VHp, c2->s[s0].ldw = f->VHp, c2->s[s0].woff = w2;
    for (int d = 0; d < L->D; d++) {
      const int s = s0 + 1 + d;
      c2->s[s].o0 = o + L->Z + f->aoff[d], c2->s[s].koff = h + f->VHp + d * f->AHp, c2->s[s].K = f->AHp;
      c2->s[s].ldw = f->AHp, c2->s[s].woff = w2 + (long long)L->Z * f->VHp + (long long)f->aoff[d] * f->AHp;
    }
  }
  int rc = 0;
  for (int ph = 0; ph < 4; ph++) {
    gemm_begin_phase(t);
    for (int net = 0; net < 2 && !rc; net++) {
      const float *pk = net ? f->w_tg : f->w_on;
      const size_t r0 = net ? 2 * b : 0; /* first activation row of this pass */
      const int M = net ? B : 2 * B;
      if (ph == 0) rc = gemm_add_layer(t, &fw[0], pk, x + (net ? b * L->S : 0), L->S, M, f->h1 + r0 * H1, H1, NULL, 0, 1);
      if (ph == 1) rc = gemm_add_layer(t, &fw[1], pk, f->h1 + r0 * H1, H1, M, f->h + r0 * H2, H2, NULL, 0, 1);
      const float *hin = f->attn ? f->at.hatt : f->h; /* the heads read h, or the attention's h' */
      if (ph == 2) rc = gemm_add_layer(t, &fw[2], pk, hin + r0 * H2, H2, M, f->hh + r0 * HC, HC, NULL, 0, 1);
      if (ph == 3) rc = gemm_add_layer(t, &fw[3], pk, f->hh + r0 * HC, HC, M, f->O + r0 * O2, O2, NULL, 0, 0);
    }
  }
  free(fw);
  return rc;
}

extern "C" int cuda_forward(const net_layout_t *L, const cuda_fused_t *f, int B, float slope, float *grad,
                            const float *fn, cudaStream_t st) {
  for (int ph = PH_F1; ph < PH_F1 + 4; ph++) {
    if (ph == PH_F1 + 2 && f->attn) { /* the attention on h: online s and s' (2B rows), target s' (B rows) */
      CUDA_RET(cuda_attn_forward(L, f->p_on, f->p_tg, 2 * B, f->h, 3 * B, B, &f->at, f->pz, st));
    }
    CUDA_RET(cuda_gemm_phase(f, ph, slope, grad, fn, st));
  }
  if (cuda_loss_takes_tail(L, f)) return 0; /* the loss kernel forms the rows it reads itself (step_loss.cu) */
  tail_args_t ta;
  memset(&ta, 0, sizeof ta);
  ta.rows = 3 * B, ta.Z = L->Z, ta.O2 = f->O2, ta.AW = f->AW, ta.D = L->D;
  ta.K = f->K, ta.SO = f->SO, ta.LW = f->LW;
  for (int d = 0; d < L->D; d++) ta.n[d] = L->n[d], ta.aoff[d] = f->aoff[d];
  ta.O = f->O, ta.logp = f->logp, ta.ps = f->pz.stride;
  for (int d = 0; d < L->D; d++) ta.nmax = L->n[d] > ta.nmax ? L->n[d] : ta.nmax;
  /* staged through shared memory when a warp's copy fits in 48 KB */
  const size_t wfl = sizeof(float) * (size_t)ta.nmax * L->Z;
  const int wpb = wfl <= 12288 ? 4 : wfl <= 49152 ? (int)(49152 / wfl) : 4;
  ta.stage = wfl <= 49152;
  const size_t warps = 3 * (size_t)B * L->D * f->K;
  const dim3 tg((unsigned)((warps + wpb - 1) / wpb), 1, (unsigned)f->pz.n), tb(32 * wpb);
  const size_t tsm = ta.stage ? wpb * wfl : 0;
  if (L->Z <= 64) fused_tail_kernel<2><<<tg, tb, tsm, st>>>(ta);
  else if (L->Z <= 128) fused_tail_kernel<4><<<tg, tb, tsm, st>>>(ta);
  else fused_tail_kernel<TAIL_ZL><<<tg, tb, tsm, st>>>(ta);
  return (int)cudaGetLastError();
}
