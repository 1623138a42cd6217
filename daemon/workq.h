/*
 * workq.h — a bounded FIFO of jobs executed in order by one worker thread.
 * Each trainer has one (it owns the learner: nothing else touches it), and
 * the daemon has one "admin" queue for blocking work that has no trainer
 * yet (creating learners, loading checkpoint files).
 *
 * Ownership: a job's `arg` belongs to the queue from a successful push until
 * fn(arg) returns; a refused push (full or closed) leaves it with the caller.
 */
#ifndef DQND_WORKQ_H
#define DQND_WORKQ_H

#include <pthread.h>

typedef void (*workq_fn)(void *q_owner, void *arg);

typedef struct workq_job {
  workq_fn fn;
  void *arg;
} workq_job_t;

typedef struct workq {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  workq_job_t *ring;
  int cap, head, n;
  int busy;     /* a job is running */
  int closing;  /* refuse new jobs; the worker exits once the ring is empty */
  int exited;
  void *owner;  /* passed to every fn */
  /* Called by the worker as its very last act (the queue may be freed in
   * it): detached workers release their owner here. NULL = joinable. */
  void (*on_exit)(void *owner);
} workq_t;

enum { WORKQ_OK = 0, WORKQ_FULL = -1, WORKQ_CLOSED = -2 };

int workq_init(workq_t *q, int cap, void *owner, void (*on_exit)(void *owner));
int workq_push(workq_t *q, workq_fn fn, void *arg);
/* Like push but ignores the capacity limit (internal jobs: final saves). */
int workq_push_force(workq_t *q, workq_fn fn, void *arg);
/* Refuses new jobs; queued ones still run. */
void workq_close(workq_t *q);
/* Joinable queues: waits for the worker to exit (after close). */
void workq_join(workq_t *q);
/* Frees the ring and locks once the worker has exited. */
void workq_free(workq_t *q);
int workq_pending(workq_t *q); /* queued + running */
/* Takes the first queued job (not the running one) whose arg match() holds
 * for out of the queue, keeping the others' order: its arg, now the
 * caller's, or NULL. match runs under the queue's lock and must only read. */
void *workq_take(workq_t *q, int (*match)(void *arg, void *ctx), void *ctx);
/* Pops every queued job not yet started (the caller answers them). */
int workq_drain(workq_t *q, workq_job_t *out, int max);

#endif
