/*
 * restore.h — bringing trainers back after a restart (systemd restart, crash,
 * reboot). Every directory STATE/<name> with a valid trainer name is a
 * trainer that was live when the daemon stopped (destroyed and idle-unloaded
 * trainers move to STATE/.retired/). Each is rebuilt from its newest
 * checkpoint that loads; a file that fails (corrupt, truncated, an old format)
 * is logged and the next-newest is tried. Files are never deleted here.
 */
#ifndef DQND_RESTORE_H
#define DQND_RESTORE_H

#include "server.h"

/* Runs before the sockets open, so no client sees a half-restored registry.
 * Returns the number of trainers restored. */
int restore_trainers(server_t *s);

#endif
