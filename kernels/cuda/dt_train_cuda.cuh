/*
 * dt_train_cuda.cuh — the Decision Transformer's pre-training step on the
 * GPU (dt_train.cu): its moments, its step counter and a call's sums, all in
 * device memory, and the replay it draws windows from.
 */
#ifndef DQN_CUDA_DT_TRAIN_CUH
#define DQN_CUDA_DT_TRAIN_CUH

#include "dt_cuda.cuh"
#include "learner_types.h"

/* the CUDA replay as the windows read it (learner_cuda.cuh's buffers); ring
 * points at the device's size, head, total (dev_state_t's, in that order) */
typedef struct cuda_dt_replay {
  const float *s, *r;
  const int32_t *a;
  const long long *ep_first, *ep_last, *ring;
  long long cap;
  int S;
} cuda_dt_replay_t;

/* a call's sums (floats of cuda_dt_train_t.sums), then one a row */
enum {
  DT_SUM_LOSS = 0,      /* this step's loss */
  DT_SUM_NORM,          /* its gradient norm */
  DT_SUM_LR,            /* its learning rate */
  DT_SUM_APPLY,         /* 1: it applies */
  DT_SUM_HALT,          /* 1: the call halted (no further step applies) */
  DT_SUM_WHY,           /* 1: no window drawn, 2: not finite */
  DT_SUM_STEPS,         /* applied */
  DT_SUM_LOSS_LAST,     /* the last applied step's (0 when none) */
  DT_SUM_NORM_LAST,
  DT_SUM_LR_LAST,
  DT_SUM_LOSS_HALT,     /* the halting step's (the divergence's message) */
  DT_SUM_NORM_HALT,
  DT_SUM_SCALE,         /* this step's AdamW scalars (dt_norm_final's, once for every thread): the clip's scale, */
  DT_SUM_STEP_SIZE,     /* lr / (1 - beta1^t), */
  DT_SUM_DECAY,         /* 1 - lr weight_decay, */
  DT_SUM_BC2_SQRT,      /* sqrt(1 - beta2^t) */
  DT_SUM_ROWS_ANY = 16, /* [B]: 1 where the row drew a window this step */
};

typedef struct cuda_dt_train {
  cuda_dt_t dt;             /* parameters, gradient, activations */
  float *m, *v;             /* Adam moments [n_params] */
  unsigned long long *ctr;  /* pre-training steps taken */
  double *part;             /* the norm's partial sums of squares */
  double *acc;              /* [2]: the call's sums of the applied steps' losses and norms */
  float *sums;              /* the call's scalars (DT_SUM_*) */
  int *flag;
  unsigned *fin;            /* the norm's blocks done this step (dt_norm_partial_kernel's last one resets it) */
} cuda_dt_train_t;

#ifdef __cplusplus
extern "C" {
#endif
int cuda_dt_train_alloc(cuda_dt_train_t *t, const dt_layout_t *L, int B);
void cuda_dt_train_free(cuda_dt_train_t *t);
/* whether the replay holds a whole ended episode (synchronises st) */
int cuda_dt_has_episode(cuda_dt_train_t *t, const cuda_dt_replay_t *rp, cudaStream_t st, int *has);
/* clears the call's sums (before the first step of a call) */
int cuda_dt_call_begin(cuda_dt_train_t *t, cudaStream_t st);
/* one step, queued on st (capturable): windows for step *ctr, loss and
 * gradient, norm, clip, AdamW; seed and hp device pointers; for every
 * member of t->dt.pz (the pointers member 0's) */
int cuda_dt_train_step(cuda_dt_train_t *t, const cuda_dt_replay_t *rp, const unsigned long long *seed,
                       float rtg_scale, const learner_hparams_t *hp, cudaStream_t st);
/* the step's end alone, on the gradient in t->dt.g and the loss's sums in
 * t->dt.sums: the norm, whether the step applies (a row of t->sums'
 * DT_SUM_ROWS_ANY set, the loss and norm finite, the call not halted), the
 * clip, AdamW, the count (cuda_dt_train_step's last two launches) */
int cuda_dt_train_apply(cuda_dt_train_t *t, const learner_hparams_t *hp, cudaStream_t st);
#ifdef __cplusplus
}
#endif

#endif
