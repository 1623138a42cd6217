/* dqnd_impl.h — what libdqnd's files (dqnd.c, dqnd_ckpt.c, dqnd_long.c) share, under
 * internal names (never in dqnd.h, which this header does not include: the
 * layers run one way, tests/check-layers.py). */
#ifndef DQND_CLIENT_IMPL_H
#define DQND_CLIENT_IMPL_H

#include "dqnd.pb-c.h"

#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>

typedef struct dqnd_client dqnd_client_t; /* dqnd.h's */
struct dqnd_checkpoint;
struct learner_stats;

/* How long a call that gave up waiting lets the late reply of its cancelled
 * command land (after the Cancel, and in dqnd_close): libnng 1.5 can hang
 * closing a pipe while a message is being received on it
 * (docs/architecture.md, the paragraphs after Cancel). */
#define SETTLE_MS 2000

struct dqnd_client {
  nng_socket sock;
  int timeout_ms;
  uint64_t next_id;
  _Atomic uint64_t pending_id; /* the request in flight (or the last sent): dqnd_pending_request_id */
  char token[256];
  char err[1024];
  char stop[32];               /* the last Step's stop_reason ("" when every step ran) */
  uint64_t instance;           /* the daemon's Reply.instance, from the first reply (0: none yet) */
  uint32_t member;             /* dqnd_use_member */
  int member_set;              /* dqnd_use_member was called: checkpoints move that member's state alone */
  /* the long commands (Step, PretrainDT) go on a context of their own, so
   * that their receive can outlive the client's timeout while the Cancel goes
   * on the socket's own context (dqnd_long.c) */
  nng_ctx lctx;
  nng_aio *laio;               /* NULL until the first long command */
  nng_mtx *lmtx;
  nng_cv *lcv;
  int ldone;                   /* laio's operation has finished (under lmtx) */
  int lkept;                   /* a receive kept in flight past the timeout: its reply may still come */
};

#define seterr dqnd__seterr
#define call_simple dqnd__call_simple
#define ckpt_from_pb dqnd__ckpt_from_pb
#define pack_req dqnd__pack_req
#define decode dqnd__decode
#define long_close dqnd__long_close
#define stats_from_pb dqnd__stats_from_pb

/* the message of the call that failed (dqnd_last_error); returns code */
int seterr(dqnd_client_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* req's version, request_id, token and deadline filled in, packed into *m */
int pack_req(dqnd_client_t *c, Dqnd__V1__Request *req, nng_msg **m);
/* the reply r (freed here) unpacked and checked: its request id, instance, status */
int decode(dqnd_client_t *c, nng_msg *r, uint64_t id, int check_id, Dqnd__V1__Reply **rep);
/* dqnd_close's first part (dqnd_long.c): a reply in flight settled (at most
 * SETTLE_MS), the long commands' context closed */
void long_close(dqnd_client_t *c);
void stats_from_pb(const Dqnd__V1__TrainerStats *p, struct learner_stats *st);
/* dqnd_call with the reply dropped */
int call_simple(dqnd_client_t *c, Dqnd__V1__Request *req);
/* the member dqnd_use_member named: 1 when it was called (the checkpoint
 * calls then move that member's state alone), else 0 */
int client_member(const dqnd_client_t *c, uint32_t *member);
void ckpt_from_pb(const Dqnd__V1__CheckpointInfo *p, struct dqnd_checkpoint *o);

#endif
