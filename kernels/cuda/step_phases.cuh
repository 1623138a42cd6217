/*
 * step_phases.cuh — the CUDA training step's loss and gradient as phases (issues 4,
 * 5 and 13): the twin of dqn_loss_grad_f32 (kernels/cpu/loss_impl.h) in ~14
 * launches instead of ~60. One file per phase, step.cu ordering them:
 *
 *   pack.cu     effective (NoisyNet-composed) weights of the online and
 *               target networks in nn.Linear layout, W [out][in]; the noise
 *   gemm.cu     the layer GEMM every phase below runs on: 32 x 64 output
 *               tiles over all rows at once, operands through a 4-stage
 *               cp.async ring, split-K for deep and narrow products (64 x 128
 *               tiles where a phase has two per SM); FFMA, or TF32 mma.sync
 *               for tensor_cores
 *   step_forward.cu  F1..F4, one launch per layer (trunk 1, trunk 2, all head-1
 *               layers side by side, all head-2 layers; online s and s',
 *               target s' as problems of one launch), then the tail: dueling
 *               combine and log-softmax, a warp per (row, branch)
 *   attn.cu     with attention (docs/learner.md §7) between F2 and F3: the block
 *               on h, the heads reading h'; its backward after B2
 *   step_loss.cu     one block per sample, all branches: Double-DQN action, C51
 *               projection, cross-entropy, dlogits (dV and every dA_d); the
 *               batch loss
 *   step_loss_ens.cu the same with K head sets (docs/learner.md §8): masks, the
 *               diversity term, priorities from mean_k CE
 *   step_backward.cu B1..B3, input gradients through head 2, head 1 and trunk 2
 *               (pre-activation gradients kept), and every weight, bias and
 *               NoisyNet sigma gradient: the same GEMM with A = dY^T, in four
 *               groups by the gradient they read (g2, g1, gh, gt1)
 *   step.cu     the step graph: the side stream and events, the order of
 *               the phases (the weight-gradient groups on the side stream
 *               beside B1..B3), the capture of a training step
 *
 * Every sum has one fixed order (the only atomics are split-K arrival
 * counters; the last part to arrive adds the parts in split order), so reruns
 * are bit-identical. The history of the kernels (row tiles, clusters,
 * 3xTF32, ...) is in kernels/dev/README.md and DEVICE_NOTES.md.
 *
 * Why a launch per layer: a sample's loss needs its online-s, online-s' and
 * target-s' rows, which come from different blocks, and the parameter
 * gradients reduce over the whole batch; a block that runs the whole network
 * for a few rows is one long latency-bound chain (kernels/dev/DEVICE_NOTES.md
 * items 16-23), so each layer gets the whole GPU instead.
 *
 * Shapes: B batch, S state, H1/H2 trunk, VH/AH head widths, HC = VH + D*AH
 * (all head hidden units side by side), Z atoms, AW = sum_d n_d Z (all
 * advantage outputs), O2 = Z + AW (value then advantage outputs of the second
 * head layers).
 */
#ifndef DQN_CUDA_STEP_PHASES_CUH
#define DQN_CUDA_STEP_PHASES_CUH

#include <cuda_runtime.h>

#include "generic_forward.cuh"
#include "net_layout.h"
#include "pz.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* offsets (floats) of one packed network (pack.cu) */
typedef struct fused_pack_layout {
  long long t1, t2, hc1, hc2;     /* weights */
  long long bt1, bt2, bhc1, bhc2; /* biases */
  long long total;
} fused_pack_layout_t;

/* layer-GEMM phases: F1..F4, B1..B3, then the weight gradients in four
 * groups by the gradient they read (g2, g1, gh, gt1: each starts as soon as
 * the backward phase that writes it is done) */
#define GEMM_PHASES 11
/* problems in one phase at most: F4 runs every head set's value and branch
 * second layers for both networks */
#define GEMM_MAXP (2 * LEARNER_MAX_ENSEMBLE * (1 + LEARNER_MAX_BRANCHES))
/* a launch's block -> problem index (gemm.cu): every problem's first block
 * when a phase has up to GEMM_IX problems (one head set: 2 x (1 + 16) + 4 at
 * most), else every stride-th problem's, refined in the problem table */
#define GEMM_IX 40
enum { PH_F1 = 0, PH_B1 = 4, PH_WG = 7 }; /* F_k = PH_F1 + k - 1, B_k = PH_B1 + k - 1, group g = PH_WG + g */

typedef struct cuda_fused {
  int ok;                     /* 1: shapes fit; the fused path can run */
  cuda_pz_t pz;               /* the members each launch runs (pz.cuh): {1, 0} for a lone learner */
  int tc;                     /* arithmetic: 0 fp32 FFMA, 1 TF32 mma.sync (tensor_cores) */
  int HC, O2, AW;
  /* head sets (docs/learner.md §8; pack.cu): K sets side by side, each with its
   * prior merged in when pr (VHp = 2 VH, AHp = 2 AH hidden units, else VH,
   * AH); SW1 = VHp + D AHp hidden units and SO = Z + AW outputs per set, SH2
   * = Z VHp + AW AHp second-layer weights per set; HC = K SW1, O2 = K SO; LW
   * = K AW, a logp row. K = 1 without priors is the plain layout. */
  int K, pr, VHp, AHp, SW1, SO, LW;
  long long SH2;
  int ens;                    /* 1: the ensemble loss (step_loss_ens.cu): K > 1 or bootstrap masks */
  const float *prior;         /* the prior vector (device, the caller's) and beta_p */
  float beta;
  void *pack_tab;             /* the sets' pack jobs (pack.cu; NULL: the plain pack) */
  int pack_n, pack_train;     /* jobs; the trained layers' come first */
  float *ens_mask, *ce_mean; /* ensemble loss: the masks [B, K], mean_k CE^k_i [B] */
  long long ens_blocks; /* the ensemble loss's plan (step_loss_ens.cu): for this many blocks, */
  int ens_nw;           /* warps a block */
  size_t ens_smem;      /* and shared bytes */
  /* bootstrap masks (step_loss_ens.cu): given [B, K] (mask_in, device: tests), or
   * Philox (mask_seed, the sampled slot's insertion count, k) < mask_p from
   * the sampled slots idx [B] and ring = {head, total} (device) of a ring of
   * cap slots; all 1 when mask_p >= 1 */
  const float *mask_in;
  float mask_p;
  unsigned long long mask_seed;
  const unsigned long long *seed_dev; /* set: the mask seed is read here (device; a population's members differ) */
  const long long *idx, *ring;
  long long cap;
  float lambda;               /* the diversity weight, or read from lambda_dev when set (graphs) */
  const float *lambda_dev;
  /* attention (docs/learner.md §7; attn.cu) between F2 and F3: its activations
   * over the 3B rows (the heads read at.hatt), its backward's scratch and
   * dL/dh' [B, H2] (B2's output); it reads the parameter vectors p_on, p_tg */
  int attn;
  cuda_attn_acts_t at;
  cuda_attn_grads_t ag;
  float *gatt;
  float *awg;                 /* the attention parameter gradients' split scratch (attn.cu) */
  const float *p_on, *p_tg;
  int aoff[LEARNER_MAX_BRANCHES]; /* branch d's first advantage output: sum_{e<d} n_e Z */
  fused_pack_layout_t pw;     /* the W [out][in] packs */
  float *mem;
  float *w_on, *w_tg;         /* packs: online, target */
  float *logp;                /* [3B, AW] online s, online s', target s' */
  float *h1, *h, *hh;         /* activations [3B,H1], [3B,H2], [3B,HC] (the backward reads the first B rows) */
  float *O;                   /* [3B, O2] second head layers' outputs */
  float *g2, *g1, *gh, *gt1;  /* pre-activation gradients [B,O2], [B,HC], [B,H2], [B,H1] */
  void *probs;                /* device array of every phase's matrix products (gemm.cu) */
  void *wg_maps;              /* their TMA descriptors where a phase runs wgmma tiles (gemm_wgmma.cu), or NULL */
  int ph[GEMM_PHASES][2];     /* per phase: first problem, problems (0: none) */
  int ph_blocks[GEMM_PHASES]; /* blocks per phase */
  int ph_big[GEMM_PHASES];    /* 1: the phase runs 64 x 128 FFMA tiles, 2: 128 x 128 wgmma ones (gemm_wgmma.cu) */
  int ph_tiles[GEMM_PHASES];  /* output tiles of the phase (one member's) */
  int ph_occ, nsm;            /* the planner's blocks per SM aimed for; the device's SMs */
  int ph_blk0[GEMM_PHASES][GEMM_IX]; /* the launch's lookup table (gemm.cu's gidx_t) */
  int ph_stride[GEMM_PHASES];         /* problems per lookup entry (1: every problem's first block) */
  int ph_sblocks[2][GEMM_PHASES];           /* blocks of a population's SER / SER2 launch (gemm.cu) */
  int ph_sblk[2][GEMM_PHASES][GEMM_IX];     /* and their lookup tables */
  float *gpart;               /* split-K partial sums */
  int *gcnt;                  /* split-K arrival counters per tile (zero between launches) */
  /* step.cu: the weight-gradient groups and the batch loss run on a second
   * stream beside the backward (forked and joined inside each step) */
  cudaStream_t side;
  cudaEvent_t ev[7];          /* loss done, B1 done, B2 done, B3 done, side stream done; step start, packs done */
} cuda_fused_t;

typedef struct cuda_dqn_hp {
  float gamma, v_min, v_max, slope;
  int double_dqn;
  const float *gamma_dev; /* if set, gamma is read from device memory (graphs: no re-capture) */
  const float *gdisc;     /* if set, [B] per-row discounts (n-step: gamma^m; her.h) instead of gamma */
} cuda_dqn_hp_t;

/* step.cu. Sets up the phases for batch B (f->ok = 0 when the loss kernel
 * cannot stage these shapes: the generic kernels of generic_loss.cu run then); x
 * is the workspace's [2B, S] input (s then s'). tensor_cores: TF32 arithmetic.
 * gemm_occupancy: blocks per SM the split-K planner aims for (the config's
 * cuda_gemm_occupancy). 0 or a cudaError_t. */
int cuda_fused_alloc(cuda_fused_t *f, const net_layout_t *L, int B, int tensor_cores, int gemm_occupancy,
                     const float *x);
void cuda_fused_free(cuda_fused_t *f);

/* pack.cu: f->pw for L (the sizes f->HC, f->O2, f->AW, f->aoff, the sets' set) */
void cuda_pack_layout(const net_layout_t *L, cuda_fused_t *f);
/* the floats cuda_fused_alloc's one buffer takes (0: the phases cannot stage L) */
size_t cuda_fused_floats(const net_layout_t *L, int B);
/* pack.cu: the sets' pack job table (K > 1 or priors) into f->pack_tab */
int cuda_pack_table(const net_layout_t *L, cuda_fused_t *f);
/* pack.cu: the fixed priors into both packs: once, after f->prior is set or loaded */
int cuda_pack_priors(const cuda_fused_t *f, cudaStream_t st);
/* both networks' effective weights into f's packs; the noise fn_on / fn_tg
 * (already f-transformed) composed when noisy. tg_stale (device, may be
 * NULL: always): the target's part only where it is nonzero (the training
 * step without NoisyNet: the target changes at its copies, not every step) */
int cuda_pack_weights(const net_layout_t *L, const cuda_fused_t *f, const float *online, const float *target,
                      int noisy, const float *fn_on, const float *fn_tg, const int *tg_stale, cudaStream_t st);
/* NoisyNet noise: N(0,1) from Philox (seed, or *seed_dev when set, stream, counter = *step, or
 * act_counter when use_act_counter), lane = element / 4, then f(x) = sign(x)
 * sqrt|x| into eps [n] */
int cuda_noise(const unsigned long long *step, unsigned long long seed, const unsigned long long *seed_dev,
               cuda_pz_t pz, unsigned stream, int use_act_counter,
               unsigned long long act_counter, float *eps, long long n, cudaStream_t st);

/* gemm.cu: one layer-GEMM phase (PH_F1 + 0..3, PH_B1 + 0..2, PH_WG + 0..3);
 * grad and fn: the weight gradients' output and NoisyNet noise */
int cuda_gemm_phase(const cuda_fused_t *f, int ph, float slope, float *grad, const float *fn, cudaStream_t st);

/* step_forward.cu: F1..F4 and the tail, rows of x into f->logp */
int cuda_forward(const net_layout_t *L, const cuda_fused_t *f, int B, float slope, float *grad, const float *fn,
                 cudaStream_t st);

/* step_loss.cu: 1 when the loss kernel can stage L's shapes (48 KB of shared
 * memory per block) */
int cuda_loss_fits(const net_layout_t *L);
/* 1: cuda_loss forms the tail's rows itself from f->O and cuda_forward ends
 * at F4 (one head set, the rows within 48 KB: step_loss.cu) */
int cuda_loss_takes_tail(const net_layout_t *L, const cuda_fused_t *f);
/* the loss of every sample from f->logp (or f->O: cuda_loss_takes_tail): loss_i [B] and the Q sums qsum_i
 * [B] (at loss_i + B), best [D, B], and dlogits into f->g2 */
int cuda_loss(const net_layout_t *L, const cuda_dqn_hp_t *hp, const cuda_fused_t *f, int B, const float *r,
              const float *done, const float *w, const int32_t *a, float *loss_i, int32_t *best, cudaStream_t st);
/* step_loss_ens.cu: the same with K head sets (f->ens): loss_i and qsum_i [B] (at
 * loss_i + B), f->ce_mean (the priority's loss), dlogits into f->g2 */
int cuda_loss_ens_fits(const net_layout_t *L); /* 1: one row's warp and the sample's arrays fit a block */
int cuda_loss_ens(const net_layout_t *L, const cuda_dqn_hp_t *hp, cuda_fused_t *f, int B, const float *r,
                  const float *done, const float *w, const int32_t *a, float *loss_i, cudaStream_t st);
/* loss = sum_i w_i loss_i / B, q_taken = sum_i qsum_i / (B D); D: branches x heads */
int cuda_batch_loss(const float *loss_i, const float *qsum_i, const float *w, int B, int D, float *loss,
                    float *q_taken, cuda_pz_t pz, cudaStream_t st);

/* step_backward.cu: B_k (k = 1..3) and the weight-gradient group g (0..3: the
 * layers whose output gradient is g2, g1, gh, gt1) */
int cuda_backward(const cuda_fused_t *f, int k, float slope, float *grad, const float *fn, cudaStream_t st);
int cuda_weight_grads(const cuda_fused_t *f, int g, float slope, float *grad, const float *fn, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
