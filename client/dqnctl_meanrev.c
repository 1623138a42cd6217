/*
 * dqnctl_meanrev.c — `dqnctl demo` (--env meanrev, the default): the meanrev
 * trading environment (meanrev_env.h) trained on a new trainer on the daemon,
 * its learning curve printed as it goes; exit 5 below 90% of the optimal
 * return.
 */
#include <stdio.h>
#include <string.h>

#include "dqnctl_meanrev.h"
#include "dqnctl_remote.h"
#include "meanrev_env.h"

static void demo_progress(void *p, const meanrev_point_t *pt) {
  ctx_t *x = p;
  double frac = pt->optimal_return != 0 ? pt->policy_return / pt->optimal_return : 0;
  if (x->json) {
    print_json(json_pack("{s:i, s:I, s:f, s:f, s:f, s:f}", "iteration", pt->iteration, "step",
                         (json_int_t)pt->learner_step, "loss", (double)pt->loss, "return", pt->policy_return,
                         "optimal", pt->optimal_return, "random", pt->random_return));
    return;
  }
  int bar = frac < 0 ? 0 : (frac > 1 ? 40 : (int)(40 * frac));
  printf("iter %4d  step %6llu  loss %7.4f  return %7.3f  optimal %7.3f  %5.1f%% |%.*s%*s|\n", pt->iteration,
         (unsigned long long)pt->learner_step, pt->loss, pt->policy_return, pt->optimal_return, 100 * frac, bar,
         "########################################", 40 - bar, "");
  fflush(stdout);
}

int demo_meanrev(ctx_t *x, const cli_args_t *a) {
  static const char *cmd = "dqnctl demo";
  meanrev_opts_t o;
  meanrev_opts_default(&o);
  const char *it = opt(x, a, "--iterations");
  long long iters;
  if (it) {
    if (cli_int(cmd, "--iterations", it, 1, 100000, &iters)) return EXIT_USAGE;
    o.iterations = (int)iters;
  }
  learner_config_t c;
  meanrev_learner_config(&c);
  char name[72];
  int rc = demo_apply_fields(cmd, a, &c);
  if (!rc) rc = demo_create(x, cmd, a, &c, name, sizeof name);
  if (rc) return rc;
  if (!x->json)
    printf("dqnctl demo: new trainer '%s' on the daemon, meanrev (9x3x3 actions), %d rounds of %d env steps + %d "
           "train steps\n",
           name, o.iterations, o.envs * o.collect_steps, o.train_steps);
  remote_t r = {x, name, MEANREV_STATE_DIM, c.noisy, 0};
  demo_driver_t drv;
  remote_driver(&drv, &r);
  meanrev_point_t fin;
  if (meanrev_train(&drv, &o, demo_progress, x, &fin)) return fail_rc(x, r.rc ? r.rc : DQND_EPROTO);
  double frac = fin.policy_return / fin.optimal_return;
  if (!x->json)
    printf("dqnctl demo: greedy policy reaches %.1f%% of the optimal return (random: %.1f%%); trainer '%s' stays "
           "on the daemon (dqnctl destroy %s)\n",
           100 * frac, 100 * fin.random_return / fin.optimal_return, name, name);
  return frac >= 0.9 ? EXIT_OK : EXIT_UNLEARNED;
}
