/*
 * tls.h — one way to build an nng TLS configuration, for the daemon's
 * tls+tcp:// listeners and for libdqnd's dialers (and, through the same
 * file names, the Python package's). Debian 12's libnng does TLS with
 * mbed TLS; every file is PEM.
 *
 * Server (the daemon): cert + key are what it presents; with verify set,
 * ca is the CA that must have signed every client's certificate (mutual
 * TLS), else clients are not asked for one.
 * Client: ca is the CA that signed the daemon's certificate (required: a
 * client never talks TLS to a server it cannot verify); cert + key, when
 * given, are its own certificate for a daemon with tls-verify-clients;
 * server_name is the name the daemon's certificate must carry (default:
 * the URL's host).
 */
#ifndef DQND_TLS_H
#define DQND_TLS_H

#include <stddef.h>

typedef struct dqnd_tls_opts {
  const char *cert, *key, *ca; /* file paths; NULL or "" = not given */
  const char *server_name;     /* client only */
  int verify;                  /* server only: require client certificates */
  int probe;                   /* client only: do not verify the server (the daemon dialling its own
                                  listener in listen_guard.c; never for a real client) */
} dqnd_tls_opts_t;

struct nng_tls_config;
/* 0, or -1 with a message naming the option (tls-cert, tls-key, tls-ca). */
int dqnd_tls_config(int server, const dqnd_tls_opts_t *o, struct nng_tls_config **out, char *err, size_t errlen);
/* Why a handshake with the daemon at tls+tcp:// `url` failed, in words, into
 * why (tls_diag.c): a second connection verifies the daemon's certificate in
 * OPTIONAL mode and reads how the handshake ended. Names an expired or not
 * yet valid certificate, a host name mismatch, a certificate from another
 * CA than tls-ca, a client certificate the daemon requires or refused, and a
 * timeout. 0 with why filled, -1 when the URL or the files cannot be read. */
int dqnd_tls_diagnose(const char *url, const dqnd_tls_opts_t *o, int timeout_ms, char *why, size_t n);
/* The host part of a tls+tcp://host:port URL (brackets of an IPv6 address removed). */
void dqnd_tls_url_host(const char *url, char *out, size_t n);

#endif
