/*
 * fault-unlink.c — a test's LD_PRELOAD shim (tests/test-restart.c): while
 * the file named by DQND_TEST_UNLINK_FAILS exists, unlink() of any path
 * whose last component is "diverged" fails with EIO, so a test can make a
 * daemon's removal of a divergence verdict fail (running as root, as CI
 * does, no permission makes it fail) and then succeed again. Every other
 * unlink() is the C library's. Never linked into the daemon.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int unlink(const char *path) {
  static int (*real)(const char *);
  if (!real) { /* POSIX's way to take a function from dlsym (ISO C has no cast for it) */
    void *sym = dlsym(RTLD_NEXT, "unlink");
    memcpy(&real, &sym, sizeof real);
  }
  const char *flag = getenv("DQND_TEST_UNLINK_FAILS");
  const char *base = strrchr(path, '/');
  if (flag && base && !strcmp(base + 1, "diverged") && access(flag, F_OK) == 0) {
    errno = EIO;
    return -1;
  }
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return real(path);
}
