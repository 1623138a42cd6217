/* stop.c — see stop.h. */
#include "stop.h"

#include <time.h>

double learner_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int learner_should_stop(learner_stop_ctl_t *s) {
  if (s->flag && *s->flag) return s->why = LEARNER_STOP_FLAG;
  if (s->deadline > 0 && learner_now() >= s->deadline) return s->why = LEARNER_STOP_DEADLINE;
  return 0;
}
