/*
 * test-soak.c — sustained load: 64 concurrent clients, half over ipc and
 * half over tls+tcp on loopback (with an auth token), each mixing every
 * command of the protocol for a bounded time (30 s in the test suite;
 * `test-soak --seconds 600 --json FILE` is the 10-minute benchmark,
 * tests/bench/run-soak.sh). At the end:
 *   - every counted trainer's replay_total equals the transitions its
 *     clients were told were accepted (nothing lost, nothing doubled);
 *   - nothing leaks: at two quiet moments (every client paused between
 *     requests, the life cycles' trainers destroyed), after warm-up (the
 *     first third of the run) and at the end, the daemon's heap in use
 *     (its dqnd_heap_bytes gauge: malloc's bytes handed out and not had
 *     back) grows by at most HEAP_GROWTH_BASE + HEAP_GROWTH_PER_REQUEST
 *     bytes per request between them;
 *   - the resident size after warm-up (sampled every 20 ms; a point a
 *     second: that second's least sample, the floor under the requests in
 *     flight) is fitted by a line whose slope is at most RSS_SLOPE_MAX_KB_S
 *     in runs of RSS_LONG_SECONDS or more (the benchmark), or within three
 *     standard errors of it. Shorter runs bound it by RSS_SLOPE_SHORT_KB_S,
 *     a runaway only: in 30 s malloc's arenas are still growing to their
 *     working size (+36 to +406 kB/s measured here with the heap in use
 *     flat), so there the heap is the leak check;
 *   - every command succeeded at least once;
 *   - no request failed other than the load-shedding answer
 *     (RESOURCE_EXHAUSTED: a full queue), which the client counts, and
 *     shed requests are at most SHED_MAX of all requests;
 *   - p50 and p99 latency per command are printed (and written as JSON).
 */
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define N_CLIENTS 64
#define N_TRAINERS 8
#define TOKEN "soak-token"
/* The heap's growth between the quiet moments: measured +110 to +120 kB over
 * 10-12 thousand requests in 30 s runs, +148 kB over 55 thousand in 120 s
 * (malloc's per-thread caches filling; ~1 byte a request at most). A leak of
 * one small allocation (48 bytes with malloc's header) per request adds
 * over 500 kB in a 30 s run: it fails. */
#define HEAP_GROWTH_BASE (256 << 10)
#define HEAP_GROWTH_PER_REQUEST 4
/* the resident size's slope (BENCHMARKS.md, "Soak", has the measured
 * slopes): in the benchmark's long runs, and a runaway's in short ones */
#define RSS_LONG_SECONDS 300
#define RSS_SLOPE_MAX_KB_S 16.0
#define RSS_SLOPE_SHORT_KB_S 1024.0
/* a full queue sheds; measured at about 1% of requests with 64 clients on 8
 * trainers (queue depth 64) */
#define SHED_MAX 0.05

enum {
  C_HEALTH, C_INFO, C_LIST, C_CREATE, C_DESTROY, C_SUBMIT, C_STEP, C_ACT, C_SYNC, C_HPARAMS, C_STATS, C_SAVE,
  C_LISTCK, C_FETCH, C_LOAD_PATH, C_LOAD_FILE, N_CMD
};
static const char *cmd_names[N_CMD] = {"Health", "ServerInfo", "ListTrainers", "CreateTrainer", "DestroyTrainer",
                                       "SubmitTransitions", "Step", "Act", "SyncTarget", "SetHyperparams", "GetStats",
                                       "SaveCheckpoint", "ListCheckpoints", "FetchCheckpoint",
                                       "LoadCheckpoint(path)", "LoadCheckpoint(upload)"};

static int seconds = 30;
static const char *json_out = NULL;

typedef struct lat {
  double *v;
  size_t n, cap;
} lat_t;

typedef struct client {
  int id;
  char url[400], dir[400];
  dqnd_tls_opts_t tls;
  char ca[600];
  lat_t lat[N_CMD];
  uint64_t succeeded[N_CMD];
  uint64_t accepted[N_TRAINERS]; /* transitions the daemon accepted, per counted trainer */
  uint64_t shed, calls;
  char failure[1600];            /* the first unexpected answer */
} client_t;

static atomic_int stop_flag;
static atomic_int pause_req, paused; /* the quiet moments: every client waits at its loop's top */
static double t_start;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void lat_add(lat_t *l, double s) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 1024;
    l->v = realloc(l->v, sizeof(double) * l->cap);
  }
  l->v[l->n++] = s;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* rc 0 is fine; RESOURCE_EXHAUSTED (a full queue) is counted as shed; anything else fails the run */
static int ok(client_t *cl, dqnd_client_t *c, int cmd, int rc, double t0) {
  lat_add(&cl->lat[cmd], now() - t0);
  cl->calls++;
  if (rc == 0) return cl->succeeded[cmd]++, 1;
  if (rc == 8 && strstr(dqnd_last_error(c), "queue is full")) {
    cl->shed++;
    return 0;
  }
  if (!cl->failure[0])
    snprintf(cl->failure, sizeof cl->failure, "client %d: %s: %s (%s)", cl->id, cmd_names[cmd], dqnd_strerror(rc),
             dqnd_last_error(c));
  atomic_store(&stop_flag, 1);
  return 0;
}

/* a raw request whose reply only counts by its status */
static int call_discard(dqnd_client_t *c, Dqnd__V1__Request *req) {
  Dqnd__V1__Reply *rep = NULL;
  int rc = dqnd_call(c, req, &rep);
  if (rep) dqnd_reply_free(rep);
  return rc;
}

/* a destroy that a full queue shed is retried: the trainer must not outlive its cycle */
static void destroy_retry(client_t *cl, dqnd_client_t *c, const char *name) {
  for (;;) {
    double t0 = now();
    int rc = dqnd_destroy_trainer(c, name, 0, NULL);
    if (ok(cl, c, C_DESTROY, rc, t0) || rc != 8 || cl->failure[0]) return;
    usleep(1000);
  }
}

static void *client_main(void *arg) {
  client_t *cl = arg;
  dqnd_client_t *c;
  char err[1024];
  if (dqnd_connect_tls(cl->url, 120000, &cl->tls, &c, err, sizeof err)) {
    snprintf(cl->failure, sizeof cl->failure, "client %d: connect %s: %s", cl->id, cl->url, err);
    atomic_store(&stop_flag, 1);
    return NULL;
  }
  dqnd_set_token(c, TOKEN);
  uint64_t rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(cl->id + 1) * 0xD1B54A32D192ED03ULL;
  batch_t *b = malloc(sizeof *b);
  char mine[40], tmp[40], tmp2[40], local[700];
  unsigned cycle = 0;
  snprintf(local, sizeof local, "%s/fetched-%d.dqnd", cl->dir, cl->id);
  float states[4 * S_DIM];
  int32_t actions[4];
  uint64_t tag = (uint64_t)cl->id * 1000000;
  while (!atomic_load(&stop_flag)) {
    if (atomic_load(&pause_req)) { /* nothing of ours in flight, the life cycle's trainers destroyed */
      atomic_fetch_add(&paused, 1);
      while (atomic_load(&pause_req) && !atomic_load(&stop_flag)) usleep(1000);
      atomic_fetch_sub(&paused, 1);
      continue;
    }
    int t = (int)(rng_next(&rng) % N_TRAINERS);
    snprintf(mine, sizeof mine, "t%d", t);
    int r = (int)(rng_next(&rng) % 100), rc;
    double t0 = now();
    if (r < 30) { /* the transitions: counted exactly */
      make_batch(b, 16, ++tag);
      rc = submit(c, mine, b);
      if (ok(cl, c, C_SUBMIT, rc, t0)) cl->accepted[t] += 16;
    } else if (r < 45) {
      learner_stats_t st;
      ok(cl, c, C_STEP, dqnd_step(c, mine, 1 + (int)(rng_next(&rng) % 2), &st), t0);
    } else if (r < 60) {
      for (int i = 0; i < 4 * S_DIM; i++) states[i] = (float)((rng_next(&rng) % 2000) / 1000.0 - 1.0);
      ok(cl, c, C_ACT, dqnd_act(c, mine, states, 4, S_DIM, 0, actions, NULL, 0), t0);
    } else if (r < 64) {
      ok(cl, c, C_SYNC, dqnd_sync_target(c, mine, 0.0f), t0);
    } else if (r < 68) {
      char lr[40];
      snprintf(lr, sizeof lr, "lr=%g", 1e-4 * (double)(1 + rng_next(&rng) % 10));
      const char *f[] = {lr};
      ok(cl, c, C_HPARAMS, dqnd_set_hparams(c, mine, f, 1), t0);
    } else if (r < 73) {
      learner_stats_t st;
      ok(cl, c, C_STATS, dqnd_get_stats(c, mine, &st), t0);
    } else if (r < 75) {
      int serving;
      ok(cl, c, C_HEALTH, dqnd_health(c, &serving, NULL), t0);
    } else if (r < 77) {
      Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
      Dqnd__V1__ServerInfo e = DQND__V1__SERVER_INFO__INIT;
      req.command_case = DQND__V1__REQUEST__COMMAND_SERVER_INFO;
      req.server_info = &e;
      ok(cl, c, C_INFO, call_discard(c, &req), t0);
    } else if (r < 79) {
      Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
      Dqnd__V1__ListTrainers e = DQND__V1__LIST_TRAINERS__INIT;
      req.command_case = DQND__V1__REQUEST__COMMAND_LIST_TRAINERS;
      req.list_trainers = &e;
      ok(cl, c, C_LIST, call_discard(c, &req), t0);
    } else if (r < 82) {
      dqnd_checkpoint_t ck;
      ok(cl, c, C_SAVE, dqnd_save_checkpoint(c, mine, 0, &ck), t0);
    } else if (r < 85) {
      dqnd_checkpoint_t *cks = NULL;
      int n = 0;
      ok(cl, c, C_LISTCK, dqnd_list_checkpoints(c, mine, &cks, &n), t0);
      free(cks);
    } else if (r < 88) {
      dqnd_checkpoint_t ck;
      ok(cl, c, C_FETCH, dqnd_fetch_checkpoint(c, mine, NULL, local, 0, &ck), t0);
    } else {
      /* a trainer's whole life: create, feed, save, restore a copy from the
       * daemon-side path and one from an upload, destroy both */
      snprintf(tmp, sizeof tmp, "tmp-%d-%u", cl->id, ++cycle);
      snprintf(tmp2, sizeof tmp2, "tmp2-%d-%u", cl->id, cycle);
      if (!ok(cl, c, C_CREATE, dqnd_create_trainer(c, tmp, small_fields, N_SMALL, NULL, NULL), t0)) continue;
      make_batch(b, 16, ++tag);
      t0 = now();
      ok(cl, c, C_SUBMIT, submit(c, tmp, b), t0);
      dqnd_checkpoint_t ck;
      t0 = now();
      if (ok(cl, c, C_SAVE, dqnd_save_checkpoint(c, tmp, 1, &ck), t0)) {
        t0 = now();
        if (ok(cl, c, C_LOAD_PATH, dqnd_load_checkpoint_path(c, tmp2, ck.path, 1, NULL), t0)) {
          destroy_retry(cl, c, tmp2);
        }
        t0 = now();
        if (ok(cl, c, C_FETCH, dqnd_fetch_checkpoint(c, tmp, NULL, local, 0, &ck), t0)) {
          t0 = now();
          snprintf(tmp2, sizeof tmp2, "tmp3-%d-%u", cl->id, cycle);
          if (ok(cl, c, C_LOAD_FILE, dqnd_load_checkpoint_file(c, tmp2, local, 1, NULL, 0), t0)) destroy_retry(cl, c, tmp2);
        }
      }
      destroy_retry(cl, c, tmp);
    }
  }
  free(b);
  dqnd_close(c);
  return NULL;
}

static long rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
  fclose(f);
  return kb;
}

/* the daemon's dqnd_heap_bytes gauge from its metrics endpoint; -1 if absent */
static long long heap_bytes(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) return close(fd), -1;
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  ssize_t r;
  while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  close(fd);
  buf[n] = 0;
  const char *p = strstr(buf, "\ndqnd_heap_bytes ");
  long long v = p ? atoll(p + 17) : -1;
  free(buf);
  return v;
}

/* a quiet moment: every client paused between requests; the least of five
 * readings of the heap 100 ms apart (a periodic checkpoint may be writing);
 * *calls: the requests made so far. The clients resume when it returns. */
static long long quiet_heap(int port, uint64_t *calls, const client_t *cls) {
  atomic_store(&pause_req, 1);
  for (double t0 = now(); atomic_load(&paused) < N_CLIENTS && !atomic_load(&stop_flag);) {
    ck_assert_msg(now() - t0 < 60, "only %d of %d clients paused within 60 s", atomic_load(&paused), N_CLIENTS);
    usleep(1000);
  }
  long long least = -1;
  for (int i = 0; i < 5; i++) {
    usleep(100000);
    long long h = heap_bytes(port);
    if (h >= 0 && (least < 0 || h < least)) least = h;
  }
  *calls = 0;
  for (int i = 0; i < N_CLIENTS; i++) *calls += cls[i].calls;
  atomic_store(&pause_req, 0);
  return least;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p) { return n ? v[(size_t)fmin((double)n - 1, floor(p * (double)n))] : 0; }

START_TEST(soak) {
  daemon_t d = {0};
  snprintf(d.dir, sizeof d.dir, "/tmp/dqnd-soak-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(d.dir));
  char certs[400], mk[500];
  snprintf(certs, sizeof certs, "%s/certs", d.dir);
  snprintf(mk, sizeof mk, "mkdir -p '%s'", certs);
  ck_assert_int_eq(system(mk), 0);
  make_certs(certs);
  static char listen[100], cert[500], key[500], ca[500], tls_url[100];
  int port = free_port();
  snprintf(listen, sizeof listen, "tls+tcp://127.0.0.1:%d", port);
  snprintf(tls_url, sizeof tls_url, "tls+tcp://localhost:%d", port);
  snprintf(cert, sizeof cert, "%s/server.pem", certs);
  snprintf(key, sizeof key, "%s/server.key", certs);
  snprintf(ca, sizeof ca, "%s/ca.pem", certs);
  static char mlisten[64];
  const int mport = free_port();
  snprintf(mlisten, sizeof mlisten, "http://127.0.0.1:%d", mport);
  const char *extra[] = {"--listen", listen, "--tls-cert", cert, "--tls-key", key, "--auth-token", TOKEN,
                         "--contexts", "128", "--queue-depth", "64", "--max-trainers", "256",
                         "--checkpoint-interval", "5", "--metrics-listen", mlisten, NULL};
  start_daemon_argv(&d, extra);
  /* the counted trainers, each with a first batch and a checkpoint (so Fetch has one) */
  dqnd_client_t *c = connect_to(&d);
  dqnd_set_token(c, TOKEN);
  uint64_t accepted[N_TRAINERS] = {0};
  batch_t *b = malloc(sizeof *b);
  for (int t = 0; t < N_TRAINERS; t++) {
    char name[20];
    snprintf(name, sizeof name, "t%d", t);
    const char *f[N_SMALL]; /* a ring that is full well before warm-up ends: its pages count from the start */
    for (int i = 0; i < N_SMALL; i++) f[i] = strncmp(small_fields[i], "replay_capacity=", 16) ? small_fields[i] : "replay_capacity=1000";
    ck_assert_msg(dqnd_create_trainer(c, name, f, N_SMALL, NULL, NULL) == 0, "%s", dqnd_last_error(c));
    make_batch(b, 64, 1 + (uint64_t)t);
    ck_assert_int_eq(submit(c, name, b), 0);
    accepted[t] = 64;
    dqnd_checkpoint_t ck;
    ck_assert_int_eq(dqnd_save_checkpoint(c, name, 0, &ck), 0);
  }
  free(b);
  static client_t cls[N_CLIENTS];
  pthread_t th[N_CLIENTS];
  for (int i = 0; i < N_CLIENTS; i++) {
    client_t *cl = &cls[i];
    memset(cl, 0, sizeof *cl);
    cl->id = i;
    snprintf(cl->dir, sizeof cl->dir, "%s", d.dir);
    if (i % 2) {
      snprintf(cl->url, sizeof cl->url, "%s", tls_url);
      snprintf(cl->ca, sizeof cl->ca, "%s", ca);
      cl->tls.ca = cl->ca;
    } else
      snprintf(cl->url, sizeof cl->url, "%s", d.url);
  }
  t_start = now();
  for (int i = 0; i < N_CLIENTS; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, client_main, &cls[i]), 0);
  long rss_warm = -1, rss_end;
  /* from warm-up on, the RSS every 20 ms; a point a second: that second's
   * least sample (the floor under the uploads and replies in flight, which
   * swing single samples by megabytes; what a leak leaves stays in the
   * floor); the points are fitted by a line */
  const int max_samples = seconds + 8;
  double *rt = malloc(sizeof(double) * (size_t)max_samples), *rv = malloc(sizeof(double) * (size_t)max_samples);
  int ns = 0;
  double warm_at = t_start + seconds / 3.0, next_sample = warm_at + 1.0;
  long floor_kb = -1;
  /* the heap in use at two quiet moments, after warm-up and at the end */
  long long heap_a = -1, heap_b = -1;
  uint64_t calls_a = 0, calls_b = 0;
  int quiet_a = 0;
  while (now() < t_start + seconds && !atomic_load(&stop_flag)) {
    usleep(20000);
    double tn = now();
    if (tn < warm_at) continue;
    if (!quiet_a) {
      heap_a = quiet_heap(mport, &calls_a, cls), quiet_a = 1;
      next_sample = now() + 1.0;
      continue;
    }
    long kb = rss_kb(d.pid);
    if (rss_warm < 0) rss_warm = kb;
    if (kb > 0 && (floor_kb < 0 || kb < floor_kb)) floor_kb = kb;
    if (tn >= next_sample && ns < max_samples) {
      rt[ns] = tn - t_start - 0.5, rv[ns] = (double)floor_kb, ns++;
      floor_kb = -1;
      next_sample += 1.0;
    }
  }
  if (!atomic_load(&stop_flag)) heap_b = quiet_heap(mport, &calls_b, cls);
  atomic_store(&stop_flag, 1);
  for (int i = 0; i < N_CLIENTS; i++) pthread_join(th[i], NULL);
  double elapsed = now() - t_start;
  rss_end = rss_kb(d.pid);
  /* the slope after warm-up, least squares over the per-second samples */
  double mt = 0, mv = 0, stt = 0, stv = 0;
  for (int i = 0; i < ns; i++) mt += rt[i] / ns, mv += rv[i] / ns;
  for (int i = 0; i < ns; i++) stt += (rt[i] - mt) * (rt[i] - mt), stv += (rt[i] - mt) * (rv[i] - mv);
  const double slope = stt > 0 ? stv / stt : 0;
  /* the slope's standard error from the fit's residuals: the mix creates and
   * destroys trainers and uploads all the time, so single samples swing by
   * megabytes; a leak must show above that noise */
  double sse = 0;
  for (int i = 0; i < ns; i++) {
    double e = rv[i] - (mv + slope * (rt[i] - mt));
    sse += e * e;
  }
  const double se = ns > 2 && stt > 0 ? sqrt(sse / (ns - 2) / stt) : 0;
  for (int i = 0; i < N_CLIENTS; i++) ck_assert_msg(!cls[i].failure[0], "%s", cls[i].failure);
  /* exact counts */
  for (int i = 0; i < N_CLIENTS; i++)
    for (int t = 0; t < N_TRAINERS; t++) accepted[t] += cls[i].accepted[t];
  uint64_t total = 0, calls = 0, shed = 0;
  for (int t = 0; t < N_TRAINERS; t++) {
    char name[20];
    snprintf(name, sizeof name, "t%d", t);
    learner_stats_t st;
    ck_assert_int_eq(dqnd_get_stats(c, name, &st), 0);
    ck_assert_msg((uint64_t)st.replay_total == accepted[t], "trainer %s holds %lld transitions ever submitted, clients "
                  "were told %llu were accepted", name, (long long)st.replay_total, (unsigned long long)accepted[t]);
    total += accepted[t];
  }
  for (int i = 0; i < N_CLIENTS; i++) calls += cls[i].calls, shed += cls[i].shed;
  /* latency per command */
  char *js = malloc(1 << 16);
  size_t jn = 0;
  jn += (size_t)snprintf(js + jn, (1 << 16) - jn,
                         "{\"seconds\": %.1f, \"clients\": %d, \"requests\": %llu, \"shed\": %llu, \"transitions\": %llu, "
                         "\"rss_warm_kb\": %ld, \"rss_end_kb\": %ld, \"rss_slope_kb_s\": %.3f, \"rss_slope_se_kb_s\": %.3f, "
                         "\"heap_warm_bytes\": %lld, \"heap_end_bytes\": %lld, \"heap_requests_between\": %llu, "
                         "\"commands\": {",
                         elapsed, N_CLIENTS, (unsigned long long)calls, (unsigned long long)shed,
                         (unsigned long long)total, rss_warm, rss_end, slope, se,
                         heap_a, heap_b, (unsigned long long)(calls_b - calls_a));
  printf("soak: %d clients (half ipc, half tls+tcp) for %.1f s: %llu requests (%.0f/s), %llu shed (queue full), "
         "%llu transitions counted exactly\n",
         N_CLIENTS, elapsed, (unsigned long long)calls, (double)calls / elapsed, (unsigned long long)shed,
         (unsigned long long)total);
  printf("%-24s %10s %12s %12s\n", "command", "calls", "p50 (ms)", "p99 (ms)");
  for (int k = 0; k < N_CMD; k++) {
    lat_t all = {0};
    for (int i = 0; i < N_CLIENTS; i++)
      for (size_t j = 0; j < cls[i].lat[k].n; j++) lat_add(&all, cls[i].lat[k].v[j]);
    qsort(all.v, all.n, sizeof(double), cmp_d);
    double p50 = pct(all.v, all.n, 0.5) * 1e3, p99 = pct(all.v, all.n, 0.99) * 1e3;
    printf("%-24s %10zu %12.2f %12.2f\n", cmd_names[k], all.n, p50, p99);
    jn += (size_t)snprintf(js + jn, (1 << 16) - jn, "%s\"%s\": {\"calls\": %zu, \"p50_ms\": %.3f, \"p99_ms\": %.3f}",
                           k ? ", " : "", cmd_names[k], all.n, p50, p99);
    ck_assert_msg(all.n > 0, "no %s was made: the mix must cover every command", cmd_names[k]);
    free(all.v);
    for (int i = 0; i < N_CLIENTS; i++) free(cls[i].lat[k].v);
  }
  jn += (size_t)snprintf(js + jn, (1 << 16) - jn, "}}\n");
  printf("daemon RSS after warm-up %ld kB, at the end %ld kB (%+.2f%%)\n", rss_warm, rss_end,
         100.0 * (double)(rss_end - rss_warm) / (double)rss_warm);
  if (json_out) {
    FILE *f = fopen(json_out, "w");
    ck_assert_ptr_nonnull(f);
    fputs(js, f);
    fclose(f);
  }
  free(js);
  ck_assert_msg(rss_warm > 0 && rss_end > 0, "cannot read the daemon's RSS");
  const double rss_bound = seconds >= RSS_LONG_SECONDS ? RSS_SLOPE_MAX_KB_S : RSS_SLOPE_SHORT_KB_S;
  printf("daemon RSS after warm-up, each second's floor: %d points, slope %+.2f +- %.2f kB/s (bound %.0f):", ns, slope,
         se, rss_bound);
  for (int i = 0; i < ns; i++) printf(" %.0f", rv[i]);
  printf(" kB\n");
  ck_assert_msg(ns >= 3, "only %d RSS samples after warm-up", ns);
  printf("daemon heap in use at the quiet moments: %lld bytes after warm-up, %lld at the end (%+lld over %llu "
         "requests; bound %d + %d a request)\n", heap_a, heap_b, heap_b - heap_a, (unsigned long long)(calls_b - calls_a),
         HEAP_GROWTH_BASE, HEAP_GROWTH_PER_REQUEST);
  fflush(stdout);
  ck_assert_msg(heap_a >= 0 && heap_b >= 0, "no dqnd_heap_bytes from the metrics endpoint (%lld, %lld)", heap_a, heap_b);
  /* 0: malloc is not glibc's (the daemon under valgrind, whose own leak check applies) */
  if (heap_a == 0) printf("dqnd_heap_bytes reads 0: malloc is not glibc's, the heap check does not apply\n");
  const long long heap_bound = HEAP_GROWTH_BASE + HEAP_GROWTH_PER_REQUEST * (long long)(calls_b - calls_a);
  ck_assert_msg(heap_b - heap_a <= heap_bound,
                "the daemon's heap in use grew by %lld bytes over %llu requests between the quiet moments (bound %lld): "
                "a leak", heap_b - heap_a, (unsigned long long)(calls_b - calls_a), heap_bound);
  ck_assert_msg(slope - 3 * se <= rss_bound,
                "the daemon's RSS grows %.2f +- %.2f kB/s after warm-up: more than %.0f kB/s by over three standard "
                "errors", slope, se, rss_bound);
  free(rt), free(rv);
  for (int k = 0; k < N_CMD; k++) {
    uint64_t okn = 0;
    for (int i = 0; i < N_CLIENTS; i++) okn += cls[i].succeeded[k];
    ck_assert_msg(okn > 0, "no %s succeeded", cmd_names[k]);
  }
  ck_assert_msg((double)shed <= SHED_MAX * (double)calls, "%llu of %llu requests shed (bound %.0f%%)",
                (unsigned long long)shed, (unsigned long long)calls, 100 * SHED_MAX);

  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_out = argv[++i];
    else {
      fprintf(stderr, "usage: test-soak [--seconds N] [--json FILE]\n");
      return 2;
    }
  }
  if (seconds < 3) seconds = 3;
  harness_init();
  Suite *s = suite_create("soak");
  TCase *tc = tcase_create("soak");
  tcase_set_timeout(tc, seconds + 240);
  tcase_add_test(tc, soak);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
