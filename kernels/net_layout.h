/*
 * net_layout.h — the layer view of the parameter registry (model.h): where
 * each linear layer's parameters live in the flat parameter vector, as the
 * CPU and CUDA kernels index them. Built from the registry, whose order it
 * keeps; the registry is the one place that lays parameters out.
 *
 * Layer order: trunk1, trunk2, value1, value2, then per branch d:
 * branch{d}_1, branch{d}_2. Per layer, in this order:
 *   weight [out, in] (nn.Linear layout), bias [out],
 *   and for NoisyNet layers (the head layers when config.noisy):
 *   sigma_weight [out, in], sigma_bias [out].
 * NoisyNet noise for one step is a flat vector too: per noisy layer
 * eps_in [in] then eps_out [out], at noise_off.
 *
 * The attention block (docs/learner.md §7; registry module "attn", between the
 * trunk and the heads) is not a layer of this view: `attn` records its
 * offsets (pos [T, d]; q, k, v, o weight [d, d] and bias [d]; LayerNorm
 * gamma and beta [d]) and T, n_h, d; T = 0 when it is off.
 *
 * Ensemble heads (docs/learner.md §8): K head sets, each value1, value2,
 * branch{d}_1, branch{d}_2 in that order, head k's layer j at
 * NET_HEAD_LAYER(L, k, j) (k = 0 is the plain NET_VALUE1 ...). With priors
 * (prior scale > 0) prior_off_w/b[li] give the offsets, in the prior vector
 * (n_prior floats, never noisy), of the prior layer of head layer li.
 */
#ifndef DQN_NET_LAYOUT_H
#define DQN_NET_LAYOUT_H

#include "learner_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NET_MAX_LAYERS (4 + 2 * LEARNER_MAX_BRANCHES) /* one head set: what the CUDA backend runs */
#define NET_HEAD_LAYERS(D) (2 + 2 * (D))                /* layers of one head set */
#define NET_MAX_LAYERS_ALL (2 + LEARNER_MAX_ENSEMBLE * NET_HEAD_LAYERS(LEARNER_MAX_BRANCHES))
/* head k's layer j (0 value1, 1 value2, 2 + 2d branch{d}_1, 3 + 2d branch{d}_2) */
#define NET_HEAD_LAYER(L, k, j) (NET_VALUE1 + (k) * NET_HEAD_LAYERS((L)->D) + (j))

enum { NET_TRUNK1 = 0, NET_TRUNK2 = 1, NET_VALUE1 = 2, NET_VALUE2 = 3, NET_BRANCH0 = 4 };
/* Layer index of branch d's first (k = 1) or second (k = 2) layer. */
#define NET_BRANCH(d, k) (NET_BRANCH0 + 2 * (d) + ((k) - 1))

typedef struct net_layer {
  char name[32];       /* "trunk1", "branch2_1", ... as in the golden files */
  int32_t in, out;
  int32_t noisy;
  int64_t off_w, off_b;   /* into the parameter vector */
  int64_t off_sw, off_sb; /* -1 unless noisy */
  int64_t noise_off;      /* into the noise vector; -1 unless noisy */
} net_layer_t;

enum { NET_ATTN_Q = 0, NET_ATTN_K = 1, NET_ATTN_V = 2, NET_ATTN_O = 3 };

typedef struct net_attn {
  int32_t T, nh, d;        /* tokens, heads, token width (H2 / T); T = 0: off */
  int64_t off_pos;         /* [T, d] */
  int64_t off_w[4], off_b[4]; /* q, k, v, o: weight [d, d] (nn.Linear), bias [d] */
  int64_t off_ln_w, off_ln_b; /* LayerNorm gamma, beta [d] */
} net_attn_t;

typedef struct net_layout {
  int32_t n_layers;
  net_layer_t layer[NET_MAX_LAYERS_ALL];
  int64_t n_params;
  int64_t n_noise;
  /* dims copied from the config for the kernels' convenience */
  int32_t S, H1, H2, VH, AH, Z, D;
  int32_t n[LEARNER_MAX_BRANCHES];
  int32_t q_width;  /* sum n_d */
  int32_t a_width;  /* sum n_d * Z : all advantage outputs */
  net_attn_t attn;  /* the attention block's offsets (T = 0: off) */
  int32_t K;        /* head sets (docs/learner.md §8) */
  int32_t has_prior;
  int64_t n_prior;  /* floats in the prior vector */
  int64_t prior_off_w[NET_MAX_LAYERS_ALL], prior_off_b[NET_MAX_LAYERS_ALL]; /* by head layer; -1 otherwise */
} net_layout_t;

void net_layout_init(net_layout_t *L, const learner_config_t *c);
int net_layout_find(const net_layout_t *L, const char *name);
/* Splits a flat joint action into per-branch indices (first branch most significant). */
void net_decode_action(const net_layout_t *L, int32_t a, int32_t *per_branch);

#ifdef __cplusplus
}
#endif
#endif
