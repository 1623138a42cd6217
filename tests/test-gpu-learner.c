/*
 * test-gpu-learner.c — whole training steps on the CUDA backend against the
 * CPU backend (the oracle), through the public learner API:
 *  - same seed, same data: the same initial weights, then 100 steps in
 *    lockstep, each step's loss and the online and target parameters at the
 *    end within the tolerances below (uniform replay: the same sampled
 *    indices by construction; PER, NoisyNet, priors, the K = 5 ensemble and
 *    attention as well);
 *  - two GPU runs with the same seed are bit-identical, and a run with the
 *    next seed is not;
 *  - the captured graph equals the un-captured launch path (cuda_graph = 0)
 *    bit for bit;
 *  - batch 2048 for 6 steps, also with the split-K plan for one block per SM
 *    (cuda_gemm_occupancy = 1), like the CPU (loss within 1e-5 at the first
 *    step, 1e-4 after; on the default plan the gradient norm too, 1e-5 then
 *    1e-3), and two GPU runs of 30 steps bit-identical;
 *  - SetHyperparams between graph replays takes effect (no stale capture);
 *  - SyncTarget (hard and soft) between graph replays: the next steps use
 *    the new target like the CPU;
 *  - a shape the fused loss kernel cannot stage trains on the generic
 *    kernels like the CPU;
 *  - PER with a leaf sampled several times per batch, 30 steps within 1e-5;
 *  - tensor_cores = 1 against the fp32 CPU: 30 steps' losses within 1e-2,
 *    the parameters within TC_PARAMS_BOUND, two GPU runs bit-identical;
 *  - Act agrees with the CPU (Q within 1e-3 relative, 31 of 32 greedy
 *    actions the same); a GPU checkpoint continues on the CPU and a CPU one
 *    on the GPU (weights unchanged in transit, the next step's loss within
 *    1e-4 and 1e-5);
 *  - Act is independent of the other states in the request, bit for bit
 *    (act_rows.h: one Act of 5000 states against uneven pieces and single
 *    states), on the ref network with PER and NoisyNet layers, and with K 3,
 *    priors and attention added;
 *  - the divergence guard, HER with n-step in lockstep with the CPU, and
 *    learner_step_until's stops (stop_check.h), each described at its test.
 * Shapes include odd ones (batch 37, branches 4,7, 21 atoms, state 13).
 *
 * Tolerances of the 100-step lockstep runs (measurements from the H200,
 * kernels/dev/DEVICE_NOTES.md): the first step (identical weights and batch)
 * within 1e-5, loss and gradient norm; later steps' losses within 1e-5 on the
 * odd shapes and 1e-3 on the ref network (measured up to 1.0e-4 uniform,
 * 2.2e-5 with PER and NoisyNet, growing with the parameter drift below). With
 * PER the two learners sample alike until a priority's last bits move a
 * sample across a sum-tree boundary (measured at steps 49-91 on the ref
 * net): the first later step whose loss differs by more than the tolerance
 * but by at most 2/B (relative) marks that divergence, which may not come
 * before step 20; a larger difference fails. From then on each step's loss
 * is held to 10% and the parameters to 0.1 (see parity_ens()). Without a
 * divergence the parameters after 100 AdamW steps are held to 1e-2 on the
 * ref network (uniform; PER + NoisyNet), 1e-5 on the odd shapes, 1e-4 on
 * the odd shapes with priors, the ensemble or attention, and 0.15 on the
 * ref network with the ensemble or attention. The GPU's GEMMs sum in
 * another order than OpenBLAS (1e-7 relative differences in a gradient),
 * and AdamW's m/sqrt(v) turns a tiny difference in an element whose
 * gradient is near zero into a step of up to lr, so the ref network drifts
 * to ~6e-4 (uniform) and ~3e-3 (PER + NoisyNet) while the odd shapes stay
 * at 1e-7.
 * Exits 77 with no usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <string.h>

#include "learner.h"
#include "gpu_testutil.h"
#include "testutil.h"
#include "act_rows.h"
#include "stop_check.h"
#include "feed.h"

/* tensor_cores=1 against the fp32 CPU after 30 steps: measured 1.64e-2 on the H200
 * (DEVICE_NOTES 48); the bound leaves 3x for TF32's rounding */
#define TC_PARAMS_BOUND 5e-2


static learner_config_t config(int odd, int per, int noisy) {
  learner_config_t c;
  learner_config_default(&c);
  if (odd) {
    c.state_dim = 13, c.trunk_h1 = 40, c.trunk_h2 = 24, c.value_hidden = 10, c.adv_hidden = 18, c.atoms = 21;
    c.n_branches = 2, c.branch_sizes[0] = 4, c.branch_sizes[1] = 7, c.batch = 37;
  } else {
    c.batch = 64; /* the ref network at a small batch keeps the CPU side quick */
  }
  c.replay_capacity = 5000;
  c.prioritized = per;
  c.noisy = noisy;
  c.seed = 11;
  c.hp.lr = 1e-3f;
  c.hp.target_period = 25;
  return c;
}

static void feed(learner_t *l, int n, uint64_t tag) {
  const learner_config_t *c = learner_config(l);
  int S = c->state_dim, A = learner_config_joint_actions(c);
  float *s = malloc(sizeof(float) * (size_t)n * S), *s2 = malloc(sizeof(float) * (size_t)n * S);
  float *r = malloc(sizeof(float) * (size_t)n);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)n);
  uint8_t *d = malloc((size_t)n);
  double *u = malloc(sizeof(double) * 3 * (size_t)n);
  tu_fill_uniform_f32(s, (int64_t)n * S, -1, 1, 21, tag);
  tu_fill_uniform_f32(s2, (int64_t)n * S, -1, 1, 22, tag);
  tu_fill_uniform_f64(u, 3 * n, 0, 1, 23, tag);
  for (int i = 0; i < n; i++) {
    a[i] = (int32_t)(u[i] * A) % A;
    r[i] = (float)(u[n + i] * 6 - 3);
    d[i] = u[2 * n + i] < 0.1;
  }
  learner_transitions_t t = {n, s, a, r, s2, d, NULL, NULL};
  char err[256];
  ck_assert_msg(learner_submit(l, &t, err, sizeof err) == 0, "%s", err);
  free(s), free(s2), free(r), free(a), free(d), free(u);
}

static learner_t *make_n(const learner_config_t *c, learner_backend_t be, int n) {
  learner_t *l;
  char err[256];
  ck_assert_msg(learner_create(c, be, &l, err, sizeof err) == 0, "%s", err);
  feed(l, n, 1);
  return l;
}

static learner_t *make(const learner_config_t *c, learner_backend_t be) { return make_n(c, be, 3000); }

static double param_err(learner_t *a, learner_t *b, int which) {
  int64_t P = learner_config_num_params(learner_config(a));
  float *x = malloc(sizeof(float) * (size_t)P), *y = malloc(sizeof(float) * (size_t)P);
  ck_assert_int_eq(learner_get_params(a, which, x, P), 0);
  ck_assert_int_eq(learner_get_params(b, which, y, P), 0);
  double num = 0, den = 0;
  for (int64_t i = 0; i < P; i++) {
    num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    den += (double)y[i] * y[i];
  }
  free(x), free(y);
  return sqrt(num / den);
}

static int params_identical(learner_t *a, learner_t *b) {
  int64_t P = learner_config_num_params(learner_config(a));
  float *x = malloc(sizeof(float) * (size_t)P), *y = malloc(sizeof(float) * (size_t)P);
  learner_get_params(a, 0, x, P);
  learner_get_params(b, 0, y, P);
  int same = memcmp(x, y, sizeof(float) * (size_t)P) == 0;
  free(x), free(y);
  return same;
}

/* Two GPU runs of c, and one with cuda_graph = 0, take `steps` steps to the
 * same bits; a run with the next seed does not (the checks can fail). */
static void check_reruns(learner_config_t c, int steps, const char *what) {
  learner_t *a = make(&c, LEARNER_BACKEND_CUDA), *b = make(&c, LEARNER_BACKEND_CUDA);
  learner_config_t cn = c;
  cn.cuda_graph = 0;
  learner_t *nog = make(&cn, LEARNER_BACKEND_CUDA);
  char err[256];
  learner_stats_t s;
  ck_assert_int_eq(learner_step(a, steps, &s, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(b, steps, &s, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(nog, steps, &s, err, sizeof err), 0);
  ck_assert_msg(params_identical(a, b), "%s: two GPU runs with the same seed differ", what);
  ck_assert_msg(params_identical(a, nog), "%s: graph replay differs from the un-captured launches", what);
  c.seed += 1;
  learner_t *o = make(&c, LEARNER_BACKEND_CUDA);
  ck_assert_int_eq(learner_step(o, steps, &s, err, sizeof err), 0);
  ck_assert_msg(!params_identical(a, o), "%s: another seed gives the same bits", what);
  learner_destroy(a), learner_destroy(b), learner_destroy(nog), learner_destroy(o);
}

/* one step of each learner; the relative difference of their losses */
static double step_both(learner_t *cpu, learner_t *gpu, learner_stats_t *a, learner_stats_t *b) {
  char err[256];
  ck_assert_msg(learner_step(cpu, 1, a, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_step(gpu, 1, b, err, sizeof err) == 0, "%s", err);
  return fabs((double)a->loss_last - b->loss_last) / fabs((double)a->loss_last);
}

/* K = 5 head sets with priors (beta_p 1), bootstrap masks (p 0.5) and the
 * diversity term (lambda 0.1): docs/learner.md §8 */
static void ensemble(learner_config_t *c) {
  c->ensemble_k = 5, c->ensemble_prior_scale = 1.0f, c->ensemble_mask_p = 0.5f;
  c->hp.ensemble_diversity = 0.1f;
}

/* ens: 1 the ensemble above; 2 one head set with priors (merged into the
 * set, the plain loss kernel); 3 one head set with priors and masks (the
 * ensemble loss with K = 1); 4 attention; 5 attention and the ensemble */
static void parity_ens(int odd, int per, int noisy, int ens, double tol_step, double tol_params) {
  learner_config_t c = config(odd, per, noisy);
  if (ens == 1) ensemble(&c);
  if (ens >= 2) c.ensemble_prior_scale = 2.0f;
  if (ens == 3) c.ensemble_mask_p = 0.5f;
  if (ens >= 4) c.attn_tokens = odd ? 4 : 8, c.attn_heads = 2; /* odd: d 6, heads of 3; ref: d 32, heads of 16 */
  if (ens == 5) ensemble(&c);
  learner_t *cpu = make(&c, LEARNER_BACKEND_CPU), *gpu = make(&c, LEARNER_BACKEND_CUDA);
  ck_assert_msg(param_err(cpu, gpu, 0) == 0, "initial weights differ");
  double worst = 0;
  int diverged = -1; /* PER: the step at which the two replays stopped sampling alike */
  for (int k = 0; k < 100; k++) {
    learner_stats_t a, b;
    double e = step_both(cpu, gpu, &a, &b);
    if (k == 50) feed(cpu, 500, 2), feed(gpu, 500, 2); /* submit between steps, graph kept */
    ck_assert_msg(isfinite(b.loss_last), "step %d: GPU loss not finite", k);
    /* the first step starts from identical weights and batch: kernel parity */
    double tol = k == 0 ? 1e-5 : tol_step;
    if (k == 0) { /* the gradient norm (on the layer-GEMM path: two launches and the trunk-1 tiles) */
      double en = fabs((double)a.grad_norm_last - b.grad_norm_last) / fabs((double)a.grad_norm_last);
      ck_assert_msg(en <= 1e-5, "step 0: grad norm cpu %.8g gpu %.8g", a.grad_norm_last, b.grad_norm_last);
    }
    /* PER samples through a sum tree: a priority that differs in its last
     * bits from the CPU's can move a sample across a tree boundary; from then
     * on the two learners train on different batches (measured: the ref
     * network at batch 64 first does so between steps 49 and 91, one sample's
     * share of the loss, ~1/B). Before that every step is held to tol, and
     * the first divergence may not come before step 20; after it, only sanity
     * (within 10%) is checked. Uniform replay samples by index: no such case. */
    if (per && diverged < 0 && k > 0 && e > tol && e <= 2.0 / c.batch) diverged = k;
    if (diverged >= 0) {
      ck_assert_msg(diverged >= 20, "PER sampling diverged at step %d", diverged);
      ck_assert_msg(e <= 0.1, "step %d (after divergence at %d): loss cpu %.8g gpu %.8g", k, diverged, a.loss_last,
                    b.loss_last);
      continue;
    }
    if (e > worst) worst = e;
    ck_assert_msg(e <= tol, "odd %d per %d noisy %d: step %d loss cpu %.8g gpu %.8g (rel %.3g)", odd, per, noisy, k,
                  a.loss_last, b.loss_last, e);
  }
  /* uniform replay samples by index: every one of the 100 steps is held to tol */
  ck_assert_msg(per || diverged < 0, "uniform replay cannot diverge");
  double pe = param_err(cpu, gpu, 0), te = param_err(cpu, gpu, 1);
  printf("odd %d per %d noisy %d ens %d: worst step-loss rel diff %.2e before %s, params %.2e, target %.2e\n", odd,
         per, noisy, ens, worst, diverged >= 0 ? "PER sampling diverged" : "the end (100 steps)", pe, te);
  if (diverged >= 0) printf("  PER sampling diverged at step %d of 100; steps 0-%d held to %.0e\n", diverged,
                            diverged - 1, tol_step);
  double tp = diverged >= 0 ? 0.1 : tol_params;
  ck_assert_msg(pe <= tp && te <= tp, "params rel err %.3g / target %.3g", pe, te);
  learner_destroy(cpu);
  learner_destroy(gpu);
}

static void parity(int odd, int per, int noisy, double tol_step, double tol_params) {
  parity_ens(odd, per, noisy, 0, tol_step, tol_params);
}

START_TEST(test_parity_uniform) { parity(0, 0, 0, 1e-3, 1e-2); }
END_TEST
START_TEST(test_parity_odd_uniform_noisy) { parity(1, 0, 1, 1e-5, 1e-5); }
END_TEST
START_TEST(test_parity_per_noisy) { parity(0, 1, 1, 1e-3, 1e-2); }
END_TEST
START_TEST(test_parity_odd_per) { parity(1, 1, 0, 1e-5, 1e-5); }
END_TEST
/* 100-step lockstep with K = 5 heads, priors, masks, diversity on the odd
 * shapes with NoisyNet, with uniform replay and with PER; the ref network
 * runs it below (test_parity_ensemble_ref) with uniform replay only: with
 * PER and masks the two replays part after ~30 steps, and with different
 * batches the losses part by more than the sanity bound */
START_TEST(test_parity_ensemble_odd) { parity_ens(1, 0, 1, 1, 1e-5, 1e-4); }
END_TEST
START_TEST(test_parity_ensemble_per_noisy) { parity_ens(1, 1, 1, 1, 1e-5, 1e-4); }
END_TEST
/* One head set with priors (merged into the set: the plain loss kernel),
 * with NoisyNet, and one with priors and masks (the ensemble loss with
 * K = 1): the odd shapes, uniform replay, every step within 1e-5 and the
 * parameters within 1e-4. */
START_TEST(test_parity_k1_priors) {
  parity_ens(1, 0, 1, 2, 1e-5, 1e-4);
  /* uniform: with PER this case's replays part at step 67 (measured) by one
   * sample, whose masked loss is more than the 2/B the divergence test allows */
  parity_ens(1, 0, 0, 3, 1e-5, 1e-4);
}
END_TEST
/* attention (docs/learner.md §7) alone on the odd shapes; with K = 5 +
 * priors + masks + diversity + PER + NoisyNet on the odd shapes (issue 15's
 * lockstep case), both held to 1e-5 per step and 1e-4 in the parameters;
 * and alone on the ref network, held to 1e-3 per step and, as the ensemble
 * there, 0.15 in the parameters */
START_TEST(test_parity_attention) {
  parity_ens(1, 0, 0, 4, 1e-5, 1e-4);
  parity_ens(1, 1, 1, 5, 1e-5, 1e-4);
  parity_ens(0, 0, 0, 4, 1e-3, 0.15);
}
END_TEST
/* The ref network with the K = 5 ensemble, uniform replay: every one of the
 * 100 steps' losses within 1e-3 (measured 3.1e-4 on the H200) and the first
 * step's loss and gradient norm within 1e-5 (in parity_ens); the parameters
 * part by 8.3e-2 (measured): Adam turns the rounding of near-zero gradients
 * (five head sets, half of them masked per sample) into whole lr-sized
 * steps, so their bound here (0.15) is sanity, not parity; the odd shapes
 * above hold the parameters to 1e-4. */
START_TEST(test_parity_ensemble_ref) { parity_ens(0, 0, 0, 1, 1e-3, 0.15); }
END_TEST

/* Ensemble + attention (odd shapes, PER, NoisyNet): reruns are bit-identical
 * (graph and un-captured) and a run with the next seed is not; Act over the
 * heads on the same weights (a CPU checkpoint loaded by the GPU learner),
 * for every act_select and episodes 0-3, is the CPU's: Q within 1e-5
 * (absolute), the variance over heads within 1e-5 of the largest variance
 * (which must be > 0), and at most one of 33 actions different */
START_TEST(test_ensemble_rerun_and_act) {
  learner_config_t c = config(1, 1, 1);
  ensemble(&c);
  c.attn_tokens = 4, c.attn_heads = 2;
  check_reruns(c, 40, "ensemble + attention");
  char err[256];
  learner_stats_t s;
  /* Act: train on the CPU, move the state to the GPU, compare */
  learner_t *cpu = make(&c, LEARNER_BACKEND_CPU);
  ck_assert_int_eq(learner_step(cpu, 30, &s, err, sizeof err), 0);
  membuf_t mb = {0};
  ck_assert_msg(learner_save(cpu, 1, mem_write, &mb, err, sizeof err) == 0, "%s", err);
  mb.pos = 0;
  learner_t *gpu = NULL;
  ck_assert_msg(learner_load(mem_read, &mb, LEARNER_BACKEND_CUDA, &gpu, err, sizeof err) == 0, "%s", err);
  const int n = 33, S = c.state_dim, qw = learner_config_q_width(&c);
  float *x = malloc(sizeof(float) * (size_t)n * S), *q1 = malloc(sizeof(float) * (size_t)n * qw * 4);
  float *q2 = q1 + (size_t)n * qw, *v1 = q2 + (size_t)n * qw, *v2 = v1 + (size_t)n * qw;
  int32_t a1[33], a2[33];
  tu_fill_uniform_f32(x, (int64_t)n * S, -1, 1, 31, 1);
  for (int sel = 0; sel < 3; sel++) {
    learner_hparams_t hp;
    learner_get_hparams(cpu, &hp);
    hp.act_select = sel;
    ck_assert_int_eq(learner_set_hparams(cpu, &hp, err, sizeof err), 0);
    ck_assert_int_eq(learner_set_hparams(gpu, &hp, err, sizeof err), 0);
    for (int64_t ep = 0; ep < 4; ep++) {
      ck_assert_msg(learner_act_episode(cpu, x, n, 0, ep, a1, q1, v1, err, sizeof err) == 0, "%s", err);
      ck_assert_msg(learner_act_episode(gpu, x, n, 0, ep, a2, q2, v2, err, sizeof err) == 0, "%s", err);
      double eq = 0, ev = 0, vmax = 0;
      for (int i = 0; i < n * qw; i++) {
        eq = fmax(eq, fabs((double)q1[i] - q2[i]));
        ev = fmax(ev, fabs((double)v1[i] - v2[i]));
        vmax = fmax(vmax, v1[i]);
      }
      ck_assert_msg(eq <= 1e-5 && ev <= 1e-5 * fmax(vmax, 1e-3), "act_select %d: Q %.3g, var %.3g (max var %.3g)", sel,
                    eq, ev, vmax);
      ck_assert_msg(vmax > 0, "the heads agree exactly: the variance proves nothing");
      int same = 0;
      for (int i = 0; i < n; i++) same += a1[i] == a2[i];
      ck_assert_msg(same >= n - 1, "act_select %d episode %lld: %d of %d actions agree", sel, (long long)ep, same, n);
    }
  }
  free(x), free(q1), free(mb.p);
  learner_destroy(cpu), learner_destroy(gpu);
}
END_TEST

/* PER with 45 transitions and batch 37: every batch samples some leaves
 * several times, and a leaf's new priority must be its last slot's (the
 * CPU's rule; the GPU finds the owner with an atomic max). A wrong owner
 * changes that leaf's priority and, through the sum tree, the next batches:
 * every one of 30 steps is held to the first-step tolerance. */
START_TEST(test_per_duplicates) {
  learner_config_t c = config(1, 1, 0);
  learner_t *cpu = make_n(&c, LEARNER_BACKEND_CPU, 45), *gpu = make_n(&c, LEARNER_BACKEND_CUDA, 45);
  double worst = 0;
  for (int k = 0; k < 30; k++) {
    learner_stats_t a, b;
    double e = step_both(cpu, gpu, &a, &b);
    worst = e > worst ? e : worst;
    ck_assert_msg(e <= 1e-5, "step %d: loss cpu %.8g gpu %.8g (rel %.3g)", k, a.loss_last, b.loss_last, e);
  }
  printf("PER, 45 transitions, batch 37: worst step-loss rel diff %.2e over 30 steps\n", worst);
  learner_destroy(cpu);
  learner_destroy(gpu);
}
END_TEST

START_TEST(test_bit_identical_and_graph) { check_reruns(config(0, 1, 1), 60, "ref, PER + NoisyNet"); }
END_TEST

/* Batch 2048: the weight-gradient groups have many split-K parts and run
 * beside each other and beside the backward (at batch 64 they barely
 * overlap); a shared scratch or counter between two of them shows as a loss
 * far from the CPU's or as two runs that differ. The same with the split-K
 * plan for one block per SM (cuda_gemm_occupancy = 1: fewer parts). */
START_TEST(test_large_batch) {
  learner_config_t c = config(0, 0, 0), c1;
  c.batch = 2048;
  c1 = c;
  c1.cuda_gemm_occupancy = 1;
  learner_t *cpu = make(&c, LEARNER_BACKEND_CPU), *gpu = make(&c, LEARNER_BACKEND_CUDA);
  learner_t *gpu2 = make(&c, LEARNER_BACKEND_CUDA), *gpu1 = make(&c1, LEARNER_BACKEND_CUDA);
  char err[256];
  double worst = 0;
  for (int k = 0; k < 6; k++) {
    learner_stats_t a, b, b1;
    double e = step_both(cpu, gpu, &a, &b);
    worst = e > worst ? e : worst;
    ck_assert_msg(e <= (k ? 1e-4 : 1e-5), "batch 2048 step %d: loss cpu %.8g gpu %.8g (rel %.3g)", k, a.loss_last,
                  b.loss_last, e);
    double en = fabs((double)a.grad_norm_last - b.grad_norm_last) / fabs((double)a.grad_norm_last);
    ck_assert_msg(en <= (k ? 1e-3 : 1e-5), "batch 2048 step %d: grad norm cpu %.8g gpu %.8g", k, a.grad_norm_last,
                  b.grad_norm_last);
    ck_assert_msg(learner_step(gpu1, 1, &b1, err, sizeof err) == 0, "%s", err);
    double e1 = fabs((double)a.loss_last - b1.loss_last) / fabs((double)a.loss_last);
    ck_assert_msg(e1 <= (k ? 1e-4 : 1e-5), "batch 2048, occupancy 1, step %d: loss cpu %.8g gpu %.8g (rel %.3g)", k,
                  a.loss_last, b1.loss_last, e1);
  }
  learner_stats_t s;
  ck_assert_int_eq(learner_step(gpu, 24, &s, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(gpu2, 30, &s, err, sizeof err), 0);
  ck_assert_msg(params_identical(gpu, gpu2), "batch 2048: two GPU runs with the same seed differ");
  printf("batch 2048: worst step-loss rel diff %.2e over 6 steps; 30 steps bit-identical twice\n", worst);
  learner_destroy(cpu), learner_destroy(gpu), learner_destroy(gpu2), learner_destroy(gpu1);
}
END_TEST

/* A branch too wide for the fused loss kernel's shared memory (120 actions
 * of 51 atoms: ~50 KB per sample), which the learner trains on the generic
 * kernels (kernels/cuda/generic_loss.cu): 30 steps' losses like the CPU's
 * (1e-5 at the first step, 1e-3 after) and the parameters within 1e-2.
 * Which kernels ran is not checked here. */
START_TEST(test_generic_kernels) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = 8, c.trunk_h1 = 64, c.trunk_h2 = 64, c.value_hidden = 32, c.adv_hidden = 32;
  c.n_branches = 1, c.branch_sizes[0] = 120, c.batch = 32, c.replay_capacity = 5000;
  c.prioritized = 0, c.noisy = 1, c.seed = 11, c.hp.lr = 1e-3f, c.hp.target_period = 25;
  learner_t *cpu = make(&c, LEARNER_BACKEND_CPU), *gpu = make(&c, LEARNER_BACKEND_CUDA);
  double worst = 0;
  for (int k = 0; k < 30; k++) {
    learner_stats_t a, b;
    double e = step_both(cpu, gpu, &a, &b);
    worst = e > worst ? e : worst;
    ck_assert_msg(e <= (k ? 1e-3 : 1e-5), "generic kernels step %d: loss cpu %.8g gpu %.8g (rel %.3g)", k, a.loss_last,
                  b.loss_last, e);
  }
  double pe = param_err(cpu, gpu, 0);
  printf("generic kernels (one branch of 120): worst step-loss rel diff %.2e over 30 steps, params %.2e\n", worst, pe);
  ck_assert_msg(pe <= 1e-2, "generic kernels: params rel err %.3g", pe);
  learner_destroy(cpu), learner_destroy(gpu);
}
END_TEST

START_TEST(test_hparams_between_replays) {
  learner_config_t c = config(0, 0, 0);
  learner_t *cpu = make(&c, LEARNER_BACKEND_CPU), *gpu = make(&c, LEARNER_BACKEND_CUDA);
  char err[256];
  learner_stats_t a, b;
  ck_assert_int_eq(learner_step(cpu, 10, &a, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(gpu, 10, &b, err, sizeof err), 0); /* the graph is captured now */
  learner_hparams_t hp;
  learner_get_hparams(cpu, &hp);
  hp.lr = 5e-3f, hp.gamma = 0.5f, hp.tau = 0.05f, hp.grad_clip = 0.5f;
  ck_assert_int_eq(learner_set_hparams(cpu, &hp, err, sizeof err), 0);
  ck_assert_int_eq(learner_set_hparams(gpu, &hp, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(cpu, 10, &a, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(gpu, 10, &b, err, sizeof err), 0);
  ck_assert_msg(fabs((double)a.loss_last - b.loss_last) <= 1e-4 * fabs((double)a.loss_last), "loss %.8g vs %.8g",
                a.loss_last, b.loss_last);
  ck_assert_msg(param_err(cpu, gpu, 1) <= 1e-4, "target %.3g (tau not applied?)", param_err(cpu, gpu, 1));
  learner_destroy(cpu), learner_destroy(gpu);
}
END_TEST

/* SyncTarget between graph replays: the step after a hard copy (tau 0) and
 * after a soft one (tau 0.5) uses the new target on the GPU as on the CPU
 * (the target's weight pack is redone after any host write of the state:
 * docs/learner.md §2), each of those steps' losses within 1e-4 of the CPU's and
 * the target within 1e-4 at the end; and a GPU learner without the syncs
 * takes a loss at least 1e-3 away at the first step after the copy (so a
 * stale target would fail the first check). No automatic copies in the 20
 * steps (target_period 1000). */
START_TEST(test_sync_target_between_replays) {
  learner_config_t c = config(0, 0, 0);
  c.hp.target_period = 1000;
  learner_t *cpu = make(&c, LEARNER_BACKEND_CPU), *gpu = make(&c, LEARNER_BACKEND_CUDA);
  learner_t *ns = make(&c, LEARNER_BACKEND_CUDA);
  char err[256];
  learner_stats_t a, b, n;
  ck_assert_int_eq(learner_step(cpu, 10, &a, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(gpu, 10, &b, err, sizeof err), 0); /* the graph is captured now */
  ck_assert_int_eq(learner_step(ns, 10, &n, err, sizeof err), 0);
  const float taus[2] = {0.0f, 0.5f};
  for (int t = 0; t < 2; t++) {
    ck_assert_int_eq(learner_sync_target(cpu, taus[t]), 0);
    ck_assert_int_eq(learner_sync_target(gpu, taus[t]), 0);
    for (int k = 0; k < 5; k++) {
      double e = step_both(cpu, gpu, &a, &b);
      ck_assert_msg(e <= 1e-4, "tau %g, step %d after the sync: loss cpu %.8g gpu %.8g", taus[t], k, a.loss_last,
                    b.loss_last);
      ck_assert_int_eq(learner_step(ns, 1, &n, err, sizeof err), 0);
      if (t == 0 && k == 0)
        ck_assert_msg(fabs((double)n.loss_last - b.loss_last) >= 1e-3 * fabs((double)b.loss_last),
                      "the hard copy moved the next loss only %.3g (the check above could not see a stale target)",
                      fabs((double)n.loss_last - b.loss_last) / fabs((double)b.loss_last));
    }
  }
  ck_assert_msg(param_err(cpu, gpu, 1) <= 1e-4, "target %.3g", param_err(cpu, gpu, 1));
  learner_destroy(cpu), learner_destroy(gpu), learner_destroy(ns);
}
END_TEST

/* tensor_cores = 1: the TF32 kernels train the ref network like the fp32 CPU
 * learner within TF32's precision (per-step loss within 1e-2 for 30 steps,
 * parameters within TC_PARAMS_BOUND after them; the loss test holds single
 * kernels to their bounds), reruns bit-identical (every step's loss and the
 * final parameters). _i 1: issue 15's configuration (K 5, priors, masks,
 * diversity, attention 8 tokens / 2 heads) at the same batch (64), whose
 * head layers (F3, F4: 80 and 90 tiles of 128 x 128) run the wgmma tiles on
 * an sm_90 device (which tiles ran is not checked here) */
START_TEST(test_tensor_cores) {
  learner_config_t c = config(0, 0, 0);
  if (_i == 1) ensemble(&c), c.attn_tokens = 8, c.attn_heads = 2;
  learner_config_t c32 = c;
  c.tensor_cores = 1;
  learner_t *cpu = make(&c32, LEARNER_BACKEND_CPU), *gpu = make(&c, LEARNER_BACKEND_CUDA),
            *gpu2 = make(&c, LEARNER_BACKEND_CUDA);
  char err[256];
  double worst = 0;
  for (int k = 0; k < 30; k++) {
    learner_stats_t a, b, b2;
    ck_assert_msg(learner_step(cpu, 1, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(learner_step(gpu, 1, &b, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(learner_step(gpu2, 1, &b2, err, sizeof err) == 0, "%s", err);
    double e = fabs((double)a.loss_last - b.loss_last) / fabs((double)a.loss_last);
    worst = e > worst ? e : worst;
    ck_assert_msg(e <= 1e-2, "tf32 step %d: loss cpu %.8g gpu %.8g (rel %.3g)", k, a.loss_last, b.loss_last, e);
    ck_assert_msg(memcmp(&b.loss_last, &b2.loss_last, sizeof b.loss_last) == 0, "tf32 rerun differs at step %d", k);
  }
  ck_assert_msg(params_identical(gpu, gpu2), "tf32 reruns: parameters differ");
  double pe = param_err(cpu, gpu, 0);
  printf("tensor_cores=1%s: worst step-loss rel diff vs fp32 CPU %.2e over 30 steps, params %.2e\n",
         _i ? " (K 5 + priors + masks + diversity + attention)" : "", worst, pe);
  ck_assert_msg(pe <= TC_PARAMS_BOUND, "tf32 params rel err %.3g > %.0e", pe, TC_PARAMS_BOUND);
  learner_destroy(cpu);
  learner_destroy(gpu);
  learner_destroy(gpu2);
}
END_TEST

START_TEST(test_act_and_cross_backend_checkpoint) {
  learner_config_t c = config(1, 1, 1);
  learner_t *cpu = make(&c, LEARNER_BACKEND_CPU), *gpu = make(&c, LEARNER_BACKEND_CUDA);
  char err[256];
  learner_stats_t a, b;
  /* no CUDA error may be left pending by create, submit or step */
  ck_assert_msg(cudaPeekAtLastError() == cudaSuccess, "pending after create: %s",
                cudaGetErrorString(cudaPeekAtLastError()));
  ck_assert_int_eq(learner_step(gpu, 20, &b, err, sizeof err), 0);
  ck_assert_msg(cudaPeekAtLastError() == cudaSuccess, "pending after step: %s",
                cudaGetErrorString(cudaPeekAtLastError()));
  ck_assert_int_eq(learner_step(cpu, 20, &a, err, sizeof err), 0);
  float st[32 * 13], qc[32 * 11], qg[32 * 11];
  int32_t ac[32], ag[32];
  tu_fill_uniform_f32(st, 32 * 13, -1, 1, 5, 5);
  ck_assert_int_eq(learner_act(cpu, st, 32, 0, ac, qc, err, sizeof err), 0);
  ck_assert_msg(learner_act(gpu, st, 32, 0, ag, qg, err, sizeof err) == 0, "%s", err);
  double num = 0, den = 0;
  for (int i = 0; i < 32 * 11; i++) num += (qc[i] - qg[i]) * (qc[i] - qg[i]), den += qc[i] * qc[i];
  ck_assert_msg(sqrt(num / den) <= 1e-3, "Q rel err %.3g", sqrt(num / den));
  int same = 0;
  for (int i = 0; i < 32; i++) same += ac[i] == ag[i];
  ck_assert_msg(same >= 31, "only %d of 32 greedy actions agree", same);
  ck_assert_msg(learner_act(gpu, st, 32, 1, ag, NULL, err, sizeof err) == 0, "%s", err); /* noisy path runs */
  /* GPU state -> CPU learner: it continues like the GPU one */
  membuf_t m = {0};
  ck_assert_int_eq(learner_save(gpu, 1, mem_write, &m, err, sizeof err), 0);
  learner_t *back;
  ck_assert_msg(learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &back, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(param_err(back, gpu, 0) == 0, "weights changed in transit");
  ck_assert_int_eq(learner_step(gpu, 1, &b, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(back, 1, &a, err, sizeof err), 0);
  ck_assert_msg(fabs((double)a.loss_last - b.loss_last) <= 1e-4 * fabs((double)a.loss_last), "after restore %.8g vs %.8g",
                a.loss_last, b.loss_last);
  /* ... and back: the CPU learner's state on the GPU continues like the CPU one */
  ck_assert_int_eq(learner_step(back, 5, &a, err, sizeof err), 0);
  membuf_t m2 = {0};
  ck_assert_int_eq(learner_save(back, 1, mem_write, &m2, err, sizeof err), 0);
  learner_t *again;
  ck_assert_msg(learner_load(mem_read, &m2, LEARNER_BACKEND_CUDA, &again, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_backend(again), LEARNER_BACKEND_CUDA);
  ck_assert_msg(param_err(again, back, 0) == 0 && param_err(again, back, 1) == 0, "weights changed in transit back");
  learner_stats_t sa, sg;
  learner_get_stats(back, &sa);
  learner_get_stats(again, &sg);
  ck_assert_int_eq(sa.step, sg.step);
  ck_assert_int_eq(sa.replay_size, sg.replay_size);
  ck_assert_int_eq(learner_step(back, 1, &a, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(again, 1, &b, err, sizeof err), 0);
  ck_assert_msg(fabs((double)a.loss_last - b.loss_last) <= 1e-5 * fabs((double)a.loss_last),
                "CPU -> GPU: next step %.8g vs %.8g", a.loss_last, b.loss_last);
  free(m.p), free(m2.p);
  learner_destroy(cpu), learner_destroy(gpu), learner_destroy(back), learner_destroy(again);
}
END_TEST


/* The divergence guard (learner.h) on both backends: with lr 10 and weight
 * decay 10 the parameters grow x-99 per step until the forward overflows.
 * Both backends refuse the same step; what the GPU kept is finite and is
 * bit for bit a twin's that stopped one step earlier; a later call applies
 * nothing. With PER and NoisyNet, with and without the graph. */
START_TEST(test_divergence_guard) {
  for (int graph = 0; graph < 2; graph++) {
    learner_config_t c = config(1, 1, 1);
    c.hp.lr = 10, c.hp.weight_decay = 10, c.cuda_graph = graph;
    learner_t *cpu = make(&c, LEARNER_BACKEND_CPU), *gpu = make(&c, LEARNER_BACKEND_CUDA);
    learner_t *twin = make(&c, LEARNER_BACKEND_CUDA);
    char err[512];
    learner_stats_t a, b, t;
    ck_assert_int_eq(learner_step(cpu, 200, &a, err, sizeof err), LEARNER_EDIVERGED);
    ck_assert_int_eq(learner_step(gpu, 200, &b, err, sizeof err), LEARNER_EDIVERGED);
    printf("divergence guard (graph %d): cpu kept step %llu, gpu step %llu: %s\n", graph,
           (unsigned long long)a.step, (unsigned long long)b.step, err);
    ck_assert_msg(a.step == b.step, "the backends stopped at steps %llu and %llu", (unsigned long long)a.step,
                  (unsigned long long)b.step);
    ck_assert_int_eq(b.steps_run, (int)b.step);
    ck_assert_msg(strstr(err, "diverged"), "%s", err);
    ck_assert_int_eq(learner_params_finite(gpu), 1);
    ck_assert_int_eq(learner_step(twin, (int)b.step, &t, err, sizeof err), 0);
    ck_assert_msg(params_identical(gpu, twin), "the kept state is not the twin's after %llu steps",
                  (unsigned long long)b.step);
    ck_assert_int_eq(learner_step(gpu, 5, &t, err, sizeof err), LEARNER_EDIVERGED);
    ck_assert_int_eq(t.steps_run, 0);
    ck_assert_int_eq((long long)t.step, (long long)b.step);
    ck_assert_msg(params_identical(gpu, twin), "a refused call changed the parameters");
    learner_destroy(cpu), learner_destroy(gpu), learner_destroy(twin);
  }
}
END_TEST

static learner_config_t her_config(void) {
  learner_config_t c = config(1, 1, 1); /* odd shapes, PER, NoisyNet */
  c.her_goal_dim = 4, c.hp.her_ratio = 0.6f, c.hp.her_eps = 0.4f, c.hp.her_strategy = LEARNER_HER_FUTURE;
  c.hp.n_step = 3, c.replay_capacity = 700;
  return c;
}

/* HER + n-step + PER + NoisyNet, CPU against GPU for 160 steps: 100 with
 * the future strategy and n_step 3 (the device's episode bookkeeping,
 * episodes crossing submits and the ring's wrap, and the graph's relabelling
 * against the CPU's spec), then n_step 1, then n_step 5 with the episode
 * strategy and the L2 norm, then the random strategy with done on success
 * and her_ratio 1 (the graph is captured again at each change). Every step's
 * loss within 1e-5 of the CPU's until PER sampling parts (as in parity_ens;
 * that may not come before step 60), then within 10%. _i 1: the same with
 * the K = 5 ensemble. */
START_TEST(test_her_parity) {
  learner_config_t c = her_config();
  if (_i == 1) ensemble(&c); /* HER with the ensemble: per-head targets from the relabelled rows */
  learner_t *l[2];
  char err[256];
  const int chunks[] = {37, 200, 1, 150, 313}, more[] = {5, 400, 11};
  for (int b = 0; b < 2; b++) {
    ck_assert_msg(learner_create(&c, b ? LEARNER_BACKEND_CUDA : LEARNER_BACKEND_CPU, &l[b], err, sizeof err) == 0, "%s",
                  err);
    tu_feed_episodes(l[b], chunks, 5, 1); /* 701 transitions: the ring (700) wraps */
  }
  double worst = 0;
  int diverged = -1;
  for (int k = 0; k < 160; k++) {
    if (k == 50)
      for (int b = 0; b < 2; b++) tu_feed_episodes(l[b], more, 3, 2);
    if (k == 100 || k == 120 || k == 140) {
      learner_hparams_t hp;
      learner_get_hparams(l[0], &hp);
      if (k == 100) hp.n_step = 1; /* n-step off (HER stays) */
      if (k == 120) hp.n_step = 5, hp.her_strategy = LEARNER_HER_EPISODE, hp.her_norm = LEARNER_HER_NORM_L2;
      if (k == 140) hp.her_strategy = LEARNER_HER_RANDOM, hp.her_done_on_success = 1, hp.her_ratio = 1;
      for (int b = 0; b < 2; b++) ck_assert_msg(learner_set_hparams(l[b], &hp, err, sizeof err) == 0, "%s", err);
    }
    learner_stats_t a, g;
    double e = step_both(l[0], l[1], &a, &g);
    ck_assert_msg(isfinite(g.loss_last), "step %d: GPU loss not finite", k);
    if (diverged < 0 && k >= 20 && e > 1e-5 && e <= 2.0 / c.batch) diverged = k; /* PER, as in parity_ens */
    if (diverged >= 0) {
      ck_assert_msg(e <= 0.1, "HER step %d (after PER divergence at %d): cpu %.8g gpu %.8g", k, diverged, a.loss_last,
                    g.loss_last);
      continue;
    }
    worst = e > worst ? e : worst;
    ck_assert_msg(e <= 1e-5, "HER + n-step step %d: loss cpu %.8g gpu %.8g (rel %.3g)", k, a.loss_last, g.loss_last, e);
  }
  printf("HER + n-step + PER + NoisyNet%s: worst step-loss rel diff %.2e over %d steps%s\n", _i ? " + ensemble" : "", worst,
         diverged >= 0 ? diverged : 160, diverged >= 0 ? " (then PER sampling diverged)" : "");
  ck_assert_msg(diverged < 0 || diverged >= 60, "PER sampling diverged at step %d", diverged);
  learner_destroy(l[0]), learner_destroy(l[1]);
}
END_TEST

/* Act answers a state alone as it does among 5000 others (act_rows.h): the
 * ref net (K 1, PER, NoisyNet's mean weights) and with K 3, priors 1 and
 * attention (8 tokens, 2 heads); episode 3 selects by the mean */
START_TEST(test_act_rows) {
  learner_config_t c = config(0, 1, 1);
  if (_i) {
    c.ensemble_k = 3;
    c.ensemble_prior_scale = 1.0f;
    c.attn_tokens = 8;
    c.attn_heads = 2;
  }
  learner_t *gpu = make(&c, LEARNER_BACKEND_CUDA);
  char err[256];
  ck_assert_msg(learner_step(gpu, 5, NULL, err, sizeof err) == 0, "%s", err);
  const int n = 5000;
  float *s = malloc(sizeof(float) * (size_t)n * c.state_dim);
  tu_fill_uniform_f32(s, (int64_t)n * c.state_dim, -2, 2, 31, (uint64_t)_i);
  ck_assert_msg(tu_check_act_rows(gpu, s, n, 3) > 0, "every state got the same action");
  free(s);
  learner_destroy(gpu);
}
END_TEST

/* learner_step_until on the GPU (stop_check.h): stopped by its deadline and
 * by its flag mid-call, the state is a twin's after as many steps, bit for
 * bit: the replays already queued when the stop came applied nothing. The
 * graph (PER, NoisyNet), the plain launches, and the ensemble with attention. */
START_TEST(test_step_stops_whole) {
  learner_config_t c = config(0, 1, 1);
  if (_i == 1) c.cuda_graph = 0;
  if (_i == 2) c.ensemble_k = 3, c.ensemble_prior_scale = 1.0f, c.attn_tokens = 8, c.attn_heads = 2;
  learner_t *a = make(&c, LEARNER_BACKEND_CUDA), *b = make(&c, LEARNER_BACKEND_CUDA);
  tu_check_stop(a, b, _i == 0 ? "cuda graph" : _i == 1 ? "cuda launches" : "cuda K 3 + attention");
  learner_destroy(a);
  learner_destroy(b);
}
END_TEST

START_TEST(test_her_reruns) { check_reruns(her_config(), 60, "HER + n-step + PER + NoisyNet"); }
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-learner");
  TCase *tc = tcase_create("whole-step");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_divergence_guard);
  tcase_add_loop_test(tc, test_her_parity, 0, 2);
  tcase_add_test(tc, test_her_reruns);
  tcase_add_test(tc, test_parity_uniform);
  tcase_add_test(tc, test_parity_odd_uniform_noisy);
  tcase_add_test(tc, test_parity_per_noisy);
  tcase_add_test(tc, test_parity_odd_per);
  tcase_add_test(tc, test_parity_ensemble_odd);
  tcase_add_test(tc, test_parity_ensemble_per_noisy);
  tcase_add_test(tc, test_parity_ensemble_ref);
  tcase_add_test(tc, test_parity_k1_priors);
  tcase_add_test(tc, test_parity_attention);
  tcase_add_test(tc, test_ensemble_rerun_and_act);
  tcase_add_test(tc, test_per_duplicates);
  tcase_add_test(tc, test_bit_identical_and_graph);
  tcase_add_test(tc, test_large_batch);
  tcase_add_test(tc, test_generic_kernels);
  tcase_add_test(tc, test_hparams_between_replays);
  tcase_add_test(tc, test_sync_target_between_replays);
  tcase_add_test(tc, test_act_and_cross_backend_checkpoint);
  tcase_add_loop_test(tc, test_act_rows, 0, 2);
  tcase_add_loop_test(tc, test_step_stops_whole, 0, 3);
  tcase_add_loop_test(tc, test_tensor_cores, 0, 2);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
