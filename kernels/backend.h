/*
 * backend.h — what a backend (kernels/cpu, kernels/cuda) provides to
 * kernels/learner.c. Internal to kernels/: the daemon never sees it.
 *
 * learner.c validates every argument before calling an op, so ops may assume
 * valid shapes and values. State travels in numbered sections of raw
 * little-endian bytes, so a checkpoint written by one backend loads into the
 * other; learner.c owns the file format, the backend only moves bytes.
 */
#ifndef DQN_BACKEND_H
#define DQN_BACKEND_H

#include "dqnd_build_config.h"
#include "learner_types.h"
#include "net_layout.h"
#include "state_format.h"
#include "stop.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A sum-tree leaf (priority^alpha) that a step sets is kept in
 * [REPLAY_LEAF_MIN, REPLAY_LEAF_MAX] on both backends: per_alpha up to 10
 * could make it 0 or infinite (a saved state with such a leaf is refused on
 * load), and the largest leaf times the largest capacity (2^31) stays a
 * finite sum. (Leaves loaded from a state are only checked to be positive
 * and finite: states of earlier builds keep loading.) */
#define REPLAY_LEAF_MIN 1e-30f
#define REPLAY_LEAF_MAX 1e28f

enum learner_section {
  SEC_END = 0,
  SEC_CONFIG = 1,   /* canonical config text (learner.c) */
  SEC_COUNTERS = 2, /* learner_counters_t, little-endian */
  SEC_ONLINE = 3,   /* float [n_params] */
  SEC_TARGET = 4,
  SEC_ADAM_M = 5,
  SEC_ADAM_V = 6,
  SEC_PRIORS = 7,   /* float [n_prior]: the fixed prior heads (docs/learner.md §8); only with priors */
  SEC_R_S = 10,     /* float [size, S] */
  SEC_R_S2 = 11,
  SEC_R_A = 12,     /* int32 [size] */
  SEC_R_R = 13,     /* float [size] */
  SEC_R_DONE = 14,  /* uint8 [size] */
  SEC_R_EP = 15,    /* int64 [size] */
  SEC_R_PRIO = 16,  /* float [size] leaf values (priority^alpha); PER only */
  SEC_R_EPEND = 17, /* u8 [size] episode-end markers (truncations; her.h) */
  SEC_DT_PARAMS = 20,   /* float [n_dt]: the Decision Transformer's parameters (docs/learner.md §16) */
  SEC_DT_ADAM_M = 21,   /* float [n_dt] */
  SEC_DT_ADAM_V = 22,   /* float [n_dt] */
  SEC_DT_COUNTERS = 23, /* u64 pre-training steps taken */
};

/* dt_act's refusal where the logits it would take the argmax of are not finite */
#define DT_ACT_NONFINITE                                                                                          \
  "the Decision Transformer's logits are not finite: its forward overflows (diverged parameters, or states or a "  \
  "return-to-go too large for it)"

/* Everything but tensors that a restore needs to continue bit-identically. */
typedef struct learner_counters {
  uint64_t step;      /* optimiser steps taken (Adam's t = step) */
  uint64_t act_count; /* noisy Act calls (counter of the ACT noise stream) */
  int64_t replay_size, replay_head, replay_total;
  float max_leaf;     /* PER: priority^alpha given to new items */
  learner_stats_t last; /* the last step call's stats, for GetStats */
} learner_counters_t;

struct learner_dt_stats; /* learner.h */

typedef struct learner_backend_ops {
  const char *name;
  int (*create)(const learner_config_t *c, void **impl, char *err, size_t errlen);
  void (*destroy)(void *impl);
  int (*submit)(void *impl, const learner_transitions_t *t, char *err, size_t errlen);
  /* stop: learner.c's checks (learner_should_stop), made between steps */
  int (*step)(void *impl, int n, learner_stop_ctl_t *stop, learner_stats_t *st, char *err, size_t errlen);
  int (*act)(void *impl, const float *s, int n, int noisy, int64_t episode, int32_t *a, float *q, float *q_var, char *err,
             size_t errlen);
  int (*sync_target)(void *impl, float tau);
  int (*set_hparams)(void *impl, const learner_hparams_t *hp);
  int (*get_counters)(void *impl, learner_counters_t *c);
  int (*set_counters)(void *impl, const learner_counters_t *c);
  /* Where the state's tensors live (state_format.h: the section registry
   * names each section's buffer and length, so this is the backend's whole
   * part in save and load), and a copy between them and host memory:
   * to_backend 1: dst is the backend's, src the host's; 0: the reverse. */
  void (*bufs)(void *impl, learner_bufs_t *b);
  int (*copy)(void *impl, void *dst, const void *src, size_t n, int to_backend);
  /* After all sections are written: rebuild derived state (PER trees). */
  int (*load_done)(void *impl);
  /* The backend's own bytes beyond the state's tensors (learner.c counts
   * those from the registry): workspaces, activations, the PER tree. */
  int64_t (*workspace_estimate)(const learner_config_t *c);
  /* Bytes it may still allocate (host MemAvailable; the device's free
   * memory), -1 when unknown. */
  int64_t (*memory_free)(void);
  /* Populations (population.c; docs/population.md): members that step in the
   * same launches. NULL where the backend steps each member alone.
   * group_create: a group for n members of configs shaped as c (seeds and
   * hyperparameters may differ), LEARNER_EUNSUPPORTED when these shapes
   * cannot share launches (the members then step alone). group_member:
   * member i, created as create does, inside the group. group_step: n steps
   * of every member in the same launches, those with skip[i] computed but
   * not applied (diverged earlier); per member its statistics and code
   * (LEARNER_OK, LEARNER_EDIVERGED, LEARNER_ESTOPPED; errs[i], errlen
   * each); a device failure returns its code. group_destroy: after its
   * members. */
  int (*group_create)(const learner_config_t *c, int n, void **group, char *err, size_t errlen);
  int (*group_member)(void *group, int i, const learner_config_t *c, void **impl, char *err, size_t errlen);
  int (*group_step)(void *group, int n, const int *skip, learner_stop_ctl_t *stop, learner_stats_t *st, int *rcs,
                    char (*errs)[512], char *err, size_t errlen);
  void (*group_destroy)(void *group);
  /* The Decision Transformer (docs/learner.md §16), NULL where the backend
   * has none (learner.c then refuses dt_layers > 0 on it). dt_step: n
   * pre-training steps as learner_pretrain_dt says (st's handed_over is
   * learner.c's). dt_act: the flat action for one window of K steps,
   * left-padded (mask 0), the return-to-go already divided by the scale;
   * LEARNER_EDIVERGED with DT_ACT_NONFINITE where a logit at the state token
   * is not finite. */
  int (*dt_step)(void *impl, int n, learner_stop_ctl_t *stop, struct learner_dt_stats *st, char *err, size_t errlen);
  int (*dt_act)(void *impl, const float *states, const float *rtg, const int32_t *actions, const int32_t *timesteps,
                const float *mask, int32_t *action, char *err, size_t errlen);
  /* group_dt_step: n pre-training steps of every member of the group in the
   * same launches (each member's window checked by its dt_step with n 0
   * first), per member its statistics and code as dt_step gives them
   * (errs[i]); LEARNER_EUNSUPPORTED when these shapes cannot share launches
   * (the members then pre-train alone); a device failure returns its code.
   * NULL where the backend has no groups. */
  int (*group_dt_step)(void *group, int n, learner_stop_ctl_t *stop, struct learner_dt_stats *st, int *rcs,
                       char (*errs)[512], char *err, size_t errlen);
  /* Bytes of workspace_estimate that a population counts once rather than
   * once a member (learner_pop_memory_estimate): CUDA's allowance for what
   * depends on the device beyond what a member needs (measured: the lone
   * learner leaves 16-52 MiB uncounted, a member ~2; test-gpu-memory). */
  int64_t population_shared;
} learner_backend_ops_t;

extern const learner_backend_ops_t learner_cpu_ops;
#if DQN_HAVE_CUDA_LEARNER
extern const learner_backend_ops_t learner_cuda_ops;
#endif
/* The initial parameters (nn.Linear / NoisyLinear init from Philox), shared by
 * both backends so they start from the same weights. */
void learner_cpu_init_params(const net_layout_t *L, const learner_config_t *c, float *p);
/* The fixed prior heads' initial (and only) values (docs/learner.md §8; learner_cpu.c). */
void learner_cpu_init_priors(const net_layout_t *L, const learner_config_t *c, float *prior);
/* Act over K heads (act_heads.c): the head thompson follows in this episode
 * (0 unless thompson with K > 1); then, from one state's Q of every head (head
 * k's at qh + k kstride, [sum n_d] each), the mean (qrow) and variance (var)
 * over heads per branch action, and the flat action by act_select sel. */
int learner_act_head(const learner_config_t *c, int64_t episode);
int32_t learner_act_heads(const net_layout_t *L, int sel, float ucb_c, int head, const float *qh, size_t kstride,
                          float *qrow, float *var);

#if DQN_HAVE_CUDA
/* 1 and the device's name when a CUDA device is usable; else 0 and why. */
int cuda_probe(char *name, size_t namelen);
/* cudaMemGetInfo of the current device: 0, or -1 (error cleared). */
int cuda_mem_info(size_t *free_b, size_t *total_b);
#endif

#ifdef __cplusplus
}
#endif
#endif
