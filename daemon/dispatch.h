/*
 * dispatch.h — the command table: central validation (version, auth, name,
 * trainer exists, sizes) once for every command, then routing: answered on
 * the nng thread, queued on the trainer's worker, or queued on the admin
 * worker. Handlers contain only their own logic.
 */
#ifndef DQND_DISPATCH_H
#define DQND_DISPATCH_H

#include "rpc.h"
#include "server.h"

void dispatch(server_t *s, rpc_call_t *c);

/* Internal jobs the loop enqueues (periodic checkpoints, idle unload,
 * shutdown). They have no call to answer. */
int dispatch_enqueue_save(trainer_t *t);
int dispatch_enqueue_final(trainer_t *t);  /* shutdown: save and stop; a restart restores it */
int dispatch_enqueue_unload(trainer_t *t); /* idle: save, retire its directory, stop */

#endif
