/* Builders for the array and state ops: constants, placeholders, identity,
 * reshape, variables, assignment, sums of tensors. Each returns the new
 * node's output endpoint, or PSG_NO_ENDPOINT with the graph's error set. */
#ifndef PSGRAPH_OPS_ARRAY_H
#define PSGRAPH_OPS_ARRAY_H

#include "psgraph/graph.h"

/* A constant holding *value (taken: *value is set NULL). */
psg_endpoint_t psg_const(psg_graph_t *g, const char *name, psg_tensor_t **value);
psg_endpoint_t psg_const_scalar(psg_graph_t *g, const char *name, float v);
/* A placeholder to be fed; dims may be -1. */
psg_endpoint_t psg_placeholder(psg_graph_t *g, const char *name, psg_dtype_t dt,
                               const psg_shape_t *shape);
psg_endpoint_t psg_identity(psg_graph_t *g, const char *name, psg_endpoint_t x);
/* input's value unless fed; a feed may have any shape that fits `shape` (dims may be -1),
 * which input must fit too (tf.placeholder_with_default). */
psg_endpoint_t psg_placeholder_with_default(psg_graph_t *g, const char *name, psg_endpoint_t input,
                                            const psg_shape_t *shape);
/* Stops gradients: identity forward, no gradient backward. */
psg_endpoint_t psg_stop_gradient(psg_graph_t *g, const char *name, psg_endpoint_t x);
/* Reshape to `shape`; one dim may be -1 (inferred). */
psg_endpoint_t psg_reshape(psg_graph_t *g, const char *name, psg_endpoint_t x,
                           const psg_shape_t *shape);
/* Sum of n tensors of one shape. n == 1 returns an identity. */
psg_endpoint_t psg_add_n(psg_graph_t *g, const char *name, int n, const psg_endpoint_t *xs);
/* Ones / zeros shaped like x (x's shape may be partly unknown). */
psg_endpoint_t psg_ones_like(psg_graph_t *g, const char *name, psg_endpoint_t x);
psg_endpoint_t psg_zeros_like(psg_graph_t *g, const char *name, psg_endpoint_t x);
/* A tensor of x's shape filled with `value`. */
psg_endpoint_t psg_fill_like(psg_graph_t *g, const char *name, psg_endpoint_t x, float value);
/* Sums x down to the shape of `like` (the adjoint of broadcasting `like` to
 * x's shape): used by the gradients of broadcasting ops. */
psg_endpoint_t psg_sum_to_shape_of(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                   psg_endpoint_t like);
/* x broadcast to the shape of `like` (its adjoint: psg_sum_to_shape_of), and
 * x (as many elements as `like`) reshaped to it: the gradients' way back to
 * an input's shape when it is known only at run time. */
psg_endpoint_t psg_broadcast_like(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                  psg_endpoint_t like);
psg_endpoint_t psg_reshape_like(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                psg_endpoint_t like);

/* ---- variables ---- */

/* Variable initializers, by name: "zeros", "ones", "constant" (value),
 * "uniform" (-scale, scale), "normal" (stddev scale), "truncated_normal",
 * "glorot_uniform" (scale ignored; from fan-in and fan-out of the shape). */
typedef struct {
    const char *kind;
    double scale;
    uint64_t seed;
} psg_initializer_t;

/* Glorot's uniform limit sqrt(6 / (fan_in + fan_out)) for a variable of
 * `shape` (dense [in, out]; conv [kh, kw, in, out]; a vector: its length twice). */
double psg_glorot_uniform_scale(const psg_shape_t *shape);
/* TensorFlow's variance_scaling_initializer for a variable of `shape` as an initializer of
 * the kinds above: variance scale / n, n the fan-in, fan-out or their mean (mode "fan_in",
 * "fan_out", "fan_avg"; fans as psg_glorot_uniform_scale), drawn "uniform",
 * "truncated_normal" (TensorFlow's default; "normal" is taken for it, as TF 1.x did) or
 * "untruncated_normal". Returns 0 with *init set, or -1 with the error naming a bad mode,
 * distribution or scale. */
int psg_variance_scaling(const psg_shape_t *shape, double scale, const char *mode,
                         const char *distribution, uint64_t seed, psg_initializer_t *init);
/* A node `name` (NULL: "initial_value") holding the initial value init gives a
 * tensor of `shape` (f32, complete): what psg_variable assigns first, and what
 * tf.zeros, tf.fill and the random_* draws build. */
psg_endpoint_t psg_initializer_value(psg_graph_t *g, const char *name, const psg_shape_t *shape,
                                     psg_initializer_t init);
/* f32 draws of `shape` (complete), new ones at every step: "uniform" in [-scale, scale),
 * "normal" of stddev scale, "truncated_normal" (within 2 stddevs) of stddev scale; from
 * seed, the node's name and the step (tf.random_normal, tf.random_uniform). */
psg_endpoint_t psg_random(psg_graph_t *g, const char *name, const char *distribution,
                          const psg_shape_t *shape, double scale, uint64_t seed);
/* As psg_random, of the shape `like` has when run (any dtype; its values are not read):
 * draws for a tensor whose batch is known only then (dropout with a fed rate). */
psg_endpoint_t psg_random_like(psg_graph_t *g, const char *name, psg_endpoint_t like,
                               const char *distribution, double scale, uint64_t seed);

/* A variable `name` (its handle, dtype PSG_DT_RESOURCE, shape = the
 * variable's). Adds an initializer op to the "init" collection and the handle
 * to "variables" (and "trainable_variables" when trainable). The variable is
 * shared by name with every graph run in the same resource manager. */
psg_endpoint_t psg_variable(psg_graph_t *g, const char *name, psg_dtype_t dt,
                            const psg_shape_t *shape, psg_initializer_t init, bool trainable);
/* The handle of variable `name` without an initializer (for a graph that uses
 * a variable another graph creates). */
psg_endpoint_t psg_var_handle(psg_graph_t *g, const char *name, psg_dtype_t dt,
                              const psg_shape_t *shape);
/* The variable's current value (no copy: updates later in the step are not
 * ordered after the read unless the graph orders them). */
psg_endpoint_t psg_read_variable(psg_graph_t *g, const char *name, psg_endpoint_t handle);
/* Assign / add to a variable; the node has no outputs: returns the node id or -1. */
int psg_assign(psg_graph_t *g, const char *name, psg_endpoint_t handle, psg_endpoint_t value);
int psg_assign_add(psg_graph_t *g, const char *name, psg_endpoint_t handle, psg_endpoint_t value);
/* A node with no outputs that depends on all `n` nodes (by control edges). */
int psg_group(psg_graph_t *g, const char *name, int n, const int *nodes);

/* Gradient compression (ops/compress.c): the k entries of x (f32) of largest magnitude,
 * *values f32 (k) and their flat *indices i32 (k), larger first. Returns the node or -1. */
int psg_topk_abs(psg_graph_t *g, const char *name, psg_endpoint_t x, int64_t k,
                 psg_endpoint_t *values, psg_endpoint_t *indices);
/* The same, keeping max(k, ceil(ratio * numel)) entries (at most numel), ratio an f32
 * scalar read each run (PSG_NO_ENDPOINT: k): the outputs' length changes with it. */
int psg_topk_abs_ratio(psg_graph_t *g, const char *name, psg_endpoint_t x, int64_t k,
                       psg_endpoint_t ratio, psg_endpoint_t *values, psg_endpoint_t *indices);
/* A dense f32 tensor of *shape, zeros but values at indices (as psg_topk_abs gives). */
psg_endpoint_t psg_scatter_dense(psg_graph_t *g, const char *name, psg_endpoint_t values,
                                 psg_endpoint_t indices, const psg_shape_t *shape);

#endif
