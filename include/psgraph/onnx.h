/* ONNX export: a graph, the values of its variables and the names of its inputs and
 * outputs -> an ONNX model file (opset 17, IR version 8), written with protobuf-c from
 * Debian's onnx.proto. Any graph whose ops have an ONNX form exports: the built-in
 * models' inference graphs (psgraph/servable.h), or one built through the C API or a
 * binding. Not a reader and not a runtime: ONNX Runtime checks what this writes
 * (tests/test_serving.sh, docs/serving.md). */
#ifndef PSGRAPH_ONNX_H
#define PSGRAPH_ONNX_H

#include "psgraph/graph.h"
#include "psgraph/resource.h"

#define PSG_ONNX_OPSET 17

/* One tensor of the signature: an endpoint of the graph and its ONNX name. */
typedef struct {
    const char *name;        /* "images", "logits" */
    psg_endpoint_t endpoint; /* an input: a Placeholder's output; an output: any endpoint */
} psg_onnx_io_t;

/* What to export. */
typedef struct {
    int num_inputs;
    const psg_onnx_io_t *inputs;
    int num_outputs;
    const psg_onnx_io_t *outputs;
    /* the values of the variables the outputs read (VarHandle nodes by their variable's
     * name), written as the model's initializers; borrowed */
    psg_resource_mgr_t *values;
    const char *graph_name; /* NULL: "psgraph" */
    const char *doc;        /* NULL, or the model's doc_string (what was exported, from where) */
    int64_t model_version;  /* e.g. the checkpoint's global step */
} psg_onnx_spec_t;

/* Writes the subgraph of g that computes spec's outputs from its inputs to `path` as an
 * ONNX model, atomically (a temp file renamed). NHWC convolutions, pools and batch norms
 * become ONNX's NCHW ones with the transposes only where the layout changes. Fails,
 * with the error set and nothing at `path`: a node whose op has no ONNX form ("node
 * 'model/x' (Op): no ONNX form"), a Placeholder the outputs need that is not an input,
 * a variable without an initialized value in spec->values, initializers of 2 GiB or more
 * (protobuf's limit), or I/O naming the file. Returns 0 or -1. */
int psg_onnx_export(const psg_graph_t *g, const psg_onnx_spec_t *spec, const char *path);

/* True when op `op` has an ONNX form in this writer. */
bool psg_onnx_supports(const char *op);

#endif
