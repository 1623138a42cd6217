/*
 * learner_dt_cuda.cu — the CUDA learner's Decision Transformer (backend.h's
 * dt_step and dt_act; docs/learner.md §16): its device state beside the
 * learner's (parameters, moments, step counter: the state's DT sections),
 * PretrainDT as replays of one captured step (dt_train.cu) checked between
 * groups for a stop, a halt or a divergence, and Act's forward on one
 * window. The parameters start from the CPU's initialisers, so both
 * backends begin alike.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "dt_train_cuda.cuh"
#include "dt_window.h"
#include "learner_cuda.cuh"
#include "model.h"

/* replays between the checks for a stop (docs/learner.md §16): a stop or a
 * deadline ends the call within this many whole steps */
#define DT_GROUP 16

extern "C" int cuda_learner_dt_create(cuda_learner_t *m, const learner_config_t *c, char *err, size_t errlen) {
  if (!c->dt_layers) return LEARNER_OK;
  static thread_local model_t reg; /* ~45 KB: not on the caller's stack */
  dt_layout_t L;
  const int rc = dt_layout_from_config(c, &reg, &L, err, errlen);
  if (rc) return rc;
  m->dt = (cuda_dt_train_t *)calloc(1, sizeof *m->dt);
  m->dt_act = (cuda_dt_t *)calloc(1, sizeof *m->dt_act);
  float *host = (float *)malloc(sizeof(float) * (size_t)L.n_params);
  int e = !m->dt || !m->dt_act || !host;
  if (!e) e = cuda_dt_train_alloc(m->dt, &L, c->dt_batch);
  if (!e) e = cuda_dt_alloc(m->dt_act, &L, 1);
  if (!e) m->dt->dt.tc = m->dt_act->tc = c->tensor_cores ? 1 : 0; /* the GEMMs in TF32 too */
  /* Act's one window: rounding every weight each call (dt_pre) would cost
   * more than its GEMMs' own rounding of them; the logits are the same bits
   * either way */
  if (!e) m->dt_act->pre = 0;
  if (!e) {
    dt_init_params(&reg, c->seed, host);
    e = (int)cudaMemcpy(m->dt->dt.p, host, sizeof(float) * (size_t)L.n_params, cudaMemcpyHostToDevice);
    if (!e) e = (int)cudaDeviceSynchronize(); /* landed before any stream's first pre-training step */
  }
  free(host);
  if (e) {
    snprintf(err, errlen, "dt_batch: GPU allocation for the Decision Transformer failed");
    return LEARNER_ENOMEM;
  }
  return LEARNER_OK;
}

extern "C" void cuda_learner_dt_free(cuda_learner_t *m) {
  if (m->dt_exec) cudaGraphExecDestroy(m->dt_exec);
  if (m->dt_graph) cudaGraphDestroy(m->dt_graph);
  if (m->dt) cuda_dt_train_free(m->dt);
  if (m->dt_act) cuda_dt_free(m->dt_act);
  free(m->dt), free(m->dt_act);
  m->dt = NULL, m->dt_act = NULL, m->dt_exec = NULL, m->dt_graph = NULL;
}

static cuda_dt_replay_t replay_of(const cuda_learner_t *m) {
  cuda_dt_replay_t rp;
  rp.s = m->s, rp.r = m->r, rp.a = m->a, rp.ep_first = m->ep_first, rp.ep_last = m->ep_last;
  rp.ring = &m->ds->size; /* size, head, total: consecutive in dev_state_t */
  rp.cap = m->cfg.replay_capacity, rp.S = m->cfg.state_dim;
  return rp;
}

/* one step of t's members queued on m->st (member 0's for a group): the
 * captured graph's replay (captured into *graph, *exec the first time), or
 * its launches */
static int launch(cuda_learner_t *m, cuda_dt_train_t *t, const cuda_dt_replay_t *rp, cudaGraph_t *graph,
                  cudaGraphExec_t *exec) {
  const unsigned long long *seed = &m->ds->seed; /* each member's (t's pz moves it) */
  if (!m->cfg.cuda_graph) return cuda_dt_train_step(t, rp, seed, m->cfg.dt_rtg_scale, m->hp, m->st);
  if (!*exec) {
    CUDA_RET(cudaStreamBeginCapture(m->st, cudaStreamCaptureModeThreadLocal));
    int e = cuda_dt_train_step(t, rp, seed, m->cfg.dt_rtg_scale, m->hp, m->st);
    cudaGraph_t g = NULL;
    const cudaError_t e2 = cudaStreamEndCapture(m->st, &g);
    if (e || e2 != cudaSuccess) {
      if (g) cudaGraphDestroy(g);
      return e ? e : (int)e2;
    }
    const cudaError_t e3 = cudaGraphInstantiate(exec, g, 0);
    if (e3 != cudaSuccess) {
      cudaGraphDestroy(g);
      *exec = NULL;
      return (int)e3;
    }
    *graph = g;
  }
  return (int)cudaGraphLaunch(*exec, m->st);
}

/* member m's statistics and code for a call of n steps from its sums (has:
 * the replay held a whole episode; stopped: learner_should_stop's) */
static int call_result(cuda_learner_t *m, int has, const float *sums, int stopped, int n, learner_dt_stats_t *st,
                       char *err, size_t errlen) {
  unsigned long long ctr = 0;
  double acc[2] = {0, 0};
  CUDA_TRY(cudaMemcpy(&ctr, m->dt->ctr, sizeof ctr, cudaMemcpyDeviceToHost), err, errlen);
  if (has) CUDA_TRY(cudaMemcpy(acc, m->dt->acc, sizeof acc, cudaMemcpyDeviceToHost), err, errlen);
  const int ran = (int)sums[DT_SUM_STEPS];
  st->dt_step = ctr, st->steps_run = ran;
  st->loss_mean = ran ? (float)(acc[0] / ran) : 0, st->grad_norm_mean = ran ? (float)(acc[1] / ran) : 0;
  st->loss_last = sums[DT_SUM_LOSS_LAST], st->grad_norm_last = sums[DT_SUM_NORM_LAST], st->lr_last = sums[DT_SUM_LR_LAST];
  if (!has || sums[DT_SUM_WHY] == 1) {
    dt_no_window_message(err, errlen, has, ctr, m->cfg.dt_batch, m->size);
    return LEARNER_EEMPTY;
  }
  if (sums[DT_SUM_WHY] == 2) {
    snprintf(err, errlen, "pre-training step %llu diverged: loss %g, gradient norm %g; it was not applied", ctr + 1,
             (double)sums[DT_SUM_LOSS_HALT], (double)sums[DT_SUM_NORM_HALT]);
    return LEARNER_EDIVERGED;
  }
  if (stopped) {
    snprintf(err, errlen, "stopped after %d of %d pre-training steps (%s)", ran, n,
             stopped == LEARNER_STOP_DEADLINE ? "its deadline passed" : "its stop flag was set");
    return LEARNER_ESTOPPED;
  }
  return LEARNER_OK;
}

/* a call's loop, for a lone learner (nm 1) or a group's nm members (their
 * sums stride bytes apart from m's): up to n steps of t in rounds of
 * DT_GROUP, each round's sums of every member into sums (DT_SUM_ROWS_ANY
 * floats a member) once it has run; it ends at a stop (*stopped:
 * learner_should_stop's) or once every member has halted (a member's halt
 * ends its own steps, not the others') */
static cudaError_t run_steps(cuda_learner_t *m, cuda_dt_train_t *t, const cuda_dt_replay_t *rp, cudaGraph_t *graph,
                             cudaGraphExec_t *exec, int n, int nm, size_t stride, learner_stop_ctl_t *stop,
                             float *sums, int *stopped) {
  const size_t R = sizeof(float) * DT_SUM_ROWS_ANY;
  cudaError_t e = (cudaError_t)cuda_dt_call_begin(t, m->st);
  for (int done = 0; done < n && e == cudaSuccess;) {
    if ((*stopped = learner_should_stop(stop))) break;
    const int k = n - done < DT_GROUP ? n - done : DT_GROUP;
    for (int i = 0; i < k && e == cudaSuccess; i++) e = (cudaError_t)launch(m, t, rp, graph, exec);
    done += k;
    if (e == cudaSuccess)
      e = cudaMemcpy2DAsync(sums, R, m->dt->sums, nm > 1 ? stride : R, R, (size_t)nm, cudaMemcpyDeviceToHost, m->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(m->st);
    int live = 0;
    for (int i = 0; i < nm && e == cudaSuccess; i++) live += sums[(size_t)i * DT_SUM_ROWS_ANY + DT_SUM_HALT] == 0;
    if (e == cudaSuccess && !live) break;
  }
  /* the call's zeroing (call_begin) done too when no round ran (n 0: a
   * population's check that every member can draw; a stop before the first):
   * a group's steps run on member 0's stream and write these sums */
  if (e == cudaSuccess) e = cudaStreamSynchronize(m->st);
  return e;
}

extern "C" int cuda_dt_step(void *impl, int n, learner_stop_ctl_t *stop, learner_dt_stats_t *st, char *err,
                            size_t errlen) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  const cuda_dt_replay_t rp = replay_of(m);
  int has = 0;
  CUDA_TRY((cudaError_t)cuda_dt_has_episode(m->dt, &rp, m->st, &has), err, errlen);
  float sums[DT_SUM_ROWS_ANY];
  memset(sums, 0, sizeof sums);
  int stopped = 0;
  if (has) CUDA_TRY(run_steps(m, m->dt, &rp, &m->dt_graph, &m->dt_exec, n, 1, 0, stop, sums, &stopped), err, errlen);
  return call_result(m, has, sums, stopped, n, st, err, errlen);
}

extern "C" int cuda_group_dt_step(void *group, int n, learner_stop_ctl_t *stop, learner_dt_stats_t *st, int *rcs,
                                  char (*errs)[512], char *err, size_t errlen) {
  cuda_group_t *g = (cuda_group_t *)group;
  cuda_learner_t *m = g->m[0];
  if (!g->dt_shared) {
    snprintf(err, errlen, "population: these Decision Transformer shapes do not fit one launch; each member pre-trains "
                          "alone");
    return LEARNER_EUNSUPPORTED;
  }
  /* member 0's buffers, with every member along z */
  cuda_dt_train_t t = *m->dt;
  t.dt.pz = cuda_pz_t{g->n, (long long)g->stride};
  const cuda_dt_replay_t rp = replay_of(m);
  float *sums = (float *)calloc((size_t)g->n, sizeof(float) * DT_SUM_ROWS_ANY);
  if (!sums) return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
  int stopped = 0;
  const cudaError_t e = run_steps(m, &t, &rp, &g->dt_graph, &g->dt_exec, n, g->n, g->stride, stop, sums, &stopped);
  if (e != cudaSuccess) {
    free(sums);
    snprintf(err, errlen, "cuda: %s", cudaGetErrorString(e));
    return LEARNER_EDEVICE;
  }
  int any_stopped = 0;
  for (int i = 0; i < g->n; i++) {
    rcs[i] = call_result(g->m[i], 1, sums + (size_t)i * DT_SUM_ROWS_ANY, stopped, n, &st[i], errs[i], sizeof errs[i]);
    any_stopped |= rcs[i] == LEARNER_ESTOPPED;
  }
  free(sums);
  if (!any_stopped) stop->why = LEARNER_STOP_NONE;
  return LEARNER_OK;
}

extern "C" int cuda_dt_act(void *impl, const float *states, const float *rtg, const int32_t *actions,
                           const int32_t *timesteps, const float *mask, int32_t *action, char *err, size_t errlen) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  cuda_dt_t *d = m->dt_act;
  const dt_layout_t *L = &d->L;
  const int K = L->K;
  if (mask[K - 1] == 0) return snprintf(err, errlen, "steps: the window's last step is padding"), LEARNER_EINVAL;
  CUDA_TRY(cudaMemcpyAsync(d->p, m->dt->dt.p, sizeof(float) * (size_t)L->n_params, cudaMemcpyDeviceToDevice, m->st), err,
           errlen);
  CUDA_TRY(cudaMemcpyAsync(d->states, states, sizeof(float) * (size_t)K * L->S, cudaMemcpyHostToDevice, m->st), err,
           errlen);
  CUDA_TRY(cudaMemcpyAsync(d->rtg, rtg, sizeof(float) * K, cudaMemcpyHostToDevice, m->st), err, errlen);
  CUDA_TRY(cudaMemcpyAsync(d->mask, mask, sizeof(float) * K, cudaMemcpyHostToDevice, m->st), err, errlen);
  CUDA_TRY(cudaMemcpyAsync(d->actions, actions, sizeof(int32_t) * K, cudaMemcpyHostToDevice, m->st), err, errlen);
  CUDA_TRY(cudaMemcpyAsync(d->timesteps, timesteps, sizeof(int32_t) * K, cudaMemcpyHostToDevice, m->st), err, errlen);
  CUDA_TRY((cudaError_t)cuda_dt_forward(d, m->st), err, errlen);
  float z[LEARNER_MAX_BRANCHES * 64];
  float *zp = L->A <= (int)(sizeof z / sizeof z[0]) ? z : (float *)malloc(sizeof(float) * (size_t)L->A);
  if (!zp) return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
  cudaError_t e = cudaMemcpyAsync(zp, d->z + (size_t)(K - 1) * L->A, sizeof(float) * (size_t)L->A, cudaMemcpyDeviceToHost,
                                  m->st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(m->st);
  if (e != cudaSuccess) {
    if (zp != z) free(zp);
    return snprintf(err, errlen, "dt act: %s", cudaGetErrorString(e)), LEARNER_EDEVICE;
  }
  const int32_t flat = dt_action_of(L, zp); /* the CPU's rule (dt.h) */
  if (zp != z) free(zp);
  if (flat == -3) return snprintf(err, errlen, "%s", DT_ACT_NONFINITE), LEARNER_EDIVERGED;
  *action = flat;
  return LEARNER_OK;
}
