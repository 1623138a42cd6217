/*
 * state.c — saving and loading a learner's complete state (learner.h: the
 * format; state_format.h: the section registry). learner_load builds a new
 * learner and fills it; on any error it destroys it: nothing else is touched.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learner.h"
#include "learner_impl.h"
#include "seterr.h"
#include "state_format.h"

/* learner_counters_t as a fixed little-endian record */
#define COUNTERS_BYTES (8 * 5 + 4 + (8 * 3 + 4 + 4 * 6))
static void counters_encode(const learner_counters_t *c, unsigned char *p) {
  put_u64(p, c->step); p += 8;
  put_u64(p, c->act_count); p += 8;
  put_u64(p, (uint64_t)c->replay_size); p += 8;
  put_u64(p, (uint64_t)c->replay_head); p += 8;
  put_u64(p, (uint64_t)c->replay_total); p += 8;
  put_f32(p, c->max_leaf); p += 4;
  const learner_stats_t *s = &c->last;
  put_u64(p, s->step); p += 8;
  put_u64(p, (uint64_t)s->replay_size); p += 8;
  put_u64(p, (uint64_t)s->replay_total); p += 8;
  put_u32(p, (uint32_t)s->steps_run); p += 4;
  float f[6] = {s->loss_mean, s->loss_last, s->grad_norm_mean, s->grad_norm_last, s->q_mean, s->per_beta};
  for (int i = 0; i < 6; i++, p += 4) put_f32(p, f[i]);
}
static void counters_decode(learner_counters_t *c, const unsigned char *p) {
  memset(c, 0, sizeof *c);
  c->step = get_u64(p); p += 8;
  c->act_count = get_u64(p); p += 8;
  c->replay_size = (int64_t)get_u64(p); p += 8;
  c->replay_head = (int64_t)get_u64(p); p += 8;
  c->replay_total = (int64_t)get_u64(p); p += 8;
  c->max_leaf = get_f32(p); p += 4;
  learner_stats_t *s = &c->last;
  s->step = get_u64(p); p += 8;
  s->replay_size = (int64_t)get_u64(p); p += 8;
  s->replay_total = (int64_t)get_u64(p); p += 8;
  s->steps_run = (int32_t)get_u32(p); p += 4;
  float *f[6] = {&s->loss_mean, &s->loss_last, &s->grad_norm_mean, &s->grad_norm_last, &s->q_mean, &s->per_beta};
  for (int i = 0; i < 6; i++, p += 4) *f[i] = get_f32(p);
}

static int write_all(learner_write_fn w, void *ctx, const void *buf, size_t n, char *err, size_t errlen) {
  if (w(ctx, buf, n)) {
    seterr(err, errlen, "write failed");
    return LEARNER_EIO;
  }
  return LEARNER_OK;
}

static int write_section_mem(learner_write_fn w, void *ctx, uint32_t tag, const void *buf, uint64_t n, char *err,
                             size_t errlen) {
  unsigned char h[16], t[4];
  put_u32(h, tag);
  put_u32(h + 4, 0);
  put_u64(h + 8, n);
  put_u32(t, learner_crc32c(0, buf, (size_t)n));
  int rc = write_all(w, ctx, h, 16, err, errlen);
  if (!rc && n) rc = write_all(w, ctx, buf, (size_t)n, err, errlen);
  if (!rc) rc = write_all(w, ctx, t, 4, err, errlen);
  return rc;
}

static int write_section_backend(learner_t *l, learner_write_fn w, void *ctx, int sec, unsigned char *bounce,
                                 char *err, size_t errlen) {
  int64_t n = learner_section_bytes(l, (uint32_t)sec);
  unsigned char h[16], t[4];
  put_u32(h, (uint32_t)sec);
  put_u32(h + 4, 0);
  put_u64(h + 8, (uint64_t)n);
  int rc = write_all(w, ctx, h, 16, err, errlen);
  uint32_t crc = 0;
  for (int64_t off = 0; !rc && off < n; off += CHUNK) {
    int64_t k = n - off < CHUNK ? n - off : CHUNK;
    rc = learner_section_read(l, (uint32_t)sec, off, k, bounce);
    if (rc) {
      seterr(err, errlen, "reading section %d from the backend failed", sec);
      return rc;
    }
    /* what learner_load refuses is not written: a parameter or an Adam
     * moment that is not finite, or a negative second moment (a diverged
     * trainer's moments can overflow while its parameters stay finite) */
    const state_section_t *reg = state_section_find((uint32_t)sec);
    const int moments = reg->check == STATE_FINITE_NONNEG, checked = reg->check != STATE_ANY;
    for (int64_t i = 0; checked && i + 4 <= k; i += 4) {
      const float v = get_f32(bounce + i);
      if (!isfinite(v) || (moments && v < 0)) {
        seterr(err, errlen, "state: section %d holds %g, not a state a learner can train from: not written", sec,
               (double)v);
        return LEARNER_EDIVERGED;
      }
    }
    crc = learner_crc32c(crc, bounce, (size_t)k);
    rc = write_all(w, ctx, bounce, (size_t)k, err, errlen);
  }
  put_u32(t, crc);
  if (!rc) rc = write_all(w, ctx, t, 4, err, errlen);
  return rc;
}

/* whether a registered section belongs in a state of this config */
static int section_wanted(const state_section_t *s, const learner_config_t *c, int with_replay) {
  return (!s->replay || with_replay) && (!s->per_only || c->prioritized) &&
         (!s->priors_only || STATE_CONFIG_HAS_PRIORS(c)) && (!s->dt_only || STATE_CONFIG_HAS_DT(c));
}

int learner_save(learner_t *l, int with_replay, learner_write_fn w, void *ctx, char *err, size_t errlen) {
  unsigned char hdr[24];
  memcpy(hdr, STATE_MAGIC, 8);
  put_u32(hdr + 8, STATE_VERSION);
  put_u32(hdr + 12, with_replay ? 1u : 0u);
  put_u64(hdr + 16, learner_config_hash(&l->cfg));
  int rc = write_all(w, ctx, hdr, sizeof hdr, err, errlen);
  if (rc) return rc;
  char text[8192];
  size_t tn = learner_config_to_text(&l->cfg, text, sizeof text);
  if ((rc = write_section_mem(w, ctx, SEC_CONFIG, text, tn, err, errlen))) return rc;
  learner_counters_t c;
  if ((rc = l->ops->get_counters(l->impl, &c))) return rc;
  if (!with_replay) c.replay_size = c.replay_head = 0;
  unsigned char cb[COUNTERS_BYTES];
  counters_encode(&c, cb);
  if ((rc = write_section_mem(w, ctx, SEC_COUNTERS, cb, sizeof cb, err, errlen))) return rc;
  unsigned char *bounce = malloc(CHUNK);
  if (!bounce) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  for (int i = 0; !rc && i < state_num_sections; i++)
    if (section_wanted(&state_sections[i], &l->cfg, with_replay))
      rc = write_section_backend(l, w, ctx, (int)state_sections[i].tag, bounce, err, errlen);
  free(bounce);
  if (!rc) rc = write_section_mem(w, ctx, SEC_END, "", 0, err, errlen);
  return rc;
}

static int read_all(learner_read_fn r, void *ctx, void *buf, size_t n, char *err, size_t errlen) {
  if (r(ctx, buf, n)) {
    seterr(err, errlen, "state truncated or unreadable");
    return LEARNER_EIO;
  }
  return LEARNER_OK;
}

static int read_section_mem(learner_read_fn r, void *ctx, uint32_t want, void *buf, size_t cap, size_t *len,
                            char *err, size_t errlen) {
  unsigned char h[16], t[4];
  int rc = read_all(r, ctx, h, 16, err, errlen);
  if (rc) return rc;
  uint32_t tag = get_u32(h);
  uint64_t n = get_u64(h + 8);
  if (tag != want || n > cap || get_u32(h + 4) != 0) {
    seterr(err, errlen, "state: expected section %u (<= %zu bytes), found section %u of %llu bytes", want, cap,
           tag, (unsigned long long)n);
    return LEARNER_ECORRUPT;
  }
  if ((rc = read_all(r, ctx, buf, (size_t)n, err, errlen)) || (rc = read_all(r, ctx, t, 4, err, errlen)))
    return rc;
  if (learner_crc32c(0, buf, (size_t)n) != get_u32(t)) {
    seterr(err, errlen, "state: section %u fails its CRC32C check", tag);
    return LEARNER_ECORRUPT;
  }
  *len = (size_t)n;
  return LEARNER_OK;
}

/* Header + config section. */
static int read_head(learner_read_fn r, void *ctx, learner_config_t *c, int *with_replay, char *err,
                     size_t errlen) {
  unsigned char hdr[24];
  int rc = read_all(r, ctx, hdr, sizeof hdr, err, errlen);
  if (rc) return rc;
  if (memcmp(hdr, STATE_MAGIC, 8)) {
    seterr(err, errlen, "state: bad magic (not a dqnd learner state)");
    return LEARNER_ECORRUPT;
  }
  if (get_u32(hdr + 8) != STATE_VERSION) {
    seterr(err, errlen, "state: format version %u, this build reads %u", get_u32(hdr + 8), STATE_VERSION);
    return LEARNER_ECORRUPT;
  }
  uint32_t flags = get_u32(hdr + 12);
  if (flags > 1) {
    seterr(err, errlen, "state: unknown flags 0x%x", flags);
    return LEARNER_ECORRUPT;
  }
  *with_replay = (int)(flags & 1);
  char text[8192];
  size_t tn;
  if ((rc = read_section_mem(r, ctx, SEC_CONFIG, text, sizeof text - 1, &tn, err, errlen))) return rc;
  char cerr[256];
  if (learner_config_from_text(c, text, tn, cerr, sizeof cerr)) {
    seterr(err, errlen, "state: config section: %s", cerr);
    return LEARNER_ECORRUPT;
  }
  /* the stored text's hash: a later build's extra fields take their defaults */
  if (state_text_hash(text, tn) != get_u64(hdr + 16)) {
    seterr(err, errlen, "state: config hash mismatch");
    return LEARNER_ECORRUPT;
  }
  return LEARNER_OK;
}

int learner_peek_config(learner_read_fn r, void *ctx, learner_config_t *c, int *with_replay, char *err,
                        size_t errlen) {
  return read_head(r, ctx, c, with_replay, err, errlen);
}

static int load_into(learner_t *l, learner_read_fn r, void *ctx, int with_replay, char *err, size_t errlen) {
  unsigned char cb[COUNTERS_BYTES];
  size_t n;
  int rc = read_section_mem(r, ctx, SEC_COUNTERS, cb, sizeof cb, &n, err, errlen);
  if (rc) return rc;
  if (n != sizeof cb) {
    seterr(err, errlen, "state: counters section has %zu bytes, expected %zu", n, sizeof cb);
    return LEARNER_ECORRUPT;
  }
  learner_counters_t c;
  counters_decode(&c, cb);
  const learner_config_t *cfg = &l->cfg;
  /* (a leaf past the range a step keeps: an earlier build's; clamped, not refused) */
  if (isfinite(c.max_leaf) && c.max_leaf > 0)
    c.max_leaf = c.max_leaf < REPLAY_LEAF_MIN ? REPLAY_LEAF_MIN : c.max_leaf > REPLAY_LEAF_MAX ? REPLAY_LEAF_MAX : c.max_leaf;
  if (c.step > ((uint64_t)1 << 62)) { /* Adam's bias correction at step + 1 = 0 wrapped would divide by 0 */
    seterr(err, errlen, "state: counters: step %llu is past 2^62", (unsigned long long)c.step);
    return LEARNER_ECORRUPT;
  }
  if (c.replay_size < 0 || c.replay_size > cfg->replay_capacity || c.replay_head < 0 ||
      c.replay_head >= cfg->replay_capacity || c.replay_total < c.replay_size ||
      c.replay_total > ((int64_t)1 << 62) || /* room to count on: insertion counts are int64 sums */
      (c.replay_size < cfg->replay_capacity && c.replay_head != c.replay_size) || !(c.max_leaf > 0) ||
      !isfinite(c.max_leaf) || (!with_replay && c.replay_size)) {
    seterr(err, errlen, "state: counters are inconsistent (replay size %lld, head %lld, total %lld, capacity %lld)",
           (long long)c.replay_size, (long long)c.replay_head, (long long)c.replay_total,
           (long long)cfg->replay_capacity);
    return LEARNER_ECORRUPT;
  }
  if (!with_replay) c.replay_head = 0;
  if ((rc = l->ops->set_counters(l->impl, &c))) return rc;

  int seen[256] = {0}; /* section tags are below 256 (state_format.h) */
  unsigned char *bounce = malloc(CHUNK);
  if (!bounce) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  for (;;) {
    unsigned char h[16], t[4];
    if ((rc = read_all(r, ctx, h, 16, err, errlen))) break;
    uint32_t tag = get_u32(h);
    uint64_t len = get_u64(h + 8);
    if (get_u32(h + 4) != 0) {
      seterr(err, errlen, "state: section %u has a non-zero reserved field", tag);
      rc = LEARNER_ECORRUPT;
      break;
    }
    if (tag == SEC_END) {
      if (len != 0 || (rc = read_all(r, ctx, t, 4, err, errlen)) || get_u32(t) != learner_crc32c(0, "", 0)) {
        if (!rc) seterr(err, errlen, "state: bad end section");
        rc = rc ? rc : LEARNER_ECORRUPT;
      }
      break;
    }
    const state_section_t *sec = state_section_find(tag);
    int known = sec && section_wanted(sec, &l->cfg, with_replay);
    int64_t want = known ? learner_section_bytes(l, tag) : -1;
    if (!known || seen[tag] || (int64_t)len != want) {
      seterr(err, errlen, "state: unexpected section %u of %llu bytes (expected %lld)", tag,
             (unsigned long long)len, (long long)want);
      rc = LEARNER_ECORRUPT;
      break;
    }
    seen[tag] = 1;
    uint32_t crc = 0;
    /* what a save refuses to write (the section's check) a load refuses too,
     * once the CRC says the bytes are the file's: a NaN in a replay state or
     * a prior head would make every step diverge, stuck on the same draws */
    const int checked = sec->check != STATE_ANY, nonneg = sec->check == STATE_FINITE_NONNEG;
    int bad = 0; /* 1: a value fails the check; 2: the DT's step counter past 2^62 */
    float badv = 0;
    for (uint64_t off = 0; !rc && off < len; off += CHUNK) {
      size_t k = (size_t)(len - off < CHUNK ? len - off : CHUNK);
      if ((rc = read_all(r, ctx, bounce, k, err, errlen))) break;
      crc = learner_crc32c(crc, bounce, k);
      for (size_t i = 0; checked && !bad && i + 4 <= k; i += 4) {
        const float v = get_f32(bounce + i);
        if (!isfinite(v) || (nonneg && v < 0)) bad = 1, badv = v;
      }
      if (tag == SEC_DT_COUNTERS && off == 0 && k >= 8) { /* the DT's step: refused past 2^62, as the DQN's */
        uint64_t dt_step;
        memcpy(&dt_step, bounce, 8);
        if (dt_step > ((uint64_t)1 << 62)) bad = 2;
      }
      if (tag == SEC_R_PRIO) /* leaves of earlier builds: into the range a step keeps (backend.h) */
        for (size_t i = 0; i + 4 <= k; i += 4) {
          const float v = get_f32(bounce + i);
          if (isfinite(v) && v > 0 && (v < REPLAY_LEAF_MIN || v > REPLAY_LEAF_MAX))
            put_f32(bounce + i, v < REPLAY_LEAF_MIN ? REPLAY_LEAF_MIN : REPLAY_LEAF_MAX);
        }
      rc = learner_section_write(l, tag, (int64_t)off, (int64_t)k, bounce);
    }
    if (rc) break;
    if ((rc = read_all(r, ctx, t, 4, err, errlen))) break;
    if (crc != get_u32(t)) {
      seterr(err, errlen, "state: section %u fails its CRC32C check", tag);
      rc = LEARNER_ECORRUPT;
      break;
    }
    if (bad) {
      if (bad == 2) seterr(err, errlen, "state: dt counters: a step past 2^62");
      else
        seterr(err, errlen,
               "state: section %u (%s) holds %g: a value not finite (or a negative second moment) is not a state a "
               "learner can train from", tag, sec->name, (double)badv);
      rc = LEARNER_ECORRUPT;
      break;
    }
  }
  free(bounce);
  if (rc) return rc;
  for (int i = 0; i < state_num_sections; i++)
    if (section_wanted(&state_sections[i], cfg, with_replay) && !seen[state_sections[i].tag] &&
        !state_sections[i].optional) {
      seterr(err, errlen, "state: section %u (%s) missing", state_sections[i].tag, state_sections[i].name);
      return LEARNER_ECORRUPT;
    }
  rc = l->ops->load_done(l->impl);
  if (rc) {
    seterr(err, errlen, "state: %s (its sections pass their CRCs, but the backend rejects their contents: an "
                        "action, flag or priority out of range)", learner_strerror(rc));
    return rc;
  }
  /* (parameters and moments were checked as they were read: their sections'
   * STATE_FINITE checks above, what learner_state_finite would find) */
  return LEARNER_OK;
}

int learner_load(learner_read_fn r, void *ctx, learner_backend_t backend, learner_t **out, char *err,
                 size_t errlen) {
  return learner_load_in(r, ctx, backend, 1, NULL, 0, out, err, errlen);
}

int learner_load_in(learner_read_fn r, void *ctx, learner_backend_t backend, int n, learner_group_t **g, int i,
                    learner_t **out, char *err, size_t errlen) {
  *out = NULL;
  learner_config_t c;
  int with_replay;
  int rc = read_head(r, ctx, &c, &with_replay, err, errlen);
  if (rc) return rc;
  if (g && !*g && i == 0 && (rc = learner_group_create(&c, n, backend, g, err, errlen))) return rc;
  learner_t *l;
  if ((rc = learner_create_in(&c, backend, g ? *g : NULL, i, &l, err, errlen))) return rc;
  if ((rc = load_into(l, r, ctx, with_replay, err, errlen))) {
    learner_destroy(l);
    return rc;
  }
  l->loaded_replay = with_replay;
  *out = l;
  return LEARNER_OK;
}
