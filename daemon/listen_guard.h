/*
 * listen_guard.h — keeps the listeners accepting. Debian 12's libnng (1.5.2)
 * has nanomsg/nng#1518 (fixed upstream in 1.6.0): a peer that connects and
 * closes during the SP handshake — a port scanner, a bare connect(), a
 * second dqnd probing whether an ipc socket is stale — makes that listener
 * stop accepting for good, so one local process could wedge the service.
 * Every `listener-check` seconds a thread dials each listener with a
 * throwaway socket and checks that the daemon's socket takes the connection
 * (listen_guard.c says how); a listener whose probe connects but is not
 * taken, twice in a row, is closed and started again on its URL (logged).
 * nng closes that listener's other connections with it: their clients see a
 * reset (in a real wedge those connections no longer get new requests served
 * either). A probe that cannot connect at all counts as nothing; a tcp
 * listener on port 0 (an ephemeral port) is not probed.
 */
#ifndef DQND_LISTEN_GUARD_H
#define DQND_LISTEN_GUARD_H

#include "server.h"

/* 0, or -1 when the thread cannot start; does nothing when the interval is 0. */
int listen_guard_start(server_t *s);
/* Stops the thread (before rpc_stop closes the socket). */
void listen_guard_stop(server_t *s);
/* The URL a probe dials for a listener's URL: a wildcard host becomes loopback. */
void listen_guard_probe_url(const char *url, char *out, size_t n);

#endif
