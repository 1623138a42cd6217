/*
 * dt_attn.cu — the Decision Transformer's causal attention and its exact
 * backward on the GPU (the CPU spec's attention in kernels/cpu/dt_impl.h,
 * docs/learner.md §16). Query i of window b, head h, attends to the real keys
 * j <= i; a padded query's probabilities and output are zeros.
 *
 * Two ways, chosen by the shapes alone (dt_attn_init): blocks per (head,
 * window) with the window's rows in shared memory (staged as float4s), a
 * warp two or four queries (or keys) at once, when they fit the device's
 * shared memory and the head width is a multiple of 4; else a block per
 * query reading them from global memory. Both sum in a fixed order, so
 * reruns are bit-identical (the dot products in four interleaved partial
 * sums, each weighted sum over rows in row order), and a query's sums do
 * not depend on how many a warp takes. With tensor_cores, dt_attn_tc.cu's
 * TF32 kernels take the shapes they fit instead (dt_attn_uses_tc).
 */
#include <math.h>
#include <stdint.h>

#include "smem_optin.cuh"
#include "cuda_check.h"
#include "dt_cuda.cuh"

#define DT_ATTN_WARPS 8
/* Queries (keys in dk, dv) a warp takes at once, QW: 4 where that still
 * leaves some 16 warps an SM of an H200 (132 SMs) busy, else 2 (batch 64:
 * 4 left 8 warps an SM and the kernels latency-bound; DEVICE_NOTES.md 97) */
#define DT_ATTN_QW_WARPS (16 * 132)

// kernels: blocks per (head, window)

/* Rows in shared memory have stride dh + 4: 16-byte aligned for float4 reads
 * (the window way needs dh % 4 == 0), and eight lanes reading the same
 * columns of eight rows hit 32 different banks. */

/* the row stride of dt_attn_bwd_kv_win_kernel's P and dS blocks in shared
 * memory: N rounded up to a multiple of 4, so a warp's QW keys of row i
 * are one float2 or float4 (every lane reads the same address: no bank
 * conflicts to pad against); the columns past N are zeros */
static __host__ __device__ __forceinline__ int kv_ld(int N) { return (N + 3) / 4 * 4; }

/* the floats of shared memory the window kernels take: the forward's and
 * dt_attn_bwd_q_win_kernel's (two [N, dh + 4] arrays, each warp's QW query
 * rows and QW score rows), dt_attn_bwd_kv_win_kernel's (two [N, dh + 4], two
 * [N, kv_ld(N)]) */
static size_t win_floats(int N, int dh, int kv, int qw) {
  return 2 * (size_t)N * (dh + 4) + (kv ? 2 * (size_t)N * kv_ld(N) : (size_t)DT_ATTN_WARPS * qw * (dh + N));
}

/* rows [N, dh] of head h of window b of X ([T, E], token-major) into S (row
 * stride ld), as float4s (dh and E multiples of 4: 16-byte aligned rows),
 * eight in flight a thread: at the reference sizes one round trip to L2 for
 * the whole window, where 4-byte loads took eight */
static __device__ void stage(const float *X, size_t base, int N, int dh, int E, float *S, int ld) {
  const int d4 = dh / 4, n = N * d4, step = blockDim.x;
  for (int x0 = threadIdx.x; x0 < n; x0 += 8 * step) {
    float4 r[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int x = x0 + u * step;
      r[u] = x < n ? *reinterpret_cast<const float4 *>(X + base + (size_t)(x / d4) * E + 4 * (x % d4))
                   : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int x = x0 + u * step;
      if (x < n) *reinterpret_cast<float4 *>(S + (x / d4) * ld + 4 * (x % d4)) = r[u];
    }
  }
}

/* a warp's rows i0 .. i0 + nm - 1 of X (as stage's) into S [qw][dh] as
 * float4s, zeros for rows m >= nm */
static __device__ __forceinline__ void rows4(const float *X, size_t base, int E, int i0, int nm, int dh, float *S,
                                             int lane, int qw) {
  const int d4 = dh / 4;
  for (int x = lane; x < qw * d4; x += 32) {
    const int m = x / d4, c = 4 * (x % d4);
    *reinterpret_cast<float4 *>(S + m * dh + c) =
        m < nm ? *reinterpret_cast<const float4 *>(X + base + (size_t)(i0 + m) * E + c) : make_float4(0, 0, 0, 0);
  }
}

/* s[m] = a_m . b over dh (shared memory; dh % 4 == 0) for the warp's QW rows
 * a_m (stride dh), each in four interleaved partial sums (column c % 4 in
 * sum c % 4, then (s0 + s1) + (s2 + s3)): one read of b for QW dot products */
template <int QW>
static __device__ __forceinline__ void dots(const float *a, const float *b, int dh, float (&s)[QW]) {
  float t[QW][4];
#pragma unroll
  for (int m = 0; m < QW; m++) t[m][0] = t[m][1] = t[m][2] = t[m][3] = 0.0f;
  for (int c = 0; c < dh; c += 4) {
    const float4 y = *reinterpret_cast<const float4 *>(b + c);
#pragma unroll
    for (int m = 0; m < QW; m++) {
      const float4 x = *reinterpret_cast<const float4 *>(a + m * dh + c);
      t[m][0] = fmaf(x.x, y.x, t[m][0]), t[m][1] = fmaf(x.y, y.y, t[m][1]);
      t[m][2] = fmaf(x.z, y.z, t[m][2]), t[m][3] = fmaf(x.w, y.w, t[m][3]);
    }
  }
#pragma unroll
  for (int m = 0; m < QW; m++) s[m] = (t[m][0] + t[m][1]) + (t[m][2] + t[m][3]);
}

/* out_m[c] = scale sum_{j < n} w_m[j] S[j, c] for the warp's QW weight rows
 * w_m (stride N; rows m >= nm not written out) and the lane's columns c
 * (lane + 32 u), each in j order: one read of S's row for QW sums. Every
 * weight of a key its query does not see (a later key, a padded one) is
 * an exact zero, and S is finite, so those terms add a zero, which leaves
 * a sum as it was (a sum that starts at +0 holds -0 only after a product
 * underflows to it, and then only the zero's sign can differ from skipping
 * them, as the block-a-query kernels do): no branch a query in the loop. */
template <int QW>
static __device__ __forceinline__ void wsums(const float *w, int N, int nm, const float *S, int ld, int n,
                                             int dh, float scale, float *out, size_t ostride, int lane) {
  for (int c0 = lane; c0 < dh; c0 += 128) {
    float a[QW][4];
#pragma unroll
    for (int m = 0; m < QW; m++) a[m][0] = a[m][1] = a[m][2] = a[m][3] = 0.0f;
    for (int j = 0; j < n; j++) {
      const float *r = S + j * ld + c0;
      const float r0 = r[0], r1 = c0 + 32 < dh ? r[32] : 0.0f, r2 = c0 + 64 < dh ? r[64] : 0.0f,
                  r3 = c0 + 96 < dh ? r[96] : 0.0f;
#pragma unroll
      for (int m = 0; m < QW; m++) {
        const float wj = w[m * N + j];
        a[m][0] = fmaf(wj, r0, a[m][0]), a[m][1] = fmaf(wj, r1, a[m][1]);
        a[m][2] = fmaf(wj, r2, a[m][2]), a[m][3] = fmaf(wj, r3, a[m][3]);
      }
    }
#pragma unroll
    for (int m = 0; m < QW; m++) {
      if (m >= nm) break;
      float *o = out + m * ostride;
      o[c0] = a[m][0] * scale;
      if (c0 + 32 < dh) o[c0 + 32] = a[m][1] * scale;
      if (c0 + 64 < dh) o[c0 + 64] = a[m][2] * scale;
      if (c0 + 96 < dh) o[c0 + 96] = a[m][3] * scale;
    }
  }
}

/* grid (nh, B, splits): block z's warps take queries i0 .. i0 + QW - 1 with
 * i0 = QW (8 z + w + 8 splits m). P [B, nh, N, N], att [T, E] */
template <int QW>
__global__ void __launch_bounds__(32 * DT_ATTN_WARPS) dt_attn_win_kernel(const float *q, const float *k, const float *v,
                                                                         const float *mask, int K, int E, int nh,
                                                                         float scale, float *P, float *att,
                                                                         cuda_pz_t pz) {
  PDL_ENTER();
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const int N = 3 * K, h = blockIdx.x, b = blockIdx.y, dh = E / nh, ld = dh + 4;
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  float *Ks = sm, *Vs = Ks + N * ld, *qs = Vs + N * ld + w * QW * dh;
  float *ps = Vs + N * ld + DT_ATTN_WARPS * QW * dh + w * QW * N;
  const size_t mf = dt_mf(pz), base = mf + (size_t)b * N * E + (size_t)h * dh; /* the member's rows */
  const float *mb = mask + mf + (size_t)b * K;
  stage(k, base, N, dh, E, Ks, ld);
  stage(v, base, N, dh, E, Vs, ld);
  __syncthreads();
  for (int i0 = QW * (DT_ATTN_WARPS * dt_z(pz) + w); i0 < N; i0 += QW * DT_ATTN_WARPS * dt_nz(pz)) {
    const int nm = min(QW, N - i0), last = i0 + nm - 1;
    rows4(q, base, E, i0, nm, dh, qs, lane, QW); /* the queries' rows (zeros past N) */
    __syncwarp();
    for (int j = lane; j < N; j += 32) { /* scores of key j: -inf where not seen */
      const int kj = j <= last && mb[j / 3] != 0;
      float s[QW];
      if (kj) dots<QW>(qs, Ks + j * ld, dh, s);
#pragma unroll
      for (int m = 0; m < QW; m++) ps[m * N + j] = kj && j <= i0 + m ? s[m] * scale : -INFINITY;
    }
    __syncwarp();
    for (int m = 0; m < nm; m++) { /* each query's softmax, as one query a warp did it */
      const int i = i0 + m;
      float *Pi = P + mf + (((size_t)b * nh + h) * N + i) * N, *pm = ps + m * N;
      if (mb[i / 3] == 0) { /* a padded query: zeros */
        for (int j = lane; j < N; j += 32) Pi[j] = 0, pm[j] = 0;
        continue;
      }
      float mx = -INFINITY;
      for (int j = lane; j < N; j += 32) mx = fmaxf(mx, pm[j]);
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      float sum = 0;
      for (int j = lane; j < N; j += 32) {
        const float e = pm[j] == -INFINITY ? 0.0f : expf(pm[j] - mx);
        pm[j] = e;
        sum += e;
      }
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      for (int j = lane; j < N; j += 32) {
        const float pj = pm[j] / sum;
        pm[j] = pj;
        Pi[j] = pj;
      }
    }
    __syncwarp();
    /* att rows (a padded query's weights are zeros, so its row is zeros) */
    wsums<QW>(ps, N, nm, Vs, ld, last + 1, dh, 1.0f, att + base + (size_t)i0 * E, (size_t)E, lane);
    __syncwarp(); /* qs and ps are the next queries' */
  }
}

/* grid (nh, B, splits), queries as the forward's. Query i: dP_ij = datt_i .
 * v_j, dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij) into dS, dq_i = scale sum_j
 * dS_ij k_j */
template <int QW>
__global__ void __launch_bounds__(32 * DT_ATTN_WARPS) dt_attn_bwd_q_win_kernel(const float *P, const float *datt,
                                                                               const float *k, const float *v, int K,
                                                                               int E, int nh, float scale, float *dS,
                                                                               float *dq, cuda_pz_t pz) {
  PDL_ENTER();
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const int N = 3 * K, h = blockIdx.x, b = blockIdx.y, dh = E / nh, ld = dh + 4;
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  float *Ks = sm, *Vs = Ks + N * ld, *ds = Vs + N * ld + w * QW * dh;
  float *ps = Vs + N * ld + DT_ATTN_WARPS * QW * dh + w * QW * N;
  const size_t mf = dt_mf(pz); /* the member's rows */
  const size_t base = mf + (size_t)b * N * E + (size_t)h * dh, pb = mf + ((size_t)b * nh + h) * N * N;
  stage(k, base, N, dh, E, Ks, ld);
  stage(v, base, N, dh, E, Vs, ld);
  __syncthreads();
  for (int i0 = QW * (DT_ATTN_WARPS * dt_z(pz) + w); i0 < N; i0 += QW * DT_ATTN_WARPS * dt_nz(pz)) {
    const int nm = min(QW, N - i0), last = i0 + nm - 1;
    rows4(datt, base, E, i0, nm, dh, ds, lane, QW);
    __syncwarp();
    float dot[QW];
#pragma unroll
    for (int m = 0; m < QW; m++) dot[m] = 0;
    for (int j = lane; j < N; j += 32) { /* dP (in ps) and each query's sum of P dP */
      float pij[QW], dp[QW];
      int any = 0;
#pragma unroll
      for (int m = 0; m < QW; m++) {
        pij[m] = m < nm ? P[pb + (size_t)(i0 + m) * N + j] : 0.0f;
        any |= pij[m] != 0;
      }
      if (any) dots<QW>(ds, Vs + j * ld, dh, dp);
#pragma unroll
      for (int m = 0; m < QW; m++) {
        const float d = pij[m] != 0 ? dp[m] : 0.0f;
        ps[m * N + j] = d;
        dot[m] += pij[m] * d;
      }
    }
#pragma unroll
    for (int m = 0; m < QW; m++)
      for (int o = 16; o > 0; o >>= 1) dot[m] += __shfl_xor_sync(0xffffffffu, dot[m], o);
    for (int j = lane; j < N; j += 32) {
#pragma unroll
      for (int m = 0; m < QW; m++) {
        if (m >= nm) break;
        const float s = P[pb + (size_t)(i0 + m) * N + j] * (ps[m * N + j] - dot[m]);
        ps[m * N + j] = s;
        dS[pb + (size_t)(i0 + m) * N + j] = s;
      }
    }
    __syncwarp();
    wsums<QW>(ps, N, nm, Ks, ld, last + 1, dh, scale, dq + base + (size_t)i0 * E, (size_t)E, lane);
    __syncwarp();
  }
}

/* grid (nh, B, splits): block z's warps take keys j0 .. j0 + QW - 1 with j0 =
 * QW (8 z + w + 8 splits m). dk_j = scale sum_{i >= j} dS_ij q_i, dv_j =
 * sum_{i >= j} P_ij datt_i (i in order) */
template <int QW>
__global__ void __launch_bounds__(32 * DT_ATTN_WARPS) dt_attn_bwd_kv_win_kernel(const float *P, const float *dS,
                                                                                const float *q, const float *datt,
                                                                                int K, int E, int nh, float scale,
                                                                                float *dk, float *dv, cuda_pz_t pz) {
  PDL_ENTER();
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const int N = 3 * K, h = blockIdx.x, b = blockIdx.y, dh = E / nh, ld = dh + 4;
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int pl = kv_ld(N);
  float *Qs = sm, *Ds = Qs + N * ld, *Ps = Ds + N * ld, *Ss = Ps + N * pl;
  const size_t mf = dt_mf(pz); /* the member's rows */
  const size_t base = mf + (size_t)b * N * E + (size_t)h * dh, pb = mf + ((size_t)b * nh + h) * N * N;
  stage(q, base, N, dh, E, Qs, ld);
  stage(datt, base, N, dh, E, Ds, ld);
  /* P's and dS's [N, N] blocks: as float4s where they are 16-byte aligned
   * (N even), else floats; four in flight a thread; the pad columns zeros */
  const int v4 = (N * N) % 4 == 0 && ((uintptr_t)(P + pb) & 15) == 0 && ((uintptr_t)(dS + pb) & 15) == 0;
  const int W = v4 ? 4 : 1, nn = N * N / W;
  for (int x = threadIdx.x; x < N * (pl - N); x += blockDim.x) {
    const int o = (x / (pl - N)) * pl + N + x % (pl - N);
    Ps[o] = 0, Ss[o] = 0;
  }
  for (int x0 = threadIdx.x; x0 < nn; x0 += 4 * blockDim.x) {
    float4 rp[4], rs[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int x = x0 + u * blockDim.x;
      rp[u] = rs[u] = make_float4(0, 0, 0, 0);
      if (x >= nn) continue;
      if (v4) {
        rp[u] = *reinterpret_cast<const float4 *>(P + pb + 4 * (size_t)x);
        rs[u] = *reinterpret_cast<const float4 *>(dS + pb + 4 * (size_t)x);
      } else {
        rp[u].x = P[pb + x], rs[u].x = dS[pb + x];
      }
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int x = x0 + u * blockDim.x;
      if (x >= nn) continue;
      const float ep[4] = {rp[u].x, rp[u].y, rp[u].z, rp[u].w}, es[4] = {rs[u].x, rs[u].y, rs[u].z, rs[u].w};
      for (int e = 0; e < W; e++) {
        const int f = W * x + e, o = (f / N) * pl + f % N;
        Ps[o] = ep[e], Ss[o] = es[e];
      }
    }
  }
  __syncthreads();
  /* Key j's sums run over every row i >= j0 in order: P_ij and dS_ij are
   * exact zeros where query i does not see key j (i < j, a padded query or
   * key) and the rows are finite, so those terms add a zero (as wsums': the
   * same sums as skipping them), with no branch a key.
   * The lane's columns c0 + 32 u, four a pass; the QW keys' P and dS of a
   * row one vector read (j0 % QW == 0, pl % 4 == 0). */
  typedef typename dt_vec_t<QW>::t V;
  for (int j0 = QW * (DT_ATTN_WARPS * dt_z(pz) + w); j0 < N; j0 += QW * DT_ATTN_WARPS * dt_nz(pz)) {
    const int nm = min(QW, N - j0);
    for (int c0 = lane; c0 < dh; c0 += 128) {
      float sk[QW][4], sv[QW][4];
#pragma unroll
      for (int m = 0; m < QW; m++)
#pragma unroll
        for (int u = 0; u < 4; u++) sk[m][u] = sv[m][u] = 0;
      for (int i = j0; i < N; i++) {
        float qi[4], di[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int c = c0 + 32 * u < dh ? c0 + 32 * u : c0;
          qi[u] = Qs[i * ld + c], di[u] = Ds[i * ld + c];
        }
        const V sq = *reinterpret_cast<const V *>(Ss + i * pl + j0), pq = *reinterpret_cast<const V *>(Ps + i * pl + j0);
        const float *s = reinterpret_cast<const float *>(&sq), *p = reinterpret_cast<const float *>(&pq);
#pragma unroll
        for (int m = 0; m < QW; m++)
#pragma unroll
          for (int u = 0; u < 4; u++) sk[m][u] = fmaf(s[m], qi[u], sk[m][u]), sv[m][u] = fmaf(p[m], di[u], sv[m][u]);
      }
#pragma unroll
      for (int m = 0; m < QW; m++) {
        if (m >= nm) break;
        const size_t o = base + (size_t)(j0 + m) * E;
#pragma unroll
        for (int u = 0; u < 4; u++)
          if (c0 + 32 * u < dh) dk[o + c0 + 32 * u] = sk[m][u] * scale, dv[o + c0 + 32 * u] = sv[m][u];
      }
    }
  }
}

// kernels: a block per query (shapes too large for shared memory)

/* grid (N, nh, B) */
__global__ void dt_attn_kernel(const float *q, const float *k, const float *v, const float *mask, int K, int E, int nh,
                               float scale, float *P, float *att, cuda_pz_t pz) {
  PDL_ENTER();
  extern __shared__ float sc[]; /* N scores, then 32 for the reductions */
  const int N = 3 * K, i = blockIdx.x, h = blockIdx.y, b = dt_z(pz), dh = E / nh;
  const long long mo = dt_moz(pz);
  q = dt_off(q, mo), k = dt_off(k, mo), v = dt_off(v, mo), mask = dt_off(mask, mo), P = dt_off(P, mo), att = dt_off(att, mo);
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
                                     int nh, float scale, float *dS, float *dq, cuda_pz_t pz) {
  PDL_ENTER();
  extern __shared__ float sh[]; /* N, then 32 */
  const int N = 3 * K, i = blockIdx.x, h = blockIdx.y, b = dt_z(pz), dh = E / nh;
  const long long mo = dt_moz(pz);
  P = dt_off(P, mo), datt = dt_off(datt, mo), k = dt_off(k, mo), v = dt_off(v, mo), dS = dt_off(dS, mo), dq = dt_off(dq, mo);
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
                                      int nh, float scale, float *dk, float *dv, cuda_pz_t pz) {
  PDL_ENTER();
  const int N = 3 * K, j = blockIdx.x, h = blockIdx.y, b = dt_z(pz), dh = E / nh;
  const long long mo = dt_moz(pz);
  P = dt_off(P, mo), dS = dt_off(dS, mo), q = dt_off(q, mo), datt = dt_off(datt, mo), dk = dt_off(dk, mo), dv = dt_off(dv, mo);
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
static int win_qw(const cuda_dt_t *d) {
  return (long long)d->L.nh * d->B * ((3 * d->L.K + 3) / 4) >= DT_ATTN_QW_WARPS ? 4 : 2;
}
static unsigned win_splits(const cuda_dt_t *d, int qw) {
  const int N = 3 * d->L.K, most = (N + DT_ATTN_WARPS * qw - 1) / (DT_ATTN_WARPS * qw), units = d->L.nh * d->B;
  const int s = (264 + units - 1) / units;
  return (unsigned)(s < most ? s : most);
}

int dt_attn_init(const dt_layout_t *L, int *win) {
  int dev, optin = 0;
  CUDA_RET(cudaGetDevice(&dev));
  CUDA_RET(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int N = 3 * L->K, dh = L->E / L->nh;
  const size_t fq = sizeof(float) * win_floats(N, dh, 0, 4), kv = sizeof(float) * win_floats(N, dh, 1, 4);
  *win = fq <= (size_t)optin && kv <= (size_t)optin && dh % 4 == 0; /* float4 rows */
  if (!*win) return 0;
  /* the device's whole opt-in, whatever these shapes need: the limit is the
   * kernel's, shared by every trainer in the process, so one with smaller
   * windows must not lower it under another's (setting the same value again
   * from another thread is harmless) */
  CUDA_RET(cuda_allow_optin(dt_attn_win_kernel<2>, optin));
  CUDA_RET(cuda_allow_optin(dt_attn_bwd_q_win_kernel<2>, optin));
  CUDA_RET(cuda_allow_optin(dt_attn_bwd_kv_win_kernel<2>, optin));
  CUDA_RET(cuda_allow_optin(dt_attn_win_kernel<4>, optin));
  CUDA_RET(cuda_allow_optin(dt_attn_bwd_q_win_kernel<4>, optin));
  CUDA_RET(cuda_allow_optin(dt_attn_bwd_kv_win_kernel<4>, optin));
  return 0;
}

int dt_attn_uses_tc(const cuda_dt_t *d) { return d->tc && d->attn_tc && d->pz.stride % 16 == 0; }

int dt_attn_pre(const cuda_dt_t *d) { return dt_pre(d) && dt_attn_uses_tc(d); }

extern "C" int cuda_dt_attn_pre(const cuda_dt_t *d) { return dt_attn_pre(d); }

int dt_attn(const cuda_dt_t *d, const float *q, const float *k, const float *v, float *P, float *att, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, N = 3 * K, E = L->E, nh = L->nh;
  const float scale = 1.0f / sqrtf((float)(E / nh));
  if (dt_attn_uses_tc(d)) return dt_attn_tc(d, q, k, v, P, att, st);
  if (d->attn_win) {
    const int qw = win_qw(d);
    const dim3 grid = dt_grid(d, dim3((unsigned)nh, (unsigned)d->B, win_splits(d, qw)));
    const size_t sh = sizeof(float) * win_floats(N, E / nh, 0, qw);
    if (qw == 4)
      pdl_launch(dt_attn_win_kernel<4>, grid, 32 * DT_ATTN_WARPS, sh, st, q, k, v, d->mask, K, E, nh, scale, P, att,
                 d->pz);
    else
      pdl_launch(dt_attn_win_kernel<2>, grid, 32 * DT_ATTN_WARPS, sh, st, q, k, v, d->mask, K, E, nh, scale, P, att,
                 d->pz);
  } else
    pdl_launch(dt_attn_kernel, dt_grid(d, dim3((unsigned)N, (unsigned)nh, (unsigned)d->B)), 128,
               sizeof(float) * (N + 32), st, q, k, v, d->mask, K, E, nh, scale, P, att, d->pz);
  return (int)cudaGetLastError();
}

int dt_attn_bwd(const cuda_dt_t *d, const float *P, const float *datt, const float *q, const float *k, const float *v,
                float *dS, float *dq, float *dk, float *dv, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, N = 3 * K, E = L->E, nh = L->nh;
  const float scale = 1.0f / sqrtf((float)(E / nh));
  if (dt_attn_uses_tc(d)) return dt_attn_tc_bwd(d, P, datt, q, k, v, dS, dq, dk, dv, st);
  if (d->attn_win) {
    const int qw = win_qw(d);
    const dim3 grid = dt_grid(d, dim3((unsigned)nh, (unsigned)d->B, win_splits(d, qw)));
    const size_t sq = sizeof(float) * win_floats(N, E / nh, 0, qw), skv = sizeof(float) * win_floats(N, E / nh, 1, qw);
    if (qw == 4) {
      pdl_launch(dt_attn_bwd_q_win_kernel<4>, grid, 32 * DT_ATTN_WARPS, sq, st, P, datt, k, v, K, E, nh, scale, dS, dq,
                 d->pz);
      CUDA_RET(cudaGetLastError());
      pdl_launch(dt_attn_bwd_kv_win_kernel<4>, grid, 32 * DT_ATTN_WARPS, skv, st, P, dS, q, datt, K, E, nh, scale, dk,
                 dv, d->pz);
    } else {
      pdl_launch(dt_attn_bwd_q_win_kernel<2>, grid, 32 * DT_ATTN_WARPS, sq, st, P, datt, k, v, K, E, nh, scale, dS, dq,
                 d->pz);
      CUDA_RET(cudaGetLastError());
      pdl_launch(dt_attn_bwd_kv_win_kernel<2>, grid, 32 * DT_ATTN_WARPS, skv, st, P, dS, q, datt, K, E, nh, scale, dk,
                 dv, d->pz);
    }
    return (int)cudaGetLastError();
  }
  const dim3 grid = dt_grid(d, dim3((unsigned)N, (unsigned)nh, (unsigned)d->B));
  pdl_launch(dt_attn_bwd_q_kernel, grid, 128, sizeof(float) * (N + 32), st, P, datt, k, v, K, E, nh, scale, dS, dq,
             d->pz);
  pdl_launch(dt_attn_bwd_kv_kernel, grid, 128, 0, st, P, dS, q, datt, K, E, nh, scale, dk, dv, d->pz);
  return (int)cudaGetLastError();
}
