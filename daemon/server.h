/*
 * server.h — the daemon's shared state and how the modules meet.
 *
 * Threads (docs/architecture.md, "Threads"):
 * - the libuv loop thread (main.c): signals, timers, sd_notify, shutdown;
 * - nng's callback threads (rpc.c): receive, decode, then hand the request
 *   to dispatch.c (the handler rpc_start was given), which validates it
 *   centrally, answers the cheap commands and enqueues the rest as jobs;
 *   they never block on a learner and never touch CUDA;
 * - one worker per trainer (trainer.c, workq.c): owns the learner, runs its
 *   jobs in order (the handlers of dispatch.c, which reply through
 *   rpc_reply(), and the internal jobs: checkpoints, unload, shutdown);
 * - one admin worker: blocking work with no trainer yet (create, load);
 * - nng's HTTP threads (metrics.c, with --metrics-listen): /metrics reads
 *   counters and the trainers' snapshots, never waits for a worker.
 * The trainer registry is shared by the nng threads and the loop, so it sits
 * behind reg_mu (a mutex, not loop ownership: nng callbacks must look trainers
 * up without a round trip through the loop).
 */
#ifndef DQND_SERVER_H
#define DQND_SERVER_H

#include <pthread.h>
#include <stdatomic.h>

#include "learner.h"
#include "opts.h"
#include "clock.h"
#include "workq.h"

typedef struct trainer trainer_t;
typedef struct rpc rpc_t;
typedef struct rpc_call rpc_call_t;
typedef struct upload upload_t;

typedef struct server {
  dqnd_opts_t opts;
  learner_backend_t backend; /* resolved default */
  char device[256];          /* ServerInfo's: the device's name ("GPU N: name" with --device), or "none" */
  char device_label[32];     /* "GPU N" with --device, else "" */
  double start_time;
  atomic_int draining;       /* shutting down: new requests get UNAVAILABLE */
  pthread_mutex_t reg_mu;
  trainer_t **trainers;      /* [opts.max_trainers] */
  int n_trainers;
  atomic_int live_trainers;  /* trainer workers still running */
  atomic_int final_failed;   /* trainers whose final checkpoint could not be written (exit status 1) */
  workq_t admin;
  rpc_t *rpc;
  pthread_mutex_t up_mu;     /* chunked checkpoint uploads by trainer name */
  upload_t *uploads;
  /* Answers a call with an error: the way the trainer module (below the
   * request path) turns a job away without knowing rpc.c; main.c sets it to
   * dispatch's. */
  void (*refuse)(rpc_call_t *c, int code, const char *msg);
} server_t;


#endif
