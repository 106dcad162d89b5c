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
    /* the casts to compute_dtype made so far (ops/precision.c), so that a tensor
     * feeding several products on one device is cast once */
    struct psg_cast_memo *casts;
    int num_casts, cap_casts;
    psg_initial_value_fn initial_value_fn; /* psg_graph_set_initial_value_fn */
    void *initial_value_ctx;
    struct psg_control_frame *control_frames; /* psg_graph_push_control, innermost last */
    int num_control_frames, cap_control_frames;
};

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

/* Builds a node from already-validated parts (deserialization): takes
 * ownership of nothing; copies everything. Returns the id or -1. */
void psg_attr_free(psg_attr_t *a);
int psg_attr_copy(psg_attr_t *dst, const psg_attr_t *src);

#endif
