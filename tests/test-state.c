/*
 * test-state.c — the learner's complete state: serialise -> restore -> the
 * next steps are bit-identical to the original's (params, Adam moments,
 * priorities, RNG position, replay ring); without the replay the weights and
 * optimiser still round-trip; every corrupted byte, a truncation, a wrong
 * magic or version is rejected with an error and never yields a learner.
 * Oracle: the original learner itself, compared bit for bit.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "learner.h"
#include "testutil.h"

typedef struct {
  unsigned char *p;
  size_t n, cap, pos;
} membuf_t;

static int mem_write(void *ctx, const void *buf, size_t n) {
  membuf_t *m = ctx;
  if (m->n + n > m->cap) {
    size_t c = (m->cap + n) * 2;
    unsigned char *q = realloc(m->p, c);
    if (!q) return -1;
    m->p = q;
    m->cap = c;
  }
  memcpy(m->p + m->n, buf, n);
  m->n += n;
  return 0;
}
static int mem_read(void *ctx, void *buf, size_t n) {
  membuf_t *m = ctx;
  if (m->pos + n > m->n) return -1;
  memcpy(buf, m->p + m->pos, n);
  m->pos += n;
  return 0;
}

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

static void feed(learner_t *l, int n, uint64_t tag) {
  const learner_config_t *c = learner_config(l);
  int S = c->state_dim, A = learner_config_joint_actions(c);
  float *s = malloc(sizeof(float) * (size_t)(n * S)), *s2 = malloc(sizeof(float) * (size_t)(n * S));
  float *r = malloc(sizeof(float) * (size_t)n);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)n);
  uint8_t *d = malloc((size_t)n);
  double *u = malloc(sizeof(double) * (size_t)(3 * n));
  tu_fill_uniform_f32(s, (int64_t)n * S, -1, 1, 3, tag);
  tu_fill_uniform_f32(s2, (int64_t)n * S, -1, 1, 4, tag);
  tu_fill_uniform_f64(u, 3 * n, 0, 1, 5, tag);
  for (int i = 0; i < n; i++) {
    a[i] = (int32_t)(u[i] * A);
    r[i] = (float)(u[n + i] * 4 - 2);
    d[i] = u[2 * n + i] < 0.2;
  }
  learner_transitions_t t = {n, s, a, r, s2, d, NULL};
  char err[256];
  ck_assert_msg(learner_submit(l, &t, err, sizeof err) == 0, "%s", err);
  free(s), free(s2), free(r), free(a), free(d), free(u);
}

static void params(learner_t *l, int which, float *out) {
  int64_t P = learner_config_num_params(learner_config(l));
  ck_assert_int_eq(learner_get_params(l, which, out, P), 0);
}

static void roundtrip(int noisy, int per) {
  learner_config_t c = small_config(noisy, per);
  learner_t *a, *b;
  char err[256];
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &a, err, sizeof err) == 0, "%s", err);
  feed(a, 70, 1); /* wraps the ring of 50 */
  learner_stats_t sa, sb;
  ck_assert_int_eq(learner_step(a, 5, &sa, err, sizeof err), 0);
  float st[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};
  int32_t act;
  ck_assert_int_eq(learner_act(a, st, 1, 1, &act, NULL, err, sizeof err), 0); /* advances the act counter */

  membuf_t m = {0};
  ck_assert_msg(learner_save(a, 1, mem_write, &m, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &b, err, sizeof err) == 0, "%s", err);

  /* the same future: 7 more steps (crossing a target copy), a noisy act, more data */
  feed(a, 5, 2);
  feed(b, 5, 2);
  ck_assert_int_eq(learner_step(a, 7, &sa, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(b, 7, &sb, err, sizeof err), 0);
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
  int32_t a1, b1;
  float qa[7], qb[7];
  ck_assert_int_eq(learner_act(a, st, 1, 1, &a1, qa, err, sizeof err), 0);
  ck_assert_int_eq(learner_act(b, st, 1, 1, &b1, qb, err, sizeof err), 0);
  ck_assert(a1 == b1 && memcmp(qa, qb, sizeof qa) == 0);

  /* a different seed really gives different numbers (the check above can fail) */
  learner_config_t c2 = c;
  c2.seed = 100;
  learner_t *o;
  ck_assert_int_eq(learner_create(&c2, LEARNER_BACKEND_CPU, &o, err, sizeof err), 0);
  params(o, 0, pb);
  params(a, 0, pa);
  ck_assert(memcmp(pa, pb, sizeof(float) * (size_t)P) != 0);
  learner_destroy(o);

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
  ck_assert_int_eq(learner_step(e, 1, &se, err, sizeof err), LEARNER_EEMPTY);
  learner_destroy(e);

  free(pa), free(pb), free(m.p), free(m2.p);
  learner_destroy(a);
  learner_destroy(b);
}

START_TEST(test_roundtrip_plain_per) { roundtrip(0, 1); }
END_TEST
START_TEST(test_roundtrip_noisy_uniform) { roundtrip(1, 0); }
END_TEST
START_TEST(test_roundtrip_noisy_per) { roundtrip(1, 1); }
END_TEST

START_TEST(test_corruption) {
  learner_config_t c = small_config(1, 1);
  learner_t *a, *b;
  char err[256];
  ck_assert_int_eq(learner_create(&c, LEARNER_BACKEND_CPU, &a, err, sizeof err), 0);
  feed(a, 20, 1);
  membuf_t m = {0};
  ck_assert_int_eq(learner_save(a, 1, mem_write, &m, err, sizeof err), 0);
  /* flip one bit at many positions across the whole file: never a learner */
  size_t step = m.n / 997 + 1;
  int rejected = 0;
  for (size_t pos = 0; pos < m.n; pos += step) {
    m.p[pos] ^= 0x10;
    m.pos = 0;
    b = NULL;
    int rc = learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &b, err, sizeof err);
    ck_assert_msg(rc != 0 && b == NULL, "flip at %zu of %zu accepted", pos, m.n);
    ck_assert(err[0] != 0);
    rejected++;
    m.p[pos] ^= 0x10;
  }
  ck_assert_int_gt(rejected, 100);
  /* every truncation */
  size_t full = m.n;
  for (size_t len = 0; len < full; len += step) {
    m.n = len;
    m.pos = 0;
    b = NULL;
    ck_assert(learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &b, err, sizeof err) != 0 && b == NULL);
  }
  m.n = full;
  m.pos = 0;
  ck_assert_msg(learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &b, err, sizeof err) == 0, "%s", err);
  learner_destroy(b);
  free(m.p);
  learner_destroy(a);
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
      {"noisy", "maybe", "noisy"},       {"seed", "-3", "seed"},        {"nosuch", "1", "nosuch"},
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
  /* bad transitions name the field and index, and change nothing */
  learner_config_t sc = small_config(0, 1);
  learner_t *l;
  ck_assert_int_eq(learner_create(&sc, LEARNER_BACKEND_CPU, &l, err, sizeof err), 0);
  float s[12] = {0}, r[2] = {0, 0};
  int32_t a[2] = {0, 12};
  uint8_t dn[2] = {0, 0};
  learner_transitions_t t = {2, s, a, r, s, dn, NULL};
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
  tcase_add_test(tc, test_config_validation);
  tcase_add_test(tc, test_crc_check_values);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
