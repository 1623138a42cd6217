/*
 * dt_gemm.cu — the Decision Transformer's GEMMs (dt_cuda.cuh's dt_gemm,
 * dt_gemm_op, dt_gemm_wgrad; docs/learner.md §16, "The GEMMs"): the fp32
 * and mma.sync TF32 tiles, where each call runs (dt_wg_takes: these, or
 * dt_wgmma.cu's and dt_tma.cu's wgmma tiles), which TF32 operands their
 * producers rounded already (dt_tf32_ops), and the weight gradients'
 * split over the tokens with its in-order reduce.
 */
#include <math.h>
#include <string.h>

#include "cuda_check.h"
#include "dt_cuda.cuh"
#include "dt_gemm_big.cuh"
#include "gemm_dev.cuh"
#include "smem_optin.cuh"

// kernels

/* C[M, N] (=, or += with acc) op(A)[M, K] op(B)[K, N] + bias[N] + R[M, N]:
 * op(A)[m, k] = ta ? A[k lda + m] : A[m lda + k], op(B)[k, n] = tb ? B[n ldb +
 * k] : B[k ldb + n]. A block of 256 threads computes a 64 x 64 tile, a
 * thread 4 x 4 outputs (4 rows, 4 columns each contiguous: one 16-byte
 * shared load of each operand per k), k in chunks of 16, DG_S chunks a
 * round trip into DG_S shared-memory stages (the next DG_S read into
 * registers while these are computed); every output is summed in k order
 * (reruns are bit for bit). Split over k (the weight gradients,
 * dt_gemm_wgrad): block z sums k in [z kper, (z + 1) kper) into C + z cz,
 * plain (no bias, R or acc). With tensor_cores dt_wgmma.cu's wgmma tile
 * (Hopper; operands 16-byte aligned) or dt_gemm_tc_kernel below takes the
 * same calls. The epilogue is dt_ep_store's (dt_gemm_op: the plain sum, or
 * with the MLP's GELU or its derivative). In a population block z is member
 * z % n's part z / n (dt_cuda.cuh). */
#define DG_BM 64
#define DG_BK 16
#define DG_LD (DG_BM + 4)
#define DG_S 2 /* the fp32 tile's chunks a round trip: DG_S loaded into registers while the previous DG_S are
                * multiplied (kernels/dev/DEVICE_NOTES.md item 100: 2 at three blocks an SM beat 1 and 4) */

/* This thread's 4 elements of op(A)'s and op(B)'s chunk, along each source's
 * contiguous axis: element r of x = tid + 256 r. Its source, row (column)
 * bound and shared offset depend on the block alone, so they are computed
 * once (per chunk they were most of the loop's instructions: ncu counted
 * about 360 issued a warp a 16-deep chunk, DEVICE_NOTES.md item 93); a
 * chunk adds its k offset. TA, TB: ta, tb of dt_gemm. */
template <int TA, int TB>
struct dg_plan {
  const float *a, *b; /* element 0's sources at the block's first k (A or B where out of range: never read) */
  int ai, bi;         /* bit r: element r's row of op(A) / column of op(B) in range */
  int ak, bk;         /* element 0's k within the chunk */
  int as, bs;         /* element 0's offsets in the [k][row] and [k][column] stages */
};
/* element r from element 0: 16 rows (columns) on along a contiguous k, or
 * 4 k on along contiguous rows (columns) */
#define DG_RK(T) ((T) ? 4 : 0)  /* A's k step (TA), or B's (!TB) */
#define DG_RR(T) ((T) ? 0 : 16) /* A's row step (TA), or B's column step (!TB) */

template <int TA, int TB, int LD>
static __device__ __forceinline__ void dg_plan_init(dg_plan<TA, TB> &p, int M, int N, const float *A, int lda,
                                                    const float *B, int ldb, int m0, int n0, int klo) {
  const int tid = threadIdx.x;
  int m, k, n;
  if (TA) k = tid / DG_BM, m = tid % DG_BM; /* A[k lda + m]: m contiguous */
  else m = tid / DG_BK, k = tid % DG_BK;    /* A[m lda + k]: k contiguous */
  p.ak = k, p.as = k * LD + m, p.ai = 0;
#pragma unroll
  for (int r = 0; r < 4; r++) p.ai |= (m0 + m + DG_RR(TA) * r < M) << r;
  p.a = !(p.ai & 1) ? A : TA ? A + (size_t)(klo + k) * lda + m0 + m : A + (size_t)(m0 + m) * lda + klo + k;
  if (TB) n = tid / DG_BK, k = tid % DG_BK; /* B[n ldb + k]: k contiguous */
  else k = tid / DG_BM, n = tid % DG_BM;    /* B[k ldb + n]: n contiguous */
  p.bk = k, p.bs = k * LD + n, p.bi = 0;
#pragma unroll
  for (int r = 0; r < 4; r++) p.bi |= (n0 + n + DG_RR(!TB) * r < N) << r;
  p.b = !(p.bi & 1) ? B : TB ? B + (size_t)(n0 + n) * ldb + klo + k : B + (size_t)(klo + k) * ldb + n0 + n;
}

/* the chunk dk k past the block's first (at k0), zeros outside */
template <int TA, int TB>
static __device__ __forceinline__ void dg_load(const dg_plan<TA, TB> &p, int K, int lda, int ldb, int k0, int dk,
                                               float *ra, float *rb) {
#pragma unroll
  for (int r = 0; r < 4; r++) {
    /* element r's offset from element 0's source: rows (A) or k (B) apart */
    const size_t oa = TA ? (size_t)(dk + 4 * r) * lda : (size_t)(16 * r) * lda + dk;
    const size_t ob = TB ? (size_t)(16 * r) * ldb + dk : (size_t)(dk + 4 * r) * ldb;
    ra[r] = (p.ai >> r & 1) && k0 + p.ak + DG_RK(TA) * r < K ? p.a[oa] : 0.0f;
    rb[r] = (p.bi >> r & 1) && k0 + p.bk + DG_RK(!TB) * r < K ? p.b[ob] : 0.0f;
  }
}

/* into the stages (TC: rounded to TF32) */
template <int TC, int TA, int TB, int LD>
static __device__ __forceinline__ void dg_store(const dg_plan<TA, TB> &p, const float *ra, const float *rb, float *As,
                                                float *Bs) {
#pragma unroll
  for (int r = 0; r < 4; r++) {
    As[p.as + (TA ? 4 * LD : 16) * r] = TC ? __uint_as_float(f2tf32(ra[r])) : ra[r];
    Bs[p.bs + (TB ? 16 : 4 * LD) * r] = TC ? __uint_as_float(f2tf32(rb[r])) : rb[r];
  }
}

template <int TA, int TB>
__global__ void __launch_bounds__(256, 3) dt_gemm_kernel(int M, int N, int K, const float *A, int lda,
                                                      const float *B, int ldb, float *C, int ldc,
                                                      const float *bias, const float *R, int ldr, int acc,
                                                      int op, float *G, int kper, size_t cz, float *bpart,
                                                      cuda_pz_t pz) {
  pdl_wait();
  __shared__ __align__(16) float As[DG_S][DG_BK][DG_LD], Bs[DG_S][DG_BK][DG_LD];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * DG_BM, n0 = blockIdx.x * DG_BM, z = dt_z(pz), klo = z * kper;
  K = K - klo < kper ? K : klo + kper;
  float s[4][4] = {{0}}, ra[DG_S][4], rb[DG_S][4];
  /* with bpart (a split weight gradient), the blocks of column block 0 also
   * sum op(A)'s rows over the part's k (the bias gradient's part: dy's
   * columns over the part's tokens): thread tid the row tid % 64 over the
   * quarter tid / 64 of each round's DG_S chunks (8 k, in order), the four
   * quarters added in order at the end; part z's row m0 + r at bpart[z M +
   * m0 + r]. Only the weight gradients' form (TA 1) compiles it: the
   * others keep their registers (the sums cost TA 0, TB 0 a spill). */
  static_assert(DG_S == 2 && DG_BK == 16, "a round is four quarters of 8 k: two 16-k chunks");
  const int bsum = TA == 1 && bpart != NULL && blockIdx.x == 0, bq = tid / DG_BM, br = tid % DG_BM;
  float bs = 0.0f;
  dg_plan<TA, TB> pl;
  dg_plan_init<TA, TB, DG_LD>(pl, M, N, dt_off(A, dt_moz(pz)), lda, dt_off(B, dt_moz(pz)), ldb, m0, n0, klo);
#pragma unroll
  for (int u = 0; u < DG_S; u++)
    if (klo + u * DG_BK < K) dg_load(pl, K, lda, ldb, klo + u * DG_BK, u * DG_BK, ra[u], rb[u]);
  for (int k0 = klo; k0 < K; k0 += DG_S * DG_BK) {
#pragma unroll
    for (int u = 0; u < DG_S; u++)
      if (k0 + u * DG_BK < K) dg_store<0, TA, TB, DG_LD>(pl, ra[u], rb[u], &As[u][0][0], &Bs[u][0][0]);
    __syncthreads();
    const int nx = k0 + DG_S * DG_BK; /* the next round's chunks in flight while these are multiplied */
#pragma unroll
    for (int u = 0; u < DG_S; u++)
      if (nx + u * DG_BK < K) dg_load(pl, K, lda, ldb, nx + u * DG_BK, nx + u * DG_BK - klo, ra[u], rb[u]);
    if (bsum && k0 + (bq >> 1) * DG_BK < K)
#pragma unroll
      for (int kk = 0; kk < 8; kk++) bs += As[bq >> 1][(bq & 1) * 8 + kk][br];
#pragma unroll
    for (int u = 0; u < DG_S; u++) {
      if (k0 + u * DG_BK >= K) break;
#pragma unroll
      for (int kk = 0; kk < DG_BK; kk++) {
        const float4 a = *(const float4 *)&As[u][kk][ty * 4], b = *(const float4 *)&Bs[u][kk][tx * 4];
        const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < 4; j++) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
      }
    }
    __syncthreads();
  }
  if (bsum) { /* the stages are free after the loop's last barrier */
    float *q = &As[0][0][0];
    q[bq * DG_BM + br] = bs;
    __syncthreads();
    if (tid < DG_BM && m0 + tid < M)
      dt_off(bpart, dt_moz(pz))[(size_t)z * M + m0 + tid] =
          ((q[tid] + q[DG_BM + tid]) + q[2 * DG_BM + tid]) + q[3 * DG_BM + tid];
  }
  /* the member's pointers from the parameters here, not held through the loop */
  pdl_go();
  const long long mo = dt_moz(pz);
  bias = dt_off0(bias, mo), R = dt_off0(R, mo), C = dt_off(C, mo) + dt_z(pz) * cz, G = dt_off0(G, mo);
  const int vec = dt_ep_vec<4>(C, ldc, bias, R, ldr, G);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int m = m0 + ty * 4 + i;
    if (m < M) dt_ep_storev<4>(s[i], m, n0 + tx * 4, N, vec, C, ldc, bias, R, ldr, acc, op, G);
  }
}

/* dt_gemm_kernel's product with TF32 operands (tensor_cores): the same tile,
 * chunks and stages, the operands rounded to TF32 as they enter shared
 * memory (gemm_dev.cuh's f2tf32, as the DQN's TF32 GEMMs round them), warp w
 * a 16 x 32 slab (rows 16 (w % 4), columns 32 (w / 4)) as four m16n8k8
 * mma.sync accumulators with fp32 sums. Shared rows DT_TLD apart put a
 * fragment's 32 reads (rows k8 + t4, columns g: lane 4 g + t4) in 32 banks.
 * The hardware's order within a k8 step is fixed, so reruns are bit for bit.
 * Measured against rounding at each fragment read with DG_BK-deep chunks in
 * 2 or 4 cp.async stages: those took 1,541-1,562 / 3,620-3,655 µs a DT step
 * at batch 64 / 256, this 1,491 / 3,324 (kernels/dev/DEVICE_NOTES.md item 91). */
#define DT_TLD (DG_BM + 8)

template <int TA, int TB>
__global__ void __launch_bounds__(256, 4) dt_gemm_tc_kernel(int M, int N, int K, const float *A, int lda,
                                                         const float *B, int ldb, float *C, int ldc,
                                                         const float *bias, const float *R, int ldr, int acc,
                                                         int op, float *G, int kper, size_t cz, float *bpart,
                                                         cuda_pz_t pz) {
  (void)bpart; /* dt_gemm_kernel's bias sums: never given here (dt_wgrad_fuses) */
  pdl_wait();
  __shared__ __align__(16) float As[2][DG_BK][DT_TLD], Bs[2][DG_BK][DT_TLD];
  const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int wr = 16 * ((tid / 32) % 4), wc = 32 * (tid / 128);
  const int m0 = blockIdx.y * DG_BM, n0 = blockIdx.x * DG_BM, z = dt_z(pz), klo = z * kper;
  K = K - klo < kper ? K : klo + kper;
  float s[16] = {0}, ra[4], rb[4];
  dg_plan<TA, TB> pl;
  dg_plan_init<TA, TB, DT_TLD>(pl, M, N, dt_off(A, dt_moz(pz)), lda, dt_off(B, dt_moz(pz)), ldb, m0, n0, klo);
  int buf = 0;
  if (klo < K) {
    dg_load(pl, K, lda, ldb, klo, 0, ra, rb);
    dg_store<1, TA, TB, DT_TLD>(pl, ra, rb, &As[0][0][0], &Bs[0][0][0]);
  }
  __syncthreads();
  for (int k0 = klo; k0 < K; k0 += DG_BK) {
    const int more = k0 + DG_BK < K;
    if (more) dg_load(pl, K, lda, ldb, k0 + DG_BK, k0 + DG_BK - klo, ra, rb);
#pragma unroll
    for (int k8 = 0; k8 < DG_BK; k8 += 8) {
      const unsigned a[4] = {__float_as_uint(As[buf][k8 + t4][wr + g]), __float_as_uint(As[buf][k8 + t4][wr + g + 8]),
                             __float_as_uint(As[buf][k8 + t4 + 4][wr + g]),
                             __float_as_uint(As[buf][k8 + t4 + 4][wr + g + 8])};
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int n = wc + 8 * j + g;
        mma_tf32(*reinterpret_cast<float(*)[4]>(&s[4 * j]), a, __float_as_uint(Bs[buf][k8 + t4][n]),
                 __float_as_uint(Bs[buf][k8 + t4 + 4][n]));
      }
    }
    if (more) dg_store<1, TA, TB, DT_TLD>(pl, ra, rb, &As[buf ^ 1][0][0], &Bs[buf ^ 1][0][0]);
    __syncthreads();
    buf ^= 1;
  }
  pdl_go();
  const long long mo = dt_moz(pz); /* as dt_gemm_kernel's */
  bias = dt_off0(bias, mo), R = dt_off0(R, mo), C = dt_off(C, mo) + dt_z(pz) * cz, G = dt_off0(G, mo);
  const int vec = dt_ep_vec<2>(C, ldc, bias, R, ldr, G);
#pragma unroll
  for (int e = 0; e < 16; e += 2) { /* accumulator e / 4 of the slab, its element e % 4 (mma_tf32's d) */
    const int c = e % 4, m = m0 + wr + g + 8 * (c >> 1), n = n0 + wc + 8 * (e / 4) + 2 * t4;
    float v[2] = {s[e], s[e + 1]};
    if (m < M) dt_ep_storev<2>(v, m, n, N, vec, C, ldc, bias, R, ldr, acc, op, G);
  }
}

/* dt_gemm_kernel's unsplit call on 128 x 128 tiles (dt_gemm_big.cuh: 8 x 8
 * sums a thread, the same sums in the same order, so the same bits) */
struct dtb_dev_sync {
  __device__ void operator()() const { __syncthreads(); }
};
struct dtb_dev_ep {
  float *C;
  int ldc;
  const float *bias, *R;
  int ldr, acc, op;
  float *G;
  int N, vec;
  __device__ void operator()(int m, int n, float (&v)[4]) const {
    dt_ep_storev<4>(v, m, n, N, vec, C, ldc, bias, R, ldr, acc, op, G);
  }
};

template <int TA, int TB>
__global__ void __launch_bounds__(DTB_NT, 2) dt_gemm_big_kernel(int M, int N, int K, const float *A, int lda,
                                                               const float *B, int ldb, float *C, int ldc,
                                                               const float *bias, const float *R, int ldr, int acc,
                                                               int op, float *G, cuda_pz_t pz) {
  pdl_wait();
  __shared__ __align__(16) dtb_stage_t As[2], Bs[2];
  const long long mo = dt_moz(pz);
  const int m0 = blockIdx.y * DTB_T, n0 = blockIdx.x * DTB_T;
  dtb_dev_sync sync;
  float s[8][8];
  dtb_mainloop<TA, TB>((int)threadIdx.x, M, N, K, dt_off(A, mo), lda, dt_off(B, mo), ldb, m0, n0, As, Bs, sync, s);
  pdl_go();
  dtb_dev_ep ep = {dt_off(C, mo), ldc, dt_off0(bias, mo), dt_off0(R, mo), ldr, acc, op, dt_off0(G, mo), N, 0};
  ep.vec = dt_ep_vec<4>(ep.C, ldc, ep.bias, ep.R, ldr, ep.G);
  dtb_epilogue((int)threadIdx.x, M, m0, n0, s, As, Bs, sync, ep);
}

/* 1 where an fp32 launch takes the 128 tile: unsplit, and its tiles (the
 * members' included) two an SM at least (DTB_MIN_BLOCKS); the 64 tile's 4x
 * the blocks fill the GPU better below that: a lone learner's 15,360-row
 * products at batch 256 (120 tiles) ran 2% slower on the 128 tile, 8
 * members' (960) 10% faster (kernels/dev/DEVICE_NOTES.md item 188). Either
 * tile gives the same bits, so members count here. The forward's rule (d->fwd:
 * no side stream's blocks beside it) also takes launches of one tile column
 * and DTB_FWD_MIN_BLOCKS to nsm tiles, one block an SM (dg_launch asks
 * d->big_one of dynamic shared memory): batch 256's products of N = 128,
 * -2.2 to -2.6% a step; W_1's forward at batch 64 (120 tiles, N = 512) lost
 * +1.6 to +2.0% on it (kernels/dev/DEVICE_NOTES.md items 203, 205). */
static int dt_big_takes(const cuda_dt_t *d, int M, int N, int K, int kper) {
  const long long tiles = (long long)((M + DTB_T - 1) / DTB_T) * ((N + DTB_T - 1) / DTB_T) * d->pz.n;
  if (d->tc || !d->big || kper < K) return 0;
  return tiles >= DTB_MIN_BLOCKS || (d->fwd && N <= DTB_T && tiles >= DTB_FWD_MIN_BLOCKS && tiles <= d->nsm);
}

int dt_wg_takes(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                int tb, int split) {
  if (!d->tc || !d->wg || !dt_wg_fits(M, N, K, A, lda, ta, B, ldb, tb)) return 0;
  /* the TMA tile wherever it fits: at one or two blocks an SM its ring
   * hides the round trips the register-staged tile waits for (item 127);
   * with more, the two tied while both rounded every chunk, and the TMA
   * tile is the one that skips what its producers rounded
   * (kernels/dev/DEVICE_NOTES.md items 128, 136) */
  if (!d->tma || d->pz.stride % 16) return 1;
  if (!split && dt_tma_fits(M, N, K, A, lda, ta, B, ldb, tb, &d->pz)) return 2;
  /* the weight gradients' form, split or not: the transposing TMA tile
   * (dt_gemm_tmt_kernel; kernels/dev/DEVICE_NOTES.md item 137) */
  return ta && !tb ? 3 : 1;
}

/* the dynamic shared memory (one) that a launch of at most nsm 128 tiles
 * asks, so that the block scheduler cannot stack two blocks on one SM while
 * others idle (the tile's own is static; half an SM's more leaves room for
 * one block); the opt-in that allows it on each of the tile's forms */
int dt_big_init(int *one, int *nsm) {
  int dev, optin = 0, per_sm = 0;
  CUDA_RET(cudaGetDevice(&dev));
  CUDA_RET(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  CUDA_RET(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  CUDA_RET(cudaDeviceGetAttribute(nsm, cudaDevAttrMultiProcessorCount, dev));
  CUDA_RET(cuda_allow_optin(dt_gemm_big_kernel<0, 0>, optin));
  CUDA_RET(cuda_allow_optin(dt_gemm_big_kernel<0, 1>, optin));
  CUDA_RET(cuda_allow_optin(dt_gemm_big_kernel<1, 0>, optin));
  CUDA_RET(cuda_allow_optin(dt_gemm_big_kernel<1, 1>, optin));
  *one = per_sm / 2;
  return 0;
}

int dt_pre(const cuda_dt_t *d) { return d->tc && d->tma && d->pre; }

/* 1 where p lies in [b, b + n) */
static int dt_in(const float *p, const float *b, size_t n) { return b && p >= b && p < b + n; }

int dt_tf32_ops(const cuda_dt_t *d, const float *A, const float *B) {
  if (!dt_pre(d)) return 3;
  const size_t T = (size_t)d->B * 3 * d->L.K, E = (size_t)d->L.E, NL = (size_t)d->L.L, W = NL * DT_WT_FLOATS * E * E;
  const float *x[2] = {A, B};
  int r = 0;
  for (int i = 0; i < 2; i++)
    if (!dt_in(x[i], d->wr, W) && !dt_in(x[i], d->wT, W) && !dt_in(x[i], d->h1, NL * T * E) &&
        !dt_in(x[i], d->h2, NL * T * E) && !dt_in(x[i], d->gl, NL * T * 4 * E))
      r |= 1 << i;
  return r;
}

/* one launch of the tile for tc, ta, tb */
static void dg_launch(const cuda_dt_t *d, int ta, int tb, dim3 grid, cudaStream_t st, int M, int N, int K,
                      const float *A, int lda, const float *B, int ldb, float *C, int ldc, const float *bias,
                      const float *R, int ldr, int acc, int op, float *G, int kper, size_t cz, float *bpart) {
  const int tc = d->tc, tile = dt_wg_takes(d, M, N, K, A, lda, ta, B, ldb, tb, kper < K);
  grid = dt_grid(d, grid);
  if (tile == 2 && !dt_tma_launch(d->tma, grid, st, M, N, K, A, lda, B, ldb, C, ldc, bias, R, ldr, acc, op, G, d->pz,
                                  dt_tf32_ops(d, A, B), d->nsm))
    return;
  if (tile == 3 && !dt_tmt_launch(d->tma, grid, st, M, N, K, A, lda, B, ldb, C, ldc, bias, R, ldr, acc, op, G, kper, cz,
                                  NULL, d->pz))
    return;
  if (tile) {
    dt_wg_launch(ta, tb, grid, st, M, N, K, A, lda, B, ldb, C, ldc, bias, R, ldr, acc, op, G, kper, cz, d->pz);
    return;
  }
  /* bpart (the bias parts) is for dt_gemm_kernel's split weight gradients
   * alone: a split launch never takes the tiles above or below */
  if (dt_big_takes(d, M, N, K, kper)) {
    const dim3 gb((unsigned)((N + DTB_T - 1) / DTB_T), (unsigned)((M + DTB_T - 1) / DTB_T), grid.z);
    const size_t one = (long long)gb.x * gb.y * gb.z <= d->nsm ? (size_t)d->big_one : 0;
#define DTB_GO(TA, TB) \
  pdl_launch(dt_gemm_big_kernel<TA, TB>, gb, DTB_NT, one, st, M, N, K, A, lda, B, ldb, C, ldc, bias, R, ldr, acc, op, G, d->pz)
    switch (2 * ta + tb) {
      case 0: DTB_GO(0, 0); break;
      case 1: DTB_GO(0, 1); break;
      case 2: DTB_GO(1, 0); break;
      default: DTB_GO(1, 1); break;
    }
#undef DTB_GO
    return;
  }
#define DG_GO(KER, TA, TB) \
  pdl_launch(KER<TA, TB>, grid, 256, 0, st, M, N, K, A, lda, B, ldb, C, ldc, bias, R, ldr, acc, op, G, kper, cz, \
             bpart, d->pz)
  switch (4 * tc + 2 * ta + tb) {
    case 0: DG_GO(dt_gemm_kernel, 0, 0); break;
    case 1: DG_GO(dt_gemm_kernel, 0, 1); break;
    case 2: DG_GO(dt_gemm_kernel, 1, 0); break;
    case 3: DG_GO(dt_gemm_kernel, 1, 1); break;
    case 4: DG_GO(dt_gemm_tc_kernel, 0, 0); break;
    case 5: DG_GO(dt_gemm_tc_kernel, 0, 1); break;
    case 6: DG_GO(dt_gemm_tc_kernel, 1, 0); break;
    default: DG_GO(dt_gemm_tc_kernel, 1, 1); break;
  }
#undef DG_GO
}

/* C[m, n] += the split-K parts' sums, in part order, by the first cblocks
 * of a problem's nb blocks; with db, db[m] += the bias parts' (bpart
 * [parts][M]) the same way by the blocks after them */
static __device__ __forceinline__ void dt_reduce_one(const float *part, int parts, int M, int N, float *C, int ldc,
                                                     int cblocks, int nb, const float *bpart, float *db, cuda_pz_t pz) {
  const size_t MN = (size_t)M * N;
  const long long mo = dt_mo(pz);
  if ((int)blockIdx.x >= cblocks) {
    bpart = dt_off(bpart, mo), db = dt_off(db, mo);
    for (int i = (blockIdx.x - cblocks) * blockDim.x + threadIdx.x; i < M; i += (nb - cblocks) * blockDim.x) {
      float s = 0;
      for (int z = 0; z < parts; z++) s += bpart[(size_t)z * M + i];
      db[i] += s;
    }
    return;
  }
  part = dt_off(part, mo), C = dt_off(C, mo);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < MN; i += (size_t)cblocks * blockDim.x) {
    float s = 0;
    for (int z = 0; z < parts; z++) s += part[z * MN + i];
    C[(i / N) * ldc + i % N] += s;
  }
}

__global__ void dt_splitk_reduce_kernel(const float *part, int parts, int M, int N, float *C, int ldc, int cblocks,
                                        const float *bpart, float *db, cuda_pz_t pz) {
  PDL_ENTER();
  dt_reduce_one(part, parts, M, N, C, ldc, cblocks, (int)gridDim.x, bpart, db, pz);
}

/* several weight gradients' reduces in one launch (dt_wgrad_flush): problem
 * blockIdx.y, each on its own first nb blocks, each output the sum it has
 * in a launch of its own */
__global__ void dt_splitk_reduce_n_kernel(const dt_red_t r, cuda_pz_t pz) {
  PDL_ENTER();
  const dt_red_one_t &q = r.p[blockIdx.y];
  if ((int)blockIdx.x >= q.nb) return;
  dt_reduce_one(q.part, q.parts, q.M, q.N, q.C, q.ldc, q.cblocks, q.nb, q.bpart, q.db, pz);
}

// launchers

int dt_gemm(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
            float *C, int ldc, const float *bias, const float *R, int ldr, int acc, cudaStream_t st) {
  return dt_gemm_op(d, M, N, K, A, lda, ta, B, ldb, tb, C, ldc, bias, R, ldr, acc, DT_EP_PLAIN, NULL, st);
}

int dt_gemm_op(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
               float *C, int ldc, const float *bias, const float *R, int ldr, int acc, int op, float *G,
               cudaStream_t st) {
  if (M <= 0 || N <= 0) return 0;
  const int rows = 65535 * DG_BM; /* grid.y's limit: M in chunks of this many rows */
  for (int m0 = 0; m0 < M; m0 += rows) {
    const int mm = M - m0 < rows ? M - m0 : rows;
    const dim3 grid((unsigned)((N + DG_BM - 1) / DG_BM), (unsigned)((mm + DG_BM - 1) / DG_BM));
    const float *a = ta ? A + m0 : A + (size_t)m0 * lda, *r = R ? R + (size_t)m0 * ldr : NULL;
    dg_launch(d, ta, tb, grid, st, mm, N, K, a, lda, B, ldb, C + (size_t)m0 * ldc, ldc, bias, r, ldr, acc, op,
              G ? G + (size_t)m0 * ldc : NULL, K, 0, NULL);
    CUDA_RET(cudaGetLastError());
  }
  return 0;
}

long long dt_wgrad_parts(int M, int N, int K, size_t cap, int depth) {
  /* about two blocks an SM (132 on an H200) over the tiles and the parts of
   * k, each part at least depth deep (dt_wgrad_depth); the split depends on
   * the shapes and the precision alone, so every call sums in the same
   * order */
  const long long tiles = (long long)((M + DG_BM - 1) / DG_BM) * ((N + DG_BM - 1) / DG_BM), MN = (long long)M * N;
  long long parts = (264 + tiles - 1) / tiles;
  if (parts > K / depth) parts = K / depth;
  if (parts > (long long)cap / MN) parts = (long long)cap / MN;
  return parts;
}

/* the parts and k a part of dt_gemm_wgrad's split (parts <= 1: unsplit) */
static long long dt_wgrad_split(const cuda_dt_t *d, int M, int N, int K, size_t cap, long long *kper) {
  long long parts = dt_wgrad_parts(M, N, K, cap, dt_wgrad_depth(d->tc));
  if (parts <= 1) return parts;
  *kper = ((K + parts - 1) / parts + DG_BK - 1) / DG_BK * DG_BK;
  return (K + *kper - 1) / *kper;
}

int dt_wgrad_fuses(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                   int tb, size_t cap) {
  long long kper = 0;
  const long long parts = dt_wgrad_split(d, M, N, K, cap, &kper);
  /* the bias parts after the product's, and room for dt_colsum's 64 chunks
   * there should the tile's maps not encode */
  return parts > 1 && (d->tc ? dt_wg_takes(d, M, N, K, A, lda, ta, B, ldb, tb, 1) == 3 : ta) &&
         parts * ((long long)M * N + M) + 64LL * M <= (long long)cap;
}

int dt_gemm_wgrad(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                  int tb, float *C, int ldc, float *db, float *part, size_t cap, cudaStream_t st) {
  return dt_gemm_wgrad_ex(d, M, N, K, A, lda, ta, B, ldb, tb, C, ldc, db, part, cap, st, NULL);
}

int dt_wgrad_flush(const cuda_dt_t *d, dt_red_t *r, cudaStream_t st) {
  if (r->n == 0) return 0;
  int nb = 0;
  for (int i = 0; i < r->n; i++) nb = r->p[i].nb > nb ? r->p[i].nb : nb;
  pdl_launch(dt_splitk_reduce_n_kernel, dt_grid(d, dim3((unsigned)nb, (unsigned)r->n)), 256, 0, st, *r, d->pz);
  r->n = 0;
  return (int)cudaGetLastError();
}

int dt_gemm_wgrad_ex(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B,
                     int ldb, int tb, float *C, int ldc, float *db, float *part, size_t cap, cudaStream_t st,
                     dt_red_t *defer) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  const long long MN = (long long)M * N;
  long long kper = 0;
  const long long parts = dt_wgrad_split(d, M, N, K, cap, &kper);
  if (parts <= 1) return dt_gemm(d, M, N, K, A, lda, ta, B, ldb, tb, C, ldc, NULL, NULL, 0, 1, st);
  const dim3 grid((unsigned)((N + DG_BM - 1) / DG_BM), (unsigned)((M + DG_BM - 1) / DG_BM), (unsigned)parts);
  float *bpart = db ? part + parts * MN : NULL;
  /* TF32 with db: the transposing TMA tile, which sums the bias parts as it
   * reads; fp32: the FFMA tile sums them as it multiplies (dt_wgrad_fuses) */
  if (!db || !d->tc ||
      dt_tmt_launch(d->tma, dt_grid(d, grid), st, M, N, K, A, lda, B, ldb, part, N, NULL, NULL, 0, 0, DT_EP_PLAIN,
                    NULL, (int)kper, (size_t)MN, bpart, d->pz)) {
    const int fuse = db && !d->tc && ta; /* dt_gemm_kernel sums op(A)'s rows in its TA 1 form */
    dg_launch(d, ta, tb, grid, st, M, N, K, A, lda, B, ldb, part, N, NULL, NULL, 0, 0, DT_EP_PLAIN, NULL, (int)kper,
              (size_t)MN, fuse ? bpart : NULL);
    if (db && !fuse) { /* the maps did not encode: the bias by column sums, in the scratch after the parts */
      CUDA_RET(dt_colsum(d, A, NULL, K, M, lda, db, 1, bpart, cap - (size_t)(parts * MN), st));
      db = NULL;
    }
  }
  CUDA_RET(cudaGetLastError());
  const long long blocks = (MN + 255) / 256 < 1024 ? (MN + 255) / 256 : 1024, bblocks = db ? (M + 255) / 256 : 0;
  if (defer && defer->n < DT_RED_MAX) {
    defer->p[defer->n++] = dt_red_one_t{part, bpart, C, db, (int)parts, M, N, ldc, (int)blocks, (int)(blocks + bblocks)};
    return 0;
  }
  pdl_launch(dt_splitk_reduce_kernel, dt_grid(d, dim3((unsigned)(blocks + bblocks))), 256, 0, st, part, (int)parts, M,
             N, C, ldc, (int)blocks, bpart, db, d->pz);
  return (int)cudaGetLastError();
}

extern "C" int cuda_dt_gemm_f32(int big, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                                int tb, float *C, int ldc, const float *bias, int acc, int op, const float *R, int ldr,
                                float *G, int *used) {
  cuda_dt_t d;
  memset(&d, 0, sizeof d);
  d.pz = cuda_pz_t{1, 0}, d.big = big > 0, d.fwd = big == 2; /* 2: as dt_forward issues it */
  if (d.fwd) CUDA_RET(dt_big_init(&d.big_one, &d.nsm));
  *used = dt_big_takes(&d, M, N, K, K);
  const int e = dt_gemm_op(&d, M, N, K, A, lda, ta, B, ldb, tb, C, ldc, bias, R, ldr, acc, op, G, 0);
  if (e) return e;
  return (int)cudaDeviceSynchronize();
}

extern "C" int cuda_dt_gemm_f32_wgrad(int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                                      int tb, float *C, int ldc, float *part, size_t cap, float *db, int *fused,
                                      int *kper) {
  cuda_dt_t d;
  memset(&d, 0, sizeof d);
  d.pz = cuda_pz_t{1, 0};
  long long kp = K;
  *kper = dt_wgrad_split(&d, M, N, K, cap, &kp) > 1 ? (int)kp : K;
  *fused = db && dt_wgrad_fuses(&d, M, N, K, A, lda, ta, B, ldb, tb, cap);
  const int e = dt_gemm_wgrad(&d, M, N, K, A, lda, ta, B, ldb, tb, C, ldc, *fused ? db : NULL, part, cap, 0);
  if (e) return e;
  if (db && !*fused) CUDA_RET(dt_colsum(&d, A, NULL, K, M, lda, db, 1, part, cap, 0));
  return (int)cudaDeviceSynchronize();
}
