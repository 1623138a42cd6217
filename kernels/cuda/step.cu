/*
 * step.cu — the training step's graph: the twin of cpu_step_one
 * (kernels/cpu/learner_cpu.c), as launches on two streams, captured once
 * into a CUDA graph and replayed by Step(n) with no host work per step.
 * This file owns the side stream, the events, the capture and the order of
 * the phases; each phase's kernels are in its own file (step_phases.cuh).
 *
 *   main stream                         side stream
 *   ----------------------------------  -----------------------------------
 *   (fork: ev[5])                       noise, packs (pack.cu)  -> ev[6]
 *   sample + gather (replay.cu)
 *   (join ev[6])
 *   F1..F4, tail (step_forward.cu)
 *   loss (step_loss.cu)               ev[0] batch loss; weight grads group 0 (g2)
 *   B1                           ev[1] group 1 (g1)
 *   B2                           ev[2] group 2 (gh)
 *   B3; group 3 (trunk 1);             gradient norm, all layers but trunk 1
 *     its part of the norm
 *   (join ev[4])                        new PER priorities
 *   AdamW + target update (optim.cu)
 *                                ev[5] statistics (finish_kernel) -> ev[6]
 *   (join ev[6])
 *
 * The gradient norm in two parts: the other layers' on the side stream
 * beside B3, once their gradients exist; trunk-1's weight gradient right
 * after B3 on the main stream, then its part (the norm launch that followed
 * the join was ~5 µs on the critical path). The last of the norm's blocks
 * computes the clip scale for AdamW. Shapes whose loss the fused kernels
 * cannot stage (step_loss.cu) run the generic kernels (generic_loss.cu) on the main
 * stream alone, in the CPU's order.
 *
 * Every reduction has one fixed order, so two runs with the same seed are
 * bit-identical; the graph and the plain launches (cfg.cuda_graph = 0) too.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../philox.h"
#include "arena.cuh"
#include "cuda_check.h"
#include "gemm_table.cuh"
#include "learner_cuda.cuh"
#include "optim.cuh"

// kernels

/* the step's bookkeeping, last in the graph */
__global__ void finish_kernel(dev_state_t *ds, const float *loss, const float *q, const learner_hparams_t *hp,
                              int prioritized, long long ps) {
  if (threadIdx.x || blockIdx.x) return;
  ds = pz_at(ds, ps), loss = pz_at(loss, ps), q = pz_at(q, ps), hp = pz_at(hp, ps);
  if (!isfinite(ds->grad_norm)) { /* the divergence guard, or a halt: this step was not applied */
    if (__float_as_uint(ds->grad_norm) == CUDA_HALT_BITS) ds->halted += 1;
    return;
  }
  ds->applied += 1;
  ds->gn_last = ds->grad_norm;
  ds->loss_last = *loss;
  ds->q_last = *q;
  ds->beta_last = prioritized ? beta_at(hp, ds->step) : 1.0f;
  ds->loss_sum += *loss;
  ds->gn_sum += ds->grad_norm;
  ds->q_sum += *q;
  ds->step += 1;
}

// launchers

/* ---- the phases' buffers, plan, stream and events */

/* f's shapes from L (f zeroed first); 0 when the phases cannot stage them
 * (the generic kernels run the step then) */
static int fused_shape(cuda_fused_t *f, const net_layout_t *L) {
  f->K = L->K < 1 ? 1 : L->K;
  f->pr = L->has_prior ? 1 : 0;
  f->VHp = L->VH * (1 + f->pr), f->AHp = L->AH * (1 + f->pr);
  f->SW1 = f->VHp + L->D * f->AHp;
  f->AW = L->a_width;
  f->SO = L->Z + L->a_width;
  f->SH2 = (long long)L->Z * f->VHp + (long long)f->AW * f->AHp;
  f->HC = f->K * f->SW1;
  f->O2 = f->K * f->SO;
  f->LW = f->K * f->AW;
  f->ens = f->K > 1;
  f->mask_p = 1.0f;
  for (int d = 0, o = 0; d < L->D; d++) f->aoff[d] = o, o += L->n[d] * L->Z;
  /* the generic kernels when the loss kernel cannot stage the shapes (they
   * have one head set: an ensemble needs the phases) */
  if ((f->K == 1 ? !cuda_loss_fits(L) : !cuda_loss_ens_fits(L)) || L->Z > LEARNER_MAX_ATOMS) return 0;
  /* attn.cu holds a row's attention in one block's shared memory */
  if (!cuda_attn_fits(L)) return 0;
  f->attn = L->attn.T > 0;
  cuda_pack_layout(L, f);
  return 1;
}

/* f->mem's floats: the packs, then every activation of the 3B rows, then
 * the B rows' gradients */
static size_t fused_mem_floats(const cuda_fused_t *f, const net_layout_t *L, int B) {
  const size_t b = (size_t)B;
  const size_t att = f->attn ? cuda_attn_acts_floats(L, 3 * b) + 6 * b * L->H2 + cuda_attn_wgrad_floats(L, B) : 0;
  /* the ensemble loss's masks [B,K] and ce_mean [B] */
  const size_t ens = f->K > 1 || f->pr ? b * f->K + b : 0;
  return (size_t)f->pw.total + 3 * b * f->LW + 3 * b * ((size_t)L->H1 + L->H2 + f->HC) +
         b * ((size_t)f->O2 + f->HC + L->H2 + L->H1) + 3 * b * f->O2 + (size_t)f->pw.total + ens + att;
}

extern "C" size_t cuda_fused_floats(const net_layout_t *L, int B) {
  cuda_fused_t *f = (cuda_fused_t *)calloc(1, sizeof *f);
  const size_t n = f && fused_shape(f, L) ? fused_mem_floats(f, L, B) : 0;
  free(f);
  return n;
}

extern "C" int cuda_fused_alloc(cuda_fused_t *f, const net_layout_t *L, int B, int tensor_cores, int gemm_occupancy,
                                const float *x) {
  memset(f, 0, sizeof *f);
  f->pz.n = 1; /* a population sets its members' (group.cu) */
  if (!fused_shape(f, L)) return 0;
  f->tc = tensor_cores ? 1 : 0;
  int rc0;
  const size_t b = (size_t)B;
  const size_t awg = cuda_attn_wgrad_floats(L, B);
  const int ens = f->K > 1 || f->pr; /* the ensemble loss's masks [B,K] and ce_mean [B] */
  cudaError_t e;
  if ((e = dev_alloc_t(&f->mem, fused_mem_floats(f, L, B) * sizeof(float))) != cudaSuccess) return (int)e;
  float *p = f->mem;
  f->w_on = p, p += f->pw.total;
  f->logp = p, p += 3 * b * f->LW;
  f->h1 = p, p += 3 * b * L->H1;
  f->h = p, p += 3 * b * L->H2;
  f->hh = p, p += 3 * b * f->HC;
  f->O = p, p += 3 * b * f->O2;
  f->w_tg = p, p += f->pw.total;
  f->g2 = p, p += b * f->O2;
  f->g1 = p, p += b * f->HC;
  f->gh = p, p += b * L->H2;
  f->gt1 = p, p += b * L->H1;
  if (ens) {
    f->ens_mask = p, p += b * f->K;
    f->ce_mean = p, p += b;
  }
  if (f->attn) {
    p = cuda_attn_acts_place(L, &f->at, 3 * b, p);
    const size_t w = b * L->H2;
    f->ag.dte = p, p += w;
    f->ag.dtq = p, p += w;
    f->ag.dtk = p, p += w;
    f->ag.dtv = p, p += w;
    f->ag.dtx = p, p += w;
    f->gatt = p, p += w;
    f->awg = p; /* its last floats are the split arrival counters: zero */
    if ((e = cudaMemset(f->awg, 0, sizeof(float) * awg)) != cudaSuccess) return (int)e;
  }
  if ((rc0 = cuda_pack_table(L, f))) return rc0; /* the sets' jobs; a population packs by them (pack.cu) */
  /* F1..F4, B1..B3, the weight-gradient groups: one table, planned at once */
  gemm_table_t *t = (gemm_table_t *)calloc(1, sizeof *t);
  if (!t) return (int)cudaErrorMemoryAllocation;
  int rc = forward_problems(L, f, B, x, t);
  if (!rc) rc = backward_problems(L, f, B, x, t);
  if (!rc) rc = gemm_plan(f, t, gemm_occupancy);
  free(t);
  if (rc) return rc;
  if ((e = cudaStreamCreateWithFlags(&f->side, cudaStreamNonBlocking)) != cudaSuccess) return (int)e;
  for (int i = 0; i < 7; i++)
    if ((e = cudaEventCreateWithFlags(&f->ev[i], cudaEventDisableTiming)) != cudaSuccess) return (int)e;
  f->ok = 1;
  return 0;
}

extern "C" void cuda_fused_free(cuda_fused_t *f) {
  dev_free(f->mem);
  dev_free(f->pack_tab);
  dev_free(f->probs);
  dev_free(f->wg_maps);
  dev_free(f->gpart);
  dev_free(f->gcnt);
  for (int i = 0; i < 7; i++)
    if (f->ev[i]) cudaEventDestroy(f->ev[i]);
  if (f->side) cudaStreamDestroy(f->side);
  memset(f, 0, sizeof *f);
}

/* ---- the loss and gradient */

/* the gradient norm's two parts (optim.cuh's cuda_norm_partial): part 0
 * over every layer but trunk-1, part 1 over trunk-1's (layer 0: [0, n0)) */
#define NORM_T1_BLOCKS 8
static int norm_part(cuda_learner_t *m, int part, cudaStream_t st) {
  const long long n0 = m->L.layer[1].off_w, P = m->L.n_params;
  if (part == 0)
    return cuda_norm_partial(m->grad + n0, P - n0, m->norm_scratch, 0, CUDA_NORM_PARTS - NORM_T1_BLOCKS,
                             &m->ds->grad_norm, &m->ds->step, m->hp, &m->ds->halt_next, m->ws.fused.pz, st);
  return cuda_norm_partial(m->grad, n0, m->norm_scratch, CUDA_NORM_PARTS - NORM_T1_BLOCKS, NORM_T1_BLOCKS,
                           &m->ds->grad_norm, &m->ds->step, m->hp, &m->ds->halt_next, m->ws.fused.pz, st);
}

/* Loss and gradient of the batch in ws on the phases: forward and loss on
 * st, then B1..B3 on st with the batch loss and each weight-gradient group
 * on the side stream as soon as the gradient it reads exists (each backward
 * phase is latency-bound, leaving most of the GPU idle), joined before the
 * return. m: the training step this is part of (NULL: the loss and gradient
 * alone) — its packs are already enqueued, the gradient norm is split
 * beside B3 and the new PER priorities follow on the side stream, where they
 * run beside what the caller enqueues next (it joins again). */
static int fused_loss_grad(const net_layout_t *L, const cuda_dqn_hp_t *hp, const float *online, const float *target,
                           int noisy, cuda_dqn_ws_t *ws, float *grad, cuda_learner_t *m, cudaStream_t st) {
  cuda_fused_t *f = &ws->fused;
  const int B = ws->B;
  const float sl = hp->slope, *fn = ws->fn_on;
  cudaStream_t sd = f->side;
  if (!m) {
    f->p_on = online, f->p_tg = target;
    CUDA_RET(cuda_pack_priors(f, st));
    CUDA_RET(cuda_pack_weights(L, f, online, target, noisy, ws->fn_on, ws->fn_tg, NULL, st));
  }
  CUDA_RET(cuda_forward(L, f, B, sl, grad, fn, st));
  if (f->ens) CUDA_RET(cuda_loss_ens(L, hp, f, B, ws->r, ws->done, ws->w, ws->a, ws->loss_i, st));
  else CUDA_RET(cuda_loss(L, hp, f, B, ws->r, ws->done, ws->w, ws->a, ws->loss_i, ws->best, st));
  CUDA_RET(cudaEventRecord(f->ev[0], st));
  CUDA_RET(cudaStreamWaitEvent(sd, f->ev[0], 0));
  CUDA_RET(cuda_batch_loss(ws->loss_i, ws->loss_i + B, ws->w, B, L->D * f->K, ws->loss, ws->q_taken, f->pz, sd));
  CUDA_RET(cuda_weight_grads(f, 0, sl, grad, fn, sd));
  for (int k = 1; k <= 3; k++) {
    CUDA_RET(cuda_backward(f, k, sl, grad, fn, st));
    if (k == 2 && f->attn) /* B2 gave dL/dh': the attention's backward gives trunk 2's gh */
      CUDA_RET(cuda_attn_backward(L, f->p_on, &f->at, &f->ag, B, f->gatt, f->h, sl, f->gh, f->pz, st));
    if (k == 3 && m) {
      CUDA_RET(norm_part(m, 0, sd));
      CUDA_RET(cuda_weight_grads(f, 3, sl, grad, fn, st));
      CUDA_RET(norm_part(m, 1, st));
      break;
    }
    CUDA_RET(cudaEventRecord(f->ev[k], st));
    CUDA_RET(cudaStreamWaitEvent(sd, f->ev[k], 0));
    if (k == 2 && f->attn) /* the attention's parameter gradients, beside B3 */
      CUDA_RET(cuda_attn_wgrad(L, &f->at, &f->ag, B, f->gatt, f->awg, grad, f->pz, sd));
    CUDA_RET(cuda_weight_grads(f, k, sl, grad, fn, sd));
  }
  CUDA_RET(cudaEventRecord(f->ev[4], sd));
  CUDA_RET(cudaStreamWaitEvent(st, f->ev[4], 0));
  if (m && m->cfg.prioritized) { /* after both norm parts: the divergence guard reads the norm */
    CUDA_RET(cudaEventRecord(f->ev[3], st)); /* ev[3] is free: the k = 3 pass breaks before recording it */
    CUDA_RET(cudaStreamWaitEvent(sd, f->ev[3], 0));
    CUDA_RET(cuda_replay_update_priorities(m, sd));
  }
  return 0;
}

extern "C" int cuda_dqn_loss_grad(const net_layout_t *L, const cuda_dqn_hp_t *hp, const float *online,
                                  const float *target, int noisy, cuda_dqn_ws_t *ws, float *grad, cudaStream_t st) {
  if (ws->fused.ok && grad) return fused_loss_grad(L, hp, online, target, noisy, ws, grad, NULL, st);
  return cuda_dqn_loss_grad_generic(L, hp, online, target, noisy, ws, grad, st);
}

/* ---- the training step */

#define DEV(call) CUDA_TRY(call, err, errlen)
#define LAUNCHED() CUDA_TRY(cudaGetLastError(), err, errlen)

/* the launches of one training step (captured once, or launched directly) */
static int enqueue_step(cuda_learner_t *m, char *err, size_t errlen) {
  const learner_config_t *c = &m->cfg;
  const net_layout_t *L = &m->L;
  cuda_dqn_ws_t *ws = &m->ws;
  cuda_fused_t *f = &ws->fused;
  const cuda_dqn_hp_t hp = {c->hp.gamma,        c->v_min,      c->v_max, c->leaky_slope, c->double_dqn,
                            &m->hp->gamma, m->her_in_graph ? m->gdisc : NULL};
  const long long P = L->n_params;
  if (!f->ok) { /* the generic kernels, one stream */
    if (c->noisy) {
      DEV((cudaError_t)cuda_noise(&m->ds->step, c->seed, NULL, f->pz, PHILOX_STREAM_NOISE_ONLINE, 0, 0, ws->fn_on,
                                  L->n_noise, m->st));
      DEV((cudaError_t)cuda_noise(&m->ds->step, c->seed, NULL, f->pz, PHILOX_STREAM_NOISE_TARGET, 0, 0, ws->fn_tg,
                                  L->n_noise, m->st));
    }
    DEV((cudaError_t)cuda_replay_sample(m, NULL, m->st));
    int rc = cuda_dqn_loss_grad_generic(L, &hp, m->on, m->tg, c->noisy, ws, m->grad, m->st);
    if (rc) return snprintf(err, errlen, "cuda: loss launch failed: %s", cudaGetErrorString((cudaError_t)rc)), -3;
    DEV((cudaError_t)cuda_norm_adamw_target(m->on, m->grad, m->m, m->v, m->tg, P, &m->ds->grad_norm, m->norm_scratch,
                                             &m->ds->step, m->hp, 0, NULL, &m->ds->halt_next, &m->ds->tg_stale, f->pz,
                                             m->st));
    if (c->prioritized) DEV((cudaError_t)cuda_replay_update_priorities(m, m->st));
    finish_kernel<<<1, 1, 0, m->st>>>(m->ds, ws->loss, ws->q_taken, m->hp, c->prioritized, 0);
    LAUNCHED();
    return 0;
  }
  /* the noise and the weight packs need only the parameters, so they run on
   * the side stream beside the replay sample */
  cudaStream_t sd = f->side;
  DEV(cudaEventRecord(f->ev[5], m->st));
  DEV(cudaStreamWaitEvent(sd, f->ev[5], 0));
  if (c->noisy) {
    DEV((cudaError_t)cuda_noise(&m->ds->step, c->seed, &m->ds->seed, f->pz, PHILOX_STREAM_NOISE_ONLINE, 0, 0, ws->fn_on,
                                L->n_noise, sd));
    DEV((cudaError_t)cuda_noise(&m->ds->step, c->seed, &m->ds->seed, f->pz, PHILOX_STREAM_NOISE_TARGET, 0, 0, ws->fn_tg,
                                L->n_noise, sd));
  }
  /* the target's pack only when the target changed (or its noise: every step) */
  DEV((cudaError_t)cuda_pack_weights(L, f, m->on, m->tg, c->noisy, ws->fn_on, ws->fn_tg,
                                     c->noisy ? NULL : &m->ds->tg_stale, sd));
  DEV(cudaEventRecord(f->ev[6], sd));
  DEV((cudaError_t)cuda_replay_sample(m, (unsigned *)(m->norm_scratch + CUDA_NORM_PARTS), m->st));
  DEV(cudaStreamWaitEvent(m->st, f->ev[6], 0));
  int rc = fused_loss_grad(L, &hp, m->on, m->tg, c->noisy, ws, m->grad, m, m->st);
  if (rc) return snprintf(err, errlen, "cuda: loss launch failed: %s", cudaGetErrorString((cudaError_t)rc)), -3;
  /* the norm is done (both parts ordered before this call): AdamW and the
   * target update; the statistics need the norm, not the update: beside it */
  DEV((cudaError_t)cuda_norm_adamw_target(m->on, m->grad, m->m, m->v, m->tg, P, &m->ds->grad_norm, m->norm_scratch,
                                           &m->ds->step, m->hp, 2, f->ev[5], &m->ds->halt_next, &m->ds->tg_stale, f->pz,
                                           m->st));
  DEV(cudaStreamWaitEvent(sd, f->ev[5], 0));
  finish_kernel<<<dim3(1, 1, (unsigned)f->pz.n), 1, 0, sd>>>(m->ds, ws->loss, ws->q_taken, m->hp, c->prioritized,
                                                             f->pz.stride);
  LAUNCHED();
  DEV(cudaEventRecord(f->ev[6], sd));
  DEV(cudaStreamWaitEvent(m->st, f->ev[6], 0));
  return 0;
}

/* Replays run in groups of STEP_GROUP with at most two groups in flight: the
 * host looks at the stop (learner_step_until) before each group and, while
 * it waits for the older group, every STOP_POLL_NS; once the stop fires it
 * launches nothing more and sets the halt word, ds->halt_next in device
 * memory, by a 4-byte copy on its own stream (halt_st) that lands while the
 * queued replays run; the norm stage of each replay that starts after it
 * reads 1 and applies nothing. The replays read no host memory: a read of a
 * mapped host word over PCIe in the norm's last block cost ~1.3 µs a step,
 * in each of its blocks ~130 µs (kernels/dev/DEVICE_NOTES.md, item 64). */
#define STEP_GROUP 16
#define STOP_POLL_NS 50000

/* sets the halt word of the replays queued on m->st: m's, or every member's
 * of the group g (m its member 0) */
static cudaError_t halt_replays(cuda_learner_t *m, const cuda_group_t *g) {
  if (!g) return cudaMemcpyAsync(&m->ds->halt_next, m->halt_one, sizeof m->ds->halt_next, cudaMemcpyHostToDevice,
                                 m->halt_st);
  return cudaMemcpy2DAsync(&m->ds->halt_next, g->stride, g->halts, sizeof(int), sizeof(int), (size_t)g->n,
                           cudaMemcpyHostToDevice, m->halt_st);
}

/* waits for ev; meanwhile a stop that fires sets the halt words (1 returned
 * through *stopped). 0 or a CUDA error. */
static cudaError_t wait_or_halt(cuda_learner_t *m, const cuda_group_t *g, cudaEvent_t ev, learner_stop_ctl_t *stop,
                                int *stopped) {
  for (;;) {
    cudaError_t e = cudaEventQuery(ev);
    if (e != cudaErrorNotReady) return e;
    if (!*stopped && learner_should_stop(stop)) {
      *stopped = 1;
      e = halt_replays(m, g);
      if (e != cudaSuccess) return e;
    }
    struct timespec ts = {0, STOP_POLL_NS};
    nanosleep(&ts, NULL);
  }
}

/* a step's launches on m's stream: one learner's (enqueue_one, ctx m) or a
 * group's (enqueue_group, ctx the group) */
typedef int (*enqueue_fn)(void *ctx, char *err, size_t errlen);

static int enqueue_one(void *ctx, char *err, size_t errlen) { return enqueue_step((cuda_learner_t *)ctx, err, errlen); }

/* the launches of enq(ctx) captured on m's stream as *graph, instantiated as *exec */
static int capture(cuda_learner_t *m, enqueue_fn enq, void *ctx, cudaGraph_t *graph, cudaGraphExec_t *exec, char *err,
                   size_t errlen) {
  DEV(cudaStreamBeginCapture(m->st, cudaStreamCaptureModeThreadLocal));
  int rc = enq(ctx, err, errlen);
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(m->st, &g);
  if (rc || e != cudaSuccess) { /* a launcher's own check failed, or the capture: no graph kept */
    if (g) cudaGraphDestroy(g);
    if (rc) return LEARNER_EDEVICE;
    DEV(e);
  }
  if ((e = cudaGraphInstantiate(exec, g, 0)) != cudaSuccess) {
    cudaGraphDestroy(g);
    *exec = NULL;
    DEV(e);
  }
  *graph = g;
  return 0;
}

/* n replays on m's stream: of exec, or of enq(ctx)'s launches each time
 * (exec NULL: cfg.cuda_graph = 0), in groups of STEP_GROUP; the replays
 * launched and whether a stop halted them through *launched, *stopped */
static int run_replays(cuda_learner_t *m, const cuda_group_t *g, cudaGraphExec_t exec, enqueue_fn enq, void *ctx,
                       int n, learner_stop_ctl_t *stop, int *launched_out, int *stopped_out, char *err,
                       size_t errlen) {
  int launched = 0, stopped = 0;
  for (int k = 0; k < n; k++) {
    if (k % STEP_GROUP == 0) {
      if (k >= 2 * STEP_GROUP) DEV(wait_or_halt(m, g, m->group_done[(k / STEP_GROUP) % 2], stop, &stopped));
      if (stopped || learner_should_stop(stop)) {
        if (!stopped && launched) DEV(halt_replays(m, g)); /* the replays still queued apply nothing */
        stopped = 1;
        break;
      }
    }
    if (exec) {
      DEV(cudaGraphLaunch(exec, m->st));
    } else if (enq(ctx, err, errlen)) {
      return LEARNER_EDEVICE;
    }
    launched++;
    if (k % STEP_GROUP == STEP_GROUP - 1 || k == n - 1)
      DEV(cudaEventRecord(m->group_done[(k / STEP_GROUP) % 2], m->st));
  }
  if (launched) DEV(wait_or_halt(m, g, m->group_done[((launched - 1) / STEP_GROUP) % 2], stop, &stopped));
  if (stopped) DEV(cudaStreamSynchronize(m->halt_st)); /* landed before the next call's reset */
  *launched_out = launched, *stopped_out = stopped;
  return 0;
}

/* a call's outcome for m from its counters ds: its statistics (m->last and
 * *st), and LEARNER_OK, LEARNER_EDIVERGED or LEARNER_ESTOPPED */
static int call_result(cuda_learner_t *m, const dev_state_t *ds, int launched, int wanted,
                       const learner_stop_ctl_t *stop, learner_stats_t *st, char *err, size_t errlen) {
  const int ran = (int)ds->applied, halted = (int)ds->halted, n = ran;
  learner_stats_t *s = &m->last;
  s->step = ds->step;
  s->replay_size = m->size;
  s->replay_total = m->total;
  s->steps_run = n;
  s->loss_mean = n ? (float)(ds->loss_sum / n) : 0;
  s->loss_last = ds->loss_last;
  s->grad_norm_mean = n ? (float)(ds->gn_sum / n) : 0;
  s->grad_norm_last = ds->gn_last; /* the last applied step's, as the CPU reports it */
  s->q_mean = n ? (float)(ds->q_sum / n) : 0;
  s->per_beta = ds->beta_last;
  if (st) *st = *s;
  if (ran + halted < launched) { /* the divergence guard stopped the call (learner.h) */
    snprintf(err, errlen,
             "step %llu diverged: gradient norm %g; it was not applied (the state is step %llu's, after %d of this "
             "call's steps)",
             ds->step + 1, (double)ds->grad_norm, ds->step, ran);
    return LEARNER_EDIVERGED;
  }
  if (ran < wanted) {
    snprintf(err, errlen, "stopped after %d of %d steps (%s)", ran, wanted,
             stop->why == LEARNER_STOP_DEADLINE ? "its deadline passed" : "its stop flag was set");
    return LEARNER_ESTOPPED;
  }
  return LEARNER_OK;
}

extern "C" int cuda_step(void *impl, int n, learner_stop_ctl_t *stop, learner_stats_t *st, char *err,
                         size_t errlen) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  if (m->size < m->cfg.batch) {
    snprintf(err, errlen, "replay holds %lld transitions, a step needs batch = %d", m->size, m->cfg.batch);
    return LEARNER_EEMPTY;
  }
  const int use_graph = m->cfg.cuda_graph != 0;
  /* zero the per-call sums: loss_sum, gn_sum, q_sum, applied, halted */
  double zero[5] = {0, 0, 0, 0, 0};
  DEV(cudaMemcpyAsync(&m->ds->loss_sum, zero, sizeof zero, cudaMemcpyHostToDevice, m->st));
  DEV(cudaMemsetAsync(&m->ds->halt_next, 0, sizeof m->ds->halt_next, m->st)); /* a stop of the last call */
  int rc;
  if (use_graph && !m->exec && n > 0 && (rc = capture(m, enqueue_one, m, &m->graph, &m->exec, err, errlen))) return rc;
  int launched = 0, stopped = 0;
  rc = run_replays(m, NULL, use_graph ? m->exec : NULL, enqueue_one, m, n, stop, &launched, &stopped, err, errlen);
  if (rc) return rc;
  dev_state_t ds;
  DEV(cudaMemcpyAsync(&ds, m->ds, sizeof ds, cudaMemcpyDeviceToHost, m->st));
  DEV(cudaStreamSynchronize(m->st));
  rc = call_result(m, &ds, launched, n, stop, st, err, errlen);
  if (rc == LEARNER_OK) stop->why = LEARNER_STOP_NONE; /* the stop came after the last step: every one ran */
  return rc;
}

/* ---- a population's step: every member in the same launches (group.cu) */

/* the launches of every member's step, as member 0's with grid z = members
 * (pz.cuh), captured on member 0's streams; the HER/n-step kernel when any
 * member runs it (a member without gets gamma as its rows' discounts: the
 * same numbers) */
static int enqueue_group(void *ctx, char *err, size_t errlen) {
  cuda_group_t *g = (cuda_group_t *)ctx;
  cuda_learner_t *m = g->m[0];
  cuda_fused_t *f = &m->ws.fused;
  const cuda_pz_t alone = f->pz;
  const int her = m->her_in_graph;
  f->pz = cuda_pz_t{g->n, (long long)g->stride};
  m->her_in_graph = g->her;
  int rc = enqueue_step(m, err, errlen);
  f->pz = alone, m->her_in_graph = her;
  return rc;
}

extern "C" int cuda_group_step(void *group, int n, const int *skip, learner_stop_ctl_t *stop, learner_stats_t *st,
                               int *rcs, char (*errs)[512], char *err, size_t errlen) {
  cuda_group_t *g = (cuda_group_t *)group;
  cuda_learner_t *m = g->m[0];
  const size_t R = CUDA_GROUP_RESET_BYTES;
  /* each member's per-call sums zeroed; its halt word 1 when skipped */
  for (int i = 0; i < g->n; i++) {
    unsigned char *r = g->resets + R * (size_t)i;
    const int h = skip[i] ? 1 : 0;
    memset(r, 0, R);
    memcpy(r + R - sizeof h, &h, sizeof h);
  }
  DEV(cudaMemcpy2DAsync(&m->ds->loss_sum, g->stride, g->resets, R, R, (size_t)g->n, cudaMemcpyHostToDevice, m->st));
  int her = 0;
  for (int i = 0; i < g->n; i++) her |= g->m[i]->her_in_graph;
  const int use_graph = m->cfg.cuda_graph != 0;
  int rc;
  if (use_graph && n > 0 && (!g->exec || her != g->her)) {
    if (g->exec) DEV(cudaGraphExecDestroy(g->exec));
    if (g->graph) DEV(cudaGraphDestroy(g->graph));
    g->exec = NULL, g->graph = NULL;
    g->her = her;
    if ((rc = capture(m, enqueue_group, g, &g->graph, &g->exec, err, errlen))) return rc;
  }
  if (!use_graph) g->her = her; /* the plain launches read it each time (a graph keeps the one it was captured with) */
  int launched = 0, stopped = 0;
  rc = run_replays(m, g, use_graph ? g->exec : NULL, enqueue_group, g, n, stop, &launched, &stopped, err, errlen);
  if (rc) return rc;
  dev_state_t *ds = (dev_state_t *)malloc(sizeof *ds * (size_t)g->n);
  if (!ds) return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
  cudaError_t e = cudaMemcpy2DAsync(ds, sizeof *ds, m->ds, g->stride, sizeof *ds, (size_t)g->n, cudaMemcpyDeviceToHost,
                                    m->st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(m->st);
  if (e != cudaSuccess) {
    free(ds);
    DEV(e);
  }
  int any_stopped = 0;
  for (int i = 0; i < g->n; i++) {
    rcs[i] = LEARNER_OK;
    if (skip[i]) continue; /* its statistics are the caller's */
    rcs[i] = call_result(g->m[i], &ds[i], launched, n, stop, &st[i], errs[i], sizeof errs[i]);
    any_stopped |= rcs[i] == LEARNER_ESTOPPED;
  }
  free(ds);
  if (!any_stopped) stop->why = LEARNER_STOP_NONE;
  return LEARNER_OK;
}

extern "C" void cuda_step_free(cuda_learner_t *m) {
  if (m->exec) cudaGraphExecDestroy(m->exec);
  if (m->graph) cudaGraphDestroy(m->graph);
  m->exec = NULL, m->graph = NULL;
}
