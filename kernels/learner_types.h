/*
 * learner_types.h — the learner's vocabulary: what a client of the daemon
 * may include (libdqnd, dqnctl, the environments) with no learner behind it.
 * The config and its table of fields, the hyperparameters, the transitions,
 * the stats fields, the limits and status codes, the backends' names, and
 * the state format's walk and checksums (dqnctl inspect, fetched
 * checkpoints). Implemented by libdqnconfig (config.c, checksum.c,
 * state_sections.c): no BLAS, no CUDA. The learner API itself is learner.h.
 *
 * Shapes: B = batch, S = state_dim, Z = atoms, D = number of branches,
 * n_d = size of branch d, A = prod_d n_d (joint actions, flat index with the
 * first branch most significant: for 9,3,3 a = 9*a0 + 3*a1 + a2).
 */
#ifndef DQN_LEARNER_TYPES_H
#define DQN_LEARNER_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LEARNER_MAX_BRANCHES 16
#define LEARNER_MAX_JOINT_ACTIONS (1 << 30) /* flat actions travel as int32 */
#define LEARNER_MAX_ATOMS 256
#define LEARNER_MAX_ENSEMBLE 16 /* ensemble_k's bound (docs/learner.md, "Ensemble heads") */
#define LEARNER_MAX_STEPS 1000000       /* steps one learner_step call (one Step command) runs at most */
#define LEARNER_MAX_ACT_STATES (1 << 20) /* states one Act takes at most */
#define LEARNER_MAX_POPULATION 1024    /* members of one population (population.h) at most */

enum learner_status {
  LEARNER_OK = 0,
  LEARNER_EINVAL = -1,      /* bad argument or config: err names the field */
  LEARNER_ENOMEM = -2,      /* host or device allocation failed */
  LEARNER_EDEVICE = -3,     /* a device (CUDA) call failed */
  LEARNER_ECORRUPT = -4,    /* a serialised state failed its checks */
  LEARNER_EIO = -5,         /* the read/write callback failed */
  LEARNER_EUNSUPPORTED = -6,/* backend not built or not usable here */
  LEARNER_EEMPTY = -7,      /* step with fewer transitions than needed */
  LEARNER_EDIVERGED = -8,   /* a step's gradient (or loss) was not finite: it and the rest of the
                               call were not applied; the state is the last good step's */
  LEARNER_ESTOPPED = -9,    /* learner_step_until stopped early (its flag or deadline): the steps
                               that ran are whole, st counts them */
};
const char *learner_strerror(int status);

typedef enum learner_backend {
  LEARNER_BACKEND_AUTO = 0, /* CUDA when a usable GPU is present, else CPU */
  LEARNER_BACKEND_CPU = 1,
  LEARNER_BACKEND_CUDA = 2,
} learner_backend_t;
const char *learner_backend_name(learner_backend_t b);

/* The hyperparameters a client may change between steps (SetHyperparams).
 * They never change a shape, so the CUDA backend keeps them in device memory
 * and never re-captures its graph for them. */
typedef struct learner_hparams {
  float lr;             /* AdamW learning rate */
  float gamma;          /* discount */
  float tau;            /* Polyak factor per step; 0 = hard copy every target_period */
  int32_t target_period;/* steps between hard target copies (tau == 0) */
  float weight_decay;   /* decoupled (AdamW) */
  float grad_clip;      /* global L2 norm clip; 0 = off */
  float adam_beta1, adam_beta2, adam_eps;
  float per_beta0;      /* IS exponent at step 0, annealed linearly to 1 ... */
  int64_t per_beta_steps; /* ... over this many steps (0 = stay at beta0) */
  float per_eps;        /* priority = (loss_i + per_eps)^alpha */
  /* Continuous training (read by the daemon, not by the learner): after each
   * SubmitTransitions the trainer runs steps so that samples drawn (steps x
   * batch) keep pace with samples_per_insert x transitions inserted, once the
   * replay holds min_replay transitions (Reverb's rate limiter, in spirit).
   * 0 = off: steps run only on Step. */
  float samples_per_insert;
  int64_t min_replay;
  float ensemble_diversity; /* lambda: the ensemble's diversity bonus weight (docs/learner.md §8) */
  int32_t act_select;       /* Act's choice over the K heads: LEARNER_ACT_MEAN / _UCB / _THOMPSON */
  float ucb_c;              /* LEARNER_ACT_UCB: argmax of mean + ucb_c * std over heads */
  /* HER and n-step returns (docs/learner.md §9; her_goal_dim, fixed at creation, turns HER on) */
  float her_ratio;          /* rows i < floor(her_ratio * batch) of an eligible episode are relabelled */
  int32_t her_strategy;     /* LEARNER_HER_FUTURE / _FINAL / _EPISODE / _RANDOM */
  float her_eps;            /* success: ||achieved - goal|| <= her_eps */
  int32_t her_norm;         /* LEARNER_HER_NORM_INF / _L2 */
  float her_reward_scale;   /* relabelled reward: (success ? 0 : -1) * her_reward_scale */
  int32_t her_done_on_success; /* 1: a relabelled row's done is its success; 0: done as stored */
  int32_t n_step;           /* n-step returns (1 = one-step), truncated at the episode's end */
  /* the Decision Transformer's optimiser (docs/learner.md §16; dt_layers turns the DT on) */
  float dt_lr;              /* AdamW learning rate after the warm-up */
  int64_t dt_warmup;        /* pre-training steps of linear warm-up: lr x min(1, (t + 1) / dt_warmup) */
  float dt_weight_decay;    /* decoupled */
  float dt_clip;            /* global grad-norm clip; 0 = off */
} learner_hparams_t;

/* her_strategy's and her_norm's values (config text: future | final | episode | random; inf | l2) */
enum { LEARNER_HER_FUTURE = 0, LEARNER_HER_FINAL = 1, LEARNER_HER_EPISODE = 2, LEARNER_HER_RANDOM = 3 };
enum { LEARNER_HER_NORM_INF = 0, LEARNER_HER_NORM_L2 = 1 };

/* dt_handover's values (config text: none | trunk1) */
enum { LEARNER_DT_HANDOVER_NONE = 0, LEARNER_DT_HANDOVER_TRUNK1 = 1 };

/* act_select's values (config text: mean | ucb | thompson) */
enum { LEARNER_ACT_MEAN = 0, LEARNER_ACT_UCB = 1, LEARNER_ACT_THOMPSON = 2 };

typedef struct learner_config {
  int32_t state_dim;
  int32_t trunk_h1, trunk_h2;
  int32_t value_hidden, adv_hidden;
  int32_t atoms;
  float v_min, v_max;
  int32_t n_branches;
  int32_t branch_sizes[LEARNER_MAX_BRANCHES];
  int32_t batch;
  int64_t replay_capacity;
  float leaky_slope;
  int32_t noisy;        /* factorised Gaussian NoisyNet on the head layers */
  float noisy_sigma0;
  int32_t attn_tokens;  /* attention over h: T tokens (0 = off; docs/learner.md §7) */
  int32_t attn_heads;   /* its heads n_h (>= 1 when on) */
  int32_t ensemble_k;   /* K head sets (1: the plain network; docs/learner.md §8) */
  int32_t her_goal_dim; /* G: HER on when > 0; states are obs ‖ achieved goal (G) ‖ desired goal (G) */
  float ensemble_mask_p;      /* bootstrap mask probability p in (0, 1] */
  float ensemble_prior_scale; /* beta_p: fixed random prior heads' scale (0: none) */
  int32_t double_dqn;   /* argmax by the online net (1) or the target net (0) */
  int32_t prioritized;  /* PER sum-tree (1) or uniform (0) replay */
  float per_alpha;
  uint64_t seed;
  int32_t tensor_cores; /* CUDA: 0 = fp32, 1 = TF32 operands (fp32 accumulate) */
  int32_t cuda_graph;   /* CUDA: 1 = the step replays one captured graph; 0 = plain stream launches */
  int32_t cuda_gemm_occupancy; /* CUDA: blocks per SM the split-K planner aims for (1..4; 1 suits
                                * four or more trainers sharing a GPU) */
  /* the Decision Transformer (docs/learner.md §16): 0 layers = off */
  int32_t dt_layers, dt_context, dt_embed, dt_heads, dt_max_ep_len, dt_batch;
  float dt_rtg_scale;   /* returns-to-go are divided by it */
  int32_t dt_handover;  /* LEARNER_DT_HANDOVER_NONE / _TRUNK1 */
  learner_hparams_t hp;
} learner_config_t;

/* Fills `c` with the `ref` configuration of docs/learner.md §2-4. */
void learner_config_default(learner_config_t *c);
/* 0 when usable; else LEARNER_EINVAL and a message naming the field. */
int learner_config_validate(const learner_config_t *c, char *err, size_t errlen);
int learner_hparams_validate(const learner_hparams_t *hp, char *err, size_t errlen);
int learner_config_joint_actions(const learner_config_t *c); /* prod n_d */
int learner_config_q_width(const learner_config_t *c);       /* sum n_d */
int64_t learner_config_num_params(const learner_config_t *c);
int64_t learner_config_num_prior(const learner_config_t *c); /* the fixed prior heads' floats; 0 without */
int64_t learner_config_num_dt(const learner_config_t *c);    /* the Decision Transformer's floats; 0 without */

/* The config table (Redis habit: one table feeds validation, defaults, the
 * command line and SetHyperparams), one list of rows per module
 * (kernels/config_rows.h). `branches` is the one array field: "9,3,3". */
typedef enum { LCF_INT32, LCF_INT64, LCF_UINT64, LCF_FLOAT, LCF_BOOL, LCF_BRANCHES } learner_field_type_t;
typedef struct learner_field {
  const char *name;
  learner_field_type_t type;
  size_t offset;        /* into learner_config_t */
  double min, max;      /* inclusive bounds (checked by validate) */
  int hparam;           /* 1: lives in .hp and may change between steps */
  const char *help;
  const char *def;      /* the default, as text (what learner_config_default sets) */
  int quiet;            /* 1: in the canonical text only when not at its default (config_rows.h, DT_ROWS) */
} learner_field_t;
extern const learner_field_t learner_fields[];
extern const int learner_num_fields;
const learner_field_t *learner_field_find(const char *name);
/* Parses `value` into the field; LEARNER_EINVAL names the field on failure. */
int learner_config_set(learner_config_t *c, const char *name, const char *value, char *err, size_t errlen);
/* The field's bounds as text, "[min, max]": integers whole (2147483648, not
 * 2.14748e+09), floats to their last digit (0.99999994, not 1). */
void learner_field_bounds(const learner_field_t *f, char *buf, size_t n);
/* Writes the field's value as text (round-trips exactly through _set). */
int learner_config_get(const learner_config_t *c, const learner_field_t *f, char *buf, size_t n);
/* Canonical "name=value\n" text of every field, and its FNV-1a 64 hash.
 * Two configs are the same iff their texts are equal. */
size_t learner_config_to_text(const learner_config_t *c, char *buf, size_t n);
int learner_config_from_text(learner_config_t *c, const char *text, size_t len, char *err, size_t errlen);
uint64_t learner_config_hash(const learner_config_t *c);
/* Equal shapes (everything but .hp): same shapes ⇒ the state can be restored. */
int learner_config_same_shape(const learner_config_t *a, const learner_config_t *b);
/* The first field outside .hp in which a and b differ (NULL: the same shapes),
 * for a message that names it. */
const learner_field_t *learner_config_shape_diff(const learner_config_t *a, const learner_config_t *b);

/* A batch of transitions in structure-of-arrays form. */
typedef struct learner_transitions {
  int64_t n;
  const float *states;      /* [n, S] */
  const int32_t *actions;   /* [n] flat joint actions in [0, A) */
  const float *rewards;     /* [n] */
  const float *next_states; /* [n, S] */
  const uint8_t *dones;     /* [n] 0 or 1 (terminal: no bootstrap) */
  const int64_t *episode_ids; /* [n] or NULL (then all 0) */
  /* [n] or NULL: 1 where an episode ends without being terminal (truncated);
   * an episode also ends where done = 1. The replay's episodes are runs of
   * consecutive insertions (docs/learner.md §9), so a submitter interleaving
   * several environments sends whole episodes per request. */
  const uint8_t *episode_ends;
} learner_transitions_t;
/* Checks finiteness, action range and flags; names the field and index. */
int learner_transitions_validate(const learner_config_t *c, const learner_transitions_t *t,
                                 char *err, size_t errlen);

/* The stats fields, declared once (an X-macro: fields several layers print)
 * and expanded where each layer needs them: this struct, the daemon's and
 * libdqnd's TrainerStats (proto/dqnd/v1/dqnd.proto, same names) and dqnctl's
 * printers. X(type, name, kind): kind is U64, I64, I32 or F32.
 * kernels/state.c stores them in the counters section as a fixed record,
 * field by field: a new field here is not saved until that record (and the
 * state version) grows with it. */
#define LEARNER_STATS_FIELDS(X)                                                                     \
  X(uint64_t, step, U64)         /* optimiser steps taken in total */                              \
  X(int64_t, replay_size, I64)   /* transitions held */                                            \
  X(int64_t, replay_total, I64)  /* transitions ever submitted */                                  \
  X(int32_t, steps_run, I32)     /* steps run by this call */                                      \
  X(float, loss_mean, F32)       /* mean over this call's steps of the batch loss */               \
  X(float, loss_last, F32)                                                                         \
  X(float, grad_norm_mean, F32)  /* pre-clip global gradient norm */                               \
  X(float, grad_norm_last, F32)                                                                    \
  X(float, q_mean, F32)          /* mean over steps, batch and branches of Q_d(s, a_d) */          \
  X(float, per_beta, F32)        /* IS exponent used at the last step */

typedef struct learner_stats {
#define LEARNER_STATS_MEMBER(type, name, kind) type name;
  LEARNER_STATS_FIELDS(LEARNER_STATS_MEMBER)
#undef LEARNER_STATS_MEMBER
} learner_stats_t;

/* The Decision Transformer's pre-training stats (learner_pretrain_dt in
 * learner.h; docs/learner.md §16) */
typedef struct learner_dt_stats {
  uint64_t dt_step;       /* pre-training steps taken in total */
  int32_t steps_run;      /* by this call */
  int32_t handed_over;    /* 1: this call copied the DT's state embedding into trunk1 (dt_handover) */
  float loss_mean, loss_last, grad_norm_mean, grad_norm_last; /* over this call's steps; norms before the clip */
  float lr_last;          /* the warm-up's learning rate at the last step */
} learner_dt_stats_t;
/* A live episode's last n (1..dt_context) steps, oldest first: each step's
 * return-to-go (still wanted, in reward units: the learner divides it by
 * dt_rtg_scale; the caller subtracts each reward received), state,
 * timestep (>= 0) and action (flat joint; the last step's is not read: it
 * is the one being chosen). */
typedef struct learner_dt_window {
  int n;
  const float *rtg;         /* [n] */
  const float *states;      /* [n, S] */
  const int32_t *actions;   /* [n] */
  const int32_t *timesteps; /* [n] */
} learner_dt_window_t;
/* Serialised states travel through these (learner_save / learner_load in
 * learner.h, and the walk below). */
typedef int (*learner_write_fn)(void *ctx, const void *buf, size_t n);  /* 0 = ok */
typedef int (*learner_read_fn)(void *ctx, void *buf, size_t n);         /* 0 = ok, all n bytes */

/* A population's state (population.h, docs/population.md): LEARNER_POP_MAGIC
 * (8 bytes with its NUL) u32 LEARNER_POP_VERSION u32 0 u64 N, N learner
 * states, LEARNER_POP_END (8 bytes) u64 N. */
#define LEARNER_POP_MAGIC "DQNDPOP"
#define LEARNER_POP_VERSION 1u
#define LEARNER_POP_END "DQNDPEND"

/* Walks a serialised state without building a learner (dqnctl inspect): the
 * header, the config text, and each section's tag, place, length and CRC.
 * Returns 0 when every check passes; LEARNER_ECORRUPT (err says the first
 * failure) after walking on past CRC failures; other errors stop the walk. */
typedef struct learner_state_header {
  uint32_t version, flags;   /* flags bit 0: the replay is included */
  uint64_t config_hash;
  int config_ok, hash_ok;    /* the config text parses; its hash matches the header */
  char config_text[8192];
  uint64_t bytes;            /* bytes walked */
} learner_state_header_t;
typedef struct learner_state_section {
  uint32_t tag;
  const char *name;
  uint64_t offset, len;      /* of the section header; payload length */
  int crc_ok;
} learner_state_section_t;
typedef void (*learner_section_cb)(void *ctx, const learner_state_section_t *s);
int learner_state_inspect(learner_read_fn r, void *ctx, learner_state_header_t *h, learner_section_cb cb, void *cbctx,
                          char *err, size_t errlen);
const char *learner_section_name(uint32_t tag);

/* CRC32C (Castagnoli): the state format's per-section checks. */
uint32_t learner_crc32c(uint32_t crc, const void *buf, size_t n);
/* CRC-32 (IEEE, as zlib's crc32): whole-file checksums of checkpoints. Not
 * CRC32C, because a file made of sections that each end in their own CRC32C
 * has the same CRC32C whatever the sections hold (the trailers cancel the
 * payloads: CRC is linear), which makes it blind to content. */
uint32_t learner_crc32(uint32_t crc, const void *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
