/* tls.c — see tls.h. */
#include "dqnd/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#define PEM_MAX (1 << 20)

static int fail(char *err, size_t n, const char *opt, const char *path, const char *why) {
  snprintf(err, n, "%s: %s: %s", opt, path, why);
  return -1;
}

/* The whole file, NUL-terminated (mbed TLS parses PEM from a string). */
static char *read_pem(const char *opt, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, opt, path, strerror(errno)), NULL;
  char *buf = malloc(PEM_MAX + 1);
  size_t n = buf ? fread(buf, 1, PEM_MAX + 1, f) : 0;
  int bad = ferror(f);
  fclose(f);
  if (!buf) return fail(err, errlen, opt, path, "out of memory"), NULL;
  if (!bad && n <= PEM_MAX) buf[n] = 0; /* before strstr reads it (it ran past the bytes read: a review find) */
  if (bad || n > PEM_MAX || !strstr(buf, "-----BEGIN ")) {
    explicit_bzero(buf, n < PEM_MAX + 1 ? n : PEM_MAX + 1); /* a key file's bytes */
    free(buf);
    return fail(err, errlen, opt, path, bad ? "read error" : n > PEM_MAX ? "larger than 1 MiB" : "not a PEM file"), NULL;
  }
  return buf;
}

static int given(const char *s) { return s && *s; }

int dqnd_tls_config(int server, const dqnd_tls_opts_t *o, struct nng_tls_config **out, char *err, size_t errlen) {
  *out = NULL;
  if (given(o->cert) != given(o->key))
    return snprintf(err, errlen, "%s: needed together with %s", given(o->cert) ? "tls-key" : "tls-cert",
                    given(o->cert) ? "tls-cert" : "tls-key"),
           -1;
  if (server && !given(o->cert)) return snprintf(err, errlen, "tls-cert: a TLS listener needs a certificate"), -1;
  if (!server && !o->probe && !given(o->ca))
    return snprintf(err, errlen, "tls-ca: a TLS client needs the CA that signed the daemon's certificate"), -1;
  if (server && o->verify && !given(o->ca))
    return snprintf(err, errlen, "tls-ca: verifying clients needs the CA that signs their certificates"), -1;
  nng_tls_config *cfg;
  int rv = nng_tls_config_alloc(&cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT);
  if (rv) return snprintf(err, errlen, "tls: %s", nng_strerror(rv)), -1;
  char *cert = NULL, *key = NULL;
  int rc = -1;
  if (given(o->ca) && !(!server && o->probe) && (rv = nng_tls_config_ca_file(cfg, o->ca))) {
    fail(err, errlen, "tls-ca", o->ca, rv == NNG_ENOENT ? "cannot read it" : "not a valid PEM CA certificate");
    goto out;
  }
  if (given(o->cert)) {
    if (!(cert = read_pem("tls-cert", o->cert, err, errlen)) || !(key = read_pem("tls-key", o->key, err, errlen))) goto out;
    if ((rv = nng_tls_config_own_cert(cfg, cert, key, NULL))) {
      snprintf(err, errlen, "tls-cert/tls-key: %s and %s are not a matching PEM certificate and unencrypted key (%s)",
               o->cert, o->key, nng_strerror(rv));
      goto out;
    }
  }
  nng_tls_auth_mode mode = server ? (o->verify ? NNG_TLS_AUTH_MODE_REQUIRED : NNG_TLS_AUTH_MODE_NONE)
                                  : o->probe ? NNG_TLS_AUTH_MODE_NONE : NNG_TLS_AUTH_MODE_REQUIRED;
  if ((rv = nng_tls_config_auth_mode(cfg, mode))) {
    snprintf(err, errlen, "tls: auth mode: %s", nng_strerror(rv));
    goto out;
  }
  if (!server && given(o->server_name) && (rv = nng_tls_config_server_name(cfg, o->server_name))) {
    snprintf(err, errlen, "tls-server-name: %s", nng_strerror(rv));
    goto out;
  }
  rc = 0;
out:
  free(cert);
  if (key) explicit_bzero(key, strlen(key)); /* the private key's bytes do not linger in freed memory */
  free(key);
  if (rc) nng_tls_config_free(cfg);
  else *out = cfg;
  return rc;
}

void dqnd_tls_url_host(const char *url, char *out, size_t n) {
  const char *h = strstr(url, "://");
  h = h ? h + 3 : url;
  size_t len;
  if (*h == '[') {
    h++;
    len = strcspn(h, "]");
  } else
    len = strcspn(h, ":/");
  snprintf(out, n, "%.*s", (int)len, h);
}
