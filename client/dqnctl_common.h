/* dqnctl_common.h — what every dqnctl command file shares (dqnctl_common.c): the
 * context, exit codes, errors, JSON and stats output, the running command's
 * options. The files above it: dqnctl_arrays.c (submit, act, inspect),
 * dqnctl_remote.c (the demos' driver over the daemon), dqnctl_meanrev.c,
 * dqnctl_deepsea.c and dqnctl_bitflip.c (one environment each),
 * dqnctl_demo.c (their table), and dqnctl.c (main, the command table, the
 * plain commands). Each includes only what is below it. */
#ifndef DQND_DQNCTL_COMMON_H
#define DQND_DQNCTL_COMMON_H

#include <jansson.h>

#include "cli.h"
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
  const cli_spec_t *spec; /* the running command's arguments (opt) */
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
/* j on stdout, taking j; NULL (a json_pack that failed: a string not
 * UTF-8) is an error message instead, and the command exits 4 */
void print_json(json_t *j);
/* json_string(s), or null with that error for a string that is not UTF-8 */
json_t *json_text(const char *s);
int json_output_failed(void);

/* Every stats field by its own name: a JSON object, or one text line (JSON with --json). */
json_t *stats_json(const learner_stats_t *st);
void print_stats(ctx_t *x, const char *name, const learner_stats_t *st);

#endif
