/*
 * bench-bitflip.c — hindsight experience replay on the HER paper's bit
 * flipping (issue 16 item 6, docs/learner.md §9; client/bitflip_env.h): the
 * learner of bitflip_learner_config with HER (future, ratio 0.8) and, beside
 * it on the same seeds and budget, the same learner without HER
 * (her_goal_dim 0). Prints each 100-episode window's success rate and a last
 * line per run for BENCHMARKS.md. The oracle is the environment: without
 * hindsight a random policy reaches one goal of 2^n - 1 in n steps.
 *
 *   bench-bitflip [--n N] [--episodes E] [--seeds 1,2,3] [--her | --no-her | --both]
 *                 [--backend cpu|cuda] [field=value ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitflip_env.h"
#include "meanrev_env.h"
#include "learner.h"

static void print_window(void *ctx, const bitflip_point_t *p) {
  double *last = ctx;
  *last = p->success;
  printf("  episodes %6lld  success %5.1f%%  mean length %5.2f\n", p->episodes, 100 * p->success, p->mean_steps);
  fflush(stdout);
}

static int train_ratio = 1;
static long long eps_episodes = 0;

static double run(int n, long long episodes, uint64_t seed, int her, learner_backend_t be, int nf, char **fields) {
  learner_config_t c;
  bitflip_learner_config(&c, n);
  char err[256], sd[32];
  snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
  learner_config_set(&c, "seed", sd, NULL, 0);
  if (!her) learner_config_set(&c, "her_goal_dim", "0", NULL, 0);
  if (demo_config_set_fields(&c, (const char *const *)fields, nf, err, sizeof err)) return fprintf(stderr, "%s\n", err), -1;
  learner_t *l;
  if (learner_create(&c, be, &l, err, sizeof err)) return fprintf(stderr, "%s\n", err), -1;
  demo_driver_t drv;
  demo_driver_learner(&drv, l);
  bitflip_opts_t o = {n, episodes, seed, eps_episodes, 0.0f, train_ratio};
  printf("bitflip n=%d seed %llu, %s, backend %s, %lld episodes\n", n, (unsigned long long)seed,
         her ? "HER (future, ratio 0.8)" : "no HER", learner_backend_name(be), episodes);
  double last = -1;
  int rc = bitflip_train(&drv, &o, print_window, &last);
  learner_destroy(l);
  if (rc) return fprintf(stderr, "bitflip_train failed (%d)\n", rc), -1;
  printf("RESULT n=%d seed=%llu her=%d backend=%s success_last_window=%.3f\n", n, (unsigned long long)seed, her,
         learner_backend_name(be), last);
  return last;
}

int main(int argc, char **argv) {
  int n = 10, mode = 1; /* 1 her, 0 no-her, 2 both */
  long long episodes = 500;
  const char *seeds = "1";
  learner_backend_t be = LEARNER_BACKEND_CPU;
  char *fields[64];
  int nf = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--episodes") && i + 1 < argc) episodes = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = argv[++i];
    else if (!strcmp(argv[i], "--train-ratio") && i + 1 < argc) train_ratio = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--eps-episodes") && i + 1 < argc) eps_episodes = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--her")) mode = 1;
    else if (!strcmp(argv[i], "--no-her")) mode = 0;
    else if (!strcmp(argv[i], "--both")) mode = 2;
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
      i++;
      be = !strcmp(argv[i], "cuda") ? LEARNER_BACKEND_CUDA : LEARNER_BACKEND_CPU;
    } else if (strchr(argv[i], '=') && nf < 64) fields[nf++] = argv[i];
    else return fprintf(stderr, "usage: bench-bitflip [--n N] [--episodes E] [--seeds 1,2] [--her|--no-her|--both] "
                                "[--backend cpu|cuda] [field=value ...]\n"), 2;
  }
  if (be == LEARNER_BACKEND_CUDA) {
    char dev[256];
    if (!learner_cuda_available(dev, sizeof dev)) return printf("no usable CUDA device (%s): skipped\n", dev), 77;
  }
  char list[256];
  snprintf(list, sizeof list, "%s", seeds);
  for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
    uint64_t seed = strtoull(t, NULL, 10);
    if (mode != 0 && run(n, episodes, seed, 1, be, nf, fields) < 0) return 1;
    if (mode != 1 && run(n, episodes, seed, 0, be, nf, fields) < 0) return 1;
  }
  return 0;
}
