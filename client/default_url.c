/* default_url.c — where a client looks for dqnd when given no URL: the
 * daemon's own default (proto/dqnd/default_url.c, the rule dqnd listens by),
 * else a system service's socket (see dqnd_client_default_url in dqnd.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "dqnd.h"

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
