/*
 * dispatch_act.c — Act on the wire (proto/dqnd/v1/dqnd.proto; docs/learner.md
 * §8 for Act over ensemble heads): the request's checks, its reply's size
 * against max-message-bytes, and the learner's Act on the trainer's worker.
 * Policy "dt" goes to dispatch_dt.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch_impl.h"

int dispatch_check_act(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const trainer_t *t = j->t;
  const Dqnd__V1__Act *m = r->act;
  int mc = dispatch_check_member(t, m->member, j, err, errlen);
  if (mc) return mc;
  if (!strcmp(m->policy, "dt")) return dispatch_check_act_dt(r, j, err, errlen);
  if (m->policy[0] && strcmp(m->policy, "dqn"))
    return snprintf(err, errlen, "policy: '%.64s' is not dqn or dt", m->policy), CODE_INVALID_ARGUMENT;
  if (m->rtg.len || m->timesteps.len || m->window_actions.len)
    return snprintf(err, errlen, "%s: only policy dt takes a window", m->rtg.len ? "rtg" : m->timesteps.len ? "timesteps" : "window_actions"),
           CODE_INVALID_ARGUMENT;
  if (m->noisy && !t->cfg.noisy)
    return snprintf(err, errlen, "noisy: trainer '%s' has no NoisyNet layers (created with noisy=0)", t->name), CODE_INVALID_ARGUMENT;
  if (m->count < 1 || m->count > LEARNER_MAX_ACT_STATES)
    return snprintf(err, errlen, "count: %u is outside [1, %d]", m->count, LEARNER_MAX_ACT_STATES), CODE_INVALID_ARGUMENT;
  uint64_t want = (uint64_t)m->count * (uint64_t)t->cfg.state_dim * 4;
  if (m->states.len != want)
    return snprintf(err, errlen, "states: %zu bytes, expected count*state_dim*4 = %llu", m->states.len,
                    (unsigned long long)want),
           CODE_INVALID_ARGUMENT;
  const float *x = (const float *)m->states.data;
  for (uint64_t i = 0; i < want / 4; i++)
    if (!isfinite(x[i]))
      return snprintf(err, errlen, "states[%llu][%llu]: not finite", (unsigned long long)(i / t->cfg.state_dim),
                      (unsigned long long)(i % t->cfg.state_dim)),
             CODE_INVALID_ARGUMENT;
  /* the reply within max_message_bytes, as a fetched chunk is: Q's mean and
   * variance are count * q_width floats each, so a small request on a wide
   * network could ask for gigabytes (4 KB asked for 512 MiB) */
  const uint64_t qw = (uint64_t)learner_config_q_width(&t->cfg);
  const uint64_t reply = (uint64_t)m->count * (4 + (m->want_q ? 8 * qw : 0)) + 256;
  if (reply > (uint64_t)j->s->opts.max_message_bytes)
    return snprintf(err, errlen,
                    "count: %u states%s make a reply of %llu bytes, over max-message-bytes %lld: ask for fewer at a time",
                    m->count, m->want_q ? " with want_q" : "", (unsigned long long)reply,
                    (long long)j->s->opts.max_message_bytes),
           CODE_RESOURCE_EXHAUSTED;
  return 0;
}

void dispatch_run_act(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  const Dqnd__V1__Act *m = rpc_request(c)->act;
  if (!strcmp(m->policy, "dt")) {
    dispatch_run_act_dt(j);
    return;
  }
  int n = (int)m->count, qw = learner_config_q_width(&t->cfg);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)n);
  float *q = m->want_q ? malloc(sizeof(float) * (size_t)n * (size_t)qw * 2) : NULL; /* mean, then variance */
  float *qv = q ? q + (size_t)n * (size_t)qw : NULL;
  if (!a || (m->want_q && !q)) {
    free(a), free(q);
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "count: out of memory for %d states", n);
    return;
  }
  char err[512];
  int rc = learner_act_checked(trainer_member(t, j->member), (const float *)m->states.data, n, m->noisy, (int64_t)(m->episode & INT64_MAX), a, q, qv,
                               err, sizeof err); /* dispatch_check_act */
  if (rc) {
    trainer_note_error(t, rc, err);
    free(a), free(q);
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
    return;
  }
  Dqnd__V1__ActResult ar = DQND__V1__ACT_RESULT__INIT;
  ar.count = (uint32_t)n;
  ar.actions.data = (uint8_t *)a;
  ar.actions.len = sizeof(int32_t) * (size_t)n;
  if (q) {
    ar.q.data = (uint8_t *)q;
    ar.q.len = sizeof(float) * (size_t)n * (size_t)qw;
    ar.q_var.data = (uint8_t *)qv;
    ar.q_var.len = ar.q.len;
  }
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_ACT;
  r.act = &ar;
  dispatch_reply_ok(c, &r);
  free(a), free(q);
}
