/* golden_util.c — see golden_util.h. */
#include "golden_util.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

char golden_dir[1024];

double *golden_load64(const char *cs, const char *name, int64_t expect) {
  char path[1400], err[512];
  snprintf(path, sizeof path, "%s/%s/%s.npy", golden_dir, cs, name);
  npy_array_t a;
  ck_assert_msg(npy_read(path, &a, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(expect < 0 || a.count == expect, "%s: %lld elements, expected %lld", name, (long long)a.count,
                (long long)expect);
  double *d = npy_to_f64(&a);
  npy_free(&a);
  return d;
}

void golden_load_config(const char *cs, learner_config_t *c) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s/config.json", golden_dir, cs);
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  ck_assert_msg(j != NULL, "%s: %s", path, je.text);
  learner_config_default(c);
  c->state_dim = (int)json_integer_value(json_object_get(j, "state_dim"));
  c->trunk_h1 = (int)json_integer_value(json_array_get(json_object_get(j, "trunk"), 0));
  c->trunk_h2 = (int)json_integer_value(json_array_get(json_object_get(j, "trunk"), 1));
  c->value_hidden = (int)json_integer_value(json_object_get(j, "value_hidden"));
  c->adv_hidden = (int)json_integer_value(json_object_get(j, "adv_hidden"));
  c->atoms = (int)json_integer_value(json_object_get(j, "atoms"));
  c->v_min = (float)json_number_value(json_object_get(j, "v_min"));
  c->v_max = (float)json_number_value(json_object_get(j, "v_max"));
  json_t *br = json_object_get(j, "branches");
  c->n_branches = (int)json_array_size(br);
  for (int d = 0; d < c->n_branches; d++) c->branch_sizes[d] = (int)json_integer_value(json_array_get(br, (size_t)d));
  c->batch = (int)json_integer_value(json_object_get(j, "batch"));
  c->hp.gamma = (float)json_number_value(json_object_get(j, "gamma"));
  c->leaky_slope = (float)json_number_value(json_object_get(j, "leaky_slope"));
  c->noisy = json_is_true(json_object_get(j, "noisy"));
  c->double_dqn = json_is_true(json_object_get(j, "double_dqn"));
  if (json_object_get(j, "attn_tokens")) c->attn_tokens = (int)json_integer_value(json_object_get(j, "attn_tokens"));
  if (json_object_get(j, "attn_heads")) c->attn_heads = (int)json_integer_value(json_object_get(j, "attn_heads"));
  if (json_object_get(j, "ensemble_k")) c->ensemble_k = (int)json_integer_value(json_object_get(j, "ensemble_k"));
  if (json_object_get(j, "ensemble_diversity"))
    c->hp.ensemble_diversity = (float)json_number_value(json_object_get(j, "ensemble_diversity"));
  if (json_object_get(j, "ensemble_mask_p"))
    c->ensemble_mask_p = (float)json_number_value(json_object_get(j, "ensemble_mask_p"));
  if (json_object_get(j, "ensemble_prior_scale"))
    c->ensemble_prior_scale = (float)json_number_value(json_object_get(j, "ensemble_prior_scale"));
  json_decref(j);
  char err[256];
  ck_assert_msg(learner_config_validate(c, err, sizeof err) == 0, "%s", err);
}

/* Every parameter of the network by its registry name (model.h): the file
 * <which>.<name>.npy goes to the registry's offset, with the registry's shape. */
model_t *golden_registry(const learner_config_t *c) {
  static model_t m;
  model_desc_t d;
  model_desc_from_config(&d, c);
  char err[256];
  ck_assert_msg(model_build(&m, &d, err, sizeof err) == 0, "%s", err);
  return &m;
}

/* which == NULL: the fixed priors (MODEL_VEC_PRIOR), files <name>.npy */
void golden_load_params(const char *cs, const char *which, const learner_config_t *c, double *p) {
  const model_t *m = golden_registry(c);
  for (int i = 0; i < m->n; i++) {
    const model_param_t *mp = &m->p[i];
    if (mp->vec != (which ? MODEL_VEC_NET : MODEL_VEC_PRIOR)) continue;
    char nm[96];
    if (which) snprintf(nm, sizeof nm, "%s.%s", which, mp->name);
    else snprintf(nm, sizeof nm, "%s", mp->name);
    double *w = golden_load64(cs, nm, model_param_count(mp));
    memcpy(p + mp->offset, w, sizeof(double) * (size_t)model_param_count(mp));
    free(w);
  }
}

/* Raw N(0,1) noise of one net into the learner's noise vector: per noisy
 * layer eps_in [in] then eps_out [out] at noise_off (net_layout.h). */
void golden_load_noise(const char *cs, const char *which, const net_layout_t *L, double *eps) {
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    if (!l->noisy) continue;
    char nm[96];
    snprintf(nm, sizeof nm, "in.noise.%s.%s.eps_in", which, l->name);
    double *e = golden_load64(cs, nm, l->in);
    memcpy(eps + l->noise_off, e, sizeof(double) * (size_t)l->in);
    free(e);
    snprintf(nm, sizeof nm, "in.noise.%s.%s.eps_out", which, l->name);
    e = golden_load64(cs, nm, l->out);
    memcpy(eps + l->noise_off + l->in, e, sizeof(double) * (size_t)l->out);
    free(e);
  }
}



void golden_load(const char *cs, golden_t *g) {
  golden_load_config(cs, &g->c);
  net_layout_init(&g->L, &g->c);
  int B = g->c.batch, S = g->c.state_dim;
  g->on = calloc((size_t)g->L.n_params, sizeof(double));
  g->tg = calloc((size_t)g->L.n_params, sizeof(double));
  golden_load_params(cs, "online", &g->c, g->on);
  golden_load_params(cs, "target", &g->c, g->tg);
  g->s = golden_load64(cs, "in.states", (int64_t)B * S);
  g->s2 = golden_load64(cs, "in.next_states", (int64_t)B * S);
  g->a = golden_load64(cs, "in.actions", B);
  g->r = golden_load64(cs, "in.rewards", B);
  g->d = golden_load64(cs, "in.dones", B);
  g->w = golden_load64(cs, "in.is_weights", B);
  g->eps_on = g->eps_tg = NULL;
  g->prior = g->masks = NULL;
  if (g->L.n_prior) {
    g->prior = calloc((size_t)g->L.n_prior, sizeof(double));
    golden_load_params(cs, NULL, &g->c, g->prior);
  }
  if (g->L.K > 1) g->masks = golden_load64(cs, "in.masks", (int64_t)B * g->L.K);
  if (g->L.n_noise) {
    g->eps_on = calloc((size_t)g->L.n_noise, sizeof(double));
    g->eps_tg = calloc((size_t)g->L.n_noise, sizeof(double));
    golden_load_noise(cs, "online", &g->L, g->eps_on);
    golden_load_noise(cs, "target", &g->L, g->eps_tg);
  }
}

void golden_free(golden_t *g) {
  free(g->on), free(g->tg), free(g->s), free(g->s2), free(g->a), free(g->r), free(g->d), free(g->w);
  free(g->eps_on), free(g->eps_tg), free(g->prior), free(g->masks);
}

