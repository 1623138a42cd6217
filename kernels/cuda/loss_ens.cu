/*
 * loss_ens.cu — the step's loss with K head sets (DESIGN.md §6.2; step.cuh):
 * the twin of dqn_loss_grad's ensemble part in kernels/cpu/loss_impl.h, in
 * the CPU's order of operations, from the forward's log-probabilities
 * logp [3B, K AW] (online s, online s', target s'):
 *   E1  a thread per (sample i, head k, branch d): head k's Double-DQN action
 *       (the online head k on s' picks, the target head k scores), the C51
 *       projection (c51_project's loop), the cross-entropy CE_d against the
 *       online head k at the taken action, its Q;
 *   E2  a thread per sample: the bootstrap masks m_ik, CE^k_i = mean_d CE_d,
 *       loss_i = (1/K) sum_k m_ik CE^k_i - lambda D_i with the diversity D_i
 *       (KL between every ordered pair of heads' taken-action distributions,
 *       mean over branches), mean_k CE^k_i (the priority's loss), the Q sum;
 *   E3  a thread per (sample, head): dlogits G = c (softmax sum m - m), c =
 *       w_i m_ik / (B D K), plus the diversity's gradient into both
 *       distributions of every pair (the CPU's pair order), then through the
 *       dueling combine into g2: dV of set k (summed over branches in order)
 *       and every dA_d.
 * Priors are inside the head sets (pack.cu), so nothing here sees them.
 * Serial per thread and in the CPU's order: no atomics, reruns identical.
 *
 * Shapes: B batch, K heads, D branches, Z atoms; m [B, K, D, Z], ce [B, K,
 * D], mask [B, K], q [B, K, D] scratch (f->ens_*); g2 [B, O2] with set k's
 * V at k SO, its A_d at k SO + Z + aoff[d].
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "../philox.h"
#include "step.cuh"

#define MAXB LEARNER_MAX_BRANCHES

typedef struct ens_args {
  int B, K, D, Z, AW, LW, SO, O2, double_dqn;
  int n[MAXB], aoff[MAXB], radix_after[MAXB];
  float vmin, vmax, gamma, lambda, mask_p;
  const float *gamma_dev, *lambda_dev, *logp, *r, *done, *w, *mask_in;
  const int32_t *a;
  const long long *idx, *ring; /* sampled slots; {head, total} of the ring */
  long long cap;
  unsigned long long seed;
  float *m, *ce, *q, *mask, *g2, *loss_i, *qsum_i, *ce_mean;
} ens_args_t;

// kernels

__device__ __forceinline__ float support_at(const ens_args_t &a, int z) {
  return a.vmin + (a.vmax - a.vmin) * (float)z / (float)(a.Z - 1);
}

/* head k's taken-action log-probabilities of sample i, branch d, on row block rb (0 s, 1 s', 2 target s') */
__device__ __forceinline__ const float *lp_at(const ens_args_t &a, int rb, int i, int k, int d) {
  return a.logp + ((size_t)rb * a.B + i) * a.LW + (size_t)k * a.AW + a.aoff[d];
}

__device__ __forceinline__ int action_d(const ens_args_t &a, int i, int d) {
  return (a.a[i] / a.radix_after[d]) % a.n[d];
}

__global__ void ens_e1_kernel(ens_args_t a) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= a.B * a.K * a.D) return;
  const int i = t / (a.K * a.D), k = (t / a.D) % a.K, d = t % a.D;
  const int n = a.n[d], Z = a.Z;
  const float *lp_s = lp_at(a, 0, i, k, d), *lp_s2 = lp_at(a, 1, i, k, d), *lt_s2 = lp_at(a, 2, i, k, d);
  const float *sel = a.double_dqn ? lp_s2 : lt_s2;
  int best = 0;
  float bq = 0.0f;
  for (int act = 0; act < n; act++) { /* c51_q_values, then argmax (ties to the lower action) */
    float s = 0.0f;
    for (int z = 0; z < Z; z++) s += expf(sel[act * Z + z]) * support_at(a, z);
    if (act == 0 || s > bq) best = act, bq = s;
  }
  const float gamma = a.gamma_dev ? *a.gamma_dev : a.gamma;
  const float disc = gamma * (1.0f - a.done[i]), ri = a.r[i];
  float *m = a.m + (size_t)t * Z;
  for (int z = 0; z < Z; z++) m[z] = 0.0f;
  const float dz = (a.vmax - a.vmin) / (float)(Z - 1);
  for (int j = 0; j < Z; j++) { /* c51_project */
    const float p = expf(lt_s2[best * Z + j]);
    const float tz = ri + disc * support_at(a, j);
    const float tt = tz < a.vmin ? a.vmin : (tz > a.vmax ? a.vmax : tz);
    const float b = (tt - a.vmin) / dz;
    int l = (int)floorf(b), u = (int)ceilf(b);
    l = l < 0 ? 0 : (l > Z - 1 ? Z - 1 : l);
    u = u < 0 ? 0 : (u > Z - 1 ? Z - 1 : u);
    if (l == u) {
      m[l] += p;
    } else {
      m[l] += p * ((float)u - b);
      m[u] += p * (b - (float)l);
    }
  }
  const float *lp = lp_s + (size_t)action_d(a, i, d) * Z;
  float ce = 0.0f, qa = 0.0f;
  for (int z = 0; z < Z; z++) ce -= m[z] * lp[z];
  for (int z = 0; z < Z; z++) qa += expf(lp[z]) * support_at(a, z);
  a.ce[t] = ce;
  a.q[t] = qa;
}

__global__ void ens_e2_kernel(ens_args_t a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.B) return;
  const int K = a.K, D = a.D, Z = a.Z;
  unsigned long long cnt = 0;
  if (!a.mask_in && a.mask_p < 1.0f) { /* the slot's insertion count (replay_insertion_count) */
    const long long j = a.idx[i], head = a.ring[0], total = a.ring[1];
    const long long back = ((head - 1 - j) % a.cap + a.cap) % a.cap;
    cnt = (unsigned long long)(total - 1 - back);
  }
  float lsum = 0.0f, cesum = 0.0f, qs = 0.0f;
  for (int k = 0; k < K; k++) {
    float cek = 0.0f;
    for (int d = 0; d < D; d++) {
      const size_t t = ((size_t)i * K + k) * D + d;
      cek += a.ce[t] / (float)D;
      qs += a.q[t];
    }
    float mk = 1.0f;
    if (a.mask_in) mk = a.mask_in[(size_t)i * K + k];
    else if (a.mask_p < 1.0f) mk = (float)philox_ensemble_mask(a.seed, cnt, (uint32_t)k, a.mask_p);
    a.mask[(size_t)i * K + k] = mk;
    lsum += mk * cek;
    cesum += cek;
  }
  a.ce_mean[i] = cesum / (float)K;
  float li = lsum / (float)K;
  float div = 0.0f;
  for (int d = 0; K > 1 && d < D; d++) {
    const int ad = action_d(a, i, d);
    for (int k = 0; k < K; k++)
      for (int l = 0; l < K; l++) {
        if (k == l) continue;
        const float *lk = lp_at(a, 0, i, k, d) + (size_t)ad * Z, *ll = lp_at(a, 0, i, l, d) + (size_t)ad * Z;
        float kl = 0.0f;
        for (int z = 0; z < Z; z++) kl += expf(lk[z]) * (lk[z] - ll[z]);
        div += kl;
      }
  }
  const float lam = a.lambda_dev ? *a.lambda_dev : a.lambda;
  if (K > 1) li -= lam * (div / ((float)K * (float)(K - 1) * (float)D));
  a.loss_i[i] = li;
  a.qsum_i[i] = qs;
}

__global__ void ens_e3_kernel(ens_args_t a) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= a.B * a.K) return;
  const int i = t / a.K, k = t % a.K, K = a.K, D = a.D, Z = a.Z, B = a.B;
  float G[LEARNER_MAX_ATOMS];
  float *dV = a.g2 + (size_t)i * a.O2 + (size_t)k * a.SO;
  for (int z = 0; z < Z; z++) dV[z] = 0.0f;
  const float wi = a.w[i];
  const float c = wi * a.mask[(size_t)i * K + k] / ((float)B * (float)D * (float)K);
  const float lam = a.lambda_dev ? *a.lambda_dev : a.lambda;
  const float cd = K > 1 ? -lam * wi / ((float)B * (float)K * (float)(K - 1) * (float)D) : 0.0f;
  for (int d = 0; d < D; d++) {
    const int n = a.n[d], ad = action_d(a, i, d);
    const float *lk = lp_at(a, 0, i, k, d) + (size_t)ad * Z;
    const float *m = a.m + (((size_t)i * K + k) * D + d) * Z;
    float msum = 0.0f;
    for (int z = 0; z < Z; z++) msum += m[z];
    for (int z = 0; z < Z; z++) G[z] = c * (expf(lk[z]) * msum - m[z]);
    if (K > 1 && lam != 0.0f) /* the CPU's pair order: (k0, l0) updates G^k0 and G^l0 */
      for (int k0 = 0; k0 < K; k0++)
        for (int l0 = 0; l0 < K; l0++) {
          if (k0 == l0 || (k0 != k && l0 != k)) continue;
          const float *p0 = lp_at(a, 0, i, k0, d) + (size_t)ad * Z, *q0 = lp_at(a, 0, i, l0, d) + (size_t)ad * Z;
          float kl = 0.0f;
          for (int z = 0; z < Z; z++) kl += expf(p0[z]) * (p0[z] - q0[z]);
          for (int z = 0; z < Z; z++) {
            const float P = expf(p0[z]);
            if (k0 == k) G[z] += cd * (P * (p0[z] - q0[z] - kl));
            else G[z] += cd * (expf(q0[z]) - P);
          }
        }
    float *dA = a.g2 + (size_t)i * a.O2 + (size_t)k * a.SO + Z + a.aoff[d];
    for (int z = 0; z < Z; z++) {
      const float g = G[z];
      dV[z] += g;
      for (int act = 0; act < n; act++) dA[(size_t)act * Z + z] = (act == ad ? g : 0.0f) - g / (float)n;
    }
  }
}

// launchers

extern "C" int cuda_loss_ens(const net_layout_t *L, const cuda_dqn_hp_t *hp, const cuda_fused_t *f, int B,
                             const float *r, const float *done, const float *w, const int32_t *a, float *loss_i,
                             cudaStream_t st) {
  ens_args_t ea;
  memset(&ea, 0, sizeof ea);
  ea.B = B, ea.K = f->K, ea.D = L->D, ea.Z = L->Z, ea.AW = f->AW, ea.LW = f->LW, ea.SO = f->SO, ea.O2 = f->O2;
  ea.double_dqn = hp->double_dqn;
  int radix = 1;
  for (int d = L->D - 1; d >= 0; d--) ea.radix_after[d] = radix, radix *= L->n[d];
  for (int d = 0; d < L->D; d++) ea.n[d] = L->n[d], ea.aoff[d] = f->aoff[d];
  ea.vmin = hp->v_min, ea.vmax = hp->v_max, ea.gamma = hp->gamma, ea.gamma_dev = hp->gamma_dev;
  ea.lambda = f->lambda, ea.lambda_dev = f->lambda_dev, ea.mask_p = f->mask_p, ea.mask_in = f->mask_in;
  ea.idx = f->idx, ea.ring = f->ring, ea.cap = f->cap, ea.seed = f->mask_seed;
  if (!ea.mask_in && ea.mask_p < 1.0f && (!ea.idx || !ea.ring || ea.cap < 1)) return (int)cudaErrorInvalidValue;
  ea.logp = f->logp, ea.r = r, ea.done = done, ea.w = w, ea.a = a;
  const size_t kd = (size_t)B * f->K * L->D;
  ea.m = f->ens_m, ea.ce = f->ens_ce, ea.q = f->ens_ce + kd, ea.mask = f->ens_ce + 2 * kd;
  ea.g2 = f->g2, ea.loss_i = loss_i, ea.qsum_i = loss_i + B, ea.ce_mean = f->ce_mean;
  ens_e1_kernel<<<(unsigned)((kd + 127) / 128), 128, 0, st>>>(ea);
  ens_e2_kernel<<<(unsigned)((B + 127) / 128), 128, 0, st>>>(ea);
  ens_e3_kernel<<<(unsigned)(((size_t)B * f->K + 63) / 64), 64, 0, st>>>(ea);
  return (int)cudaGetLastError();
}
