/* default_url.c — see default_url.h. */
#include "default_url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
