/*
 * test-gradcheck.c — the backward pass against central finite differences.
 *
 * Oracle: for every parameter block (each layer's weight, bias, and for
 * NoisyNet layers sigma_weight and sigma_bias) the float64 instance of the
 * learner's loss is perturbed element by element,
 *     g_fd[k] = (L(theta + h e_k) - L(theta - h e_k)) / (2h),  h = 1e-5,
 * and compared with the analytic gradient of the same float64 instance:
 *     err = ||g - g_fd|| / ||g_fd||  per block, must be <= 1e-3
 * (in practice ~1e-8). Blocks with many elements are checked on a fixed
 * random subset of 64 elements, the norm taken over that subset. Several small
 * random configs: NoisyNet on and off, branch sizes other than 9,3,3, done
 * flags both ways, IS weights not all 1, Double DQN on and off.
 * Then the float32 (production) instance must agree with the float64 one to
 * 1e-4 per block.
 *
 * Attention (docs/learner.md §7) cases add its blocks: attn.pos, attn.q|k|v|o
 * weight and bias, attn.ln weight and bias, the same way; attn.k.bias, whose
 * exact gradient is zero (softmax is shift-invariant), absolutely (analytic
 * and finite differences both <= 1e-7). A last test checks that the samples
 * of a batch stay independent with attention on (tokens attend within their
 * own row only).
 *
 * Ensemble cases (docs/learner.md §8) run the same loop over every head set's
 * layers (head{k}.value1 ... branch{d}_2) with K = 2 or 3, the diversity term
 * on (lambda > 0), bootstrap masks not all ones, and fixed random priors
 * (their gradient into h' flows; they have none of their own), with and
 * without attention and NoisyNet.
 */
#include <check.h>
#include <string.h>

#include "dqn_math.h"
#include "testutil.h"

typedef struct {
  int S, H1, H2, VH, AH, Z, B, noisy, double_dqn;
  int nb, br[4];
  double done_frac;
  int T, nh; /* attention tokens and heads (0: off) */
} gc_case_t;

typedef struct {
  int K;
  double lambda, prior_scale;
} gc_ens_t;

static void run_case_ens(const gc_case_t *k, const gc_ens_t *en, uint64_t seed) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = k->S;
  c.trunk_h1 = k->H1;
  c.trunk_h2 = k->H2;
  c.value_hidden = k->VH;
  c.adv_hidden = k->AH;
  c.atoms = k->Z;
  c.v_min = -3;
  c.v_max = 4;
  c.batch = k->B;
  c.noisy = k->noisy;
  c.double_dqn = k->double_dqn;
  c.n_branches = k->nb;
  for (int d = 0; d < k->nb; d++) c.branch_sizes[d] = k->br[d];
  c.attn_tokens = k->T;
  c.attn_heads = k->nh;
  if (en) {
    c.ensemble_k = en->K;
    c.hp.ensemble_diversity = (float)en->lambda;
    c.ensemble_prior_scale = (float)en->prior_scale;
    c.ensemble_mask_p = 0.6f;
  }
  char verr[256];
  ck_assert_msg(learner_config_validate(&c, verr, sizeof verr) == 0, "%s", verr);
  net_layout_t L;
  net_layout_init(&L, &c);
  int64_t P = L.n_params, N = L.n_noise;
  int B = k->B, A = learner_config_joint_actions(&c);

  double *on = malloc(sizeof(double) * (size_t)P), *tg = malloc(sizeof(double) * (size_t)P);
  double *g = malloc(sizeof(double) * (size_t)P);
  tu_fill_uniform_f64(on, P, -0.6, 0.6, seed, 1);
  tu_fill_uniform_f64(tg, P, -0.6, 0.6, seed, 2);
  double *fn_on = NULL, *fn_tg = NULL;
  if (N) {
    fn_on = malloc(sizeof(double) * (size_t)N);
    fn_tg = malloc(sizeof(double) * (size_t)N);
    tu_fill_normal_f64(fn_on, N, seed, 3);
    tu_fill_normal_f64(fn_tg, N, seed, 4);
    noisy_transform_f64(fn_on, N);
    noisy_transform_f64(fn_tg, N);
  }
  dqn_ws_f64_t ws;
  ck_assert_int_eq(dqn_ws_alloc_f64(&ws, &L, B), 0);
  tu_fill_uniform_f64(ws.x, 2 * (int64_t)B * k->S, -1.5, 1.5, seed, 5);
  double u[4096];
  tu_fill_uniform_f64(u, 4 * B, 0, 1, seed, 6);
  for (int i = 0; i < B; i++) {
    ws.a[i] = (int32_t)(u[i] * A);
    ws.r[i] = -2 + 4 * u[B + i];
    ws.done[i] = u[2 * B + i] < k->done_frac ? 1 : 0;
    ws.w[i] = 0.2 + 0.8 * u[3 * B + i];
  }
  const int K = L.K;
  double *prior = NULL;
  float *prior32 = NULL;
  if (L.n_prior) {
    prior = malloc(sizeof(double) * (size_t)L.n_prior);
    prior32 = malloc(sizeof(float) * (size_t)L.n_prior);
    tu_fill_uniform_f64(prior, L.n_prior, -0.6, 0.6, seed, 9);
    for (int64_t i = 0; i < L.n_prior; i++) prior32[i] = (float)prior[i];
  }
  if (K > 1) { /* masks not all ones, none all zeros per sample */
    int zeros = 0;
    for (int i = 0; i < B; i++)
      for (int h = 0; h < K; h++) {
        ws.mask[i * K + h] = ((i * K + h) % 3 != 2 || h == i % K) ? 1.0 : 0.0;
        zeros += ws.mask[i * K + h] == 0;
      }
    ck_assert_int_gt(zeros, 0);
  }
  dqn_hp_f64_t hp = {0.97, c.v_min, c.v_max, 0.01, k->double_dqn, c.hp.ensemble_diversity, c.ensemble_prior_scale,
                     prior};
  double qm;
  dqn_loss_grad_f64(&L, &hp, on, tg, fn_on, fn_tg, &ws, g, &qm);

  /* float32 instance on the same inputs */
  float *on32 = malloc(sizeof(float) * (size_t)P), *tg32 = malloc(sizeof(float) * (size_t)P);
  float *g32 = malloc(sizeof(float) * (size_t)P), *fo32 = NULL, *ft32 = NULL;
  for (int64_t i = 0; i < P; i++) on32[i] = (float)on[i], tg32[i] = (float)tg[i];
  if (N) {
    fo32 = malloc(sizeof(float) * (size_t)N);
    ft32 = malloc(sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < N; i++) fo32[i] = (float)fn_on[i], ft32[i] = (float)fn_tg[i];
  }
  dqn_ws_f32_t ws32;
  ck_assert_int_eq(dqn_ws_alloc_f32(&ws32, &L, B), 0);
  for (int64_t i = 0; i < 2 * (int64_t)B * k->S; i++) ws32.x[i] = (float)ws.x[i];
  for (int i = 0; i < B; i++) {
    ws32.a[i] = ws.a[i];
    ws32.r[i] = (float)ws.r[i];
    ws32.done[i] = (float)ws.done[i];
    ws32.w[i] = (float)ws.w[i];
  }
  for (int i = 0; i < B * K; i++) ws32.mask[i] = (float)ws.mask[i];
  dqn_hp_f32_t hp32 = {0.97f, c.v_min, c.v_max, 0.01f, k->double_dqn, c.hp.ensemble_diversity,
                       c.ensemble_prior_scale, prior32};
  float qm32;
  dqn_loss_grad_f32(&L, &hp32, on32, tg32, fo32, ft32, &ws32, g32, &qm32);

  const double h = 1e-5;
  int blocks = 0;
  double worst_head = 0;
  char worst_nm[64] = "";
  for (int li = 0; li < L.n_layers; li++) {
    const net_layer_t *l = &L.layer[li];
    int64_t offs[4] = {l->off_w, l->off_b, l->off_sw, l->off_sb};
    int64_t cnts[4] = {(int64_t)l->in * l->out, l->out, (int64_t)l->in * l->out, l->out};
    const char *nm[4] = {"weight", "bias", "sigma_weight", "sigma_bias"};
    for (int bk = 0; bk < (l->noisy ? 4 : 2); bk++) {
      int64_t cnt = cnts[bk], m = cnt < 64 ? cnt : 64;
      double ga[64], gf[64], g3[64];
      for (int64_t j = 0; j < m; j++) {
        int64_t e = cnt <= 64 ? j : (int64_t)(philox_draw(seed, 7, (uint64_t)(li * 4 + bk), (uint32_t)j).v[0] % (uint64_t)cnt);
        int64_t idx = offs[bk] + e;
        double keep = on[idx];
        on[idx] = keep + h;
        double lp = dqn_loss_grad_f64(&L, &hp, on, tg, fn_on, fn_tg, &ws, NULL, &qm);
        on[idx] = keep - h;
        double lm = dqn_loss_grad_f64(&L, &hp, on, tg, fn_on, fn_tg, &ws, NULL, &qm);
        on[idx] = keep;
        gf[j] = (lp - lm) / (2 * h);
        ga[j] = g[idx];
        g3[j] = g32[idx];
      }
      int64_t worst = 0;
      double err = tu_rel_err(ga, gf, m, &worst);
      ck_assert_msg(err <= 1e-3, "seed %llu %s.%s: analytic vs finite-difference rel err %.3g (elem %lld: %.8g vs %.8g)",
                    (unsigned long long)seed, l->name, nm[bk], err, (long long)worst, ga[worst], gf[worst]);
      double err32 = tu_rel_err(g3, ga, m, &worst);
      ck_assert_msg(err32 <= 1e-4, "seed %llu %s.%s: float32 vs float64 rel err %.3g", (unsigned long long)seed,
                    l->name, nm[bk], err32);
      if (K > 1 && err > worst_head) worst_head = err, snprintf(worst_nm, sizeof worst_nm, "%s.%s", l->name, nm[bk]);
      blocks++;
    }
  }
  /* the attention block's tensors */
  const net_attn_t *at = &L.attn;
  for (int bk = 0; at->T && bk < 11; bk++) {
    static const char *anm[11] = {"attn.pos", "attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight",
                                  "attn.q.bias", "attn.k.bias", "attn.v.bias", "attn.o.bias", "attn.ln.weight",
                                  "attn.ln.bias"};
    int64_t dd = at->d;
    int64_t off = bk == 0 ? at->off_pos : bk < 5 ? at->off_w[bk - 1] : bk < 9 ? at->off_b[bk - 5]
                : bk == 9 ? at->off_ln_w : at->off_ln_b;
    int64_t cnt = bk == 0 ? at->T * dd : bk < 5 ? dd * dd : dd;
    int64_t m = cnt < 64 ? cnt : 64;
    double ga[64], gf[64], g3[64];
    for (int64_t j = 0; j < m; j++) {
      int64_t e = cnt <= 64 ? j : (int64_t)(philox_draw(seed, 8, (uint64_t)bk, (uint32_t)j).v[0] % (uint64_t)cnt);
      int64_t idx = off + e;
      double keep = on[idx];
      on[idx] = keep + h;
      double lp = dqn_loss_grad_f64(&L, &hp, on, tg, fn_on, fn_tg, &ws, NULL, &qm);
      on[idx] = keep - h;
      double lm = dqn_loss_grad_f64(&L, &hp, on, tg, fn_on, fn_tg, &ws, NULL, &qm);
      on[idx] = keep;
      gf[j] = (lp - lm) / (2 * h);
      ga[j] = g[idx];
      g3[j] = g32[idx];
    }
    int64_t worst = 0;
    if (bk == 6) { /* attn.k.bias: zero in exact arithmetic */
      double amax = 0;
      for (int64_t j = 0; j < m; j++) {
        amax = fabs(ga[j]) > amax ? fabs(ga[j]) : amax;
        amax = fabs(gf[j]) > amax ? fabs(gf[j]) : amax;
        amax = fabs(g3[j]) > amax ? fabs(g3[j]) : amax;
      }
      ck_assert_msg(amax <= 1e-7, "seed %llu attn.k.bias: |gradient| %.3g, expected 0", (unsigned long long)seed,
                    amax);
      printf("seed %llu %s: max |g| (analytic, fd, f32) %.2g\n", (unsigned long long)seed, anm[bk], amax);
      blocks++;
      continue;
    }
    double err = tu_rel_err(ga, gf, m, &worst);
    ck_assert_msg(err <= 1e-3, "seed %llu %s: analytic vs finite-difference rel err %.3g (elem %lld: %.8g vs %.8g)",
                  (unsigned long long)seed, anm[bk], err, (long long)worst, ga[worst], gf[worst]);
    double err32 = tu_rel_err(g3, ga, m, &worst);
    ck_assert_msg(err32 <= 1e-4, "seed %llu %s: float32 vs float64 rel err %.3g", (unsigned long long)seed, anm[bk],
                  err32);
    printf("seed %llu %s: rel err vs finite differences %.2g, f32 vs f64 %.2g\n", (unsigned long long)seed, anm[bk],
           err, err32);
    blocks++;
  }
  ck_assert_int_gt(blocks, 0);
  if (K > 1) {
    /* the diversity term is on: the loss moves with lambda, and D_i > 0 */
    dqn_hp_f64_t h0 = hp;
    h0.lambda = 0;
    double l1 = dqn_loss_grad_f64(&L, &hp, on, tg, fn_on, fn_tg, &ws, NULL, &qm);
    double dsum = 0;
    for (int i = 0; i < B; i++) dsum += ws.div[i];
    double l0 = dqn_loss_grad_f64(&L, &h0, on, tg, fn_on, fn_tg, &ws, NULL, &qm);
    ck_assert_msg(dsum > 0 && l1 < l0, "diversity: sum D_i %g, loss %g vs %g without it", dsum, l1, l0);
    printf("seed %llu ensemble K %d lambda %g prior %g: %d blocks, worst rel err vs finite differences %.2g (%s)\n",
           (unsigned long long)seed, K, hp.lambda, hp.prior_scale, blocks, worst_head, worst_nm);
  }
  dqn_ws_free_f64(&ws);
  dqn_ws_free_f32(&ws32);
  free(on), free(tg), free(g), free(fn_on), free(fn_tg);
  free(on32), free(tg32), free(g32), free(fo32), free(ft32), free(prior), free(prior32);
}

static void run_case(const gc_case_t *k, uint64_t seed) { run_case_ens(k, NULL, seed); }

START_TEST(test_plain_933) {
  gc_case_t k = {5, 12, 10, 7, 8, 11, 6, 0, 1, 3, {9, 3, 3}, 0.3, 0, 0};
  run_case(&k, 11);
}
END_TEST
START_TEST(test_noisy_933) {
  gc_case_t k = {5, 12, 10, 7, 8, 11, 6, 1, 1, 3, {9, 3, 3}, 0.3, 0, 0};
  run_case(&k, 12);
}
END_TEST
START_TEST(test_noisy_odd_branches) {
  gc_case_t k = {7, 9, 13, 6, 5, 21, 9, 1, 1, 2, {4, 7}, 0.0, 0, 0};
  run_case(&k, 13);
}
END_TEST
START_TEST(test_all_done_single_branch) {
  gc_case_t k = {3, 8, 8, 4, 4, 5, 5, 0, 1, 1, {6}, 1.0, 0, 0};
  run_case(&k, 14);
}
END_TEST
START_TEST(test_noisy_no_double_four_branches) {
  gc_case_t k = {4, 10, 6, 5, 6, 7, 7, 1, 0, 4, {2, 3, 2, 5}, 0.5, 0, 0};
  run_case(&k, 15);
}
END_TEST
/* attention: 3 tokens of 4, 2 heads of 2 (plain heads) */
START_TEST(test_attn_plain) {
  gc_case_t k = {5, 12, 12, 7, 8, 11, 6, 0, 1, 3, {9, 3, 3}, 0.3, 3, 2};
  run_case(&k, 16);
}
END_TEST
/* attention with NoisyNet heads: 4 tokens of 6, 3 heads of 2, Double DQN off */
START_TEST(test_attn_noisy) {
  gc_case_t k = {4, 10, 24, 5, 6, 7, 5, 1, 0, 2, {4, 3}, 0.4, 4, 3};
  run_case(&k, 17);
}
END_TEST
/* attention, one head over 2 tokens of 5 */
START_TEST(test_attn_one_head) {
  gc_case_t k = {3, 8, 10, 4, 4, 5, 4, 0, 1, 1, {6}, 0.0, 2, 1};
  run_case(&k, 18);
}
END_TEST

/* ensemble heads (docs/learner.md §8): 3 heads, diversity, masks, no priors */
START_TEST(test_ens_k3) {
  gc_case_t k = {5, 12, 10, 7, 8, 11, 6, 0, 1, 3, {9, 3, 3}, 0.3, 0, 0};
  gc_ens_t e = {3, 0.2, 0};
  run_case_ens(&k, &e, 31);
}
END_TEST
/* 2 heads with priors of scale 1.5, NoisyNet, Double DQN off */
START_TEST(test_ens_k2_priors_noisy) {
  gc_case_t k = {4, 10, 6, 5, 6, 7, 7, 1, 0, 2, {2, 3}, 0.5, 0, 0};
  gc_ens_t e = {2, 0.5, 1.5};
  run_case_ens(&k, &e, 32);
}
END_TEST
/* everything: attention, 3 heads, priors, diversity */
START_TEST(test_ens_all) {
  gc_case_t k = {5, 12, 12, 7, 8, 11, 6, 0, 1, 2, {4, 3}, 0.3, 3, 2};
  gc_ens_t e = {3, 0.3, 1.0};
  run_case_ens(&k, &e, 33);
}
END_TEST

/* With attention on, a sample's forward output depends on its own state only:
 * changing sample j's state leaves every other sample's h' and log-probabilities
 * bit for bit unchanged (and changes sample j's). */
START_TEST(test_attn_rows_independent) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = 5, c.trunk_h1 = 12, c.trunk_h2 = 12, c.value_hidden = 7, c.adv_hidden = 8, c.atoms = 11;
  c.batch = 6, c.attn_tokens = 3, c.attn_heads = 2;
  net_layout_t L;
  net_layout_init(&L, &c);
  ck_assert_int_eq(L.attn.T, 3);
  const int rows = 6, j = 2;
  int64_t P = L.n_params;
  float *p = malloc(sizeof(float) * (size_t)P), *x = malloc(sizeof(float) * rows * 5);
  tu_fill_uniform_f32(p, P, -0.6f, 0.6f, 21, 1);
  tu_fill_uniform_f32(x, rows * 5, -1.5f, 1.5f, 21, 2);
  net_acts_f32_t a0, a1;
  ck_assert_int_eq(net_acts_alloc_f32(&a0, &L, rows), 0);
  ck_assert_int_eq(net_acts_alloc_f32(&a1, &L, rows), 0);
  net_weights_f32_t w;
  net_weights_f32(&L, p, NULL, NULL, &w);
  net_forward_f32(&L, &w, x, rows, 0.01f, &a0);
  for (int k = 0; k < 5; k++) x[j * 5 + k] = -x[j * 5 + k] + 0.3f;
  net_forward_f32(&L, &w, x, rows, 0.01f, &a1);
  ck_assert_ptr_eq(a0.hh, a0.hatt);
  for (int i = 0; i < rows; i++) {
    int same_h = memcmp(a0.hh + i * 12, a1.hh + i * 12, sizeof(float) * 12) == 0;
    int same_lp = 1;
    for (int d = 0; d < L.D; d++) {
      size_t nz = (size_t)L.n[d] * L.Z;
      same_lp &= memcmp(a0.logp[d] + i * nz, a1.logp[d] + i * nz, sizeof(float) * nz) == 0;
    }
    if (i == j) ck_assert_msg(!same_h && !same_lp, "sample %d's own output did not change", j);
    else ck_assert_msg(same_h && same_lp, "sample %d changed when only sample %d's state did", i, j);
  }
  net_acts_free_f32(&a0);
  net_acts_free_f32(&a1);
  free(p), free(x);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gradcheck");
  TCase *tc = tcase_create("finite-differences");
  tcase_add_test(tc, test_plain_933);
  tcase_add_test(tc, test_noisy_933);
  tcase_add_test(tc, test_noisy_odd_branches);
  tcase_add_test(tc, test_all_done_single_branch);
  tcase_add_test(tc, test_noisy_no_double_four_branches);
  tcase_add_test(tc, test_attn_plain);
  tcase_add_test(tc, test_attn_noisy);
  tcase_add_test(tc, test_attn_one_head);
  tcase_add_test(tc, test_attn_rows_independent);
  tcase_add_test(tc, test_ens_k3);
  tcase_add_test(tc, test_ens_k2_priors_noisy);
  tcase_add_test(tc, test_ens_all);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
