/*
 * dt.cu — the Decision Transformer's forward and loss on the GPU
 * (dt_cuda.cuh; the CPU spec is kernels/cpu/dt_impl.h, the math
 * docs/learner.md §16). dt_backward.cu has the backward.
 */
#include <math.h>
#include <string.h>

#include "cuda_check.h"
#include "dt_cuda.cuh"

// kernels

/* C[M, N] (=, or += with acc) op(A)[M, K] op(B)[K, N] + bias[N] + R[M, N]:
 * op(A)[m, k] = ta ? A[k lda + m] : A[m lda + k], op(B)[k, n] = tb ? B[n ldb +
 * k] : B[k ldb + n]; one output a thread, k in tiles of DT_TILE, summed in
 * k order */
__global__ void dt_gemm_kernel(int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
                               float *C, int ldc, const float *bias, const float *R, int ldr, int acc) {
  __shared__ float As[DT_TILE][DT_TILE + 1], Bs[DT_TILE][DT_TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * DT_TILE + ty, n = blockIdx.x * DT_TILE + tx;
  float s = 0;
  for (int k0 = 0; k0 < K; k0 += DT_TILE) {
    const int ka = k0 + tx, kb = k0 + ty;
    const int mA = blockIdx.y * DT_TILE + ty, nB = blockIdx.x * DT_TILE + tx;
    As[ty][tx] = mA < M && ka < K ? (ta ? A[(size_t)ka * lda + mA] : A[(size_t)mA * lda + ka]) : 0.0f;
    Bs[ty][tx] = nB < N && kb < K ? (tb ? B[(size_t)nB * ldb + kb] : B[(size_t)kb * ldb + nB]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < DT_TILE; kk++) s = fmaf(As[ty][kk], Bs[kk][tx], s);
    __syncthreads();
  }
  if (m >= M || n >= N) return;
  if (bias) s += bias[n];
  if (R) s += R[(size_t)m * ldr + n];
  float *c = C + (size_t)m * ldc + n;
  *c = acc ? *c + s : s;
}

/* out[c] (=, or +=) sum over rows r of X[r ld + c], rows in order */
__global__ void dt_colsum_kernel(const float *X, int rows, int cols, int ld, float *out, int acc) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0;
  for (int r = 0; r < rows; r++) s += X[(size_t)r * ld + c];
  out[c] = acc ? out[c] + s : s;
}

/* the tokens (R_t, s_t, a_t, each plus the step's time embedding) of every
 * window; a padded step's tokens are zeros (its inputs are not read) */
__global__ void dt_embed_kernel(const dt_layout_t L, const float *p, const float *states, const float *rtg,
                                const float *mask, const int32_t *actions, const int32_t *timesteps, float *x0) {
  const int N = 3 * L.K, E = L.E, tok = blockIdx.x, b = tok / N, n = tok % N, t = n / 3, kind = n % 3;
  const size_t step = (size_t)b * L.K + t;
  float *x = x0 + (size_t)tok * E;
  const int real = mask[step] != 0;
  int tm = real ? timesteps[step] : 0;
  tm = tm < 0 ? 0 : tm >= L.T ? L.T - 1 : tm;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    if (!real) {
      x[e] = 0;
      continue;
    }
    const float te = p[L.time + (size_t)tm * E + e];
    float s;
    if (kind == 0) {
      s = p[L.rtg_w + e] * rtg[step] + p[L.rtg_b + e] + te;
    } else if (kind == 1) {
      const float *w = p + L.st_w + (size_t)e * L.S, *st = states + step * L.S;
      s = p[L.st_b + e];
      for (int i = 0; i < L.S; i++) s += w[i] * st[i];
      s += te;
    } else {
      const int32_t a = actions[step];
      s = 0;
      for (int d = 0; d < L.D; d++) s += p[L.act_emb[d] + (size_t)((a / L.radix_after[d]) % L.n[d]) * E + e];
      s += te;
    }
    x[e] = s;
  }
}

/* LayerNorm of each of T tokens (one warp a token): y = xhat gamma + beta,
 * xhat and 1/std kept (dt_ln) */
__global__ void dt_ln_kernel(const float *x, int T, int E, const float *gam, const float *bet, float *y, float *xhat,
                             float *rstd) {
  const int tok = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (tok >= T) return;
  const float *xr = x + (size_t)tok * E;
  float s = 0;
  for (int e = lane; e < E; e += 32) s += xr[e];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mean = s / (float)E;
  float v = 0;
  for (int e = lane; e < E; e += 32) v += (xr[e] - mean) * (xr[e] - mean);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const float r = 1.0f / sqrtf(v / (float)E + DT_LN_EPS);
  for (int e = lane; e < E; e += 32) {
    const float xh = (xr[e] - mean) * r;
    xhat[(size_t)tok * E + e] = xh;
    y[(size_t)tok * E + e] = xh * gam[e] + bet[e];
  }
  if (lane == 0) rstd[tok] = r;
}

/* causal attention over the real keys j <= i of query i, head h, window b
 * (grid N x nh x B): P [B, nh, N, N] (zeros off the allowed keys, and for a
 * padded query), att [T, E] (zeros for a padded query) */
__global__ void dt_attn_kernel(const float *q, const float *k, const float *v, const float *mask, int K, int E, int nh,
                               float scale, float *P, float *att) {
  extern __shared__ float sc[]; /* N scores, then 32 for the reductions */
  const int N = 3 * K, i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, dh = E / nh;
  float *red = sc + N;
  float *Pi = P + (((size_t)b * nh + h) * N + i) * N;
  const size_t qi = ((size_t)b * N + i) * E + (size_t)h * dh;
  const int vi = mask[(size_t)b * K + i / 3] != 0;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    float s = -INFINITY;
    if (vi && j <= i && mask[(size_t)b * K + j / 3] != 0) {
      const float *kj = k + ((size_t)b * N + j) * E + (size_t)h * dh;
      s = 0;
      for (int c = 0; c < dh; c++) s += q[qi + c] * kj[c];
      s *= scale;
    }
    sc[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = dt_block_max(mx, red);
  float sum = 0;
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    const float e = sc[j] == -INFINITY ? 0.0f : expf(sc[j] - mx);
    sc[j] = e;
    sum += e;
  }
  sum = dt_block_sum(sum, red);
  __syncthreads();
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    const float pj = vi ? sc[j] / sum : 0.0f;
    sc[j] = pj;
    Pi[j] = pj;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float a = 0;
    for (int j = 0; j <= i; j++)
      if (sc[j] != 0) a += sc[j] * v[((size_t)b * N + j) * E + (size_t)h * dh + c];
    att[qi + c] = a;
  }
}

__device__ __forceinline__ float dt_gelu(float u) {
  return 0.5f * u * (1.0f + tanhf(DT_GELU_C * (u + 0.044715f * u * u * u)));
}

__global__ void dt_gelu_kernel(const float *u, float *g, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = dt_gelu(u[i]);
}

/* xs [B K, E]: the state tokens (3t + 1) of xf */
__global__ void dt_gather_state_kernel(const float *xf, int K, int E, float *xs) {
  const int s = blockIdx.x, b = s / K, t = s % K;
  const float *src = xf + ((size_t)b * 3 * K + 3 * t + 1) * E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) xs[(size_t)s * E + e] = src[e];
}

/* the real steps, into sums[1] (one block, in order) */
__global__ void dt_count_kernel(const float *mask, int BK, float *sums) {
  __shared__ float red[32];
  float c = 0;
  for (int i = threadIdx.x; i < BK; i += blockDim.x) c += mask[i] != 0;
  c = dt_block_sum(c, red);
  if (threadIdx.x == 0) sums[1] = c;
}

/* each step's branch-mean cross-entropy and dz = (softmax - onehot) /
 * (D x real steps); padded steps: 0, and their logits 0 (as the CPU's) */
__global__ void dt_ce_kernel(const dt_layout_t L, const float *mask, const int32_t *actions, int BK, float *z, float *dz,
                             float *loss_step, const float *sums) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= BK) return;
  float *zr = z + (size_t)s * L.A, *dr = dz + (size_t)s * L.A;
  if (mask[s] == 0) {
    for (int c = 0; c < L.A; c++) zr[c] = 0, dr[c] = 0;
    loss_step[s] = 0;
    return;
  }
  const float inv = 1.0f / ((float)L.D * sums[1]);
  const int32_t a = actions[s];
  float ce = 0;
  for (int d = 0, off = 0; d < L.D; off += L.n[d], d++) {
    const int ad = (a / L.radix_after[d]) % L.n[d];
    float mx = -INFINITY;
    for (int c = 0; c < L.n[d]; c++) mx = fmaxf(mx, zr[off + c]);
    float se = 0;
    for (int c = 0; c < L.n[d]; c++) se += expf(zr[off + c] - mx);
    const float lse = mx + logf(se);
    ce += lse - zr[off + ad];
    for (int c = 0; c < L.n[d]; c++) dr[off + c] = (expf(zr[off + c] - lse) - (c == ad ? 1.0f : 0.0f)) * inv;
  }
  loss_step[s] = ce / (float)L.D;
}

/* sums[0] = sum of the steps' CE / real steps (one block, in order) */
__global__ void dt_loss_kernel(const float *loss_step, int BK, float *sums) {
  __shared__ float red[32];
  float s = 0;
  for (int i = threadIdx.x; i < BK; i += blockDim.x) s += loss_step[i];
  s = dt_block_sum(s, red);
  if (threadIdx.x == 0) sums[0] = sums[1] > 0 ? s / sums[1] : 0.0f;
}

// launchers

int dt_gemm(int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb, float *C, int ldc,
            const float *bias, const float *R, int ldr, int acc, cudaStream_t st) {
  if (M <= 0 || N <= 0) return 0;
  const int rows = 65535 * DT_TILE; /* grid.y's limit: M in chunks of this many rows */
  for (int m0 = 0; m0 < M; m0 += rows) {
    const int mm = M - m0 < rows ? M - m0 : rows;
    const dim3 grid((unsigned)((N + DT_TILE - 1) / DT_TILE), (unsigned)((mm + DT_TILE - 1) / DT_TILE)),
        blk(DT_TILE, DT_TILE);
    dt_gemm_kernel<<<grid, blk, 0, st>>>(mm, N, K, ta ? A + m0 : A + (size_t)m0 * lda, lda, ta, B, ldb, tb,
                                         C + (size_t)m0 * ldc, ldc, bias, R ? R + (size_t)m0 * ldr : NULL, ldr, acc);
    CUDA_RET(cudaGetLastError());
  }
  return 0;
}

int dt_colsum(const float *X, int rows, int cols, int ld, float *out, int acc, cudaStream_t st) {
  dt_colsum_kernel<<<(unsigned)((cols + 127) / 128), 128, 0, st>>>(X, rows, cols, ld, out, acc);
  return (int)cudaGetLastError();
}

static int ln(const float *x, int T, int E, const float *gam, const float *bet, float *y, float *xh, float *r,
              cudaStream_t st) {
  dt_ln_kernel<<<(unsigned)((T + 7) / 8), 256, 0, st>>>(x, T, E, gam, bet, y, xh, r);
  return (int)cudaGetLastError();
}

static int lin(const float *p, int64_t w, int64_t b, const float *x, int T, int in, int out, float *y, const float *res,
               cudaStream_t st) {
  return dt_gemm(T, out, in, x, in, 0, p + w, in, 1, y, out, p + b, res, out, 0, st);
}

extern "C" int cuda_dt_alloc(cuda_dt_t *d, const dt_layout_t *L, int B) {
  memset(d, 0, sizeof *d);
  d->L = *L, d->B = B;
  const size_t N = 3 * (size_t)L->K, T = (size_t)B * N, E = (size_t)L->E, F = 4 * E, NL = (size_t)L->L;
  const size_t NE = T * E, NF = T * F, NN = (size_t)B * L->nh * N * N, BK = (size_t)B * L->K, P = (size_t)L->n_params;
  struct {
    float **ptr;
    size_t n;
  } f[] = {{&d->p, P},          {&d->g, P},          {&d->states, BK * L->S}, {&d->rtg, BK},         {&d->mask, BK},
           {&d->x0, NE},        {&d->xh0, NE},       {&d->r0, T},             {&d->X, (NL + 1) * NE}, {&d->h1, NL * NE},
           {&d->xh1, NL * NE},  {&d->r1, NL * T},    {&d->q, NL * NE},        {&d->k, NL * NE},      {&d->v, NL * NE},
           {&d->P, NL * NN},    {&d->att, NL * NE},  {&d->xm, NL * NE},       {&d->h2, NL * NE},     {&d->xh2, NL * NE},
           {&d->r2, NL * T},    {&d->u, NL * NF},    {&d->gl, NL * NF},       {&d->xf, NE},          {&d->xhf, NE},
           {&d->rf, T},         {&d->xs, BK * E},    {&d->z, BK * L->A},      {&d->dz, BK * L->A},   {&d->loss_step, BK},
           {&d->dX, NE},        {&d->dxm, NE},       {&d->dh, NE},            {&d->dq, NE},          {&d->dk, NE},
           {&d->dv, NE},        {&d->datt, NE},      {&d->du, NF},            {&d->dgl, NF},         {&d->dS, NN},
           {&d->dxf, NE},       {&d->dxs, BK * E},   {&d->tmp, NF},           {&d->sums, 4},
           {&d->st_real, BK * L->S}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    cudaError_t e = cudaMalloc((void **)f[i].ptr, sizeof(float) * (f[i].n ? f[i].n : 1));
    if (e == cudaSuccess) e = cudaMemset(*f[i].ptr, 0, sizeof(float) * (f[i].n ? f[i].n : 1));
    if (e != cudaSuccess) {
      cuda_dt_free(d);
      return (int)e;
    }
  }
  cudaError_t e = cudaMalloc((void **)&d->actions, sizeof(int32_t) * BK);
  if (e == cudaSuccess) e = cudaMalloc((void **)&d->timesteps, sizeof(int32_t) * BK);
  if (e == cudaSuccess) e = cudaMemset(d->actions, 0, sizeof(int32_t) * BK);
  if (e == cudaSuccess) e = cudaMemset(d->timesteps, 0, sizeof(int32_t) * BK);
  if (e != cudaSuccess) cuda_dt_free(d);
  return (int)e;
}

extern "C" void cuda_dt_free(cuda_dt_t *d) {
  float **f[] = {&d->p,   &d->g,   &d->states, &d->rtg,  &d->mask, &d->x0,   &d->xh0, &d->r0, &d->X,   &d->h1,
                 &d->xh1, &d->r1,  &d->q,      &d->k,    &d->v,    &d->P,    &d->att, &d->xm, &d->h2,  &d->xh2,
                 &d->r2,  &d->u,   &d->gl,     &d->xf,   &d->xhf,  &d->rf,   &d->xs,  &d->z,  &d->dz,  &d->loss_step,
                 &d->dX,  &d->dxm, &d->dh,     &d->dq,   &d->dk,   &d->dv,   &d->datt, &d->du, &d->dgl, &d->dS,
                 &d->dxf, &d->dxs, &d->tmp,    &d->sums, &d->st_real};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) cudaFree(*f[i]), *f[i] = NULL;
  cudaFree(d->actions), cudaFree(d->timesteps);
  d->actions = d->timesteps = NULL;
}

extern "C" int cuda_dt_forward(cuda_dt_t *d, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, N = 3 * K, T = d->B * N, E = L->E, F = 4 * E, BK = d->B * K, nh = L->nh;
  const size_t NE = (size_t)T * E, NF = (size_t)T * F, NN = (size_t)d->B * nh * N * N;
  const float *p = d->p;
  dt_embed_kernel<<<(unsigned)T, 128, 0, st>>>(*L, p, d->states, d->rtg, d->mask, d->actions, d->timesteps, d->x0);
  CUDA_RET(cudaGetLastError());
  CUDA_RET(ln(d->x0, T, E, p + L->lne_w, p + L->lne_b, d->X, d->xh0, d->r0, st));
  for (int l = 0; l < L->L; l++) {
    const dt_block_off_t *o = &L->blk[l];
    const float *Xl = d->X + (size_t)l * NE;
    float *h1 = d->h1 + l * NE, *q = d->q + l * NE, *k = d->k + l * NE, *v = d->v + l * NE, *att = d->att + l * NE;
    float *xm = d->xm + l * NE, *h2 = d->h2 + l * NE, *u = d->u + l * NF, *gl = d->gl + l * NF;
    CUDA_RET(ln(Xl, T, E, p + o->ln1_w, p + o->ln1_b, h1, d->xh1 + l * NE, d->r1 + (size_t)l * T, st));
    CUDA_RET(lin(p, o->q_w, o->q_b, h1, T, E, E, q, NULL, st));
    CUDA_RET(lin(p, o->k_w, o->k_b, h1, T, E, E, k, NULL, st));
    CUDA_RET(lin(p, o->v_w, o->v_b, h1, T, E, E, v, NULL, st));
    dt_attn_kernel<<<dim3((unsigned)N, (unsigned)nh, (unsigned)d->B), 128, sizeof(float) * (N + 32), st>>>(
        q, k, v, d->mask, K, E, nh, 1.0f / sqrtf((float)(E / nh)), d->P + l * NN, att);
    CUDA_RET(cudaGetLastError());
    CUDA_RET(lin(p, o->o_w, o->o_b, att, T, E, E, xm, Xl, st)); /* x + W_o c + b_o */
    CUDA_RET(ln(xm, T, E, p + o->ln2_w, p + o->ln2_b, h2, d->xh2 + l * NE, d->r2 + (size_t)l * T, st));
    CUDA_RET(lin(p, o->m1_w, o->m1_b, h2, T, E, F, u, NULL, st));
    dt_gelu_kernel<<<(unsigned)((NF + 255) / 256 < 4096 ? (NF + 255) / 256 : 4096), 256, 0, st>>>(u, gl, NF);
    CUDA_RET(cudaGetLastError());
    CUDA_RET(lin(p, o->m2_w, o->m2_b, gl, T, F, E, d->X + (size_t)(l + 1) * NE, xm, st));
  }
  CUDA_RET(ln(d->X + (size_t)L->L * NE, T, E, p + L->lnf_w, p + L->lnf_b, d->xf, d->xhf, d->rf, st));
  dt_gather_state_kernel<<<(unsigned)BK, 128, 0, st>>>(d->xf, K, E, d->xs);
  CUDA_RET(cudaGetLastError());
  for (int dd = 0, off = 0; dd < L->D; off += L->n[dd], dd++)
    CUDA_RET(dt_gemm(BK, L->n[dd], E, d->xs, E, 0, p + L->head_w[dd], E, 1, d->z + off, L->A, p + L->head_b[dd], NULL, 0,
                     0, st));
  dt_count_kernel<<<1, 256, 0, st>>>(d->mask, BK, d->sums);
  dt_ce_kernel<<<(unsigned)((BK + 127) / 128), 128, 0, st>>>(*L, d->mask, d->actions, BK, d->z, d->dz, d->loss_step,
                                                              d->sums);
  dt_loss_kernel<<<1, 256, 0, st>>>(d->loss_step, BK, d->sums);
  return (int)cudaGetLastError();
}

extern "C" int cuda_dt_loss_grad(cuda_dt_t *d, cudaStream_t st) {
  CUDA_RET(cuda_dt_forward(d, st));
  return cuda_dt_backward(d, st);
}
