/* Protocol buffers written by hand: a growing byte string and the wire
 * format's varints, fixed-width numbers, tags and length-delimited fields,
 * for the few messages psgraph writes (TensorBoard events, tf.Example).
 * Not a reader, and no schema: the callers know their field numbers. */
#ifndef PSGRAPH_CORE_PROTOBUF_H
#define PSGRAPH_CORE_PROTOBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bytes written so far. Zero-initialize; out of memory sets oom and
 * makes later writes no-ops (check once at the end); free(b) when done. */
typedef struct {
    uint8_t *b;
    size_t len, cap;
    bool oom;
} psg_pb_t;

/* Wire types of a tag. */
enum { PSG_PB_VARINT = 0, PSG_PB_FIXED64 = 1, PSG_PB_LEN = 2, PSG_PB_FIXED32 = 5 };

void psg_pb_bytes(psg_pb_t *p, const void *d, size_t n);
void psg_pb_varint(psg_pb_t *p, uint64_t v);
/* v little-endian in nbytes (4 or 8) bytes. */
void psg_pb_fixed(psg_pb_t *p, uint64_t v, int nbytes);
void psg_pb_tag(psg_pb_t *p, int field, int wire);
/* field as a length-delimited field of n bytes at d. */
void psg_pb_len_field(psg_pb_t *p, int field, const void *d, size_t n);
/* The bytes of v as a varint. */
size_t psg_pb_varint_len(uint64_t v);

#endif
