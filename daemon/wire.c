/* wire.c — see wire.h. wire_find_nul walks the protobuf wire format by hand:
 * tag varint, then a varint, fixed64, length-delimited or fixed32 value;
 * wire_decode_request is the receive path's decode (rpc.c's call_cb). */
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
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

static void *budget_alloc(void *data, size_t size) {
  wire_budget_t *b = data;
  if (size > b->limit - b->used) return NULL;
  void *p = malloc(size);
  if (p) b->used += size;
  return p;
}
static void budget_free(void *data, void *p) {
  (void)data;
  free(p);
}

void wire_budget_init(wire_budget_t *b) {
  b->a.alloc = budget_alloc;
  b->a.free = budget_free;
  b->a.allocator_data = b;
  b->used = b->limit = 0;
}

Dqnd__V1__Request *wire_decode_request(wire_budget_t *b, const uint8_t *buf, size_t len, int64_t max_message_bytes,
                                       int64_t decode_budget, int *code, uint64_t *request_id, char *msg, size_t n) {
  *request_id = 0;
  if ((int64_t)len > max_message_bytes) {
    *code = CODE_RESOURCE_EXHAUSTED;
    snprintf(msg, n, "message: %zu bytes exceeds max_message_bytes %lld", len, (long long)max_message_bytes);
    return NULL;
  }
  b->used = 0;
  b->limit = (size_t)decode_budget;
  Dqnd__V1__Request *req = dqnd__v1__request__unpack(&b->a, len, buf);
  if (!req) {
    if (b->used >= b->limit || b->limit - b->used < len) {
      *code = CODE_RESOURCE_EXHAUSTED;
      snprintf(msg, n, "message: decoding needs more than decode_budget %lld bytes", (long long)decode_budget);
    } else {
      *code = CODE_INVALID_ARGUMENT;
      snprintf(msg, n, "message: %zu bytes are not a dqnd.v1.Request", len);
    }
    return NULL;
  }
  char field[128];
  if (wire_find_nul(&dqnd__v1__request__descriptor, buf, len, field, sizeof field)) {
    *request_id = req->request_id;
    protobuf_c_message_free_unpacked(&req->base, &b->a);
    *code = CODE_INVALID_ARGUMENT;
    snprintf(msg, n, "%s: contains a NUL byte", field);
    return NULL;
  }
  return req;
}

const char *wire_command_name(int command_case) {
  if (command_case <= 0) return NULL;
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field(&dqnd__v1__request__descriptor, (unsigned)command_case);
  if (!f || !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) || f->type != PROTOBUF_C_TYPE_MESSAGE) return NULL;
  return ((const ProtobufCMessageDescriptor *)f->descriptor)->short_name;
}
