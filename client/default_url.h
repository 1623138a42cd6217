/* default_url.h — the daemon's default URL (see default_url.c). */
#ifndef DQND_DEFAULT_URL_H
#define DQND_DEFAULT_URL_H

#include <stddef.h>

/* The URL dqnd listens on when given none (its embedded default). */
void dqnd_default_url(char *buf, size_t n);
/* The URL a client tries when given none: dqnd_default_url, unless that
 * socket does not exist and a system service's does (/run/dqnd/dqnd.sock,
 * else the first instance's /run/dqnd/0/dqnd.sock). */
void dqnd_client_default_url(char *buf, size_t n);

#endif
