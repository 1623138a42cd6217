/*
 * utf8.h — making a message well-formed UTF-8 before it goes into a reply's
 * proto3 string (the Python and Go runtimes refuse a reply that is not).
 */
#ifndef DQND_UTF8_H
#define DQND_UTF8_H

/* In place: every byte outside a well-formed UTF-8 sequence (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF) becomes '?'. */
void utf8_sanitize(char *s);

#endif
