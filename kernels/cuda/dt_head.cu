/*
 * dt_head.cu — the Decision Transformer's end at the state tokens on the
 * GPU: LN_f, the action heads and the cross-entropy forward, and their
 * backward down to the residual stream (the CPU spec: kernels/cpu/
 * dt_impl.h; the math: docs/learner.md §16). Only a step's state token
 * (3t + 1 of its window) reaches a head, so LN_f and its backward run at
 * those B K rows alone: every other token's gradient is zero.
 *
 * One warp a step: the heads are A (the branches' actions, 15 in the ref
 * config) dot products of E, too small for a GEMM tile, and the step's
 * LayerNorm, logits, cross-entropy and their gradients are row-local, so a
 * launch each way replaces the forward's six (LN_f over every token, the
 * gather, a GEMM a branch, the cross-entropy) and the backward's chain of
 * a GEMM a branch, the scatter and LN_f's backward. The heads' weight and
 * bias gradients (GEMMs over the B K steps) stay dt_gemm_wgrad's and
 * dt_colsum's, on side streams (dt_backward.cu).
 */
#include <math.h>

#include "cp_async.cuh"
#include "smem_optin.cuh"
#include "cuda_check.h"
#include "dt_cuda.cuh"

// kernels

/* floats of shared memory the staged heads take (dt_head_stage) */
static __host__ __device__ __forceinline__ size_t dt_head_wsz(const dt_layout_t &L) {
  return (size_t)L.A * L.E + L.A;
}

/* the heads' weights (every branch's rows, branch d's row c at (off_d + c)
 * E) and then their biases (logit off_d + c at A E + off_d + c) into
 * shared memory at w, by the block's threads in turn: each warp's logits
 * then read them there instead of one L2 round trip a logit (the same
 * floats, the same sums). Issued as 4-byte asynchronous copies, every one
 * before any lands, and before the launch waits on the kernel before it:
 * of the kernels only AdamW, at a step's end, writes p, and it has completed
 * before this launch's blocks are placed (pdl.cuh: a kernel waits before it
 * lets the next start, so every kernel but the one just before has
 * completed; a head follows W_2's GEMM or g's clearing, never AdamW); the
 * other writes of p (the initial upload, a checkpoint's load, Act's copy)
 * are copies, which a programmatic launch never overlaps. So the copies run
 * beside the kernel before's tail. dt_head_stage_wait after the launch's
 * wait. */
static __device__ __forceinline__ void dt_head_stage(const dt_layout_t &L, const float *p, float *w) {
  for (int d = 0, off = 0; d < L.D; off += L.n[d], d++) {
    const float *src = p + L.head_w[d];
    float *dst = w + (size_t)off * L.E;
    for (int i = threadIdx.x; i < L.n[d] * L.E; i += blockDim.x) cp_async4(dst + i, src + i);
    for (int i = threadIdx.x; i < L.n[d]; i += blockDim.x) cp_async4(w + (size_t)L.A * L.E + off + i, p + L.head_b[d] + i);
  }
  cp_async_commit();
}
static __device__ __forceinline__ void dt_head_stage_wait() {
  cp_async_wait<0>();
  __syncthreads();
}

/* the logits zs[j] = y . W_j + b_j of every branch from the staged heads
 * (W_j at w + j E, b_j at w + A E + j), DT_HEAD_G at a time: each lane's
 * partial sums (elements lane, lane + 32, .. in turn) of the group side by
 * side, then their trees level by level, so the group's dot products
 * overlap where one after another each waited out its own chain. Each
 * logit is the same sum in the same order as one at a time: the same
 * bits. */
#define DT_HEAD_G 8
static __device__ __forceinline__ void dt_head_logits(const float *w, const float *y, int A, int E, int lane,
                                                      float *zs) {
  for (int j0 = 0; j0 < A; j0 += DT_HEAD_G) {
    float a[DT_HEAD_G];
#pragma unroll
    for (int u = 0; u < DT_HEAD_G; u++) a[u] = 0.0f;
    for (int e = lane; e < E; e += 32) {
      const float ye = y[e];
#pragma unroll
      for (int u = 0; u < DT_HEAD_G; u++)
        if (j0 + u < A) a[u] += ye * w[(size_t)(j0 + u) * E + e];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int u = 0; u < DT_HEAD_G; u++) a[u] += __shfl_xor_sync(0xffffffffu, a[u], o);
    if (lane == 0)
#pragma unroll
      for (int u = 0; u < DT_HEAD_G; u++)
        if (j0 + u < A) zs[j0 + u] = a[u] + w[(size_t)A * E + j0 + u];
  }
}

/* The forward's end at the state tokens, one warp a step (the heads read
 * nothing else): LN_f of the step's state token (3t + 1 of its window) into
 * xs, xhf and rf; the logits z = xs W_d^T + b_d of every branch d, each an
 * fp32 sum over e (lane l the elements l, l + 32, .. in turn, then a fixed
 * tree over the lanes); and the step's branch-mean cross-entropy with dz =
 * (softmax - onehot) / (D x real steps) (sums[1]: dt_count_kernel before).
 * A padded step's z, dz and CE are 0, as the CPU's. One launch where LN_f
 * over every token, the state tokens' gather, a GEMM a branch and the
 * cross-entropy were six on the step's critical path
 * (kernels/dev/DEVICE_NOTES.md item 150). Shared memory: with sw, the heads'
 * weights (A x E floats, dt_head_stage); then a warp's y (E floats) and z
 * (A floats). */
__global__ void dt_head_kernel(const dt_layout_t L, const float *X, const float *p, const float *mask,
                               const int32_t *actions, int BK, float *xs, float *xhf, float *rf, float *z, float *dz,
                               float *loss_step, const float *sums, int sw, cuda_pz_t pz) {
  extern __shared__ float dth_sh[];
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, s = dt_warp_row();
  const long long mo = dt_mo(pz);
  p = dt_off(p, mo);
  const int E = L.E, A = L.A, K = L.K;
  if (sw) dt_head_stage(L, p, dth_sh); /* before the wait: p is not the kernel before's */
  PDL_ENTER();
  if (sw) dt_head_stage_wait();
  if (s >= BK) return;
  X = dt_off(X, mo), mask = dt_off(mask, mo), actions = dt_off(actions, mo), xs = dt_off(xs, mo);
  xhf = dt_off(xhf, mo), rf = dt_off(rf, mo), z = dt_off(z, mo), dz = dt_off(dz, mo);
  loss_step = dt_off(loss_step, mo), sums = dt_off(sums, mo);
  float *y = dth_sh + (sw ? dt_head_wsz(L) : 0) + (size_t)w * (E + A), *zs = y + E;
  const size_t tok = (size_t)(s / K) * 3 * K + 3 * (s % K) + 1, row = (size_t)s * E;
  const float r = dt_ln_row(X + tok * E, E, lane, p + L.lnf_w, p + L.lnf_b, xhf + row, y, 0);
  if (lane == 0) rf[s] = r;
  for (int e = lane; e < E; e += 32) xs[row + e] = y[e];
  float *zr = z + (size_t)s * A, *dr = dz + (size_t)s * A;
  if (mask[s] == 0) {
    for (int c = lane; c < A; c += 32) zr[c] = 0, dr[c] = 0;
    if (lane == 0) loss_step[s] = 0;
    return;
  }
  if (sw) {
    dt_head_logits(dth_sh, y, A, E, lane, zs);
  } else {
    for (int d = 0, off = 0; d < L.D; off += L.n[d], d++)
      for (int c = 0; c < L.n[d]; c++) {
        const float *wr = p + L.head_w[d] + (size_t)c * E;
        float a = 0;
        for (int e = lane; e < E; e += 32) a += y[e] * wr[e];
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == 0) zs[off + c] = a + p[L.head_b[d] + c];
      }
  }
  __syncwarp();
  for (int c = lane; c < A; c += 32) zr[c] = zs[c];
  /* the cross-entropy: every lane the same branch maxima, sums and ce (the
   * same floats in the same order, so the same values in every lane), the
   * exps of a round of 32 actions one a lane, handed to the sums in order
   * by shuffles */
  const float inv = 1.0f / ((float)L.D * sums[1]);
  const int32_t a = actions[s];
  float ce = 0;
  for (int d = 0, off = 0; d < L.D; off += L.n[d], d++) {
    const int nd = L.n[d], ad = (a / L.radix_after[d]) % nd;
    float mx = -INFINITY;
    for (int c = 0; c < nd; c++) mx = fmaxf(mx, zs[off + c]);
    float se = 0;
    for (int c0 = 0; c0 < nd; c0 += 32) {
      const float ez = c0 + lane < nd ? expf(zs[off + c0 + lane] - mx) : 0.0f;
      for (int c = 0; c < 32 && c0 + c < nd; c++) se += __shfl_sync(0xffffffffu, ez, c);
    }
    const float lse = mx + logf(se);
    ce += lse - zs[off + ad];
    for (int c = lane; c < nd; c += 32) dr[off + c] = (expf(zs[off + c] - lse) - (c == ad ? 1.0f : 0.0f)) * inv;
  }
  if (lane == 0) loss_step[s] = ce / (float)L.D;
}

/* dxs = sum over the branches d of dz_d W_d (each element an fp32 sum
 * over the A logits in order), and dX = LN_f's input gradient of dxs at the
 * step's state token, zeros at its return and action tokens (res NULL: dX
 * is the gradient alone); one warp a step. Shared memory: with sw, the
 * heads' weights (dt_head_stage); then a warp's dy (E floats) and dz (A
 * floats). */
__global__ void dt_head_bwd_kernel(const dt_layout_t L, const float *p, const float *dz, const float *xhf,
                                   const float *rf, int BK, float *dxs, float *dX, int sw, cuda_pz_t pz) {
  extern __shared__ float dth_sh[];
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, s = dt_warp_row();
  const long long mo = dt_mo(pz);
  p = dt_off(p, mo);
  const int E = L.E, A = L.A, K = L.K;
  if (sw) dt_head_stage(L, p, dth_sh); /* before the wait: p is not the kernel before's */
  PDL_ENTER();
  if (sw) dt_head_stage_wait();
  if (s >= BK) return;
  dz = dt_off(dz, mo), xhf = dt_off(xhf, mo), rf = dt_off(rf, mo), dxs = dt_off(dxs, mo);
  dX = dt_off(dX, mo);
  float *dy = dth_sh + (sw ? dt_head_wsz(L) : 0) + (size_t)w * (E + A), *dzs = dy + E;
  for (int c = lane; c < A; c += 32) dzs[c] = dz[(size_t)s * A + c];
  __syncwarp();
  const size_t tok = (size_t)(s / K) * 3 * K + 3 * (s % K) + 1, row = (size_t)s * E;
  for (int e = lane; e < E; e += 32) {
    float a = 0;
    for (int d = 0, off = 0; d < L.D; off += L.n[d], d++) {
      const float *wd = sw ? dth_sh + (size_t)off * E + e : p + L.head_w[d] + e;
      for (int c = 0; c < L.n[d]; c++) a += dzs[off + c] * wd[(size_t)c * E];
    }
    dy[e] = a, dxs[row + e] = a;
  }
  __syncwarp();
  dt_ln_bwd_row([&](int e) { return dy[e]; }, xhf + row, rf[s], p + L.lnf_w, E, lane, dX + tok * E, nullptr);
  for (int e = lane; e < E; e += 32) dX[(tok - 1) * E + e] = 0.0f, dX[(tok + 1) * E + e] = 0.0f;
}

// launchers

static size_t head_smem(int wpb, int sw, const dt_layout_t *L) {
  return sizeof(float) * ((size_t)wpb * (L->E + L->A) + (sw ? dt_head_wsz(*L) : 0));
}

int dt_head_init(const dt_layout_t *L, int *wpb, int *sw) {
  int dev, optin = 0;
  CUDA_RET(cudaGetDevice(&dev));
  CUDA_RET(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  /* eight steps a block where their rows fit the default 48 KB, fewer
   * otherwise; a row past that takes the device's opt-in, as dt_attn_init.
   * The heads' weights staged beside them where all of it fits the
   * default 48 KB (the reference heads: 7.5 KB), read from L2 otherwise.
   * Eight steps with the weights staged: -0.9% a TF32 step at batch 64;
   * four with them, or eight without, a tie or worse
   * (kernels/dev/DEVICE_NOTES.md item 213) */
  *wpb = 8;
  while (*wpb > 1 && head_smem(*wpb, 0, L) > 48 * 1024) *wpb /= 2;
  if (head_smem(1, 0, L) > (size_t)optin) return (int)cudaErrorInvalidValue; /* a row (E + A floats) past shared memory */
  *sw = head_smem(*wpb, 1, L) <= 48 * 1024;
  if (head_smem(1, 0, L) > 48 * 1024) {
    CUDA_RET(cuda_allow_optin(dt_head_kernel, optin));
    CUDA_RET(cuda_allow_optin(dt_head_bwd_kernel, optin));
  }
  return 0;
}

int dt_head_fwd(const cuda_dt_t *d, const float *X, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int BK = d->B * L->K, wpb = d->head_wpb;
  pdl_launch(dt_head_kernel, dt_grid(d, dim3((unsigned)((BK + wpb - 1) / wpb))), 32 * wpb,
             head_smem(wpb, d->head_sw, L), st, *L, X, d->p, d->mask, d->actions, BK, d->xs, d->xhf, d->rf, d->z,
             d->dz, d->loss_step, d->sums, d->head_sw, d->pz);
  return (int)cudaGetLastError();
}

int dt_head_bwd(const cuda_dt_t *d, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int BK = d->B * L->K, wpb = d->head_wpb;
  pdl_launch(dt_head_bwd_kernel, dt_grid(d, dim3((unsigned)((BK + wpb - 1) / wpb))), 32 * wpb,
             head_smem(wpb, d->head_sw, L), st, *L, d->p, d->dz, d->xhf, d->rf, BK, d->dxs, d->dX, d->head_sw, d->pz);
  return (int)cudaGetLastError();
}
