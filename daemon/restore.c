/* restore.c — see restore.h. */
#include "restore.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>

#include "checkpoint.h"
#include "log.h"
#include "trainer.h"
#include "verdict.h"

static learner_backend_t backend_of(server_t *s, const char *dir, const char *name) {
  char b[32];
  if (ckpt_read_meta(dir, "backend", b, sizeof b)) return s->backend;
  if (!strcmp(b, "cpu")) return LEARNER_BACKEND_CPU;
  if (!strcmp(b, "cuda")) {
    if (learner_backend_default() == LEARNER_BACKEND_CUDA) return LEARNER_BACKEND_CUDA;
    log_warn(name, "created on the cuda backend, but no usable GPU is here: restoring on the cpu");
    return LEARNER_BACKEND_CPU;
  }
  return s->backend;
}

/* 1 restored, 0 not */
static int restore_one(server_t *s, const char *name) {
  char dir[1200], err[512];
  snprintf(dir, sizeof dir, "%.1100s/%s", s->opts.state_dir, name);
  ckpt_clean_tmp(dir);
  ckpt_info_t *all;
  int n;
  if (ckpt_list(dir, &all, &n)) {
    log_error(name, "not restored: cannot read %s", dir);
    return 0;
  }
  if (n == 0) {
    log_warn(name, "not restored: %s holds no checkpoint (it stopped before its first)", dir);
    free(all);
    return 0;
  }
  learner_backend_t be = backend_of(s, dir, name);
  int ok = 0, said = 0;
  for (int i = n - 1; i >= 0 && !ok; i--) {
    sd_notifyf(0, "STATUS=restoring %s from %s\nEXTEND_TIMEOUT_USEC=%llu", name, all[i].id, 120000000ULL);
    learner_pop_t *l;
    int lrc = ckpt_load_file(all[i].path, be, &l, err, sizeof err);
    if (lrc == CKPT_ENOMEM || lrc == CKPT_EUNSUPPORTED || lrc == CKPT_EDEVICE) {
      /* not the file's fault: an older checkpoint of the same trainer needs as
       * much, of the same build and device: not tried */
      log_error(name, "not restored: %s (its checkpoints are kept in %s)", err, dir);
      said = 1;
      break;
    }
    if (lrc) {
      log_warn(name, "skipping checkpoint %s: %s%s", all[i].id, err, i ? " (trying the next-newest)" : "");
      continue;
    }
    learner_config_t cfg = *learner_config(learner_pop_member(l, 0));
    char verr[512], *verdict;
    verdict_restore(dir, name, l, verr, sizeof verr, &verdict); /* members that had diverged stay so */
    trainer_t *t;
    int code = trainer_register(s, name, l, &cfg, 1, &t, err, sizeof err);
    if (code) {
      free(verdict);
      learner_pop_destroy(l);
      log_error(name, "not restored: %s", err);
      said = 1;
      break;
    }
    t->verdict = verdict; /* no job has run yet: the worker's field is still ours */
    pthread_mutex_lock(&t->mu);
    t->n_diverged = learner_pop_n_diverged(l);
    if (verr[0]) {
      snprintf(t->error, sizeof t->error, "%s", verr);
      t->diverged = 1;
    }
    pthread_mutex_unlock(&t->mu);
    log_info(name, "restored from %s: step %llu, %s backend%s", all[i].id, (unsigned long long)t->stats.step,
             learner_backend_name(t->backend), i < n - 1 ? " (newer checkpoints failed: see above)" : "");
    trainer_put(t);
    ok = 1;
  }
  if (!ok && !said) log_error(name, "not restored: none of its %d checkpoints loads (files kept in %s)", n, dir);
  free(all);
  return ok;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int restore_trainers(server_t *s) {
  DIR *d = opendir(s->opts.state_dir);
  if (!d) return 0;
  char **names = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!trainer_name_ok(e->d_name)) continue; /* ".", "..", ".retired" and anything not a trainer */
    char p[1400];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", s->opts.state_dir, e->d_name);
    if (stat(p, &st) || !S_ISDIR(st.st_mode)) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      char **q = realloc(names, sizeof *names * (size_t)cap);
      if (!q) break;
      names = q;
    }
    names[n] = strdup(e->d_name);
    if (names[n]) n++;
  }
  closedir(d);
  if (n > 1) qsort(names, (size_t)n, sizeof *names, name_cmp); /* a stable order in the log (names is NULL at 0) */
  int restored = 0;
  for (int i = 0; i < n; i++) {
    if (restored < s->opts.max_trainers) restored += restore_one(s, names[i]);
    else log_error(names[i], "not restored: the daemon holds its maximum of %d trainers", s->opts.max_trainers);
    free(names[i]);
  }
  free(names);
  if (n) log_info(NULL, "restored %d of %d trainers from %s", restored, n, s->opts.state_dir);
  return restored;
}
