/*
 * log.h — one line per event: "2026-11-29T21:50:56.123Z info [trainer] text".
 * The macros check the level before formatting. Thread-safe (one write(2)
 * per line). log_reopen() (SIGHUP) reopens the log file for logrotate.
 */
#ifndef DQND_LOG_H
#define DQND_LOG_H

enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int log_level;
int log_open(const char *path); /* NULL or "-": stderr */
int log_reopen(void);
int log_parse_level(const char *s); /* -1 if unknown */
void log_write(int level, const char *trainer, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define log_error(t, ...) log_write(LOG_ERROR, t, __VA_ARGS__)
#define log_warn(t, ...) do { if (log_level >= LOG_WARN) log_write(LOG_WARN, t, __VA_ARGS__); } while (0)
#define log_info(t, ...) do { if (log_level >= LOG_INFO) log_write(LOG_INFO, t, __VA_ARGS__); } while (0)
#define log_debug(t, ...) do { if (log_level >= LOG_DEBUG) log_write(LOG_DEBUG, t, __VA_ARGS__); } while (0)

#endif
