/*
 * dqnctl_demo.c — `dqnctl demo`: the built-in environments in one table,
 * each with the options that are its own; the command finds --env's entry
 * (meanrev by default), refuses another environment's options, and runs it.
 * An environment is one file (dqnctl_<env>.c) and one row here.
 */
#include <stdio.h>
#include <string.h>

#include "dqnctl_bitflip.h"
#include "dqnctl_deepsea.h"
#include "dqnctl_demo.h"
#include "dqnctl_meanrev.h"

typedef struct demo_env_row {
  const char *name;
  int (*run)(ctx_t *x, const cli_args_t *a);
  const char *own[4]; /* the options only this environment takes (NULL-terminated) */
} demo_env_row_t;

static const demo_env_row_t demo_envs[] = {
    {"meanrev", demo_meanrev, {"--iterations", "--dt", NULL}},
    {"deepsea", demo_deepsea, {"--size", "--episodes", "--obs-scale", NULL}},
    {"bitflip", demo_bitflip, {"--bits", "--episodes", NULL}},
};
#define N_DEMO_ENVS ((int)(sizeof demo_envs / sizeof demo_envs[0]))

static int own(const demo_env_row_t *e, const char *o) {
  for (int k = 0; e->own[k]; k++)
    if (!strcmp(e->own[k], o)) return 1;
  return 0;
}

int cmd_demo(ctx_t *x, const cli_args_t *a) {
  static const char *cmd = "dqnctl demo";
  const char *name = opt(x, a, "--env");
  const demo_env_row_t *env = NULL;
  for (int i = 0; i < N_DEMO_ENVS; i++)
    if (!strcmp(demo_envs[i].name, name ? name : "meanrev")) env = &demo_envs[i];
  if (!env) {
    fprintf(stderr, "%s: --env: '%s' is not one of", cmd, name);
    for (int i = 0; i < N_DEMO_ENVS; i++) fprintf(stderr, " %s", demo_envs[i].name);
    fprintf(stderr, "\n");
    return EXIT_USAGE;
  }
  for (int i = 0; i < N_DEMO_ENVS; i++)
    for (int k = 0; demo_envs[i].own[k]; k++) {
      const char *o = demo_envs[i].own[k];
      if (opt(x, a, o) && !own(env, o))
        return fprintf(stderr, "%s: %s is for --env %s, not %s\n", cmd, o, demo_envs[i].name, env->name), EXIT_USAGE;
    }
  return env->run(x, a);
}
