/* opts.c — see opts.h. */
#include "opts.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dqnd/default_url.h"
#include "dqnd_build_config.h"
#include "suggest.h"

/* OT_FLAG: an int32 0/1 that the command line also takes bare (--insecure) */
typedef enum { OT_STR, OT_INT32, OT_INT64, OT_LISTEN, OT_FLAG } opt_type_t;
typedef struct {
  const char *name;
  opt_type_t type;
  size_t offset, size;
  int64_t min, max;
  const char *help;
} opt_t;

#define O(f) offsetof(dqnd_opts_t, f), sizeof(((dqnd_opts_t *)0)->f)
static const opt_t opts_table[] = {
    {"listen", OT_LISTEN, O(listen), 0, 0,
     "URL to serve: ipc:///path, tcp://host:port, tls+tcp://host:port (repeatable; a later config file's "
     "or the command line's replace the earlier ones)"},
    {"state-dir", OT_STR, O(state_dir), 0, 0, "checkpoints go to STATE_DIR/<trainer>/"},
    {"system", OT_FLAG, O(system), 0, 1,
     "the system service's paths where listen and state-dir are not given: " DQND_SYSTEM_URL " and "
     DQND_SYSTEM_STATE_DIR " (0/1; without it root gets a user's defaults, as anyone)"},
    {"backend", OT_STR, O(backend), 0, 0, "default learner backend: auto, cpu, cuda"},
    {"device", OT_INT32, O(device), -1, 1023,
     "the one CUDA device this daemon uses (its index among the visible ones; dqnd@N passes N); a device that is "
     "not there stops the start (-1: CUDA's default)"},
    {"max-message-bytes", OT_INT64, O(max_message_bytes), 1024, 1LL << 31,
     "largest request accepted, and largest Act reply or checkpoint chunk sent"},
    {"decode-budget", OT_INT64, O(decode_budget), 1024, 1LL << 32, "bytes a request may decode into"},
    {"queue-depth", OT_INT32, O(queue_depth), 1, 1 << 20, "commands queued per trainer before RESOURCE_EXHAUSTED"},
    {"max-trainers", OT_INT32, O(max_trainers), 1, 4096, "trainers held at once"},
    {"contexts", OT_INT32, O(contexts), 1, 4096, "requests in flight at once"},
    {"checkpoint-interval", OT_INT32, O(checkpoint_interval), 0, INT_MAX, "seconds between periodic checkpoints (0 = off)"},
    {"keep-checkpoints", OT_INT32, O(keep_checkpoints), 1, 1000, "newest checkpoints kept per trainer"},
    {"idle-timeout", OT_INT32, O(idle_timeout), 0, INT_MAX, "seconds before an idle trainer is saved and unloaded (0 = never)"},
    {"checkpoint-replay", OT_INT32, O(checkpoint_replay), 0, 1, "periodic and final checkpoints include the replay (0/1)"},
    {"restore", OT_INT32, O(restore), 0, 1,
     "at start, bring back every trainer in state-dir from its newest checkpoint that loads (0/1)"},
    {"listener-check", OT_INT32, O(listener_check), 0, 3600,
     "seconds between probes that restart a listener a half-open connection stopped (nng#1518; 0 = off)"},
    {"socket-mode", OT_STR, O(socket_mode), 0, 0,
     "permissions of ipc sockets, octal (0660 lets the daemon's group connect)"},
    {"auth-token", OT_STR, O(auth_token), 0, 0, "require this token in every request"},
    {"auth-token-file", OT_STR, O(auth_token_file), 0, 0,
     "read auth-token from this file (its first line; only its owner may read it), not from argv where ps shows it"},
    {"insecure", OT_FLAG, O(insecure), 0, 1,
     "allow plain tcp:// on a non-loopback address with no auth-token (0/1; traffic and commands are open)"},
    {"tls-cert", OT_STR, O(tls_cert), 0, 0, "PEM certificate (chain) that tls+tcp:// listeners present"},
    {"tls-key", OT_STR, O(tls_key), 0, 0, "PEM private key of tls-cert"},
    {"tls-ca", OT_STR, O(tls_ca), 0, 0, "PEM CA certificates that sign client certificates"},
    {"tls-verify-clients", OT_FLAG, O(tls_verify_clients), 0, 1,
     "mutual TLS: refuse clients without a certificate signed by tls-ca (0/1)"},
    {"checkpoint-dirs", OT_STR, O(checkpoint_dirs), 0, 0,
     "':'-separated directories LoadCheckpoint may read a daemon-side path from, besides state-dir"},
    {"metrics-listen", OT_STR, O(metrics_listen), 0, 0,
     "serve Prometheus metrics at http://HOST:PORT/metrics (empty = off)"},
    {"log-file", OT_STR, O(log_file), 0, 0, "log here instead of stderr (reopened on SIGHUP)"},
    {"log-level", OT_STR, O(log_level), 0, 0, "error, warn, info, debug"},
};
#define N_OPTS ((int)(sizeof opts_table / sizeof opts_table[0]))

static int opts_is_flag(const char *name) {
  for (int i = 0; i < N_OPTS; i++)
    if (!strcmp(opts_table[i].name, name)) return opts_table[i].type == OT_FLAG;
  return 0;
}


static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* $STATE_DIRECTORY (systemd), else the system service's with --system, else
 * the user's (root's too: a daemon run by hand never restores the service's
 * trainers, nor adds its own to them) */
static void default_state_dir(char *buf, size_t n, int system) {
  const char *sd = getenv("STATE_DIRECTORY"), *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
  if (sd && *sd)
    snprintf(buf, n, "%.*s", (int)strcspn(sd, ":"), sd);
  else if (system)
    snprintf(buf, n, "%s", DQND_SYSTEM_STATE_DIR);
  else if (xdg && *xdg)
    snprintf(buf, n, "%s/dqnd", xdg);
  else if (home && *home)
    snprintf(buf, n, "%s/.local/state/dqnd", home);
  else
    snprintf(buf, n, "/tmp/dqnd-%u/state", (unsigned)geteuid());
}

void opts_default(dqnd_opts_t *o) {
  memset(o, 0, sizeof *o); /* state_dir and listen stay empty: check() fills their defaults */
  snprintf(o->backend, sizeof o->backend, "auto");
  o->device = -1;
  o->max_message_bytes = 256LL << 20;
  o->decode_budget = 512LL << 20;
  o->queue_depth = 64;
  o->max_trainers = 64;
  o->contexts = 64;
  o->checkpoint_interval = 600;
  o->keep_checkpoints = 3;
  o->idle_timeout = 0;
  o->checkpoint_replay = 0;
  o->restore = 1;
  o->listener_check = 3;
  snprintf(o->socket_mode, sizeof o->socket_mode, "0600");
  snprintf(o->log_level, sizeof o->log_level, "info");
}

int opts_set(dqnd_opts_t *o, const char *name, const char *value, char *err, size_t errlen) {
  for (int i = 0; i < N_OPTS; i++) {
    const opt_t *t = &opts_table[i];
    if (strcmp(t->name, name)) continue;
    char *p = (char *)o + t->offset;
    if (t->type == OT_LISTEN) {
      if (o->listen_src != o->src) o->n_listen = 0, o->listen_src = o->src;
      if (o->n_listen == OPTS_MAX_LISTEN) return fail(err, errlen, "listen: at most %d URLs", OPTS_MAX_LISTEN);
      if (strncmp(value, "ipc://", 6) && strncmp(value, "tcp://", 6) && strncmp(value, "tls+tcp://", 10))
        return fail(err, errlen, "listen: '%s' is not ipc://, tcp:// or tls+tcp://", value);
      if (strlen(value) >= sizeof o->listen[0])
        return fail(err, errlen, "listen: longer than %zu bytes", sizeof o->listen[0] - 1);
      snprintf(o->listen[o->n_listen++], sizeof o->listen[0], "%s", value);
      return 0;
    }
    if (t->type == OT_STR) {
      if (strlen(value) >= t->size) return fail(err, errlen, "%s: longer than %zu bytes", name, t->size - 1);
      snprintf(p, t->size, "%s", value);
      return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (end == value || *end || errno) return fail(err, errlen, "%s: '%s' is not an integer", name, value);
    if (v < t->min || v > t->max)
      return fail(err, errlen, "%s: %lld is outside [%lld, %lld]", name, v, (long long)t->min, (long long)t->max);
    if (t->type == OT_INT32 || t->type == OT_FLAG)
      *(int32_t *)p = (int32_t)v;
    else
      *(int64_t *)p = v;
    return 0;
  }
  suggest_t sg;
  suggest_init(&sg, name);
  for (int i = 0; i < N_OPTS; i++) suggest_try(&sg, opts_table[i].name);
  if (sg.best) return fail(err, errlen, "unknown option '%s' (did you mean --%s?)", name, sg.best);
  return fail(err, errlen, "unknown option '%s' (see --help)", name);
}

int opts_socket_mode(const dqnd_opts_t *o) { return (int)strtol(o->socket_mode, NULL, 8); }

static int check(dqnd_opts_t *o, char *err, size_t errlen) {
  char *end;
  long mode = strtol(o->socket_mode, &end, 8);
  if (!o->socket_mode[0] || *end || mode < 0 || mode > 0777 || (mode & 0600) != 0600)
    return fail(err, errlen, "socket-mode: '%s' is not an octal mode in [0600, 0777] that lets the owner in",
                o->socket_mode);
  if (strcmp(o->backend, "auto") && strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda"))
    return fail(err, errlen, "backend: '%s' is not auto, cpu or cuda", o->backend);
  if (strcmp(o->log_level, "error") && strcmp(o->log_level, "warn") && strcmp(o->log_level, "info") &&
      strcmp(o->log_level, "debug"))
    return fail(err, errlen, "log-level: '%s' is not error, warn, info or debug", o->log_level);
  if (o->auth_token_file[0]) {
    if (o->auth_token[0]) return fail(err, errlen, "auth-token-file: give it or auth-token, not both");
    int fd = open(o->auth_token_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
      int e = errno;
      if (fd >= 0) close(fd);
      return fail(err, errlen, "auth-token-file: cannot read %s: %s", o->auth_token_file, strerror(e));
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & (S_IRWXG | S_IRWXO))) {
      close(fd);
      return fail(err, errlen, "auth-token-file: %s is %s (chmod 600 it)", o->auth_token_file,
                  S_ISREG(st.st_mode) ? "readable or writable by group or others" : "not a regular file");
    }
    char buf[sizeof o->auth_token + 1];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) return fail(err, errlen, "auth-token-file: cannot read %s: %s", o->auth_token_file, strerror(errno));
    buf[n] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
    if (!buf[0] || strlen(buf) >= sizeof o->auth_token)
      return fail(err, errlen, "auth-token-file: %s's first line is %s", o->auth_token_file,
                  buf[0] ? "longer than 255 bytes" : "empty");
    snprintf(o->auth_token, sizeof o->auth_token, "%s", buf);
    explicit_bzero(buf, sizeof buf);
  }
  if (o->n_listen == 0) {
    if (o->system) snprintf(o->listen[0], sizeof o->listen[0], "%s", DQND_SYSTEM_URL);
    else dqnd_default_url(o->listen[0], sizeof o->listen[0]);
    o->n_listen = 1;
  }
  if (!o->state_dir[0]) default_state_dir(o->state_dir, sizeof o->state_dir, o->system);
  int tls = 0;
  for (int i = 0; i < o->n_listen; i++) {
    const char *u = o->listen[i];
    int is_tls = !strncmp(u, "tls+tcp://", 10);
    tls |= is_tls;
    if (!strncmp(u, "ipc://", 6) || opts_url_is_loopback(u)) continue;
    if (o->auth_token[0] || (is_tls && o->tls_verify_clients) || o->insecure) continue;
    return fail(err, errlen,
                "listen: %s is reachable from the network and nothing checks who connects: set auth-token, "
                "or use tls+tcp:// with tls-verify-clients, or pass --insecure to accept that",
                u);
  }
  if (tls && (!o->tls_cert[0] || !o->tls_key[0]))
    return fail(err, errlen, "%s: a tls+tcp:// listener needs tls-cert and tls-key", o->tls_cert[0] ? "tls-key" : "tls-cert");
  if (o->tls_verify_clients && !o->tls_ca[0])
    return fail(err, errlen, "tls-ca: tls-verify-clients needs the CA that signs client certificates");
  const char *files[3] = {o->tls_cert, o->tls_key, o->tls_ca}, *names[3] = {"tls-cert", "tls-key", "tls-ca"};
  for (int i = 0; i < 3; i++)
    if (files[i][0] && access(files[i], R_OK))
      return fail(err, errlen, "%s: cannot read %s: %s", names[i], files[i], strerror(errno));
  if (o->metrics_listen[0] && strncmp(o->metrics_listen, "http://", 7))
    return fail(err, errlen, "metrics-listen: '%s' is not http://HOST:PORT", o->metrics_listen);
  for (const char *d = o->checkpoint_dirs; *d;) {
    size_t n = strcspn(d, ":");
    if (n && d[0] != '/') return fail(err, errlen, "checkpoint-dirs: '%.*s' is not an absolute path", (int)n, d);
    d += n + (d[n] == ':');
  }
  return 0;
}

int opts_url_is_loopback(const char *url) {
  const char *h = strstr(url, "://");
  if (!h) return 0;
  h += 3;
  if (!strncmp(h, "localhost:", 10) || !strncmp(h, "[::1]:", 6)) return 1;
  /* 127.a.b.c numerically, all of it: "127.evil.example" is a host name
   * that may resolve anywhere (a review find) */
  if (strncmp(h, "127.", 4)) return 0;
  int parts = 0;
  for (const char *p = h; *p && *p != ':'; parts++) {
    int digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    if (digits < 1 || digits > 3 || (*p != '.' && *p != ':')) return 0;
    if (*p == '.') p++;
  }
  return parts == 4;
}

int opts_parse_file(dqnd_opts_t *o, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) return fail(err, errlen, "config: cannot open %s: %s", path, strerror(errno));
  o->src++; /* a source of its own: its listen URLs replace an earlier file's */
  char line[2048];
  int ln = 0, rc = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    ln++;
    /* a line longer than the buffer would come back in pieces, its tail read
     * as a line of its own (a long comment ending in 'insecure = 1' set it):
     * refused whole */
    if (!strchr(line, '\n') && !feof(f)) {
      rc = fail(err, errlen, "%s:%d: line longer than %zu bytes", path, ln, sizeof line - 2);
      break;
    }
    char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    s[strcspn(s, "\r\n")] = 0;
    if (!*s || *s == '#') continue;
    char *eq = strchr(s, '=');
    if (!eq) {
      rc = fail(err, errlen, "%s:%d: expected 'name = value'", path, ln);
      break;
    }
    char *ke = eq;
    while (ke > s && (ke[-1] == ' ' || ke[-1] == '\t')) ke--;
    *ke = 0;
    char *v = eq + 1;
    while (*v == ' ' || *v == '\t') v++;
    for (char *h = v; *h; h++) /* a '#' after whitespace starts a comment */
      if (*h == '#' && h > v && (h[-1] == ' ' || h[-1] == '\t')) {
        *h = 0;
        break;
      }
    char *ve = v + strlen(v);
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) *--ve = 0;
    char e2[512];
    if (opts_set(o, s, v, e2, sizeof e2)) rc = fail(err, errlen, "%s:%d: %s", path, ln, e2);
  }
  fclose(f);
  return rc;
}

void opts_usage(FILE *f) {
  fprintf(f,
          "usage: dqnd [--config FILE] [--OPTION VALUE ...]\n"
          "dqnd keeps reinforcement-learning trainers warm (weights, optimiser, replay) and\n"
          "serves them over nng (protocol: proto/dqnd/v1/dqnd.proto). With no options it\n"
          "listens on a local ipc socket and keeps checkpoints in a local state directory.\n\n"
          "  --config FILE           read 'option = value' lines (command line wins)\n"
          "  --config-optional FILE  the same when FILE exists; nothing when it does not\n"
          "  --print-config          print the options in effect (defaults filled in) and exit\n"
          "  --help, --version\n");
  char url[600], sd[1024];
  dqnd_default_url(url, sizeof url);
  default_state_dir(sd, sizeof sd, 0);
  dqnd_opts_t d;
  opts_default(&d);
  for (int i = 0; i < N_OPTS; i++) {
    const opt_t *t = &opts_table[i];
    char def[1100];
    const char *p = (const char *)&d + t->offset;
    if (t->type == OT_LISTEN) snprintf(def, sizeof def, "%s", url);
    else if (t->offset == offsetof(dqnd_opts_t, state_dir)) snprintf(def, sizeof def, "%s", sd);
    else if (t->type == OT_STR) snprintf(def, sizeof def, "%s", p);
    else if (t->type == OT_INT32 || t->type == OT_FLAG) snprintf(def, sizeof def, "%d", *(const int32_t *)p);
    else snprintf(def, sizeof def, "%lld", (long long)*(const int64_t *)p);
    fprintf(f, "  --%-22s %s%s%s%s\n", t->name, t->help, *def ? " (default: " : "", def, *def ? ")" : "");
  }
  fprintf(f,
          "\nsignals: SIGTERM/SIGINT stop accepting, stop a running Step between steps (its\n"
          "reply says how many ran), answer what is queued, write final checkpoints and\n"
          "exit 0 (1 when a final checkpoint could not be written); SIGHUP reopens the log file.\n"
          "One daemon per state directory: a second one on the same STATE_DIR refuses to\n"
          "start, naming the pid that holds it (STATE_DIR/dqnd.lock).\n"
          "exit status: 0 clean shutdown, 1 runtime failure, 2 bad options.\n");
}

/* --print-config: the options in effect, as a config file takes them (the
 * auth token hidden); scripts read listen and state-dir from it */
static void opts_print(const dqnd_opts_t *o, FILE *f) {
  for (int i = 0; i < N_OPTS; i++) {
    const opt_t *t = &opts_table[i];
    const char *p = (const char *)o + t->offset;
    if (t->type == OT_LISTEN) {
      for (int k = 0; k < o->n_listen; k++) fprintf(f, "listen = %s\n", o->listen[k]);
    } else if (t->offset == offsetof(dqnd_opts_t, auth_token)) {
      fprintf(f, "auth-token = %s\n", *p ? "(set, not shown)" : "");
    } else if (t->type == OT_STR) {
      fprintf(f, "%s = %s\n", t->name, p);
    } else if (t->type == OT_INT32 || t->type == OT_FLAG) {
      fprintf(f, "%s = %d\n", t->name, *(const int32_t *)p);
    } else {
      fprintf(f, "%s = %lld\n", t->name, (long long)*(const int64_t *)p);
    }
  }
}

int opts_parse_args(dqnd_opts_t *o, int argc, char **argv, char *err, size_t errlen) {
  opts_default(o);
  int print = 0;
  /* the config file first, so the command line overrides it */
  for (int i = 0; i < argc; i++) {
    int optional = !strcmp(argv[i], "--config-optional") || !strncmp(argv[i], "--config-optional=", 18);
    const char *path = NULL;
    if (!strcmp(argv[i], "--config") || !strcmp(argv[i], "--config-optional")) {
      if (i + 1 >= argc) return fail(err, errlen, "%s needs a file", argv[i]);
      path = argv[i + 1];
    } else if (!strncmp(argv[i], "--config=", 9) || optional)
      path = strchr(argv[i], '=') + 1;
    if (!path) continue;
    if (optional && access(path, F_OK) && errno == ENOENT) continue;
    if (opts_parse_file(o, path, err, errlen)) return -1;
  }
  o->src++; /* the command line: its listen URLs replace the files' */
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      opts_usage(stdout);
      return 1;
    }
    if (!strcmp(a, "--version")) {
      printf("dqnd %s (protocol 1)\n", DQND_VERSION);
      return 1;
    }
    if (!strcmp(a, "--print-config")) {
      print = 1;
      continue;
    }
    if (strncmp(a, "--", 2)) return fail(err, errlen, "unexpected argument '%s' (see --help)", a);
    char name[128];
    const char *val;
    const char *eq = strchr(a, '=');
    if (eq) {
      snprintf(name, sizeof name, "%.*s", (int)(eq - a - 2), a + 2);
      val = eq + 1;
    } else {
      snprintf(name, sizeof name, "%s", a + 2);
      if (opts_is_flag(name) && (i + 1 >= argc || (strcmp(argv[i + 1], "0") && strcmp(argv[i + 1], "1"))))
        val = "1"; /* --insecure alone */
      else if (i + 1 >= argc) return fail(err, errlen, "--%s needs a value", name);
      else val = argv[++i];
    }
    if (!strcmp(name, "config") || !strcmp(name, "config-optional")) continue;
    if (opts_set(o, name, val, err, errlen)) return -1;
  }
  if (check(o, err, errlen)) return -1;
  if (print) {
    opts_print(o, stdout);
    return 1;
  }
  return 0;
}
