/*
 * dispatch_impl.h — what the command table (dispatch.c), the checkpoint
 * commands (dispatch_ckpt.c) and the population's (dispatch_member.c) share:
 * the request and reply types, the replies every handler uses, and the
 * handlers the table names.
 */
#ifndef DQND_DISPATCH_IMPL_H
#define DQND_DISPATCH_IMPL_H

#include "checkpoint.h"
#include "rpc.h"
#include "trainer.h"
#include "wire.h"

#define PROTOCOL_VERSION 1u
#define FETCH_DEFAULT_BYTES (4u << 20)

typedef Dqnd__V1__Request req_t;
typedef Dqnd__V1__Reply rep_t;

/* F_DIVERGED_OK: runs on a diverged trainer too (trainer.h); F_DIRECT: looked
 * up and checked, then run on the nng thread, never queued (Cancel) */
enum { F_NOW = 1, F_QUEUE = 2, F_ADMIN = 4, F_TRAINER = 8, F_ANY_STATE = 16, F_DIVERGED_OK = 32, F_DIRECT = 64, F_LONG = 128 };

/* a command's name is its message's (wire_command_name) */
typedef struct cmd {
  int flags;
  const char *(*get_name)(const req_t *r); /* trainer name, or NULL */
  /* 0, or a code with err set; runs on the nng thread; j->t is the trainer
   * (F_TRAINER), and what it parses goes into j */
  int (*check)(const req_t *r, trainer_job_t *j, char *err, size_t errlen);
  trainer_job_fn run;
} cmd_t;

void dispatch_reply_ok(rpc_call_t *c, rep_t *r);
void dispatch_reply_done(rpc_call_t *c);
/* the gRPC code of a LEARNER_E* status */
int dispatch_learner_code(int rc);
void dispatch_reply_trainer(rpc_call_t *c, trainer_t *t, int created);
/* TrainerInfo with member i's stats and hyperparameters, read from its
 * learner (worker only); for member 0 of a trainer of one, the snapshot's
 * (dispatch_reply_trainer) */
void dispatch_reply_member(rpc_call_t *c, trainer_t *t, int member);
void dispatch_reply_checkpoint(rpc_call_t *c, const ckpt_info_t *info);
learner_backend_t dispatch_parse_backend(const char *b, int *ok);

/* SaveCheckpoint, ListCheckpoints, FetchCheckpoint, LoadCheckpoint (dispatch_ckpt.c) */
void dispatch_run_save(trainer_job_t *j);
void dispatch_run_list_checkpoints(trainer_job_t *j);
int dispatch_check_fetch(const req_t *r, trainer_job_t *j, char *err, size_t errlen);
void dispatch_run_fetch(trainer_job_t *j);
int dispatch_check_load(const req_t *r, trainer_job_t *j, char *err, size_t errlen);
void dispatch_run_load(trainer_job_t *j);
void dispatch_run_swap(trainer_job_t *j);

/* A population's members (dispatch_member.c). The member a request names:
 * 0, or INVALID_ARGUMENT naming it ("member: 3 is outside [0, 3)"); kept in
 * j->member. */
int dispatch_check_member(const trainer_t *t, uint32_t member, trainer_job_t *j, char *err, size_t errlen);
/* Worker: 1 (the call answered FAILED_PRECONDITION) when j->member of a
 * population of more than one diverged and the command would train it
 * (SubmitTransitions, SyncTarget); else 0 */
int dispatch_member_diverged(trainer_job_t *j);
int dispatch_check_copy(const req_t *r, trainer_job_t *j, char *err, size_t errlen);
void dispatch_run_copy(trainer_job_t *j);

/* a long command's stop_reason: "deadline", "shutdown" or "cancelled"
 * (stop from the learner, why from trainer_long_end) */
const char *dispatch_stop_reason(const learner_stop_t *stop, int why);
/* Act (dispatch_act.c) */
int dispatch_check_act(const req_t *r, trainer_job_t *j, char *err, size_t errlen);
void dispatch_run_act(trainer_job_t *j);
/* the Decision Transformer's commands (dispatch_dt.c): PretrainDT, and Act
 * with policy "dt" (dispatch_check_act and dispatch_run_act hand it over) */
int dispatch_check_pretrain_dt(const req_t *r, trainer_job_t *j, char *err, size_t errlen);
void dispatch_run_pretrain_dt(trainer_job_t *j);
int dispatch_check_act_dt(const req_t *r, trainer_job_t *j, char *err, size_t errlen);
void dispatch_run_act_dt(trainer_job_t *j);
#endif
