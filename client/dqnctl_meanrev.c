/*
 * dqnctl_meanrev.c — `dqnctl demo` (--env meanrev, the default): the meanrev
 * trading environment (meanrev_env.h) trained on a new trainer on the daemon,
 * its learning curve printed as it goes; exit 5 below 90% of the optimal
 * return.
 */
#include <stdio.h>
#include <string.h>

#include <math.h>

#include "dqnctl_meanrev.h"
#include "dqnctl_remote.h"
#include "meanrev_dt.h"
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
  if (opt(x, a, "--dt")) return demo_meanrev_dt(x, a, &drv, name);
  return frac >= 0.9 ? EXIT_OK : EXIT_UNLEARNED;
}

static void dt_progress(void *p, const char *phase, const learner_dt_stats_t *st) {
  ctx_t *x = p;
  if (!st) return;
  if (x->json)
    print_json(json_pack("{s:s, s:I, s:f, s:f, s:f}", "phase", phase, "dt_step", (json_int_t)st->dt_step, "loss",
                         (double)st->loss_mean, "grad_norm", (double)st->grad_norm_mean, "lr", (double)st->lr_last));
  else
    printf("pretrain  dt step %6llu  loss %7.4f  grad norm %6.3f  lr %.2g\n", (unsigned long long)st->dt_step,
           (double)st->loss_mean, (double)st->grad_norm_mean, (double)st->lr_last);
  fflush(stdout);
}

/* --dt (issue 30): a second trainer with a Decision Transformer takes a
 * dataset of episodes from the uniform random policy and from the trained
 * DQN at epsilon 0.5 (meanrev_dt.h), pre-trains on it, then acts by return
 * conditioning on held-out episodes; exit 5 below 80% of the optimal return */
int demo_meanrev_dt(ctx_t *x, const cli_args_t *a, const demo_driver_t *dqn, const char *dqn_name) {
  static const char *cmd = "dqnctl demo --dt";
  learner_config_t c;
  meanrev_dt_config(&c);
  int rc = demo_apply_fields(cmd, a, &c);
  if (rc) return rc;
  char given[80], name[72];
  snprintf(given, sizeof given, "%s-dt", dqn_name);
  if ((rc = demo_create_as(x, cmd, given, opt(x, a, "--backend"), &c, name, sizeof name))) return rc;
  meanrev_dt_opts_t o;
  meanrev_dt_opts_default(&o);
  o.context = c.dt_context;
  if (!x->json)
    printf("dqnctl demo --dt: trainer '%s' (dt_layers %d, embed %d, context %d): %d random and %d DQN episodes "
           "(epsilon %.1f), %d pre-training steps\n",
           name, c.dt_layers, c.dt_embed, c.dt_context, o.random_episodes, o.dqn_episodes, (double)o.dqn_eps,
           o.pretrain_steps);
  remote_t r = {x, name, MEANREV_STATE_DIM, 0, 0};
  demo_driver_t drv;
  remote_driver(&drv, &r);
  meanrev_dt_result_t res;
  if (meanrev_dt_run(dqn, &drv, &o, dt_progress, x, &res)) return fail_rc(x, r.rc ? r.rc : DQND_EPROTO);
  const double frac = res.dt_return / res.optimal_return;
  if (x->json)
    print_json(json_pack("{s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "dt_trainer", name, "episodes", res.episodes,
                         "dataset_mean", res.dataset_mean, "dataset_best", res.dataset_best, "target", res.target,
                         "dt_return", res.dt_return, "optimal", res.optimal_return, "random", res.random_return));
  else
    printf("dqnctl demo --dt: dataset of %d episodes, mean return %.3f (best %.3f); the DT conditioned on %.3f "
           "reaches %.3f = %.1f%% of the optimal return %.3f (random %.3f); trainer '%s' stays on the daemon\n",
           res.episodes, res.dataset_mean, res.dataset_best, res.target, res.dt_return, 100 * frac,
           res.optimal_return, res.random_return, name);
  return frac >= 0.8 ? EXIT_OK : EXIT_UNLEARNED;
}
