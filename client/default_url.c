/* default_url.c — the embedded default socket, one rule for dqnd and its
 * clients: ipc://$RUNTIME_DIRECTORY/dqnd.sock (systemd), else
 * $XDG_RUNTIME_DIR/dqnd.sock, else /run/dqnd/dqnd.sock as root, else
 * /tmp/dqnd-$UID/dqnd.sock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* A socket we may not even stat (EACCES: a 0750 directory of group dqnd)
 * counts as there, so the user gets "permission denied" from the dial rather
 * than "is dqnd running?" from a per-user socket that never existed. */
static int socket_exists(const char *url) {
  struct stat st;
  if (strncmp(url, "ipc://", 6)) return 0;
  if (stat(url + 6, &st) == 0) return S_ISSOCK(st.st_mode);
  return errno == EACCES;
}

void dqnd_client_default_url(char *buf, size_t n) {
  dqnd_default_url(buf, n);
  if (socket_exists(buf)) return;
  static const char *system_urls[] = {"ipc:///run/dqnd/dqnd.sock", "ipc:///run/dqnd/0/dqnd.sock"};
  for (size_t i = 0; i < sizeof system_urls / sizeof system_urls[0]; i++)
    if (socket_exists(system_urls[i])) {
      snprintf(buf, n, "%s", system_urls[i]);
      return;
    }
}
