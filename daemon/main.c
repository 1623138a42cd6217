/*
 * main.c — dqnd: options, the libuv loop (signals, timers, sd_notify) and
 * shutdown. See server.h for the threads and rpc.c / dispatch.c / trainer.c
 * for the request path (main.c hands dispatch() to rpc_start).
 *
 * Shutdown (SIGTERM/SIGINT): new requests are answered UNAVAILABLE; a Step
 * running now stops between whole steps (its reply says how many ran) and
 * queued Steps answer UNAVAILABLE without running; every trainer gets a
 * final job behind the commands already queued, so everything in flight is
 * answered, then the final checkpoint is written and the worker exits; once
 * all workers are gone the sockets close and the process exits 0.
 * A second signal during shutdown exits at once (status 1).
 */
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <uv.h>

#include "checkpoint.h"
#include "dqnd_build_config.h"
#include "dispatch.h"
#include "listen_guard.h"
#include "log.h"
#include "metrics.h"
#include "restore.h"
#include "rpc.h"
#include "trainer.h"

typedef struct app {
  server_t srv;
  uv_loop_t *loop;
  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t ckpt_timer, idle_timer, wd_timer, drain_timer, gpu_timer;
  int stopping;
  int cuda_in_use; /* a trainer has run on CUDA: the process has a CUDA context */
} app_t;

static void for_each_trainer(server_t *s, void (*fn)(trainer_t *t, void *ctx), void *ctx) {
  trainer_t **ts;
  int n = trainer_list(s, &ts);
  for (int i = 0; i < n; i++) {
    fn(ts[i], ctx);
    trainer_put(ts[i]);
  }
  free(ts);
}

static void periodic_one(trainer_t *t, void *ctx) {
  (void)ctx;
  if (trainer_enqueue_save(t)) log_warn(t->name, "periodic checkpoint skipped: queue full");
}
static void on_ckpt_timer(uv_timer_t *h) { for_each_trainer(&((app_t *)h->data)->srv, periodic_one, NULL); }

static void idle_one(trainer_t *t, void *ctx) {
  server_t *s = ctx;
  pthread_mutex_lock(&t->mu);
  double idle = now_s() - t->last_active;
  pthread_mutex_unlock(&t->mu);
  if (idle > s->opts.idle_timeout && workq_pending(&t->q) == 0) {
    log_info(t->name, "idle for %.0f s: saving and unloading", idle);
    if (trainer_enqueue_unload(t)) log_warn(t->name, "idle unload skipped: queue full");
  }
}
static void on_idle_timer(uv_timer_t *h) {
  app_t *a = h->data;
  for_each_trainer(&a->srv, idle_one, &a->srv);
}

/* GPU memory for /metrics, sampled here on the loop thread rather than on
 * nng's (where a scrape must not wait for anything) or on the workers (which
 * would stop reporting when idle, and miss what a destroyed trainer freed).
 * Only once a trainer has run on CUDA: before that the process has no CUDA
 * context, and the query would create one, holding device memory. */
static void cuda_one(trainer_t *t, void *ctx) {
  pthread_mutex_lock(&t->mu);
  if (t->backend == LEARNER_BACKEND_CUDA) *(int *)ctx = 1;
  pthread_mutex_unlock(&t->mu);
}
static void on_gpu_timer(uv_timer_t *h) {
  app_t *a = h->data;
  if (!a->cuda_in_use) for_each_trainer(&a->srv, cuda_one, &a->cuda_in_use);
  if (!a->cuda_in_use) return;
  int64_t used, total;
  if (learner_device_memory(&used, &total)) used = total = -1;
  metrics_gpu_memory(used, total);
}

static void on_wd_timer(uv_timer_t *h) {
  (void)h;
  sd_notify(0, "WATCHDOG=1");
}

static void on_drain_timer(uv_timer_t *h) {
  app_t *a = h->data;
  if (atomic_load(&a->srv.live_trainers) > 0 || workq_pending(&a->srv.admin) > 0) return;
  const int failed = atomic_load(&a->srv.final_failed);
  if (failed)
    log_error(NULL, "%d trainer%s final checkpoint could not be written (the errors above): a restart restores the "
              "last checkpoint that was; exiting with status 1", failed, failed == 1 ? "'s" : "s'");
  else
    log_info(NULL, "all trainers saved and stopped; exiting");
  uv_stop(a->loop);
}

/* shutdown, per trainer: stop what runs now (between whole steps), then the
 * final save behind whatever is queued (queued Steps answer UNAVAILABLE) */
static void final_one(trainer_t *t, void *ctx) {
  (void)ctx;
  trainer_stop_running(t);
  trainer_enqueue_final(t);
}

static void on_signal(uv_signal_t *h, int sig) {
  app_t *a = h->data;
  if (sig == SIGHUP) {
    if (log_reopen()) log_error(NULL, "SIGHUP: cannot reopen %s: %s", a->srv.opts.log_file, strerror(errno));
    else log_info(NULL, "SIGHUP: log reopened");
    return;
  }
  if (a->stopping) {
    log_warn(NULL, "second signal: exiting now");
    _exit(1); /* not exit(): atexit handlers and CUDA's teardown would race the workers still running */
  }
  a->stopping = 1;
  log_info(NULL, "signal %d: draining queues and writing final checkpoints", sig);
  sd_notify(0, "STOPPING=1");
  atomic_store(&a->srv.draining, 1);
  /* an nng thread that saw draining unset may still be pushing an admin job
   * (CreateTrainer, LoadCheckpoint): closed now, that push fails and is
   * answered UNAVAILABLE, so no admin job can start after the drain timer
   * found the queue empty and main freed the calls (rpc_stop); the jobs
   * already queued still run, counted by workq_pending */
  workq_close(&a->srv.admin);
  for_each_trainer(&a->srv, final_one, NULL);
  uv_timer_start(&a->drain_timer, on_drain_timer, 0, 20);
}

/* Shutdown's last step tears down the sockets. Every final checkpoint is
 * written and synced by then, so a teardown that does not finish must not
 * keep the process (and systemd's stop job) waiting: nng_close can hang on
 * rare races (nanomsg/nng#1543, #1813; seen once in this repository's CI as
 * a SIGTERM test that never saw the daemon exit). After TEARDOWN_S seconds
 * the process exits — there is nothing left to save — with the status the
 * final checkpoints earned (arg: the server's final_failed). */
#define TEARDOWN_S 10
static void *teardown_watchdog(void *arg) {
  sleep(TEARDOWN_S);
  log_warn(NULL, "shutdown: socket teardown still running after %d s; state is saved, exiting", TEARDOWN_S);
  _exit(atomic_load((atomic_int *)arg) ? 1 : 0);
  return NULL;
}

/* --device N: the process sees CUDA device N alone (the N-th of
 * CUDA_VISIBLE_DEVICES when that is set, else N), before any CUDA call, then
 * checks that it is there; label: "GPU N" for ServerInfo, the log and the
 * metrics. 0, or -1 with err. */
static int bind_device(int n, char *label, size_t llen, char *err, size_t errlen) {
  char pick[64];
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (vis && vis[0]) {
    int k = 0;
    const char *p = vis;
    for (; k < n && p; k++) p = strchr(p, ','), p = p ? p + 1 : NULL;
    if (!p || !*p || *p == ',') {
      snprintf(err, errlen, "%d: CUDA_VISIBLE_DEVICES (%s) names fewer devices", n, vis);
      return -1;
    }
    size_t len = strcspn(p, ",");
    snprintf(pick, sizeof pick, "%.*s", (int)(len < sizeof pick - 1 ? len : sizeof pick - 1), p);
  } else {
    snprintf(pick, sizeof pick, "%d", n);
  }
  setenv("CUDA_VISIBLE_DEVICES", pick, 1);
  char why[256];
  if (!learner_cuda_available(why, sizeof why)) {
    snprintf(err, errlen, "%d: no usable CUDA device there (%s)", n, why);
    return -1;
  }
  snprintf(label, llen, "GPU %d", n);
  return 0;
}

int main(int argc, char **argv) {
  static app_t app;
  app_t *a = &app;
  server_t *s = &a->srv;
  char err[1024];
  int prc = opts_parse_args(&s->opts, argc - 1, argv + 1, err, sizeof err);
  if (prc == 1) return 0;
  if (prc) {
    fprintf(stderr, "dqnd: %s\n", err);
    return 2;
  }
  if (s->opts.device >= 0 && bind_device(s->opts.device, s->device_label, sizeof s->device_label, err, sizeof err)) {
    fprintf(stderr, "dqnd: device: %s\n", err);
    return 1;
  }
  log_level = log_parse_level(s->opts.log_level);
  if (s->opts.log_file[0] && log_open(s->opts.log_file)) {
    fprintf(stderr, "dqnd: log-file: cannot open %s: %s\n", s->opts.log_file, strerror(errno));
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  /* until the loop's handler is installed (after the restore, which can take
   * minutes): a log rotation's SIGHUP must not end the daemon (its default
   * action; a review find) */
  signal(SIGHUP, SIG_IGN);
  /* SIGTERM and SIGINT wait (pending) until the loop's handlers exist: the
   * sockets open before them, and a stop asked in between killed the daemon
   * with its default action. Every thread started meanwhile (nng's, the
   * workers') keeps them blocked, so they reach the loop's thread alone. */
  sigset_t stop_sigs;
  sigemptyset(&stop_sigs);
  sigaddset(&stop_sigs, SIGTERM);
  sigaddset(&stop_sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
  s->start_time = now_s();
  s->backend = !strcmp(s->opts.backend, "cpu")    ? LEARNER_BACKEND_CPU
               : !strcmp(s->opts.backend, "cuda") ? LEARNER_BACKEND_CUDA
                                                  : learner_backend_default();
  if (!learner_cuda_available(s->device, sizeof s->device)) {
    log_info(NULL, "no usable CUDA device (%s)", s->device);
    snprintf(s->device, sizeof s->device, "none");
  } else if (s->device_label[0]) { /* --device: "GPU N: name" */
    char name[sizeof s->device];
    snprintf(name, sizeof name, "%s", s->device);
    snprintf(s->device, sizeof s->device, "%s: %.200s", s->device_label, name);
  }
  metrics_device(s->device_label[0] ? s->device_label : "", s->device);
  s->refuse = dispatch_refuse;
  metrics_set_trainer_source(trainer_metrics_list);
  pthread_mutex_init(&s->reg_mu, NULL);
  pthread_mutex_init(&s->up_mu, NULL);
  s->trainers = calloc((size_t)s->opts.max_trainers, sizeof *s->trainers);
  if (!s->trainers || ckpt_mkdirs(s->opts.state_dir, err, sizeof err) ||
      ckpt_lock_state_dir(s->opts.state_dir, err, sizeof err)) {
    fprintf(stderr, "dqnd: state-dir: %s\n", s->trainers ? err : "out of memory");
    return 1;
  }
  if (workq_init(&s->admin, s->opts.queue_depth, NULL, NULL)) {
    fprintf(stderr, "dqnd: cannot start the admin worker\n");
    return 1;
  }
  if (s->opts.restore) restore_trainers(s);
  /* the metrics listener before the RPC one: a client that finds dqnd
   * serving finds its "metrics on" line in the log too */
  if (metrics_start(s, err, sizeof err)) {
    fprintf(stderr, "dqnd: %s\n", err);
    return 1;
  }
  if (rpc_start(s, dispatch, err, sizeof err)) {
    fprintf(stderr, "dqnd: %s\n", err);
    return 1;
  }
  if (listen_guard_start(s)) log_warn(NULL, "listener-check: cannot start its thread; listeners are not probed");
  a->loop = uv_default_loop();
  uv_signal_t *sigs[3] = {&a->sig_term, &a->sig_int, &a->sig_hup};
  int signums[3] = {SIGTERM, SIGINT, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(a->loop, sigs[i]);
    sigs[i]->data = a;
    uv_signal_start(sigs[i], on_signal, signums[i]);
  }
  pthread_sigmask(SIG_UNBLOCK, &stop_sigs, NULL);
  uv_timer_t *timers[5] = {&a->ckpt_timer, &a->idle_timer, &a->wd_timer, &a->drain_timer, &a->gpu_timer};
  for (int i = 0; i < 5; i++) {
    uv_timer_init(a->loop, timers[i]);
    timers[i]->data = a;
  }
  if (s->opts.checkpoint_interval > 0) {
    uint64_t ms = (uint64_t)s->opts.checkpoint_interval * 1000;
    uv_timer_start(&a->ckpt_timer, on_ckpt_timer, ms, ms);
  }
  if (s->opts.idle_timeout > 0) {
    uint64_t ms = (uint64_t)s->opts.idle_timeout * 250;
    uv_timer_start(&a->idle_timer, on_idle_timer, ms, ms);
  }
  if (s->opts.metrics_listen[0] && strcmp(s->device, "none")) uv_timer_start(&a->gpu_timer, on_gpu_timer, 1000, 2000);
  uint64_t wd_usec = 0;
  if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0)
    uv_timer_start(&a->wd_timer, on_wd_timer, wd_usec / 2000, wd_usec / 2000);
  log_info(NULL, "dqnd %s ready: backend %s, device %s, state %s", DQND_VERSION, learner_backend_name(s->backend),
           s->device, s->opts.state_dir);
  sd_notifyf(0, "READY=1\nSTATUS=serving %s", s->opts.listen[0]);
  uv_run(a->loop, UV_RUN_DEFAULT);
  pthread_t wd;
  if (pthread_create(&wd, NULL, teardown_watchdog, &s->final_failed) == 0) pthread_detach(wd);
  listen_guard_stop(s);
  metrics_stop();
  rpc_stop(s);
  workq_close(&s->admin);
  workq_join(&s->admin);
  workq_free(&s->admin);
  for (int i = 0; i < 3; i++) uv_close((uv_handle_t *)sigs[i], NULL);
  for (int i = 0; i < 5; i++) uv_close((uv_handle_t *)timers[i], NULL);
  uv_run(a->loop, UV_RUN_DEFAULT);
  uv_loop_close(a->loop);
  dispatch_free_uploads(s);
  free(s->trainers);
  return atomic_load(&s->final_failed) ? 1 : 0;
}
