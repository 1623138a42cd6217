/*
 * dispatch.h — the command table: central validation (version, auth, name,
 * trainer exists, sizes, config and hyperparameter fields) once for every
 * command, then routing: answered on the nng thread, or queued as a job on
 * the trainer's worker or the admin worker (trainer.h), with what the check
 * parsed. Handlers contain only their own logic.
 */
#ifndef DQND_DISPATCH_H
#define DQND_DISPATCH_H

#include "rpc.h"
#include "server.h"

/* The request handler given to rpc_start (an rpc_request_cb). */
void dispatch(server_t *s, rpc_call_t *c);
/* The server's refuse hook (server.h): an error reply for a call the
 * trainer module turns away. */
void dispatch_refuse(rpc_call_t *c, int code, const char *msg);
/* Frees the unfinished checkpoint uploads (at exit, once no request runs). */
void dispatch_free_uploads(server_t *s);

#endif
