/*
 * dt_attn_tc.cu — the Decision Transformer's causal attention and its exact
 * backward with TF32 operands on mma.sync (tensor_cores; docs/learner.md
 * §16): the same math as dt_attn.cu's FFMA kernels, which stay the fp32 path
 * and the path for shapes these do not take.
 *
 * A block a (head, window), a warp a 16-row slab of it: windows of up to
 * DT_ATC_NP tokens (N = 3 K, padded to NP, a multiple of 16) with head widths
 * a multiple of 8. The block stages the window's rows of its operands in
 * shared memory rounded to TF32 (rows N .. NP - 1 zeros), so every product
 * is a run of m16n8k8 mma.sync steps over fragments read from there, with
 * fp32 sums in the hardware's fixed order: reruns are bit for bit. The
 * softmax and dS = P (dP - sum P dP) are fp32 on the accumulators, as the
 * FFMA kernels compute them; the probabilities and dS enter the next
 * product rounded to TF32 (P itself is kept in fp32 for the backward).
 *
 * Causality prunes whole tiles: a warp's queries r0 .. r0 + 15 see keys up
 * to r0 + 15, so its score tiles stop there, and key slab r0's gradients sum
 * queries from r0 on. Every term pruned is a product with an exact zero.
 *
 * Fragment reads (gemm_dev.cuh's mma_tf32, lane 4 g + t): an operand read as
 * [row g][col t] (A, or B from a row-major B^T) has rows lda() floats apart
 * (4 mod 8: the 32 lanes hit 32 banks); one read as [row t][col g] (B from a
 * row-major B, or A from a row-major A^T) has rows ldt() apart (an odd
 * multiple of 8: the same).
 */
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "dt_cuda.cuh"
#include "cp_async.cuh"
#include "gemm_dev.cuh"

#define DT_ATC_NP 64 /* the largest padded window these kernels take */

static __host__ __device__ __forceinline__ int atc_np(int N) { return (N + 15) / 16 * 16; }
static __host__ __device__ __forceinline__ int lda_(int c) { return c + 4; }
static __host__ __device__ __forceinline__ int ldt_(int c) { return (c / 8) % 2 ? c : c + 8; }
static __device__ __forceinline__ unsigned tfu(float x) { return f2tf32(x); }

/* the shared floats of each kernel (dh: the head's width) */
static size_t fwd_floats(int NP, int dh) {
  /* Q, K [NP][lda(dh)], V [NP][ldt(dh)], the warps' P slabs [NP][lda(NP)]
   * (in Q's rows where those are wide enough) */
  return (size_t)NP * (2 * lda_(dh) + ldt_(dh)) + (dh >= NP ? 0 : (size_t)NP * lda_(NP)) + NP;
}
static size_t bq_floats(int NP, int dh) { /* dO, V [NP][lda], K [NP][ldt], dS slabs as fwd's P */
  return (size_t)NP * (2 * lda_(dh) + ldt_(dh)) + (dh >= NP ? 0 : (size_t)NP * lda_(NP)) + NP;
}
static size_t bkv_floats(int NP, int dh) { /* Q, dO [NP][ldt(dh)], P, dS [NP][ldt(NP)] */
  return (size_t)NP * (2 * ldt_(dh) + 2 * ldt_(NP));
}

/* rows [N, dh] of head h of window b of X ([T, E], token-major; from float
 * base) into S (rows ld apart) by cp.async, rows N .. NP - 1 zero-filled;
 * dh % 4 == 0 and base 16-byte aligned (dt_attn_tc_fits). Every copy is in
 * flight at once: one round trip, where loads through registers took one
 * per few float4s a thread (the block has only NP / 16 warps) */
static __device__ void copy_rows(const float *X, size_t base, int N, int NP, int dh, int E, float *S, int ld) {
  const int d4 = dh / 4, n = NP * d4;
  for (int x = threadIdx.x; x < n; x += blockDim.x) {
    const int r = x / d4, c = 4 * (x % d4);
    cp_async16z(S + r * ld + c, X + base + (size_t)(r < N ? r : 0) * E + c, r < N ? 16 : 0);
  }
}
/* copy_rows' elements rounded to TF32 in place, by the threads that copied
 * them (once their copies have landed) */
static __device__ void round_rows(int NP, int dh, float *S, int ld) {
  const int d4 = dh / 4, n = NP * d4;
  for (int x = threadIdx.x; x < n; x += blockDim.x) {
    float4 *o = reinterpret_cast<float4 *>(S + (x / d4) * ld + 4 * (x % d4)), r = *o;
    r.x = __uint_as_float(tfu(r.x)), r.y = __uint_as_float(tfu(r.y));
    r.z = __uint_as_float(tfu(r.z)), r.w = __uint_as_float(tfu(r.w));
    *o = r;
  }
}
/* [N, N] of X (from pb) into S ([NP][ld]) by cp.async, zeros past N */
static __device__ void copy_nn(const float *X, size_t pb, int N, int NP, float *S, int ld) {
  for (int x = threadIdx.x; x < NP * NP; x += blockDim.x) {
    const int i = x / NP, j = x % NP, in = i < N && j < N;
    cp_async4z(S + i * ld + j, X + pb + (in ? (size_t)i * N + j : 0), in ? 4 : 0);
  }
}
static __device__ void round_nn(int NP, float *S, int ld) {
  for (int x = threadIdx.x; x < NP * NP; x += blockDim.x) {
    float *o = S + (x / NP) * ld + x % NP;
    *o = __uint_as_float(tfu(*o));
  }
}
static __device__ __forceinline__ void landed() {
  cp_async_commit();
  cp_async_wait<0>();
}

/* s[j] += A B^T for the warp's 16 rows of A (rows la apart) and the n-tiles j
 * < jn of B (rows lb apart, B [key][c]) over c < dh: [row g][col t] reads of
 * both */
static __device__ __forceinline__ void prod_abt(const float *A, int la, const float *B, int lb, int dh, int jn,
                                                float (&s)[8][4], int g, int t) {
  for (int kk = 0; kk < dh; kk += 8) {
    const unsigned a[4] = {__float_as_uint(A[g * la + kk + t]), __float_as_uint(A[(g + 8) * la + kk + t]),
                           __float_as_uint(A[g * la + kk + t + 4]), __float_as_uint(A[(g + 8) * la + kk + t + 4])};
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < jn)
        mma_tf32(s[j], a, __float_as_uint(B[(8 * j + g) * lb + kk + t]), __float_as_uint(B[(8 * j + g) * lb + kk + t + 4]));
  }
}

/* o[j] = W V[:, c0 + 8 j ..] for the warp's 16 weight rows W (rows lw apart,
 * [row g][col t] reads) over keys 8 k0 .. 8 k1 - 1 of V (rows lv apart, [row
 * t][col g] reads), the n-tiles c0 + 8 j < dh */
static __device__ __forceinline__ void prod_wv(const float *W, int lw, const float *V, int lv, int c0, int dh, int k0,
                                               int k1, float (&o)[8][4], int g, int t) {
#pragma unroll
  for (int j = 0; j < 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
  for (int ks = k0; ks < k1; ks++) {
    const int kk = 8 * ks;
    const unsigned a[4] = {__float_as_uint(W[g * lw + kk + t]), __float_as_uint(W[(g + 8) * lw + kk + t]),
                           __float_as_uint(W[g * lw + kk + t + 4]), __float_as_uint(W[(g + 8) * lw + kk + t + 4])};
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (c0 + 8 * j < dh)
        mma_tf32(o[j], a, __float_as_uint(V[(kk + t) * lv + c0 + 8 * j + g]),
                 __float_as_uint(V[(kk + t + 4) * lv + c0 + 8 * j + g]));
  }
}

/* as prod_wv with W read transposed: W^T's rows are columns r0 .. r0 + 15 of
 * Wt (rows lw apart, [row t][col g] reads). SPLIT: Wt in fp32, each element
 * taken as the sum of two TF32 values hi + lo (lo = tf32(x - hi): x to
 * about 2^-22), the lo products first. dk's product takes dS so: a row of
 * dS sums to zero in exact arithmetic (the softmax's shift invariance), and
 * so do the key bias's gradient (the column sums of dk); dS rounded to TF32
 * would leave 2^-12 of its row's magnitude there, which AdamW turns into
 * full-size steps of the key bias (measured: the 100-step learner test's
 * parameters 6.6e-3 from the CPU's, 1.3e-4 with the FFMA attention). */
template <int SPLIT>
static __device__ __forceinline__ void prod_wtv(const float *Wt, int lw, int r0, const float *V, int lv, int c0,
                                                int dh, int k0, int k1, float (&o)[8][4], int g, int t) {
#pragma unroll
  for (int j = 0; j < 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
  for (int ks = k0; ks < k1; ks++) {
    const int kk = 8 * ks;
    const float x[4] = {Wt[(kk + t) * lw + r0 + g], Wt[(kk + t) * lw + r0 + g + 8], Wt[(kk + t + 4) * lw + r0 + g],
                        Wt[(kk + t + 4) * lw + r0 + g + 8]};
    unsigned a[4], lo[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      a[e] = SPLIT ? tfu(x[e]) : __float_as_uint(x[e]);
      lo[e] = SPLIT ? tfu(x[e] - __uint_as_float(a[e])) : 0u;
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (c0 + 8 * j < dh) {
        const unsigned b0 = __float_as_uint(V[(kk + t) * lv + c0 + 8 * j + g]);
        const unsigned b1 = __float_as_uint(V[(kk + t + 4) * lv + c0 + 8 * j + g]);
        if (SPLIT) mma_tf32(o[j], lo, b0, b1);
        mma_tf32(o[j], a, b0, b1);
      }
  }
}

/* the warp's 16 rows r0 + g, r0 + g + 8 of o (columns c0 + 8 j + 2 t, + 1)
 * times scale into X's rows (< N) of head base, as float2s */
static __device__ __forceinline__ void store_rows(const float (&o)[8][4], float *X, size_t base, int E, int r0, int N,
                                                  int c0, int dh, float scale, int g, int t) {
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const int c = c0 + 8 * j + 2 * t;
    if (c0 + 8 * j >= dh) break;
    if (r0 + g < N)
      *reinterpret_cast<float2 *>(X + base + (size_t)(r0 + g) * E + c) = make_float2(o[j][0] * scale, o[j][1] * scale);
    if (r0 + g + 8 < N)
      *reinterpret_cast<float2 *>(X + base + (size_t)(r0 + g + 8) * E + c) = make_float2(o[j][2] * scale, o[j][3] * scale);
  }
}

/* Mv[j] = token j is a real step's (0 past N) */
static __device__ __forceinline__ void stage_mask(const float *mb, int N, int NP, int *Mv) {
  for (int j = threadIdx.x; j < NP; j += blockDim.x) Mv[j] = j < N && mb[j / 3] != 0;
}

/* grid (nh, B), NP / 16 warps. P [B, nh, N, N] fp32, att [T, E] */
__global__ void __launch_bounds__(32 * DT_ATC_NP / 16) dt_attn_tc_kernel(const float *q, const float *k, const float *v,
                                                                         const float *mask, int K, int E, int nh,
                                                                         float scale, float *P, float *att,
                                                                         cuda_pz_t pz) {
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const int N = 3 * K, NP = atc_np(N), h = blockIdx.x, b = blockIdx.y, dh = E / nh;
  const int lq = lda_(dh), lv = ldt_(dh), w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
  float *Qs = sm, *Ks = Qs + NP * lq, *Vs = Ks + NP * lq, *Pw;
  int *Mv = reinterpret_cast<int *>(Vs + NP * lv);
  const int r0 = 16 * w, wide = dh >= NP, lp = wide ? lq : lda_(NP);
  Pw = wide ? Qs + r0 * lq : reinterpret_cast<float *>(Mv + NP) + r0 * lp; /* the warp's P slab */
  const size_t mf = dt_mf(pz), base = mf + (size_t)b * N * E + (size_t)h * dh;
  copy_rows(q, base, N, NP, dh, E, Qs, lq);
  copy_rows(k, base, N, NP, dh, E, Ks, lq);
  copy_rows(v, base, N, NP, dh, E, Vs, lv);
  stage_mask(mask + mf + (size_t)b * K, N, NP, Mv);
  landed();
  round_rows(NP, dh, Qs, lq), round_rows(NP, dh, Ks, lq), round_rows(NP, dh, Vs, lv);
  __syncthreads();
  const int jn = min(2 * w + 2, NP / 8); /* the key tiles the slab's queries see */
  float s[8][4];
#pragma unroll
  for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
  prod_abt(Qs + r0 * lq, lq, Ks, lq, dh, jn, s, g, t);
  /* each row's softmax over the keys it sees (-inf elsewhere), in fp32: the
   * row's max and sum over the four lanes 4 g .. 4 g + 3 */
  const int i0 = r0 + g, i1 = i0 + 8, q0 = Mv[i0], q1 = Mv[i1];
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int j = 0; j < 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = 8 * j + 2 * t + (e & 1), i = e < 2 ? i0 : i1;
      const int seen = j < jn && c <= i && Mv[c] && (e < 2 ? q0 : q1);
      s[j][e] = seen ? s[j][e] * scale : -INFINITY;
      if (e < 2) mx0 = fmaxf(mx0, s[j][e]);
      else mx1 = fmaxf(mx1, s[j][e]);
    }
  for (int o = 1; o < 4; o <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
  }
  float sum0 = 0, sum1 = 0;
#pragma unroll
  for (int j = 0; j < 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const float x = s[j][e], m = e < 2 ? mx0 : mx1;
      s[j][e] = x == -INFINITY ? 0.0f : expf(x - m);
      if (e < 2) sum0 += s[j][e];
      else sum1 += s[j][e];
    }
  for (int o = 1; o < 4; o <<= 1) {
    sum0 += __shfl_xor_sync(0xffffffffu, sum0, o);
    sum1 += __shfl_xor_sync(0xffffffffu, sum1, o);
  }
  __syncwarp(); /* the slab's Q rows read (Pw may lie on them) */
  float *Pb = P + mf + ((size_t)b * nh + h) * N * N;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    if (8 * j >= NP) break;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = 8 * j + 2 * t + (e & 1), r = e < 2 ? g : g + 8, i = r0 + r;
      const float p = (e < 2 ? q0 : q1) ? s[j][e] / (e < 2 ? sum0 : sum1) : 0.0f;
      if (i < N && c < N) Pb[(size_t)i * N + c] = p;
      Pw[r * lp + c] = __uint_as_float(tfu(p));
    }
  }
  __syncwarp();
  /* att rows = P V (a padded query's P row is zeros, so its row is zeros) */
  const int kn = min(NP, r0 + 16) / 8;
  for (int c0 = 0; c0 < dh; c0 += 64) {
    float o[8][4];
    prod_wv(Pw, lp, Vs, lv, c0, dh, 0, kn, o, g, t);
    store_rows(o, att, base, E, r0, N, c0, dh, 1.0f, g, t);
  }
}

/* grid (nh, B), NP / 16 warps, slab r0 of queries: dP = dO V^T, dS = P (dP -
 * sum_j P dP) (fp32) into dS, dq = scale dS K */
__global__ void __launch_bounds__(32 * DT_ATC_NP / 16) dt_attn_tc_bwd_q_kernel(const float *P, const float *datt,
                                                                               const float *k, const float *v, int K,
                                                                               int E, int nh, float scale, float *dS,
                                                                               float *dq, cuda_pz_t pz) {
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const int N = 3 * K, NP = atc_np(N), h = blockIdx.x, b = blockIdx.y, dh = E / nh;
  const int la = lda_(dh), lt = ldt_(dh), w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
  float *Ds = sm, *Vs = Ds + NP * la, *Ks = Vs + NP * la, *Sw;
  const int r0 = 16 * w, wide = dh >= NP, lp = wide ? la : lda_(NP);
  Sw = wide ? Ds + r0 * la : Ks + NP * lt + NP + r0 * lp; /* the warp's dS slab */
  const size_t mf = dt_mf(pz), base = mf + (size_t)b * N * E + (size_t)h * dh;
  const size_t pb = mf + ((size_t)b * nh + h) * N * N;
  copy_rows(datt, base, N, NP, dh, E, Ds, la);
  copy_rows(v, base, N, NP, dh, E, Vs, la);
  copy_rows(k, base, N, NP, dh, E, Ks, lt);
  landed();
  round_rows(NP, dh, Ds, la), round_rows(NP, dh, Vs, la), round_rows(NP, dh, Ks, lt);
  __syncthreads();
  const int jn = min(2 * w + 2, NP / 8);
  float s[8][4];
#pragma unroll
  for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
  prod_abt(Ds + r0 * la, la, Vs, la, dh, jn, s, g, t);
  /* P's rows (zeros outside the window), each row's sum of P dP */
  float pr[8][4], dot0 = 0, dot1 = 0;
#pragma unroll
  for (int j = 0; j < 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = 8 * j + 2 * t + (e & 1), i = r0 + (e < 2 ? g : g + 8);
      pr[j][e] = j < jn && i < N && c < N ? P[pb + (size_t)i * N + c] : 0.0f;
      const float d = pr[j][e] * s[j][e];
      if (e < 2) dot0 += d;
      else dot1 += d;
    }
  for (int o = 1; o < 4; o <<= 1) {
    dot0 += __shfl_xor_sync(0xffffffffu, dot0, o);
    dot1 += __shfl_xor_sync(0xffffffffu, dot1, o);
  }
  __syncwarp(); /* the slab's dO rows read (Sw may lie on them) */
#pragma unroll
  for (int j = 0; j < 8; j++) {
    if (8 * j >= NP) break;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = 8 * j + 2 * t + (e & 1), r = e < 2 ? g : g + 8, i = r0 + r;
      const float ds = pr[j][e] * (s[j][e] - (e < 2 ? dot0 : dot1));
      if (i < N && c < N) dS[pb + (size_t)i * N + c] = ds;
      Sw[r * lp + c] = __uint_as_float(tfu(ds));
    }
  }
  __syncwarp();
  const int kn = min(NP, r0 + 16) / 8;
  for (int c0 = 0; c0 < dh; c0 += 64) {
    float o[8][4];
    prod_wv(Sw, lp, Ks, lt, c0, dh, 0, kn, o, g, t);
    store_rows(o, dq, base, E, r0, N, c0, dh, scale, g, t);
  }
}

/* grid (nh, B), NP / 16 warps, slab r0 of keys: dk = scale dS^T Q, dv = P^T
 * dO, over the queries from r0 on */
__global__ void __launch_bounds__(32 * DT_ATC_NP / 16) dt_attn_tc_bwd_kv_kernel(const float *P, const float *dS,
                                                                                const float *q, const float *datt,
                                                                                int K, int E, int nh, float scale,
                                                                                float *dk, float *dv, cuda_pz_t pz) {
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const int N = 3 * K, NP = atc_np(N), h = blockIdx.x, b = blockIdx.y, dh = E / nh;
  const int lt = ldt_(dh), ln = ldt_(NP), w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
  float *Qs = sm, *Ds = Qs + NP * lt, *Ps = Ds + NP * lt, *Ss = Ps + NP * ln;
  const int r0 = 16 * w;
  const size_t mf = dt_mf(pz), base = mf + (size_t)b * N * E + (size_t)h * dh;
  const size_t pb = mf + ((size_t)b * nh + h) * N * N;
  copy_rows(q, base, N, NP, dh, E, Qs, lt);
  copy_rows(datt, base, N, NP, dh, E, Ds, lt);
  copy_nn(P, pb, N, NP, Ps, ln);
  copy_nn(dS, pb, N, NP, Ss, ln);
  landed();
  round_rows(NP, dh, Qs, lt), round_rows(NP, dh, Ds, lt), round_nn(NP, Ps, ln); /* dS stays fp32 (prod_wtv<1>) */
  __syncthreads();
  const int k0 = r0 / 8, k1 = NP / 8; /* queries from the slab's first key on */
  for (int c0 = 0; c0 < dh; c0 += 64) {
    float o[8][4];
    prod_wtv<1>(Ss, ln, r0, Qs, lt, c0, dh, k0, k1, o, g, t);
    store_rows(o, dk, base, E, r0, N, c0, dh, scale, g, t);
    prod_wtv<0>(Ps, ln, r0, Ds, lt, c0, dh, k0, k1, o, g, t);
    store_rows(o, dv, base, E, r0, N, c0, dh, 1.0f, g, t);
  }
}

// launchers

int dt_attn_tc_init(const dt_layout_t *L, int *fits) {
  *fits = 0;
  const int N = 3 * L->K, NP = atc_np(N), dh = L->E / L->nh;
  if (NP > DT_ATC_NP || dh % 8) return 0;
  int dev, optin = 0;
  CUDA_RET(cudaGetDevice(&dev));
  CUDA_RET(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const size_t most = sizeof(float) * fwd_floats(NP, dh) > sizeof(float) * bq_floats(NP, dh)
                          ? sizeof(float) * fwd_floats(NP, dh)
                          : sizeof(float) * bq_floats(NP, dh);
  if (most > (size_t)optin || sizeof(float) * bkv_floats(NP, dh) > (size_t)optin) return 0;
  /* the device's whole opt-in, as dt_attn_init sets its kernels' */
  CUDA_RET(cudaFuncSetAttribute(dt_attn_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  CUDA_RET(cudaFuncSetAttribute(dt_attn_tc_bwd_q_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  CUDA_RET(cudaFuncSetAttribute(dt_attn_tc_bwd_kv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  *fits = 1;
  return 0;
}

int dt_attn_tc(const cuda_dt_t *d, const float *q, const float *k, const float *v, float *P, float *att,
               cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, NP = atc_np(3 * K), E = L->E, nh = L->nh, dh = E / nh;
  const float scale = 1.0f / sqrtf((float)dh);
  const dim3 grid = dt_grid(d, dim3((unsigned)nh, (unsigned)d->B));
  dt_attn_tc_kernel<<<grid, 32 * NP / 16, sizeof(float) * fwd_floats(NP, dh), st>>>(q, k, v, d->mask, K, E, nh, scale,
                                                                                   P, att, d->pz);
  return (int)cudaGetLastError();
}

int dt_attn_tc_bwd(const cuda_dt_t *d, const float *P, const float *datt, const float *q, const float *k,
                   const float *v, float *dS, float *dq, float *dk, float *dv, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, NP = atc_np(3 * K), E = L->E, nh = L->nh, dh = E / nh;
  const float scale = 1.0f / sqrtf((float)dh);
  const dim3 grid = dt_grid(d, dim3((unsigned)nh, (unsigned)d->B));
  dt_attn_tc_bwd_q_kernel<<<grid, 32 * NP / 16, sizeof(float) * bq_floats(NP, dh), st>>>(P, datt, k, v, K, E, nh,
                                                                                         scale, dS, dq, d->pz);
  CUDA_RET(cudaGetLastError());
  dt_attn_tc_bwd_kv_kernel<<<grid, 32 * NP / 16, sizeof(float) * bkv_floats(NP, dh), st>>>(P, dS, q, datt, K, E, nh,
                                                                                           scale, dk, dv, d->pz);
  return (int)cudaGetLastError();
}

extern "C" int cuda_dt_attn_run(cuda_dt_t *d, int *tc) {
  *tc = d->tc && d->attn_tc && d->pz.stride % 16 == 0; /* as dt_attn's use_tc */
  CUDA_RET(dt_attn(d, d->q, d->k, d->v, d->P, d->att, 0));
  CUDA_RET(dt_attn_bwd(d, d->P, d->datt, d->q, d->k, d->v, d->dS, d->dq, d->dk, d->dv, 0));
  return (int)cudaDeviceSynchronize();
}
