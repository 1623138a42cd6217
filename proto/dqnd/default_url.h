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

/* For an ipc:// URL: 0 when its socket's directory is safe to use, -1 (err
 * says why) when that directory sits in one that every user may write (as
 * /tmp, where the last default lives) and is not a real directory of this
 * user's that only it may write: another user could have made it first and
 * put a socket of theirs in it, to receive the uploads and the auth token
 * (a review find). A directory that does not exist yet is safe. Other URLs: 0. */
int dqnd_ipc_dir_check(const char *url, char *err, size_t n);

#endif
