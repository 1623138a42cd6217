/*
 * wire.h — checks on a request's raw protobuf bytes that the decoded message
 * can no longer show. protobuf-c hands string fields over as C strings, so a
 * name with a NUL byte inside ("nul\0byte") would silently become "nul";
 * such a request is refused instead, naming the field.
 */
#ifndef DQND_WIRE_H
#define DQND_WIRE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* 1 when a string field anywhere in the message (nested messages included)
 * holds a NUL byte; its dotted path goes into field ("create_trainer.name").
 * The bytes must already have decoded as `desc` (so they are well formed). */
int wire_find_nul(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, char *field, size_t n);

#endif
