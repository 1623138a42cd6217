/*
 * dt.cu — the Decision Transformer's forward and loss on the GPU
 * (dt_cuda.cuh; the CPU spec is kernels/cpu/dt_impl.h, the math
 * docs/learner.md §16), its buffers and the column sums the backward takes.
 * dt_gemm.cu has the GEMMs, dt_backward.cu the backward.
 */
#include <math.h>
#include <string.h>

#include "arena.cuh"
#include "cuda_check.h"
#include "dt_cuda.cuh"
#include "dt_gemm_big.cuh"

// kernels

/* X[o] (+ X2[o] + X3[o], in that order, where they are not NULL) */
static __device__ __forceinline__ float dt_x3(const float *X, const float *X2, const float *X3, size_t o) {
  float x = X[o];
  if (X2) x = x + X2[o];
  if (X3) x = x + X3[o];
  return x;
}

/* the column sums of X (or of X Y, elementwise, when Y is not NULL; X is
 * X + X2 + X3 where those are not NULL, dt_x3) over chunks of rows:
 * part[ch cols + c] = the sum over the rows of chunk ch, and with part2
 * (and Y) part2's the same of X alone, from the same loads. A block of 32
 * x 8 threads takes 32 columns (coalesced) of one chunk: warp w sums the
 * chunk's rows w, w + 8, ... in order, then the 8 warps' sums are added in
 * warp order */
__global__ void __launch_bounds__(256) dt_colsum_part_kernel(const float *X, const float *X2, const float *X3,
                                                             const float *Y, int rows, int cols, int ld, int per,
                                                             float *part, float *part2, cuda_pz_t pz) {
  PDL_ENTER();
  __shared__ float sh[2][8][33];
  const long long mo = dt_mo(pz);
  X = dt_off(X, mo), X2 = dt_off0(X2, mo), X3 = dt_off0(X3, mo), Y = dt_off0(Y, mo), part = dt_off(part, mo);
  part2 = dt_off0(part2, mo);
  const int lane = threadIdx.x & 31, w = threadIdx.x / 32, c = blockIdx.x * 32 + lane, ch = blockIdx.y;
  const int r0 = ch * per, r1 = (ch + 1) * per < rows ? (ch + 1) * per : rows;
  float s = 0, s2 = 0;
  if (c < cols) {
    int r = r0 + w;
    for (; r + 24 < r1; r += 32) { /* four rows in flight */
      const size_t o0 = (size_t)r * ld + c, o1 = o0 + (size_t)8 * ld, o2 = o1 + (size_t)8 * ld, o3 = o2 + (size_t)8 * ld;
      float x0 = dt_x3(X, X2, X3, o0), x1 = dt_x3(X, X2, X3, o1), x2 = dt_x3(X, X2, X3, o2), x3 = dt_x3(X, X2, X3, o3);
      if (part2) s2 += x0, s2 += x1, s2 += x2, s2 += x3;
      if (Y) x0 *= Y[o0], x1 *= Y[o1], x2 *= Y[o2], x3 *= Y[o3];
      s += x0, s += x1, s += x2, s += x3;
    }
    for (; r < r1; r += 8) {
      const size_t o = (size_t)r * ld + c;
      const float x = dt_x3(X, X2, X3, o);
      if (part2) s2 += x;
      s += Y ? x * Y[o] : x;
    }
  }
  sh[0][w][lane] = s, sh[1][w][lane] = s2;
  __syncthreads();
  if (w == 0 && c < cols) {
    float t = 0;
    for (int k = 0; k < 8; k++) t += sh[0][k][lane];
    part[(size_t)ch * cols + c] = t;
    if (part2) {
      t = 0;
      for (int k = 0; k < 8; k++) t += sh[1][k][lane];
      part2[(size_t)ch * cols + c] = t;
    }
  }
}

/* out[c] (=, or +=) the chunks' partial sums: a warp a column, lane l the
 * chunks l, l + 32, ... in order, then a fixed tree over the lanes */
__global__ void dt_colsum_final_kernel(const float *part, const float *part2, int chunks, int cols, float *out,
                                       float *out2, int acc, cuda_pz_t pz) {
  PDL_ENTER();
  const long long mo = dt_mo(pz);
  if (blockIdx.y) part = part2, out = out2; /* the pair's second sums */
  part = dt_off(part, mo), out = dt_off(out, mo);
  const int lane = threadIdx.x & 31, c = dt_warp_row();
  if (c >= cols) return;
  float s = 0;
  for (int ch = lane; ch < chunks; ch += 32) s += part[(size_t)ch * cols + c];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) out[c] = acc ? out[c] + s : s;
}

/* the tokens (R_t, s_t, a_t, each plus the step's time embedding) of every
 * window into x0, one warp a token; a padded step's tokens are zeros (its
 * inputs are not read); se [B K, E]: W_s s_t + b_s of every step (a GEMM
 * before). Then, each lane on the elements it wrote, LN_embed of the token
 * into X (xh0, r0) and block 0's LN1 of that into h1 (xh1, r1; h1 rounded
 * to TF32 with rnd, dt_pre), as dt_ln_kernel computes them: one launch for
 * three (kernels/dev/DEVICE_NOTES.md item 151). */
__global__ void dt_embed_kernel(const dt_layout_t L, const float *p, const float *se, const float *rtg,
                                const float *mask, const int32_t *actions, const int32_t *timesteps, int T, float *x0,
                                float *X, float *xh0, float *r0, float *h1, float *xh1, float *r1, int rnd,
                                cuda_pz_t pz) {
  PDL_ENTER();
  const int tok = dt_warp_row(), lane = threadIdx.x & 31;
  if (tok >= T) return;
  const long long mo = dt_mo(pz);
  p = dt_off(p, mo), se = dt_off(se, mo), rtg = dt_off(rtg, mo), mask = dt_off(mask, mo);
  actions = dt_off(actions, mo), timesteps = dt_off(timesteps, mo), x0 = dt_off(x0, mo), X = dt_off(X, mo);
  xh0 = dt_off(xh0, mo), r0 = dt_off(r0, mo), h1 = dt_off(h1, mo), xh1 = dt_off(xh1, mo), r1 = dt_off(r1, mo);
  const int N = 3 * L.K, E = L.E, b = tok / N, n = tok % N, t = n / 3, kind = n % 3;
  const size_t step = (size_t)b * L.K + t, row = (size_t)tok * E;
  float *x = x0 + row;
  const int real = mask[step] != 0;
  int tm = real ? timesteps[step] : 0;
  tm = tm < 0 ? 0 : tm >= L.T ? L.T - 1 : tm;
  for (int e = lane; e < E; e += 32) {
    if (!real) {
      x[e] = 0;
      continue;
    }
    const float te = p[L.time + (size_t)tm * E + e];
    float s;
    if (kind == 0) {
      s = p[L.rtg_w + e] * rtg[step] + p[L.rtg_b + e] + te;
    } else if (kind == 1) {
      s = se[step * E + e] + te;
    } else {
      const int32_t a = actions[step];
      s = 0;
      for (int d = 0; d < L.D; d++) s += p[L.act_emb[d] + (size_t)((a / L.radix_after[d]) % L.n[d]) * E + e];
      s += te;
    }
    x[e] = s;
  }
  const float ra = dt_ln_row(x, E, lane, p + L.lne_w, p + L.lne_b, xh0 + row, X + row, 0);
  const float rb = dt_ln_row(X + row, E, lane, p + L.blk[0].ln1_w, p + L.blk[0].ln1_b, xh1 + row, h1 + row, rnd);
  if (lane == 0) r0[tok] = ra, r1[tok] = rb;
}

/* LayerNorm of each of T tokens (one warp a token): y = xhat gamma + beta
 * (rounded to TF32 with rnd: a y that only TF32 GEMMs read, dt_pre), xhat
 * and 1/std kept (dt_ln) */
__global__ void dt_ln_kernel(const float *x, int T, int E, const float *gam, const float *bet, float *y, float *xhat,
                             float *rstd, int rnd, cuda_pz_t pz) {
  PDL_ENTER();
  const int tok = dt_warp_row(), lane = threadIdx.x & 31;
  if (tok >= T) return;
  const long long mo = dt_mo(pz);
  x = dt_off(x, mo), gam = dt_off(gam, mo), bet = dt_off(bet, mo), y = dt_off(y, mo), xhat = dt_off(xhat, mo);
  rstd = dt_off(rstd, mo);
  const size_t row = (size_t)tok * E;
  const float r = dt_ln_row(x + row, E, lane, gam, bet, xhat + row, y + row, rnd);
  if (lane == 0) rstd[tok] = r;
}

/* the real steps, into sums[1] (one block, in order) */
__global__ void dt_count_kernel(const float *mask, int BK, float *sums, cuda_pz_t pz) {
  PDL_ENTER();
  const long long mo = dt_mo(pz);
  mask = dt_off(mask, mo), sums = dt_off(sums, mo);
  __shared__ float red[32];
  float c = 0;
  for (int i = threadIdx.x; i < BK; i += blockDim.x) c += mask[i] != 0;
  c = dt_block_sum(c, red);
  if (threadIdx.x == 0) sums[1] = c;
}

/* sums[0] = sum of the steps' CE / real steps (one block, in order) */
__global__ void dt_loss_kernel(const float *loss_step, int BK, float *sums, cuda_pz_t pz) {
  PDL_ENTER();
  const long long mo = dt_mo(pz);
  loss_step = dt_off(loss_step, mo), sums = dt_off(sums, mo);
  __shared__ float red[32];
  float s = 0;
  for (int i = threadIdx.x; i < BK; i += blockDim.x) s += loss_step[i];
  s = dt_block_sum(s, red);
  if (threadIdx.x == 0) sums[0] = sums[1] > 0 ? s / sums[1] : 0.0f;
}

// launchers

int dt_colsum(const cuda_dt_t *d, const float *X, const float *Y, int rows, int cols, int ld, float *out, int acc,
              float *part, size_t cap, cudaStream_t st) {
  return dt_colsum3(d, X, NULL, NULL, Y, rows, cols, ld, out, acc, part, cap, st);
}

int dt_colsum3(const cuda_dt_t *d, const float *X, const float *X2, const float *X3, const float *Y, int rows, int cols,
               int ld, float *out, int acc, float *part, size_t cap, cudaStream_t st) {
  return dt_colsum_pair(d, X, X2, X3, Y, rows, cols, ld, out, NULL, acc, part, NULL, cap, st);
}

int dt_colsum_pair(const cuda_dt_t *d, const float *X, const float *X2, const float *X3, const float *Y, int rows,
                   int cols, int ld, float *out, float *out2, int acc, float *part, float *part2, size_t cap,
                   cudaStream_t st) {
  /* up to 64 chunks of rows, as many as the scratch holds (a fixed count for
   * the shapes: the same sums in the same order on every call) */
  long long chunks = rows < 64 ? rows : 64;
  if (chunks * cols > (long long)cap) chunks = (long long)cap / cols;
  if (chunks < 1) chunks = 1;
  const int per = (int)((rows + chunks - 1) / chunks);
  chunks = (rows + per - 1) / per;
  if (!out2) part2 = NULL;
  pdl_launch(dt_colsum_part_kernel, dt_grid(d, dim3((unsigned)((cols + 31) / 32), (unsigned)chunks)), 256, 0, st, X, X2,
             X3, Y, rows, cols, ld, per, part, part2, d->pz);
  pdl_launch(dt_colsum_final_kernel, dt_grid(d, dim3((unsigned)((cols + 7) / 8), part2 ? 2u : 1u)), 256, 0, st, part,
             part2, (int)chunks, cols, out, out2, acc, d->pz);
  return (int)cudaGetLastError();
}

/* rnd: y rounded to TF32 (h1 and h2 under dt_pre) */
static int ln(const cuda_dt_t *d, const float *x, int T, int E, const float *gam, const float *bet, float *y, float *xh,
              float *r, int rnd, cudaStream_t st) {
  pdl_launch(dt_ln_kernel, dt_grid(d, dim3((unsigned)((T + 7) / 8))), 256, 0, st, x, T, E, gam, bet, y, xh, r, rnd,
             d->pz);
  return (int)cudaGetLastError();
}

/* the forward's weight at p + w, or under dt_pre its TF32 copy at wr +
 * wr_off (the same products: every tile rounds W so) */
static const float *fw(const cuda_dt_t *d, int64_t w, size_t wr_off) { return dt_pre(d) ? d->wr + wr_off : d->p + w; }

/* y = x W^T + b (+ res), W = fw(d, w, wr_off) */
static int lin(const cuda_dt_t *d, int64_t w, size_t wr_off, int64_t b, const float *x, int T, int in, int out,
               float *y, const float *res, int op, cudaStream_t st) {
  return dt_gemm_op(d, T, out, in, x, in, 0, fw(d, w, wr_off), in, 1, y, out, d->p + b, res, out, 0, op, NULL, st);
}

/* wr: each block's six weights (offsets src, as dt_transpose_kernel's)
 * rounded to TF32 in wr's DT_WT_* places: blockIdx.y is block y / 6's
 * matrix y % 6 */
__global__ void dt_round_w_kernel(const float *p, dt_wt_src_t src, int E, float *wr, cuda_pz_t pz) {
  PDL_ENTER();
  const long long mo = dt_mo(pz);
  const int j = blockIdx.y % 6, l = blockIdx.y / 6;
  const float *a = dt_off(p, mo) + src.off[blockIdx.y];
  float *o = dt_off(wr, mo) + (size_t)l * DT_WT_FLOATS * E * E + (size_t)(j < 4 ? j : j == 4 ? DT_WT_1 : DT_WT_2) * E * E;
  const size_t n = (size_t)(j < 4 ? 1 : 4) * E * E;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    o[i] = dt_tf32(a[i]);
}

dt_wt_src_t dt_wt_src(const dt_layout_t *L) {
  dt_wt_src_t src;
  memset(&src, 0, sizeof src);
  for (int l = 0; l < L->L; l++) {
    const dt_block_off_t *o = &L->blk[l];
    const int64_t w[6] = {o->q_w, o->k_w, o->v_w, o->o_w, o->m1_w, o->m2_w};
    for (int j = 0; j < 6; j++) src.off[6 * l + j] = w[j];
  }
  return src;
}

extern "C" int cuda_dt_alloc(cuda_dt_t *d, const dt_layout_t *L, int B) {
  memset(d, 0, sizeof *d);
  d->L = *L, d->B = B;
  const size_t N = 3 * (size_t)L->K, T = (size_t)B * N, E = (size_t)L->E, F = 4 * E, NL = (size_t)L->L;
  const size_t NE = T * E, NF = T * F, NN = (size_t)B * L->nh * N * N, BK = (size_t)B * L->K, P = (size_t)L->n_params;
  d->pz = cuda_pz_t{1, 0};
  /* the scratch of the column sums (64 chunks of the widest: 4E or a
   * branch's n_d), the embeddings' backward (two halves of du, dt_backward.cu's
   * tail: each 64 chunks of the A + 1 chunked rows, 2E each) and the weight
   * gradients' split-K parts (what fits: at least a T x 4E activation's
   * floats, or 256 of the widest) */
  size_t widest = 4 * (size_t)L->E;
  for (int i = 0; i < L->D; i++) widest = (size_t)L->n[i] > widest ? (size_t)L->n[i] : widest;
  d->tmp_cap = NF > 256 * widest ? NF : 256 * widest;
  if (d->tmp_cap < (size_t)128 * (L->A + 1) * 2 * E + 64) d->tmp_cap = (size_t)128 * (L->A + 1) * 2 * E + 64;
  d->csum_cap = 64 * widest; /* as many chunks as tmp allows: the same sums */
  /* du [T, 4E] is tmp_cap floats (at least NF): the backward's tail takes
   * its two halves for two parts' scratch at once (dt_backward.cu) */
  struct {
    float **ptr;
    size_t n;
  } f[] = {{&d->p, P},          {&d->g, P},          {&d->states, BK * L->S}, {&d->rtg, BK},         {&d->mask, BK},
           {&d->x0, NE},        {&d->xh0, NE},       {&d->r0, T},             {&d->X, (NL + 1) * NE}, {&d->h1, NL * NE},
           {&d->xh1, NL * NE},  {&d->r1, NL * T},    {&d->q, NL * NE},        {&d->k, NL * NE},      {&d->v, NL * NE},
           {&d->P, NL * NN},    {&d->att, NL * NE},  {&d->xm, NL * NE},       {&d->h2, NL * NE},     {&d->xh2, NL * NE},
           {&d->r2, NL * T},    {&d->gd, NL * NF},   {&d->gl, NL * NF},       {&d->xhf, BK * E},     {&d->rf, BK},
           {&d->xs, BK * E},    {&d->z, BK * L->A},  {&d->dz, BK * L->A},     {&d->loss_step, BK},
           {&d->dX, NE},        {&d->dxm, NE},       {&d->dh, NE},            {&d->dq, NE},          {&d->dk, NE},
           {&d->dv, NE},        {&d->datt, NE},      {&d->du, d->tmp_cap},     {&d->dS, NN},
           {&d->dxf, NE},       {&d->dxs, BK * E},   {&d->tmp, d->tmp_cap},   {&d->sums, 4}, {&d->dhkv, 2 * NE},
           {&d->st_real, BK * L->S},            {&d->csum[0], d->csum_cap},              {&d->csum[1], d->csum_cap},
           {&d->csum[2], d->csum_cap},          {&d->wT, NL * DT_WT_FLOATS * E * E},
           {&d->wr, NL * DT_WT_FLOATS * E * E}};
  /* dev_alloc: a population member's come from its slice of the arena */
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    cudaError_t e = dev_alloc_t(f[i].ptr, sizeof(float) * (f[i].n ? f[i].n : 1));
    if (e == cudaSuccess) e = cudaMemset(*f[i].ptr, 0, sizeof(float) * (f[i].n ? f[i].n : 1));
    if (e != cudaSuccess) {
      cuda_dt_free(d);
      return (int)e;
    }
  }
  cudaError_t e = dev_alloc_t(&d->actions, sizeof(int32_t) * BK);
  if (e == cudaSuccess) e = dev_alloc_t(&d->timesteps, sizeof(int32_t) * BK);
  if (e == cudaSuccess) e = cudaMemset(d->actions, 0, sizeof(int32_t) * BK);
  if (e == cudaSuccess) e = cudaMemset(d->timesteps, 0, sizeof(int32_t) * BK);
  if (e == cudaSuccess) e = (cudaError_t)dt_attn_init(L, &d->attn_win);
  if (e == cudaSuccess) e = (cudaError_t)dt_attn_tc_init(L, &d->attn_tc, &d->attn_one, &d->attn_pair);
  d->attn_form = -1;
  if (e == cudaSuccess) e = (cudaError_t)dt_head_init(L, &d->head_wpb, &d->head_sw);
  if (e == cudaSuccess) e = (cudaError_t)dt_big_init(&d->big_one, &d->nsm);
  d->wg = dt_wg_setup();
  d->tma = dt_tma_setup();
  d->pre = 1;
  d->v_ln = 1;
  d->red_oqk = 1;
  d->big = 1;
  for (int i = 0; i < DT_SIDES && e == cudaSuccess; i++) {
    e = cudaStreamCreateWithFlags(&d->side[i], cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&d->join[i], cudaEventDisableTiming);
  }
  for (int s = 0; s < DT_RD_N; s++)
    for (int i = 0; i < DT_READERS && e == cudaSuccess; i++)
      e = cudaEventCreateWithFlags(&d->rd[s][i], cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&d->fork, cudaEventDisableTiming);
  if (e != cudaSuccess) cuda_dt_free(d);
  return (int)e;
}

extern "C" void cuda_dt_free(cuda_dt_t *d) {
  float **f[] = {&d->p,   &d->g,   &d->states, &d->rtg,  &d->mask, &d->x0,   &d->xh0, &d->r0, &d->X,   &d->h1,
                 &d->xh1, &d->r1,  &d->q,      &d->k,    &d->v,    &d->P,    &d->att, &d->xm, &d->h2,  &d->xh2,
                 &d->r2,  &d->gd,  &d->gl,     &d->xhf,  &d->rf,   &d->xs,  &d->z,  &d->dz,  &d->loss_step,
                 &d->dX,  &d->dxm, &d->dh,     &d->dq,   &d->dk,   &d->dv,   &d->datt, &d->du, &d->dS,
                 &d->dxf, &d->dxs, &d->tmp,    &d->sums, &d->dhkv, &d->st_real, &d->csum[0], &d->csum[1], &d->csum[2], &d->wT,
                 &d->wr};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) dev_free(*f[i]), *f[i] = NULL;
  dev_free(d->actions), dev_free(d->timesteps);
  d->actions = d->timesteps = NULL;
  for (int i = 0; i < DT_SIDES; i++) {
    if (d->side[i]) cudaStreamDestroy(d->side[i]);
    if (d->join[i]) cudaEventDestroy(d->join[i]);
    d->side[i] = NULL, d->join[i] = NULL;
  }
  for (int s = 0; s < DT_RD_N; s++)
    for (int i = 0; i < DT_READERS; i++) {
      if (d->rd[s][i]) cudaEventDestroy(d->rd[s][i]);
      d->rd[s][i] = NULL;
    }
  if (d->fork) cudaEventDestroy(d->fork);
  d->fork = NULL;
}

int dt_fork(cuda_dt_t *d, cudaStream_t st, int n) {
  CUDA_RET(cudaEventRecord(d->fork, st));
  for (int i = 0; i < n; i++) CUDA_RET(cudaStreamWaitEvent(d->side[i], d->fork, 0));
  return 0;
}

int dt_fork_one(cuda_dt_t *d, cudaStream_t st, int i) {
  CUDA_RET(cudaEventRecord(d->fork, st));
  return (int)cudaStreamWaitEvent(d->side[i], d->fork, 0);
}

int dt_join(cuda_dt_t *d, cudaStream_t st, int i) {
  CUDA_RET(cudaEventRecord(d->join[i], d->side[i]));
  return (int)cudaStreamWaitEvent(st, d->join[i], 0);
}

int dt_zero(const cuda_dt_t *d, void *p, size_t bytes, cudaStream_t st) {
  if (d->pz.n == 1) return (int)cudaMemsetAsync(p, 0, bytes, st);
  return (int)cudaMemset2DAsync(p, (size_t)d->pz.stride, 0, bytes, (size_t)d->pz.n, st);
}

static int dt_forward_body(cuda_dt_t *d, cudaStream_t st);

/* the forward, with dt_big_takes' forward rule on (d->fwd): no side
 * stream runs beside its launches */
int dt_forward(cuda_dt_t *d, cudaStream_t st) {
  d->fwd = 1;
  const int e = dt_forward_body(d, st);
  d->fwd = 0;
  return e;
}

static int dt_forward_body(cuda_dt_t *d, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, N = 3 * K, T = d->B * N, E = L->E, F = 4 * E, BK = d->B * K, nh = L->nh;
  const size_t NE = (size_t)T * E, NF = (size_t)T * F, NN = (size_t)d->B * nh * N * N;
  const float *p = d->p;
  /* the state tokens' W_s s + b_s into xs (free until the heads) */
  CUDA_RET(dt_gemm(d, BK, E, L->S, d->states, L->S, 0, p + L->st_w, L->S, 1, d->xs, E, p + L->st_b, NULL, 0, 0, st));
  /* the real steps (the cross-entropy's divisor) and under dt_pre wr, beside the embeddings */
  const int pre = dt_pre(d);
  /* q, k and v written TF32-rounded where the attention reads them so */
  const int qkv_op = dt_attn_pre(d) ? DT_EP_PLAIN_T : DT_EP_PLAIN;
  CUDA_RET(dt_fork_one(d, st, 0));
  pdl_launch(dt_count_kernel, dt_grid(d, dim3(1)), 256, 0, d->side[0], d->mask, BK, d->sums, d->pz);
  CUDA_RET(cudaGetLastError());
  if (pre) {
    pdl_launch(dt_round_w_kernel, dt_grid(d, dim3(32, (unsigned)(6 * L->L))), 256, 0, d->side[0], p, dt_wt_src(L), E,
               d->wr, d->pz);
    CUDA_RET(cudaGetLastError());
  }
  /* the embeddings, LN_embed and block 0's LN1 */
  pdl_launch(dt_embed_kernel, dt_grid(d, dim3((unsigned)((T + 7) / 8))), 256, 0, st, *L, p, d->xs, d->rtg, d->mask,
             d->actions, d->timesteps, T, d->x0, d->X, d->xh0, d->r0, d->h1, d->xh1, d->r1, pre, d->pz);
  CUDA_RET(cudaGetLastError());
  CUDA_RET(dt_join(d, st, 0));
  for (int l = 0; l < L->L; l++) {
    const dt_block_off_t *o = &L->blk[l];
    const float *Xl = d->X + (size_t)l * NE;
    float *h1 = d->h1 + l * NE, *q = d->q + l * NE, *k = d->k + l * NE, *v = d->v + l * NE, *att = d->att + l * NE;
    float *xm = d->xm + l * NE, *h2 = d->h2 + l * NE, *gd = d->gd + l * NF, *gl = d->gl + l * NF;
    const size_t wl = (size_t)l * DT_WT_FLOATS * E * E, EE = (size_t)E * E; /* block l's weights in wr */
    if (l > 0) /* block 0's in dt_embed_kernel */
      CUDA_RET(ln(d, Xl, T, E, p + o->ln1_w, p + o->ln1_b, h1, d->xh1 + l * NE, d->r1 + (size_t)l * T, pre, st));
    /* q, k and v side by side */
    CUDA_RET(dt_fork(d, st, 2));
    CUDA_RET(lin(d, o->q_w, wl + DT_WT_Q * EE, o->q_b, h1, T, E, E, q, NULL, qkv_op, st));
    CUDA_RET(lin(d, o->k_w, wl + DT_WT_K * EE, o->k_b, h1, T, E, E, k, NULL, qkv_op, d->side[0]));
    CUDA_RET(lin(d, o->v_w, wl + DT_WT_V * EE, o->v_b, h1, T, E, E, v, NULL, qkv_op, d->side[1]));
    CUDA_RET(dt_join(d, st, 0));
    CUDA_RET(dt_join(d, st, 1));
    CUDA_RET(dt_attn(d, q, k, v, d->P + l * NN, att, st));
    CUDA_RET(lin(d, o->o_w, wl + DT_WT_O * EE, o->o_b, att, T, E, E, xm, Xl, DT_EP_PLAIN, st)); /* x + W_o c + b_o */
    CUDA_RET(ln(d, xm, T, E, p + o->ln2_w, p + o->ln2_b, h2, d->xh2 + l * NE, d->r2 + (size_t)l * T, pre, st));
    /* u = W_1 h2 + b_1, gl = gelu(u) and gd = gelu'(u), one GEMM (gl rounded under dt_pre) */
    CUDA_RET(dt_gemm_op(d, T, F, E, h2, E, 0, fw(d, o->m1_w, wl + DT_WT_1 * EE), E, 1, gd, F, p + o->m1_b,
                        NULL, 0, 0, pre ? DT_EP_GELU_T : DT_EP_GELU, gl, st));
    CUDA_RET(lin(d, o->m2_w, wl + DT_WT_2 * EE, o->m2_b, gl, T, F, E, d->X + (size_t)(l + 1) * NE, xm, DT_EP_PLAIN,
                 st));
  }
  /* LN_f, the heads and the cross-entropy at the state tokens */
  return dt_head_fwd(d, d->X + (size_t)L->L * NE, st);
}

int dt_loss_sum(const cuda_dt_t *d, cudaStream_t st) {
  pdl_launch(dt_loss_kernel, dt_grid(d, dim3(1)), 256, 0, st, d->loss_step, d->B * d->L.K, d->sums, d->pz);
  return (int)cudaGetLastError();
}

extern "C" int cuda_dt_forward(cuda_dt_t *d, cudaStream_t st) {
  CUDA_RET(dt_forward(d, st));
  return dt_loss_sum(d, st);
}

extern "C" int cuda_dt_loss_grad(cuda_dt_t *d, cudaStream_t st) {
  CUDA_RET(dt_forward(d, st)); /* the loss's sum beside the backward (cuda_dt_backward) */
  return cuda_dt_backward(d, st);
}
