/* default_url.c — see default_url.h. */
#include "default_url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int dqnd_ipc_dir_check(const char *url, char *err, size_t n) {
  if (strncmp(url, "ipc://", 6)) return 0;
  char dir[1024], parent[1024];
  snprintf(dir, sizeof dir, "%s", url + 6);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return 0; /* a socket directly in / or relative: nothing to check */
  *slash = 0;
  snprintf(parent, sizeof parent, "%s", dir);
  slash = strrchr(parent, '/');
  if (!slash) snprintf(parent, sizeof parent, ".");
  else if (slash == parent) parent[1] = 0;
  else *slash = 0;
  struct stat ps, ds;
  if (stat(parent, &ps) || !(ps.st_mode & S_IWOTH)) return 0;
  if (lstat(dir, &ds)) return errno == ENOENT ? 0 : (snprintf(err, n, "%s: %s", dir, strerror(errno)), -1);
  if (S_ISDIR(ds.st_mode) && ds.st_uid == geteuid() && !(ds.st_mode & (S_IWGRP | S_IWOTH))) return 0;
  snprintf(err, n,
           "%s: the socket's directory (in %s, which every user may write) is %s: another user could have "
           "made it to catch this socket; remove it, or use a directory of yours (XDG_RUNTIME_DIR, --listen/--url)",
           dir, parent,
           S_ISLNK(ds.st_mode)        ? "a symbolic link"
           : !S_ISDIR(ds.st_mode)     ? "not a directory"
           : ds.st_uid != geteuid()   ? "owned by another user"
                                      : "writable by others");
  return -1;
}
