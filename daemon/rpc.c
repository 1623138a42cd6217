/* rpc.c — see rpc.h. */
#include "rpc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>

#include "dqnd/default_url.h"
#include "dqnd/tls.h"

#include "checkpoint.h"
#include "log.h"
#include "metrics.h"
#include "utf8.h"
#include "wire.h"

/* Messages up to this multiple of max_message_bytes are received and answered
 * with RESOURCE_EXHAUSTED; larger ones are dropped by nng itself (it closes
 * that connection), since reading them would already cost the memory. */
#define OVERSIZE_FACTOR 2

struct rpc_call {
  rpc_t *rpc;
  nng_ctx ctx;
  nng_aio *aio;
  int sending;
  Dqnd__V1__Request *req;
  wire_budget_t budget;
  uint64_t request_id;
  double received; /* now_s() when the request arrived (the metrics' request duration) */
};

struct rpc {
  server_t *srv;
  rpc_request_cb on_request;
  nng_socket sock;
  nng_listener listeners[OPTS_MAX_LISTEN];
  nng_tls_config *tls;         /* tls+tcp:// listeners' (built once at start) */
  atomic_ullong pipes_added;   /* connections attached to the socket (listen_guard.c reads it) */
  pthread_mutex_t relisten_mu; /* the guard thread restarts a listener; rpc_stop closes them */
  uint64_t instance;           /* Reply.instance: this process, random at start */
  rpc_call_t *calls;
  int n_calls;
};

Dqnd__V1__Request *rpc_request(rpc_call_t *c) { return c->req; }

static void recv_next(rpc_call_t *c) {
  c->sending = 0;
  nng_ctx_recv(c->ctx, c->aio);
}

void rpc_reply(rpc_call_t *c, Dqnd__V1__Reply *r) {
  r->request_id = c->request_id;
  r->instance = c->rpc->instance;
  /* counted before the send, so a client that has its reply sees it counted;
   * the command case is read before the request is freed (0: none decoded) */
  metrics_request(c->req ? (int)c->req->command_case : 0, r->status ? (int)r->status->code : 0, now_s() - c->received);
  if (c->req) {
    protobuf_c_message_free_unpacked(&c->req->base, &c->budget.a);
    c->req = NULL;
  }
  size_t n = protobuf_c_message_get_packed_size(&r->base);
  nng_msg *m;
  if (nng_msg_alloc(&m, n)) {
    log_error(NULL, "out of memory for a %zu-byte reply", n);
    recv_next(c);
    return;
  }
  protobuf_c_message_pack(&r->base, nng_msg_body(m));
  c->sending = 1;
  nng_aio_set_msg(c->aio, m);
  nng_ctx_send(c->ctx, c->aio);
}

void rpc_reply_error(rpc_call_t *c, int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  utf8_sanitize(msg);
  Dqnd__V1__Status st = DQND__V1__STATUS__INIT;
  st.code = (Dqnd__V1__Code)code;
  st.message = msg;
  Dqnd__V1__Reply r = DQND__V1__REPLY__INIT;
  r.status = &st;
  log_debug(NULL, "request %llu: code %d: %s", (unsigned long long)c->request_id, code, msg);
  rpc_reply(c, &r);
}

static void call_cb(void *arg) {
  rpc_call_t *c = arg;
  server_t *s = c->rpc->srv;
  int rv = nng_aio_result(c->aio);
  if (c->sending) {
    if (rv) {
      nng_msg_free(nng_aio_get_msg(c->aio)); /* not delivered: still ours */
      if (rv == NNG_ECLOSED) return;
    }
    recv_next(c);
    return;
  }
  if (rv) {
    if (rv != NNG_ECLOSED) {
      log_warn(NULL, "receive: %s", nng_strerror(rv));
      recv_next(c);
    }
    return;
  }
  c->received = now_s();
  nng_msg *m = nng_aio_get_msg(c->aio);
  int code;
  char msg[256];
  c->req = wire_decode_request(&c->budget, nng_msg_body(m), nng_msg_len(m), s->opts.max_message_bytes,
                               s->opts.decode_budget, &code, &c->request_id, msg, sizeof msg);
  nng_msg_free(m);
  if (!c->req) {
    rpc_reply_error(c, code, "%s", msg);
    return;
  }
  c->request_id = c->req->request_id;
  c->rpc->on_request(s, c);
}

static int listen_one(rpc_t *r, int i, char *err, size_t errlen) {
  const char *url = r->srv->opts.listen[i];
  if (!strncmp(url, "ipc://", 6)) {
    /* make the directory, and let only our user in (the socket is 0600);
     * one in a world-writable directory (/tmp) must be ours alone */
    char dir[600], why[1400];
    snprintf(dir, sizeof dir, "%s", url + 6);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
      *slash = 0;
      char mk_err[256];
      if (ckpt_mkdirs(dir, mk_err, sizeof mk_err)) log_warn(NULL, "%s", mk_err);
    }
    if (dqnd_ipc_dir_check(url, 1, why, sizeof why)) {
      snprintf(err, errlen, "listen %s: %s", url, why);
      return -1;
    }
  }
  nng_listener l = NNG_LISTENER_INITIALIZER;
  int rv = nng_listener_create(&l, r->sock, url);
  if (!rv && !strncmp(url, "ipc://", 6)) rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, opts_socket_mode(&r->srv->opts));
  if (!rv && !strncmp(url, "tls+tcp://", 10)) rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, r->tls);
  if (!rv) rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, (size_t)r->srv->opts.max_message_bytes * OVERSIZE_FACTOR);
  if (!rv) rv = nng_listener_start(l, 0);
  if (rv) {
    if (nng_listener_id(l) > 0) nng_listener_close(l); /* created, then refused: not leaked (the guard retries) */
    snprintf(err, errlen, "listen %s: %s", url, nng_strerror(rv));
    return -1;
  }
  r->listeners[i] = l;
  const dqnd_opts_t *o = &r->srv->opts;
  if (!strncmp(url, "ipc://", 6))
    log_info(NULL, "listening on %s (socket mode %s)", url, o->socket_mode);
  else if (!strncmp(url, "tls+tcp://", 10))
    log_info(NULL, "listening on %s (TLS; %s%s)", url,
             o->tls_verify_clients ? "clients need a certificate signed by tls-ca" : "any client may connect",
             o->auth_token[0] ? ", requests need the auth token" : "");
  else if (opts_url_is_loopback(url))
    log_info(NULL, "listening on %s (plain tcp on loopback%s)", url, o->auth_token[0] ? "; requests need the auth token" : "");
  else if (o->auth_token[0])
    log_warn(NULL, "listening on %s (plain tcp: requests need the auth token, but it and all traffic cross the "
             "network unencrypted; prefer tls+tcp://)", url);
  else
    log_warn(NULL, "listening on %s with --insecure: plain tcp and no auth token, anyone who reaches this port "
             "can run every command", url);
  return 0;
}

static void on_pipe_added(nng_pipe p, nng_pipe_ev ev, void *arg) {
  (void)p, (void)ev;
  atomic_fetch_add(&((rpc_t *)arg)->pipes_added, 1);
}

unsigned long long rpc_pipes_added(server_t *s) { return s->rpc ? atomic_load(&s->rpc->pipes_added) : 0; }

int rpc_relisten(server_t *s, int i, char *err, size_t errlen) {
  rpc_t *r = s->rpc;
  if (!r || i < 0 || i >= s->opts.n_listen) return -1;
  pthread_mutex_lock(&r->relisten_mu);
  nng_listener_close(r->listeners[i]);
  int rc = listen_one(r, i, err, errlen);
  pthread_mutex_unlock(&r->relisten_mu);
  return rc;
}

int rpc_start(server_t *s, rpc_request_cb on_request, char *err, size_t errlen) {
  rpc_t *r = calloc(1, sizeof *r);
  if (!r) return snprintf(err, errlen, "out of memory"), -1;
  r->srv = s;
  r->on_request = on_request;
  s->rpc = r;
  /* Reply.instance: a client that sees it change knows the daemon restarted */
  if (getrandom(&r->instance, sizeof r->instance, 0) != (ssize_t)sizeof r->instance)
    r->instance = (uint64_t)time(NULL) * 6364136223846793005ull ^ (uint64_t)getpid();
  if (!r->instance) r->instance = 1;
  int rv = nng_rep0_open(&r->sock);
  if (rv) return snprintf(err, errlen, "nng_rep0_open: %s", nng_strerror(rv)), -1;
  nng_socket_set_size(r->sock, NNG_OPT_RECVMAXSZ, (size_t)s->opts.max_message_bytes * OVERSIZE_FACTOR);
  pthread_mutex_init(&r->relisten_mu, NULL);
  for (int i = 0; i < s->opts.n_listen && !r->tls; i++)
    if (!strncmp(s->opts.listen[i], "tls+tcp://", 10)) {
      dqnd_tls_opts_t to = {.cert = s->opts.tls_cert, .key = s->opts.tls_key, .ca = s->opts.tls_ca,
                            .verify = s->opts.tls_verify_clients};
      if (dqnd_tls_config(1, &to, &r->tls, err, errlen)) return -1;
    }
  nng_pipe_notify(r->sock, NNG_PIPE_EV_ADD_POST, on_pipe_added, r);
  for (int i = 0; i < s->opts.n_listen; i++)
    if (listen_one(r, i, err, errlen)) return -1;
  r->n_calls = s->opts.contexts;
  r->calls = calloc((size_t)r->n_calls, sizeof *r->calls);
  if (!r->calls) return snprintf(err, errlen, "out of memory"), -1;
  for (int i = 0; i < r->n_calls; i++) {
    rpc_call_t *c = &r->calls[i];
    c->rpc = r;
    wire_budget_init(&c->budget);
    if ((rv = nng_aio_alloc(&c->aio, call_cb, c)) || (rv = nng_ctx_open(&c->ctx, r->sock)))
      return snprintf(err, errlen, "nng context: %s", nng_strerror(rv)), -1;
    recv_next(c);
  }
  return 0;
}

void rpc_stop(server_t *s) {
  rpc_t *r = s->rpc;
  if (!r) return;
  pthread_mutex_lock(&r->relisten_mu);
  nng_close(r->sock);
  pthread_mutex_unlock(&r->relisten_mu);
  pthread_mutex_destroy(&r->relisten_mu);
  for (int i = 0; i < r->n_calls; i++) {
    if (r->calls[i].aio) {
      nng_aio_stop(r->calls[i].aio);
      nng_aio_free(r->calls[i].aio);
    }
    if (r->calls[i].req) protobuf_c_message_free_unpacked(&r->calls[i].req->base, &r->calls[i].budget.a);
  }
  free(r->calls);
  if (r->tls) nng_tls_config_free(r->tls);
  free(r);
  s->rpc = NULL;
}
