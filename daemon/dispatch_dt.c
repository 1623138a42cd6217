/*
 * dispatch_dt.c — the Decision Transformer's commands (docs/learner.md §16,
 * proto/dqnd/v1/dqnd.proto): PretrainDT, and Act with policy "dt" (return
 * conditioning on one window). Checked on the nng thread, run on the
 * trainer's worker, as every queued command.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dispatch_impl.h"
#include "log.h"

static int has_dt(const trainer_t *t, const char *what, char *err, size_t errlen) {
  if (t->cfg.dt_layers > 0) return 0;
  return snprintf(err, errlen, "%s: trainer '%s' has no Decision Transformer (created with dt_layers=0)", what,
                  t->name),
         CODE_FAILED_PRECONDITION;
}

int dispatch_check_pretrain_dt(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const uint32_t n = r->pretrain_dt->n;
  if (n < 1 || n > LEARNER_MAX_STEPS)
    return snprintf(err, errlen, "n: %u is outside [1, %d]", n, LEARNER_MAX_STEPS), CODE_INVALID_ARGUMENT;
  return has_dt(j->t, "PretrainDT", err, errlen);
}

static void dt_stats_to_pb(const learner_dt_stats_t *s, Dqnd__V1__DTStats *p) {
  dqnd__v1__dtstats__init(p);
  p->dt_step = s->dt_step, p->steps_run = (uint32_t)s->steps_run;
  p->loss_mean = s->loss_mean, p->loss_last = s->loss_last;
  p->grad_norm_mean = s->grad_norm_mean, p->grad_norm_last = s->grad_norm_last;
  p->lr = s->lr_last, p->handed_over = s->handed_over != 0;
}

void dispatch_run_pretrain_dt(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  const int P = t->population;
  char err[512];
  learner_dt_stats_t *sts = calloc((size_t)P, sizeof *sts);
  Dqnd__V1__DTStats *ps = calloc((size_t)P, sizeof *ps);
  Dqnd__V1__DTStats **pp = calloc((size_t)P, sizeof *pp);
  if (!sts || !ps || !pp) {
    free(sts), free(ps), free(pp);
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "PretrainDT: out of memory");
    return;
  }
  int code = trainer_long_begin(t, rpc_request(c)->request_id, j->deadline, err, sizeof err);
  if (code) { /* cancelled or expired while queued, or shutdown: nothing ran */
    free(sts), free(ps), free(pp);
    rpc_reply_error(c, code, "PretrainDT: %s", err);
    return;
  }
  const double t0 = now_s();
  learner_stop_t stop = {j->deadline, 0};
  int rc = learner_pop_pretrain_dt(t->p, (int)rpc_request(c)->pretrain_dt->n, &stop, sts, err, sizeof err);
  const int why = trainer_long_end(t);
  const double secs = now_s() - t0;
  int64_t steps = 0;
  for (int i = 0; i < P; i++) steps += sts[i].steps_run;
  /* in a population a member that diverged, or drew no window, stopped alone:
   * the others' steps are an answer (each member's steps_run says what ran) */
  const int alone = P > 1 && (rc == LEARNER_EDIVERGED || (rc == LEARNER_EEMPTY && steps > 0));
  /* a trainer of one whose later step drew no window: the steps before it
   * are applied (and the hand-over with them), so they are the answer, as a
   * stop between steps is: stopped, "no window" */
  const int no_window = P == 1 && rc == LEARNER_EEMPTY && steps > 0;
  if (rc && rc != LEARNER_ESTOPPED && !alone && !no_window) {
    /* nothing ran (no window anywhere), or one member (of one) diverged: its state is the last good step's */
    free(sts), free(ps), free(pp);
    if (rc != LEARNER_EEMPTY && rc != LEARNER_EDIVERGED) trainer_note_error(t, rc, err);
    rpc_reply_error(c, dispatch_learner_code(rc), "PretrainDT: %s", err);
    return;
  }
  if (alone) log_warn(t->name, "PretrainDT: %s (the other members ran on)", err);
  if (no_window) log_warn(t->name, "PretrainDT stopped after %lld of %u steps: %s", (long long)steps,
                          rpc_request(c)->pretrain_dt->n, err);
  for (int i = 0; i < P; i++) {
    dt_stats_to_pb(&sts[i], &ps[i]);
    pp[i] = &ps[i];
    if (sts[i].handed_over) log_info(t->name, "PretrainDT: member %d's state embedding became trunk1", i);
  }
  Dqnd__V1__PretrainDTResult pr = DQND__V1__PRETRAIN_DTRESULT__INIT;
  pr.stats = &ps[0];
  if (P > 1) pr.n_members = (size_t)P, pr.members = pp;
  pr.tokens_per_s = secs > 0 ? (double)steps * 3.0 * t->cfg.dt_context * t->cfg.dt_batch / secs : 0;
  if (rc == LEARNER_ESTOPPED) {
    pr.stopped = 1;
    pr.stop_reason = (char *)dispatch_stop_reason(&stop, why);
    log_info(t->name, "PretrainDT %s: %s", pr.stop_reason, err);
  } else if (no_window) {
    pr.stopped = 1;
    pr.stop_reason = "no window";
  }
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_PRETRAIN_DT;
  r.pretrain_dt = &pr;
  dispatch_reply_ok(c, &r);
  free(sts), free(ps), free(pp);
}

/* Act with policy "dt": the window's arrays, their lengths and values (the
 * learner checks them again, naming the same fields) */
int dispatch_check_act_dt(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const trainer_t *t = j->t;
  const Dqnd__V1__Act *m = r->act;
  int code = has_dt(t, "policy", err, errlen);
  if (code) return code;
  if (m->noisy || m->want_q)
    return snprintf(err, errlen, "%s: does not apply to policy dt", m->noisy ? "noisy" : "want_q"),
           CODE_INVALID_ARGUMENT;
  const uint32_t K = (uint32_t)t->cfg.dt_context, S = (uint32_t)t->cfg.state_dim;
  if (m->count < 1 || m->count > K)
    return snprintf(err, errlen, "count: %u steps is outside [1, dt_context = %u]", m->count, K),
           CODE_INVALID_ARGUMENT;
  const struct {
    const char *name;
    size_t len, want;
  } arr[] = {{"states", m->states.len, (size_t)m->count * S * 4},
             {"rtg", m->rtg.len, (size_t)m->count * 4},
             {"timesteps", m->timesteps.len, (size_t)m->count * 4},
             {"window_actions", m->window_actions.len, (size_t)m->count * 4}};
  for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++)
    if (arr[i].len != arr[i].want)
      return snprintf(err, errlen, "%s: %zu bytes, expected %zu for %u steps", arr[i].name, arr[i].len, arr[i].want,
                      m->count),
             CODE_INVALID_ARGUMENT;
  return 0;
}

void dispatch_run_act_dt(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  const Dqnd__V1__Act *m = rpc_request(c)->act;
  /* the bytes fields are not 4-byte aligned in general: copied out */
  const size_t n = m->count, S = (size_t)t->cfg.state_dim;
  float *x = malloc(sizeof(float) * n * (S + 1));
  int32_t *ia = malloc(sizeof(int32_t) * n * 2);
  if (!x || !ia) {
    free(x), free(ia);
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "Act: out of memory");
    return;
  }
  memcpy(x, m->states.data, n * S * 4);
  memcpy(x + n * S, m->rtg.data, n * 4);
  memcpy(ia, m->timesteps.data, n * 4);
  memcpy(ia + n, m->window_actions.data, n * 4);
  learner_dt_window_t w = {(int)n, x + n * S, x, ia + n, ia};
  int32_t a = 0;
  char err[512];
  int rc = learner_act_dt(trainer_member(t, j->member), &w, &a, err, sizeof err);
  free(x), free(ia);
  if (rc) {
    if (rc != LEARNER_EINVAL) trainer_note_error(t, rc, err);
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
    return;
  }
  Dqnd__V1__ActResult ar = DQND__V1__ACT_RESULT__INIT;
  ar.count = 1;
  ar.actions.data = (uint8_t *)&a;
  ar.actions.len = sizeof a;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_ACT;
  r.act = &ar;
  dispatch_reply_ok(c, &r);
}
