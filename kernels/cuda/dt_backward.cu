/*
 * dt_backward.cu — the exact backward of dt.cu's forward (the CPU spec's
 * dt_lin_bwd, dt_ln_bwd, dt_gelu_d and the attention's, kernels/cpu/
 * dt_impl.h), into d->g. Each parameter's gradient is a fixed-order sum over
 * the batch's tokens (column sums, GEMMs over the token axis, a block an
 * embedding row, a thread an element); padded tokens carry zero gradients.
 */
#include <math.h>

#include "cuda_check.h"
#include "dt_cuda.cuh"

// kernels

/* dy's element o: dy (+ dy2 + dy3, in that order, where not NULL: the
 * input gradient three products left in three buffers) */
static __device__ __forceinline__ float dt_dy3(const float *dy, const float *dy2, const float *dy3, size_t o) {
  float x = dy[o];
  if (dy2) x = x + dy2[o];
  if (dy3) x = x + dy3[o];
  return x;
}

/* dx = res + rstd (dy gamma - mean(dy gamma) - xhat mean(dy gamma xhat)),
 * one warp a token (res may be dx; NULL: no residual; dy as dt_dy3) */
__global__ void dt_ln_bwd_kernel(const float *dy, const float *dy2, const float *dy3, const float *xhat,
                                 const float *rstd, const float *gam, int T, int E, float *dx, const float *res,
                                 cuda_pz_t pz) {
  PDL_ENTER();
  const int tok = dt_warp_row(), lane = threadIdx.x & 31;
  if (tok >= T) return;
  const long long mo = dt_mo(pz);
  dy = dt_off(dy, mo), xhat = dt_off(xhat, mo), rstd = dt_off(rstd, mo), gam = dt_off(gam, mo), dx = dt_off(dx, mo);
  dy2 = dt_off0(dy2, mo), dy3 = dt_off0(dy3, mo), res = dt_off0(res, mo);
  const size_t row = (size_t)tok * E;
  dt_ln_bwd_row([&](int e) { return dt_dy3(dy, dy2, dy3, row + e); }, xhat + row, rstd[tok], gam, E, lane, dx + row,
                res ? res + row : res);
}

/* the blocks' weights (offsets src, dt_wt_src) transposed into wT
 * (DT_WT_*), exact copies, or with rnd rounded to TF32 (dt_pre: wT feeds
 * the TMA tile alone): blockIdx.y is block y / 6's matrix y % 6, its 32 x
 * 32 tiles along x through shared memory (coalesced both ways) */
__global__ void dt_transpose_kernel(const float *p, dt_wt_src_t src, int E, float *wT, int rnd, cuda_pz_t pz) {
  PDL_ENTER();
  __shared__ float t[32][33];
  const long long mo = dt_mo(pz);
  const int j = blockIdx.y % 6, l = blockIdx.y / 6;
  const int rows = j == 4 ? 4 * E : E, cols = j == 5 ? 4 * E : E;
  const float *a = dt_off(p, mo) + src.off[blockIdx.y];
  float *o = dt_off(wT, mo) + (size_t)l * DT_WT_FLOATS * E * E + (size_t)(j < 4 ? j : j == 4 ? DT_WT_1 : DT_WT_2) * E * E;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32, nx = (cols + 31) / 32, nt = nx * ((rows + 31) / 32);
  for (int tile = blockIdx.x; tile < nt; tile += gridDim.x) {
    const int r0 = tile / nx * 32, c0 = tile % nx * 32;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int r = r0 + ty + 8 * i, c = c0 + tx;
      if (r < rows && c < cols) t[ty + 8 * i][tx] = a[(size_t)r * cols + c];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int c = c0 + ty + 8 * i, r = r0 + tx;
      if (r < rows && c < cols) o[(size_t)c * rows + r] = rnd ? dt_tf32(t[tx][ty + 8 * i]) : t[tx][ty + 8 * i];
    }
    __syncthreads();
  }
}

/* the state tokens' rows of dx0 into dxs, and the states of real steps into
 * st (zeros for padding: its inputs are not read) */
__global__ void dt_state_rows_kernel(const float *dx0, const float *states, const float *mask, int K, int E, int S,
                                     float *dxs, float *st, cuda_pz_t pz) {
  PDL_ENTER();
  const long long mo = dt_mo(pz);
  dx0 = dt_off(dx0, mo), states = dt_off(states, mo), mask = dt_off(mask, mo), dxs = dt_off(dxs, mo), st = dt_off(st, mo);
  const int s = blockIdx.x, b = s / K, t = s % K;
  for (int e = threadIdx.x; e < E; e += blockDim.x) dxs[(size_t)s * E + e] = dx0[((size_t)b * 3 * K + 3 * t + 1) * E + e];
  for (int i = threadIdx.x; i < S; i += blockDim.x) st[(size_t)s * S + i] = mask[s] != 0 ? states[(size_t)s * S + i] : 0.0f;
}

/* the embeddings' gradients, one block a row (and a chunk of the steps,
 * blockIdx.y, per steps each): rows r0 + blockIdx.x of the time embedding's
 * L.T rows (all three tokens of each real step of that clipped timestep),
 * each branch's action rows, and a last row for W_R and b_R (the
 * return-to-go tokens). The block scans its steps DT_EMB_SCAN x 128 at a
 * time (every thread's loads first, then a ballot and a prefix over the
 * groups and warps), lists the ones that are the row's in step order, then
 * adds their tokens' gradients in that order, DT_EMB_U steps' loads in
 * flight before their adds: each element is the CPU's sum over steps in
 * order (chunk by chunk when chunked), for about steps + matches x E work
 * a row instead of steps x E. (A step at a time, each scan round and each
 * matched step waited for its own L2 round trip: 131 µs a step at batch
 * 256, kernels/dev/DEVICE_NOTES.md item 102.) Unchunked (part NULL) the
 * sums go into g; chunked into part [row - r0][chunk][2E] (W_R's in the
 * first E, b_R's in the second), which dt_embed_final_kernel adds in chunk
 * order. E <= 128 x PER (1 up to 128, the reference width: a few registers,
 * so 16 blocks an SM; else 32, what dt_embed allows). */
#define DT_EMB_SCAN 8
#define DT_EMB_U 8
template <int PER>
__global__ void __launch_bounds__(128) dt_embed_bwd_kernel(const dt_layout_t L, const float *dx0, const float *rtg,
                                                           const float *mask, const int32_t *actions,
                                                           const int32_t *timesteps, int BK, int r0, int per,
                                                           float *g, float *part, cuda_pz_t pz) {
  PDL_ENTER();
  __shared__ int list[128 * DT_EMB_SCAN], wcount[DT_EMB_SCAN][4];
  const long long mo = dt_mo(pz);
  dx0 = dt_off(dx0, mo), rtg = dt_off(rtg, mo), mask = dt_off(mask, mo), actions = dt_off(actions, mo);
  timesteps = dt_off(timesteps, mo), g = dt_off(g, mo), part = dt_off0(part, mo);
  const int E = L.E, K = L.K, tid = threadIdx.x, lane = tid & 31, w = tid / 32;
  const int64_t r = r0 + blockIdx.x;
  const int rrow = r == (int64_t)L.T + L.A; /* the W_R, b_R row */
  int d = 0, c = (int)(r - L.T);
  if (!rrow && r >= L.T)
    while (c >= L.n[d]) c -= L.n[d], d++;
  float aw[PER], ab[PER];
#pragma unroll
  for (int k = 0; k < PER; k++) aw[k] = 0, ab[k] = 0;
  const int lo = blockIdx.y * per, hi = lo + per < BK ? lo + per : BK;
  for (int s0 = lo; s0 < hi; s0 += 128 * DT_EMB_SCAN) {
    float mk[DT_EMB_SCAN];
    int key[DT_EMB_SCAN];
#pragma unroll
    for (int j = 0; j < DT_EMB_SCAN; j++) { /* the loads, all in flight */
      const int s = s0 + 128 * j + tid;
      mk[j] = s < hi ? mask[s] : 0.0f;
      key[j] = s < hi && !rrow ? (r < L.T ? timesteps[s] : actions[s]) : 0;
    }
    unsigned bal[DT_EMB_SCAN];
#pragma unroll
    for (int j = 0; j < DT_EMB_SCAN; j++) {
      int match = 0;
      if (mk[j] != 0) {
        if (rrow) match = 1;
        else if (r < L.T) {
          const int tm = key[j] < 0 ? 0 : key[j] >= L.T ? L.T - 1 : key[j];
          match = tm == r;
        } else match = (key[j] / L.radix_after[d]) % L.n[d] == c;
      }
      bal[j] = __ballot_sync(0xffffffffu, match);
      if (lane == 0) wcount[j][w] = __popc(bal[j]);
    }
    __syncthreads();
    int total = 0; /* the matches before group j, then all of them */
#pragma unroll
    for (int j = 0; j < DT_EMB_SCAN; j++) {
      int mine = total;
      for (int k = 0; k < 4; k++) mine += k < w ? wcount[j][k] : 0, total += wcount[j][k];
      if (bal[j] >> lane & 1) list[mine + __popc(bal[j] & ((1u << lane) - 1))] = s0 + 128 * j + tid;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < PER; k++) {
      const int e = tid + 128 * k;
      if (e >= E) break;
      for (int i = 0; i < total; i += DT_EMB_U) {
        float v[DT_EMB_U], rv[DT_EMB_U];
#pragma unroll
        for (int u = 0; u < DT_EMB_U; u++) { /* DT_EMB_U steps' loads in flight */
          v[u] = 0.0f, rv[u] = 0.0f;
          if (i + u < total) {
            const int st = list[i + u];
            const float *x = dx0 + ((size_t)(st / K) * 3 * K + 3 * (st % K)) * E;
            if (rrow) v[u] = x[e], rv[u] = rtg[st];
            else if (r < L.T) v[u] = x[e] + x[E + e] + x[2 * E + e];
            else v[u] = x[2 * E + e];
          }
        }
#pragma unroll
        for (int u = 0; u < DT_EMB_U; u++) { /* then added in step order */
          if (i + u >= total) break;
          if (rrow) aw[k] += v[u] * rv[u], ab[k] += v[u];
          else aw[k] += v[u];
        }
      }
    }
    __syncthreads(); /* list and wcount are rewritten next */
  }
#pragma unroll
  for (int k = 0; k < PER; k++) {
    const int e = tid + 128 * k;
    if (e >= E) break;
    if (part) {
      float *pr = part + ((size_t)blockIdx.x * gridDim.y + blockIdx.y) * 2 * E;
      pr[e] = aw[k], pr[E + e] = ab[k];
    } else if (rrow) g[L.rtg_w + e] += aw[k], g[L.rtg_b + e] += ab[k];
    else if (r < L.T) g[L.time + (size_t)r * E + e] += aw[k];
    else g[L.act_emb[d] + (size_t)c * E + e] += aw[k];
  }
}

/* the chunked rows' sums (rows L.T to L.T + A, dt_embed_bwd_kernel's part)
 * into g, in chunk order */
__global__ void dt_embed_final_kernel(const dt_layout_t L, const float *part, int chunks, float *g, cuda_pz_t pz) {
  PDL_ENTER();
  const long long mo = dt_mo(pz);
  part = dt_off(part, mo), g = dt_off(g, mo);
  const int E = L.E, rows = L.A + 1;
  for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < rows * 2 * E; x += gridDim.x * blockDim.x) {
    const int row = x / (2 * E), e2 = x % (2 * E);
    if (row < L.A && e2 >= E) continue; /* the action rows have no bias */
    float s = 0;
    for (int ch = 0; ch < chunks; ch++) s += part[((size_t)row * chunks + ch) * 2 * E + e2];
    if (row == L.A) g[(e2 < E ? L.rtg_w : L.rtg_b) + e2 % E] += s;
    else {
      int d = 0, c = row;
      while (c >= L.n[d]) c -= L.n[d], d++;
      g[L.act_emb[d] + (size_t)c * E + e2] += s;
    }
  }
}

// launchers

/* The backward's critical path is its input gradients, one after another
 * on the caller's stream; the parameters' gradients read what it made and
 * go on the side streams (dt_cuda.cuh's DT_SIDE_*), so they overlap the
 * input gradients that follow instead of holding each layer's. A side
 * stream's reads of a buffer are marked (mark: the event rd[s][i] after
 * them) and the caller's stream waits for them (after_reads) only where it
 * writes that buffer again. Each side stream keeps the order its work
 * always had, so the same sums and bits. */
static int mark(cuda_dt_t *d, int s, int i) {
  CUDA_RET(cudaEventRecord(d->rd[s][i], d->side[i]));
  d->rd_live[s] |= 1u << i;
  return 0;
}

static int after_reads(cuda_dt_t *d, int s, cudaStream_t st) {
  for (int i = 0; i < DT_READERS; i++)
    if (d->rd_live[s] >> i & 1) CUDA_RET(cudaStreamWaitEvent(st, d->rd[s][i], 0));
  return 0;
}

/* dx = res + LayerNorm's input gradient (res may be dx: +=; NULL: dx =
 * the gradient alone; dy as dt_dy3), and dgamma and dbeta += their column
 * sums (one pass over dy and xhat) on DT_SIDE_LN, marked as reads of the
 * slots in bits rs */
static int ln_bwd(cuda_dt_t *d, const float *dy, const float *dy2, const float *dy3, const float *xhat,
                  const float *rstd, const float *gam, int T, int E, float *dx, const float *res, float *dgam,
                  float *dbet, unsigned rs, cudaStream_t st) {
  CUDA_RET(dt_fork_one(d, st, DT_SIDE_LN));
  pdl_launch(dt_ln_bwd_kernel, dt_grid(d, dim3((unsigned)((T + 7) / 8))), 256, 0, st, dy, dy2, dy3, xhat, rstd, gam, T,
             E, dx, res, d->pz);
  CUDA_RET(cudaGetLastError());
  CUDA_RET(dt_colsum_pair(d, dy, dy2, dy3, xhat, T, E, E, dgam, dbet, 1, d->csum[1], d->csum[2], d->csum_cap,
                          d->side[DT_SIDE_LN]));
  for (int k = 0; k < DT_RD_N; k++)
    if (rs >> k & 1) CUDA_RET(mark(d, k, DT_SIDE_LN));
  return 0;
}

/* a linear layer's parameter gradients over T tokens: dW += dy^T x on
 * DT_SIDE_W (its split-K scratch d->tmp), db += colsum dy there too where
 * the split tile sums dy's columns as it reads them (the transposing TMA
 * tile in TF32, the FFMA tile in fp32: dt_wgrad_fuses), else on DT_SIDE_B;
 * each marked as reads of slot rs
 * (dy's) */
static int lin_bwd_params_ex(cuda_dt_t *d, int64_t w, int64_t b, const float *x, const float *dy, int T, int in,
                             int out, int rs, cudaStream_t st, float *scr, size_t cap, dt_red_t *defer) {
  float *g = d->g;
  if (dt_wgrad_fuses(d, out, in, T, dy, out, 1, x, in, 0, cap)) {
    CUDA_RET(dt_fork_one(d, st, DT_SIDE_W));
    CUDA_RET(dt_gemm_wgrad_ex(d, out, in, T, dy, out, 1, x, in, 0, g + w, in, g + b, scr, cap, d->side[DT_SIDE_W],
                              defer));
    return mark(d, rs, DT_SIDE_W);
  }
  CUDA_RET(dt_fork(d, st, DT_SIDE_B + 1));
  CUDA_RET(dt_gemm_wgrad_ex(d, out, in, T, dy, out, 1, x, in, 0, g + w, in, NULL, scr, cap, d->side[DT_SIDE_W], defer));
  CUDA_RET(dt_colsum(d, dy, NULL, T, out, out, g + b, 1, d->csum[0], d->csum_cap, d->side[DT_SIDE_B]));
  CUDA_RET(mark(d, rs, DT_SIDE_W));
  return mark(d, rs, DT_SIDE_B);
}

static int lin_bwd_params(cuda_dt_t *d, int64_t w, int64_t b, const float *x, const float *dy, int T, int in, int out,
                          int rs, cudaStream_t st) {
  return lin_bwd_params_ex(d, w, b, x, dy, T, in, out, rs, st, d->tmp, d->tmp_cap, NULL);
}

/* W_o's, W_q's and W_k's weight gradients (E x E over T tokens) with their
 * parts in three thirds of d->tmp and one reduce launch after W_k's
 * (red_oqk), where they are split (parts > 1: reduces to share) and a third
 * gives each of them the split and the fused-bias choice that the whole
 * gives (so the same bits); by default (red_oqk 1) in TF32 alone and where
 * the tokens of all members together are at least DT_RED_OQK_TOKENS: there
 * the step's work fills the GPU and two launches fewer a layer on the
 * weight-gradient stream paid (measured in TF32 with the form taken at
 * every size: a lone step at batch 256 -1.6%, 8 members of 64 -1.0%), while
 * a lone step at batch 64 lost 2.4% (kernels/dev/DEVICE_NOTES.md item 256);
 * fp32 was not measured. The bits are the same either way, so a member is
 * still its lone twin. att: the layer's attention output (W_o's x). */
#define DT_RED_OQK_TOKENS 8192
static size_t oqk_third(const cuda_dt_t *d) { return d->tmp_cap / 3 / 64 * 64; }
static int oqk_same(const cuda_dt_t *d, const float *dy, const float *x, int T, int E, size_t third) {
  return dt_wgrad_fuses(d, E, E, T, dy, E, 1, x, E, 0, third) ==
         dt_wgrad_fuses(d, E, E, T, dy, E, 1, x, E, 0, d->tmp_cap);
}
static int red_oqk(const cuda_dt_t *d, const float *h1, const float *att, int T, int E) {
  const int depth = dt_wgrad_depth(d->tc);
  const size_t third = oqk_third(d);
  const long long parts = dt_wgrad_parts(E, E, T, d->tmp_cap, depth);
  const int fits = parts > 1 && dt_wgrad_parts(E, E, T, third, depth) == parts &&
                   oqk_same(d, d->dxm, att, T, E, third) && oqk_same(d, d->dq, h1, T, E, third) &&
                   oqk_same(d, d->dk, h1, T, E, third);
  return fits && (d->red_oqk == 2 || (d->red_oqk == 1 && d->tc && (long long)T * d->pz.n >= DT_RED_OQK_TOKENS));
}

/* dx = dy W on st, or with gu (gu ? DT_EP_DGELU : plain) (dy W) gu: the
 * gradient at the pre-activation of the GELU that made x, gu its
 * derivative there (the forward's gd). From W
 * (w, [out][in]), or where the TMA tile runs from wt = W^T [in][out] (wT's:
 * both operands K-major; the same products in the same order, so the same
 * bits; the fp32 tile was 0.2% slower from W^T, item 128) */
static int use_wt(const cuda_dt_t *d) { return d->tc && d->tma; }

static int lin_dx(cuda_dt_t *d, const float *w, const float *wt, const float *dy, int T, int in, int out, float *dx,
                  const float *gu, int rnd, cudaStream_t st) {
  const int op = gu ? DT_EP_DGELU : rnd ? DT_EP_PLAIN_T : DT_EP_PLAIN;
  if (use_wt(d)) return dt_gemm_op(d, T, in, out, dy, out, 0, wt, out, 1, dx, in, NULL, gu, in, 0, op, NULL, st);
  return dt_gemm_op(d, T, in, out, dy, out, 0, w, in, 0, dx, in, NULL, gu, in, 0, op, NULL, st);
}

/* a linear layer's backward: its parameters' gradients, then dx (rnd:
 * written TF32-rounded, DT_EP_PLAIN_T) */
static int lin_bwd(cuda_dt_t *d, int64_t w, const float *wt, int64_t b, const float *x, const float *dy, int T, int in,
                   int out, float *dx, const float *gu, int rs, int rnd, cudaStream_t st) {
  CUDA_RET(lin_bwd_params(d, w, b, x, dy, T, in, out, rs, st));
  return lin_dx(d, d->p + w, wt, dy, T, in, out, dx, gu, rnd, st);
}

/* W_v's weight gradient on DT_SIDE_LN after LN1's sums, its split-K
 * scratch in dhkv (cap floats), instead of last on DT_SIDE_W: at batch 64
 * that stream's weight gradients run back to back through the backward and
 * end it (kernels/dev/DEVICE_NOTES.md item 220). Only where dhkv gives the
 * split and the fused bias sums that d->tmp gives, so the same bits; the
 * shapes alone decide, so a member is its lone twin */
static int v_wgrad_on_ln(const cuda_dt_t *d, const float *h1, int T, int E, size_t cap) {
  const int depth = dt_wgrad_depth(d->tc);
  return dt_wgrad_parts(E, E, T, cap, depth) == dt_wgrad_parts(E, E, T, d->tmp_cap, depth) &&
         dt_wgrad_fuses(d, E, E, T, d->dv, E, 1, h1, E, 0, cap) &&
         dt_wgrad_fuses(d, E, E, T, d->dv, E, 1, h1, E, 0, d->tmp_cap);
}

extern "C" int cuda_dt_red_oqk_takes(const cuda_dt_t *d) {
  return red_oqk(d, d->h1, d->att, d->B * 3 * d->L.K, d->L.E);
}

extern "C" int cuda_dt_v_ln_takes(const cuda_dt_t *d) {
  const int T = d->B * 3 * d->L.K, E = d->L.E;
  return v_wgrad_on_ln(d, d->h1, T, E, 2 * (size_t)T * E);
}

/* every side stream's work, for st */
static int join_all(cuda_dt_t *d, cudaStream_t st) {
  for (int i = 0; i < DT_SIDES; i++) CUDA_RET(dt_join(d, st, i));
  return 0;
}

int cuda_dt_backward(cuda_dt_t *d, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, N = 3 * K, T = d->B * N, E = L->E, F = 4 * E, BK = d->B * K, nh = L->nh;
  const size_t NE = (size_t)T * E, NF = (size_t)T * F, NN = (size_t)d->B * nh * N * N;
  const float *p = d->p;
  float *g = d->g;
  CUDA_RET(dt_zero(d, g, sizeof(float) * (size_t)L->n_params, st));
  /* the heads' weight gradients on DT_SIDE_W (its scratch d->tmp), their
   * bias gradients and the loss's sum on DT_SIDE_B, beside the chain */
  CUDA_RET(dt_fork(d, st, DT_SIDE_B + 1));
  for (int dd = 0, off = 0; dd < L->D; off += L->n[dd], dd++) {
    CUDA_RET(dt_gemm_wgrad(d, L->n[dd], E, BK, d->dz + off, L->A, 1, d->xs, E, 0, g + L->head_w[dd], E, NULL, d->tmp,
                           d->tmp_cap, d->side[DT_SIDE_W]));
    CUDA_RET(dt_colsum(d, d->dz + off, NULL, BK, L->n[dd], L->A, g + L->head_b[dd], 1, d->csum[0], d->csum_cap,
                       d->side[DT_SIDE_B]));
  }
  CUDA_RET(dt_loss_sum(d, d->side[DT_SIDE_B]));
  /* the weights transposed on a side stream, beside the heads' and LN_f's
   * backward (DT_SIDE_K is next used by the first block's k gradient) */
  if (use_wt(d)) {
    CUDA_RET(dt_fork_one(d, st, DT_SIDE_K));
    pdl_launch(dt_transpose_kernel, dt_grid(d, dim3(64, (unsigned)(6 * L->L))), 256, 0, d->side[DT_SIDE_K], p,
               dt_wt_src(L), E, d->wT, dt_pre(d), d->pz);
    CUDA_RET(cudaGetLastError());
  }
  /* the heads' input gradient dxs and LN_f's, dX; LN_f's gamma and beta
   * sums over the state tokens' rows on DT_SIDE_LN (dxs is written again by
   * the state embedding's backward: a read of DT_RD_DXS) */
  CUDA_RET(dt_head_bwd(d, st));
  for (int k = 0; k < DT_RD_N; k++) d->rd_live[k] = 0;
  CUDA_RET(dt_fork_one(d, st, DT_SIDE_LN));
  CUDA_RET(dt_colsum_pair(d, d->dxs, NULL, NULL, d->xhf, BK, E, E, g + L->lnf_w, g + L->lnf_b, 1, d->csum[1],
                          d->csum[2], d->csum_cap, d->side[DT_SIDE_LN]));
  CUDA_RET(mark(d, DT_RD_DXS, DT_SIDE_LN));
  if (use_wt(d)) CUDA_RET(dt_join(d, st, DT_SIDE_K)); /* wT */
  for (int l = L->L - 1; l >= 0; l--) {
    const dt_block_off_t *o = &L->blk[l];
    const float *wt = d->wT + (size_t)l * DT_WT_FLOATS * E * E;
    const size_t EE = (size_t)E * E;
    const float *h1 = d->h1 + l * NE, *q = d->q + l * NE, *k = d->k + l * NE, *v = d->v + l * NE;
    const float *att = d->att + l * NE, *h2 = d->h2 + l * NE, *gd = d->gd + l * NF, *gl = d->gl + l * NF;
    const float *P = d->P + l * NN;
    /* X_{l+1} = xm + W_2 gelu(W_1 LN2(xm) + b_1) + b_2: du = (dX W_2) gelu'(u) in one GEMM (du's reader: the
     * layer above's W_1 gradient; LN1 reads dhkv) */
    CUDA_RET(after_reads(d, DT_RD_DU, st));
    CUDA_RET(lin_bwd(d, o->m2_w, wt + DT_WT_2 * EE, o->m2_b, gl, d->dX, T, F, E, d->du, gd, DT_RD_DX, 0, st));
    CUDA_RET(after_reads(d, DT_RD_DH, st));
    CUDA_RET(lin_bwd(d, o->m1_w, wt + DT_WT_1 * EE, o->m1_b, h2, d->du, T, E, F, d->dh, NULL, DT_RD_DU, 0, st));
    /* dxm = dX (the residual) + LN2's input gradient */
    CUDA_RET(after_reads(d, DT_RD_DXM, st));
    CUDA_RET(ln_bwd(d, d->dh, NULL, NULL, d->xh2 + l * NE, d->r2 + (size_t)l * T, p + o->ln2_w, T, E, d->dxm, d->dX,
                    g + o->ln2_w, g + o->ln2_b, 1u << DT_RD_DH, st));
    /* xm = X_l + W_o att + b_o; dO (datt), read by the attention's backward
     * alone, written rounded where it stages it so (dt_attn_pre) */
    /* with red_oqk, W_o's, W_q's and W_k's parts in the scratch's thirds
     * (2, 0, 1) and their reduces deferred into red, launched at once after
     * W_k's GEMM; else each in the whole scratch with its own reduce (the
     * flush then has nothing to launch) */
    const int oqk = red_oqk(d, h1, att, T, E);
    const size_t cap = oqk ? oqk_third(d) : d->tmp_cap;
    dt_red_t red;
    red.n = 0;
    dt_red_t *defer = oqk ? &red : NULL;
    CUDA_RET(lin_bwd_params_ex(d, o->o_w, o->o_b, att, d->dxm, T, E, E, DT_RD_DXM, st, d->tmp + (oqk ? 2 * cap : 0),
                               cap, defer));
    CUDA_RET(lin_dx(d, p + o->o_w, wt + DT_WT_O * EE, d->dxm, T, E, E, d->datt, NULL, dt_attn_pre(d), st));
    CUDA_RET(after_reads(d, DT_RD_QKV, st));
    CUDA_RET(dt_attn_bwd(d, P, d->datt, q, k, v, d->dS, d->dq, d->dk, d->dv, st));
    CUDA_RET(lin_bwd_params_ex(d, o->q_w, o->q_b, h1, d->dq, T, E, E, DT_RD_QKV, st, d->tmp, cap, defer));
    CUDA_RET(lin_bwd_params_ex(d, o->k_w, o->k_b, h1, d->dk, T, E, E, DT_RD_QKV, st, d->tmp + (oqk ? cap : 0), cap,
                               defer));
    CUDA_RET(dt_wgrad_flush(d, &red, d->side[DT_SIDE_W]));
    const int v_ln = d->v_ln && v_wgrad_on_ln(d, h1, T, E, 2 * NE);
    if (!v_ln) CUDA_RET(lin_bwd_params(d, o->v_w, o->v_b, h1, d->dv, T, E, E, DT_RD_QKV, st));
    /* h1's gradient dq W_q + dk W_k + dv W_v, the three products side by
     * side into dh and dhkv's two T x E (free once LN2's sums and the layer
     * above's LN1 sums have read them), added in that order by LN1's
     * backward. dhkv is theirs alone: in du, the products waited for W_1's
     * weight gradient on DT_SIDE_W, and the next layer's W_2 input gradient
     * (du's writer) for LN1's sums (kernels/dev/DEVICE_NOTES.md item 218) */
    CUDA_RET(after_reads(d, DT_RD_DH, st));
    CUDA_RET(after_reads(d, DT_RD_HKV, st));
    CUDA_RET(dt_fork_one(d, st, DT_SIDE_K));
    CUDA_RET(dt_fork_one(d, st, DT_SIDE_V));
    float *dhk = d->dhkv, *dhv = d->dhkv + NE;
    CUDA_RET(lin_dx(d, p + o->q_w, wt + DT_WT_Q * EE, d->dq, T, E, E, d->dh, NULL, 0, st));
    CUDA_RET(lin_dx(d, p + o->k_w, wt + DT_WT_K * EE, d->dk, T, E, E, dhk, NULL, 0, d->side[DT_SIDE_K]));
    CUDA_RET(lin_dx(d, p + o->v_w, wt + DT_WT_V * EE, d->dv, T, E, E, dhv, NULL, 0, d->side[DT_SIDE_V]));
    CUDA_RET(dt_join(d, st, DT_SIDE_K));
    CUDA_RET(dt_join(d, st, DT_SIDE_V));
    /* dX = dxm (the residual) + LN1's input gradient */
    CUDA_RET(after_reads(d, DT_RD_DX, st));
    CUDA_RET(ln_bwd(d, d->dh, dhk, dhv, d->xh1 + l * NE, d->r1 + (size_t)l * T, p + o->ln1_w, T, E, d->dX, d->dxm,
                    g + o->ln1_w, g + o->ln1_b, 1u << DT_RD_DH | 1u << DT_RD_HKV, st));
    if (v_ln) { /* after LN1's backward and sums have read dhkv, its split-K scratch */
      CUDA_RET(dt_fork_one(d, st, DT_SIDE_LN));
      CUDA_RET(dt_gemm_wgrad(d, E, E, T, d->dv, E, 1, h1, E, 0, g + o->v_w, E, g + o->v_b, d->dhkv, 2 * NE,
                             d->side[DT_SIDE_LN]));
      CUDA_RET(mark(d, DT_RD_HKV, DT_SIDE_LN));
      CUDA_RET(mark(d, DT_RD_QKV, DT_SIDE_LN));
    }
  }
  /* LN_embed, then the embeddings (dx0 in dxf), beside the weight
   * gradients still on DT_SIDE_W: the scratch here is du's two halves (a
   * split that depends on the shapes alone), free once the last layer's W_1
   * gradient has read it */
  CUDA_RET(after_reads(d, DT_RD_DU, st));
  const size_t half = d->tmp_cap / 2 / 64 * 64; /* du's two halves: the chunked rows', the state GEMM's */
  float *scr = d->du, *scr2 = d->du + half;
  CUDA_RET(ln_bwd(d, d->dX, NULL, NULL, d->xh0, d->r0, p + L->lne_w, T, E, d->dxf, NULL, g + L->lne_w, g + L->lne_b, 0,
                  st));
  /* three independent parts, each on its own stream: the state
   * embedding's (DT_SIDE_K), the time rows' (DT_SIDE_V, each a few steps,
   * unchunked) and the action and W_R rows' (here: each many steps, in up
   * to 64 chunks of steps) */
  CUDA_RET(after_reads(d, DT_RD_DXS, st)); /* LN_f's sums have read dxs, which the state rows write */
  CUDA_RET(dt_fork_one(d, st, DT_SIDE_K));
  CUDA_RET(dt_fork_one(d, st, DT_SIDE_V));
  cudaStream_t sk = d->side[DT_SIDE_K];
  pdl_launch(dt_state_rows_kernel, dt_grid(d, dim3((unsigned)BK)), 128, 0, sk, d->dxf, d->states, d->mask, K, E, L->S,
             d->dxs, d->st_real, d->pz);
  CUDA_RET(cudaGetLastError());
  CUDA_RET(dt_gemm_wgrad(d, E, L->S, BK, d->dxs, E, 1, d->st_real, L->S, 0, g + L->st_w, L->S, NULL, scr2, half, sk));
  CUDA_RET(dt_colsum(d, d->dxs, NULL, BK, E, E, g + L->st_b, 1, scr2, half, sk));
  auto emb = E <= 128 ? dt_embed_bwd_kernel<1> : dt_embed_bwd_kernel<32>;
  pdl_launch(emb, dt_grid(d, dim3((unsigned)L->T)), 128, 0, d->side[DT_SIDE_V], *L, d->dxf, d->rtg, d->mask, d->actions,
             d->timesteps, BK, 0, BK, g, nullptr, d->pz);
  CUDA_RET(cudaGetLastError());
  const size_t row_floats = (size_t)(L->A + 1) * 2 * E;
  long long chunks = BK < 64 ? BK : 64;
  if (chunks * (long long)row_floats > (long long)half) chunks = (long long)(half / row_floats);
  if (chunks < 1) chunks = 1;
  const int per = (int)((BK + chunks - 1) / chunks);
  chunks = (BK + per - 1) / per;
  pdl_launch(emb, dt_grid(d, dim3((unsigned)(L->A + 1), (unsigned)chunks)), 128, 0, st, *L, d->dxf, d->rtg, d->mask,
             d->actions, d->timesteps, BK, L->T, per, g, scr, d->pz);
  CUDA_RET(cudaGetLastError());
  pdl_launch(dt_embed_final_kernel, dt_grid(d, dim3((unsigned)((row_floats + 255) / 256))), 256, 0, st, *L, scr,
             (int)chunks, g, d->pz);
  CUDA_RET(cudaGetLastError());
  return join_all(d, st); /* the side streams' last work (and for a capture: every branch joined) */
}
