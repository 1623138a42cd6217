/*
 * replay.cu — the replay ring's device side: the twins of
 * kernels/cpu/replay.c. Sampling by the CPU's Philox draws (so with uniform
 * replay both backends sample the same indices) and the gather of the batch;
 * PER's sum and min trees: new leaves, new priorities after a step, and a
 * rebuild after a load. Every tree update recomputes each touched node as
 * left + right in the CPU's order, so the trees hold the CPU's bits.
 *
 * Shapes: B batch, S state_dim, C capacity, T = next power of two >= C;
 * sum, mn [2T] (node k's children 2k, 2k + 1; leaf i at T + i); own [T].
 */
#include <cuda_runtime.h>
#include <math.h>

#include "../her.h"
#include "../philox.h"
#include "adam_scalars.cuh"
#include "learner_cuda.cuh"

// kernels

/* the CPU's replay_tree_find by a warp: the 2 + 4 + ... + 2^D nodes of the
 * next D <= 5 levels below k are loaded at once (a memory round trip per 5
 * levels, not per level: 24 levels at capacity 10^7, most below what L2
 * holds), then every lane takes replay_tree_find's comparisons and
 * subtractions in its order, so the leaf is the same. Called by a whole
 * warp with the same target. */
__device__ long long tree_find_warp(const float *sum, long long T, long long size, float target) {
  const int lane = threadIdx.x & 31;
  long long k = 1;
  while (k < T) {
    const int rest = __clzll(k) - __clzll(T); /* the levels below k: log2(T / k) */
    const int D = rest < 5 ? rest : 5;
    float v[5];
#pragma unroll
    for (int d = 1; d <= 5; d++) v[d - 1] = d <= D && lane < (1 << d) ? sum[(k << d) + lane] : 0.0f;
    int off = 0; /* the node at level d below k: (k << d) + off */
#pragma unroll
    for (int d = 1; d <= 5; d++) {
      if (d > D) break; /* D is the warp's */
      const float left = __shfl_sync(0xffffffffu, v[d - 1], 2 * off);
      const float right = __shfl_sync(0xffffffffu, v[d - 1], 2 * off + 1);
      if ((target < left && left > 0) || !(right > 0)) {
        off = 2 * off;
      } else {
        target -= left;
        off = 2 * off + 1;
      }
    }
    k = (k << D) + off;
  }
  long long i = k - T;
  return i < size ? i : size - 1;
}

/* HER and n-step in the gather (her.h; kernels/cpu/her_cpu.c's her_batch_cpu
 * row for row): the episode bounds, the goal width and where each row's
 * discount goes; on = 0 when both are off */
typedef struct her_args {
  int on, G;
  const long long *first, *last;
  long long cap;
  float *gdisc;
} her_args_t;

/* K1: indices (Philox stream REPLAY, lane = sample), IS weights, gather into
 * x = [s; s'], a, r, done; with HER or n-step, the row's relabelling or its
 * n-step return (thread 0 decides, the block copies). One block per sample. */
__global__ void sample_gather_kernel(const dev_state_t *ds, const learner_hparams_t *hp, int prioritized,
                                     const float *sum, const float *mn, long long T, const float *s, const float *s2,
                                     const int32_t *a, const float *r, const uint8_t *done, int B, int S,
                                     long long *idx, float *x, int32_t *ba, float *br, float *bd, float *bw,
                                     unsigned *adam_fin, her_args_t her, long long ps) {
  int i = blockIdx.x;
  ds = pz_at(ds, ps), hp = pz_at(hp, ps), sum = pz_at(sum, ps), mn = pz_at(mn, ps), s = pz_at(s, ps);
  s2 = pz_at(s2, ps), a = pz_at(a, ps), r = pz_at(r, ps), done = pz_at(done, ps), idx = pz_at(idx, ps);
  x = pz_at(x, ps), ba = pz_at(ba, ps), br = pz_at(br, ps), bd = pz_at(bd, ps), bw = pz_at(bw, ps);
  adam_fin = pz_at(adam_fin, ps);
  her.first = pz_at(her.first, ps), her.last = pz_at(her.last, ps), her.gdisc = pz_at(her.gdisc, ps);
  const unsigned long long seed = ds->seed;
  __shared__ long long j_s, src2_s, goal_s; /* s' from slot src2; goal from slot goal_s's s' (-1: none) */
  /* the step's norm-free AdamW scalars (two double pows), by the second
   * warp of block 0 beside the first's sampling: off the critical path */
  if (adam_fin && i == 0 && threadIdx.x == 32) adam_prep(adam_fin, &ds->step, hp);
  long long jp = 0; /* PER: the first warp descends the sum tree together */
  if (prioritized && threadIdx.x < 32) {
    philox4_t d = philox_draw(seed, PHILOX_STREAM_REPLAY, ds->step, (uint32_t)i);
    float total = sum[1], seg = __fdiv_rn(total, (float)B);
    float target = __fmul_rn(__fadd_rn((float)i, philox_uniform(d.v[1])), seg);
    jp = tree_find_warp(sum, T, ds->size, target);
  }
  if (threadIdx.x == 0) {
    unsigned long long t = ds->step;
    long long size = ds->size;
    philox4_t d = philox_draw(seed, PHILOX_STREAM_REPLAY, t, (uint32_t)i);
    long long j;
    float w = 1.0f;
    if (!prioritized) {
      j = (long long)(((unsigned long long)d.v[0] * (unsigned long long)size) >> 32);
    } else {
      j = jp;
      w = powf(__fdiv_rn(mn[1], sum[T + j]), beta_at(hp, t));
    }
    idx[i] = j;
    ba[i] = a[j];
    bw[i] = w;
    j_s = j;
    float ri = r[j], di = done[j] ? 1.0f : 0.0f, gd = hp->gamma;
    long long src2 = j, goal = -1;
    if (her.on) {
      const long long head = ds->head, total = ds->total, cap = her.cap;
      long long back = head - 1 - j;
      back = back < 0 ? back + cap : back;
      const long long cnt = total - 1 - back, first = her.first[j], last = her.last[j];
      const int G = her.G, O = S - 2 * G, n = hp->n_step;
      if (G > 0 && her_row_relabelled(i, B, hp->her_ratio, first, last, total, size)) {
        goal = her_donor_slot(seed, t, i, hp->her_strategy, cnt, first, last, head, total, size, cap);
        int ok;
        ri = her_reward(s2 + (size_t)j * S + O, s2 + (size_t)goal * S + O, G, hp->her_norm, hp->her_eps,
                        hp->her_reward_scale, &ok);
        if (hp->her_done_on_success) di = (float)ok;
      } else if (n > 1) {
        int m = her_nstep_m(n, cnt, last, total);
        if (m > 1) {
          ri = her_nstep_return(r, m, cnt, hp->gamma, head, total, cap, &gd);
          src2 = her_slot(cnt + m - 1, head, total, cap);
          di = done[src2] ? 1.0f : 0.0f;
        }
      }
      her.gdisc[i] = gd;
    }
    br[i] = ri;
    bd[i] = di;
    src2_s = src2, goal_s = goal;
  }
  __syncthreads();
  const long long j = j_s, src2 = src2_s, goal = goal_s;
  const int g0 = S - her.G, g1 = S; /* the desired goal's columns [O + G, S) */
  for (int k = threadIdx.x; k < S; k += blockDim.x) {
    const bool rel = goal >= 0 && k >= g0 && k < g1;
    const float gk = rel ? s2[(size_t)goal * S + k - her.G] : 0.0f; /* the donor's achieved goal */
    x[(size_t)i * S + k] = rel ? gk : s[(size_t)j * S + k];
    x[((size_t)B + i) * S + k] = rel ? gk : s2[(size_t)src2 * S + k];
  }
}

/* New priorities (loss_i + eps)^alpha for the sampled leaves, then their
 * ancestors, in one block: a leaf sampled twice keeps the value of its last
 * occurrence in the batch (the CPU's order), and each level's nodes are
 * recomputed as left + right after a barrier, so the tree holds the CPU's
 * bits. Threads that share an ancestor write the same value. */
__global__ void priorities_kernel(const long long *idx, const float *loss_i, int B, const learner_hparams_t *hp,
                                  float alpha, float *sum, float *mn, long long T, dev_state_t *ds, int *own,
                                  long long ps) {
  __shared__ float red[1024];
  idx = pz_at(idx, ps), loss_i = pz_at(loss_i, ps), hp = pz_at(hp, ps), sum = pz_at(sum, ps), mn = pz_at(mn, ps);
  ds = pz_at(ds, ps), own = pz_at(own, ps);
  if (!isfinite(ds->grad_norm)) return; /* the divergence guard: this step is not applied */
  float mx = -INFINITY;
  /* the last slot to sample each leaf owns it: O(B) with the owner array
   * (the pairwise scan it replaces was O(B^2): ~0.6 ms at batch 4096) */
  for (int i = threadIdx.x; i < B; i += blockDim.x) atomicMax(own + idx[i], i);
  __syncthreads();
  for (int i = threadIdx.x; i < B; i += blockDim.x) {
    long long j = idx[i];
    float v = fminf(fmaxf(powf(loss_i[i] + hp->per_eps, alpha), REPLAY_LEAF_MIN), REPLAY_LEAF_MAX); /* backend.h */
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

/* leaves [lo, hi] set to max_leaf, then their ancestors level by level, a
 * level's nodes side by side (each is left + right of final children, as
 * in the CPU's replay_add, so the same bits); one block */
__global__ void tree_insert_kernel(float *sum, float *mn, long long T, long long lo, long long hi, const dev_state_t *ds) {
  if (blockIdx.x) return;
  const float v = ds->max_leaf;
  for (long long i = lo + threadIdx.x; i <= hi; i += blockDim.x) sum[T + i] = mn[T + i] = v;
  long long a = (T + lo) >> 1, b = (T + hi) >> 1;
  for (; a >= 1; a >>= 1, b >>= 1) {
    __syncthreads(); /* the level below is complete */
    for (long long k = a + threadIdx.x; k <= b; k += blockDim.x) {
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

__global__ void fill_kernel(float *p, long long n, float v) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

/* ep_last of counts [from, to] := value (an episode closed by a later submit) */
__global__ void episode_fill_last_kernel(long long *last, long long from, long long to, long long value, long long head,
                                         long long total, long long cap) {
  long long x = from + (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (x <= to) last[her_slot(x, head, total, cap)] = value;
}

// launchers

extern "C" int cuda_episode_fill_last(cuda_learner_t *m, long long from, long long to, long long value, long long head,
                                      long long total, cudaStream_t st) {
  long long n = to - from + 1;
  if (n <= 0) return 0;
  episode_fill_last_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(m->ep_last, from, to, value, head, total,
                                                                          m->cfg.replay_capacity);
  return (int)cudaGetLastError();
}

extern "C" int cuda_replay_sample(cuda_learner_t *m, unsigned *adam_fin, cudaStream_t st) {
  const learner_config_t *c = &m->cfg;
  cuda_dqn_ws_t *ws = &m->ws;
  const cuda_pz_t pz = ws->fused.pz;
  sample_gather_kernel<<<dim3((unsigned)c->batch, 1, (unsigned)pz.n), 64, 0, st>>>(
      m->ds, m->hp, c->prioritized, m->sum, m->mn, m->T, m->s, m->s2, m->a, m->r, m->done, c->batch, c->state_dim,
      m->idx, ws->x, ws->a, ws->r, ws->done, ws->w, adam_fin,
      her_args_t{m->her_in_graph, c->her_goal_dim, m->ep_first, m->ep_last, c->replay_capacity, m->gdisc}, pz.stride);
  return (int)cudaGetLastError();
}

extern "C" int cuda_replay_update_priorities(cuda_learner_t *m, cudaStream_t st) {
  /* with K heads the priority is mean_k CE^k_i (docs/learner.md §8), not loss_i */
  const float *pl = m->ws.fused.ens ? m->ws.fused.ce_mean : m->ws.loss_i;
  const cuda_pz_t pz = m->ws.fused.pz;
  priorities_kernel<<<dim3(1, 1, (unsigned)pz.n), 1024, 0, st>>>(m->idx, pl, m->cfg.batch, m->hp, m->cfg.per_alpha,
                                                                 m->sum, m->mn, m->T, m->ds, m->own, pz.stride);
  return (int)cudaGetLastError();
}

extern "C" int cuda_replay_add(cuda_learner_t *m, long long lo, long long hi, cudaStream_t st) {
  tree_insert_kernel<<<1, 1024, 0, st>>>(m->sum, m->mn, m->T, lo, hi, m->ds);
  return (int)cudaGetLastError();
}

extern "C" int cuda_replay_rebuild(cuda_learner_t *m, cudaStream_t st) {
  tree_rebuild_kernel<<<1, 1, 0, st>>>(m->sum, m->mn, m->T, m->size);
  return (int)cudaGetLastError();
}

/* on the default stream, before the trainer's stream sees the trees */
extern "C" int cuda_replay_init(cuda_learner_t *m) {
  int r = cudaMemset(m->sum, 0, (size_t)(2 * m->T) * 4);
  r |= cudaMemset(m->own, 0xff, (size_t)m->T * 4); /* -1: no owner */
  fill_kernel<<<(unsigned)((2 * m->T + 255) / 256), 256>>>(m->mn, 2 * m->T, INFINITY);
  r |= cudaGetLastError();
  return r;
}
