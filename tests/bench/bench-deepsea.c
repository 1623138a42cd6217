/*
 * bench-deepsea.c — deep exploration on bsuite's deep sea (issue 15 item 6,
 * docs/learner.md §8; client/deepsea_env.h): the CPU learner of
 * deepsea_learner_config (K = 10 thompson heads, priors, bootstrap masks)
 * and, beside it on the same seeds and budget, the single head without noise
 * (epsilon-greedy). Prints every 100-episode window's share of episodes that
 * reached the reward, and a last line per run, so BENCHMARKS.md can quote it.
 * The bar is >= 80% in episodes 1,901-2,000 at N = 20 on seeds 1-3,
 * asserted by test-learning's deepsea case; this prints the curves for
 * BENCHMARKS.md, on any seeds and config. The oracle is the environment: the reward exists only at the end
 * of N - 1 moves right, which a random walk finds with probability ~2^-(N-1).
 *
 *   bench-deepsea [--n N] [--episodes E] [--seeds 1,2,3] [--single | --both]
 *                 [--obs-scale X] [--train-steps S] [field=value ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepsea_env.h"
#include "meanrev_env.h"
#include "learner.h"

static void print_window(void *ctx, const deepsea_point_t *p) {
  double *last = ctx;
  *last = p->success;
  printf("  episodes %5lld  reached the reward in %5.1f%%  mean return %7.4f\n", p->episodes, 100 * p->success,
         p->mean_return);
  fflush(stdout);
}

/* One learner's run; the share of the last window's episodes that reached the reward, or -1. */
static int train_steps; /* learner steps per episode (0: N) */

static double run(int n, long long episodes, uint64_t seed, int single, float obs_scale, int nf, char **fields) {
  learner_config_t c;
  deepsea_learner_config(&c, n);
  char err[256], sd[32];
  snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
  learner_config_set(&c, "seed", sd, NULL, 0);
  if (single) learner_config_set(&c, "ensemble_k", "1", NULL, 0), learner_config_set(&c, "ensemble_prior_scale", "0", NULL, 0);
  if (demo_config_set_fields(&c, (const char *const *)fields, nf, err, sizeof err)) return fprintf(stderr, "%s\n", err), -1;
  learner_t *l;
  if (learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err)) return fprintf(stderr, "%s\n", err), -1;
  demo_driver_t drv;
  demo_driver_learner(&drv, l);
  deepsea_opts_t o = {n, episodes, seed, c.noisy, c.ensemble_k == 1 && !c.noisy, train_steps,
                      obs_scale > 0 ? obs_scale : (float)n};
  const char *who = c.ensemble_k > 1 ? "ensemble heads" : c.noisy ? "NoisyNet" : "one head, epsilon-greedy";
  printf("deepsea N=%d seed %llu, %s (K=%d, prior scale %g, mask p %g, act_select %d), obs scale %g\n", n,
         (unsigned long long)seed, who, c.ensemble_k, c.ensemble_prior_scale, c.ensemble_mask_p, c.hp.act_select,
         o.obs_scale);
  double last = -1;
  int rc = deepsea_train(&drv, &o, print_window, &last);
  learner_destroy(l);
  if (rc) return fprintf(stderr, "deepsea_train: %d\n", rc), -1;
  printf("result: N=%d seed %llu %s: the reward in %.1f%% of the last 100 episodes (%lld played)\n", n,
         (unsigned long long)seed, who, 100 * last, episodes);
  return last;
}

int main(int argc, char **argv) {
  int n = 20, mode = 2, nf = 0; /* mode 0 ensemble, 1 single head, 2 both */
  long long episodes = 2000;
  double obs = 0;
  const char *seeds = "1,2,3";
  char *fields[64];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--episodes") && i + 1 < argc) episodes = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = argv[++i];
    else if (!strcmp(argv[i], "--obs-scale") && i + 1 < argc) obs = atof(argv[++i]);
    else if (!strcmp(argv[i], "--train-steps") && i + 1 < argc) train_steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--single")) mode = 1;
    else if (!strcmp(argv[i], "--ensemble")) mode = 0;
    else if (!strcmp(argv[i], "--both")) mode = 2;
    else if (strchr(argv[i], '=') && nf < 64) fields[nf++] = argv[i];
    else {
      fprintf(stderr,
              "usage: %s [--n N] [--episodes E] [--seeds 1,2,3] [--ensemble | --single | --both] [--obs-scale X] "
              "[--train-steps S] [field=value ...]\n",
              argv[0]);
      return 2;
    }
  }
  if (n < 2 || n > DEEPSEA_MAX_N || episodes < 1) return fprintf(stderr, "--n or --episodes out of range\n"), 2;
  for (const char *p = seeds; *p;) {
    char *end;
    unsigned long long sd = strtoull(p, &end, 10);
    if (end == p) return fprintf(stderr, "--seeds: '%s' is not a list of integers\n", seeds), 2;
    for (int single = 0; single < 2; single++)
      if ((mode == 2 || mode == single) && run(n, episodes, sd, single, (float)obs, nf, fields) < 0) return 1;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}
