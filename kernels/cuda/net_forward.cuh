/*
 * net_forward.cuh — the CUDA network forward (DESIGN.md §2), the GPU twin of
 * net_forward_f32 in kernels/cpu/heads_impl.h, same names and layouts:
 * activations a1,h1 [rows,H1], a2,h [rows,H2], av,hv [rows,VH], V [rows,Z],
 * per branch ab,hb [rows,AH], A,logp [rows, n_d*Z] (action-major).
 */
#ifndef DQN_CUDA_NET_FORWARD_CUH
#define DQN_CUDA_NET_FORWARD_CUH

#include <cuda_runtime.h>

#include "net_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

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
} cuda_acts_t;

/* C[M,N] (+)= A(m,k) B(k,n) with element strides (see net_forward.cu), then
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
void cuda_acts_free(cuda_acts_t *A);

/* Forward of X [rows, S] with the plain (mean) weights in params (the flat
 * layout of net_layout.h), then Q values with the support of [vmin, vmax].
 * Asynchronous on `stream`; returns the launch error, if any. */
/* params may be effective (NoisyNet-composed) weights: only off_w/off_b are read. */
int cuda_net_forward(const net_layout_t *L, const float *params, const float *X, int rows, float slope, float vmin,
                     float vmax, cuda_acts_t *A, cudaStream_t stream);

/* The forward of every head set (DESIGN.md §6.2), the twin of net_forward_f32
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
