/*
 * dqn_math.h — declarations of the learner's math (dqn_math_impl.h) in two
 * precisions: *_f32 is the CPU backend, *_f64 serves the finite-difference
 * tests. See dqn_math_impl.h for shapes and rules.
 */
#ifndef DQN_CPU_MATH_H
#define DQN_CPU_MATH_H

#include "../net_layout.h"

#define DQN_MATH_DECLARE(R, S)                                                                       \
  typedef struct net_weights_##S {                                                                   \
    const R *W[NET_MAX_LAYERS_ALL];                                                                  \
    const R *b[NET_MAX_LAYERS_ALL];                                                                  \
    /* fixed prior heads (docs/learner.md §8) by head layer, NULL without; logits get prior_scale x */    \
    const R *pW[NET_MAX_LAYERS_ALL], *pb[NET_MAX_LAYERS_ALL];                                        \
    R prior_scale;                                                                                   \
    const R *attn; /* the parameter vector (attention, never noisy; L->attn offsets) or NULL */     \
    int rows_exact; /* 1: each row's outputs summed in one fixed order (gemm_rows; Act), else BLAS */ \
  } net_weights_##S##_t;                                                                             \
  typedef struct net_acts_##S {                                                                      \
    int rows;                                                                                        \
    R *mem;                                                                                          \
    R *a1, *h1, *a2, *h, *av, *hv, *V;                                                               \
    R *ab[LEARNER_MAX_BRANCHES], *hb[LEARNER_MAX_BRANCHES];                                          \
    R *A[LEARNER_MAX_BRANCHES], *logp[LEARNER_MAX_BRANCHES];                                         \
    R *hh; /* the heads' input: h, or the attention output h' (attn_impl.h) */                      \
    /* attention only (NULL when off): [rows, H2] = [rows*T, d] each, alpha [rows, n_h, T, T],     \
     * rstd [rows*T] */                                                                             \
    R *tx, *tq, *tk, *tv, *to, *tu, *xhat, *hatt, *alpha, *rstd;                                    \
    /* ensemble (docs/learner.md §8): head k's av..logp are head 0's pointers + k * hstride; pscr is  \
     * one more such block, the prior heads' scratch (NULL without priors) */                       \
    size_t hstride;                                                                                  \
    R *pscr;                                                                                         \
  } net_acts_##S##_t;                                                                                \
  typedef struct dqn_hp_##S {                                                                        \
    R gamma, v_min, v_max, slope;                                                                    \
    int double_dqn;                                                                                  \
    R lambda;        /* ensemble diversity weight (used when K > 1) */                               \
    R prior_scale;   /* beta_p (used when the layout has priors) */                                  \
    const R *prior;  /* the prior vector [n_prior], or NULL */                                       \
  } dqn_hp_##S##_t;                                                                                  \
  /* Per-call buffers for a batch of B; the caller fills x, a, r, done, w. */                       \
  typedef struct dqn_ws_##S {                                                                        \
    int B;                                                                                           \
    R *mem;                                                                                          \
    net_acts_##S##_t on, tg;                                                                         \
    R *x;            /* [2B, S]: s rows then s' rows */                                              \
    R *weff_on, *weff_tg; /* effective NoisyNet weights, params layout */                            \
    R *m;            /* [K, D, B, Z] projected targets */                                              \
    R *dV, *dA, *dhv, *dh, *dh1, *dhb;                                                               \
    /* attention backward (NULL when off): [B, H2] each, scratch [T] */                             \
    R *dtx, *dtq, *dtk, *dtv, *dto, *dte, *datt;                                                     \
    R *support, *qtmp;                                                                               \
    R *r, *done, *w, *loss_i; /* [B] */                                                              \
    const R *gdisc;  /* [B] per-row discount (n-step: gamma^m), the caller's; NULL = hp gamma */     \
    int32_t *a;      /* [B] flat actions */                                                          \
    int32_t *best;   /* [K, D, B] Double-DQN next actions */                                         \
    /* ensemble (docs/learner.md §8): masks m_ik (the caller's; 1 after alloc), CE^k_i, D_i, mean_k     \
     * CE^k_i (the priority's loss), G the loss's gradient w.r.t. the taken action's logits */      \
    R *mask, *ce;    /* [B, K] */                                                                    \
    R *div, *ce_mean; /* [B] */                                                                      \
    R *G;            /* [K, D, B, Z] */                                                              \
  } dqn_ws_##S##_t;                                                                                  \
  void noisy_transform_##S(R *eps, int64_t n);                                                       \
  void net_weights_##S(const net_layout_t *L, const R *params, const R *fnoise, R *weff,             \
                       net_weights_##S##_t *w);                                                      \
  void net_weights_priors_##S(const net_layout_t *L, const R *prior, R scale, net_weights_##S##_t *w); \
  size_t net_acts_need_##S(const net_layout_t *L, int rows);                                        \
  int net_acts_alloc_##S(net_acts_##S##_t *A, const net_layout_t *L, int rows);                      \
  void net_acts_free_##S(net_acts_##S##_t *A);                                                       \
  void net_forward_##S(const net_layout_t *L, const net_weights_##S##_t *w, const R *X, int rows,     \
                       R slope, net_acts_##S##_t *A);                                                \
  void c51_q_values_##S(const R *logp, int n, int Z, const R *support, R *q);                        \
  void c51_project_##S(const R *tz, const R *p, int n, R vmin, R vmax, int Z, R *out);               \
  size_t dqn_ws_need_##S(const net_layout_t *L, int B);                                             \
  int dqn_ws_alloc_##S(dqn_ws_##S##_t *ws, const net_layout_t *L, int B);                            \
  void dqn_ws_free_##S(dqn_ws_##S##_t *ws);                                                          \
  R dqn_loss_grad_##S(const net_layout_t *L, const dqn_hp_##S##_t *hp, const R *online,              \
                      const R *target, const R *fn_on, const R *fn_tg, dqn_ws_##S##_t *ws, R *grad,  \
                      R *q_mean);

DQN_MATH_DECLARE(float, f32)
DQN_MATH_DECLARE(double, f64)

#endif
