/* default_url.c — the embedded default socket, one rule for dqnd and its
 * clients: ipc://$RUNTIME_DIRECTORY/dqnd.sock (systemd), else
 * $XDG_RUNTIME_DIR/dqnd.sock, else /run/dqnd/dqnd.sock as root, else
 * /tmp/dqnd-$UID/dqnd.sock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "default_url.h"

void dqnd_default_url(char *buf, size_t n) {
  const char *rd = getenv("RUNTIME_DIRECTORY"), *xdg = getenv("XDG_RUNTIME_DIR");
  if (rd && *rd)
    snprintf(buf, n, "ipc://%.*s/dqnd.sock", (int)strcspn(rd, ":"), rd); /* systemd may list several */
  else if (xdg && *xdg)
    snprintf(buf, n, "ipc://%s/dqnd.sock", xdg);
  else if (geteuid() == 0)
    snprintf(buf, n, "ipc:///run/dqnd/dqnd.sock");
  else
    snprintf(buf, n, "ipc:///tmp/dqnd-%u/dqnd.sock", (unsigned)geteuid());
}
