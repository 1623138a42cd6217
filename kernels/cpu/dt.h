/*
 * dt.h — the Decision Transformer's loss and exact gradient on the CPU: the
 * spec the CUDA kernels mirror (docs/learner.md, "Decision
 * Transformer"; issue 30). A GPT over windows of K steps, three tokens a step
 * (return-to-go, state, action), L blocks of causal attention and a GELU
 * MLP, the action logits read at each state token. Instantiated for float
 * (the learner's arithmetic) and double (finite differences): dt_impl.h.
 *
 * The parameters are the registry's DT vector (model.h, MODEL_VEC_DT);
 * dt_layout_init finds each tensor's offset by name there.
 *
 * Shapes: B windows, K steps each (dt_context), S state, D branches of n_d
 * actions, E embed (dt_embed), L layers, nh heads, T max episode length
 * (timesteps clip to [0, T-1]), N = 3K tokens.
 */
#ifndef DQN_CPU_DT_H
#define DQN_CPU_DT_H

#include <math.h>
#include <stdint.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_MAX_LAYERS 16

typedef struct dt_block_off {
  int64_t ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, m1_w, m1_b, m2_w, m2_b;
} dt_block_off_t;

/* the DT's sizes and every tensor's offset in its parameter vector */
typedef struct dt_layout {
  int S, D, E, L, nh, T, K;
  int n[LEARNER_MAX_BRANCHES];
  int radix_after[LEARNER_MAX_BRANCHES]; /* a flat joint action's branch d: (a / radix_after[d]) % n[d] */
  int A;                                 /* sum n_d: a logits row */
  int64_t rtg_w, rtg_b, st_w, st_b, act_emb[LEARNER_MAX_BRANCHES], time, lne_w, lne_b;
  dt_block_off_t blk[DT_MAX_LAYERS];
  int64_t lnf_w, lnf_b, head_w[LEARNER_MAX_BRANCHES], head_b[LEARNER_MAX_BRANCHES];
  int64_t n_params;
} dt_layout_t;

/* Act's rule on one state token's logits zt [A], for both backends: the
 * per-branch argmax (the lowest index on a tie) composed into the flat joint
 * action, the first branch most significant; -3 when a logit is not finite
 * (an argmax among NaNs is no answer). */
static inline int32_t dt_action_of(const dt_layout_t *L, const float *zt) {
  for (int c = 0; c < L->A; c++)
    if (!isfinite(zt[c])) return -3;
  int32_t flat = 0;
  for (int d = 0, off = 0; d < L->D; off += L->n[d], d++) {
    int best = 0;
    for (int c = 1; c < L->n[d]; c++)
      if (zt[off + c] > zt[off + best]) best = c;
    flat = flat * L->n[d] + best;
  }
  return flat;
}

/* From a registry built with dt_layers > 0: context K and nh heads (E % nh
 * == 0). 0, or LEARNER_EINVAL naming the field. */
int dt_layout_init(dt_layout_t *L, const model_t *m, int context, int heads, char *err, size_t errlen);
/* The registry (into *reg) and the layout of a config with dt_layers > 0: the
 * backends' one way to them. 0, or LEARNER_EINVAL naming the field. */
int dt_layout_from_config(const learner_config_t *c, model_t *reg, dt_layout_t *L, char *err, size_t errlen);

/* The values dt_loss_grad allocates for one window's activations and
 * gradients: context K, embed E, NL layers, nh heads, A logits a step (the
 * learner's memory estimate counts them too). */
static inline size_t dt_window_values(int K, int E, int NL, int nh, int A) {
  const size_t N = 3 * (size_t)K, NE = N * (size_t)E, NF = 4 * NE, NN = (size_t)nh * N * N;
  const size_t per_layer = 9 * NE + 3 * N + NN + 2 * NF;
  return 3 * NE + 2 * N + (size_t)(NL + 1) * NE + (size_t)NL * per_layer + 2 * NE + N + (size_t)K * A + 9 * NE + NF +
         (size_t)A + N;
}

/* One batch of windows: states [B, K, S], rtg [B, K] (already divided by
 * dt_rtg_scale), actions [B, K] (flat joint), timesteps [B, K] (raw: clipped
 * here), mask [B, K] (nonzero: a real step; padding is on the left). The
 * padded steps' inputs are never read past the mask. */
typedef struct dt_batch {
  int B;
  const float *states, *rtg, *mask;
  const int32_t *actions, *timesteps;
} dt_batch_t;

/* The loss — the mean over the batch's real steps of the mean over branches
 * of the cross-entropy of the logits at the step's state token against its
 * action — returned; grad (may be NULL) receives its gradient (overwritten,
 * n_params); loss_step [B, K] (may be NULL) each step's branch-mean CE (0 for
 * padding); logits [B, K, A] (may be NULL) every real step's logits (0 for
 * padding). A batch with no real step has loss 0 and a zero gradient. -1 when
 * out of memory. */
double dt_loss_grad_f32(const dt_layout_t *L, const float *p, const dt_batch_t *b, float *grad, float *loss_step,
                        float *logits);
double dt_loss_grad_f64(const dt_layout_t *L, const double *p, const dt_batch_t *b, double *grad, double *loss_step,
                        double *logits);

/* Windows from the CPU replay (kernels/cpu/replay.h; the rule of
 * dt_window.h): B windows of K steps for pre-training step `step` into the
 * buffers of a dt_batch_t (states [B, K, S], rtg [B, K] divided by
 * rtg_scale, actions, timesteps and mask [B, K]); returns the rows that have
 * a window (the others are all padding). */
struct replay;
int dt_sample(const struct replay *rp, uint64_t seed, uint64_t step, int B, int K, float rtg_scale, float *states,
              float *rtg, int32_t *actions, int32_t *timesteps, float *mask);
/* 1 when the replay stores a whole episode that has ended (a window can come
 * from it), else 0 */
int dt_replay_has_episode(const struct replay *rp);

/* Act by return conditioning (docs/learner.md §16, "Act"): one window
 * (b->B = 1) whose last step is the live one — its state, return-to-go and
 * timestep; its action is not read (the state token sees no later token) —
 * gives the flat joint action of the per-branch argmax of the logits at its
 * state token (first branch most significant; the lowest index on a tie).
 * -1 when the last step is padding, -2 when out of memory, -3 when a logit
 * at the state token is not finite. */
int32_t dt_act_f32(const dt_layout_t *L, const float *p, const dt_batch_t *b);

/* ---- pre-training (dt_train.c) */

/* The DT's own optimiser (docs/learner.md §16): AdamW (beta1, beta2, eps,
 * weight decay) at lr x min(1, (step + 1) / warmup), the gradient's global
 * norm clipped at clip; windows of batch rows with returns-to-go divided by
 * rtg_scale. */
typedef struct dt_hparams {
  float lr, weight_decay, clip, beta1, beta2, eps, rtg_scale;
  int64_t warmup;
} dt_hparams_t;

typedef struct dt_trainer {
  dt_layout_t L;
  int B;
  uint64_t seed, step; /* Philox: the windows of step `step` */
  float *p, *m, *v, *g; /* parameters, moments, gradient [n_params] */
  float *states, *rtg, *mask; /* a batch's windows */
  int32_t *actions, *timesteps;
} dt_trainer_t;

typedef struct dt_step_stats {
  double loss, grad_norm; /* before the clip */
  float lr;
  int rows;               /* windows drawn (the others all padding) */
} dt_step_stats_t;

/* The registry's initialisers for the DT vector of p: nn.Linear uniforms,
 * LayerNorm ones and zeros, N(0, 1) embeddings (Philox stream INIT_DT,
 * counter = the tensor's registry index, lane = element / 4). */
void dt_init_params(const model_t *m, uint64_t seed, float *p);
int dt_trainer_init(dt_trainer_t *t, const dt_layout_t *L, const model_t *m, int batch, uint64_t seed);
void dt_trainer_free(dt_trainer_t *t);
float dt_lr_at(const dt_hparams_t *hp, uint64_t step);
/* One pre-training step: LEARNER_OK, LEARNER_EEMPTY (no window: the replay
 * holds no whole ended episode; nothing changed) or LEARNER_EDIVERGED (a
 * non-finite loss or norm: nothing applied). */
int dt_train_step(dt_trainer_t *t, const struct replay *rp, const dt_hparams_t *hp, dt_step_stats_t *st);

#ifdef __cplusplus
}
#endif
#endif
