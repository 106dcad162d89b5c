/* The graph's wire form: msgpack, exact round trip (names, ops, inputs,
 * control inputs, devices, attributes with tensors, collections). The
 * distributed runtime ships partitions in it; a checkpoint does not use it. */
#ifndef PSGRAPH_SERIALIZE_H
#define PSGRAPH_SERIALIZE_H

#include "psgraph/graph.h"

#include <stddef.h>

/* Writes g into a new buffer (*out, caller frees with free()) of *len bytes.
 * Returns 0, or -1 with the error set. */
int psg_graph_serialize(const psg_graph_t *g, char **out, size_t *len);

/* Rebuilds a graph from psg_graph_serialize's bytes, re-running shape
 * inference on every node. Untrusted input is safe: any malformed, truncated
 * or inconsistent input gives NULL with an error naming the field (and node). */
psg_graph_t *psg_graph_deserialize(const void *data, size_t len);
/* The same, refusing (PSG_ERR_LIMIT) a graph whose nodes alone would take more than
 * max_bytes as built (psg_graph_footprint), before it builds any. */
psg_graph_t *psg_graph_deserialize_within(const void *data, size_t len, size_t max_bytes);

#endif
