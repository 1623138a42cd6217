/*
 * dqnctl_bitflip.c — `dqnctl demo --env bitflip --bits N`: the HER paper's
 * bit flipping (client/bitflip_env.h) against a new trainer on the daemon,
 * by the loop the learning test and the benchmark run (bitflip_train): each
 * episode acts with the trainer (epsilon-greedy from 1 to 0 over the first
 * 40% of the episodes), submits the episode with its end marked (terminal on
 * success, truncated after N steps) and trains one step per transition;
 * every 100 episodes it prints the share that reached the goal. The learner
 * starts from bitflip_learner_config (HER on the whole state: future, ratio
 * 0.8), then the user's fields (her_goal_dim=0 turns HER off).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitflip_env.h"
#include "dqnctl_bitflip.h"
#include "dqnctl_remote.h"

static void bf_progress(void *p, const bitflip_point_t *pt) {
  ctx_t *x = p;
  if (x->json)
    print_json(json_pack("{s:I, s:f, s:f}", "episodes", (json_int_t)pt->episodes, "success", pt->success,
                         "mean_length", pt->mean_steps));
  else
    printf("episodes %6lld  reached the goal in %5.1f%%  mean length %5.2f\n", pt->episodes, 100.0 * pt->success,
           pt->mean_steps);
  fflush(stdout);
}

int demo_bitflip(ctx_t *x, const cli_args_t *a) {
  static const char *cmd = "dqnctl demo";
  long long bits = 10, episodes = 500;
  const char *v;
  if ((v = opt(x, a, "--bits")) && cli_int(cmd, "--bits", v, 2, BITFLIP_MAX_N, &bits)) return EXIT_USAGE;
  if ((v = opt(x, a, "--episodes")) && cli_int(cmd, "--episodes", v, 1, 1000000, &episodes)) return EXIT_USAGE;
  int N = (int)bits;
  learner_config_t c;
  bitflip_learner_config(&c, N);
  int rc = demo_apply_fields(cmd, a, &c);
  if (rc) return rc;
  if (c.state_dim != 2 * N || c.n_branches != 1 || c.branch_sizes[0] != N)
    return fprintf(stderr, "%s: bitflip needs state_dim=%d and branches=%d\n", cmd, 2 * N, N), EXIT_USAGE;
  char name[72];
  if ((rc = demo_create(x, cmd, a, &c, name, sizeof name))) return rc;
  static const char *strategy[] = {"future", "final", "episode", "random"};
  if (!x->json && c.her_goal_dim)
    printf("dqnctl demo: new trainer '%s' on the daemon, bitflip n=%d (HER: %s, ratio %g), %lld episodes\n", name, N,
           strategy[c.hp.her_strategy & 3], (double)c.hp.her_ratio, episodes);
  else if (!x->json)
    printf("dqnctl demo: new trainer '%s' on the daemon, bitflip n=%d (no HER), %lld episodes\n", name, N, episodes);
  remote_t r = {x, name, 2 * N, c.noisy, 0};
  demo_driver_t drv;
  remote_driver(&drv, &r);
  bitflip_opts_t o = {N, episodes, c.seed, 0, 0.0f, 1};
  rc = bitflip_train(&drv, &o, bf_progress, x);
  if (rc) rc = r.rc ? fail_rc(x, r.rc) : EXIT_LOCAL;
  if (!rc && !x->json)
    printf("dqnctl demo: trainer '%s' stays on the daemon (dqnctl destroy %s)\n", name, name);
  return rc;
}
