/* dt_train.c — the Decision Transformer's pre-training step on the CPU
 * (dt.h): windows from the replay, the loss and gradient, the global norm
 * clipped at dt_clip, AdamW with a linear warmup (docs/learner.md §16,
 * "Pre-training"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt.h"
#include "optim.h"
#include "philox.h"

void dt_init_params(const model_t *m, uint64_t seed, float *p) {
  for (int i = 0; i < m->n; i++) {
    const model_param_t *mp = &m->p[i];
    if (mp->vec != MODEL_VEC_DT) continue;
    const int64_t n = model_param_count(mp);
    float *x = p + mp->offset;
    if (mp->init == INIT_ONES || mp->init == INIT_ZEROS) {
      for (int64_t k = 0; k < n; k++) x[k] = mp->init == INIT_ONES ? 1.0f : 0.0f;
      continue;
    }
    const float bound = 1.0f / sqrtf((float)(mp->fan_in > 0 ? mp->fan_in : 1));
    for (int64_t k = 0; k < n; k += 4) {
      const philox4_t d = philox_draw(seed, PHILOX_STREAM_INIT_DT, (uint64_t)i, (uint32_t)(k / 4));
      float g[4] = {0, 0, 0, 0};
      if (mp->init == INIT_NORMAL) philox_normal4(d, g);
      for (int q = 0; q < 4 && k + q < n; q++)
        x[k + q] = mp->init == INIT_NORMAL ? g[q] : (philox_uniform(d.v[q]) * 2.0f - 1.0f) * bound;
    }
  }
}

int dt_trainer_init(dt_trainer_t *t, const dt_layout_t *L, const model_t *m, int batch, uint64_t seed) {
  memset(t, 0, sizeof *t);
  t->L = *L;
  t->B = batch;
  t->seed = seed;
  const size_t P = (size_t)L->n_params, BK = (size_t)batch * L->K;
  t->p = calloc(P, sizeof(float)), t->m = calloc(P, sizeof(float)), t->v = calloc(P, sizeof(float));
  t->g = calloc(P, sizeof(float));
  t->states = calloc(BK * L->S, sizeof(float)), t->rtg = calloc(BK, sizeof(float)), t->mask = calloc(BK, sizeof(float));
  t->actions = calloc(BK, sizeof(int32_t)), t->timesteps = calloc(BK, sizeof(int32_t));
  if (!t->p || !t->m || !t->v || !t->g || !t->states || !t->rtg || !t->mask || !t->actions || !t->timesteps) {
    dt_trainer_free(t);
    return LEARNER_ENOMEM;
  }
  dt_init_params(m, seed, t->p);
  return LEARNER_OK;
}

void dt_trainer_free(dt_trainer_t *t) {
  free(t->p), free(t->m), free(t->v), free(t->g);
  free(t->states), free(t->rtg), free(t->mask), free(t->actions), free(t->timesteps);
  memset(t, 0, sizeof *t);
}

float dt_lr_at(const dt_hparams_t *hp, uint64_t step) {
  if (hp->warmup <= 0) return hp->lr;
  const double f = (double)(step + 1) / (double)hp->warmup;
  return f >= 1 ? hp->lr : (float)((double)hp->lr * f);
}

int dt_train_step(dt_trainer_t *t, const struct replay *rp, const dt_hparams_t *hp, dt_step_stats_t *st) {
  memset(st, 0, sizeof *st);
  const int rows = dt_sample(rp, t->seed, t->step, t->B, t->L.K, hp->rtg_scale, t->states, t->rtg, t->actions,
                             t->timesteps, t->mask);
  if (!rows) return LEARNER_EEMPTY;
  const dt_batch_t b = {t->B, t->states, t->rtg, t->mask, t->actions, t->timesteps};
  const double loss = dt_loss_grad_f32(&t->L, t->p, &b, t->g, NULL, NULL);
  if (loss < 0) return LEARNER_ENOMEM;
  const int64_t P = t->L.n_params;
  const double norm = grad_norm(t->g, P);
  st->loss = loss, st->grad_norm = norm, st->rows = rows, st->lr = dt_lr_at(hp, t->step);
  if (!isfinite(loss) || !isfinite(norm)) return LEARNER_EDIVERGED; /* nothing applied */
  adamw_update(t->p, t->g, t->m, t->v, P, grad_clip_scale(norm, hp->clip), st->lr, hp->beta1, hp->beta2, hp->eps,
               hp->weight_decay, t->step + 1);
  t->step++;
  return LEARNER_OK;
}

int32_t dt_act_f32(const dt_layout_t *L, const float *p, const dt_batch_t *b) {
  const int K = L->K;
  if (b->B != 1 || b->mask[K - 1] == 0) return -1;
  float *z = malloc(sizeof(float) * (size_t)K * L->A);
  if (!z) return -2;
  if (dt_loss_grad_f32(L, p, b, NULL, NULL, z) < 0) {
    free(z);
    return -2;
  }
  const int32_t flat = dt_action_of(L, z + (size_t)(K - 1) * L->A);
  free(z);
  return flat;
}
