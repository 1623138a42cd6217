/*
 * dqn-demo — trains the learner in-process on the built-in meanrev
 * environment (meanrev_env.h) and prints the learning curve: the learner
 * alone, with no daemon. `dqnctl demo` runs the same loop against a live
 * daemon (demo_driver.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meanrev_env.h"
#include "learner.h"

static void progress(void *ctx, const meanrev_point_t *p) {
  (void)ctx;
  double frac = p->optimal_return != 0 ? p->policy_return / p->optimal_return : 0;
  int bar = frac < 0 ? 0 : (frac > 1 ? 40 : (int)(40 * frac));
  printf("iter %4d  step %6llu  loss %7.4f  return %7.3f  optimal %7.3f  random %7.3f  %5.1f%% |%.*s%*s|\n",
         p->iteration, (unsigned long long)p->learner_step, p->loss, p->policy_return, p->optimal_return,
         p->random_return, 100 * frac, bar, "########################################", 40 - bar, "");
  fflush(stdout);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: dqn-demo [options] [field=value ...]\n"
          "Trains a branching dueling C51 Double-DQN on the built-in meanrev environment\n"
          "(9 exposure x 3 order-type x 3 urgency actions, optimal policy known) and prints\n"
          "the greedy policy's return against the optimal and a random policy.\n\n"
          "  -i, --iterations N   collect+train rounds (default " MEANREV_STR(MEANREV_ITERATIONS) ")\n"
          "  -e, --eval-every N   rounds between evaluations (default 25)\n"
          "  -b, --backend B      cpu or auto (default cpu)\n"
          "  -h, --help           this text\n"
          "  field=value          any learner config field, e.g. lr=0.0005 batch=256\n\n"
          "exit status: 0 learned to >= 90%% of optimal, 1 trained but below 90%%, 2 usage\n"
          "or config error, 3 learner error\n");
}

int main(int argc, char **argv) {
  meanrev_opts_t o;
  meanrev_opts_default(&o);
  learner_config_t c;
  meanrev_learner_config(&c);
  learner_backend_t be = LEARNER_BACKEND_CPU;
  static const struct option lo[] = {{"iterations", 1, 0, 'i'}, {"eval-every", 1, 0, 'e'},
                                     {"backend", 1, 0, 'b'},    {"help", 0, 0, 'h'},
                                     {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "i:e:b:h", lo, NULL)) != -1) {
    switch (ch) {
    case 'i': o.iterations = atoi(optarg); break;
    case 'e': o.eval_every = atoi(optarg); break;
    case 'b':
      if (!strcmp(optarg, "cpu")) be = LEARNER_BACKEND_CPU;
      else if (!strcmp(optarg, "auto")) be = LEARNER_BACKEND_AUTO;
      else if (!strcmp(optarg, "cuda")) be = LEARNER_BACKEND_CUDA;
      else {
        fprintf(stderr, "dqn-demo: --backend: '%s' is not cpu, cuda or auto\n", optarg);
        return 2;
      }
      break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (o.iterations < 1 || o.eval_every < 0) {
    fprintf(stderr, "dqn-demo: --iterations must be >= 1 and --eval-every >= 0\n");
    return 2;
  }
  char err[256];
  for (int i = optind; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) {
      fprintf(stderr, "dqn-demo: '%s' is not field=value\n", argv[i]);
      return 2;
    }
    *eq = 0;
    if (learner_config_set(&c, argv[i], eq + 1, err, sizeof err)) {
      fprintf(stderr, "dqn-demo: %s\n", err);
      return 2;
    }
  }
  if (c.state_dim != MEANREV_STATE_DIM || learner_config_joint_actions(&c) != MEANREV_ACTIONS) {
    fprintf(stderr, "dqn-demo: state_dim must stay %d and branches 9,3,3 for this environment\n", MEANREV_STATE_DIM);
    return 2;
  }
  learner_t *l;
  if (learner_create(&c, be, &l, err, sizeof err)) {
    fprintf(stderr, "dqn-demo: %s\n", err);
    return 2;
  }
  printf("dqn-demo: meanrev, backend %s, %lld parameters, batch %d, %d rounds of %d env steps + %d train steps\n",
         learner_backend_name(learner_backend(l)), (long long)learner_config_num_params(&c), c.batch, o.iterations,
         o.envs * o.collect_steps, o.train_steps);
  demo_driver_t drv;
  demo_driver_learner(&drv, l);
  meanrev_point_t fin;
  int rc = meanrev_train(&drv, &o, progress, NULL, &fin);
  learner_destroy(l);
  if (rc) return 3;
  double frac = fin.policy_return / fin.optimal_return;
  printf("dqn-demo: greedy policy reaches %.1f%% of the optimal return (random policy: %.1f%%)\n", 100 * frac,
         100 * fin.random_return / fin.optimal_return);
  return frac >= 0.9 ? 0 : 1;
}
