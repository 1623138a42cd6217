/*
 * harness.h — what the integration tests share: a real dqnd started on a
 * temporary ipc socket (CPU backend, a log file), reaped and stopped with
 * deadlines; a small learner config and batches whose every transition is
 * recognisable; dqnctl run as a user would.
 */
#ifndef DQND_TEST_HARNESS_H
#define DQND_TEST_HARNESS_H

#include <check.h>
#include <stdint.h>
#include <sys/types.h>

#include "dqnd.h"
#include "learner.h" /* the tests load checkpoints into learners of their own */

extern char dqnd_bin[1024], dqnctl_bin[1024];

typedef struct daemon_proc {
  pid_t pid;
  char dir[256], url[320], state[300], log[300];
  int listen_in_config; /* the caller's --config file names url: no --listen from the harness */
  const char *preload;  /* a shared object the daemon starts with (LD_PRELOAD), NULL none */
} daemon_t;

/* Reads DQND_BIN / DQNCTL_BIN (and DQND_VALGRIND: every daemon under that
 * valgrind, its log in the test's directory, its waits 10x longer) and
 * ignores SIGPIPE. */
void harness_init(void);
/* The waits' factor: 10 with DQND_VALGRIND, else 1 (a test's own waits on
 * the daemon take it too) */
int harness_slow(void);
/* Starts dqnd (in d->dir, made when empty; the same dir again restarts it
 * on the same state) with extra options (NULL-terminated, may be NULL) and
 * waits until it answers; a daemon that exits first fails the test at once,
 * with the end of its log. */
void start_daemon_argv(daemon_t *d, const char *const *extra);
/* d's directory (made when empty), url, state and log paths, as
 * start_daemon_argv sets them: for a config file that names them first */
void daemon_paths(daemon_t *d);
void start_daemon_args(daemon_t *d, const char *extra1, const char *extra2);
void start_daemon(daemon_t *d);
/* waitpid with a deadline (fails the test when it passes); the wait status */
int wait_exit(pid_t pid, int seconds);
int stop_daemon(daemon_t *d, int sig);
void rm_rf(const char *dir);
int load_file(const char *path, learner_t **l, char *err, size_t errlen);
/* the whole file, malloc'd (NULL when it cannot be read); its size in *n */
char *read_file(const char *path, size_t *n);
dqnd_client_t *connect_to(daemon_t *d);
/* 1 when the daemon's log holds `needle` */
int log_has(const daemon_t *d, const char *needle);
/* a call's return code `rc` must be `code` and its message hold `needle`
 * (`what` names the case in the failure) */
void expect_code(dqnd_client_t *c, int rc, int code, const char *needle, const char *what);

/* a small learner so every test is fast */
extern const char *small_fields[];
extern const int n_small;
#define N_SMALL n_small
#define S_DIM 6
#define N_ACT 12

typedef struct batch {
  int n;
  float s[256 * S_DIM], s2[256 * S_DIM], r[256];
  int32_t a[256];
  uint8_t d[256];
  int64_t ep[256];
} batch_t;

/* rewards i + 1000 * tag: every (tag, i) is unique */
void make_batch(batch_t *b, int n, uint64_t tag);
int submit(dqnd_client_t *c, const char *name, const batch_t *b);
/* start_daemon, connect, create trainer `name` from small_fields and submit
 * make_batch(b, 64, tag) to it: the opening of most integration tests */
dqnd_client_t *start_with_trainer(daemon_t *d, const char *name, batch_t *b, uint64_t tag);
/* openssl, under dir (scripts/tls-certs.sh, path in $DQND_CERTS, then the
 * tests' own): ca.pem/key, server.pem/key for DNS:localhost and client.pem/key
 * signed by it; another CA (other.pem) with its own stranger.pem/key; old.pem/key
 * for DNS:localhost, signed by ca.pem and valid for no time (expired one
 * second after it was made); notpem.txt, a file that is not PEM */
void make_certs(const char *dir);
/* a loopback TCP port nothing listens on now */
int free_port(void);
/* dqnd with these options (NULL-terminated; a fresh state dir, cpu backend)
 * must exit with `code` and say `needle` on stderr */
void refuses_with(const char *const *opts, const char *needle, int code);
/* ServerInfo's reply (asserted OK; dqnd_reply_free it) */
Dqnd__V1__Reply *server_info(dqnd_client_t *c);
/* the trainers the daemon has loaded, by ServerInfo (which touches no
 * trainer: GetStats would count as activity for the idle timeout) */
int trainers_loaded(dqnd_client_t *c);
/* dqnctl --url <daemon> ARGS, stdout and stderr into out; its exit status */
int run_ctl(const daemon_t *d, const char *args, char *out, size_t n);

#endif
