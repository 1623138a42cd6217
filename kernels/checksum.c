/*
 * checksum.c — CRC-32C for the state format's sections and CRC-32 (IEEE) for
 * whole checkpoint files (learner_types.h says why two). Linked by the daemon, the
 * learner and the client alike.
 */
#include <stddef.h>
#include <stdint.h>

#include "learner_types.h"

/* Two reflected CRC-32s share one slicing-by-8 implementation:
 * CRC-32C (Castagnoli, 0x82F63B78) for the sections, CRC-32 (IEEE, 0xEDB88320,
 * zlib's) for whole files. */
typedef struct crc_tab {
  uint32_t poly;
  int ready;
  uint32_t t[8][256];
} crc_tab_t;
static crc_tab_t crc_c = {0x82F63B78u, 0, {{0}}}, crc_ieee = {0xEDB88320u, 0, {{0}}};

static void crc_init(crc_tab_t *T) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (T->poly & (0u - (c & 1)));
    T->t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int k = 1; k < 8; k++) T->t[k][i] = (T->t[k - 1][i] >> 8) ^ T->t[0][T->t[k - 1][i] & 0xff];
  T->ready = 1; /* idempotent: a race writes the same values */
}

static uint32_t crc_run(crc_tab_t *T, uint32_t crc, const void *buf, size_t n) {
  if (!T->ready) crc_init(T);
  const unsigned char *p = buf;
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    crc = T->t[7][lo & 0xff] ^ T->t[6][(lo >> 8) & 0xff] ^ T->t[5][(lo >> 16) & 0xff] ^ T->t[4][lo >> 24] ^
          T->t[3][hi & 0xff] ^ T->t[2][(hi >> 8) & 0xff] ^ T->t[1][(hi >> 16) & 0xff] ^ T->t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ T->t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

/* crc is the running value (0 to start), as in RFC 3720 / zlib. */
uint32_t learner_crc32c(uint32_t crc, const void *buf, size_t n) { return crc_run(&crc_c, crc, buf, n); }
uint32_t learner_crc32(uint32_t crc, const void *buf, size_t n) { return crc_run(&crc_ieee, crc, buf, n); }
