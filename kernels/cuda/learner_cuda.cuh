/*
 * learner_cuda.cuh — the CUDA learner's state, shared by its files:
 * learner_cuda.cu (the backend ops), step.cu (the training step's graph) and
 * replay.cu (the replay ring's sampling and sum trees). Included by .cu
 * files only.
 *
 * Shapes: B batch, S state_dim, P parameters, N noise length, C capacity,
 * T = next power of two >= C (tree leaves).
 */
#ifndef DQN_CUDA_LEARNER_CUDA_CUH
#define DQN_CUDA_LEARNER_CUDA_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "../backend.h"
#include "generic_loss.cuh"
#include "generic_forward.cuh"

/* device-resident counters and per-call statistics */
typedef struct dev_state {
  unsigned long long step;
  unsigned long long seed; /* the config's: a population's kernels read each member's here (pz.cuh) */
  long long size, head, total; /* the ring (total: insertions ever, for the bootstrap masks) */
  float max_leaf;
  float grad_norm, loss_last, beta_last, q_last;
  float gn_last; /* the last applied step's gradient norm (grad_norm is each replay's: NaN when halted or diverged) */
  double loss_sum, gn_sum, q_sum;
  double applied; /* steps of this call that were applied (the divergence guard skips the others) */
  double halted;  /* replays of this call that a stop halted (their norm CUDA_HALT_BITS: nothing applied) */
  int halt_next;  /* the halt word: set by a copy on its own stream when a stop fires, read by each replay's norm
                   * stage (step.cu) */
  int tg_stale;   /* nonzero: the target's pack is not the target's (pack.cu): set by the host's writes and by the
                   * step that changes the target, cleared by a step that does not */
} dev_state_t;

typedef struct cuda_learner {
  learner_config_t cfg;
  net_layout_t L;
  cudaStream_t st;
  float *on, *tg, *grad, *m, *v;     /* [P] */
  float *prior;                      /* [n_prior] fixed prior heads (docs/learner.md §8), or NULL */
  float *s, *s2, *r;                 /* replay */
  int32_t *a;
  uint8_t *done;
  long long *ep;
  uint8_t *epend;                    /* [C] episode-end markers (her.h) */
  long long *ep_first, *ep_last;     /* [C] each slot's episode bounds, insertion counts (her.h) */
  float *gdisc;                      /* [B] per-row discounts the HER/n-step kernel writes */
  int her_in_graph;                  /* the step runs the HER/n-step kernel (her_goal_dim > 0 or n_step > 1) */
  float *sum, *mn;                   /* [2T] PER trees */
  int *own;                          /* [T] PER: the last batch slot that sampled each leaf, -1 between steps */
  long long T;
  long long *idx;                    /* [B] */
  double *norm_scratch;              /* [CUDA_NORM_SCRATCH] */
  float *prio;                       /* [B] */
  learner_hparams_t *hp;             /* device copy */
  dev_state_t *ds;                   /* device */
  cuda_dqn_ws_t ws;
  cuda_acts_t act;                   /* Act buffers (grown on demand) */
  float *act_x, *act_weff, *act_noise;
  int32_t *act_a;
  void *staging;                     /* pinned, for submit/act */
  size_t staging_bytes;
  cudaGraph_t graph;                 /* step.cu: the captured training step */
  cudaGraphExec_t exec;
  int *halt_one;                     /* pinned, holds 1: copied to ds->halt_next on halt_st when a stop fires */
  cudaStream_t halt_st;              /* step.cu: the halt's copy, beside the replays */
  cudaEvent_t group_done[2];         /* step.cu: the ends of the last two groups of replays in flight */
  /* host mirrors */
  long long size, head, total;
  long long open_first;              /* the insertion count the open episode began at */
  unsigned long long act_count;
  learner_stats_t last;
  /* the Decision Transformer (dt_layers > 0; learner_dt_cuda.cu), else NULL */
  struct cuda_dt_train *dt;
  struct cuda_dt *dt_act;            /* Act's forward on one window */
  cudaGraph_t dt_graph;              /* its captured pre-training step */
  cudaGraphExec_t dt_exec;
} cuda_learner_t;

/* A population's members in the same launches (group.cu; step.cu's
 * cuda_group_step): member i's buffers at member 0's + i x stride bytes */
typedef struct cuda_group {
  learner_config_t cfg;  /* member 0's (the others differ in seed and hyperparameters only) */
  int n;
  size_t stride;
  char *base;            /* the members' one allocation */
  cuda_learner_t **m;    /* [n], set as they are created */
  cudaGraph_t graph;     /* the step of every member, captured on member 0's streams */
  cudaGraphExec_t exec;
  int her;               /* the HER/n-step kernel captured in it (any member's) */
  unsigned char *resets; /* pinned [n][CUDA_GROUP_RESET_BYTES]: each call's per-member sums and halt words */
  int *halts;            /* pinned [n] ones: a stop's halt words */
  int dt_shared;         /* the Decision Transformer's pre-training step runs every member in one launch */
  cudaGraph_t dt_graph;  /* that step, captured on member 0's streams (learner_dt_cuda.cu) */
  cudaGraphExec_t dt_exec;
} cuda_group_t;
/* dev_state_t from loss_sum through halt_next */
#define CUDA_GROUP_RESET_BYTES (offsetof(dev_state_t, halt_next) + sizeof(int) - offsetof(dev_state_t, loss_sum))

/* PER's beta at step t (replay_beta in kernels/cpu/replay.c) */
static __device__ __forceinline__ float beta_at(const learner_hparams_t *hp, unsigned long long t) {
  if (hp->per_beta_steps <= 0) return hp->per_beta0;
  double f = (double)t / (double)hp->per_beta_steps;
  if (f > 1) f = 1;
  return (float)(hp->per_beta0 + (1.0 - hp->per_beta0) * f);
}

#ifdef __cplusplus
extern "C" {
#endif

/* learner_dt_cuda.cu: the Decision Transformer's state, and the dt_step and dt_act ops */
int cuda_learner_dt_create(cuda_learner_t *m, const learner_config_t *c, char *err, size_t errlen);
void cuda_learner_dt_free(cuda_learner_t *m);
int cuda_dt_step(void *impl, int n, learner_stop_ctl_t *stop, learner_dt_stats_t *st, char *err, size_t errlen);
int cuda_group_dt_step(void *group, int n, learner_stop_ctl_t *stop, learner_dt_stats_t *st, int *rcs,
                       char (*errs)[512], char *err, size_t errlen);
int cuda_dt_act(void *impl, const float *states, const float *rtg, const int32_t *actions, const int32_t *timesteps,
                const float *mask, int32_t *action, char *err, size_t errlen);

/* learner_cuda.cu: the backend's create and destroy ops (group.cu creates
 * members with them) */
int cuda_learner_create(const learner_config_t *c, void **impl, char *err, size_t errlen);
void cuda_learner_destroy(void *impl);
/* group.cu: the backend's group ops (backend.h); step.cu: its group_step */
int cuda_group_create(const learner_config_t *c, int n, void **group, char *err, size_t errlen);
int cuda_group_member(void *group, int i, const learner_config_t *c, void **impl, char *err, size_t errlen);
void cuda_group_destroy(void *group);
int cuda_group_step(void *group, int n, const int *skip, learner_stop_ctl_t *stop, learner_stats_t *st, int *rcs,
                    char (*errs)[512], char *err, size_t errlen);

/* step.cu: the backend's step op (n training steps: the graph captured on
 * the first call, replayed after; cfg.cuda_graph = 0 launches each step's
 * kernels instead), and the graph's release */
int cuda_step(void *impl, int n, learner_stop_ctl_t *stop, learner_stats_t *st, char *err, size_t errlen);
void cuda_step_free(cuda_learner_t *m);

/* replay.cu (the twins of kernels/cpu/replay.c) */
/* the batch: indices (Philox stream REPLAY, lane = sample; uniform, or
 * stratified over the sum tree with IS weights), gathered into the
 * workspace's x = [s; s'], a, r, done, w; adam_fin (may be NULL): where the
 * step's norm-free AdamW scalars go (optim.cuh), computed beside */
int cuda_replay_sample(cuda_learner_t *m, unsigned *adam_fin, cudaStream_t st);
/* the sampled leaves' new priorities (loss_i + per_eps)^alpha and their
 * ancestors; max_leaf updated */
int cuda_replay_update_priorities(cuda_learner_t *m, cudaStream_t st);
/* leaves [lo, hi] set to max_leaf, then their ancestors */
int cuda_replay_add(cuda_learner_t *m, long long lo, long long hi, cudaStream_t st);
/* ep_last of insertion counts [from, to] (still stored; head and total after
 * the insertion) set to value: an episode closed by a later submit */
int cuda_episode_fill_last(cuda_learner_t *m, long long from, long long to, long long value, long long head,
                           long long total, cudaStream_t st);
/* every inner node from the leaves (after a load) */
int cuda_replay_rebuild(cuda_learner_t *m, cudaStream_t st);
/* empty trees: sums 0, minima +inf, no owners */
int cuda_replay_init(cuda_learner_t *m);

#ifdef __cplusplus
}
#endif

#endif
