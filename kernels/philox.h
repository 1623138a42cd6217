/*
 * philox.h — Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11), the one random generator of dqnd.
 *
 * Counter-based: a draw is a pure function of (key, counter), so the CPU and
 * CUDA backends draw the same numbers for the same (seed, stream, step, lane)
 * without sharing any state. dqnd's convention (both backends):
 *   key     = { seed & 0xffffffff, seed >> 32 }
 *   counter = { lane, step & 0xffffffff, step >> 32, stream }
 * Each call yields four 32-bit words.
 *
 * This header is plain C99 and also compiles as CUDA device code.
 */
#ifndef DQN_PHILOX_H
#define DQN_PHILOX_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PHILOX_FN static __host__ __device__ __forceinline__
#else
#define PHILOX_FN static inline
#endif

/* Streams: one per purpose, so no two uses of the generator ever overlap. */
enum philox_stream {
  PHILOX_STREAM_REPLAY = 1,       /* replay indices: lane = sample in batch */
  PHILOX_STREAM_NOISE_ONLINE = 2, /* NoisyNet noise of the online net per step */
  PHILOX_STREAM_NOISE_TARGET = 3, /* ... of the target net per step */
  PHILOX_STREAM_NOISE_ACT = 4,    /* ... for Act, counter = act call number */
  PHILOX_STREAM_INIT = 5,         /* parameter initialisation, step = layer */
  PHILOX_STREAM_INIT_ATTN = 6,    /* the attention block's initialisation, step = tensor */
  PHILOX_STREAM_INIT_PRIOR = 7,   /* the fixed prior heads' initialisation, step = prior layer */
  PHILOX_STREAM_ENS_MASK = 8,     /* bootstrap masks: step = insertion count, lane = head (docs/learner.md §8) */
  PHILOX_STREAM_ACT_HEAD = 9,     /* Thompson Act: the head of an episode, step = episode */
  PHILOX_STREAM_HER = 10,         /* HER donors: step = training step, lane = batch row (docs/learner.md §9) */
  PHILOX_STREAM_INIT_DT = 12,     /* the Decision Transformer's initialisation, step = registry tensor */
  PHILOX_STREAM_DT = 11,          /* Decision Transformer windows: step = pre-training step, lane = row x tries (dt_window.h) */
};

typedef struct { uint32_t v[4]; } philox4_t;

PHILOX_FN void philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

PHILOX_FN philox4_t philox4x32_10(philox4_t c, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c.v[0], &hi0, &lo0);
    philox_mulhilo(0xCD9E8D57u, c.v[2], &hi1, &lo1);
    philox4_t o;
    o.v[0] = hi1 ^ c.v[1] ^ k0;
    o.v[1] = lo1;
    o.v[2] = hi0 ^ c.v[3] ^ k1;
    o.v[3] = lo0;
    c = o;
    k0 += 0x9E3779B9u; /* the key bump after the last round is unused */
    k1 += 0xBB67AE85u;
  }
  return c;
}

/* The four words for (seed, stream, step, lane). */
PHILOX_FN philox4_t philox_draw(uint64_t seed, uint32_t stream, uint64_t step, uint32_t lane) {
  philox4_t c;
  c.v[0] = lane;
  c.v[1] = (uint32_t)step;
  c.v[2] = (uint32_t)(step >> 32);
  c.v[3] = stream;
  return philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform in [0, 1): the top 24 bits, exact in float on every device. */
PHILOX_FN float philox_uniform(uint32_t u) { return (float)(u >> 8) * (1.0f / 16777216.0f); }
/* Uniform in (0, 1): never 0, so it can go into a log (23 bits, so the +0.5
 * stays exact in float and the top value is below 1). */
PHILOX_FN float philox_uniform_open(uint32_t u) { return ((float)(u >> 9) + 0.5f) * (1.0f / 8388608.0f); }
/* The bootstrap mask m_k of the transition inserted as number `count` (0-based,
 * over the trainer's life) for ensemble head k (docs/learner.md §8): Bernoulli(p)
 * from (seed, ENS_MASK, step = count, lane = k / 4, word k % 4); stateless.
 * p >= 1 gives 1 always. */
PHILOX_FN int philox_ensemble_mask(uint64_t seed, uint64_t count, uint32_t k, float p) {
  if (p >= 1.0f) return 1;
  return philox_uniform(philox_draw(seed, PHILOX_STREAM_ENS_MASK, count, k / 4).v[k % 4]) < p;
}
/* Integer in [0, n) by multiply-shift (no modulo bias beyond 2^-32, exact). */
PHILOX_FN uint32_t philox_below(uint32_t u, uint32_t n) { return (uint32_t)(((uint64_t)u * n) >> 32); }

/* Four standard normals from one draw (Box-Muller on the pairs (0,1), (2,3)).
 * Float math: CPU and GPU agree to a few ulp, not bit for bit. */
PHILOX_FN void philox_normal4(philox4_t d, float out[4]) {
  for (int k = 0; k < 2; k++) {
    float u1 = philox_uniform_open(d.v[2 * k]);
    float u2 = philox_uniform(d.v[2 * k + 1]);
    float rad = sqrtf(-2.0f * logf(u1));
    float th = 6.28318530717958647692f * u2;
    out[2 * k] = rad * cosf(th);
    out[2 * k + 1] = rad * sinf(th);
  }
}

#endif
