/*
 * trainer.h — the trainer: a name, a population of learners (one, unless
 * created with more: kernels/population.h), a bounded queue of jobs and the
 * worker thread that runs them in order (workq.c); the registry of trainers;
 * the internal jobs (periodic checkpoint, final checkpoint at shutdown, idle
 * unload); the admin queue's jobs run the same way, with no trainer.
 *
 * References: the registry holds one, the worker holds one, every lookup
 * (trainer_get) takes one and trainer_put gives it back; the last put frees.
 * Only the worker touches `p` once the trainer is registered.
 */
#ifndef DQND_TRAINER_H
#define DQND_TRAINER_H

#include "checkpoint.h"
#include "metrics.h"
#include "server.h"

struct trainer {
  server_t *srv;
  char name[65];
  char dir[1200];        /* checkpoints: state_dir/name */
  learner_pop_t *p;      /* its members; one for a trainer created without a population */
  int population;        /* learner_pop_size(p): fixed at creation */
  learner_config_t cfg;  /* member 0's; shapes never change after creation */
  uint64_t cfg_hash;     /* of the config it was created with */
  workq_t q;
  atomic_int refs;
  pthread_mutex_t mu;    /* guards the snapshot below (read by ListTrainers) */
  learner_stats_t stats;
  learner_hparams_t hp;  /* the current hyperparameters (SetHyperparams changes them) */
  learner_backend_t backend; /* of t->p; readers off the worker use this (LoadCheckpoint swaps t->p) */
  int64_t memory;        /* learner_pop_memory_estimate of it (under mu: metrics read it, never computing it
                          * on their thread, where the CUDA estimate would make device calls) */
  char error[512];       /* non-empty: error state, commands answer UNAVAILABLE (FAILED_PRECONDITION when diverged) */
  int diverged;          /* the error is a divergence: the learner holds its last good state */
  int n_diverged;        /* members that diverged, as the last snapshot saw them (under mu) */
  char *verdict;         /* STATE/<name>/diverged's text as last written, NULL none (worker only; verdict.h) */
  double last_active;
  int removed;
  double *train_credit; /* continuous training: steps owed to each member (worker only) */
  /* FetchCheckpoint member_only: the last member's place found in a
   * checkpoint (worker only), so its chunks do not walk the file again */
  struct {
    char id[96];
    int member;
    uint64_t off, len;
    uint32_t crc32;
  } fetch_member;
  /* stopping long work (trainer_long_begin .. trainer_cancel): under run_mu */
  pthread_mutex_t run_mu;
  int running;           /* a Step or continuous training runs now */
  uint64_t running_rid;  /* its request_id (0: continuous training) */
  int stop_reason;       /* TRAINER_STOP_* asked of it, 0 none */
  uint64_t cancelled[32]; /* request_ids a Cancel named before they ran (a ring) */
  int n_cancelled;
};

/* ----------------------------------------------------------- registry */

/* Valid names: [A-Za-z0-9_.-]{1,64}, not starting with '.'. */
int trainer_name_ok(const char *name);
/* a name the state directory holds for itself (dqnd.lock: its lock file), never a trainer's */
int trainer_name_reserved(const char *name);
/* Registers a trainer around an existing population (which it then owns).
 * A new trainer (restoring = 0) first moves a directory left under its name
 * (by a daemon that did not restore it) to STATE/.retired/, so its
 * checkpoints never mix with an older trainer's, and records its backend;
 * a restored one (restoring = 1) keeps its directory as it is.
 * Returns 0, or a gRPC code (ALREADY_EXISTS, RESOURCE_EXHAUSTED, INTERNAL)
 * with err set; on error the population is NOT consumed. */
int trainer_register(server_t *s, const char *name, learner_pop_t *p, const learner_config_t *created_with,
                     int restoring, trainer_t **out, char *err, size_t errlen);
/* Member i's learner (worker only): member 0 of a trainer of one. */
static inline learner_t *trainer_member(trainer_t *t, int i) { return learner_pop_member(t->p, i); }
trainer_t *trainer_get(server_t *s, const char *name);
void trainer_put(trainer_t *t);
/* Every registered trainer, each with a reference (trainer_put each, free the array). */
int trainer_list(server_t *s, trainer_t ***out);
/* The trainers' gauges for metrics.c (its trainer source; main.c registers it). */
int trainer_metrics_list(server_t *s, metrics_trainer_t **out);
/* Copies the learner's stats into the snapshot (worker only); a client's
 * command also counts as activity for the idle timeout, internal jobs
 * (periodic checkpoints) do not. */
void trainer_snapshot(trainer_t *t, int client_activity);

/* --------------------------------------------------------------- jobs */

#define TRAINER_JOB_MAX_FIELDS 64

/* One job on a trainer's queue, or on the admin queue (t == NULL).
 * Ownership: the maker fills it; from a successful trainer_enqueue the queue
 * owns the job, its reference to t, `loaded` and the duty to answer c: the
 * worker runs run(j) (which answers c), snapshots the trainer's stats and
 * frees the job; a job still queued when the trainer stops is answered
 * UNAVAILABLE and freed. A refused enqueue leaves all of it with the caller
 * (trainer_job_free, then answer c). */
typedef struct trainer_job trainer_job_t;
typedef void (*trainer_job_fn)(trainer_job_t *j);
struct trainer_job {
  trainer_job_fn run;
  int any_state;          /* runs on a trainer in an error state (DestroyTrainer, a loaded state's swap) */
  int diverged_ok;        /* runs on a diverged trainer (reads its good state; SetHyperparams resumes it) */
  int expires;            /* not run once deadline has passed (queued, not long: dispatch.c's F_LONG) */
  server_t *s;
  trainer_t *t;           /* the job's reference; NULL on the admin queue */
  rpc_call_t *c;          /* the call run answers; NULL for internal jobs */
  uint64_t request_id;    /* c's request_id (a Cancel finds a queued Step by it) */
  double deadline;        /* the request's: receipt + timeout_ms (now_s() seconds), 0 none */
  learner_pop_t *loaded;  /* LoadCheckpoint: the state to swap in; run takes it (sets NULL) */
  /* What the central check parsed (dispatch.c fills these; the trainer
   * module only carries them), so a request is validated once: */
  learner_backend_t backend;   /* CreateTrainer, LoadCheckpoint */
  learner_config_t cfg;        /* CreateTrainer: the validated config; SetHyperparams: the values given */
  const learner_field_t *fields[TRAINER_JOB_MAX_FIELDS]; /* SetHyperparams: the fields given, in cfg */
  int n_fields;
  learner_transitions_t tr;    /* SubmitTransitions: the checked arrays (they point into the request) */
  int member;                  /* the member a command names (checked against the population) */
  int population;              /* CreateTrainer: members (1 when not given) */
  learner_pop_factor_t factors[TRAINER_JOB_MAX_FIELDS]; /* CopyMember: field names are learner_fields' */
  int n_factors;
};

/* A zeroed job; t's reference (if any) passes to it. NULL: out of memory
 * (the reference stays with the caller). */
trainer_job_t *trainer_job_new(server_t *s, trainer_t *t, rpc_call_t *c, trainer_job_fn run);
/* Releases a job that never ran: its reference to t and `loaded` (not c). */
void trainer_job_free(trainer_job_t *j);
/* Queues the job on j->t's worker, or on the admin worker when j->t is NULL.
 * WORKQ_OK, WORKQ_FULL or WORKQ_CLOSED. */
int trainer_enqueue(trainer_job_t *j);

/* Worker only, for handlers: */
/* A checkpoint now (logged): 0, -1 (a ckpt/learner error, err says why), or
 * TRAINER_SAVE_NOT_FINITE: the state is not finite (a diverged trainer; in
 * a population, every member's), nothing written, the earlier checkpoints
 * kept; or TRAINER_SAVE_MEMBER_NOT_FINITE: a population member's state is
 * not finite and could not go back to its last checkpointed one (no
 * checkpoint yet, or it would not load), so nothing was written although
 * other members' states are good: their work since the last checkpoint is
 * not saved (a failure for the final save, which the exit status reports). */
#define TRAINER_SAVE_NOT_FINITE 1
#define TRAINER_SAVE_MEMBER_NOT_FINITE 2
int trainer_save(trainer_t *t, int with_replay, int pin, ckpt_info_t *info, char *err, size_t errlen);
/* Moves the trainer's directory to STATE/.retired/ (before trainer_stop: the
 * name is not free yet, so a new trainer of that name cannot race for the
 * directory, and no periodic save runs in between); 0 or -1 (logged). */
int trainer_retire(trainer_t *t, const char *why, char *moved, size_t n);
/* Unregisters (the name becomes free), refuses new jobs and answers every
 * queued one UNAVAILABLE ("trainer 'x' was <why>"); the worker then exits. */
void trainer_stop(trainer_t *t, const char *why);
/* A device error leaves the learner in an unknown state: the trainer answers
 * UNAVAILABLE from now on (until a LoadCheckpoint replaces its state); the
 * daemon and the other trainers carry on. Other errors change nothing. */
void trainer_note_error(trainer_t *t, int learner_rc, const char *err);
/* A step diverged (LEARNER_EDIVERGED; err says which): the trainer stops
 * training — Step, SubmitTransitions and SyncTarget answer
 * FAILED_PRECONDITION — and keeps the learner's state, the last good step's:
 * it is checked finite and saved as a checkpoint at once; GetStats, Act and
 * the checkpoint commands still work, SetHyperparams (a smaller lr) resumes
 * training and LoadCheckpoint replaces the state. msg receives the reply's
 * text (what diverged, where the good state went). */
void trainer_note_diverged(trainer_t *t, const char *err, char *msg, size_t n);
/* A good state is back where the trainer had stopped training (every member
 * diverged): SetHyperparams, CopyMember or a member's LoadCheckpoint made one
 * member good again. The trainer trains again (a no-op when it had not
 * stopped). On its worker. */
void trainer_resume(trainer_t *t);
/* Continuous training after a submit to a member: steps owed to it accrue
 * as its samples_per_insert x inserted / batch and are paid now, on the
 * worker, by that member alone (as a lone trainer of its own would). */
void trainer_train_continuous(trainer_t *t, int member, uint32_t inserted, int64_t replay_size);

/* --------------------------------------------------- stopping long work
 * A Step (and continuous training) runs learner_step_until between
 * trainer_long_begin and trainer_long_end; Cancel, a request's deadline and
 * shutdown stop it between whole steps through the learner's stop flag. */
enum { TRAINER_STOP_CANCEL = 1, TRAINER_STOP_SHUTDOWN = 2 };
/* Worker, before a long command of request rid (0: internal) with this
 * deadline (now_s() seconds, 0 none): 0 to run it (the learner's stop flag
 * cleared, the trainer marked running), else the gRPC code to answer it with,
 * nothing run (err says why): CANCELLED (a Cancel named it while it was
 * queued), UNAVAILABLE (the daemon is shutting down), DEADLINE_EXCEEDED. */
int trainer_long_begin(trainer_t *t, uint64_t rid, double deadline, char *err, size_t errlen);
/* Worker, after it: what a stop was asked for (0 or TRAINER_STOP_*). */
int trainer_long_end(trainer_t *t);
/* Any thread (the Cancel command): rid 0 stops whatever long command runs;
 * else the Step of that request_id, running or still queued (it then answers
 * CANCELLED when its turn comes). "running", "queued" or "none". */
const char *trainer_cancel(trainer_t *t, uint64_t rid);
/* Shutdown (the loop, after setting draining): stops what runs now. */
void trainer_stop_running(trainer_t *t);

/* Internal jobs (the loop's timers and shutdown); 0 or a WORKQ_* code. */
int trainer_enqueue_save(trainer_t *t);   /* periodic checkpoint */
int trainer_enqueue_final(trainer_t *t);  /* shutdown: save and stop; a restart restores it */
int trainer_enqueue_unload(trainer_t *t); /* idle: save, retire its directory, stop */

#endif
