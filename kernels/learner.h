/*
 * learner.h — the learner API that every backend implements.
 *
 * A learner is one branching dueling C51 Double-DQN (DESIGN.md §2) with its
 * online and target networks, AdamW state, replay buffer and RNG keys. The
 * daemon and the tests see only this header; kernels/learner.c picks the
 * backend (CPU reference or CUDA) behind it, so nothing outside kernels/
 * includes a backend's headers.
 *
 * Conventions
 * - Every function that can fail returns 0 or a negative LEARNER_E* code and,
 *   where it takes `err`, writes a one-line message naming the offending field
 *   into it (always NUL-terminated, truncated to errlen).
 * - Arrays are row-major float32 / int32, little-endian, owned by the caller.
 * - A learner is not thread-safe: one thread (the trainer's worker) drives it.
 *
 * Shapes: B = batch, S = state_dim, Z = atoms, D = number of branches,
 * n_d = size of branch d, A = prod_d n_d (joint actions, flat index with the
 * first branch most significant: for 9,3,3 a = 9*a0 + 3*a1 + a2).
 */
#ifndef DQN_LEARNER_H
#define DQN_LEARNER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LEARNER_MAX_BRANCHES 16
#define LEARNER_MAX_JOINT_ACTIONS (1 << 30) /* flat actions travel as int32 */
#define LEARNER_MAX_ATOMS 256
#define LEARNER_MAX_ENSEMBLE 16 /* ensemble_k's bound (DESIGN.md §6.2) */

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
/* What AUTO resolves to here: CUDA when built and a device is usable, else CPU. */
learner_backend_t learner_backend_default(void);

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
  float ensemble_diversity; /* lambda: the ensemble's diversity bonus weight (DESIGN.md §6.2) */
  int32_t act_select;       /* Act's choice over the K heads: LEARNER_ACT_MEAN / _UCB / _THOMPSON */
  float ucb_c;              /* LEARNER_ACT_UCB: argmax of mean + ucb_c * std over heads */
  /* HER and n-step returns (DESIGN.md §6.3; her_goal_dim, fixed at creation, turns HER on) */
  float her_ratio;          /* rows i < floor(her_ratio * batch) of an eligible episode are relabelled */
  int32_t her_strategy;     /* LEARNER_HER_FUTURE / _FINAL / _EPISODE / _RANDOM */
  float her_eps;            /* success: ||achieved - goal|| <= her_eps */
  int32_t her_norm;         /* LEARNER_HER_NORM_INF / _L2 */
  float her_reward_scale;   /* relabelled reward: (success ? 0 : -1) * her_reward_scale */
  int32_t her_done_on_success; /* 1: a relabelled row's done is its success; 0: done as stored */
  int32_t n_step;           /* n-step returns (1 = one-step), truncated at the episode's end */
} learner_hparams_t;

/* her_strategy's and her_norm's values (config text: future | final | episode | random; inf | l2) */
enum { LEARNER_HER_FUTURE = 0, LEARNER_HER_FINAL = 1, LEARNER_HER_EPISODE = 2, LEARNER_HER_RANDOM = 3 };
enum { LEARNER_HER_NORM_INF = 0, LEARNER_HER_NORM_L2 = 1 };

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
  int32_t attn_tokens;  /* attention over h: T tokens (0 = off; DESIGN.md §6.1) */
  int32_t attn_heads;   /* its heads n_h (>= 1 when on) */
  int32_t ensemble_k;   /* K head sets (1: the plain network; DESIGN.md §6.2) */
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
  learner_hparams_t hp;
} learner_config_t;

/* Fills `c` with the `ref` configuration of DESIGN.md §2. */
void learner_config_default(learner_config_t *c);
/* 0 when usable; else LEARNER_EINVAL and a message naming the field. */
int learner_config_validate(const learner_config_t *c, char *err, size_t errlen);
int learner_hparams_validate(const learner_hparams_t *hp, char *err, size_t errlen);
int learner_config_joint_actions(const learner_config_t *c); /* prod n_d */
int learner_config_q_width(const learner_config_t *c);       /* sum n_d */
int64_t learner_config_num_params(const learner_config_t *c);

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
} learner_field_t;
extern const learner_field_t learner_fields[];
extern const int learner_num_fields;
const learner_field_t *learner_field_find(const char *name);
/* Parses `value` into the field; LEARNER_EINVAL names the field on failure. */
int learner_config_set(learner_config_t *c, const char *name, const char *value, char *err, size_t errlen);
/* Writes the field's value as text (round-trips exactly through _set). */
int learner_config_get(const learner_config_t *c, const learner_field_t *f, char *buf, size_t n);
/* Canonical "name=value\n" text of every field, and its FNV-1a 64 hash.
 * Two configs are the same iff their texts are equal. */
size_t learner_config_to_text(const learner_config_t *c, char *buf, size_t n);
int learner_config_from_text(learner_config_t *c, const char *text, size_t len, char *err, size_t errlen);
uint64_t learner_config_hash(const learner_config_t *c);
/* Equal shapes (everything but .hp): same shapes ⇒ the state can be restored. */
int learner_config_same_shape(const learner_config_t *a, const learner_config_t *b);

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
   * consecutive insertions (DESIGN.md §6.3), so a submitter interleaving
   * several environments sends whole episodes per request. */
  const uint8_t *episode_ends;
} learner_transitions_t;
/* Checks finiteness, action range and flags; names the field and index. */
int learner_transitions_validate(const learner_config_t *c, const learner_transitions_t *t,
                                 char *err, size_t errlen);

/* The stats fields, declared once (CONVENTIONS: fields several layers print)
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

typedef struct learner learner_t;

int learner_create(const learner_config_t *c, learner_backend_t backend, learner_t **out,
                   char *err, size_t errlen);
void learner_destroy(learner_t *l);
const learner_config_t *learner_config(const learner_t *l);
learner_backend_t learner_backend(const learner_t *l);
/* Bytes of device (or host) memory the learner of this config will hold. */
int64_t learner_memory_estimate(const learner_config_t *c);

/* Copies transitions into the replay ring (oldest overwritten when full). New
 * items get the current maximum priority. Validates first; on error nothing
 * is stored. */
int learner_submit(learner_t *l, const learner_transitions_t *t, char *err, size_t errlen);
/* learner_submit for transitions that already passed learner_transitions_validate
 * against this learner's config (the daemon checks on its network thread, so
 * each request is validated once). */
int learner_submit_checked(learner_t *l, const learner_transitions_t *t, char *err, size_t errlen);
/* Runs n training steps. Needs replay_size >= batch (else LEARNER_EEMPTY).
 * Divergence guard, both backends: a step whose global gradient norm (or,
 * on the CPU, batch loss) is not finite changes nothing — no update, no
 * priorities, no target sync, no step count — and the call returns
 * LEARNER_EDIVERGED with st covering the steps that were applied (steps_run)
 * and err naming the step. Parameters change only through applied updates,
 * so a NaN or Inf reaches them only through an update of finite gradients
 * that overflows, which makes the next forward non-finite: the guard stops
 * there (the daemon then checks the kept parameters, dispatch.c). */
int learner_step(learner_t *l, int n, learner_stats_t *st, char *err, size_t errlen);

/* Stopping a long step early (the daemon's Cancel, request deadlines and
 * shutdown). Between steps, learner_step_until looks at the learner's stop
 * flag (learner_stop_flag: any thread may set it to nonzero at any time; the
 * caller clears it before a step it wants to run) and at the deadline; once
 * either fires it runs no further step and returns LEARNER_ESTOPPED, st
 * covering the steps that ran (steps_run < n) and stop->why saying which.
 * The state is always that of a whole number of steps: on the CPU the check
 * comes before each step; on CUDA before each graph replay is launched (at
 * most two groups of 16 are in flight), and the replays already queued read a
 * halt word in the gradient-norm stage and, halted, change nothing (as a
 * diverged step changes nothing). learner_step is learner_step_until with no
 * deadline: it too stops on the flag. */
enum { LEARNER_STOP_NONE = 0, LEARNER_STOP_FLAG = 1, LEARNER_STOP_DEADLINE = 2 };
typedef struct learner_stop {
  double deadline; /* learner_now() seconds; 0 = none */
  int why;         /* out: LEARNER_STOP_* (NONE when every step ran) */
} learner_stop_t;
int learner_step_until(learner_t *l, int n, learner_stop_t *stop, learner_stats_t *st, char *err, size_t errlen);
volatile int *learner_stop_flag(learner_t *l);
/* The clock of deadlines: CLOCK_MONOTONIC, in seconds. */
double learner_now(void);
/* Actions for n states. noisy = 0: greedy with the mean weights; noisy = 1:
 * fresh NoisyNet noise (one draw per call). q (optional) receives [n, sum n_d]
 * per-branch Q values, branch after branch. */
int learner_act(learner_t *l, const float *states, int n, int noisy, int32_t *actions, float *q,
                char *err, size_t errlen);
/* learner_act with the ensemble's outputs (below), states checked finite. */
int learner_act_episode(learner_t *l, const float *states, int n, int noisy, int64_t episode, int32_t *actions,
                        float *q, float *q_var, char *err, size_t errlen);
/* learner_act_episode for 1..2^20 states already checked finite, with the
 * ensemble's outputs: q receives the mean over the K heads, q_var
 * (optional, [n, sum n_d]) the variance over heads (divided by K; 0 when K is
 * 1), and the actions follow act_select. Thompson acts greedily with head
 * philox(seed, ACT_HEAD stream, episode) mod K: one head per episode, chosen
 * again for every request naming that episode. learner_act is episode 0. */
int learner_act_checked(learner_t *l, const float *states, int n, int noisy, int64_t episode, int32_t *actions,
                        float *q, float *q_var, char *err, size_t errlen);
/* tau <= 0: hard copy; else target = tau*online + (1-tau)*target. */
int learner_sync_target(learner_t *l, float tau);
void learner_get_hparams(const learner_t *l, learner_hparams_t *hp);
int learner_set_hparams(learner_t *l, const learner_hparams_t *hp, char *err, size_t errlen);
int learner_get_stats(const learner_t *l, learner_stats_t *st);

/* Parameters in the flat layout of kernels/cpu/net.h (nn.Linear order:
 * weight [out,in] then bias [out]; NoisyNet layers add sigma_w, sigma_b). */
int learner_get_params(const learner_t *l, int which /*0 online, 1 target*/, float *dst, int64_t n);
int learner_set_params(learner_t *l, int which, const float *src, int64_t n);
/* 1 when every online and target parameter is finite, 0 when one is not, or
 * a LEARNER_E* code (the daemon's divergence check). */
int learner_params_finite(learner_t *l);
/* learner_params_finite plus both Adam moments (the second non-negative):
 * what a loaded state must pass (state.c) */
int learner_state_finite(learner_t *l);

/* Copies replay items [first, first+n) (ring positions, 0 <= first, first+n
 * <= replay size) into the given arrays (any may be NULL). */
int learner_read_replay(learner_t *l, int64_t first, int64_t n, float *states, int32_t *actions, float *rewards,
                        float *next_states, uint8_t *dones, int64_t *episode_ids);

/* Complete state, streamed through a callback so a 1M-transition replay never
 * needs a second copy in memory. Format (all little-endian):
 *   "DQNDLRN\0" u32 version u32 flags u64 config_hash
 *   sections: u32 tag, u32 0, u64 len, payload, u32 crc32c(payload)
 *   last section: tag END, len 0.
 * learner_load builds a new learner and fills it; on any error it destroys it
 * and returns the error: nothing else is touched. */
typedef int (*learner_write_fn)(void *ctx, const void *buf, size_t n);  /* 0 = ok */
typedef int (*learner_read_fn)(void *ctx, void *buf, size_t n);         /* 0 = ok, all n bytes */
/* learner_save returns LEARNER_EDIVERGED, with nothing after the bad chunk
 * written, for a state learner_load would refuse: a parameter or an Adam
 * moment that is not finite, or a negative second moment. */
int learner_save(learner_t *l, int with_replay, learner_write_fn w, void *ctx, char *err, size_t errlen);
int learner_load(learner_read_fn r, void *ctx, learner_backend_t backend, learner_t **out,
                 char *err, size_t errlen);
/* Reads only the header and config section (to validate before loading). */
int learner_peek_config(learner_read_fn r, void *ctx, learner_config_t *c, int *with_replay,
                        char *err, size_t errlen);

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

/* 1 if the CUDA backend is compiled in and a device is usable. */
int learner_cuda_available(char *name, size_t namelen);
/* The CUDA device's memory in use (total minus free: every process's, as
 * nvidia-smi shows) and in total: 0, LEARNER_EUNSUPPORTED with no CUDA in
 * this build, LEARNER_EDEVICE when the query fails. Cheap (cudaMemGetInfo:
 * it does not wait for the device's work), but in a process with no CUDA
 * context yet it creates one, which holds device memory: call it only once
 * a learner runs on CUDA (the daemon's metrics do). */
int learner_device_memory(int64_t *used, int64_t *total);

#ifdef __cplusplus
}
#endif
#endif
