/*
 * metrics.c — see metrics.h. The exposition (format 0.0.4):
 *
 *   dqnd_requests_total{command,code}            counter  every reply sent
 *   dqnd_request_duration_seconds{command}       histogram  receive to reply
 *   dqnd_transitions_submitted_total             counter
 *   dqnd_training_steps_total                    counter  Step + continuous training
 *   dqnd_step_duration_seconds                   histogram  per optimiser step
 *   dqnd_trainers                                gauge
 *   dqnd_trainer_{queue_depth,replay_size,step,memory_bytes}{trainer}  gauges
 *   dqnd_trainer_{members,diverged_members,error}{trainer}  gauges
 *   dqnd_gpu_memory_{used,total}_bytes           gauges, only with a CUDA device in use
 *   dqnd_heap_bytes                              gauge  malloc's bytes in use (glibc)
 *   dqnd_device_info{device,name}                gauge 1  the device (--device's "GPU N", its name)
 *
 * A learner_step call of n steps is timed as a whole on its worker; its mean
 * per-step time is observed n times, so dqnd_step_duration_seconds_count
 * equals dqnd_training_steps_total and _sum is the time spent stepping.
 */
#include "metrics.h"

#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SANITIZE_ADDRESS__)
/* the sanitizer runtime's (sanitizer/allocator_interface.h, which gcc does not ship) */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "wire.h"
#include "log.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* dqnd.v1.Code, by number (proto/dqnd/v1/dqnd.proto) */
static const char *const code_names[] = {
    "OK",                 "CANCELLED", "UNKNOWN",      "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS",     "PERMISSION_DENIED",         "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE",       "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",      "DATA_LOSS",         "UNAUTHENTICATED",
};
#define N_CODES ((int)(sizeof code_names / sizeof code_names[0]))
#define N_CMDS 64 /* Request oneof cases below this are counted by name; index 0 is "unknown" */

/* upper bounds (seconds); a request's span covers queueing and the job */
static const double req_le[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
static const double step_le[] = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                 0.005,   0.01,     0.025,   0.05,   0.1,     0.25,   1};
#define REQ_NB ((int)(sizeof req_le / sizeof req_le[0]))
#define STEP_NB ((int)(sizeof step_le / sizeof step_le[0]))
#define MAX_NB 16

typedef struct hist {
  uint64_t b[MAX_NB + 1]; /* per bucket (not cumulative); b[nb]: above the last bound */
  uint64_t count;
  double sum;
} hist_t;

typedef struct counters {
  uint64_t requests[N_CMDS][N_CODES];
  hist_t req_dur[N_CMDS];
  uint64_t transitions, steps;
  hist_t step_dur;
  int64_t gpu_used, gpu_total; /* < 0: not known */
} counters_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static counters_t m = {.gpu_used = -1, .gpu_total = -1};
static nng_http_server *http_srv;

/* `times` observations of v; sum: what they add to _sum (v * times, or the
 * exact total they were averaged from) */
static void hist_observe(hist_t *h, const double *le, int nb, double v, uint64_t times, double sum) {
  int i = 0;
  while (i < nb && v > le[i]) i++;
  h->b[i] += times;
  h->count += times;
  h->sum += sum;
}

static int cmd_index(int cs) { return cs > 0 && cs < N_CMDS && wire_command_name(cs) ? cs : 0; }

void metrics_request(int command_case, int code, double seconds) {
  int i = cmd_index(command_case);
  if (code < 0 || code >= N_CODES) code = 2; /* UNKNOWN: never sent by this daemon */
  if (!(seconds >= 0)) seconds = 0;
  pthread_mutex_lock(&mu);
  m.requests[i][code]++;
  hist_observe(&m.req_dur[i], req_le, REQ_NB, seconds, 1, seconds);
  pthread_mutex_unlock(&mu);
}

void metrics_transitions(uint64_t n) {
  pthread_mutex_lock(&mu);
  m.transitions += n;
  pthread_mutex_unlock(&mu);
}

void metrics_steps(int n, double seconds) {
  if (n <= 0) return;
  pthread_mutex_lock(&mu);
  m.steps += (uint64_t)n;
  if (!(seconds >= 0)) seconds = 0;
  hist_observe(&m.step_dur, step_le, STEP_NB, seconds / n, (uint64_t)n, seconds);
  pthread_mutex_unlock(&mu);
}

void metrics_gpu_memory(int64_t used, int64_t total) {
  pthread_mutex_lock(&mu);
  m.gpu_used = used;
  m.gpu_total = used < 0 ? -1 : total;
  pthread_mutex_unlock(&mu);
}

static char dev_label[64], dev_name[512]; /* set once at start, before the metrics listener (main.c) */

/* a label value: backslash and double quote escaped, newlines dropped */
static void label_copy(char *dst, size_t n, const char *src) {
  size_t w = 0;
  for (; *src && w + 2 < n; src++) {
    if (*src == '\n') continue;
    if (*src == '"' || *src == '\\') dst[w++] = '\\';
    dst[w++] = *src;
  }
  dst[w] = 0;
}

void metrics_device(const char *label, const char *name) {
  pthread_mutex_lock(&mu);
  label_copy(dev_label, sizeof dev_label, label);
  label_copy(dev_name, sizeof dev_name, name);
  pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------- exposition */

typedef struct buf {
  char *p;
  size_t len, cap;
  int oom;
} buf_t;

__attribute__((format(printf, 2, 3))) static void out(buf_t *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->p && (size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 8192;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p, b->cap = cap;
  }
}

static void family(buf_t *b, const char *name, const char *type, const char *help) {
  out(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* labels: "" or `command="Step",` (ends in a comma, so le follows) */
static void hist_out(buf_t *b, const char *name, const char *labels, const hist_t *h, const double *le, int nb) {
  uint64_t cum = 0;
  for (int i = 0; i < nb; i++) {
    cum += h->b[i];
    out(b, "%s_bucket{%sle=\"%g\"} %" PRIu64 "\n", name, labels, le[i], cum);
  }
  out(b, "%s_bucket{%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, h->count);
  size_t n = strlen(labels);
  int ln = n ? (int)n - 1 : 0; /* without the trailing comma */
  out(b, "%s_sum%s%.*s%s %.9g\n", name, ln ? "{" : "", ln, labels, ln ? "}" : "", h->sum);
  out(b, "%s_count%s%.*s%s %" PRIu64 "\n", name, ln ? "{" : "", ln, labels, ln ? "}" : "", h->count);
}

static const char *cmd_name(int i) { return i ? wire_command_name(i) : "unknown"; }

typedef metrics_trainer_t tsnap_t;

static int (*trainer_source)(server_t *s, metrics_trainer_t **out);
void metrics_set_trainer_source(int (*list)(server_t *s, metrics_trainer_t **out)) { trainer_source = list; }

static void render(server_t *s, buf_t *b) {
  counters_t *c = malloc(sizeof *c);
  if (!c) {
    b->oom = 1;
    return;
  }
  pthread_mutex_lock(&mu);
  *c = m;
  pthread_mutex_unlock(&mu);

  family(b, "dqnd_requests_total", "counter", "Requests answered, by command and status code.");
  for (int i = 0; i < N_CMDS; i++)
    for (int k = 0; k < N_CODES; k++)
      if (c->requests[i][k])
        out(b, "dqnd_requests_total{command=\"%s\",code=\"%s\"} %" PRIu64 "\n", cmd_name(i), code_names[k],
            c->requests[i][k]);
  family(b, "dqnd_request_duration_seconds", "histogram",
         "Seconds from receiving a request to sending its reply (queueing included), by command.");
  for (int i = 0; i < N_CMDS; i++)
    if (c->req_dur[i].count) {
      char labels[64];
      snprintf(labels, sizeof labels, "command=\"%s\",", cmd_name(i));
      hist_out(b, "dqnd_request_duration_seconds", labels, &c->req_dur[i], req_le, REQ_NB);
    }
  family(b, "dqnd_transitions_submitted_total", "counter", "Transitions accepted by SubmitTransitions.");
  out(b, "dqnd_transitions_submitted_total %" PRIu64 "\n", c->transitions);
  family(b, "dqnd_training_steps_total", "counter", "Optimiser steps run (Step commands and continuous training).");
  out(b, "dqnd_training_steps_total %" PRIu64 "\n", c->steps);
  family(b, "dqnd_step_duration_seconds", "histogram",
         "Seconds per optimiser step (each learner call's mean, counted once per step).");
  hist_out(b, "dqnd_step_duration_seconds", "", &c->step_dur, step_le, STEP_NB);

  /* the trainers, as the source main.c registered lists them (trainer.c:
   * each one's snapshot, never waiting for its worker) */
  tsnap_t *t = NULL;
  int n = trainer_source ? trainer_source(s, &t) : 0;
  if (n < 0) n = 0, b->oom = 1;
  family(b, "dqnd_trainers", "gauge", "Trainers loaded.");
  out(b, "dqnd_trainers %d\n", n);
  /* trainer names are [A-Za-z0-9_.-] (trainer_name_ok): no label escaping needed */
  family(b, "dqnd_trainer_queue_depth", "gauge", "Jobs queued on the trainer's worker, the running one included.");
  for (int i = 0; i < n; i++) out(b, "dqnd_trainer_queue_depth{trainer=\"%s\"} %" PRId64 "\n", t[i].name, t[i].queued);
  family(b, "dqnd_trainer_replay_size", "gauge", "Transitions held in the trainer's replay buffer.");
  for (int i = 0; i < n; i++)
    out(b, "dqnd_trainer_replay_size{trainer=\"%s\"} %" PRId64 "\n", t[i].name, t[i].replay_size);
  family(b, "dqnd_trainer_step", "gauge", "Optimiser steps the trainer has taken (restored ones included).");
  for (int i = 0; i < n; i++) out(b, "dqnd_trainer_step{trainer=\"%s\"} %" PRIu64 "\n", t[i].name, t[i].step);
  family(b, "dqnd_trainer_memory_bytes", "gauge",
         "Estimated bytes the trainer's learner holds (learner_memory_estimate: parameters, optimiser, replay).");
  for (int i = 0; i < n; i++) out(b, "dqnd_trainer_memory_bytes{trainer=\"%s\"} %" PRId64 "\n", t[i].name, t[i].memory);
  family(b, "dqnd_trainer_members", "gauge", "Members of the trainer's population (1: a trainer of one).");
  for (int i = 0; i < n; i++) out(b, "dqnd_trainer_members{trainer=\"%s\"} %d\n", t[i].name, t[i].members);
  family(b, "dqnd_trainer_diverged_members", "gauge",
         "Members whose training diverged and stopped, their last good state kept (until SetHyperparams, CopyMember "
         "or LoadCheckpoint resumes them).");
  for (int i = 0; i < n; i++)
    out(b, "dqnd_trainer_diverged_members{trainer=\"%s\"} %d\n", t[i].name, t[i].diverged);
  family(b, "dqnd_trainer_error", "gauge",
         "1 when a device error disabled the trainer (its commands answer UNAVAILABLE until a LoadCheckpoint).");
  for (int i = 0; i < n; i++) out(b, "dqnd_trainer_error{trainer=\"%s\"} %d\n", t[i].name, t[i].error);
  free(t);

#if defined(__SANITIZE_ADDRESS__)
  /* a sanitizer build: AddressSanitizer's allocator replaces glibc's, whose
   * mallinfo2 would count nothing */
  family(b, "dqnd_heap_bytes", "gauge",
         "Bytes malloc has handed out and not had back (AddressSanitizer's allocator in this build).");
  out(b, "dqnd_heap_bytes %zu\n", __sanitizer_get_current_allocated_bytes());
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  /* what a leak grows (the resident size also moves with what malloc keeps
   * after a free): test-soak compares it between two quiet moments */
  struct mallinfo2 mi = mallinfo2();
  family(b, "dqnd_heap_bytes", "gauge",
         "Bytes malloc has handed out and not had back (its arenas and its mmapped blocks; glibc's mallinfo2).");
  out(b, "dqnd_heap_bytes %zu\n", mi.uordblks + mi.hblkhd);
#endif

  pthread_mutex_lock(&mu);
  family(b, "dqnd_device_info", "gauge", "The device this daemon runs on: --device's GPU index and its name.");
  out(b, "dqnd_device_info{device=\"%s\",name=\"%s\"} 1\n", dev_label, dev_name);
  pthread_mutex_unlock(&mu);
  /* left out unless known: with no CUDA device, or none in use yet, there is
   * no GPU memory to report (main.c samples it) */
  if (c->gpu_used >= 0) {
    family(b, "dqnd_gpu_memory_used_bytes", "gauge",
             "Memory in use on the CUDA device, by every process (total minus free, as nvidia-smi shows).");
    out(b, "dqnd_gpu_memory_used_bytes %" PRId64 "\n", c->gpu_used);
    family(b, "dqnd_gpu_memory_total_bytes", "gauge", "Memory of the CUDA device.");
    out(b, "dqnd_gpu_memory_total_bytes %" PRId64 "\n", c->gpu_total);
  }
  free(c);
}

/* nng's HTTP thread: GET (and HEAD) /metrics. Other paths, /metrics/x and
 * /metricsx included, never reach here: nng answers 404 (a handler that is
 * not a tree matches its path exactly, or with one trailing '/'), and other
 * methods 405. */
static void handle_metrics(nng_aio *aio) {
  server_t *s = nng_http_handler_get_data(nng_aio_get_input(aio, 1));
  buf_t b = {0};
  render(s, &b);
  nng_http_res *res = NULL;
  int rv;
  if (b.oom) {
    rv = nng_http_res_alloc_error(&res, NNG_HTTP_STATUS_INTERNAL_SERVER_ERROR);
  } else {
    rv = nng_http_res_alloc(&res);
    if (!rv) rv = nng_http_res_set_header(res, "Content-Type", CONTENT_TYPE);
    if (!rv) rv = nng_http_res_copy_data(res, b.p, b.len);
  }
  free(b.p);
  if (rv) {
    if (res) nng_http_res_free(res);
    nng_aio_finish(aio, rv);
    return;
  }
  nng_aio_set_output(aio, 0, res);
  nng_aio_finish(aio, 0);
}

static int bound_port(nng_http_server *srv) {
  nng_sockaddr sa;
  if (nng_http_server_get_addr(srv, &sa)) return -1;
  if (sa.s_family == NNG_AF_INET) return ntohs(sa.s_in.sa_port);
  if (sa.s_family == NNG_AF_INET6) return ntohs(sa.s_in6.sa_port);
  return -1;
}

int metrics_start(server_t *s, char *err, size_t errlen) {
  const char *u = s->opts.metrics_listen;
  if (!u[0]) return 0;
  nng_url *url;
  int rv = nng_url_parse(&url, u);
  if (rv) return snprintf(err, errlen, "metrics-listen: '%s': %s", u, nng_strerror(rv)), -1;
  if (url->u_path[0] && strcmp(url->u_path, "/") && strcmp(url->u_path, "/metrics")) {
    snprintf(err, errlen, "metrics-listen: '%s': the path is always /metrics (give http://HOST:PORT)", u);
    nng_url_free(url);
    return -1;
  }
  nng_http_handler *h = NULL;
  const char *what = "cannot use the address";
  if (!(rv = nng_http_server_hold(&http_srv, url))) {
    what = "handler";
    if (!(rv = nng_http_handler_alloc(&h, "/metrics", handle_metrics)) && !(rv = nng_http_handler_set_data(h, s, NULL)) &&
        !(rv = nng_http_server_add_handler(http_srv, h))) {
      h = NULL; /* the server's now */
      what = "cannot listen";
      rv = nng_http_server_start(http_srv);
    }
  }
  if (rv) {
    snprintf(err, errlen, "metrics-listen: %s: %s: %s", u, what, nng_strerror(rv));
    if (h) nng_http_handler_free(h);
    if (http_srv) nng_http_server_release(http_srv);
    http_srv = NULL;
    nng_url_free(url);
    return -1;
  }
  int port = bound_port(http_srv); /* the one chosen, for port 0 */
  const char *host = url->u_hostname[0] ? url->u_hostname : "*";
  int v6 = strchr(host, ':') != NULL;
  log_info(NULL, "metrics on http://%s%s%s:%d/metrics%s", v6 ? "[" : "", host, v6 ? "]" : "", port >= 0 ? port : atoi(url->u_port),
           opts_url_is_loopback(u) ? "" : " (no authentication: anyone who reaches this port can read them)");
  nng_url_free(url);
  return 0;
}

void metrics_stop(void) {
  if (!http_srv) return;
  nng_http_server_stop(http_srv);
  nng_http_server_release(http_srv);
  http_srv = NULL;
}
