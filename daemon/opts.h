/*
 * opts.h — the daemon's own settings, in one table (Redis habit) that feeds
 * the command line (--name value), the config file (name = value) and
 * --help. Learner fields are separate: they live in kernels/learner.c's
 * table and arrive per trainer in CreateTrainer.
 */
#ifndef DQND_OPTS_H
#define DQND_OPTS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#define OPTS_MAX_LISTEN 8

typedef struct dqnd_opts {
  char listen[OPTS_MAX_LISTEN][512];
  int n_listen;
  char state_dir[1024];
  char backend[16];          /* auto, cpu, cuda */
  int64_t max_message_bytes; /* per message, every listener */
  int64_t decode_budget;     /* bytes protobuf-c may allocate per request */
  int32_t queue_depth;       /* per trainer */
  int32_t max_trainers;
  int32_t contexts;          /* concurrent requests in flight */
  int32_t checkpoint_interval; /* seconds; 0 = off */
  int32_t keep_checkpoints;
  int32_t idle_timeout;      /* seconds; 0 = never unload idle trainers */
  int32_t checkpoint_replay; /* periodic/final checkpoints include the replay */
  char auth_token[256];
  char log_file[1024];
  char log_level[16];
} dqnd_opts_t;

void opts_default(dqnd_opts_t *o);
/* Parses argv (after the program name). Returns 0, 1 for --help/--version
 * (already printed), or -1 with a message in err. */
int opts_parse_args(dqnd_opts_t *o, int argc, char **argv, char *err, size_t errlen);
int opts_parse_file(dqnd_opts_t *o, const char *path, char *err, size_t errlen);
int opts_set(dqnd_opts_t *o, const char *name, const char *value, char *err, size_t errlen);
void opts_usage(FILE *f);

#endif
