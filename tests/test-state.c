/*
 * test-state.c — the learner's complete state: serialise -> restore -> the
 * next steps are bit-identical to the original's (params, Adam moments,
 * priorities, RNG position, replay ring); two learners with the same history
 * and seed are bit-identical and with another seed differ (so the bit-for-bit
 * comparison can fail); without the replay the weights and optimiser still
 * round-trip. Corruption: every byte of a saved state (replay included) xor
 * 0x01, 0x80 and 0xff, every truncation 0..len-1, a wrong magic and a wrong
 * format version are each rejected with an error and never yield a learner.
 * Oracle: the original learner itself, compared bit for bit. Checkpoints of
 * an older daemon load and step as it did; the K = 1 step is pinned to the
 * parameters the commit before the ensemble computed; a step stopped by
 * deadline or flag stops between whole steps; bad configs and transitions
 * are refused naming the field. The modules' learners (attention, ensemble
 * heads) are test-modules.c's.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#include <malloc.h>
#define HAVE_MALLINFO2 1
#endif

#include "learner.h"
#include "backend.h"
#include "learner_impl.h" /* learner_section_read: a loaded leaf */
#include "testutil.h"
#include "feed.h"
#include "k1_pin.h"
#include "stop_check.h"
#include "state_util.h"

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

/* What a client could not have submitted, in a state with its replay and
 * the section's CRC recomputed: a NaN in a replay state, next state or
 * reward is refused naming the section (it loaded, and every batch that
 * drew it diverged, stuck on the same draws); a step counter of 2^64 - 1
 * (Adam's bias correction at step + 1 = 0) is refused; a PER leaf past the
 * range a step keeps (3e38: the sum turns infinite) loads clamped to it. */
START_TEST(test_replay_from_outside) {
  const uint32_t tags[3] = {SEC_R_S, SEC_R_S2, SEC_R_R};
  const char *names[3] = {"(replay states)", "(replay next states)", "(replay rewards)"};
  for (int t = 0; t < 3; t++) {
    membuf_t m = {0};
    tiny_state(&m, 1);
    size_t len;
    unsigned char *d = section_of(&m, tags[t], &len);
    float v = t == 1 ? INFINITY : NAN;
    memcpy(d + 4 * (len / 8), &v, 4);
    reseal(d, len);
    char err[300];
    ck_assert_int_eq(try_load(&m, err, sizeof err), LEARNER_ECORRUPT);
    ck_assert_msg(strstr(err, names[t]) && strstr(err, "not finite"), "%s", err);
    free(m.p);
  }
  membuf_t m = {0};
  tiny_state(&m, 1);
  size_t len;
  unsigned char *d = section_of(&m, SEC_COUNTERS, &len);
  memset(d, 0xff, 8); /* step */
  reseal(d, len);
  char err[300];
  ck_assert_int_eq(try_load(&m, err, sizeof err), LEARNER_ECORRUPT);
  ck_assert_msg(strstr(err, "past 2^62"), "%s", err);
  free(m.p);
  memset(&m, 0, sizeof m);
  tiny_state(&m, 1);
  d = section_of(&m, SEC_R_PRIO, &len);
  const float big = 3e38f;
  memcpy(d, &big, 4);
  reseal(d, len);
  learner_t *l = NULL;
  m.pos = 0;
  ck_assert_msg(learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  float leaf = 0;
  ck_assert_int_eq(learner_section_read(l, SEC_R_PRIO, 0, 4, &leaf), 0);
  ck_assert_float_eq(leaf, REPLAY_LEAF_MAX);
  learner_destroy(l);
  free(m.p);
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
  /* too many parameter tensors names what multiplies them (with attention it
   * said "model: more than 512 parameter tensors", naming no field) */
  {
    learner_config_default(&c);
    const char *kv[][2] = {{"branches", "3,2"}, {"ensemble_k", "16"}, {"noisy", "1"}, {"ensemble_prior_scale", "1"},
                           {"attn_tokens", "8"}, {"attn_heads", "2"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
      ck_assert_int_eq(learner_config_set(&c, kv[i][0], kv[i][1], err, sizeof err), 0);
    ck_assert_int_eq(learner_config_validate(&c, err, sizeof err), LEARNER_EINVAL);
    ck_assert_msg(strstr(err, "ensemble_k: the network would need more than 512 parameter tensors"), "%s", err);
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
  ck_assert_msg(strstr(err, "adam_beta2: 0.99999999 is outside [0, 0.99999994]") != NULL, "%s", err); /* not "[0, 1]" */
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
  tcase_add_test(tc, test_replay_from_outside);
  tcase_add_test(tc, test_counters_total_refused);
  tcase_add_test(tc, test_save_refuses_nonfinite);
  tcase_add_test(tc, test_optional_section_absent);
  tcase_add_test(tc, test_config_validation);
  tcase_add_test(tc, test_crc_check_values);
  tcase_add_loop_test(tc, test_k1_pinned_to_before_ensemble, 0, K1_PIN_CONFIGS);
  tcase_add_test(tc, test_old_checkpoints_load);
  tcase_add_test(tc, test_step_stops_whole);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
