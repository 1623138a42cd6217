/* population.c — see population.h; the design is docs/population.md. */
#include "population.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner_impl.h"
#include "state_format.h"

struct learner_pop {
  int n;
  learner_t **m;
  learner_group_t *group; /* the members' shared launches (learner_impl.h), or NULL: each steps alone */
  int dt_grouped;         /* the last PretrainDT ran every member in the same launches */
  int *diverged;
  volatile int stop;
};

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* "member I: " before a member's own message, in a population of more than
 * one (a population of one is a learner: its messages are the learner's) */
static void prefix_member(char *err, size_t errlen, int n, int i) {
  if (!err || !errlen || n < 2) return;
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", err);
  seterr(err, errlen, "member %d: %s", i, tmp);
}

static int check_n(int n, char *err, size_t errlen) {
  if (n < 1 || n > LEARNER_MAX_POPULATION) {
    seterr(err, errlen, "population: %d is outside [1, %d]", n, LEARNER_MAX_POPULATION);
    return LEARNER_EINVAL;
  }
  return LEARNER_OK;
}

int64_t learner_pop_memory_estimate(const learner_config_t *c, int n, learner_backend_t be) {
  return (int64_t)n * learner_memory_estimate(c, be) - (int64_t)(n - 1) * learner_memory_population_shared(be);
}

int learner_pop_memory_fits(const learner_config_t *c, int n, learner_backend_t be, char *err, size_t errlen) {
  int rc = check_n(n, err, errlen);
  if (rc) return rc;
  if (n == 1) return learner_memory_fits(c, be, err, errlen);
  const int64_t need = learner_pop_memory_estimate(c, n, be), one = need / n, free_b = learner_memory_available(be);
  if (free_b < 0 || need <= free_b) return LEARNER_OK;
  seterr(err, errlen,
         "population: %d members need ~%lld MiB (each ~%lld MiB: parameters, optimiser, a replay of %lld), %lld MiB "
         "are free: fewer members or a smaller replay_capacity",
         n, (long long)(need >> 20), (long long)(one >> 20), (long long)c->replay_capacity, (long long)(free_b >> 20));
  return LEARNER_ENOMEM;
}

static learner_pop_t *pop_alloc(int n) {
  learner_pop_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n;
  p->m = calloc((size_t)n, sizeof *p->m);
  p->diverged = calloc((size_t)n, sizeof *p->diverged);
  if (!p->m || !p->diverged) {
    free(p->m), free(p->diverged), free(p);
    return NULL;
  }
  return p;
}

void learner_pop_destroy(learner_pop_t *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) learner_destroy(p->m[i]);
  learner_group_destroy(p->group); /* after its members */
  free(p->m), free(p->diverged), free(p);
}

int learner_pop_create(const learner_config_t *c, int n, const uint64_t *seeds, learner_backend_t backend,
                       learner_pop_t **out, char *err, size_t errlen) {
  *out = NULL;
  int rc = check_n(n, err, errlen);
  if (rc) return rc;
  if ((rc = learner_config_validate(c, err, errlen))) return rc;
  if ((rc = learner_pop_memory_fits(c, n, backend, err, errlen))) return rc;
  learner_pop_t *p = pop_alloc(n);
  if (!p) {
    seterr(err, errlen, "population: out of memory");
    return LEARNER_ENOMEM;
  }
  if ((rc = learner_group_create(c, n, backend, &p->group, err, errlen))) {
    learner_pop_destroy(p);
    return rc;
  }
  for (int i = 0; i < n; i++) {
    learner_config_t mc = *c;
    mc.seed = seeds ? seeds[i] : c->seed + (uint64_t)i;
    if ((rc = learner_create_in(&mc, backend, p->group, i, &p->m[i], err, errlen))) {
      prefix_member(err, errlen, n, i);
      learner_pop_destroy(p);
      return rc;
    }
  }
  *out = p;
  return LEARNER_OK;
}

int learner_pop_size(const learner_pop_t *p) { return p->n; }

learner_t *learner_pop_member(learner_pop_t *p, int i) { return i >= 0 && i < p->n ? p->m[i] : NULL; }

int learner_pop_check_member(const learner_pop_t *p, int i, char *err, size_t errlen) {
  if (i < 0 || i >= p->n) {
    seterr(err, errlen, "member: %d is outside [0, %d)", i, p->n);
    return LEARNER_EINVAL;
  }
  return LEARNER_OK;
}

volatile int *learner_pop_stop_flag(learner_pop_t *p) { return &p->stop; }

int learner_pop_diverged(const learner_pop_t *p, int i) { return i >= 0 && i < p->n && p->diverged[i]; }

void learner_pop_mark_diverged(learner_pop_t *p, int i) {
  if (i >= 0 && i < p->n) p->diverged[i] = 1;
}

int learner_pop_set_hparams(learner_pop_t *p, int i, const learner_hparams_t *hp, char *err, size_t errlen) {
  int rc = learner_pop_check_member(p, i, err, errlen);
  if (rc) return rc;
  if ((rc = learner_set_hparams(p->m[i], hp, err, errlen))) return rc;
  p->diverged[i] = 0;
  return LEARNER_OK;
}

/* member i, n steps, under the population's one stop flag (a stop reaches
 * the running member and, through the callers, keeps later ones from
 * starting); marks it diverged when it diverges; err names the member */
static int step_one(learner_pop_t *p, int i, int n, learner_stop_t *stop, learner_stats_t *st, char *err,
                    size_t errlen) {
  learner_t *m = p->m[i];
  learner_stop_ctl_t ctl = {&p->stop, stop ? stop->deadline : 0, LEARNER_STOP_NONE};
  int rc = m->ops->step(m->impl, n, &ctl, st, err, errlen);
  if (stop) stop->why = ctl.why;
  if (rc == LEARNER_EDIVERGED) p->diverged[i] = 1;
  if (rc) prefix_member(err, errlen, p->n, i);
  return rc;
}

/* every member not diverged, n steps in the group's shared launches (the
 * diverged ones computed, not applied); the codes and messages as the
 * member-by-member loop of learner_pop_step_until gives them, except that a
 * stop reaches every member at once */
static int group_step(learner_pop_t *p, int n, learner_stop_t *stop, learner_stats_t *st, int *rcs, char *err,
                      size_t errlen) {
  learner_stats_t *ms = calloc((size_t)p->n, sizeof *ms);
  int *mrc = calloc((size_t)p->n, sizeof *mrc);
  char(*errs)[512] = calloc((size_t)p->n, sizeof *errs);
  if (!ms || !mrc || !errs) {
    free(ms), free(mrc), free(errs);
    seterr(err, errlen, "population: out of memory");
    return LEARNER_ENOMEM;
  }
  learner_stop_ctl_t ctl = {&p->stop, stop ? stop->deadline : 0, LEARNER_STOP_NONE};
  const learner_group_t *g = p->group;
  int rc = g->ops->group_step(g->impl, n, p->diverged, &ctl, ms, mrc, errs, err, errlen);
  if (stop) stop->why = ctl.why;
  int result = rc, first_div = -1, first_stop = -1;
  for (int i = 0; i < p->n && !rc; i++) {
    if (p->diverged[i]) {
      if (st) {
        learner_get_stats(p->m[i], &st[i]);
        st[i].steps_run = 0;
      }
      continue;
    }
    if (st) st[i] = ms[i];
    if (rcs) rcs[i] = mrc[i];
    if (mrc[i]) prefix_member(errs[i], sizeof errs[i], p->n, i);
    if (mrc[i] == LEARNER_EDIVERGED) {
      p->diverged[i] = 1;
      if (first_div < 0) first_div = i;
    } else if (mrc[i] == LEARNER_ESTOPPED && first_stop < 0) {
      first_stop = i;
    }
  }
  if (!rc && first_stop >= 0) {
    seterr(err, errlen, "%s", errs[first_stop]);
    result = LEARNER_ESTOPPED;
  } else if (!rc && first_div >= 0) {
    seterr(err, errlen, "%s", errs[first_div]);
    result = LEARNER_EDIVERGED;
  }
  free(ms), free(mrc), free(errs);
  return result;
}

int learner_pop_step_until(learner_pop_t *p, int n, learner_stop_t *stop, learner_stats_t *st, int *rcs, char *err,
                           size_t errlen) {
  if (n < 0 || n > LEARNER_MAX_STEPS) {
    seterr(err, errlen, "n: %d is outside [0, %d]", n, LEARNER_MAX_STEPS);
    return LEARNER_EINVAL;
  }
  if (rcs) memset(rcs, 0, sizeof *rcs * (size_t)p->n);
  /* a member too empty to step: nothing runs (as for one learner) */
  for (int i = 0; i < p->n; i++) {
    if (p->diverged[i]) continue;
    const learner_config_t *c = &p->m[i]->cfg;
    learner_counters_t k;
    int rc = p->m[i]->ops->get_counters(p->m[i]->impl, &k);
    if (rc) return rc;
    if (k.replay_size < c->batch) {
      seterr(err, errlen, "replay holds %lld transitions, a step needs batch = %d", (long long)k.replay_size, c->batch);
      prefix_member(err, errlen, p->n, i);
      return LEARNER_EEMPTY;
    }
  }
  if (p->group) return group_step(p, n, stop, st, rcs, err, errlen);
  int result = LEARNER_OK, first_div = -1, stopped = 0;
  char first_err[512] = "";
  for (int i = 0; i < p->n; i++) {
    if (p->diverged[i] || stopped) {
      if (st) {
        learner_get_stats(p->m[i], &st[i]);
        st[i].steps_run = 0;
      }
      continue;
    }
    char merr[512] = "";
    learner_stats_t ms;
    int rc = step_one(p, i, n, stop, &ms, merr, sizeof merr);
    if (st) st[i] = ms;
    if (rcs) rcs[i] = rc;
    if (rc == LEARNER_EDIVERGED) {
      if (first_div < 0) first_div = i, snprintf(first_err, sizeof first_err, "%s", merr);
    } else if (rc) {
      seterr(err, errlen, "%s", merr);
      if (rc != LEARNER_ESTOPPED) return rc;
      stopped = 1, result = LEARNER_ESTOPPED;
    }
  }
  if (result == LEARNER_OK && first_div >= 0) {
    seterr(err, errlen, "%s", first_err);
    result = LEARNER_EDIVERGED;
  }
  return result;
}

/* every member's n pre-training steps in the group's shared launches; the
 * codes and messages as the member-by-member loop gives them, except that a
 * stop reaches every member at once and a member that diverges or runs out
 * of windows does not keep the later members from their steps;
 * LEARNER_EUNSUPPORTED (nothing run) when the shapes cannot share launches */
static int group_pretrain_dt(learner_pop_t *p, int n, learner_stop_ctl_t *ctl, learner_dt_stats_t *st, char *err,
                             size_t errlen) {
  int *mrc = calloc((size_t)p->n, sizeof *mrc);
  char(*errs)[512] = calloc((size_t)p->n, sizeof *errs);
  if (!mrc || !errs) {
    free(mrc), free(errs);
    seterr(err, errlen, "population: out of memory");
    return LEARNER_ENOMEM;
  }
  const learner_group_t *g = p->group;
  int rc = g->ops->group_dt_step(g->impl, n, ctl, st, mrc, errs, err, errlen);
  int first_div = -1, first_other = -1;
  for (int i = 0; i < p->n && !rc; i++) {
    mrc[i] = learner_dt_after(p->m[i], mrc[i], &st[i], errs[i], sizeof errs[i]);
    if (mrc[i]) prefix_member(errs[i], sizeof errs[i], p->n, i);
    if (mrc[i] == LEARNER_EDIVERGED && first_div < 0) first_div = i;
    else if (mrc[i] && mrc[i] != LEARNER_EDIVERGED && first_other < 0) first_other = i;
  }
  if (!rc && first_other >= 0) rc = mrc[first_other], seterr(err, errlen, "%s", errs[first_other]);
  else if (!rc && first_div >= 0) rc = LEARNER_EDIVERGED, seterr(err, errlen, "%s", errs[first_div]);
  free(mrc), free(errs);
  return rc;
}

int learner_pop_pretrain_dt(learner_pop_t *p, int n, learner_stop_t *stop, learner_dt_stats_t *st, char *err,
                            size_t errlen) {
  memset(st, 0, sizeof *st * (size_t)p->n);
  p->dt_grouped = 0;
  if (n < 1 || n > LEARNER_MAX_STEPS) {
    seterr(err, errlen, "n: %d is outside [1, %d]", n, LEARNER_MAX_STEPS);
    return LEARNER_EINVAL;
  }
  learner_stop_ctl_t ctl = {&p->stop, stop ? stop->deadline : 0, LEARNER_STOP_NONE};
  for (int i = 0; i < p->n; i++) { /* every member can draw a window, or nothing runs */
    int rc = learner_pretrain_dt_ctl(p->m[i], 0, &ctl, &st[i], err, errlen);
    if (rc) {
      prefix_member(err, errlen, p->n, i);
      return rc;
    }
  }
  if (p->group && p->group->ops->group_dt_step) {
    int rc = group_pretrain_dt(p, n, &ctl, st, err, errlen);
    if (rc != LEARNER_EUNSUPPORTED) {
      p->dt_grouped = 1;
      if (stop) stop->why = ctl.why;
      return rc;
    }
  }
  int result = LEARNER_OK;
  char first[512] = "";
  for (int i = 0; i < p->n; i++) {
    char merr[512] = "";
    int rc = learner_pretrain_dt_ctl(p->m[i], n, &ctl, &st[i], merr, sizeof merr);
    if (rc) prefix_member(merr, sizeof merr, p->n, i);
    /* a member that diverged, or whose step drew no window (its draws missed
     * the few ended episodes: dt_no_window_message), stops alone, as in the
     * grouped launches; the call reports the first */
    if (rc == LEARNER_EDIVERGED || rc == LEARNER_EEMPTY) {
      if (result == LEARNER_OK) result = rc, snprintf(first, sizeof first, "%s", merr);
    } else if (rc) {
      seterr(err, errlen, "%s", merr);
      if (stop) stop->why = ctl.why;
      return rc;
    }
  }
  if (stop) stop->why = ctl.why;
  if (result) seterr(err, errlen, "%s", first);
  return result;
}

int learner_pop_step_member(learner_pop_t *p, int i, int n, learner_stop_t *stop, learner_stats_t *st, char *err,
                            size_t errlen) {
  int rc = learner_pop_check_member(p, i, err, errlen);
  if (rc) return rc;
  if (n < 0 || n > LEARNER_MAX_STEPS) {
    seterr(err, errlen, "n: %d is outside [0, %d]", n, LEARNER_MAX_STEPS);
    return LEARNER_EINVAL;
  }
  if (p->diverged[i]) {
    seterr(err, errlen, "diverged earlier: not stepped");
    prefix_member(err, errlen, p->n, i);
    return LEARNER_EDIVERGED;
  }
  learner_stats_t ms;
  rc = step_one(p, i, n, stop, &ms, err, errlen);
  if (st) *st = ms;
  return rc;
}

int learner_pop_grouped(const learner_pop_t *p) { return p->group != NULL; }

int learner_pop_dt_grouped(const learner_pop_t *p) { return p->dt_grouped; }

int learner_pop_n_diverged(const learner_pop_t *p) {
  int k = 0;
  for (int i = 0; i < p->n; i++) k += p->diverged[i];
  return k;
}

/* which registered sections a member's copy carries */
static int section_copied(const state_section_t *s, const learner_config_t *c, int with_replay) {
  if (s->replay && !with_replay) return 0;
  if (s->per_only && !c->prioritized) return 0;
  if (s->priors_only && !STATE_CONFIG_HAS_PRIORS(c)) return 0;
  return 1;
}

#define COPY_CHUNK (1 << 20)

static int copy_into(learner_pop_t *p, int dst, learner_t *s, int with_replay, const learner_pop_factor_t *factors,
                     int nf, char *err, size_t errlen);

int learner_pop_copy_member(learner_pop_t *p, int dst, int src, int with_replay, const learner_pop_factor_t *factors,
                            int nf, char *err, size_t errlen) {
  int rc;
  if ((rc = learner_pop_check_member(p, dst, err, errlen)) || (rc = learner_pop_check_member(p, src, err, errlen)))
    return rc;
  if (dst == src) {
    seterr(err, errlen, "member: dst and src are both %d", dst);
    return LEARNER_EINVAL;
  }
  return copy_into(p, dst, p->m[src], with_replay, factors, nf, err, errlen);
}

/* member dst becomes a copy of learner s (a member, or a loaded state of the
 * same shapes), as learner_pop_copy_member says */
static int copy_into(learner_pop_t *p, int dst, learner_t *s, int with_replay, const learner_pop_factor_t *factors,
                     int nf, char *err, size_t errlen) {
  int rc;
  learner_t *d = p->m[dst];
  /* the new hyperparameters first: a bad factor changes nothing */
  learner_config_t nc = d->cfg;
  nc.hp = s->cfg.hp;
  for (int k = 0; k < nf; k++) {
    const learner_field_t *f = factors[k].name ? learner_field_find(factors[k].name) : NULL;
    if (!f || !f->hparam || f->type != LCF_FLOAT) {
      seterr(err, errlen, "factors: '%s' is not a float hyperparameter", factors[k].name ? factors[k].name : "");
      return LEARNER_EINVAL;
    }
    if (!isfinite(factors[k].factor)) {
      seterr(err, errlen, "factors: %s's factor is not finite", f->name);
      return LEARNER_EINVAL;
    }
    float *v = (float *)((char *)&nc + f->offset);
    *v = (float)((double)*v * factors[k].factor);
  }
  if ((rc = learner_hparams_validate(&nc.hp, err, errlen))) return rc;

  learner_counters_t ks, kd;
  if ((rc = s->ops->get_counters(s->impl, &ks)) || (rc = d->ops->get_counters(d->impl, &kd))) return rc;
  learner_counters_t k = kd;
  k.step = ks.step, k.act_count = ks.act_count, k.last = ks.last;
  if (with_replay) {
    k.replay_size = ks.replay_size, k.replay_head = ks.replay_head, k.replay_total = ks.replay_total;
    k.max_leaf = ks.max_leaf;
  }
  /* the buffer before anything changes (on any error nothing has); then the
   * counters: a replay section's length follows the replay size */
  unsigned char *buf = malloc(COPY_CHUNK);
  if (!buf) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  if ((rc = d->ops->set_counters(d->impl, &k))) {
    free(buf);
    return rc;
  }
  for (int i = 0; i < state_num_sections && !rc; i++) {
    const state_section_t *sec = &state_sections[i];
    if (!section_copied(sec, &d->cfg, with_replay)) continue;
    const int64_t len = learner_section_bytes(s, sec->tag);
    for (int64_t off = 0; off < len && !rc; off += COPY_CHUNK) {
      const int64_t c = len - off < COPY_CHUNK ? len - off : COPY_CHUNK;
      rc = learner_section_read(s, sec->tag, off, c, buf);
      if (!rc) rc = learner_section_write(d, sec->tag, off, c, buf);
    }
  }
  free(buf);
  if (!rc && with_replay) rc = d->ops->load_done(d->impl);
  if (!rc) rc = d->ops->set_hparams(d->impl, &nc.hp);
  if (rc) {
    /* a device error midway: the member is neither copy nor original */
    seterr(err, errlen, "member %d: the copy failed midway: %s", dst, learner_strerror(rc));
    p->diverged[dst] = 1;
    return rc;
  }
  d->cfg.hp = nc.hp;
  p->diverged[dst] = 0;
  return LEARNER_OK;
}

/* the magics and version: learner_types.h (LEARNER_POP_*) and state_format.h (STATE_MAGIC) */

/* put_u32/put_u64/get_u32/get_u64: state_format.h's */

int learner_pop_save(learner_pop_t *p, int with_replay, learner_write_fn w, void *ctx, char *err, size_t errlen) {
  if (p->n == 1) return learner_save(p->m[0], with_replay, w, ctx, err, errlen);
  unsigned char h[24];
  memcpy(h, LEARNER_POP_MAGIC, 8);
  put_u32(h + 8, LEARNER_POP_VERSION);
  put_u32(h + 12, 0);
  put_u64(h + 16, (uint64_t)p->n);
  if (w(ctx, h, sizeof h)) {
    seterr(err, errlen, "state: write failed");
    return LEARNER_EIO;
  }
  for (int i = 0; i < p->n; i++) {
    int rc = learner_save(p->m[i], with_replay, w, ctx, err, errlen);
    if (rc) {
      prefix_member(err, errlen, p->n, i);
      return rc;
    }
  }
  unsigned char t[16];
  memcpy(t, LEARNER_POP_END, 8);
  put_u64(t + 8, (uint64_t)p->n);
  if (w(ctx, t, sizeof t)) {
    seterr(err, errlen, "state: write failed");
    return LEARNER_EIO;
  }
  return LEARNER_OK;
}

/* a reader that serves the bytes already looked at (the magic) first */
typedef struct {
  learner_read_fn r;
  void *ctx;
  unsigned char pre[8];
  size_t npre, used;
} pre_reader_t;

static int pre_read(void *c, void *buf, size_t n) {
  pre_reader_t *pr = c;
  size_t k = pr->npre - pr->used < n ? pr->npre - pr->used : n;
  memcpy(buf, pr->pre + pr->used, k);
  pr->used += k;
  return n > k ? pr->r(pr->ctx, (char *)buf + k, n - k) : 0;
}

/* reads the magic: 1 for a population file (then its count in *n), 0 for a
 * learner's state (its magic kept in pr for the learner's reader) */
static int read_kind(pre_reader_t *pr, int *n, char *err, size_t errlen) {
  if (pr->r(pr->ctx, pr->pre, 8)) {
    seterr(err, errlen, "state: read failed (truncated?)");
    return LEARNER_EIO;
  }
  if (!memcmp(pr->pre, STATE_MAGIC, 8)) {
    pr->npre = 8, pr->used = 0;
    *n = 1;
    return 0;
  }
  if (memcmp(pr->pre, LEARNER_POP_MAGIC, 8)) {
    seterr(err, errlen, "state: not a dqnd learner or population state (bad magic)");
    return LEARNER_ECORRUPT;
  }
  unsigned char h[16];
  if (pr->r(pr->ctx, h, sizeof h)) {
    seterr(err, errlen, "state: read failed (truncated?)");
    return LEARNER_EIO;
  }
  if (get_u32(h) != LEARNER_POP_VERSION || get_u32(h + 4) != 0) {
    seterr(err, errlen, "state: population format version %u (flags %u); this build reads version %u", get_u32(h),
           get_u32(h + 4), LEARNER_POP_VERSION);
    return LEARNER_ECORRUPT;
  }
  uint64_t m = get_u64(h + 8);
  if (m < 2 || m > LEARNER_MAX_POPULATION) {
    seterr(err, errlen, "state: a population of %llu members (a file holds 2 to %d)", (unsigned long long)m,
           LEARNER_MAX_POPULATION);
    return LEARNER_ECORRUPT;
  }
  *n = (int)m;
  pr->npre = pr->used = 0;
  return 1;
}

int learner_pop_peek(learner_read_fn r, void *ctx, learner_config_t *c, int *n, int *with_replay, char *err,
                     size_t errlen) {
  pre_reader_t pr = {r, ctx, {0}, 0, 0};
  int kind = read_kind(&pr, n, err, errlen);
  if (kind < 0) return kind;
  return learner_peek_config(pre_read, &pr, c, with_replay, err, errlen);
}

/* every field but the seed and the hyperparameters */
static int same_shape_but_seed(const learner_config_t *a, const learner_config_t *b) {
  learner_config_t t = *b;
  t.seed = a->seed;
  return learner_config_same_shape(a, &t);
}

int learner_pop_load(learner_read_fn r, void *ctx, learner_backend_t backend, learner_pop_t **out, char *err,
                     size_t errlen) {
  *out = NULL;
  pre_reader_t pr = {r, ctx, {0}, 0, 0};
  int n;
  int kind = read_kind(&pr, &n, err, errlen);
  if (kind < 0) return kind;
  learner_pop_t *p = pop_alloc(n);
  if (!p) {
    seterr(err, errlen, "population: out of memory");
    return LEARNER_ENOMEM;
  }
  int rc = LEARNER_OK;
  for (int i = 0; i < n && !rc; i++) {
    if (i == 1) { /* all N must fit, not only the first */
      if ((rc = learner_pop_memory_fits(&p->m[0]->cfg, n - 1, backend, err, errlen))) break;
    }
    if ((rc = learner_load_in(pre_read, &pr, backend, n, &p->group, i, &p->m[i], err, errlen))) {
      prefix_member(err, errlen, n, i);
      break;
    }
    if (i && !same_shape_but_seed(&p->m[0]->cfg, &p->m[i]->cfg)) {
      seterr(err, errlen, "state: member %d's config differs from member 0's in more than seed and hyperparameters", i);
      rc = LEARNER_ECORRUPT;
    }
  }
  if (!rc && kind == 1) {
    unsigned char t[16];
    if (pr.r(pr.ctx, t, sizeof t)) {
      seterr(err, errlen, "state: read failed (truncated?): no population end marker");
      rc = LEARNER_EIO;
    } else if (memcmp(t, LEARNER_POP_END, 8) || get_u64(t + 8) != (uint64_t)n) {
      seterr(err, errlen, "state: bad population end marker");
      rc = LEARNER_ECORRUPT;
    }
  }
  if (rc) {
    learner_pop_destroy(p);
    return rc;
  }
  *out = p;
  return LEARNER_OK;
}

/* ------------------------------------------------------ one member's state */

int learner_pop_load_member(learner_pop_t *p, int i, learner_t *src, char *err, size_t errlen) {
  int rc = learner_pop_check_member(p, i, err, errlen);
  if (rc) return rc;
  if (!same_shape_but_seed(&p->m[i]->cfg, &src->cfg)) {
    seterr(err, errlen, "state: its config differs from the population's in more than seed and hyperparameters");
    return LEARNER_EINVAL;
  }
  /* a state saved with its replay replaces the member's, an empty one too
   * (a member started over: docs/population.md "On the wire") */
  return copy_into(p, i, src, src->loaded_replay, NULL, 0, err, errlen);
}

/* a reader that adds CRC-32 over what it reads while on */
typedef struct {
  pre_reader_t *pr;
  int on;
  uint32_t crc;
} crc_reader_t;

static int crc_read(void *c, void *buf, size_t n) {
  crc_reader_t *cr = c;
  int rc = pre_read(cr->pr, buf, n);
  if (!rc && cr->on) cr->crc = learner_crc32(cr->crc, buf, n);
  return rc;
}

int learner_pop_member_range(learner_read_fn r, void *ctx, int i, uint64_t *off, uint64_t *len, uint32_t *crc32,
                             char *err, size_t errlen) {
  pre_reader_t pr = {r, ctx, {0}, 0, 0};
  int n;
  int kind = read_kind(&pr, &n, err, errlen);
  if (kind < 0) return kind;
  if (i < 0 || i >= n) {
    seterr(err, errlen, "member: %d is outside [0, %d)", i, n);
    return LEARNER_EINVAL;
  }
  uint64_t at = kind == 1 ? 24 : 0; /* the population header */
  learner_state_header_t *h = malloc(sizeof *h);
  if (!h) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  crc_reader_t cr = {&pr, 0, 0};
  int rc = LEARNER_OK;
  for (int k = 0; k <= i && !rc; k++) {
    cr.on = k == i; /* member i's bytes: its CRC-32 as they are walked */
    rc = learner_state_inspect(crc_read, &cr, h, NULL, NULL, err, errlen);
    if (!rc && k < i) at += h->bytes;
  }
  if (!rc) *off = at, *len = h->bytes, *crc32 = cr.crc;
  else prefix_member(err, errlen, 2, i);
  free(h);
  return rc;
}
