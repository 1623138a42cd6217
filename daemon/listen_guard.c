/* listen_guard.c — see listen_guard.h. */
#include "listen_guard.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "dqnd/tls.h"

#include "log.h"
#include "rpc.h"

#define PROBE_WAIT_S 2

typedef struct probe {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int up;
} probe_t;

static struct {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int running, stop;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

void listen_guard_probe_url(const char *url, char *out, size_t n) {
  const char *hosts[] = {"tcp://0.0.0.0:", "tcp://*:", "tcp://:", "tcp4://0.0.0.0:", "tcp://[::]:",
                         "tls+tcp://0.0.0.0:", "tls+tcp://*:", "tls+tcp://:", "tls+tcp://[::]:"};
  const char *repl[] = {"tcp://127.0.0.1:", "tcp://127.0.0.1:", "tcp://127.0.0.1:", "tcp4://127.0.0.1:", "tcp://[::1]:",
                        "tls+tcp://127.0.0.1:", "tls+tcp://127.0.0.1:", "tls+tcp://127.0.0.1:", "tls+tcp://[::1]:"};
  for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++)
    if (!strncmp(url, hosts[i], strlen(hosts[i]))) {
      snprintf(out, n, "%s%s", repl[i], url + strlen(hosts[i]));
      return;
    }
  snprintf(out, n, "%s", url);
}

static void on_pipe(nng_pipe p, nng_pipe_ev ev, void *arg) {
  (void)p, (void)ev;
  probe_t *pr = arg;
  pthread_mutex_lock(&pr->mu);
  pr->up = 1;
  pthread_cond_signal(&pr->cv);
  pthread_mutex_unlock(&pr->mu);
}

static void deadline(struct timespec *ts, int seconds) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += seconds;
}

/* Dials without waiting. A tls+tcp:// listener is probed over TLS without
 * checking the daemon's own certificate, presenting that certificate as the
 * client's when clients must have one (it counts when tls-ca signed it; if
 * not, the probe does not connect, which counts as nothing). */
static int dial_probe(server_t *srv, nng_socket s, const char *url) {
  if (strncmp(url, "tls+tcp://", 10)) return nng_dial(s, url, NULL, NNG_FLAG_NONBLOCK);
  const dqnd_opts_t *o = &srv->opts;
  dqnd_tls_opts_t to = {.probe = 1};
  if (o->tls_verify_clients) to.cert = o->tls_cert, to.key = o->tls_key;
  nng_tls_config *cfg;
  char err[300];
  if (dqnd_tls_config(0, &to, &cfg, err, sizeof err)) return -1;
  nng_dialer d;
  int rv = nng_dialer_create(&d, s, url);
  if (!rv) rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
  if (!rv) rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK);
  nng_tls_config_free(cfg); /* the dialer holds it */
  return rv;
}

/* 1: the probe's connection completed its handshake and the daemon's socket
 * took a connection within PROBE_WAIT_S; 0: it did not (in nng#1518 the
 * handshake still completes on the probe's side, but the socket never takes
 * the connection, so no request on it is ever answered); -1: the probe
 * itself failed. A probe never sends a request, so a daemon whose request
 * contexts are all busy with long commands is not mistaken for a wedged one. */
static int probe(server_t *srv, const char *url) {
  unsigned long long before = rpc_pipes_added(srv);
  probe_t *pr = calloc(1, sizeof *pr);
  if (!pr) return -1;
  pthread_mutex_init(&pr->mu, NULL);
  pthread_cond_init(&pr->cv, NULL);
  nng_socket s;
  int rc = -1;
  if (nng_req0_open(&s) == 0) {
    if (nng_pipe_notify(s, NNG_PIPE_EV_ADD_POST, on_pipe, pr) == 0 && dial_probe(srv, s, url) == 0) {
      struct timespec ts;
      deadline(&ts, PROBE_WAIT_S);
      pthread_mutex_lock(&pr->mu);
      while (!pr->up && pthread_cond_timedwait(&pr->cv, &pr->mu, &ts) != ETIMEDOUT) {
      }
      rc = pr->up ? 1 : -1; /* not even connected: unreachable, not wedged (the wedge still connects) */
      pthread_mutex_unlock(&pr->mu);
      for (int k = 0; rc == 1 && rpc_pipes_added(srv) == before; k++) { /* the socket's side of it */
        if (k == PROBE_WAIT_S * 100) rc = 0;
        else nanosleep(&(struct timespec){0, 10000000}, NULL);
      }
    }
    nng_close(s); /* waits for the socket's callbacks: pr is ours again */
  }
  pthread_mutex_destroy(&pr->mu);
  pthread_cond_destroy(&pr->cv);
  free(pr);
  return rc;
}

static void *guard(void *arg) {
  server_t *s = arg;
  int misses[OPTS_MAX_LISTEN] = {0}, down[OPTS_MAX_LISTEN] = {0};
  pthread_mutex_lock(&G.mu);
  while (!G.stop) {
    struct timespec ts;
    deadline(&ts, s->opts.listener_check);
    while (!G.stop && pthread_cond_timedwait(&G.cv, &G.mu, &ts) != ETIMEDOUT) {
    }
    if (G.stop) break;
    pthread_mutex_unlock(&G.mu);
    for (int i = 0; i < s->opts.n_listen; i++) {
      char url[600], err[700];
      listen_guard_probe_url(s->opts.listen[i], url, sizeof url);
      size_t ul = strlen(url);
      if (strncmp(url, "ipc://", 6) && ul > 2 && !strcmp(url + ul - 2, ":0")) continue; /* an ephemeral port */
      if (down[i]) { /* a restart that failed: its probes cannot connect, so retry it every check instead */
        if (rpc_relisten(s, i, err, sizeof err) == 0) {
          down[i] = 0;
          log_info(NULL, "%s is listening again", s->opts.listen[i]);
        }
        continue;
      }
      int pr = probe(s, url);
      log_debug(NULL, "listener-check %s: %s", url,
                pr == 1 ? "answered" : pr == 0 ? "its connection was not taken" : "probe did not connect");
      misses[i] = pr == 0 ? misses[i] + 1 : 0;
      if (misses[i] < 2) continue; /* twice in a row before closing a listener (and its connections) */
      misses[i] = 0;
      log_warn(NULL, "%s stopped accepting connections (a peer left during the handshake: nng#1518); "
               "starting it again", s->opts.listen[i]);
      if (rpc_relisten(s, i, err, sizeof err)) {
        log_error(NULL, "%s (tried again at every listener check)", err);
        down[i] = 1;
      }
    }
    pthread_mutex_lock(&G.mu);
  }
  pthread_mutex_unlock(&G.mu);
  return NULL;
}

int listen_guard_start(server_t *s) {
  if (s->opts.listener_check <= 0) return 0;
  G.stop = 0;
  if (pthread_create(&G.th, NULL, guard, s)) return -1;
  G.running = 1;
  return 0;
}

void listen_guard_stop(server_t *s) {
  (void)s;
  if (!G.running) return;
  pthread_mutex_lock(&G.mu);
  G.stop = 1;
  pthread_cond_signal(&G.cv);
  pthread_mutex_unlock(&G.mu);
  pthread_join(G.th, NULL);
  G.running = 0;
}
