/* utf8.c — see utf8.h. */
#include "utf8.h"

/* Replaces each byte that is not part of a well-formed UTF-8 sequence (RFC
 * 3629: no overlong forms, no surrogates, nothing past U+10FFFF) with '?'.
 * Error messages echo the client's bytes (a name, a value), and vsnprintf may
 * cut a character at the buffer's end; proto3 strings must be UTF-8, and the
 * Python and Go runtimes refuse a reply that is not (a review find). */
void utf8_sanitize(char *s) {
  unsigned char *p = (unsigned char *)s;
  while (*p) {
    const unsigned c0 = p[0];
    int len = c0 < 0x80 ? 1 : c0 >= 0xc2 && c0 <= 0xdf ? 2 : c0 >= 0xe0 && c0 <= 0xef ? 3 : c0 >= 0xf0 && c0 <= 0xf4 ? 4 : 0;
    for (int k = 1; k < len; k++)
      if ((p[k] & 0xc0) != 0x80) len = 0; /* also stops at the NUL */
    if (len >= 3) { /* the second byte's range: no overlongs, surrogates or > U+10FFFF */
      const unsigned c1 = p[1];
      if ((c0 == 0xe0 && c1 < 0xa0) || (c0 == 0xed && c1 > 0x9f) || (c0 == 0xf0 && c1 < 0x90) ||
          (c0 == 0xf4 && c1 > 0x8f))
        len = 0;
    }
    if (!len) *p = '?', len = 1;
    p += len;
  }
}

