/* default_url.h — the embedded default socket, one rule shared by dqnd (where
 * it listens when given no --listen) and its clients (where they look first).
 * It lives with the protocol so the daemon and the clients each link it
 * without reaching into the other's folder. */
#ifndef DQND_PROTO_DEFAULT_URL_H
#define DQND_PROTO_DEFAULT_URL_H

#include <stddef.h>

/* ipc://$RUNTIME_DIRECTORY/dqnd.sock (systemd), else
 * ipc://$XDG_RUNTIME_DIR/dqnd.sock, else ipc:///tmp/dqnd-$UID/dqnd.sock: the
 * same rule for root as for any user, so a daemon started by hand never
 * takes the system service's socket. */
void dqnd_default_url(char *buf, size_t n);
/* the system service's socket (dqnd --system, the systemd units) */
#define DQND_SYSTEM_URL "ipc:///run/dqnd/dqnd.sock"
#define DQND_SYSTEM_STATE_DIR "/var/lib/dqnd"

/* For an ipc:// URL: 0 when its socket's directory is safe to use, -1 (err
 * says why) when it, or a directory above it, sits in a directory every user
 * may write (as /tmp, where the last default lives) and is a symbolic link,
 * not a directory, writable by group or others, or (strict_owner) owned by a
 * user other than this one or root: another user could have made it first
 * and put a socket of theirs in it, to receive the uploads and the auth token
 * (a review find). The daemon is strict; a client is strict for its own
 * default URL, and may otherwise use a directory of the daemon's user (its
 * group's members connect so). A directory that does not exist yet is safe.
 * Other URLs: 0. */
int dqnd_ipc_dir_check(const char *url, int strict_owner, char *err, size_t n);

#endif
