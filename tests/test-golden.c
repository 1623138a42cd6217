/*
 * test-golden.c — the CPU learner's loss, targets, Double-DQN actions, Q
 * values and every gradient against PyTorch autograd (float64) on the golden
 * cases in shared/golden/ (README there). The oracle is independent code:
 * torch's nn.Linear, log_softmax and autograd.
 *
 * Tolerances (golden README): loss and per-sample losses 1e-5 relative,
 * gradients 1e-4 relative as ||g - g*|| / ||g*|| per tensor; the float64
 * instance of the same code must match to 1e-6 (gamma is a float32 config value).
 */
#include <check.h>
#include <jansson.h>
#include <string.h>

#include "dqn_math.h"
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
  json_decref(j);
  char err[256];
  ck_assert_msg(learner_config_validate(c, err, sizeof err) == 0, "%s", err);
}

static void load_params(const char *cs, const char *which, const net_layout_t *L, double *p) {
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    char nm[64];
    snprintf(nm, sizeof nm, "%s.%s.weight", which, l->name);
    double *w = load64(cs, nm, (int64_t)l->in * l->out);
    memcpy(p + l->off_w, w, sizeof(double) * (size_t)l->in * l->out);
    free(w);
    snprintf(nm, sizeof nm, "%s.%s.bias", which, l->name);
    double *b = load64(cs, nm, l->out);
    memcpy(p + l->off_b, b, sizeof(double) * (size_t)l->out);
    free(b);
  }
}

typedef struct {
  learner_config_t c;
  net_layout_t L;
  double *on, *tg, *s, *s2, *a, *r, *d, *w;
} golden_t;

static void golden_load(const char *cs, golden_t *g) {
  load_config(cs, &g->c);
  net_layout_init(&g->L, &g->c);
  int B = g->c.batch, S = g->c.state_dim;
  g->on = calloc((size_t)g->L.n_params, sizeof(double));
  g->tg = calloc((size_t)g->L.n_params, sizeof(double));
  load_params(cs, "online", &g->L, g->on);
  load_params(cs, "target", &g->L, g->tg);
  g->s = load64(cs, "in.states", (int64_t)B * S);
  g->s2 = load64(cs, "in.next_states", (int64_t)B * S);
  g->a = load64(cs, "in.actions", B);
  g->r = load64(cs, "in.rewards", B);
  g->d = load64(cs, "in.dones", B);
  g->w = load64(cs, "in.is_weights", B);
}

static void golden_free(golden_t *g) {
  free(g->on), free(g->tg), free(g->s), free(g->s2), free(g->a), free(g->r), free(g->d), free(g->w);
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
    dqn_ws_##S_##_t ws;                                                                                      \
    ck_assert_int_eq(dqn_ws_alloc_##S_(&ws, L, B), 0);                                                       \
    for (int i = 0; i < B * S; i++) ws.x[i] = (R_)g->s[i], ws.x[B * S + i] = (R_)g->s2[i];                   \
    for (int i = 0; i < B; i++) {                                                                            \
      ws.a[i] = (int32_t)g->a[i];                                                                            \
      ws.r[i] = (R_)g->r[i];                                                                                 \
      ws.done[i] = (R_)g->d[i];                                                                              \
      ws.w[i] = (R_)g->w[i];                                                                                 \
    }                                                                                                        \
    dqn_hp_##S_##_t hp = {(R_)g->c.hp.gamma, (R_)g->c.v_min, (R_)g->c.v_max, (R_)g->c.leaky_slope,          \
                          g->c.double_dqn};                                                                  \
    R_ qm;                                                                                                   \
    double loss = (double)dqn_loss_grad_##S_(L, &hp, on, tg, NULL, NULL, &ws, grad, &qm);                   \
    double *ref = load64(cs, "out.loss", 1);                                                                 \
    ck_assert_msg(fabs(loss - ref[0]) <= tol_loss * fabs(ref[0]), "%s/" #S_ ": loss %.10g vs %.10g", cs,     \
                  loss, ref[0]);                                                                             \
    free(ref);                                                                                               \
    double *lps = load64(cs, "out.loss_per_sample", B), *mine = malloc(sizeof(double) * (size_t)(B * 1024)); \
    for (int i = 0; i < B; i++) mine[i] = (double)ws.loss_i[i];                                              \
    int64_t worst = 0;                                                                                       \
    double e = tu_rel_err(mine, lps, B, &worst);                                                             \
    ck_assert_msg(e <= tol_loss, "%s/" #S_ ": per-sample loss rel err %.3g (worst sample %lld)", cs, e,      \
                  (long long)worst);                                                                         \
    free(lps);                                                                                               \
    for (int d = 0; d < L->D; d++) {                                                                         \
      char nm[64];                                                                                           \
      int n = L->n[d];                                                                                       \
      snprintf(nm, sizeof nm, "out.best_next_action.branch%d", d);                                           \
      double *ba = load64(cs, nm, B);                                                                        \
      for (int i = 0; i < B; i++)                                                                            \
        ck_assert_msg(ws.best[(size_t)d * B + i] == (int)ba[i], "%s: branch %d sample %d: best %d vs %d", cs, \
                      d, i, ws.best[(size_t)d * B + i], (int)ba[i]);                                         \
      free(ba);                                                                                              \
      snprintf(nm, sizeof nm, "out.target_dist.branch%d", d);                                                \
      double *td = load64(cs, nm, (int64_t)B * Z);                                                           \
      for (int i = 0; i < B * Z; i++) mine[i] = (double)ws.m[(size_t)d * B * Z + i];                         \
      e = tu_rel_err(mine, td, (int64_t)B * Z, &worst);                                                      \
      ck_assert_msg(e <= tol_loss, "%s/" #S_ ": target dist branch %d rel err %.3g", cs, d, e);              \
      free(td);                                                                                              \
      snprintf(nm, sizeof nm, "out.q_online_s.branch%d", d);                                                 \
      double *qs = load64(cs, nm, (int64_t)B * n);                                                           \
      R_ sup[LEARNER_MAX_ATOMS], q[64];                                                                      \
      for (int z = 0; z < Z; z++) sup[z] = (R_)g->c.v_min + ((R_)g->c.v_max - (R_)g->c.v_min) * z / (Z - 1);   \
      for (int i = 0; i < B; i++) {                                                                          \
        c51_q_values_##S_(ws.on.logp[d] + (size_t)i * n * Z, n, Z, sup, q);                                  \
        for (int k = 0; k < n; k++) mine[i * n + k] = (double)q[k];                                          \
      }                                                                                                      \
      e = tu_rel_err(mine, qs, (int64_t)B * n, &worst);                                                      \
      ck_assert_msg(e <= tol_loss, "%s/" #S_ ": Q(s) branch %d rel err %.3g", cs, d, e);                     \
      free(qs);                                                                                              \
    }                                                                                                        \
    free(mine);                                                                                              \
    for (int li = 0; li < L->n_layers; li++) {                                                               \
      const net_layer_t *l = &L->layer[li];                                                                  \
      for (int wb = 0; wb < 2; wb++) {                                                                       \
        char nm[64];                                                                                         \
        snprintf(nm, sizeof nm, "grad.%s.%s", l->name, wb ? "bias" : "weight");                              \
        int64_t cnt = wb ? l->out : (int64_t)l->in * l->out, off = wb ? l->off_b : l->off_w;                  \
        double *gr = load64(cs, nm, cnt), *gm = malloc(sizeof(double) * (size_t)cnt);                        \
        for (int64_t k = 0; k < cnt; k++) gm[k] = (double)grad[off + k];                                     \
        e = tu_rel_err(gm, gr, cnt, &worst);                                                                 \
        ck_assert_msg(e <= tol_grad, "%s/" #S_ ": %s rel err %.3g (worst index %lld: %.6g vs %.6g)", cs, nm, \
                      e, (long long)worst, gm[worst], gr[worst]);                                            \
        free(gr);                                                                                            \
        free(gm);                                                                                            \
      }                                                                                                      \
    }                                                                                                        \
    dqn_ws_free_##S_(&ws);                                                                                   \
    free(on), free(tg), free(grad);                                                                          \
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

int main(void) {
  const char *gd = getenv("DQND_GOLDEN_DIR");
  snprintf(gdir, sizeof gdir, "%s", gd ? gd : "../shared/golden");
  Suite *s = suite_create("golden");
  TCase *tc = tcase_create("pytorch-autograd");
  tcase_add_test(tc, test_golden_small);
  tcase_add_test(tc, test_golden_ref);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
