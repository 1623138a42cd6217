/* dqnd_impl.h — what libdqnd's files (dqnd.c, dqnd_ckpt.c) share, under
 * internal names (never in dqnd.h, which this header does not include: the
 * layers run one way, tests/check-layers.py). */
#ifndef DQND_CLIENT_IMPL_H
#define DQND_CLIENT_IMPL_H

#include "dqnd.pb-c.h"

typedef struct dqnd_client dqnd_client_t; /* dqnd.h's */
struct dqnd_checkpoint;

#define seterr dqnd__seterr
#define call_simple dqnd__call_simple
#define ckpt_from_pb dqnd__ckpt_from_pb

/* the message of the call that failed (dqnd_last_error); returns code */
int seterr(dqnd_client_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* dqnd_call with the reply dropped */
int call_simple(dqnd_client_t *c, Dqnd__V1__Request *req);
/* the member dqnd_use_member named: 1 when it was called (the checkpoint
 * calls then move that member's state alone), else 0 */
int client_member(const dqnd_client_t *c, uint32_t *member);
void ckpt_from_pb(const Dqnd__V1__CheckpointInfo *p, struct dqnd_checkpoint *o);

#endif
