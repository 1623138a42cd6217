/* dqnd_long.c — libdqnd's long commands (Step, PretrainDT), their Cancel,
 * and the receive that outlives the client's timeout: a Step or PretrainDT
 * goes on an nng context of its own, whose receive has no aio deadline and is
 * waited for with the client's; when that passes, the receive stays in flight
 * (lkept), the Cancel goes on the socket's own context, and settle() takes
 * the command's late reply (docs/architecture.md, after Cancel). */
#include "dqnd.h"
#include "dqnd_impl.h"

#include <stdlib.h>
#include <string.h>

#include <nng/protocol/reqrep0/req.h>

static void long_cb(void *arg) {
  dqnd_client_t *c = arg;
  nng_mtx_lock(c->lmtx);
  c->ldone = 1;
  nng_cv_wake(c->lcv);
  nng_mtx_unlock(c->lmtx);
}

/* starts op (nng_ctx_send or nng_ctx_recv) on the long context's aio */
static void long_start(dqnd_client_t *c, void (*op)(nng_ctx, nng_aio *), nng_duration aio_timeout) {
  nng_mtx_lock(c->lmtx);
  c->ldone = 0;
  nng_mtx_unlock(c->lmtx);
  nng_aio_set_timeout(c->laio, aio_timeout);
  op(c->lctx, c->laio);
}

/* 1 once the aio's operation finished, 0 when ms (< 0: no limit) passed first */
static int long_wait(dqnd_client_t *c, int ms) {
  const nng_time until = nng_clock() + (nng_time)(ms < 0 ? 0 : ms);
  nng_mtx_lock(c->lmtx);
  while (!c->ldone) {
    if (ms < 0) nng_cv_wait(c->lcv);
    else if (nng_cv_until(c->lcv, until) == NNG_ETIMEDOUT) break;
  }
  const int done = c->ldone;
  nng_mtx_unlock(c->lmtx);
  return done;
}

/* Waits up to ms (< 0: no limit) for the reply of a receive kept in flight
 * (long_call): 1 when it came (into *late, or freed when late is NULL)
 * or the pipe under it closed, 0 when it is still awaited, -1 when nothing
 * was in flight. */
static int settle(dqnd_client_t *c, int ms, nng_msg **late) {
  if (!c->lkept) return -1;
  if (!long_wait(c, ms)) return 0;
  c->lkept = 0;
  nng_msg *r = nng_aio_get_msg(c->laio); /* NULL after a failed or cancelled receive */
  nng_aio_set_msg(c->laio, NULL);
  if (late) *late = r;
  else if (r) nng_msg_free(r);
  return 1;
}

static int long_open(dqnd_client_t *c) {
  if (c->laio) return 0;
  int rv = nng_mtx_alloc(&c->lmtx);
  if (!rv && (rv = nng_cv_alloc(&c->lcv, c->lmtx))) nng_mtx_free(c->lmtx);
  if (!rv && (rv = nng_ctx_open(&c->lctx, c->sock))) nng_cv_free(c->lcv), nng_mtx_free(c->lmtx);
  /* the context takes the socket's resend time (none, set at connect: a
   * resent Step would train twice) */
  if (!rv && (rv = nng_aio_alloc(&c->laio, long_cb, c))) {
    c->laio = NULL;
    nng_ctx_close(c->lctx), nng_cv_free(c->lcv), nng_mtx_free(c->lmtx);
  }
  return rv ? seterr(c, DQND_ETRANSPORT, "opening the long commands' context: %s", nng_strerror(rv)) : 0;
}

/* dqnd_call for a long command, on the long commands' context: when the
 * client's timeout passes, the receive stays in flight (lkept) for its late
 * reply, which settle() takes after the Cancel, or dqnd_close() before it
 * closes the socket */
static int long_call(dqnd_client_t *c, Dqnd__V1__Request *req, Dqnd__V1__Reply **rep) {
  *rep = NULL;
  nng_msg *m;
  int rv = pack_req(c, req, &m);
  if (rv) return rv;
  const uint64_t id = req->request_id;
  if ((rv = long_open(c))) {
    nng_msg_free(m);
    return rv;
  }
  if (c->lkept && !settle(c, 0, NULL)) { /* an earlier reply that never came: given up (its command was cancelled) */
    nng_aio_cancel(c->laio);
    settle(c, -1, NULL);
  }
  nng_aio_set_msg(c->laio, m);
  long_start(c, nng_ctx_send, c->timeout_ms);
  long_wait(c, -1);
  if ((rv = nng_aio_result(c->laio))) {
    nng_msg_free(nng_aio_get_msg(c->laio));
    nng_aio_set_msg(c->laio, NULL);
    return seterr(c, rv == NNG_ETIMEDOUT ? DQND_ETIMEDOUT : DQND_ETRANSPORT, "send: %s", nng_strerror(rv));
  }
  long_start(c, nng_ctx_recv, NNG_DURATION_INFINITE); /* this wait's own deadline, the aio's none */
  if (!long_wait(c, c->timeout_ms)) {
    c->lkept = 1;
    return seterr(c, DQND_ETIMEDOUT, "receive: %s", nng_strerror(NNG_ETIMEDOUT));
  }
  if ((rv = nng_aio_result(c->laio)))
    return seterr(c, rv == NNG_ETIMEDOUT ? DQND_ETIMEDOUT : DQND_ETRANSPORT, "receive: %s", nng_strerror(rv));
  nng_msg *r = nng_aio_get_msg(c->laio);
  nng_aio_set_msg(c->laio, NULL);
  return decode(c, r, id, 1, rep);
}

void long_close(dqnd_client_t *c) {
  if (!c->laio) return;
  settle(c, SETTLE_MS, NULL);
  nng_aio_stop(c->laio);
  nng_msg_free(nng_aio_get_msg(c->laio)); /* a reply that landed after the settle gave up */
  nng_aio_set_msg(c->laio, NULL);
  nng_ctx_close(c->lctx);
  nng_aio_free(c->laio);
  nng_cv_free(c->lcv);
  nng_mtx_free(c->lmtx);
  c->laio = NULL;
}

int dqnd_reply_in_flight(const dqnd_client_t *c) { return c->lkept; }

static int cancel_unanswered(dqnd_client_t *c, const char *name, uint64_t request_id, int rc, const char *what);

int dqnd_step(dqnd_client_t *c, const char *name, int n, learner_stats_t *st) {
  c->stop[0] = 0;
  if (n < 1) return seterr(c, DQND_EINVAL, "n: %d", n);
  Dqnd__V1__Step m = DQND__V1__STEP__INIT;
  m.name = (char *)name;
  m.n = (uint32_t)n;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_STEP;
  req.step = &m;
  Dqnd__V1__Reply *rep;
  int rc = long_call(c, &req, &rep);
  if (!rc && (rep->result_case != DQND__V1__REPLY__RESULT_STEP || !rep->step->stats))
    rc = seterr(c, DQND_EPROTO, "Step: no StepResult with stats in the reply");
  if (!rc) {
    /* the stats of the member dqnd_use_member names (a population's reply
     * has every member's); the Step itself ran for every member either way */
    const Dqnd__V1__TrainerStats *s = rep->step->stats;
    if (rep->step->n_members && c->member < rep->step->n_members) s = rep->step->members[c->member];
    else if (c->member)
      rc = seterr(c, DQND_EINVAL, "member: %u is outside the trainer's %zu member%s (the Step ran: its stats are not "
                  "given)", c->member, rep->step->n_members ? rep->step->n_members : 1,
                  rep->step->n_members > 1 ? "s" : "");
    if (!rc && st) stats_from_pb(s, st);
    if (rep->step->stopped)
      snprintf(c->stop, sizeof c->stop, "%s", rep->step->stop_reason && *rep->step->stop_reason
                                                  ? rep->step->stop_reason : "stopped");
  }
  dqnd_reply_free(rep);
  return cancel_unanswered(c, name, req.request_id, rc, "Step");
}

/* what the late reply r (freed here) of request_id says: its steps, or its
 * status, into buf */
static void late_note(dqnd_client_t *c, nng_msg *r, uint64_t request_id, char *buf, size_t n) {
  Dqnd__V1__Reply *rep = NULL;
  int code = decode(c, r, request_id, 1, &rep);
  long long steps = -1;
  if (!code && rep->result_case == DQND__V1__REPLY__RESULT_STEP && rep->step->stats)
    steps = (long long)rep->step->stats->steps_run;
  if (!code && rep->result_case == DQND__V1__REPLY__RESULT_PRETRAIN_DT && rep->pretrain_dt->stats)
    steps = (long long)rep->pretrain_dt->stats->steps_run;
  if (steps >= 0) snprintf(buf, n, "; its late reply counted %lld steps", steps);
  else if (code) snprintf(buf, n, "; its late reply: %s: %.300s", dqnd_strerror(code), c->err);
  dqnd_reply_free(rep);
}

/* a long command (Step, PretrainDT) that got no reply (ETIMEDOUT,
 * ETRANSPORT) may still run, or wait in the queue, on the daemon: it is
 * cancelled there, by its request_id, before the caller hears of it, and its
 * late reply taken (at most SETTLE_MS), which the message then quotes */
static int cancel_unanswered(dqnd_client_t *c, const char *name, uint64_t request_id, int rc, const char *what) {
  if (rc != DQND_ETIMEDOUT && rc != DQND_ETRANSPORT) return rc;
  char saved[sizeof c->err], found[32] = "", note[400] = "";
  snprintf(saved, sizeof saved, "%s", c->err);
  const int keep = c->timeout_ms;
  dqnd_set_timeout(c, keep < 2000 ? keep : 2000);
  int crc = dqnd_cancel(c, name, request_id, found, sizeof found); /* on the socket's context, not the kept one */
  dqnd_set_timeout(c, keep);
  if (crc == DQND__V1__CODE__UNAVAILABLE) { /* the daemon restarted (decode's notice, said once) or is going away:
                                           * the caller hears that, not a timeout */
    char cerr[sizeof c->err];
    snprintf(cerr, sizeof cerr, "%s", c->err);
    return seterr(c, crc, "%s (the %s had no reply: %.300s)", cerr, what, saved);
  }
  nng_msg *late = NULL;
  if (!crc && settle(c, SETTLE_MS, &late) == 1 && late) late_note(c, late, request_id, note, sizeof note);
  return seterr(c, rc, "%s (the %s was %s%s)", saved, what,
                crc ? "left as it was: the Cancel did not get through either"
                    : !strcmp(found, "none") ? "already over on the daemon" : "cancelled on the daemon",
                note);
}

int dqnd_pretrain_dt(dqnd_client_t *c, const char *name, int n, learner_dt_stats_t *st, double *tokens_per_s) {
  c->stop[0] = 0;
  if (n < 1) return seterr(c, DQND_EINVAL, "n: %d", n);
  Dqnd__V1__PretrainDT m = DQND__V1__PRETRAIN_DT__INIT;
  m.name = (char *)name;
  m.n = (uint32_t)n;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_PRETRAIN_DT;
  req.pretrain_dt = &m;
  Dqnd__V1__Reply *rep;
  int rc = long_call(c, &req, &rep);
  if (!rc && (rep->result_case != DQND__V1__REPLY__RESULT_PRETRAIN_DT || !rep->pretrain_dt->stats))
    rc = seterr(c, DQND_EPROTO, "PretrainDT reply without its stats");
  else if (!rc && c->member && c->member >= (rep->pretrain_dt->n_members ? rep->pretrain_dt->n_members : 1))
    rc = seterr(c, DQND_EINVAL, "member: %u is outside the trainer's %zu member%s (PretrainDT ran: its stats are "
                "not given)", c->member, rep->pretrain_dt->n_members ? rep->pretrain_dt->n_members : 1,
                rep->pretrain_dt->n_members > 1 ? "s" : "");
  if (!rc) {
    const Dqnd__V1__PretrainDTResult *r = rep->pretrain_dt;
    const Dqnd__V1__DTStats *p = r->n_members ? r->members[c->member] : r->stats;
    if (st) {
      memset(st, 0, sizeof *st);
      st->dt_step = p->dt_step, st->steps_run = (int32_t)p->steps_run, st->handed_over = p->handed_over;
      st->loss_mean = p->loss_mean, st->loss_last = p->loss_last, st->lr_last = p->lr;
      st->grad_norm_mean = p->grad_norm_mean, st->grad_norm_last = p->grad_norm_last;
    }
    if (tokens_per_s) *tokens_per_s = r->tokens_per_s;
    if (r->stopped)
      snprintf(c->stop, sizeof c->stop, "%s", r->stop_reason && *r->stop_reason ? r->stop_reason : "stopped");
  }
  dqnd_reply_free(rep);
  return cancel_unanswered(c, name, req.request_id, rc, "PretrainDT");
}

const char *dqnd_last_stop(const dqnd_client_t *c) { return c->stop; }

uint64_t dqnd_pending_request_id(const dqnd_client_t *c) { return atomic_load(&c->pending_id); }

int dqnd_cancel(dqnd_client_t *c, const char *name, uint64_t request_id, char *found, size_t n) {
  Dqnd__V1__Cancel m = DQND__V1__CANCEL__INIT;
  m.name = (char *)name;
  m.request_id = request_id;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_CANCEL;
  req.cancel = &m;
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(c, &req, &rep);
  if (!rc && rep->result_case != DQND__V1__REPLY__RESULT_CANCEL) rc = seterr(c, DQND_EPROTO, "Cancel: no CancelResult");
  if (!rc && found) snprintf(found, n, "%s", rep->cancel->found ? rep->cancel->found : "");
  dqnd_reply_free(rep);
  return rc;
}
