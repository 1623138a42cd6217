/* default_url.h — the embedded default socket, one rule shared by dqnd (where
 * it listens when given no --listen) and its clients (where they look first).
 * It lives with the protocol so the daemon and the clients each link it
 * without reaching into the other's folder. */
#ifndef DQND_PROTO_DEFAULT_URL_H
#define DQND_PROTO_DEFAULT_URL_H

#include <stddef.h>

/* ipc://$RUNTIME_DIRECTORY/dqnd.sock (systemd), else
 * ipc://$XDG_RUNTIME_DIR/dqnd.sock, else ipc:///run/dqnd/dqnd.sock as root,
 * else ipc:///tmp/dqnd-$UID/dqnd.sock. */
void dqnd_default_url(char *buf, size_t n);

#endif
