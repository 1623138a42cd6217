/* dqnctl_watch.h — Ctrl-C (SIGINT) or SIGTERM during dqnctl's Step and
 * PretrainDT: a thread of its own cancels the command on the daemon over a
 * second connection (dqnctl_watch.c). */
#ifndef DQND_DQNCTL_WATCH_H
#define DQND_DQNCTL_WATCH_H

#include "dqnctl_common.h"

/* From main, before the first connection (nng's threads inherit the signal
 * mask set here): the signals go to the watcher, which until watched()
 * arms it exits 130 at once on one, nothing having been sent. */
void start_watch(ctx_t *x);
/* The watcher stopped and joined (idempotent). */
void stop_watch(void);
/* fn(x, name, n, out), a long call, with the watcher armed: a signal now
 * cancels that call's request on the daemon; *interrupted says whether one
 * came. fn's code. */
typedef int (*long_call_fn)(ctx_t *x, const char *name, long long n, void *out);
int watched(ctx_t *x, const char *name, long long n, long_call_fn fn, void *out, int *interrupted);

#endif
