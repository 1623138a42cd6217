/* dqnctl_watch.c — Ctrl-C during dqnctl's long commands (dqnctl_watch.h). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "dqnctl_watch.h"

/* Ctrl-C (SIGINT) or SIGTERM during a Step: a thread of its own (the signals
 * are blocked everywhere else, since before nng started its threads: main)
 * cancels the Step on a second connection; the Step then answers with the
 * steps that ran, which are printed, and dqnctl exits 130. The thread runs
 * from before the connection: a signal before the Step is sent (while
 * connecting, or during --member's check, which waits behind whatever the
 * trainer runs) exits 130 at once, nothing having been started. */
typedef struct step_watch {
  ctx_t *x;
  const char *name;
  sigset_t set;
  atomic_int armed; /* 1 once the Step may be on its way (watched) */
  atomic_int done, sig;
  _Atomic uint64_t before; /* the client's last request id before the Step */
} step_watch_t;

static step_watch_t g_watch;
static pthread_t g_watch_th;
static int g_watching;

static void *step_watch(void *arg) {
  step_watch_t *w = arg;
  int sig = 0;
  sigwait(&w->set, &sig);
  if (atomic_load(&w->done)) return NULL;
  if (!atomic_load(&w->armed)) {
    fprintf(stderr, "dqnctl: interrupted before the command was sent: nothing was started\n");
    _exit(130);
  }
  atomic_store(&w->sig, sig);
  /* the Step's own id: it may not be sent yet (its id is still the one
   * before); a Cancel of another id would stop nothing, or of 0 whatever
   * runs on the trainer, perhaps another client's */
  uint64_t rid = dqnd_pending_request_id(w->x->c);
  for (int k = 0; k < 500 && rid == atomic_load(&w->before) && !atomic_load(&w->done); k++) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
    rid = dqnd_pending_request_id(w->x->c);
  }
  if (atomic_load(&w->done)) return NULL;
  dqnd_client_t *c2;
  char err[700], found[32] = "";
  int rc = rid == atomic_load(&w->before) ? -1 : dqnd_connect_tls(w->x->url, 5000, &w->x->tls, &c2, err, sizeof err);
  if (rc == -1) snprintf(err, sizeof err, "it was not sent within 5 s");
  else if (!rc) {
    if (w->x->token) dqnd_set_token(c2, w->x->token);
    rc = dqnd_cancel(c2, w->name, rid, found, sizeof found);
    if (rc) snprintf(err, sizeof err, "%s", dqnd_last_error(c2));
    dqnd_close(c2);
  }
  if (rc) fprintf(stderr, "dqnctl: interrupted, and the Step could not be cancelled: %s\n", err);
  else fprintf(stderr, "dqnctl: interrupted: the Step is cancelled on the daemon (it was %s)\n", found);
  /* the Step's own reply says how many steps ran; if it does not come, leave anyway */
  for (int k = 0; k < 100 && !atomic_load(&w->done); k++) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  if (!atomic_load(&w->done)) {
    fprintf(stderr, "dqnctl: no answer from the daemon after the Cancel: exiting\n");
    _exit(130);
  }
  return NULL;
}

/* before the nng threads exist (main): SIGINT and SIGTERM go to step_watch,
 * started now for x's command */
void start_watch(ctx_t *x) {
  step_watch_t *w = &g_watch;
  w->x = x;
  sigemptyset(&w->set);
  sigaddset(&w->set, SIGINT);
  sigaddset(&w->set, SIGTERM);
  sigaddset(&w->set, SIGUSR1); /* step_watch's own wake-up when the Step is over */
  pthread_sigmask(SIG_BLOCK, &w->set, NULL);
  g_watching = pthread_create(&g_watch_th, NULL, step_watch, w) == 0;
}

void stop_watch(void) {
  if (!g_watching) return;
  atomic_store(&g_watch.done, 1);
  pthread_kill(g_watch_th, SIGUSR1);
  pthread_join(g_watch_th, NULL);
  g_watching = 0;
}

/* a long call (Step, PretrainDT) with step_watch beside it: Ctrl-C cancels it */
int watched(ctx_t *x, const char *name, long long n, long_call_fn fn, void *out, int *interrupted) {
  g_watch.name = name;
  atomic_store(&g_watch.before, dqnd_pending_request_id(x->c));
  atomic_store(&g_watch.armed, 1);
  int rc = fn(x, name, n, out);
  stop_watch();
  *interrupted = atomic_load(&g_watch.sig) != 0;
  return rc;
}

