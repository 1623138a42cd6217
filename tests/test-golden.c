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
 * the attention block of docs/learner.md §7: its parameters from the files by
 * registry name, every attn.* gradient checked, attn.k.bias absolutely since
 * its exact gradient is zero); ens (small + 3 ensemble heads, docs/learner.md §8:
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
#include "golden_util.h"
#include "testutil.h"

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
    double *ref = golden_load64(cs, "out.loss", 1);                                                                 \
    double e_loss = fabs(loss - ref[0]) / fabs(ref[0]), e_td = 0, e_q = 0, e_g = 0;                          \
    char g_worst[96] = "";                                                                                   \
    ck_assert_msg(fabs(loss - ref[0]) <= tol_loss * fabs(ref[0]), "%s/" #S_ ": loss %.10g vs %.10g", cs,     \
                  loss, ref[0]);                                                                             \
    free(ref);                                                                                               \
    double *lps = golden_load64(cs, "out.loss_per_sample", B), *mine = malloc(sizeof(double) * (size_t)(B * 1024)); \
    for (int i = 0; i < B; i++) mine[i] = (double)ws.loss_i[i];                                              \
    int64_t worst = 0;                                                                                       \
    double e = tu_rel_err(mine, lps, B, &worst), e_lps = e;                                                  \
    ck_assert_msg(e <= tol_loss, "%s/" #S_ ": per-sample loss rel err %.3g (worst sample %lld)", cs, e,      \
                  (long long)worst);                                                                         \
    free(lps);                                                                                               \
    double e_ce = 0, e_div = 0;                                                                              \
    if (K > 1) { /* CE^k_i and D_i */                                                                        \
      double *ce = golden_load64(cs, "out.ce_per_head", (int64_t)B * K);                                            \
      for (int i = 0; i < B * K; i++) mine[i] = (double)ws.ce[i];                                            \
      e_ce = tu_rel_err(mine, ce, (int64_t)B * K, &worst);                                                   \
      ck_assert_msg(e_ce <= tol_loss, "%s/" #S_ ": ce_per_head rel err %.3g", cs, e_ce);                     \
      free(ce);                                                                                              \
      double *dv = golden_load64(cs, "out.diversity", B);                                                           \
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
      double *ba = golden_load64(cs, nm, B);                                                                        \
      for (int i = 0; i < B; i++)                                                                            \
        ck_assert_msg(ws.best[hoff + (size_t)d * B + i] == (int)ba[i], "%s: %sbranch %d sample %d: best %d vs %d", \
                      cs, hn, d, i, ws.best[hoff + (size_t)d * B + i], (int)ba[i]);                          \
      free(ba);                                                                                              \
      snprintf(nm, sizeof nm, "out.target_dist.%sbranch%d", hn, d);                                          \
      double *td = golden_load64(cs, nm, (int64_t)B * Z);                                                           \
      for (int i = 0; i < B * Z; i++) mine[i] = (double)ws.m[(hoff + (size_t)d * B) * Z + i];                \
      e = tu_rel_err(mine, td, (int64_t)B * Z, &worst);                                                      \
      ck_assert_msg(e <= tol_loss, "%s/" #S_ ": target dist branch %d rel err %.3g", cs, d, e);              \
      e_td = e > e_td ? e : e_td;                                                                            \
      free(td);                                                                                              \
      snprintf(nm, sizeof nm, "out.q_online_s.%sbranch%d", hn, d);                                           \
      double *qs = golden_load64(cs, nm, (int64_t)B * n);                                                           \
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
    model_t *M_ = golden_registry(&g->c);                                                                       \
    double e_ga = 0, e_kb = 0;                                                                               \
    char ga_worst[96] = "";                                                                                  \
    for (int pi = 0; pi < M_->n; pi++) {                                                                     \
      const model_param_t *mp = &M_->p[pi];                                                                  \
      if (mp->vec != MODEL_VEC_NET) continue;                                                                \
      char nm[96];                                                                                           \
      snprintf(nm, sizeof nm, "grad.%s", mp->name);                                                          \
      int64_t cnt = model_param_count(mp), off = mp->offset;                                                 \
      double *gr = golden_load64(cs, nm, cnt), *gm = malloc(sizeof(double) * (size_t)cnt);                          \
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
/* small + attention (docs/learner.md §7): 3 tokens of 4, 2 heads; every attn.* gradient */
START_TEST(test_golden_attn) { golden_case("attn"); }
END_TEST
/* small + 3 ensemble heads (docs/learner.md §8): diversity 0.1, masks with p 0.7 */
START_TEST(test_golden_ens) { golden_case("ens"); }
END_TEST
/* attention + 2 heads with priors of scale 1, diversity 0.05, masks p 0.5 */
START_TEST(test_golden_all) { golden_case("all"); }
END_TEST

int main(void) {
  snprintf(golden_dir, sizeof golden_dir, "%s", tu_golden_dir());
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
