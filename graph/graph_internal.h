/* The graph's and node's layout, shared by the files of graph/ (executor,
 * autodiff, serialization). Everything outside graph/ uses the accessors of
 * include/psgraph/graph.h. */
#ifndef PSGRAPH_GRAPH_INTERNAL_H
#define PSGRAPH_GRAPH_INTERNAL_H

#include "psgraph/op.h"

struct psg_node {
    int id;
    char *name;
    const psg_op_def_t *def;
    int num_inputs;
    psg_endpoint_t *inputs;
    int num_controls;
    int *controls;
    int num_outputs;
    psg_dtype_t out_dtypes[PSG_MAX_OUTPUTS];
    psg_shape_t out_shapes[PSG_MAX_OUTPUTS];
    int num_attrs;
    psg_attr_t *attrs;
    char *device;          /* requested, "" when none */
    char *assigned_device; /* decided by placement, "" until then */
};

typedef struct {
    char *name;
    int *ids;
    int n, cap;
} psg_collection_t;

typedef struct {
    psg_device_fn fn;
    void *ctx;
    char *fixed; /* owned copy for psg_graph_push_device */
} psg_device_frame_t;

struct psg_graph {
    psg_node_t **nodes;
    int num_nodes, cap_nodes;
    /* open-addressing name -> id table; slots hold id + 1, 0 is empty */
    int *name_slots;
    int num_slots;
    char **scopes; /* full prefixes, "a", "a/b" */
    int num_scopes, cap_scopes;
    psg_device_frame_t *devices;
    int num_devices, cap_devices;
    psg_collection_t *collections;
    int num_collections;
    char *error; /* first build error */
    psg_dtype_t compute_dtype; /* of the mixed-precision ops (precision.h); 0: f32 */
};

/* Builds a node from already-validated parts (deserialization): takes
 * ownership of nothing; copies everything. Returns the id or -1. */
void psg_attr_free(psg_attr_t *a);
int psg_attr_copy(psg_attr_t *dst, const psg_attr_t *src);

#endif
