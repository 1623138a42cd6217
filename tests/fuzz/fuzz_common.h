/*
 * fuzz_common.h — what the fuzz harnesses and their corpus generator share:
 * the tiny learner every seed is made for (so a trainer step costs
 * microseconds and a checkpoint a few KiB), deterministic transitions for
 * it, and learner states held in memory (learner_save / learner_load through
 * a growing buffer and a bounded reader).
 */
#ifndef DQND_FUZZ_COMMON_H
#define DQND_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "learner.h"

/* The tiny config: S = 3 state floats, branches 2,3 (6 joint actions),
 * batch 4, replay 32, NoisyNet on. variant 0 is that; 1: uniform replay and
 * an ensemble of 2 heads with fixed priors (the checkpoint's prior section);
 * 2: a Decision Transformer (1 block, embed 4, 2 heads, context 2: its
 * sections). */
#define FUZZ_S 3
#define FUZZ_ACTIONS 6
#define FUZZ_TRAINER "t"
extern const char *const fuzz_tiny_fields[];
extern const int fuzz_n_tiny_fields;
int fuzz_tiny_config(learner_config_t *c, int variant);

/* n transitions for the tiny config (tag varies them); arrays the caller's */
typedef struct fuzz_batch {
  int n;
  float s[64 * FUZZ_S], s2[64 * FUZZ_S], r[64];
  int32_t a[64];
  uint8_t d[64];
  int64_t ep[64];
} fuzz_batch_t;
void fuzz_make_batch(fuzz_batch_t *b, int n, uint32_t tag);

/* A CPU learner of the tiny config (variant) with `transitions` submitted and
 * `steps` steps run; 0 or a LEARNER_E* code. */
int fuzz_tiny_learner(int variant, int transitions, int steps, learner_t **out);

/* learner_save into a malloc'd buffer (*buf, *n: the caller frees). */
int fuzz_save_mem(learner_t *l, int with_replay, uint8_t **buf, size_t *n);

/* A learner_read_fn over bytes in memory: all n bytes or -1. */
typedef struct fuzz_reader {
  const uint8_t *p;
  size_t n, pos;
} fuzz_reader_t;
int fuzz_read(void *ctx, void *buf, size_t n);

#endif
