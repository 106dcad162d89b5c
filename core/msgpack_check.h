/* A structural check of untrusted msgpack bytes before msgpack-c unpacks
 * them: msgpack-c allocates by the declared element counts, so a few bytes
 * claiming a 2^32-element array would exhaust memory. Not a schema check. */
#ifndef PSGRAPH_MSGPACK_CHECK_H
#define PSGRAPH_MSGPACK_CHECK_H

#include <stddef.h>

/* Returns 0 when data[0..len) holds exactly one well-formed msgpack object
 * whose every container count fits in the bytes that follow it, with at
 * most `max_depth` levels of nesting; -1 with the error set otherwise. */
int psg_msgpack_check(const void *data, size_t len, int max_depth);

#endif
