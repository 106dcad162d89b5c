/* The graph IR and its builder: nodes with unique names, an op type, inputs
 * (node, output index), control inputs, attributes and a requested device.
 * Each node's output dtypes and shapes are inferred when it is built, so a
 * mistake is reported with the name of the node that made it.
 * Not the executor (executor.h) and not autodiff (autodiff.h). */
#ifndef PSGRAPH_GRAPH_H
#define PSGRAPH_GRAPH_H

#include "psgraph/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct psg_graph psg_graph_t;
typedef struct psg_node psg_node_t;
typedef struct psg_op_def psg_op_def_t;

/* One output of one node. node < 0 means "none" (e.g. no gradient, or the
 * result of a failed build). */
typedef struct {
    int node;
    int index;
} psg_endpoint_t;

#define PSG_NO_ENDPOINT ((psg_endpoint_t){-1, 0})
static inline bool psg_endpoint_valid(psg_endpoint_t e) {
    return e.node >= 0;
}

typedef enum {
    PSG_ATTR_INT = 1,
    PSG_ATTR_FLOAT,
    PSG_ATTR_BOOL,
    PSG_ATTR_STR,
    PSG_ATTR_INTS,
    PSG_ATTR_FLOATS,
    PSG_ATTR_SHAPE,
    PSG_ATTR_DTYPE,
    PSG_ATTR_TENSOR,
} psg_attr_type_t;

typedef struct {
    char *key;
    psg_attr_type_t type;
    union {
        int64_t i;
        double f;
        bool b;
        char *s;
        struct {
            int n;
            int64_t *v;
        } ints;
        struct {
            int n;
            double *v;
        } floats;
        psg_shape_t shape;
        psg_dtype_t dtype;
        psg_tensor_t *tensor; /* owned by the node */
    } u;
} psg_attr_t;

/* ---- the graph ---- */

psg_graph_t *psg_graph_new(void);
void psg_graph_destroy(psg_graph_t **g);

int psg_graph_num_nodes(const psg_graph_t *g);
/* The bytes g's own structure holds as built: nodes, names, edges, attributes (a tensor
 * attribute's bytes are a buffer of its own, not counted here). A node takes ~700 bytes
 * whatever it holds (its outputs' shapes): far more than it takes serialized. */
size_t psg_graph_footprint(const psg_graph_t *g);
/* The node with id `id` (0 <= id < num_nodes); node ids are dense and stable. */
const psg_node_t *psg_graph_node(const psg_graph_t *g, int id);
/* The id of the node named `name`, or -1. */
int psg_graph_find(const psg_graph_t *g, const char *name);

/* The first build error in this graph, or NULL. Builders are sticky: once a
 * node fails, every node built on its (invalid) output fails too, and the
 * first message is kept here, so a model can be built and checked once. */
const char *psg_graph_error(const psg_graph_t *g);
/* 0 when no builder failed in g, else -1 with this thread's error set to g's first build
 * error: one check after many builder calls. */
int psg_graph_status(const psg_graph_t *g);
/* After a failure: prepends g's first build error (when there is one, g is not NULL, and
 * this thread's message does not already say it), since a later failure may only be its
 * consequence. Returns -1. */
int psg_graph_wrap_error(const psg_graph_t *g);
/* Forgets g's build error, after the caller reported it (a Python program that caught the
 * exception of one failed builder and goes on building): the failed node was never added,
 * so g is as it was before that call. Nodes built on a failed node's output fail anew. */
void psg_graph_clear_error(psg_graph_t *g);

/* Name scopes: "tower0/conv1/weights". push returns -1 on a bad name. */
int psg_graph_push_scope(psg_graph_t *g, const char *scope);
void psg_graph_pop_scope(psg_graph_t *g);
/* The current scope ("a/b"), "" outside any. Valid until the next push or pop. */
const char *psg_graph_scope(const psg_graph_t *g);

/* Device functions, as `with tf.device(...)`: every pushed function runs on
 * each node built while it is pushed, innermost first; each sees the device
 * the node has so far (psg_node_device: explicit, or set by an inner
 * function) and returns the new one (a string that must outlive the call
 * only until the node is built) or NULL to keep it. */
typedef const char *(*psg_device_fn)(void *ctx, const psg_graph_t *g, const psg_node_t *node);
void psg_graph_push_device_fn(psg_graph_t *g, psg_device_fn fn, void *ctx);
/* Pushes a fixed device spec (copied): it fills the fields the node's device
 * leaves open, as nested tf.device specs merge (the inner wins). */
void psg_graph_push_device(psg_graph_t *g, const char *device);
void psg_graph_pop_device(psg_graph_t *g);

/* Control dependencies, as `with tf.control_dependencies(ids)`: every node built while a
 * set is pushed gets the set's nodes as control inputs (those of the enclosing pushes too),
 * so it runs after them. clear: the enclosing sets do not apply inside this one (n may be
 * 0): TensorFlow's init_scope, under which psg_variable builds an initializer. push
 * returns -1 naming a missing node. */
int psg_graph_push_control(psg_graph_t *g, int n, const int *ids, bool clear);
void psg_graph_pop_control(psg_graph_t *g);

/* Initial values that override the initializers of the variables psg_variable creates
 * from now on (TensorFlow's init_from_checkpoint; worker/init_from.c): fn is asked for
 * each new variable's name, dtype and shape and returns its initial value (the caller of
 * psg_variable takes it over) or NULL to keep the initializer; NULL with *failed set to
 * true (and the error set) fails the variable's creation. fn NULL: none. */
typedef struct psg_tensor *(*psg_initial_value_fn)(void *ctx, const char *name, psg_dtype_t dt,
                                                   const psg_shape_t *shape, bool *failed);
void psg_graph_set_initial_value_fn(psg_graph_t *g, psg_initial_value_fn fn, void *ctx);
/* The initial value of a new variable from the graph's fn (NULL: none, or keep the
 * initializer); *failed with the error set (and recorded as the graph's build error) when
 * fn failed. */
struct psg_tensor *psg_graph_initial_value(psg_graph_t *g, const char *name, psg_dtype_t dt,
                                           const psg_shape_t *shape, bool *failed);

/* Sets the dtype the allowlisted ops of g are built in from now on (mixed precision,
 * psgraph/precision.h): PSG_DT_F32 (the default: no casts), PSG_DT_BF16 or PSG_DT_F16.
 * Nodes built before are unchanged. Returns 0, or -1 with the error set for another
 * dtype. A model is built in mixed precision by:
 *   psg_graph_set_compute_dtype(g, PSG_DT_BF16);   (before building it) */
int psg_graph_set_compute_dtype(psg_graph_t *g, psg_dtype_t dt);
/* The dtype set by psg_graph_set_compute_dtype (PSG_DT_F32 when never set). */
psg_dtype_t psg_graph_compute_dtype(const psg_graph_t *g);

/* Collections by name, as TensorFlow's: "variables", "trainable_variables",
 * "init" (initializer targets), "losses". Adds node `id` to collection. */
int psg_graph_add_to_collection(psg_graph_t *g, const char *collection, int id);
/* Node ids in a collection, in insertion order; *n set to the count (0 if none). */
const int *psg_graph_collection(const psg_graph_t *g, const char *collection, int *n);

/* ---- building a node ---- */

typedef struct psg_node_builder psg_node_builder_t;

/* Starts a node of op `op` named `name` under the current scope (NULL: the
 * op's name). An explicit name that is taken gets a suffix "_1", "_2", ...,
 * as TensorFlow does; psg_node_name tells the final one. */
psg_node_builder_t *psg_node_begin(psg_graph_t *g, const char *op, const char *name);
void psg_node_add_input(psg_node_builder_t *b, psg_endpoint_t in);
void psg_node_add_control(psg_node_builder_t *b, int node_id);
void psg_node_set_device(psg_node_builder_t *b, const char *device);
void psg_node_attr_int(psg_node_builder_t *b, const char *key, int64_t v);
void psg_node_attr_float(psg_node_builder_t *b, const char *key, double v);
void psg_node_attr_bool(psg_node_builder_t *b, const char *key, bool v);
void psg_node_attr_str(psg_node_builder_t *b, const char *key, const char *v);
void psg_node_attr_ints(psg_node_builder_t *b, const char *key, int n, const int64_t *v);
void psg_node_attr_floats(psg_node_builder_t *b, const char *key, int n, const double *v);
void psg_node_attr_shape(psg_node_builder_t *b, const char *key, const psg_shape_t *v);
void psg_node_attr_dtype(psg_node_builder_t *b, const char *key, psg_dtype_t v);
/* Takes ownership of *t (sets it NULL). */
void psg_node_attr_tensor(psg_node_builder_t *b, const char *key, psg_tensor_t **t);
/* Checks the inputs against the op, infers output dtypes and shapes and adds
 * the node. Returns the node id, or -1 with the error set to
 * "node 'scope/name' (Op): why" and the graph unchanged. Frees the builder. */
int psg_node_finish(psg_node_builder_t *b);
/* Finish and return output 0 as an endpoint (PSG_NO_ENDPOINT on failure). */
psg_endpoint_t psg_node_finish_ep(psg_node_builder_t *b);

/* A node of `op` over n inputs with no attributes; its output 0 (or
 * PSG_NO_ENDPOINT on failure, as psg_node_finish_ep). The shared body of the
 * op families' small builders. */
psg_endpoint_t psg_op_inputs(psg_graph_t *g, const char *op, const char *name, int n,
                             const psg_endpoint_t *inputs);

/* ---- reading a node ---- */

int psg_node_id(const psg_node_t *n);
const char *psg_node_name(const psg_node_t *n);
const char *psg_node_op(const psg_node_t *n);
const psg_op_def_t *psg_node_def(const psg_node_t *n);
int psg_node_num_inputs(const psg_node_t *n);
psg_endpoint_t psg_node_input(const psg_node_t *n, int i);
int psg_node_num_controls(const psg_node_t *n);
int psg_node_control(const psg_node_t *n, int i);
int psg_node_num_outputs(const psg_node_t *n);
psg_dtype_t psg_node_output_dtype(const psg_node_t *n, int i);
const psg_shape_t *psg_node_output_shape(const psg_node_t *n, int i);
/* The requested device string, "" when none. */
const char *psg_node_device(const psg_node_t *n);
int psg_node_num_attrs(const psg_node_t *n);
const psg_attr_t *psg_node_attr_at(const psg_node_t *n, int i);
/* The attribute named `key`, or NULL. */
const psg_attr_t *psg_node_attr(const psg_node_t *n, const char *key);
/* Typed getters with a default for a missing attribute. */
int64_t psg_node_get_int(const psg_node_t *n, const char *key, int64_t dflt);
double psg_node_get_float(const psg_node_t *n, const char *key, double dflt);
bool psg_node_get_bool(const psg_node_t *n, const char *key, bool dflt);
const char *psg_node_get_str(const psg_node_t *n, const char *key, const char *dflt);
/* Sets a (later) assigned device, for placement; "" to clear. */
int psg_graph_set_assigned_device(psg_graph_t *g, int node_id, const char *device);
const char *psg_node_assigned_device(const psg_node_t *n);

/* Output shape / dtype of an endpoint. */
const psg_shape_t *psg_graph_shape(const psg_graph_t *g, psg_endpoint_t e);
psg_dtype_t psg_graph_dtype(const psg_graph_t *g, psg_endpoint_t e);

#endif
