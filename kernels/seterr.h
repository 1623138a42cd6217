/* seterr.h — the one-line error message every kernels/ function that can
 * fail writes into its caller's `err` (always NUL-terminated, truncated). */
#ifndef DQN_SETERR_H
#define DQN_SETERR_H

#include <stdarg.h>
#include <stdio.h>

__attribute__((format(printf, 3, 4))) static inline void seterr(char *err, size_t n, const char *fmt, ...) {
  if (!err || !n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
}

#endif
