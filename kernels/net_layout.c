/* net_layout.c — see net_layout.h. */
#include "net_layout.h"

#include <stdio.h>
#include <string.h>

#include "model.h"

/* The layer view of the registry (model.h): each trunk and head linear layer,
 * with the offsets the registry gave its weight, bias and sigmas. */
void net_layout_init(net_layout_t *L, const learner_config_t *c) {
  memset(L, 0, sizeof *L);
  L->S = c->state_dim;
  L->H1 = c->trunk_h1;
  L->H2 = c->trunk_h2;
  L->VH = c->value_hidden;
  L->AH = c->adv_hidden;
  L->Z = c->atoms;
  L->D = c->n_branches;
  for (int d = 0; d < L->D; d++) {
    L->n[d] = c->branch_sizes[d];
    L->q_width += L->n[d];
    L->a_width += L->n[d] * L->Z;
  }
  static _Thread_local model_t m; /* ~45 KB: not on the caller's stack */
  model_desc_t desc;
  model_desc_from_config(&desc, c);
  if (model_build(&m, &desc, NULL, 0)) return; /* validated configs always build */
  net_layer_t *l = NULL;
  int64_t noff = 0;
  L->K = desc.ensemble_k;
  L->has_prior = desc.priors;
  for (int i = 0; i < NET_MAX_LAYERS_ALL; i++) L->prior_off_w[i] = L->prior_off_b[i] = -1;
  int prior_li = NET_VALUE1; /* prior layers come in the head layers' order */
  for (int i = 0; i < m.n; i++) {
    const model_param_t *p = &m.p[i];
    if (p->vec == MODEL_VEC_PRIOR) {
      const char *dot = strrchr(p->name, '.');
      if (!strcmp(dot, ".weight")) L->prior_off_w[prior_li] = p->offset;
      else L->prior_off_b[prior_li++] = p->offset;
      continue;
    }
    if (p->vec == MODEL_VEC_NET && !strcmp(p->module, "attn")) {
      static const char *proj[4] = {"attn.q.", "attn.k.", "attn.v.", "attn.o."};
      net_attn_t *at = &L->attn;
      if (!strcmp(p->name, "attn.pos")) {
        at->T = desc.attn_tokens;
        at->nh = desc.attn_heads;
        at->d = p->cols;
        at->off_pos = p->offset;
      } else if (!strcmp(p->name, "attn.ln.weight")) {
        at->off_ln_w = p->offset;
      } else if (!strcmp(p->name, "attn.ln.bias")) {
        at->off_ln_b = p->offset;
      } else {
        for (int k = 0; k < 4; k++)
          if (!strncmp(p->name, proj[k], 7)) {
            if (!strcmp(p->name + 7, "weight")) at->off_w[k] = p->offset;
            else at->off_b[k] = p->offset;
          }
      }
      continue;
    }
    if (p->vec != MODEL_VEC_NET || (strcmp(p->module, "trunk") && strcmp(p->module, "heads"))) continue;
    const char *dot = strrchr(p->name, '.');
    if (!strcmp(dot, ".weight")) {
      l = &L->layer[L->n_layers++];
      snprintf(l->name, sizeof l->name, "%.*s", (int)(dot - p->name), p->name);
      l->in = p->cols;
      l->out = p->rows;
      l->off_w = p->offset;
      l->off_sw = l->off_sb = l->noise_off = -1;
    } else if (!strcmp(dot, ".bias")) {
      l->off_b = p->offset;
    } else if (!strcmp(dot, ".sigma_weight")) {
      l->noisy = 1;
      l->off_sw = p->offset;
      l->noise_off = noff; /* eps_in [in] then eps_out [out] */
      noff += l->in + l->out;
    } else if (!strcmp(dot, ".sigma_bias")) {
      l->off_sb = p->offset;
    }
  }
  L->n_params = m.size[MODEL_VEC_NET];
  L->n_noise = noff;
  L->n_prior = m.size[MODEL_VEC_PRIOR];
}

int net_layout_find(const net_layout_t *L, const char *name) {
  for (int i = 0; i < L->n_layers; i++)
    if (strcmp(L->layer[i].name, name) == 0) return i;
  return -1;
}

void net_decode_action(const net_layout_t *L, int32_t a, int32_t *per_branch) {
  for (int d = L->D - 1; d >= 0; d--) {
    per_branch[d] = a % L->n[d];
    a /= L->n[d];
  }
}
