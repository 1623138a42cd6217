/*
 * step_loss.cu — the step's loss (step_phases.cuh): dqn_loss_grad's target and loss
 * (kernels/cpu/loss_impl.h) for every sample and branch at once, from the
 * forward's log-probabilities, with the dlogits the backward starts from.
 * Per sample i and branch d: the Double-DQN action a' (the online net on s'
 * picks, by Q sums serial over z), the C51 projection of the target net's
 * distribution at a' (c51.cuh: a gather in c51_project's order), the
 * cross-entropy against the online net's log-probabilities at the taken
 * action, and dlogits = w_i / (B D) (softmax * sum m - m) at the taken
 * action minus its mean over actions. Then the batch loss.
 *
 * Shapes: logp [3B, AW] (online s, online s', target s'), or O [3B, O2]
 * (their V then every A_d); g2 [B, O2] = dV
 * [Z] (summed over branches in order) then every dA_d [n_d Z]; loss_i,
 * qsum_i [B]; best [D, B]. Every output is overwritten.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "c51.cuh"
#include "cp_async.cuh"
#include "step_phases.cuh"
#include "tail.cuh"

#define MAXB LEARNER_MAX_BRANCHES

typedef struct loss_args {
  int B, Z, AW, O2, D, double_dqn;
  int n[MAXB], aoff[MAXB], radix_after[MAXB];
  float vmin, vmax, gamma;
  const float *gamma_dev, *gdisc, *logp, *O, *r, *done, *w;
  const int32_t *a;
  float *g2, *loss_i, *qsum_i;
  int32_t *best;
  long long ps; /* members' stride (pz.cuh): every pointer above is member 0's */
} loss_args_t;

// kernels

/* Shared floats of fused_loss_kernel's warp for a branch of n actions (and
 * of fused_loss_tail_kernel's branch d): the rows, then lps, m, pj, bj, ez,
 * g, lj [Z], q [n]. The rows: lt, sel [n Z] (the tail's log-probabilities),
 * or with TAIL three rows of O's V and A_d [(n + 1) Z] (the target's, the
 * online s' row's, the online s row's), where the log-probabilities are
 * formed in place. Each warp's are its own branch's size (the widest
 * branch's for all held the ref network's blocks to 9 an SM by shared
 * memory: kernels/dev/DEVICE_NOTES.md items 120, 125). loss_smem(L, 2) adds
 * fused_loss_tail_kernel's dueling bases. */
__host__ __device__ static inline int loss_warp_floats(int n, int Z, int tail) {
  return (tail ? 3 * (n + 1) * Z : 2 * n * Z) + 7 * Z + n;
}

/* thread t of nt's share of the copy of one O row's V and A_d into dst
 * [Z + n Z] */
__device__ __forceinline__ void stage_row(float *dst, const float *row, int aoff, int Z, int nz, int t, int nt) {
  for (int k = t; k < Z; k += nt) cp_async4(dst + k, row + k);
  for (int k = t; k < nz; k += nt) cp_async4(dst + Z + k, row + Z + aoff + k);
}

/* the lane's atoms of a dueling base kept in shared memory (zeros past Z) */
template <int ZL>
__device__ __forceinline__ void load_base(const float *src, int Z, int lane, float (&base)[ZL]) {
#pragma unroll
  for (int zi = 0; zi < ZL; zi++) base[zi] = lane + 32 * zi < Z ? src[lane + 32 * zi] : 0.0f;
}

/* the Double-DQN action of a branch of n actions from its selecting row's
 * probabilities sel [n Z]: each action's Q a serial sum over z (the CPU's
 * order), lane k action k's (q [n] scratch), then the first largest */
__device__ __forceinline__ int loss_best(const loss_args_t &a, const float *sel, int n, int lane, float *q) {
  const int Z = a.Z;
  const float dz = (a.vmax - a.vmin) / (float)(Z - 1);
  for (int k = lane; k < n; k += 32) {
    float s = 0.0f;
#pragma unroll 8
    for (int z = 0; z < Z; z++) s += sel[k * Z + z] * (a.vmin + dz * (float)z);
    q[k] = s;
  }
  __syncwarp();
  int bst = 0;
  for (int k = 1; k < n; k++)
    if (q[k] > q[bst]) bst = k;
  return bst;
}

/* The end of branch d's loss (lane's share; warp-synchronous): the C51
 * projection of pt (the target's row at a', probabilities, or with lgt
 * log-probabilities) as a gather, the cross-entropy against the online s
 * row's log-probabilities lps at the taken action ad, dlogits into g and dA,
 * and the branch's CE and Q at ad into ce_s[d], qa_s[d] */
__device__ __forceinline__ void loss_finish(const loss_args_t &a, int i, int d, int lane, const float *pt, int lgt,
                                            const float *lps, float *m, float *pj, float *bj, float *ez, int *lj,
                                            float *g, int ad, int n, float ri, float donei, float wi, float gamma,
                                            float *p_g2, float *ce_s, float *qa_s) {
  const int Z = a.Z;
  const float dz = (a.vmax - a.vmin) / (float)(Z - 1);
  float disc = gamma * (1.0f - donei);
  for (int j = lane; j < Z; j += 32) {
    pj[j] = lgt ? expf(pt[j]) : pt[j];
    lj[j] = c51_source(ri, disc, a.vmin, a.vmax, dz, Z, j, &bj[j]);
    ez[j] = expf(lps[j]);
  }
  __syncwarp();
  float ce = 0.0f, qa = 0.0f, msum = 0.0f;
  const float c0 = (ri + disc * a.vmin - a.vmin) / dz; /* b_j before clamping: c0 + disc j */
  for (int z = lane; z < Z; z += 32) {
    const float acc = c51_gather(z, Z, lj, pj, bj, c0, disc);
    m[z] = acc;
    ce -= acc * lps[z];
    qa += ez[z] * (a.vmin + dz * (float)z);
    msum += acc;
  }
  for (int off = 16; off; off >>= 1) {
    ce += __shfl_xor_sync(0xffffffffu, ce, off);
    qa += __shfl_xor_sync(0xffffffffu, qa, off);
    msum += __shfl_xor_sync(0xffffffffu, msum, off);
  }
  __syncwarp();
  float c = wi / ((float)a.B * (float)a.D);
  for (int z = lane; z < Z; z += 32) g[z] = c * (ez[z] * msum - m[z]);
  __syncwarp();
  float *dA = p_g2 + (size_t)i * a.O2 + Z + a.aoff[d];
  for (int z = lane; z < Z; z += 32) { /* by atom, then action: no index division */
    const float gz = g[z], gm = gz / (float)n;
    for (int act = 0; act < n; act++) dA[(size_t)act * Z + z] = (act == ad ? gz : 0.0f) - gm;
  }
  if (lane == 0) ce_s[d] = ce, qa_s[d] = qa;
}

/* dV (the branches' dlogits summed in order) and the sample's loss and Q
 * sum, by the block after its branches */
__device__ __forceinline__ void loss_sample(const loss_args_t &a, int i, const float *g_all, const float *ce_s,
                                            const float *qa_s, float *p_g2, float *p_loss_i, float *p_qsum_i) {
  const int Z = a.Z;
  for (int z = threadIdx.x; z < Z; z += blockDim.x) {
    float v = 0.0f;
    for (int e = 0; e < a.D; e++) v += g_all[(size_t)e * Z + z];
    p_g2[(size_t)i * a.O2 + z] = v;
  }
  if (threadIdx.x == 0) {
    float li = 0.0f, qs = 0.0f;
    for (int e = 0; e < a.D; e++) li = li + ce_s[e] / (float)a.D, qs = qs + qa_s[e];
    p_loss_i[i] = li;
    p_qsum_i[i] = qs;
  }
}

/* One block per sample, one warp per branch: the Double-DQN action (Q sums
 * serial over z, the CPU's order), the C51 projection as a gather (lane z adds
 * source atoms in ascending j, c51_project's order), cross-entropy and
 * dlogits; then dV (sum over branches in order), loss_i and the Q sum.
 * TAIL = 0 reads the tail's log-probabilities (f->logp); TAIL = 1 forms the
 * ones it reads from the F4 outputs O by tail.cuh, as the tail kernel would:
 * every action of the selecting row, the target's at a' and the online s
 * row's at the taken action (ZL: atoms per lane, Z <= 32 ZL). */
template <int TAIL, int ZL>
__global__ void fused_loss_kernel(loss_args_t a) {
  auto *const p_gamma_dev = pz_at(a.gamma_dev, a.ps);
  auto *const p_gdisc = pz_at(a.gdisc, a.ps);
  auto *const p_logp = pz_at(a.logp, a.ps);
  auto *const p_r = pz_at(a.r, a.ps);
  auto *const p_done = pz_at(a.done, a.ps);
  auto *const p_w = pz_at(a.w, a.ps);
  auto *const p_a = pz_at(a.a, a.ps);
  auto *const p_g2 = pz_at(a.g2, a.ps);
  auto *const p_loss_i = pz_at(a.loss_i, a.ps);
  auto *const p_qsum_i = pz_at(a.qsum_i, a.ps);
  auto *const p_best = pz_at(a.best, a.ps);
  extern __shared__ float sh[];
  __shared__ float ce_s[MAXB], qa_s[MAXB];
  const int Z = a.Z, d = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x, B = a.B;
  float *g_all = sh; /* [D][Z]: each branch's dlogit at its taken action */
  size_t wo = (size_t)a.D * Z; /* this warp's floats after the branches' before it */
  for (int e = 0; e < d && e < a.D; e++) wo += (size_t)loss_warp_floats(a.n[e], Z, TAIL);
  float *wsh = sh + wo;
  const int nd = d < a.D ? a.n[d] : 0, rowf = TAIL ? (nd + 1) * Z : nd * Z; /* floats a row */
  float *lts = wsh, *sels = lts + rowf, *lps = sels + rowf + (TAIL ? rowf : 0);
  float *m = lps + Z, *pj = m + Z, *bj = pj + Z, *ez = bj + Z;
  int *lj = (int *)(ez + Z);
  float *q = ez + 2 * Z;
  /* this sample's scalars first: their L2 round trips overlap the copies'
   * instead of each following the arithmetic before its use */
  const int ai = p_a[i];
  const float ri = p_r[i], donei = p_done[i], wi = p_w[i];
  const float gamma = p_gdisc ? p_gdisc[i] : p_gamma_dev ? *p_gamma_dev : a.gamma;
  if (d < a.D) {
    const int n = a.n[d], nz = n * Z;
    const float *lp_s = p_logp + (size_t)i * a.AW + a.aoff[d];
    const float *lp_s2 = p_logp + ((size_t)B + i) * a.AW + a.aoff[d];
    const float *lt_s2 = p_logp + ((size_t)2 * B + i) * a.AW + a.aoff[d];
    const int ad = (ai / a.radix_after[d]) % n;
    /* TAIL: lts holds the target row's V then A_d, sels the online s' row's,
     * and the row after them the online s row's */
    float *const r_t2 = lts, *const r_s2 = sels, *const r_s = sels + rowf;
    /* the rows' copies all in flight at once (cp.async, one wait): copied
     * one after another they waited out three L2 round trips */
    if (TAIL) {
      const float *O_s = pz_at(a.O, a.ps) + (size_t)i * a.O2;
      stage_row(r_t2, O_s + (size_t)2 * B * a.O2, a.aoff[d], Z, nz, lane, 32);
      if (a.double_dqn) stage_row(r_s2, O_s + (size_t)B * a.O2, a.aoff[d], Z, nz, lane, 32);
      stage_row(r_s, O_s, a.aoff[d], Z, nz, lane, 32);
    } else {
      const float *lp_a = lp_s + (size_t)ad * Z;
      for (int k = lane; k < nz; k += 32) cp_async4(lts + k, lt_s2 + k);
      if (a.double_dqn)
        for (int k = lane; k < nz; k += 32) cp_async4(sels + k, lp_s2 + k);
      for (int k = lane; k < Z; k += 32) cp_async4(lps + k, lp_a + k);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncwarp();
    float base[ZL];
    if (TAIL) { /* the selecting row's probabilities, every action, in place */
      float *rs = a.double_dqn ? r_s2 : r_t2;
      tail_base<ZL>(rs, rs + Z, n, Z, lane, base);
      float *A = rs + Z;
      /* two actions at a time (their chains interleaved), each written as
       * its probabilities: -1.2 us on a lone step (DEVICE_NOTES item 120) */
      int q = 0;
      for (; q + 1 < n; q += 2)
        tail_action2<ZL, 1>(A + (size_t)q * Z, A + (size_t)(q + 1) * Z, base, Z, lane, A + (size_t)q * Z,
                            A + (size_t)(q + 1) * Z);
      if (q < n) tail_action<ZL, 1>(A + (size_t)q * Z, base, Z, lane, A + (size_t)q * Z);
      lts = r_t2 + Z, sels = r_s2 + Z;
      __syncwarp();
    }
    /* the probabilities of every (action, atom) by all 32 lanes first (in
     * place; TAIL: tail_action wrote them), then each action's Q as the same
     * serial sum over z as before: a lane per action alone computing its 51
     * expf was ~1/3 of the kernel */
    float *sel = a.double_dqn ? sels : lts;
    if (!TAIL) {
      for (int k = lane; k < nz; k += 32) sel[k] = expf(sel[k]);
      __syncwarp();
    }
    const int bst = loss_best(a, sel, n, lane, q);
    if (lane == 0) p_best[(size_t)d * B + i] = bst;
    if (TAIL) { /* the target's log-probabilities at a' (without Double DQN: already in sel), the
                 * online s row's at the taken action */
      if (a.double_dqn) {
        tail_base<ZL>(r_t2, r_t2 + Z, n, Z, lane, base);
        tail_action<ZL>(lts + (size_t)bst * Z, base, Z, lane, lts + (size_t)bst * Z);
      }
      tail_base<ZL>(r_s, r_s + Z, n, Z, lane, base);
      tail_action<ZL>(r_s + Z + (size_t)ad * Z, base, Z, lane, lps);
      __syncwarp();
    }
    /* lts holds probabilities without Double DQN */
    loss_finish(a, i, d, lane, lts + (size_t)bst * Z, a.double_dqn, lps, m, pj, bj, ez, lj, g_all + (size_t)d * Z, ad,
                n, ri, donei, wi, gamma, p_g2, ce_s, qa_s);
  }
  __syncthreads();
  loss_sample(a, i, g_all, ce_s, qa_s, p_g2, p_loss_i, p_qsum_i);
}

/* The same from the F4 outputs O, forming the log-probabilities it reads
 * by tail.cuh as the tail kernel would (ZL: atoms per lane, Z <= 32 ZL):
 * every action of the selecting row, the target's at a' and the online s
 * row's at the taken action. The block's W warps share the work before a'
 * (DEVICE_NOTES.md item 164: at batch 64 the ref network's branch 0, 9 of
 * the 15 actions, held its block ~2.5 times the other warps' time there):
 * all of them copy the rows; each branch's dueling bases (the selecting
 * row's, the online s row's and with Double DQN the target's: tail_base)
 * go to shared memory; the selecting rows' actions and every branch's
 * online s row at its taken action are dealt to the warps in turn, two at
 * a time (tail_action2x); then the branch warps take a', the target's row
 * there and the rest. Each action's operations and each sum's order are
 * tail.cuh's, whichever warp runs them: the same bits. */
template <int ZL>
__global__ void fused_loss_tail_kernel(loss_args_t a) {
  auto *const p_gamma_dev = pz_at(a.gamma_dev, a.ps);
  auto *const p_gdisc = pz_at(a.gdisc, a.ps);
  auto *const p_g2 = pz_at(a.g2, a.ps);
  extern __shared__ float sh[];
  __shared__ float ce_s[MAXB], qa_s[MAXB];
  const int Z = a.Z, D = a.D, w = threadIdx.x / 32, lane = threadIdx.x % 32, W = blockDim.x / 32;
  const int i = blockIdx.x, B = a.B, dd = a.double_dqn;
  float *g_all = sh; /* [D][Z]: each branch's dlogit at its taken action */
  /* branch e's floats at sh + wofs(e); the bases after every branch's:
   * [3][D][Z] (selecting, online s, target) */
  auto wofs = [&](int e) {
    size_t o = (size_t)D * Z;
    for (int k = 0; k < e; k++) o += (size_t)loss_warp_floats(a.n[k], Z, 1);
    return o;
  };
  float *bases = sh + wofs(D);
  const int ai = pz_at(a.a, a.ps)[i];
  const float ri = pz_at(a.r, a.ps)[i], donei = pz_at(a.done, a.ps)[i], wi = pz_at(a.w, a.ps)[i];
  const float gamma = p_gdisc ? p_gdisc[i] : p_gamma_dev ? *p_gamma_dev : a.gamma;
  /* branch e's rows: the target's, the online s' row's (Double DQN), the
   * online s row's, each V then A_e */
  auto row = [&](int e, int r) { return sh + wofs(e) + (size_t)r * (a.n[e] + 1) * Z; };
  /* every row's copies by every warp, all in flight at once (one wait) */
  const float *O_s = pz_at(a.O, a.ps) + (size_t)i * a.O2;
  for (int e = 0; e < D; e++)
    for (int r = 0; r < 3; r++)
      if (r != 1 || dd)
        stage_row(row(e, r), O_s + (size_t)(r == 0 ? 2 * B : r == 1 ? B : 0) * a.O2, a.aoff[e], Z, a.n[e] * Z,
                  threadIdx.x, blockDim.x);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  /* the bases, dealt to the warps: base b is row kind b / D of branch b % D
   * (0 the selecting row: the online s' row's with Double DQN, else the
   * target's; 1 the online s row's; 2 the target's, with Double DQN only) */
  const int nb = (dd ? 3 : 2) * D;
  for (int b = w; b < nb; b += W) {
    const int e = b % D, kind = b / D, r = kind == 1 ? 2 : kind == 2 ? 0 : dd ? 1 : 0;
    const float *V = row(e, r);
    float base[ZL];
    tail_base<ZL>(V, V + Z, a.n[e], Z, lane, base);
#pragma unroll
    for (int zi = 0; zi < ZL; zi++)
      if (lane + 32 * zi < Z) bases[(size_t)b * Z + lane + 32 * zi] = base[zi];
  }
  __syncthreads();
  /* the units before a': each branch's selecting-row actions (their
   * probabilities, in place), then each branch's online s row at its taken
   * action (log-probabilities, into lps); unit u to warp u % W, a warp's
   * two at a time */
  int nsel = 0;
  for (int e = 0; e < D; e++) nsel += a.n[e];
  const int nu = nsel + D;
  auto unit = [&](int u, const float *&A, int &b, float *&out, int &ex) {
    if (u < nsel) {
      int e = 0, k = u;
      while (k >= a.n[e]) k -= a.n[e], e++;
      A = row(e, dd ? 1 : 0) + Z + (size_t)k * Z, b = e, out = const_cast<float *>(A), ex = 1;
    } else {
      const int e = u - nsel, ad = (ai / a.radix_after[e]) % a.n[e];
      A = row(e, 2) + Z + (size_t)ad * Z, b = D + e, out = row(e, 3), ex = 0; /* lps */
    }
  };
  for (int u = w; u < nu; u += 2 * W) {
    const float *A0, *A1;
    float *o0, *o1;
    int b0, b1, x0, x1;
    unit(u, A0, b0, o0, x0);
    float base0[ZL], base1[ZL];
    load_base<ZL>(bases + (size_t)b0 * Z, Z, lane, base0);
    if (u + W < nu) {
      unit(u + W, A1, b1, o1, x1);
      load_base<ZL>(bases + (size_t)b1 * Z, Z, lane, base1);
      tail_action2x<ZL>(A0, A1, base0, base1, Z, lane, o0, o1, x0, x1);
    } else {
      tail_actionx<ZL>(A0, base0, Z, lane, o0, x0);
    }
  }
  __syncthreads();
  const int d = w;
  if (d < D) {
    const int n = a.n[d];
    float *lps = row(d, 3);
    float *m = lps + Z, *pj = m + Z, *bj = pj + Z, *ez = bj + Z;
    int *lj = (int *)(ez + Z);
    float *q = ez + 2 * Z;
    const int ad = (ai / a.radix_after[d]) % n;
    const float *sel = row(d, dd ? 1 : 0) + Z; /* probabilities */
    const int bst = loss_best(a, sel, n, lane, q);
    if (lane == 0) pz_at(a.best, a.ps)[(size_t)d * B + i] = bst;
    float *lt = row(d, 0) + Z + (size_t)bst * Z; /* without Double DQN: probabilities already */
    if (dd) { /* the target's log-probabilities at a' */
      float base[ZL];
      load_base<ZL>(bases + (size_t)(2 * D + d) * Z, Z, lane, base);
      tail_action<ZL>(lt, base, Z, lane, lt);
      __syncwarp();
    }
    loss_finish(a, i, d, lane, lt, dd, lps, m, pj, bj, ez, lj, g_all + (size_t)d * Z, ad, n, ri, donei, wi, gamma,
                p_g2, ce_s, qa_s);
  }
  __syncthreads();
  loss_sample(a, i, g_all, ce_s, qa_s, p_g2, pz_at(a.loss_i, a.ps), pz_at(a.qsum_i, a.ps));
}

/* loss = sum_i w_i loss_i / B, q_taken = sum_i qsum_i / (B D): each thread a
 * strided run in order, then a fixed tree (1024 threads) */
__global__ void fused_batch_loss_kernel(const float *__restrict__ loss_i, const float *__restrict__ qsum_i,
                                        const float *__restrict__ w, int B, int D, float *__restrict__ loss,
                                        float *__restrict__ q_taken, long long ps) {
  __shared__ float sl[1024], sq[1024];
  loss_i = pz_at(loss_i, ps), qsum_i = pz_at(qsum_i, ps), w = pz_at(w, ps), loss = pz_at(loss, ps);
  q_taken = pz_at(q_taken, ps);
  float l = 0.0f, q = 0.0f;
  for (int i = threadIdx.x; i < B; i += blockDim.x) {
    l += w[i] * loss_i[i];
    q += qsum_i[i];
  }
  sl[threadIdx.x] = l, sq[threadIdx.x] = q;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) sl[threadIdx.x] += sl[threadIdx.x + h], sq[threadIdx.x] += sq[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss = sl[0] / (float)B;
    *q_taken = sq[0] / ((float)B * (float)D);
  }
}

// launchers

static size_t loss_smem(const net_layout_t *L, int tail) {
  size_t f = (size_t)L->D * L->Z;
  for (int d = 0; d < L->D; d++) f += (size_t)loss_warp_floats(L->n[d], L->Z, tail != 0);
  if (tail == 2) f += (size_t)3 * L->D * L->Z; /* fused_loss_tail_kernel's dueling bases */
  return sizeof(float) * f;
}

extern "C" int cuda_loss_fits(const net_layout_t *L) { return loss_smem(L, 0) <= 48 * 1024; }

/* The loss forms the tail's rows itself (TAIL = 1) wherever they fit its 48
 * KB: the tail's 3B x D warps writing every log-probability and the loss
 * reading them back cost more than forming only the rows the loss reads
 * (kernels/dev/DEVICE_NOTES.md item 118: -4.6% a member-step at 8 TF32
 * members, -1% on a lone step at batch 256). Past 48 KB (many branches of
 * many atoms) the tail kernel writes them and TAIL = 0 reads them: the same
 * functions (tail.cuh), the same bits. */
extern "C" int cuda_loss_takes_tail(const net_layout_t *L, const cuda_fused_t *f) {
  return !f->ens && f->K == 1 && loss_smem(L, 1) <= 48 * 1024;
}

extern "C" int cuda_loss(const net_layout_t *L, const cuda_dqn_hp_t *hp, const cuda_fused_t *f, int B,
                         const float *r, const float *done, const float *w, const int32_t *a, float *loss_i,
                         int32_t *best, cudaStream_t st) {
  loss_args_t la;
  memset(&la, 0, sizeof la);
  la.B = B, la.Z = L->Z, la.AW = f->AW, la.O2 = f->O2, la.D = L->D, la.double_dqn = hp->double_dqn;
  int radix = 1;
  for (int d = L->D - 1; d >= 0; d--) la.radix_after[d] = radix, radix *= L->n[d];
  for (int d = 0; d < L->D; d++) la.n[d] = L->n[d], la.aoff[d] = f->aoff[d];
  la.vmin = hp->v_min, la.vmax = hp->v_max, la.gamma = hp->gamma, la.gamma_dev = hp->gamma_dev, la.gdisc = hp->gdisc;
  la.logp = f->logp, la.r = r, la.done = done, la.w = w, la.a = a;
  la.g2 = f->g2, la.loss_i = loss_i, la.qsum_i = loss_i + B, la.best = best;
  la.ps = f->pz.stride;
  la.O = f->O; /* [3B, O2], g2's row width: V [Z] then every A_d */
  const dim3 grid((unsigned)B, 1, (unsigned)f->pz.n), blk(32 * L->D);
  /* a block's actions before a' dealt to more warps where the blocks are
   * few (a wave or less: each block's latency is the launch's), the
   * branches' warps alone where they are many (their issue slots bound
   * them: sharing cost a population 3-4%); the same bits either way
   * (kernels/dev/DEVICE_NOTES.md item 164) */
  const int tail = cuda_loss_takes_tail(L, f), shared = tail && (long long)B * f->pz.n <= 264 &&
                                                         loss_smem(L, 2) <= 48 * 1024;
  if (shared) {
    int units = L->D;
    for (int d = 0; d < L->D; d++) units += L->n[d];
    int W = (units + 1) / 2; /* two units a warp: one tail_action2x */
    /* at most 16 warps (a branch warp each for D <= LEARNER_MAX_BRANCHES =
     * 16): 512 threads leave 128 registers a thread, far above its 48-64 */
    W = W > 16 ? 16 : W;
    W = W < L->D ? L->D : W;
    const size_t sm = loss_smem(L, 2);
    if (L->Z <= 64) fused_loss_tail_kernel<2><<<grid, 32 * W, sm, st>>>(la);
    else if (L->Z <= 128) fused_loss_tail_kernel<4><<<grid, 32 * W, sm, st>>>(la);
    else fused_loss_tail_kernel<LEARNER_MAX_ATOMS / 32><<<grid, 32 * W, sm, st>>>(la);
  } else if (!tail) fused_loss_kernel<0, 1><<<grid, blk, loss_smem(L, 0), st>>>(la);
  else if (L->Z <= 64) fused_loss_kernel<1, 2><<<grid, blk, loss_smem(L, 1), st>>>(la);
  else if (L->Z <= 128) fused_loss_kernel<1, 4><<<grid, blk, loss_smem(L, 1), st>>>(la);
  else fused_loss_kernel<1, LEARNER_MAX_ATOMS / 32><<<grid, blk, loss_smem(L, 1), st>>>(la);
  return (int)cudaGetLastError();
}

extern "C" int cuda_batch_loss(const float *loss_i, const float *qsum_i, const float *w, int B, int D, float *loss,
                               float *q_taken, cuda_pz_t pz, cudaStream_t st) {
  fused_batch_loss_kernel<<<dim3(1, 1, (unsigned)pz.n), 1024, 0, st>>>(loss_i, qsum_i, w, B, D, loss, q_taken,
                                                                       pz.stride);
  return (int)cudaGetLastError();
}
