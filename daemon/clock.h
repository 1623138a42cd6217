/*
 * clock.h — the daemon's one clock: CLOCK_MONOTONIC in seconds (activity
 * times, request deadlines, durations). learner_now() is the same clock, so
 * a request's deadline can be handed to learner_step_until as it is.
 */
#ifndef DQND_CLOCK_H
#define DQND_CLOCK_H

double now_s(void);

#endif
