/*
 * gemm_table.cuh — the layer GEMM's problem table, as the phase files fill it
 * (step_forward.cu F1..F4, step_backward.cu B1..B3 and the weight gradients,
 * through gemm_table.cu), gemm_plan.cu plans and gemm.cu launches it. Host side;
 * included by .cu files only.
 */
#ifndef DQN_CUDA_GEMM_TABLE_CUH
#define DQN_CUDA_GEMM_TABLE_CUH

#include "step_phases.cuh"

/* every phase's problems together: F4 and B1 (2 and 1 x K (1 + D)), the
 * weight gradients of K head sets (2 x K (1 + D)), the rest */
#define GEMM_MAXPROBS (5 * LEARNER_MAX_ENSEMBLE * (1 + LEARNER_MAX_BRANCHES) + 64)
#define GLAYER_MAXSEG (LEARNER_MAX_ENSEMBLE * (1 + LEARNER_MAX_BRANCHES))

/* one matrix product of a phase: C[m][n] = sum_k A(m, k) W[k][n] (+ bias[n]),
 * then LeakyReLU (act) or times lrelu'(mask[m][n]) where mask <= 0. TA 0: A
 * is [m][k] (lda); TA 1: A is [k][m] and the product is a weight gradient
 * dW[o = m][i = n] written at grad + gw (row stride N), with the bias
 * gradient (sum over k of A) and NoisyNet sigma gradients. The fields from
 * blk0 on are the planner's (gemm_plan.cu). */
typedef struct gprob {
  const float *A, *W, *bias, *mask;
  float *C;
  int lda, ldw, ldc, ldm;
  int M, N, K, act;
  int blk0;   /* first block of this problem in its launch */
  int sblk[2]; /* the same in a population's SER launch (a block per tile) and SER2 one (a block per two row tiles) */
  int tn;     /* tiles along n */
  int tiles;  /* tiles (tm * tn) */
  int splits; /* split-K parts */
  int kper;   /* k per part (a multiple of GBK) */
  int al;     /* bit 0: A rows take 16-byte copies; bit 1: W rows do */
  int cnt0;   /* this problem's first tile among the launch's arrival counters */
  long long poff; /* its first partial tile (GPART floats each) in the split-K scratch */
  long long gw, gb, gsw, gsb, fi, fo; /* TA 1: offsets in grad and fn, -1 when absent */
} gprob_t;

/* One layer of a phase as output segments: outputs [o0, next segment's o0)
 * read inputs [koff, koff + K) of the input rows, weight column (o - o0) of
 * pack + woff with row stride ldw; bias at pack + bias (-1: none). Each
 * segment is one problem. */
typedef struct glayer {
  struct {
    int o0, koff, K, ldw;
    long long woff;
  } s[GLAYER_MAXSEG];
  int n, N; /* segments, outputs */
  long long bias;
} glayer_t;

/* large (GEMM_MAXPROBS problems): allocate it, do not put it on a stack */
typedef struct gemm_table {
  gprob_t pr[GEMM_MAXPROBS];
  int np;
  int ph0[GEMM_PHASES + 1]; /* phase ph: problems [ph0[ph], ph0[ph + 1]) */
  int nph;                  /* phases begun */
} gemm_table_t;

/* the next phase's problems follow */
void gemm_begin_phase(gemm_table_t *t);
/* every segment of l as a problem: A [M][lda] rows (a segment reads from
 * column koff), C [M][ldc] (from column o0), mask like C (NULL: none) */
int gemm_add_layer(gemm_table_t *t, const glayer_t *l, const float *pack, const float *A, int lda, int M, float *C,
                   int ldc, const float *mask, int ldm, int act);
/* a weight gradient: dW [M = out][N = in] = dY^T X over K = batch rows of
 * dY (A, lda) and X (W, ldw); offsets of the gradients and noise as gprob_t's */
int gemm_add_wgrad(gemm_table_t *t, const float *dY, int ldy, const float *X, int ldx, int M, int N, int K,
                   long long gw, long long gb, long long gsw, long long gsb, long long fi, long long fo);
/* the tiles, split-K parts and scratch of every phase, into f (device
 * memory): occupancy blocks per SM aimed for */
int gemm_plan(cuda_fused_t *f, gemm_table_t *t, int occupancy);

/* the phases' problems (step_forward.cu, step_backward.cu) */
int forward_problems(const net_layout_t *L, const cuda_fused_t *f, int B, const float *x, gemm_table_t *t);
int backward_problems(const net_layout_t *L, const cuda_fused_t *f, int B, const float *x, gemm_table_t *t);

#endif
