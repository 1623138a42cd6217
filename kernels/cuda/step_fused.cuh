/*
 * step_fused.cuh — the fused training-step kernels (issues 4 and 5): the
 * loss and gradient of dqn_loss.cuh in ~14 launches instead of ~60.
 *
 * Default (fp32, and TF32 for tensor_cores): layer-GEMM phases.
 *   pack     effective (NoisyNet-composed) weights of the online and target
 *            networks in nn.Linear layout, W [out][in]
 *   F1..F4   one launch per layer (trunk 1, trunk 2, all head-1 layers side by
 *            side, all head-2 layers): 32 x 64 output tiles over all rows at
 *            once (online s and s', target s' as problems of one launch),
 *            operands through a 4-stage cp.async ring, split-K for deep and
 *            narrow products
 *   tail     dueling combine and log-softmax, a warp per (row, branch)
 *   loss     one block per sample, all branches: Double-DQN action, C51
 *            projection, cross-entropy, dlogits (dV and every dA_d)
 *   B1..B3   input gradients through head 2, head 1 and trunk 2
 *            (pre-activation gradients kept)
 *   wgrad    every weight, bias and NoisyNet sigma gradient: the same GEMM
 *            kernel with A = dY^T, in four groups by the gradient they read,
 *            on a second stream beside B1..B3 (trunk-1's after B3; with a
 *            norm_hook the gradient norm runs beside them too)
 *
 * The earlier row-tile kernels stay selectable (DQN_CUDA_FUSED_GEMM=0, modes
 * 2-5; kernels/dev/README.md has every version's time):
 *   pack     both layouts, W [out][in] and W^T [in][out]
 *   forward  one block per tile of R rows (online s, online s', target s'):
 *            trunk, all heads, dueling combine and log-softmax with every
 *            activation in shared memory; keeps what the backward needs
 *   loss     as above
 *   backward one block per tile of R online-s rows: input gradients through
 *            the heads and the trunk (pre-activation gradients kept)
 *   wgrad    one block per 32 x 32 tile of every weight matrix: dW = dY^T X
 *            summed over the batch in index order, bias and NoisyNet sigma
 *            gradients in the same pass
 *
 * plus a one-block batch loss. Every sum has one fixed order (the only
 * atomics are split-K arrival counters; the last part to arrive adds the parts
 * in split order), so reruns are bit-identical.
 *
 * Why not the seed plan's two kernels (forward+loss, backward): a sample's
 * loss needs its online-s, online-s' and target-s' rows, which come from
 * different blocks, so the loss would need a grid-wide barrier inside one
 * kernel; and the parameter gradients reduce over the whole batch, which a
 * per-row-tile backward could only do with order-dependent atomics or a
 * per-block copy of every gradient. The layer-GEMM phases go further the
 * other way, a launch per layer, because a block that runs the whole network
 * for a few rows is one long latency-bound chain (kernels/dev/DEVICE_NOTES.md
 * items 16-23); what a single persistent kernel with grid barriers would buy
 * is in BENCHMARKS.md.
 *
 * Shapes: B batch, S state, H1/H2 trunk, VH/AH head widths, HC = VH + D*AH
 * (all head hidden units side by side), Z atoms, AW = sum_d n_d Z (all
 * advantage outputs), O2 = Z + AW (value then advantage outputs of the second
 * head layers).
 */
#ifndef DQN_CUDA_STEP_FUSED_CUH
#define DQN_CUDA_STEP_FUSED_CUH

#include <cuda_runtime.h>

#include "net_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* offsets (floats) of one packed network; see step_fused.cu */
typedef struct fused_pack_layout {
  long long t1, t2, hc1, hc2;     /* weights */
  long long bt1, bt2, bhc1, bhc2; /* biases */
  long long total;
} fused_pack_layout_t;

/* layer-GEMM phases: F1..F4, B1..B3, then the weight gradients in four
 * groups by the gradient they read (g2, g1, gh, gt1: each starts as soon as
 * the backward phase that writes it is done) */
#define GEMM_PHASES 11
#define GEMM_MAXP 40 /* problems in one phase at most (2 x (1 + LEARNER_MAX_BRANCHES) + 4) */

typedef struct cuda_fused {
  int ok;      /* 1: shapes fit; the fused path can run */
  int R;       /* rows per forward/backward block */
  int tc;      /* arithmetic: 0 FFMA, 1 TF32 tensor cores, 3 3xTF32 tensor cores */
  int stage;   /* floats per weight pipeline stage */
  int cluster; /* 1: forward and backward as thread-block clusters (step_fused.cu) */
  size_t smem_cfwd, smem_cbwd;
  int cl_nA, cl_nB, cl_nA2;
  int4 cl_kcf, cl_kcb;  /* weight rows per stage, per layer */
  int dbg;     /* DQN_CUDA_FUSED_DEBUG (kernels/dev experiments): 1 no arithmetic, 2 no weight loads */
  int HC, O2, KH, AW;
  fused_pack_layout_t pw, pt; /* W [out][in] pack, W^T pack */
  float *mem;
  float *w_on, *t_on, *t_tg;  /* packs: online W, online W^T, target W^T */
  float *w_tg;                /* target W pack (layer-GEMM phases) */
  float *logp;                /* [3B, AW] online s, online s', target s' */
  float *h1, *h, *hh;         /* online-s activations [B,H1], [B,H2], [B,HC] */
  float *g2, *g1, *gh, *gt1;  /* pre-activation gradients [B,O2], [B,HC], [B,H2], [B,H1] */
  void *tiles;                /* device array of weight-gradient tiles */
  void *tabs;                 /* device array of the seven layers' segment tables */
  int n_tiles;
  int wg_splits;              /* batch splits of the weight gradients */
  float *wg_part;             /* their partial sums when wg_splits > 1 */
  size_t smem_fwd, smem_bwd;
  /* layer-GEMM phases (gemm = 1, the fp32 default): h1, h, hh hold all 3B
   * rows (online s, online s', target s'; the backward reads the first B) */
  int gemm;
  int gtc;                    /* its arithmetic: 0 FFMA, 1 TF32, 3 3xTF32 (tensor cores) */
  float *O;                   /* [3B, O2] second head layers' outputs */
  void *probs;                /* device array of every phase's matrix products */
  int ph[GEMM_PHASES][2];     /* per phase: first problem, problems (0: none) */
  int ph_blocks[GEMM_PHASES]; /* blocks per phase */
  int ph_big[GEMM_PHASES];    /* 1: the phase runs 64 x 128 tiles (fused_gemm_big_kernel) */
  int ph_blk0[GEMM_PHASES][GEMM_MAXP]; /* each problem's first block: the launch's lookup table */
  float *gpart;               /* split-K partial sums */
  int *gcnt;                  /* split-K arrival counters per tile (zero between launches) */
  /* the weight-gradient phases and the batch loss run on a second stream
   * beside the backward (forked and joined inside each step) */
  cudaStream_t side;
  cudaEvent_t ev[7];          /* loss done, B1 done, B2 done, B3 done, side stream done; step start, packs done */
  int prepacked;              /* 1: this step's packs are already enqueued (cuda_fused_pack) */
  int (*side_hook)(void *arg, cudaStream_t side); /* when set: enqueued on the side stream at the end of the
                                                   * loss and gradient, after its join (the caller joins again) */
  void *side_arg;
  /* when set (layer-GEMM path): enqueues the gradient norm's part 0 (every
   * layer's but trunk-1's) or part 1 (trunk-1's) on the given stream; called
   * with side_arg once those gradients are ordered before it, so the caller's
   * optimiser skips its own norm launch */
  int (*norm_hook)(void *arg, cudaStream_t st, int part);
} cuda_fused_t;

/* Sets up the fused path for batch B (f->ok = 0 when shapes do not fit:
 * callers then use the generic kernels); x is the workspace's [2B, S] input
 * (s then s'). mode: 0 fp32, layer-GEMM phases (DQN_CUDA_FUSED_GEMM=0 selects
 * the row-tile kernels instead); 1 TF32 (the tensor_cores config), layer-GEMM
 * phases; 2 fp32 FFMA row tiles (the previous default); 3 3xTF32 row tiles;
 * 4 fp32 FFMA clusters; 5 TF32 row tiles (the previous tensor_cores path);
 * 6 fp32 layer-GEMM on FFMA; 7 fp32 layer-GEMM on 3xTF32. 0 or a cudaError_t. */
int cuda_fused_alloc(cuda_fused_t *f, const net_layout_t *L, int B, int mode, const float *x);
void cuda_fused_free(cuda_fused_t *f);

#ifdef __cplusplus
}
#endif
#endif
