/* The prepared parameters of ops (psg_op_def_t.prepare): what a def's
 * prepare step parses from a node's attributes, and derives from the shapes
 * known at build time, once per plan node; the CPU kernels (ops/cpu/) and the
 * CUDA glue (ops/cuda/) read the same struct as ctx->params. Plain data.
 * Not the attributes' parsers themselves (ops/nn.c, ops/math.c, ops/train.c). */
#ifndef PSGRAPH_OPS_PARAMS_H
#define PSGRAPH_OPS_PARAMS_H

#include "ops/cpu/nn.h"
#include "psgraph/error.h"
#include "psgraph/kernel.h"

#include <stdbool.h>

/* Conv2D, its two backprops, MaxPool, AvgPool and their gradients: the
 * window attributes, and the geometry for the input shapes of the plan when
 * they were complete at build time (have_geom). */
typedef struct {
    psg_nn_attrs_t a;
    bool have_geom;
    psg_nn_geom_t geom;
    bool relu;             /* FusedConv2D: ReLU after the bias or the batch norm */
    float epsilon;         /* FusedConv2D's batch norm ("epsilon") */
    bool pool;             /* FusedConv2D: a max pool after it, window pool_a */
    psg_nn_attrs_t pool_a; /* its ksize, strides and padding ("pool_ksize" ...) */
} psg_nn_params_t;

int psg_nn_prepare_conv(const psg_graph_t *g, const psg_node_t *n, void *params);
int psg_nn_prepare_fused_conv(const psg_graph_t *g, const psg_node_t *n, void *params);
int psg_nn_prepare_pool(const psg_graph_t *g, const psg_node_t *n, void *params);

/* The geometry of the conv or pool that kernel ctx c runs (inputs[0] the
 * NHWC input, inputs[1] a conv's filter): the prepared one when the shapes
 * are the plan's, else derived from them into *tmp. NULL with the error set. */
const psg_nn_geom_t *psg_nn_kernel_geom(const psg_kernel_ctx_t *c, bool pool, psg_nn_geom_t *tmp);

/* MatMul (transpose_a, transpose_b), Dense and DenseBackprop (relu). */
typedef struct {
    bool transpose_a, transpose_b;
    bool relu;
} psg_matmul_params_t;

int psg_matmul_prepare(const psg_graph_t *g, const psg_node_t *n, void *params);

/* Concat: the axis, in [0, rank) when the rank was known at build time. */
typedef struct {
    int axis;
} psg_concat_params_t;

int psg_concat_prepare(const psg_graph_t *g, const psg_node_t *n, void *params);

/* The update ops (ApplyGradientDescent, ApplyMomentum, ...): their flags. */
typedef struct {
    bool check_numerics;
    bool use_nesterov;
} psg_apply_params_t;

int psg_apply_prepare(const psg_graph_t *g, const psg_node_t *n, void *params);

/* The math ops that share one kernel a backend and differ by their function:
 * the elementwise binary ops (Add..TanhGrad), the unary ones (Neg..Tanh), the
 * reductions (Sum, Mean) and the row-wise normalizations (Softmax,
 * LogSoftmax). prepare reads the node's op into fn, and the unary op's
 * constant (Pow's exponent, Scale's factor; 0 for the others) into p. The
 * binary ones stand in psg_cu_binary_t's order, the unary ones in
 * psg_cu_unary_t's (ops/cuda/launch.h; ops/cuda/math.c asserts it). */
typedef enum {
    PSG_MATH_ADD,
    PSG_MATH_SUB,
    PSG_MATH_MUL,
    PSG_MATH_DIV,
    PSG_MATH_RELU_GRAD,
    PSG_MATH_SIGMOID_GRAD,
    PSG_MATH_TANH_GRAD,
    PSG_MATH_NEG,
    PSG_MATH_SQUARE,
    PSG_MATH_SQRT,
    PSG_MATH_EXP,
    PSG_MATH_LOG,
    PSG_MATH_POW,
    PSG_MATH_SCALE,
    PSG_MATH_RELU,
    PSG_MATH_SIGMOID,
    PSG_MATH_TANH,
    PSG_MATH_SUM,
    PSG_MATH_MEAN,
    PSG_MATH_SOFTMAX,
    PSG_MATH_LOG_SOFTMAX,
    PSG_MATH_FN_COUNT
} psg_math_fn_t;

typedef struct {
    psg_math_fn_t fn;
    float p;
} psg_math_fn_params_t;

int psg_math_fn_prepare(const psg_graph_t *g, const psg_node_t *n, void *params);

/* ctx->params of a kernel whose def has a prepare step (a broken invariant
 * otherwise: the executor prepares every plan node). */
static inline const void *psg_kernel_params(const psg_kernel_ctx_t *c) {
    PSG_ASSERT(c->params);
    return c->params;
}

#endif
