/* What only the files of graph/ share: the graph's collections, device frames and casts
 * memo, and the helpers of the builder and the deserializer. Private to graph/ (the
 * layer farm refuses it to every other folder, and test_layers fails an include of it
 * from one); the layout of a graph and its nodes, which runtime/ reads too, is
 * graph/graph_layout.h. */
#ifndef PSGRAPH_GRAPH_INTERNAL_H
#define PSGRAPH_GRAPH_INTERNAL_H

#include "graph/graph_layout.h"

typedef struct psg_collection {
    char *name;
    int *ids;
    int n, cap;
} psg_collection_t;

typedef struct psg_device_frame {
    psg_device_fn fn;
    void *ctx;
    char *fixed; /* owned copy for psg_graph_push_device */
} psg_device_frame_t;

typedef struct psg_control_frame {
    int n;
    int *ids;
    bool clear; /* the frames outside this one do not apply (tf.init_scope) */
} psg_control_frame_t;

typedef struct psg_cast_memo {
    psg_endpoint_t src;
    psg_dtype_t dtype;
    int cast; /* the Cast node */
} psg_cast_memo_t;

/* Applies the graph's device functions to n, innermost first, as a node is finished:
 * n->device (owned, "" when none) becomes what they decide. */
void psg_graph_apply_device_fns(const psg_graph_t *g, psg_node_t *n);

/* Frees what an attribute owns; copies one (returns 0: graph metadata out of memory
 * aborts, as everywhere in graph.c). */
void psg_attr_free(psg_attr_t *a);
int psg_attr_copy(psg_attr_t *dst, const psg_attr_t *src);

#endif
