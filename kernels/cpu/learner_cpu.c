/*
 * learner_cpu.c — the CPU backend: one training step of docs/learner.md §2-4 in the
 * order the GPU graph will run it:
 *   sample (Philox, PER or uniform) -> gather -> NoisyNet noise ->
 *   forward online(s, s'), target(s') -> C51 Double-DQN loss -> backward ->
 *   global norm, clip, AdamW -> new priorities -> target update -> stats.
 *
 * Shapes: B = batch, S = state_dim, P = number of parameters, N = noise
 * vector length (net_layout.h), C = replay capacity.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backend.h"
#include "../learner.h"
#include "../dt_window.h"
#include "../philox.h"
#include "dqn_math.h"
#include "dt.h"
#include "optim.h"
#include "her_cpu.h"
#include "replay.h"

typedef struct cpu_learner {
  learner_config_t cfg;
  net_layout_t L;
  float *online, *target, *grad, *adam_m, *adam_v; /* [P] */
  float *noise_on, *noise_tg;                      /* [N] f(eps) */
  float *prior;                                    /* [n_prior] fixed prior heads (docs/learner.md §8) */
  float *qacc;                                     /* [sum n_d] Act: the variance over heads */
  float *qheads;                                   /* [K, sum n_d] Act: each head's Q */
  replay_t rp;
  dqn_ws_f32_t ws;
  int64_t *idx; /* [B] sampled replay indices */
  float *prio;  /* [B] new priorities */
  float *gdisc; /* [B] per-row discounts (n-step) */
  float *qrow;  /* [sum n_d] Act scratch */
  learner_counters_t ctr;
  /* Act buffers, grown on demand */
  net_acts_f32_t act_acts;
  float *act_weff, *act_noise;
  dt_trainer_t dt; /* the Decision Transformer (dt_layers > 0; docs/learner.md §16): dt.p NULL without */
} cpu_learner_t;

/* Fills eps (n values) with N(0,1) draws from (seed, stream, step), lane =
 * element / 4, then applies f(x) = sign(x) sqrt|x|. */
static void draw_noise(float *eps, int64_t n, uint64_t seed, uint32_t stream, uint64_t step) {
  for (int64_t j = 0; j < n; j += 4) {
    float g[4];
    philox_normal4(philox_draw(seed, stream, step, (uint32_t)(j / 4)), g);
    for (int k = 0; k < 4 && j + k < n; k++) eps[j + k] = g[k];
  }
  noisy_transform_f32(eps, n);
}

/* Initialisation, as nn.Linear and NoisyLinear do it:
 * weight and bias (mu) ~ U[-1/sqrt(in), 1/sqrt(in)], sigma = sigma0/sqrt(in).
 * Draws: (seed, stream INIT, step = layer, lane = element/4) over the layer's
 * weight then bias elements. The attention block (docs/learner.md §7), when on,
 * draws under its own stream INIT_ATTN, step = tensor (0 pos, 1..4 q/k/v/o
 * weight, 5..8 their biases), so no other parameter's draw changes: pos and
 * the q/k/v/o weights and biases U[-1/sqrt(d), 1/sqrt(d)], LayerNorm gamma 1
 * and beta 0. */
void learner_cpu_init_params(const net_layout_t *L, const learner_config_t *c, float *p) {
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    float bound = 1.0f / sqrtf((float)l->in);
    int64_t nw = (int64_t)l->in * l->out, total = nw + l->out;
    philox4_t d = {{0, 0, 0, 0}};
    for (int64_t k = 0; k < total; k++) {
      if (k % 4 == 0) d = philox_draw(c->seed, PHILOX_STREAM_INIT, (uint64_t)li, (uint32_t)(k / 4));
      float u = philox_uniform(d.v[k % 4]) * 2.0f - 1.0f;
      p[k < nw ? l->off_w + k : l->off_b + (k - nw)] = u * bound;
    }
    if (l->noisy) {
      float s = c->noisy_sigma0 / sqrtf((float)l->in);
      for (int64_t k = 0; k < nw; k++) p[l->off_sw + k] = s;
      for (int64_t k = 0; k < l->out; k++) p[l->off_sb + k] = s;
    }
  }
  const net_attn_t *at = &L->attn;
  if (!at->T) return;
  int64_t dd = at->d;
  int64_t offs[9] = {at->off_pos, at->off_w[0], at->off_w[1], at->off_w[2], at->off_w[3],
                     at->off_b[0], at->off_b[1], at->off_b[2], at->off_b[3]};
  int64_t cnts[9] = {at->T * dd, dd * dd, dd * dd, dd * dd, dd * dd, dd, dd, dd, dd};
  float bound = 1.0f / sqrtf((float)dd); /* fan-in d for all of them */
  for (int ti = 0; ti < 9; ti++) {
    philox4_t d = {{0, 0, 0, 0}};
    for (int64_t k = 0; k < cnts[ti]; k++) {
      if (k % 4 == 0) d = philox_draw(c->seed, PHILOX_STREAM_INIT_ATTN, (uint64_t)ti, (uint32_t)(k / 4));
      p[offs[ti] + k] = (philox_uniform(d.v[k % 4]) * 2.0f - 1.0f) * bound;
    }
  }
  for (int64_t k = 0; k < dd; k++) p[at->off_ln_w + k] = 1.0f, p[at->off_ln_b + k] = 0.0f;
}

/* The fixed prior heads (docs/learner.md §8), drawn at create and never trained:
 * as nn.Linear, U[-1/sqrt(in), 1/sqrt(in)] for weight and bias, from (seed,
 * stream INIT_PRIOR, step = the head layer's index, lane = element/4) over the
 * weight then bias elements; no other parameter's draw changes. */
void learner_cpu_init_priors(const net_layout_t *L, const learner_config_t *c, float *prior) {
  for (int li = 0; L->has_prior && li < L->n_layers; li++) {
    if (L->prior_off_w[li] < 0) continue;
    const net_layer_t *l = &L->layer[li];
    float bound = 1.0f / sqrtf((float)l->in);
    int64_t nw = (int64_t)l->in * l->out, total = nw + l->out;
    philox4_t d = {{0, 0, 0, 0}};
    for (int64_t k = 0; k < total; k++) {
      if (k % 4 == 0) d = philox_draw(c->seed, PHILOX_STREAM_INIT_PRIOR, (uint64_t)li, (uint32_t)(k / 4));
      float u = philox_uniform(d.v[k % 4]) * 2.0f - 1.0f;
      prior[k < nw ? L->prior_off_w[li] + k : L->prior_off_b[li] + (k - nw)] = u * bound;
    }
  }
}

static void cpu_destroy(void *impl) {
  cpu_learner_t *m = impl;
  if (!m) return;
  free(m->online);
  free(m->target);
  free(m->grad);
  free(m->adam_m);
  free(m->adam_v);
  free(m->noise_on);
  free(m->noise_tg);
  free(m->prior);
  free(m->qacc);
  free(m->qheads);
  free(m->idx);
  free(m->prio);
  free(m->gdisc);
  free(m->qrow);
  replay_free(&m->rp);
  dqn_ws_free_f32(&m->ws);
  net_acts_free_f32(&m->act_acts);
  free(m->act_weff);
  free(m->act_noise);
  dt_trainer_free(&m->dt);
  free(m);
}

static int cpu_create(const learner_config_t *c, void **impl, char *err, size_t errlen) {
  cpu_learner_t *m = calloc(1, sizeof *m);
  if (!m) goto oom;
  m->cfg = *c;
  net_layout_init(&m->L, c);
  size_t P = (size_t)m->L.n_params, N = (size_t)(m->L.n_noise ? m->L.n_noise : 1);
  m->online = calloc(P, sizeof(float));
  m->target = calloc(P, sizeof(float));
  m->grad = calloc(P, sizeof(float));
  m->adam_m = calloc(P, sizeof(float));
  m->adam_v = calloc(P, sizeof(float));
  m->noise_on = calloc(N, sizeof(float));
  m->noise_tg = calloc(N, sizeof(float));
  m->act_noise = calloc(N, sizeof(float));
  m->act_weff = calloc(P, sizeof(float));
  m->idx = calloc((size_t)c->batch, sizeof(int64_t));
  m->prio = calloc((size_t)c->batch, sizeof(float));
  m->gdisc = calloc((size_t)c->batch, sizeof(float));
  m->qrow = calloc((size_t)m->L.q_width, sizeof(float));
  m->qacc = calloc((size_t)m->L.q_width, sizeof(float));
  m->qheads = calloc((size_t)m->L.q_width * (size_t)m->L.K, sizeof(float));
  m->prior = calloc((size_t)(m->L.n_prior ? m->L.n_prior : 1), sizeof(float));
  if (!m->qacc || !m->qheads || !m->prior || !m->gdisc) goto oom;
  if (!m->prio || !m->qrow ||!m->online || !m->target || !m->grad || !m->adam_m || !m->adam_v || !m->noise_on || !m->noise_tg ||
      !m->act_noise || !m->act_weff || !m->idx)
    goto oom;
  if (replay_init(&m->rp, c->replay_capacity, c->state_dim, c->prioritized, c->per_alpha)) goto oom;
  if (dqn_ws_alloc_f32(&m->ws, &m->L, c->batch)) goto oom;
  if (c->dt_layers) {
    static _Thread_local model_t reg; /* ~45 KB: not on the caller's stack */
    dt_layout_t dl;
    const int rc = dt_layout_from_config(c, &reg, &dl, err, errlen);
    if (rc) {
      cpu_destroy(m);
      return rc;
    }
    if (dt_trainer_init(&m->dt, &dl, &reg, c->dt_batch, c->seed)) goto oom;
  }
  learner_cpu_init_params(&m->L, c, m->online);
  learner_cpu_init_priors(&m->L, c, m->prior);
  memcpy(m->target, m->online, P * sizeof(float));
  m->ctr.max_leaf = 1.0f;
  *impl = m;
  return LEARNER_OK;
oom:
  cpu_destroy(m);
  snprintf(err, errlen, "out of memory creating the CPU learner");
  return LEARNER_ENOMEM;
}

static int cpu_submit(void *impl, const learner_transitions_t *t, char *err, size_t errlen) {
  cpu_learner_t *m = impl;
  replay_add(&m->rp, t);
  return LEARNER_OK;
}

/* One training step; returns the batch loss, *gn the pre-clip norm, *q the mean Q. */
/* One step; returns 0, or 1 when its loss or gradient norm is not finite:
 * then nothing of it is applied (the divergence guard, learner.h). */
static int cpu_step_one(cpu_learner_t *m, float *loss_out, float *gn, float *q, float *beta_out) {
  const learner_config_t *c = &m->cfg;
  const learner_hparams_t *hp = &c->hp;
  const int B = c->batch, S = c->state_dim;
  const uint64_t t = m->ctr.step;
  dqn_ws_f32_t *ws = &m->ws;

  /* sample and gather */
  float beta = c->prioritized ? replay_beta(hp->per_beta0, hp->per_beta_steps, t) : 1.0f;
  replay_sample(&m->rp, c->seed, t, B, beta, m->idx, ws->w);
  for (int i = 0; i < B; i++) {
    int64_t j = m->idx[i];
    memcpy(ws->x + (size_t)i * S, m->rp.s + j * S, sizeof(float) * S);
    memcpy(ws->x + (size_t)(B + i) * S, m->rp.s2 + j * S, sizeof(float) * S);
    ws->a[i] = m->rp.a[j];
    ws->r[i] = m->rp.r[j];
    ws->done[i] = m->rp.done[j];
  }
  /* HER and n-step (docs/learner.md §9): nothing with both off */
  ws->gdisc = her_batch_cpu(&m->rp, c, t, B, m->idx, ws->x, ws->r, ws->done, m->gdisc) ? m->gdisc : NULL;
  /* bootstrap masks (docs/learner.md §8): stateless, from the transition's insertion count */
  const int K = m->L.K;
  if (K > 1 || c->ensemble_mask_p < 1)
    for (int i = 0; i < B; i++) {
      uint64_t cnt = (uint64_t)replay_insertion_count(&m->rp, m->idx[i]);
      for (int k = 0; k < K; k++)
        ws->mask[(size_t)i * K + k] = (float)philox_ensemble_mask(c->seed, cnt, (uint32_t)k, c->ensemble_mask_p);
    }

  /* noise: one draw per step for the online net (shared by s and s'), one for the target */
  const float *fn_on = NULL, *fn_tg = NULL;
  if (c->noisy) {
    draw_noise(m->noise_on, m->L.n_noise, c->seed, PHILOX_STREAM_NOISE_ONLINE, t);
    draw_noise(m->noise_tg, m->L.n_noise, c->seed, PHILOX_STREAM_NOISE_TARGET, t);
    fn_on = m->noise_on;
    fn_tg = m->noise_tg;
  }

  dqn_hp_f32_t mhp = {hp->gamma,           c->v_min,    c->v_max, c->leaky_slope, c->double_dqn,
                      hp->ensemble_diversity, c->ensemble_prior_scale, m->L.has_prior ? m->prior : NULL};
  float loss = dqn_loss_grad_f32(&m->L, &mhp, m->online, m->target, fn_on, fn_tg, ws, m->grad, q);

  /* optimiser */
  int64_t P = m->L.n_params;
  double norm = grad_norm(m->grad, P);
  *loss_out = loss;
  *gn = (float)norm;
  if (!isfinite(loss) || !isfinite(norm)) return 1;
  float scale = grad_clip_scale(norm, hp->grad_clip);
  adamw_update(m->online, m->grad, m->adam_m, m->adam_v, P, scale, hp->lr, hp->adam_beta1, hp->adam_beta2,
               hp->adam_eps, hp->weight_decay, t + 1);

  /* priorities: (mean_k CE^k_i + eps) (= loss_i + eps for K = 1, p = 1), the tree applies ^alpha */
  if (c->prioritized) {
    for (int i = 0; i < B; i++) m->prio[i] = ws->ce_mean[i] + hp->per_eps;
    replay_update_priorities(&m->rp, m->idx, m->prio, B);
  }

  m->ctr.step = t + 1;
  if (hp->tau > 0)
    target_update(m->target, m->online, P, hp->tau);
  else if (hp->target_period > 0 && m->ctr.step % (uint64_t)hp->target_period == 0)
    target_update(m->target, m->online, P, 1.0f);
  *beta_out = beta;
  return 0;
}

static int cpu_step(void *impl, int n, learner_stop_ctl_t *stop, learner_stats_t *st, char *err, size_t errlen) {
  cpu_learner_t *m = impl;
  if (m->rp.size < m->cfg.batch) {
    snprintf(err, errlen, "replay holds %lld transitions, a step needs batch = %d",
             (long long)m->rp.size, m->cfg.batch);
    return LEARNER_EEMPTY;
  }
  double lsum = 0, gsum = 0, qsum = 0;
  float loss = 0, gn = 0, q = 0, beta = 0, bad_loss = 0, bad_gn = 0;
  int ran = 0, diverged = 0, stopped = 0;
  for (; ran < n; ran++) {
    float l1, g1;
    if ((stopped = learner_should_stop(stop))) break; /* between steps: the state is whole */
    if ((diverged = cpu_step_one(m, &l1, &g1, &q, &beta))) {
      bad_loss = l1, bad_gn = g1;
      break;
    }
    loss = l1, gn = g1;
    lsum += loss;
    gsum += gn;
    qsum += q;
  }
  const int wanted = n;
  n = ran;
  learner_stats_t *s = &m->ctr.last;
  s->step = m->ctr.step;
  s->replay_size = m->rp.size;
  s->replay_total = m->rp.total;
  s->steps_run = n;
  s->loss_mean = n ? (float)(lsum / n) : 0;
  s->loss_last = loss;
  s->grad_norm_mean = n ? (float)(gsum / n) : 0;
  s->grad_norm_last = gn;
  s->q_mean = n ? (float)(qsum / n) : 0;
  s->per_beta = beta;
  if (st) *st = *s;
  if (diverged) {
    snprintf(err, errlen,
             "step %llu diverged: batch loss %g, gradient norm %g; it was not applied (the state is step %llu's, "
             "after %d of this call's steps)",
             (unsigned long long)m->ctr.step + 1, (double)bad_loss, (double)bad_gn, (unsigned long long)m->ctr.step, ran);
    return LEARNER_EDIVERGED;
  }
  if (stopped) {
    snprintf(err, errlen, "stopped after %d of %d steps (%s)", ran, wanted,
             stopped == LEARNER_STOP_DEADLINE ? "its deadline passed" : "its stop flag was set");
    return LEARNER_ESTOPPED;
  }
  return LEARNER_OK;
}

/* the most states Act's forward takes at once (cpu_act): ACT_ROWS, and no
 * more than ACT_BYTES of activations (at least one state): a wide network's
 * row is megabytes (65,536 actions of 51 atoms: 27 MB), and 300 states asked
 * at once held 8 GB for the trainer's life (a review find) */
#define ACT_ROWS 4096
#define ACT_BYTES (64LL << 20)
static int act_rows(const net_layout_t *L) {
  const int64_t row = (int64_t)net_acts_need_f32(L, 1) * (int64_t)sizeof(float);
  const int64_t k = ACT_BYTES / (row > 0 ? row : 1);
  return k < 1 ? 1 : k > ACT_ROWS ? ACT_ROWS : (int)k;
}

/* Act (docs/learner.md §8): per branch the Q values of each head, their mean
 * (head 0 plus heads 1..K-1 in order, then / K: K = 1 is the plain network
 * exactly) and their variance over heads (/ K); the action per branch is the
 * argmax of the mean, of mean + ucb_c * std (ucb), or of one head's Q
 * (thompson: head philox(seed, ACT_HEAD, episode) mod K for the episode). */
static int cpu_act(void *impl, const float *s, int n, int noisy, int64_t episode, int32_t *a, float *q, float *q_var,
                   char *err, size_t errlen) {
  cpu_learner_t *m = impl;
  const net_layout_t *L = &m->L;
  /* the forward runs ACT_ROWS states at a time (rows are independent, bit
   * for bit: w.rows_exact below), so
   * the kept activations hold at most ACT_ROWS rows (they grew to the
   * largest request: a million states held gigabytes for the trainer's life,
   * a review find) */
  const int most = act_rows(L), rows = n < most ? n : most;
  if (m->act_acts.rows < rows) {
    net_acts_free_f32(&m->act_acts);
    if (net_acts_alloc_f32(&m->act_acts, L, rows)) {
      snprintf(err, errlen, "out of memory for %d states", rows);
      return LEARNER_ENOMEM;
    }
  }
  const float *fn = NULL;
  if (noisy && m->cfg.noisy) {
    draw_noise(m->act_noise, L->n_noise, m->cfg.seed, PHILOX_STREAM_NOISE_ACT, m->ctr.act_count++);
    fn = m->act_noise;
  }
  net_weights_f32_t w;
  net_weights_f32(L, m->online, fn, m->act_weff, &w);
  net_weights_priors_f32(L, m->prior, m->cfg.ensemble_prior_scale, &w);
  w.rows_exact = 1; /* a state's Q never depends on the other states asked with it */
  const int K = L->K, qw = L->q_width;
  const int head = learner_act_head(&m->cfg, episode);
  float support[LEARNER_MAX_ATOMS];
  for (int z = 0; z < L->Z; z++) support[z] = m->cfg.v_min + (m->cfg.v_max - m->cfg.v_min) * z / (L->Z - 1);
  float *qh = m->qheads; /* [K][qw]: each head's Q for this state */
  float *qrow = m->qrow, *var = m->qacc;
  for (int i0 = 0; i0 < n; i0 += rows) {
    const int nr = n - i0 < rows ? n - i0 : rows;
    net_forward_f32(L, &w, s + (size_t)i0 * L->S, nr, m->cfg.leaky_slope, &m->act_acts);
    for (int r = 0; r < nr; r++) {
      const size_t i = (size_t)i0 + (size_t)r;
      for (int d = 0, off = 0; d < L->D; off += L->n[d], d++) {
        int nz = L->n[d] * L->Z, nd = L->n[d];
        for (int k = 0; k < K; k++)
          c51_q_values_f32(m->act_acts.logp[d] + k * m->act_acts.hstride + (size_t)r * nz, nd, L->Z, support,
                           qh + (size_t)k * qw + off);
      }
      int32_t flat = learner_act_heads(L, m->cfg.hp.act_select, m->cfg.hp.ucb_c, head, qh, (size_t)qw, qrow, var);
      for (int j = 0; j < qw; j++) /* an action chosen among NaNs is no answer (learner_act_checked) */
        if (!isfinite(qrow[j])) {
          snprintf(err, errlen, "state %zu: Q values are not finite: the forward overflows (a diverged network's "
                   "weights, or states too large for it)", i);
          return LEARNER_EDIVERGED;
        }
      a[i] = flat;
      if (q) memcpy(q + i * qw, qrow, sizeof(float) * (size_t)qw);
      if (q_var) memcpy(q_var + i * qw, var, sizeof(float) * (size_t)qw);
    }
  }
  return LEARNER_OK;
}

static int cpu_sync_target(void *impl, float tau) {
  cpu_learner_t *m = impl;
  target_update(m->target, m->online, m->L.n_params, tau > 0 ? tau : 1.0f);
  return LEARNER_OK;
}

static int cpu_set_hparams(void *impl, const learner_hparams_t *hp) {
  cpu_learner_t *m = impl;
  m->cfg.hp = *hp;
  return LEARNER_OK;
}

static int cpu_get_counters(void *impl, learner_counters_t *c) {
  cpu_learner_t *m = impl;
  m->ctr.replay_size = m->rp.size;
  m->ctr.replay_head = m->rp.head;
  m->ctr.replay_total = m->rp.total;
  m->ctr.max_leaf = m->rp.max_leaf;
  *c = m->ctr;
  return LEARNER_OK;
}

static int cpu_set_counters(void *impl, const learner_counters_t *c) {
  cpu_learner_t *m = impl;
  m->ctr = *c;
  m->rp.size = c->replay_size;
  m->rp.head = c->replay_head;
  m->rp.total = c->replay_total;
  m->rp.max_leaf = c->max_leaf;
  return LEARNER_OK;
}

/* Where the state's tensors live (state_format.h's registry says which
 * section is which and how long) */
static void cpu_bufs(void *impl, learner_bufs_t *b) {
  cpu_learner_t *m = impl;
  *b = (learner_bufs_t){.online = m->online, .target = m->target, .adam_m = m->adam_m, .adam_v = m->adam_v,
                        .prior = m->L.n_prior ? m->prior : NULL, .s = m->rp.s, .s2 = m->rp.s2, .a = m->rp.a,
                        .r = m->rp.r, .done = m->rp.done, .ep = m->rp.ep, .epend = m->rp.epend,
                        .prio = m->cfg.prioritized ? m->rp.sum + m->rp.T : NULL, .size = m->rp.size,
                        .dt_p = m->dt.p, .dt_m = m->dt.m, .dt_v = m->dt.v, .dt_ctr = m->dt.p ? &m->dt.step : NULL};
}

/* ---- the Decision Transformer (dt.h; docs/learner.md §16) */

static int cpu_dt_step(void *impl, int n, learner_stop_ctl_t *stop, learner_dt_stats_t *st, char *err,
                       size_t errlen) {
  cpu_learner_t *m = impl;
  const learner_hparams_t *h = &m->cfg.hp;
  const dt_hparams_t hp = {h->dt_lr,      h->dt_weight_decay, h->dt_clip, h->adam_beta1, h->adam_beta2,
                           h->adam_eps,   m->cfg.dt_rtg_scale, h->dt_warmup};
  double lsum = 0, gsum = 0;
  const int has = dt_replay_has_episode(&m->rp);
  int ran = 0, rc = has ? LEARNER_OK : LEARNER_EEMPTY, stopped = 0;
  dt_step_stats_t s = {0};
  for (; !rc && ran < n; ran++) {
    if ((stopped = learner_should_stop(stop))) break;
    if ((rc = dt_train_step(&m->dt, &m->rp, &hp, &s))) break;
    lsum += s.loss, gsum += s.grad_norm;
    st->loss_last = (float)s.loss, st->grad_norm_last = (float)s.grad_norm, st->lr_last = s.lr;
  }
  st->dt_step = m->dt.step, st->steps_run = ran;
  st->loss_mean = ran ? (float)(lsum / ran) : 0, st->grad_norm_mean = ran ? (float)(gsum / ran) : 0;
  if (rc == LEARNER_EEMPTY) dt_no_window_message(err, errlen, has, m->dt.step, m->cfg.dt_batch, m->rp.size);
  else if (rc == LEARNER_EDIVERGED)
    snprintf(err, errlen, "pre-training step %llu diverged: loss %g, gradient norm %g; it was not applied",
             (unsigned long long)m->dt.step + 1, s.loss, s.grad_norm);
  else if (rc == LEARNER_ENOMEM) snprintf(err, errlen, "out of memory for the Decision Transformer's activations");
  if (rc) return rc;
  if (stopped) {
    snprintf(err, errlen, "stopped after %d of %d pre-training steps (%s)", ran, n,
             stopped == LEARNER_STOP_DEADLINE ? "its deadline passed" : "its stop flag was set");
    return LEARNER_ESTOPPED;
  }
  return LEARNER_OK;
}

static int cpu_dt_act(void *impl, const float *states, const float *rtg, const int32_t *actions,
                      const int32_t *timesteps, const float *mask, int32_t *action, char *err, size_t errlen) {
  cpu_learner_t *m = impl;
  const dt_batch_t b = {1, states, rtg, mask, actions, timesteps};
  const int32_t a = dt_act_f32(&m->dt.L, m->dt.p, &b);
  if (a == -3) return snprintf(err, errlen, "%s", DT_ACT_NONFINITE), LEARNER_EDIVERGED;
  if (a < 0) {
    snprintf(err, errlen, a == -1 ? "steps: the window's last step is padding" : "out of memory");
    return a == -1 ? LEARNER_EINVAL : LEARNER_ENOMEM;
  }
  *action = a;
  return LEARNER_OK;
}

static int cpu_copy(void *impl, void *dst, const void *src, size_t n, int to_backend) {
  (void)impl, (void)to_backend;
  memcpy(dst, src, n);
  return LEARNER_OK;
}

static int cpu_load_done(void *impl) {
  cpu_learner_t *m = impl;
  /* a state that passed its CRCs may still have been written by someone else:
   * nothing out of range may reach the step */
  int64_t A = learner_config_joint_actions(&m->cfg);
  for (int64_t i = 0; i < m->rp.size; i++) {
    if (m->rp.a[i] < 0 || m->rp.a[i] >= A || m->rp.done[i] > 1 || m->rp.epend[i] > 1 || !isfinite(m->rp.r[i]))
      return LEARNER_ECORRUPT;
    if (m->cfg.prioritized && !(m->rp.sum[m->rp.T + i] > 0 && isfinite(m->rp.sum[m->rp.T + i])))
      return LEARNER_ECORRUPT;
  }
  replay_rebuild_episodes(&m->rp);
  if (m->cfg.prioritized) {
    /* leaves were written straight into sum[T + i]; mirror them into mn */
    for (int64_t i = 0; i < m->rp.size; i++) m->rp.mn[m->rp.T + i] = m->rp.sum[m->rp.T + i];
    replay_rebuild(&m->rp);
  }
  return LEARNER_OK;
}

/* beyond the state's tensors (learner.c): what this backend allocates, by
 * the functions that size the allocations: the step's workspace and
 * activations (dqn_ws_need: the effective NoisyNet weights, attention's and
 * the ensemble's included) and its int arrays, Act's activations (act_rows)
 * and effective weights, the three noise vectors, the PER tree (sums and
 * mins over T leaves), and the Decision Transformer's per-window activations
 * and its optimiser (dt_window_values). (A flat 64 KiB a batch row once
 * stood in for the step's part and undercounted wide networks fivefold.) */
static int64_t cpu_workspace_estimate(const learner_config_t *c) {
  net_layout_t L;
  net_layout_init(&L, c);
  int64_t tree = 0;
  if (c->prioritized) {
    int64_t T = 1;
    while (T < c->replay_capacity) T <<= 1;
    tree = 2 * T * 8;
  }
  const int64_t f = (int64_t)sizeof(float), B = c->batch, K = L.K < 1 ? 1 : L.K;
  const int64_t step = (int64_t)dqn_ws_need_f32(&L, c->batch) * f + B * (1 + K * L.D) * 4;
  const int64_t act = (int64_t)net_acts_need_f32(&L, act_rows(&L)) * f + L.n_params * f + 3 * L.n_noise * f;
  int64_t dt = 0;
  if (c->dt_layers > 0) {
    const int64_t ndt = learner_config_num_dt(c), BK = (int64_t)c->dt_batch * c->dt_context;
    dt = ndt * f /* its gradient */ + BK * (c->state_dim + 4) * 4 /* a batch of windows */ +
         (int64_t)dt_window_values(c->dt_context, c->dt_embed, c->dt_layers, c->dt_heads, L.q_width) * f;
  }
  return step + act + tree + dt + (1 << 20); /* and 1 MiB for the small ones (the learner, Act's scratch, ...) */
}

/* the kernel's MemAvailable (free memory plus the page cache it can reclaim):
 * free pages alone refused learners that fit once reading checkpoints had
 * filled the cache */
static int64_t cpu_memory_free(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    long long kb = -1;
    while (kb < 0 && fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %lld kB", &kb) != 1) kb = -1;
    fclose(f);
    if (kb >= 0) return (int64_t)kb * 1024;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return pages > 0 && psz > 0 ? (int64_t)pages * psz : -1;
}

const learner_backend_ops_t learner_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .submit = cpu_submit,
    .step = cpu_step,
    .act = cpu_act,
    .sync_target = cpu_sync_target,
    .set_hparams = cpu_set_hparams,
    .get_counters = cpu_get_counters,
    .set_counters = cpu_set_counters,
    .bufs = cpu_bufs,
    .copy = cpu_copy,
    .load_done = cpu_load_done,
    .workspace_estimate = cpu_workspace_estimate,
    .memory_free = cpu_memory_free,
    .dt_step = cpu_dt_step,
    .dt_act = cpu_dt_act,
};
