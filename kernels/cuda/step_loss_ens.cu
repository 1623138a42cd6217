/*
 * step_loss_ens.cu — the step's loss with K head sets (docs/learner.md §8; step_phases.cuh):
 * the twin of dqn_loss_grad's ensemble part in kernels/cpu/loss_impl.h, in
 * the CPU's order of operations, from the forward's log-probabilities
 * logp [3B, K AW] (online s, online s', target s'), in one launch, a block
 * per sample (ens_loss_kernel):
 *   E1  a warp per row (head k, branch d; the rows dealt over up to 16
 *       warps): head k's Double-DQN action (the online head k on s' picks,
 *       by Q sums serial over z; the target head k scores), the C51
 *       projection (c51.cuh's gather, c51_project's order), the
 *       cross-entropy CE_d against the online head k at the taken action,
 *       its Q, all into the block's shared memory;
 *   E23 the KL of every ordered pair (serial over z), a thread a head the
 *       bootstrap masks m_ik; one thread CE^k_i = mean_d CE_d, loss_i = (1/K) sum_k m_ik
 *       CE^k_i - lambda D_i, the diversity D_i (mean over branches and pairs),
 *       mean_k CE^k_i (the priority's loss), the Q sum, in the CPU's order;
 *       then a thread per (head k, atom z): dlogits G = c (softmax sum m - m),
 *       c = w_i m_ik / (B D K), plus the diversity's gradient into both
 *       distributions of every pair (the CPU's pair order), through the
 *       dueling combine into g2: dV of set k (summed over branches in order)
 *       and every dA_d.
 * Priors are inside the head sets (pack.cu), so nothing here sees them.
 * Fixed orders, no atomics: reruns are bit-identical.
 *
 * Shapes: B batch, K heads, D branches, Z atoms; mask [B, K] (f->ens_mask);
 * g2 [B, O2] with set k's V at k SO, its A_d at k SO + Z + aoff[d].
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "smem_optin.cuh"
#include "../philox.h"
#include "c51.cuh"
#include "cp_async.cuh"
#include "step_phases.cuh"

#define MAXB LEARNER_MAX_BRANCHES

typedef struct ens_args {
  int B, K, D, Z, AW, LW, SO, O2, double_dqn;
  int n[MAXB], aoff[MAXB], radix_after[MAXB];
  float vmin, vmax, gamma, lambda, mask_p;
  const float *gamma_dev, *gdisc, *lambda_dev, *logp, *r, *done, *w, *mask_in;
  const int32_t *a;
  const long long *idx, *ring; /* sampled slots; {head, total} of the ring */
  long long cap;
  unsigned long long seed;
  const unsigned long long *seed_dev; /* when set, the seed is read here (a population's members' differ) */
  float *mask, *g2, *loss_i, *qsum_i, *ce_mean;
  long long ps; /* members' stride (pz.cuh): every pointer above is member 0's */
} ens_args_t;

// kernels

/* a's pointers moved to the block's member (pz.cuh), its seed read */
__device__ __forceinline__ ens_args_t ens_member(const ens_args_t &a0) {
  ens_args_t a = a0;
  const long long ps = a0.ps;
  a.gamma_dev = pz_at(a.gamma_dev, ps), a.gdisc = pz_at(a.gdisc, ps), a.lambda_dev = pz_at(a.lambda_dev, ps);
  a.logp = pz_at(a.logp, ps), a.r = pz_at(a.r, ps), a.done = pz_at(a.done, ps), a.w = pz_at(a.w, ps);
  a.mask_in = pz_at(a.mask_in, ps), a.a = pz_at(a.a, ps), a.idx = pz_at(a.idx, ps), a.ring = pz_at(a.ring, ps);
  a.mask = pz_at(a.mask, ps);
  a.g2 = pz_at(a.g2, ps), a.loss_i = pz_at(a.loss_i, ps), a.qsum_i = pz_at(a.qsum_i, ps);
  a.ce_mean = pz_at(a.ce_mean, ps);
  if (a.seed_dev) a.seed = *pz_at(a.seed_dev, ps);
  return a;
}

__device__ __forceinline__ float support_at(const ens_args_t &a, int z) {
  return a.vmin + (a.vmax - a.vmin) * (float)z / (float)(a.Z - 1);
}

/* The per-branch arrays (n, aoff, radix_after) are read from the kernel's
 * parameter a0, never from the member's copy a: an index known only at run
 * time into a's arrays put the whole copy in local memory (432-448 bytes a
 * thread, written by every thread at the start: kernels/dev/DEVICE_NOTES.md
 * item 173), where a0's are read from the constant bank. */

/* head k's log-probabilities [n_d, Z] of sample i, branch d, in row block rb (0 online s, 1 online s', 2 target s') */
__device__ __forceinline__ const float *lp_at(const ens_args_t &a, const ens_args_t &a0, int rb, int i, int k, int d) {
  return a.logp + ((size_t)rb * a.B + i) * a.LW + (size_t)k * a.AW + a0.aoff[d];
}

__device__ __forceinline__ int action_d(const ens_args_t &a, const ens_args_t &a0, int i, int d) {
  return (a.a[i] / a0.radix_after[d]) % a0.n[d];
}

/* Every row is read once, coalesced, into shared memory, and the loops run
 * there: a first version, a thread per item looping over global memory, waited
 * out one L2 round trip per element (measured on the H200: 894 us a step at
 * batch 64, K 5, against 84 us for one head set). The per-action Q sums, the
 * KL sums and E2's sums keep the CPU's serial order; the cross-entropy and
 * the taken action's Q are warp sums. Shapes whose rows do not fit the
 * block's shared memory are refused at create (cuda_loss_ens_fits). */

/* per warp: sel [nmax Z] (exp'd in place), tg [nmax Z] (the target's rows,
 * raw), q [nmax], pj, bj, lj, sup [Z] */
__host__ __device__ static inline int e1_warp_floats(int nmax, int Z) { return 2 * nmax * Z + nmax + 4 * Z; }

/* E1 for row kd = k D + d of sample i, by one warp in its own shared area
 * w: the target m into M [kd Z ..], the taken action's log-probabilities and
 * probabilities into LP and P (E23's rows), CE_d and its Q into CE [kd] and
 * Q [kd]. Every global load is issued at the start (the selecting and the
 * target's rows as cp.async copies all in flight at once, the taken action's
 * row into registers), so the warp waits on one L2 round trip; the support
 * values are computed once into shared memory by the same expression the
 * sums evaluated in their loops (the same bits). */
__device__ __forceinline__ void ens_row(const ens_args_t &a, const ens_args_t &a0, int i, int kd, float *w, int nmax,
                                        float *LP, float *P, float *M, float *CE, float *Q) {
  const int lane = threadIdx.x % 32, k = kd / a.D, d = kd % a.D;
  const int n = a0.n[d], Z = a.Z, nz = n * Z;
  float *sel = w, *tg = sel + (size_t)nmax * Z, *q = tg + (size_t)nmax * Z, *pj = q + nmax, *bj = pj + Z, *sup = bj + Z;
  __syncwarp(); /* the warp's previous row is done with w */
  int *lj = (int *)(sup + Z);
  const float *lp_s = lp_at(a, a0, 0, i, k, d), *lp_s2 = lp_at(a, a0, 1, i, k, d), *lt_s2 = lp_at(a, a0, 2, i, k, d);
  const float *src = a.double_dqn ? lp_s2 : lt_s2;
  const float *lp = lp_s + (size_t)action_d(a, a0, i, d) * Z;
  /* the taken action's log-probabilities at this lane's atoms, lane + 32 h */
  constexpr int NH = (LEARNER_MAX_ATOMS + 31) / 32;
  float lv[NH];
#pragma unroll
  for (int h = 0; h < NH; h++) lv[h] = lane + 32 * h < Z ? lp[lane + 32 * h] : 0.0f;
  const float gamma = a.gdisc ? a.gdisc[i] : a.gamma_dev ? *a.gamma_dev : a.gamma;
  const float disc = gamma * (1.0f - a.done[i]), ri = a.r[i];
  for (int e = lane; e < nz; e += 32) { /* every row's copy in flight at once, then exp in place */
    cp_async4(sel + e, src + e);
    if (a.double_dqn) cp_async4(tg + e, lt_s2 + e);
  }
  cp_async_commit();
  for (int z = lane; z < Z; z += 32) sup[z] = support_at(a, z);
  cp_async_wait<0>();
  for (int e = lane; e < nz; e += 32) sel[e] = expf(sel[e]);
  __syncwarp();
  for (int act = lane; act < n; act += 32) { /* c51_q_values: serial over z */
    float s = 0.0f;
    for (int z = 0; z < Z; z++) s += sel[act * Z + z] * sup[z];
    q[act] = s;
  }
  __syncwarp();
  int best = 0;
  for (int act = 1; act < n; act++)
    if (q[act] > q[best]) best = act;
  const float dz = (a.vmax - a.vmin) / (float)(Z - 1);
  /* the target's row of the best action: raw in tg, or exp'd in sel (no Double DQN: sel is the target's) */
  for (int j = lane; j < Z; j += 32) {
    pj[j] = a.double_dqn ? expf(tg[best * Z + j]) : sel[best * Z + j];
    lj[j] = c51_source(ri, disc, a.vmin, a.vmax, dz, Z, j, &bj[j]);
  }
  __syncwarp();
  const float c0 = (ri + disc * a.vmin - a.vmin) / dz;
  float ce = 0.0f, qa = 0.0f;
#pragma unroll
  for (int h = 0; h < NH; h++) {
    const int z = lane + 32 * h;
    if (z < Z) {
      const float acc = c51_gather(z, Z, lj, pj, bj, c0, disc);
      const float l = lv[h], pl = expf(l);
      M[kd * Z + z] = acc, LP[kd * Z + z] = l, P[kd * Z + z] = pl;
      ce -= acc * l;
      qa += pl * sup[z];
    }
  }
  for (int off = 16; off; off >>= 1) {
    ce += __shfl_xor_sync(0xffffffffu, ce, off);
    qa += __shfl_xor_sync(0xffffffffu, qa, off);
  }
  if (lane == 0) CE[kd] = ce, Q[kd] = qa;
}

/* per sample: LP, P, M [K D Z] (taken-action log-probabilities, their
 * softmax, the targets), KL [D K K], msum [K D], mask [K], CE, Q [K D] (E1's);
 * then each warp's E1 area */
__host__ __device__ static inline int e23_floats(int K, int D, int Z) {
  return 3 * K * D * Z + K * K * D + 3 * K * D + K;
}

/* the whole loss of one sample per block: E1's K D rows over the warps, then E2 and E3 */
__global__ void ens_loss_kernel(ens_args_t a0, int nmax) {
  const ens_args_t a = ens_member(a0);
  extern __shared__ float sh2[];
  const int i = blockIdx.x, K = a.K, D = a.D, Z = a.Z, B = a.B, KDZ = K * D * Z;
  float *LP = sh2, *P = LP + KDZ, *M = P + KDZ, *KL = M + KDZ, *msum = KL + K * K * D, *mask = msum + K * D;
  float *CE = mask + K, *Q = CE + K * D;
  /* the masks, a thread a head (K <= LEARNER_MAX_ENSEMBLE <= 32 <= the block's threads) */
  static_assert(LEARNER_MAX_ENSEMBLE <= 32, "a thread a head in the first warp");
  if (threadIdx.x < K) {
    const int k = threadIdx.x;
    float mk = 1.0f;
    if (a.mask_in) mk = a.mask_in[(size_t)i * K + k];
    else if (a.mask_p < 1.0f) {
      const long long j = a.idx[i], head = a.ring[0], total = a.ring[1];
      const long long back = ((head - 1 - j) % a.cap + a.cap) % a.cap;
      mk = (float)philox_ensemble_mask(a.seed, (unsigned long long)(total - 1 - back), (uint32_t)k, a.mask_p);
    }
    mask[k] = mk;
    a.mask[(size_t)i * K + k] = mk;
  }
  /* E1: the K D rows over the warps */
  {
    const int wib = threadIdx.x / 32, nw = blockDim.x / 32;
    float *w = Q + K * D + (size_t)wib * e1_warp_floats(nmax, Z);
    for (int kd = wib; kd < K * D; kd += nw) ens_row(a, a0, i, kd, w, nmax, LP, P, M, CE, Q);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < K * K * D + K * D; e += blockDim.x) {
    if (e < K * K * D) { /* KL(P^k || P^l) of branch d, serial over z */
      const int d = e / (K * K), k = (e / K) % K, l = e % K;
      float kl = 0.0f;
      if (k != l) {
        const float *pk = P + ((size_t)k * D + d) * Z, *lk = LP + ((size_t)k * D + d) * Z, *ll = LP + ((size_t)l * D + d) * Z;
        for (int z = 0; z < Z; z++) kl += pk[z] * (lk[z] - ll[z]);
      }
      KL[e] = kl;
    } else {
      const int kd = e - K * K * D;
      float s = 0.0f;
      for (int z = 0; z < Z; z++) s += M[(size_t)kd * Z + z];
      msum[kd] = s;
    }
  }
  if (threadIdx.x == 0) { /* E2's sums in the CPU's order (CE, Q, mask: landed before the barrier above) */
    float lsum = 0.0f, cesum = 0.0f, qs = 0.0f;
    for (int k = 0; k < K; k++) {
      float cek = 0.0f;
      for (int d = 0; d < D; d++) {
        cek += CE[k * D + d] / (float)D;
        qs += Q[k * D + d];
      }
      lsum += mask[k] * cek;
      cesum += cek;
    }
    a.ce_mean[i] = cesum / (float)K;
    a.loss_i[i] = lsum / (float)K; /* the diversity term follows, after the barrier (KL) */
    a.qsum_i[i] = qs;
  }
  __syncthreads();
  const float lam = a.lambda_dev ? *a.lambda_dev : a.lambda;
  if (threadIdx.x == blockDim.x - 1 && K > 1) { /* the last thread: E3's items fill the first ones */
    float div = 0.0f;
    for (int d = 0; d < D; d++)
      for (int k = 0; k < K; k++)
        for (int l = 0; l < K; l++)
          if (k != l) div += KL[((size_t)d * K + k) * K + l];
    a.loss_i[i] = a.loss_i[i] - lam * (div / ((float)K * (float)(K - 1) * (float)D));
  }
  /* E3: a thread per (head k, atom z): G over branches in order, dV summed, every dA_d */
  const float wi = a.w[i];
  const float cd = K > 1 ? -lam * wi / ((float)B * (float)K * (float)(K - 1) * (float)D) : 0.0f;
  for (int e = threadIdx.x; e < K * Z; e += blockDim.x) {
    const int k = e / Z, z = e % Z;
    const float c = wi * mask[k] / ((float)B * (float)D * (float)K);
    float dv = 0.0f;
    float *g2k = a.g2 + (size_t)i * a.O2 + (size_t)k * a.SO;
    for (int d = 0; d < D; d++) {
      const int n = a0.n[d], ad = action_d(a, a0, i, d);
      const size_t kd = (size_t)k * D + d;
      float g = c * (P[kd * Z + z] * msum[kd] - M[kd * Z + z]);
      if (K > 1 && lam != 0.0f) {
        /* the ordered pairs (k0, l0) with k in them, in the order k0 then l0:
         * (k0, k) for k0 < k, (k, l0) for every l0 != k, (k0, k) for k0 > k */
        const float pk = P[kd * Z + z], lk = LP[kd * Z + z];
        for (int k0 = 0; k0 < k; k0++) g += cd * (pk - P[((size_t)k0 * D + d) * Z + z]);
        for (int l0 = 0; l0 < K; l0++)
          if (l0 != k) g += cd * (pk * (lk - LP[((size_t)l0 * D + d) * Z + z] - KL[((size_t)d * K + k) * K + l0]));
        for (int k0 = k + 1; k0 < K; k0++) g += cd * (pk - P[((size_t)k0 * D + d) * Z + z]);
      }
      dv += g;
      float *dA = g2k + Z + a0.aoff[d];
      const float gm = g / (float)n;
      for (int act = 0; act < n; act++) dA[(size_t)act * Z + z] = (act == ad ? g : 0.0f) - gm;
    }
    g2k[z] = dv;
  }
}

// launchers

/* The loss kernel's warps a block (*nw) and shared memory: the most warps
 * (up to one a row, 16 at most) with which every block of the launch is
 * resident at once, else those that keep the most warps resident; the
 * register file decides as much as the shared memory (a block of 15 warps
 * at 80 registers leaves room for one a SM: measured, batch 256 then ran in
 * two waves). 0 when not even one warp fits the device's opt-in limit. The
 * kernel may take up to that limit from here on (the attribute only permits,
 * and is never lowered, so learners of other shapes cannot shrink it under a
 * captured graph). */
static size_t ens_plan(const net_layout_t *L, int K, long long blocks, int *nw) {
  int nmax = 0, dev = 0, optin = 48 * 1024, sms = 1;
  for (int d = 0; d < L->D; d++) nmax = L->n[d] > nmax ? L->n[d] : nmax;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cuda_allow_optin(ens_loss_kernel, optin) != cudaSuccess)
    return 0;
  const size_t e23 = sizeof(float) * (size_t)e23_floats(K, L->D, L->Z), e1 = sizeof(float) * (size_t)e1_warp_floats(nmax, L->Z);
  const int top = K * L->D < 16 ? K * L->D : 16;
  size_t best = 0;
  long long best_warps = -1;
  *nw = 0;
  for (int w = top; w >= 1; w--) {
    const size_t sm = e23 + (size_t)w * e1;
    if (sm > (size_t)optin) continue;
    if (blocks <= 0) return *nw = w, sm; /* cuda_loss_ens_fits: the size alone */
    int nb = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, ens_loss_kernel, 32 * w, sm) != cudaSuccess) continue;
    if ((long long)nb * sms >= blocks) return *nw = w, sm;
    if ((long long)nb * w > best_warps) best_warps = (long long)nb * w, best = sm, *nw = w;
  }
  return best;
}

extern "C" int cuda_loss_ens(const net_layout_t *L, const cuda_dqn_hp_t *hp, cuda_fused_t *f, int B,
                             const float *r, const float *done, const float *w, const int32_t *a, float *loss_i,
                             cudaStream_t st) {
  ens_args_t ea;
  memset(&ea, 0, sizeof ea);
  ea.B = B, ea.K = f->K, ea.D = L->D, ea.Z = L->Z, ea.AW = f->AW, ea.LW = f->LW, ea.SO = f->SO, ea.O2 = f->O2;
  ea.double_dqn = hp->double_dqn;
  int radix = 1;
  for (int d = L->D - 1; d >= 0; d--) ea.radix_after[d] = radix, radix *= L->n[d];
  for (int d = 0; d < L->D; d++) ea.n[d] = L->n[d], ea.aoff[d] = f->aoff[d];
  ea.vmin = hp->v_min, ea.vmax = hp->v_max, ea.gamma = hp->gamma, ea.gamma_dev = hp->gamma_dev, ea.gdisc = hp->gdisc;
  ea.lambda = f->lambda, ea.lambda_dev = f->lambda_dev, ea.mask_p = f->mask_p, ea.mask_in = f->mask_in;
  ea.idx = f->idx, ea.ring = f->ring, ea.cap = f->cap, ea.seed = f->mask_seed;
  ea.seed_dev = f->seed_dev, ea.ps = f->pz.stride;
  if (!ea.mask_in && ea.mask_p < 1.0f && (!ea.idx || !ea.ring || ea.cap < 1)) return (int)cudaErrorInvalidValue;
  ea.logp = f->logp, ea.r = r, ea.done = done, ea.w = w, ea.a = a;
  ea.mask = f->ens_mask;
  ea.g2 = f->g2, ea.loss_i = loss_i, ea.qsum_i = loss_i + B, ea.ce_mean = f->ce_mean;
  int nmax = 0;
  for (int d = 0; d < L->D; d++) nmax = L->n[d] > nmax ? L->n[d] : nmax;
  const long long blocks = (long long)B * f->pz.n; /* planned once a launch size (a population's capture is another) */
  if (f->ens_blocks != blocks) f->ens_smem = ens_plan(L, f->K, blocks, &f->ens_nw), f->ens_blocks = blocks;
  if (!f->ens_smem) return (int)cudaErrorInvalidValue; /* cuda_loss_ens_fits */
  ens_loss_kernel<<<dim3((unsigned)B, 1, (unsigned)f->pz.n), 32 * f->ens_nw, f->ens_smem, st>>>(ea, nmax);
  return (int)cudaGetLastError();
}

extern "C" int cuda_loss_ens_fits(const net_layout_t *L) {
  int nw;
  return ens_plan(L, L->K < 1 ? 1 : L->K, 0, &nw) > 0;
}
