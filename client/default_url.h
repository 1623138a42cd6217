/* default_url.h — the daemon's default URL for this user (see default_url.c). */
#ifndef DQND_DEFAULT_URL_H
#define DQND_DEFAULT_URL_H

#include <stddef.h>

void dqnd_default_url(char *buf, size_t n);

#endif
