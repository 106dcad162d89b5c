/* The layout of a graph and its nodes, shared by graph/ and its one friend, runtime/:
 * the executor reads a node's def, inputs and shapes for every node of every step, and
 * autodiff, placement and partitioning walk and rewrite nodes, through the structs
 * rather than a call per field. Every other layer uses the accessors of
 * include/psgraph/graph.h: the layer farm refuses this header to them (FRIENDS in
 * tools/layers.py), and test_layers fails an include of it from anywhere else. What
 * only graph/ touches (collections, device frames, the casts memo, the helpers) is in
 * graph/graph_internal.h, private to graph/. */
#ifndef PSGRAPH_GRAPH_LAYOUT_H
#define PSGRAPH_GRAPH_LAYOUT_H

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

struct psg_graph {
    psg_node_t **nodes;
    int num_nodes, cap_nodes;
    /* open-addressing name -> id table; slots hold id + 1, 0 is empty */
    int *name_slots;
    int num_slots;
    char **scopes; /* full prefixes, "a", "a/b" */
    int num_scopes, cap_scopes;
    struct psg_device_frame *devices;
    int num_devices, cap_devices;
    struct psg_collection *collections;
    int num_collections;
    char *error;               /* first build error */
    psg_dtype_t compute_dtype; /* of the mixed-precision ops (precision.h); 0: f32 */
    /* the casts to compute_dtype made so far (psg_graph_shared_cast), so that a tensor
     * feeding several products on one device is cast once */
    struct psg_cast_memo *casts;
    int num_casts, cap_casts;
    psg_initial_value_fn initial_value_fn; /* psg_graph_set_initial_value_fn */
    void *initial_value_ctx;
    struct psg_control_frame *control_frames; /* psg_graph_push_control, innermost last */
    int num_control_frames, cap_control_frames;
};

#endif
