/* tls_diag.c — see tls.h (dqnd_tls_diagnose).
 *
 * nng reports a failed handshake as one code (NNG_EPEERAUTH, NNG_ECRYPTO or a
 * closed connection) and keeps mbed TLS's reasons to itself. So after such a
 * failure the client connects once more with mbed TLS directly, this time
 * verifying the daemon's certificate in OPTIONAL mode: the handshake goes on
 * past a bad certificate, and the verify callback records every flag and the
 * daemon's certificate (subject, issuer, names, dates). One look at those and
 * at how the handshake ended names the cause. The diagnosis never decides
 * anything: the real connection was already refused; this only explains it.
 */
#include "dqnd/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

/* what the verify callback saw of the daemon's certificate */
typedef struct seen {
  uint32_t flags;     /* every depth's flags, or'ed */
  int have;           /* the leaf was seen */
  char subject[256], issuer[256], names[512];
  mbedtls_x509_time valid_from, valid_to;
} seen_t;

static int given(const char *s) { return s && *s; }

static void fmt_time(const mbedtls_x509_time *t, char *out, size_t n) {
  snprintf(out, n, "%04d-%02d-%02d %02d:%02d:%02d UTC", t->year, t->mon, t->day, t->hour, t->min, t->sec);
}

/* the leaf's DNS names, "DNS:a, DNS:b", or its CN when it has none */
static void leaf_names(const mbedtls_x509_crt *crt, char *out, size_t n) {
  out[0] = 0;
  size_t len = 0;
  for (const mbedtls_x509_sequence *s = &crt->subject_alt_names; s && s->buf.p; s = s->next) {
    if (s->buf.tag != (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_X509_SAN_DNS_NAME)) continue;
    int w = snprintf(out + len, n - len, "%sDNS:%.*s", len ? ", " : "", (int)s->buf.len, (const char *)s->buf.p);
    if (w < 0 || (size_t)w >= n - len) break;
    len += (size_t)w;
  }
  if (!len) {
    for (const mbedtls_x509_name *nm = &crt->subject; nm && nm->oid.p; nm = nm->next)
      if (!MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &nm->oid))
        snprintf(out, n, "CN=%.*s", (int)nm->val.len, (const char *)nm->val.p);
  }
  if (!out[0]) snprintf(out, n, "no name");
}

static int verify_cb(void *ctx, mbedtls_x509_crt *crt, int depth, uint32_t *flags) {
  seen_t *s = ctx;
  s->flags |= *flags;
  if (depth == 0) {
    s->have = 1;
    mbedtls_x509_dn_gets(s->subject, sizeof s->subject, &crt->subject);
    mbedtls_x509_dn_gets(s->issuer, sizeof s->issuer, &crt->issuer);
    leaf_names(crt, s->names, sizeof s->names);
    s->valid_from = crt->valid_from;
    s->valid_to = crt->valid_to;
  }
  return 0; /* go on: OPTIONAL mode, the flags are what we want */
}

/* host and port of tls+tcp://host:port ([v6]:port) */
static int url_host_port(const char *url, char *host, size_t hn, char *port, size_t pn) {
  dqnd_tls_url_host(url, host, hn);
  const char *p = strrchr(url, ':');
  if (!p || !p[1] || p < url + 10) return -1;
  snprintf(port, pn, "%.*s", (int)strcspn(p + 1, "/"), p + 1);
  return 0;
}

/* a TCP connection within timeout_ms (mbedtls_net_connect has no timeout) */
static int connect_fd(const char *host, const char *port, int timeout_ms) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *a;
  if (getaddrinfo(host, port, &hints, &res)) return -1;
  int fd = -1;
  for (a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
      close(fd), fd = -1;
      continue;
    }
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    int e = 0;
    socklen_t el = sizeof e;
    if (poll(&pf, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) || e) close(fd), fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

static const char *alert_name(int a) {
  switch (a) {
  case MBEDTLS_SSL_ALERT_MSG_HANDSHAKE_FAILURE: return "handshake failure";
  case MBEDTLS_SSL_ALERT_MSG_BAD_CERT: return "bad certificate";
  case MBEDTLS_SSL_ALERT_MSG_UNSUPPORTED_CERT: return "unsupported certificate";
  case MBEDTLS_SSL_ALERT_MSG_CERT_REVOKED: return "certificate revoked";
  case MBEDTLS_SSL_ALERT_MSG_CERT_EXPIRED: return "certificate expired";
  case MBEDTLS_SSL_ALERT_MSG_CERT_UNKNOWN: return "certificate unknown";
  case MBEDTLS_SSL_ALERT_MSG_UNKNOWN_CA: return "unknown CA";
  case MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED: return "access denied";
  case MBEDTLS_SSL_ALERT_MSG_DECRYPT_ERROR: return "decrypt error";
  case MBEDTLS_SSL_ALERT_MSG_NO_CERT: return "no certificate";
  }
  return "other";
}

/* the cause from the daemon certificate's flags (0 when none of ours) */
static int explain_flags(const seen_t *s, const dqnd_tls_opts_t *o, const char *name, char *why, size_t n) {
  char t[40];
  if (s->flags & MBEDTLS_X509_BADCERT_EXPIRED) {
    fmt_time(&s->valid_to, t, sizeof t);
    return snprintf(why, n, "the daemon's certificate (%s) expired on %s", s->subject, t), 1;
  }
  if (s->flags & MBEDTLS_X509_BADCERT_FUTURE) {
    fmt_time(&s->valid_from, t, sizeof t);
    return snprintf(why, n, "the daemon's certificate (%s) is not valid before %s (is this machine's clock right?)",
                    s->subject, t),
           1;
  }
  if (s->flags & (MBEDTLS_X509_BADCERT_NOT_TRUSTED | MBEDTLS_X509_BADCRL_NOT_TRUSTED))
    return snprintf(why, n, "the daemon's certificate (%s, issued by %s) is not signed by the CA in tls-ca %s",
                    s->subject, s->issuer, given(o->ca) ? o->ca : "(none)"),
           1;
  if (s->flags & MBEDTLS_X509_BADCERT_CN_MISMATCH)
    return snprintf(why, n,
                    "host name mismatch: the daemon's certificate is issued to %s, not to '%s' (dial a name it "
                    "carries, or give --tls-server-name; mbed TLS does not match IP addresses)",
                    s->names, name),
           1;
  if (s->flags) {
    char info[256];
    mbedtls_x509_crt_verify_info(info, sizeof info, "", s->flags);
    info[strcspn(info, "\n")] = 0;
    return snprintf(why, n, "the daemon's certificate (%s) failed verification: %s", s->subject, info), 1;
  }
  return 0;
}

int dqnd_tls_diagnose(const char *url, const dqnd_tls_opts_t *o, int timeout_ms, char *why, size_t n) {
  char host[256], port[16], name[256];
  why[0] = 0;
  if (url_host_port(url, host, sizeof host, port, sizeof port)) return -1;
  snprintf(name, sizeof name, "%s", given(o->server_name) ? o->server_name : host);
  mbedtls_x509_crt ca, own;
  mbedtls_pk_context key;
  mbedtls_entropy_context ent;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_ssl_config conf;
  mbedtls_ssl_context ssl;
  mbedtls_net_context net;
  mbedtls_x509_crt_init(&ca), mbedtls_x509_crt_init(&own), mbedtls_pk_init(&key);
  mbedtls_entropy_init(&ent), mbedtls_ctr_drbg_init(&drbg);
  mbedtls_ssl_config_init(&conf), mbedtls_ssl_init(&ssl), mbedtls_net_init(&net);
  seen_t seen = {0};
  int rc = -1, ret = -1, has_own = given(o->cert) && given(o->key);
  if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, (const unsigned char *)"dqnd-tls-diag", 13) ||
      mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                  MBEDTLS_SSL_PRESET_DEFAULT))
    goto out;
  if (given(o->ca) && mbedtls_x509_crt_parse_file(&ca, o->ca) < 0) goto out;
  if (has_own && (mbedtls_x509_crt_parse_file(&own, o->cert) || mbedtls_pk_parse_keyfile(&key, o->key, NULL) ||
                  mbedtls_ssl_conf_own_cert(&conf, &own, &key)))
    goto out;
  mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_OPTIONAL);
  mbedtls_ssl_conf_ca_chain(&conf, &ca, NULL);
  mbedtls_ssl_conf_verify(&conf, verify_cb, &seen);
  mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &drbg);
  mbedtls_ssl_conf_read_timeout(&conf, (uint32_t)(timeout_ms > 0 ? timeout_ms : 5000));
  if (mbedtls_ssl_setup(&ssl, &conf) || mbedtls_ssl_set_hostname(&ssl, name)) goto out;
  if ((net.fd = connect_fd(host, port, timeout_ms > 0 ? timeout_ms : 5000)) < 0) {
    snprintf(why, n, "could not reach %s:%s again to find the cause", host, port);
    rc = 0;
    goto out;
  }
  mbedtls_ssl_set_bio(&ssl, &net, mbedtls_net_send, NULL, mbedtls_net_recv_timeout);
  while ((ret = mbedtls_ssl_handshake(&ssl)) == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) {
  }
  rc = 0;
  if (explain_flags(&seen, o, name, why, n)) goto out; /* the daemon's certificate first: we refuse it first */
  if (ret == 0) {
    snprintf(why, n, "a second handshake succeeded: the cause was not in the certificates (retry?)");
    goto out;
  }
  const int alert = ret == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE && ssl.in_msg ? ssl.in_msg[1] : -1;
  if (ssl.client_auth && !has_own) {
    snprintf(why, n, "the daemon requires a client certificate (it runs with tls-verify-clients): give tls-cert and "
                     "tls-key, signed by the CA the daemon trusts");
  } else if (ssl.client_auth) {
    /* the daemon (mbed TLS) closes without an alert: what can be checked here is */
    char t[40];
    if (mbedtls_pk_check_pair(&own.pk, &key))
      snprintf(why, n, "tls-key %s is not the private key of tls-cert %s", o->key, o->cert);
    else if (mbedtls_x509_time_is_past(&own.valid_to))
      fmt_time(&own.valid_to, t, sizeof t),
          snprintf(why, n, "the daemon refused this client's certificate %s: it expired on %s", o->cert, t);
    else if (mbedtls_x509_time_is_future(&own.valid_from))
      fmt_time(&own.valid_from, t, sizeof t),
          snprintf(why, n, "the daemon refused this client's certificate %s: it is not valid before %s", o->cert, t);
    else
      snprintf(why, n,
               "the daemon refused this client's certificate %s (TLS alert: %s): it is not signed by the CA the "
               "daemon trusts (its tls-ca)",
               o->cert, alert >= 0 ? alert_name(alert) : "none, the connection was closed");
  } else if (ret == MBEDTLS_ERR_SSL_TIMEOUT) {
    snprintf(why, n, "the handshake timed out after %d ms", timeout_ms > 0 ? timeout_ms : 5000);
  } else {
    char e[160];
    mbedtls_strerror(ret, e, sizeof e);
    snprintf(why, n, "the handshake failed: %s%s%s", e, alert >= 0 ? ", TLS alert: " : "",
             alert >= 0 ? alert_name(alert) : "");
  }
out:
  if (ret == 0) mbedtls_ssl_close_notify(&ssl);
  mbedtls_net_free(&net);
  mbedtls_ssl_free(&ssl), mbedtls_ssl_config_free(&conf);
  mbedtls_ctr_drbg_free(&drbg), mbedtls_entropy_free(&ent);
  mbedtls_x509_crt_free(&ca), mbedtls_x509_crt_free(&own), mbedtls_pk_free(&key);
  return rc;
}
