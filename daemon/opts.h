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
  /* the parser's current source (each config file, then the command line)
   * and the source the listen URLs came from: a later source's first listen
   * replaces the earlier ones, as any other option's value is replaced */
  int src, listen_src;
  char state_dir[1024];
  int32_t system;            /* --system: the service's default paths (DQND_SYSTEM_URL, DQND_SYSTEM_STATE_DIR) */
  char backend[16];          /* auto, cpu, cuda */
  int32_t device; /* --device: the CUDA device used alone (index among those visible), -1: the default */
  int64_t max_message_bytes; /* per message, every listener */
  int64_t decode_budget;     /* bytes protobuf-c may allocate per request */
  int32_t queue_depth;       /* per trainer */
  int32_t max_trainers;
  int32_t contexts;          /* concurrent requests in flight */
  int32_t checkpoint_interval; /* seconds; 0 = off */
  int32_t keep_checkpoints;
  int32_t idle_timeout;      /* seconds; 0 = never unload idle trainers */
  int32_t checkpoint_replay; /* periodic/final checkpoints include the replay */
  int32_t restore;           /* at start, bring back the trainers found in state_dir */
  int32_t listener_check;    /* seconds between listener probes (listen_guard.h); 0 = off */
  char socket_mode[8];       /* ipc listeners' permissions, octal: 0600, or 0660 for a group */
  char auth_token[256];
  char auth_token_file[1024]; /* the token read from this file (not in argv, where ps shows it) */
  int32_t insecure;          /* plain tcp:// on a non-loopback address without a token */
  char tls_cert[1024];       /* PEM: the certificate tls+tcp:// listeners present */
  char tls_key[1024];        /* PEM: its private key */
  char tls_ca[1024];         /* PEM: CAs that sign client certificates (with tls_verify_clients) */
  int32_t tls_verify_clients; /* mutual TLS: a client without a certificate signed by tls_ca is refused */
  char checkpoint_dirs[2048]; /* ':'-separated directories LoadCheckpoint's path may read, besides state_dir */
  char metrics_listen[512];  /* http://host:port: Prometheus /metrics ("" = off) */
  char log_file[1024];
  char log_level[16];
} dqnd_opts_t;

void opts_default(dqnd_opts_t *o);
/* Parses argv (after the program name): --config FILE (must exist),
 * --config-optional FILE (read when it exists: what the units pass), then
 * the options, which override the file. Returns 0, 1 for --help/--version
 * (already printed), or -1 with a message in err. */
int opts_parse_args(dqnd_opts_t *o, int argc, char **argv, char *err, size_t errlen);
int opts_parse_file(dqnd_opts_t *o, const char *path, char *err, size_t errlen);
int opts_set(dqnd_opts_t *o, const char *name, const char *value, char *err, size_t errlen);
/* socket_mode as a number (validated by opts_parse_args). */
int opts_socket_mode(const dqnd_opts_t *o);
void opts_usage(FILE *f);
/* 1 when a tcp:// or tls+tcp:// URL's host is a loopback address. */
int opts_url_is_loopback(const char *url);

#endif
