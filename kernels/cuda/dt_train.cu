/*
 * dt_train.cu — the Decision Transformer's pre-training step on the GPU
 * (docs/learner.md §16, "Windows" and "Pre-training"; the CPU's is
 * kernels/cpu/dt_train.c): the windows drawn on the device by dt_window.h's
 * rule (the CPU's Philox draws), cuda_dt_loss_grad, the global norm in a
 * fixed order, the clip, AdamW at the warm-up's lr. Everything reads its
 * step count and the ring from device memory, so a step is one capturable
 * sequence. A step with no window (no eligible draw) or a non-finite loss or
 * norm applies nothing and halts the call's remaining steps, as the CPU's
 * loop stops there.
 */
#include <math.h>
#include <string.h>

#include "adam_scalars.cuh"
#include "arena.cuh"
#include "arrive.cuh"
#include "cuda_check.h"
#include "dt_cuda.cuh"
#include "dt_train_cuda.cuh"
#include "dt_window.h"

#define DT_NORM_BLOCKS 256

#define DT_SAMPLE_NT 128 /* the sample kernel's threads, and the rewards staged a round */
#define DT_SAMPLE_SV 16  /* states a thread in the sample kernel's first round of loads */

/* row i's window (one block a row): thread 0 draws the window's end (the
 * Philox draws), then the block loads in parallel what the CPU's loop reads
 * one after another (each a round trip to memory when thread 0 read them
 * alone: 17.8 us a step, kernels/dev/DEVICE_NOTES.md item 145). Once the
 * window is known every slot it reads is known (her_slot of a count), so
 * the first round of each read is issued before any is used: the episode's
 * last DT_SAMPLE_NT rewards (the return-to-go at the window's end), each
 * window step's reward and action, and DT_SAMPLE_SV states a thread; one
 * round trip where these had been one after another, and the states one a
 * thread at a time (kernels/dev/DEVICE_NOTES.md item 247). Thread 0 sums
 * the rewards from shared memory in the CPU's order (dt_rtg_from: rtg_c =
 * r_c + rtg_{c+1}, so the same bits) and chains the window's returns-to-go
 * as the CPU does; what is left past the first round (episodes' tails
 * longer than DT_SAMPLE_NT, windows of more states) follows in loops */
__global__ void __launch_bounds__(DT_SAMPLE_NT)
    dt_sample_kernel(cuda_dt_replay_t rp, const unsigned long long *seedp, const unsigned long long *ctr, int K,
                     float rtg_scale, float *states, float *rtg, int32_t *actions, int32_t *timesteps, float *mask,
                     float *sums, cuda_pz_t pz) {
  PDL_ENTER();
  extern __shared__ long long slot[]; /* K: the slot of each step, -1 for padding; then K rewards */
  float *rw = reinterpret_cast<float *>(slot + K);
  __shared__ float rbuf[DT_SAMPLE_NT];
  __shared__ long long wnd[3]; /* first, last, end (-1: no window) */
  const long long mo = dt_mo(pz);
  rp.s = dt_off(rp.s, mo), rp.r = dt_off(rp.r, mo), rp.a = dt_off(rp.a, mo), rp.ep_first = dt_off(rp.ep_first, mo);
  rp.ep_last = dt_off(rp.ep_last, mo), rp.ring = dt_off(rp.ring, mo), ctr = dt_off(ctr, mo);
  states = dt_off(states, mo), rtg = dt_off(rtg, mo), actions = dt_off(actions, mo), timesteps = dt_off(timesteps, mo);
  mask = dt_off(mask, mo), sums = dt_off(sums, mo);
  const int i = blockIdx.x, S = rp.S, tid = threadIdx.x, KS = K * S;
  const long long size = rp.ring[0], head = rp.ring[1], total = rp.ring[2];
  const size_t row = (size_t)i * K;
  if (tid == 0) {
    /* the seed and the step beside the ring's counts: one round trip */
    const unsigned long long seed = *dt_off(seedp, mo), step = *ctr;
    int64_t first = 0, last = 0, j = -1;
    if (size > 0)
      j = dt_window_end(seed, step, i, (const int64_t *)rp.ep_first, (const int64_t *)rp.ep_last, total, size, &first,
                        &last);
    wnd[0] = wnd[1] = 0, wnd[2] = -1;
    if (j >= 0) {
      long long back = head - 1 - j;
      back = back < 0 ? back + rp.cap : back;
      wnd[0] = first, wnd[1] = last, wnd[2] = total - 1 - back;
    }
  }
  __syncthreads();
  const long long first = wnd[0], last = wnd[1], end = wnd[2];
  if (end < 0) { /* no eligible draw: the row is padding */
    for (int q = tid; q < K; q += blockDim.x)
      rtg[row + q] = 0, actions[row + q] = 0, timesteps[row + q] = 0, mask[row + q] = 0;
    for (int x = tid; x < KS; x += blockDim.x) states[row * S + x] = 0.0f;
    return;
  }
  /* the first round of every read, into registers: the reward of count
   * last - tid (the return-to-go's), window step tid's reward and action
   * (count c = end - (K - 1 - q); before the episode's first: padding),
   * and the states x = tid + u DT_SAMPLE_NT */
  float r0 = 0.0f, wr = 0.0f, sv[DT_SAMPLE_SV];
  int32_t wa = 0;
  long long wsl = -1;
  if (last - tid >= end) r0 = rp.r[her_slot(last - tid, head, total, rp.cap)];
  if (tid < K) {
    const long long c = end - (K - 1 - tid);
    if (c >= first) wsl = her_slot(c, head, total, rp.cap), wr = rp.r[wsl], wa = rp.a[wsl];
  }
  /* state x = tid + u DT_SAMPLE_NT is window step xq's float xr, stepped
   * along without a division a load */
  int xq = tid / S, xr = tid % S;
  const int dq = DT_SAMPLE_NT / S, dr = DT_SAMPLE_NT % S;
#pragma unroll
  for (int u = 0; u < DT_SAMPLE_SV; u++) {
    const long long c = end - (K - 1 - xq);
    sv[u] = xq < K && c >= first ? rp.s[(size_t)her_slot(c, head, total, rp.cap) * S + xr] : 0.0f;
    xq += dq, xr += dr;
    if (xr >= S) xq++, xr -= S;
  }
  if (last - tid >= end) rbuf[tid] = r0;
  if (tid < K) {
    const long long c = end - (K - 1 - tid);
    slot[tid] = wsl, rw[tid] = wr, mask[row + tid] = wsl >= 0;
    actions[row + tid] = wa, timesteps[row + tid] = wsl >= 0 ? (int32_t)(c - first) : 0;
    if (wsl < 0) rtg[row + tid] = 0;
  }
#pragma unroll
  for (int u = 0; u < DT_SAMPLE_SV; u++)
    if (tid + u * DT_SAMPLE_NT < KS) states[row * S + tid + u * DT_SAMPLE_NT] = sv[u];
  /* what the first round left: window steps past DT_SAMPLE_NT, states past
   * DT_SAMPLE_SV rounds */
  for (int q = tid + DT_SAMPLE_NT; q < K; q += DT_SAMPLE_NT) {
    const long long c = end - (K - 1 - q);
    if (c < first) {
      slot[q] = -1, actions[row + q] = 0, timesteps[row + q] = 0, mask[row + q] = 0, rtg[row + q] = 0;
      continue;
    }
    const long long sl = her_slot(c, head, total, rp.cap);
    slot[q] = sl, rw[q] = rp.r[sl];
    actions[row + q] = rp.a[sl], timesteps[row + q] = (int32_t)(c - first), mask[row + q] = 1;
  }
  for (int x = tid + DT_SAMPLE_SV * DT_SAMPLE_NT; x < KS; x += DT_SAMPLE_NT) {
    const long long c = end - (K - 1 - x / S);
    states[row * S + x] = c < first ? 0.0f : rp.s[(size_t)her_slot(c, head, total, rp.cap) * S + x % S];
  }
  __syncthreads();
  /* the return-to-go at the window's end: counts last down to end, the
   * first round's from rbuf, later rounds loaded as before */
  float g = 0;
  for (long long x0 = last; x0 >= end; x0 -= DT_SAMPLE_NT) {
    if (x0 != last) {
      const long long x = x0 - tid;
      if (x >= end) rbuf[tid] = rp.r[her_slot(x, head, total, rp.cap)];
      __syncthreads();
    }
    if (tid == 0) {
      const int n = (int)(x0 - end + 1 < DT_SAMPLE_NT ? x0 - end + 1 : DT_SAMPLE_NT);
      for (int k = 0; k < n; k++) g = rbuf[k] + g;
    }
    __syncthreads();
  }
  if (tid == 0) {
    for (int q = K - 1; q >= 0 && slot[q] >= 0; q--) {
      if (q < K - 1) g = rw[q] + g; /* c < end */
      rtg[row + q] = g / rtg_scale;
    }
    sums[DT_SUM_ROWS_ANY + i] = 1; /* this row drew a window */
  }
}

/* what the norm's last block reads besides the partial sums, loaded by
 * thread 0 of every block at the launch's start (none of it is written in
 * the step after the loss's sum, which the programmatic wait covers) */
typedef struct {
  float loss;  /* dsums[0], the loss's sum */
  int halted;  /* sums[DT_SUM_HALT] */
  unsigned long long step; /* *ctr: this step is step + 1 */
  int64_t warmup;
  float lr, clip, wd;
} dt_norm_in_t;

/* the norm, and whether the step applies: a window was drawn, the loss
 * (in.loss) and norm are finite, the call has not halted; the step's
 * scalars into sums, an applied step's into the call's stats (as
 * dt_train_step's loop keeps them: a halting step's go only to its
 * message). By the whole block (blockDim.x 256, as the launch had when this
 * was its own kernel: the same sums); rows: this thread's sum of its
 * sums[DT_SUM_ROWS_ANY + k] (k = threadIdx.x, + blockDim.x, ..), loaded at
 * the start. Warp 1's and warp 2's first lanes raise beta1 and beta2 to the
 * step (pw: theirs, loaded at the start) while the block sums the parts. */
static __device__ void dt_norm_final(const double *part, int B, float rows, double pw, const dt_norm_in_t &in,
                                     float *sums, double *acc) {
  __shared__ double red[32];
  __shared__ float redf[32];
  __shared__ double bpow[2]; /* beta1^t, beta2^t */
  if (threadIdx.x == 32 || threadIdx.x == 64) bpow[threadIdx.x / 64] = pow(pw, (double)(in.step + 1));
  double s = 0;
  for (int k = threadIdx.x; k < DT_NORM_BLOCKS; k += blockDim.x) s += __ldcg(part + k);
  s = dt_block_sum(s, red);
  rows = dt_block_sum(rows, redf);
  if (threadIdx.x) return;
  for (int k = 0; k < B; k++) sums[DT_SUM_ROWS_ANY + k] = 0; /* for the next step's draw */
  const double norm = sqrt(s);
  const float loss = sums[DT_SUM_LOSS] = in.loss;
  int apply = !in.halted;
  if (apply && rows == 0) sums[DT_SUM_HALT] = 1, sums[DT_SUM_WHY] = 1, apply = 0; /* no window */
  if (apply && !(isfinite(loss) && isfinite(norm))) {                               /* diverged */
    sums[DT_SUM_HALT] = 1, sums[DT_SUM_WHY] = 2, apply = 0;
    sums[DT_SUM_LOSS_HALT] = loss, sums[DT_SUM_NORM_HALT] = (float)norm;
  }
  /* dt_lr_at (kernels/cpu/dt_train.c) */
  const double f = in.warmup <= 0 ? 1.0 : (double)(in.step + 1) / (double)in.warmup;
  const float lr = f >= 1 ? in.lr : (float)((double)in.lr * f);
  sums[DT_SUM_APPLY] = apply, sums[DT_SUM_NORM] = (float)norm, sums[DT_SUM_LR] = lr;
  /* AdamW's scalars (kernels/cpu/optim.c's adamw_update), here once rather
   * than in each of its threads (a double pow each): the same values */
  const float bc1 = (float)(1.0 - bpow[0]);
  sums[DT_SUM_SCALE] = clip_scale((float)norm, in.clip), sums[DT_SUM_STEP_SIZE] = lr / bc1;
  sums[DT_SUM_DECAY] = adamw_decay(lr, in.wd);
  sums[DT_SUM_BC2_SQRT] = (float)sqrt(1.0 - bpow[1]);
  if (apply) {
    sums[DT_SUM_LOSS_LAST] = loss, sums[DT_SUM_NORM_LAST] = (float)norm, sums[DT_SUM_LR_LAST] = lr;
    acc[0] += loss, acc[1] += (float)norm, sums[DT_SUM_STEPS] += 1;
  }
}

/* partial sums of g^2 in double (the CPU's grad_norm sums in double),
 * DT_NORM_BLOCKS blocks of 256, each its stride in order, four of its
 * elements loaded at a time; the last block to finish (fin, reset by it)
 * takes the norm (dt_norm_final): one launch where the final sum was a
 * kernel of its own on the step's critical path (kernels/dev/DEVICE_NOTES.md
 * item 154). What the final reads besides the parts is loaded at the start,
 * beside the gradient (dt_norm_in_t; item 249). */
__global__ void dt_norm_partial_kernel(const float *g, long long n, double *part, unsigned *fin, int B,
                                       const learner_hparams_t *hp, const unsigned long long *ctr, const float *dsums,
                                       float *sums, double *acc, cuda_pz_t pz) {
  PDL_ENTER();
  __shared__ double red[32];
  const long long mo = dt_mo(pz);
  g = dt_off(g, mo), part = dt_off(part, mo), fin = dt_off(fin, mo);
  hp = dt_off(hp, mo), ctr = dt_off(ctr, mo), dsums = dt_off(dsums, mo), sums = dt_off(sums, mo), acc = dt_off(acc, mo);
  dt_norm_in_t in = {};
  double pw = 0;
  if (threadIdx.x == 0)
    in.loss = dsums[0], in.halted = sums[DT_SUM_HALT] != 0, in.step = *ctr, in.warmup = hp->dt_warmup,
    in.lr = hp->dt_lr, in.clip = hp->dt_clip, in.wd = hp->dt_weight_decay;
  if (threadIdx.x == 32 || threadIdx.x == 64)
    pw = threadIdx.x == 32 ? hp->adam_beta1 : hp->adam_beta2, in.step = *ctr;
  float rows = 0;
  for (int k = threadIdx.x; k < B; k += blockDim.x) rows += sums[DT_SUM_ROWS_ANY + k];
  double s = 0;
  const long long st = (long long)gridDim.x * blockDim.x;
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += 4 * st) {
    float x[4];
#pragma unroll
    for (int u = 0; u < 4; u++) x[u] = k + u * st < n ? g[k + u * st] : 0.0f;
#pragma unroll
    for (int u = 0; u < 4; u++)
      if (k + u * st < n) s += (double)x[u] * x[u];
  }
  s = dt_block_sum(s, red);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
  if (!arrive_last(fin, gridDim.x)) return;
  dt_norm_final(part, B, rows, pw, in, sums, acc);
}

/* AdamW (kernels/cpu/optim.c's adamw_update) on the clipped gradient at the
 * warm-up's lr, and the step counted, when the step applies. A thread takes
 * DT_ADAMW_U elements a pass (blockDim.x apart), every p, g, m and v of them
 * loaded before any is used, and the step's scalars beside them: one round
 * trip a pass, where the loop an element at a time waited for g and m, then
 * v (after m's store), then p (after v's), and for the scalars before all
 * (kernels/dev/DEVICE_NOTES.md item 248). Each element's update is
 * adamw_element (adam_scalars.cuh), the CPU's order with no fused
 * multiply-adds, as the DQN's AdamW: given the same gradient, scale and
 * step, p, m and v are the CPU's bit for bit (tests/test-gpu-dt-adamw.c). */
#define DT_ADAMW_U 4
__global__ void __launch_bounds__(256)
    dt_adamw_kernel(float *p, const float *g, float *m, float *v, long long n, const learner_hparams_t *hp,
                    unsigned long long *ctr, const float *sums, cuda_pz_t pz) {
  PDL_ENTER();
  const long long mo = dt_mo(pz);
  sums = dt_off(sums, mo);
  p = dt_off(p, mo), g = dt_off(g, mo), m = dt_off(m, mo), v = dt_off(v, mo), hp = dt_off(hp, mo), ctr = dt_off(ctr, mo);
  const long long pass = (long long)gridDim.x * blockDim.x * DT_ADAMW_U;
  for (long long k0 = blockIdx.x * (long long)blockDim.x * DT_ADAMW_U + threadIdx.x; k0 < n; k0 += pass) {
    float pv[DT_ADAMW_U], gv[DT_ADAMW_U], mv[DT_ADAMW_U], vv[DT_ADAMW_U];
#pragma unroll
    for (int u = 0; u < DT_ADAMW_U; u++) {
      const long long k = k0 + (long long)u * blockDim.x;
      const int in = k < n;
      pv[u] = in ? p[k] : 0.0f, gv[u] = in ? g[k] : 0.0f, mv[u] = in ? m[k] : 0.0f, vv[u] = in ? v[k] : 0.0f;
    }
    if (sums[DT_SUM_APPLY] == 0) return;
    const float scale = sums[DT_SUM_SCALE], step_size = sums[DT_SUM_STEP_SIZE], decay = sums[DT_SUM_DECAY];
    const float bc2_sqrt = sums[DT_SUM_BC2_SQRT], b1 = hp->adam_beta1, b2 = hp->adam_beta2, eps = hp->adam_eps;
    if (k0 == 0) *ctr += 1; /* the step is counted, once (no thread here reads it) */
#pragma unroll
    for (int u = 0; u < DT_ADAMW_U; u++) {
      const long long k = k0 + (long long)u * blockDim.x;
      if (k >= n) break;
      adamw_element(gv[u] * scale, b1, b2, bc2_sqrt, step_size, decay, eps, pv[u], mv[u], vv[u]);
      m[k] = mv[u], v[k] = vv[u], p[k] = pv[u];
    }
  }
}

/* 1 in *flag when some stored slot's episode has ended and is stored whole */
__global__ void dt_has_episode_kernel(const long long *ep_first, const long long *ep_last, const long long *ring,
                                      int *flag) {
  PDL_ENTER();
  const long long size = ring[0], total = ring[2];
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < size; j += (long long)gridDim.x * blockDim.x)
    if (her_eligible(ep_first[j], ep_last[j], total, size)) *flag = 1; /* every writer writes 1: no race on the value */
}

extern "C" int cuda_dt_train_alloc(cuda_dt_train_t *t, const dt_layout_t *L, int B) {
  memset(t, 0, sizeof *t);
  int e = cuda_dt_alloc(&t->dt, L, B);
  const size_t P = (size_t)L->n_params;
  /* dev_alloc: a population member's come from its slice of the arena */
  if (!e) e = (int)dev_alloc_t(&t->m, sizeof(float) * P);
  if (!e) e = (int)dev_alloc_t(&t->v, sizeof(float) * P);
  if (!e) e = (int)dev_alloc_t(&t->ctr, sizeof(unsigned long long));
  if (!e) e = (int)dev_alloc_t(&t->part, sizeof(double) * DT_NORM_BLOCKS);
  if (!e) e = (int)dev_alloc_t(&t->acc, sizeof(double) * 2);
  if (!e) e = (int)dev_alloc_t(&t->sums, sizeof(float) * ((size_t)DT_SUM_ROWS_ANY + B));
  if (!e) e = (int)dev_alloc_t(&t->flag, sizeof(int));
  if (!e) e = (int)dev_alloc_t(&t->fin, sizeof(unsigned));
  if (!e) e = (int)cudaMemset(t->fin, 0, sizeof(unsigned));
  if (!e) e = (int)cudaMemset(t->m, 0, sizeof(float) * P);
  if (!e) e = (int)cudaMemset(t->v, 0, sizeof(float) * P);
  if (!e) e = (int)cudaMemset(t->ctr, 0, sizeof(unsigned long long));
  if (!e) e = (int)cudaMemset(t->sums, 0, sizeof(float) * ((size_t)DT_SUM_ROWS_ANY + B));
  if (e) cuda_dt_train_free(t);
  return e;
}

extern "C" void cuda_dt_train_free(cuda_dt_train_t *t) {
  cuda_dt_free(&t->dt);
  dev_free(t->m), dev_free(t->v), dev_free(t->ctr), dev_free(t->part), dev_free(t->acc), dev_free(t->sums);
  dev_free(t->flag), dev_free(t->fin);
  t->m = t->v = NULL, t->ctr = NULL, t->part = t->acc = NULL, t->sums = NULL, t->flag = NULL, t->fin = NULL;
}

extern "C" int cuda_dt_has_episode(cuda_dt_train_t *t, const cuda_dt_replay_t *rp, cudaStream_t st, int *has) {
  CUDA_RET(cudaMemsetAsync(t->flag, 0, sizeof(int), st));
  pdl_launch(dt_has_episode_kernel, 128, 256, 0, st, rp->ep_first, rp->ep_last, rp->ring, t->flag);
  CUDA_RET(cudaGetLastError());
  CUDA_RET(cudaMemcpyAsync(has, t->flag, sizeof(int), cudaMemcpyDeviceToHost, st));
  return (int)cudaStreamSynchronize(st);
}

extern "C" int cuda_dt_call_begin(cuda_dt_train_t *t, cudaStream_t st) {
  CUDA_RET(dt_zero(&t->dt, t->acc, sizeof(double) * 2, st));
  return dt_zero(&t->dt, t->sums, sizeof(float) * ((size_t)DT_SUM_ROWS_ANY + t->dt.B), st);
}

extern "C" int cuda_dt_train_step(cuda_dt_train_t *t, const cuda_dt_replay_t *rp, const unsigned long long *seed,
                                  float rtg_scale, const learner_hparams_t *hp, cudaStream_t st) {
  cuda_dt_t *d = &t->dt;
  const int K = d->L.K, B = d->B;
  const cuda_pz_t pz = d->pz;
  pdl_launch(dt_sample_kernel, dt_grid(d, dim3((unsigned)B)), DT_SAMPLE_NT, (sizeof(long long) + sizeof(float)) * K, st,
             *rp, seed, t->ctr, K, rtg_scale, d->states, d->rtg, d->actions, d->timesteps, d->mask, t->sums, pz);
  CUDA_RET(cudaGetLastError());
  CUDA_RET(cuda_dt_loss_grad(d, st));
  return cuda_dt_train_apply(t, hp, st);
}

extern "C" int cuda_dt_train_apply(cuda_dt_train_t *t, const learner_hparams_t *hp, cudaStream_t st) {
  cuda_dt_t *d = &t->dt;
  const int B = d->B;
  const cuda_pz_t pz = d->pz;
  const long long n = d->L.n_params;
  pdl_launch(dt_norm_partial_kernel, dt_grid(d, dim3(DT_NORM_BLOCKS)), 256, 0, st, d->g, n, t->part, t->fin, B, hp,
             t->ctr, d->sums, t->sums, t->acc, pz);
  const long long ab = (n + 256 * DT_ADAMW_U - 1) / (256 * DT_ADAMW_U);
  pdl_launch(dt_adamw_kernel, dt_grid(d, dim3((unsigned)(ab < 2048 ? ab : 2048))), 256, 0, st,
             d->p, d->g, t->m, t->v, n, hp, t->ctr, t->sums, pz);
  return (int)cudaGetLastError();
}
