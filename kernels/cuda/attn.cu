/*
 * attn.cu — the attention block of DESIGN.md §6.1 on the GPU: the twin of
 * kernels/cpu/attn_impl.h (same names, same order of operations per token),
 * between the trunk (F2) and the heads (F3) of the step (step.cuh), and in
 * Act's forward (net_forward.cu). Per row, T tokens of width d = H2 / T,
 * n_h heads of width d_h = d / n_h, post-LN:
 *   x_t = h_t + pos_t;  q, k, v = W x + b;  alpha = softmax_s(q_t . k_s / sqrt(d_h))
 *   o_t = sum_s alpha_ts v_s;  u = W_o o + b_o;  y = LN(x + u)  ->  h'
 * The four projections are nn.Linear GEMMs over all tokens (net_forward.cu's
 * deterministic cuda_gemm); the scores, softmax and mixing a thread per
 * (row, head, query token), serial over keys and channels like the CPU; the
 * LayerNorm a thread per token. The backward mirrors attn_backward: the
 * LayerNorm's, W_o's, the attention's (a thread per (row, head) looping over
 * query tokens in order, so dk and dv accumulate without atomics), then the
 * projections' into dx, and dpos summed over rows in order. Every parameter
 * gradient is overwritten once.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_check.h"
#include "net_forward.cuh"
#include "step.cuh"

// kernels

__global__ void attn_add_pos_kernel(const float *__restrict__ h, const float *__restrict__ pos, float *__restrict__ tx,
                                    long long n, int H2) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tx[i] = h[i] + pos[i % H2];
}

/* stage one (row, head)'s [T, dh] slice of a [rows T, d] buffer into shared memory */
__device__ __forceinline__ void attn_stage(float *dst, const float *src, int r, int j, int T, int d, int dh) {
  for (int e = threadIdx.x; e < T * dh; e += blockDim.x)
    dst[e] = src[((size_t)r * T + e / dh) * d + (size_t)j * dh + e % dh];
}

/* a block per (row, head j), q, k, v staged in shared memory; a thread per
 * query t: scores, softmax, o_t (attn_forward's loops, its order) */
__global__ void attn_mix_kernel(const float *__restrict__ tq, const float *__restrict__ tk,
                                const float *__restrict__ tv, float *__restrict__ alpha, float *__restrict__ to,
                                int rows, int T, int nh, int d) {
  extern __shared__ float ams[];
  const int r = blockIdx.x / nh, j = blockIdx.x % nh, dh = d / nh;
  float *sq = ams, *sk = sq + T * dh, *sv = sk + T * dh;
  attn_stage(sq, tq, r, j, T, d, dh);
  attn_stage(sk, tk, r, j, T, d, dh);
  attn_stage(sv, tv, r, j, T, d, dh);
  __syncthreads();
  const int t = threadIdx.x;
  if (t >= T) return;
  const float scale = 1.0f / sqrtf((float)dh);
  float *al = alpha + (((size_t)r * nh + j) * T + t) * T;
  const float *qt = sq + (size_t)t * dh;
  float mx = -INFINITY;
  for (int s = 0; s < T; s++) {
    const float *ks = sk + (size_t)s * dh;
    float dot = 0.0f;
    for (int c = 0; c < dh; c++) dot += qt[c] * ks[c];
    al[s] = dot * scale;
    mx = al[s] > mx ? al[s] : mx;
  }
  float sum = 0.0f;
  for (int s = 0; s < T; s++) al[s] = expf(al[s] - mx);
  for (int s = 0; s < T; s++) sum += al[s];
  for (int s = 0; s < T; s++) al[s] /= sum;
  float *ot = to + ((size_t)r * T + t) * d + j * dh;
  for (int c = 0; c < dh; c++) {
    float o = 0.0f;
    for (int s = 0; s < T; s++) o += al[s] * sv[(size_t)s * dh + c];
    ot[c] = o;
  }
}

/* a thread per token: e = x + u (in tu), LayerNorm into xhat and y */
__global__ void attn_ln_kernel(const float *__restrict__ tx, float *__restrict__ tu, float *__restrict__ xhat,
                               float *__restrict__ y, float *__restrict__ rstd, const float *__restrict__ gam,
                               const float *__restrict__ bet, int n, int d) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float *e = tu + (size_t)i * d, *xh = xhat + (size_t)i * d, *yy = y + (size_t)i * d;
  const float *x = tx + (size_t)i * d;
  float mean = 0.0f, var = 0.0f;
  for (int c = 0; c < d; c++) {
    e[c] += x[c];
    mean += e[c];
  }
  mean /= (float)d;
  for (int c = 0; c < d; c++) var += (e[c] - mean) * (e[c] - mean);
  var /= (float)d;
  const float rs = 1.0f / sqrtf(var + 1e-5f);
  rstd[i] = rs;
  for (int c = 0; c < d; c++) {
    xh[c] = (e[c] - mean) * rs;
    yy[c] = gam[c] * xh[c] + bet[c];
  }
}

/* LayerNorm backward, a thread per token: de = rstd (g gamma - mean(g gamma) - xhat mean(g gamma xhat)) */
__global__ void attn_ln_back_kernel(const float *__restrict__ dy, const float *__restrict__ xhat,
                                    const float *__restrict__ rstd, const float *__restrict__ gam,
                                    float *__restrict__ de, float *__restrict__ dx, int n, int d) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float *g = dy + (size_t)i * d, *xh = xhat + (size_t)i * d;
  float *o = de + (size_t)i * d;
  float m1 = 0.0f, m2 = 0.0f;
  for (int c = 0; c < d; c++) {
    const float gx = g[c] * gam[c];
    o[c] = gx;
    m1 += gx;
    m2 += gx * xh[c];
  }
  m1 /= (float)d;
  m2 /= (float)d;
  const float rs = rstd[i];
  for (int c = 0; c < d; c++) {
    o[c] = rs * (o[c] - m1 - xh[c] * m2);
    dx[(size_t)i * d + c] = o[c]; /* the residual: x gets de */
  }
}

/* column sums over n rows of [n, w] (bias gradients, dgamma = sum of a b,
 * dbeta, dpos): a block of 256 per column, each thread a strided run of rows
 * in order, then a fixed tree: deterministic */
__global__ void attn_colsum_kernel(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out,
                                   int n, int w) {
  __shared__ float red[256];
  const int c = blockIdx.x;
  float s = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += b ? a[(size_t)i * w + c] * b[(size_t)i * w + c] : a[(size_t)i * w + c];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[c] = red[0];
}

/* the attention's backward: a warp per (row, head), its q, k, v, do and
 * alpha staged in shared memory, a lane per channel; query tokens in order,
 * so dk and dv accumulate (in shared memory) without atomics; the dot
 * products over channels are fixed-order warp sums */
__global__ void attn_mix_back_kernel(const float *__restrict__ alpha, const float *__restrict__ tq,
                                     const float *__restrict__ tk, const float *__restrict__ tv,
                                     const float *__restrict__ dto, float *__restrict__ dtq, float *__restrict__ dtk,
                                     float *__restrict__ dtv, int rows, int T, int nh, int d) {
  extern __shared__ float bms[];
  const int r = blockIdx.x / nh, j = blockIdx.x % nh, dh = d / nh, lane = threadIdx.x;
  const int td = T * dh;
  float *sq = bms, *sk = sq + td, *sv = sk + td, *so = sv + td, *sdk = so + td, *sdv = sdk + td, *da = sdv + td;
  attn_stage(sq, tq, r, j, T, d, dh);
  attn_stage(sk, tk, r, j, T, d, dh);
  attn_stage(sv, tv, r, j, T, d, dh);
  attn_stage(so, dto, r, j, T, d, dh);
  for (int e = lane; e < td; e += 32) sdk[e] = 0.0f, sdv[e] = 0.0f;
  __syncwarp();
  const float scale = 1.0f / sqrtf((float)dh);
  for (int t = 0; t < T; t++) {
    const float *al = alpha + (((size_t)r * nh + j) * T + t) * T;
    const float *dot = so + (size_t)t * dh, *qt = sq + (size_t)t * dh;
    float sum = 0.0f;
    for (int s = 0; s < T; s++) {
      float g = 0.0f;
      for (int c = lane; c < dh; c += 32) {
        g += dot[c] * sv[s * dh + c];
        sdv[s * dh + c] += al[s] * dot[c];
      }
      for (int off = 16; off; off >>= 1) g += __shfl_xor_sync(0xffffffffu, g, off);
      if (lane == 0) da[s] = g;
      sum += al[s] * g;
    }
    __syncwarp();
    for (int c = lane; c < dh; c += 32) {
      float dq = 0.0f;
      for (int s = 0; s < T; s++) {
        const float gs = al[s] * (da[s] - sum) * scale;
        dq += gs * sk[s * dh + c];
        sdk[s * dh + c] += gs * qt[c];
      }
      dtq[((size_t)r * T + t) * d + (size_t)j * dh + c] = dq;
    }
    __syncwarp();
  }
  for (int e = lane; e < td; e += 32) {
    const size_t g = ((size_t)r * T + e / dh) * d + (size_t)j * dh + e % dh;
    dtk[g] = sdk[e], dtv[g] = sdv[e];
  }
}

/* gh = dx * lrelu'(h): the trunk-2 pre-activation gradient (h > 0 exactly where its pre-activation is) */
__global__ void attn_mask_kernel(const float *__restrict__ dx, const float *__restrict__ h, float *__restrict__ gh,
                                 long long n, float slope) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) gh[i] = dx[i] * (h[i] > 0.0f ? 1.0f : slope);
}

// launchers

#define TRY(x)                                                                                                      \
  do {                                                                                                              \
    cudaError_t e_ = (cudaError_t)(x);                                                                              \
    if (e_ != cudaSuccess) return (int)e_;                                                                          \
  } while (0)
#define BLOCKS(n, t) (unsigned)(((n) + (t)-1) / (t)), (t)

/* y = x W^T + b over n tokens of width d (nn.Linear) */
static int attn_linear(const float *x, const float *W, const float *b, float *y, int n, int d, cudaStream_t st) {
  return cuda_gemm(n, d, d, x, d, 1, W, 1, d, y, 0, b, NULL, 0.0f, st);
}

extern "C" int cuda_attn_forward(const net_layout_t *L, const float *P, const float *h, int rows, cuda_attn_acts_t *A,
                                 cudaStream_t st) {
  const net_attn_t *at = &L->attn;
  const int T = at->T, nh = at->nh, d = at->d, n = rows * T;
  const long long w = (long long)rows * L->H2;
  attn_add_pos_kernel<<<BLOCKS(w, 256), 0, st>>>(h, P + at->off_pos, A->tx, w, L->H2);
  TRY(cudaGetLastError());
  float *proj[3] = {A->tq, A->tk, A->tv};
  for (int m = 0; m < 3; m++) TRY(attn_linear(A->tx, P + at->off_w[m], P + at->off_b[m], proj[m], n, d, st));
  const int tpb = T < 32 ? 32 : (T + 31) / 32 * 32;
  attn_mix_kernel<<<(unsigned)(rows * nh), tpb, sizeof(float) * 3 * (size_t)T * (d / nh), st>>>(
      A->tq, A->tk, A->tv, A->alpha, A->to, rows, T, nh, d);
  TRY(cudaGetLastError());
  TRY(attn_linear(A->to, P + at->off_w[NET_ATTN_O], P + at->off_b[NET_ATTN_O], A->tu, n, d, st));
  attn_ln_kernel<<<BLOCKS(n, 128), 0, st>>>(A->tx, A->tu, A->xhat, A->hatt, A->rstd, P + at->off_ln_w,
                                            P + at->off_ln_b, n, d);
  TRY(cudaGetLastError());
  return 0;
}

/* dy [B, H2] = dL/dh' of the first B rows of A -> gh [B, H2] = dL/d(trunk-2
 * pre-activation); the attention parameters' gradients into grad */
extern "C" int cuda_attn_backward(const net_layout_t *L, const float *P, const cuda_attn_acts_t *A,
                                  const cuda_attn_grads_t *G, int B, const float *dy, const float *h, float slope,
                                  float *gh, float *grad, cudaStream_t st) {
  const net_attn_t *at = &L->attn;
  const int T = at->T, nh = at->nh, d = at->d, n = B * T, H2 = L->H2;
  /* LayerNorm: dgamma = sum g xhat, dbeta = sum g (over tokens, in order) */
  attn_colsum_kernel<<<(unsigned)d, 256, 0, st>>>(dy, A->xhat, grad + at->off_ln_w, n, d);
  attn_colsum_kernel<<<(unsigned)d, 256, 0, st>>>(dy, NULL, grad + at->off_ln_b, n, d);
  attn_ln_back_kernel<<<BLOCKS(n, 128), 0, st>>>(dy, A->xhat, A->rstd, P + at->off_ln_w, G->dte, G->dtx, n, d);
  TRY(cudaGetLastError());
  /* u = W_o o + b_o: dW_o = de^T o, db_o = sum de, do = de W_o */
  TRY(cuda_gemm(d, d, n, G->dte, 1, d, A->to, d, 1, grad + at->off_w[NET_ATTN_O], 0, NULL, NULL, 0.0f, st));
  attn_colsum_kernel<<<(unsigned)d, 256, 0, st>>>(G->dte, NULL, grad + at->off_b[NET_ATTN_O], n, d);
  TRY(cuda_gemm(n, d, d, G->dte, d, 1, P + at->off_w[NET_ATTN_O], d, 1, G->dto, 0, NULL, NULL, 0.0f, st));
  attn_mix_back_kernel<<<(unsigned)(B * nh), 32, sizeof(float) * (6 * (size_t)T * (d / nh) + T), st>>>(
      A->alpha, A->tq, A->tk, A->tv, G->dto, G->dtq, G->dtk, G->dtv, B, T, nh, d);
  TRY(cudaGetLastError());
  /* q, k, v = W x + b: weights and biases, and dx += dproj W */
  const float *dproj[3] = {G->dtq, G->dtk, G->dtv};
  for (int m = 0; m < 3; m++) {
    TRY(cuda_gemm(d, d, n, dproj[m], 1, d, A->tx, d, 1, grad + at->off_w[m], 0, NULL, NULL, 0.0f, st));
    attn_colsum_kernel<<<(unsigned)d, 256, 0, st>>>(dproj[m], NULL, grad + at->off_b[m], n, d);
    TRY(cuda_gemm(n, d, d, dproj[m], d, 1, P + at->off_w[m], d, 1, G->dtx, 1, NULL, NULL, 0.0f, st));
  }
  /* x = h + pos: dpos = sum over rows of dx; the trunk's gradient through lrelu' */
  attn_colsum_kernel<<<(unsigned)H2, 256, 0, st>>>(G->dtx, NULL, grad + at->off_pos, B, H2);
  attn_mask_kernel<<<BLOCKS((long long)B * H2, 256), 0, st>>>(G->dtx, h, gh, (long long)B * H2, slope);
  TRY(cudaGetLastError());
  return 0;
}
