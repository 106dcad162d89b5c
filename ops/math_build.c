/* The builders of the math ops (psgraph/ops_math.h): each adds one node,
 * with its shape inferred at build time; mixed precision's casts for MatMul
 * and Dense (precision.h). Not the defs, shapes or gradients (ops/math.c). */
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_nn.h"
#include "psgraph/precision.h"

#include <math.h>
#include <string.h>

static psg_endpoint_t build1(psg_graph_t *g, const char *op, const char *name, psg_endpoint_t x) {
    return psg_op_inputs(g, op, name, 1, &x);
}

static psg_endpoint_t build2(psg_graph_t *g, const char *op, const char *name, psg_endpoint_t a,
                             psg_endpoint_t b) {
    return psg_op_inputs(g, op, name, 2, (psg_endpoint_t[]){a, b});
}

/* The builders that only name their op: psg_<fn>(g, name, x) and psg_<fn>(g, name, a, b). */
#define UNARY_BUILDER(fn, op)                                                                      \
    psg_endpoint_t psg_##fn(psg_graph_t *g, const char *name, psg_endpoint_t x) {                  \
        return build1(g, op, name, x);                                                             \
    }
#define BINARY_BUILDER(fn, op)                                                                     \
    psg_endpoint_t psg_##fn(psg_graph_t *g, const char *name, psg_endpoint_t a,                    \
                            psg_endpoint_t b) {                                                    \
        return build2(g, op, name, a, b);                                                          \
    }

BINARY_BUILDER(add, "Add")
BINARY_BUILDER(sub, "Sub")
BINARY_BUILDER(mul, "Mul")
BINARY_BUILDER(div, "Div")
UNARY_BUILDER(neg, "Neg")
UNARY_BUILDER(square, "Square")
UNARY_BUILDER(sqrt, "Sqrt")
UNARY_BUILDER(exp, "Exp")
UNARY_BUILDER(log, "Log")
UNARY_BUILDER(relu, "Relu")
UNARY_BUILDER(sigmoid, "Sigmoid")
UNARY_BUILDER(tanh, "Tanh")
BINARY_BUILDER(relu_grad, "ReluGrad") /* (dy, y) */
BINARY_BUILDER(sigmoid_grad, "SigmoidGrad")
BINARY_BUILDER(tanh_grad, "TanhGrad")
UNARY_BUILDER(softmax, "Softmax")
UNARY_BUILDER(log_softmax, "LogSoftmax")
BINARY_BUILDER(sparse_softmax_cross_entropy,
               "SparseSoftmaxCrossEntropyWithLogits") /* (logits, labels) */
UNARY_BUILDER(l2_loss, "L2Loss")

/* A unary op with its constant in float attribute `attr` (Pow, Scale). */
static psg_endpoint_t build1_const(psg_graph_t *g, const char *op, const char *name,
                                   psg_endpoint_t x, const char *attr, double value) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    psg_node_add_input(b, x);
    psg_node_attr_float(b, attr, value);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_pow(psg_graph_t *g, const char *name, psg_endpoint_t x, double exponent) {
    return build1_const(g, "Pow", name, x, "exponent", exponent);
}
psg_endpoint_t psg_scale(psg_graph_t *g, const char *name, psg_endpoint_t x, double scale) {
    return build1_const(g, "Scale", name, x, "scale", scale);
}

static psg_endpoint_t reduce_op(psg_graph_t *g, const char *op, const char *name, psg_endpoint_t x,
                                int n_axes, const int64_t *axes, bool keep_dims) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    psg_node_add_input(b, x);
    psg_node_attr_ints(b, "axes", n_axes, axes);
    psg_node_attr_bool(b, "keep_dims", keep_dims);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_sum(psg_graph_t *g, const char *name, psg_endpoint_t x, int n_axes,
                       const int64_t *axes, bool keep_dims) {
    return reduce_op(g, "Sum", name, x, n_axes, axes, keep_dims);
}

psg_endpoint_t psg_mean(psg_graph_t *g, const char *name, psg_endpoint_t x, int n_axes,
                        const int64_t *axes, bool keep_dims) {
    return reduce_op(g, "Mean", name, x, n_axes, axes, keep_dims);
}

psg_endpoint_t psg_expand_dims(psg_graph_t *g, const char *name, psg_endpoint_t x, int n_axes,
                               const int64_t *axes) {
    psg_node_builder_t *b = psg_node_begin(g, "ExpandDims", name);
    psg_node_add_input(b, x);
    psg_node_attr_ints(b, "axes", n_axes, axes);
    return psg_node_finish_ep(b);
}

UNARY_BUILDER(argmax, "ArgMax")
BINARY_BUILDER(equal, "Equal")

psg_endpoint_t psg_matmul(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b,
                          bool transpose_a, bool transpose_b) {
    psg_endpoint_t in[2] = {a, b};
    bool back = psg_compute_inputs(g, 2, in);
    char buf[256];
    psg_node_builder_t *nb =
        psg_node_begin(g, "MatMul", psg_compute_op_name(g, name, back, buf, sizeof buf));
    psg_node_add_input(nb, in[0]);
    psg_node_add_input(nb, in[1]);
    psg_node_attr_bool(nb, "transpose_a", transpose_a);
    psg_node_attr_bool(nb, "transpose_b", transpose_b);
    return psg_compute_output(g, name, psg_node_finish_ep(nb), back);
}

psg_endpoint_t psg_dense(psg_graph_t *g, const char *name, psg_endpoint_t x, psg_endpoint_t w,
                         psg_endpoint_t bias, bool relu) {
    if (psg_graph_compute_dtype(g) != PSG_DT_F32) {
        /* mixed precision: the product in the compute dtype, bias and ReLU in f32 */
        psg_endpoint_t y = psg_matmul(g, NULL, x, w, false, false);
        y = psg_bias_add(g, relu ? NULL : name, y, bias);
        return relu ? psg_relu(g, name, y) : y;
    }
    psg_node_builder_t *b = psg_node_begin(g, "Dense", name);
    psg_node_add_input(b, x);
    psg_node_add_input(b, w);
    psg_node_add_input(b, bias);
    psg_node_attr_bool(b, "relu", relu);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_concat(psg_graph_t *g, const char *name, int n, const psg_endpoint_t *xs,
                          int axis) {
    psg_node_builder_t *b = psg_node_begin(g, "Concat", name);
    for (int i = 0; i < n; i++) psg_node_add_input(b, xs[i]);
    psg_node_attr_int(b, "axis", axis);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_slice(psg_graph_t *g, const char *name, psg_endpoint_t x, int rank,
                         const int64_t *begin, const int64_t *size) {
    psg_node_builder_t *b = psg_node_begin(g, "Slice", name);
    psg_node_add_input(b, x);
    psg_node_attr_ints(b, "begin", rank, begin);
    psg_node_attr_ints(b, "size", rank, size);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_dropout(psg_graph_t *g, const char *name, psg_endpoint_t x, double rate,
                           uint64_t seed) {
    psg_node_builder_t *b = psg_node_begin(g, "Dropout", name);
    psg_node_add_input(b, x);
    psg_node_attr_float(b, "rate", rate);
    psg_node_attr_int(b, "seed", (int64_t)seed);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_cast(psg_graph_t *g, const char *name, psg_endpoint_t x, psg_dtype_t dtype) {
    psg_node_builder_t *b = psg_node_begin(g, "Cast", name);
    psg_node_add_input(b, x);
    psg_node_attr_dtype(b, "dtype", dtype);
    return psg_node_finish_ep(b);
}
