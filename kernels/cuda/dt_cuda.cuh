/*
 * dt_cuda.cuh — the Decision Transformer's loss and exact gradient on the
 * GPU (docs/learner.md §16): the CUDA mirror of kernels/cpu/dt.h's
 * dt_loss_grad, for a batch of B windows already in device memory. The
 * names follow the CPU spec (dt_ln, dt_lin, dt_gelu, the activations of
 * dt_acts_t). Every token of every window is a row of one matrix of
 * T = B x 3K rows, so each linear layer is one GEMM over all windows; padded
 * tokens are computed from zeros and reach nothing (they are never keys,
 * their output gradients are zero), so their rows add exact zeros. Every sum
 * has a fixed order (no atomics): reruns are bit-identical. The GEMMs are
 * 64 x 64 shared-memory tiles: 4 x 4 outputs a thread in fp32; in TF32
 * wgmma (dt_wgmma.cu) or mma.sync (kernels/dev/DEVICE_NOTES.md items 76-79,
 * 91-102 have their speed).
 */
#ifndef DQN_CUDA_DT_CUH
#define DQN_CUDA_DT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "dt.h"
#include "pz.cuh"

/* The side streams. The forward runs the real steps' count (and under
 * dt_pre the rounded weights) on 0 beside the embeddings, and k's and v's
 * products on 0 and 1 beside q's. The backward keeps the parameters'
 * gradients off its critical path: the weight gradients (and their split-K
 * scratch d->tmp) on DT_SIDE_W, the biases' column sums (and the loss's
 * sum) on DT_SIDE_B, the LayerNorms' gamma and beta sums (one pass,
 * dt_colsum_pair) on DT_SIDE_LN, and there too each layer's W_v gradient
 * after LN1's sums (its split-K scratch dhkv, dt_backward.cu), each in the
 * order it always had, so the same sums; k's and v's input gradients on DT_SIDE_K and DT_SIDE_V beside
 * q's, and at the end the state embedding's and the time rows' gradients
 * there beside the other rows'. The first DT_READERS are the ones that read
 * what the backward's own stream writes again (cuda_dt_t.rd). */
#define DT_SIDE_W 0
#define DT_SIDE_B 1
#define DT_SIDE_LN 2
#define DT_READERS 3
#define DT_SIDE_K 3
#define DT_SIDE_V 4
#define DT_SIDES 5
/* the buffers the backward's side streams read that its own stream writes
 * again (cuda_dt_t.rd) */
enum { DT_RD_DX, DT_RD_DU, DT_RD_DH, DT_RD_DXM, DT_RD_QKV, DT_RD_DXS, DT_RD_HKV, DT_RD_N };

/* a weight gradient's split-K reduce, deferred (dt_gemm_wgrad_ex): its
 * parts, bias parts, outputs, and its blocks (cblocks of C's, nb in all) */
typedef struct {
  const float *part, *bpart;
  float *C, *db;
  int parts, M, N, ldc, cblocks, nb;
} dt_red_one_t;
#define DT_RED_MAX 3
typedef struct {
  dt_red_one_t p[DT_RED_MAX];
  int n;
} dt_red_t;

typedef struct cuda_dt {
  dt_layout_t L;
  int B;                                  /* windows a batch */
  int tc;                                 /* the GEMMs' arithmetic: 0 fp32, 1 TF32 operands (tensor_cores) */
  int wg;                                 /* 1: TF32 GEMMs on wgmma where they fit (dt_wgmma.cu; sm_90a) */
  void *tma;                              /* with wg, the TMA tile's map encoder (dt_tma.cu), or NULL */
  int pre;                                /* with tc and tma, 1 (cuda_dt_alloc's default): the operands made only
                                           * for TF32 GEMMs are written TF32-rounded (wr, wT, h1, h2, gl) and the
                                           * TMA tile rounds only the others (dt_tf32_ops), and where the TF32
                                           * attention runs (dt_attn_pre) so are its q, k, v and dO, which it
                                           * then stages without rounding; 0: every tile and the attention round
                                           * every operand (the same bits: rounding twice is rounding once) */
  int big;                                /* 1 (cuda_dt_alloc's default): fp32 launches with enough tiles on the
                                           * 128 x 128 tile (dt_gemm_big.cuh); 0: all on the 64 x 64 tile (the
                                           * same bits) */
  int big_one, nsm;                       /* the dynamic shared bytes that keep a 128 tile block alone on its SM
                                           * (dt_big_init); the device's SMs */
  int fwd;                                /* 1 while dt_forward issues the forward: dt_big_takes' forward rule */
  float *p, *g;                           /* parameters, gradient [n_params] (device) */
  /* the batch (device): states [B, K, S], rtg [B, K] (scaled), mask [B, K]; actions, timesteps [B, K] */
  float *states, *rtg, *mask;
  int32_t *actions, *timesteps;
  /* activations, token-major (T = B x 3K rows) */
  float *x0, *xh0, *r0;                   /* the embeddings, LN_embed's xhat and 1/std */
  float *X;                               /* the residual stream entering block l: [L + 1][T, E] */
  float *h1, *xh1, *r1, *q, *k, *v, *P, *att, *xm, *h2, *xh2, *r2, *gd, *gl; /* [L][...]; P [L][B, nh, N, N]; gd,
                                           * gl [L][T, 4E]: gelu'(u), gelu(u) of the MLP's pre-activation u */
  float *xhf, *rf;                        /* LN_f's xhat and 1/std at the state tokens: [B K, E], [B K] (the
                                           * heads read only those: dt_head_kernel) */
  float *xs;                              /* LN_f's output at the state tokens: [B K, E] */
  float *z, *dz;                          /* logits and their gradient [B K, A] */
  float *loss_step;                       /* [B K]: each real step's branch-mean CE (0 for padding) */
  float *dX, *dxm, *dh, *dq, *dk, *dv, *datt, *du, *dS, *dxf, *dxs, *tmp; /* the backward's */
  float *dhkv;                            /* [2][T, E]: h1's gradient's k and v terms (dk W_k, dv W_v) */
  float *st_real;                         /* [B K, S]: the real steps' states (zeros for padding), W_s's gradient */
  float *wT;                              /* [L][12 E^2]: each block's W_q, W_k, W_v, W_o, W_1, W_2 transposed (DT_WT_*),
                                           * made at the backward's start where the TMA tile runs (tc, tma): the
                                           * input gradients' B operands K-major (TF32-rounded with dt_pre) */
  float *wr;                              /* [L][12 E^2]: with dt_pre, the same weights untransposed and rounded to
                                           * TF32 (DT_WT_* places), made at the forward's start: its B operands */
  size_t tmp_cap;                         /* tmp's floats: the column sums' scratch */
  float *csum[3];                         /* the column sums' scratch: [0] the biases' (side[DT_SIDE_B]), [1] and
                                           * [2] the LayerNorms' gammas' and betas' (DT_SIDE_LN); 64 chunks of the widest */
  size_t csum_cap;                        /* floats each */
  int attn_win;                           /* the attention's way (dt_attn.cu): a block a window, or a query */
  int attn_tc;                            /* the shapes fit dt_attn_tc.cu's mma.sync kernels (run with tc) */
  int attn_one;                           /* with attn_tc, 1 where the backward's one-launch form fits the
                                           * device's shared memory (cuda_dt_alloc) */
  int attn_pair;                          /* with attn_tc, 1 where its pair form (a cluster of two blocks a
                                           * window) fits and the device runs clusters */
  int attn_form;                          /* -1: dt_attn_tc_bwd_form's rule (cuda_dt_alloc); the tests force a
                                           * form (DT_ATC_TWO, _ONE, _PAIR; where it fits): the same bits */
  int head_wpb;                           /* dt_head.cu's warps (steps) a block: their rows fit shared memory */
  int head_sw;                            /* dt_head.cu: the heads' weights staged in shared memory (they fit) */
  int red_oqk;                            /* each layer's W_o, W_q and W_k weight gradients' split-K reduces in
                                           * one launch, their parts in thirds of the scratch (the same bits;
                                           * dt_backward.cu's red_oqk): 1 (cuda_dt_alloc's default) in TF32
                                           * where the step's tokens fill the GPU, 2 wherever the thirds give
                                           * the whole's split (the tests), 0 never */
  int v_ln;                               /* 1 (cuda_dt_alloc's default): each layer's W_v weight gradient on
                                           * DT_SIDE_LN where v_wgrad_on_ln allows (dt_backward.cu); 0: last on
                                           * DT_SIDE_W (the tests: the same bits) */
  cudaStream_t side[DT_SIDES];            /* work beside the caller's stream (branches of the graph; DT_SIDE_*) */
  cudaEvent_t fork, join[DT_SIDES];
  /* the backward's reads on the side streams (dt_backward.cu): rd[s][i] is
   * recorded on side[i] after the reads of buffer s queued there, and the
   * caller's stream waits for it before it writes s again; bit i of
   * rd_live[s]: recorded in this backward */
  cudaEvent_t rd[DT_RD_N][DT_READERS];
  unsigned rd_live[DT_RD_N];
  float *sums;                            /* [4]: the loss, the real steps, the squared norm */
  cuda_pz_t pz;                           /* the members each launch runs ({1, 0} alone; "DT populations" below) */
} cuda_dt_t;

/* where each block's transposed weights lie in its 12 E^2 floats of wT */
#define DT_WT_Q 0
#define DT_WT_K 1
#define DT_WT_V 2
#define DT_WT_O 3
#define DT_WT_1 4 /* W_1^T [E][4E] */
#define DT_WT_2 8 /* W_2^T [4E][E] */
#define DT_WT_FLOATS 12

/* what a DT GEMM's epilogue writes (dt_gemm_op's op, dt_ep_store), for
 * output (m, n) of value v (the product): */
#define DT_EP_PLAIN 0 /* C (=, += with acc) v + bias + R */
#define DT_EP_GELU 1  /* u = v + bias (+ R): C = gelu'(u), G = gelu(u) (G: C's layout; the MLP's GELU, and its
                       * derivative for the backward, from one tanh) */
#define DT_EP_DGELU 2 /* C = v R: the MLP's input gradient through the GELU whose derivative R holds */
#define DT_EP_GELU_T 3 /* DT_EP_GELU with G rounded to TF32 (dt_pre: G is read by TF32 GEMMs alone) */
#define DT_EP_PLAIN_T 4 /* DT_EP_PLAIN with C rounded to TF32 (dt_attn_pre: C is read by the TF32 attention alone) */

#ifdef __cplusplus
extern "C" {
#endif
/* device buffers for batches of B windows of layout L; 0 or a cudaError_t */
int cuda_dt_alloc(cuda_dt_t *d, const dt_layout_t *L, int B);
void cuda_dt_free(cuda_dt_t *d);
/* the loss and gradient of the batch in d's buffers, as dt_loss_grad_f32:
 * d->g the gradient, d->sums[0] the loss, d->sums[1] the real steps,
 * d->loss_step and d->z each step's CE and logits (0 for padding); queued
 * on st. 0 or a cudaError_t. */
int cuda_dt_loss_grad(cuda_dt_t *d, cudaStream_t st);
/* its forward alone: d->z, d->loss_step, d->sums[0..1] (Act reads the logits) */
int cuda_dt_forward(cuda_dt_t *d, cudaStream_t st);
/* for the tests: one TF32 GEMM as the DT makes them, on device buffers (C
 * (=, += with acc) op(A) op(B) + bias, dt.cu's dt_gemm), or with part (cap
 * floats of scratch) split over k as the weight gradients are
 * (dt_gemm_wgrad, C +=); wg 2: on the TMA tiles where one fits, else as
 * wg 1: on the wgmma tile where it fits, else (and wg 0) the mma.sync
 * tile; wg 3: on the TMA tile rounding neither operand (A and B TF32
 * values already, as dt_pre's producers write them; cudaErrorNotSupported
 * where the tile does not take the call); *used: where it ran
 * (dt_wg_takes's 0 to 3, or 4 for wg 3); op, R, ldr, G as dt_gemm_op's
 * (unsplit only); with part, db (NULL, or M floats) += op(A)'s row sums
 * (dt_gemm_wgrad's fused bias gradient where dt_wgrad_fuses, else
 * dt_colsum's); synchronised. 0 or a cudaError_t. */
int cuda_dt_gemm_tf32(int wg, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
                      float *C, int ldc, const float *bias, int acc, int op, const float *R, int ldr, float *G,
                      float *part, size_t cap, float *db, int *used);
/* for the tests: the stages of the TMA tile's ring in a lone launch of an
 * M x N product over K on this device (dt_tma_stages); 0 on an error */
int cuda_dt_tma_stages(int M, int N, int K);
/* for the tests: one fp32 GEMM as the DT makes them (unsplit, dt_gemm_op's
 * arguments) on the 128 x 128 tile where big and it takes the call, else on
 * the 64 x 64 tile (big 2: by the forward's rule, as dt_forward issues it);
 * *used: 1 where the 128 tile ran; synchronised. 0 or a
 * cudaError_t. */
int cuda_dt_gemm_f32(int big, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
                     float *C, int ldc, const float *bias, int acc, int op, const float *R, int ldr, float *G,
                     int *used);
/* for the tests: one fp32 weight gradient as the DT makes them (dt_gemm_wgrad:
 * C += op(A) op(B) split over k, part cap floats of scratch) and, with db (M
 * floats), db += op(A)'s row sums, fused into the FFMA tile where
 * dt_wgrad_fuses (*fused 1), else by dt_colsum; *kper: the k a split part
 * takes (K unsplit); synchronised. 0 or a cudaError_t. */
int cuda_dt_gemm_f32_wgrad(int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
                           float *C, int ldc, float *part, size_t cap, float *db, int *fused, int *kper);
/* dt_attn_tc_bwd's forms: two launches, one, or a pair of blocks a window
 * (thread-block clusters) */
#define DT_ATC_TWO 0
#define DT_ATC_ONE 1
#define DT_ATC_PAIR 2
/* for the tests: the attention of layer 0's buffers (q, k, v, mask -> P,
 * att) and its backward (datt -> dS, dq, dk, dv) as the step runs them;
 * *ws: 0 on the FFMA kernels, else on dt_attn_tc.cu's TF32 kernels with
 * *ws warps a slab; *form: their backward's form (DT_ATC_TWO with the FFMA
 * kernels); synchronised. 0 or a cudaError_t. */
int cuda_dt_attn_run(cuda_dt_t *d, int *ws, int *form);
/* for the tests: dt_attn_pre (the attention's inputs arrive rounded) */
int cuda_dt_attn_pre(const cuda_dt_t *d);
/* for the tests: 1 where the backward puts W_v's weight gradient on the
 * LayerNorm sums' stream (with v_ln: dt_backward.cu's v_wgrad_on_ln) */
int cuda_dt_v_ln_takes(const cuda_dt_t *d);
/* for the tests: 1 where the backward reduces W_o's, W_q's and W_k's weight
 * gradients in one launch (by red_oqk: dt_backward.cu's red_oqk) */
int cuda_dt_red_oqk_takes(const cuda_dt_t *d);
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include "pdl.cuh"

/* DT populations (docs/population.md, "The Decision Transformer"): every
 * member's DT buffers lie at member 0's plus i x pz.stride bytes (the
 * arena), so each launch runs all pz.n members with grid z = pz.n x its own
 * z: block z works for member z % pz.n on its own z / pz.n. A member's
 * blocks do exactly what a lone learner's do (the plans depend on the
 * shapes alone), so a member is bit for bit its lone twin. */
/* a kernel whose own grid has z 1: block z works for member z */
static __device__ __forceinline__ long long dt_mo(cuda_pz_t pz) { return (long long)blockIdx.z * pz.stride; }
/* a kernel with its own z: member z % n on its own z / n (alone, n 1:
 * no division) */
static __device__ __forceinline__ long long dt_moz(cuda_pz_t pz) {
  return pz.n == 1 ? 0 : (long long)(blockIdx.z % (unsigned)pz.n) * pz.stride;
}
static __device__ __forceinline__ int dt_z(cuda_pz_t pz) {
  return pz.n == 1 ? (int)blockIdx.z : (int)(blockIdx.z / (unsigned)pz.n);
}
static __device__ __forceinline__ int dt_nz(cuda_pz_t pz) {
  return pz.n == 1 ? (int)gridDim.z : (int)(gridDim.z / (unsigned)pz.n);
}
/* p moved by mo bytes (the member's offset); dt_off0 keeps NULL NULL */
template <typename T> static __device__ __forceinline__ T *dt_off(T *p, long long mo) {
  return (T *)((char *)p + mo);
}
template <typename T> static __device__ __forceinline__ T *dt_off0(T *p, long long mo) {
  return p ? dt_off(p, mo) : p;
}
/* dt_moz in floats (from any float buffer of member 0), for kernels whose
 * threads do enough work that a division each is nothing */
static __device__ __forceinline__ size_t dt_mf(cuda_pz_t pz) {
  return (size_t)(blockIdx.z % (unsigned)pz.n) * (size_t)(pz.stride / 4);
}
/* a launch's grid with the members along z */
static inline dim3 dt_grid(const cuda_dt_t *d, dim3 g) {
  g.z *= (unsigned)d->pz.n;
  return g;
}
/* bytes at p zeroed for every member */
int dt_zero(const cuda_dt_t *d, void *p, size_t bytes, cudaStream_t st);

/* shared by dt.cu and dt_backward.cu */
#define DT_LN_EPS 1e-5f
#define DT_GELU_C 0.7978845608028654f
/* the CPU spec's dt_gelu(u) into *g and its dt_gelu_d(u) returned
 * (kernels/cpu/dt_impl.h), from one tanh */
static __device__ __forceinline__ float dt_gelu_both(float u, float *g) {
  const float t = tanhf(DT_GELU_C * (u + 0.044715f * u * u * u));
  *g = 0.5f * u * (1.0f + t);
  return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * DT_GELU_C * (1.0f + 3.0f * 0.044715f * u * u);
}
/* x rounded to TF32 as every TF32 tile rounds its operands (gemm_dev.cuh's
 * f2tf32: to nearest, ties away; rounding a rounded value changes nothing) */
static __device__ __forceinline__ float dt_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}
/* the kernels that give each warp one row (a token, a step, a column):
 * this warp's row across the grid */
static __device__ __forceinline__ int dt_warp_row() { return (int)(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32); }
/* LayerNorm of one token's row xr by one warp (lane: this thread's lane):
 * xhat into xh, y = xhat gamma + beta into y (rounded to TF32 with rnd);
 * returns 1/std. Each lane takes the elements lane, lane + 32, .. in turn,
 * then a fixed tree over the lanes (dt_ln_kernel, dt_embed_kernel's two and
 * LN_f in dt_head.cu: the same bits). Rows of up to 32 R elements load
 * every element, gamma and beta a lane's first, in flight together (R 4: up
 * to E = 128), and sum the same terms in the same order as the loop below
 * (kernels/dev/DEVICE_NOTES.md item 152). */
template <int R>
static __device__ __forceinline__ float dt_ln_row_r(const float *xr, int E, int lane, const float *gam,
                                                    const float *bet, float *xh, float *y, int rnd) {
  float x[R], g[R], b[R];
#pragma unroll
  for (int j = 0; j < R; j++) {
    const int e = lane + 32 * j;
    x[j] = e < E ? xr[e] : 0.0f, g[j] = e < E ? gam[e] : 0.0f, b[j] = e < E ? bet[e] : 0.0f;
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < R; j++)
    if (lane + 32 * j < E) s += x[j];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mean = s / (float)E;
  float v = 0;
#pragma unroll
  for (int j = 0; j < R; j++)
    if (lane + 32 * j < E) v += (x[j] - mean) * (x[j] - mean);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const float r = 1.0f / sqrtf(v / (float)E + DT_LN_EPS);
#pragma unroll
  for (int j = 0; j < R; j++) {
    const int e = lane + 32 * j;
    if (e >= E) break;
    const float h = (x[j] - mean) * r;
    xh[e] = h;
    const float o = h * g[j] + b[j];
    y[e] = rnd ? dt_tf32(o) : o;
  }
  return r;
}
static __device__ __forceinline__ float dt_ln_row(const float *xr, int E, int lane, const float *gam, const float *bet,
                                                  float *xh, float *y, int rnd) {
  if (E <= 128) return dt_ln_row_r<4>(xr, E, lane, gam, bet, xh, y, rnd);
  float s = 0;
  for (int e = lane; e < E; e += 32) s += xr[e];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mean = s / (float)E;
  float v = 0;
  for (int e = lane; e < E; e += 32) v += (xr[e] - mean) * (xr[e] - mean);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const float r = 1.0f / sqrtf(v / (float)E + DT_LN_EPS);
  for (int e = lane; e < E; e += 32) {
    const float h = (xr[e] - mean) * r;
    xh[e] = h;
    const float o = h * gam[e] + bet[e];
    y[e] = rnd ? dt_tf32(o) : o;
  }
  return r;
}

/* LayerNorm's input gradient of one token's row by one warp: dx[e] = res[e]
 * (0 where res is NULL; res may be dx) + rstd (dy(e) gamma - mean(dy gamma)
 * - xhat mean(dy gamma xhat)), dy(e) the row's output gradient (a functor:
 * dt_ln_bwd_kernel's sum of three buffers, dt_head.cu's shared row); the
 * means' sums as dt_ln_row's, and as there rows of up to 128 with every
 * load a lane's first */
template <typename DY>
static __device__ __forceinline__ void dt_ln_bwd_row(DY dy, const float *xh, float r, const float *gam, int E,
                                                     int lane, float *dx, const float *res) {
  float m1 = 0, m2 = 0;
  if (E <= 128) {
    float d[4], x[4], g[4], q[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int e = lane + 32 * j;
      d[j] = e < E ? dy(e) : 0.0f, x[j] = e < E ? xh[e] : 0.0f, g[j] = e < E ? gam[e] : 0.0f;
      q[j] = e < E && res ? res[e] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (lane + 32 * j < E) {
        const float t = d[j] * g[j];
        m1 += t, m2 += t * x[j];
      }
    for (int o = 16; o > 0; o >>= 1) {
      m1 += __shfl_xor_sync(0xffffffffu, m1, o);
      m2 += __shfl_xor_sync(0xffffffffu, m2, o);
    }
    m1 /= (float)E, m2 /= (float)E;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int e = lane + 32 * j;
      if (e >= E) break;
      dx[e] = q[j] + r * (d[j] * g[j] - m1 - x[j] * m2);
    }
    return;
  }
  for (int e = lane; e < E; e += 32) {
    const float t = dy(e) * gam[e];
    m1 += t, m2 += t * xh[e];
  }
  for (int o = 16; o > 0; o >>= 1) {
    m1 += __shfl_xor_sync(0xffffffffu, m1, o);
    m2 += __shfl_xor_sync(0xffffffffu, m2, o);
  }
  m1 /= (float)E, m2 /= (float)E;
  for (int e = lane; e < E; e += 32) dx[e] = (res ? res[e] : 0.0f) + r * (dy(e) * gam[e] - m1 - xh[e] * m2);
}
/* dt_ep_store: what a DT GEMM's epilogue writes for output (m, n) of value
 * v (the product), by dt_gemm_op's op (DT_EP_*, above) */
static __device__ __forceinline__ void dt_ep_store(float v, int m, int n, float *C, int ldc, const float *bias,
                                                   const float *R, int ldr, int acc, int op, float *G) {
  float *o = C + (size_t)m * ldc + n;
  if (op == DT_EP_DGELU) {
    *o = v * R[(size_t)m * ldr + n];
    return;
  }
  if (bias) v += bias[n];
  if (R) v += R[(size_t)m * ldr + n];
  if (op == DT_EP_GELU || op == DT_EP_GELU_T) {
    float g;
    *o = dt_gelu_both(v, &g);
    G[(size_t)m * ldc + n] = op == DT_EP_GELU_T ? dt_tf32(g) : g;
    return;
  }
  v = acc ? *o + v : v;
  *o = op == DT_EP_PLAIN_T ? dt_tf32(v) : v;
}
/* 1 where an epilogue may write (and read) each thread's W adjacent outputs
 * (m, n) .. (m, n + W - 1) of an n that is a multiple of W as one float2 (W
 * 2) or float4 (W 4): every row of C, R and G aligned to 4 W bytes (uniform
 * across the launch). Whole sectors a warp's store, where single floats
 * wrote a part of each sector W times. */
template <int W>
static __device__ __forceinline__ int dt_ep_vec(const float *C, int ldc, const float *bias, const float *R, int ldr,
                                                const float *G) {
  const uintptr_t a = (uintptr_t)C | (uintptr_t)bias | (uintptr_t)R | (uintptr_t)G;
  return a % (4 * W) == 0 && ldc % W == 0 && (!R || ldr % W == 0);
}
template <int W> struct dt_vec_t;
template <> struct dt_vec_t<2> { typedef float2 t; };
template <> struct dt_vec_t<4> { typedef float4 t; };
/* dt_ep_store of v[i] at (m, n + i), i < W, for n a multiple of W and m < M:
 * one vector each of C, bias, R, G where vec (dt_ep_vec<W>) and n + W <= N;
 * the same arithmetic as W dt_ep_store, so the same bits */
template <int W>
static __device__ __forceinline__ void dt_ep_storev(float (&v)[W], int m, int n, int N, int vec, float *C, int ldc,
                                                    const float *bias, const float *R, int ldr, int acc, int op,
                                                    float *G) {
  typedef typename dt_vec_t<W>::t V;
  if (!vec || n + W > N) {
#pragma unroll
    for (int i = 0; i < W; i++)
      if (n + i < N) dt_ep_store(v[i], m, n + i, C, ldc, bias, R, ldr, acc, op, G);
    return;
  }
  float *o = C + (size_t)m * ldc + n;
  V x, y;
  float *xf = reinterpret_cast<float *>(&x), *yf = reinterpret_cast<float *>(&y);
  if (op == DT_EP_DGELU) {
    y = *reinterpret_cast<const V *>(R + (size_t)m * ldr + n);
#pragma unroll
    for (int i = 0; i < W; i++) xf[i] = v[i] * yf[i];
    *reinterpret_cast<V *>(o) = x;
    return;
  }
  if (bias) {
    y = *reinterpret_cast<const V *>(bias + n);
#pragma unroll
    for (int i = 0; i < W; i++) v[i] += yf[i];
  }
  if (R) {
    y = *reinterpret_cast<const V *>(R + (size_t)m * ldr + n);
#pragma unroll
    for (int i = 0; i < W; i++) v[i] += yf[i];
  }
  if (op == DT_EP_GELU || op == DT_EP_GELU_T) {
#pragma unroll
    for (int i = 0; i < W; i++) {
      xf[i] = dt_gelu_both(v[i], &yf[i]);
      if (op == DT_EP_GELU_T) yf[i] = dt_tf32(yf[i]);
    }
    *reinterpret_cast<V *>(o) = x;
    *reinterpret_cast<V *>(G + (size_t)m * ldc + n) = y;
    return;
  }
  if (acc) {
    y = *reinterpret_cast<const V *>(o);
#pragma unroll
    for (int i = 0; i < W; i++) v[i] = yf[i] + v[i];
  }
#pragma unroll
  for (int i = 0; i < W; i++) xf[i] = op == DT_EP_PLAIN_T ? dt_tf32(v[i]) : v[i];
  *reinterpret_cast<V *>(o) = x;
}
/* the epilogue of a 64 x 64 tile of m64n64 wgmma accumulators, dt_wgmma.cu's
 * and dt_tma.cu's (one code, so the two tiles write the same bits):
 * d[4 j + q] of lane l of warp w is output row m0 + 16 w + l / 4 + 8 (q /
 * 2), column n0 + 8 j + 2 (l % 4) + q % 2; each pair q, q + 1 through
 * dt_ep_storev<2> */
static __device__ __forceinline__ void dt_wg_epilogue(const float (&d)[32], int m0, int n0, int M, int N, float *C,
                                                      int ldc, const float *bias, const float *R, int ldr, int acc,
                                                      int op, float *G) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, vec = dt_ep_vec<2>(C, ldc, bias, R, ldr, G);
#pragma unroll
  for (int e = 0; e < 32; e += 2) {
    const int m = m0 + 16 * w + lane / 4 + 8 * (e % 4 / 2), n = n0 + 8 * (e / 4) + 2 * (lane % 4);
    float v[2] = {d[e], d[e + 1]};
    if (m < M) dt_ep_storev<2>(v, m, n, N, vec, C, ldc, bias, R, ldr, acc, op, G);
  }
}
/* dt_wg_epilogue through shared memory (dt_wgmma.cu's tiles, whose op is a
 * runtime value, and dt_tma.cu's where nothing was read before the
 * mainloop): the accumulators into stage [64][DT_WG_SLD] (a pair a
 * store; rows 72 floats apart, so a half warp's 16 pairs fall in 32
 * banks), then each thread's 8 float4 of the tile, rows m0 + p / 16, by
 * one dt_ep_storev<4> in a loop kept rolled: the epilogue's code once in
 * the kernel, where dt_wg_epilogue inlines it, every op's form, for each
 * of 16 pairs (kernels/dev/DEVICE_NOTES.md item 200: instruction fetch).
 * Each output gets dt_ep_store's arithmetic, so the same bits. stage:
 * 16-byte aligned, free: the caller's barrier before. */
#define DT_WG_SLD 72
static __device__ __forceinline__ void dt_wg_epilogue_staged(const float (&d)[32], float *stage, int m0, int n0,
                                                             int M, int N, float *C, int ldc, const float *bias,
                                                             const float *R, int ldr, int acc, int op, float *G) {
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const int vec = dt_ep_vec<4>(C, ldc, bias, R, ldr, G), rows = M - m0, cb = 4 * (tid % 16);
  /* a thread's column (4 (p % 16), p = tid + 128 i) is the same every
   * iteration, so its bias float4 is loaded once, here, before the stores
   * it could not pass (bias may alias C and G for the compiler: each
   * iteration waited a round trip for it, kernels/dev/DEVICE_NOTES.md
   * item 236), and added as dt_ep_storev adds it, first: the same bits */
  const int b1 = bias && vec && op != DT_EP_DGELU && n0 + cb + 4 <= N;
  const float4 bv = b1 ? *reinterpret_cast<const float4 *>(bias + n0 + cb) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float *bl = b1 ? NULL : bias;
#pragma unroll
  for (int e = 0; e < 32; e += 2) {
    const int r = 16 * w + lane / 4 + 8 * (e % 4 / 2), c = 8 * (e / 4) + 2 * (lane % 4);
    *reinterpret_cast<float2 *>(stage + r * DT_WG_SLD + c) = make_float2(d[e], d[e + 1]);
  }
  __syncthreads();
#pragma unroll 1
  for (int p = tid; p < 64 * 16 && p / 16 < rows; p += 128) {
    const int r = p / 16, c = 4 * (p % 16);
    const float4 x = *reinterpret_cast<const float4 *>(stage + r * DT_WG_SLD + c);
    float v[4] = {x.x, x.y, x.z, x.w};
    if (b1) v[0] += bv.x, v[1] += bv.y, v[2] += bv.z, v[3] += bv.w;
    dt_ep_storev<4>(v, m0 + r, n0 + c, N, vec, C, ldc, bl, R, ldr, acc, op, G);
  }
}
/* The epilogue's reads issued before the mainloop (dt_tma.cu's tile): its
 * R pairs, or with acc and no R its old C pairs (x), and its bias pairs
 * (b), where the tile is whole along n and the rows vector-aligned (on).
 * Each thread's 16 pairs are dt_wg_epilogue's; rows past M read nothing.
 * The loads then land while the chunks are multiplied, where the epilogue
 * waited a round trip for them after (kernels/dev/DEVICE_NOTES.md item
 * 139); every output gets the same arithmetic as dt_ep_storev's, so the
 * same bits. */
struct dt_wg_pf {
  float2 x[16], b[8];
  int on, hx;
};
static __device__ __forceinline__ void dt_wg_prefetch(dt_wg_pf &f, int m0, int n0, int M, int N, const float *C,
                                                      int ldc, const float *bias, const float *R, int ldr, int acc,
                                                      int op, const float *G) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  /* not the GELU's: with its reads before the mainloop, its 32 tanhs
   * took 127 registers and 16.5 us where its own epilogue took 13
   * (kernels/dev/DEVICE_NOTES.md item 140) */
  f.hx = R != NULL || acc;
  f.on = op != DT_EP_GELU && op != DT_EP_GELU_T && !(R && acc) && (f.hx || bias) && n0 + 64 <= N &&
         dt_ep_vec<2>(C, ldc, bias, R, ldr, G);
  if (!f.on) return;
  const float *X = R ? R : C;
  const int ldx = R ? ldr : ldc;
#pragma unroll
  for (int p = 0; p < 16; p++) {
    const int m = m0 + 16 * w + lane / 4 + 8 * (p % 2), n = n0 + 8 * (p / 2) + 2 * (lane % 4);
    f.x[p] = f.hx && m < M ? *reinterpret_cast<const float2 *>(X + (size_t)m * ldx + n) : make_float2(0.0f, 0.0f);
  }
#pragma unroll
  for (int j = 0; j < 8; j++)
    f.b[j] = bias ? *reinterpret_cast<const float2 *>(bias + n0 + 8 * j + 2 * (lane % 4)) : make_float2(0.0f, 0.0f);
}
/* dt_wg_epilogue from f's loads (f.on): DGELU v R; else v + bias, + R,
 * or old C + that with acc, in dt_ep_storev's order (rounded: PLAIN_T) */
static __device__ __forceinline__ void dt_wg_epilogue_pf(const dt_wg_pf &f, const float (&d)[32], int m0, int n0,
                                                         int M, float *C, int ldc, const float *bias, const float *R,
                                                         int acc, int op) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
#pragma unroll
  for (int p = 0; p < 16; p++) {
    const int m = m0 + 16 * w + lane / 4 + 8 * (p % 2), n = n0 + 8 * (p / 2) + 2 * (lane % 4);
    float2 v = make_float2(d[2 * p], d[2 * p + 1]);
    if (op == DT_EP_DGELU) {
      v.x = v.x * f.x[p].x, v.y = v.y * f.x[p].y;
    } else {
      if (bias) v.x += f.b[p / 2].x, v.y += f.b[p / 2].y;
      if (R) v.x += f.x[p].x, v.y += f.x[p].y;
      if (acc) v.x = f.x[p].x + v.x, v.y = f.x[p].y + v.y;
      if (op == DT_EP_PLAIN_T) v.x = dt_tf32(v.x), v.y = dt_tf32(v.y);
    }
    if (m < M) *reinterpret_cast<float2 *>(C + (size_t)m * ldc + n) = v;
  }
}
/* d's arithmetic (d->tc: 0 fp32, dt.cu's dt_gemm_kernel; 1 TF32 operands,
 * dt_wgmma.cu's tile with d->wg where the operands suit it, else
 * dt_gemm_tc_kernel) and members (d->pz); the pointers member 0's */
int dt_gemm(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
            float *C, int ldc, const float *bias, const float *R, int ldr, int acc, cudaStream_t st);
/* dt_gemm with the epilogue op (DT_EP_*; G for DT_EP_GELU) */
int dt_gemm_op(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
               float *C, int ldc, const float *bias, const float *R, int ldr, int acc, int op, float *G,
               cudaStream_t st);
/* C[M, N] += op(A) op(B) as dt_gemm, split over k into parts summed in order
 * (part: scratch of cap floats; the weight gradients, K the tokens); with
 * db (only where dt_wgrad_fuses), also db[m] += the sum over k of op(A)'s
 * row m (the bias gradient, from the same reads: each part's sums, then the
 * parts in order) */
int dt_gemm_wgrad(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                  int tb, float *C, int ldc, float *db, float *part, size_t cap, cudaStream_t st);
/* dt_gemm_wgrad with its split-K reduce, where it has one, added to defer
 * (up to DT_RED_MAX) instead of launched: dt_wgrad_flush then launches
 * every deferred reduce at once (each problem's sums as its own launch's:
 * the same bits) and empties defer. part stays read until the flush. */
int dt_gemm_wgrad_ex(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B,
                     int ldb, int tb, float *C, int ldc, float *db, float *part, size_t cap, cudaStream_t st,
                     dt_red_t *defer);
int dt_wgrad_flush(const cuda_dt_t *d, dt_red_t *r, cudaStream_t st);
/* 1 where dt_gemm_wgrad takes db for such a call: split, on the transposing
 * TMA tile (TF32) or the FFMA tile (fp32, op(A) = A^T: ta 1), and part's
 * cap floats hold the bias parts too */
int dt_wgrad_fuses(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                   int tb, size_t cap);
/* the parts dt_gemm_wgrad splits such a call into (1 or less: unsplit) */
long long dt_wgrad_parts(int M, int N, int K, size_t cap, int depth);
/* the least k a weight gradient's split part takes: 128 with tc (TF32),
 * 64 in fp32. Under TF32 the parts of 64 at batch 64 filled the SMs beside
 * the critical path for little: 128 took a lone step at batch 64 -2.3%, 8
 * members -8%, batch 256 unchanged (its parts are fewer anyway); the fp32
 * tile lost with fewer parts (kernels/dev/DEVICE_NOTES.md item 155) */
static inline int dt_wgrad_depth(int tc) { return tc ? 128 : 64; }
/* out[c] (=, or += with acc) the sum over rows of X (of X Y when Y is not
 * NULL), in a fixed order; part: scratch of cap floats (at least cols) */
int dt_colsum(const cuda_dt_t *d, const float *X, const float *Y, int rows, int cols, int ld, float *out, int acc,
              float *part, size_t cap, cudaStream_t st);
/* dt_colsum of X + X2 + X3 (summed in that order; X2, X3 may be NULL), the
 * input gradient that three products left in three buffers */
int dt_colsum3(const cuda_dt_t *d, const float *X, const float *X2, const float *X3, const float *Y, int rows, int cols,
               int ld, float *out, int acc, float *part, size_t cap, cudaStream_t st);
/* dt_colsum3 into out, and with out2 (and part2, cap floats) the sums of X
 * alone into out2, from the same reads of X: each the same sums as its own
 * dt_colsum3 (a LayerNorm's gamma and beta) */
int dt_colsum_pair(const cuda_dt_t *d, const float *X, const float *X2, const float *X3, const float *Y, int rows,
                   int cols, int ld, float *out, float *out2, int acc, float *part, float *part2, size_t cap,
                   cudaStream_t st);
/* dt_wgmma.cu: dt_gemm's TF32 tile on wgmma. dt_wg_setup: 1 when this
 * build and device run it (its shared memory set); dt_wg_fits: 1 when a
 * call's operands suit it (16-byte aligned rows, k and the contiguous
 * rows in fours); dt_wg_launch: dt_gemm_tc_kernel's launch, the same grid */
int dt_wg_setup(void);
/* dt_gemm.cu: where d's call with these operands (split: over k) runs: 0 the
 * mma.sync or fp32 tile, 1 the wgmma tile (TF32, d->wg, and they fit), 2
 * the TMA tile (with d->tma, unsplit, both operands K-major), 3 the
 * transposing TMA tile (with d->tma, ta and not tb: the weight gradients) */
int dt_wg_takes(const cuda_dt_t *d, int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb,
                int tb, int split);
/* dt_tma.cu: the TMA tile's map encoder when this build and device run it
 * (NULL: not), whether a call suits it, and its launch (0, or 1 when its
 * maps could not be encoded: nothing launched) */
void *dt_tma_setup(void);
int dt_tma_fits(int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb,
                const cuda_pz_t *pz);
/* a CUtensorMap at map (128-byte aligned) for an fp32 matrix of outer rows
 * of inner elements, ld apart, for each of n members stride bytes apart, in
 * boxes of box_inner x box_outer in the 128-byte swizzle; 1, or 0 where the
 * encoder refuses it */
int dt_tma_map(void *enc, void *map, const float *p, int inner, int outer, int ld, int box_inner, int box_outer,
               int n, long long stride);
/* dt_wgmma.cu: the weight gradients' form (op(A) = A^T, op(B) = B: both
 * operands' rows contiguous, split over k or not) with both brought by TMA
 * and transposed into the register-staged tile's layout (dt_gemm_tmt_kernel:
 * the same bits as it); dt_wg_launch's arguments; 0, or 1 where a map could
 * not be encoded (nothing launched) */
int dt_tmt_launch(void *enc, dim3 grid, cudaStream_t st, int M, int N, int K, const float *A, int lda, const float *B,
                  int ldb, float *C, int ldc, const float *bias, const float *R, int ldr, int acc, int op, float *G,
                  int kper, size_t cz, float *bpart, cuda_pz_t pz);
/* rnd: bit 0 round A's chunks to TF32, bit 1 B's (dt_tf32_ops); nsm: the
 * device's SMs (the ring's depth: dt_tma_stages, 0 = the default depth) */
int dt_tma_launch(void *enc, dim3 grid, cudaStream_t st, int M, int N, int K, const float *A, int lda, const float *B,
                  int ldb, float *C, int ldc, const float *bias, const float *R, int ldr, int acc, int op, float *G,
                  cuda_pz_t pz, int rnd, int nsm);
int dt_tma_stages(long long tiles, int nk, int nsm);
/* dt_gemm.cu: 1 where d's producers write TF32-rounded operands (d->pre, tc and
 * the TMA tile); dt_tf32_ops: which of A, B the TMA tile must round (bit 0,
 * bit 1: those not in wr, wT, h1, h2, gl under dt_pre) */
int dt_pre(const cuda_dt_t *d);
int dt_big_init(int *one, int *nsm);
int dt_tf32_ops(const cuda_dt_t *d, const float *A, const float *B);
int dt_wg_fits(int M, int N, int K, const float *A, int lda, int ta, const float *B, int ldb, int tb);
void dt_wg_launch(int ta, int tb, dim3 grid, cudaStream_t st, int M, int N, int K, const float *A, int lda,
                  const float *B, int ldb, float *C, int ldc, const float *bias, const float *R, int ldr, int acc,
                  int op, float *G, int kper, size_t cz, cuda_pz_t pz);
int cuda_dt_backward(cuda_dt_t *d, cudaStream_t st);
/* the offsets in p of each block's six weights (W_q, W_k, W_v, W_o [E][E],
 * W_1 [4E][E], W_2 [E][4E]): block l's j-th at off[6 l + j] */
typedef struct dt_wt_src {
  int64_t off[6 * DT_MAX_LAYERS];
} dt_wt_src_t;
dt_wt_src_t dt_wt_src(const dt_layout_t *L);
/* side streams 0 .. n - 1 wait for what st has queued (dt_fork), side
 * stream i alone (dt_fork_one); st waits for side stream i's work (dt_join) */
int dt_fork(cuda_dt_t *d, cudaStream_t st, int n);
int dt_fork_one(cuda_dt_t *d, cudaStream_t st, int i);
int dt_join(cuda_dt_t *d, cudaStream_t st, int i);
/* dt_attn.cu: the attention's way for L's shapes on this device (*win: a
 * block a window), its forward (P, att) and backward (dS, dq, dk, dv) */
int dt_attn_init(const dt_layout_t *L, int *win);
int dt_attn(const cuda_dt_t *d, const float *q, const float *k, const float *v, float *P, float *att, cudaStream_t st);
int dt_attn_bwd(const cuda_dt_t *d, const float *P, const float *datt, const float *q, const float *k, const float *v,
                float *dS, float *dq, float *dk, float *dv, cudaStream_t st);
/* dt_attn_tc.cu: the same with TF32 operands on mma.sync, for windows of up
 * to 64 tokens and head widths a multiple of 8 (*fits); dt_attn and
 * dt_attn_bwd call them where tc and the shapes allow */
int dt_attn_tc_init(const dt_layout_t *L, int *fits, int *one, int *pair);
/* the form dt_attn_tc_bwd runs: by the windows (members' included)
 * against the SM count; or attn_form where forced (a forced pair that does
 * not fit: one launch where that fits, else two) */
int dt_attn_tc_bwd_form(const cuda_dt_t *d);
/* 1 where dt_attn and dt_attn_bwd run them: tc, the shapes fit, and a
 * member's buffers keep their rows 16-byte aligned */
int dt_attn_uses_tc(const cuda_dt_t *d);
/* 1 where q, k, v and the attention's output gradient dO are written
 * TF32-rounded by their producers and the attention does not round them
 * again: dt_pre and dt_attn_uses_tc (they are read by that attention alone) */
int dt_attn_pre(const cuda_dt_t *d);
int dt_attn_tc(const cuda_dt_t *d, const float *q, const float *k, const float *v, float *P, float *att,
               cudaStream_t st);
int dt_attn_tc_bwd(const cuda_dt_t *d, const float *P, const float *datt, const float *q, const float *k,
                   const float *v, float *dS, float *dq, float *dk, float *dv, cudaStream_t st);

/* dt_head.cu: the forward's end at the state tokens (LN_f, the heads, the
 * cross-entropy) from the last block's output X, into xs, xhf, rf, z, dz
 * and loss_step; its backward (dxs, and dX: LN_f's input gradient);
 * dt_head_init: the warps a block for L's rows (cudaErrorInvalidValue where
 * one row does not fit shared memory), and whether the heads' weights are
 * staged beside them (sw) */
int dt_head_init(const dt_layout_t *L, int *wpb, int *sw);
int dt_head_fwd(const cuda_dt_t *d, const float *X, cudaStream_t st);
int dt_head_bwd(const cuda_dt_t *d, cudaStream_t st);
/* dt.cu: the forward without the loss's sum (cuda_dt_loss_grad's; the
 * backward sums it on a side stream), and that sum into sums[0] */
int dt_forward(cuda_dt_t *d, cudaStream_t st);
int dt_loss_sum(const cuda_dt_t *d, cudaStream_t st);

/* the sum of v over the block (blockDim.x a multiple of 32, at most 1024),
 * in a fixed order; every thread gets it (float, or double for the norm) */
template <typename T> static __device__ __forceinline__ T dt_block_sum(T v, T *sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[w] = v;
  __syncthreads();
  T s = 0;
  for (int i = 0; i < nw; i++) s += sh[i];
  return s;
}

static __device__ __forceinline__ float dt_block_max(float v, float *sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int w = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[w] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int i = 0; i < nw; i++) m = fmaxf(m, sh[i]);
  return m;
}


#endif /* __CUDACC__ */

#endif
