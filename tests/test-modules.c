/*
 * test-modules.c — the CPU learner's modules (docs/learner.md §7, §8).
 * Attention: a learner with the block trains with a finite, falling loss
 * and round-trips bit for bit; its init leaves every other parameter's
 * initial value as without attention; bad shapes are refused naming the
 * field. Ensemble heads: the bootstrap masks' frequency is p and they are
 * stateless (same (seed, count, k), same mask), the replay recovers each
 * row's insertion count; K = 1 is bit for bit the step of a config without
 * the ensemble fields; a K = 3 learner with priors and diversity trains
 * with a falling loss, keeps its priors fixed and round-trips bit for bit
 * (priors section included); Act over K heads matches K plain learners
 * holding one head set each; Act of many states is independent of the
 * other states in the request; bad values are refused naming the field.
 * Oracles: twin learners, plain learners, the saved bytes, statistics.
 */
#include <check.h>
#include <math.h>
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#include <malloc.h>
#define HAVE_MALLINFO2 1
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "learner.h"
#include "model.h"
#include "net_layout.h"
#include "philox.h"
#include "replay.h"
#include "testutil.h"
#include "feed.h"
#include "act_rows.h"
#include "state_util.h"

/* 40 steps in 8 calls: every loss and gradient norm finite, the loss falling
 * by 10% at least from the first call's to the last's */
static void train_falls(learner_t *l, learner_stats_t *st, float *first, float *last) {
  char err[256];
  for (int k = 0; k < 8; k++) {
    ck_assert_msg(learner_step(l, 5, st, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(isfinite(st->loss_mean) && isfinite(st->grad_norm_last), "step %llu: loss %g",
                  (unsigned long long)st->step, (double)st->loss_mean);
    if (k == 0) *first = st->loss_mean;
    *last = st->loss_mean;
  }
  ck_assert_msg(*last < 0.9f * *first, "loss %g -> %g: not falling", (double)*first, (double)*last);
}

/* a learner l and r restored from its state have the same future: loss,
 * gradient norm and step of more training, online and target parameters, a
 * noisy Act's action and Q values, and the whole re-saved state */
static void same_future(learner_t *l, learner_t *r) {
  learner_stats_t sa, sb;
  int32_t a1, b1;
  float qa[7], qb[7];
  future(l, &sa, &a1, qa);
  future(r, &sb, &b1, qb);
  ck_assert(memcmp(&sa.loss_mean, &sb.loss_mean, 4) == 0 && memcmp(&sa.grad_norm_last, &sb.grad_norm_last, 4) == 0);
  ck_assert_int_eq(sa.step, sb.step);
  const int64_t P = learner_config_num_params(learner_config(l));
  float *p1 = malloc(sizeof(float) * (size_t)P), *p2 = malloc(sizeof(float) * (size_t)P);
  for (int which = 0; which < 2; which++) {
    params(l, which, p1);
    params(r, which, p2);
    ck_assert_msg(memcmp(p1, p2, sizeof(float) * (size_t)P) == 0, "params %d differ after restore", which);
  }
  ck_assert(a1 == b1 && memcmp(qa, qb, sizeof qa) == 0);
  membuf_t ma = {0}, mr = {0};
  save_to(l, 1, &ma);
  save_to(r, 1, &mr);
  ck_assert(ma.n == mr.n && memcmp(ma.p, mr.p, ma.n) == 0);
  free(ma.p), free(mr.p), free(p1), free(p2);
}

START_TEST(test_attention_learner) {
  char err[256];
  learner_config_t c = small_config(0, 1), c0 = c;
  c.attn_tokens = 3; /* 3 tokens of 4 (trunk_h2 12), 2 heads of 2 */
  c.attn_heads = 2;
  /* shapes: T = 1, T not dividing H2, heads not dividing d, no heads */
  static const struct { int T, nh; const char *field; } bad[] = {
      {1, 1, "attn_tokens"}, {5, 1, "attn_tokens"}, {3, 3, "attn_tokens"}, {3, 0, "attn_heads"}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    learner_config_t cb = c;
    cb.attn_tokens = bad[k].T, cb.attn_heads = bad[k].nh;
    ck_assert_int_eq(learner_config_validate(&cb, err, sizeof err), LEARNER_EINVAL);
    ck_assert_msg(strncmp(err, bad[k].field, strlen(bad[k].field)) == 0, "T %d heads %d: '%s'", bad[k].T,
                  bad[k].nh, err);
    learner_t *lb = NULL;
    ck_assert_int_eq(learner_create(&cb, LEARNER_BACKEND_CPU, &lb, err, sizeof err), LEARNER_EINVAL);
    ck_assert_ptr_null(lb);
  }
  /* both backends run attention (the GPU's parity: tests/test-gpu-learner.c) */
  learner_t *l = NULL;
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);

  /* init: every parameter of the plain network starts as without attention;
   * LayerNorm gamma 1, beta 0; the other attention tensors within 1/sqrt(d) */
  learner_t *l0;
  ck_assert_int_eq(learner_create(&c0, LEARNER_BACKEND_CPU, &l0, err, sizeof err), 0);
  int64_t P = learner_config_num_params(&c), P0 = learner_config_num_params(&c0);
  float *p = malloc(sizeof(float) * (size_t)P), *p0 = malloc(sizeof(float) * (size_t)P0);
  params(l, 0, p);
  params(l0, 0, p0);
  static model_t m, m0;
  model_desc_t d;
  model_desc_from_config(&d, &c);
  ck_assert_int_eq(model_build(&m, &d, err, sizeof err), 0);
  model_desc_from_config(&d, &c0);
  ck_assert_int_eq(model_build(&m0, &d, err, sizeof err), 0);
  ck_assert_int_eq(m.size[MODEL_VEC_NET], P);
  for (int i = 0; i < m0.n; i++) {
    const model_param_t *a = &m0.p[i], *b = model_find(&m, a->name);
    ck_assert_ptr_nonnull(b);
    ck_assert_msg(memcmp(p0 + a->offset, p + b->offset, sizeof(float) * (size_t)model_param_count(a)) == 0,
                  "%s: initial value changed by attention", a->name);
  }
  int n_attn = 0;
  for (int i = 0; i < m.n; i++) {
    const model_param_t *a = &m.p[i];
    if (strcmp(a->module, "attn")) continue;
    n_attn++;
    int64_t cnt = model_param_count(a);
    double lo = 1e9, hi = -1e9;
    for (int64_t k = 0; k < cnt; k++) {
      double v = p[a->offset + k];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    if (!strcmp(a->name, "attn.ln.weight")) ck_assert(lo == 1 && hi == 1);
    else if (!strcmp(a->name, "attn.ln.bias")) ck_assert(lo == 0 && hi == 0);
    else ck_assert_msg(lo >= -0.5 && hi <= 0.5 && hi - lo > 0.1, "%s: [%g, %g]", a->name, lo, hi);
  }
  ck_assert_int_eq(n_attn, 11);
  learner_destroy(l0);

  /* training: finite and falling loss */
  tu_feed(l, 50, 7);
  learner_stats_t st;
  float first, last;
  train_falls(l, &st, &first, &last);
  printf("attention learner: loss %.4f (steps 1-5) -> %.4f (steps 36-40)\n", (double)first, (double)last);
  /* the attention parameters moved */
  float *p1 = malloc(sizeof(float) * (size_t)P);
  params(l, 0, p1);
  const model_param_t *q = model_find(&m, "attn.q.weight");
  ck_assert(memcmp(p + q->offset, p1 + q->offset, sizeof(float) * (size_t)model_param_count(q)) != 0);

  /* save -> load -> the same future, bit for bit */
  membuf_t mb = {0};
  save_to(l, 1, &mb);
  learner_t *r;
  ck_assert_msg(learner_load(mem_read, &mb, LEARNER_BACKEND_CPU, &r, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_backend(r), LEARNER_BACKEND_CPU);
  ck_assert_int_eq(learner_config(r)->attn_tokens, 3);
  ck_assert_int_eq(learner_config(r)->attn_heads, 2);
  same_future(l, r);
  free(mb.p);
  free(p), free(p0), free(p1);
  learner_destroy(l);
  learner_destroy(r);
}
END_TEST

START_TEST(test_ensemble_masks) {
  /* frequency over many insertion counts, per head */
  const float ps[3] = {0.7f, 0.5f, 0.25f};
  const int N = 200000;
  for (int pi = 0; pi < 3; pi++)
    for (uint32_t k = 0; k < 5; k++) {
      int ones = 0;
      for (int n = 0; n < N; n++) ones += philox_ensemble_mask(42, (uint64_t)n, k, ps[pi]);
      double f = (double)ones / N, sd = sqrt(ps[pi] * (1 - ps[pi]) / N);
      ck_assert_msg(fabs(f - ps[pi]) < 5 * sd, "p %g head %u: frequency %g", (double)ps[pi], k, f);
      if (k == 0) printf("ensemble masks: p %.2f -> frequency %.5f over %d insertion counts (5 sd = %.4f)\n",
                         (double)ps[pi], f, N, 5 * sd);
    }
  /* p = 1: always 1; stateless: the same (seed, count, k) in any order gives the same mask; heads and
   * seeds differ */
  int diff_k = 0, diff_seed = 0;
  for (int n = 999; n >= 0; n--) {
    ck_assert_int_eq(philox_ensemble_mask(7, (uint64_t)n * 7919u, 2, 1.0f), 1);
    int m = philox_ensemble_mask(7, (uint64_t)n * 7919u, 2, 0.5f);
    ck_assert_int_eq(m, philox_ensemble_mask(7, (uint64_t)n * 7919u, 2, 0.5f));
    diff_k += m != philox_ensemble_mask(7, (uint64_t)n * 7919u, 3, 0.5f);
    diff_seed += m != philox_ensemble_mask(8, (uint64_t)n * 7919u, 2, 0.5f);
  }
  ck_assert(diff_k > 300 && diff_seed > 300);
  /* the replay gives each ring position its insertion count (replay_total at insertion + index) */
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, 5, 2, 1, 0.5f), 0);
  float s[14] = {0}, r[7] = {0};
  int32_t a[7] = {0};
  uint8_t d[7] = {0};
  const int sizes[4] = {3, 1, 7, 2};
  int64_t total = 0;
  for (int b = 0; b < 4; b++) {
    learner_transitions_t t = {sizes[b], s, a, r, s, d, NULL, NULL};
    replay_add(&rp, &t);
    total += sizes[b];
    for (int64_t j = 0; j < rp.size; j++) {
      int64_t c = replay_insertion_count(&rp, j);
      ck_assert_msg(c % 5 == j && c < total && c >= total - rp.size, "total %lld position %lld: count %lld",
                    (long long)total, (long long)j, (long long)c);
    }
  }
  replay_free(&rp);
}
END_TEST

/* the bytes of section `tag` of a saved state, or NULL */
static const unsigned char *section_payload(const membuf_t *m, uint32_t tag, uint64_t *len) {
  size_t off = 24;
  while (off + 16 <= m->n) {
    uint32_t t = (uint32_t)le(m->p + off, 4);
    *len = le(m->p + off + 8, 8);
    if (t == tag) return m->p + off + 16;
    if (t == 0) break;
    off += 16 + (size_t)*len + 4;
  }
  return NULL;
}

/* K = 1 is today's network: a config text without the ensemble lines and one
 * with K = 1 (and a lambda, which K = 1 ignores) train bit-identically */
START_TEST(test_ensemble_k1_identical) {
  learner_config_t c = small_config(1, 1), c1;
  char text[8192], stripped[8192], err[256];
  size_t n = learner_config_to_text(&c, text, sizeof text), w = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && text[j] != '\n') j++;
    if (strncmp(text + i, "ensemble_", 9)) {
      memcpy(stripped + w, text + i, j - i + 1);
      w += j - i + 1;
    }
    i = j + 1;
  }
  ck_assert(w < n);
  learner_config_t c0;
  ck_assert_msg(learner_config_from_text(&c0, stripped, w, err, sizeof err) == 0, "%s", err);
  c1 = c0;
  c1.ensemble_k = 1;
  c1.hp.ensemble_diversity = 0.5f;
  learner_t *l0 = trained(&c0), *l1 = trained(&c1);
  learner_stats_t s0, s1;
  int32_t a0, a1;
  float q0[7], q1[7];
  future(l0, &s0, &a0, q0);
  future(l1, &s1, &a1, q1);
  ck_assert(memcmp(&s0.loss_mean, &s1.loss_mean, 4) == 0 && memcmp(&s0.grad_norm_last, &s1.grad_norm_last, 4) == 0);
  ck_assert(a0 == a1 && memcmp(q0, q1, sizeof q0) == 0);
  int64_t P = learner_config_num_params(&c0);
  ck_assert_int_eq(P, learner_config_num_params(&c1));
  float *p0 = malloc(sizeof(float) * (size_t)P), *p1 = malloc(sizeof(float) * (size_t)P);
  for (int which = 0; which < 2; which++) {
    params(l0, which, p0);
    params(l1, which, p1);
    ck_assert_msg(memcmp(p0, p1, sizeof(float) * (size_t)P) == 0, "K = 1: params %d differ", which);
  }
  membuf_t m0 = {0};
  save_to(l0, 1, &m0);
  ck_assert(!(section_tags(&m0) & (1u << SEC_PRIORS))); /* no priors section without priors */
  free(m0.p), free(p0), free(p1);
  learner_destroy(l0);
  learner_destroy(l1);
}
END_TEST

/* Act over K heads (docs/learner.md §8). The oracle is K plain (K = 1) learners,
 * each holding the trunk and one head set copied through the layouts: their
 * Q values give the mean and the variance over heads in double, and every
 * act_select's choice is recomputed from them. */
static int argmax_d(const double *v, int n) {
  int b = 0;
  for (int k = 1; k < n; k++) b = v[k] > v[b] ? k : b;
  return b;
}

/* Act is independent of the other states in the request, bit for bit, on any
 * processor (act_rows.h: one Act against uneven pieces and single states):
 * the small net with K 2, attention and NoisyNet layers (their mean weights:
 * noisy 0, as a noisy Act draws new noise each call) over 9000 states, more
 * than the CPU forward takes at once (4096); the ref net plain (K 1), and
 * with K 3, priors and attention (8 tokens, 2 heads). */
START_TEST(test_act_many_states) {
  learner_config_t c = small_config(1, 0);
  int n = 9000;
  if (_i > 0) {
    learner_config_default(&c);
    c.replay_capacity = 1000;
    c.batch = 16;
    n = 2500;
  }
  if (_i != 1) {
    c.ensemble_k = _i ? 3 : 2;
    c.ensemble_prior_scale = _i ? 1.0f : 0.0f;
    c.attn_tokens = _i ? 8 : 2;
    c.attn_heads = 2;
  }
  char err[256];
  learner_t *l;
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  tu_feed(l, 40, 5);
  ck_assert_int_eq(learner_step(l, 3, NULL, err, sizeof err), 0);
  const int S = c.state_dim;
  float *s = malloc(sizeof(float) * (size_t)n * S);
  for (int i = 0; i < n * S; i++) s[i] = (float)((i * 7919 % 1013) - 506) / 97.0f;
  int distinct = tu_check_act_rows(l, s, n, 7);
  ck_assert_msg(distinct > 0, "every state got the same action: the comparison would not see a shifted row");
  free(s);
  learner_destroy(l);
}
END_TEST

/* heap bytes in use (glibc), or -1 where unknown (AddressSanitizer's
 * allocator replaces glibc's: mallinfo2 then counts nothing) */
static long long heap_now(void) {
#if defined(HAVE_MALLINFO2) && !defined(__SANITIZE_ADDRESS__)
  struct mallinfo2 mi = mallinfo2();
  return (long long)(mi.uordblks + mi.hblkhd);
#else
  return -1;
#endif
}

/* The CPU learner's memory estimate (what CreateTrainer checks against the
 * free memory) against the heap it really takes: created, stepped and asked
 * for the Q values of 1,000 states, a wide network (2,048 actions of 51
 * atoms, K 2, attention) takes no more than the estimate and at least two
 * thirds of it (a flat 64 KiB a batch row once undercounted such networks
 * fivefold); and Act's kept activations stay near 64 MiB however many
 * states are asked (1,000 here, ~0.9 MB a state: they held 0.9 GB). */
START_TEST(test_memory_estimate) {
  if (heap_now() < 0) { /* no mallinfo2, or a sanitizer's allocator: nothing to measure */
    printf("memory: not measured (no glibc heap counts in this build)\n");
    return;
  }
  learner_config_t c = small_config(1, 1);
  c.n_branches = 1, c.branch_sizes[0] = 2048, c.atoms = 51, c.adv_hidden = 8;
  c.ensemble_k = 2, c.attn_tokens = 3, c.attn_heads = 2, c.batch = 16, c.replay_capacity = 2000;
  enum { N = 1000 };
  float *s = malloc(sizeof(float) * N * 6), *q = malloc(sizeof(float) * N * 2048);
  int32_t *a = malloc(sizeof(int32_t) * N);
  for (int i = 0; i < N * 6; i++) s[i] = (float)(i % 13) / 13.0f - 0.5f;
  const long long h0 = heap_now(); /* the test's own buffers before it */
  char err[256];
  learner_t *l;
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  tu_feed(l, 2000, 3);
  ck_assert_int_eq(learner_step(l, 2, NULL, err, sizeof err), 0);
  const long long before_act = heap_now();
  ck_assert_int_eq(learner_act(l, s, N, 0, a, q, err, sizeof err), 0);
  const long long after_act = heap_now();
  const long long used = after_act - h0, est = learner_memory_estimate(&c, LEARNER_BACKEND_CPU);
  printf("memory: estimate %lld MiB, heap taken %lld MiB (Act kept %lld MiB)\n", est >> 20, used >> 20,
         (after_act - before_act) >> 20);
  ck_assert_msg(used <= est, "the learner took %lld bytes, over its estimate of %lld", used, est);
  ck_assert_msg(used * 3 >= est * 2, "the estimate %lld is over 1.5x the %lld bytes taken", est, used);
  ck_assert_msg(after_act - before_act <= (80LL << 20), "Act kept %lld bytes for %d states",
                after_act - before_act, N);
  free(s), free(q), free(a);
  learner_destroy(l);
}
END_TEST

START_TEST(test_ensemble_act_select) {
  enum { K = 3, N = 16, W = 7 };
  learner_config_t c = small_config(0, 1), c1;
  c.ensemble_k = K;
  c1 = c;
  c1.ensemble_k = 1;
  char err[256];
  learner_t *l, *h[K];
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  tu_feed(l, 40, 3);
  learner_stats_t st;
  ck_assert_int_eq(learner_step(l, 4, &st, err, sizeof err), 0);
  net_layout_t L, L1;
  net_layout_init(&L, &c);
  net_layout_init(&L1, &c1);
  float *p = malloc(sizeof(float) * (size_t)L.n_params), *p1 = malloc(sizeof(float) * (size_t)L1.n_params);
  params(l, 0, p);
  for (int k = 0; k < K; k++) {
    ck_assert_int_eq(learner_create(&c1, LEARNER_BACKEND_CPU, &h[k], err, sizeof err), 0);
    for (int i = 0; i < L1.n_layers; i++) {
      int src = i < NET_VALUE1 ? i : NET_HEAD_LAYER(&L, k, i - NET_VALUE1);
      const net_layer_t *a = &L.layer[src], *b = &L1.layer[i];
      ck_assert(a->in == b->in && a->out == b->out && !a->noisy);
      memcpy(p1 + b->off_w, p + a->off_w, sizeof(float) * (size_t)a->in * (size_t)a->out);
      memcpy(p1 + b->off_b, p + a->off_b, sizeof(float) * (size_t)a->out);
    }
    ck_assert_int_eq(learner_set_params(h[k], 0, p1, L1.n_params), 0);
  }
  float s[N * 6];
  for (int i = 0; i < N * 6; i++) s[i] = (float)((i * 37 % 23) - 11) / 2.0f;
  double qk[K][N][W];
  for (int k = 0; k < K; k++) {
    int32_t a[N];
    float q[N * W];
    ck_assert_int_eq(learner_act(h[k], s, N, 0, a, q, err, sizeof err), 0);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < W; j++) qk[k][i][j] = q[i * W + j];
  }
  double mu[N][W], var[N][W];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < W; j++) {
      double m = 0, v = 0;
      for (int k = 0; k < K; k++) m += qk[k][i][j];
      m /= K;
      for (int k = 0; k < K; k++) v += (qk[k][i][j] - m) * (qk[k][i][j] - m);
      mu[i][j] = m, var[i][j] = v / K;
    }
  const int off[2] = {0, 3}, nb[2] = {3, 4};
  int spread = 0, first = -1;
  for (int mode = 0; mode < 3; mode++) {
    const char *name = mode == 0 ? "mean" : mode == 1 ? "ucb" : "thompson";
    learner_hparams_t hp;
    learner_get_hparams(l, &hp);
    learner_config_t tmp = *learner_config(l);
    ck_assert_int_eq(learner_config_set(&tmp, "act_select", name, err, sizeof err), 0);
    ck_assert_int_eq(learner_config_set(&tmp, "ucb_c", "2.5", err, sizeof err), 0);
    hp.act_select = tmp.hp.act_select, hp.ucb_c = tmp.hp.ucb_c;
    ck_assert_int_eq(hp.act_select, mode);
    ck_assert_int_eq(learner_set_hparams(l, &hp, err, sizeof err), 0);
    int heads_seen = 0;
    for (uint64_t ep = 0; ep < (mode == 2 ? 24u : 1u); ep++) {
      int32_t a[N];
      float q[N * W], qv[N * W];
      ck_assert_int_eq(learner_act_checked(l, s, N, 0, (int64_t)ep, a, q, qv, err, sizeof err), 0);
      int head = (int)(philox_draw(c.seed, PHILOX_STREAM_ACT_HEAD, ep, 0).v[0] % K);
      heads_seen |= 1 << head;
      for (int i = 0; i < N; i++) {
        int32_t want = 0;
        for (int d = 0; d < 2; d++) {
          double sc[4];
          for (int j = 0; j < nb[d]; j++) {
            int col = off[d] + j;
            ck_assert_msg(fabs(q[i * W + col] - mu[i][col]) <= 1e-5 * (1 + fabs(mu[i][col])), "q mean [%d][%d]", i, col);
            ck_assert_msg(fabs(qv[i * W + col] - var[i][col]) <= 1e-5 * (1 + var[i][col]), "q var [%d][%d]: %g vs %g",
                          i, col, (double)qv[i * W + col], var[i][col]);
            sc[j] = mode == 0 ? mu[i][col] : mode == 1 ? mu[i][col] + 2.5 * sqrt(var[i][col]) : qk[head][i][col];
          }
          want = want * nb[d] + argmax_d(sc, nb[d]);
        }
        ck_assert_msg(a[i] == want, "%s, episode %d, state %d: action %d, the oracle %d", name, (int)ep, i, a[i], want);
        if (first < 0) first = want;
        spread += want != first;
      }
    }
    if (mode == 2) ck_assert_msg(heads_seen == (1 << K) - 1, "24 episodes drew heads %#x", heads_seen);
  }
  ck_assert_int_gt(spread, 0); /* not one action everywhere: the checks can tell heads and modes apart */
  /* names and numbers both parse; anything else names the field */
  learner_config_t tmp = c;
  ck_assert_int_eq(learner_config_set(&tmp, "act_select", "2", err, sizeof err), 0);
  ck_assert_int_eq(tmp.hp.act_select, LEARNER_ACT_THOMPSON);
  char txt[32];
  learner_config_get(&tmp, learner_field_find("act_select"), txt, sizeof txt);
  ck_assert_str_eq(txt, "thompson");
  ck_assert_int_ne(learner_config_set(&tmp, "act_select", "greedy", err, sizeof err), 0);
  ck_assert_msg(strstr(err, "act_select") && strstr(err, "thompson"), "%s", err);
  ck_assert_int_ne(learner_config_set(&tmp, "act_select", "3", err, sizeof err), 0);
  ck_assert_msg(strstr(err, "act_select"), "%s", err);
  for (int k = 0; k < K; k++) learner_destroy(h[k]);
  learner_destroy(l);
  free(p), free(p1);
}
END_TEST

START_TEST(test_ensemble_learner) {
  char err[256];
  learner_config_t c = small_config(0, 1);
  c.ensemble_k = 3;
  c.ensemble_prior_scale = 1.0f;
  c.ensemble_mask_p = 0.7f;
  c.hp.ensemble_diversity = 0.05f;
  ck_assert_msg(learner_config_validate(&c, err, sizeof err) == 0, "%s", err);
  /* bad values name their field */
  for (int k = 0; k < 7; k++) {
    learner_config_t cb = c;
    const char *field = k < 2 ? "ensemble_k" : k < 4 ? "ensemble_mask_p" : k < 5 ? "ensemble_prior_scale"
                                                                                : "ensemble_diversity";
    if (k == 0) cb.ensemble_k = 0;
    if (k == 1) cb.ensemble_k = LEARNER_MAX_ENSEMBLE + 1;
    if (k == 2) cb.ensemble_mask_p = 0;
    if (k == 3) cb.ensemble_mask_p = 1.5f;
    if (k == 4) cb.ensemble_prior_scale = -1;
    if (k == 5) cb.hp.ensemble_diversity = -0.1f;
    if (k == 6) cb.hp.ensemble_diversity = NAN;
    ck_assert_int_eq(learner_config_validate(&cb, err, sizeof err), LEARNER_EINVAL);
    ck_assert_msg(strstr(err, field) != NULL, "case %d: '%s' does not name %s", k, err, field);
  }
  /* lambda may change between steps; K, p and beta_p may not */
  ck_assert_int_eq(learner_field_find("ensemble_diversity")->hparam, 1);
  ck_assert_int_eq(learner_field_find("ensemble_k")->hparam, 0);
  ck_assert_int_eq(learner_field_find("ensemble_mask_p")->hparam, 0);
  ck_assert_int_eq(learner_field_find("ensemble_prior_scale")->hparam, 0);
  /* both backends run ensembles (the GPU's parity: tests/test-gpu-learner.c) */
  learner_t *l = NULL;
  learner_config_t cp = small_config(0, 1);
  cp.ensemble_prior_scale = 2;
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  int64_t P = learner_config_num_params(&c), P1 = learner_config_num_params(&cp);
  ck_assert_int_gt(P, P1); /* three head sets */

  membuf_t before = {0};
  save_to(l, 0, &before);
  tu_feed(l, 50, 7);
  learner_stats_t st;
  float first, last;
  train_falls(l, &st, &first, &last);
  printf("ensemble learner (K 3, priors 1, lambda 0.05, p 0.7): loss %.4f (steps 1-5) -> %.4f (steps 36-40)\n",
         (double)first, (double)last);
  /* Act: the action is the argmax per branch of the returned (head-mean) Q */
  const float s0[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};
  int32_t act;
  float q[7];
  ck_assert_int_eq(learner_act(l, s0, 1, 0, &act, q, err, sizeof err), 0);
  int b0 = 0, b1 = 0;
  for (int k = 1; k < 3; k++) b0 = q[k] > q[b0] ? k : b0;
  for (int k = 1; k < 4; k++) b1 = q[3 + k] > q[3 + b1] ? k : b1;
  ck_assert_int_eq(act, b0 * 4 + b1);

  /* the priors are in the state, and training left them unchanged */
  membuf_t mb = {0};
  save_to(l, 1, &mb);
  ck_assert(section_tags(&mb) & (1u << SEC_PRIORS));
  uint64_t n0 = 0, n1 = 0;
  const unsigned char *pr0 = section_payload(&before, SEC_PRIORS, &n0), *pr1 = section_payload(&mb, SEC_PRIORS, &n1);
  ck_assert(pr0 && pr1 && n0 == n1 && n0 > 0 && memcmp(pr0, pr1, n0) == 0);
  /* save -> load -> the same future, bit for bit */
  learner_t *r;
  ck_assert_msg(learner_load(mem_read, &mb, LEARNER_BACKEND_CPU, &r, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_backend(r), LEARNER_BACKEND_CPU);
  ck_assert_int_eq(learner_config(r)->ensemble_k, 3);
  same_future(l, r);
  /* a state without its priors section does not load */
  membuf_t cut = {0};
  save_to(l, 0, &cut);
  uint64_t plen = 0;
  const unsigned char *pp = section_payload(&cut, SEC_PRIORS, &plen);
  ck_assert_ptr_nonnull(pp);
  size_t at = (size_t)(pp - 16 - cut.p), sl = 16 + (size_t)plen + 4;
  memmove(cut.p + at, cut.p + at + sl, cut.n - at - sl);
  cut.n -= sl;
  cut.pos = 0;
  learner_t *bad = NULL;
  ck_assert_int_ne(learner_load(mem_read, &cut, LEARNER_BACKEND_AUTO, &bad, err, sizeof err), 0);
  ck_assert_ptr_null(bad);
  ck_assert_msg(strstr(err, "prior heads") != NULL, "%s", err);
  free(mb.p), free(before.p), free(cut.p);
  learner_destroy(l);
  learner_destroy(r);
}
END_TEST

int main(void) {
  Suite *s = suite_create("modules");
  TCase *tc = tcase_create("modules");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_attention_learner);
  tcase_add_test(tc, test_ensemble_masks);
  tcase_add_test(tc, test_ensemble_k1_identical);
  tcase_add_test(tc, test_ensemble_learner);
  tcase_add_test(tc, test_ensemble_act_select);
  tcase_add_loop_test(tc, test_act_many_states, 0, 3);
  tcase_add_test(tc, test_memory_estimate);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
