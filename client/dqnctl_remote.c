/*
 * dqnctl_remote.c — what every `dqnctl demo` environment shares: the demo
 * driver (demo_driver.h) over a trainer on the daemon, and the demo's new
 * trainer (its whole config sent as fields, a name that never takes over an
 * existing trainer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dqnctl_remote.h"

static int r_submit(void *p, const learner_transitions_t *t) {
  remote_t *r = p;
  return r->rc = dqnd_submit(r->x->c, r->name, r->state_dim, t, NULL);
}
static int r_step(void *p, int n, learner_stats_t *st) {
  remote_t *r = p;
  r->rc = dqnd_step(r->x->c, r->name, n, st);
  return r->rc == DQND__V1__CODE__FAILED_PRECONDITION /* not a batch yet */ ? (r->rc = 0) : r->rc;
}
static int r_act(void *p, const float *s, int n, int noisy, uint64_t episode, int32_t *a) {
  remote_t *r = p;
  return r->rc = dqnd_act_episode(r->x->c, r->name, s, n, r->state_dim, noisy && r->noisy, episode, a, NULL, NULL, 0);
}

static int r_pretrain_dt(void *p, int n, learner_dt_stats_t *st) {
  remote_t *r = p;
  return r->rc = dqnd_pretrain_dt(r->x->c, r->name, n, st, NULL);
}
static int r_act_dt(void *p, const learner_dt_window_t *w, int32_t *a) {
  remote_t *r = p;
  return r->rc = dqnd_act_dt(r->x->c, r->name, r->state_dim, w, a);
}

void remote_driver(demo_driver_t *d, remote_t *r) {
  d->ctx = r;
  d->submit = r_submit;
  d->step = r_step;
  d->act = r_act;
  d->pretrain_dt = r_pretrain_dt;
  d->act_dt = r_act_dt;
}

int demo_apply_fields(const char *cmd, const cli_args_t *a, learner_config_t *c) {
  char err[300];
  if (demo_config_set_fields(c, a->fields, a->nfields, err, sizeof err))
    return fprintf(stderr, "%s: %s\n", cmd, err), EXIT_USAGE;
  return 0;
}

int demo_create(ctx_t *x, const char *cmd, const cli_args_t *a, const learner_config_t *c, char *name, size_t n) {
  return demo_create_as(x, cmd, opt(x, a, "--name"), opt(x, a, "--backend"), c, name, n);
}

int demo_create_as(ctx_t *x, const char *cmd, const char *given, const char *backend, const learner_config_t *c,
                   char *name, size_t n) {
  /* the whole config travels as fields, so the daemon's defaults do not matter */
  const char **fields = malloc(sizeof(char *) * (size_t)learner_num_fields);
  char (*store)[160] = malloc(sizeof *store * (size_t)learner_num_fields);
  if (!fields || !store) {
    free(fields), free(store);
    return fprintf(stderr, "%s: out of memory\n", cmd), EXIT_LOCAL;
  }
  for (int i = 0; i < learner_num_fields; i++) {
    char v[128];
    learner_config_get(c, &learner_fields[i], v, sizeof v);
    snprintf(store[i], sizeof store[i], "%s=%s", learner_fields[i].name, v);
    fields[i] = store[i];
  }
  int rc = demo_new_trainer(x, cmd, given, fields, learner_num_fields, backend, name, n);
  free(fields), free(store);
  return rc;
}

/* A new trainer, never one that was there: CreateTrainer answers "created"
 * only for a name it made now, so a name that exists (with this config or
 * another) is refused when given, or skipped for the next free one. */
int demo_new_trainer(ctx_t *x, const char *cmd, const char *given, const char *const *fields, int nf,
                     const char *backend, char *name, size_t n) {
  int created = 0;
  for (int k = 1; k <= 100 && !created; k++) {
    if (given) snprintf(name, n, "%s", given);
    else if (k == 1) snprintf(name, n, "demo");
    else snprintf(name, n, "demo-%d", k);
    int rc = dqnd_create_trainer(x->c, name, fields, nf, backend, &created);
    if (rc && rc != DQND__V1__CODE__ALREADY_EXISTS /* another config under that name */) return fail_rc(x, rc);
    if (!created && given) {
      fprintf(stderr, "%s: trainer '%s' already exists; the demo never trains or replaces a trainer it did not "
                      "create: pick another --name, or `dqnctl destroy %s` first\n", cmd, name, name);
      return EXIT_SERVER;
    }
  }
  if (!created) return fprintf(stderr, "%s: demo .. demo-100 all exist; give --name\n", cmd), EXIT_SERVER;
  return 0;
}
