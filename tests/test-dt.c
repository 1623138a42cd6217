/*
 * test-dt.c — the Decision Transformer's CPU spec (kernels/cpu/dt.h, issue
 * 30) against independent oracles: the golden case tests/golden/dt (PyTorch
 * autograd in float64: loss and per-step losses 1e-5 relative, every
 * gradient tensor 1e-4 relative in norm, the attention key biases — zero in
 * exact arithmetic — 1e-6 absolutely, the logits 1e-5); central finite
 * differences of the double instance on entries of every tensor; causality
 * (changing step t + 1 changes no logit at steps <= t); padding (changing the
 * padded steps' inputs, NaN included, changes nothing); and the float and
 * double instances against each other. The windows (dt_sample) against the
 * episodes the test submitted: every real step's state, action, timestep and
 * return-to-go (the sum of the rewards to the episode's end, brute force),
 * padding only on the left, windows only from whole ended episodes, every
 * such end drawn, the same windows for the same step.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt.h"
#include "replay.h"
#include "golden_util.h"
#include "model.h"
#include "philox.h"
#include "testutil.h"

#define CS "dt"
enum { B = 3, K = 4, S = 5, NA = 5 /* 3 + 2 logits */ };

static model_t reg;
static dt_layout_t lay;

/* the registry and layout of a DT of the golden case's state and branches
 * (a minimal DQN beside it), K steps, 2 heads */
static void build(model_t *m, dt_layout_t *l, int layers, int embed, int max_ep_len) {
  model_desc_t d;
  memset(&d, 0, sizeof d);
  d.S = S, d.H1 = 4, d.H2 = 4, d.VH = 4, d.AH = 4, d.Z = 2, d.D = 2, d.n[0] = 3, d.n[1] = 2, d.ensemble_k = 1;
  d.dt_layers = layers, d.dt_embed = embed, d.dt_max_ep_len = max_ep_len;
  char err[256];
  ck_assert_msg(model_build(m, &d, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(dt_layout_init(l, m, K, 2, err, sizeof err) == 0, "%s", err);
}

static void setup_layout(void) { build(&reg, &lay, 2, 8, 10); } /* the golden case's */

typedef struct {
  float states[B * K * S], rtg[B * K], mask[B * K];
  int32_t actions[B * K], timesteps[B * K];
  dt_batch_t b;
} batch_t;

static void golden_batch(batch_t *g) {
  double *s = golden_load64(CS, "in.states", B * K * S), *r = golden_load64(CS, "in.rtg", B * K);
  double *a = golden_load64(CS, "in.actions", B * K), *t = golden_load64(CS, "in.timesteps", B * K);
  double *m = golden_load64(CS, "in.mask", B * K);
  for (int i = 0; i < B * K * S; i++) g->states[i] = (float)s[i];
  for (int i = 0; i < B * K; i++)
    g->rtg[i] = (float)r[i], g->actions[i] = (int32_t)a[i], g->timesteps[i] = (int32_t)t[i], g->mask[i] = (float)m[i];
  free(s), free(r), free(a), free(t), free(m);
  g->b = (dt_batch_t){B, g->states, g->rtg, g->mask, g->actions, g->timesteps};
}

/* the golden parameters, as float and double vectors of the DT layout */
static void golden_params(float *pf, double *pd) {
  for (int i = 0; i < reg.n; i++) {
    const model_param_t *mp = &reg.p[i];
    if (mp->vec != MODEL_VEC_DT) continue;
    char nm[96];
    snprintf(nm, sizeof nm, "param.%s", mp->name);
    double *w = golden_load64(CS, nm, model_param_count(mp));
    for (int64_t k = 0; k < model_param_count(mp); k++) pf[mp->offset + k] = (float)w[k], pd[mp->offset + k] = w[k];
    free(w);
  }
}

START_TEST(test_golden) {
  const int64_t P = lay.n_params;
  float *p = malloc(sizeof(float) * P), *g = malloc(sizeof(float) * P), ls[B * K], lg[B * K * NA];
  double *pd = malloc(sizeof(double) * P);
  batch_t bt;
  golden_batch(&bt);
  golden_params(p, pd);
  int pad = 0;
  for (int i = 0; i < B * K; i++) pad += bt.mask[i] == 0;
  ck_assert_msg(pad > 0, "the golden batch has a padded row");
  const double loss = dt_loss_grad_f32(&lay, p, &bt.b, g, ls, lg);
  double *want = golden_load64(CS, "out.loss", 1), *wls = golden_load64(CS, "out.loss_per_step", B * K);
  ck_assert_msg(fabs(loss - want[0]) <= 1e-5 * fabs(want[0]), "loss %.9g, golden %.9g", loss, want[0]);
  for (int i = 0; i < B * K; i++) /* real steps (the generator also scores the padded ones; dt.h gives them 0) */
    ck_assert_msg(bt.mask[i] == 0 ? ls[i] == 0 : fabs(ls[i] - wls[i]) <= 1e-5 * fabs(wls[i]),
                  "step %d: %.9g, golden %.9g", i, ls[i], wls[i]);
  for (int d = 0, off = 0; d < 2; off += d == 0 ? 3 : 2, d++) {
    char nm[64];
    snprintf(nm, sizeof nm, "out.logits.branch%d", d);
    const int nd = d == 0 ? 3 : 2;
    double *wl = golden_load64(CS, nm, B * K * nd);
    for (int i = 0; i < B * K; i++)
      for (int c = 0; c < nd; c++)
        if (bt.mask[i] != 0)
          ck_assert_msg(fabs(lg[i * NA + off + c] - wl[i * nd + c]) <= 1e-5 * (1 + fabs(wl[i * nd + c])),
                        "logit %d of branch %d at step %d: %.9g, golden %.9g", c, d, i, lg[i * NA + off + c],
                        wl[i * nd + c]);
    free(wl);
  }
  for (int i = 0; i < reg.n; i++) {
    const model_param_t *mp = &reg.p[i];
    if (mp->vec != MODEL_VEC_DT) continue;
    char nm[96];
    snprintf(nm, sizeof nm, "grad.%s", mp->name);
    const int64_t n = model_param_count(mp);
    double *w = golden_load64(CS, nm, n), num = 0, den = 0, amax = 0;
    for (int64_t k = 0; k < n; k++) {
      const double e = g[mp->offset + k] - w[k];
      num += e * e, den += w[k] * w[k];
      amax = fabs(e) > amax ? fabs(e) : amax;
    }
    if (strstr(mp->name, "attn.k.bias"))
      ck_assert_msg(amax <= 1e-6, "%s: |error| %.3g (zero in exact arithmetic)", mp->name, amax);
    else
      ck_assert_msg(sqrt(num) <= 1e-4 * sqrt(den), "%s: relative error %.3g", mp->name, sqrt(num / den));
    free(w);
  }
  free(want), free(wls), free(p), free(g), free(pd);
}
END_TEST

/* central differences of the double instance on entries of every tensor */
START_TEST(test_finite_differences) {
  const int64_t P = lay.n_params;
  float *pf = malloc(sizeof(float) * P);
  double *p = malloc(sizeof(double) * P), *g = malloc(sizeof(double) * P);
  batch_t bt;
  golden_batch(&bt);
  golden_params(pf, p);
  dt_loss_grad_f64(&lay, p, &bt.b, g, NULL, NULL);
  int checked = 0;
  for (int i = 0; i < reg.n; i++) {
    const model_param_t *mp = &reg.p[i];
    if (mp->vec != MODEL_VEC_DT) continue;
    const int64_t n = model_param_count(mp);
    for (int j = 0; j < 3; j++) {
      const int64_t k = mp->offset + (j * 7919) % n;
      const double x = p[k], e = 1e-6;
      p[k] = x + e;
      const double lp = dt_loss_grad_f64(&lay, p, &bt.b, NULL, NULL, NULL);
      p[k] = x - e;
      const double lm = dt_loss_grad_f64(&lay, p, &bt.b, NULL, NULL, NULL);
      p[k] = x;
      const double fd = (lp - lm) / (2 * e);
      ck_assert_msg(fabs(fd - g[k]) <= 1e-6 + 1e-5 * fabs(g[k]), "%s[%lld]: analytic %.10g, differences %.10g",
                    mp->name, (long long)(k - mp->offset), g[k], fd);
      checked++;
    }
  }
  ck_assert_int_ge(checked, 3 * 40);
  free(pf), free(p), free(g);
}
END_TEST

/* a later step changes no earlier logit; the padded steps' inputs change
 * nothing at all (NaN included); float and double agree */
START_TEST(test_causal_and_padding) {
  const int64_t P = lay.n_params;
  float *p = malloc(sizeof(float) * P), *g0 = malloc(sizeof(float) * P), *g1 = malloc(sizeof(float) * P);
  double *pd = malloc(sizeof(double) * P), *gd = malloc(sizeof(double) * P);
  float l0[B * K * NA], l1[B * K * NA];
  batch_t bt, b2;
  golden_batch(&bt);
  golden_params(p, pd);
  const double loss = dt_loss_grad_f32(&lay, p, &bt.b, g0, NULL, l0);
  /* causality: row 0's last step changed (state, rtg, action, time) */
  b2 = bt;
  b2.b = (dt_batch_t){B, b2.states, b2.rtg, b2.mask, b2.actions, b2.timesteps};
  const int t = K - 1;
  for (int i = 0; i < S; i++) b2.states[t * S + i] += 1.5f;
  b2.rtg[t] -= 2, b2.actions[t] = (b2.actions[t] + 1) % 6, b2.timesteps[t] += 1;
  dt_loss_grad_f32(&lay, p, &b2.b, NULL, NULL, l1);
  ck_assert_int_eq(memcmp(l0, l1, sizeof(float) * t * NA), 0);
  ck_assert_msg(memcmp(l0 + t * NA, l1 + t * NA, sizeof(float) * NA), "the changed step's logits did not change");
  /* padding: every padded step's inputs replaced (NaN states and rtg) */
  b2 = bt;
  b2.b = (dt_batch_t){B, b2.states, b2.rtg, b2.mask, b2.actions, b2.timesteps};
  int pad = 0;
  for (int i = 0; i < B * K; i++) {
    if (b2.mask[i] != 0) continue;
    pad++;
    for (int s = 0; s < S; s++) b2.states[i * S + s] = NAN;
    b2.rtg[i] = NAN, b2.actions[i] = 5, b2.timesteps[i] = 99;
  }
  ck_assert_int_gt(pad, 0);
  const double loss2 = dt_loss_grad_f32(&lay, p, &b2.b, g1, NULL, l1);
  ck_assert(loss == loss2);
  ck_assert_int_eq(memcmp(g0, g1, sizeof(float) * P), 0);
  ck_assert_int_eq(memcmp(l0, l1, sizeof l0), 0);
  /* float against double */
  const double lossd = dt_loss_grad_f64(&lay, pd, &bt.b, gd, NULL, NULL);
  ck_assert_msg(fabs(loss - lossd) <= 1e-6 * fabs(lossd), "float %.9g, double %.9g", loss, lossd);
  double num = 0, den = 0;
  for (int64_t k = 0; k < P; k++) num += (g0[k] - gd[k]) * (g0[k] - gd[k]), den += gd[k] * gd[k];
  ck_assert_msg(sqrt(num) <= 1e-5 * sqrt(den), "float and double gradients: relative %.3g", sqrt(num / den));
  /* a batch of padding alone: loss 0, zero gradient */
  for (int i = 0; i < B * K; i++) b2.mask[i] = 0;
  ck_assert(dt_loss_grad_f32(&lay, p, &b2.b, g1, NULL, NULL) == 0);
  for (int64_t k = 0; k < P; k++) ck_assert(g1[k] == 0);
  free(p), free(g0), free(g1), free(pd), free(gd);
}
END_TEST

/* Act: the argmax of the last step's logits, whatever its action says;
 * padding at the end refused */
START_TEST(test_act) {
  const int64_t P = lay.n_params;
  float *p = malloc(sizeof(float) * P), lg[B * K * NA];
  double *pd = malloc(sizeof(double) * P);
  batch_t bt;
  golden_batch(&bt);
  golden_params(p, pd);
  dt_loss_grad_f32(&lay, p, &bt.b, NULL, NULL, lg);
  for (int r = 0; r < B; r++) {
    dt_batch_t one = {1, bt.states + (size_t)r * K * S, bt.rtg + r * K, bt.mask + r * K, bt.actions + r * K,
                      bt.timesteps + r * K};
    const float *z = lg + ((size_t)r * K + K - 1) * NA;
    const int b0 = z[0] >= z[1] && z[0] >= z[2] ? 0 : z[1] >= z[2] ? 1 : 2, b1 = z[4] > z[3];
    ck_assert_int_eq(dt_act_f32(&lay, p, &one), b0 * 2 + b1);
    bt.actions[r * K + K - 1] = (bt.actions[r * K + K - 1] + 3) % 6; /* not read */
    ck_assert_int_eq(dt_act_f32(&lay, p, &one), b0 * 2 + b1);
  }
  bt.mask[K - 1] = 0;
  dt_batch_t one = {1, bt.states, bt.rtg, bt.mask, bt.actions, bt.timesteps};
  ck_assert_int_eq(dt_act_f32(&lay, p, &one), -1);
  free(p), free(pd);
}
END_TEST

START_TEST(test_bad_layout) {
  char err[256];
  dt_layout_t l;
  ck_assert_int_eq(dt_layout_init(&l, &reg, K, 3, err, sizeof err), LEARNER_EINVAL);
  ck_assert_str_eq(err, "dt_heads: 3 does not divide dt_embed 8 (context 4)");
}
END_TEST

/* episodes of the given lengths (the last one left open, the second ended
 * by a truncation), state[0] = insertion count, state[1] = episode, reward
 * (count % 5) - 2; into rp, insertion count base on */
static void fill(replay_t *rp, const int *len, int ne, int open_last, int64_t base) {
  int64_t c = base;
  for (int e = 0; e < ne; e++) {
    for (int k = 0; k < len[e]; k++, c++) {
      float st[S] = {(float)c, (float)e, 0.5f, -0.5f, 1};
      const int32_t a = (int32_t)(c % 6);
      const float r = (float)(c % 5) - 2;
      const int lastk = k == len[e] - 1 && !(open_last && e == ne - 1);
      const uint8_t done = lastk && e != 1, end = lastk && e == 1;
      learner_transitions_t t = {1, st, &a, &r, st, &done, NULL, &end};
      replay_add(rp, &t);
    }
  }
}

START_TEST(test_windows) {
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, 40, S, 0, 0.6f), 0);
  const int len[4] = {7, 12, 9, 5}; /* counts [0,7) [7,19) [19,28) and the open [28,33) */
  const int64_t first[3] = {0, 7, 19}, last[3] = {6, 18, 27};
  fill(&rp, len, 4, 1, 0);
  ck_assert(dt_replay_has_episode(&rp));
  enum { WB = 64 };
  static float st[WB * K * S], rt[WB * K], mk[WB * K], st2[WB * K * S];
  static int32_t ac[WB * K], ts[WB * K];
  int seen[33] = {0};
  for (uint64_t step = 0; step < 200; step++) {
    ck_assert_int_eq(dt_sample(&rp, 9, step, WB, K, 2.0f, st, rt, ac, ts, mk), WB);
    for (int i = 0; i < WB; i++) {
      int real = 0;
      for (int q = 0; q < K; q++) {
        const size_t o = (size_t)i * K + q;
        if (mk[o] == 0) {
          ck_assert_msg(real == 0, "row %d: padding after a real step", i);
          continue;
        }
        real++;
        const int64_t c = (int64_t)st[o * S], e = (int64_t)st[o * S + 1];
        ck_assert_msg(e >= 0 && e < 3, "row %d: a window from episode %lld (open)", i, (long long)e);
        ck_assert_int_eq(ts[o], (int)(c - first[e]));
        ck_assert_int_eq(ac[o], (int)(c % 6));
        float g = 0; /* the rewards to the episode's end, last first */
        for (int64_t x = last[e]; x >= c; x--) g = ((float)(x % 5) - 2) + g;
        ck_assert_msg(rt[o] == g / 2.0f, "row %d step %d: rtg %g, brute force %g", i, q, rt[o], g / 2.0f);
        if (q == K - 1) seen[c]++;
        if (q > 0 && mk[o - 1] != 0) ck_assert_int_eq((int)st[(o - 1) * S], (int)(c - 1));
        if (q == 0 || mk[o - 1] == 0) ck_assert_msg(q == 0 || c == first[e], "row %d: padding inside the episode", i);
      }
      ck_assert_int_gt(real, 0);
    }
    if (step == 5) { /* the same step draws the same windows; another step others */
      ck_assert_int_eq(dt_sample(&rp, 9, 5, WB, K, 2.0f, st2, rt, ac, ts, mk), WB);
      ck_assert_int_eq(memcmp(st, st2, sizeof st), 0);
      dt_sample(&rp, 9, 6, WB, K, 2.0f, st2, rt, ac, ts, mk);
      ck_assert(memcmp(st, st2, sizeof st) != 0);
    }
  }
  for (int c = 0; c < 33; c++)
    ck_assert_msg(c < 28 ? seen[c] > 0 : seen[c] == 0, "count %d ended %d windows", c, seen[c]);
  /* wrapped: 20 more (an episode of 20) overwrite counts 0..12: episodes 0 and 1 go */
  const int more[1] = {20};
  fill(&rp, more, 1, 0, 33);
  memset(seen, 0, sizeof seen);
  for (uint64_t step = 0; step < 100; step++) {
    dt_sample(&rp, 9, step, WB, K, 2.0f, st, rt, ac, ts, mk);
    for (int o = 0; o < WB * K; o++)
      if (mk[o] != 0) {
        const int64_t c = (int64_t)st[(size_t)o * S];
        ck_assert_msg(c >= 19, "a window from an overwritten episode (count %lld)", (long long)c);
      }
  }
  replay_free(&rp);
  /* an open episode alone: no window */
  ck_assert_int_eq(replay_init(&rp, 40, S, 0, 0.6f), 0);
  const int one[1] = {10};
  fill(&rp, one, 1, 1, 0);
  ck_assert(!dt_replay_has_episode(&rp));
  ck_assert_int_eq(dt_sample(&rp, 9, 0, WB, K, 2.0f, st, rt, ac, ts, mk), 0);
  for (int o = 0; o < WB * K; o++) ck_assert(mk[o] == 0);
  replay_free(&rp);
}
END_TEST

/* pre-training learns a rule: actions a function of the state (branch 0 the
 * argmax of s[0..2], branch 1 whether s[3] > 0), episodes of 12 steps; after
 * 400 steps the argmax logits of fresh windows follow the rule on >= 95% of
 * real steps in each branch, and the loss falls below a quarter of the
 * first step's */
START_TEST(test_pretrain_learns) {
  static model_t m2;
  dt_layout_t l2;
  build(&m2, &l2, 1, 16, 16);
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, 400, S, 0, 0.6f), 0);
  for (int c = 0; c < 240; c++) {
    float st[S], g[4];
    philox_normal4(philox_draw(77, 0, (uint64_t)c, 0), g);
    for (int i = 0; i < 4; i++) st[i] = g[i];
    st[4] = (float)(c % 12) / 12.0f;
    const int b0 = st[0] >= st[1] && st[0] >= st[2] ? 0 : st[1] >= st[2] ? 1 : 2, b1 = st[3] > 0;
    const int32_t a = b0 * 2 + b1;
    const float r = b0 == 1 ? 1.0f : 0.0f;
    const uint8_t done = c % 12 == 11, end = 0;
    learner_transitions_t t = {1, st, &a, &r, st, &done, NULL, &end};
    replay_add(&rp, &t);
  }
  dt_trainer_t tr;
  ck_assert_int_eq(dt_trainer_init(&tr, &l2, &m2, 16, 5), 0);
  const dt_hparams_t hp = {3e-3f, 1e-4f, 0.25f, 0.9f, 0.999f, 1e-8f, 10.0f, 20};
  dt_step_stats_t st;
  double first = 0, tail = 0;
  for (int k = 0; k < 400; k++) {
    ck_assert_int_eq(dt_train_step(&tr, &rp, &hp, &st), 0);
    if (k == 0) first = st.loss, ck_assert(st.lr == hp.lr / 20);
    if (k >= 380) tail += st.loss / 20;
  }
  ck_assert_int_eq((int)tr.step, 400);
  ck_assert_msg(tail < 0.25 * first, "loss %.4f at the first step, %.4f over the last 20", first, tail);
  enum { EB = 64 };
  static float es[EB * K * S], er[EB * K], em[EB * K], lg[EB * K * NA];
  static int32_t ea[EB * K], et[EB * K];
  ck_assert_int_eq(dt_sample(&rp, 1234, 0, EB, K, 10.0f, es, er, ea, et, em), EB);
  const dt_batch_t b = {EB, es, er, em, ea, et};
  dt_loss_grad_f32(&l2, tr.p, &b, NULL, NULL, lg);
  int n = 0, ok0 = 0, ok1 = 0;
  for (int o = 0; o < EB * K; o++) {
    if (em[o] == 0) continue;
    const float *x = es + (size_t)o * S, *z = lg + (size_t)o * NA;
    const int b0 = x[0] >= x[1] && x[0] >= x[2] ? 0 : x[1] >= x[2] ? 1 : 2, b1 = x[3] > 0;
    const int p0 = z[0] >= z[1] && z[0] >= z[2] ? 0 : z[1] >= z[2] ? 1 : 2, p1 = z[4] > z[3];
    n++, ok0 += p0 == b0, ok1 += p1 == b1;
  }
  ck_assert_msg(ok0 >= 0.95 * n && ok1 >= 0.95 * n, "branch 0 %d of %d, branch 1 %d of %d", ok0, n, ok1, n);
  dt_trainer_free(&tr);
  /* an open episode alone: EEMPTY, nothing changed */
  replay_t r2;
  ck_assert_int_eq(replay_init(&r2, 40, S, 0, 0.6f), 0);
  const int one[1] = {10};
  fill(&r2, one, 1, 1, 0);
  ck_assert_int_eq(dt_trainer_init(&tr, &l2, &m2, 16, 5), 0);
  ck_assert_int_eq(dt_train_step(&tr, &r2, &hp, &st), LEARNER_EEMPTY);
  ck_assert_int_eq((int)tr.step, 0);
  dt_trainer_free(&tr);
  replay_free(&r2);
  replay_free(&rp);
}
END_TEST

int main(void) {
  snprintf(golden_dir, sizeof golden_dir, "%s", tu_golden_dir());
  Suite *s = suite_create("dt");
  TCase *tc = tcase_create("cpu");
  tcase_add_checked_fixture(tc, setup_layout, NULL);
  tcase_add_test(tc, test_golden);
  tcase_add_test(tc, test_finite_differences);
  tcase_add_test(tc, test_causal_and_padding);
  tcase_add_test(tc, test_bad_layout);
  tcase_add_test(tc, test_act);
  tcase_add_test(tc, test_windows);
  tcase_add_test(tc, test_pretrain_learns);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
