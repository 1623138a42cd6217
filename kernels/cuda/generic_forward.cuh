/*
 * generic_forward.cuh — the CUDA network forward (docs/learner.md §2-4), the GPU twin of
 * net_forward_f32 in kernels/cpu/heads_impl.h, same names and layouts:
 * activations a1,h1 [rows,H1], a2,h [rows,H2], av,hv [rows,VH], V [rows,Z],
 * per branch ab,hb [rows,AH], A,logp [rows, n_d*Z] (action-major).
 */
#ifndef DQN_CUDA_GENERIC_FORWARD_CUH
#define DQN_CUDA_GENERIC_FORWARD_CUH

#include <cuda_runtime.h>

#include "net_layout.h"
#include "pz.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* the attention block's activations (attn.cu; kernels/cpu/attn_impl.h's
 * names): tx .. hatt [rows, H2] = [rows T, d], alpha [rows, n_h, T, T], rstd
 * [rows T] */
typedef struct cuda_attn_acts {
  float *tx, *tq, *tk, *tv, *to, *xhat, *hatt, *alpha, *rstd;
} cuda_attn_acts_t;
/* its backward's scratch, [B, H2] each */
typedef struct cuda_attn_grads {
  float *dte, *dtq, *dtk, *dtv, *dtx;
} cuda_attn_grads_t;

typedef struct cuda_acts {
  int rows;
  float *mem;
  float *a1, *h1, *a2, *h, *av, *hv, *V;
  float *ab[LEARNER_MAX_BRANCHES], *hb[LEARNER_MAX_BRANCHES];
  float *A[LEARNER_MAX_BRANCHES], *logp[LEARNER_MAX_BRANCHES];
  float *q; /* [rows, q_width] per-branch Q values, branch after branch */
  /* K head sets (cuda_net_forward_heads): the prior heads' scratch (NULL
   * without priors) and every head's Q [K, rows, q_width] */
  float *pav, *phv, *pV;
  float *pab[LEARNER_MAX_BRANCHES], *phb[LEARNER_MAX_BRANCHES], *pA[LEARNER_MAX_BRANCHES];
  float *qk;
  cuda_attn_acts_t att; /* attention on (L->attn.T > 0) */
} cuda_acts_t;

/* C[M,N] (+)= A(m,k) B(k,n) with element strides (see generic_forward.cu), then
 * + bias and H = LeakyReLU(C) when given. Deterministic. */
int cuda_gemm(int M, int N, int K, const float *A, int sam, int sak, const float *B, int sbk, int sbn, float *C,
              int accumulate, const float *bias, float *H, float slope, cudaStream_t stream);

/* The same, with K split over up to 16 block groups when K >= 512 and the
 * partial sums fit in scratch (scratch_floats floats); the parts are added
 * in a fixed order, so results stay deterministic. */
int cuda_gemm_split(int M, int N, int K, const float *A, int sam, int sak, const float *B, int sbk, int sbn,
                    float *C, int accumulate, const float *bias, float *H, float slope, float *scratch,
                    size_t scratch_floats, cudaStream_t stream);

/* Device buffers for `rows` inputs; 0 or a cudaError_t. */
int cuda_acts_alloc(cuda_acts_t *A, const net_layout_t *L, int rows);
/* the floats cuda_acts_alloc takes for rows (the memory estimate's too) */
size_t cuda_acts_floats(const net_layout_t *L, int rows);
void cuda_acts_free(cuda_acts_t *A);

/* Forward of X [rows, S] with the plain (mean) weights in params (the flat
 * layout of net_layout.h), then Q values with the support of [vmin, vmax].
 * Asynchronous on `stream`; returns the launch error, if any. */
/* params may be effective (NoisyNet-composed) weights: only off_w/off_b are read. */
int cuda_net_forward(const net_layout_t *L, const float *params, const float *X, int rows, float slope, float vmin,
                     float vmax, cuda_acts_t *A, cudaStream_t stream);

/* attn.cu: the attention block on h [rows, H2] into A (A->hatt = h', the
 * heads' input), in one launch: rows below rows0 with the parameter vector
 * P0, the rest with P1 (the step's online and target rows; Act: P0 = P1);
 * rows below keep write every activation the backward reads, the rest h'
 * alone */
int cuda_attn_forward(const net_layout_t *L, const float *P0, const float *P1, int rows0, const float *h, int rows,
                      int keep, const cuda_attn_acts_t *A, cuda_pz_t pz, cudaStream_t st);
/* attn.cu: 1 when its row kernels hold this layout's attention in shared memory */
int cuda_attn_fits(const net_layout_t *L);
/* attn.cu: dy = dL/dh' [B, H2] of A's first B rows -> gh = dL/d(trunk-2
 * pre-activation) [B, H2] (h: trunk 2's output, for lrelu'), and the data
 * gradients into G that cuda_attn_wgrad reads */
int cuda_attn_backward(const net_layout_t *L, const float *P, const cuda_attn_acts_t *A, const cuda_attn_grads_t *G,
                       int B, const float *dy, const float *h, float slope, float *gh, cuda_pz_t pz, cudaStream_t st);
/* attn.cu: the attention parameters' gradients into grad (overwritten), from
 * A, G and dy, after cuda_attn_backward; scratch: cuda_attn_wgrad_floats(L,
 * B) floats of device memory whose last 8 are zero at the first call (split
 * arrival counters, left zero) */
int cuda_attn_wgrad(const net_layout_t *L, const cuda_attn_acts_t *A, const cuda_attn_grads_t *G, int B,
                    const float *dy, float *scratch, float *grad, cuda_pz_t pz, cudaStream_t st);
size_t cuda_attn_wgrad_floats(const net_layout_t *L, int B);
/* floats of A for `rows` rows (0 with attention off), and their placement */
static inline size_t cuda_attn_acts_floats(const net_layout_t *L, size_t rows) {
  if (!L->attn.T) return 0;
  return rows * (7 * (size_t)L->H2 + (size_t)L->attn.nh * L->attn.T * L->attn.T + (size_t)L->attn.T);
}
static inline float *cuda_attn_acts_place(const net_layout_t *L, cuda_attn_acts_t *A, size_t rows, float *p) {
  if (!L->attn.T) return p;
  const size_t w = rows * L->H2;
  A->tx = p, p += w;
  A->tq = p, p += w;
  A->tk = p, p += w;
  A->tv = p, p += w;
  A->to = p, p += w;
  A->xhat = p, p += w;
  A->hatt = p, p += w;
  A->alpha = p, p += rows * (size_t)L->attn.nh * L->attn.T * L->attn.T;
  A->rstd = p, p += rows * (size_t)L->attn.T;
  return p;
}

/* The forward of every head set (docs/learner.md §8), the twin of net_forward_f32
 * with K heads: the trunk once, then per head k its value and branch layers;
 * with priors (prior: the prior vector, beta its scale) head k's V and A_d
 * get beta x its prior head's before the dueling combine (heads_impl.h's
 * order). Each head's Q into A->qk [K, rows, q_width]. */
int cuda_net_forward_heads(const net_layout_t *L, const float *params, const float *prior, float beta,
                           const float *X, int rows, float slope, float vmin, float vmax, cuda_acts_t *A,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
