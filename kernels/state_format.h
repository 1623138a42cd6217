/*
 * state_format.h — the serialised learner state (learner.h describes it):
 * its magic and version, little-endian field helpers, and the section
 * registry. Each section is registered by the module that owns it (name,
 * owner, whether it belongs to the replay, whether only PER has it); the
 * writer (state.c), the loader's checks and `dqnctl inspect`
 * (state_sections.c) walk this registry, so a module adds a section (HER's goal
 * and episode columns, the Decision Transformer's parameters) by adding a row
 * here and its bytes in its backend, not by touching the format code.
 */
#ifndef DQN_STATE_FORMAT_H
#define DQN_STATE_FORMAT_H

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

typedef struct state_section {
  uint32_t tag;        /* enum learner_section (backend.h), below 256: never reused */
  const char *name;
  const char *owner;   /* the module that writes it */
  int replay;          /* 1: a replay column, only in states saved with the replay */
  int per_only;        /* 1: only when prioritized */
  int row_s, row_c;    /* a replay column's bytes per transition: row_s * state_dim + row_c */
  int priors_only;     /* 1: only when the config has fixed prior heads (ensemble_prior_scale > 0) */
  int optional;        /* 1: a state written before the section existed loads without it */
} state_section_t;

/* Each module's sections: S(tag, name, replay, per_only, row_s, row_c). A
 * module with state of its own adds its list here and names it in
 * state_sections.c's table. */
#define NETWORK_SECTIONS(S)                                                                                      \
  S(SEC_ONLINE, "online parameters", 0, 0, 0, 0)                                                                 \
  S(SEC_TARGET, "target parameters", 0, 0, 0, 0)
/* the ensemble's fixed prior heads (DESIGN.md §6.2), owner "priors": only
 * when ensemble_prior_scale > 0 (its rows carry priors_only = 1) */
#define PRIORS_SECTIONS(S) S(SEC_PRIORS, "prior heads", 0, 0, 0, 0)
#define OPTIM_SECTIONS(S)                                                                                        \
  S(SEC_ADAM_M, "adam first moments", 0, 0, 0, 0)                                                                \
  S(SEC_ADAM_V, "adam second moments", 0, 0, 0, 0)
#define REPLAY_SECTIONS(S)                                                                                       \
  S(SEC_R_S, "replay states", 1, 0, 4, 0)                                                                        \
  S(SEC_R_S2, "replay next states", 1, 0, 4, 0)                                                                  \
  S(SEC_R_A, "replay actions", 1, 0, 0, 4)                                                                       \
  S(SEC_R_R, "replay rewards", 1, 0, 0, 4)                                                                       \
  S(SEC_R_DONE, "replay dones", 1, 0, 0, 1)                                                                      \
  S(SEC_R_EP, "replay episode ids", 1, 0, 0, 8)                                                                  \
  S(SEC_R_PRIO, "replay priorities", 1, 1, 0, 4)
/* the replay's episode-end markers (her.h), owner "episodes"; optional: without
 * them (a state from before HER) episodes end where done is 1 */
#define EPISODE_SECTIONS(S) S(SEC_R_EPEND, "replay episode ends", 1, 0, 0, 1)

/* whether a config has the sections marked priors_only */
#define STATE_CONFIG_HAS_PRIORS(c) ((c)->ensemble_prior_scale > 0)

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
