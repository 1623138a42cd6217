/*
 * test-soak.c — sustained load: 64 concurrent clients, half over ipc and
 * half over tls+tcp on loopback (with an auth token), each mixing every
 * command of the protocol for a bounded time (30 s in the test suite;
 * `test-soak --seconds 600 --json FILE` is the 10-minute benchmark,
 * tests/bench/run-soak.sh). At the end:
 *   - every counted trainer's replay_total equals the transitions its
 *     clients were told were accepted (nothing lost, nothing doubled);
 *   - the daemon's resident memory, sampled every second, does not grow
 *     after warm-up (the first third of the run): the least-squares slope of
 *     those samples is at most RSS_SLOPE_MAX_KB_S, or within three standard
 *     errors of it (the mix makes and drops trainers and uploads all the time,
 *     so single samples swing by megabytes: in 30 s the standard error is
 *     ~100 kB/s, in the 10-minute benchmark ~1 kB/s);
 *   - every command succeeded at least once;
 *   - no request failed other than the load-shedding answer
 *     (RESOURCE_EXHAUSTED: a full queue), which the client counts, and
 *     shed requests are at most SHED_MAX of all requests;
 *   - p50 and p99 latency per command are printed (and written as JSON).
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define N_CLIENTS 64
#define N_TRAINERS 8
#define TOKEN "soak-token"
/* A leak of one small allocation per request (~1,500 requests a second here)
 * grows the RSS by tens of kB a second (BENCHMARKS.md, "Soak", has the
 * measured slopes) */
#define RSS_SLOPE_MAX_KB_S 16.0
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
  const char *extra[] = {"--listen", listen, "--tls-cert", cert, "--tls-key", key, "--auth-token", TOKEN,
                         "--contexts", "128", "--queue-depth", "64", "--max-trainers", "256",
                         "--checkpoint-interval", "5", NULL};
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
  /* one sample a second; those from warm-up on are fitted by a line */
  const int max_samples = seconds + 8;
  double *rt = malloc(sizeof(double) * (size_t)max_samples), *rv = malloc(sizeof(double) * (size_t)max_samples);
  int ns = 0;
  double warm_at = t_start + seconds / 3.0, next_sample = warm_at;
  while (now() < t_start + seconds && !atomic_load(&stop_flag)) {
    usleep(20000);
    double tn = now();
    if (tn >= next_sample && ns < max_samples) {
      long kb = rss_kb(d.pid);
      if (rss_warm < 0) rss_warm = kb;
      rt[ns] = tn - t_start, rv[ns] = (double)kb, ns++;
      next_sample += 1.0;
    }
  }
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
                         "\"commands\": {",
                         elapsed, N_CLIENTS, (unsigned long long)calls, (unsigned long long)shed,
                         (unsigned long long)total, rss_warm, rss_end, slope, se);
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
  printf("daemon RSS after warm-up: %d samples a second apart, slope %+.2f +- %.2f kB/s (bound %.0f):", ns, slope,
         se, RSS_SLOPE_MAX_KB_S);
  for (int i = 0; i < ns; i++) printf(" %.0f", rv[i]);
  printf(" kB\n");
  ck_assert_msg(ns >= 3, "only %d RSS samples after warm-up", ns);
  ck_assert_msg(slope - 3 * se <= RSS_SLOPE_MAX_KB_S,
                "the daemon's RSS grows %.2f +- %.2f kB/s after warm-up: more than %.0f kB/s by over three standard "
                "errors", slope, se, RSS_SLOPE_MAX_KB_S);
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
