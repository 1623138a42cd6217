/*
 * dqnctl_deepsea.c — `dqnctl demo --env deepsea`: bsuite's deep sea
 * (client/deepsea_env.h) played against a new trainer on the daemon, by the
 * loop the benchmark runs too (deepsea_train): each episode acts with the
 * trainer (ensemble heads by their act_select, naming the episode, so
 * thompson follows one head all episode long; fresh noise with NoisyNet;
 * else epsilon-greedy from 1 to 0.05 over the first half), submits the
 * episode's transitions and trains; every 100 episodes it prints the share
 * that reached the reward and the mean return. The learner starts from
 * deepsea_learner_config (K = 10 thompson heads with priors and masks), then
 * the user's fields; the observation's one-hot value is --obs-scale (N).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepsea_env.h"
#include "dqnctl_deepsea.h"
#include "dqnctl_remote.h"
#include "philox.h"

typedef struct {
  ctx_t *x;
  int n;
} ds_ctx_t;

static void ds_progress(void *p, const deepsea_point_t *pt) {
  ds_ctx_t *c = p;
  if (c->x->json)
    print_json(json_pack("{s:I, s:f, s:f}", "episodes", (json_int_t)pt->episodes, "success", pt->success,
                         "mean_return", pt->mean_return));
  else
    printf("episodes %6lld  reached the reward in %5.1f%%  mean return %7.4f (optimal %.4f)\n", pt->episodes,
           100.0 * pt->success, pt->mean_return, deepsea_optimal_return(c->n));
  fflush(stdout);
}

int demo_deepsea(ctx_t *x, const cli_args_t *a) {
  static const char *cmd = "dqnctl demo";
  long long size = 10, episodes = 1000;
  const char *v;
  if ((v = opt(x, a, "--size")) && cli_int(cmd, "--size", v, 2, DEEPSEA_MAX_N, &size)) return EXIT_USAGE;
  if ((v = opt(x, a, "--episodes")) && cli_int(cmd, "--episodes", v, 1, 1000000, &episodes)) return EXIT_USAGE;
  double obs_scale = 0;
  if ((v = opt(x, a, "--obs-scale")) && cli_float(cmd, "--obs-scale", v, 1e-3, 1e3, &obs_scale)) return EXIT_USAGE;
  int N = (int)size, S = N * N;
  /* the demo's learner config (deepsea_learner_config), then the user's fields */
  learner_config_t c;
  deepsea_learner_config(&c, N);
  int rc = demo_apply_fields(cmd, a, &c);
  if (rc) return rc;
  if (c.state_dim != S || c.n_branches != 1 || c.branch_sizes[0] != 2)
    return fprintf(stderr, "%s: deepsea needs state_dim=%d and branches=2\n", cmd, S), EXIT_USAGE;
  char name[72];
  if ((rc = demo_create(x, cmd, a, &c, name, sizeof name))) return rc;
  if (!x->json)
    printf("dqnctl demo: new trainer '%s' on the daemon, deepsea N=%d (%s exploration), %lld episodes\n", name, N,
           c.ensemble_k > 1 ? "ensemble heads" : c.noisy ? "NoisyNet" : "epsilon-greedy", episodes);
  remote_t r = {x, name, S, c.noisy, 0};
  demo_driver_t drv;
  remote_driver(&drv, &r);
  /* ensembles explore by their heads, NoisyNet by its noise, else epsilon */
  deepsea_opts_t o = {N, episodes, c.seed, c.noisy, !c.noisy && c.ensemble_k == 1, 0,
                      obs_scale > 0 ? (float)obs_scale : (float)N};
  ds_ctx_t pc = {x, N};
  rc = deepsea_train(&drv, &o, ds_progress, &pc);
  if (rc) rc = r.rc ? fail_rc(x, r.rc) : EXIT_LOCAL;
  if (!rc && !x->json)
    printf("dqnctl demo: trainer '%s' stays on the daemon (dqnctl destroy %s)\n", name, name);
  return rc;
}
