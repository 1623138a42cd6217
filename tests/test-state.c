/*
 * test-state.c — the learner's complete state: serialise -> restore -> the
 * next steps are bit-identical to the original's (params, Adam moments,
 * priorities, RNG position, replay ring); two learners with the same history
 * and seed are bit-identical and with another seed differ (so the bit-for-bit
 * comparison can fail); without the replay the weights and optimiser still
 * round-trip. Corruption: every byte of a saved state (replay included) xor
 * 0x01, 0x80 and 0xff, every truncation 0..len-1, a wrong magic and a wrong
 * format version are each rejected with an error and never yield a learner.
 * Oracle: the original learner itself, compared bit for bit.
 * Attention (docs/learner.md §7): a CPU learner with the block trains with a
 * finite, falling loss and round-trips bit for bit; its init leaves every
 * other parameter's initial value as without attention; bad shapes are
 * refused naming the field.
 * Ensemble heads (docs/learner.md §8): the bootstrap masks' frequency is p and
 * they are stateless (same (seed, count, k), same mask), the replay recovers
 * each row's insertion count; K = 1 is bit for bit the step of a config
 * without the ensemble fields; a K = 3 learner with priors and diversity
 * trains with a falling loss, keeps its priors fixed and round-trips bit for
 * bit (priors section included); bad values are refused naming the field.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#include <malloc.h>
#define HAVE_MALLINFO2 1
#endif

#include "backend.h"
#include "learner.h"
#include "model.h"
#include "net_layout.h"
#include "philox.h"
#include "replay.h"
#include "testutil.h"
#include "feed.h"
#include "act_rows.h"
#include "k1_pin.h"
#include "stop_check.h"

static learner_config_t small_config(int noisy, int per) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = 6;
  c.trunk_h1 = 16;
  c.trunk_h2 = 12;
  c.value_hidden = 8;
  c.adv_hidden = 10;
  c.atoms = 11;
  c.n_branches = 2;
  c.branch_sizes[0] = 3;
  c.branch_sizes[1] = 4;
  c.batch = 8;
  c.replay_capacity = 50;
  c.noisy = noisy;
  c.prioritized = per;
  c.hp.lr = 1e-2f;
  c.hp.target_period = 3;
  c.seed = 99;
  return c;
}


static void params(learner_t *l, int which, float *out) {
  int64_t P = learner_config_num_params(learner_config(l));
  ck_assert_int_eq(learner_get_params(l, which, out, P), 0);
}

/* The shared history: 70 transitions (wrapping the ring of 50), 5 steps and a
 * noisy act (advances the act counter). */
static learner_t *trained(const learner_config_t *c) {
  learner_t *l;
  char err[256];
  ck_assert_msg(learner_create(c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  tu_feed(l, 70, 1);
  learner_stats_t st;
  ck_assert_int_eq(learner_step(l, 5, &st, err, sizeof err), 0);
  const float s0[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};
  int32_t act;
  ck_assert_int_eq(learner_act(l, s0, 1, 1, &act, NULL, err, sizeof err), 0);
  return l;
}

/* The shared future: more data, 7 more steps (crossing a target copy), then a
 * noisy act whose action and Q values come back. */
static void future(learner_t *l, learner_stats_t *st, int32_t *act, float q[7]) {
  char err[256];
  const float s0[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};
  tu_feed(l, 5, 2);
  ck_assert_int_eq(learner_step(l, 7, st, err, sizeof err), 0);
  ck_assert_int_eq(learner_act(l, s0, 1, 1, act, q, err, sizeof err), 0);
}

static void save_to(learner_t *l, int with_replay, membuf_t *m) {
  char err[256];
  ck_assert_msg(learner_save(l, with_replay, mem_write, m, err, sizeof err) == 0, "%s", err);
}

static void roundtrip(int noisy, int per) {
  learner_config_t c = small_config(noisy, per);
  learner_t *a, *b;
  char err[256];
  a = trained(&c);

  membuf_t m = {0};
  save_to(a, 1, &m);
  ck_assert_msg(learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &b, err, sizeof err) == 0, "%s", err);

  /* the same future */
  learner_stats_t sa, sb;
  int32_t a1, b1;
  float qa[7], qb[7];
  future(a, &sa, &a1, qa);
  future(b, &sb, &b1, qb);
  ck_assert(memcmp(&sa.loss_mean, &sb.loss_mean, 4) == 0);
  ck_assert(memcmp(&sa.grad_norm_last, &sb.grad_norm_last, 4) == 0);
  ck_assert_int_eq(sa.step, sb.step);
  int64_t P = learner_config_num_params(&c);
  float *pa = malloc(sizeof(float) * (size_t)P), *pb = malloc(sizeof(float) * (size_t)P);
  for (int which = 0; which < 2; which++) {
    params(a, which, pa);
    params(b, which, pb);
    ck_assert_msg(memcmp(pa, pb, sizeof(float) * (size_t)P) == 0, "params %d differ after restore", which);
  }
  ck_assert(a1 == b1 && memcmp(qa, qb, sizeof qa) == 0);
  /* and the whole state, Adam moments, priorities and counters included */
  membuf_t ma = {0}, mb = {0};
  save_to(a, 1, &ma);
  save_to(b, 1, &mb);
  ck_assert(ma.n == mb.n && memcmp(ma.p, mb.p, ma.n) == 0);

  /* Controls, so that the checks above can fail: learners with the same
   * config, data, steps and acts as `a` (history and future), differing only
   * in the seed. Same seed: bit-identical to `a`; another seed: different
   * weights (online and target), loss and Q values. */
  for (int k = 0; k < 2; k++) {
    learner_config_t c2 = c;
    c2.seed = k == 0 ? c.seed : c.seed + 1;
    learner_t *o = trained(&c2);
    learner_stats_t so;
    int32_t o1;
    float qo[7];
    future(o, &so, &o1, qo);
    int same[2];
    for (int which = 0; which < 2; which++) {
      params(a, which, pa);
      params(o, which, pb);
      same[which] = memcmp(pa, pb, sizeof(float) * (size_t)P) == 0;
    }
    int same_loss = memcmp(&sa.loss_mean, &so.loss_mean, 4) == 0, same_q = memcmp(qa, qo, sizeof qa) == 0;
    if (k == 0) {
      ck_assert_msg(same[0] && same[1] && same_loss && same_q && a1 == o1, "same seed, same history: not identical");
      membuf_t mo = {0};
      save_to(o, 1, &mo);
      ck_assert(mo.n == ma.n && memcmp(mo.p, ma.p, ma.n) == 0);
      free(mo.p);
    } else {
      ck_assert_msg(!same[0] && !same[1] && !same_loss && !same_q,
                    "seed %llu vs %llu: online %s, target %s, loss %s, q %s", (unsigned long long)c.seed,
                    (unsigned long long)c2.seed, same[0] ? "same" : "differ", same[1] ? "same" : "differ",
                    same_loss ? "same" : "differ", same_q ? "same" : "differ");
    }
    learner_destroy(o);
  }
  /* and the initial weights alone: fresh learners of the same seed are equal,
   * of another seed not */
  for (int k = 0; k < 2; k++) {
    learner_config_t c2 = c;
    c2.seed = c.seed + (uint64_t)k;
    learner_t *f0, *f1;
    ck_assert_int_eq(learner_create(&c, LEARNER_BACKEND_CPU, &f0, err, sizeof err), 0);
    ck_assert_int_eq(learner_create(&c2, LEARNER_BACKEND_CPU, &f1, err, sizeof err), 0);
    params(f0, 0, pa);
    params(f1, 0, pb);
    int same = memcmp(pa, pb, sizeof(float) * (size_t)P) == 0;
    ck_assert_msg(same == (k == 0), "fresh learners, seeds %llu and %llu: initial weights %s",
                  (unsigned long long)c.seed, (unsigned long long)c2.seed, same ? "equal" : "differ");
    learner_destroy(f0);
    learner_destroy(f1);
  }
  free(ma.p), free(mb.p);
  params(a, 0, pa);

  /* without replay: weights and optimiser come back, the replay is empty */
  membuf_t m2 = {0};
  ck_assert_int_eq(learner_save(a, 0, mem_write, &m2, err, sizeof err), 0);
  ck_assert(m2.n < m.n);
  learner_t *e;
  ck_assert_msg(learner_load(mem_read, &m2, LEARNER_BACKEND_CPU, &e, err, sizeof err) == 0, "%s", err);
  learner_stats_t se;
  learner_get_stats(e, &se);
  ck_assert_int_eq(se.replay_size, 0);
  ck_assert_int_eq(se.step, sa.step);
  params(e, 0, pb);
  ck_assert(memcmp(pa, pb, sizeof(float) * (size_t)P) == 0);
  /* everything else (target, Adam moments, counters): saving the restored
   * learner again gives the same bytes */
  membuf_t m3 = {0};
  save_to(e, 0, &m3);
  ck_assert(m3.n == m2.n && memcmp(m3.p, m2.p, m2.n) == 0);
  free(m3.p);
  ck_assert_int_eq(learner_step(e, 1, &se, err, sizeof err), LEARNER_EEMPTY);
  learner_destroy(e);

  free(pa), free(pb), free(m.p), free(m2.p);
  learner_destroy(a);
  learner_destroy(b);
}

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
  learner_stats_t sa, sb;
  int32_t a1, b1;
  float qa[7], qb[7];
  future(l, &sa, &a1, qa);
  future(r, &sb, &b1, qb);
  ck_assert(memcmp(&sa.loss_mean, &sb.loss_mean, 4) == 0 && sa.step == sb.step);
  float *p2 = malloc(sizeof(float) * (size_t)P);
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
  free(ma.p), free(mr.p), free(mb.p);
  free(p), free(p0), free(p1), free(p2);
  learner_destroy(l);
  learner_destroy(r);
}
END_TEST

static uint64_t le(const unsigned char *p, int n);
static uint32_t section_tags(const membuf_t *m);

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

/* K = 1 with attention off is the step the learner had before the ensemble
 * and its sharing of the head code existed: 50 steps of each k1_pin.h
 * configuration against the parameters that commit (cc56e22) computed
 * (tests/golden/k1pin). Not bit for bit: BLAS sums in the order of the
 * kernels OpenBLAS picks for the processor, and the twelve kernel sets this
 * was measured under differ by up to 1.3e-7 (relative norm) and 1e-6 (an
 * element) after 50 steps; a changed step moves them by 1e-3 or more.
 * Under the kernels that computed the files (Cooperlake), bit for bit. */
#define K1_PIN_TOL 1e-6
#define K1_PIN_ABS 1e-5
/* the kernels that computed the files: under them, the same bits */
#define K1_PIN_CORE "Cooperlake"
extern char *openblas_get_corename(void) __attribute__((weak)); /* OpenBLAS only */
START_TEST(test_k1_pinned_to_before_ensemble) {
  char err[256], path[1200];
  float *p;
  int64_t P;
  ck_assert_msg(k1_pin_train(_i, &p, &P, err, sizeof err) == 0, "%s", err);
  const char *gd = tu_golden_dir();
  snprintf(path, sizeof path, "%s/k1pin/%s.f32", gd, k1_pin_names[_i]);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f, "cannot open %s", path);
  float *ref = malloc(sizeof(float) * 2 * (size_t)P);
  ck_assert_msg(fread(ref, sizeof(float), 2 * (size_t)P, f) == 2 * (size_t)P && fgetc(f) == EOF,
                "%s does not hold 2 x %lld floats: the parameter count changed", path, (long long)P);
  fclose(f);
  double num = 0, den = 0, worst = 0;
  for (int64_t i = 0; i < 2 * P; i++) {
    double e = (double)p[i] - ref[i];
    num += e * e, den += (double)ref[i] * ref[i];
    worst = fabs(e) > worst ? fabs(e) : worst;
  }
  const double rel = sqrt(num / den);
  printf("K = 1 pinned (%s, %lld parameters x 2): relative %.3g, largest element %.3g against cc56e22\n",
         k1_pin_names[_i], (long long)P, rel, worst);
  const char *core = openblas_get_corename ? openblas_get_corename() : "";
  if (core && !strcmp(core, K1_PIN_CORE))
    ck_assert_msg(memcmp(p, ref, sizeof(float) * 2 * (size_t)P) == 0,
                  "%s: under the %s kernels that computed it the step must give the same bits (relative %.3g)",
                  k1_pin_names[_i], K1_PIN_CORE, rel);
  ck_assert_msg(rel <= K1_PIN_TOL && worst <= K1_PIN_ABS,
                "%s: today's K = 1 step moved from cc56e22's: relative %.3g (bound %.0e), element %.3g (bound %.0e)",
                k1_pin_names[_i], rel, K1_PIN_TOL, worst, K1_PIN_ABS);
  free(p), free(ref);
}
END_TEST

/* Checkpoints written before issues 25-27 (commit 5e2309e's daemon; the
 * files and how they were made: tests/golden/README.md, ckpt-5e2309e/) load
 * and are written back byte for byte; the state at step 5, stepped 5 more,
 * is the state that commit saved at step 10: the same bytes under the
 * kernels that computed it (Haswell), otherwise the parameters within the
 * kernel sets' spread (K1_PIN_TOL / K1_PIN_ABS, as for the K = 1 pin). */
#define OLD_CKPT_CORE "Haswell"
static void read_golden(const char *name, membuf_t *m) {
  const char *gd = tu_golden_dir();
  char path[1200];
  snprintf(path, sizeof path, "%s/ckpt-5e2309e/%s", gd, name);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f, "cannot open %s", path);
  unsigned char buf[65536];
  size_t k;
  memset(m, 0, sizeof *m);
  while ((k = fread(buf, 1, sizeof buf, f)) > 0) ck_assert_int_eq(mem_write(m, buf, k), 0);
  fclose(f);
}

START_TEST(test_old_checkpoints_load) {
  char err[256];
  membuf_t a, b;
  read_golden("step5.dqnd", &a);
  read_golden("step10.dqnd", &b);
  learner_t *la, *lb;
  ck_assert_msg(learner_load(mem_read, &a, LEARNER_BACKEND_CPU, &la, err, sizeof err) == 0, "step5: %s", err);
  ck_assert_msg(learner_load(mem_read, &b, LEARNER_BACKEND_CPU, &lb, err, sizeof err) == 0, "step10: %s", err);
  /* written back as they were read */
  membuf_t a2 = {0}, b2 = {0};
  save_to(la, 1, &a2);
  save_to(lb, 1, &b2);
  ck_assert_msg(a2.n == a.n && !memcmp(a2.p, a.p, a.n), "step5 saved again differs (%zu / %zu bytes)", a2.n, a.n);
  ck_assert_msg(b2.n == b.n && !memcmp(b2.p, b.p, b.n), "step10 saved again differs (%zu / %zu bytes)", b2.n, b.n);
  /* five more steps from step 5 */
  learner_stats_t st, want;
  ck_assert_int_eq(learner_step(la, 5, &st, err, sizeof err), 0);
  ck_assert_int_eq(learner_get_stats(lb, &want), 0);
  ck_assert_int_eq((long long)st.step, 10);
  ck_assert_int_eq((long long)want.step, 10);
  const int64_t P = learner_config_num_params(learner_config(la));
  float *p = malloc(sizeof(float) * 2 * (size_t)P), *q = malloc(sizeof(float) * 2 * (size_t)P);
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(q);
  for (int w = 0; w < 2; w++) {
    ck_assert_int_eq(learner_get_params(la, w, p + w * P, P), 0);
    ck_assert_int_eq(learner_get_params(lb, w, q + w * P, P), 0);
  }
  double num = 0, den = 0, worst = 0;
  for (int64_t i = 0; i < 2 * P; i++) {
    const double e = (double)p[i] - q[i];
    num += e * e, den += (double)q[i] * q[i];
    worst = fabs(e) > worst ? fabs(e) : worst;
  }
  const double rel = sqrt(num / den);
  printf("a 5e2309e checkpoint stepped 5 more: relative %.3g, largest element %.3g against its own step 10\n", rel,
         worst);
  const char *core = openblas_get_corename ? openblas_get_corename() : "";
  if (core && !strcmp(core, OLD_CKPT_CORE)) {
    membuf_t c2 = {0};
    save_to(la, 1, &c2);
    ck_assert_msg(c2.n == b.n && !memcmp(c2.p, b.p, b.n),
                  "under the %s kernels that computed it, step 5 + 5 must save as step10.dqnd, byte for byte "
                  "(relative %.3g)", OLD_CKPT_CORE, rel);
    free(c2.p);
  }
  ck_assert_msg(rel <= K1_PIN_TOL && worst <= K1_PIN_ABS, "step 5 + 5 moved from 5e2309e's step 10: relative %.3g, "
                "element %.3g", rel, worst);
  free(p), free(q), free(a.p), free(b.p), free(a2.p), free(b2.p);
  learner_destroy(la), learner_destroy(lb);
}
END_TEST

/* learner_step_until stops between whole steps, by deadline and by flag
 * (stop_check.h): the state then equals a twin's after as many steps; with
 * PER, NoisyNet, K 2 heads and n-step returns in the step */
START_TEST(test_step_stops_whole) {
  learner_config_t c = small_config(1, 1);
  c.ensemble_k = 2;
  c.hp.n_step = 3;
  char err[256];
  learner_t *l, *twin;
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &twin, err, sizeof err) == 0, "%s", err);
  tu_feed(l, 200, 9);
  tu_feed(twin, 200, 9);
  tu_check_stop(l, twin, "cpu");
  learner_destroy(l);
  learner_destroy(twin);
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
  learner_stats_t sa, sb;
  int32_t a1, b1r;
  float qa[7], qb[7];
  future(l, &sa, &a1, qa);
  future(r, &sb, &b1r, qb);
  ck_assert(memcmp(&sa.loss_mean, &sb.loss_mean, 4) == 0 && sa.step == sb.step);
  float *p1 = malloc(sizeof(float) * (size_t)P), *p2 = malloc(sizeof(float) * (size_t)P);
  for (int which = 0; which < 2; which++) {
    params(l, which, p1);
    params(r, which, p2);
    ck_assert_msg(memcmp(p1, p2, sizeof(float) * (size_t)P) == 0, "params %d differ after restore", which);
  }
  ck_assert(a1 == b1r && memcmp(qa, qb, sizeof qa) == 0);
  membuf_t ma = {0}, mr = {0};
  save_to(l, 1, &ma);
  save_to(r, 1, &mr);
  ck_assert(ma.n == mr.n && memcmp(ma.p, mr.p, ma.n) == 0);
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
  free(ma.p), free(mr.p), free(mb.p), free(before.p), free(cut.p);
  free(p1), free(p2);
  learner_destroy(l);
  learner_destroy(r);
}
END_TEST

START_TEST(test_roundtrip_plain_per) { roundtrip(0, 1); }
END_TEST
START_TEST(test_roundtrip_noisy_uniform) { roundtrip(1, 0); }
END_TEST
START_TEST(test_roundtrip_noisy_per) { roundtrip(1, 1); }
END_TEST

/* The smallest useful learner: every section is present (noisy heads, PER so
 * the priority section too) and the saved state is a few KB, so loading it
 * once per corrupted byte stays fast. */
static learner_config_t tiny_config(void) {
  learner_config_t c = small_config(1, 1);
  c.state_dim = 2;
  c.trunk_h1 = 3;
  c.trunk_h2 = 3;
  c.value_hidden = 2;
  c.adv_hidden = 2;
  c.atoms = 3;
  c.branch_sizes[0] = 2;
  c.branch_sizes[1] = 2;
  c.batch = 2;
  c.replay_capacity = 5;
  return c;
}

/* A saved state of the tiny learner (with or without its replay): 7
 * transitions (the ring of 5 wraps) and 3 steps, so priorities and Adam
 * moments are not initial. */
static void tiny_state(membuf_t *m, int with_replay) {
  learner_config_t c = tiny_config();
  learner_t *a;
  char err[256];
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &a, err, sizeof err) == 0, "%s", err);
  tu_feed(a, 7, 1);
  learner_stats_t st;
  ck_assert_int_eq(learner_step(a, 3, &st, err, sizeof err), 0);
  save_to(a, with_replay, m);
  learner_destroy(a);
  m->pos = 0;
}

static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Walks the sections as learner.h lays them out (24-byte header; u32 tag,
 * u32 0, u64 len, payload, u32 crc; END last) and returns the set of tags
 * (bit per tag); the END section must end the buffer exactly. */
static uint32_t section_tags(const membuf_t *m) {
  size_t off = 24;
  uint32_t seen = 0;
  for (;;) {
    ck_assert_msg(off + 16 <= m->n, "section header at %zu runs past %zu", off, m->n);
    uint32_t tag = (uint32_t)le(m->p + off, 4);
    uint64_t len = le(m->p + off + 8, 8);
    ck_assert(tag < 32 && le(m->p + off + 4, 4) == 0 && len <= m->n);
    seen |= 1u << tag;
    off += 16 + (size_t)len + 4;
    if (tag == 0) break;
  }
  ck_assert_msg(off == m->n, "END at %zu of %zu", off, m->n);
  return seen;
}

/* Heap bytes in use (glibc), or -1 where unknown: the failed loads below must
 * give back everything they allocated. */
static long long heap_in_use(void) {
#ifdef HAVE_MALLINFO2
  struct mallinfo2 mi = mallinfo2();
  return (long long)(mi.uordblks + mi.hblkhd);
#else
  return -1;
#endif
}

/* Loads m from its start: the return code; *out and err are checked here. */
static int try_load(membuf_t *m, char *err, size_t errlen) {
  learner_t *b = (learner_t *)1; /* must be reset to NULL on failure */
  m->pos = 0;
  err[0] = 0;
  int rc = learner_load(mem_read, m, LEARNER_BACKEND_CPU, &b, err, errlen);
  if (rc == 0) {
    learner_destroy(b);
    return 0;
  }
  ck_assert_msg(b == NULL, "failed load (%d) left a learner", rc);
  ck_assert_msg(err[0] != 0, "failed load (%d) without a message", rc);
  return rc;
}

static void corrupt_every_byte(int with_replay) {
  membuf_t m = {0};
  tiny_state(&m, with_replay);
  char err[256];
  ck_assert_msg(try_load(&m, err, sizeof err) == 0, "pristine state: %s", err);
  /* every section of the format is in it: END, config, counters, online,
   * target, both Adam moments, and (with the replay) the eight replay
   * sections, PER priorities and episode ends included */
  ck_assert_uint_eq(section_tags(&m), 0x7fu | (with_replay ? 0xffu << 10 : 0));
  /* every byte, three patterns (lowest bit, highest bit, all bits): never a
   * learner, always ECORRUPT or EIO (a corrupted length may run off the end).
   * Undetected positions are collected and all reported. */
  static const unsigned char pattern[3] = {0x01, 0x80, 0xff};
  long long heap0 = heap_in_use();
  char missed[512] = "";
  size_t nmissed = 0, used = 0;
  for (size_t pos = 0; pos < m.n; pos++) {
    for (int k = 0; k < 3; k++) {
      m.p[pos] ^= pattern[k];
      int rc = try_load(&m, err, sizeof err);
      m.p[pos] ^= pattern[k];
      if (rc == 0) {
        nmissed++;
        if (used + 24 < sizeof missed)
          used += (size_t)snprintf(missed + used, sizeof missed - used, " %zu^0x%02x", pos, pattern[k]);
        continue;
      }
      ck_assert_msg(rc == LEARNER_ECORRUPT || rc == LEARNER_EIO, "byte %zu ^ 0x%02x: status %d (%s)", pos,
                    pattern[k], rc, err);
    }
  }
  ck_assert_msg(nmissed == 0, "%zu of %zu byte flips in a %zu-byte state (replay %d) accepted:%s", nmissed,
                3 * m.n, m.n, with_replay, missed);
  /* every truncation 0 .. len-1: the data present is intact, so each fails
   * as a short read */
  size_t full = m.n;
  for (size_t len = 0; len < full; len++) {
    m.n = len;
    int rc = try_load(&m, err, sizeof err);
    ck_assert_msg(rc == LEARNER_EIO && strstr(err, "truncated") != NULL,
                  "replay %d, truncated to %zu of %zu: status %d (%s)", with_replay, len, full, rc, err);
  }
  m.n = full;
  /* the 4 x len failed loads leaked nothing: a leak of even 8 bytes per load
   * would exceed the 64 KiB of slack left for the allocator's own bookkeeping */
  long long heap1 = heap_in_use();
  if (heap0 >= 0)
    ck_assert_msg(heap1 - heap0 < 65536, "heap grew by %lld bytes over %zu failed loads", heap1 - heap0, 4 * full);
  ck_assert_msg(try_load(&m, err, sizeof err) == 0, "restored buffer: %s", err);
  free(m.p);
}

START_TEST(test_corruption) {
  corrupt_every_byte(1);
  corrupt_every_byte(0);
}
END_TEST

/* The header (learner.h: "DQNDLRN\0" u32 version u32 flags u64 config_hash)
 * is covered by no CRC, so another version is otherwise a valid file: it must
 * be refused by name. And a wrong magic says so. */
START_TEST(test_version_and_magic) {
  membuf_t m = {0};
  tiny_state(&m, 1);
  char err[256];
  ck_assert_msg(try_load(&m, err, sizeof err) == 0, "%s", err);
  uint32_t version = (uint32_t)m.p[8] | (uint32_t)m.p[9] << 8 | (uint32_t)m.p[10] << 16 | (uint32_t)m.p[11] << 24;
  ck_assert_uint_eq(version, 1);
  static const uint32_t other[4] = {0, 2, 7, 0xfffffffeu};
  unsigned char keep[4];
  memcpy(keep, m.p + 8, 4);
  for (int k = 0; k < 4; k++) {
    for (int i = 0; i < 4; i++) m.p[8 + i] = (unsigned char)(other[k] >> (8 * i));
    ck_assert_int_eq(try_load(&m, err, sizeof err), LEARNER_ECORRUPT);
    char want[32];
    snprintf(want, sizeof want, "version %u", other[k]);
    ck_assert_msg(strstr(err, want) != NULL, "version %u: message '%s' does not name it", other[k], err);
    /* peek refuses it too */
    learner_config_t pc;
    int wr;
    m.pos = 0;
    ck_assert_int_eq(learner_peek_config(mem_read, &m, &pc, &wr, err, sizeof err), LEARNER_ECORRUPT);
    ck_assert_msg(strstr(err, want) != NULL, "peek, version %u: '%s'", other[k], err);
  }
  memcpy(m.p + 8, keep, 4);
  ck_assert_msg(try_load(&m, err, sizeof err) == 0, "%s", err);
  m.p[0] = 'X';
  ck_assert_int_eq(try_load(&m, err, sizeof err), LEARNER_ECORRUPT);
  ck_assert_msg(strstr(err, "magic") != NULL, "%s", err);
  free(m.p);
}
END_TEST

/* A NUL byte in the config text, with the section's CRC32C and the header's
 * config hash recomputed (as any writer can): a value is read as a C
 * string, so the rest of its line would be skipped unseen. The loader and
 * the walk (dqnctl inspect) both refuse it, by name (found by
 * tests/fuzz/fuzz-checkpoint: the loader took such a file, the walk did not). */
/* A state written before an optional section existed (the replay's episode
 * ends, from before HER) loads, and the walk (dqnctl inspect) passes it too:
 * both read the registry's optional flag (found by tests/fuzz: the walk
 * called such a file's section missing while the loader took it). */
START_TEST(test_optional_section_absent) {
  membuf_t m = {0};
  tiny_state(&m, 1);
  ck_assert(section_tags(&m) & (1u << SEC_R_EPEND));
  size_t off = 24, cut = 0;
  for (;;) { /* drop the section in place */
    uint32_t tag = (uint32_t)le(m.p + off, 4);
    size_t len = 16 + (size_t)le(m.p + off + 8, 8) + 4;
    if (tag == SEC_R_EPEND) {
      memmove(m.p + off, m.p + off + len, m.n - off - len);
      m.n -= len;
      cut = len;
      continue;
    }
    off += len;
    if (tag == SEC_END) break;
  }
  ck_assert(cut > 0 && !(section_tags(&m) & (1u << SEC_R_EPEND)));
  char err[256];
  ck_assert_msg(try_load(&m, err, sizeof err) == 0, "%s", err);
  learner_state_header_t *hd = malloc(sizeof *hd);
  m.pos = 0;
  ck_assert_msg(learner_state_inspect(mem_read, &m, hd, NULL, NULL, err, sizeof err) == 0, "inspect: %s", err);
  free(hd);
  free(m.p);
}
END_TEST

/* the data of section `tag` of state m (its length in *len), and the
 * section's CRC32C recomputed after a test changed that data */
static unsigned char *section_of(membuf_t *m, uint32_t tag, size_t *len) {
  for (size_t off = 24;;) {
    uint32_t t = (uint32_t)le(m->p + off, 4);
    *len = (size_t)le(m->p + off + 8, 8);
    if (t == tag) return m->p + off + 16;
    ck_assert(t != SEC_END);
    off += 16 + *len + 4;
  }
}

static void reseal(unsigned char *d, size_t len) {
  uint32_t crc = learner_crc32c(0, d, len);
  for (int i = 0; i < 4; i++) d[len + (size_t)i] = (unsigned char)(crc >> (8 * i));
}

/* A parameter or Adam moment that is not finite, or a negative second
 * moment, with the section's CRC recomputed: refused by name, never a
 * learner that cannot train (found by tests/fuzz: such states loaded) */
START_TEST(test_nonfinite_state_refused) {
  const uint32_t tags[4] = {SEC_ONLINE, SEC_TARGET, SEC_ADAM_M, SEC_ADAM_V};
  const float vals[4] = {NAN, INFINITY, -INFINITY, -1.0f};
  for (int t = 0; t < 4; t++) {
    membuf_t m = {0};
    tiny_state(&m, 0);
    size_t len;
    unsigned char *d = section_of(&m, tags[t], &len);
    float v = vals[t];
    memcpy(d + 4 * (len / 8), &v, 4); /* an element in the middle */
    reseal(d, len);
    char err[256];
    ck_assert_int_eq(try_load(&m, err, sizeof err), LEARNER_ECORRUPT);
    ck_assert_msg(strstr(err, "not finite") != NULL, "section %u: %s", tags[t], err);
    free(m.p);
  }
}
END_TEST

/* an insertion count near INT64_MAX (the next submit's sums would overflow),
 * with the section's CRC recomputed: refused (a review find) */
START_TEST(test_counters_total_refused) {
  membuf_t m = {0};
  tiny_state(&m, 0);
  size_t len;
  unsigned char *d = section_of(&m, SEC_COUNTERS, &len);
  for (int i = 0; i < 8; i++) d[32 + i] = (unsigned char)(INT64_MAX >> (8 * i)); /* replay_total */
  reseal(d, len);
  char err[256];
  ck_assert_int_eq(try_load(&m, err, sizeof err), LEARNER_ECORRUPT);
  ck_assert_msg(strstr(err, "counters are inconsistent") != NULL, "%s", err);
  free(m.p);
}
END_TEST

/* learner_save refuses what learner_load refuses: a learner whose Adam
 * moments overflowed (batch 1, no gradient clip, lr 10, weight decay 10: its
 * parameters stay finite, learner_state_finite says 0) is not saved, and
 * one that is finite saves and loads. */
START_TEST(test_save_refuses_nonfinite) {
  const char *sets[][2] = {{"state_dim", "1"}, {"trunk_h1", "2"}, {"trunk_h2", "2"}, {"value_hidden", "2"},
                           {"adv_hidden", "2"}, {"atoms", "2"}, {"branches", "2"}, {"batch", "1"},
                           {"replay_capacity", "10"}, {"noisy", "0"}, {"grad_clip", "0"}, {"lr", "10"},
                           {"weight_decay", "10"}};
  learner_config_t c;
  char err[256];
  learner_config_default(&c);
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    ck_assert_int_eq(learner_config_set(&c, sets[i][0], sets[i][1], err, sizeof err), 0);
  learner_t *l;
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  const float st[3] = {0.1f, 0.2f, 0.3f}, r[3] = {1, 0, 1};
  const int32_t a[3] = {0, 1, 0};
  const uint8_t d[3] = {0, 0, 1};
  const learner_transitions_t t = {3, st, a, r, st, d, NULL, NULL};
  ck_assert_int_eq(learner_submit(l, &t, err, sizeof err), 0);
  membuf_t m = {0};
  save_to(l, 0, &m); /* finite: it saves */
  free(m.p);
  int rc = 0;
  for (int k = 0; k < 200 && rc == 0; k++) rc = learner_step(l, 1, NULL, err, sizeof err);
  ck_assert_int_eq(rc, LEARNER_EDIVERGED);
  ck_assert_int_eq(learner_params_finite(l), 1);
  ck_assert_int_eq(learner_state_finite(l), 0);
  membuf_t m2 = {0};
  err[0] = 0;
  ck_assert_int_eq(learner_save(l, 0, mem_write, &m2, err, sizeof err), LEARNER_EDIVERGED);
  ck_assert_msg(strstr(err, "not a state a learner can train from"), "%s", err);
  free(m2.p);
  learner_destroy(l);
}
END_TEST

START_TEST(test_config_nul) {
  membuf_t m = {0};
  tiny_state(&m, 0);
  char err[256];
  ck_assert_uint_eq(le(m.p + 24, 4), SEC_CONFIG);
  size_t len = (size_t)le(m.p + 32, 8);
  unsigned char *text = m.p + 40;
  ck_assert(len > 1 && text[len - 1] == '\n');
  text[len - 1] = 0; /* the last line's value now ends in a NUL */
  uint32_t crc = learner_crc32c(0, text, len);
  uint64_t h = 1469598103934665603ULL; /* the header's hash of the text (FNV-1a, state_sections.c) */
  for (size_t i = 0; i < len; i++) h = (h ^ text[i]) * 1099511628211ULL;
  for (int i = 0; i < 4; i++) text[len + (size_t)i] = (unsigned char)(crc >> (8 * i));
  for (int i = 0; i < 8; i++) m.p[16 + i] = (unsigned char)(h >> (8 * i));
  ck_assert_int_eq(try_load(&m, err, sizeof err), LEARNER_ECORRUPT);
  ck_assert_msg(strstr(err, "NUL byte") != NULL, "%s", err);
  learner_state_header_t *hd = malloc(sizeof *hd);
  m.pos = 0;
  ck_assert_int_eq(learner_state_inspect(mem_read, &m, hd, NULL, NULL, err, sizeof err), LEARNER_ECORRUPT);
  ck_assert_msg(strstr(err, "NUL byte") != NULL, "inspect: %s", err);
  ck_assert(hd->hash_ok && !hd->config_ok);
  free(hd);
  free(m.p);
}
END_TEST

START_TEST(test_config_validation) {
  learner_config_t c;
  char err[256];
  learner_config_default(&c);
  ck_assert_int_eq(learner_config_validate(&c, err, sizeof err), 0);
  ck_assert_int_eq(learner_config_joint_actions(&c), 81);
  struct {
    const char *field, *value, *needle;
  } bad[] = {
      {"atoms", "1", "atoms"},           {"v_min", "10", "v_min"},      {"branches", "", "branches"},
      {"branches", "9,0,3", "branches"}, {"state_dim", "0", "state_dim"}, {"batch", "2000000", "batch"},
      {"lr", "nan", "lr"},               {"gamma", "1.5", "gamma"},     {"branches", "1024,1024,1024,1024", "branches"},
      {"noisy", "maybe", "noisy"},       {"seed", "-3", "seed"},        {"seed", " -1", "seed"},        {"nosuch", "1", "nosuch"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    learner_config_default(&c);
    err[0] = 0;
    int rc = learner_config_set(&c, bad[i].field, bad[i].value, err, sizeof err);
    if (rc == 0) rc = learner_config_validate(&c, err, sizeof err);
    ck_assert_msg(rc == LEARNER_EINVAL, "%s=%s accepted", bad[i].field, bad[i].value);
    ck_assert_msg(strstr(err, bad[i].needle) != NULL, "%s=%s: message '%s' does not name the field", bad[i].field,
                  bad[i].value, err);
  }
  /* a support whose atom spacing is no normal float (the projection's
   * quotient would be NaN or infinite); adam_beta2 1 as a float */
  const char *support[][2] = {{"0", "1e-45"}, {"0", "1e-37"}, {"-1e-37", "0"}};
  for (int i = 0; i < 3; i++) {
    learner_config_default(&c);
    ck_assert_int_eq(learner_config_set(&c, "v_min", support[i][0], err, sizeof err), 0);
    ck_assert_int_eq(learner_config_set(&c, "v_max", support[i][1], err, sizeof err), 0);
    ck_assert_msg(learner_config_validate(&c, err, sizeof err) == LEARNER_EINVAL && strstr(err, "v_max: the support"),
                  "[%s, %s]: %s", support[i][0], support[i][1], err);
  }
  learner_config_default(&c);
  ck_assert_int_eq(learner_config_set(&c, "v_min", "0", err, sizeof err), 0);
  ck_assert_int_eq(learner_config_set(&c, "v_max", "1e-30", err, sizeof err), 0);
  ck_assert_msg(learner_config_validate(&c, err, sizeof err) == 0, "a tiny but normal spacing: %s", err);
  learner_config_default(&c);
  ck_assert_int_eq(learner_config_set(&c, "adam_beta2", "0.99999999", err, sizeof err), LEARNER_EINVAL);
  ck_assert(strstr(err, "adam_beta2") != NULL);
  ck_assert_int_eq(learner_config_set(&c, "adam_beta2", "0.99999994", err, sizeof err), 0); /* the float below 1 */
  ck_assert(c.hp.adam_beta2 < 1.0f && c.hp.adam_beta2 == nextafterf(1.0f, 0.0f));
  /* batch > capacity */
  learner_config_default(&c);
  c.replay_capacity = 100;
  ck_assert_int_eq(learner_config_validate(&c, err, sizeof err), LEARNER_EINVAL);
  ck_assert(strstr(err, "batch") != NULL);
  /* text round trip and hash */
  learner_config_default(&c);
  learner_config_set(&c, "branches", "4,7", err, sizeof err);
  learner_config_set(&c, "lr", "0.000123", err, sizeof err);
  char text[8192];
  size_t n = learner_config_to_text(&c, text, sizeof text);
  learner_config_t d;
  ck_assert_msg(learner_config_from_text(&d, text, n, err, sizeof err) == 0, "%s", err);
  ck_assert(learner_config_hash(&c) == learner_config_hash(&d));
  ck_assert(d.n_branches == 2 && d.branch_sizes[1] == 7 && d.hp.lr == c.hp.lr);
  d.hp.lr = 1e-3f;
  ck_assert(learner_config_hash(&c) != learner_config_hash(&d));
  ck_assert(learner_config_same_shape(&c, &d));
  /* a float field's bounds are floats: per_eps and adam_eps take their
   * documented minimum 1e-12 (no float: it was refused once stored) and the
   * saved text of it reads back; below it is still refused */
  learner_config_default(&c);
  ck_assert_msg(learner_config_set(&c, "per_eps", "1e-12", err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_config_set(&c, "adam_eps", "1e-12", err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_config_set(&c, "adam_beta1", "0.999999", err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_config_validate(&c, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_hparams_validate(&c.hp, err, sizeof err) == 0, "%s", err);
  n = learner_config_to_text(&c, text, sizeof text);
  ck_assert_msg(learner_config_from_text(&d, text, n, err, sizeof err) == 0, "%s", err);
  ck_assert(learner_config_hash(&c) == learner_config_hash(&d));
  ck_assert_int_eq(learner_config_set(&c, "per_eps", "9e-13", err, sizeof err), LEARNER_EINVAL);
  ck_assert_int_eq(learner_config_set(&c, "her_eps", "1e300", err, sizeof err), LEARNER_EINVAL);
  /* bad transitions name the field and index, and change nothing */
  learner_config_t sc = small_config(0, 1);
  learner_t *l;
  ck_assert_int_eq(learner_create(&sc, LEARNER_BACKEND_CPU, &l, err, sizeof err), 0);
  float s[12] = {0}, r[2] = {0, 0};
  int32_t a[2] = {0, 12};
  uint8_t dn[2] = {0, 0};
  learner_transitions_t t = {2, s, a, r, s, dn, NULL, NULL};
  ck_assert_int_eq(learner_submit(l, &t, err, sizeof err), LEARNER_EINVAL);
  ck_assert(strstr(err, "actions[1]") != NULL);
  a[1] = 1;
  s[7] = NAN;
  ck_assert_int_eq(learner_submit(l, &t, err, sizeof err), LEARNER_EINVAL);
  ck_assert_msg(strstr(err, "states[1][1]") != NULL, "%s", err);
  learner_stats_t st;
  learner_get_stats(l, &st);
  ck_assert_int_eq(st.replay_size, 0);
  learner_hparams_t hp;
  learner_get_hparams(l, &hp);
  hp.tau = 2;
  ck_assert_int_eq(learner_set_hparams(l, &hp, err, sizeof err), LEARNER_EINVAL);
  ck_assert(strstr(err, "tau") != NULL);
  learner_destroy(l);
}
END_TEST

/* The published check values ("123456789"): CRC-32C e3069283 (RFC 3720),
 * CRC-32/IEEE cbf43926 (zlib); and chaining equals one pass. */
START_TEST(test_crc_check_values) {
  ck_assert_uint_eq(learner_crc32c(0, "123456789", 9), 0xe3069283u);
  ck_assert_uint_eq(learner_crc32(0, "123456789", 9), 0xcbf43926u);
  ck_assert_uint_eq(learner_crc32c(learner_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
  ck_assert_uint_eq(learner_crc32(learner_crc32(0, "12345678", 8), "9", 1), 0xcbf43926u);
}
END_TEST

int main(void) {
  Suite *s = suite_create("state");
  TCase *tc = tcase_create("serialise");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_roundtrip_plain_per);
  tcase_add_test(tc, test_roundtrip_noisy_uniform);
  tcase_add_test(tc, test_roundtrip_noisy_per);
  tcase_add_test(tc, test_corruption);
  tcase_add_test(tc, test_version_and_magic);
  tcase_add_test(tc, test_config_nul);
  tcase_add_test(tc, test_nonfinite_state_refused);
  tcase_add_test(tc, test_counters_total_refused);
  tcase_add_test(tc, test_save_refuses_nonfinite);
  tcase_add_test(tc, test_optional_section_absent);
  tcase_add_test(tc, test_config_validation);
  tcase_add_test(tc, test_crc_check_values);
  tcase_add_test(tc, test_attention_learner);
  tcase_add_test(tc, test_ensemble_masks);
  tcase_add_test(tc, test_ensemble_k1_identical);
  tcase_add_loop_test(tc, test_k1_pinned_to_before_ensemble, 0, K1_PIN_CONFIGS);
  tcase_add_test(tc, test_old_checkpoints_load);
  tcase_add_test(tc, test_step_stops_whole);
  tcase_add_test(tc, test_ensemble_learner);
  tcase_add_test(tc, test_ensemble_act_select);
  tcase_add_loop_test(tc, test_act_many_states, 0, 3);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
