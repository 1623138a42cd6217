/*
 * wire.h — the wire's own layer: command names, and checks on a request's
 * raw protobuf bytes that the decoded message can no longer show. protobuf-c hands string fields over as C strings, so a
 * name with a NUL byte inside ("nul\0byte") would silently become "nul";
 * such a request is refused instead, naming the field.
 */
#ifndef DQND_WIRE_H
#define DQND_WIRE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "dqnd.pb-c.h"

/* 1 when a string field anywhere in the message (nested messages included)
 * holds a NUL byte; its dotted path goes into field ("create_trainer.name").
 * The bytes must already have decoded as `desc` (so they are well formed). */
int wire_find_nul(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, char *field, size_t n);

/* A protobuf-c allocator that refuses to hand out more than `limit` bytes
 * in all (the decode budget of one request); wire_budget_init sets `a`. */
typedef struct wire_budget {
  ProtobufCAllocator a;
  size_t used, limit;
} wire_budget_t;
void wire_budget_init(wire_budget_t *b);

/* Decodes one received message as a request, the way the daemon receives
 * every request (rpc.c; tests/fuzz/fuzz-request.c runs the same): a message
 * over max_message_bytes is refused unread (RESOURCE_EXHAUSTED), it decodes
 * within decode_budget bytes (else RESOURCE_EXHAUSTED), it must be a
 * dqnd.v1.Request (else INVALID_ARGUMENT) with no NUL byte in any string
 * (else INVALID_ARGUMENT naming the field). Returns the request, allocated
 * from b (protobuf_c_message_free_unpacked(&req->base, &b->a) frees it), or
 * NULL with *code (a gRPC code), msg and *request_id (the request's own when
 * it decoded, else 0) set. buf stays the caller's. */
Dqnd__V1__Request *wire_decode_request(wire_budget_t *b, const uint8_t *buf, size_t len, int64_t max_message_bytes,
                                       int64_t decode_budget, int *code, uint64_t *request_id, char *msg, size_t n);

/* The reply codes (dqnd.proto's Code, gRPC numbering) by their names: the
 * daemon writes no code as a bare number. */
enum {
  CODE_OK = DQND__V1__CODE__OK,
  CODE_CANCELLED = DQND__V1__CODE__CANCELLED,
  CODE_INVALID_ARGUMENT = DQND__V1__CODE__INVALID_ARGUMENT,
  CODE_DEADLINE_EXCEEDED = DQND__V1__CODE__DEADLINE_EXCEEDED,
  CODE_NOT_FOUND = DQND__V1__CODE__NOT_FOUND,
  CODE_ALREADY_EXISTS = DQND__V1__CODE__ALREADY_EXISTS,
  CODE_PERMISSION_DENIED = DQND__V1__CODE__PERMISSION_DENIED,
  CODE_RESOURCE_EXHAUSTED = DQND__V1__CODE__RESOURCE_EXHAUSTED,
  CODE_FAILED_PRECONDITION = DQND__V1__CODE__FAILED_PRECONDITION,
  CODE_OUT_OF_RANGE = DQND__V1__CODE__OUT_OF_RANGE,
  CODE_UNIMPLEMENTED = DQND__V1__CODE__UNIMPLEMENTED,
  CODE_INTERNAL = DQND__V1__CODE__INTERNAL,
  CODE_UNAVAILABLE = DQND__V1__CODE__UNAVAILABLE,
  CODE_DATA_LOSS = DQND__V1__CODE__DATA_LOSS,
  CODE_UNAUTHENTICATED = DQND__V1__CODE__UNAUTHENTICATED,
};

/* The command of a Request oneof case, by its message's name ("Step",
 * "CreateTrainer"); NULL for a case that is no command of this protocol.
 * Read from the protobuf descriptor: the one table of names (dispatch.c's
 * replies and metrics.c's labels use it). */
const char *wire_command_name(int command_case);

#endif
