/* dqnctl.h — what dqnctl's command files share (dqnctl.c: the table, main
 * and the plain commands; dqnctl_data.c: the commands that read or write
 * arrays and files, and the demo). */
#ifndef DQND_DQNCTL_H
#define DQND_DQNCTL_H

#include <jansson.h>

#include "cli.h"
#include "demo_env.h"
#include "dqnd.h"
#include "suggest.h"

enum { EXIT_OK = 0, EXIT_SERVER = 1, EXIT_USAGE = 2, EXIT_TRANSPORT = 3, EXIT_LOCAL = 4, EXIT_UNLEARNED = 5 };

typedef struct ctx {
  dqnd_client_t *c;
  int json;
  /* how c was connected: a second connection (the Ctrl-C Cancel) is made alike */
  const char *url;
  int timeout_ms;
  const char *token;
  dqnd_tls_opts_t tls;
} ctx_t;

typedef struct cmd {
  const char *name;
  int (*fn)(ctx_t *x, const cli_args_t *a);
  int needs_daemon;
  int min_pos, max_pos;
  const char *pos_names;
  int fields;
  const cli_opt_t *opts;
  const char *help;
} cmd_t;

/* The running command's option value (NULL when absent; "" for a set flag). */
const char *opt(ctx_t *x, const cli_args_t *a, const char *name);
/* Prints the error of a failed libdqnd call; returns the exit status. */
int fail_rc(ctx_t *x, int rc);
void print_json(json_t *j);

int cmd_submit(ctx_t *x, const cli_args_t *a);
int cmd_act(ctx_t *x, const cli_args_t *a);
int cmd_inspect(ctx_t *x, const cli_args_t *a);
int cmd_demo(ctx_t *x, const cli_args_t *a);
/* a fresh demo trainer (demo, demo-2, ... or the given name, never one that exists); 0 or the exit status */
/* The demos' config: the user's field=value words applied to c, then
 * validated (EXIT_USAGE naming the field); and a new trainer with all of c
 * (every field, so the daemon's defaults do not matter), named into name. */
int demo_apply_fields(const char *cmd, const cli_args_t *a, learner_config_t *c);
int demo_create(ctx_t *x, const char *cmd, const cli_args_t *a, const learner_config_t *c, char *name, size_t n);
int demo_new_trainer(ctx_t *x, const char *cmd, const char *given, const char *const *fields, int nf,
                     const char *backend, char *name, size_t n);
/* dqnctl demo --env deepsea (dqnctl_deepsea.c) */
int demo_deepsea(ctx_t *x, const cli_args_t *a);
/* dqnctl demo --env bitflip (dqnctl_bitflip.c) */
int demo_bitflip(ctx_t *x, const cli_args_t *a);

/* The demo loops' driver (demo_env.h) over a trainer on the daemon. */
typedef struct remote {
  ctx_t *x;
  const char *name;
  int state_dim;
  int noisy; /* the trainer has NoisyNet layers: collect with fresh noise */
  int rc;    /* the last call's DQND code */
} remote_t;
void remote_driver(demo_driver_t *d, remote_t *r);

#endif
