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
  else /* root too: the system service's socket is dqnd --system's (DQND_SYSTEM_URL) */
    snprintf(buf, n, "ipc:///tmp/dqnd-%u/dqnd.sock", (unsigned)geteuid());
}

int dqnd_ipc_dir_check(const char *url, int strict_owner, char *err, size_t n) {
  if (strncmp(url, "ipc://", 6)) return 0;
  char d[1024];
  const char *path = url + 6;
  if (path[0] == '/') snprintf(d, sizeof d, "%s", path);
  else { /* relative: from the working directory */
    char cwd[512];
    if (!getcwd(cwd, sizeof cwd)) return 0;
    snprintf(d, sizeof d, "%s/%s", cwd, path);
  }
  char *slash = strrchr(d, '/');
  *slash = 0; /* the socket's directory; then each directory above it */
  for (int top = 1; d[0]; top = 0) {
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", d);
    slash = strrchr(parent, '/');
    if (slash == parent) parent[1] = 0;
    else *slash = 0;
    struct stat ps, ds;
    if (stat(parent, &ps) == 0 && (ps.st_mode & S_IWOTH)) { /* another user may make or replace d */
      if (lstat(d, &ds)) return errno == ENOENT ? 0 : (snprintf(err, n, "%s: %s", d, strerror(errno)), -1);
      const int ours = ds.st_uid == geteuid() || ds.st_uid == 0;
      /* a directory above the socket's may be shared as /tmp is: sticky
       * (no one renames another's entries) and ours */
      const int shared_ok = !top && (ds.st_mode & S_ISVTX) && ours;
      const char *why = S_ISLNK(ds.st_mode)                                ? "a symbolic link"
                        : !S_ISDIR(ds.st_mode)                             ? "not a directory"
                        : (ds.st_mode & (S_IWGRP | S_IWOTH)) && !shared_ok ? "writable by others"
                        : strict_owner && !ours                            ? "owned by another user"
                                                                           : NULL;
      if (why) {
        snprintf(err, n,
                 "%s (on the way to the socket, in %s, which every user may write) is %s: another user could have "
                 "made it to catch this socket; remove it, or use a directory of yours (XDG_RUNTIME_DIR, --listen/--url)",
                 d, parent, why);
        return -1;
      }
    }
    if (!strcmp(parent, "/")) break;
    snprintf(d, sizeof d, "%s", parent);
  }
  return 0;
}
