/*
 * state_sections.c — the state format's section registry (state_format.h),
 * and a walk over a serialised state that builds no learner (dqnctl
 * inspect). No backend: the client links it.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "learner_types.h"
#include "seterr.h"
#include "state_format.h"

static int read_all(learner_read_fn r, void *ctx, void *buf, size_t n, char *err, size_t errlen) {
  if (r(ctx, buf, n)) {
    seterr(err, errlen, "state truncated or unreadable");
    return LEARNER_EIO;
  }
  return LEARNER_OK;
}

#define NETWORK_ROW(tag, name, buf, u, rp, per, rs, rc, ck) {tag, name, "network", buf, u, rp, per, rs, rc, ck, 0, 0, 0},
#define OPTIM_ROW(tag, name, buf, u, rp, per, rs, rc, ck) {tag, name, "optim", buf, u, rp, per, rs, rc, ck, 0, 0, 0},
#define REPLAY_ROW(tag, name, buf, u, rp, per, rs, rc, ck) {tag, name, "replay", buf, u, rp, per, rs, rc, ck, 0, 0, 0},
#define PRIORS_ROW(tag, name, buf, u, rp, per, rs, rc, ck) {tag, name, "priors", buf, u, rp, per, rs, rc, ck, 1, 0, 0},
#define DT_ROW(tag, name, buf, u, rp, per, rs, rc, ck) {tag, name, "dt", buf, u, rp, per, rs, rc, ck, 0, 0, 1},
#define EPISODE_ROW(tag, name, buf, u, rp, per, rs, rc, ck) {tag, name, "episodes", buf, u, rp, per, rs, rc, ck, 0, 1, 0},
const state_section_t state_sections[] = {NETWORK_SECTIONS(NETWORK_ROW) PRIORS_SECTIONS(PRIORS_ROW)
                                              OPTIM_SECTIONS(OPTIM_ROW) REPLAY_SECTIONS(REPLAY_ROW)
                                                  EPISODE_SECTIONS(EPISODE_ROW) DT_SECTIONS(DT_ROW)};
const int state_num_sections = (int)(sizeof state_sections / sizeof state_sections[0]);

const state_section_t *state_section_find(uint32_t tag) {
  for (int i = 0; i < state_num_sections; i++)
    if (state_sections[i].tag == tag) return &state_sections[i];
  return NULL;
}

uint64_t state_text_hash(const char *text, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)text[i];
    h *= 1099511628211ULL;
  }
  return h;
}

const char *learner_section_name(uint32_t tag) {
  if (tag == SEC_END) return "end";
  if (tag == SEC_CONFIG) return "config";
  if (tag == SEC_COUNTERS) return "counters";
  const state_section_t *s = state_section_find(tag);
  return s ? s->name : "unknown";
}

int learner_state_inspect(learner_read_fn r, void *ctx, learner_state_header_t *h, learner_section_cb cb, void *cbctx,
                          char *err, size_t errlen) {
  memset(h, 0, sizeof *h);
  unsigned char hdr[24];
  int rc = read_all(r, ctx, hdr, sizeof hdr, err, errlen);
  if (rc) return rc;
  if (memcmp(hdr, STATE_MAGIC, 8)) {
    seterr(err, errlen, "bad magic (not a dqnd learner state)");
    return LEARNER_ECORRUPT;
  }
  h->version = get_u32(hdr + 8);
  h->flags = get_u32(hdr + 12);
  h->config_hash = get_u64(hdr + 16);
  if (h->version != STATE_VERSION) {
    seterr(err, errlen, "format version %u, this build reads %u", h->version, STATE_VERSION);
    return LEARNER_ECORRUPT;
  }
  uint64_t off = sizeof hdr;
  int bad = 0, seen[256] = {0}, prioritized = 0, priors = 0, dt = 0;
  size_t config_n = 0; /* config bytes in h->config_text: parsed and hashed as the loader does, NULs included */
  unsigned char *buf = malloc(CHUNK);
  if (!buf) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  for (;;) {
    unsigned char sh[16], t[4];
    if ((rc = read_all(r, ctx, sh, 16, err, errlen))) break;
    learner_state_section_t sec = {get_u32(sh), learner_section_name(get_u32(sh)), off, get_u64(sh + 8), 1};
    if (get_u32(sh + 4) != 0) {
      seterr(err, errlen, "section %u at offset %llu: non-zero reserved field", sec.tag, (unsigned long long)off);
      rc = LEARNER_ECORRUPT;
      break;
    }
    uint32_t crc = 0;
    for (uint64_t o = 0; !rc && o < sec.len; o += CHUNK) {
      size_t k = (size_t)(sec.len - o < CHUNK ? sec.len - o : CHUNK);
      if ((rc = read_all(r, ctx, buf, k, err, errlen))) break;
      crc = learner_crc32c(crc, buf, k);
      if (sec.tag == SEC_CONFIG && o == 0) {
        config_n = k < sizeof h->config_text - 1 ? k : sizeof h->config_text - 1;
        memcpy(h->config_text, buf, config_n);
        h->config_text[config_n] = 0;
      }
    }
    if (rc || (rc = read_all(r, ctx, t, 4, err, errlen))) break;
    sec.crc_ok = crc == get_u32(t);
    if (!sec.crc_ok && !bad) {
      bad = 1;
      seterr(err, errlen, "section %u (%s) fails its CRC32C check", sec.tag, sec.name);
    }
    if (sec.tag < 256) seen[sec.tag] = 1;
    if (sec.tag == SEC_CONFIG && sec.crc_ok) {
      learner_config_t c;
      char cerr[256];
      h->config_ok = learner_config_from_text(&c, h->config_text, config_n, cerr, sizeof cerr) == 0;
      prioritized = h->config_ok && c.prioritized;
      priors = h->config_ok && STATE_CONFIG_HAS_PRIORS(&c);
      dt = h->config_ok && STATE_CONFIG_HAS_DT(&c);
      h->hash_ok = state_text_hash(h->config_text, config_n) == h->config_hash;
      if ((!h->hash_ok || !h->config_ok) && !bad) {
        bad = 1;
        if (h->config_ok) seterr(err, errlen, "config hash mismatch");
        else seterr(err, errlen, "config section: %s", cerr);
      }
    }
    if (cb) cb(cbctx, &sec);
    off += 16 + sec.len + 4;
    if (sec.tag == SEC_END) break;
  }
  free(buf);
  h->bytes = off;
  if (rc) return rc;
  /* every section the loader requires (state_format.h's registry) is there */
  for (int i = 0; !bad && i < state_num_sections; i++) {
    const state_section_t *ss = &state_sections[i];
    if ((!ss->replay || (h->flags & 1)) && (!ss->per_only || prioritized) && (!ss->priors_only || priors) && (!ss->dt_only || dt) &&
        !ss->optional && !seen[ss->tag]) {
      bad = 1;
      seterr(err, errlen, "section %u (%s) missing", ss->tag, ss->name);
    }
  }
  if (!bad && (!seen[SEC_CONFIG] || !seen[SEC_COUNTERS])) {
    bad = 1;
    seterr(err, errlen, "the %s section is missing", seen[SEC_CONFIG] ? "counters" : "config");
  }
  return bad ? LEARNER_ECORRUPT : LEARNER_OK;
}
