/*
 * state_format.h — the serialised learner state (learner.h describes it):
 * its magic and version, little-endian field helpers, and the section
 * registry. Each section is registered by the module that owns it (name,
 * owner, whether it belongs to the replay, whether only PER has it); the
 * writer (state.c), the loader's checks and `dqnctl inspect`
 * (state_sections.c) walk this registry, so a module adds a section (as
 * HER's episode-end column was) by adding a row here and showing its buffer
 * in learner_bufs_t, not by touching the format code or a backend's save.
 */
#ifndef DQN_STATE_FORMAT_H
#define DQN_STATE_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define STATE_MAGIC "DQNDLRN"
#define STATE_VERSION 1u
#define CHUNK (1u << 20)

static inline void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static inline void put_f32(unsigned char *p, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put_u32(p, u);
}
static inline float get_f32(const unsigned char *p) {
  uint32_t u = get_u32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Where a learner's state lives, as its backend shows it (ops->bufs): host
 * memory (CPU) or device memory (CUDA); ops->copy moves bytes either way.
 * NULL: the learner has no such tensor (no priors, uniform replay). The
 * registry below names each section's buffer by its offset in here, so
 * save and load need no per-backend list of sections. */
typedef struct learner_bufs {
  void *online, *target, *adam_m, *adam_v, *prior;
  void *s, *s2, *a, *r, *done, *ep, *epend, *prio; /* replay columns; prio: the sum tree's leaves */
  void *dt_p, *dt_m, *dt_v; /* the Decision Transformer's parameters and Adam moments (dt_layers > 0) */
  void *dt_ctr;             /* its counters: u64 pre-training steps taken (dt_layers > 0) */
  int64_t size;                                     /* transitions the replay holds */
} learner_bufs_t;

/* a section's length: n_params floats, n_prior floats, size rows, the DT's
 * parameter count in floats, or row_c bytes */
enum { STATE_UNIT_PARAMS = 0, STATE_UNIT_PRIOR = 1, STATE_UNIT_ROW = 2, STATE_UNIT_DT = 3, STATE_UNIT_FIXED = 4 };
/* what a save refuses to write and a load refuses to take (a diverged
 * learner's state, or a file from elsewhere): floats that are not finite,
 * and negative ones; the replay's states and rewards too (Submit refuses
 * them, so a state holding one was not written by a learner) */
enum { STATE_ANY = 0, STATE_FINITE = 1, STATE_FINITE_NONNEG = 2 };

typedef struct state_section {
  uint32_t tag;        /* enum learner_section (backend.h), below 256: never reused */
  const char *name;
  const char *owner;   /* the module that writes it */
  size_t buf;          /* offsetof(learner_bufs_t, its buffer) */
  int unit;            /* STATE_UNIT_*: how its length follows from the config and the replay */
  int replay;          /* 1: a replay column, only in states saved with the replay */
  int per_only;        /* 1: only when prioritized */
  int row_s, row_c;    /* a replay column's bytes per transition: row_s * state_dim + row_c */
  int check;           /* STATE_ANY / STATE_FINITE / STATE_FINITE_NONNEG */
  int priors_only;     /* 1: only when the config has fixed prior heads (ensemble_prior_scale > 0) */
  int optional;        /* 1: a state written before the section existed loads without it */
  int dt_only;         /* 1: only when the config has a Decision Transformer (dt_layers > 0) */
} state_section_t;

/* Each module's sections: S(tag, name, buffer, unit, replay, per_only,
 * row_s, row_c, check). A module with state of its own adds its list here,
 * names it in state_sections.c's table and shows its buffer in
 * learner_bufs_t. */
#define B_(f) offsetof(learner_bufs_t, f)
#define NETWORK_SECTIONS(S)                                                                                      \
  S(SEC_ONLINE, "online parameters", B_(online), STATE_UNIT_PARAMS, 0, 0, 0, 0, STATE_FINITE)                   \
  S(SEC_TARGET, "target parameters", B_(target), STATE_UNIT_PARAMS, 0, 0, 0, 0, STATE_FINITE)
/* the ensemble's fixed prior heads (docs/learner.md, "Ensemble heads"),
 * owner "priors": only when ensemble_prior_scale > 0 (its rows carry
 * priors_only = 1) */
#define PRIORS_SECTIONS(S) S(SEC_PRIORS, "prior heads", B_(prior), STATE_UNIT_PRIOR, 0, 0, 0, 0, STATE_FINITE)
#define OPTIM_SECTIONS(S)                                                                                        \
  S(SEC_ADAM_M, "adam first moments", B_(adam_m), STATE_UNIT_PARAMS, 0, 0, 0, 0, STATE_FINITE)                  \
  S(SEC_ADAM_V, "adam second moments", B_(adam_v), STATE_UNIT_PARAMS, 0, 0, 0, 0, STATE_FINITE_NONNEG)
#define REPLAY_SECTIONS(S)                                                                                       \
  S(SEC_R_S, "replay states", B_(s), STATE_UNIT_ROW, 1, 0, 4, 0, STATE_FINITE)                                  \
  S(SEC_R_S2, "replay next states", B_(s2), STATE_UNIT_ROW, 1, 0, 4, 0, STATE_FINITE)                           \
  S(SEC_R_A, "replay actions", B_(a), STATE_UNIT_ROW, 1, 0, 0, 4, STATE_ANY)                                    \
  S(SEC_R_R, "replay rewards", B_(r), STATE_UNIT_ROW, 1, 0, 0, 4, STATE_FINITE)                                 \
  S(SEC_R_DONE, "replay dones", B_(done), STATE_UNIT_ROW, 1, 0, 0, 1, STATE_ANY)                                \
  S(SEC_R_EP, "replay episode ids", B_(ep), STATE_UNIT_ROW, 1, 0, 0, 8, STATE_ANY)                              \
  S(SEC_R_PRIO, "replay priorities", B_(prio), STATE_UNIT_ROW, 1, 1, 0, 4, STATE_ANY)
/* the replay's episode-end markers (her.h), owner "episodes"; optional: without
 * them (a state from before HER) episodes end where done is 1 */
#define EPISODE_SECTIONS(S) S(SEC_R_EPEND, "replay episode ends", B_(epend), STATE_UNIT_ROW, 1, 0, 0, 1, STATE_ANY)

/* the Decision Transformer's parameters, moments and step counter (docs/learner.md §16), owner
 * "dt": only when dt_layers > 0 (its rows carry dt_only = 1) */
#define DT_SECTIONS(S)                                                                                           \
  S(SEC_DT_PARAMS, "dt parameters", B_(dt_p), STATE_UNIT_DT, 0, 0, 0, 0, STATE_FINITE)                          \
  S(SEC_DT_ADAM_M, "dt adam first moments", B_(dt_m), STATE_UNIT_DT, 0, 0, 0, 0, STATE_FINITE)                  \
  S(SEC_DT_ADAM_V, "dt adam second moments", B_(dt_v), STATE_UNIT_DT, 0, 0, 0, 0, STATE_FINITE_NONNEG)          \
  S(SEC_DT_COUNTERS, "dt counters", B_(dt_ctr), STATE_UNIT_FIXED, 0, 0, 0, 8, STATE_ANY)

/* whether a config has the sections marked priors_only */
#define STATE_CONFIG_HAS_PRIORS(c) ((c)->ensemble_prior_scale > 0)
/* ... and dt_only */
#define STATE_CONFIG_HAS_DT(c) ((c)->dt_layers > 0)

/* Every section a state may hold, in the order they are written after the
 * config and counters records. */
extern const state_section_t state_sections[];
extern const int state_num_sections;
const state_section_t *state_section_find(uint32_t tag);
/* FNV-1a 64 of the canonical config text (learner_config_hash's function),
 * checked on the stored text itself so a state stays loadable when a later
 * build adds config fields. */
uint64_t state_text_hash(const char *text, size_t n);

#endif
