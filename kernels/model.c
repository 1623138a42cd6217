/* model.c — see model.h. The order here is the parameter vectors' order. */
#include "model.h"

#include <stdio.h>
#include <string.h>

#include "seterr.h"

typedef struct builder {
  model_t *m;
  int overflow;
} builder_t;

static void add(builder_t *b, const char *name, const char *module, model_vec_t vec, int rows, int cols, int fan_in,
                model_init_t init) {
  model_t *m = b->m;
  if (m->n == MODEL_MAX_PARAMS) {
    b->overflow = 1;
    return;
  }
  model_param_t *p = &m->p[m->n++];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->module = module;
  p->vec = vec;
  p->rows = rows;
  p->cols = cols;
  p->offset = m->size[vec];
  p->fan_in = fan_in;
  p->init = init;
  p->trained = vec != MODEL_VEC_PRIOR;
  m->size[vec] += model_param_count(p);
}

/* nn.Linear(in, out): weight [out, in], bias [out]; NoisyNet adds the sigmas */
static void linear(builder_t *b, const char *prefix, const char *module, model_vec_t vec, int in, int out, int noisy) {
  char nm[64];
  snprintf(nm, sizeof nm, "%s.weight", prefix);
  add(b, nm, module, vec, out, in, in, INIT_LINEAR);
  snprintf(nm, sizeof nm, "%s.bias", prefix);
  add(b, nm, module, vec, out, 0, in, INIT_LINEAR);
  if (!noisy) return;
  snprintf(nm, sizeof nm, "%s.sigma_weight", prefix);
  add(b, nm, module, vec, out, in, in, INIT_SIGMA);
  snprintf(nm, sizeof nm, "%s.sigma_bias", prefix);
  add(b, nm, module, vec, out, 0, in, INIT_SIGMA);
}

static void layernorm(builder_t *b, const char *prefix, const char *module, model_vec_t vec, int d) {
  char nm[64];
  snprintf(nm, sizeof nm, "%s.weight", prefix);
  add(b, nm, module, vec, d, 0, d, INIT_ONES);
  snprintf(nm, sizeof nm, "%s.bias", prefix);
  add(b, nm, module, vec, d, 0, d, INIT_ZEROS);
}

/* value1, value2, branch{d}_1, branch{d}_2 under `prefix` ("" for K = 1) */
static void head_set(builder_t *b, const model_desc_t *d, const char *prefix, const char *module, model_vec_t vec,
                     int noisy) {
  char nm[64];
  snprintf(nm, sizeof nm, "%svalue1", prefix);
  linear(b, nm, module, vec, d->H2, d->VH, noisy);
  snprintf(nm, sizeof nm, "%svalue2", prefix);
  linear(b, nm, module, vec, d->VH, d->Z, noisy);
  for (int k = 0; k < d->D; k++) {
    snprintf(nm, sizeof nm, "%sbranch%d_1", prefix, k);
    linear(b, nm, module, vec, d->H2, d->AH, noisy);
    snprintf(nm, sizeof nm, "%sbranch%d_2", prefix, k);
    linear(b, nm, module, vec, d->AH, d->n[k] * d->Z, noisy);
  }
}

void model_desc_from_config(model_desc_t *d, const learner_config_t *c) {
  memset(d, 0, sizeof *d);
  d->S = c->state_dim;
  d->H1 = c->trunk_h1;
  d->H2 = c->trunk_h2;
  d->VH = c->value_hidden;
  d->AH = c->adv_hidden;
  d->Z = c->atoms;
  d->D = c->n_branches;
  for (int k = 0; k < d->D; k++) d->n[k] = c->branch_sizes[k];
  d->noisy = c->noisy != 0;
  d->attn_tokens = c->attn_tokens;
  d->attn_heads = d->attn_tokens ? c->attn_heads : 0;
  d->ensemble_k = c->ensemble_k < 1 ? 1 : c->ensemble_k;
  d->priors = c->ensemble_prior_scale > 0;
  d->dt_layers = c->dt_layers;
  d->dt_embed = c->dt_layers ? c->dt_embed : 0;
  d->dt_max_ep_len = c->dt_layers ? c->dt_max_ep_len : 0;
}

int model_build(model_t *m, const model_desc_t *d, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  m->d = *d;
  builder_t b = {m, 0};
  /* trunk: s -> Linear(S, H1) -> LeakyReLU -> Linear(H1, H2) -> LeakyReLU = h */
  linear(&b, "trunk1", "trunk", MODEL_VEC_NET, d->S, d->H1, 0);
  linear(&b, "trunk2", "trunk", MODEL_VEC_NET, d->H1, d->H2, 0);
  /* attention on h: T tokens of width H2/T, n_h heads (docs/learner.md §7) */
  if (d->attn_tokens) {
    int T = d->attn_tokens, nh = d->attn_heads;
    if (T < 2 || d->H2 % T || nh < 1 || (d->H2 / T) % nh)
      return seterr(err, errlen, "attn_tokens: %d tokens of %d heads do not divide trunk_h2 = %d", T, nh, d->H2),
             LEARNER_EINVAL;
    int dm = d->H2 / T;
    add(&b, "attn.pos", "attn", MODEL_VEC_NET, T, dm, dm, INIT_LINEAR);
    static const char *proj[4] = {"attn.q", "attn.k", "attn.v", "attn.o"};
    for (int i = 0; i < 4; i++) linear(&b, proj[i], "attn", MODEL_VEC_NET, dm, dm, 0);
    layernorm(&b, "attn.ln", "attn", MODEL_VEC_NET, dm);
  }
  /* K head sets (K = 1: the plain names of docs/learner.md §2-4) */
  int K = d->ensemble_k < 1 ? 1 : d->ensemble_k;
  for (int k = 0; k < K; k++) {
    char pre[24] = "";
    if (K > 1) snprintf(pre, sizeof pre, "head%d.", k);
    head_set(&b, d, pre, "heads", MODEL_VEC_NET, d->noisy);
  }
  /* fixed random priors: the same shapes, never trained, shared by online and target */
  for (int k = 0; d->priors && k < K; k++) {
    char pre[24];
    snprintf(pre, sizeof pre, "prior%d.", k);
    head_set(&b, d, pre, "priors", MODEL_VEC_PRIOR, 0);
  }
  /* a Decision Transformer's own vector (model.h; pre-trained by learner_dt.c, docs/learner.md §16) */
  if (d->dt_layers) {
    int E = d->dt_embed;
    if (E < 1 || d->dt_max_ep_len < 1)
      return seterr(err, errlen, "dt_embed: %d and dt_max_ep_len %d must be >= 1", E, d->dt_max_ep_len), LEARNER_EINVAL;
    char nm[64];
    linear(&b, "dt.embed_rtg", "dt", MODEL_VEC_DT, 1, E, 0);
    linear(&b, "dt.embed_state", "dt", MODEL_VEC_DT, d->S, E, 0);
    for (int k = 0; k < d->D; k++) {
      snprintf(nm, sizeof nm, "dt.embed_action%d.weight", k);
      add(&b, nm, "dt", MODEL_VEC_DT, d->n[k], E, E, INIT_NORMAL);
    }
    add(&b, "dt.embed_time.weight", "dt", MODEL_VEC_DT, d->dt_max_ep_len, E, E, INIT_NORMAL);
    layernorm(&b, "dt.ln_embed", "dt", MODEL_VEC_DT, E);
    for (int l = 0; l < d->dt_layers; l++) {
      static const char *proj[4] = {"q", "k", "v", "o"};
      snprintf(nm, sizeof nm, "dt.block%d.ln1", l);
      layernorm(&b, nm, "dt", MODEL_VEC_DT, E);
      for (int i = 0; i < 4; i++) {
        snprintf(nm, sizeof nm, "dt.block%d.attn.%s", l, proj[i]);
        linear(&b, nm, "dt", MODEL_VEC_DT, E, E, 0);
      }
      snprintf(nm, sizeof nm, "dt.block%d.ln2", l);
      layernorm(&b, nm, "dt", MODEL_VEC_DT, E);
      snprintf(nm, sizeof nm, "dt.block%d.mlp1", l);
      linear(&b, nm, "dt", MODEL_VEC_DT, E, 4 * E, 0);
      snprintf(nm, sizeof nm, "dt.block%d.mlp2", l);
      linear(&b, nm, "dt", MODEL_VEC_DT, 4 * E, E, 0);
    }
    layernorm(&b, "dt.ln_f", "dt", MODEL_VEC_DT, E);
    for (int k = 0; k < d->D; k++) {
      snprintf(nm, sizeof nm, "dt.act%d", k);
      linear(&b, nm, "dt", MODEL_VEC_DT, E, d->n[k], 0);
    }
  }
  if (b.overflow) { /* named by what multiplies the tensors: the head sets, the DT's blocks, the branches */
    const char *field = d->ensemble_k > 1 ? "ensemble_k" : d->dt_layers > 0 ? "dt_layers" : "branches";
    return seterr(err, errlen,
                  "%s: the network would need more than %d parameter tensors (each head set has %d%s%s): fewer head "
                  "sets, branches or dt_layers",
                  field, MODEL_MAX_PARAMS, (d->noisy ? 4 : 2) * (2 + 2 * d->D), d->attn_tokens ? ", attention adds its own" : "",
                  d->dt_layers ? ", each DT block 16" : ""),
           LEARNER_EINVAL;
  }
  return LEARNER_OK;
}

const model_param_t *model_find(const model_t *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->p[i].name, name)) return &m->p[i];
  return NULL;
}
