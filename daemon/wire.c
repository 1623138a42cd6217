/* wire.c — see wire.h. Walks the protobuf wire format by hand: tag varint,
 * then a varint, fixed64, length-delimited or fixed32 value. */
#include "wire.h"

#include <stdio.h>
#include <string.h>

static int varint(const uint8_t *p, size_t len, size_t *pos, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < len; shift += 7) {
    uint8_t b = p[(*pos)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

static const ProtobufCFieldDescriptor *field_of(const ProtobufCMessageDescriptor *d, uint32_t num) {
  for (unsigned i = 0; i < d->n_fields; i++)
    if (d->fields[i].id == num) return &d->fields[i];
  return NULL;
}

static int walk(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len, char *path, size_t n, int depth) {
  size_t pos = 0;
  while (pos < len) {
    uint64_t key, v;
    if (varint(p, len, &pos, &key)) return 0;
    switch (key & 7) {
    case 0: /* varint */
      if (varint(p, len, &pos, &v)) return 0;
      break;
    case 1: pos += 8; break;
    case 5: pos += 4; break;
    case 2: {
      if (varint(p, len, &pos, &v) || v > len - pos) return 0;
      const ProtobufCFieldDescriptor *f = field_of(d, (uint32_t)(key >> 3));
      if (f && (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE)) {
        size_t k = strlen(path);
        snprintf(path + k, n - k, "%s%s", k ? "." : "", f->name);
        if (f->type == PROTOBUF_C_TYPE_STRING && memchr(p + pos, 0, (size_t)v)) return 1;
        if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 16 &&
            walk(f->descriptor, p + pos, (size_t)v, path, n, depth + 1))
          return 1;
        path[k] = 0;
      }
      pos += (size_t)v;
      break;
    }
    default: return 0; /* groups: not in proto3 */
    }
  }
  return 0;
}

int wire_find_nul(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, char *field, size_t n) {
  field[0] = 0;
  return walk(desc, buf, len, field, n, 0);
}
