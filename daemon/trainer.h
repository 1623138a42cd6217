/*
 * trainer.h — one trainer: a name, a learner, a command queue and its worker
 * thread, and the registry of trainers.
 *
 * References: the registry holds one, the worker holds one, every lookup
 * (trainer_get) takes one and trainer_put gives it back; the last put frees.
 * Only the worker touches `l` once the trainer is registered.
 */
#ifndef DQND_TRAINER_H
#define DQND_TRAINER_H

#include "server.h"

struct trainer {
  server_t *srv;
  char name[65];
  char dir[1200];        /* checkpoints: state_dir/name */
  learner_t *l;
  learner_config_t cfg;  /* shapes never change after creation */
  uint64_t cfg_hash;     /* of the config it was created with */
  workq_t q;
  atomic_int refs;
  pthread_mutex_t mu;    /* guards the snapshot below (read by ListTrainers) */
  learner_stats_t stats;
  char error[256];       /* non-empty: error state, commands answer UNAVAILABLE */
  double last_active;
  int removed;
  double train_credit; /* continuous training: steps owed (worker only) */
};

/* Valid names: [A-Za-z0-9_.-]{1,64}, not starting with '.'. */
int trainer_name_ok(const char *name);
/* Registers a trainer around an existing learner (which it then owns).
 * A new trainer (restoring = 0) first moves a directory left under its name
 * (by a daemon that did not restore it) to STATE/.retired/, so its
 * checkpoints never mix with an older trainer's, and records its backend;
 * a restored one (restoring = 1) keeps its directory as it is.
 * Returns 0, or a gRPC code (ALREADY_EXISTS, RESOURCE_EXHAUSTED, INTERNAL)
 * with err set; on error the learner is NOT consumed. */
int trainer_register(server_t *s, const char *name, learner_t *l, const learner_config_t *created_with, int restoring,
                     trainer_t **out, char *err, size_t errlen);
trainer_t *trainer_get(server_t *s, const char *name);
void trainer_put(trainer_t *t);
/* Every registered trainer, each with a reference (trainer_put each, free the array). */
int trainer_list(server_t *s, trainer_t ***out);
/* Unregisters (the name becomes free); the worker calls it when destroying. */
void trainer_unregister(trainer_t *t);
/* Copies the learner's stats into the snapshot (worker only); a client's
 * command also counts as activity for the idle timeout, internal jobs
 * (periodic checkpoints) do not. */
void trainer_snapshot(trainer_t *t, int client_activity);

#endif
