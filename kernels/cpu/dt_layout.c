/* dt_layout.c — the Decision Transformer's tensors found in the registry
 * (dt.h, model.h). */
#include <stdio.h>
#include <string.h>

#include "dt.h"

static int off(const model_t *m, const char *name, int64_t *o, char *err, size_t errlen) {
  const model_param_t *p = model_find(m, name);
  if (!p || p->vec != MODEL_VEC_DT) {
    if (err && errlen) snprintf(err, errlen, "dt: the registry has no tensor %s", name);
    return LEARNER_EINVAL;
  }
  *o = p->offset;
  return 0;
}

int dt_layout_init(dt_layout_t *L, const model_t *m, int context, int heads, char *err, size_t errlen) {
  const model_desc_t *d = &m->d;
  memset(L, 0, sizeof *L);
  if (d->dt_layers < 1 || d->dt_layers > DT_MAX_LAYERS) {
    if (err && errlen) snprintf(err, errlen, "dt_layers: %d is outside [1, %d]", d->dt_layers, DT_MAX_LAYERS);
    return LEARNER_EINVAL;
  }
  if (context < 1 || heads < 1 || d->dt_embed % heads) {
    if (err && errlen) snprintf(err, errlen, "dt_heads: %d does not divide dt_embed %d (context %d)", heads, d->dt_embed, context);
    return LEARNER_EINVAL;
  }
  L->S = d->S, L->D = d->D, L->E = d->dt_embed, L->L = d->dt_layers, L->nh = heads, L->T = d->dt_max_ep_len;
  L->K = context;
  int radix = 1;
  for (int k = d->D - 1; k >= 0; k--) L->radix_after[k] = radix, radix *= d->n[k];
  for (int k = 0; k < d->D; k++) L->n[k] = d->n[k], L->A += d->n[k];
  L->n_params = m->size[MODEL_VEC_DT];
  char nm[64];
  int rc = 0;
#define OFF(field, ...)                                                                                                \
  do {                                                                                                                 \
    snprintf(nm, sizeof nm, __VA_ARGS__);                                                                              \
    if (!rc) rc = off(m, nm, &L->field, err, errlen);                                                                 \
  } while (0)
  OFF(rtg_w, "dt.embed_rtg.weight"); OFF(rtg_b, "dt.embed_rtg.bias");
  OFF(st_w, "dt.embed_state.weight"); OFF(st_b, "dt.embed_state.bias");
  for (int k = 0; k < d->D; k++) OFF(act_emb[k], "dt.embed_action%d.weight", k);
  OFF(time, "dt.embed_time.weight"); OFF(lne_w, "dt.ln_embed.weight"); OFF(lne_b, "dt.ln_embed.bias");
  for (int l = 0; l < d->dt_layers; l++) {
    OFF(blk[l].ln1_w, "dt.block%d.ln1.weight", l); OFF(blk[l].ln1_b, "dt.block%d.ln1.bias", l);
    OFF(blk[l].q_w, "dt.block%d.attn.q.weight", l); OFF(blk[l].q_b, "dt.block%d.attn.q.bias", l);
    OFF(blk[l].k_w, "dt.block%d.attn.k.weight", l); OFF(blk[l].k_b, "dt.block%d.attn.k.bias", l);
    OFF(blk[l].v_w, "dt.block%d.attn.v.weight", l); OFF(blk[l].v_b, "dt.block%d.attn.v.bias", l);
    OFF(blk[l].o_w, "dt.block%d.attn.o.weight", l); OFF(blk[l].o_b, "dt.block%d.attn.o.bias", l);
    OFF(blk[l].ln2_w, "dt.block%d.ln2.weight", l); OFF(blk[l].ln2_b, "dt.block%d.ln2.bias", l);
    OFF(blk[l].m1_w, "dt.block%d.mlp1.weight", l); OFF(blk[l].m1_b, "dt.block%d.mlp1.bias", l);
    OFF(blk[l].m2_w, "dt.block%d.mlp2.weight", l); OFF(blk[l].m2_b, "dt.block%d.mlp2.bias", l);
  }
  OFF(lnf_w, "dt.ln_f.weight"); OFF(lnf_b, "dt.ln_f.bias");
  for (int k = 0; k < d->D; k++) {
    OFF(head_w[k], "dt.act%d.weight", k);
    OFF(head_b[k], "dt.act%d.bias", k);
  }
#undef OFF
  return rc;
}

int dt_layout_from_config(const learner_config_t *c, model_t *reg, dt_layout_t *L, char *err, size_t errlen) {
  model_desc_t d;
  model_desc_from_config(&d, c);
  int rc = model_build(reg, &d, err, errlen);
  return rc ? rc : dt_layout_init(L, reg, c->dt_context, c->dt_heads, err, errlen);
}
