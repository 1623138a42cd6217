/*
 * attn.cu — the attention block of docs/learner.md §7 on the GPU: the twin of
 * kernels/cpu/attn_impl.h (same names, the same sums in the same order per
 * token), between the trunk (F2) and the heads (F3) of the step (step_phases.cuh),
 * and in Act's forward (generic_forward.cu). Per row, T tokens of width
 * d = H2 / T, n_h heads of width d_h = d / n_h, post-LN:
 *   x_t = h_t + pos_t;  q, k, v = W x + b;  alpha = softmax_s(q_t . k_s / sqrt(d_h))
 *   o_t = sum_s alpha_ts v_s;  u = W_o o + b_o;  y = LN(x + u)  ->  h'
 *
 * Three launches a step. A row's whole block (its T x d tokens, a few KB) is
 * one thread block's work held in shared memory, so the forward is one
 * launch for every row of the step (online s and s' with the online
 * parameters, target s' with the target's) and the backward's data
 * gradients one launch for the B online rows; a third launch (on the step's
 * side stream, beside B3) sums the parameter gradients over the tokens. The
 * first version ran each operation as its own launch (the projections
 * through the generic cuda_gemm, the LayerNorm a thread per token): 32
 * dependent launches cost ~240 us of a 450 us step at batch 64
 * (kernels/dev/DEVICE_NOTES.md items 56 and 60).
 *
 * Where they fit (att_plan: d up to ~60 in 200 KB), the row kernels copy
 * every attention parameter they read into shared memory at once with
 * cp.async, with the row's own inputs, so a block waits out one L2 round
 * trip instead of one per projection and per bias: the forward's W
 * transposed ([in][out], row stride d + 1, so a warp's 32 outputs read 32
 * banks), the backward's as stored ([out][in]: a warp's 32 inputs). Wider
 * tokens read the parameters from global memory (L1/L2) in the same order.
 * Every sum runs in a fixed order and the parameter gradients are fixed
 * trees over fixed row groups (the last part to arrive, found by an arrival
 * counter, adds them in part order: arrive_last): bit-identical reruns.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "arrive.cuh"
#include "cp_async.cuh"
#include "cuda_check.h"
#include "generic_forward.cuh"
#include "smem_optin.cuh"
#include "step_phases.cuh"

#define ATT_NT 256        /* threads of the row kernels */
#define ATT_SMEM_MAX (200 * 1024)

// kernels

/* W [d][d] (nn.Linear, [out c][in e]) read as w[c sc + e se]: global memory
 * (sc d, se 1) or a copy in shared memory (transposed: sc 1, se d + 1) */
typedef struct att_w {
  const float *w;
  int sc, se;
} att_w_t;

/* y [T, d] = x [T, d] W^T + b (nn.Linear), x and y in shared memory, a
 * thread per output, sums over e in order. The caller syncs before y is read. */
__device__ __forceinline__ void att_linear_t(const float *sx, att_w_t W, const float *b, float *sy, int T, int d) {
  for (int i = threadIdx.x; i < T * d; i += blockDim.x) {
    const int c = i % d;
    const float *xt = sx + (i / d) * d, *wc = W.w + (size_t)c * W.sc;
    float acc = 0.0f;
    for (int e = 0; e < d; e++) acc += xt[e] * wc[(size_t)e * W.se];
    sy[i] = acc + b[c];
  }
}

/* q, k, v [T, d] = x W_m^T + b_m for m = q, k, v at once: one load of x per
 * three products (att_linear_t's sums, in its order) */
__device__ __forceinline__ void att_linear_qkv(const float *sx, const att_w_t *W, const float *const *b, float *sq,
                                               float *sk, float *sv, int T, int d) {
  for (int i = threadIdx.x; i < T * d; i += blockDim.x) {
    const int c = i % d;
    const float *xt = sx + (i / d) * d, *w0 = W[0].w + (size_t)c * W[0].sc, *w1 = W[1].w + (size_t)c * W[1].sc,
                *w2 = W[2].w + (size_t)c * W[2].sc;
    const size_t se = (size_t)W[0].se;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
    for (int e = 0; e < d; e++) {
      const float x = xt[e];
      a0 += x * w0[e * se], a1 += x * w1[e * se], a2 += x * w2[e * se];
    }
    sq[i] = a0 + b[0][c], sk[i] = a1 + b[1][c], sv[i] = a2 + b[2][c];
  }
}

/* y [T, d] = g [T, d] W (nn.Linear's input gradient: y[t][e] = sum_c
 * g[t][c] W[c][e]), a thread per output, sums over c in order. The caller
 * syncs before y is read. */
__device__ __forceinline__ void att_linear_n(const float *sg, att_w_t W, float *sy, int T, int d) {
  for (int i = threadIdx.x; i < T * d; i += blockDim.x) {
    const int e = i % d;
    const float *gt = sg + (i / d) * d, *we = W.w + (size_t)e * W.se;
    float acc = 0.0f;
    for (int c = 0; c < d; c++) acc += gt[c] * we[(size_t)c * W.sc];
    sy[i] = acc;
  }
}

/* n floats from global src into shared dst (4-byte cp.async, not committed) */
__device__ __forceinline__ void att_copy(float *dst, const float *src, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) cp_async4(dst + i, src + i);
}
/* W [d][d] into shared dst transposed, row stride d + 1; element j = c d + e
 * goes to e (d + 1) + c, its (c, e) stepped without a division per element
 * (dividing by the run-time d per element: 25.4 -> 20.9 us at batch 256) */
__device__ __forceinline__ void att_copy_t(float *dst, const float *W, int d) {
  const int step = blockDim.x, sc = step / d, se = step % d;
  int c = threadIdx.x / d, e = threadIdx.x % d;
  for (int j = threadIdx.x; j < d * d; j += step) {
    cp_async4(dst + e * (d + 1) + c, W + j);
    c += sc, e += se;
    if (e >= d) e -= d, c++;
  }
}

/* a warp's sum over its lanes in a fixed tree */
__device__ __forceinline__ float att_warp_sum(float v) {
  for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/* the block's member's activations and gradients (pz.cuh) */
__device__ __forceinline__ cuda_attn_acts_t acts_member(const cuda_attn_acts_t &a, long long ps) {
  return cuda_attn_acts_t{pz_at(a.tx, ps), pz_at(a.tq, ps),    pz_at(a.tk, ps),    pz_at(a.tv, ps),  pz_at(a.to, ps),
                          pz_at(a.xhat, ps), pz_at(a.hatt, ps), pz_at(a.alpha, ps), pz_at(a.rstd, ps)};
}
__device__ __forceinline__ cuda_attn_grads_t grads_member(const cuda_attn_grads_t &g, long long ps) {
  return cuda_attn_grads_t{pz_at(g.dte, ps), pz_at(g.dtq, ps), pz_at(g.dtk, ps), pz_at(g.dtv, ps), pz_at(g.dtx, ps)};
}

/* The forward of one row per block. Rows below rows0 use P0 (the online
 * parameters), the rest P1 (the target's). Rows below keep write every
 * activation the backward reads; the others only h'. res: the parameters
 * are copied into shared memory (att_plan). */
__global__ void __launch_bounds__(ATT_NT) attn_forward_kernel(const float *__restrict__ P0, const float *__restrict__ P1,
                                                              int rows0, net_attn_t at, const float *__restrict__ h,
                                                              cuda_attn_acts_t A0, int keep, int res, long long ps) {
  extern __shared__ float fsm[];
  const cuda_attn_acts_t A = acts_member(A0, ps);
  P0 = pz_at(P0, ps), P1 = pz_at(P1, ps), h = pz_at(h, ps);
  const int r = blockIdx.x, T = at.T, nh = at.nh, d = at.d, dh = d / nh, H2 = T * d, dd = d * (d + 1);
  const float *P = r < rows0 ? P0 : P1;
  float *sx = fsm, *sq = sx + H2, *sk = sq + H2, *sv = sk + H2, *sal = sv + H2, *sp = sal + nh * T * T;
  const bool all = r < keep;
  const size_t ro = (size_t)r * H2;
  /* the row and, when resident, the parameters: W_q, W_k, W_v, W_o
   * transposed, then b_q .. b_o, pos, gamma, beta */
  att_w_t W[4];
  const float *bias[4], *pos = P + at.off_pos, *gam = P + at.off_ln_w, *bet = P + at.off_ln_b;
  att_copy(sx, h + ro, H2);
  if (res) {
    float *q = sp + 4 * dd;
    for (int m = 0; m < 4; m++) {
      att_copy_t(sp + m * dd, P + at.off_w[m], d);
      W[m] = {sp + m * dd, 1, d + 1};
      att_copy(q, P + at.off_b[m], d), bias[m] = q, q += d;
    }
    att_copy(q, pos, H2), pos = q, q += H2;
    att_copy(q, gam, d), gam = q, q += d;
    att_copy(q, bet, d), bet = q;
  } else {
    for (int m = 0; m < 4; m++) W[m] = {P + at.off_w[m], d, 1}, bias[m] = P + at.off_b[m];
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = threadIdx.x; i < H2; i += blockDim.x) {
    sx[i] += pos[i];
    if (all) A.tx[ro + i] = sx[i];
  }
  __syncthreads();
  att_linear_qkv(sx, W, bias, sq, sk, sv, T, d);
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
  __syncthreads();
  att_linear_t(sq, W[NET_ATTN_O], bias[NET_ATTN_O], sk, T, d); /* u into sk */
  __syncthreads();
  /* LayerNorm of e = u + x, a warp per token */
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
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
 * for the parameter gradients. res: W_o, W_q, W_k, W_v (as stored) and gamma
 * copied into shared memory. */
__global__ void __launch_bounds__(ATT_NT) attn_backward_kernel(const float *__restrict__ P, net_attn_t at,
                                                               cuda_attn_acts_t A0, cuda_attn_grads_t G0,
                                                               const float *__restrict__ dy,
                                                               const float *__restrict__ h, float slope,
                                                               float *__restrict__ gh, int res, long long ps) {
  extern __shared__ float bsm[];
  const cuda_attn_acts_t A = acts_member(A0, ps);
  const cuda_attn_grads_t G = grads_member(G0, ps);
  P = pz_at(P, ps), dy = pz_at(dy, ps), h = pz_at(h, ps), gh = pz_at(gh, ps);
  const int r = blockIdx.x, T = at.T, nh = at.nh, d = at.d, dh = d / nh, H2 = T * d, na = nh * T * T;
  float *sde = bsm, *sdo = sde + H2, *sq = sdo + H2, *sk = sq + H2, *sv = sk + H2, *sdq = sv + H2, *sdk = sdq + H2,
        *sdv = sdk + H2, *sal = sdv + H2, *sgs = sal + na, *sp = sgs + na;
  const size_t ro = (size_t)r * H2;
  att_copy(sde, dy + ro, H2);
  att_copy(sdq, A.xhat + ro, H2); /* xhat, until dq */
  att_copy(sq, A.tq + ro, H2);
  att_copy(sk, A.tk + ro, H2);
  att_copy(sv, A.tv + ro, H2);
  att_copy(sal, A.alpha + (size_t)r * na, na);
  att_w_t W[4];
  const float *gam = P + at.off_ln_w;
  if (res) {
    for (int m = 0; m < 4; m++) att_copy(sp + m * d * d, P + at.off_w[m], d * d), W[m] = {sp + m * d * d, d, 1};
    att_copy(sp + 4 * d * d, gam, d), gam = sp + 4 * d * d;
  } else {
    for (int m = 0; m < 4; m++) W[m] = {P + at.off_w[m], d, 1};
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  /* LayerNorm: de = rstd (dy gamma - mean(dy gamma) - xhat mean(dy gamma xhat)), a warp per token */
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
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
  __syncthreads();
  /* do = de W_o */
  att_linear_n(sde, W[NET_ATTN_O], sdo, T, d);
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
  /* dx = ((de + dq W_q) + dk W_k) + dv W_v, the three products in one pass over c */
  for (int i = threadIdx.x; i < H2; i += blockDim.x) {
    const int e = i % d;
    const float *gq = sdq + (i / d) * d, *gk = sdk + (i / d) * d, *gv = sdv + (i / d) * d;
    const float *w0 = W[0].w + (size_t)e * W[0].se, *w1 = W[1].w + (size_t)e * W[1].se,
                *w2 = W[2].w + (size_t)e * W[2].se;
    const size_t sc = (size_t)W[0].sc;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
    for (int c = 0; c < d; c++) a0 += gq[c] * w0[c * sc], a1 += gk[c] * w1[c * sc], a2 += gv[c] * w2[c * sc];
    const float dx = ((sde[i] + a0) + a1) + a2;
    G.dtx[ro + i] = dx;
    gh[ro + i] = dx * (h[ro + i] > 0.0f ? 1.0f : slope);
  }
}

/* The parameter gradients, summed over the n = B T tokens (B rows for
 * pos), split over row slices like a split-K GEMM: block (slice j, part y)
 * copies its slice's rows into shared memory (one L2 round trip) and writes
 * its partial sums; the part's last block to arrive (an arrival counter, the
 * layer GEMM's pattern) adds the partials in slice order. Parts y = 0..3:
 * dW_m[c][e] = sum_i g[i][c] x[i][e], db_m[c] = sum_i g[i][c] (m = q, k, v:
 * g = dq, dk, dv, x = tx; m = o: g = de, x = to); 4: dgamma = sum dy xhat,
 * dbeta = sum dy; 5: dpos = sum over rows of dx. The first version, a block
 * per output row looping over every token, took 29 us at batch 256. */
typedef struct att_wg {
  int R, S, SP;     /* token rows per slice, slices (of the n tokens; pos: of the B rows), partial floats per slice */
  float *part;      /* [6][S][SP] */
  int *cnt;         /* [6] arrival counters, zero between launches */
} att_wg_t;

/* v[y] for y in 0..3 by selects: an index known only at run time into the
 * parameter's arrays put a copy of the whole parameter in local memory, each
 * thread's (kernels/dev/DEVICE_NOTES.md item 173) */
__device__ __forceinline__ long long att_pick(const int64_t v[4], int y) {
  return y == 0 ? v[0] : y == 1 ? v[1] : y == 2 ? v[2] : v[3];
}

__global__ void __launch_bounds__(ATT_NT) attn_wgrad_kernel(net_attn_t at, cuda_attn_acts_t A0,
                                                            cuda_attn_grads_t G0, const float *__restrict__ dy, int B,
                                                            att_wg_t wg, float *__restrict__ grad, long long ps) {
  extern __shared__ float wsm[];
  const cuda_attn_acts_t A = acts_member(A0, ps);
  const cuda_attn_grads_t G = grads_member(G0, ps);
  dy = pz_at(dy, ps), grad = pz_at(grad, ps), wg.part = pz_at(wg.part, ps), wg.cnt = pz_at(wg.cnt, ps);
  const int T = at.T, d = at.d, H2 = T * d, y = blockIdx.y, j = blockIdx.x;
  const int W = y == 5 ? H2 : d; /* row width */
  const int nrows = y == 5 ? B : B * T, rpb = y == 5 ? (B + wg.S - 1) / wg.S : wg.R;
  const int r0 = j * rpb, nr = max(0, min(rpb, nrows - r0));
  const float *ga, *xa;
  if (y < 4) {
    ga = y == 0 ? G.dtq : y == 1 ? G.dtk : y == 2 ? G.dtv : G.dte;
    xa = y == NET_ATTN_O ? A.to : A.tx;
  } else if (y == 4) {
    ga = dy, xa = A.xhat;
  } else {
    ga = G.dtx, xa = NULL;
  }
  float *sg = wsm, *sx = wsm + (size_t)rpb * W;
  att_copy(sg, ga + (size_t)r0 * W, nr * W);
  if (xa) att_copy(sx, xa + (size_t)r0 * W, nr * W);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  /* this slice's partial sums: outputs [0, no) */
  const int no = y < 4 ? d * d + d : y == 4 ? 2 * d : H2;
  float *pp = wg.part + ((size_t)y * wg.S + j) * wg.SP;
  for (int o = threadIdx.x; o < no; o += blockDim.x) {
    float acc = 0.0f;
    if (y < 4 && o < d * d) {
      const int c = o / d, e = o % d;
      for (int i = 0; i < nr; i++) acc += sg[i * d + c] * sx[i * d + e];
    } else if (y < 4) {
      for (int i = 0; i < nr; i++) acc += sg[i * d + o - d * d];
    } else if (y == 4 && o < d) {
      for (int i = 0; i < nr; i++) acc += sg[i * d + o] * sx[i * d + o];
    } else if (y == 4) {
      for (int i = 0; i < nr; i++) acc += sg[i * d + o - d];
    } else {
      for (int i = 0; i < nr; i++) acc += sg[i * H2 + o];
    }
    pp[o] = acc;
  }
  __syncthreads();
  if (!arrive_last(wg.cnt + y, (unsigned)wg.S)) return;
  const float *p0 = wg.part + (size_t)y * wg.S * wg.SP;
  for (int o = threadIdx.x; o < no; o += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < wg.S; s++) acc += __ldcg(p0 + (size_t)s * wg.SP + o);
    long long dst;
    if (y < 4) dst = o < d * d ? att_pick(at.off_w, y) + o : att_pick(at.off_b, y) + o - d * d;
    else if (y == 4) dst = o < d ? at.off_ln_w + o : at.off_ln_b + o - d;
    else dst = at.off_pos + o;
    grad[dst] = acc;
  }
}

// launchers

/* shared floats of the row kernels: the row's buffers, plus the parameters when resident */
static size_t attn_fwd_floats(const net_attn_t *at, int res) {
  const size_t H2 = (size_t)at->T * at->d, d = (size_t)at->d;
  return 4 * H2 + (size_t)at->nh * at->T * at->T + (res ? 4 * d * (d + 1) + 6 * d + H2 : 0);
}
static size_t attn_bwd_floats(const net_attn_t *at, int res) {
  const size_t H2 = (size_t)at->T * at->d, d = (size_t)at->d;
  return 8 * H2 + 2 * (size_t)at->nh * at->T * at->T + (res ? 4 * d * d + d : 0);
}
static int attn_fits_smem(const net_attn_t *at, int res) {
  return sizeof(float) * attn_fwd_floats(at, res) <= ATT_SMEM_MAX &&
         sizeof(float) * attn_bwd_floats(at, res) <= ATT_SMEM_MAX;
}
/* 1: the parameters resident in shared memory, 0: read from global memory, -1: the rows do not fit */
static int att_plan(const net_attn_t *at) { return attn_fits_smem(at, 1) ? 1 : attn_fits_smem(at, 0) ? 0 : -1; }

extern "C" int cuda_attn_fits(const net_layout_t *L) { return !L->attn.T || att_plan(&L->attn) >= 0; }

/* A launch of `bytes` of shared memory allowed: above the default 48 KB the
 * three kernels' attribute is set, once a device, to the device's whole
 * opt-in limit (less each kernel's static part), never to one learner's size. The attribute is the kernel's,
 * shared by every learner in the process, and only permits: set to each
 * learner's own size before its launches, a learner of narrower tokens
 * lowered it under another's captured graph or between another's setting
 * and its launch on another thread (ens_plan in step_loss_ens.cu and the
 * DT's kernels set theirs the same way; tests/test-gpu-shared.c). */
#define ATT_MAX_DEVICES 64
static int attn_smem_allow(size_t bytes) {
  static int done[ATT_MAX_DEVICES]; /* 1: this device's attributes are at their opt-in limits */
  if (bytes <= 48 * 1024) return 0;
  int dev = 0, optin = 0;
  CUDA_RET(cudaGetDevice(&dev));
  CUDA_RET(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes + 64 > (size_t)optin) return (int)cudaErrorInvalidConfiguration; /* 64: the static parts' room */
  if (dev < ATT_MAX_DEVICES && __atomic_load_n(&done[dev], __ATOMIC_ACQUIRE)) return 0;
  CUDA_RET(cuda_allow_optin(attn_forward_kernel, optin));
  CUDA_RET(cuda_allow_optin(attn_backward_kernel, optin));
  CUDA_RET(cuda_allow_optin(attn_wgrad_kernel, optin));
  if (dev < ATT_MAX_DEVICES) __atomic_store_n(&done[dev], 1, __ATOMIC_RELEASE); /* two threads racing set the same */
  return 0;
}

extern "C" int cuda_attn_forward(const net_layout_t *L, const float *P0, const float *P1, int rows0, const float *h,
                                  int rows, int keep, const cuda_attn_acts_t *A, cuda_pz_t pz, cudaStream_t st) {
  const net_attn_t *at = &L->attn;
  const int res = att_plan(at);
  if (res < 0) return (int)cudaErrorInvalidConfiguration;
  int rc = attn_smem_allow(sizeof(float) * attn_fwd_floats(at, res));
  if (rc) return rc;
  attn_forward_kernel<<<dim3((unsigned)rows, 1, (unsigned)pz.n), ATT_NT, sizeof(float) * attn_fwd_floats(at, res), st>>>(
      P0, P1, rows0, *at, h, *A, keep, res, pz.stride);
  return (int)cudaGetLastError();
}

extern "C" int cuda_attn_backward(const net_layout_t *L, const float *P, const cuda_attn_acts_t *A,
                                  const cuda_attn_grads_t *G, int B, const float *dy, const float *h, float slope,
                                  float *gh, cuda_pz_t pz, cudaStream_t st) {
  const net_attn_t *at = &L->attn;
  const int res = att_plan(at);
  if (res < 0) return (int)cudaErrorInvalidConfiguration;
  int rc = attn_smem_allow(sizeof(float) * attn_bwd_floats(at, res));
  if (rc) return rc;
  attn_backward_kernel<<<dim3((unsigned)B, 1, (unsigned)pz.n), ATT_NT, sizeof(float) * attn_bwd_floats(at, res), st>>>(
      P, *at, *A, *G, dy, h, slope, gh, res, pz.stride);
  return (int)cudaGetLastError();
}

/* the parameter-gradient kernel's slices for batch B: rows per slice so a
 * slice's two inputs take 32 KB at most */
static att_wg_t attn_wg_plan(const net_attn_t *at, int B) {
  att_wg_t w = {0, 0, 0, NULL, NULL};
  const int d = at->d, H2 = at->T * at->d;
  w.R = 4096 / d < 1 ? 1 : 4096 / d > 128 ? 128 : 4096 / d;
  w.S = (B * at->T + w.R - 1) / w.R;
  /* pos: the same number of slices over B rows, H2 wide (8192 / H2 rows each at most) */
  const int rp = 8192 / H2 < 1 ? 1 : 8192 / H2;
  while ((B + w.S - 1) / w.S > rp) w.S++;
  w.SP = d * d + d > H2 ? d * d + d : H2;
  return w;
}

extern "C" size_t cuda_attn_wgrad_floats(const net_layout_t *L, int B) {
  if (!L->attn.T) return 0;
  const att_wg_t w = attn_wg_plan(&L->attn, B);
  return (size_t)6 * w.S * w.SP + 8;
}

extern "C" int cuda_attn_wgrad(const net_layout_t *L, const cuda_attn_acts_t *A, const cuda_attn_grads_t *G, int B,
                               const float *dy, float *scratch, float *grad, cuda_pz_t pz, cudaStream_t st) {
  const net_attn_t *at = &L->attn;
  att_wg_t w = attn_wg_plan(at, B);
  w.part = scratch, w.cnt = (int *)(scratch + (size_t)6 * w.S * w.SP);
  const int H2 = L->H2, rp = (B + w.S - 1) / w.S;
  const size_t fl = 2 * (size_t)w.R * at->d > (size_t)rp * H2 ? 2 * (size_t)w.R * at->d : (size_t)rp * H2;
  const int rc = attn_smem_allow(sizeof(float) * fl);
  if (rc) return rc;
  attn_wgrad_kernel<<<dim3((unsigned)w.S, 6, (unsigned)pz.n), ATT_NT, sizeof(float) * fl, st>>>(*at, *A, *G, dy, B, w,
                                                                                                 grad, pz.stride);
  return (int)cudaGetLastError();
}
