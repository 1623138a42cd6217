/*
 * dt_attn.cu — the Decision Transformer's causal attention and its exact
 * backward on the GPU (the CPU spec's attention in kernels/cpu/dt_impl.h,
 * docs/learner.md §16). Query i of window b, head h, attends to the real keys
 * j <= i; a padded query's probabilities and output are zeros.
 *
 * Two ways, chosen by the shapes alone (dt_attn_init): blocks per (head,
 * window) with the window's rows in shared memory, a warp a query (or key),
 * when they fit the device's shared memory; else a block per query reading
 * them from global memory. Both sum in a fixed order, so reruns are
 * bit-identical (the dot products in four interleaved partial sums, each
 * weighted sum over rows in row order).
 */
#include <math.h>

#include "cuda_check.h"
#include "dt_cuda.cuh"

#define DT_ATTN_WARPS 8

// kernels: blocks per (head, window)

/* the floats of shared memory the window kernels take: the forward's and
 * dt_attn_bwd_q_win_kernel's (two [N, dh + 1] arrays, a warp's query row and
 * scores), dt_attn_bwd_kv_win_kernel's (two [N, dh + 1], two [N, N + 1]) */
static size_t win_floats(int N, int dh, int kv) {
  return 2 * (size_t)N * (dh + 1) + (kv ? 2 * (size_t)N * (N + 1) : (size_t)DT_ATTN_WARPS * (dh + N));
}

/* rows [N, dh] of head h of window b of X ([T, E], token-major) into S (row
 * stride dh + 1: lanes reading a column of different rows hit different banks) */
static __device__ void stage(const float *X, size_t base, int N, int dh, int E, float *S) {
  const int n = N * dh, step = blockDim.x;
  for (int x0 = threadIdx.x; x0 < n; x0 += 8 * step) {
    float r[8]; /* eight loads in flight a thread */
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int x = x0 + u * step;
      r[u] = x < n ? X[base + (size_t)(x / dh) * E + x % dh] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int x = x0 + u * step;
      if (x < n) S[(x / dh) * (dh + 1) + x % dh] = r[u];
    }
  }
}

/* a . b over n (shared memory), in four interleaved partial sums */
static __device__ __forceinline__ float dot4(const float *a, const float *b, int n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int c = 0;
  for (; c + 4 <= n; c += 4) {
    s0 = fmaf(a[c], b[c], s0), s1 = fmaf(a[c + 1], b[c + 1], s1);
    s2 = fmaf(a[c + 2], b[c + 2], s2), s3 = fmaf(a[c + 3], b[c + 3], s3);
  }
  for (; c < n; c++) s0 = fmaf(a[c], b[c], s0);
  return (s0 + s1) + (s2 + s3);
}

/* out[c] = scale sum_{j < n, w[j] != 0} w[j] S[j, c] for the lane's columns c
 * (lane + 32 m), each in j order, four columns at a time */
static __device__ __forceinline__ void wsum_rows(const float *w, const float *S, int ld, int n, int dh, float scale,
                                                 float *out, int lane) {
  for (int c0 = lane; c0 < dh; c0 += 128) {
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int j = 0; j < n; j++) {
      const float wj = w[j];
      if (wj == 0) continue;
      const float *r = S + j * ld + c0;
      a0 += wj * r[0];
      if (c0 + 32 < dh) a1 += wj * r[32];
      if (c0 + 64 < dh) a2 += wj * r[64];
      if (c0 + 96 < dh) a3 += wj * r[96];
    }
    out[c0] = a0 * scale;
    if (c0 + 32 < dh) out[c0 + 32] = a1 * scale;
    if (c0 + 64 < dh) out[c0 + 64] = a2 * scale;
    if (c0 + 96 < dh) out[c0 + 96] = a3 * scale;
  }
}

/* grid (nh, B, splits): block z's warps take queries i = 8 z + w + 8 splits
 * m. P [B, nh, N, N], att [T, E] */
__global__ void __launch_bounds__(32 * DT_ATTN_WARPS) dt_attn_win_kernel(const float *q, const float *k, const float *v,
                                                                         const float *mask, int K, int E, int nh,
                                                                         float scale, float *P, float *att) {
  extern __shared__ float sm[];
  const int N = 3 * K, h = blockIdx.x, b = blockIdx.y, dh = E / nh, ld = dh + 1;
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  float *Ks = sm, *Vs = Ks + N * ld, *qs = Vs + N * ld + w * dh, *ps = Vs + N * ld + DT_ATTN_WARPS * dh + w * N;
  const size_t base = (size_t)b * N * E + (size_t)h * dh;
  const float *mb = mask + (size_t)b * K;
  stage(k, base, N, dh, E, Ks);
  stage(v, base, N, dh, E, Vs);
  __syncthreads();
  for (int i = DT_ATTN_WARPS * blockIdx.z + w; i < N; i += DT_ATTN_WARPS * gridDim.z) {
    float *Pi = P + (((size_t)b * nh + h) * N + i) * N, *ai = att + base + (size_t)i * E;
    if (mb[i / 3] == 0) { /* a padded query */
      for (int j = lane; j < N; j += 32) Pi[j] = 0;
      for (int c = lane; c < dh; c += 32) ai[c] = 0;
      continue;
    }
    for (int c = lane; c < dh; c += 32) qs[c] = q[base + (size_t)i * E + c];
    __syncwarp();
    float mx = -INFINITY;
    for (int j = lane; j < N; j += 32) {
      const float s = j <= i && mb[j / 3] != 0 ? dot4(qs, Ks + j * ld, dh) * scale : -INFINITY;
      ps[j] = s;
      mx = fmaxf(mx, s);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0;
    for (int j = lane; j < N; j += 32) {
      const float e = ps[j] == -INFINITY ? 0.0f : expf(ps[j] - mx);
      ps[j] = e;
      sum += e;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int j = lane; j < N; j += 32) {
      const float pj = ps[j] / sum;
      ps[j] = pj;
      Pi[j] = pj;
    }
    __syncwarp();
    wsum_rows(ps, Vs, ld, i + 1, dh, 1.0f, ai, lane);
    __syncwarp(); /* qs and ps are the next query's */
  }
}

/* grid (nh, B, splits), queries as the forward's. Query i: dP_ij = datt_i .
 * v_j, dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij) into dS, dq_i = scale sum_j
 * dS_ij k_j */
__global__ void __launch_bounds__(32 * DT_ATTN_WARPS) dt_attn_bwd_q_win_kernel(const float *P, const float *datt,
                                                                               const float *k, const float *v, int K,
                                                                               int E, int nh, float scale, float *dS,
                                                                               float *dq) {
  extern __shared__ float sm[];
  const int N = 3 * K, h = blockIdx.x, b = blockIdx.y, dh = E / nh, ld = dh + 1;
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  float *Ks = sm, *Vs = Ks + N * ld, *ds = Vs + N * ld + w * dh, *ps = Vs + N * ld + DT_ATTN_WARPS * dh + w * N;
  const size_t base = (size_t)b * N * E + (size_t)h * dh, pb = ((size_t)b * nh + h) * N * N;
  stage(k, base, N, dh, E, Ks);
  stage(v, base, N, dh, E, Vs);
  __syncthreads();
  for (int i = DT_ATTN_WARPS * blockIdx.z + w; i < N; i += DT_ATTN_WARPS * gridDim.z) {
    const float *Pi = P + pb + (size_t)i * N;
    for (int c = lane; c < dh; c += 32) ds[c] = datt[base + (size_t)i * E + c];
    __syncwarp();
    float dot = 0;
    for (int j = lane; j < N; j += 32) {
      const float pij = Pi[j], dp = pij != 0 ? dot4(ds, Vs + j * ld, dh) : 0.0f;
      ps[j] = dp;
      dot += pij * dp;
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    for (int j = lane; j < N; j += 32) {
      const float s = Pi[j] * (ps[j] - dot);
      ps[j] = s;
      dS[pb + (size_t)i * N + j] = s;
    }
    __syncwarp();
    wsum_rows(ps, Ks, ld, i + 1, dh, scale, dq + base + (size_t)i * E, lane);
    __syncwarp();
  }
}

/* grid (nh, B, splits): block z's warps take keys j = 8 z + w + 8 splits m.
 * dk_j = scale sum_{i >= j} dS_ij q_i, dv_j = sum_{i >= j} P_ij datt_i (i in
 * order) */
__global__ void __launch_bounds__(32 * DT_ATTN_WARPS) dt_attn_bwd_kv_win_kernel(const float *P, const float *dS,
                                                                                const float *q, const float *datt,
                                                                                int K, int E, int nh, float scale,
                                                                                float *dk, float *dv) {
  extern __shared__ float sm[];
  const int N = 3 * K, h = blockIdx.x, b = blockIdx.y, dh = E / nh, ld = dh + 1;
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  float *Qs = sm, *Ds = Qs + N * ld, *Ps = Ds + N * ld, *Ss = Ps + N * (N + 1);
  const size_t base = (size_t)b * N * E + (size_t)h * dh, pb = ((size_t)b * nh + h) * N * N;
  stage(q, base, N, dh, E, Qs);
  stage(datt, base, N, dh, E, Ds);
  for (int x0 = threadIdx.x; x0 < N * N; x0 += 4 * blockDim.x) {
    float rp[4], rs[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int x = x0 + u * blockDim.x;
      rp[u] = x < N * N ? P[pb + x] : 0.0f, rs[u] = x < N * N ? dS[pb + x] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int x = x0 + u * blockDim.x;
      if (x < N * N) Ps[(x / N) * (N + 1) + x % N] = rp[u], Ss[(x / N) * (N + 1) + x % N] = rs[u];
    }
  }
  __syncthreads();
  for (int j = DT_ATTN_WARPS * blockIdx.z + w; j < N; j += DT_ATTN_WARPS * gridDim.z) {
    for (int c0 = lane; c0 < dh; c0 += 64) {
      const int c1 = c0 + 32 < dh ? c0 + 32 : c0;
      float sk0 = 0, sv0 = 0, sk1 = 0, sv1 = 0;
      for (int i = j; i < N; i++) {
        const float s = Ss[i * (N + 1) + j], p = Ps[i * (N + 1) + j];
        if (p == 0 && s == 0) continue;
        sk0 += s * Qs[i * ld + c0], sv0 += p * Ds[i * ld + c0];
        sk1 += s * Qs[i * ld + c1], sv1 += p * Ds[i * ld + c1];
      }
      dk[base + (size_t)j * E + c0] = sk0 * scale, dv[base + (size_t)j * E + c0] = sv0;
      if (c1 != c0) dk[base + (size_t)j * E + c1] = sk1 * scale, dv[base + (size_t)j * E + c1] = sv1;
    }
  }
}

// kernels: a block per query (shapes too large for shared memory)

/* grid (N, nh, B) */
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

/* grid (N, nh, B): query i's dS row and dq */
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

/* grid (N, nh, B): key j's dk and dv (queries i >= j, in order) */
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

// launchers

/* the query (or key) splits of a window: about two blocks an SM over the
 * windows and heads (132 SMs on an H200), at most one a warp's worth of
 * queries. The outputs do not depend on it. */
static unsigned win_splits(const cuda_dt_t *d) {
  const int N = 3 * d->L.K, most = (N + DT_ATTN_WARPS - 1) / DT_ATTN_WARPS, units = d->L.nh * d->B;
  const int s = (264 + units - 1) / units;
  return (unsigned)(s < most ? s : most);
}

int dt_attn_init(const dt_layout_t *L, int *win) {
  int dev, optin = 0;
  CUDA_RET(cudaGetDevice(&dev));
  CUDA_RET(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int N = 3 * L->K, dh = L->E / L->nh;
  const size_t fq = sizeof(float) * win_floats(N, dh, 0), kv = sizeof(float) * win_floats(N, dh, 1);
  *win = fq <= (size_t)optin && kv <= (size_t)optin;
  if (!*win) return 0;
  /* the device's whole opt-in, whatever these shapes need: the limit is the
   * kernel's, shared by every trainer in the process, so one with smaller
   * windows must not lower it under another's (setting the same value again
   * from another thread is harmless) */
  CUDA_RET(cudaFuncSetAttribute(dt_attn_win_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  CUDA_RET(cudaFuncSetAttribute(dt_attn_bwd_q_win_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  CUDA_RET(cudaFuncSetAttribute(dt_attn_bwd_kv_win_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  return 0;
}

int dt_attn(const cuda_dt_t *d, const float *q, const float *k, const float *v, float *P, float *att, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, N = 3 * K, E = L->E, nh = L->nh;
  const float scale = 1.0f / sqrtf((float)(E / nh));
  if (d->attn_win)
    dt_attn_win_kernel<<<dim3((unsigned)nh, (unsigned)d->B, win_splits(d)), 32 * DT_ATTN_WARPS,
                         sizeof(float) * win_floats(N, E / nh, 0), st>>>(q, k, v, d->mask, K, E, nh, scale, P, att);
  else
    dt_attn_kernel<<<dim3((unsigned)N, (unsigned)nh, (unsigned)d->B), 128, sizeof(float) * (N + 32), st>>>(
        q, k, v, d->mask, K, E, nh, scale, P, att);
  return (int)cudaGetLastError();
}

int dt_attn_bwd(const cuda_dt_t *d, const float *P, const float *datt, const float *q, const float *k, const float *v,
                float *dS, float *dq, float *dk, float *dv, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, N = 3 * K, E = L->E, nh = L->nh;
  const float scale = 1.0f / sqrtf((float)(E / nh));
  if (d->attn_win) {
    const dim3 grid((unsigned)nh, (unsigned)d->B, win_splits(d));
    dt_attn_bwd_q_win_kernel<<<grid, 32 * DT_ATTN_WARPS, sizeof(float) * win_floats(N, E / nh, 0), st>>>(
        P, datt, k, v, K, E, nh, scale, dS, dq);
    CUDA_RET(cudaGetLastError());
    dt_attn_bwd_kv_win_kernel<<<grid, 32 * DT_ATTN_WARPS, sizeof(float) * win_floats(N, E / nh, 1), st>>>(
        P, dS, q, datt, K, E, nh, scale, dk, dv);
    return (int)cudaGetLastError();
  }
  const dim3 grid((unsigned)N, (unsigned)nh, (unsigned)d->B);
  dt_attn_bwd_q_kernel<<<grid, 128, sizeof(float) * (N + 32), st>>>(P, datt, k, v, K, E, nh, scale, dS, dq);
  dt_attn_bwd_kv_kernel<<<grid, 128, 0, st>>>(P, dS, q, datt, K, E, nh, scale, dk, dv);
  return (int)cudaGetLastError();
}
