/* Internal to the ONNX writer: the state of one export (serving/onnx_export.c) that the
 * op emitters (serving/onnx_nodes.c) add to. Not public: psgraph/onnx.h is. */
#ifndef PSGRAPH_SERVING_ONNX_INTERNAL_H
#define PSGRAPH_SERVING_ONNX_INTERNAL_H

#include "onnx.pb-c.h"
#include "psgraph/onnx.h"

#include <stdbool.h>
#include <stddef.h>

/* An endpoint's ONNX values: the name of its psgraph layout (nhwc: NHWC for a rank-4
 * tensor, as psgraph computes it) and of its NCHW transpose, each NULL until made. */
typedef struct {
    const char *nhwc;
    const char *nchw;
} ox_value_t;

typedef struct ox_block ox_block_t;

typedef struct {
    const psg_graph_t *g;
    const psg_onnx_spec_t *spec;
    ox_block_t *arena;       /* every string and message of the model, freed at once */
    Onnx__NodeProto **nodes; /* in topological order */
    size_t n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    size_t n_inits, cap_inits;
    uint64_t init_bytes;
    ox_value_t *vals; /* [node id * PSG_MAX_OUTPUTS + output] */
    int fresh;        /* counter of helper value names */
    bool oom;
} ox_t;

/* Memory that lives as long as the export (zeroed); NULL sets x->oom. */
void *ox_alloc(ox_t *x, size_t n);
char *ox_strdup(ox_t *x, const char *s);
/* A new value name "base/suffix_K", unique in the model. */
const char *ox_fresh(ox_t *x, const char *base, const char *suffix);

/* The ONNX element type of a psgraph dtype, 0 for none. */
int ox_elem_type(psg_dtype_t dt);

/* Input i of psgraph node n as a value in psgraph's layout (a Transpose from its NCHW
 * form made when needed), or in NCHW (rank 4; a Transpose from NHWC when needed). */
const char *ox_in(ox_t *x, const psg_node_t *n, int i);
const char *ox_in_nchw(ox_t *x, const psg_node_t *n, int i);
/* Whether input i is available in NCHW without a transpose (and has no NHWC form yet). */
bool ox_in_is_nchw(ox_t *x, const psg_node_t *n, int i);
/* Sets output `out` of node n to value `name`, in NCHW or psgraph's layout. */
void ox_set_out(ox_t *x, const psg_node_t *n, int out, const char *name, bool nchw);
/* The value name node n's output `out` gets ("node" or "node:1"). */
const char *ox_out_name(ox_t *x, const psg_node_t *n, int out);

/* Appends a node; inputs and outputs are value names (copied), name the node's (copied). */
Onnx__NodeProto *ox_node(ox_t *x, const char *op_type, const char *name, int n_in,
                         const char *const *in, int n_out, const char *const *out);
void ox_attr_int(ox_t *x, Onnx__NodeProto *node, const char *key, int64_t v);
void ox_attr_float(ox_t *x, Onnx__NodeProto *node, const char *key, float v);
void ox_attr_ints(ox_t *x, Onnx__NodeProto *node, const char *key, int n, const int64_t *v);

/* An initializer named `name` of dtype dt and shape holding `data` (borrowed: it must live
 * until the model is written). Returns name, or NULL (oom, or over the size limit). */
const char *ox_initializer(ox_t *x, const char *name, psg_dtype_t dt, const psg_shape_t *shape,
                           const void *data);
/* A constant i64 vector (copied), a fresh name under `base`. */
const char *ox_const_i64(ox_t *x, const char *base, int n, const int64_t *v);
/* A constant f32 scalar (copied). */
const char *ox_const_f32(ox_t *x, const char *base, float v);

/* Emits node n (its inputs emitted already). Returns 0, or -1 with the error set (no
 * ONNX form; bad attributes), without the node name (the caller adds it). */
int ox_emit(ox_t *x, const psg_node_t *n);

#endif
