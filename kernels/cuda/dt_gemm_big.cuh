/*
 * dt_gemm_big.cuh — the DT's fp32 GEMM on big tiles (dt_gemm_big_kernel,
 * dt_gemm.cu; docs/learner.md §16, "The GEMMs"), for the unsplit launches
 * with enough tiles to fill the GPU. One body, three shapes (dtb_cfg):
 *   - 128 x 128 outputs, 8 x 8 a thread, 256 threads (DTB_SQ);
 *   - 128 x 128 outputs, 8 x 16 a thread, 128 threads (DTB_WIDE);
 *   - 128 x 32 outputs, 8 x 4 a thread, 128 threads (DTB_NARROW).
 * A vendor fp32 GEMM (cuBLAS through torch) takes the last two shapes for
 * the DT's products at batch 256 (kernels/dev/DEVICE_NOTES.md item 193).
 *
 * The 64 x 64 tile (dt_gemm_kernel) gives a thread 4 x 4 sums: two 16-byte
 * shared loads per 16 FMAs, and those loads, not the FMAs, bound it
 * (kernels/dev/DEVICE_NOTES.md items 81, 113: a warp's 16-byte load costs
 * ~2.75 shared wavefronts). Here a thread's TM x TN sums take TM / 4 + TN /
 * 4 loads per TM TN FMAs. tx = tid % CT gives the columns 4 tx + 4 CT j (j
 * < TN / 4, four each), ty = tid / CT the rows 4 ty + 4 RT i likewise; k in
 * chunks of DTB_BK held in two shared stages: the next chunk's loads in
 * flight in registers while this one is multiplied, one barrier a chunk.
 *
 * Each output is summed over k in order, one fmaf a k from 0, exactly as
 * dt_gemm_kernel sums it: the tile's shape does not enter the sums, so
 * every tile gives the same bits (dt_gemm_kernel's zero products past K, up
 * to its 16-k chunk, change no sum but a -0, which only a negative product
 * underflowing to zero can make). The body is plain C++ on both sides
 * (__host__ __device__, the barrier and the epilogue passed in), so a CPU
 * test (tests/test-dt-gemm-big.cu) runs this source with a thread a CUDA
 * thread and holds each shape bit for bit against a sequential fmaf product.
 */
#ifndef DQN_CUDA_DT_GEMM_BIG_CUH
#define DQN_CUDA_DT_GEMM_BIG_CUH

#include <cuda_runtime.h>
#include <math.h>

#define DTB_BK 8             /* k a chunk */
#define DTB_MIN_BLOCKS 264   /* tiles a launch needs (members included) to take a big tile: two an SM */

#define DTB_FN __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define DTB_UNROLL _Pragma("unroll")
#else
#define DTB_UNROLL /* the host pass (the CPU test) leaves loops to the compiler */
#endif

/* a tile's shape: BM x BN outputs, TM x TN a thread (multiples of 4) */
template <int BM_, int BN_, int TM_, int TN_>
struct dtb_cfg {
  enum {
    BM = BM_, BN = BN_, TM = TM_, TN = TN_,
    RT = BM / TM, CT = BN / TN, NT = RT * CT, /* thread rows, columns, threads */
    LDA = BM + 4, LDB = BN + 4,               /* a stage row's floats: 16-byte aligned rows, 4 banks apart */
    EA = BM * DTB_BK / NT, EB = BN * DTB_BK / NT /* a chunk's elements of op(A), op(B) a thread */
  };
  static_assert(TM % 4 == 0 && TN % 4 == 0 && NT % DTB_BK == 0, "whole float4 groups, whole rows of a chunk");
  static_assert(BM * DTB_BK % NT == 0 && BN * DTB_BK % NT == 0, "a chunk spread evenly over the threads");
};
typedef dtb_cfg<128, 128, 8, 8> DTB_SQ;
typedef dtb_cfg<128, 128, 8, 16> DTB_WIDE;
typedef dtb_cfg<128, 32, 8, 4> DTB_NARROW;

/* this thread's element r (< E) of a chunk of an operand with D rows (op(A))
 * or columns (op(B)): T 0, k contiguous: row tid / BK + (NT / BK) r at k tid
 * % BK (a warp reads 32 / BK rows of 32 bytes); T 1, rows contiguous: row
 * (tid + NT r) % D at k (tid + NT r) / D (a warp reads 128 contiguous
 * bytes). op(A): T = TA (TA 1 is A[k lda + m]); op(B): T = !TB (TB 1 is
 * B[n ldb + k], k contiguous). */
template <int T, int D, int NT>
DTB_FN int dtb_row(int tid, int r) { return T ? (tid + NT * r) % D : tid / DTB_BK + NT / DTB_BK * r; }
template <int T, int D, int NT>
DTB_FN int dtb_k(int tid, int r) { return T ? (tid + NT * r) / D : tid % DTB_BK; }

/* the chunk at k0 into ra, rb (zeros outside the matrices) */
template <class C, int TA, int TB>
DTB_FN void dtb_load(int tid, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int m0, int n0,
                     int k0, float (&ra)[C::EA], float (&rb)[C::EB]) {
DTB_UNROLL
  for (int r = 0; r < C::EA; r++) {
    const int m = m0 + dtb_row<TA, C::BM, C::NT>(tid, r), ka = k0 + dtb_k<TA, C::BM, C::NT>(tid, r);
    ra[r] = m < M && ka < K ? A[TA ? (size_t)ka * lda + m : (size_t)m * lda + ka] : 0.0f;
  }
DTB_UNROLL
  for (int r = 0; r < C::EB; r++) {
    const int n = n0 + dtb_row<!TB, C::BN, C::NT>(tid, r), kb = k0 + dtb_k<!TB, C::BN, C::NT>(tid, r);
    rb[r] = n < N && kb < K ? B[TB ? (size_t)n * ldb + kb : (size_t)kb * ldb + n] : 0.0f;
  }
}

template <class C, int TA, int TB>
DTB_FN void dtb_store(int tid, const float (&ra)[C::EA], const float (&rb)[C::EB], float (*As)[C::LDA],
                      float (*Bs)[C::LDB]) {
DTB_UNROLL
  for (int r = 0; r < C::EA; r++) As[dtb_k<TA, C::BM, C::NT>(tid, r)][dtb_row<TA, C::BM, C::NT>(tid, r)] = ra[r];
DTB_UNROLL
  for (int r = 0; r < C::EB; r++) Bs[dtb_k<!TB, C::BN, C::NT>(tid, r)][dtb_row<!TB, C::BN, C::NT>(tid, r)] = rb[r];
}

/* s[i][j] (row 4 ty + i % 4 + 4 RT (i / 4), column 4 tx + j % 4 + 4 CT (j /
 * 4) of the tile at m0, n0) = op(A) op(B) over all K, in k order; As, Bs:
 * two stages each of DTB_BK rows; sync(): the block's barrier */
#pragma nv_exec_check_disable /* sync and ep are host functors on the CPU, device ones in the kernel */
template <class C, int TA, int TB, class SYNC>
DTB_FN void dtb_mainloop(int tid, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int m0,
                         int n0, float (*As)[DTB_BK][C::LDA], float (*Bs)[DTB_BK][C::LDB], SYNC &sync,
                         float (&s)[C::TM][C::TN]) {
  const int tx = tid % C::CT, ty = tid / C::CT;
DTB_UNROLL
  for (int i = 0; i < C::TM; i++)
DTB_UNROLL
    for (int j = 0; j < C::TN; j++) s[i][j] = 0.0f;
  float ra[C::EA], rb[C::EB];
  dtb_load<C, TA, TB>(tid, M, N, K, A, lda, B, ldb, m0, n0, 0, ra, rb);
  dtb_store<C, TA, TB>(tid, ra, rb, As[0], Bs[0]);
  sync();
  int buf = 0;
  for (int k0 = 0; k0 < K; k0 += DTB_BK) {
    const int more = k0 + DTB_BK < K;
    if (more) dtb_load<C, TA, TB>(tid, M, N, K, A, lda, B, ldb, m0, n0, k0 + DTB_BK, ra, rb);
DTB_UNROLL
    for (int kk = 0; kk < DTB_BK; kk++) {
      const float *ar = As[buf][kk], *br = Bs[buf][kk];
      float av[C::TM], bv[C::TN];
DTB_UNROLL
      for (int i = 0; i < C::TM / 4; i++) {
        const float4 a = *reinterpret_cast<const float4 *>(ar + 4 * ty + 4 * C::RT * i);
        av[4 * i] = a.x, av[4 * i + 1] = a.y, av[4 * i + 2] = a.z, av[4 * i + 3] = a.w;
      }
DTB_UNROLL
      for (int j = 0; j < C::TN / 4; j++) {
        const float4 b = *reinterpret_cast<const float4 *>(br + 4 * tx + 4 * C::CT * j);
        bv[4 * j] = b.x, bv[4 * j + 1] = b.y, bv[4 * j + 2] = b.z, bv[4 * j + 3] = b.w;
      }
DTB_UNROLL
      for (int i = 0; i < C::TM; i++)
DTB_UNROLL
        for (int j = 0; j < C::TN; j++) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
    }
    if (more) dtb_store<C, TA, TB>(tid, ra, rb, As[buf ^ 1], Bs[buf ^ 1]);
    sync();
    buf ^= 1;
  }
}

/* the chunk at k0 as asynchronous copies into one stage: cp(dst, src, ok)
 * copies *src to *dst, or writes 0 where !ok (src then any readable
 * address) */
#pragma nv_exec_check_disable
template <class C, int TA, int TB, class CP>
DTB_FN void dtb_issue(int tid, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int m0, int n0,
                      int k0, float (*As)[C::LDA], float (*Bs)[C::LDB], CP &cp) {
DTB_UNROLL
  for (int r = 0; r < C::EA; r++) {
    const int row = dtb_row<TA, C::BM, C::NT>(tid, r), k = dtb_k<TA, C::BM, C::NT>(tid, r);
    const int m = m0 + row, ka = k0 + k, ok = m < M && ka < K;
    cp(&As[k][row], ok ? A + (TA ? (size_t)ka * lda + m : (size_t)m * lda + ka) : A, ok);
  }
DTB_UNROLL
  for (int r = 0; r < C::EB; r++) {
    const int col = dtb_row<!TB, C::BN, C::NT>(tid, r), k = dtb_k<!TB, C::BN, C::NT>(tid, r);
    const int n = n0 + col, kb = k0 + k, ok = n < N && kb < K;
    cp(&Bs[k][col], ok ? B + (TB ? (size_t)n * ldb + kb : (size_t)kb * ldb + n) : B, ok);
  }
}

/* dtb_mainloop's sums with the chunks in a ring of S shared stages filled by
 * asynchronous copies (S - 1 chunks in flight while one is multiplied, no
 * registers held for them), one barrier a chunk: cp as dtb_issue's,
 * cp.commit() closes a chunk's copies, cp.template wait<n>() waits until at
 * most n chunks' copies of this thread are outstanding. The same sums in the
 * same order as dtb_mainloop's. */
#pragma nv_exec_check_disable
template <class C, int S, int TA, int TB, class SYNC, class CP>
DTB_FN void dtb_mainloop_ring(int tid, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int m0,
                              int n0, float (*As)[DTB_BK][C::LDA], float (*Bs)[DTB_BK][C::LDB], SYNC &sync, CP &cp,
                              float (&s)[C::TM][C::TN]) {
  const int tx = tid % C::CT, ty = tid / C::CT, nch = (K + DTB_BK - 1) / DTB_BK;
DTB_UNROLL
  for (int i = 0; i < C::TM; i++)
DTB_UNROLL
    for (int j = 0; j < C::TN; j++) s[i][j] = 0.0f;
  for (int c = 0; c < S - 1; c++) {
    if (c < nch) dtb_issue<C, TA, TB>(tid, M, N, K, A, lda, B, ldb, m0, n0, c * DTB_BK, As[c], Bs[c], cp);
    cp.commit();
  }
  for (int c = 0; c < nch; c++) {
    cp.template wait<S - 2>(); /* this thread's copies of chunk c have landed */
    sync();                    /* everyone's have, and everyone is past chunk c - 1's stage */
    const int f = c + S - 1;
    if (f < nch) dtb_issue<C, TA, TB>(tid, M, N, K, A, lda, B, ldb, m0, n0, f * DTB_BK, As[f % S], Bs[f % S], cp);
    cp.commit();
    const int buf = c % S;
DTB_UNROLL
    for (int kk = 0; kk < DTB_BK; kk++) {
      const float *ar = As[buf][kk], *br = Bs[buf][kk];
      float av[C::TM], bv[C::TN];
DTB_UNROLL
      for (int i = 0; i < C::TM / 4; i++) {
        const float4 a = *reinterpret_cast<const float4 *>(ar + 4 * ty + 4 * C::RT * i);
        av[4 * i] = a.x, av[4 * i + 1] = a.y, av[4 * i + 2] = a.z, av[4 * i + 3] = a.w;
      }
DTB_UNROLL
      for (int j = 0; j < C::TN / 4; j++) {
        const float4 b = *reinterpret_cast<const float4 *>(br + 4 * tx + 4 * C::CT * j);
        bv[4 * j] = b.x, bv[4 * j + 1] = b.y, bv[4 * j + 2] = b.z, bv[4 * j + 3] = b.w;
      }
DTB_UNROLL
      for (int i = 0; i < C::TM; i++)
DTB_UNROLL
        for (int j = 0; j < C::TN; j++) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
    }
  }
}

/* ep(m, n, v): the 4 outputs (m, n..n + 3) of row m < M, n a multiple of 4 */
#pragma nv_exec_check_disable
template <class C, class EP>
DTB_FN void dtb_epilogue(int tid, int M, int m0, int n0, float (&s)[C::TM][C::TN], EP &ep) {
  const int tx = tid % C::CT, ty = tid / C::CT;
DTB_UNROLL
  for (int i = 0; i < C::TM; i++) {
    const int m = m0 + 4 * ty + i % 4 + 4 * C::RT * (i / 4);
    if (m >= M) continue;
DTB_UNROLL
    for (int h = 0; h < C::TN / 4; h++) {
      float v[4] = {s[i][4 * h], s[i][4 * h + 1], s[i][4 * h + 2], s[i][4 * h + 3]};
      ep(m, n0 + 4 * tx + 4 * C::CT * h, v);
    }
  }
}

#endif
