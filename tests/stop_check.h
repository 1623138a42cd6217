/*
 * stop_check.h — learner_step_until stops between whole steps (learner.h),
 * shared by the CPU suite (test-state) and the GPU suite (test-gpu-learner).
 *
 * Two learners made alike: `l` is asked for 1,000,000 steps and stopped —
 * by its deadline, then by its stop flag set from another thread — and each
 * time the steps it reports (steps_run, the step counter) are what a twin
 * run for exactly that many steps holds, bit for bit: its whole saved state
 * (parameters, target, Adam moments, counters, replay with priorities).
 */
#ifndef DQND_STOP_CHECK_H
#define DQND_STOP_CHECK_H

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "learner.h"
#include "testutil.h"

typedef struct stop_setter {
  learner_t *l;
  int after_ms;
} stop_setter_t;

static void *tu_stop_later(void *arg) {
  stop_setter_t *s = arg;
  struct timespec ts = {s->after_ms / 1000, (long)(s->after_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  *learner_stop_flag(s->l) = 1;
  return NULL;
}

/* the whole state, as learner_save writes it with the replay */
static inline membuf_t tu_state_bytes(learner_t *l) {
  membuf_t m = {0};
  char err[256];
  ck_assert_msg(learner_save(l, 1, mem_write, &m, err, sizeof err) == 0, "%s", err);
  return m;
}

/* l and twin: learners made alike (same config, same transitions), fresh */
static inline void tu_check_stop(learner_t *l, learner_t *twin, const char *what) {
  char err[512];
  learner_stats_t st;
  uint64_t done = 0;
  for (int pass = 0; pass < 2; pass++) {
    learner_stop_t stop = {0, 0};
    pthread_t th;
    stop_setter_t set = {l, 300};
    if (pass == 0) stop.deadline = learner_now() + 0.3; /* by its deadline */
    else ck_assert_int_eq(pthread_create(&th, NULL, tu_stop_later, &set), 0); /* by its flag */
    *learner_stop_flag(l) = 0;
    const double t0 = learner_now();
    int rc = learner_step_until(l, 1000000, &stop, &st, err, sizeof err);
    const double took = learner_now() - t0;
    if (pass) pthread_join(th, NULL);
    ck_assert_msg(rc == LEARNER_ESTOPPED, "%s, pass %d: rc %d (%s)", what, pass, rc, err);
    ck_assert_int_eq(stop.why, pass ? LEARNER_STOP_FLAG : LEARNER_STOP_DEADLINE);
    ck_assert_msg(st.steps_run > 0 && st.steps_run < 1000000, "%s: %u steps ran", what, st.steps_run);
    ck_assert_msg(took < 5.0, "%s: the stop took %.2f s to take effect", what, took);
    done += st.steps_run;
    ck_assert_int_eq((long long)st.step, (long long)done);
    /* the twin, stepped exactly as many, holds the same state */
    ck_assert_msg(learner_step(twin, (int)st.steps_run, NULL, err, sizeof err) == 0, "%s", err);
    membuf_t a = tu_state_bytes(l), b = tu_state_bytes(twin);
    ck_assert_msg(a.n == b.n && !memcmp(a.p, b.p, a.n),
                  "%s, pass %d: the state after a stop at %u steps is not the twin's after as many", what, pass,
                  st.steps_run);
    printf("%s: stopped by its %s after %u steps (%.3f s), the twin's state bit for bit\n", what,
           pass ? "flag" : "deadline", st.steps_run, took);
    free(a.p), free(b.p);
  }
  /* a flag left set stops the next call before its first step; cleared, it runs */
  *learner_stop_flag(l) = 1;
  learner_stop_t stop = {0, 0};
  ck_assert_int_eq(learner_step_until(l, 5, &stop, &st, err, sizeof err), LEARNER_ESTOPPED);
  ck_assert_int_eq(st.steps_run, 0);
  *learner_stop_flag(l) = 0;
  ck_assert_int_eq(learner_step_until(l, 5, &stop, &st, err, sizeof err), LEARNER_OK);
  ck_assert_int_eq(st.steps_run, 5);
  ck_assert_int_eq(stop.why, LEARNER_STOP_NONE);
}

#endif
