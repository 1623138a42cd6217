/* trainer.c — see trainer.h. */
#include "trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "log.h"

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int trainer_name_ok(const char *name) {
  size_t n = strlen(name);
  if (n < 1 || n > 64 || name[0] == '.') return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.'))
      return 0;
  }
  return 1;
}

static void trainer_free(trainer_t *t) {
  learner_destroy(t->l);
  workq_free(&t->q);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

void trainer_put(trainer_t *t) {
  if (t && atomic_fetch_sub(&t->refs, 1) == 1) trainer_free(t);
}

/* the worker's last act */
static void worker_exit(void *owner) {
  trainer_t *t = owner;
  server_t *s = t->srv;
  trainer_put(t);
  atomic_fetch_sub(&s->live_trainers, 1);
}

int trainer_register(server_t *s, const char *name, learner_t *l, const learner_config_t *created_with, int restoring,
                     trainer_t **out, char *err, size_t errlen) {
  pthread_mutex_lock(&s->reg_mu);
  int code = 0;
  for (int i = 0; i < s->n_trainers; i++)
    if (!strcmp(s->trainers[i]->name, name)) {
      snprintf(err, errlen, "name: trainer '%s' already exists", name);
      code = 6; /* ALREADY_EXISTS */
      goto out;
    }
  if (s->n_trainers >= s->opts.max_trainers) {
    snprintf(err, errlen, "name: the daemon holds its maximum of %d trainers", s->opts.max_trainers);
    code = 8; /* RESOURCE_EXHAUSTED */
    goto out;
  }
  if (!restoring) { /* the name is free and stays ours while reg_mu is held */
    char moved[1300], cerr[512];
    if (ckpt_retire(s->opts.state_dir, name, "replaced", moved, sizeof moved, cerr, sizeof cerr)) {
      snprintf(err, errlen, "state-dir: %s", cerr);
      code = 13;
      goto out;
    }
    if (moved[0]) log_warn(name, "a directory left under this name moved to %s", moved);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", s->opts.state_dir, name);
    if (ckpt_write_backend(dir, learner_backend_name(learner_backend(l)), cerr, sizeof cerr)) {
      snprintf(err, errlen, "state-dir: %s", cerr);
      code = 13;
      goto out;
    }
  }
  trainer_t *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "out of memory");
    code = 13;
    goto out;
  }
  t->srv = s;
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->dir, sizeof t->dir, "%s/%s", s->opts.state_dir, name);
  t->l = l;
  t->cfg = *learner_config(l);
  t->cfg_hash = learner_config_hash(created_with);
  pthread_mutex_init(&t->mu, NULL);
  t->last_active = now_s();
  atomic_store(&t->refs, 2); /* registry + worker */
  learner_get_stats(l, &t->stats);
  atomic_fetch_add(&s->live_trainers, 1);
  if (workq_init(&t->q, s->opts.queue_depth, t, worker_exit)) {
    atomic_fetch_sub(&s->live_trainers, 1);
    pthread_mutex_destroy(&t->mu);
    free(t);
    snprintf(err, errlen, "cannot start the trainer's worker thread");
    code = 13;
    goto out;
  }
  s->trainers[s->n_trainers++] = t;
  atomic_fetch_add(&t->refs, 1); /* the caller's */
  *out = t;
out:
  pthread_mutex_unlock(&s->reg_mu);
  return code;
}

trainer_t *trainer_get(server_t *s, const char *name) {
  trainer_t *t = NULL;
  pthread_mutex_lock(&s->reg_mu);
  for (int i = 0; i < s->n_trainers; i++)
    if (!strcmp(s->trainers[i]->name, name)) {
      t = s->trainers[i];
      atomic_fetch_add(&t->refs, 1);
      break;
    }
  pthread_mutex_unlock(&s->reg_mu);
  return t;
}

int trainer_list(server_t *s, trainer_t ***out) {
  pthread_mutex_lock(&s->reg_mu);
  int n = s->n_trainers;
  *out = calloc((size_t)(n ? n : 1), sizeof **out);
  if (!*out) n = 0;
  for (int i = 0; i < n; i++) {
    (*out)[i] = s->trainers[i];
    atomic_fetch_add(&s->trainers[i]->refs, 1);
  }
  pthread_mutex_unlock(&s->reg_mu);
  return n;
}

void trainer_unregister(trainer_t *t) {
  server_t *s = t->srv;
  int found = 0;
  pthread_mutex_lock(&s->reg_mu);
  for (int i = 0; i < s->n_trainers; i++)
    if (s->trainers[i] == t) {
      s->trainers[i] = s->trainers[--s->n_trainers];
      found = 1;
      break;
    }
  t->removed = 1;
  pthread_mutex_unlock(&s->reg_mu);
  if (found) trainer_put(t); /* the registry's reference */
}

void trainer_snapshot(trainer_t *t, int client_activity) {
  learner_stats_t st;
  learner_get_stats(t->l, &st);
  pthread_mutex_lock(&t->mu);
  t->stats = st;
  if (client_activity) t->last_active = now_s();
  pthread_mutex_unlock(&t->mu);
}
