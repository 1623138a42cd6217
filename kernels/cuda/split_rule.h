/*
 * split_rule.h — how many split-K parts a layer-GEMM problem gets
 * (gemm_plan.cu's rule; docs/gpu.md, the split-K planner's paragraph), as plain C so a
 * CPU test (tests/test-split-rule.c) holds it without a GPU. GBK and the
 * SPLIT_* limits come from gemm_tiles.cuh, which the caller includes first.
 */
#ifndef DQN_CUDA_SPLIT_RULE_H
#define DQN_CUDA_SPLIT_RULE_H

/* k per part for a problem of depth K in a phase of `work` k-work (the sum
 * over its problems of tiles x K), planned for about `occ` blocks on each of
 * `nsm` SMs: the phase's work over occ x nsm blocks is a block's share, the
 * problem gets K / share parts (to the nearest), at most sqrt(K / 16) (a
 * part's time falls as K / parts while the last block to arrive reads the
 * parts one after another, so their sum is least near a square root of K),
 * each SPLIT_MIN_CHUNKS chunks at least and SPLIT_MAX_K k at most, and a part
 * is a whole number of GBK chunks. The parts are then ceil(K / kper). */
static inline int gemm_split_kper(int K, long long work, int occ, int nsm) {
  if (K < 1) return GBK;
  if (work < 1) work = 1;
  long long sp = (2LL * K * occ * nsm + work) / (2 * work);
  int cap = 1;
  while ((long long)(cap + 1) * (cap + 1) * 16 <= K) cap++;
  if (sp > cap) sp = cap;
  const int kmax = K / (SPLIT_MIN_CHUNKS * GBK);
  if (sp > kmax) sp = kmax;
  if (K > SPLIT_MAX_K * sp) sp = (K + SPLIT_MAX_K - 1) / SPLIT_MAX_K;
  if (sp < 1) sp = 1;
  return (int)(((K + sp - 1) / sp + GBK - 1) / GBK * GBK);
}

#endif
