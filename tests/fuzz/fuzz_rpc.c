/* fuzz_rpc.c — see fuzz_rpc.h. Implements rpc.h's request and reply
 * functions; the socket side (rpc_start, rpc_stop, ...) is not linked. */
#include "fuzz_rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "utf8.h"

struct rpc_call {
  Dqnd__V1__Request *req;
  wire_budget_t budget;
  uint64_t request_id;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int replies, code;
  char message[256];
};

Dqnd__V1__Request *rpc_request(rpc_call_t *c) { return c->req; }

void rpc_reply(rpc_call_t *c, Dqnd__V1__Reply *r) {
  r->request_id = c->request_id;
  if (c->req) {
    protobuf_c_message_free_unpacked(&c->req->base, &c->budget.a);
    c->req = NULL;
  }
  /* serialise it as rpc.c does, and check that it reads back */
  size_t n = protobuf_c_message_get_packed_size(&r->base);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) abort();
  if (protobuf_c_message_pack(&r->base, buf) != n) {
    fprintf(stderr, "fuzz_rpc: a reply packed to a size other than its packed size\n");
    abort();
  }
  Dqnd__V1__Reply *back = dqnd__v1__reply__unpack(NULL, n, buf);
  if (!back) {
    fprintf(stderr, "fuzz_rpc: a reply does not decode as dqnd.v1.Reply\n");
    abort();
  }
  dqnd__v1__reply__free_unpacked(back, NULL);
  free(buf);
  pthread_mutex_lock(&c->mu);
  c->replies++;
  c->code = r->status ? (int)r->status->code : -1;
  snprintf(c->message, sizeof c->message, "%s", r->status && r->status->message ? r->status->message : "");
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

void rpc_reply_error(rpc_call_t *c, int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  utf8_sanitize(msg); /* as rpc.c */
  Dqnd__V1__Status st = DQND__V1__STATUS__INIT;
  st.code = (Dqnd__V1__Code)code;
  st.message = msg;
  Dqnd__V1__Reply r = DQND__V1__REPLY__INIT;
  r.status = &st;
  rpc_reply(c, &r);
}

rpc_call_t *fuzz_call_new(server_t *s, const uint8_t *buf, size_t len) {
  rpc_call_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  wire_budget_init(&c->budget);
  int code;
  char msg[256];
  c->req = wire_decode_request(&c->budget, buf, len, s->opts.max_message_bytes, s->opts.decode_budget, &code,
                               &c->request_id, msg, sizeof msg);
  if (!c->req) rpc_reply_error(c, code, "%s", msg);
  else c->request_id = c->req->request_id;
  return c;
}

Dqnd__V1__Request *fuzz_call_request(rpc_call_t *c) { return c->req; }

int fuzz_call_wait(rpc_call_t *c, int seconds) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += seconds;
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  while (!c->replies && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
  int code = c->code, replies = c->replies;
  pthread_mutex_unlock(&c->mu);
  if (!replies) {
    fprintf(stderr, "fuzz_rpc: no reply within %d s\n", seconds);
    abort();
  }
  return code;
}

const char *fuzz_call_message(rpc_call_t *c) { return c->message; }

void fuzz_call_free(rpc_call_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  int replies = c->replies;
  pthread_mutex_unlock(&c->mu);
  if (replies != 1) {
    fprintf(stderr, "fuzz_rpc: %d replies to one request (exactly one is the contract)\n", replies);
    abort();
  }
  if (c->req) protobuf_c_message_free_unpacked(&c->req->base, &c->budget.a);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}
