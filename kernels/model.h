/*
 * model.h — the model description built from the config, and the parameter
 * registry (docs/learner.md): trunk -> [attention] -> K head sets -> [fixed
 * priors]. Every parameter has
 * a name (the golden cases' and the checkpoints': "trunk1.weight",
 * "head1.value2.sigma_bias", "attn.q.weight", "prior0.branch1_2.bias"), a
 * shape, the flat vector it lives in, its offset
 * there, its initialiser, and whether it is trained. The order of the
 * registry is the order of the parameter vectors: net_layout.h (the view the
 * kernels index by layer) is derived from it.
 *
 * A third vector, MODEL_VEC_DT, is laid out for a Decision Transformer
 * ("dt.block0.mlp1.weight", ...) when dt_layers > 0 (docs/learner.md §16):
 * the Decision Transformer's parameters, trained by PretrainDT with Adam
 * moments of their own.
 *
 * Shapes: nn.Linear weights [out, in], biases [out]; LayerNorm weight (gamma)
 * and bias (beta) [d]; attn.pos [T, d]; DT embeddings [n, E].
 */
#ifndef DQN_MODEL_H
#define DQN_MODEL_H

#include "learner_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* which modules, and their sizes: from the config (model_desc_from_config);
 * the attention and ensemble sizes from their config fields (docs/learner.md
 * §7, §8) and the Decision Transformer's (§16) */
typedef struct model_desc {
  int32_t S, H1, H2, VH, AH, Z, D;
  int32_t n[LEARNER_MAX_BRANCHES];
  int32_t noisy;
  int32_t attn_tokens, attn_heads;      /* 0: no attention */
  int32_t ensemble_k;                   /* head sets (1: the plain names) */
  int32_t priors;                       /* 1: fixed random prior heads (prior scale > 0) */
  int32_t dt_layers, dt_embed, dt_max_ep_len; /* 0 layers: no Decision Transformer */
} model_desc_t;

typedef enum model_vec {
  MODEL_VEC_NET = 0,   /* the trained network: online and target, Adam moments */
  MODEL_VEC_PRIOR = 1, /* fixed prior heads, shared by online and target */
  MODEL_VEC_DT = 2,    /* the Decision Transformer's (see above) */
  MODEL_NVEC = 3,
} model_vec_t;

typedef enum model_init {
  INIT_LINEAR = 0, /* U[-1/sqrt(fan_in), 1/sqrt(fan_in)] (nn.Linear's weight and bias) */
  INIT_SIGMA = 1,  /* NoisyNet sigma: sigma0 / sqrt(fan_in) */
  INIT_ONES = 2,   /* LayerNorm gamma */
  INIT_ZEROS = 3,  /* LayerNorm beta */
  INIT_NORMAL = 4, /* N(0, 1) (embeddings) */
} model_init_t;

typedef struct model_param {
  char name[48];
  const char *module;   /* "trunk", "attn", "heads", "priors", "dt" */
  model_vec_t vec;
  int32_t rows, cols;   /* [rows, cols]; cols = 0 for a vector [rows] */
  int64_t offset;       /* into its vector */
  int32_t fan_in;
  model_init_t init;
  int32_t trained;      /* 0: fixed after creation */
} model_param_t;

#define MODEL_MAX_PARAMS 512

typedef struct model {
  model_desc_t d;
  int32_t n;
  model_param_t p[MODEL_MAX_PARAMS];
  int64_t size[MODEL_NVEC]; /* floats in each vector */
} model_t;

void model_desc_from_config(model_desc_t *d, const learner_config_t *c);
/* Builds the registry; 0, or LEARNER_EINVAL (err names the module) when a
 * size does not divide or the registry would overflow. */
int model_build(model_t *m, const model_desc_t *d, char *err, size_t errlen);
const model_param_t *model_find(const model_t *m, const char *name);
static inline int64_t model_param_count(const model_param_t *p) {
  return (int64_t)p->rows * (p->cols ? p->cols : 1);
}

#ifdef __cplusplus
}
#endif
#endif
