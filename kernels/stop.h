/*
 * stop.h — stopping a step between whole steps (learner.h,
 * learner_step_until): the caller's request, the check a backend makes
 * between steps, and the clock deadlines are in. Below the learner and the
 * backends alike (stop.c), so a backend asks it without calling up.
 */
#ifndef DQN_STOP_H
#define DQN_STOP_H

#ifdef __cplusplus
extern "C" {
#endif

enum { LEARNER_STOP_NONE = 0, LEARNER_STOP_FLAG = 1, LEARNER_STOP_DEADLINE = 2 };
typedef struct learner_stop {
  double deadline; /* learner_now() seconds; 0 = none */
  int why;         /* out: LEARNER_STOP_* (NONE when every step ran) */
} learner_stop_t;
/* The clock of deadlines: CLOCK_MONOTONIC, in seconds. */
double learner_now(void);

/* What a step op checks between steps: the learner's stop flag and the
 * deadline. */
typedef struct learner_stop_ctl {
  const volatile int *flag;
  double deadline; /* 0: none */
  int why;         /* out: LEARNER_STOP_* */
} learner_stop_ctl_t;

/* LEARNER_STOP_FLAG or LEARNER_STOP_DEADLINE when the step must stop now
 * (and s->why set), else 0 */
int learner_should_stop(learner_stop_ctl_t *s);

#ifdef __cplusplus
}
#endif

#endif
