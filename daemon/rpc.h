/*
 * rpc.h — the nng REP side: listeners, a pool of contexts, decode within a
 * byte budget, reply. One context serves one request at a time; a request
 * handed to a worker keeps its context busy until rpc_reply() sends.
 *
 * A call (rpc_call_t) owns its decoded request from the handler until
 * rpc_reply(); after rpc_reply() it must not be touched.
 */
#ifndef DQND_RPC_H
#define DQND_RPC_H

#include "dqnd.pb-c.h"
#include "server.h"

/* Called on an nng thread for every request that decoded; it answers the
 * call with rpc_reply() exactly once, then or later from any thread. */
typedef void (*rpc_request_cb)(server_t *s, rpc_call_t *c);

/* Listens on s->opts.listen and serves requests through on_request. */
int rpc_start(server_t *s, rpc_request_cb on_request, char *err, size_t errlen);
/* Connections attached to the daemon's socket so far (listen_guard.c). */
unsigned long long rpc_pipes_added(server_t *s);
/* Closes listener i and starts it again on its URL (listen_guard.c). */
int rpc_relisten(server_t *s, int i, char *err, size_t errlen);
/* Closes the sockets (after the workers have answered everything). */
void rpc_stop(server_t *s);
Dqnd__V1__Request *rpc_request(rpc_call_t *c);
/* Packs and sends; fills request_id; frees the request. */
void rpc_reply(rpc_call_t *c, Dqnd__V1__Reply *r);
/* An error reply: code (gRPC numbers) and a message naming the field (made
 * well-formed UTF-8: utf8.h). */
void rpc_reply_error(rpc_call_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
