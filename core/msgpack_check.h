/* A structural check of untrusted msgpack bytes before msgpack-c unpacks
 * them: msgpack-c allocates by the declared element counts, so a few bytes
 * claiming a 2^32-element array would exhaust memory. Not a schema check. */
#ifndef PSGRAPH_MSGPACK_CHECK_H
#define PSGRAPH_MSGPACK_CHECK_H

#include <stddef.h>

/* The most objects (scalars and containers, nested ones included) a checked
 * document may hold: msgpack-c spends 24 bytes on each, so this bounds what
 * unpacking costs (192 MiB) whatever the bytes claim. */
#define PSG_MSGPACK_MAX_OBJECTS (8 << 20)

/* Returns 0 when data[0..len) holds exactly one well-formed msgpack object
 * whose every container count fits in the bytes that follow it, with at
 * most `max_depth` levels of nesting and PSG_MSGPACK_MAX_OBJECTS objects;
 * -1 with the error set otherwise. */
int psg_msgpack_check(const void *data, size_t len, int max_depth);

#endif
