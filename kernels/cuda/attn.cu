/*
 * attn.cu — the attention block of DESIGN.md §6.1 on the GPU: the twin of
 * kernels/cpu/attn_impl.h (same names, the same sums in the same order per
 * token), between the trunk (F2) and the heads (F3) of the step (step.cuh),
 * and in Act's forward (net_forward.cu). Per row, T tokens of width
 * d = H2 / T, n_h heads of width d_h = d / n_h, post-LN:
 *   x_t = h_t + pos_t;  q, k, v = W x + b;  alpha = softmax_s(q_t . k_s / sqrt(d_h))
 *   o_t = sum_s alpha_ts v_s;  u = W_o o + b_o;  y = LN(x + u)  ->  h'
 *
 * Three launches a step. A row's whole block (its T x d tokens, a few KB) is
 * one thread block's work held in shared memory, so the forward is one
 * launch for every row of the step (online s and s' with the online
 * parameters, target s' with the target's) and the backward's data
 * gradients one launch for the B online rows; a third launch sums the
 * parameter gradients over the tokens. The first version ran each operation
 * as its own launch (the projections through the generic cuda_gemm, the
 * LayerNorm a thread per token): 32 dependent launches cost ~240 us of a
 * 450 us step at batch 64 (kernels/dev/DEVICE_NOTES.md items 56 and 60).
 *
 * A projection streams its weight matrix through shared memory EC input
 * channels at a time (att_linear_t, transposed, padded so both the staging
 * and the reads are free of bank conflicts) or EC output rows at a time
 * (att_linear_n, for the backward's products with W). Every sum runs in a
 * fixed order and the parameter gradients are fixed trees over fixed row
 * groups: no atomics, bit-identical reruns.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_check.h"
#include "net_forward.cuh"
#include "step.cuh"

#define ATT_NT 256        /* threads of the row kernels */
#define ATT_EC 32         /* weight channels staged per chunk */
#define ATT_SMEM_MAX 200 * 1024
#define ATT_WG_WARPS 32   /* row groups of the parameter-gradient kernel (a power of 2) */

// kernels

/* y [T, d] = x [T, d] W^T + b (nn.Linear; W [d, d] row-major [out][in]),
 * x and y in shared memory, W staged ec input channels at a time as
 * sw[e][c] (row stride d + 1). The caller syncs before y is read. */
__device__ void att_linear_t(const float *sx, const float *__restrict__ W, const float *__restrict__ b, float *sy,
                             float *sw, int T, int d, int ec) {
  const int n = T * d, ws = d + 1;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sy[i] = 0.0f;
  for (int e0 = 0; e0 < d; e0 += ec) {
    const int w = min(ec, d - e0);
    __syncthreads();
    for (int j = threadIdx.x; j < d * w; j += blockDim.x) sw[(j % w) * ws + j / w] = W[(size_t)(j / w) * d + e0 + j % w];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float *xt = sx + (i / d) * d + e0, *wc = sw + i % d;
      float acc = 0.0f;
      for (int e = 0; e < w; e++) acc += xt[e] * wc[e * ws];
      sy[i] += acc;
    }
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) sy[i] += b[i % d];
}

/* y [T, d] (+)= g [T, d] W (the input gradient of nn.Linear: y[t][e] =
 * sum_c g[t][c] W[c][e]), W staged ec rows at a time as sw[c][e]. acc 0:
 * y is overwritten. The caller syncs before y is read. */
__device__ void att_linear_n(const float *sg, const float *__restrict__ W, float *sy, float *sw, int T, int d, int ec,
                             int acc0) {
  const int n = T * d;
  if (!acc0)
    for (int i = threadIdx.x; i < n; i += blockDim.x) sy[i] = 0.0f;
  for (int c0 = 0; c0 < d; c0 += ec) {
    const int w = min(ec, d - c0);
    __syncthreads();
    for (int j = threadIdx.x; j < d * w; j += blockDim.x) sw[j] = W[(size_t)c0 * d + j];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float *gt = sg + (i / d) * d + c0, *we = sw + i % d;
      float acc = 0.0f;
      for (int c = 0; c < w; c++) acc += gt[c] * we[c * d];
      sy[i] += acc;
    }
  }
}

/* a warp's sum over its lanes in a fixed tree */
__device__ __forceinline__ float att_warp_sum(float v) {
  for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/* The forward of one row per block. Rows below rows0 use P0 (the online
 * parameters), the rest P1 (the target's). Rows below keep write every
 * activation the backward reads; the others only h'. */
__global__ void __launch_bounds__(ATT_NT) attn_forward_kernel(const float *__restrict__ P0, const float *__restrict__ P1,
                                                              int rows0, net_attn_t at, const float *__restrict__ h,
                                                              cuda_attn_acts_t A, int keep, int ec) {
  extern __shared__ float fsm[];
  const int r = blockIdx.x, T = at.T, nh = at.nh, d = at.d, dh = d / nh, H2 = T * d;
  const float *P = r < rows0 ? P0 : P1;
  float *sx = fsm, *sq = sx + H2, *sk = sq + H2, *sv = sk + H2, *sal = sv + H2, *sw = sal + nh * T * T;
  const bool all = r < keep;
  const size_t ro = (size_t)r * H2;
  for (int i = threadIdx.x; i < H2; i += blockDim.x) {
    sx[i] = h[ro + i] + P[at.off_pos + i];
    if (all) A.tx[ro + i] = sx[i];
  }
  float *proj[3] = {sq, sk, sv};
  for (int m = 0; m < 3; m++) att_linear_t(sx, P + at.off_w[m], P + at.off_b[m], proj[m], sw, T, d, ec);
  __syncthreads();
  if (all)
    for (int i = threadIdx.x; i < H2; i += blockDim.x) A.tq[ro + i] = sq[i], A.tk[ro + i] = sk[i], A.tv[ro + i] = sv[i];
  /* scores (j, t, s), then the softmax per (j, t): attn_forward's loops */
  const float scale = 1.0f / sqrtf((float)dh);
  for (int i = threadIdx.x; i < nh * T * T; i += blockDim.x) {
    const int j = i / (T * T), t = i / T % T, s = i % T;
    const float *qt = sq + t * d + j * dh, *ks = sk + s * d + j * dh;
    float dot = 0.0f;
    for (int c = 0; c < dh; c++) dot += qt[c] * ks[c];
    sal[i] = dot * scale;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nh * T; i += blockDim.x) {
    float *al = sal + (size_t)i * T, mx = -INFINITY, sum = 0.0f;
    for (int s = 0; s < T; s++) mx = al[s] > mx ? al[s] : mx;
    for (int s = 0; s < T; s++) al[s] = expf(al[s] - mx);
    for (int s = 0; s < T; s++) sum += al[s];
    for (int s = 0; s < T; s++) al[s] /= sum;
  }
  __syncthreads();
  if (all)
    for (int i = threadIdx.x; i < nh * T * T; i += blockDim.x) A.alpha[(size_t)r * nh * T * T + i] = sal[i];
  /* o_t = sum_s alpha_ts v_s into sq (q is read no more) */
  for (int i = threadIdx.x; i < H2; i += blockDim.x) {
    const int t = i / d, c = i % d, j = c / dh;
    const float *al = sal + ((size_t)j * T + t) * T;
    float o = 0.0f;
    for (int s = 0; s < T; s++) o += al[s] * sv[s * d + c];
    sq[i] = o;
    if (all) A.to[ro + i] = o;
  }
  att_linear_t(sq, P + at.off_w[NET_ATTN_O], P + at.off_b[NET_ATTN_O], sk, sw, T, d, ec); /* u into sk */
  __syncthreads();
  /* LayerNorm of e = u + x, a warp per token */
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const float *gam = P + at.off_ln_w, *bet = P + at.off_ln_b;
  for (int t = threadIdx.x >> 5; t < T; t += nw) {
    float *e = sk + t * d;
    float s1 = 0.0f;
    for (int c = lane; c < d; c += 32) e[c] += sx[t * d + c], s1 += e[c];
    const float mean = att_warp_sum(s1) / (float)d;
    float s2 = 0.0f;
    for (int c = lane; c < d; c += 32) s2 += (e[c] - mean) * (e[c] - mean);
    const float rs = 1.0f / sqrtf(att_warp_sum(s2) / (float)d + 1e-5f);
    if (all && lane == 0) A.rstd[(size_t)r * T + t] = rs;
    for (int c = lane; c < d; c += 32) {
      const float xh = (e[c] - mean) * rs;
      if (all) A.xhat[ro + t * d + c] = xh;
      A.hatt[ro + t * d + c] = gam[c] * xh + bet[c];
    }
  }
}

/* The backward's data gradients of one online row per block: dy = dL/dh'
 * -> de (the LayerNorm's), do = de W_o, the attention's dq, dk, dv (dk and
 * dv summed over the query tokens in order), dx = de + dq W_q + dk W_k +
 * dv W_v and gh = dx lrelu'(h). de, dq, dk, dv and dx go to global memory
 * for the parameter gradients. */
__global__ void __launch_bounds__(ATT_NT) attn_backward_kernel(const float *__restrict__ P, net_attn_t at,
                                                               cuda_attn_acts_t A, cuda_attn_grads_t G,
                                                               const float *__restrict__ dy,
                                                               const float *__restrict__ h, float slope,
                                                               float *__restrict__ gh, int ec) {
  extern __shared__ float bsm[];
  const int r = blockIdx.x, T = at.T, nh = at.nh, d = at.d, dh = d / nh, H2 = T * d, na = nh * T * T;
  float *sde = bsm, *sdo = sde + H2, *sq = sdo + H2, *sk = sq + H2, *sv = sk + H2, *sdq = sv + H2, *sdk = sdq + H2,
        *sdv = sdk + H2, *sal = sdv + H2, *sgs = sal + na, *sw = sgs + na;
  const size_t ro = (size_t)r * H2;
  for (int i = threadIdx.x; i < H2; i += blockDim.x) {
    sde[i] = dy[ro + i];
    sdq[i] = A.xhat[ro + i]; /* xhat, until dq */
    sq[i] = A.tq[ro + i], sk[i] = A.tk[ro + i], sv[i] = A.tv[ro + i];
  }
  for (int i = threadIdx.x; i < na; i += blockDim.x) sal[i] = A.alpha[(size_t)r * na + i];
  __syncthreads();
  /* LayerNorm: de = rstd (dy gamma - mean(dy gamma) - xhat mean(dy gamma xhat)), a warp per token */
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const float *gam = P + at.off_ln_w;
  for (int t = threadIdx.x >> 5; t < T; t += nw) {
    float *g = sde + t * d;
    const float *xh = sdq + t * d;
    float m1 = 0.0f, m2 = 0.0f;
    for (int c = lane; c < d; c += 32) {
      const float gx = g[c] * gam[c];
      m1 += gx, m2 += gx * xh[c];
    }
    m1 = att_warp_sum(m1) / (float)d;
    m2 = att_warp_sum(m2) / (float)d;
    const float rs = A.rstd[(size_t)r * T + t];
    for (int c = lane; c < d; c += 32) {
      g[c] = rs * (g[c] * gam[c] - m1 - xh[c] * m2);
      G.dte[ro + t * d + c] = g[c];
    }
  }
  /* do = de W_o */
  att_linear_n(sde, P + at.off_w[NET_ATTN_O], sdo, sw, T, d, ec, 0);
  __syncthreads();
  /* dalpha_ts = do_t . v_s per head, then dscore = alpha (dalpha - sum alpha dalpha) / sqrt(d_h) */
  for (int i = threadIdx.x; i < na; i += blockDim.x) {
    const int j = i / (T * T), t = i / T % T, s = i % T;
    const float *dot = sdo + t * d + j * dh, *vs = sv + s * d + j * dh;
    float g = 0.0f;
    for (int c = 0; c < dh; c++) g += dot[c] * vs[c];
    sgs[i] = g;
  }
  __syncthreads();
  const float scale = 1.0f / sqrtf((float)dh);
  for (int i = threadIdx.x; i < nh * T; i += blockDim.x) {
    const float *al = sal + (size_t)i * T;
    float *da = sgs + (size_t)i * T, sum = 0.0f;
    for (int s = 0; s < T; s++) sum += al[s] * da[s];
    for (int s = 0; s < T; s++) da[s] = al[s] * (da[s] - sum) * scale;
  }
  __syncthreads();
  /* dq_t = sum_s gs_ts k_s; dk_s = sum_t gs_ts q_t; dv_s = sum_t alpha_ts do_t (t in order) */
  for (int i = threadIdx.x; i < H2; i += blockDim.x) {
    const int t = i / d, c = i % d, j = c / dh;
    const float *gq = sgs + ((size_t)j * T + t) * T, *gk = sgs + (size_t)j * T * T + t, *ak = sal + (size_t)j * T * T + t;
    float dq = 0.0f, dk = 0.0f, dv = 0.0f;
    for (int s = 0; s < T; s++) {
      dq += gq[s] * sk[s * d + c];
      dk += gk[(size_t)s * T] * sq[s * d + c];
      dv += ak[(size_t)s * T] * sdo[s * d + c];
    }
    sdq[i] = dq, sdk[i] = dk, sdv[i] = dv;
    G.dtq[ro + i] = dq, G.dtk[ro + i] = dk, G.dtv[ro + i] = dv;
  }
  __syncthreads();
  /* dx = de + dq W_q + dk W_k + dv W_v, into sdo */
  for (int i = threadIdx.x; i < H2; i += blockDim.x) sdo[i] = sde[i];
  const float *dp[3] = {sdq, sdk, sdv};
  for (int m = 0; m < 3; m++) att_linear_n(dp[m], P + at.off_w[m], sdo, sw, T, d, ec, 1);
  __syncthreads();
  for (int i = threadIdx.x; i < H2; i += blockDim.x) {
    G.dtx[ro + i] = sdo[i];
    gh[ro + i] = sdo[i] * (h[ro + i] > 0.0f ? 1.0f : slope);
  }
}

/* The parameter gradients, summed over the n = B T tokens (B rows for pos):
 * blocks [0, 4 d) are (matrix m, output row c): dW_m[c][e] = sum_i g[i][c]
 * x[i][e] and db_m[c] = sum_i g[i][c] (m = q, k, v: g = dq, dk, dv, x = tx;
 * m = o: g = de, x = to); then blocks of 32 LayerNorm columns (dgamma = sum
 * dy xhat, dbeta = sum dy) and of 32 pos columns (dpos = sum over rows of
 * dx). A lane per column, a warp per group of rows (row i to warp i mod
 * ATT_WG_WARPS, in order), then the warps' sums in a fixed tree. */
__device__ __forceinline__ float att_tree(float v, float (*red)[33]) {
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  red[w][lane] = v;
  __syncthreads();
  for (int h = ATT_WG_WARPS / 2; h > 0; h >>= 1) {
    if (w < h) red[w][lane] += red[w + h][lane];
    __syncthreads();
  }
  return red[0][lane];
}

__global__ void __launch_bounds__(32 * ATT_WG_WARPS) attn_wgrad_kernel(net_attn_t at, cuda_attn_acts_t A,
                                                                       cuda_attn_grads_t G, const float *__restrict__ dy,
                                                                       int B, float *__restrict__ grad) {
  __shared__ float red[ATT_WG_WARPS][33];
  const int T = at.T, d = at.d, H2 = T * d, n = B * T, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int b = blockIdx.x;
  if (b < 4 * d) {
    const int m = b / d, c = b % d;
    const float *g = m == 0 ? G.dtq : m == 1 ? G.dtk : m == 2 ? G.dtv : G.dte;
    const float *x = m == NET_ATTN_O ? A.to : A.tx;
    float *dW = grad + at.off_w[m] + (size_t)c * d;
    for (int e0 = 0; e0 < d; e0 += 32) { /* the bias with the first columns */
      const int e = e0 + lane;
      float s = 0.0f, sb = 0.0f;
#pragma unroll 4
      for (int i = w; i < n; i += ATT_WG_WARPS) {
        const float gi = g[(size_t)i * d + c];
        s += e < d ? gi * x[(size_t)i * d + e] : 0.0f;
        sb += gi;
      }
      s = att_tree(s, red);
      if (w == 0 && e < d) dW[e] = s;
      if (e0 == 0) {
        sb = att_tree(sb, red);
        if (threadIdx.x == 0) grad[at.off_b[m] + c] = sb;
      }
    }
    return;
  }
  b -= 4 * d;
  const int nl = (d + 31) / 32;
  if (b < nl) {
    const int c = b * 32 + lane;
    float sg = 0.0f, sb = 0.0f;
    if (c < d)
#pragma unroll 4
      for (int i = w; i < n; i += ATT_WG_WARPS) {
        const float gy = dy[(size_t)i * d + c];
        sg += gy * A.xhat[(size_t)i * d + c], sb += gy;
      }
    sg = att_tree(sg, red);
    if (w == 0 && c < d) grad[at.off_ln_w + c] = sg;
    sb = att_tree(sb, red);
    if (w == 0 && c < d) grad[at.off_ln_b + c] = sb;
    return;
  }
  b -= nl;
  const int k = b * 32 + lane;
  float s = 0.0f;
  if (k < H2)
    for (int r = w; r < B; r += ATT_WG_WARPS) s += G.dtx[(size_t)r * H2 + k];
  s = att_tree(s, red);
  if (w == 0 && k < H2) grad[at.off_pos + k] = s;
}

// launchers

static size_t attn_fwd_floats(const net_attn_t *at, int ec) {
  const size_t H2 = (size_t)at->T * at->d;
  return 4 * H2 + (size_t)at->nh * at->T * at->T + (size_t)ec * (at->d + 1);
}
static size_t attn_bwd_floats(const net_attn_t *at, int ec) {
  const size_t H2 = (size_t)at->T * at->d;
  return 8 * H2 + 2 * (size_t)at->nh * at->T * at->T + (size_t)ec * (at->d + 1);
}

/* the widest staging chunk whose kernels fit in shared memory; 0: none does */
static int attn_chunk(const net_attn_t *at) {
  for (int ec = ATT_EC; ec >= 1; ec /= 2)
    if (sizeof(float) * attn_bwd_floats(at, ec) <= ATT_SMEM_MAX && sizeof(float) * attn_fwd_floats(at, ec) <= ATT_SMEM_MAX)
      return ec;
  return 0;
}

extern "C" int cuda_attn_fits(const net_layout_t *L) { return !L->attn.T || attn_chunk(&L->attn) > 0; }

/* the row kernels' shared memory above the default 48 KB (once per process is enough; idempotent) */
static int attn_smem_setup(const net_attn_t *at, int ec) {
  const int fb = (int)(sizeof(float) * attn_fwd_floats(at, ec)), bb = (int)(sizeof(float) * attn_bwd_floats(at, ec));
  cudaError_t e;
  if (fb > 48 * 1024 &&
      (e = cudaFuncSetAttribute(attn_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, fb)) != cudaSuccess)
    return (int)e;
  if (bb > 48 * 1024 &&
      (e = cudaFuncSetAttribute(attn_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bb)) != cudaSuccess)
    return (int)e;
  return 0;
}

extern "C" int cuda_attn_forward2(const net_layout_t *L, const float *P0, const float *P1, int rows0, const float *h,
                                  int rows, int keep, const cuda_attn_acts_t *A, cudaStream_t st) {
  const net_attn_t *at = &L->attn;
  const int ec = attn_chunk(at);
  if (!ec) return (int)cudaErrorInvalidConfiguration;
  int rc = attn_smem_setup(at, ec);
  if (rc) return rc;
  attn_forward_kernel<<<(unsigned)rows, ATT_NT, sizeof(float) * attn_fwd_floats(at, ec), st>>>(P0, P1, rows0, *at, h,
                                                                                                 *A, keep, ec);
  return (int)cudaGetLastError();
}

extern "C" int cuda_attn_forward(const net_layout_t *L, const float *P, const float *h, int rows, cuda_attn_acts_t *A,
                                 cudaStream_t st) {
  return cuda_attn_forward2(L, P, P, rows, h, rows, rows, A, st);
}

/* dy [B, H2] = dL/dh' of the first B rows of A -> gh [B, H2] = dL/d(trunk-2
 * pre-activation); the attention parameters' gradients into grad */
extern "C" int cuda_attn_backward(const net_layout_t *L, const float *P, const cuda_attn_acts_t *A,
                                  const cuda_attn_grads_t *G, int B, const float *dy, const float *h, float slope,
                                  float *gh, float *grad, cudaStream_t st) {
  const net_attn_t *at = &L->attn;
  const int ec = attn_chunk(at), d = at->d, H2 = L->H2;
  if (!ec) return (int)cudaErrorInvalidConfiguration;
  int rc = attn_smem_setup(at, ec);
  if (rc) return rc;
  attn_backward_kernel<<<(unsigned)B, ATT_NT, sizeof(float) * attn_bwd_floats(at, ec), st>>>(P, *at, *A, *G, dy, h,
                                                                                              slope, gh, ec);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  const unsigned blocks = (unsigned)(4 * d + (d + 31) / 32 + (H2 + 31) / 32);
  attn_wgrad_kernel<<<blocks, 32 * ATT_WG_WARPS, 0, st>>>(*at, *A, *G, dy, B, grad);
  return (int)cudaGetLastError();
}
