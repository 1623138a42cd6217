/*
 * cli.h — dqnctl's argument parsing: each subcommand declares its
 * positionals, its options (flags, or options with a value) and whether it
 * takes learner config fields as name=value. Nothing is silently ignored:
 * an unknown option, a missing value, a stray word, an unknown or repeated
 * field, or a field value that does not parse is a usage error naming it
 * (with the nearest valid name where one is close).
 */
#ifndef DQND_CLI_H
#define DQND_CLI_H

#include <stdio.h>

#define CLI_MAX_OPTS 12
#define CLI_MAX_POS 4
#define CLI_MAX_FIELDS 128

/* CLI_FACTOR_FIELD: a float hyperparameter's name and a finite number, its
 * factor (copy-member) */
enum { CLI_NO_FIELDS = 0, CLI_ANY_FIELD = 1, CLI_HPARAM_FIELD = 2, CLI_FACTOR_FIELD = 3 };

typedef struct cli_opt {
  const char *name;    /* "--tau", "-o" */
  const char *metavar; /* NULL: a flag without a value */
  const char *help;
} cli_opt_t;

typedef struct cli_args {
  const char *pos[CLI_MAX_POS];
  int npos;
  const char *fields[CLI_MAX_FIELDS]; /* "name=value", validated */
  int nfields;
  const char *val[CLI_MAX_OPTS]; /* by option index; "" for a flag that is set */
} cli_args_t;

typedef struct cli_spec {
  const char *cmd;       /* for messages: "dqnctl create" */
  int min_pos, max_pos;
  const char *pos_names; /* "NAME N" */
  int fields;            /* CLI_*_FIELD(S) */
  const cli_opt_t *opts; /* NULL-name terminated */
} cli_spec_t;

/* 0, or -1 after printing the usage error to stderr. --help is not handled
 * here (the caller looks for it first). */
int cli_parse(const cli_spec_t *sp, int argc, char **argv, cli_args_t *out);
/* The option's value (NULL when not given); flags: non-NULL when set. */
const char *cli_get(const cli_spec_t *sp, const cli_args_t *a, const char *name);
/* Strict number parsing for option values and positionals; -1 after
 * printing "CMD: WHAT: 'v' is not ..." to stderr. */
int cli_int(const char *cmd, const char *what, const char *v, long long min, long long max, long long *out);
int cli_float(const char *cmd, const char *what, const char *v, double min, double max, double *out);
/* Prints each option's line for a command's --help. */
void cli_print_opts(FILE *f, const cli_opt_t *opts);

#endif
