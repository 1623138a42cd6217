/*
 * gemm_tiles.cuh — the layer GEMM's tile shapes and limits, shared by its
 * kernels (gemm.cu) and its planner (gemm_plan.cu, split_rule.h); #defines
 * only, so tests/test-split-rule.c includes it from C too.
 */
#ifndef DQN_CUDA_GEMM_TILES_CUH
#define DQN_CUDA_GEMM_TILES_CUH

#define GBM 32  /* tile rows */
#define GBN 64  /* tile outputs */
#define GBK 32  /* k per chunk */
#define GNS 4   /* pipeline stages */
#define GNT 128 /* threads: 16 x 8, 4 x 4 outputs each */
/* shared row strides, padded so the tensor cores' fragment loads (lane = 4 g
 * + t: rows g, columns t) hit 32 different banks and float4 loads stay aligned */
#define GSA0 (GBK + 4) /* A [m][k] (TA 0) */
#define GSA1 (GBM + 8) /* A [k][m] (TA 1) */
#define GSA1M(MR) (GBM * (MR) + 8) /* the same for a block of MR row tiles */
#define GSW (GBN + 8)  /* W [k][n] */
#define GA_FLOATS (GBK * GSA1 > GBM * GSA0 ? GBK * GSA1 : GBM * GSA0)
#define GA_FLOATSM(MR) (GBK * GSA1M(MR) > GBM * (MR) * GSA0 ? GBK * GSA1M(MR) : GBM * (MR) * GSA0)
#define GW_FLOATS (GBK * GSW)
#define GPART (GBM * GBN + GBM)     /* partial floats per tile and split: outputs, then bias sums */
#define GSMEM (sizeof(float) * GNS * (GA_FLOATS + GW_FLOATS))
#define GSMEMM(MR) (sizeof(float) * GNS * (GA_FLOATSM(MR) + GW_FLOATS))
#define SPLIT_MIN_CHUNKS 2 /* k chunks per split-K part at least (DEVICE_NOTES.md item 40) */
#define SPLIT_MAX_K 512    /* k per split-K part at most */
#define POP_SER_ALWAYS 8 /* members from which every phase of a population runs SER */
#define POP_SER_PAIRS 8  /* members from which SER blocks take two row tiles (SER2) */
#define BIG_PER_SM 2       /* 64 x 128 tiles per SM a phase needs to run them */
/* large-batch tiles (gemm.cu's fused_gemm_big_kernel): 64 x 128 outputs per
 * block, 8 x 8 per thread */
#define GBM2 64
#define GBN2 128
#define GNS2 3
#define GA2_FLOATS (GBM2 * GSA0) /* A [m][GSA0] */
#define GW2_FLOATS (GBN2 * GSA0 > GBK * (GBN2 + 8) ? GBN2 * GSA0 : GBK * (GBN2 + 8)) /* W [n][GSA0] or [k][GBN2 + 8] */
#define GSMEM2 (sizeof(float) * GNS2 * (GA2_FLOATS + GW2_FLOATS))

#endif
