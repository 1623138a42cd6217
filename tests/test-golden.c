/*
 * test-golden.c — the CPU learner's loss, targets, Double-DQN actions, Q
 * values and every gradient against PyTorch autograd (float64) on the golden
 * cases in tests/golden/ (README there; copied from the team's shared cases so a clone
 * tests alone). The oracle is independent code: torch's nn.Linear,
 * log_softmax and autograd.
 *
 * Cases: small, ref (Double DQN, no noise); noisy (NoisyNet on the head
 * layers: mu and sigma from the files, raw noise eps from in.noise.<net>.*
 * put into the learner's noise vector and transformed by its own
 * noisy_transform; gradients of mu and sigma checked); nodouble
 * (double_dqn = false: a' from the target net's Q at s'); attn (small with
 * the attention block of DESIGN.md §6.1: its parameters from the files by
 * registry name, every attn.* gradient checked, attn.k.bias absolutely since
 * its exact gradient is zero); ens (small + 3 ensemble heads, DESIGN.md §6.2:
 * diversity 0.1, the bootstrap masks in.masks injected) and all (attention +
 * 2 heads with fixed priors of scale 1, diversity, masks): every head set's
 * gradients, per-head Double-DQN actions, targets and Q(s), CE^k_i
 * (out.ce_per_head) and D_i (out.diversity).
 *
 * Tolerances (golden README): loss and per-sample losses 1e-5 relative,
 * gradients 1e-4 relative as ||g - g*|| / ||g*|| per tensor; the float64
 * instance of the same code must match to 1e-6 (gamma is a float32 config value).
 */
#include <check.h>
#include <jansson.h>
#include <string.h>

#include "dqn_math.h"
#include "model.h"
#include "npy.h"
#include "testutil.h"

static char gdir[1024];

static double *load64(const char *cs, const char *name, int64_t expect) {
  char path[1400], err[512];
  snprintf(path, sizeof path, "%s/%s/%s.npy", gdir, cs, name);
  npy_array_t a;
  ck_assert_msg(npy_read(path, &a, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(expect < 0 || a.count == expect, "%s: %lld elements, expected %lld", name, (long long)a.count,
                (long long)expect);
  double *d = npy_to_f64(&a);
  npy_free(&a);
  return d;
}

static void load_config(const char *cs, learner_config_t *c) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s/config.json", gdir, cs);
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
static model_t *registry_of(const learner_config_t *c) {
  static model_t m;
  model_desc_t d;
  model_desc_from_config(&d, c);
  char err[256];
  ck_assert_msg(model_build(&m, &d, err, sizeof err) == 0, "%s", err);
  return &m;
}

/* which == NULL: the fixed priors (MODEL_VEC_PRIOR), files <name>.npy */
static void load_params(const char *cs, const char *which, const learner_config_t *c, double *p) {
  const model_t *m = registry_of(c);
  for (int i = 0; i < m->n; i++) {
    const model_param_t *mp = &m->p[i];
    if (mp->vec != (which ? MODEL_VEC_NET : MODEL_VEC_PRIOR)) continue;
    char nm[96];
    if (which) snprintf(nm, sizeof nm, "%s.%s", which, mp->name);
    else snprintf(nm, sizeof nm, "%s", mp->name);
    double *w = load64(cs, nm, model_param_count(mp));
    memcpy(p + mp->offset, w, sizeof(double) * (size_t)model_param_count(mp));
    free(w);
  }
}

/* Raw N(0,1) noise of one net into the learner's noise vector: per noisy
 * layer eps_in [in] then eps_out [out] at noise_off (net_layout.h). */
static void load_noise(const char *cs, const char *which, const net_layout_t *L, double *eps) {
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    if (!l->noisy) continue;
    char nm[96];
    snprintf(nm, sizeof nm, "in.noise.%s.%s.eps_in", which, l->name);
    double *e = load64(cs, nm, l->in);
    memcpy(eps + l->noise_off, e, sizeof(double) * (size_t)l->in);
    free(e);
    snprintf(nm, sizeof nm, "in.noise.%s.%s.eps_out", which, l->name);
    e = load64(cs, nm, l->out);
    memcpy(eps + l->noise_off + l->in, e, sizeof(double) * (size_t)l->out);
    free(e);
  }
}

typedef struct {
  learner_config_t c;
  net_layout_t L;
  double *on, *tg, *s, *s2, *a, *r, *d, *w;
  double *eps_on, *eps_tg; /* [n_noise] raw noise, NULL without NoisyNet */
  double *prior, *masks;   /* [n_prior] fixed priors, [B, K] bootstrap masks; NULL without */
} golden_t;

static void golden_load(const char *cs, golden_t *g) {
  load_config(cs, &g->c);
  net_layout_init(&g->L, &g->c);
  int B = g->c.batch, S = g->c.state_dim;
  g->on = calloc((size_t)g->L.n_params, sizeof(double));
  g->tg = calloc((size_t)g->L.n_params, sizeof(double));
  load_params(cs, "online", &g->c, g->on);
  load_params(cs, "target", &g->c, g->tg);
  g->s = load64(cs, "in.states", (int64_t)B * S);
  g->s2 = load64(cs, "in.next_states", (int64_t)B * S);
  g->a = load64(cs, "in.actions", B);
  g->r = load64(cs, "in.rewards", B);
  g->d = load64(cs, "in.dones", B);
  g->w = load64(cs, "in.is_weights", B);
  g->eps_on = g->eps_tg = NULL;
  g->prior = g->masks = NULL;
  if (g->L.n_prior) {
    g->prior = calloc((size_t)g->L.n_prior, sizeof(double));
    load_params(cs, NULL, &g->c, g->prior);
  }
  if (g->L.K > 1) g->masks = load64(cs, "in.masks", (int64_t)B * g->L.K);
  if (g->L.n_noise) {
    g->eps_on = calloc((size_t)g->L.n_noise, sizeof(double));
    g->eps_tg = calloc((size_t)g->L.n_noise, sizeof(double));
    load_noise(cs, "online", &g->L, g->eps_on);
    load_noise(cs, "target", &g->L, g->eps_tg);
  }
}

static void golden_free(golden_t *g) {
  free(g->on), free(g->tg), free(g->s), free(g->s2), free(g->a), free(g->r), free(g->d), free(g->w);
  free(g->eps_on), free(g->eps_tg), free(g->prior), free(g->masks);
}

/* Runs the float (production) or double instance and compares everything. */
#define GOLDEN_RUN(S_, R_)                                                                                   \
  static void run_##S_(const char *cs, const golden_t *g, double tol_loss, double tol_grad) {                \
    const net_layout_t *L = &g->L;                                                                           \
    int B = g->c.batch, S = g->c.state_dim, Z = g->c.atoms;                                                  \
    int64_t P = L->n_params;                                                                                 \
    R_ *on = malloc(sizeof(R_) * (size_t)P), *tg = malloc(sizeof(R_) * (size_t)P);                          \
    R_ *grad = malloc(sizeof(R_) * (size_t)P);                                                               \
    for (int64_t i = 0; i < P; i++) on[i] = (R_)g->on[i], tg[i] = (R_)g->tg[i];                              \
    /* NoisyNet: the raw eps through the learner's own f(x) = sign(x) sqrt|x| */                            \
    int64_t N = L->n_noise;                                                                                  \
    R_ *fn_on = NULL, *fn_tg = NULL;                                                                         \
    if (g->eps_on) {                                                                                         \
      fn_on = malloc(sizeof(R_) * (size_t)N), fn_tg = malloc(sizeof(R_) * (size_t)N);                       \
      for (int64_t i = 0; i < N; i++) fn_on[i] = (R_)g->eps_on[i], fn_tg[i] = (R_)g->eps_tg[i];              \
      noisy_transform_##S_(fn_on, N);                                                                        \
      noisy_transform_##S_(fn_tg, N);                                                                        \
    }                                                                                                        \
    dqn_ws_##S_##_t ws;                                                                                      \
    ck_assert_int_eq(dqn_ws_alloc_##S_(&ws, L, B), 0);                                                       \
    for (int i = 0; i < B * S; i++) ws.x[i] = (R_)g->s[i], ws.x[B * S + i] = (R_)g->s2[i];                   \
    for (int i = 0; i < B; i++) {                                                                            \
      ws.a[i] = (int32_t)g->a[i];                                                                            \
      ws.r[i] = (R_)g->r[i];                                                                                 \
      ws.done[i] = (R_)g->d[i];                                                                              \
      ws.w[i] = (R_)g->w[i];                                                                                 \
    }                                                                                                        \
    const int K = L->K;                                                                                      \
    if (g->masks)                                                                                            \
      for (int i = 0; i < B * K; i++) ws.mask[i] = (R_)g->masks[i];                                          \
    R_ *prior = NULL;                                                                                        \
    if (g->prior) {                                                                                          \
      prior = malloc(sizeof(R_) * (size_t)L->n_prior);                                                       \
      for (int64_t i = 0; i < L->n_prior; i++) prior[i] = (R_)g->prior[i];                                   \
    }                                                                                                        \
    dqn_hp_##S_##_t hp = {(R_)g->c.hp.gamma,           (R_)g->c.v_min,                (R_)g->c.v_max,       \
                          (R_)g->c.leaky_slope,        g->c.double_dqn,               (R_)g->c.hp.ensemble_diversity, \
                          (R_)g->c.ensemble_prior_scale, prior};                                               \
    R_ qm;                                                                                                   \
    double loss = (double)dqn_loss_grad_##S_(L, &hp, on, tg, fn_on, fn_tg, &ws, grad, &qm);                 \
    double *ref = load64(cs, "out.loss", 1);                                                                 \
    double e_loss = fabs(loss - ref[0]) / fabs(ref[0]), e_td = 0, e_q = 0, e_g = 0;                          \
    char g_worst[96] = "";                                                                                   \
    ck_assert_msg(fabs(loss - ref[0]) <= tol_loss * fabs(ref[0]), "%s/" #S_ ": loss %.10g vs %.10g", cs,     \
                  loss, ref[0]);                                                                             \
    free(ref);                                                                                               \
    double *lps = load64(cs, "out.loss_per_sample", B), *mine = malloc(sizeof(double) * (size_t)(B * 1024)); \
    for (int i = 0; i < B; i++) mine[i] = (double)ws.loss_i[i];                                              \
    int64_t worst = 0;                                                                                       \
    double e = tu_rel_err(mine, lps, B, &worst), e_lps = e;                                                  \
    ck_assert_msg(e <= tol_loss, "%s/" #S_ ": per-sample loss rel err %.3g (worst sample %lld)", cs, e,      \
                  (long long)worst);                                                                         \
    free(lps);                                                                                               \
    double e_ce = 0, e_div = 0;                                                                              \
    if (K > 1) { /* CE^k_i and D_i */                                                                        \
      double *ce = load64(cs, "out.ce_per_head", (int64_t)B * K);                                            \
      for (int i = 0; i < B * K; i++) mine[i] = (double)ws.ce[i];                                            \
      e_ce = tu_rel_err(mine, ce, (int64_t)B * K, &worst);                                                   \
      ck_assert_msg(e_ce <= tol_loss, "%s/" #S_ ": ce_per_head rel err %.3g", cs, e_ce);                     \
      free(ce);                                                                                              \
      double *dv = load64(cs, "out.diversity", B);                                                           \
      for (int i = 0; i < B; i++) mine[i] = (double)ws.div[i];                                               \
      e_div = tu_rel_err(mine, dv, B, &worst);                                                               \
      ck_assert_msg(e_div <= tol_loss, "%s/" #S_ ": diversity rel err %.3g", cs, e_div);                     \
      free(dv);                                                                                              \
    }                                                                                                        \
    for (int hd = 0; hd < K * L->D; hd++) {                                                                  \
      char nm[96], hn[24] = "";                                                                              \
      int hk = hd / L->D, d = hd % L->D;                                                                     \
      if (K > 1) snprintf(hn, sizeof hn, "head%d.", hk);                                                     \
      int n = L->n[d];                                                                                       \
      size_t hoff = (size_t)hk * L->D * B;                                                                   \
      snprintf(nm, sizeof nm, "out.best_next_action.%sbranch%d", hn, d);                                     \
      double *ba = load64(cs, nm, B);                                                                        \
      for (int i = 0; i < B; i++)                                                                            \
        ck_assert_msg(ws.best[hoff + (size_t)d * B + i] == (int)ba[i], "%s: %sbranch %d sample %d: best %d vs %d", \
                      cs, hn, d, i, ws.best[hoff + (size_t)d * B + i], (int)ba[i]);                          \
      free(ba);                                                                                              \
      snprintf(nm, sizeof nm, "out.target_dist.%sbranch%d", hn, d);                                          \
      double *td = load64(cs, nm, (int64_t)B * Z);                                                           \
      for (int i = 0; i < B * Z; i++) mine[i] = (double)ws.m[(hoff + (size_t)d * B) * Z + i];                \
      e = tu_rel_err(mine, td, (int64_t)B * Z, &worst);                                                      \
      ck_assert_msg(e <= tol_loss, "%s/" #S_ ": target dist branch %d rel err %.3g", cs, d, e);              \
      e_td = e > e_td ? e : e_td;                                                                            \
      free(td);                                                                                              \
      snprintf(nm, sizeof nm, "out.q_online_s.%sbranch%d", hn, d);                                           \
      double *qs = load64(cs, nm, (int64_t)B * n);                                                           \
      R_ sup[LEARNER_MAX_ATOMS], q[64];                                                                      \
      for (int z = 0; z < Z; z++) sup[z] = (R_)g->c.v_min + ((R_)g->c.v_max - (R_)g->c.v_min) * z / (Z - 1);   \
      for (int i = 0; i < B; i++) {                                                                          \
        c51_q_values_##S_(ws.on.logp[d] + hk * ws.on.hstride + (size_t)i * n * Z, n, Z, sup, q);             \
        for (int k = 0; k < n; k++) mine[i * n + k] = (double)q[k];                                          \
      }                                                                                                      \
      e = tu_rel_err(mine, qs, (int64_t)B * n, &worst);                                                      \
      ck_assert_msg(e <= tol_loss, "%s/" #S_ ": Q(s) branch %d rel err %.3g", cs, d, e);                     \
      e_q = e > e_q ? e : e_q;                                                                               \
      free(qs);                                                                                              \
    }                                                                                                        \
    free(mine);                                                                                              \
    model_t *M_ = registry_of(&g->c);                                                                       \
    double e_ga = 0, e_kb = 0;                                                                               \
    char ga_worst[96] = "";                                                                                  \
    for (int pi = 0; pi < M_->n; pi++) {                                                                     \
      const model_param_t *mp = &M_->p[pi];                                                                  \
      if (mp->vec != MODEL_VEC_NET) continue;                                                                \
      char nm[96];                                                                                           \
      snprintf(nm, sizeof nm, "grad.%s", mp->name);                                                          \
      int64_t cnt = model_param_count(mp), off = mp->offset;                                                 \
      double *gr = load64(cs, nm, cnt), *gm = malloc(sizeof(double) * (size_t)cnt);                          \
      for (int64_t k = 0; k < cnt; k++) gm[k] = (double)grad[off + k];                                       \
      if (!strcmp(mp->name, "attn.k.bias")) { /* exactly zero (softmax is shift-invariant): absolute */      \
        double amax = 0;                                                                                     \
        for (int64_t k = 0; k < cnt; k++) {                                                                  \
          double ad = fabs(gm[k] - gr[k]);                                                                   \
          amax = ad > amax ? ad : amax;                                                                      \
        }                                                                                                    \
        ck_assert_msg(amax <= 1e-6, "%s/" #S_ ": %s abs err %.3g", cs, nm, amax);                            \
        e_kb = amax;                                                                                         \
        free(gr);                                                                                            \
        free(gm);                                                                                            \
        continue;                                                                                            \
      }                                                                                                      \
      e = tu_rel_err(gm, gr, cnt, &worst);                                                                   \
      ck_assert_msg(e <= tol_grad, "%s/" #S_ ": %s rel err %.3g (worst index %lld: %.6g vs %.6g)", cs, nm,   \
                    e, (long long)worst, gm[worst], gr[worst]);                                              \
      if (!strncmp(mp->name, "attn.", 5) && e >= e_ga) e_ga = e, snprintf(ga_worst, sizeof ga_worst, "%s", nm + 5); \
      if (e >= e_g) e_g = e, snprintf(g_worst, sizeof g_worst, "%s", nm + 5);                                \
      free(gr);                                                                                              \
      free(gm);                                                                                              \
    }                                                                                                        \
    printf("%s/" #S_ ": rel err loss %.2g, per-sample %.2g, target dist %.2g, Q(s) %.2g, "                  \
           "worst gradient %.2g (%s)\n", cs, e_loss, e_lps, e_td, e_q, e_g, g_worst);                        \
    if (K > 1)                                                                                               \
      printf("%s/" #S_ ": K %d: rel err ce_per_head %.2g, diversity %.2g\n", cs, K, e_ce, e_div);            \
    if (L->attn.T)                                                                                           \
      printf("%s/" #S_ ": worst attention gradient rel err %.2g (%s), attn.k.bias abs err %.2g\n", cs, e_ga, \
             ga_worst, e_kb);                                                                                \
    dqn_ws_free_##S_(&ws);                                                                                   \
    free(on), free(tg), free(grad), free(fn_on), free(fn_tg), free(prior);                                   \
  }
GOLDEN_RUN(f32, float)
GOLDEN_RUN(f64, double)

static void golden_case(const char *cs) {
  golden_t g;
  golden_load(cs, &g);
  run_f32(cs, &g, 1e-5, 1e-4);
  /* gamma and the atom support are float32 in the config; torch used float64 */
  run_f64(cs, &g, 1e-6, 1e-6);
  golden_free(&g);
}

START_TEST(test_golden_small) { golden_case("small"); }
END_TEST
START_TEST(test_golden_ref) { golden_case("ref"); }
END_TEST
START_TEST(test_golden_noisy) { golden_case("noisy"); }
END_TEST
START_TEST(test_golden_nodouble) { golden_case("nodouble"); }
END_TEST
/* small + attention (DESIGN.md §6.1): 3 tokens of 4, 2 heads; every attn.* gradient */
START_TEST(test_golden_attn) { golden_case("attn"); }
END_TEST
/* small + 3 ensemble heads (DESIGN.md §6.2): diversity 0.1, masks with p 0.7 */
START_TEST(test_golden_ens) { golden_case("ens"); }
END_TEST
/* attention + 2 heads with priors of scale 1, diversity 0.05, masks p 0.5 */
START_TEST(test_golden_all) { golden_case("all"); }
END_TEST

int main(void) {
  const char *gd = getenv("DQND_GOLDEN_DIR");
  snprintf(gdir, sizeof gdir, "%s", gd ? gd : "tests/golden"); /* meson sets it; else run from the root */
  Suite *s = suite_create("golden");
  TCase *tc = tcase_create("pytorch-autograd");
  tcase_add_test(tc, test_golden_small);
  tcase_add_test(tc, test_golden_ref);
  tcase_add_test(tc, test_golden_noisy);
  tcase_add_test(tc, test_golden_nodouble);
  tcase_add_test(tc, test_golden_attn);
  tcase_add_test(tc, test_golden_ens);
  tcase_add_test(tc, test_golden_all);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
