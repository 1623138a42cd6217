/*
 * fuzz_rpc.h — a stand-in for daemon/rpc.c in the request fuzzer: no
 * sockets; a call holds one decoded request, and rpc_reply() packs the reply
 * (so every reply a handler builds is serialised, as on the wire), frees the
 * request and signals the harness thread waiting in fuzz_call_wait. The
 * handlers run on the daemon's own threads (trainer and admin workers), so
 * the reply may come from any thread.
 */
#ifndef DQND_FUZZ_RPC_H
#define DQND_FUZZ_RPC_H

#include "rpc.h"
#include "wire.h"

/* Decodes buf with wire_decode_request into a new call (the daemon's
 * opts.max_message_bytes and decode_budget); a message that does not decode
 * is answered at once with its error, as rpc.c does. NULL: out of memory. */
rpc_call_t *fuzz_call_new(server_t *s, const uint8_t *buf, size_t len);
/* The decoded request (NULL once answered, or when it did not decode). */
Dqnd__V1__Request *fuzz_call_request(rpc_call_t *c);
/* Waits for the one reply (aborts after `seconds`: a request never answered
 * is a bug); its status code. */
int fuzz_call_wait(rpc_call_t *c, int seconds);
/* The reply's status message (after fuzz_call_wait). */
const char *fuzz_call_message(rpc_call_t *c);
/* Frees an answered call; aborts if it was answered twice. */
void fuzz_call_free(rpc_call_t *c);

#endif
