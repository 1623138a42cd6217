/* dqnd.c — libdqnd; see dqnd.h. The checkpoint calls are dqnd_ckpt.c, the
 * long commands (Step, PretrainDT) and Cancel dqnd_long.c. */
#include "dqnd.h"
#include "dqnd_impl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

int seterr(dqnd_client_t *c, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return code;
}

const char *dqnd_strerror(int code) {
  static const char *names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                                "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                                "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                                "UNAUTHENTICATED"};
  if (code >= 0 && code <= 16) return names[code];
  switch (code) {
  case DQND_ETRANSPORT: return "ETRANSPORT";
  case DQND_ETIMEDOUT: return "ETIMEDOUT";
  case DQND_EPROTO: return "EPROTO";
  case DQND_ENOMEM: return "ENOMEM";
  case DQND_EINVAL: return "EINVAL";
  case DQND_EIO: return "EIO";
  }
  return "UNKNOWN";
}

int dqnd_connect(const char *url, int timeout_ms, dqnd_client_t **out, char *err, size_t errlen) {
  return dqnd_connect_tls(url, timeout_ms, NULL, out, err, errlen);
}

/* tls+tcp://: a dialer carrying the TLS configuration (tls.h) */
static int dial_tls(nng_socket s, const char *url, const dqnd_tls_opts_t *tls, int timeout_ms, char *err,
                    size_t errlen) {
  dqnd_tls_opts_t o = tls ? *tls : (dqnd_tls_opts_t){0};
  char host[256];
  if (!o.server_name || !*o.server_name) {
    dqnd_tls_url_host(url, host, sizeof host);
    o.server_name = host;
  }
  nng_tls_config *cfg;
  if (dqnd_tls_config(0, &o, &cfg, err, errlen)) return NNG_EINVAL;
  nng_dialer d;
  int rv = nng_dialer_create(&d, s, url);
  if (!rv) rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
  if (!rv) rv = nng_dialer_start(d, 0);
  nng_tls_config_free(cfg); /* the dialer holds its own reference */
  if (rv == NNG_EPEERAUTH || rv == NNG_ECRYPTO || rv == NNG_ECLOSED || rv == NNG_ECONNRESET || rv == NNG_ECONNSHUT) {
    /* nng gives one code for every cause: a second look names it (tls_diag.c) */
    char why[900];
    if (dqnd_tls_diagnose(url, &o, timeout_ms, why, sizeof why))
      snprintf(why, sizeof why, "%s (tls-ca, tls-cert or tls-key could not be read to find the cause)",
               nng_strerror(rv));
    snprintf(err, errlen, "connect %s: TLS handshake failed: %s", url, why);
  } else if (rv == NNG_ETIMEDOUT) {
    snprintf(err, errlen, "connect %s: timed out (no TLS handshake within the time allowed)", url);
  } else if (rv) {
    snprintf(err, errlen, "connect %s: %s%s", url, nng_strerror(rv),
             rv == NNG_ECONNREFUSED ? " (is dqnd listening there?)" : "");
  }
  return rv;
}

/* 0 when url has a scheme dqnd listens on; else -1 with a message naming them */
static int url_scheme_ok(const char *url, char *err, size_t errlen) {
  static const char *const schemes[] = {"ipc", "tcp", "tcp4", "tcp6", "tls+tcp", "tls+tcp4", "tls+tcp6"};
  const char *sep = strstr(url, "://");
  for (size_t i = 0; sep && i < sizeof schemes / sizeof schemes[0]; i++)
    if ((size_t)(sep - url) == strlen(schemes[i]) && !strncmp(url, schemes[i], (size_t)(sep - url))) return 0;
  if (!sep)
    snprintf(err, errlen, "url: '%s' has no scheme: give ipc:///path/to/dqnd.sock, tcp://host:port or "
             "tls+tcp://host:port", url);
  else
    snprintf(err, errlen, "url: '%s': the scheme '%.*s' is not one dqnd listens on (ipc://, tcp://, tls+tcp://)", url,
             (int)(sep - url < 32 ? sep - url : 32), url);
  return -1;
}

int dqnd_connect_tls(const char *url, int timeout_ms, const dqnd_tls_opts_t *tls, dqnd_client_t **out, char *err,
                     size_t errlen) {
  *out = NULL;
  if (url_scheme_ok(url, err, errlen)) return DQND_EINVAL;
  dqnd_client_t *c = calloc(1, sizeof *c);
  if (!c) return snprintf(err, errlen, "out of memory"), DQND_ENOMEM;
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
  /* request ids start at a random value, so that a Cancel naming one finds
   * this client's Step and not another client's of the same number */
  uint64_t r0 = 0;
  if (getentropy(&r0, sizeof r0)) r0 = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)getpid() << 32;
  c->next_id = (r0 >> 2) | 1;
  int rv = nng_req0_open(&c->sock);
  if (rv) {
    free(c);
    snprintf(err, errlen, "nng_req0_open: %s", nng_strerror(rv));
    return DQND_ETRANSPORT;
  }
  /* never resend on our own: a resent Step would train twice */
  nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
  nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, 0);
  nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, c->timeout_ms);
  nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, c->timeout_ms);
  int is_tls = !strncmp(url, "tls+", 4); /* tls+tcp://, tls+tcp4://, tls+tcp6:// */
  if (is_tls) {
    rv = dial_tls(c->sock, url, tls, c->timeout_ms, err, errlen);
    if (rv) {
      nng_close(c->sock);
      free(c);
      return rv == NNG_EINVAL ? DQND_EINVAL : rv == NNG_ETIMEDOUT ? DQND_ETIMEDOUT : DQND_ETRANSPORT;
    }
    *out = c;
    return DQND_OK;
  }
  char own[600];
  dqnd_default_url(own, sizeof own); /* its own default (/tmp/dqnd-UID): that directory must be its user's */
  if (dqnd_ipc_dir_check(url, !strcmp(url, own), err, errlen)) { /* a socket another user may have put there */
    nng_close(c->sock);
    free(c);
    return DQND_ETRANSPORT;
  }
  rv = nng_dial(c->sock, url, NULL, 0);
  if (rv) {
    nng_close(c->sock);
    free(c);
    if (rv == NNG_EPERM)
      snprintf(err, errlen,
               "connect %s: permission denied (the system service's socket is for group dqnd: "
               "`usermod -aG dqnd $USER`, then log in again)",
               url);
    else if (rv == NNG_ENOENT || rv == NNG_ECONNREFUSED)
      snprintf(err, errlen, "connect %s: %s (is dqnd running?)", url, nng_strerror(rv));
    else
      snprintf(err, errlen, "connect %s: %s", url, nng_strerror(rv));
    return DQND_ETRANSPORT;
  }
  *out = c;
  return DQND_OK;
}

void dqnd_close(dqnd_client_t *c) {
  if (!c) return;
  long_close(c); /* the long commands' context first: a late reply lands before the pipe closes */
  nng_close(c->sock);
  free(c);
}

void dqnd_set_token(dqnd_client_t *c, const char *token) { snprintf(c->token, sizeof c->token, "%s", token ? token : ""); }

void dqnd_set_timeout(dqnd_client_t *c, int timeout_ms) {
  c->timeout_ms = timeout_ms;
  nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, timeout_ms);
  nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, timeout_ms);
}

const char *dqnd_last_error(const dqnd_client_t *c) { return c->err; }

void dqnd_reply_free(Dqnd__V1__Reply *rep) {
  if (rep) dqnd__v1__reply__free_unpacked(rep, NULL);
}

static int roundtrip(dqnd_client_t *c, nng_msg *m, uint64_t id, int check_id, Dqnd__V1__Reply **rep) {
  *rep = NULL;
  int rv = nng_sendmsg(c->sock, m, 0);
  if (rv) {
    nng_msg_free(m);
    return seterr(c, rv == NNG_ETIMEDOUT ? DQND_ETIMEDOUT : DQND_ETRANSPORT, "send: %s", nng_strerror(rv));
  }
  nng_msg *r;
  rv = nng_recvmsg(c->sock, &r, 0);
  if (rv) return seterr(c, rv == NNG_ETIMEDOUT ? DQND_ETIMEDOUT : DQND_ETRANSPORT, "receive: %s", nng_strerror(rv));
  return decode(c, r, id, check_id, rep);
}

int decode(dqnd_client_t *c, nng_msg *r, uint64_t id, int check_id, Dqnd__V1__Reply **rep) {
  Dqnd__V1__Reply *p = dqnd__v1__reply__unpack(NULL, nng_msg_len(r), nng_msg_body(r));
  nng_msg_free(r);
  if (!p) return seterr(c, DQND_EPROTO, "the reply is not a dqnd.v1.Reply");
  if (check_id && p->request_id != id) {
    dqnd_reply_free(p);
    return seterr(c, DQND_EPROTO, "reply for request %llu, expected %llu", (unsigned long long)p->request_id,
                  (unsigned long long)id);
  }
  if (p->instance && c->instance && p->instance != c->instance) {
    /* another daemon process answered: this request ran on trainers restored
     * from their checkpoints; said once, then the new daemon is the one */
    c->instance = p->instance;
    dqnd_reply_free(p);
    return seterr(c, DQND__V1__CODE__UNAVAILABLE,
                  "the daemon restarted (a new process answered): this request ran there, on trainers restored "
                  "from their last checkpoints; what they did after those is gone, so resume from a checkpoint");
  }
  if (p->instance) c->instance = p->instance;
  *rep = p;
  int code = p->status ? (int)p->status->code : DQND_EPROTO;
  if (code == DQND_EPROTO) return seterr(c, code, "reply without a status");
  if (code) return seterr(c, code, "%s", p->status->message ? p->status->message : "");
  c->err[0] = 0;
  return DQND_OK;
}

/* The deadline a request carries (Request.timeout_ms): a little inside the
 * client's own timeout, so that a Step stopped by it can still answer, with
 * the steps that ran, before the client gives up waiting. */
static uint32_t request_timeout(const dqnd_client_t *c) {
  int margin = c->timeout_ms / 10 < 1000 ? c->timeout_ms / 10 : 1000;
  return (uint32_t)(c->timeout_ms - margin > 1 ? c->timeout_ms - margin : 1);
}

int pack_req(dqnd_client_t *c, Dqnd__V1__Request *req, nng_msg **m) {
  req->version = 1;
  req->request_id = c->next_id++;
  req->auth_token = c->token;
  req->timeout_ms = request_timeout(c);
  atomic_store(&c->pending_id, req->request_id);
  size_t n = dqnd__v1__request__get_packed_size(req);
  if (nng_msg_alloc(m, n)) return seterr(c, DQND_ENOMEM, "out of memory for a %zu-byte request", n);
  dqnd__v1__request__pack(req, nng_msg_body(*m));
  return 0;
}

int dqnd_call(dqnd_client_t *c, Dqnd__V1__Request *req, Dqnd__V1__Reply **rep) {
  *rep = NULL;
  nng_msg *m;
  int rc = pack_req(c, req, &m);
  return rc ? rc : roundtrip(c, m, req->request_id, 1, rep);
}

int dqnd_call_raw(dqnd_client_t *c, const void *buf, size_t n, Dqnd__V1__Reply **rep) {
  nng_msg *m;
  if (nng_msg_alloc(&m, n)) return seterr(c, DQND_ENOMEM, "out of memory");
  if (n) memcpy(nng_msg_body(m), buf, n);
  return roundtrip(c, m, 0, 0, rep);
}

/* call and drop the reply (commands whose result the caller does not need) */
int call_simple(dqnd_client_t *c, Dqnd__V1__Request *req) {
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(c, req, &rep);
  dqnd_reply_free(rep);
  return rc;
}

/* TrainerStats carries learner_stats_t's fields under the same names
 * (LEARNER_STATS_FIELDS; the daemon checks their widths at compile time) */
void stats_from_pb(const Dqnd__V1__TrainerStats *p, learner_stats_t *st) {
  memset(st, 0, sizeof *st);
  if (!p) return;
#define STATS_FROM_PB(type, name, kind) st->name = (type)p->name;
  LEARNER_STATS_FIELDS(STATS_FROM_PB)
#undef STATS_FROM_PB
}

int dqnd_health(dqnd_client_t *c, int *serving, double *uptime_s) {
  Dqnd__V1__Health h = DQND__V1__HEALTH__INIT;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_HEALTH;
  req.health = &h;
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(c, &req, &rep);
  if (!rc && rep->result_case != DQND__V1__REPLY__RESULT_HEALTH) rc = seterr(c, DQND_EPROTO, "Health: no HealthResult");
  if (!rc) {
    if (serving) *serving = rep->health->serving;
    if (uptime_s) *uptime_s = rep->health->uptime_s;
  }
  dqnd_reply_free(rep);
  return rc;
}

/* "name=value" strings -> Field messages (pointers into a copy) */
typedef struct fields {
  Dqnd__V1__Field *f;
  Dqnd__V1__Field **p;
  char *buf;
  int n;
} fields_t;

static int fields_make(dqnd_client_t *c, const char *const *in, int n, fields_t *out) {
  memset(out, 0, sizeof *out);
  size_t total = 0;
  for (int i = 0; i < n; i++) total += strlen(in[i]) + 1;
  out->f = calloc((size_t)(n ? n : 1), sizeof *out->f);
  out->p = calloc((size_t)(n ? n : 1), sizeof *out->p);
  out->buf = malloc(total + 1);
  if (!out->f || !out->p || !out->buf) return seterr(c, DQND_ENOMEM, "out of memory");
  char *b = out->buf;
  for (int i = 0; i < n; i++) {
    const char *eq = strchr(in[i], '=');
    if (!eq) return seterr(c, DQND_EINVAL, "'%s' is not name=value", in[i]);
    dqnd__v1__field__init(&out->f[i]);
    size_t kl = (size_t)(eq - in[i]);
    memcpy(b, in[i], kl);
    b[kl] = 0;
    out->f[i].name = b;
    b += kl + 1;
    strcpy(b, eq + 1);
    out->f[i].value = b;
    b += strlen(eq + 1) + 1;
    out->p[i] = &out->f[i];
  }
  out->n = n;
  return 0;
}

static void fields_free(fields_t *f) {
  free(f->f);
  free(f->p);
  free(f->buf);
}

int dqnd_create_trainer(dqnd_client_t *c, const char *name, const char *const *fields, int n_fields,
                        const char *backend, int *created) {
  return dqnd_create_population(c, name, fields, n_fields, backend, 1, created);
}

void dqnd_use_member(dqnd_client_t *c, uint32_t member) { c->member = member, c->member_set = 1; }

int client_member(const dqnd_client_t *c, uint32_t *member) {
  *member = c->member;
  return c->member_set;
}

int dqnd_create_population(dqnd_client_t *c, const char *name, const char *const *fields, int n_fields,
                           const char *backend, int population, int *created) {
  if (population < 1) return seterr(c, DQND_EINVAL, "population: %d is below 1", population);
  fields_t fl;
  int rc = fields_make(c, fields, n_fields, &fl);
  if (rc) {
    fields_free(&fl);
    return rc;
  }
  Dqnd__V1__CreateTrainer m = DQND__V1__CREATE_TRAINER__INIT;
  m.name = (char *)name;
  m.n_config = (size_t)n_fields;
  m.config = fl.p;
  m.backend = (char *)(backend ? backend : "");
  m.population = population == 1 ? 0 : (uint32_t)population; /* 0: a daemon from before populations takes it too */
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_CREATE_TRAINER;
  req.create_trainer = &m;
  Dqnd__V1__Reply *rep;
  rc = dqnd_call(c, &req, &rep);
  if (!rc && rep->result_case != DQND__V1__REPLY__RESULT_TRAINER)
    rc = seterr(c, DQND_EPROTO, "CreateTrainer: no TrainerInfo in the reply");
  if (!rc && created) *created = rep->trainer->created;
  dqnd_reply_free(rep);
  fields_free(&fl);
  return rc;
}

int dqnd_destroy_trainer(dqnd_client_t *c, const char *name, int save_final, dqnd_checkpoint_t *saved) {
  Dqnd__V1__DestroyTrainer m = DQND__V1__DESTROY_TRAINER__INIT;
  m.name = (char *)name;
  m.save_final = save_final;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_DESTROY_TRAINER;
  req.destroy_trainer = &m;
  Dqnd__V1__Reply *rep;
  if (saved) memset(saved, 0, sizeof *saved);
  int rc = dqnd_call(c, &req, &rep);
  if (!rc && save_final && rep->result_case != DQND__V1__REPLY__RESULT_CHECKPOINT)
    rc = seterr(c, DQND_EPROTO, "DestroyTrainer: no checkpoint in the reply of a final save");
  if (!rc && saved && save_final) ckpt_from_pb(rep->checkpoint, saved);
  dqnd_reply_free(rep);
  return rc;
}

int dqnd_trainer_info(dqnd_client_t *c, const char *name, dqnd_trainer_info_t *out) {
  Dqnd__V1__GetStats m = DQND__V1__GET_STATS__INIT;
  m.name = (char *)name;
  m.member = c->member;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_GET_STATS;
  req.get_stats = &m;
  Dqnd__V1__Reply *rep;
  memset(out, 0, sizeof *out);
  int rc = dqnd_call(c, &req, &rep);
  if (!rc) {
    const Dqnd__V1__TrainerInfo *t = rep->result_case == DQND__V1__REPLY__RESULT_TRAINER ? rep->trainer : NULL;
    if (!t || t->n_branches < 1 || t->n_branches > LEARNER_MAX_BRANCHES || t->state_dim < 1)
      rc = seterr(c, DQND_EPROTO, "GetStats reply without the trainer's shapes");
    else {
      snprintf(out->backend, sizeof out->backend, "%s", t->backend);
      snprintf(out->state, sizeof out->state, "%s", t->state);
      out->state_dim = (int)t->state_dim;
      out->n_branches = (int)t->n_branches;
      for (size_t d = 0; d < t->n_branches; d++) {
        if (t->branches[d] < 1 || t->branches[d] > 65536) { /* the config's bounds: sums of them cannot overflow */
          rc = seterr(c, DQND_EPROTO, "GetStats reply with a branch of %u actions", t->branches[d]);
          break;
        }
        out->branches[d] = (int)t->branches[d];
      }
      for (size_t i = 0; i < t->n_config; i++)
        if (!strcmp(t->config[i]->name, "noisy")) out->noisy = !strcmp(t->config[i]->value, "1");
      out->population = t->population > 1 ? (int)(t->population > 1024 ? 1024 : t->population) : 1;
      out->member = (int)(t->member < 1024 ? t->member : 1023);
      stats_from_pb(t->stats, &out->stats);
    }
  }
  dqnd_reply_free(rep);
  return rc;
}

int dqnd_list_checkpoints(dqnd_client_t *c, const char *name, dqnd_checkpoint_t **out, int *n) {
  *out = NULL;
  *n = 0;
  Dqnd__V1__ListCheckpoints m = DQND__V1__LIST_CHECKPOINTS__INIT;
  m.name = (char *)name;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_LIST_CHECKPOINTS;
  req.list_checkpoints = &m;
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(c, &req, &rep);
  if (!rc) {
    if (rep->result_case != DQND__V1__REPLY__RESULT_CHECKPOINTS)
      rc = seterr(c, DQND_EPROTO, "ListCheckpoints reply without a list");
    else {
      size_t k = rep->checkpoints->n_checkpoints;
      *out = calloc(k ? k : 1, sizeof **out);
      if (!*out) rc = seterr(c, DQND_ENOMEM, "out of memory");
      for (size_t i = 0; !rc && i < k; i++) ckpt_from_pb(rep->checkpoints->checkpoints[i], &(*out)[i]);
      if (!rc) *n = (int)k;
    }
  }
  dqnd_reply_free(rep);
  return rc;
}

int dqnd_submit(dqnd_client_t *c, const char *name, int state_dim, const learner_transitions_t *t,
                int64_t *replay_size) {
  if (t->n <= 0 || t->n > UINT32_MAX || state_dim <= 0) return seterr(c, DQND_EINVAL, "count/state_dim out of range");
  size_t n = (size_t)t->n, S = (size_t)state_dim;
  Dqnd__V1__SubmitTransitions m = DQND__V1__SUBMIT_TRANSITIONS__INIT;
  m.name = (char *)name;
  m.count = (uint32_t)n;
  m.states = (ProtobufCBinaryData){n * S * 4, (uint8_t *)t->states};
  m.next_states = (ProtobufCBinaryData){n * S * 4, (uint8_t *)t->next_states};
  m.actions = (ProtobufCBinaryData){n * 4, (uint8_t *)t->actions};
  m.rewards = (ProtobufCBinaryData){n * 4, (uint8_t *)t->rewards};
  m.dones = (ProtobufCBinaryData){n, (uint8_t *)t->dones};
  m.member = c->member;
  if (t->episode_ids) m.episode_ids = (ProtobufCBinaryData){n * 8, (uint8_t *)t->episode_ids};
  if (t->episode_ends) m.episode_ends = (ProtobufCBinaryData){n, (uint8_t *)t->episode_ends};
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_SUBMIT_TRANSITIONS;
  req.submit_transitions = &m;
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(c, &req, &rep);
  if (!rc && rep->result_case != DQND__V1__REPLY__RESULT_SUBMIT) rc = seterr(c, DQND_EPROTO, "Submit: no SubmitResult");
  if (!rc && replay_size) *replay_size = rep->submit->replay_size;
  dqnd_reply_free(rep);
  return rc;
}

int dqnd_act_dt(dqnd_client_t *c, const char *name, int state_dim, const learner_dt_window_t *w, int32_t *action) {
  if (w->n < 1 || state_dim < 1) return seterr(c, DQND_EINVAL, "steps/state_dim out of range");
  const size_t n = (size_t)w->n;
  Dqnd__V1__Act m = DQND__V1__ACT__INIT;
  m.name = (char *)name;
  m.policy = "dt";
  m.count = (uint32_t)n;
  m.states = (ProtobufCBinaryData){n * (size_t)state_dim * 4, (uint8_t *)w->states};
  m.rtg = (ProtobufCBinaryData){n * 4, (uint8_t *)w->rtg};
  m.timesteps = (ProtobufCBinaryData){n * 4, (uint8_t *)w->timesteps};
  m.window_actions = (ProtobufCBinaryData){n * 4, (uint8_t *)w->actions};
  m.member = c->member;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_ACT;
  req.act = &m;
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(c, &req, &rep);
  if (!rc && (rep->result_case != DQND__V1__REPLY__RESULT_ACT || rep->act->actions.len != 4))
    rc = seterr(c, DQND_EPROTO, "Act (dt) reply of unexpected size");
  if (!rc) memcpy(action, rep->act->actions.data, 4);
  dqnd_reply_free(rep);
  return rc;
}

int dqnd_act(dqnd_client_t *c, const char *name, const float *states, int n, int state_dim, int noisy,
             int32_t *actions, float *q, size_t q_cap) {
  return dqnd_act_episode(c, name, states, n, state_dim, noisy, 0, actions, q, NULL, q_cap);
}

int dqnd_act_episode(dqnd_client_t *c, const char *name, const float *states, int n, int state_dim, int noisy,
                     uint64_t episode, int32_t *actions, float *q, float *q_var, size_t q_cap) {
  if (n < 1 || state_dim < 1) return seterr(c, DQND_EINVAL, "count/state_dim out of range");
  if (q_var && !q) return seterr(c, DQND_EINVAL, "q_var needs q");
  Dqnd__V1__Act m = DQND__V1__ACT__INIT;
  m.name = (char *)name;
  m.count = (uint32_t)n;
  m.states = (ProtobufCBinaryData){(size_t)n * (size_t)state_dim * 4, (uint8_t *)states};
  m.noisy = noisy;
  m.want_q = q != NULL;
  m.episode = episode;
  m.member = c->member;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_ACT;
  req.act = &m;
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(c, &req, &rep);
  if (!rc) {
    /* a reply is checked before it is copied (a daemon that is not dqnd, or
     * a buggy one, must not make the copies read or write out of bounds):
     * q is n rows of a whole number of floats, each within q's rows (q_cap / n) */
    const size_t qn = rep->result_case == DQND__V1__REPLY__RESULT_ACT ? rep->act->q.len : 0;
    const size_t wr = n > 0 ? qn / 4 / (size_t)n : 0, wd = n > 0 ? q_cap / (size_t)n : 0; /* row widths */
    if (rep->result_case != DQND__V1__REPLY__RESULT_ACT || rep->act->actions.len != (size_t)n * 4 ||
        (q && (qn == 0 || qn % ((size_t)n * 4) || wr > wd)) || (q_var && rep->act->q_var.len != qn))
      rc = seterr(c, DQND_EPROTO, "Act reply of unexpected size");
    else {
      memcpy(actions, rep->act->actions.data, (size_t)n * 4);
      /* row by row: a reply's narrower rows (a trainer of fewer actions than
       * q was sized for) NaN-padded each, not packed together */
      for (size_t r = 0; q && r < (size_t)n; r++) {
        memcpy(q + r * wd, rep->act->q.data + r * wr * 4, wr * 4);
        if (q_var) memcpy(q_var + r * wd, rep->act->q_var.data + r * wr * 4, wr * 4);
        for (size_t i = wr; i < wd; i++) { /* past the reply's width: NaN, not stale memory */
          q[r * wd + i] = NAN;
          if (q_var) q_var[r * wd + i] = NAN;
        }
      }
      for (size_t i = (size_t)n * wd; q && i < q_cap; i++) { /* (q_cap not a multiple of n) */
        q[i] = NAN;
        if (q_var) q_var[i] = NAN;
      }
    }
  }
  dqnd_reply_free(rep);
  return rc;
}

int dqnd_sync_target(dqnd_client_t *c, const char *name, float tau) {
  Dqnd__V1__SyncTarget m = DQND__V1__SYNC_TARGET__INIT;
  m.name = (char *)name;
  m.tau = tau;
  m.member = c->member;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_SYNC_TARGET;
  req.sync_target = &m;
  return call_simple(c, &req);
}

int dqnd_set_hparams(dqnd_client_t *c, const char *name, const char *const *fields, int n_fields) {
  fields_t fl;
  int rc = fields_make(c, fields, n_fields, &fl);
  if (!rc) {
    Dqnd__V1__SetHyperparams m = DQND__V1__SET_HYPERPARAMS__INIT;
    m.name = (char *)name;
    m.n_hparams = (size_t)n_fields;
    m.hparams = fl.p;
    m.member = c->member;
    Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
    req.command_case = DQND__V1__REQUEST__COMMAND_SET_HYPERPARAMS;
    req.set_hyperparams = &m;
    rc = call_simple(c, &req);
  }
  fields_free(&fl);
  return rc;
}

int dqnd_copy_member(dqnd_client_t *c, const char *name, uint32_t dst, uint32_t src, int with_replay,
                     const char *const *factors, int n_factors) {
  fields_t fl;
  int rc = fields_make(c, factors, n_factors, &fl);
  if (!rc) {
    Dqnd__V1__CopyMember m = DQND__V1__COPY_MEMBER__INIT;
    m.name = (char *)name;
    m.dst = dst, m.src = src, m.with_replay = with_replay;
    m.n_factors = (size_t)n_factors;
    m.factors = fl.p;
    Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
    req.command_case = DQND__V1__REQUEST__COMMAND_COPY_MEMBER;
    req.copy_member = &m;
    rc = call_simple(c, &req);
  }
  fields_free(&fl);
  return rc;
}

int dqnd_get_stats(dqnd_client_t *c, const char *name, learner_stats_t *st) {
  dqnd_trainer_info_t ti;
  int rc = dqnd_trainer_info(c, name, &ti);
  if (!rc && st) *st = ti.stats;
  return rc;
}

void ckpt_from_pb(const Dqnd__V1__CheckpointInfo *p, dqnd_checkpoint_t *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->id, sizeof o->id, "%s", p->checkpoint);
  snprintf(o->path, sizeof o->path, "%s", p->path);
  o->bytes = p->bytes;
  o->step = p->step;
  o->seq = p->seq;
  o->mtime = p->mtime_unix;
  o->crc32 = p->crc32;
  o->pinned = p->pinned;
}

