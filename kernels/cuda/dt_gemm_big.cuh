/*
 * dt_gemm_big.cuh — the DT's fp32 GEMM on 128 x 128 tiles, 8 x 8 sums a
 * thread (dt_gemm_big_kernel, dt_gemm.cu; docs/learner.md §16, "The
 * GEMMs"), for the unsplit launches with enough tiles to fill the GPU.
 *
 * The 64 x 64 tile (dt_gemm_kernel) gives a thread 4 x 4 sums: two 16-byte
 * shared loads per 16 FMAs, and those loads, not the FMAs, bound it
 * (kernels/dev/DEVICE_NOTES.md items 81, 113: a warp's 16-byte load costs
 * ~2.75 shared wavefronts). Here a thread's 8 x 8 sums take four loads per
 * 64 FMAs. 256 threads (tx = tid % 16 the columns 4 tx.. and 64 + 4 tx..,
 * ty = tid / 16 the rows likewise), k in chunks of DTB_BK held in two
 * shared stages: the next chunk's loads in flight in registers while this
 * one is multiplied, one barrier a chunk.
 *
 * Each output is summed over k in order, one fmaf a k from 0, exactly as
 * dt_gemm_kernel sums it: the tile's shape does not enter the sums, so the
 * two tiles give the same bits (dt_gemm_kernel's zero products past K, up
 * to its 16-k chunk, change no sum but a -0, which only a negative product
 * underflowing to zero can make). The body is plain C++ on both sides
 * (__host__ __device__, the barrier and the epilogue passed in), so a CPU
 * test (tests/test-dt-gemm-big.cu) runs this source with a thread a CUDA
 * thread and holds it bit for bit against a sequential fmaf product.
 */
#ifndef DQN_CUDA_DT_GEMM_BIG_CUH
#define DQN_CUDA_DT_GEMM_BIG_CUH

#include <cuda_runtime.h>
#include <math.h>

#define DTB_T 128            /* tile rows and columns */
#define DTB_BK 8             /* k a chunk */
#define DTB_LD (DTB_T + 4)   /* a stage row's floats: 16-byte aligned rows */
#define DTB_NT 256           /* threads a block */
#define DTB_MIN_BLOCKS 264   /* tiles a launch needs (members included) to take this tile: two an SM */
#define DTB_FWD_MIN_BLOCKS 120 /* the forward's: one tile column, one block an SM (dt_big_takes) */

#define DTB_FN __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define DTB_UNROLL _Pragma("unroll")
#define DTB_ONCE _Pragma("unroll 1")
#else
#define DTB_ONCE
#define DTB_UNROLL /* the host pass (the CPU test) leaves loops to the compiler */
#endif

typedef float dtb_stage_t[DTB_BK][DTB_LD];

/* this thread's element r (< 4) of op(A)'s chunk: its row and k. TA 0 (A[m
 * lda + k], k contiguous): rows tid / 8 + 32 r at k tid % 8 (a warp reads 4
 * rows of 32 bytes); TA 1 (A[k lda + m]): row tid % 128 at k tid / 128 + 2
 * r (a warp reads 128 contiguous bytes). op(B) the same with its columns:
 * TB 1 is B[n ldb + k] (k contiguous), TB 0 B[k ldb + n]. */
template <int T>
DTB_FN int dtb_row(int tid, int r) { return T ? tid % DTB_T : tid / DTB_BK + 32 * r; }
template <int T>
DTB_FN int dtb_k(int tid, int r) { return T ? tid / DTB_T + 2 * r : tid % DTB_BK; }

/* the chunk at k0 into ra, rb (zeros outside the matrices) */
template <int TA, int TB>
DTB_FN void dtb_load(int tid, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int m0, int n0,
                     int k0, float (&ra)[4], float (&rb)[4]) {
DTB_UNROLL
  for (int r = 0; r < 4; r++) {
    const int m = m0 + dtb_row<TA>(tid, r), ka = k0 + dtb_k<TA>(tid, r);
    ra[r] = m < M && ka < K ? A[TA ? (size_t)ka * lda + m : (size_t)m * lda + ka] : 0.0f;
    const int n = n0 + dtb_row<!TB>(tid, r), kb = k0 + dtb_k<!TB>(tid, r);
    rb[r] = n < N && kb < K ? B[TB ? (size_t)n * ldb + kb : (size_t)kb * ldb + n] : 0.0f;
  }
}

template <int TA, int TB>
DTB_FN void dtb_store(int tid, const float (&ra)[4], const float (&rb)[4], dtb_stage_t &As, dtb_stage_t &Bs) {
DTB_UNROLL
  for (int r = 0; r < 4; r++) {
    As[dtb_k<TA>(tid, r)][dtb_row<TA>(tid, r)] = ra[r];
    Bs[dtb_k<!TB>(tid, r)][dtb_row<!TB>(tid, r)] = rb[r];
  }
}

/* s[i][j] (rows 4 ty + i % 4 + 64 (i / 4), columns 4 tx + j % 4 + 64 (j /
 * 4) of the tile at m0, n0) = op(A) op(B) over all K, in k order; As, Bs:
 * two stages each; sync(): the block's barrier */
#pragma nv_exec_check_disable /* sync and ep are host functors on the CPU, device ones in the kernel */
template <int TA, int TB, class SYNC>
DTB_FN void dtb_mainloop(int tid, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int m0,
                         int n0, dtb_stage_t *As, dtb_stage_t *Bs, SYNC &sync, float (&s)[8][8]) {
  const int tx = tid % 16, ty = tid / 16;
DTB_UNROLL
  for (int i = 0; i < 8; i++)
DTB_UNROLL
    for (int j = 0; j < 8; j++) s[i][j] = 0.0f;
  float ra[4], rb[4];
  dtb_load<TA, TB>(tid, M, N, K, A, lda, B, ldb, m0, n0, 0, ra, rb);
  dtb_store<TA, TB>(tid, ra, rb, As[0], Bs[0]);
  sync();
  int buf = 0;
  for (int k0 = 0; k0 < K; k0 += DTB_BK) {
    const int more = k0 + DTB_BK < K;
    if (more) dtb_load<TA, TB>(tid, M, N, K, A, lda, B, ldb, m0, n0, k0 + DTB_BK, ra, rb);
DTB_UNROLL
    for (int kk = 0; kk < DTB_BK; kk++) {
      const float *ar = As[buf][kk], *br = Bs[buf][kk];
      const float4 a0 = *reinterpret_cast<const float4 *>(ar + 4 * ty);
      const float4 a1 = *reinterpret_cast<const float4 *>(ar + 64 + 4 * ty);
      const float4 b0 = *reinterpret_cast<const float4 *>(br + 4 * tx);
      const float4 b1 = *reinterpret_cast<const float4 *>(br + 64 + 4 * tx);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
DTB_UNROLL
      for (int i = 0; i < 8; i++)
DTB_UNROLL
        for (int j = 0; j < 8; j++) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
    }
    if (more) dtb_store<TA, TB>(tid, ra, rb, As[buf ^ 1], Bs[buf ^ 1]);
    sync();
    buf ^= 1;
  }
}

/* ep(m, n, v): the 4 outputs (m, n..n + 3) of row m < M, n a multiple of 4.
 * The tile leaves through the shared stages in four bands of 32 rows (band
 * rows 0-15 in As, 16-31 in Bs, 128 floats a row): the threads that hold a
 * band's sums write them, and then every thread hands ep four of the band's
 * 16-byte pieces, a warp a row. ep's code is in the binary once, inside a
 * loop: inlined for each of a thread's 16 pieces, with every form of the
 * epilogue beside it, it came to ~9,000 instructions that each warp ran
 * straight through once, and its launches waited on instruction fetch for
 * as long as they multiplied (kernels/dev/DEVICE_NOTES.md item 200). The
 * same ep on the same sums: the same bits. Call after dtb_mainloop, whose
 * last barrier frees the stages; they stay in use (the last band's reads)
 * until the caller's next barrier, so a block that goes on to another tile
 * calls sync() first (the kernel does one tile a block and just exits). */
#pragma nv_exec_check_disable
template <class SYNC, class EP>
DTB_FN void dtb_epilogue(int tid, int M, int m0, int n0, float (&s)[8][8], dtb_stage_t *As, dtb_stage_t *Bs,
                         SYNC &sync, EP &ep) {
  static_assert(16 * DTB_T <= 2 * DTB_BK * DTB_LD, "half a band in each of As and Bs");
  const int tx = tid % 16, ty = tid / 16;
  float *const ha = &As[0][0][0], *const hb = &Bs[0][0][0];
DTB_ONCE
  for (int p = 0; p < 4; p++) {
    /* band p is tile rows 32 p..: rows 4 ty + i % 4 + 64 (i / 4) of the
     * threads with ty / 8 == p % 2 and i / 4 == p / 2 */
    if (ty / 8 == p % 2) {
DTB_UNROLL
      for (int i = 0; i < 4; i++) {
        const int r = 4 * (ty % 8) + i;
        float *row = (r < 16 ? ha : hb) + (r % 16) * DTB_T + 4 * tx;
DTB_UNROLL
        for (int h = 0; h < 2; h++) {
          float x[4]; /* values, not a pointer into s: s stays in registers */
DTB_UNROLL
          for (int j = 0; j < 4; j++) x[j] = p < 2 ? s[i][4 * h + j] : s[i + 4][4 * h + j];
#ifdef __CUDA_ARCH__
          *reinterpret_cast<float4 *>(row + 64 * h) = make_float4(x[0], x[1], x[2], x[3]);
#else
          for (int j = 0; j < 4; j++) row[64 * h + j] = x[j];
#endif
        }
      }
    }
    sync();
DTB_ONCE
    for (int q = 0; q < 4; q++) {
      const int e = tid + DTB_NT * q, r = e / 32, c = 4 * (e % 32), m = m0 + 32 * p + r;
      if (m < M) {
        const float *row = (r < 16 ? ha : hb) + (r % 16) * DTB_T + c;
#ifdef __CUDA_ARCH__
        const float4 x = *reinterpret_cast<const float4 *>(row);
        float v[4] = {x.x, x.y, x.z, x.w};
#else
        float v[4] = {row[0], row[1], row[2], row[3]};
#endif
        ep(m, n0 + c, v);
      }
    }
    if (p < 3) sync();
  }
}

#endif
