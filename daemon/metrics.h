/*
 * metrics.h — Prometheus metrics: counters and histograms that the request
 * path records (rpc.c, dispatch.c, trainer.c), the trainers' gauges read at
 * scrape time, and the HTTP server (nng's) that serves them at /metrics in
 * the text exposition format 0.0.4 when --metrics-listen is set.
 *
 * Threads: the record functions take one mutex for a few additions, from any
 * thread (nng's, the workers'); recording happens whether or not the server
 * runs. The HTTP handler runs on an nng thread: it copies the counters under
 * that mutex and has the trainer source (trainer.c) read each trainer's
 * snapshot under t->mu (held only for copies by the workers), so a scrape
 * never waits for a learner and never calls CUDA. GPU memory comes from metrics_gpu_memory(), which main.c's
 * loop calls (see there).
 */
#ifndef DQND_METRICS_H
#define DQND_METRICS_H

#include <stdint.h>

#include "server.h"

/* Serves /metrics on s->opts.metrics_listen (nothing when it is ""); 0, or
 * -1 with err set (a bad URL, or the address cannot be bound). */
int metrics_start(server_t *s, char *err, size_t errlen);
/* Stops the HTTP server (before the registry goes away). */
void metrics_stop(void);

/* A request answered: its Request oneof case (0 or a case this daemon does
 * not know: "unknown"), the reply's status code, seconds since it arrived. */
void metrics_request(int command_case, int code, double seconds);
/* Transitions a SubmitTransitions accepted. */
void metrics_transitions(uint64_t n);
/* n optimiser steps that took `seconds` in all (one learner_step call). */
void metrics_steps(int n, double seconds);
/* One trainer's gauges at scrape time. */
typedef struct metrics_trainer {
  char name[65];
  int64_t queued, replay_size, memory;
  uint64_t step;
  int members, diverged; /* the population's size; its members that diverged (a lone trainer's: 0 or 1) */
  int error;             /* 1: a device error disabled it (commands answer UNAVAILABLE) */
} metrics_trainer_t;
/* Who lists the trainers at scrape time: n rows into *out (malloc'd; the
 * caller frees), or -1 out of memory. main.c registers trainer.c's
 * trainer_metrics_list, so metrics.c needs nothing above it. */
void metrics_set_trainer_source(int (*list)(server_t *s, metrics_trainer_t **out));
/* The CUDA device's memory in use and in total (device-wide); used < 0: not
 * known (the gauges are left out). */
void metrics_gpu_memory(int64_t used, int64_t total);
/* the device the daemon runs on: label "GPU N" (--device) or "", its name
 * ("none" without one): dqnd_device_info */
void metrics_device(const char *label, const char *name);

#endif
