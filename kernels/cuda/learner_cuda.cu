/*
 * learner_cuda.cu — the CUDA backend behind kernels/learner.h: the replay
 * ring, PER trees, parameters, Adam moments, hyperparameters and counters all
 * live on the device, and one training step —
 *   sample + gather -> NoisyNet noise -> forward/loss/backward (dqn_loss.cu)
 *   -> global norm, clip, AdamW -> new priorities -> target update -> stats
 * — is captured once into a CUDA graph and replayed by Step(n) with no host
 * work per step. Hyperparameters sit in device memory, so SetHyperparams
 * never re-captures; SubmitTransitions copies through pinned staging on the
 * trainer's stream, outside the graph, and never invalidates it.
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

#include "../backend.h"
#include "../philox.h"
#include "cuda_check.h"
#include "dqn_loss.cuh"
#include "optim.cuh"
#include "adam_scalars.cuh"

/* device-resident counters and per-call statistics */
typedef struct dev_state {
  unsigned long long step;
  long long size, head;
  float max_leaf;
  float grad_norm, loss_last, beta_last, q_last;
  double loss_sum, gn_sum, q_sum;
} dev_state_t;

typedef struct cuda_learner {
  learner_config_t cfg;
  net_layout_t L;
  cudaStream_t st;
  float *on, *tg, *grad, *m, *v;     /* [P] */
  float *s, *s2, *r;                 /* replay */
  int32_t *a;
  uint8_t *done;
  long long *ep;
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
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  int use_graph;
  /* host mirrors */
  long long size, head, total;
  unsigned long long act_count;
  learner_stats_t last;
} cuda_learner_t;

// kernels

__device__ float beta_at(const learner_hparams_t *hp, unsigned long long t) {
  if (hp->per_beta_steps <= 0) return hp->per_beta0;
  double f = (double)t / (double)hp->per_beta_steps;
  if (f > 1) f = 1;
  return (float)(hp->per_beta0 + (1.0 - hp->per_beta0) * f);
}

/* the CPU's replay_tree_find, same float operations */
__device__ long long tree_find(const float *sum, long long T, long long size, float target) {
  long long k = 1;
  while (k < T) {
    float left = sum[2 * k], right = sum[2 * k + 1];
    if ((target < left && left > 0) || !(right > 0)) {
      k = 2 * k;
    } else {
      target -= left;
      k = 2 * k + 1;
    }
  }
  long long i = k - T;
  return i < size ? i : size - 1;
}

/* K1: indices (Philox stream REPLAY, lane = sample), IS weights, gather into
 * x = [s; s'], a, r, done. One block per sample. */
__global__ void sample_gather_kernel(const dev_state_t *ds, const learner_hparams_t *hp, unsigned long long seed,
                                     int prioritized, const float *sum, const float *mn, long long T,
                                     const float *s, const float *s2, const int32_t *a, const float *r,
                                     const uint8_t *done, int B, int S, long long *idx, float *x, int32_t *ba,
                                     float *br, float *bd, float *bw, unsigned *adam_fin) {
  int i = blockIdx.x;
  __shared__ long long j_s;
  /* the step's norm-free AdamW scalars (two double pows), by the second
   * warp of block 0 beside the first's sampling: off the critical path */
  if (adam_fin && i == 0 && threadIdx.x == 32) adam_prep(adam_fin, &ds->step, hp);
  if (threadIdx.x == 0) {
    unsigned long long t = ds->step;
    long long size = ds->size;
    philox4_t d = philox_draw(seed, PHILOX_STREAM_REPLAY, t, (uint32_t)i);
    long long j;
    float w = 1.0f;
    if (!prioritized) {
      j = (long long)(((unsigned long long)d.v[0] * (unsigned long long)size) >> 32);
    } else {
      float total = sum[1], seg = __fdiv_rn(total, (float)B);
      float target = __fmul_rn(__fadd_rn((float)i, philox_uniform(d.v[1])), seg);
      j = tree_find(sum, T, size, target);
      w = powf(__fdiv_rn(mn[1], sum[T + j]), beta_at(hp, t));
    }
    idx[i] = j;
    ba[i] = a[j];
    br[i] = r[j];
    bd[i] = done[j] ? 1.0f : 0.0f;
    bw[i] = w;
    j_s = j;
  }
  __syncthreads();
  long long j = j_s;
  for (int k = threadIdx.x; k < S; k += blockDim.x) {
    x[(size_t)i * S + k] = s[(size_t)j * S + k];
    x[((size_t)B + i) * S + k] = s2[(size_t)j * S + k];
  }
}

/* NoisyNet noise: N(0,1) from (seed, stream, counter, lane = element/4), then f(x) = sign(x) sqrt|x| */
__global__ void noise_kernel(const dev_state_t *ds, unsigned long long seed, unsigned stream, int use_act_counter,
                             unsigned long long act_counter, float *eps, long long n) {
  long long lane = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (lane * 4 >= n) return;
  unsigned long long ctr = use_act_counter ? act_counter : ds->step;
  float g[4];
  philox_normal4(philox_draw(seed, stream, ctr, (uint32_t)lane), g);
  for (int k = 0; k < 4 && lane * 4 + k < n; k++) {
    float v = g[k];
    eps[lane * 4 + k] = v >= 0 ? sqrtf(v) : -sqrtf(-v);
  }
}

/* New priorities (loss_i + eps)^alpha for the sampled leaves, then their
 * ancestors, in one block: a leaf sampled twice keeps the value of its last
 * occurrence in the batch (the CPU's order), and each level's nodes are
 * recomputed as left + right after a barrier, so the tree holds the CPU's
 * bits. Threads that share an ancestor write the same value. */
__global__ void priorities_kernel(const long long *idx, const float *loss_i, int B, const learner_hparams_t *hp,
                                  float alpha, float *sum, float *mn, long long T, dev_state_t *ds, int *own) {
  __shared__ float red[1024];
  float mx = -INFINITY;
  /* the last slot to sample each leaf owns it: O(B) with the owner array
   * (the pairwise scan it replaces was O(B^2): ~0.6 ms at batch 4096) */
  for (int i = threadIdx.x; i < B; i += blockDim.x) atomicMax(own + idx[i], i);
  __syncthreads();
  for (int i = threadIdx.x; i < B; i += blockDim.x) {
    long long j = idx[i];
    float v = powf(loss_i[i] + hp->per_eps, alpha);
    mx = fmaxf(mx, v);
    if (own[j] == i) sum[T + j] = mn[T + j] = v;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < B; i += blockDim.x) own[idx[i]] = -1; /* ready for the next step */
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + h]);
    __syncthreads();
  }
  if (threadIdx.x == 0 && red[0] > ds->max_leaf) ds->max_leaf = red[0];
  for (long long shift = 1; (T >> shift) >= 1; shift++) {
    __syncthreads(); /* the level below is complete */
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
      long long k = (T + idx[i]) >> shift;
      sum[k] = sum[2 * k] + sum[2 * k + 1];
      float x = mn[2 * k], y = mn[2 * k + 1];
      mn[k] = x < y ? x : y;
    }
  }
}

/* the step's bookkeeping, last in the graph */
__global__ void finish_kernel(dev_state_t *ds, const float *loss, const float *q, const learner_hparams_t *hp,
                              int prioritized) {
  if (threadIdx.x || blockIdx.x) return;
  ds->loss_last = *loss;
  ds->q_last = *q;
  ds->beta_last = prioritized ? beta_at(hp, ds->step) : 1.0f;
  ds->loss_sum += *loss;
  ds->gn_sum += ds->grad_norm;
  ds->q_sum += *q;
  ds->step += 1;
}

/* leaves [lo, hi] set to max_leaf, then their ancestors level by level (the CPU's replay_add order) */
__global__ void tree_insert_kernel(float *sum, float *mn, long long T, long long lo, long long hi, const dev_state_t *ds) {
  if (threadIdx.x || blockIdx.x) return;
  float v = ds->max_leaf;
  for (long long i = lo; i <= hi; i++) sum[T + i] = mn[T + i] = v;
  long long a = (T + lo) >> 1, b = (T + hi) >> 1;
  for (; a >= 1; a >>= 1, b >>= 1) {
    for (long long k = a; k <= b; k++) {
      sum[k] = sum[2 * k] + sum[2 * k + 1];
      float x = mn[2 * k], y = mn[2 * k + 1];
      mn[k] = x < y ? x : y;
    }
    if (a == 1) break;
  }
}

__global__ void tree_rebuild_kernel(float *sum, float *mn, long long T, long long size) {
  if (threadIdx.x || blockIdx.x) return;
  for (long long i = size; i < T; i++) {
    sum[T + i] = 0.0f;
    mn[T + i] = INFINITY;
  }
  for (long long i = 0; i < size; i++) mn[T + i] = sum[T + i];
  for (long long k = T - 1; k >= 1; k--) {
    sum[k] = sum[2 * k] + sum[2 * k + 1];
    float x = mn[2 * k], y = mn[2 * k + 1];
    mn[k] = x < y ? x : y;
  }
}

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

__global__ void fill_kernel(float *p, long long n, float v) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

// launchers (the backend ops)

#define ERRBUF(err, errlen) (err), (errlen)
#define DEV(call) CUDA_TRY(call, err, errlen)
#define LAUNCHED() CUDA_TRY(cudaGetLastError(), err, errlen)
#define GRID(n, t) (unsigned)(((n) + (t)-1) / (t)), (t)

static void cuda_destroy(void *impl) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  if (!m) return;
  if (m->exec) cudaGraphExecDestroy(m->exec);
  if (m->graph) cudaGraphDestroy(m->graph);
  void *bufs[] = {m->on, m->tg, m->grad, m->m, m->v, m->s, m->s2, m->r, m->a, m->done, m->ep, m->sum, m->mn, m->own,
                  m->idx, m->prio, m->hp, m->ds, m->norm_scratch, m->act_x, m->act_weff, m->act_noise, m->act_a};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
  cuda_dqn_ws_free(&m->ws);
  cuda_acts_free(&m->act);
  cudaFreeHost(m->staging);
  if (m->st) cudaStreamDestroy(m->st);
  free(m);
}

static int64_t cuda_memory_estimate(const learner_config_t *c);

/* The CPU backend's initialisation, so both start from the same weights. */
extern "C" void learner_cpu_init_params(const net_layout_t *L, const learner_config_t *c, float *p);

static int cuda_create(const learner_config_t *c, void **impl, char *err, size_t errlen) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    snprintf(err, errlen, "cuda: cannot query device memory");
    return LEARNER_EDEVICE;
  }
  int64_t need = cuda_memory_estimate(c);
  if ((size_t)need > free_b) {
    snprintf(err, errlen, "replay_capacity: needs ~%lld MiB of GPU memory, %zu MiB free", (long long)(need >> 20),
             free_b >> 20);
    return LEARNER_ENOMEM;
  }
  cuda_learner_t *m = (cuda_learner_t *)calloc(1, sizeof *m);
  if (!m) return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
  m->cfg = *c;
  net_layout_init(&m->L, c);
  const char *ng = getenv("DQN_CUDA_NO_GRAPH"); /* tests: the un-captured path */
  m->use_graph = !(ng && ng[0] == '1');
  size_t P = (size_t)m->L.n_params, C = (size_t)c->replay_capacity, S = (size_t)c->state_dim, B = (size_t)c->batch;
  size_t N = (size_t)(m->L.n_noise ? m->L.n_noise : 1);
  m->T = 1;
  while (m->T < (long long)C) m->T <<= 1;
  int rc = 0;
#define ALLOC(p, bytes)                                                                                             \
  if (!rc && cudaMalloc((void **)&(p), (bytes)) != cudaSuccess) rc = 1;
  ALLOC(m->on, P * 4) ALLOC(m->tg, P * 4) ALLOC(m->grad, P * 4) ALLOC(m->m, P * 4) ALLOC(m->v, P * 4);
  ALLOC(m->s, C * S * 4) ALLOC(m->s2, C * S * 4) ALLOC(m->r, C * 4) ALLOC(m->a, C * 4) ALLOC(m->done, C);
  ALLOC(m->ep, C * 8) ALLOC(m->idx, B * 8) ALLOC(m->prio, B * 4) ALLOC(m->hp, sizeof(learner_hparams_t));
  ALLOC(m->ds, sizeof(dev_state_t)) ALLOC(m->norm_scratch, CUDA_NORM_SCRATCH * 8) ALLOC(m->act_noise, N * 4) ALLOC(m->act_weff, P * 4);
  if (c->prioritized) {
    ALLOC(m->sum, (size_t)(2 * m->T) * 4) ALLOC(m->mn, (size_t)(2 * m->T) * 4) ALLOC(m->own, (size_t)m->T * 4)
  }
#undef ALLOC
  if (!rc && cudaMemset(m->norm_scratch, 0, CUDA_NORM_SCRATCH * 8) != cudaSuccess) rc = 1; /* its arrival counter */
  if (rc || cudaStreamCreateWithFlags(&m->st, cudaStreamNonBlocking) != cudaSuccess ||
      cuda_dqn_ws_alloc_tc(&m->ws, &m->L, (int)B, c->tensor_cores ? 1 : 0)) {
    cuda_destroy(m);
    snprintf(err, errlen, "replay_capacity: GPU allocation failed");
    return LEARNER_ENOMEM;
  }
  if (c->tensor_cores && !(m->ws.version == 2 && m->ws.fused.ok && m->ws.fused.tc == 1)) {
    /* refused rather than silently run in fp32 */
    cuda_destroy(m);
    snprintf(err, errlen, "tensor_cores: the TF32 kernels do not cover this network's shapes; use tensor_cores=0");
    return LEARNER_EUNSUPPORTED;
  }
  float *host = (float *)malloc(P * 4);
  if (!host) {
    cuda_destroy(m);
    return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
  }
  learner_cpu_init_params(&m->L, c, host);
  dev_state_t ds0;
  memset(&ds0, 0, sizeof ds0);
  ds0.max_leaf = 1.0f;
  int r2 = 0;
  r2 |= cudaMemcpy(m->on, host, P * 4, cudaMemcpyHostToDevice);
  r2 |= cudaMemcpy(m->tg, host, P * 4, cudaMemcpyHostToDevice);
  r2 |= cudaMemset(m->m, 0, P * 4) | cudaMemset(m->v, 0, P * 4) | cudaMemset(m->grad, 0, P * 4);
  r2 |= cudaMemcpy(m->hp, &c->hp, sizeof c->hp, cudaMemcpyHostToDevice);
  r2 |= cudaMemcpy(m->ds, &ds0, sizeof ds0, cudaMemcpyHostToDevice);
  if (c->prioritized) {
    r2 |= cudaMemset(m->sum, 0, (size_t)(2 * m->T) * 4);
    r2 |= cudaMemset(m->own, 0xff, (size_t)m->T * 4); /* -1: no owner */
    fill_kernel<<<GRID(2 * m->T, 256)>>>(m->mn, 2 * m->T, INFINITY);
    r2 |= cudaGetLastError();
  }
  r2 |= cudaDeviceSynchronize();
  free(host);
  if (r2) {
    cuda_destroy(m);
    return snprintf(err, errlen, "cuda: initialising the learner failed"), LEARNER_EDEVICE;
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
  size_t row = S * 8 + 4 + 4 + 1 + 8;
  /* stage through pinned memory in chunks, then async copies into the ring */
  const long long chunk = 1 << 16;
  if (ensure_staging(m, (size_t)chunk * row, err, errlen)) return LEARNER_EDEVICE;
  while (done < t->n) {
    long long run = t->n - done;
    if (run > chunk) run = chunk;
    if (run > m->cfg.replay_capacity - m->head) run = m->cfg.replay_capacity - m->head;
    char *p = (char *)m->staging;
    float *hs = (float *)p, *hs2 = hs + run * S;
    int32_t *ha = (int32_t *)(hs2 + run * S);
    float *hr = (float *)(ha + run);
    long long *he = (long long *)(hr + run + (run & 1)); /* 8-byte aligned */
    uint8_t *hd = (uint8_t *)(he + run);
    DEV(cudaStreamSynchronize(m->st)); /* the staging buffer is free again */
    memcpy(hs, t->states + done * S, (size_t)run * S * 4);
    memcpy(hs2, t->next_states + done * S, (size_t)run * S * 4);
    memcpy(ha, t->actions + done, (size_t)run * 4);
    memcpy(hr, t->rewards + done, (size_t)run * 4);
    for (long long j = 0; j < run; j++) {
      he[j] = t->episode_ids ? t->episode_ids[done + j] : 0;
      hd[j] = t->dones[done + j] ? 1 : 0;
    }
    long long h = m->head;
    DEV(cudaMemcpyAsync(m->s + h * S, hs, (size_t)run * S * 4, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->s2 + h * S, hs2, (size_t)run * S * 4, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->a + h, ha, (size_t)run * 4, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->r + h, hr, (size_t)run * 4, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->ep + h, he, (size_t)run * 8, cudaMemcpyHostToDevice, m->st));
    DEV(cudaMemcpyAsync(m->done + h, hd, (size_t)run, cudaMemcpyHostToDevice, m->st));
    if (m->cfg.prioritized) {
      tree_insert_kernel<<<1, 1, 0, m->st>>>(m->sum, m->mn, m->T, h, h + run - 1, m->ds);
      LAUNCHED();
    }
    m->head = (h + run) % m->cfg.replay_capacity;
    m->size = m->size + run < m->cfg.replay_capacity ? m->size + run : m->cfg.replay_capacity;
    m->total += run;
    done += run;
  }
  /* the graph reads size from device memory */
  long long sh[2] = {m->size, m->head};
  DEV(cudaMemcpyAsync(&m->ds->size, sh, sizeof sh, cudaMemcpyHostToDevice, m->st));
  DEV(cudaStreamSynchronize(m->st));
  return LEARNER_OK;
}

/* the new PER priorities of the sampled leaves (cuda_fused_t.side_hook) */
static int priorities_hook(void *arg, cudaStream_t st) {
  cuda_learner_t *m = (cuda_learner_t *)arg;
  priorities_kernel<<<1, 1024, 0, st>>>(m->idx, m->ws.loss_i, m->cfg.batch, m->hp, m->cfg.per_alpha, m->sum, m->mn,
                                        m->T, m->ds, m->own);
  return (int)cudaGetLastError();
}

/* the gradient norm in two launches (cuda_fused_t.norm_hook): part 0 over
 * every layer but trunk-1, on the side stream once their gradients exist
 * (beside B3), part 1 over trunk-1's, the last weight gradient, after it */
#define NORM_T1_BLOCKS 8
static int norm_hook(void *arg, cudaStream_t st, int part) {
  cuda_learner_t *m = (cuda_learner_t *)arg;
  const long long n0 = m->L.layer[1].off_w, P = m->L.n_params; /* trunk-1 is layer 0: [0, n0) */
  if (part == 0)
    return cuda_norm_partial(m->grad + n0, P - n0, m->norm_scratch, 0, CUDA_NORM_PARTS - NORM_T1_BLOCKS,
                             &m->ds->grad_norm, &m->ds->step, m->hp, st);
  return cuda_norm_partial(m->grad, n0, m->norm_scratch, CUDA_NORM_PARTS - NORM_T1_BLOCKS, NORM_T1_BLOCKS,
                           &m->ds->grad_norm, &m->ds->step, m->hp, st);
}

/* the launches of one training step (captured once, or launched directly) */
static int enqueue_step(cuda_learner_t *m, char *err, size_t errlen) {
  const learner_config_t *c = &m->cfg;
  const net_layout_t *L = &m->L;
  int B = c->batch, S = c->state_dim;
  cuda_dqn_ws_t *ws = &m->ws;
  cuda_fused_t *f = &ws->fused;
  /* the layer-GEMM path: the noise and the weight packs need only the
   * parameters, so they run on the side stream beside the replay sample */
  const int ahead = ws->version == 2 && f->ok && f->gemm;
  cudaStream_t ns = ahead ? f->side : m->st;
  if (ahead) {
    DEV(cudaEventRecord(f->ev[5], m->st));
    DEV(cudaStreamWaitEvent(ns, f->ev[5], 0));
  }
  if (c->noisy) {
    long long n = L->n_noise, lanes = (n + 3) / 4;
    noise_kernel<<<GRID(lanes, 128), 0, ns>>>(m->ds, c->seed, PHILOX_STREAM_NOISE_ONLINE, 0, 0, ws->fn_on, n);
    LAUNCHED();
    noise_kernel<<<GRID(lanes, 128), 0, ns>>>(m->ds, c->seed, PHILOX_STREAM_NOISE_TARGET, 0, 0, ws->fn_tg, n);
    LAUNCHED();
  }
  if (ahead) {
    DEV((cudaError_t)cuda_fused_pack(L, m->on, m->tg, c->noisy, ws, ns));
    DEV(cudaEventRecord(f->ev[6], ns));
  }
  sample_gather_kernel<<<B, 64, 0, m->st>>>(m->ds, m->hp, c->seed, c->prioritized, m->sum, m->mn, m->T, m->s, m->s2,
                                            m->a, m->r, m->done, B, S, m->idx, ws->x, ws->a, ws->r, ws->done, ws->w,
                                            ahead ? (unsigned *)(m->norm_scratch + CUDA_NORM_PARTS) : NULL);
  LAUNCHED();
  if (ahead) DEV(cudaStreamWaitEvent(m->st, f->ev[6], 0));
  cuda_dqn_hp_t hp = {c->hp.gamma, c->v_min, c->v_max, c->leaky_slope, c->double_dqn, &m->hp->gamma};
  f->prepacked = ahead;
  /* PER: the new priorities need only the per-sample losses, so on the
   * layer-GEMM path they run on the side stream beside the backward */
  f->side_hook = ahead && c->prioritized ? priorities_hook : NULL, f->side_arg = m;
  f->norm_hook = ahead ? norm_hook : NULL;
  int rc = cuda_dqn_loss_grad(L, &hp, m->on, m->tg, c->noisy, ws, m->grad, m->st);
  f->prepacked = 0, f->side_hook = NULL, f->norm_hook = NULL;
  if (rc) return snprintf(err, errlen, "cuda: loss launch failed: %s", cudaGetErrorString((cudaError_t)rc)), -3;
  long long P = L->n_params;
  DEV((cudaError_t)cuda_norm_adamw_target(m->on, m->grad, m->m, m->v, m->tg, P, &m->ds->grad_norm, m->norm_scratch,
                                           &m->ds->step, m->hp, ahead ? 2 : 0, ahead ? f->ev[5] : NULL, m->st));
  /* the statistics need the norm, not the update: beside AdamW */
  if (ahead) DEV(cudaStreamWaitEvent(f->side, f->ev[5], 0));
  if (c->prioritized && !ahead) DEV((cudaError_t)priorities_hook(m, m->st));
  cudaStream_t fs = ahead ? f->side : m->st;
  finish_kernel<<<1, 1, 0, fs>>>(m->ds, ws->loss, ws->q_taken, m->hp, c->prioritized);
  LAUNCHED();
  if (ahead) {
    DEV(cudaEventRecord(f->ev[6], fs));
    DEV(cudaStreamWaitEvent(m->st, f->ev[6], 0));
  }
  return 0;
}

static int cuda_step(void *impl, int n, learner_stats_t *st, char *err, size_t errlen) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  if (m->size < m->cfg.batch) {
    snprintf(err, errlen, "replay holds %lld transitions, a step needs batch = %d", m->size, m->cfg.batch);
    return LEARNER_EEMPTY;
  }
  /* zero the per-call sums: loss_sum, gn_sum, q_sum */
  double zero[3] = {0, 0, 0};
  DEV(cudaMemcpyAsync(&m->ds->loss_sum, zero, sizeof zero, cudaMemcpyHostToDevice, m->st));
  if (m->use_graph && !m->exec && n > 0) {
    DEV(cudaStreamBeginCapture(m->st, cudaStreamCaptureModeThreadLocal));
    int rc = enqueue_step(m, err, errlen);
    cudaGraph_t g;
    cudaError_t e = cudaStreamEndCapture(m->st, &g);
    if (rc) return LEARNER_EDEVICE;
    DEV(e);
    m->graph = g;
    DEV(cudaGraphInstantiate(&m->exec, g, 0));
  }
  for (int k = 0; k < n; k++) {
    if (m->use_graph) {
      DEV(cudaGraphLaunch(m->exec, m->st));
    } else if (enqueue_step(m, err, errlen)) {
      return LEARNER_EDEVICE;
    }
  }
  dev_state_t ds;
  DEV(cudaMemcpyAsync(&ds, m->ds, sizeof ds, cudaMemcpyDeviceToHost, m->st));
  DEV(cudaStreamSynchronize(m->st));
  learner_stats_t *s = &m->last;
  s->step = ds.step;
  s->replay_size = m->size;
  s->replay_total = m->total;
  s->steps_run = n;
  s->loss_mean = n ? (float)(ds.loss_sum / n) : 0;
  s->loss_last = ds.loss_last;
  s->grad_norm_mean = n ? (float)(ds.gn_sum / n) : 0;
  s->grad_norm_last = ds.grad_norm;
  s->q_mean = n ? (float)(ds.q_sum / n) : 0;
  s->per_beta = ds.beta_last;
  if (st) *st = *s;
  return LEARNER_OK;
}

static int cuda_act(void *impl, const float *states, int n, int noisy, int32_t *actions, float *q, char *err,
                    size_t errlen) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  const net_layout_t *L = &m->L;
  size_t S = (size_t)m->cfg.state_dim;
  if (m->act.rows < n) {
    cuda_acts_free(&m->act);
    cudaFree(m->act_x);
    cudaFree(m->act_a);
    m->act_x = NULL;
    m->act_a = NULL;
    if (cuda_acts_alloc(&m->act, L, n) || cudaMalloc((void **)&m->act_x, (size_t)n * S * 4) != cudaSuccess ||
        cudaMalloc((void **)&m->act_a, (size_t)n * 4 + 64 * 4) != cudaSuccess) {
      cuda_acts_free(&m->act);
      return snprintf(err, errlen, "count: no GPU memory for %d states", n), LEARNER_ENOMEM;
    }
  }
  if (ensure_staging(m, (size_t)n * S * 4 + (size_t)n * (4 + 4 * (size_t)L->q_width), err, errlen))
    return LEARNER_EDEVICE;
  DEV(cudaStreamSynchronize(m->st));
  memcpy(m->staging, states, (size_t)n * S * 4);
  DEV(cudaMemcpyAsync(m->act_x, m->staging, (size_t)n * S * 4, cudaMemcpyHostToDevice, m->st));
  const float *w = m->on;
  if (noisy && m->cfg.noisy) {
    long long nn = L->n_noise;
    noise_kernel<<<GRID((nn + 3) / 4, 128), 0, m->st>>>(m->ds, m->cfg.seed, PHILOX_STREAM_NOISE_ACT, 1,
                                                        m->act_count++, m->act_noise, nn);
    LAUNCHED();
    if (cuda_effective_weights(L, m->on, m->act_noise, m->act_weff, m->st))
      return snprintf(err, errlen, "cuda: noisy weights failed"), LEARNER_EDEVICE;
    w = m->act_weff;
  }
  int rc = cuda_net_forward(L, w, m->act_x, n, m->cfg.leaky_slope, m->cfg.v_min, m->cfg.v_max, &m->act, m->st);
  if (rc) return snprintf(err, errlen, "cuda: forward failed: %s", cudaGetErrorString((cudaError_t)rc)), LEARNER_EDEVICE;
  int *dn = (int *)(m->act_a + n);
  int nh[LEARNER_MAX_BRANCHES];
  for (int d = 0; d < L->D; d++) nh[d] = L->n[d];
  DEV(cudaMemcpyAsync(dn, nh, sizeof(int) * (size_t)L->D, cudaMemcpyHostToDevice, m->st));
  act_argmax_kernel<<<GRID(n, 128), 0, m->st>>>(m->act.q, n, L->q_width, L->D, dn, m->act_a);
  LAUNCHED();
  int32_t *ha = (int32_t *)((char *)m->staging + (size_t)n * S * 4);
  float *hq = (float *)(ha + n);
  DEV(cudaMemcpyAsync(ha, m->act_a, (size_t)n * 4, cudaMemcpyDeviceToHost, m->st));
  if (q) DEV(cudaMemcpyAsync(hq, m->act.q, (size_t)n * 4 * (size_t)L->q_width, cudaMemcpyDeviceToHost, m->st));
  DEV(cudaStreamSynchronize(m->st));
  memcpy(actions, ha, (size_t)n * 4);
  if (q) memcpy(q, hq, (size_t)n * 4 * (size_t)L->q_width);
  return LEARNER_OK;
}

static int cuda_sync_target(void *impl, float tau) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  long long P = m->L.n_params;
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
  /* the graph reads every hyperparameter from device memory: no re-capture */
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
  ds.max_leaf = c->max_leaf;
  m->act_count = c->act_count;
  m->size = c->replay_size;
  m->head = c->replay_head;
  m->total = c->replay_total;
  m->last = c->last;
  return cudaMemcpy(m->ds, &ds, sizeof ds, cudaMemcpyHostToDevice) ? LEARNER_EDEVICE : LEARNER_OK;
}

static void *section_ptr(cuda_learner_t *m, int sec, int64_t *bytes) {
  int64_t P = m->L.n_params, sz = m->size, S = m->cfg.state_dim;
  switch (sec) {
  case SEC_ONLINE: *bytes = P * 4; return m->on;
  case SEC_TARGET: *bytes = P * 4; return m->tg;
  case SEC_ADAM_M: *bytes = P * 4; return m->m;
  case SEC_ADAM_V: *bytes = P * 4; return m->v;
  case SEC_R_S: *bytes = sz * S * 4; return m->s;
  case SEC_R_S2: *bytes = sz * S * 4; return m->s2;
  case SEC_R_A: *bytes = sz * 4; return m->a;
  case SEC_R_R: *bytes = sz * 4; return m->r;
  case SEC_R_DONE: *bytes = sz; return m->done;
  case SEC_R_EP: *bytes = sz * 8; return m->ep;
  case SEC_R_PRIO:
    *bytes = m->cfg.prioritized ? sz * 4 : 0;
    return m->cfg.prioritized ? m->sum + m->T : NULL;
  default: *bytes = 0; return NULL;
  }
}

static int64_t cuda_section_bytes(void *impl, int sec) {
  int64_t b;
  section_ptr((cuda_learner_t *)impl, sec, &b);
  return b;
}

static int cuda_section_read(void *impl, int sec, int64_t off, int64_t n, void *dst) {
  int64_t b;
  char *p = (char *)section_ptr((cuda_learner_t *)impl, sec, &b);
  if (!p || off < 0 || off + n > b) return LEARNER_EINVAL;
  return cudaMemcpy(dst, p + off, (size_t)n, cudaMemcpyDeviceToHost) ? LEARNER_EDEVICE : LEARNER_OK;
}

static int cuda_section_write(void *impl, int sec, int64_t off, int64_t n, const void *src) {
  int64_t b;
  char *p = (char *)section_ptr((cuda_learner_t *)impl, sec, &b);
  if (!p || off < 0 || off + n > b) return LEARNER_EINVAL;
  return cudaMemcpy(p + off, src, (size_t)n, cudaMemcpyHostToDevice) ? LEARNER_EDEVICE : LEARNER_OK;
}

static int cuda_load_done(void *impl) {
  cuda_learner_t *m = (cuda_learner_t *)impl;
  /* validate what a CRC cannot: actions and flags in range, priorities positive */
  int64_t A = learner_config_joint_actions(&m->cfg), n = m->size;
  if (n > 0) {
    int32_t *a = (int32_t *)malloc((size_t)n * 4);
    uint8_t *d = (uint8_t *)malloc((size_t)n);
    float *pr = m->cfg.prioritized ? (float *)malloc((size_t)n * 4) : NULL;
    int bad = !a || !d || (m->cfg.prioritized && !pr);
    bad = bad || cudaMemcpy(a, m->a, (size_t)n * 4, cudaMemcpyDeviceToHost) ||
          cudaMemcpy(d, m->done, (size_t)n, cudaMemcpyDeviceToHost) ||
          (pr && cudaMemcpy(pr, m->sum + m->T, (size_t)n * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; !bad && i < n; i++)
      bad = a[i] < 0 || a[i] >= A || d[i] > 1 || (pr && !(pr[i] > 0 && isfinite(pr[i])));
    free(a), free(d), free(pr);
    if (bad) return LEARNER_ECORRUPT;
  }
  if (m->cfg.prioritized) {
    tree_rebuild_kernel<<<1, 1, 0, m->st>>>(m->sum, m->mn, m->T, m->size);
    if (cudaGetLastError() || cudaStreamSynchronize(m->st)) return LEARNER_EDEVICE;
  }
  return LEARNER_OK;
}

static int64_t cuda_memory_estimate(const learner_config_t *c) {
  net_layout_t L;
  net_layout_init(&L, c);
  int64_t per = (int64_t)c->state_dim * 8 + 4 + 4 + 1 + 8, T = 1;
  while (T < c->replay_capacity) T <<= 1;
  int64_t acts = (int64_t)3 * c->batch * (2 * L.H1 + 2 * L.H2 + 2 * L.VH + L.Z + 2 * L.D * L.AH + 2 * L.a_width);
  return L.n_params * 4 * 8 + c->replay_capacity * per + (c->prioritized ? 2 * T * 8 + T * 4 : 0) + acts * 4 + (64 << 20);
}

extern "C" const learner_backend_ops_t learner_cuda_ops = {
    "cuda",
    cuda_create,
    cuda_destroy,
    cuda_submit,
    cuda_step,
    cuda_act,
    cuda_sync_target,
    cuda_set_hparams,
    cuda_get_counters,
    cuda_set_counters,
    cuda_section_bytes,
    cuda_section_read,
    cuda_section_write,
    cuda_load_done,
    cuda_memory_estimate,
};
