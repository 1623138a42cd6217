/*
 * dt_attn_tc.cu — the Decision Transformer's causal attention and its exact
 * backward with TF32 operands on mma.sync (tensor_cores; docs/learner.md
 * §16): the same math as dt_attn.cu's FFMA kernels, which stay the fp32 path
 * and the path for shapes these do not take.
 *
 * A block a (head, window): windows of up to DT_ATC_NP tokens (N = 3 K,
 * padded to NP, a multiple of 16) with head widths a multiple of 8, cut in
 * 16-row slabs, each taken by DT_ATC_WS warps (part hf of slab s is warp s +
 * NS hf): a score-sized product's 8-column tiles j with j % WS == hf, an
 * output's 8-column tiles likewise. (One warp a slab issued its slab's
 * every instruction back to back at one warp a scheduler: ~22 us a launch
 * at batch 64, 11 with four; eight tied with four: kernels/dev/
 * DEVICE_NOTES.md item 142.) The block stages the window's rows of its
 * operands in shared memory by cp.async and rounds them to TF32 in place
 * (rows N .. NP - 1 zeros), or, where their producers wrote them rounded
 * already (q, k, v and dO under dt_attn_pre: the kernels' `rin`), stages
 * them as they are, so every product is a run of m16n8k8 mma.sync
 * steps over fragments read from there, with fp32 sums in the hardware's
 * fixed order: reruns are bit for bit. The softmax and dS = P (dP - sum P
 * dP) are fp32 on the accumulators, as the FFMA kernels compute them, with
 * a row's max and sums combined over the slab's warps in a fixed order; the
 * probabilities and dS enter the next product rounded to TF32 (P itself is
 * kept in fp32 for the backward; dk's product takes dS as two TF32 terms:
 * prod_av).
 *
 * The backward runs in one of three forms with the same products on the
 * same staged floats (so the same bits): two launches (dS and dq, then dk
 * and dv), one (both halves a block), or a pair of blocks a window (a
 * cluster: dS handed over in distributed shared memory, dv made meanwhile);
 * dt_attn_tc_bwd_form picks one by the windows against the SM count
 * (docs/learner.md §16).
 *
 * Causality prunes whole tiles: a slab's queries r0 .. r0 + 15 see keys up
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

#include <cooperative_groups.h>

#include "smem_optin.cuh"
#include "cp_async.cuh"
#include "cuda_check.h"
#include "dt_cuda.cuh"
#include "gemm_dev.cuh"

#define DT_ATC_NP 64 /* the largest padded window these kernels take */
#define DT_ATC_WS 4  /* warps a 16-row slab */
#define DT_ATC_MT 2  /* a warp's score tiles: NP / 8 / WS at most */
#define DT_ATC_NT (32 * DT_ATC_WS * DT_ATC_NP / 16)

static __host__ __device__ __forceinline__ int atc_np(int N) { return (N + 15) / 16 * 16; }
static __host__ __device__ __forceinline__ int lda_(int c) { return c + 4; }
static __host__ __device__ __forceinline__ int ldt_(int c) { return (c / 8) % 2 ? c : c + 8; }

/* the shared floats of each kernel (dh: the head's width); red: the row
 * partials the slab's warps exchange (two [NS WS][16]) */
#define ATC_RED (2 * DT_ATC_WS * DT_ATC_NP)
static __host__ __device__ size_t fwd_floats(int NP, int dh) {
  /* Q, K [NP][lda(dh)], V [NP][ldt(dh)], the mask, red, the slabs' P
   * [NP][lda(NP)] (in Q's rows where those are wide enough) */
  return (size_t)NP * (2 * lda_(dh) + ldt_(dh)) + NP + ATC_RED + (dh >= NP ? 0 : (size_t)NP * lda_(NP));
}
/* dO, V [NP][lda(dh)], K [NP][ldt(dh)], the rest as the forward's */
static __host__ __device__ size_t bq_floats(int NP, int dh) { return fwd_floats(NP, dh); }
/* Q, dO [NP][ldt(dh)], P, dS [NP][ldt(NP)] */
static size_t bkv_floats(int NP, int dh) { return (size_t)NP * (2 * ldt_(dh) + 2 * ldt_(NP)); }
/* the one-launch backward: the first half's, then the second's */
static size_t bwd_floats(int NP, int dh) { return bq_floats(NP, dh) + bkv_floats(NP, dh); }
/* the pair's blocks (one size for both): the first half's and P in fp32
 * [NP][ldt(NP)], or the second half's */
static size_t pair_floats(int NP, int dh) {
  const size_t a = bq_floats(NP, dh) + (size_t)NP * ldt_(NP), b = bkv_floats(NP, dh);
  return a > b ? a : b;
}

/* a thread's walk over an [rows][w] array in steps of blockDim.x elements:
 * (r, c) without a division a step */
struct walk_t {
  int r, c, dr, dc, w;
  __device__ __forceinline__ walk_t(int w_)
      : r((int)threadIdx.x / w_), c((int)threadIdx.x % w_), dr((int)blockDim.x / w_), dc((int)blockDim.x % w_), w(w_) {}
  __device__ __forceinline__ void next() {
    r += dr, c += dc;
    if (c >= w) c -= w, r++;
  }
};

/* rows [N, dh] of head h of window b of X ([T, E], token-major; from float
 * base) into S (rows ld apart) by cp.async, rows N .. NP - 1 zero-filled;
 * dh % 4 == 0 and base 16-byte aligned (dt_attn_uses_tc). Every copy is in
 * flight at once. */
static __device__ void copy_rows(const float *X, size_t base, int N, int NP, int dh, int E, float *S, int ld) {
  walk_t a(dh / 4);
  for (; a.r < NP; a.next())
    cp_async16z(S + a.r * ld + 4 * a.c, X + base + (size_t)(a.r < N ? a.r : 0) * E + 4 * a.c, a.r < N ? 16 : 0);
}
/* copy_rows' elements rounded to TF32 in place, by the threads that copied
 * them (once their copies have landed) */
static __device__ void round_rows(int NP, int dh, float *S, int ld) {
  walk_t a(dh / 4);
  for (; a.r < NP; a.next()) {
    float4 *o = reinterpret_cast<float4 *>(S + a.r * ld + 4 * a.c), r = *o;
    r.x = __uint_as_float(f2tf32(r.x)), r.y = __uint_as_float(f2tf32(r.y));
    r.z = __uint_as_float(f2tf32(r.z)), r.w = __uint_as_float(f2tf32(r.w));
    *o = r;
  }
}
/* [N, N] of X (from pb) into S ([NP][ld]) by cp.async, zeros past N */
static __device__ void copy_nn(const float *X, size_t pb, int N, int NP, float *S, int ld) {
  walk_t a(NP);
  for (; a.r < NP; a.next()) {
    const int in = a.r < N && a.c < N;
    cp_async4z(S + a.r * ld + a.c, X + pb + (in ? (size_t)a.r * N + a.c : 0), in ? 4 : 0);
  }
}
static __device__ void round_nn(int NP, float *S, int ld) {
  walk_t a(NP);
  for (; a.r < NP; a.next()) S[a.r * ld + a.c] = __uint_as_float(f2tf32(S[a.r * ld + a.c]));
}
static __device__ __forceinline__ void landed() {
  cp_async_commit();
  cp_async_wait<0>();
}

/* the warp's place: slab s (rows r0 = 16 s), part hf; lane 4 g + t */
struct atc_warp_t {
  int NS, s, hf, r0, g, t;
  __device__ __forceinline__ atc_warp_t(int NP) {
    const int w = (int)threadIdx.x / 32, lane = (int)threadIdx.x & 31;
    NS = NP / 16, s = w % NS, hf = w / NS, r0 = 16 * s, g = lane / 4, t = lane % 4;
  }
};

/* the block's window: b of head h (grid (nh, B), or h_ given), N tokens padded to NP,
 * head width dh; mf the member's offset (floats), base its head's first
 * element in [T, E] rows, pb its [N, N] block in [B, nh, N, N] */
struct atc_win_t {
  int N, NP, h, b, dh;
  size_t mf, base, pb;
  __device__ __forceinline__ atc_win_t(int K, int E, int nh, cuda_pz_t pz, int h_ = -1) {
    N = 3 * K, NP = atc_np(N), h = h_ < 0 ? (int)blockIdx.x : h_, b = (int)blockIdx.y, dh = E / nh;
    mf = dt_mf(pz), base = mf + (size_t)b * N * E + (size_t)h * dh, pb = mf + ((size_t)b * nh + h) * N * N;
  }
};

/* s[m] = A B^T for the slab's 16 rows of A (rows la apart) and the tiles j
 * = hf + WS m < jn of B (rows lb apart, B [key][c]) over c < dh: [row g][col
 * t] reads of both */
static __device__ __forceinline__ void prod_abt(const float *A, int la, const float *B, int lb, int dh, int jn,
                                                const atc_warp_t &W, float (&s)[DT_ATC_MT][4]) {
  const int g = W.g, t = W.t;
#pragma unroll
  for (int m = 0; m < DT_ATC_MT; m++) s[m][0] = s[m][1] = s[m][2] = s[m][3] = 0;
  for (int kk = 0; kk < dh; kk += 8) {
    const unsigned a[4] = {__float_as_uint(A[g * la + kk + t]), __float_as_uint(A[(g + 8) * la + kk + t]),
                           __float_as_uint(A[g * la + kk + t + 4]), __float_as_uint(A[(g + 8) * la + kk + t + 4])};
#pragma unroll
    for (int m = 0; m < DT_ATC_MT; m++) {
      const int j = W.hf + DT_ATC_WS * m;
      if (j < jn)
        mma_tf32(s[m], a, __float_as_uint(B[(8 * j + g) * lb + kk + t]),
                 __float_as_uint(B[(8 * j + g) * lb + kk + t + 4]));
    }
  }
}

/* o[u] = A V[:, tile ct_u] for the slab's 16 rows of A over keys 8 k0 .. 8
 * k1 - 1 of V (rows lv apart, [row t][col g] reads), the warp's column tiles
 * ct_u = hf + WS (u0 + u) < dh / 8. TA 0: A's rows are the slab's rows of Aw
 * (rows lw apart, [row g][col t] reads); TA 1: A = Aw^T, its rows columns r0
 * .. r0 + 15 of Aw ([row t][col g] reads). SPLIT (TA 1): Aw in fp32, each
 * element taken as the sum of two TF32 values hi + lo (lo = tf32(x - hi): x
 * to about 2^-22), the lo products first. dk's product takes dS so: a row
 * of dS sums to zero in exact arithmetic (the softmax's shift invariance),
 * and so do the key bias's gradient (the column sums of dk); dS rounded to
 * TF32 would leave 2^-12 of its row's magnitude there, which AdamW turns
 * into full-size steps of the key bias (measured: the 100-step learner
 * test's parameters 6.6e-3 from the CPU's, 1.3e-4 with the FFMA attention). */
template <int TA, int SPLIT>
static __device__ __forceinline__ void prod_av(const float *Aw, int lw, const float *V, int lv, int dh, int u0, int k0,
                                               int k1, const atc_warp_t &W, float (&o)[4][4]) {
  const int g = W.g, t = W.t, r0 = W.r0;
#pragma unroll
  for (int u = 0; u < 4; u++) o[u][0] = o[u][1] = o[u][2] = o[u][3] = 0;
  for (int ks = k0; ks < k1; ks++) {
    const int kk = 8 * ks;
    const float x[4] = {TA ? Aw[(kk + t) * lw + r0 + g] : Aw[g * lw + kk + t],
                        TA ? Aw[(kk + t) * lw + r0 + g + 8] : Aw[(g + 8) * lw + kk + t],
                        TA ? Aw[(kk + t + 4) * lw + r0 + g] : Aw[g * lw + kk + t + 4],
                        TA ? Aw[(kk + t + 4) * lw + r0 + g + 8] : Aw[(g + 8) * lw + kk + t + 4]};
    unsigned a[4], lo[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      a[e] = SPLIT ? f2tf32(x[e]) : __float_as_uint(x[e]);
      lo[e] = SPLIT ? f2tf32(x[e] - __uint_as_float(a[e])) : 0u;
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int c = 8 * (W.hf + DT_ATC_WS * (u0 + u));
      if (c < dh) {
        const unsigned b0 = __float_as_uint(V[(kk + t) * lv + c + g]),
                       b1 = __float_as_uint(V[(kk + t + 4) * lv + c + g]);
        if (SPLIT) mma_tf32(o[u], lo, b0, b1);
        mma_tf32(o[u], a, b0, b1);
      }
    }
  }
}

/* the slab's rows r0 + g, r0 + g + 8 of o (the warp's column tiles from u0)
 * times scale into X's rows (< N) of head base, as float2s */
static __device__ __forceinline__ void store_rows(const float (&o)[4][4], float *X, size_t base, int E, int N, int dh,
                                                  int u0, float scale, const atc_warp_t &W) {
  const int i0 = W.r0 + W.g, i1 = i0 + 8;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const int c = 8 * (W.hf + DT_ATC_WS * (u0 + u)) + 2 * W.t;
    if (c >= dh) break;
    if (i0 < N)
      *reinterpret_cast<float2 *>(X + base + (size_t)i0 * E + c) = make_float2(o[u][0] * scale, o[u][1] * scale);
    if (i1 < N)
      *reinterpret_cast<float2 *>(X + base + (size_t)i1 * E + c) = make_float2(o[u][2] * scale, o[u][3] * scale);
  }
}

/* x0, x1 (this lane's partials of rows g, g + 8 of the slab) combined over
 * the quad and the slab's WS warps through red ([NS WS][16]), by op */
template <int MAX>
static __device__ __forceinline__ void slab_reduce(float &x0, float &x1, float *red, const atc_warp_t &W) {
  for (int o = 1; o < 4; o <<= 1) {
    const float y0 = __shfl_xor_sync(0xffffffffu, x0, o), y1 = __shfl_xor_sync(0xffffffffu, x1, o);
    x0 = MAX ? fmaxf(x0, y0) : x0 + y0, x1 = MAX ? fmaxf(x1, y1) : x1 + y1;
  }
  float *mine = red + 16 * (W.s + W.NS * W.hf);
  if (W.t == 0) mine[W.g] = x0, mine[W.g + 8] = x1;
  __syncthreads();
  x0 = red[16 * W.s + W.g], x1 = red[16 * W.s + W.g + 8]; /* the parts in order: the same sums in every warp */
  for (int p = 1; p < DT_ATC_WS; p++) {
    const float *r = red + 16 * (W.s + W.NS * p);
    x0 = MAX ? fmaxf(x0, r[W.g]) : x0 + r[W.g], x1 = MAX ? fmaxf(x1, r[W.g + 8]) : x1 + r[W.g + 8];
  }
}

/* the warp's tiles x of a score-sized [16][NP] slab: into Xg's [N, N] rows
 * (fp32; those within the window) and rounded to TF32 into the slab Sw
 * (rows lp apart) for the product that takes it */
static __device__ __forceinline__ void put_slab(const float (&x)[DT_ATC_MT][4], float *Xg, int N, int NP, float *Sw,
                                                int lp, const atc_warp_t &W, float *Sf = nullptr, int lf = 0) {
#pragma unroll
  for (int m = 0; m < DT_ATC_MT; m++) {
    const int j = W.hf + DT_ATC_WS * m;
    if (8 * j >= NP) break;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = 8 * j + 2 * W.t + (e & 1), r = e < 2 ? W.g : W.g + 8, i = W.r0 + r;
      if (i < N && c < N) Xg[(size_t)i * N + c] = x[m][e];
      Sw[r * lp + c] = __uint_as_float(f2tf32(x[m][e]));
      if (Sf) Sf[i * lf + c] = x[m][e]; /* fp32, the whole [NP][NP] (zeros outside the window) */
    }
  }
}

/* X's slab rows (window w) = scale Sw V over the keys the slab's queries see */
static __device__ __forceinline__ void out_rows(const float *Sw, int lp, const float *V, int lv, float scale, float *X,
                                                int E, const atc_win_t &w, const atc_warp_t &W) {
  const int kn = min(w.NP, W.r0 + 16) / 8;
  for (int u0 = 0; 8 * (W.hf + DT_ATC_WS * u0) < w.dh; u0 += 4) {
    float o[4][4];
    prod_av<0, 0>(Sw, lp, V, lv, w.dh, u0, 0, kn, W, o);
    store_rows(o, X, w.base, E, w.N, w.dh, u0, scale, W);
  }
}

/* grid (nh, B), NP / 16 x WS warps. P [B, nh, N, N] fp32, att [T, E] */
__global__ void __launch_bounds__(DT_ATC_NT)
    dt_attn_tc_kernel(const float *q, const float *k, const float *v, const float *mask, int K, int E, int nh,
                      float scale, float *P, float *att, cuda_pz_t pz, int rin) {
  PDL_ENTER();
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const atc_win_t w(K, E, nh, pz);
  const int N = w.N, NP = w.NP, dh = w.dh;
  const size_t base = w.base;
  const atc_warp_t W(NP);
  const int lq = lda_(dh), lv = ldt_(dh), g = W.g, t = W.t, r0 = W.r0;
  float *Qs = sm, *Ks = Qs + NP * lq, *Vs = Ks + NP * lq, *red = Vs + NP * lv;
  int *Mv = reinterpret_cast<int *>(red + ATC_RED);
  const int wide = dh >= NP, lp = wide ? lq : lda_(NP);
  float *Pw = wide ? Qs + r0 * lq : reinterpret_cast<float *>(Mv + NP) + r0 * lp; /* the slab's P */
  copy_rows(q, base, N, NP, dh, E, Qs, lq);
  copy_rows(k, base, N, NP, dh, E, Ks, lq);
  copy_rows(v, base, N, NP, dh, E, Vs, lv);
  for (int j = threadIdx.x; j < NP; j += blockDim.x) Mv[j] = j < N && mask[w.mf + (size_t)w.b * K + j / 3] != 0;
  landed();
  if (!rin) round_rows(NP, dh, Qs, lq), round_rows(NP, dh, Ks, lq), round_rows(NP, dh, Vs, lv);
  __syncthreads();
  const int jn = min(2 * W.s + 2, NP / 8); /* the key tiles the slab's queries see */
  float s[DT_ATC_MT][4];
  prod_abt(Qs + r0 * lq, lq, Ks, lq, dh, jn, W, s);
  /* each row's softmax over the keys it sees (-inf elsewhere), in fp32 */
  const int i0 = r0 + g, i1 = i0 + 8, q0 = Mv[i0], q1 = Mv[i1];
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int m = 0; m < DT_ATC_MT; m++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int j = W.hf + DT_ATC_WS * m, c = 8 * j + 2 * t + (e & 1), i = e < 2 ? i0 : i1;
      const int seen = j < jn && c <= i && Mv[c] && (e < 2 ? q0 : q1);
      s[m][e] = seen ? s[m][e] * scale : -INFINITY;
      if (e < 2)
        mx0 = fmaxf(mx0, s[m][e]);
      else
        mx1 = fmaxf(mx1, s[m][e]);
    }
  slab_reduce<1>(mx0, mx1, red, W); /* also: every warp's Q reads done (Pw may lie on them) */
  float sum0 = 0, sum1 = 0;
#pragma unroll
  for (int m = 0; m < DT_ATC_MT; m++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const float x = s[m][e];
      s[m][e] = x == -INFINITY ? 0.0f : expf(x - (e < 2 ? mx0 : mx1));
      if (e < 2)
        sum0 += s[m][e];
      else
        sum1 += s[m][e];
    }
  slab_reduce<0>(sum0, sum1, red + ATC_RED / 2, W);
#pragma unroll
  for (int m = 0; m < DT_ATC_MT; m++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[m][e] = (e < 2 ? q0 : q1) ? s[m][e] / (e < 2 ? sum0 : sum1) : 0.0f;
  put_slab(s, P + w.pb, N, NP, Pw, lp, W);
  __syncthreads(); /* the slab's P from its WS warps */
  /* att rows = P V (a padded query's P row is zeros, so its row is zeros) */
  out_rows(Pw, lp, Vs, lv, 1.0f, att, E, w, W);
}

/* the backward's first half for the block's window, dO, V (rows la apart)
 * and K (lt) staged and rounded at sm as dt_attn_tc_bwd_q_kernel lays them
 * out: dP = dO V^T, dS = P (dP - sum_j P dP) (fp32) into dS (and, ONE, into
 * Sf [NP][lf] in fp32 for the second half), dq = scale dS K. P's rows from
 * P in global memory, or (ONE) from Pf ([NP][lf], fp32, zeros outside the
 * window): the same floats. With ONE the block barrier after dS also ends
 * every read of Pf; fin (every thread) then runs before dq's product. */
template <int ONE, typename Fin>
static __device__ __forceinline__ void bwd_q_body(float *sm, const float *P, const float *Pf, float *Sf, int lf,
                                                  float scale, float *dS, float *dq, int E, const atc_win_t &w,
                                                  const atc_warp_t &W, Fin fin) {
  const int N = w.N, NP = w.NP, dh = w.dh;
  const size_t pb = w.pb;
  const int la = lda_(dh), lt = ldt_(dh), g = W.g, t = W.t, r0 = W.r0;
  float *Ds = sm, *Vs = Ds + NP * la, *Ks = Vs + NP * la, *red = Ks + NP * lt;
  const int wide = dh >= NP, lp = wide ? la : lda_(NP);
  float *Sw = wide ? Ds + r0 * la : red + ATC_RED + NP + r0 * lp; /* the slab's dS */
  const int jn = min(2 * W.s + 2, NP / 8);
  float s[DT_ATC_MT][4];
  prod_abt(Ds + r0 * la, la, Vs, la, dh, jn, W, s);
  /* P's rows (zeros outside the window), each row's sum of P dP */
  float pr[DT_ATC_MT][4], dot0 = 0, dot1 = 0;
#pragma unroll
  for (int m = 0; m < DT_ATC_MT; m++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int j = W.hf + DT_ATC_WS * m, c = 8 * j + 2 * t + (e & 1), i = r0 + (e < 2 ? g : g + 8);
      pr[m][e] = j < jn && i < N && c < N ? (ONE ? Pf[i * lf + c] : P[pb + (size_t)i * N + c]) : 0.0f;
      const float d = pr[m][e] * s[m][e];
      if (e < 2)
        dot0 += d;
      else
        dot1 += d;
    }
  slab_reduce<0>(dot0, dot1, red, W); /* also: every warp's dO reads done (Sw may lie on them) */
#pragma unroll
  for (int m = 0; m < DT_ATC_MT; m++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[m][e] = pr[m][e] * (s[m][e] - (e < 2 ? dot0 : dot1));
  put_slab(s, dS + pb, N, NP, Sw, lp, W, ONE ? Sf : nullptr, lf);
  __syncthreads(); /* the slab's dS from its WS warps */
  fin();
  out_rows(Sw, lp, Ks, lt, scale, dq, E, w, W);
}

/* the second half for the block's window, Q and dO (rows lt apart) and P
 * (ln) staged and rounded, dS (ln) in fp32: dk = scale dS^T Q, dv = P^T dO,
 * each key slab r0 over the queries from r0 on */
static __device__ __forceinline__ void bwd_kv_body(const float *Qs, const float *Ds, const float *Ps, const float *Ss,
                                                   int lt, int ln, float scale, float *dk, float *dv, int E,
                                                   const atc_win_t &w, const atc_warp_t &W) {
  const int k0 = W.r0 / 8, k1 = w.NP / 8; /* queries from the slab's first key on */
  for (int u0 = 0; 8 * (W.hf + DT_ATC_WS * u0) < w.dh; u0 += 4) {
    float o[4][4];
    prod_av<1, 1>(Ss, ln, Qs, lt, w.dh, u0, k0, k1, W, o);
    store_rows(o, dk, w.base, E, w.N, w.dh, u0, scale, W);
    prod_av<1, 0>(Ps, ln, Ds, lt, w.dh, u0, k0, k1, W, o);
    store_rows(o, dv, w.base, E, w.N, w.dh, u0, 1.0f, W);
  }
}

/* grid (nh, B), warps as the forward's, slab r0 of queries: bwd_q_body */
__global__ void __launch_bounds__(DT_ATC_NT)
    dt_attn_tc_bwd_q_kernel(const float *P, const float *datt, const float *k, const float *v, int K, int E, int nh,
                            float scale, float *dS, float *dq, cuda_pz_t pz, int rin) {
  PDL_ENTER();
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const atc_win_t w(K, E, nh, pz);
  const int N = w.N, NP = w.NP, dh = w.dh;
  const atc_warp_t W(NP);
  const int la = lda_(dh), lt = ldt_(dh);
  float *Ds = sm, *Vs = Ds + NP * la, *Ks = Vs + NP * la;
  copy_rows(datt, w.base, N, NP, dh, E, Ds, la);
  copy_rows(v, w.base, N, NP, dh, E, Vs, la);
  copy_rows(k, w.base, N, NP, dh, E, Ks, lt);
  landed();
  if (!rin) round_rows(NP, dh, Ds, la), round_rows(NP, dh, Vs, la), round_rows(NP, dh, Ks, lt);
  __syncthreads();
  bwd_q_body<0>(sm, P, nullptr, nullptr, 0, scale, dS, dq, E, w, W, [] {});
}

/* grid (nh, B), warps as the forward's, slab r0 of keys: dk = scale dS^T Q,
 * dv = P^T dO, over the queries from r0 on */
__global__ void __launch_bounds__(DT_ATC_NT)
    dt_attn_tc_bwd_kv_kernel(const float *P, const float *dS, const float *q, const float *datt, int K, int E, int nh,
                             float scale, float *dk, float *dv, cuda_pz_t pz, int rin) {
  PDL_ENTER();
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const atc_win_t w(K, E, nh, pz);
  const int N = w.N, NP = w.NP, dh = w.dh;
  const size_t base = w.base, pb = w.pb;
  const atc_warp_t W(NP);
  const int lt = ldt_(dh), ln = ldt_(NP);
  float *Qs = sm, *Ds = Qs + NP * lt, *Ps = Ds + NP * lt, *Ss = Ps + NP * ln;
  copy_rows(q, base, N, NP, dh, E, Qs, lt);
  copy_rows(datt, base, N, NP, dh, E, Ds, lt);
  copy_nn(P, pb, N, NP, Ps, ln);
  copy_nn(dS, pb, N, NP, Ss, ln);
  landed();
  if (!rin) round_rows(NP, dh, Qs, lt), round_rows(NP, dh, Ds, lt);
  round_nn(NP, Ps, ln); /* dS stays fp32 (SPLIT) */
  __syncthreads();
  bwd_kv_body(Qs, Ds, Ps, Ss, lt, ln, scale, dk, dv, E, w, W);
}

/* both halves in one launch (dt_attn_tc_bwd's rule): the window's operands
 * all staged at once (dO twice, in each half's layout), dS handed from the
 * first half to the second in shared memory; the same products on the same
 * staged floats as the two launches, so the same bits */
__global__ void __launch_bounds__(DT_ATC_NT)
    dt_attn_tc_bwd_kernel(const float *P, const float *datt, const float *q, const float *k, const float *v, int K,
                          int E, int nh, float scale, float *dS, float *dq, float *dk, float *dv, cuda_pz_t pz,
                          int rin) {
  PDL_ENTER();
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const atc_win_t w(K, E, nh, pz);
  const int N = w.N, NP = w.NP, dh = w.dh;
  const atc_warp_t W(NP);
  const int la = lda_(dh), lt = ldt_(dh), ln = ldt_(NP);
  float *Ds = sm, *Vs = Ds + NP * la, *Ks = Vs + NP * la; /* the first half's, as dt_attn_tc_bwd_q_kernel's */
  float *Qs = sm + bq_floats(NP, dh), *Dt = Qs + NP * lt, *Ps = Dt + NP * lt, *Ss = Ps + NP * ln; /* the second's */
  copy_rows(datt, w.base, N, NP, dh, E, Ds, la);
  copy_rows(v, w.base, N, NP, dh, E, Vs, la);
  copy_rows(k, w.base, N, NP, dh, E, Ks, lt);
  copy_rows(q, w.base, N, NP, dh, E, Qs, lt);
  copy_rows(datt, w.base, N, NP, dh, E, Dt, lt);
  copy_nn(P, w.pb, N, NP, Ps, ln);
  landed();
  if (!rin) {
    round_rows(NP, dh, Ds, la), round_rows(NP, dh, Vs, la), round_rows(NP, dh, Ks, lt);
    round_rows(NP, dh, Qs, lt), round_rows(NP, dh, Dt, lt);
  }
  __syncthreads();
  /* P in fp32 for the first half, then rounded in place for dv's product */
  bwd_q_body<1>(sm, P, Ps, Ss, ln, scale, dS, dq, E, w, W, [&] { round_nn(NP, Ps, ln); });
  __syncthreads(); /* Ps rounded, Ss whole */
  bwd_kv_body(Qs, Dt, Ps, Ss, lt, ln, scale, dk, dv, E, w, W);
}

/* the thread-block cluster's barrier (every thread of both blocks), in two
 * halves: arrive (release: this thread's writes, shared memory of the
 * other block's included, seen by the threads that wait; relaxed: no
 * writes to hand over, no fence) and wait (acquire); each thread waits
 * once between two arrivals */
static __device__ __forceinline__ void pair_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
static __device__ __forceinline__ void pair_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
static __device__ __forceinline__ void pair_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

/* the backward as a pair of blocks a window (a cluster of 2 along x: grid
 * (2 nh, B), block 2 h + r): block 0 stages dO, V, K and P (fp32) and runs
 * the first half (dS, dq) as the one-launch form does, writing dS in fp32
 * straight into block 1's shared memory; block 1 stages Q, dO and P
 * (rounded), runs dv = P^T dO meanwhile (it needs no dS), then waits for dS
 * and runs dk = scale dS^T Q. The same products on the same staged floats
 * as both other forms, so the same bits; the window's four products run as
 * two chains of two on two SMs, each staging half of what the one-launch
 * form stages. The cluster's first barrier (both blocks started) comes
 * before any write into the other block's shared memory, its second
 * between dS's writes and block 1's reads (and before block 0 leaves). */
__global__ void __launch_bounds__(DT_ATC_NT)
    dt_attn_tc_bwd_pair_kernel(const float *P, const float *datt, const float *q, const float *k, const float *v,
                               int K, int E, int nh, float scale, float *dS, float *dq, float *dk, float *dv,
                               cuda_pz_t pz, int rin) {
  PDL_ENTER();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ float4 sm4[];
  float *sm = reinterpret_cast<float *>(sm4);
  const int r = (int)(blockIdx.x & 1u);
  const atc_win_t w(K, E, nh, pz, (int)(blockIdx.x >> 1));
  const int N = w.N, NP = w.NP, dh = w.dh;
  const atc_warp_t W(NP);
  const int la = lda_(dh), lt = ldt_(dh), ln = ldt_(NP);
  if (r == 0) {
    float *Ds = sm, *Vs = Ds + NP * la, *Ks = Vs + NP * la, *Pf = sm + bq_floats(NP, dh);
    copy_rows(datt, w.base, N, NP, dh, E, Ds, la);
    copy_rows(v, w.base, N, NP, dh, E, Vs, la);
    copy_rows(k, w.base, N, NP, dh, E, Ks, lt);
    copy_nn(P, w.pb, N, NP, Pf, ln);
    pair_arrive_relaxed(); /* this block started */
    landed();
    if (!rin) round_rows(NP, dh, Ds, la), round_rows(NP, dh, Vs, la), round_rows(NP, dh, Ks, lt);
    __syncthreads();
    pair_wait(); /* both started: block 1's shared memory is there */
    namespace cg = cooperative_groups;
    float *Sf = cg::this_cluster().map_shared_rank(sm + 2 * NP * lt + NP * ln, 1); /* block 1's Ss */
    bwd_q_body<1>(sm, P, Pf, Sf, ln, scale, dS, dq, E, w, W, [] { pair_arrive(); });
    pair_wait();
  } else {
    float *Qs = sm, *Dt = Qs + NP * lt, *Ps = Dt + NP * lt, *Ss = Ps + NP * ln;
    copy_rows(q, w.base, N, NP, dh, E, Qs, lt);
    copy_rows(datt, w.base, N, NP, dh, E, Dt, lt);
    copy_nn(P, w.pb, N, NP, Ps, ln);
    pair_arrive_relaxed();
    landed();
    if (!rin) round_rows(NP, dh, Qs, lt), round_rows(NP, dh, Dt, lt);
    round_nn(NP, Ps, ln);
    __syncthreads();
    const int k0 = W.r0 / 8, k1 = NP / 8; /* queries from the slab's first key on */
    for (int u0 = 0; 8 * (W.hf + DT_ATC_WS * u0) < dh; u0 += 4) {
      float o[4][4];
      prod_av<1, 0>(Ps, ln, Dt, lt, dh, u0, k0, k1, W, o);
      store_rows(o, dv, w.base, E, N, dh, u0, 1.0f, W);
    }
    pair_wait();
    pair_arrive_relaxed();
    pair_wait(); /* block 0's dS in Ss */
    for (int u0 = 0; 8 * (W.hf + DT_ATC_WS * u0) < dh; u0 += 4) {
      float o[4][4];
      prod_av<1, 1>(Ss, ln, Qs, lt, dh, u0, k0, k1, W, o);
      store_rows(o, dk, w.base, E, N, dh, u0, scale, W);
    }
  }
#else
  (void)P, (void)datt, (void)q, (void)k, (void)v, (void)K, (void)E, (void)nh, (void)scale, (void)dS, (void)dq;
  (void)dk, (void)dv, (void)pz, (void)rin;
  __trap(); /* never launched: dt_attn_tc_init leaves attn_pair 0 where this kernel has no sm_90 code */
#endif
}

// launchers

int dt_attn_tc_init(const dt_layout_t *L, int *fits, int *one, int *pair) {
  *fits = 0, *one = 0, *pair = 0;
  const int N = 3 * L->K, NP = atc_np(N), dh = L->E / L->nh;
  if (NP > DT_ATC_NP || dh % 8) return 0;
  int dev, optin = 0, major = 0;
  CUDA_RET(cudaGetDevice(&dev));
  CUDA_RET(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  CUDA_RET(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  const size_t most = sizeof(float) * fwd_floats(NP, dh) > sizeof(float) * bq_floats(NP, dh)
                          ? sizeof(float) * fwd_floats(NP, dh)
                          : sizeof(float) * bq_floats(NP, dh);
  if (most > (size_t)optin || sizeof(float) * bkv_floats(NP, dh) > (size_t)optin) return 0;
  /* the device's whole opt-in, as dt_attn_init sets its kernels' */
  CUDA_RET(cuda_allow_optin(dt_attn_tc_kernel, optin));
  CUDA_RET(cuda_allow_optin(dt_attn_tc_bwd_q_kernel, optin));
  CUDA_RET(cuda_allow_optin(dt_attn_tc_bwd_kv_kernel, optin));
  *fits = 1;
  if (sizeof(float) * bwd_floats(NP, dh) <= (size_t)optin) {
    CUDA_RET(cuda_allow_optin(dt_attn_tc_bwd_kernel, optin));
    *one = 1;
  }
  /* the pair: thread-block clusters (an sm_90 device running this
   * kernel's sm_90 code, not its trap), and a cluster of two such blocks
   * the device can place */
  cudaFuncAttributes fa;
  CUDA_RET(cudaFuncGetAttributes(&fa, dt_attn_tc_bwd_pair_kernel));
  if (major >= 9 && fa.binaryVersion >= 90 && sizeof(float) * pair_floats(NP, dh) <= (size_t)optin) {
    CUDA_RET(cuda_allow_optin(dt_attn_tc_bwd_pair_kernel, optin));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 2, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(2, 1, 1), cfg.blockDim = dim3(DT_ATC_WS * 32 * NP / 16);
    cfg.dynamicSmemBytes = sizeof(float) * pair_floats(NP, dh), cfg.attrs = at, cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, dt_attn_tc_bwd_pair_kernel, &cfg) == cudaSuccess && clusters > 0)
      *pair = 1;
    (void)cudaGetLastError(); /* no cluster support: the other forms, no error left pending */
  }
  return 0;
}

int dt_attn_tc(const cuda_dt_t *d, const float *q, const float *k, const float *v, float *P, float *att,
               cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, NP = atc_np(3 * K), E = L->E, nh = L->nh, dh = E / nh;
  const float scale = 1.0f / sqrtf((float)dh);
  const dim3 grid = dt_grid(d, dim3((unsigned)nh, (unsigned)d->B));
  pdl_launch(dt_attn_tc_kernel, grid, DT_ATC_WS * 32 * NP / 16, sizeof(float) * fwd_floats(NP, dh), st, q, k, v,
             d->mask, K, E, nh, scale, P, att, d->pz, dt_attn_pre(d));
  return (int)cudaGetLastError();
}

int dt_attn_tc_bwd(const cuda_dt_t *d, const float *P, const float *datt, const float *q, const float *k,
                   const float *v, float *dS, float *dq, float *dk, float *dv, cudaStream_t st) {
  const dt_layout_t *L = &d->L;
  const int K = L->K, NP = atc_np(3 * K), E = L->E, nh = L->nh, dh = E / nh;
  const float scale = 1.0f / sqrtf((float)dh);
  const dim3 grid = dt_grid(d, dim3((unsigned)nh, (unsigned)d->B));
  const int form = dt_attn_tc_bwd_form(d), rin = dt_attn_pre(d);
  if (form == DT_ATC_PAIR) {
    pdl_launch_cluster(dt_attn_tc_bwd_pair_kernel, 2u, dim3(2 * grid.x, grid.y, grid.z), DT_ATC_WS * 32 * NP / 16,
                       sizeof(float) * pair_floats(NP, dh), st, P, datt, q, k, v, K, E, nh, scale, dS, dq, dk, dv,
                       d->pz, rin);
    return (int)cudaGetLastError();
  }
  if (form == DT_ATC_ONE) {
    pdl_launch(dt_attn_tc_bwd_kernel, grid, DT_ATC_WS * 32 * NP / 16, sizeof(float) * bwd_floats(NP, dh), st, P, datt,
               q, k, v, K, E, nh, scale, dS, dq, dk, dv, d->pz, rin);
    return (int)cudaGetLastError();
  }
  pdl_launch(dt_attn_tc_bwd_q_kernel, grid, DT_ATC_WS * 32 * NP / 16, sizeof(float) * bq_floats(NP, dh), st, P, datt, k,
             v, K, E, nh, scale, dS, dq, d->pz, rin);
  CUDA_RET(cudaGetLastError());
  pdl_launch(dt_attn_tc_bwd_kv_kernel, grid, DT_ATC_WS * 32 * NP / 16, sizeof(float) * bkv_floats(NP, dh), st, P, dS, q,
             datt, K, E, nh, scale, dk, dv, d->pz, rin);
  return (int)cudaGetLastError();
}

/* the backward's form (dt_attn_tc_bwd): the pair where its blocks, two a
 * window (members' included), are at most the SM count (a lone learner at
 * batch 64; measured there, DEVICE_NOTES.md item 223: a device whose GPCs
 * place fewer clusters than half its SMs would run a second wave); else
 * one launch where the windows are at most the SM count (its ~210 KB of shared memory at the reference sizes allow one block an
 * SM, where each half alone allows two: kernels/dev/DEVICE_NOTES.md item
 * 209); else two launches. The tests force each (attn_form). */
int dt_attn_tc_bwd_form(const cuda_dt_t *d) {
  if (d->attn_form >= 0) {
    if (d->attn_form == DT_ATC_PAIR && d->attn_pair) return DT_ATC_PAIR;
    return d->attn_form != DT_ATC_TWO && d->attn_one ? DT_ATC_ONE : DT_ATC_TWO;
  }
  const long long windows = (long long)d->L.nh * d->B * d->pz.n;
  if (d->attn_pair && 2 * windows <= d->nsm) return DT_ATC_PAIR;
  return d->attn_one && windows <= d->nsm ? DT_ATC_ONE : DT_ATC_TWO;
}

extern "C" int cuda_dt_attn_run(cuda_dt_t *d, int *ws, int *form) {
  *ws = dt_attn_uses_tc(d) ? DT_ATC_WS : 0;
  *form = *ws ? dt_attn_tc_bwd_form(d) : DT_ATC_TWO;
  CUDA_RET(dt_attn(d, d->q, d->k, d->v, d->P, d->att, 0));
  CUDA_RET(dt_attn_bwd(d, d->P, d->datt, d->q, d->k, d->v, d->dS, d->dq, d->dk, d->dv, 0));
  return (int)cudaDeviceSynchronize();
}
