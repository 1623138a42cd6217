/* fuzz_common.c — see fuzz_common.h. */
#include "fuzz_common.h"

#include <stdlib.h>
#include <string.h>

#include "philox.h"

const char *const fuzz_tiny_fields[] = {"state_dim=3",  "trunk_h1=4", "trunk_h2=4",         "value_hidden=2",
                                        "adv_hidden=2", "atoms=3",    "branches=2,3",       "batch=4",
                                        "seed=42",      "noisy=1",    "replay_capacity=32", "lr=0.01"};
const int fuzz_n_tiny_fields = (int)(sizeof fuzz_tiny_fields / sizeof fuzz_tiny_fields[0]);

int fuzz_tiny_config(learner_config_t *c, int variant) {
  char err[256];
  learner_config_default(c);
  for (int i = 0; i < fuzz_n_tiny_fields; i++) {
    const char *eq = strchr(fuzz_tiny_fields[i], '=');
    char name[64];
    size_t k = (size_t)(eq - fuzz_tiny_fields[i]);
    memcpy(name, fuzz_tiny_fields[i], k);
    name[k] = 0;
    if (learner_config_set(c, name, eq + 1, err, sizeof err)) return LEARNER_EINVAL;
  }
  if (variant == 1 && (learner_config_set(c, "prioritized", "0", err, sizeof err) ||
                       learner_config_set(c, "noisy", "0", err, sizeof err) ||
                       learner_config_set(c, "ensemble_k", "2", err, sizeof err) ||
                       learner_config_set(c, "ensemble_prior_scale", "1", err, sizeof err)))
    return LEARNER_EINVAL;
  if (variant == 2 && (learner_config_set(c, "dt_layers", "1", err, sizeof err) ||
                       learner_config_set(c, "dt_context", "2", err, sizeof err) ||
                       learner_config_set(c, "dt_embed", "4", err, sizeof err) ||
                       learner_config_set(c, "dt_heads", "2", err, sizeof err) ||
                       learner_config_set(c, "dt_batch", "2", err, sizeof err) ||
                       learner_config_set(c, "dt_max_ep_len", "8", err, sizeof err)))
    return LEARNER_EINVAL;
  return learner_config_validate(c, err, sizeof err);
}

void fuzz_make_batch(fuzz_batch_t *b, int n, uint32_t tag) {
  b->n = n;
  for (int i = 0; i < n * FUZZ_S; i++) {
    philox4_t d = philox_draw(7, 1, tag, (uint32_t)i);
    b->s[i] = (float)(d.v[0] / 4294967296.0) * 2 - 1;
    b->s2[i] = (float)(d.v[1] / 4294967296.0) * 2 - 1;
  }
  for (int i = 0; i < n; i++) {
    b->a[i] = (int32_t)((i * 5 + (int)tag) % FUZZ_ACTIONS);
    b->r[i] = (float)(i % 3) - 1;
    b->d[i] = (i % 7) == 6;
    b->ep[i] = i / 8;
  }
}

int fuzz_tiny_learner(int variant, int transitions, int steps, learner_t **out) {
  learner_config_t c;
  char err[512];
  *out = NULL;
  int rc = fuzz_tiny_config(&c, variant);
  if (!rc) rc = learner_create(&c, LEARNER_BACKEND_CPU, out, err, sizeof err);
  if (rc) return rc;
  if (transitions > 0) {
    fuzz_batch_t b;
    fuzz_make_batch(&b, transitions, 1);
    learner_transitions_t t = {b.n, b.s, b.a, b.r, b.s2, b.d, b.ep, NULL};
    rc = learner_submit(*out, &t, err, sizeof err);
  }
  if (!rc && steps > 0) rc = learner_step(*out, steps, NULL, err, sizeof err);
  if (rc) {
    learner_destroy(*out);
    *out = NULL;
  }
  return rc;
}

typedef struct membuf {
  uint8_t *p;
  size_t n, cap;
} membuf_t;

static int mem_write(void *ctx, const void *buf, size_t n) {
  membuf_t *m = ctx;
  if (m->n + n > m->cap) {
    size_t cap = (m->n + n) * 2;
    uint8_t *p = realloc(m->p, cap);
    if (!p) return -1;
    m->p = p, m->cap = cap;
  }
  memcpy(m->p + m->n, buf, n);
  m->n += n;
  return 0;
}

int fuzz_save_mem(learner_t *l, int with_replay, uint8_t **buf, size_t *n) {
  membuf_t m = {0};
  char err[512];
  int rc = learner_save(l, with_replay, mem_write, &m, err, sizeof err);
  if (rc) {
    free(m.p);
    return rc;
  }
  *buf = m.p, *n = m.n;
  return 0;
}

int fuzz_read(void *ctx, void *buf, size_t n) {
  fuzz_reader_t *r = ctx;
  if (n > r->n - r->pos) return -1;
  memcpy(buf, r->p + r->pos, n);
  r->pos += n;
  return 0;
}
