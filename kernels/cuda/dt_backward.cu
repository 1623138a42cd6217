/*
 * dt_backward.cu — the exact backward of dt.cu's forward (the CPU spec's
 * dt_lin_bwd, dt_ln_bwd, dt_gelu_d and the attention's, kernels/cpu/
 * dt_impl.h), into d->g. Each parameter's gradient is a fixed-order sum over
 * the batch's tokens (column sums, GEMMs over the token axis, one thread an
 * embedding row); padded tokens carry zero gradients.
 */
#include <math.h>

#include "cuda_check.h"
#include "dt_cuda.cuh"

// kernels

/* dx (+)= rstd (dy gamma - mean(dy gamma) - xhat mean(dy gamma xhat)), one
 * warp a token */
__global__ void dt_ln_bwd_kernel(const float *dy, const float *xhat, const float *rstd, const float *gam, int T, int E,
                                 float *dx) {
  const int tok = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (tok >= T) return;
  const float *g = dy + (size_t)tok * E, *xh = xhat + (size_t)tok * E;
  float m1 = 0, m2 = 0;
  for (int e = lane; e < E; e += 32) {
    const float d = g[e] * gam[e];
    m1 += d, m2 += d * xh[e];
  }
  for (int o = 16; o > 0; o >>= 1) {
    m1 += __shfl_xor_sync(0xffffffffu, m1, o);
    m2 += __shfl_xor_sync(0xffffffffu, m2, o);
  }
  m1 /= (float)E, m2 /= (float)E;
  const float r = rstd[tok];
  for (int e = lane; e < E; e += 32) dx[(size_t)tok * E + e] += r * (g[e] * gam[e] - m1 - xh[e] * m2);
}

/* dgamma[e] += sum_t dy xhat, dbeta[e] += sum_t dy, tokens in order */
__global__ void dt_ln_param_kernel(const float *dy, const float *xhat, int T, int E, float *dg, float *db) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  float sg = 0, sb = 0;
  for (int t = 0; t < T; t++) {
    const float d = dy[(size_t)t * E + e];
    sg += d * xhat[(size_t)t * E + e], sb += d;
  }
  dg[e] += sg, db[e] += sb;
}

__global__ void dt_gelu_bwd_kernel(const float *u, const float *dg, float *du, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float x = u[i], t = tanhf(DT_GELU_C * (x + 0.044715f * x * x * x));
    du[i] = dg[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * DT_GELU_C * (1.0f + 3.0f * 0.044715f * x * x));
  }
}

/* query i of head h, window b: dP_ij = datt_i . v_j, dS_ij = P_ij (dP_ij -
 * sum_j P_ij dP_ij) into dS, dq_i = scale sum_j dS_ij k_j */
__global__ void dt_attn_bwd_q_kernel(const float *P, const float *datt, const float *k, const float *v, int K, int E,
                                     int nh, float scale, float *dS, float *dq) {
  extern __shared__ float sh[]; /* N, then 32 */
  const int N = 3 * K, i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, dh = E / nh;
  float *red = sh + N;
  const size_t row = (((size_t)b * nh + h) * N + i) * N, qi = ((size_t)b * N + i) * E + (size_t)h * dh;
  float dot = 0;
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    float dp = 0;
    if (P[row + j] != 0) {
      const float *vj = v + ((size_t)b * N + j) * E + (size_t)h * dh;
      for (int c = 0; c < dh; c++) dp += datt[qi + c] * vj[c];
    }
    sh[j] = dp;
    dot += P[row + j] * dp;
  }
  dot = dt_block_sum(dot, red);
  __syncthreads();
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    const float s = P[row + j] * (sh[j] - dot);
    sh[j] = s;
    dS[row + j] = s;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float a = 0;
    for (int j = 0; j <= i; j++)
      if (sh[j] != 0) a += sh[j] * k[((size_t)b * N + j) * E + (size_t)h * dh + c];
    dq[qi + c] = a * scale;
  }
}

/* key j of head h, window b: dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij
 * datt_i (queries i >= j, in order) */
__global__ void dt_attn_bwd_kv_kernel(const float *P, const float *dS, const float *q, const float *datt, int K, int E,
                                      int nh, float scale, float *dk, float *dv) {
  const int N = 3 * K, j = blockIdx.x, h = blockIdx.y, b = blockIdx.z, dh = E / nh;
  const size_t base = ((size_t)b * nh + h) * N * N, kj = ((size_t)b * N + j) * E + (size_t)h * dh;
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float sk = 0, sv = 0;
    for (int i = j; i < N; i++) {
      const float s = dS[base + (size_t)i * N + j], p = P[base + (size_t)i * N + j];
      if (p == 0 && s == 0) continue;
      const size_t qi = ((size_t)b * N + i) * E + (size_t)h * dh + c;
      sk += s * q[qi], sv += p * datt[qi];
    }
    dk[kj + c] = sk * scale;
    dv[kj + c] = sv;
  }
}

/* dxf: zeros but the state tokens' rows, which are dxs's */
__global__ void dt_scatter_state_kernel(const float *dxs, int K, int E, float *dxf) {
  const int tok = blockIdx.x, n = tok % (3 * K), b = tok / (3 * K);
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    dxf[(size_t)tok * E + e] = n % 3 == 1 ? dxs[((size_t)b * K + n / 3) * E + e] : 0.0f;
}

/* the state tokens' rows of dx0 into dxs, and the states of real steps into
 * st (zeros for padding: its inputs are not read) */
__global__ void dt_state_rows_kernel(const float *dx0, const float *states, const float *mask, int K, int E, int S,
                                     float *dxs, float *st) {
  const int s = blockIdx.x, b = s / K, t = s % K;
  for (int e = threadIdx.x; e < E; e += blockDim.x) dxs[(size_t)s * E + e] = dx0[((size_t)b * 3 * K + 3 * t + 1) * E + e];
  for (int i = threadIdx.x; i < S; i += blockDim.x) st[(size_t)s * S + i] = mask[s] != 0 ? states[(size_t)s * S + i] : 0.0f;
}

/* the embeddings' gradients, one thread an element, the steps in order: W_R
 * and b_R (the return-to-go tokens), the time embedding (all three tokens of
 * each real step of that clipped timestep), each branch's action embedding */
__global__ void dt_embed_bwd_kernel(const dt_layout_t L, const float *dx0, const float *rtg, const float *mask,
                                    const int32_t *actions, const int32_t *timesteps, int BK, float *g) {
  const int E = L.E, K = L.K;
  const int64_t rows = (int64_t)L.T + L.A + 1; /* time rows, action rows (all branches), the R row */
  const int64_t id = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (id >= rows * E) return;
  const int64_t r = id / E;
  const int e = (int)(id % E);
  if (r == rows - 1) { /* W_R, b_R */
    float sw = 0, sb = 0;
    for (int s = 0; s < BK; s++) {
      if (mask[s] == 0) continue;
      const float d = dx0[((size_t)(s / K) * 3 * K + 3 * (s % K)) * E + e];
      sw += d * rtg[s], sb += d;
    }
    g[L.rtg_w + e] += sw, g[L.rtg_b + e] += sb;
    return;
  }
  if (r < L.T) { /* time row r */
    float acc = 0;
    for (int s = 0; s < BK; s++) {
      if (mask[s] == 0) continue;
      int tm = timesteps[s];
      tm = tm < 0 ? 0 : tm >= L.T ? L.T - 1 : tm;
      if (tm != r) continue;
      const float *x = dx0 + ((size_t)(s / K) * 3 * K + 3 * (s % K)) * E + e;
      acc += x[0] + x[E] + x[2 * E];
    }
    g[L.time + (size_t)r * E + e] += acc;
    return;
  }
  int c = (int)(r - L.T), d = 0; /* branch d's row c */
  while (c >= L.n[d]) c -= L.n[d], d++;
  float acc = 0;
  for (int s = 0; s < BK; s++) {
    if (mask[s] == 0 || (actions[s] / L.radix_after[d]) % L.n[d] != c) continue;
    acc += dx0[((size_t)(s / K) * 3 * K + 3 * (s % K) + 2) * E + e];
  }
  g[L.act_emb[d] + (size_t)c * E + e] += acc;
}

// launchers

int dt_ln_bwd(const float *dy, const float *xhat, const float *rstd, const float *gam, int T, int E, float *dx,
              float *dgam, float *dbet, float *tmp, cudaStream_t st) {
  (void)tmp;
  dt_ln_bwd_kernel<<<(unsigned)((T + 7) / 8), 256, 0, st>>>(dy, xhat, rstd, gam, T, E, dx);
  dt_ln_param_kernel<<<(unsigned)((E + 127) / 128), 128, 0, st>>>(dy, xhat, T, E, dgam, dbet);
  return (int)cudaGetLastError();
}

/* a linear layer's backward over T tokens: dW += dy^T x, db += colsum dy,
 * dx (=, or += with acc) dy W */
static int lin_bwd(float *g, const float *p, int64_t w, int64_t b, const float *x, const float *dy, int T, int in,
                   int out, float *dx, int acc, cudaStream_t st) {
  CUDA_RET(dt_gemm(out, in, T, dy, out, 1, x, in, 0, g + w, in, NULL, NULL, 0, 1, st));
  CUDA_RET(dt_colsum(dy, T, out, out, g + b, 1, st));
  return dx ? dt_gemm(T, in, out, dy, out, 0, p + w, in, 0, dx, in, NULL, NULL, 0, acc, st) : 0;
}

int cuda_dt_backward(cuda_dt_t *d, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, N = 3 * K, T = d->B * N, E = L->E, F = 4 * E, BK = d->B * K, nh = L->nh;
  const size_t NE = (size_t)T * E, NF = (size_t)T * F, NN = (size_t)d->B * nh * N * N;
  const float *p = d->p, scale = 1.0f / sqrtf((float)(E / nh));
  float *g = d->g;
  CUDA_RET(cudaMemsetAsync(g, 0, sizeof(float) * (size_t)L->n_params, st));
  /* the heads, at the state tokens */
  for (int dd = 0, off = 0; dd < L->D; off += L->n[dd], dd++) {
    CUDA_RET(dt_gemm(L->n[dd], E, BK, d->dz + off, L->A, 1, d->xs, E, 0, g + L->head_w[dd], E, NULL, NULL, 0, 1, st));
    CUDA_RET(dt_colsum(d->dz + off, BK, L->n[dd], L->A, g + L->head_b[dd], 1, st));
    CUDA_RET(dt_gemm(BK, E, L->n[dd], d->dz + off, L->A, 0, p + L->head_w[dd], E, 0, d->dxs, E, NULL, NULL, 0, dd > 0,
                     st));
  }
  dt_scatter_state_kernel<<<(unsigned)T, 128, 0, st>>>(d->dxs, K, E, d->dxf);
  CUDA_RET(cudaGetLastError());
  CUDA_RET(cudaMemsetAsync(d->dX, 0, sizeof(float) * NE, st));
  CUDA_RET(dt_ln_bwd(d->dxf, d->xhf, d->rf, p + L->lnf_w, T, E, d->dX, g + L->lnf_w, g + L->lnf_b, d->tmp, st));
  for (int l = L->L - 1; l >= 0; l--) {
    const dt_block_off_t *o = &L->blk[l];
    const float *h1 = d->h1 + l * NE, *q = d->q + l * NE, *k = d->k + l * NE, *v = d->v + l * NE;
    const float *att = d->att + l * NE, *h2 = d->h2 + l * NE, *u = d->u + l * NF, *gl = d->gl + l * NF;
    const float *P = d->P + l * NN;
    /* X_{l+1} = xm + W_2 gelu(W_1 LN2(xm) + b_1) + b_2 */
    CUDA_RET(lin_bwd(g, p, o->m2_w, o->m2_b, gl, d->dX, T, F, E, d->dgl, 0, st));
    dt_gelu_bwd_kernel<<<(unsigned)((NF + 255) / 256 < 4096 ? (NF + 255) / 256 : 4096), 256, 0, st>>>(u, d->dgl, d->du,
                                                                                                    NF);
    CUDA_RET(cudaGetLastError());
    CUDA_RET(lin_bwd(g, p, o->m1_w, o->m1_b, h2, d->du, T, E, F, d->dh, 0, st));
    CUDA_RET(cudaMemcpyAsync(d->dxm, d->dX, sizeof(float) * NE, cudaMemcpyDeviceToDevice, st));
    CUDA_RET(dt_ln_bwd(d->dh, d->xh2 + l * NE, d->r2 + (size_t)l * T, p + o->ln2_w, T, E, d->dxm, g + o->ln2_w,
                       g + o->ln2_b, d->tmp, st));
    /* xm = X_l + W_o att + b_o */
    CUDA_RET(lin_bwd(g, p, o->o_w, o->o_b, att, d->dxm, T, E, E, d->datt, 0, st));
    dt_attn_bwd_q_kernel<<<dim3((unsigned)N, (unsigned)nh, (unsigned)d->B), 128, sizeof(float) * (N + 32), st>>>(
        P, d->datt, k, v, K, E, nh, scale, d->dS, d->dq);
    dt_attn_bwd_kv_kernel<<<dim3((unsigned)N, (unsigned)nh, (unsigned)d->B), 128, 0, st>>>(P, d->dS, q, d->datt, K, E,
                                                                                          nh, scale, d->dk, d->dv);
    CUDA_RET(cudaGetLastError());
    CUDA_RET(lin_bwd(g, p, o->q_w, o->q_b, h1, d->dq, T, E, E, d->dh, 0, st));
    CUDA_RET(lin_bwd(g, p, o->k_w, o->k_b, h1, d->dk, T, E, E, d->dh, 1, st));
    CUDA_RET(lin_bwd(g, p, o->v_w, o->v_b, h1, d->dv, T, E, E, d->dh, 1, st));
    CUDA_RET(cudaMemcpyAsync(d->dX, d->dxm, sizeof(float) * NE, cudaMemcpyDeviceToDevice, st));
    CUDA_RET(dt_ln_bwd(d->dh, d->xh1 + l * NE, d->r1 + (size_t)l * T, p + o->ln1_w, T, E, d->dX, g + o->ln1_w,
                       g + o->ln1_b, d->tmp, st));
  }
  /* LN_embed, then the embeddings (dx0 in dxf) */
  CUDA_RET(cudaMemsetAsync(d->dxf, 0, sizeof(float) * NE, st));
  CUDA_RET(dt_ln_bwd(d->dX, d->xh0, d->r0, p + L->lne_w, T, E, d->dxf, g + L->lne_w, g + L->lne_b, d->tmp, st));
  dt_state_rows_kernel<<<(unsigned)BK, 128, 0, st>>>(d->dxf, d->states, d->mask, K, E, L->S, d->dxs, d->st_real);
  CUDA_RET(cudaGetLastError());
  CUDA_RET(dt_gemm(E, L->S, BK, d->dxs, E, 1, d->st_real, L->S, 0, g + L->st_w, L->S, NULL, NULL, 0, 1, st));
  CUDA_RET(dt_colsum(d->dxs, BK, E, E, g + L->st_b, 1, st));
  const int64_t n = ((int64_t)L->T + L->A + 1) * E;
  dt_embed_bwd_kernel<<<(unsigned)((n + 127) / 128), 128, 0, st>>>(*L, d->dxf, d->rtg, d->mask, d->actions,
                                                                   d->timesteps, BK, g);
  return (int)cudaGetLastError();
}
