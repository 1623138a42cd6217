/* log.c — see log.h. */
#include "log.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int log_level = LOG_INFO;
static int log_fd = 2;
static char log_path[4096];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

int log_open(const char *path) {
  if (!path || !strcmp(path, "-")) {
    log_path[0] = 0;
    return 0;
  }
  snprintf(log_path, sizeof log_path, "%s", path);
  return log_reopen();
}

int log_reopen(void) {
  if (!log_path[0]) return 0;
  int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return -1;
  pthread_mutex_lock(&log_mu);
  int old = log_fd;
  log_fd = fd;
  pthread_mutex_unlock(&log_mu);
  if (old > 2) close(old);
  return 0;
}

int log_parse_level(const char *s) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

void log_write(int level, const char *trainer, const char *fmt, ...) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  char line[2048];
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  n += snprintf(line + n, sizeof line - (size_t)n, ".%03dZ %s ", (int)(tv.tv_usec / 1000), names[level & 3]);
  if (trainer) n += snprintf(line + n, sizeof line - (size_t)n, "[%s] ", trainer);
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  n = k < 0 ? n : (n + k >= (int)sizeof line - 1 ? (int)sizeof line - 2 : n + k);
  line[n++] = '\n';
  pthread_mutex_lock(&log_mu);
  ssize_t w = write(log_fd, line, (size_t)n);
  pthread_mutex_unlock(&log_mu);
  (void)w;
}
