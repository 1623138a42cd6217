/*
 * bench-gpu-step — steps/s and us/step of the CUDA learner on the `ref`
 * config at several batch sizes (uniform replay without noise, like the
 * PyTorch peer; and PER + NoisyNet), the replay filled with random
 * transitions. Timed over Step(n) calls (the graph replayed n times, one sync
 * at the end), median of 5. `scripts/gpu-run.sh --peer` runs it beside the
 * PyTorch peer in the same call. Config fields for profiling and sweeps:
 * BENCH_CUDA_GRAPH=0 (cuda_graph: each step's kernels launched one by one,
 * what ncu profiles), BENCH_GEMM_OCC=k (cuda_gemm_occupancy). Exits 77 with
 * no usable GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "learner.h"
#include "philox.h"

int main(int argc, char **argv) {
  char dev[256];
  bench_gpu_or_skip(dev, sizeof dev);
  const char *batches = argc > 1 ? argv[1] : "64,256,1024,4096";
  int steps = argc > 2 ? atoi(argv[2]) : 500;
  printf("device: %s\n", dev);
  char list[128];
  /* modes: 0 uniform fp32, 1 PER + NoisyNet fp32, 2 uniform TF32
   * (tensor_cores=1), 3 uniform fp32 with K = 5 ensemble heads, priors 1,
   * masks 0.5, diversity 0.1 (issue 15's peer flags, attention off), 4 the
   * same with attention (8 tokens, 2 heads: issue 15's full configuration),
   * 5 mode 1 with HER (8-wide goals, future, ratio 0.8) and 3-step returns,
   * 6 mode 1 with 3-step returns alone (issue 16's speed check), 7 every
   * feature of issue 31's step at once: PER, NoisyNet, HER (8-wide goals,
   * future, ratio 0.3), 3-step returns, attention (8 tokens, 2 heads) and
   * K = 3 head sets with priors 1 (the peer covers the last two:
   * scripts/gpu-ens.sh PEER_K=3 PEER_DIV=0 PEER_MASK=1);
   * BENCH_PROFILE_MODE=k runs only mode k, BENCH_HER=1 modes 1, 5 and 6;
   * BENCH_TF32=1 runs every mode with tensor_cores=1 */
  const char *pm = getenv("BENCH_PROFILE_MODE"), *cg = getenv("BENCH_CUDA_GRAPH"), *oc = getenv("BENCH_GEMM_OCC");
  int m0 = pm ? atoi(pm) : 0, m1 = pm ? atoi(pm) + 1 : 3;
  const char *her = getenv("BENCH_HER"), *tf = getenv("BENCH_TF32");
  if (her && atoi(her)) m0 = 1, m1 = 7;
  if (cg || oc) printf("cuda_graph %s, cuda_gemm_occupancy %s\n", cg ? cg : "default", oc ? oc : "default");
  for (int mode = m0; mode < m1; mode++) {
    if (her && atoi(her) && ((mode > 1 && mode < 5) || mode == 7)) continue;
    snprintf(list, sizeof list, "%s", batches);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
      learner_config_t c;
      learner_config_default(&c);
      c.batch = atoi(tok);
      c.replay_capacity = 100000;
      c.prioritized = mode == 1 || mode >= 5;
      c.noisy = mode == 1 || mode >= 5;
      if (mode == 5) c.her_goal_dim = 8, c.hp.her_ratio = 0.8f;
      if (mode == 7) c.her_goal_dim = 8, c.hp.her_ratio = 0.3f, c.attn_tokens = 8, c.attn_heads = 2;
      if (mode == 7) c.ensemble_k = 3, c.ensemble_prior_scale = 1;
      if (mode >= 5) c.hp.n_step = 3;
      c.tensor_cores = mode == 2 || (tf && atoi(tf));
      if (mode == 4) c.attn_tokens = 8, c.attn_heads = 2;
      if (mode == 3 || mode == 4) c.ensemble_k = 5, c.ensemble_prior_scale = 1, c.ensemble_mask_p = 0.5f, c.hp.ensemble_diversity = 0.1f;
      if (cg) c.cuda_graph = atoi(cg);
      if (oc) c.cuda_gemm_occupancy = atoi(oc);
      learner_t *l;
      char err[256];
      if (learner_create(&c, LEARNER_BACKEND_CUDA, &l, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
      }
      const int n = 10000, S = c.state_dim;
      float *s = malloc(sizeof(float) * n * S), *s2 = malloc(sizeof(float) * n * S), *r = malloc(sizeof(float) * n);
      int32_t *a = malloc(sizeof(int32_t) * n);
      uint8_t *d = malloc(n);
      for (int base = 0; base < c.replay_capacity; base += n) {
        for (int i = 0; i < n * S; i += 4) {
          float g[4];
          philox_normal4(philox_draw(1, 70, (uint64_t)base, (uint32_t)i), g);
          for (int k = 0; k < 4; k++) s[i + k] = g[k], s2[i + k] = g[3 - k];
        }
        for (int i = 0; i < n; i++) {
          philox4_t u = philox_draw(1, 71, (uint64_t)(base + i), 0);
          a[i] = (int32_t)philox_below(u.v[0], 81);
          r[i] = philox_uniform(u.v[1]) * 2 - 1;
          d[i] = philox_uniform(u.v[2]) < 0.01f;
        }
        learner_transitions_t t = {n, s, a, r, s2, d, NULL, NULL};
        learner_submit(l, &t, err, sizeof err);
      }
      free(s), free(s2), free(r), free(a), free(d);
      learner_stats_t st;
      double med = bench_step_time(l, 20, steps, 5, &st); /* capture + warm-up, then 5 calls */
      if (med < 0) return 1;
      static const char *mn[] = {"uniform", "per+noisy", "tf32", "ensemble", "ens+attn", "p+n+her+n3", "p+n+nstep3",
                                 "everything"};
      char label[32];
      snprintf(label, sizeof label, "%s%s", mn[mode], c.tensor_cores && mode != 2 ? "-tf32" : "");
      uint32_t lb; /* the last loss's bits: two builds that claim the same arithmetic print the same */
      memcpy(&lb, &st.loss_last, sizeof lb);
      printf("B=%5d dqnd-cuda %-10s %9.1f us/step %9.0f steps/s loss=%.4f bits=%08x\n", c.batch, label, med * 1e6,
             1 / med, st.loss_last, lb);
      fflush(stdout);
      learner_destroy(l);
    }
  }
  return 0;
}
