/* harness.c — see harness.h. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

char dqnd_bin[1024], dqnctl_bin[1024];

/* DQND_VALGRIND: a valgrind binary to run every daemon under
 * (scripts/valgrind-daemon.sh): errors or definite leaks make the daemon
 * exit 99, which fails the test that stops it; waits are 10x longer */
static char valgrind_bin[1024], valgrind_supp[1100];
static int slow = 1;

int harness_slow(void) { return slow; }

void harness_init(void) {
  const char *b = getenv("DQND_BIN"), *ctl = getenv("DQNCTL_BIN"), *vg = getenv("DQND_VALGRIND");
  snprintf(dqnd_bin, sizeof dqnd_bin, "%s", b ? b : "../daemon/dqnd");
  snprintf(dqnctl_bin, sizeof dqnctl_bin, "%s", ctl ? ctl : "../client/dqnctl");
  if (vg && vg[0]) {
    const char *supp = getenv("DQND_VALGRIND_SUPP"); /* tests/valgrind.supp: nng 1.5.2's own leak */
    snprintf(valgrind_bin, sizeof valgrind_bin, "%s", vg), slow = 10;
    snprintf(valgrind_supp, sizeof valgrind_supp, "--suppressions=%s", supp && supp[0] ? supp : "/dev/null");
  }
  signal(SIGPIPE, SIG_IGN);
}

static void log_tail(const daemon_t *d, char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen(d->log, "r");
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f), from = size > (long)n - 1 ? size - (long)n + 1 : 0;
  fseek(f, from, SEEK_SET);
  size_t k = fread(buf, 1, n - 1, f);
  buf[k] = 0;
  fclose(f);
}

int log_has(const daemon_t *d, const char *needle) {
  FILE *f = fopen(d->log, "r");
  if (!f) return 0;
  char line[2048];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
  fclose(f);
  return found;
}

void daemon_paths(daemon_t *d) {
  if (!d->dir[0]) {
    snprintf(d->dir, sizeof d->dir, "/tmp/dqnd-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d->dir));
  }
  snprintf(d->url, sizeof d->url, "ipc://%s/dqnd.sock", d->dir);
  snprintf(d->state, sizeof d->state, "%s/state", d->dir);
  snprintf(d->log, sizeof d->log, "%s/dqnd.log", d->dir);
}

void start_daemon_argv(daemon_t *d, const char *const *extra) {
  daemon_paths(d);
  d->pid = fork();
  ck_assert_int_ge(d->pid, 0);
  if (d->pid == 0) {
    char *argv[32] = {dqnd_bin, "--state-dir", d->state, "--backend", "cpu", "--log-file", d->log,
                      "--queue-depth", "16", "--max-message-bytes", "4000000", NULL};
    int k = 11;
    if (!d->listen_in_config) { /* else the config file's listen URLs stand: a command line's would replace them */
      argv[k++] = "--listen";
      argv[k++] = d->url;
    }
    for (int i = 0; extra && extra[i] && k < 31; i++) argv[k++] = (char *)extra[i];
    argv[k] = NULL;
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (d->preload) { /* before an ASan runtime the daemon links: ASan must be told that is fine */
      setenv("LD_PRELOAD", d->preload, 1);
      char asan[600];
      const char *o = getenv("ASAN_OPTIONS");
      snprintf(asan, sizeof asan, "%.500s%sverify_asan_link_order=0", o ? o : "", o && o[0] ? ":" : "");
      setenv("ASAN_OPTIONS", asan, 1);
    }
    if (valgrind_bin[0]) {
      char logf[400];
      snprintf(logf, sizeof logf, "--log-file=%s/valgrind.%%p.log", d->dir);
      char *vargv[48] = {valgrind_bin, "--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite",
                         "--show-leak-kinds=definite", logf, valgrind_supp, "--"};
      int v = 8;
      for (int i = 0; argv[i] && v < 47; i++) vargv[v++] = argv[i];
      vargv[v] = NULL;
      execv(valgrind_bin, vargv);
      _exit(127);
    }
    execv(dqnd_bin, argv);
    _exit(127);
  }
  /* wait until it answers; reap it meanwhile, so a daemon that cannot start
   * (a missing binary: 127, a bad option: 2) fails now, not at the deadline */
  for (int i = 0; i < 500 * slow; i++) {
    int st;
    if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
      char tail[1500];
      log_tail(d, tail, sizeof tail);
      ck_abort_msg("dqnd (%s) exited with status %d before answering; its log ends:\n%s", dqnd_bin,
                   WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st), tail);
    }
    dqnd_client_t *c;
    char err[256];
    if (dqnd_connect(d->url, 200, &c, err, sizeof err) == 0) {
      int serving = 0;
      int rc = dqnd_health(c, &serving, NULL);
      dqnd_close(c);
      if ((rc == 0 && serving) || rc == 16 /* up, but wants a token */) return;
    }
    usleep(20000);
  }
  kill(d->pid, SIGKILL);
  waitpid(d->pid, NULL, 0);
  ck_abort_msg("dqnd did not come up on %s within %d s", d->url, 10 * slow);
}

void start_daemon_args(daemon_t *d, const char *extra1, const char *extra2) {
  const char *extra[3] = {extra1, extra1 ? extra2 : NULL, NULL};
  start_daemon_argv(d, extra);
}
void start_daemon(daemon_t *d) { start_daemon_argv(d, NULL); }

int wait_exit(pid_t pid, int seconds) {
  int st = 0;
  seconds *= slow;
  for (int i = 0; i < seconds * 50; i++) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    usleep(20000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  ck_abort_msg("dqnd did not exit within %d s", seconds);
  return st;
}

int stop_daemon(daemon_t *d, int sig) {
  kill(d->pid, sig);
  return wait_exit(d->pid, 60);
}

void rm_rf(const char *dir) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) {
  }
}

static int file_read(void *ctx, void *buf, size_t n) { return fread(buf, 1, n, ctx) == n ? 0 : -1; }

int load_file(const char *path, learner_t **l, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return snprintf(err, errlen, "cannot open"), -1;
  int rc = learner_load(file_read, f, LEARNER_BACKEND_CPU, l, err, errlen);
  fclose(f);
  return rc;
}

char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0, len = 0;
  int bad = 0;
  for (;;) {
    if (len == cap) {
      char *nb = realloc(buf, cap = cap ? 2 * cap : 1 << 16);
      if (!nb) {
        bad = 1;
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  bad |= ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  *n = len;
  return buf;
}

dqnd_client_t *connect_to(daemon_t *d) {
  dqnd_client_t *c;
  char err[256];
  ck_assert_msg(dqnd_connect(d->url, 20000, &c, err, sizeof err) == 0, "%s", err);
  return c;
}

const char *small_fields[] = {"state_dim=6", "trunk_h1=16", "trunk_h2=12", "value_hidden=8", "adv_hidden=10",
                              "atoms=11", "branches=3,4", "batch=8", "replay_capacity=5000", "seed=42",
                              "noisy=1", "lr=0.01"};
const int n_small = (int)(sizeof small_fields / sizeof small_fields[0]);

void make_batch(batch_t *b, int n, uint64_t tag) {
  b->n = n;
  tu_fill_uniform_f32(b->s, (int64_t)n * S_DIM, -1, 1, 7, tag);
  tu_fill_uniform_f32(b->s2, (int64_t)n * S_DIM, -1, 1, 8, tag);
  for (int i = 0; i < n; i++) {
    b->a[i] = (int32_t)((i * 7 + tag) % N_ACT);
    b->r[i] = (float)i + 1000.0f * (float)tag; /* unique per (tag, i): lets tests count items */
    b->d[i] = (i % 5) == 0;
    b->ep[i] = (int64_t)tag;
  }
}

int submit(dqnd_client_t *c, const char *name, const batch_t *b) {
  learner_transitions_t t = {b->n, b->s, b->a, b->r, b->s2, b->d, b->ep, NULL};
  return dqnd_submit(c, name, S_DIM, &t, NULL);
}

dqnd_client_t *start_with_trainer(daemon_t *d, const char *name, batch_t *b, uint64_t tag) {
  start_daemon(d);
  dqnd_client_t *c = connect_to(d);
  ck_assert_int_eq(dqnd_create_trainer(c, name, small_fields, N_SMALL, NULL, NULL), 0);
  make_batch(b, 64, tag);
  ck_assert_int_eq(submit(c, name, b), 0);
  return c;
}

int run_ctl(const daemon_t *d, const char *args, char *out, size_t n) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' --url '%s' %s 2>&1", dqnctl_bin, d->url, args);
  FILE *p = popen(cmd, "r");
  size_t k = fread(out, 1, n - 1, p);
  out[k] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A CA, a server certificate for localhost signed by it, a client
 * certificate signed by it, and a second CA with its own "client"
 * certificate: everything under dir. */
void make_certs(const char *dir) {
  /* the README's recipe (scripts/tls-certs.sh) for the CA, server and client,
   * then what only the tests need: another CA with a certificate of its own, a
   * server certificate valid for no time at all (expired a second later) and
   * a file that is not PEM */
  const char *script = getenv("DQND_CERTS");
  ck_assert_msg(script && *script, "DQND_CERTS (scripts/tls-certs.sh) is not set");
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "set -e; '%s' --days 2 --client 'a client' '%s' localhost; cd '%s';"
           "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
           "openssl req -x509 $K -keyout other.key -out other.pem -days 2 -subj '/CN=another CA';"
           "openssl req $K -keyout stranger.key -out stranger.csr -subj '/CN=a stranger';"
           "openssl x509 -req -in stranger.csr -CA other.pem -CAkey other.key -CAcreateserial -out stranger.pem -days 2;"
           "printf 'subjectAltName=DNS:localhost\\n' > san.ext;"
           "openssl req $K -keyout old.key -out old.csr -subj '/CN=localhost';"
           "openssl x509 -req -in old.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out old.pem -days 0 -extfile san.ext;"
           "printf 'not a certificate\\n' > notpem.txt",
           script, dir, dir);
  char full[4200];
  snprintf(full, sizeof full, "(%s) >/dev/null 2>&1", cmd);
  ck_assert_msg(system(full) == 0, "openssl could not make the test certificates (is openssl installed?)");
}

/* a loopback TCP port nothing listens on now */
int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t n = sizeof a;
  ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &n), 0);
  close(s);
  return ntohs(a.sin_port);
}


Dqnd__V1__Reply *server_info(dqnd_client_t *c) {
  Dqnd__V1__ServerInfo si = DQND__V1__SERVER_INFO__INIT;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_SERVER_INFO;
  req.server_info = &si;
  Dqnd__V1__Reply *rep;
  ck_assert_int_eq(dqnd_call(c, &req, &rep), 0);
  ck_assert_int_eq(rep->result_case, DQND__V1__REPLY__RESULT_SERVER_INFO);
  return rep;
}

int trainers_loaded(dqnd_client_t *c) {
  Dqnd__V1__Reply *rep = server_info(c);
  int n = (int)rep->server_info->trainers;
  dqnd_reply_free(rep);
  return n;
}

void expect_code(dqnd_client_t *c, int rc, int code, const char *needle, const char *what) {
  ck_assert_msg(rc == code, "%s: got %s (%s), expected %s", what, dqnd_strerror(rc), dqnd_last_error(c),
                dqnd_strerror(code));
  ck_assert_msg(strstr(dqnd_last_error(c), needle) != NULL, "%s: message '%s' lacks '%s'", what, dqnd_last_error(c),
                needle);
}

void refuses_with(const char *const *opts, const char *needle, int code) {
  char dir[] = "/tmp/dqnd-sec-XXXXXX", out[400];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(out, sizeof out, "%s/err", dir);
  pid_t p = fork();
  if (p == 0) {
    char *argv[24] = {dqnd_bin, "--state-dir", dir, "--backend", "cpu"};
    int k = 5;
    for (int i = 0; opts[i] && k < 23; i++) argv[k++] = (char *)opts[i];
    argv[k] = NULL;
    freopen(out, "w", stderr);
    execv(dqnd_bin, argv);
    _exit(127);
  }
  int st = wait_exit(p, 20);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == code, "dqnd should exit %d with %s ...", code, opts[0]);
  char msg[1000] = "";
  FILE *f = fopen(out, "r");
  size_t n = fread(msg, 1, sizeof msg - 1, f);
  msg[n] = 0;
  fclose(f);
  ck_assert_msg(strstr(msg, needle), "'%s' lacks '%s'", msg, needle);
  rm_rf(dir);
}
