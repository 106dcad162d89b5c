/* libFuzzer: the graph deserializer (graph/serialize.c), which parses what a peer sends in
 * RegisterGraph: msgpack, then every node through its op's shape inference. */
#include "psgraph/serialize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    psg_graph_t *g = psg_graph_deserialize(data, size);
    psg_graph_destroy(&g);
    return 0;
}
