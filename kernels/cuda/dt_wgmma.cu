/*
 * dt_wgmma.cu — the Decision Transformer's GEMMs in TF32 on Hopper's
 * warpgroup MMA (sm_90a): dt_gemm's product (dt_gemm.cu) for tensor_cores where
 * the operands allow, the same 64 x 64 tiles, split-K parts and member axis
 * (docs/learner.md §16, "The GEMMs").
 *
 * dt.cu's mma.sync tile loads 16 k a round trip and waits for each: a
 * 3,840 x 128 x 128 product is eight L2 round trips in a row at one block an
 * SM (kernels/dev/DEVICE_NOTES.md items 93, 99-100). Here one warpgroup (128
 * threads, 114-126 registers: four blocks an SM) takes a 64 x 64 tile in
 * chunks of 32 k: each thread loads its 4 float4 of each operand's chunk
 * into registers (the next chunk in flight while this one is multiplied),
 * rounds them to TF32 (f2tf32, as the mma.sync tile does: the same
 * operands) and stores them K-major in the 128-byte swizzle wgmma reads
 * (wgmma.cuh): a chunk is one 32-k atom of 64 rows. (Chunks of 64 k took
 * 200-220 registers, two blocks an SM, and lost; so did a 128-square tile
 * of two warpgroups: DEVICE_NOTES.md item 102.) TF32 wgmma has no transposes, so an
 * operand whose rows are contiguous in memory (op(A) with ta, op(B) without
 * tb: the weight gradients' dy^T and x, the input gradients' W) is
 * transposed on the way in: lane l loads rows 4 m4.. at k = l % 16 (16 k
 * rows of 32 bytes a warp, whole sectors) and writes each float to its own
 * row, and the swizzle puts the warp's 32 writes in 32 banks. The tile's
 * four k8 steps a chunk are one wgmma group; the stage the next chunk goes
 * to is free once the group before has completed. Every output is one fixed
 * sum (wgmma's order within a k8 step is the hardware's), so reruns are bit
 * for bit, and a population's member is its lone twin.
 */
#include <cuda.h> /* CUtensorMap (dt_gemm_tmt_kernel's maps) */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda_check.h"
#include "dqnd_build_config.h"
#include "dt_cuda.cuh"
#include "gemm_dev.cuh"
#include "wgmma.cuh"

#define DW_T 64                   /* tile rows and columns (m64n64) */
#define DW_BK 32                  /* k a chunk: one 32-k atom (two lost: DEVICE_NOTES.md item 102) */
#define DW_NL 4                   /* float4 a thread an operand a chunk */
#define DW_NT 128                 /* one warpgroup */
#define DW_OP (DW_T * 128)        /* bytes: one operand's chunk, 64 rows of 32 k */
#define DW_STAGE (2 * DW_OP)      /* A's and B's */
#define DW_SMEM (2 * DW_STAGE + 1024) /* two stages, + the slack to align them to 1,024 bytes */
#define DW_NS 4                   /* dt_gemm_tmt_kernel's TMA ring: chunks landed or in flight */
#define DW_BOX (32 * 128)         /* bytes: a TMA box of 32 k x 32 rows */
#define DW_TMT_SMEM ((DW_NS + 2) * DW_STAGE + 1024 + 8 * DW_NS) /* the ring, two stages, slack, mbarriers */
static_assert(64 * DT_WG_SLD * 4 <= 2 * DW_STAGE, "the staged epilogue fits the first two stages");
/* tokens (k, all members') from which dt_gemm_tmt_kernel leaves through
 * the staged epilogue: a weight gradient of a step whose work fills the GPU
 * (batch 256 alone, populations: fewer instructions pay), not of a lone
 * step at batch 64, where the side streams' blocks should leave the SMs to
 * the critical path soonest (kernels/dev/DEVICE_NOTES.md item 205) */
#define DW_TMT_STAGED 8192
/* a member's tokens (k) from which dt_gemm_tmt_kernel takes op(A) as
 * wgmma's register operand (batch 256: 15,360; kernels/dev/DEVICE_NOTES.md
 * item 212). Its bias sums run in their own order, so the rule reads the
 * shapes alone: a member in a population takes the form it takes alone. */
#define DW_TMT_RS 8192

// kernels

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* This thread's 4 float4 of an operand's chunk (64 rows of the tile, 32 k
 * from k0; zeros outside). KC 1: the operand is k-contiguous (src[row ld +
 * k]): float4 i is row tid / 8 + 16 i, k 4 (tid % 8). KC 0: rows are
 * contiguous (src[k ld + row]): float4 i is rows 4 (lane / 16) + 8 (w + 4 (i
 * / 2)).., k lane % 16 + 16 (i % 2). src: the tile's row 0 at k 0; nrow:
 * its rows in range (a multiple of 4 for KC 0); kend: the part's end. */
template <int KC>
static __device__ __forceinline__ void dw_load(const float *src, int ld, int nrow, int k0, int kend,
                                               float4 (&r)[DW_NL]) {
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
#pragma unroll
  for (int i = 0; i < DW_NL; i++) {
    const int row = KC ? tid / 8 + 16 * i : 4 * (lane / 16) + 8 * (w + 4 * (i / 2));
    const int k = KC ? k0 + 4 * (tid % 8) : k0 + lane % 16 + 16 * (i % 2);
    const float *p = KC ? src + (size_t)row * ld + k : src + (size_t)k * ld + row;
    r[i] = row < nrow && k < kend ? *reinterpret_cast<const float4 *>(p) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

/* the accumulators pinned where they are (no copies the compiler might put
 * between a wgmma's issue and its completion) */
static __device__ __forceinline__ void dw_pin(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; i++) asm volatile("" : "+f"(d[i])::"memory");
}

static __device__ __forceinline__ float dw_tf32(float x) { return __uint_as_float(f2tf32(x)); }
/* chunk c's wgmma group on the stage at sa, once every thread's stores of it
 * are fenced for the async proxy and past the block's barrier */
static __device__ __forceinline__ void dw_mma_chunk(float (&d)[32], uint32_t sa) {
  fence_proxy_async(); /* this thread's stores of the chunk, for wgmma */
  __syncthreads();
  wgmma_fence();
  dw_pin(d);
  const unsigned long long da = wg_desc(sa), db = wg_desc(sa + DW_OP);
#pragma unroll
  for (int kk = 0; kk < 4; kk++) wgmma_tf32_m64n64k8(d, da + 2 * kk, db + 2 * kk);
  wgmma_commit();
  dw_pin(d);
}


/* dw_load's floats, rounded to TF32, into the operand's chunk at op (64
 * K-major rows: element (row, k) at row 128 + 16 (k / 4 ^ row % 8) + 4 (k %
 * 4)) */
template <int KC>
static __device__ __forceinline__ void dw_store(unsigned char *op, const float4 (&r)[DW_NL]) {
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
#pragma unroll
  for (int i = 0; i < DW_NL; i++) {
    if (KC) {
      const int row = tid / 8 + 16 * i, c = tid % 8;
      const float4 v = make_float4(dw_tf32(r[i].x), dw_tf32(r[i].y), dw_tf32(r[i].z), dw_tf32(r[i].w));
      *reinterpret_cast<float4 *>(op + row * 128 + ((c ^ (row % 8)) << 4)) = v;
    } else {
      const int row = 4 * (lane / 16) + 8 * (w + 4 * (i / 2)), k = lane % 16 + 16 * (i % 2);
      unsigned char *a = op + 4 * (k % 4);
      const float v[4] = {r[i].x, r[i].y, r[i].z, r[i].w};
#pragma unroll
      for (int j = 0; j < 4; j++)
        *reinterpret_cast<float *>(a + (row + j) * 128 + (((k / 4) ^ ((row + j) % 8)) << 4)) = dw_tf32(v[j]);
    }
  }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* dw_load<0>'s float4s from a chunk that TMA landed at box: the operand's
 * 64 rows as two boxes (rows 0-31, 32-63) of [32 k][32 rows], row k's
 * 16-byte piece c at k 128 + 16 (c ^ k % 8) (the 128-byte swizzle: the 8
 * lanes of a quarter warp read 8 k at one c, 8 banks apart); k >= kn zeros
 * (the rows past a split part's end, which TMA brought from the next) */
static __device__ __forceinline__ void dw_lds(const unsigned char *box, int kn, float4 (&r)[DW_NL]) {
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32, c = lane / 16 + 2 * w;
#pragma unroll
  for (int i = 0; i < DW_NL; i++) {
    const int k = lane % 16 + 16 * (i % 2);
    r[i] = k < kn ? *reinterpret_cast<const float4 *>(box + (i / 2) * DW_BOX + k * 128 + ((c ^ (k % 8)) << 4))
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* op(A)'s chunk as wgmma's register operand, from the boxes TMA landed
 * (dw_lds's layout): a[4 kk + q] is row 16 w + lane / 4 + 8 (q % 2), k 8 kk
 * + lane % 4 + 4 (q / 2), rounded to TF32 (f2tf32, as dw_store rounds:
 * the same operands); k >= kn zeros. A quarter warp's 8 loads fall in 4
 * banks twice over (two ways), where dw_lds's float4s and dw_store's
 * transposing stores took two passes and wgmma a third. With BS, s[0] and
 * s[1] also add the unrounded floats of the thread's two rows in k order
 * (the bias gradient's sums: this form's own order, so a rule that picks
 * it may depend on the shapes alone, never on the members). */
template <int BS>
static __device__ __forceinline__ void dw_frag(const unsigned char *box, int kn, uint32_t (&a)[16], float *s) {
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32, g = lane / 4, t = lane % 4;
  const unsigned char *b = box + (w / 2) * DW_BOX;
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int r = 16 * (w % 2) + g + 8 * (q % 2), k = 8 * kk + t + 4 * (q / 2);
      const float v = k < kn ? *reinterpret_cast<const float *>(b + k * 128 + (((r / 4) ^ (k % 8)) << 4) + 4 * (r % 4))
                             : 0.0f;
      a[4 * kk + q] = f2tf32(v);
      if (BS) s[q % 2] += v;
    }
}

/* a fragment's registers held (live, unmoved) across an asynchronous wgmma */
static __device__ __forceinline__ void dw_pin_a(uint32_t (&a)[16]) {
#pragma unroll
  for (int i = 0; i < 16; i++) asm volatile("" : "+r"(a[i])::"memory");
}

/* chunk c's wgmma group, op(A) from registers and op(B) on the stage at sb */
static __device__ __forceinline__ void dw_mma_chunk_rs(float (&d)[32], uint32_t (&a)[16], uint32_t sb) {
  fence_proxy_async(); /* this thread's stores of op(B)'s chunk, for wgmma */
  __syncthreads();
  wgmma_fence();
  dw_pin(d);
  const unsigned long long db = wg_desc(sb);
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    const uint32_t ak[4] = {a[4 * kk], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3]};
    wgmma_tf32_m64n64k8_rs(d, ak, db + 2 * kk);
  }
  wgmma_commit();
  dw_pin(d);
  dw_pin_a(a);
}
#endif

/* dt_gemm_wg_kernel<1, 0>'s call (the weight gradients: both operands'
 * rows contiguous) with the chunks brought by TMA instead of each thread's
 * loads: thread 0 keeps DW_NS chunks landed or in flight in a ring (boxes of
 * 32 k x 32 rows, zeros past M, N and K), each thread takes its float4s of
 * a landed chunk from shared memory where dt_gemm_wg_kernel took them from
 * global (dw_lds), and the rest is that kernel's: the same transposing,
 * rounding stores (dw_store), the same wgmma sequence a chunk, the same
 * epilogue, so the same bits. The register-staged tile has one chunk in
 * flight a block, and at the two blocks an SM the weight gradients' split
 * gives it, each chunk waited for its loads (kernels/dev/DEVICE_NOTES.md
 * items 123, 137). The ring's slot s is refilled once every thread has
 * read it (the barrier before the stage's stores).
 * STAGED: the staged epilogue (DW_TMT_STAGED). RS (DW_TMT_RS, with
 * STAGED): op(A) as wgmma's register operand straight from the landed
 * boxes (dw_frag: no transposing stores for it, and wgmma reads only op(B)
 * from shared memory), the same rounded operands in the same k8 steps, so
 * the same product bits (test-gpu-dt); its bias sums add the fragments'
 * floats, in their own order. Where the weight gradients share the GPU
 * with the critical path (a lone step at batch 64) the fragments' loads,
 * which wait for the group two chunks back, lengthen each chunk: +2%;
 * where the work fills the GPU, -0.5 to -1.2% (kernels/dev/DEVICE_NOTES.md
 * item 212). */
template <int STAGED, int RS>
__global__ void __launch_bounds__(DW_NT, 2)
    dt_gemm_tmt_kernel(const __grid_constant__ CUtensorMap ma, const __grid_constant__ CUtensorMap mb, int M, int N,
                       int K, float *C, int ldc, const float *bias, const float *R, int ldr, int acc, int op, float *G,
                       int kper, size_t cz, float *bpart, cuda_pz_t pz) {
  pdl_wait();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ float4 dw_sh[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(dw_sh), base = (raw + 1023u) & ~1023u;
  unsigned char *sm = reinterpret_cast<unsigned char *>(dw_sh) + (base - raw);
  /* with bpart, the blocks of column block 0 also sum op(A)'s rows (the
   * bias gradient's part: dy's columns over the part's tokens) in fp32 from
   * the landed floats: this thread's 8 rows (4 (lane / 16) + 8 w + 32 h +
   * j, h < 2, j < 4) over its k, in chunk order; under RS its fragments'
   * two rows (16 w + lane / 4 (+ 8), bs[0] and bs[1]) over theirs */
  const int bsum = bpart != NULL && blockIdx.x == 0;
  float bs[8];
#pragma unroll
  for (int i = 0; i < 8; i++) bs[i] = 0.0f;
  const uint32_t ops = base + DW_NS * DW_STAGE, bars = ops + 2 * DW_STAGE; /* the two wgmma stages; slot s landed */
  const int m0 = blockIdx.y * DW_T, n0 = blockIdx.x * DW_T, z = dt_z(pz), klo = z * kper, tid = threadIdx.x;
  const int mz = pz.n == 1 ? 0 : (int)(blockIdx.z % (unsigned)pz.n); /* the member: the maps' third coordinate */
  const int kend = K - klo < kper ? K : klo + kper, nk = (kend - klo + DW_BK - 1) / DW_BK;
  if (tid == 0) {
    for (int s = 0; s < DW_NS; s++) mbar_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  /* chunk q into slot q % DW_NS: op(A)'s rows m0.. and op(B)'s n0.., k from klo + 32 q */
  auto issue = [&](int q) {
    const uint32_t st = base + (uint32_t)((q % DW_NS) * DW_STAGE), bar = bars + 8 * (q % DW_NS);
    const int k = klo + q * DW_BK;
    mbar_expect_tx(bar, DW_STAGE);
    tma_load_3d(st, &ma, m0, k, mz, bar);
    tma_load_3d(st + DW_BOX, &ma, m0 + 32, k, mz, bar);
    tma_load_3d(st + DW_OP, &mb, n0, k, mz, bar);
    tma_load_3d(st + DW_OP + DW_BOX, &mb, n0 + 32, k, mz, bar);
  };
  if (tid == 0)
    for (int q = 0; q < DW_NS && q < nk; q++) issue(q);
  float4 ra[DW_NL], rb[DW_NL];
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; i++) d[i] = 0.0f;
  dw_pin(d);
  if (RS) {
    /* op(A) as wgmma's register operand (dw_frag), op(B) through the
     * transposing stores: chunk c's fragments in a, free once chunk c - 2's
     * group, which read them and the B stage chunk c goes to, completed */
    uint32_t fa0[16], fa1[16]; /* the even chunks' and the odd chunks' */
#pragma unroll
    for (int i = 0; i < 16; i++) fa0[i] = 0u, fa1[i] = 0u;
    auto chunk = [&](int c, uint32_t(&a)[16]) {
      const int s = c % DW_NS, kn = kend - (klo + c * DW_BK);
      while (!mbar_try(bars + 8 * s, (unsigned)(c / DW_NS) & 1u)) {
      }
      const unsigned char *slot = sm + s * DW_STAGE;
      dw_lds(slot + DW_OP, kn, rb);
      wgmma_wait<1>();
      dw_pin(d);
      dw_pin_a(a);
      if (bsum)
        dw_frag<1>(slot, kn, a, bs);
      else
        dw_frag<0>(slot, kn, a, bs);
      __syncthreads(); /* every thread past slot s's reads and that group */
      if (tid == 0 && c + DW_NS < nk) {
        fence_proxy_async(); /* the slot's generic reads before the async proxy's refill */
        issue(c + DW_NS);
      }
      dw_store<0>(sm + DW_NS * DW_STAGE + (c & 1) * DW_OP, rb);
      dw_mma_chunk_rs(d, a, ops + (uint32_t)((c & 1) * DW_OP));
    };
    for (int c = 0; c < nk; c += 2) {
      chunk(c, fa0);
      if (c + 1 < nk) chunk(c + 1, fa1);
    }
    wgmma_wait<0>();
    dw_pin(d);
    dw_pin_a(fa0);
    dw_pin_a(fa1);
  } else {
    for (int c = 0; c < nk; c++) {
      const int s = c % DW_NS, kn = kend - (klo + c * DW_BK);
      while (!mbar_try(bars + 8 * s, (unsigned)(c / DW_NS) & 1u)) {
      }
      const unsigned char *slot = sm + s * DW_STAGE;
      dw_lds(slot, kn, ra);
      dw_lds(slot + DW_OP, kn, rb);
      if (bsum)
#pragma unroll
        for (int i = 0; i < DW_NL; i++) {
          float *b = bs + 4 * (i / 2);
          b[0] += ra[i].x, b[1] += ra[i].y, b[2] += ra[i].z, b[3] += ra[i].w;
        }
      /* chunk c - 2's group read the stage chunk c goes to */
      wgmma_wait<1>();
      dw_pin(d);
      __syncthreads(); /* every thread past slot s's reads and that group */
      if (tid == 0 && c + DW_NS < nk) {
        fence_proxy_async(); /* the slot's generic reads before the async proxy's refill */
        issue(c + DW_NS);
      }
      unsigned char *stg = sm + DW_NS * DW_STAGE + (c & 1) * DW_STAGE;
      dw_store<0>(stg, ra);
      dw_store<0>(stg + DW_OP, rb);
      dw_mma_chunk(d, ops + (uint32_t)((c & 1) * DW_STAGE));
    }
    wgmma_wait<0>();
    dw_pin(d);
  }
  const long long mo = dt_moz(pz);
  if (bsum && RS) { /* the 4 lanes of a row (lane % 4) summed in a fixed tree; part z's row m0 + r at bpart[z M + m0 + r] */
    const int lane = tid % 32;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int o = 1; o < 4; o <<= 1) bs[i] += __shfl_xor_sync(0xffffffffu, bs[i], o);
    float *bp = dt_off(bpart, mo) + (size_t)z * M + m0;
    if (lane % 4 == 0)
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const int r = 16 * (tid / 32) + lane / 4 + 8 * i;
        if (m0 + r < M) bp[r] = bs[i];
      }
  } else if (bsum) { /* the 16 lanes of a row set (lane / 16) summed in a fixed tree */
    const int lane = tid % 32;
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) bs[i] += __shfl_xor_sync(0xffffffffu, bs[i], o);
    float *bp = dt_off(bpart, mo) + (size_t)z * M + m0;
    if (lane % 16 == 0)
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const int r = 4 * (lane / 16) + 8 * (tid / 32) + 32 * (i / 4) + i % 4;
        if (m0 + r < M) bp[r] = bs[i];
      }
  }
  pdl_go();
  bias = dt_off0(bias, mo), R = dt_off0(R, mo), C = dt_off(C, mo) + z * cz, G = dt_off0(G, mo);
  if (STAGED) {
    __syncthreads(); /* every warp past the ring's last reads: its first slot is the epilogue's stage */
    dt_wg_epilogue_staged(d, reinterpret_cast<float *>(sm), m0, n0, M, N, C, ldc, bias, R, ldr, acc, op, G);
  } else {
    dt_wg_epilogue(d, m0, n0, M, N, C, ldc, bias, R, ldr, acc, op, G);
  }
#else
  (void)ma, (void)mb, (void)M, (void)N, (void)K, (void)C, (void)ldc, (void)bias, (void)R, (void)ldr, (void)acc;
  (void)op, (void)G, (void)kper, (void)cz, (void)bpart, (void)pz;
  __trap(); /* never launched: dt_tma_setup() is NULL without sm_90a code */
#endif
}

/* dt_gemm_kernel's call (dt_gemm.cu: C (=, +=) op(A) op(B) + bias + R over k in
 * [z kper, (z + 1) kper) into C + z cz) on wgmma; TA, TB: ta, tb */
template <int TA, int TB>
__global__ void __launch_bounds__(DW_NT, 4) dt_gemm_wg_kernel(int M, int N, int K, const float *A, int lda,
                                                            const float *B, int ldb, float *C, int ldc,
                                                            const float *bias, const float *R, int ldr, int acc,
                                                            int op, float *G, int kper, size_t cz, cuda_pz_t pz) {
  pdl_wait();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ float4 dw_sh[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(dw_sh), base = (raw + 1023u) & ~1023u;
  unsigned char *sm = reinterpret_cast<unsigned char *>(dw_sh) + (base - raw);
  const int m0 = blockIdx.y * DW_T, n0 = blockIdx.x * DW_T, z = dt_z(pz), klo = z * kper;
  const int kend = K - klo < kper ? K : klo + kper, nk = (kend - klo + DW_BK - 1) / DW_BK;
  const long long mo = dt_moz(pz);
  /* op(A)'s rows from m0 and op(B)'s from n0, at k 0 */
  const float *as = TA ? dt_off(A, mo) + m0 : dt_off(A, mo) + (size_t)m0 * lda;
  const float *bs = TB ? dt_off(B, mo) + (size_t)n0 * ldb : dt_off(B, mo) + n0;
  const int ma = M - m0, nb = N - n0;
  float4 ra[DW_NL], rb[DW_NL];
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; i++) d[i] = 0.0f;
  dw_pin(d);
  if (nk > 0) {
    dw_load<!TA>(as, lda, ma, klo, kend, ra);
    dw_load<TB>(bs, ldb, nb, klo, kend, rb);
    dw_store<!TA>(sm, ra);
    dw_store<TB>(sm + DW_OP, rb);
    if (nk > 1) dw_load<!TA>(as, lda, ma, klo + DW_BK, kend, ra), dw_load<TB>(bs, ldb, nb, klo + DW_BK, kend, rb);
  }
  for (int c = 0; c < nk; c++) {
    dw_mma_chunk(d, base + (uint32_t)((c & 1) * DW_STAGE));
    if (c + 1 < nk) {
      /* chunk c - 1's group read the other stage: every warp past it before
       * any thread writes there */
      wgmma_wait<1>();
      __syncthreads();
      unsigned char *nx = sm + ((c + 1) & 1) * DW_STAGE;
      dw_store<!TA>(nx, ra);
      dw_store<TB>(nx + DW_OP, rb);
      if (c + 2 < nk) {
        const int k2 = klo + (c + 2) * DW_BK;
        dw_load<!TA>(as, lda, ma, k2, kend, ra), dw_load<TB>(bs, ldb, nb, k2, kend, rb);
      }
    }
  }
  wgmma_wait<0>();
  dw_pin(d);
  pdl_go();
  bias = dt_off0(bias, mo), R = dt_off0(R, mo), C = dt_off(C, mo) + z * cz, G = dt_off0(G, mo);
  dt_wg_epilogue(d, m0, n0, M, N, C, ldc, bias, R, ldr, acc, op, G);
#else
  (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)bias, (void)R;
  (void)ldr, (void)acc, (void)op, (void)G, (void)kper, (void)cz, (void)pz;
  __trap(); /* never launched: dt_wg_setup() is 0 without sm_90a code */
#endif
}

// launchers

int dt_wg_setup(void) {
#if DQN_SM90A
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess || major != 9 ||
      minor != 0) {
    (void)cudaGetLastError();
    return 0;
  }
  const void *k[] = {(const void *)dt_gemm_wg_kernel<0, 0>, (const void *)dt_gemm_wg_kernel<0, 1>,
                     (const void *)dt_gemm_wg_kernel<1, 0>, (const void *)dt_gemm_wg_kernel<1, 1>};
  if (cudaFuncSetAttribute(dt_gemm_tmt_kernel<0, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, DW_TMT_SMEM) !=
          cudaSuccess ||
      cudaFuncSetAttribute(dt_gemm_tmt_kernel<1, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, DW_TMT_SMEM) !=
          cudaSuccess ||
      cudaFuncSetAttribute(dt_gemm_tmt_kernel<1, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, DW_TMT_SMEM) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  for (int i = 0; i < 4; i++)
    if (cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, DW_SMEM) != cudaSuccess) {
      (void)cudaGetLastError(); /* the mma.sync tile takes every call: no error left pending */
      return 0;
    }
  return 1;
#else
  return 0;
#endif
}

int dt_wg_fits(int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb) {
  /* every float4 of an operand 16-byte aligned and wholly in or out of range */
  const int al = (uintptr_t)A % 16 == 0 && lda % 4 == 0 && (uintptr_t)B % 16 == 0 && ldb % 4 == 0;
  return al && K % 4 == 0 && (!ta || M % 4 == 0) && (tb || N % 4 == 0);
}

void dt_wg_launch(int ta, int tb, dim3 grid, cudaStream_t st, int M, int N, int K, const float *A, int lda,
                  const float *B, int ldb, float *C, int ldc, const float *bias, const float *R, int ldr, int acc,
                  int op, float *G, int kper, size_t cz, cuda_pz_t pz) {
#define DW_GO(TA, TB)                                                                                                 \
  pdl_launch(dt_gemm_wg_kernel<TA, TB>, grid, DW_NT, DW_SMEM, st, M, N, K, A, lda, B, ldb, C, ldc, bias, R, ldr, acc, \
             op, G, kper, cz, pz)
  switch (2 * ta + tb) {
    case 0: DW_GO(0, 0); break;
    case 1: DW_GO(0, 1); break;
    case 2: DW_GO(1, 0); break;
    default: DW_GO(1, 1); break;
  }
#undef DW_GO
}

int dt_tmt_launch(void *enc, dim3 grid, cudaStream_t st, int M, int N, int K, const float *A, int lda, const float *B,
                  int ldb, float *C, int ldc, const float *bias, const float *R, int ldr, int acc, int op, float *G,
                  int kper, size_t cz, float *bpart, cuda_pz_t pz) {
  CUtensorMap ma, mb;
  /* A [K][lda] (op(A) = A^T: M along a row), B [K][ldb] (N along a row), in boxes of 32 x 32 k */
  if (!dt_tma_map(enc, &ma, A, M, K, lda, 32, DW_BK, pz.n, pz.stride) ||
      !dt_tma_map(enc, &mb, B, N, K, ldb, 32, DW_BK, pz.n, pz.stride))
    return 1;
  /* the staged epilogue where the step's work fills the GPU (DW_TMT_STAGED),
   * op(A) from registers where a member's own tokens do (DW_TMT_RS) */
  if (K >= DW_TMT_RS)
    pdl_launch(dt_gemm_tmt_kernel<1, 1>, grid, DW_NT, DW_TMT_SMEM, st, ma, mb, M, N, K, C, ldc, bias, R, ldr, acc, op,
               G, kper, cz, bpart, pz);
  else if ((long long)K * pz.n >= DW_TMT_STAGED)
    pdl_launch(dt_gemm_tmt_kernel<1, 0>, grid, DW_NT, DW_TMT_SMEM, st, ma, mb, M, N, K, C, ldc, bias, R, ldr, acc, op,
               G, kper, cz, bpart, pz);
  else
    pdl_launch(dt_gemm_tmt_kernel<0, 0>, grid, DW_NT, DW_TMT_SMEM, st, ma, mb, M, N, K, C, ldc, bias, R, ldr, acc, op,
               G, kper, cz, bpart, pz);
  return 0;
}

/* the current device's SMs into *nsm: the count the learner's launches give
 * dt_tma_stages (d->nsm), for the test entry points below */
static int dw_sms(int *nsm) {
  int dev = 0;
  CUDA_RET(cudaGetDevice(&dev));
  return (int)cudaDeviceGetAttribute(nsm, cudaDevAttrMultiProcessorCount, dev);
}

extern "C" int cuda_dt_tma_stages(int M, int N, int K) {
  int nsm = 0;
  if (dw_sms(&nsm)) return 0;
  const long long tiles = (long long)((N + DW_T - 1) / DW_T) * ((M + DW_T - 1) / DW_T);
  return dt_tma_stages(tiles, (K + DW_BK - 1) / DW_BK, nsm);
}

extern "C" int cuda_dt_gemm_tf32(int wg, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                                 int tb, float *C, int ldc, const float *bias, int acc, int op, const float *R, int ldr,
                                 float *G, float *part, size_t cap, float *db, int *used) {
  cuda_dt_t d;
  memset(&d, 0, sizeof d);
  d.tc = 1, d.pz = cuda_pz_t{1, 0};
  d.wg = wg ? dt_wg_setup() : 0;
  d.tma = wg >= 2 ? dt_tma_setup() : NULL;
  CUDA_RET(dw_sms(&d.nsm)); /* the TMA tile's ring as deep as the learner's launches take it (dt_tma_stages) */
  *used = dt_wg_takes(&d, M, N, K, A, lda, ta, B, ldb, tb, part != NULL && dt_wgrad_parts(M, N, K, cap, dt_wgrad_depth(1)) > 1);
  if (wg == 3) { /* the TMA tile alone, rounding nothing (rnd 0) */
    const dim3 grid((unsigned)((N + DW_T - 1) / DW_T), (unsigned)((M + DW_T - 1) / DW_T));
    if (part || *used != 2 || M > 65535 * DW_T ||
        dt_tma_launch(d.tma, grid, 0, M, N, K, A, lda, B, ldb, C, ldc, bias, R, ldr, acc, op, G, d.pz, 0, d.nsm))
      return (int)cudaErrorNotSupported;
    *used = 4;
    CUDA_RET(cudaGetLastError());
    return (int)cudaDeviceSynchronize();
  }
  const int fuse = part && db && dt_wgrad_fuses(&d, M, N, K, A, lda, ta, B, ldb, tb, cap);
  const int e = part ? dt_gemm_wgrad(&d, M, N, K, A, lda, ta, B, ldb, tb, C, ldc, fuse ? db : NULL, part, cap, 0)
                     : dt_gemm_op(&d, M, N, K, A, lda, ta, B, ldb, tb, C, ldc, bias, R, ldr, acc, op, G, 0);
  if (e) return e;
  if (part && db && !fuse) CUDA_RET(dt_colsum(&d, A, NULL, K, M, lda, db, 1, part, cap, 0));
  return (int)cudaDeviceSynchronize();
}
