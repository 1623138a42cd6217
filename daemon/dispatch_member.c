/*
 * dispatch_member.c — a population's members on the wire (docs/population.md):
 * the member index a command names, a diverged member's refusals, and
 * CopyMember (exploit and explore).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch_impl.h"
#include "log.h"

/* field (the request's name for the index) within [0, population) */
static int check_index(const trainer_t *t, uint32_t member, const char *field, char *err, size_t errlen) {
  if (member >= (uint32_t)t->population)
    return snprintf(err, errlen, "%s: %u is outside [0, %d) (trainer '%s' has %d member%s)", field, member,
                    t->population, t->name, t->population, t->population == 1 ? "" : "s"),
           CODE_INVALID_ARGUMENT;
  return 0;
}

int dispatch_check_member(const trainer_t *t, uint32_t member, trainer_job_t *j, char *err, size_t errlen) {
  const int code = check_index(t, member, "member", err, errlen);
  if (!code) j->member = (int)member;
  return code;
}

int dispatch_member_diverged(trainer_job_t *j) {
  trainer_t *t = j->t;
  if (t->population < 2 || !learner_pop_diverged(t->p, j->member)) return 0;
  rpc_reply_error(j->c, CODE_FAILED_PRECONDITION,
                  "member: member %d of trainer '%s' diverged and is not trained (SetHyperparams on it resumes it "
                  "from its last good state, CopyMember replaces it)",
                  j->member, t->name);
  return 1;
}

/* dst, src and the factors, checked on the nng thread */
int dispatch_check_copy(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const Dqnd__V1__CopyMember *m = r->copy_member;
  const trainer_t *t = j->t;
  if (t->population < 2)
    return snprintf(err, errlen, "name: trainer '%s' is not a population (created without population > 1)", t->name),
           CODE_FAILED_PRECONDITION;
  int code;
  if ((code = check_index(t, m->src, "src", err, errlen))) return code;
  if ((code = check_index(t, m->dst, "dst", err, errlen))) return code;
  j->member = (int)m->dst;
  if (m->dst == m->src) return snprintf(err, errlen, "dst: %u is src too", m->dst), CODE_INVALID_ARGUMENT;
  if (m->n_factors > TRAINER_JOB_MAX_FIELDS)
    return snprintf(err, errlen, "factors: %zu given, at most %d", m->n_factors, TRAINER_JOB_MAX_FIELDS),
           CODE_INVALID_ARGUMENT;
  for (size_t i = 0; i < m->n_factors; i++) {
    const Dqnd__V1__Field *f = m->factors[i];
    const learner_field_t *lf = learner_field_find(f->name);
    if (!lf || !lf->hparam || lf->type != LCF_FLOAT)
      return snprintf(err, errlen, "factors: '%s' is not a float hyperparameter", f->name), CODE_INVALID_ARGUMENT;
    for (size_t k = 0; k < i; k++)
      if (!strcmp(m->factors[k]->name, f->name))
        return snprintf(err, errlen, "factors: '%s' given twice", f->name), CODE_INVALID_ARGUMENT;
    char *end;
    errno = 0;
    const double v = strtod(f->value, &end);
    if (!f->value[0] || *end || errno || !isfinite(v))
      return snprintf(err, errlen, "factors: %s = '%s' is not a finite number", f->name, f->value),
             CODE_INVALID_ARGUMENT;
    j->factors[i] = (learner_pop_factor_t){lf->name, v};
  }
  j->n_factors = (int)m->n_factors;
  return 0;
}

void dispatch_run_copy(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  const Dqnd__V1__CopyMember *m = rpc_request(c)->copy_member;
  char err[512];
  int rc = learner_pop_copy_member(t->p, (int)m->dst, (int)m->src, m->with_replay, j->factors, j->n_factors, err,
                                   sizeof err);
  if (rc) {
    trainer_note_error(t, rc, err); /* a device error midway: the trainer's error state */
    rpc_reply_error(c, dispatch_learner_code(rc), "%s", err);
    return;
  }
  log_info(t->name, "member %u copied from member %u%s, %d hyperparameter%s scaled", m->dst, m->src,
           m->with_replay ? " with its replay" : "", j->n_factors, j->n_factors == 1 ? "" : "s");
  trainer_resume(t); /* dst is good now, where every member had diverged */
  dispatch_reply_member(c, t, (int)m->dst);
}
