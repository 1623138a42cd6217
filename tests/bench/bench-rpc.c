/*
 * bench-rpc — the daemon's overheads, each beside its peer in the same run:
 *  1. Health round trip through dqnd vs a raw nng REQ/REP echo of the same
 *     request/reply sizes on the same transport (goal: <= 1.3x);
 *  2. SubmitTransitions throughput at the `ref` shapes (state_dim 64) over ipc
 *     (goal: >= 1M transitions/s), beside learner_submit in-process;
 *  3. Step(n=100) over RPC vs the same learner stepping in-process
 *     (goal: >= 90%).
 * usage: bench-rpc DQND_BINARY [--quick]
 */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "dqnd.h"
#include "learner.h"
#include "philox.h"

/* ------------------------------------------------ raw nng echo (the peer) */

typedef struct echo {
  nng_socket s;
  size_t reply_len;
  volatile int stop;
} echo_t;

static void *echo_server(void *p) {
  echo_t *e = p;
  for (;;) {
    nng_msg *m;
    if (nng_recvmsg(e->s, &m, 0)) break;
    nng_msg_realloc(m, e->reply_len); /* reply as large as dqnd's Health reply */
    if (nng_sendmsg(e->s, m, 0)) {
      nng_msg_free(m);
      break;
    }
  }
  return NULL;
}

static double echo_rtt(const char *url, size_t req_len, size_t rep_len, int iters) {
  echo_t e = {.reply_len = rep_len};
  nng_rep0_open(&e.s);
  if (nng_listen(e.s, url, NULL, 0)) return -1;
  pthread_t th;
  pthread_create(&th, NULL, echo_server, &e);
  nng_socket c;
  nng_req0_open(&c);
  nng_dial(c, url, NULL, 0);
  unsigned char buf[256];
  memset(buf, 7, sizeof buf);
  for (int i = 0; i < 1000; i++) { /* warm-up */
    nng_msg *m;
    nng_msg_alloc(&m, req_len);
    nng_sendmsg(c, m, 0);
    nng_recvmsg(c, &m, 0);
    nng_msg_free(m);
  }
  double t0 = bench_now();
  for (int i = 0; i < iters; i++) {
    nng_msg *m;
    nng_msg_alloc(&m, req_len);
    memcpy(nng_msg_body(m), buf, req_len);
    nng_sendmsg(c, m, 0);
    nng_recvmsg(c, &m, 0);
    nng_msg_free(m);
  }
  double t = (bench_now() - t0) / iters;
  nng_close(c);
  nng_close(e.s);
  pthread_join(th, NULL);
  return t;
}

/* ------------------------------------------------------------- helpers */

typedef struct subm {
  const char *url;
  const learner_transitions_t *t;
  int rounds, rc;
} subm_t;

static void *submit_thread(void *p) {
  subm_t *m = p;
  dqnd_client_t *c;
  char err[256];
  if ((m->rc = dqnd_connect(m->url, 60000, &c, err, sizeof err))) return NULL;
  for (int k = 0; k < m->rounds && !m->rc; k++) {
    m->rc = dqnd_submit(c, "sub", 64, m->t, NULL);
    if (m->rc == 8) m->rc = 0, k--; /* queue full: retry */
  }
  dqnd_close(c);
  return NULL;
}

static pid_t spawn(const char *bin, const char *url, const char *state) {
  pid_t p = fork();
  if (p == 0) {
    execl(bin, bin, "--listen", url, "--state-dir", state, "--log-level", "warn",
          "--checkpoint-interval", "0", "--queue-depth", "64", (char *)NULL);
    _exit(127);
  }
  return p;
}

static dqnd_client_t *connect_wait(const char *url) {
  for (int i = 0; i < 300; i++) {
    dqnd_client_t *c;
    char err[256];
    if (dqnd_connect(url, 60000, &c, err, sizeof err) == 0) {
      if (dqnd_health(c, NULL, NULL) == 0) return c;
      dqnd_close(c);
    }
    usleep(20000);
  }
  return NULL;
}

static void fill(float *x, size_t n, uint64_t tag) {
  for (size_t i = 0; i < n; i += 4) {
    float g[4];
    philox_normal4(philox_draw(3, 60, tag, (uint32_t)(i / 4)), g);
    for (size_t k = 0; k < 4 && i + k < n; k++) x[i + k] = g[k];
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench-rpc DQND_BINARY [--quick]\n");
    return 2;
  }
  int quick = argc > 2 && !strcmp(argv[2], "--quick");
  char dir[] = "/tmp/dqnd-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char url[300], echo_url[300], state[300];
  snprintf(url, sizeof url, "ipc://%s/dqnd.sock", dir);
  snprintf(echo_url, sizeof echo_url, "ipc://%s/echo.sock", dir);
  snprintf(state, sizeof state, "%s/state", dir);
  pid_t pid = spawn(argv[1], url, state);
  dqnd_client_t *c = connect_wait(url);
  if (!c) {
    fprintf(stderr, "bench-rpc: dqnd did not come up\n");
    return 1;
  }
  char cpu[256] = "?";
  FILE *f = popen("lscpu | sed -n 's/^Model name: *//p'", "r");
  if (f && fgets(cpu, sizeof cpu, f)) cpu[strcspn(cpu, "\n")] = 0;
  if (f) pclose(f);
  printf("machine: %s x%ld, transport ipc\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));

  /* 1. Health vs echo of the same sizes */
  Dqnd__V1__Health h = DQND__V1__HEALTH__INIT;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_HEALTH;
  req.health = &h;
  req.version = 1;
  req.request_id = 123456;
  req.auth_token = "";
  size_t req_len = dqnd__v1__request__get_packed_size(&req);
  Dqnd__V1__Reply *rep;
  dqnd_call(c, &req, &rep);
  size_t rep_len = dqnd__v1__reply__get_packed_size(rep);
  dqnd_reply_free(rep);
  int iters = quick ? 2000 : 20000;
  for (int i = 0; i < 1000; i++) dqnd_health(c, NULL, NULL);
  double t0 = bench_now();
  for (int i = 0; i < iters; i++) dqnd_health(c, NULL, NULL);
  double t_health = (bench_now() - t0) / iters;
  double t_echo = echo_rtt(echo_url, req_len, rep_len, iters);
  printf("health round trip: dqnd %.1f us, raw nng echo %.1f us (%zu/%zu bytes): ratio %.2fx (goal <= 1.3x)\n",
         t_health * 1e6, t_echo * 1e6, req_len, rep_len, t_health / t_echo);

  /* 2. SubmitTransitions at ref shapes */
  const char *ref[] = {"replay_capacity=1000000", "prioritized=1"};
  dqnd_create_trainer(c, "sub", ref, 2, "cpu", NULL);
  const int S = 64, N = 4096, rounds = quick ? 20 : 200;
  float *s = malloc(sizeof(float) * N * S), *s2 = malloc(sizeof(float) * N * S), *r = malloc(sizeof(float) * N);
  int32_t *a = malloc(sizeof(int32_t) * N);
  uint8_t *d = calloc(N, 1);
  fill(s, (size_t)N * S, 1);
  fill(s2, (size_t)N * S, 2);
  fill(r, N, 3);
  for (int i = 0; i < N; i++) a[i] = i % 81;
  learner_transitions_t t = {N, s, a, r, s2, d, NULL, NULL};
  t0 = bench_now();
  for (int k = 0; k < rounds; k++)
    if (dqnd_submit(c, "sub", S, &t, NULL)) {
      fprintf(stderr, "submit: %s\n", dqnd_last_error(c));
      return 1;
    }
  double rpc_tps = (double)N * rounds / (bench_now() - t0);
  /* two connections: the client's encoding overlaps the daemon's copying */
  subm_t sm[2] = {{url, &t, rounds / 2, 0}, {url, &t, rounds / 2, 0}};
  pthread_t sth[2];
  t0 = bench_now();
  for (int k = 0; k < 2; k++) pthread_create(&sth[k], NULL, submit_thread, &sm[k]);
  for (int k = 0; k < 2; k++) pthread_join(sth[k], NULL);
  double rpc2_tps = (double)N * (rounds / 2) * 2 / (bench_now() - t0);
  learner_config_t cfg;
  learner_config_default(&cfg);
  learner_t *l;
  char err[256];
  learner_create(&cfg, LEARNER_BACKEND_CPU, &l, err, sizeof err);
  t0 = bench_now();
  for (int k = 0; k < rounds; k++) learner_submit(l, &t, err, sizeof err);
  double local_tps = (double)N * rounds / (bench_now() - t0);
  printf("submit (batches of %d, %zu bytes each): dqnd over ipc %.2fM transitions/s with one connection, %.2fM/s "
         "with two; in-process %.2fM/s (goal >= 1M/s over ipc)\n",
         N, (size_t)N * (S * 8 + 9), rpc_tps / 1e6, rpc2_tps / 1e6, local_tps / 1e6);

  /* 3. Step(n=100) over RPC vs in-process, on a small config (RPC overhead matters most there) */
  const char *small[] = {"trunk_h1=64", "trunk_h2=64", "value_hidden=32", "adv_hidden=32", "batch=64",
                         "replay_capacity=100000", "seed=5"};
  const char *be_name = getenv("BENCH_BACKEND") ? getenv("BENCH_BACKEND") : "cpu";
  learner_backend_t be = !strcmp(be_name, "cuda") ? LEARNER_BACKEND_CUDA : LEARNER_BACKEND_CPU;
  if (dqnd_create_trainer(c, "st", small, 7, be_name, NULL)) {
    fprintf(stderr, "create: %s\n", dqnd_last_error(c));
    return 1;
  }
  learner_config_t sc;
  learner_config_default(&sc);
  for (int i = 0; i < 7; i++) {
    char k[64];
    const char *eq = strchr(small[i], '=');
    snprintf(k, sizeof k, "%.*s", (int)(eq - small[i]), small[i]);
    learner_config_set(&sc, k, eq + 1, err, sizeof err);
  }
  learner_t *ls;
  if (learner_create(&sc, be, &ls, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  learner_transitions_t t2 = {N, s, a, r, s2, d, NULL, NULL};
  dqnd_submit(c, "st", S, &t2, NULL);
  learner_submit(ls, &t2, err, sizeof err);
  int reps = quick ? 3 : 10;
  learner_stats_t st;
  dqnd_step(c, "st", 100, &st);
  learner_step(ls, 100, &st, err, sizeof err);
  /* interleaved, so drift in the machine's speed hits both alike */
  double t_rpc = 0, t_loc = 0;
  for (int k = 0; k < reps; k++) {
    t0 = bench_now();
    dqnd_step(c, "st", 100, &st);
    t_rpc += bench_now() - t0;
    t0 = bench_now();
    learner_step(ls, 100, &st, err, sizeof err);
    t_loc += bench_now() - t0;
  }
  double rpc_sps = 100.0 * reps / t_rpc, local_sps = 100.0 * reps / t_loc;
  printf("step(n=100) on %s, %lld-parameter net, batch 64: over RPC %.0f steps/s, in-process %.0f steps/s: %.1f%% "
         "(goal >= 90%%)\n",
         be_name, (long long)learner_config_num_params(&sc), rpc_sps, local_sps, 100 * rpc_sps / local_sps);
  printf("(the daemon's BLAS threads: OPENBLAS_NUM_THREADS=%s in both)\n",
         getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "default");
  learner_destroy(l);
  learner_destroy(ls);
  dqnd_close(c);
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {
  }
  free(s), free(s2), free(r), free(a), free(d);
  return 0;
}
