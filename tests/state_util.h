/*
 * state_util.h — the learners and helpers test-state.c and test-modules.c
 * share: a small config (two branches, 11 atoms, batch 8, a ring of 50), a
 * learner with a shared history and future, its parameters, its saved
 * state, and the walk over a saved state's sections.
 */
#ifndef DQND_TEST_STATE_UTIL_H
#define DQND_TEST_STATE_UTIL_H

#include <check.h>
#include <stdint.h>

#include "learner.h"
#include "testutil.h"

static inline learner_config_t small_config(int noisy, int per) {
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

static inline void params(learner_t *l, int which, float *out) {
  int64_t P = learner_config_num_params(learner_config(l));
  ck_assert_int_eq(learner_get_params(l, which, out, P), 0);
}

/* The shared history: 70 transitions (wrapping the ring of 50), 5 steps and a
 * noisy act (advances the act counter). */
static inline learner_t *trained(const learner_config_t *c) {
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
static inline void future(learner_t *l, learner_stats_t *st, int32_t *act, float q[7]) {
  char err[256];
  const float s0[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};
  tu_feed(l, 5, 2);
  ck_assert_int_eq(learner_step(l, 7, st, err, sizeof err), 0);
  ck_assert_int_eq(learner_act(l, s0, 1, 1, act, q, err, sizeof err), 0);
}

static inline void save_to(learner_t *l, int with_replay, membuf_t *m) {
  char err[256];
  ck_assert_msg(learner_save(l, with_replay, mem_write, m, err, sizeof err) == 0, "%s", err);
}

static inline uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Walks the sections as learner.h lays them out (24-byte header; u32 tag,
 * u32 0, u64 len, payload, u32 crc; END last) and returns the set of tags
 * (bit per tag); the END section must end the buffer exactly. */
static inline uint32_t section_tags(const membuf_t *m) {
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

#endif
