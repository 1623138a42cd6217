/* trainer.c — see trainer.h. */
#include "trainer.h"
#include "verdict.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "wire.h"

/* a job turned away: its call answered through the server's refuse hook */
static void refuse(trainer_job_t *j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse(trainer_job_t *j, int code, const char *fmt, ...) {
  if (!j->c) return;
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  j->s->refuse(j->c, code, msg);
}


int trainer_name_reserved(const char *name) { return !strcmp(name, "dqnd.lock"); }

int trainer_name_ok(const char *name) {
  size_t n = strlen(name);
  if (n < 1 || n > 64 || name[0] == '.' || trainer_name_reserved(name)) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.'))
      return 0;
  }
  return 1;
}

static void trainer_free(trainer_t *t) {
  learner_pop_destroy(t->p);
  free(t->train_credit);
  free(t->verdict);
  workq_free(&t->q);
  pthread_mutex_destroy(&t->mu);
  pthread_mutex_destroy(&t->run_mu);
  free(t);
}

void trainer_put(trainer_t *t) {
  if (t && atomic_fetch_sub(&t->refs, 1) == 1) trainer_free(t);
}

/* the worker's last act: the learner goes here, on the worker (its replay's
 * memory, CUDA's frees and graph teardown), not wherever the trainer's last
 * reference happens to be dropped (an nng callback or the metrics thread,
 * which never touch a learner); no job runs after this, and nothing else
 * reads t->p */
static void worker_exit(void *owner) {
  trainer_t *t = owner;
  server_t *s = t->srv;
  learner_pop_destroy(t->p);
  t->p = NULL;
  trainer_put(t);
  atomic_fetch_sub(&s->live_trainers, 1);
}

/* 0 when `name` is free and there is room; else the code, with err set (reg_mu held) */
static int name_free(server_t *s, const char *name, char *err, size_t errlen) {
  for (int i = 0; i < s->n_trainers; i++)
    if (!strcmp(s->trainers[i]->name, name)) {
      snprintf(err, errlen, "name: trainer '%s' already exists", name);
      return CODE_ALREADY_EXISTS;
    }
  if (s->n_trainers >= s->opts.max_trainers) {
    snprintf(err, errlen, "name: the daemon holds its maximum of %d trainers", s->opts.max_trainers);
    return CODE_RESOURCE_EXHAUSTED;
  }
  return 0;
}

/* once shutdown began, no new trainer: the drain queued a final save for the
 * ones it found and waits for them alone, so one registered later kept the
 * daemon from exiting until systemd killed it. 0, or UNAVAILABLE (14). */
static int refuse_when_draining(server_t *s, const char *name, char *err, size_t errlen) {
  if (!atomic_load(&s->draining)) return 0;
  snprintf(err, errlen, "name: the daemon is shutting down; create or load '%s' after it restarts", name);
  return CODE_UNAVAILABLE;
}

int trainer_register(server_t *s, const char *name, learner_pop_t *p, const learner_config_t *created_with,
                     int restoring, trainer_t **out, char *err, size_t errlen) {
  learner_t *l = learner_pop_member(p, 0);
  /* before the trainer's files are written; again under reg_mu below, where
   * the drain's trainer_list cannot miss it */
  if (refuse_when_draining(s, name, err, errlen)) return CODE_UNAVAILABLE;
  pthread_mutex_lock(&s->reg_mu);
  int code = name_free(s, name, err, errlen);
  pthread_mutex_unlock(&s->reg_mu);
  if (code) return code;
  /* The trainer's files are written outside reg_mu, which every request's
   * lookup takes: registrations run one at a time (creates and loads on the
   * admin worker, restores before the sockets open), so the name stays free
   * meanwhile; it is checked again below all the same. */
  char dir[1200], cerr[512], hash_text[32];
  snprintf(dir, sizeof dir, "%.1100s/%s", s->opts.state_dir, name);
  uint64_t hash = learner_config_hash(created_with);
  if (!restoring) {
    char moved[1300];
    if (ckpt_retire(s->opts.state_dir, name, "replaced", moved, sizeof moved, cerr, sizeof cerr)) {
      snprintf(err, errlen, "state-dir: %s", cerr);
      return CODE_INTERNAL;
    }
    if (moved[0]) log_warn(name, "a directory left under this name moved to %s", moved);
    snprintf(hash_text, sizeof hash_text, "%016llx", (unsigned long long)hash);
    if (ckpt_write_meta(dir, "backend", learner_backend_name(learner_backend(l)), cerr, sizeof cerr) ||
        ckpt_write_meta(dir, "config_hash", hash_text, cerr, sizeof cerr)) {
      snprintf(err, errlen, "state-dir: %s", cerr);
      return CODE_INTERNAL;
    }
  } else if (ckpt_read_meta(dir, "config_hash", hash_text, sizeof hash_text) == 0) {
    /* the hash of the config it was created with: its checkpoint holds the
     * current hyperparameters, which SetHyperparams may have changed */
    hash = strtoull(hash_text, NULL, 16);
  }
  trainer_t *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return CODE_INTERNAL;
  }
  t->srv = s;
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->dir, sizeof t->dir, "%s", dir);
  t->train_credit = calloc((size_t)learner_pop_size(p), sizeof *t->train_credit);
  if (!t->train_credit) {
    free(t);
    snprintf(err, errlen, "out of memory");
    return CODE_INTERNAL;
  }
  t->p = p;
  t->population = learner_pop_size(p);
  t->backend = learner_backend(l);
  t->memory = learner_pop_memory_estimate(learner_config(l), learner_pop_size(p), t->backend);
  t->cfg = *learner_config(l);
  t->cfg_hash = hash;
  pthread_mutex_init(&t->mu, NULL);
  pthread_mutex_init(&t->run_mu, NULL);
  t->last_active = now_s();
  atomic_store(&t->refs, 2); /* registry + worker */
  learner_get_stats(l, &t->stats);
  learner_get_hparams(l, &t->hp);
  pthread_mutex_lock(&s->reg_mu);
  code = name_free(s, name, err, errlen);
  if (!code) code = refuse_when_draining(s, name, err, errlen);
  if (!code) {
    atomic_fetch_add(&s->live_trainers, 1);
    if (workq_init(&t->q, s->opts.queue_depth, t, worker_exit)) {
      atomic_fetch_sub(&s->live_trainers, 1);
      snprintf(err, errlen, "cannot start the trainer's worker thread");
      code = CODE_INTERNAL;
    }
  }
  if (code) {
    pthread_mutex_unlock(&s->reg_mu);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->run_mu);
    free(t->train_credit);
    free(t);
    return code;
  }
  s->trainers[s->n_trainers++] = t;
  atomic_fetch_add(&t->refs, 1); /* the caller's */
  *out = t;
  pthread_mutex_unlock(&s->reg_mu);
  return 0;
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

/* the name becomes free; the worker calls it when the trainer stops */
static void trainer_unregister(trainer_t *t) {
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
  learner_hparams_t hp;
  learner_get_stats(trainer_member(t, 0), &st);
  learner_get_hparams(trainer_member(t, 0), &hp);
  const int n_div = learner_pop_n_diverged(t->p);
  pthread_mutex_lock(&t->mu);
  t->stats = st;
  t->hp = hp;
  t->n_diverged = n_div;
  if (client_activity) t->last_active = now_s();
  pthread_mutex_unlock(&t->mu);
}

/* ---------------------------------------------------------------- jobs */

trainer_job_t *trainer_job_new(server_t *s, trainer_t *t, rpc_call_t *c, trainer_job_fn run) {
  trainer_job_t *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->run = run;
  j->s = s;
  j->t = t;
  j->c = c;
  return j;
}

void trainer_job_free(trainer_job_t *j) {
  if (!j) return;
  if (j->loaded) learner_pop_destroy(j->loaded);
  if (j->t) trainer_put(j->t);
  free(j);
}

/* the worker: one job, in queue order */
static void job_run(void *owner, void *arg) {
  (void)owner;
  trainer_job_t *j = arg;
  trainer_t *t = j->t;
  if (j->c && j->expires && j->deadline > 0 && now_s() > j->deadline) {
    log_info(t ? t->name : NULL, "a request waited in the queue past its deadline (its client gave up): not run");
    refuse(j, CODE_DEADLINE_EXCEEDED,
           "deadline: the request waited in trainer '%s''s queue past its deadline (timeout_ms) and did not run",
           t ? t->name : "");
    trainer_job_free(j);
    return;
  }
  if (t && j->c && !j->any_state) {
    char why[600] = "";
    pthread_mutex_lock(&t->mu);
    if (t->error[0]) snprintf(why, sizeof why, "%s", t->error);
    pthread_mutex_unlock(&t->mu);
    int diverged = t->diverged;
    if (why[0] && diverged && j->diverged_ok) why[0] = 0;
    if (why[0]) {
      if (diverged)
        refuse(j, CODE_FAILED_PRECONDITION,
               "name: trainer '%s' stopped training: %s (SetHyperparams resumes it, %sLoadCheckpoint replaces it)",
               t->name, why, t->population > 1 ? "CopyMember or a member's LoadCheckpoint resume it, " : "");
      else
        refuse(j, CODE_UNAVAILABLE, "name: trainer '%s' is in an error state: %s", t->name, why);
      trainer_job_free(j);
      return;
    }
  }
  j->run(j);
  if (t && !t->removed) {
    trainer_snapshot(t, j->c != NULL);
    /* a divergence, or its end, is kept for a restart (n_diverged: the
     * snapshot's count; this worker is its only writer) */
    if (t->verdict || t->n_diverged) {
      char error[512] = "";
      pthread_mutex_lock(&t->mu);
      if (t->diverged) snprintf(error, sizeof error, "%s", t->error);
      pthread_mutex_unlock(&t->mu);
      /* a line goes (a member the verdict names trains again) only with a
       * checkpoint of the resumed state (trainer_save syncs the verdict): a
       * crash before one restores the state that diverged, which its line
       * must still stop */
      if (!(t->verdict && verdict_lifts(t->verdict, t->p))) verdict_sync(t->dir, t->name, t->p, error, &t->verdict);
    }
  }
  trainer_job_free(j);
}

int trainer_enqueue(trainer_job_t *j) { return workq_push(j->t ? &j->t->q : &j->s->admin, job_run, j); }

/* Member i back to its state in checkpoint info (a lone trainer's bytes
 * within the population's file: learner_pop_member_range), marked diverged. */
static int member_from_checkpoint(trainer_t *t, int i, const ckpt_info_t *info, char *err, size_t errlen) {
  ckpt_reader_t rd = {info, 0, info->bytes};
  uint64_t off, len;
  uint32_t crc;
  int rc = learner_pop_member_range(ckpt_reader, &rd, i, &off, &len, &crc, err, errlen);
  if (rc) return rc;
  unsigned char *buf = len <= SIZE_MAX ? malloc((size_t)len) : NULL;
  size_t got = 0;
  if (!buf) return snprintf(err, errlen, "out of memory for its %llu bytes", (unsigned long long)len), -1;
  if (ckpt_read_chunk(info, off, buf, (size_t)len, &got) || got != len) {
    free(buf);
    return snprintf(err, errlen, "reading %s failed", info->id), -1;
  }
  learner_pop_t *l = NULL;
  rc = ckpt_load_mem(buf, (size_t)len, learner_backend(trainer_member(t, 0)), &l, err, errlen);
  free(buf);
  if (rc) return rc;
  rc = learner_pop_load_member(t->p, i, learner_pop_member(l, 0), err, errlen);
  learner_pop_destroy(l);
  if (!rc) learner_pop_mark_diverged(t->p, i);
  return rc;
}

/* A population whose member's state is not finite (an update overflowed
 * while its loss stayed finite, so no step was refused) would keep every
 * member from being saved. Each such member goes back to its state in the
 * newest checkpoint, its last saved good one, and stops training alone, as a
 * member whose step diverged does; the others' state is then saved. 0 when
 * each such member went back, else -1 (err: why, naming the member); not
 * done where no member's state is finite. */
static int heal_members(trainer_t *t, char *err, size_t errlen) {
  const int P = t->population;
  int bad = 0;
  for (int i = 0; i < P; i++) bad += !learner_state_finite(trainer_member(t, i));
  if (!bad || bad == P) return -1;
  ckpt_info_t info;
  char why[512];
  if (ckpt_find(t->dir, "", &info, why, sizeof why))
    return snprintf(err, errlen, "no checkpoint of trainer '%s' to take its last good state from", t->name), -1;
  for (int i = 0; i < P; i++) {
    if (learner_state_finite(trainer_member(t, i))) continue;
    if (member_from_checkpoint(t, i, &info, why, sizeof why))
      return snprintf(err, errlen, "member %d's state could not be taken back from checkpoint %s: %.300s", i, info.id,
                      why),
             -1;
    log_error(t->name, "member %d's parameters or Adam moments were not finite: it went back to its state in "
              "checkpoint %s and stopped training (SetHyperparams resumes it, CopyMember replaces it)", i, info.id);
  }
  return 0;
}

int trainer_save(trainer_t *t, int with_replay, int pin, ckpt_info_t *info, char *err, size_t errlen) {
  /* a state that would not load again (a diverged trainer's Adam moments can
   * overflow while its parameters stay finite) is not written (learner_save
   * refuses it): each save prunes the oldest checkpoint, so periodic saves
   * would have replaced every good one by files that cannot be loaded */
  int rc = ckpt_write(t->dir, t->p, with_replay, t->srv->opts.keep_checkpoints, pin, info, err, errlen);
  char herr[700] = "";
  if (rc == CKPT_ENONFINITE && t->population > 1) { /* the other members' work is not lost to one */
    if (!heal_members(t, herr, sizeof herr)) {
      pthread_mutex_lock(&t->mu);
      if (learner_pop_n_diverged(t->p) == t->population) /* the last to go: the trainer stops training */
        snprintf(t->error, sizeof t->error, "diverged: every member diverged, the last with a state not finite"),
            t->diverged = 1;
      pthread_mutex_unlock(&t->mu);
      rc = ckpt_write(t->dir, t->p, with_replay, t->srv->opts.keep_checkpoints, pin, info, err, errlen);
    } else if (herr[0])
      log_error(t->name, "a member's state is not finite, and %s", herr);
  }
  if (rc == 0) {
    log_info(t->name, "checkpoint %s (%llu bytes)", info->id, (unsigned long long)info->bytes);
    /* the verdict beside it describes the state just saved (a member that
     * trains again loses its line now, not before; a shutdown's final save
     * has no job after it) */
    if (t->verdict || learner_pop_n_diverged(t->p)) {
      char error[512] = "";
      pthread_mutex_lock(&t->mu);
      if (t->diverged) snprintf(error, sizeof error, "%s", t->error);
      pthread_mutex_unlock(&t->mu);
      verdict_sync(t->dir, t->name, t->p, error, &t->verdict);
    }
  }
  else if (rc == CKPT_ENONFINITE) {
    char tail[1100] = ""; /* which member (err: "writing checkpoint: member i: state: section ...") */
    if (t->population > 1) snprintf(tail, sizeof tail, " (%.300s%s%.200s)", err, herr[0] ? "; " : "", herr);
    snprintf(err, errlen,
             "state: trainer '%s''s parameters or Adam moments are not finite (it diverged), so it was not saved and "
             "its earlier checkpoints are kept: load one%s",
             t->name, tail);
    log_error(t->name, "checkpoint not written: %s", err);
    for (int i = 0; i < t->population; i++)
      if (learner_state_finite(trainer_member(t, i))) return TRAINER_SAVE_MEMBER_NOT_FINITE;
    return TRAINER_SAVE_NOT_FINITE;
  } else
    log_error(t->name, "checkpoint failed: %s", err);
  return rc ? -1 : 0;
}

int trainer_retire(trainer_t *t, const char *why, char *moved, size_t n) {
  char err[512];
  if (ckpt_retire(t->srv->opts.state_dir, t->name, why, moved, n, err, sizeof err)) {
    log_error(t->name, "%s", err);
    return -1;
  }
  if (moved[0]) log_info(t->name, "checkpoints moved to %s", moved);
  return 0;
}

void trainer_stop(trainer_t *t, const char *why) {
  trainer_unregister(t);
  workq_close(&t->q);
  workq_job_t jobs[64];
  int n;
  while ((n = workq_drain(&t->q, jobs, 64)) > 0)
    for (int i = 0; i < n; i++) {
      trainer_job_t *j = jobs[i].arg;
      refuse(j, CODE_UNAVAILABLE, "name: trainer '%s' was %s", t->name, why);
      trainer_job_free(j);
    }
}

void trainer_note_error(trainer_t *t, int learner_rc, const char *err) {
  if (learner_rc != LEARNER_EDEVICE) return;
  pthread_mutex_lock(&t->mu);
  snprintf(t->error, sizeof t->error, "%.200s", err);
  pthread_mutex_unlock(&t->mu);
  log_error(t->name, "device error, trainer disabled: %s", err);
}

void trainer_resume(trainer_t *t) {
  if (!t->diverged) return;
  pthread_mutex_lock(&t->mu);
  t->error[0] = 0;
  t->diverged = 0;
  pthread_mutex_unlock(&t->mu);
  log_info(t->name, "training resumes from its last good state");
}

void trainer_note_diverged(trainer_t *t, const char *err, char *msg, size_t n) {
  ckpt_info_t info;
  char serr[512], where[1400];
  const int rc = trainer_save(t, t->srv->opts.checkpoint_replay, 0, &info, serr, sizeof serr);
  if (rc == 0)
    snprintf(where, sizeof where, "its last good state is saved as checkpoint %s", info.path);
  else if (rc != TRAINER_SAVE_NOT_FINITE)
    snprintf(where, sizeof where, "its last good state is kept, but saving it failed: %.300s", serr);
  else
    snprintf(where, sizeof where,
             "its kept parameters or Adam moments are not finite either (an update overflowed before the loss "
             "did), so nothing was saved: load an earlier checkpoint");
  snprintf(msg, n, "%.300s; %s", err, where);
  pthread_mutex_lock(&t->mu);
  snprintf(t->error, sizeof t->error, "diverged: %.450s", err);
  t->diverged = 1;
  pthread_mutex_unlock(&t->mu);
  log_error(t->name, "training diverged, trainer stopped training: %s", msg);
}

/* The rate limit: the owed steps run right after the submit, on this worker,
 * so later commands queue behind them. Fractions carry over. */
void trainer_train_continuous(trainer_t *t, int member, uint32_t inserted, int64_t replay_size) {
  learner_hparams_t hp;
  learner_get_hparams(trainer_member(t, member), &hp);
  if (!(hp.samples_per_insert > 0)) return;
  int batch = t->cfg.batch;
  if (replay_size < batch || replay_size < hp.min_replay) return;
  double *credit = &t->train_credit[member];
  *credit += (double)hp.samples_per_insert * inserted / batch;
  /* one learner_step call takes at most LEARNER_MAX_STEPS steps: a backlog past
   * that (samples_per_insert 1e6 at batch 1, say) is dropped with a warning,
   * not cast to an int that overflows (a review find) nor left to grow */
  int n = *credit >= LEARNER_MAX_STEPS ? LEARNER_MAX_STEPS : (int)*credit;
  if (n <= 0) return;
  *credit -= n;
  if (*credit >= 1.0) {
    log_warn(t->name, "continuous training: %.0f owed steps dropped (samples_per_insert %g x %u inserted / batch %d "
             "owes more than %d a submit)", floor(*credit), (double)hp.samples_per_insert, inserted, batch,
             LEARNER_MAX_STEPS);
    *credit -= floor(*credit);
  }
  char err[512];
  learner_stats_t st = {0};
  if (trainer_long_begin(t, 0, 0, err, sizeof err)) return; /* shutting down: the final save comes next */
  double t0 = now_s();
  int rc = learner_pop_step_member(t->p, member, n, NULL, &st, err, sizeof err);
  const int why = trainer_long_end(t);
  metrics_steps(st.steps_run, now_s() - t0); /* the steps applied, also when a later one failed */
  if (rc == LEARNER_EDIVERGED && learner_pop_n_diverged(t->p) == t->population) {
    char msg[1600];
    trainer_note_diverged(t, err, msg, sizeof msg);
  } else if (rc == LEARNER_EDIVERGED) {
    log_warn(t->name, "continuous training: %s (skipped until SetHyperparams or CopyMember names it)", err);
  } else if (rc == LEARNER_ESTOPPED) {
    log_info(t->name, "continuous training: %s (%s)", err, why == TRAINER_STOP_SHUTDOWN ? "shutdown" : "cancelled");
  } else if (rc) {
    trainer_note_error(t, rc, err);
    log_warn(t->name, "continuous training: %s", err);
  }
}

/* the metrics' trainer source (metrics.h): the registry's list (reg_mu,
 * briefly), then each one's snapshot under its own mutex */
int trainer_metrics_list(server_t *s, metrics_trainer_t **out) {
  trainer_t **ts;
  int n = trainer_list(s, &ts);
  metrics_trainer_t *t = calloc((size_t)(n ? n : 1), sizeof *t);
  for (int i = 0; i < n; i++) {
    if (t) {
      snprintf(t[i].name, sizeof t[i].name, "%s", ts[i]->name);
      t[i].queued = workq_pending(&ts[i]->q);
      t[i].members = ts[i]->population;
      pthread_mutex_lock(&ts[i]->mu);
      t[i].replay_size = ts[i]->stats.replay_size;
      t[i].step = ts[i]->stats.step;
      t[i].diverged = ts[i]->n_diverged;
      t[i].memory = ts[i]->memory;
      t[i].error = ts[i]->error[0] && !ts[i]->diverged;
      pthread_mutex_unlock(&ts[i]->mu);
    }
    trainer_put(ts[i]);
  }
  free(ts);
  *out = t;
  return t ? n : -1;
}

/* --------------------------------------------------- stopping long work */

/* run_mu orders the worker's begin and end against Cancel and shutdown: a
 * stop asked while nothing runs is either seen by the next begin (draining,
 * a cancelled request_id) or has nothing to stop; the learner's flag is only
 * set while the worker, which alone swaps t->p, is inside a long command. */
int trainer_long_begin(trainer_t *t, uint64_t rid, double deadline, char *err, size_t errlen) {
  int code = 0;
  pthread_mutex_lock(&t->run_mu);
  if (atomic_load(&t->srv->draining)) {
    snprintf(err, errlen, "name: trainer '%s': the daemon is shutting down (nothing ran)", t->name);
    code = CODE_UNAVAILABLE;
  }
  for (int i = 0; !code && rid && i < t->n_cancelled; i++)
    if (t->cancelled[i] == rid) {
      t->cancelled[i] = t->cancelled[--t->n_cancelled];
      snprintf(err, errlen, "name: trainer '%s': cancelled while it was queued (nothing ran)", t->name);
      code = CODE_CANCELLED;
    }
  if (!code && deadline > 0 && now_s() >= deadline) {
    snprintf(err, errlen, "name: trainer '%s': its deadline (the request's timeout_ms) passed while it was queued "
             "(nothing ran)", t->name);
    code = CODE_DEADLINE_EXCEEDED;
  }
  if (!code) {
    t->running = 1;
    t->running_rid = rid;
    t->stop_reason = 0;
    *learner_pop_stop_flag(t->p) = 0;
  }
  pthread_mutex_unlock(&t->run_mu);
  return code;
}

int trainer_long_end(trainer_t *t) {
  pthread_mutex_lock(&t->run_mu);
  const int why = t->stop_reason;
  t->running = 0;
  t->running_rid = 0;
  t->stop_reason = 0;
  *learner_pop_stop_flag(t->p) = 0;
  pthread_mutex_unlock(&t->run_mu);
  return why;
}

/* a queued job of request rid (workq_take) */
static int job_is_request(void *arg, void *ctx) {
  const trainer_job_t *j = arg;
  return j->c && j->request_id == *(const uint64_t *)ctx;
}

const char *trainer_cancel(trainer_t *t, uint64_t rid) {
  const char *found = "none";
  pthread_mutex_lock(&t->run_mu);
  if (t->running && (rid == 0 || rid == t->running_rid)) {
    t->stop_reason = TRAINER_STOP_CANCEL;
    *learner_pop_stop_flag(t->p) = 1;
    found = "running";
  } else if (rid) {
    trainer_job_t *j = workq_take(&t->q, job_is_request, &rid);
    if (j) { /* still queued: answered now, never run */
      refuse(j, CODE_CANCELLED, "name: trainer '%s': cancelled while it was queued (nothing ran)", t->name);
      trainer_job_free(j);
      found = "queued";
    } else {
      /* not queued (any more, or not yet): noted, for the worker may have
       * taken it off an instant ago and not yet reached trainer_long_begin,
       * or the Cancel overtook its Step on the way */
      const int cap = (int)(sizeof t->cancelled / sizeof t->cancelled[0]);
      if (t->n_cancelled == cap) { /* the oldest goes */
        memmove(t->cancelled, t->cancelled + 1, sizeof t->cancelled[0] * (size_t)(cap - 1));
        t->n_cancelled--;
      }
      t->cancelled[t->n_cancelled++] = rid;
    }
  }
  pthread_mutex_unlock(&t->run_mu);
  return found;
}

void trainer_stop_running(trainer_t *t) {
  pthread_mutex_lock(&t->run_mu);
  if (t->running) {
    t->stop_reason = TRAINER_STOP_SHUTDOWN;
    *learner_pop_stop_flag(t->p) = 1;
  }
  pthread_mutex_unlock(&t->run_mu);
}

/* ------------------------------------------------------- internal jobs */

/* 1 when t is in an error state (a device error: its state is not known
 * good): the internal saves leave its checkpoints as they are, so the last
 * good one is not pruned by a state that may be garbage */
static int in_error(trainer_t *t) {
  pthread_mutex_lock(&t->mu);
  const int e = t->error[0] != 0 && !t->diverged; /* a diverged one keeps its last good state: that saves */
  pthread_mutex_unlock(&t->mu);
  return e;
}

static void run_periodic_save(trainer_job_t *j) {
  ckpt_info_t info;
  char err[512];
  if (in_error(j->t)) return;
  trainer_save(j->t, j->s->opts.checkpoint_replay, 0, &info, err, sizeof err);
}

/* shutdown: the final checkpoint stays where a restart finds it */
static void run_final(trainer_job_t *j) {
  ckpt_info_t info;
  char err[512];
  if (in_error(j->t)) { /* its last good checkpoint is what a restart should find */
    log_error(j->t->name, "in an error state: no final checkpoint (the last good one stays the newest; the work since "
              "it is lost, which the exit status reports)");
    atomic_fetch_add(&j->s->final_failed, 1);
    trainer_stop(j->t, "unloaded");
    return;
  }
  const int rc = trainer_save(j->t, j->s->opts.checkpoint_replay, 0, &info, err, sizeof err);
  /* a diverged state has nothing to save (its earlier checkpoints stand);
   * any other failure, a population member's state that kept the others
   * from being saved included, loses the work since the last checkpoint:
   * the exit status says so (main.c) */
  if (rc && rc != TRAINER_SAVE_NOT_FINITE) atomic_fetch_add(&j->s->final_failed, 1);
  trainer_stop(j->t, "unloaded");
}

/* idle timeout: saved and unloaded for good (a restart does not bring it back;
 * LoadCheckpoint from the retired directory does) */
static void run_unload(trainer_job_t *j) {
  trainer_t *t = j->t;
  ckpt_info_t info;
  char err[512], moved[1300];
  /* a client command queued between the idle check and this job ran first:
   * the trainer is no longer idle */
  pthread_mutex_lock(&t->mu);
  const double idle = now_s() - t->last_active;
  pthread_mutex_unlock(&t->mu);
  if (idle <= j->s->opts.idle_timeout) return;
  /* a state that is not finite (it diverged) has nothing to save: unloaded
   * all the same, its earlier checkpoints moved aside with it (kept loaded,
   * it failed the save at every idle check for good); one in an error state
   * is not saved either (its state is not known good) */
  const int rc = in_error(t) ? TRAINER_SAVE_NOT_FINITE
                             : trainer_save(t, j->s->opts.checkpoint_replay, 0, &info, err, sizeof err);
  if ((rc && rc != TRAINER_SAVE_NOT_FINITE) || trainer_retire(t, "unloaded", moved, sizeof moved)) {
    log_warn(t->name, "idle, but kept loaded: its checkpoint could not be written or moved aside");
    return;
  }
  if (rc)
    log_warn(t->name, "idle: unloaded with no new checkpoint (its state is not finite or not known good; the earlier "
             "ones are in %s)", moved);
  trainer_stop(t, "unloaded");
}

/* force: past the queue's limit (the final save must not be refused) */
static int enqueue_internal(trainer_t *t, trainer_job_fn run, int force) {
  trainer_job_t *j = trainer_job_new(t->srv, t, NULL, run);
  if (!j) return WORKQ_FULL;
  atomic_fetch_add(&t->refs, 1); /* the job's */
  int rc = force ? workq_push_force(&t->q, job_run, j) : workq_push(&t->q, job_run, j);
  if (rc) trainer_job_free(j);
  return rc;
}

int trainer_enqueue_save(trainer_t *t) { return enqueue_internal(t, run_periodic_save, 0); }
int trainer_enqueue_final(trainer_t *t) { return enqueue_internal(t, run_final, 1); }
int trainer_enqueue_unload(trainer_t *t) { return enqueue_internal(t, run_unload, 0); }
