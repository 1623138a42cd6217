/*
 * learner_cuda.cu — the CUDA backend behind kernels/learner.h (the twin of
 * kernels/cpu/learner_cpu.c): the replay ring, PER trees, parameters, Adam
 * moments, hyperparameters and counters all live on the device. A training
 * step —
 *   sample + gather (replay.cu) -> NoisyNet noise and weight packs (pack.cu)
 *   -> forward/loss/backward (step_phases.cuh's phases) -> global norm, clip, AdamW,
 *   target update (optim.cu) -> new priorities (replay.cu) -> stats
 * — is captured once into a CUDA graph by step.cu and replayed by Step(n)
 * with no host work per step. Hyperparameters sit in device memory, so
 * SetHyperparams re-captures only when n_step turns on or off with HER off
 * (the sample kernel's HER and n-step branch); SubmitTransitions copies through pinned
 * staging on the trainer's stream, outside the graph, and never invalidates
 * it. Act runs the plain forward (generic_forward.cu) on any number of states.
 *
 * The RNG is the CPU's (kernels/philox.h, same streams and counters), so with
 * uniform replay both backends sample the same indices. Every reduction runs
 * in a fixed order: two runs with the same seed are bit-identical.
 *
 * Shapes: B batch, S state_dim, P parameters, N noise length, C capacity,
 * T = next power of two >= C (tree leaves).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../her.h"
#include "../philox.h"
#include "arena.cuh"
#include "cuda_check.h"
#include "dt_train_cuda.cuh"
#include "learner_cuda.cuh"
#include "optim.cuh"

// kernels

/* per-branch argmax of Q -> flat action (first branch most significant) */
__global__ void act_argmax_kernel(const float *q, int rows, int qw, int D, const int *n, int32_t *out) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float *qr = q + (size_t)row * qw;
  int flat = 0, off = 0;
  for (int d = 0; d < D; d++) {
    int best = 0;
    for (int k = 1; k < n[d]; k++)
      if (qr[off + k] > qr[off + best]) best = k;
    flat = flat * n[d] + best;
    off += n[d];
  }
  out[row] = flat;
}

// launchers (the backend ops)

#define DEV(call) CUDA_TRY(call, err, errlen)
#define LAUNCHED() CUDA_TRY(cudaGetLastError(), err, errlen)
#define GRID(n, t) (unsigned)(((n) + (t)-1) / (t)), (t)

extern "C" void cuda_learner_destroy(void *impl) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  if (!m) return;
  cuda_learner_dt_free(m);
  cuda_step_free(m);
  void *bufs[] = {m->prior, m->on, m->tg, m->grad, m->m, m->v, m->s, m->s2, m->r, m->a, m->done, m->ep, m->epend, m->ep_first, m->ep_last, m->gdisc, m->sum, m->mn, m->own,
                  m->idx, m->prio, m->hp, m->ds, m->norm_scratch, m->act_x, m->act_weff, m->act_noise, m->act_a};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(bufs[i]);
  cuda_dqn_ws_free(&m->ws);
  cuda_acts_free(&m->act);
  cudaFreeHost(m->staging);
  if (m->halt_one) cudaFreeHost(m->halt_one);
  if (m->halt_st) cudaStreamDestroy(m->halt_st);
  for (int i = 0; i < 2; i++)
    if (m->group_done[i]) cudaEventDestroy(m->group_done[i]);
  if (m->st) cudaStreamDestroy(m->st);
  free(m);
}


/* The CPU backend's initialisation, so both start from the same weights. */
extern "C" void learner_cpu_init_params(const net_layout_t *L, const learner_config_t *c, float *p);

extern "C" int cuda_learner_create(const learner_config_t *c, void **impl, char *err, size_t errlen) {
  /* learner_create checked the memory it needs first (learner_memory_fits) */
  cuda_learner_t *m = (cuda_learner_t *)calloc(1, sizeof *m);
  if (!m) return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
  m->cfg = *c;
  net_layout_init(&m->L, c);
  size_t P = (size_t)m->L.n_params, C = (size_t)c->replay_capacity, S = (size_t)c->state_dim, B = (size_t)c->batch;
  size_t N = (size_t)(m->L.n_noise ? m->L.n_noise : 1);
  m->T = 1;
  while (m->T < (long long)C) m->T <<= 1;
  int rc = 0;
#define ALLOC(p, bytes)                                                                                             \
  if (!rc && dev_alloc_t(&(p), (bytes)) != cudaSuccess) rc = 1;
  ALLOC(m->on, P * 4) ALLOC(m->tg, P * 4) ALLOC(m->grad, P * 4) ALLOC(m->m, P * 4) ALLOC(m->v, P * 4);
  ALLOC(m->s, C * S * 4) ALLOC(m->s2, C * S * 4) ALLOC(m->r, C * 4) ALLOC(m->a, C * 4) ALLOC(m->done, C);
  ALLOC(m->ep, C * 8) ALLOC(m->epend, C) ALLOC(m->ep_first, C * 8) ALLOC(m->ep_last, C * 8) ALLOC(m->gdisc, B * 4);
  ALLOC(m->idx, B * 8) ALLOC(m->prio, B * 4) ALLOC(m->hp, sizeof(learner_hparams_t));
  ALLOC(m->ds, sizeof(dev_state_t)) ALLOC(m->norm_scratch, CUDA_NORM_SCRATCH * 8) ALLOC(m->act_noise, N * 4) ALLOC(m->act_weff, P * 4);
  if (c->prioritized) {
    ALLOC(m->sum, (size_t)(2 * m->T) * 4) ALLOC(m->mn, (size_t)(2 * m->T) * 4) ALLOC(m->own, (size_t)m->T * 4)
  }
  if (m->L.has_prior) ALLOC(m->prior, (size_t)m->L.n_prior * 4);
#undef ALLOC
  if (!rc && cudaMemset(m->norm_scratch, 0, CUDA_NORM_SCRATCH * 8) != cudaSuccess) rc = 1; /* its arrival counter */
  /* the stop's copy into the replays' halt word (step.cu): its pinned source
   * and its own stream, so that it lands while the replays run */
  void *hw = NULL;
  if (!rc && cudaHostAlloc(&hw, sizeof(int), cudaHostAllocDefault) != cudaSuccess) rc = 1;
  if (hw) {
    m->halt_one = (int *)hw;
    *m->halt_one = 1;
  }
  if (!rc && cudaStreamCreateWithFlags(&m->halt_st, cudaStreamNonBlocking) != cudaSuccess) rc = 1;
  for (int i = 0; i < 2 && !rc; i++)
    if (cudaEventCreateWithFlags(&m->group_done[i], cudaEventDisableTiming) != cudaSuccess) rc = 1;
  if (rc || cudaStreamCreateWithFlags(&m->st, cudaStreamNonBlocking) != cudaSuccess) {
    cuda_learner_destroy(m);
    snprintf(err, errlen, "replay_capacity: GPU allocation of the replay and the network failed");
    return LEARNER_ENOMEM;
  }
  /* (each message is written before cuda_learner_destroy frees m) */
  if (cuda_dqn_ws_alloc(&m->ws, &m->L, (int)B, c->tensor_cores, c->cuda_gemm_occupancy)) {
    snprintf(err, errlen, "batch: GPU allocation of the step's workspace (~%lld MiB for batch %d) failed",
             (long long)(cuda_dqn_ws_floats(&m->L, (int)B) * 4 >> 20), (int)B);
    cuda_learner_destroy(m);
    return LEARNER_ENOMEM;
  }
  if ((m->L.K > 1 || m->L.has_prior || c->ensemble_mask_p < 1 || m->L.attn.T) && !m->ws.fused.ok) {
    snprintf(err, errlen, "%s: the cuda step cannot stage these shapes with head sets or attention; use backend=cpu",
             m->L.attn.T ? "attn_tokens" : "ensemble_k");
    cuda_learner_destroy(m);
    return LEARNER_EUNSUPPORTED;
  }
  { /* the ensemble's loss (step_loss_ens.cu): masks from the sampled slots' insertion counts */
    cuda_fused_t *f = &m->ws.fused;
    f->ens = f->K > 1 || c->ensemble_mask_p < 1;
    f->prior = m->prior, f->beta = c->ensemble_prior_scale, f->lambda = c->hp.ensemble_diversity;
    f->lambda_dev = &m->hp->ensemble_diversity; /* a hyperparameter: the graph reads it */
    f->mask_p = c->ensemble_mask_p, f->mask_seed = c->seed, f->seed_dev = &m->ds->seed;
    f->idx = m->idx, f->ring = &m->ds->head, f->cap = c->replay_capacity;
    f->p_on = m->on, f->p_tg = m->tg;
  }
  if (c->tensor_cores && !(m->ws.fused.ok && m->ws.fused.tc == 1)) {
    /* refused rather than silently run in fp32 */
    cuda_learner_destroy(m);
    snprintf(err, errlen, "tensor_cores: the TF32 kernels do not cover this network's shapes; use tensor_cores=0");
    return LEARNER_EUNSUPPORTED;
  }
  float *host = (float *)malloc(P * 4);
  if (!host) {
    cuda_learner_destroy(m);
    return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
  }
  learner_cpu_init_params(&m->L, c, host);
  int r2 = 0;
  if (m->L.has_prior) { /* the CPU's draw, so both backends hold the same priors */
    float *ph = (float *)calloc((size_t)m->L.n_prior, 4);
    if (!ph) r2 = 1;
    else {
      learner_cpu_init_priors(&m->L, c, ph);
      r2 |= cudaMemcpy(m->prior, ph, (size_t)m->L.n_prior * 4, cudaMemcpyHostToDevice);
      free(ph);
    }
  }
  dev_state_t ds0;
  memset(&ds0, 0, sizeof ds0);
  ds0.max_leaf = 1.0f;
  ds0.seed = c->seed;
  ds0.tg_stale = 1;
  r2 |= cudaMemcpy(m->on, host, P * 4, cudaMemcpyHostToDevice);
  r2 |= cudaMemcpy(m->tg, host, P * 4, cudaMemcpyHostToDevice);
  r2 |= cudaMemset(m->m, 0, P * 4) | cudaMemset(m->v, 0, P * 4) | cudaMemset(m->grad, 0, P * 4);
  r2 |= cudaMemcpy(m->hp, &c->hp, sizeof c->hp, cudaMemcpyHostToDevice);
  r2 |= cudaMemcpy(m->ds, &ds0, sizeof ds0, cudaMemcpyHostToDevice);
  m->her_in_graph = c->her_goal_dim > 0 || c->hp.n_step > 1;
  if (c->prioritized) r2 |= cuda_replay_init(m);
  r2 |= cuda_pack_priors(&m->ws.fused, 0);
  r2 |= cudaDeviceSynchronize();
  free(host);
  if (r2) {
    cuda_learner_destroy(m);
    return snprintf(err, errlen, "cuda: initialising the learner failed"), LEARNER_EDEVICE;
  }
  if ((rc = cuda_learner_dt_create(m, c, err, errlen))) { /* the Decision Transformer (learner_dt_cuda.cu) */
    cuda_learner_destroy(m);
    return rc;
  }
  *impl = m;
  return LEARNER_OK;
}

static int ensure_staging(cuda_learner_t *m, size_t bytes, char *err, size_t errlen) {
  if (m->staging_bytes >= bytes) return 0;
  cudaFreeHost(m->staging);
  m->staging = NULL;
  m->staging_bytes = 0;
  DEV(cudaMallocHost(&m->staging, bytes));
  m->staging_bytes = bytes;
  return 0;
}

static int cuda_submit(void *impl, const learner_transitions_t *t, char *err, size_t errlen) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  size_t S = (size_t)m->cfg.state_dim;
  long long done = 0;
  size_t row = S * 8 + 4 + 4 + 1 + 8 + 1 + 16 + 1; /* ..., end marker, episode bounds, alignment */
  /* stage through pinned memory in chunks, then async copies into the ring:
   * a chunk of at most 65,536 rows and 64 MiB (a row of a 65,536-float state
   * is 512 KiB), and no more rows than this submit has or 4,096 (so that
   * submits of slowly growing sizes do not pin a new buffer each time) */
  long long chunk = (64LL << 20) / (long long)row;
  if (chunk > 1 << 16) chunk = 1 << 16;
  const long long want = t->n > 4096 ? t->n : 4096;
  if (chunk > want) chunk = want;
  if (chunk < 1) chunk = 1;
  if (ensure_staging(m, (size_t)chunk * row, err, errlen)) return LEARNER_EDEVICE;
  while (done < t->n) {
    long long run = t->n - done;
    if (run > chunk) run = chunk;
    if (run > m->cfg.replay_capacity - m->head) run = m->cfg.replay_capacity - m->head;
    char *p = (char *)m->staging;
    float *hs = (float *)p, *hs2 = hs + run * S;
    int32_t *ha = (int32_t *)(hs2 + run * S);
    float *hr = (float *)(ha + run);
    long long *he = (long long *)(hr + run); /* 8-byte aligned: 2 run (S + 1) floats and ints before it */
    long long *hf = he + run, *hl = hf + run;
    uint8_t *hd = (uint8_t *)(hl + run), *hx = hd + run;
    DEV(cudaStreamSynchronize(m->st)); /* the staging buffer is free again */
    memcpy(hs, t->states + done * S, (size_t)run * S * 4);
    memcpy(hs2, t->next_states + done * S, (size_t)run * S * 4);
    memcpy(ha, t->actions + done, (size_t)run * 4);
    memcpy(hr, t->rewards + done, (size_t)run * 4);
    for (long long j = 0; j < run; j++) {
      he[j] = t->episode_ids ? t->episode_ids[done + j] : 0;
      hd[j] = t->dones[done + j] ? 1 : 0;
      hx[j] = t->episode_ends && t->episode_ends[done + j] ? 1 : 0;
    }
    long long h = m->head;
    /* the episodes (her.h; kernels/cpu/replay.c's episode_add, with the ring as it is
     * after this run): bounds of the new slots here, and an episode closed by
     * this run whose first slots came with an earlier one filled on the device */
    const long long cap = m->cfg.replay_capacity, c0 = m->total, total1 = m->total + run;
    const long long size1 = m->size + run < cap ? m->size + run : cap, head1 = (h + run) % cap;
    long long back_from = -1, back_to = -1, back_val = -1;
    for (long long j = 0; j < run; j++) {
      hf[j] = m->open_first;
      hl[j] = -1;
      if (!hd[j] && !hx[j]) continue;
      const long long cnt = c0 + j, from = m->open_first > total1 - size1 ? m->open_first : total1 - size1;
      for (long long x = from > c0 ? from : c0; x <= cnt; x++) hl[x - c0] = cnt;
      if (from < c0) back_from = from, back_to = c0 - 1, back_val = cnt;
      m->open_first = cnt + 1;
    }
    if (back_val >= 0) DEV((cudaError_t)cuda_episode_fill_last(m, back_from, back_to, back_val, head1, total1, m->st));
    DEV(cudaMemcpyAsync(m->epend + h, hx, (size_t)run, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->ep_first + h, hf, (size_t)run * 8, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->ep_last + h, hl, (size_t)run * 8, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->s + h * S, hs, (size_t)run * S * 4, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->s2 + h * S, hs2, (size_t)run * S * 4, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->a + h, ha, (size_t)run * 4, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->r + h, hr, (size_t)run * 4, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->ep + h, he, (size_t)run * 8, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->done + h, hd, (size_t)run, cudaMemcpyHostToDevice, m->st));
    if (m->cfg.prioritized) DEV((cudaError_t)cuda_replay_add(m, h, h + run - 1, m->st));
    m->head = (h + run) % m->cfg.replay_capacity;
    m->size = m->size + run < m->cfg.replay_capacity ? m->size + run : m->cfg.replay_capacity;
    m->total += run;
    done += run;
  }
  /* the graph reads size (and the masks head and total) from device memory */
  long long sh[3] = {m->size, m->head, m->total};
  DEV(cudaMemcpyAsync(&m->ds->size, sh, sizeof sh, cudaMemcpyHostToDevice, m->st));
  DEV(cudaStreamSynchronize(m->st));
  return LEARNER_OK;
}

/* the most states one pass of Act's forward takes: 4096, and no more than
 * 64 MiB of activations (at least one state), as the CPU backend's act_rows:
 * a wide network's row is megabytes, and the buffers stay with the trainer */
static int cuda_act_rows(const net_layout_t *L) {
  const int64_t row = (int64_t)cuda_acts_floats(L, 1) * 4, k = (64LL << 20) / (row > 0 ? row : 1);
  return k < 1 ? 1 : k > 4096 ? 4096 : (int)k;
}

/* One head set: the argmax per branch on the device, the variance over heads
 * 0. K head sets or priors (docs/learner.md §8): every head's Q on the device
 * (cuda_net_forward_heads), then the mean, the variance and the action by
 * act_select on the host, by the CPU backend's code (learner_act_heads).
 * The states go through in passes of cuda_act_rows (rows are independent:
 * the same values as one pass). */
static int cuda_act(void *impl, const float *states, int n, int noisy, int64_t episode, int32_t *actions, float *q,
                    float *q_var, char *err, size_t errlen) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  const net_layout_t *L = &m->L;
  size_t S = (size_t)m->cfg.state_dim;
  const int most = cuda_act_rows(L), rows = n < most ? n : most;
  if (m->act.rows < rows) {
    cuda_acts_free(&m->act);
    dev_free(m->act_x);
    dev_free(m->act_a);
    m->act_x = NULL;
    m->act_a = NULL;
    if (cuda_acts_alloc(&m->act, L, rows) || dev_alloc_t(&m->act_x, (size_t)rows * S * 4) != cudaSuccess ||
        dev_alloc_t(&m->act_a, (size_t)rows * 4 + 64 * 4) != cudaSuccess) {
      cuda_acts_free(&m->act);
      return snprintf(err, errlen, "count: no GPU memory for %d states", rows), LEARNER_ENOMEM;
    }
  }
  const int heads = L->K > 1 || L->has_prior || L->attn.T;
  const size_t K = (size_t)(L->K < 1 ? 1 : L->K), qw = (size_t)L->q_width;
  if (ensure_staging(m, (size_t)rows * S * 4 + (size_t)rows * (4 + 4 * qw) + (heads ? K * (size_t)rows * qw * 4 : 0),
                     err, errlen))
    return LEARNER_EDEVICE;
  DEV(cudaStreamSynchronize(m->st));
  const float *w = m->on;
  if (noisy && m->cfg.noisy) { /* one draw for the whole call, whatever its passes */
    long long nn = L->n_noise;
    DEV((cudaError_t)cuda_noise(&m->ds->step, m->cfg.seed, NULL, cuda_pz_t{1, 0}, PHILOX_STREAM_NOISE_ACT, 1, m->act_count++, m->act_noise,
                                nn, m->st));
    if (cuda_effective_weights(L, m->on, m->act_noise, m->act_weff, m->st))
      return snprintf(err, errlen, "cuda: noisy weights failed"), LEARNER_EDEVICE;
    w = m->act_weff;
  }
  const int head = learner_act_head(&m->cfg, episode);
  for (int i0 = 0; i0 < n; i0 += rows) {
    const int nr = n - i0 < rows ? n - i0 : rows;
    DEV(cudaStreamSynchronize(m->st)); /* the staging area's last pass is read */
    memcpy(m->staging, states + (size_t)i0 * S, (size_t)nr * S * 4);
    DEV(cudaMemcpyAsync(m->act_x, m->staging, (size_t)nr * S * 4, cudaMemcpyHostToDevice, m->st));
    if (heads) {
      int rc = cuda_net_forward_heads(L, w, m->prior, m->cfg.ensemble_prior_scale, m->act_x, nr, m->cfg.leaky_slope,
                                      m->cfg.v_min, m->cfg.v_max, &m->act, m->st);
      if (rc)
        return snprintf(err, errlen, "cuda: forward failed: %s", cudaGetErrorString((cudaError_t)rc)), LEARNER_EDEVICE;
      float *hq = (float *)((char *)m->staging + (size_t)rows * S * 4);
      DEV(cudaMemcpyAsync(hq, m->act.qk, K * (size_t)nr * qw * 4, cudaMemcpyDeviceToHost, m->st));
      DEV(cudaStreamSynchronize(m->st));
      float *qrow = (float *)malloc(2 * qw * 4), *var = qrow + qw;
      if (!qrow) return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
      for (int r = 0; r < nr; r++) {
        const size_t i = (size_t)i0 + (size_t)r;
        actions[i] = learner_act_heads(L, m->cfg.hp.act_select, m->cfg.hp.ucb_c, head, hq + (size_t)r * qw,
                                       (size_t)nr * qw, qrow, var);
        if (q) memcpy(q + i * qw, qrow, qw * 4);
        if (q_var) memcpy(q_var + i * qw, var, qw * 4);
      }
      free(qrow);
      continue;
    }
    int rc = cuda_net_forward(L, w, m->act_x, nr, m->cfg.leaky_slope, m->cfg.v_min, m->cfg.v_max, &m->act, m->st);
    if (rc)
      return snprintf(err, errlen, "cuda: forward failed: %s", cudaGetErrorString((cudaError_t)rc)), LEARNER_EDEVICE;
    int *dn = (int *)(m->act_a + rows);
    int nh[LEARNER_MAX_BRANCHES];
    for (int d = 0; d < L->D; d++) nh[d] = L->n[d];
    DEV(cudaMemcpyAsync(dn, nh, sizeof(int) * (size_t)L->D, cudaMemcpyHostToDevice, m->st));
    act_argmax_kernel<<<GRID(nr, 128), 0, m->st>>>(m->act.q, nr, L->q_width, L->D, dn, m->act_a);
    LAUNCHED();
    int32_t *ha = (int32_t *)((char *)m->staging + (size_t)rows * S * 4);
    float *hq = (float *)(ha + rows);
    DEV(cudaMemcpyAsync(ha, m->act_a, (size_t)nr * 4, cudaMemcpyDeviceToHost, m->st));
    if (q) DEV(cudaMemcpyAsync(hq, m->act.q, (size_t)nr * 4 * qw, cudaMemcpyDeviceToHost, m->st));
    DEV(cudaStreamSynchronize(m->st));
    memcpy(actions + i0, ha, (size_t)nr * 4);
    if (q) memcpy(q + (size_t)i0 * qw, hq, (size_t)nr * 4 * qw);
    if (q_var) memset(q_var + (size_t)i0 * qw, 0, (size_t)nr * 4 * qw);
  }
  return LEARNER_OK;
}

static int cuda_sync_target(void *impl, float tau) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  long long P = m->L.n_params;
  /* the next step packs the target again (pack.cu) */
  if (cudaMemsetAsync(&m->ds->tg_stale, 1, sizeof(int), m->st)) return LEARNER_EDEVICE;
  if (tau <= 0 || tau >= 1)
    return cudaMemcpyAsync(m->tg, m->on, (size_t)P * 4, cudaMemcpyDeviceToDevice, m->st) ||
                   cudaStreamSynchronize(m->st)
               ? LEARNER_EDEVICE
               : LEARNER_OK;
  int rc = cuda_target_update(m->tg, m->on, P, &m->ds->step, m->hp, tau, m->st);
  rc |= cudaStreamSynchronize(m->st) != cudaSuccess;
  return rc ? LEARNER_EDEVICE : LEARNER_OK;
}

static int cuda_set_hparams(void *impl, const learner_hparams_t *hp) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  /* the graph reads every hyperparameter from device memory: no re-capture,
   * except when n-step turns on or off with HER off (the step then gains or
   * loses its HER/n-step kernel: the graph is captured again at the next step) */
  int her = m->cfg.her_goal_dim > 0 || hp->n_step > 1;
  if (her != m->her_in_graph) {
    if (cudaStreamSynchronize(m->st) != cudaSuccess) return LEARNER_EDEVICE;
    cuda_step_free(m);
    m->her_in_graph = her;
  }
  m->cfg.hp = *hp;
  if (cudaMemcpyAsync(m->hp, hp, sizeof *hp, cudaMemcpyHostToDevice, m->st) != cudaSuccess ||
      cudaStreamSynchronize(m->st) != cudaSuccess)
    return LEARNER_EDEVICE;
  return LEARNER_OK;
}

static int cuda_get_counters(void *impl, learner_counters_t *c) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  dev_state_t ds;
  if (cudaMemcpyAsync(&ds, m->ds, sizeof ds, cudaMemcpyDeviceToHost, m->st) != cudaSuccess ||
      cudaStreamSynchronize(m->st) != cudaSuccess)
    return LEARNER_EDEVICE;
  memset(c, 0, sizeof *c);
  c->step = ds.step;
  c->act_count = m->act_count;
  c->replay_size = m->size;
  c->replay_head = m->head;
  c->replay_total = m->total;
  c->max_leaf = ds.max_leaf;
  c->last = m->last;
  return LEARNER_OK;
}

static int cuda_set_counters(void *impl, const learner_counters_t *c) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  dev_state_t ds;
  memset(&ds, 0, sizeof ds);
  ds.step = c->step;
  ds.size = c->replay_size;
  ds.head = c->replay_head;
  ds.total = c->replay_total;
  ds.max_leaf = c->max_leaf;
  ds.seed = m->cfg.seed;
  ds.tg_stale = 1;
  m->act_count = c->act_count;
  m->size = c->replay_size;
  m->head = c->replay_head;
  m->total = c->replay_total;
  m->last = c->last;
  /* on the learner's stream, finished before the return (a copy on the
   * legacy stream is not ordered with the step's non-blocking streams) */
  if (cudaMemcpyAsync(m->ds, &ds, sizeof ds, cudaMemcpyHostToDevice, m->st) || cudaStreamSynchronize(m->st))
    return LEARNER_EDEVICE;
  return LEARNER_OK;
}

/* Where the state's tensors live, in device memory (state_format.h's
 * registry says which section is which and how long) */
static void cuda_bufs(void *impl, learner_bufs_t *b) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  memset(b, 0, sizeof *b);
  b->online = m->on, b->target = m->tg, b->adam_m = m->m, b->adam_v = m->v;
  b->prior = m->L.has_prior ? m->prior : NULL;
  b->s = m->s, b->s2 = m->s2, b->a = m->a, b->r = m->r, b->done = m->done, b->ep = m->ep, b->epend = m->epend;
  b->prio = m->cfg.prioritized ? m->sum + m->T : NULL;
  b->size = m->size;
  if (m->dt) b->dt_p = m->dt->dt.p, b->dt_m = m->dt->m, b->dt_v = m->dt->v, b->dt_ctr = m->dt->ctr;
}

static int cuda_copy(void *impl, void *dst, const void *src, size_t n, int to_backend) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  /* on the learner's stream, as cuda_sync_target does: the legacy stream's
   * copies and memsets are not ordered with the step's non-blocking streams
   * (a pageable cudaMemcpy may return before its DMA lands); and finished
   * before the return, since a population's step runs on member 0's stream */
  if (cudaMemcpyAsync(dst, src, n, to_backend ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, m->st))
    return LEARNER_EDEVICE;
  /* any section written from the host (a load, a member's copy, a hand-over)
   * may be the target: the next step packs it again (pack.cu) */
  if (to_backend && cudaMemsetAsync(&m->ds->tg_stale, 1, sizeof(int), m->st)) return LEARNER_EDEVICE;
  return cudaStreamSynchronize(m->st) ? LEARNER_EDEVICE : LEARNER_OK;
}

static int cuda_load_done(void *impl) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  /* validate what a CRC cannot: actions and flags in range, priorities positive */
  int64_t A = learner_config_joint_actions(&m->cfg), n = m->size;
  if (n > 0) {
    int32_t *a = (int32_t *)malloc((size_t)n * 4);
    uint8_t *d = (uint8_t *)malloc((size_t)n);
    float *pr = m->cfg.prioritized ? (float *)malloc((size_t)n * 4) : NULL;
    uint8_t *x = (uint8_t *)malloc((size_t)n);
    int64_t *ef = (int64_t *)malloc((size_t)n * 8), *el = (int64_t *)malloc((size_t)n * 8);
    int bad = !a || !d || !x || !ef || !el || (m->cfg.prioritized && !pr);
    bad = bad || cudaMemcpy(a, m->a, (size_t)n * 4, cudaMemcpyDeviceToHost) ||
          cudaMemcpy(d, m->done, (size_t)n, cudaMemcpyDeviceToHost) ||
          cudaMemcpy(x, m->epend, (size_t)n, cudaMemcpyDeviceToHost) ||
          (pr && cudaMemcpy(pr, m->sum + m->T, (size_t)n * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; !bad && i < n; i++)
      bad = a[i] < 0 || a[i] >= A || d[i] > 1 || x[i] > 1 || (pr && !(pr[i] > 0 && isfinite(pr[i])));
    if (!bad) { /* the episode bounds, as the CPU rebuilds them (her.h) */
      m->open_first = her_rebuild_episodes(d, x, m->head, m->total, m->size, m->cfg.replay_capacity, ef, el);
      bad = cudaMemcpy(m->ep_first, ef, (size_t)n * 8, cudaMemcpyHostToDevice) ||
            cudaMemcpy(m->ep_last, el, (size_t)n * 8, cudaMemcpyHostToDevice);
    }
    free(a), free(d), free(pr), free(x), free(ef), free(el);
    if (bad) return LEARNER_ECORRUPT;
  } else {
    m->open_first = m->total; /* no replay: the next transition starts an episode */
  }
  if (m->cfg.prioritized) {
    if (cuda_replay_rebuild(m, m->st) || cudaStreamSynchronize(m->st)) return LEARNER_EDEVICE;
  }
  /* the loaded priors into the step's packs */
  if (cuda_pack_priors(&m->ws.fused, m->st) || cudaStreamSynchronize(m->st)) return LEARNER_EDEVICE;
  return LEARNER_OK;
}

/* beyond the state's tensors (learner.c: the parameters, moments, gradient,
 * replay and episode bounds): what cuda_learner_create allocates, by the
 * functions that size the allocations — its own small arrays, Act's weights
 * and noise, the PER trees (float sums and mins, the owner per leaf), the
 * step's workspace (cuda_dqn_ws_floats: both rows' activations, the
 * effective NoisyNet weights, the generic split-K scratch, the phases'
 * packs and activations), Act's buffers for a pass of cuda_act_rows
 * states — and 64 MiB for what depends on the device (the phases' split-K
 * plan, the graph) */
static int64_t cuda_workspace_estimate(const learner_config_t *c) {
  net_layout_t L;
  net_layout_init(&L, c);
  int64_t T = 1;
  while (T < c->replay_capacity) T <<= 1;
  const int64_t P = L.n_params, B = c->batch, N = L.n_noise ? L.n_noise : 1, A = cuda_act_rows(&L);
  const int64_t own = B * (4 + 8 + 4) /* gdisc, idx, prio */ + (int64_t)sizeof(learner_hparams_t) +
                      (int64_t)sizeof(dev_state_t) + CUDA_NORM_SCRATCH * 8 + N * 4 + P * 4 /* act_weff */;
  const int64_t per = c->prioritized ? 2 * T * 4 * 2 + T * 4 : 0;
  const int64_t step = (int64_t)cuda_dqn_ws_floats(&L, c->batch) * 4;
  const int64_t act = (int64_t)cuda_acts_floats(&L, (int)A) * 4 + A * c->state_dim * 4 + A * 4 + 64 * 4;
  int64_t dt = 0; /* the DT's gradient and activations (dt_cuda.cuh), and Act's copy of its parameters */
  if (c->dt_layers) {
    const int64_t N = 3 * (int64_t)c->dt_context, Tk = (int64_t)c->dt_batch * N, E = c->dt_embed, NL = c->dt_layers;
    dt = 4 * (4 * learner_config_num_dt(c) + Tk * E * (12 * NL + 16) + Tk * 4 * E * (2 * NL + 3) +
              (int64_t)c->dt_batch * c->dt_heads * N * N * (NL + 1) + (int64_t)c->dt_batch * c->dt_context * c->state_dim);
  }
  return own + per + step + act + dt + (64 << 20);
}

static int64_t cuda_memory_free(void) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return (int64_t)free_b;
}

extern "C" const learner_backend_ops_t learner_cuda_ops = {
    "cuda",
    cuda_learner_create,
    cuda_learner_destroy,
    cuda_submit,
    cuda_step,
    cuda_act,
    cuda_sync_target,
    cuda_set_hparams,
    cuda_get_counters,
    cuda_set_counters,
    cuda_bufs,
    cuda_copy,
    cuda_load_done,
    cuda_workspace_estimate,
    cuda_memory_free,
    cuda_group_create,
    cuda_group_member,
    cuda_group_step,
    cuda_group_destroy,
    cuda_dt_step,
    cuda_dt_act,
    cuda_group_dt_step,
    56LL << 20, /* of workspace_estimate's 64 MiB: a member keeps 8 */
};
