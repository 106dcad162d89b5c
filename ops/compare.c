/* The comparison family: Maximum and Minimum (with gradients), the elementwise comparisons
 * Greater, GreaterEqual, Less, LessEqual, NotEqual and BroadcastEqual (bool, no gradient; the
 * math family's Equal takes one shape or a scalar only), the reduction Max,
 * OneHot and Shape: defs, shape inference, gradients as graph nodes, and the builders of
 * psgraph/ops_math.h. The ops TensorFlow 1.x scripts use beside the math family
 * (tf.maximum, tf.greater, tf.reduce_max, tf.one_hot, tf.shape). Kernels: ops/cpu/compare.c.
 * Not Equal (ops/math.c). */
#include "ops/cpu/compare.h"
#include "ops/cpu/math.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"

#include <string.h>

/* ---- inference ---- */

static bool comparable(psg_dtype_t dt) {
    return dt == PSG_DT_F32 || dt == PSG_DT_I32 || dt == PSG_DT_I64;
}

/* Maximum, Minimum: f32 with numpy broadcasting. */
static int infer_extremum(psg_infer_ctx_t *c) {
    for (int i = 0; i < 2; i++)
        if (psg_infer_expect_dtype(c, i, PSG_DT_F32) < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    return psg_shape_broadcast(&c->in_shapes[0], &c->in_shapes[1], &c->out_shapes[0]);
}

/* The comparisons: two inputs of one dtype (f32, i32, i64), broadcast; bool. */
static int infer_compare(psg_infer_ctx_t *c) {
    if (c->in_dtypes[0] != c->in_dtypes[1])
        return psg_error_set("inputs must have one dtype, got %s and %s",
                             psg_dtype_name(c->in_dtypes[0]), psg_dtype_name(c->in_dtypes[1]));
    if (!comparable(c->in_dtypes[0]))
        return psg_error_set("cannot compare %s (f32, i32 or i64)",
                             psg_dtype_name(c->in_dtypes[0]));
    c->out_dtypes[0] = PSG_DT_BOOL;
    return psg_shape_broadcast(&c->in_shapes[0], &c->in_shapes[1], &c->out_shapes[0]);
}

/* Max over the node's axes (as Sum: attr "axes", empty: all; "keep_dims"); an empty reduced
 * axis has no maximum. */
static int infer_max(psg_infer_ctx_t *c) {
    if (psg_math_infer_reduce(c) < 0) return -1;
    const psg_shape_t *x = &c->in_shapes[0];
    bool reduced[PSG_MAX_RANK];
    if (x->rank >= 0 && psg_math_reduced_axes(c->node, x->rank, reduced) < 0) return -1;
    for (int i = 0; i < x->rank; i++)
        if (reduced[i] && x->dims[i] == 0)
            return psg_error_set("axis %d is empty: its maximum is undefined", i);
    return 0;
}

static int infer_one_hot(psg_infer_ctx_t *c) {
    if (c->in_dtypes[0] != PSG_DT_I32 && c->in_dtypes[0] != PSG_DT_I64)
        return psg_error_set("indices must be i32 or i64, got %s", psg_dtype_name(c->in_dtypes[0]));
    int64_t depth = psg_node_get_int(c->node, "depth", -1);
    if (depth < 1) return psg_error_set("depth %lld must be at least 1", (long long)depth);
    const psg_shape_t *x = &c->in_shapes[0];
    if (x->rank + 1 > PSG_MAX_RANK)
        return psg_error_set("rank %d is over the limit %d", x->rank + 1, PSG_MAX_RANK);
    c->out_dtypes[0] = PSG_DT_F32;
    if (x->rank < 0) {
        c->out_shapes[0] = psg_shape_unknown();
        return 0;
    }
    psg_shape_t out = *x;
    out.dims[out.rank++] = depth;
    c->out_shapes[0] = out;
    return 0;
}

static int infer_shape(psg_infer_ctx_t *c) {
    if (c->in_shapes[0].rank < 0) return psg_error_set("the input's rank is unknown");
    c->out_dtypes[0] = PSG_DT_I32;
    c->out_shapes[0] = psg_shape_1d(c->in_shapes[0].rank);
    return 0;
}

/* ---- gradients ---- */

static psg_endpoint_t cmp_build(psg_graph_t *g, const char *op, const char *name, psg_endpoint_t a,
                                psg_endpoint_t b) {
    return psg_op_inputs(g, op, name, 2, (psg_endpoint_t[]){a, b});
}

/* y = max(a, b): dy goes to a where a >= b, else to b (TensorFlow's tie rule); min alike
 * with a <= b. Each part summed back to its input's shape. */
static int grad_extremum(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                         psg_endpoint_t *dx) {
    psg_endpoint_t a = psg_node_input(n, 0), b = psg_node_input(n, 1);
    bool is_max = !strcmp(psg_node_op(n), "Maximum");
    psg_endpoint_t pick = cmp_build(g, is_max ? "GreaterEqual" : "LessEqual", NULL, a, b);
    psg_endpoint_t mask = psg_cast(g, NULL, pick, PSG_DT_F32);
    psg_endpoint_t da = psg_mul(g, NULL, dy[0], mask);
    psg_endpoint_t db = psg_sub(g, NULL, dy[0], da);
    dx[0] = psg_sum_to_shape_of(g, NULL, da, a);
    dx[1] = psg_sum_to_shape_of(g, NULL, db, b);
    return psg_endpoint_valid(dx[0]) && psg_endpoint_valid(dx[1]) ? 0 : -1;
}

/* y = max(x over axes): dy shared equally by the elements equal to the maximum. */
static int grad_max(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    psg_endpoint_t x = psg_node_input(n, 0), y = {psg_node_id(n), 0}, d = dy[0];
    const psg_shape_t *xs = psg_graph_shape(g, x);
    if (xs->rank < 0) return psg_error_set("the gradient needs the input's rank when built");
    bool reduced[PSG_MAX_RANK];
    if (psg_math_reduced_axes(n, xs->rank, reduced) < 0) return -1;
    int64_t axes[PSG_MAX_RANK];
    int na = 0;
    for (int i = 0; i < xs->rank; i++)
        if (reduced[i]) axes[na++] = i;
    if (na && !psg_node_get_bool(n, "keep_dims", false)) {
        y = psg_expand_dims(g, NULL, y, na, axes);
        d = psg_expand_dims(g, NULL, d, na, axes);
    }
    psg_endpoint_t hit =
        psg_cast(g, NULL, psg_equal(g, NULL, x, psg_broadcast_like(g, NULL, y, x)), PSG_DT_F32);
    psg_endpoint_t count = psg_sum(g, NULL, hit, na, axes, true);
    psg_endpoint_t share = psg_div(g, NULL, d, count);
    dx[0] = psg_mul(g, NULL, hit, psg_broadcast_like(g, NULL, share, x));
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

/* ---- defs ---- */

#define DEF_CPU(var, op_name, nin, infer_fn, grad_fn, cpu_fn)                                      \
    static const psg_op_def_t var = {.name = op_name,                                              \
                                     .num_inputs = nin,                                            \
                                     .num_outputs = 1,                                             \
                                     .infer = infer_fn,                                            \
                                     .grad = grad_fn,                                              \
                                     .cpu = cpu_fn};

DEF_CPU(op_maximum, "Maximum", 2, infer_extremum, grad_extremum, psg_cpu_extremum)
DEF_CPU(op_minimum, "Minimum", 2, infer_extremum, grad_extremum, psg_cpu_extremum)
DEF_CPU(op_greater, "Greater", 2, infer_compare, psg_grad_none, psg_cpu_compare)
DEF_CPU(op_greater_equal, "GreaterEqual", 2, infer_compare, psg_grad_none, psg_cpu_compare)
DEF_CPU(op_less, "Less", 2, infer_compare, psg_grad_none, psg_cpu_compare)
DEF_CPU(op_less_equal, "LessEqual", 2, infer_compare, psg_grad_none, psg_cpu_compare)
DEF_CPU(op_not_equal, "NotEqual", 2, infer_compare, psg_grad_none, psg_cpu_compare)
DEF_CPU(op_broadcast_equal, "BroadcastEqual", 2, infer_compare, psg_grad_none, psg_cpu_compare)
DEF_CPU(op_max, "Max", 1, infer_max, grad_max, psg_cpu_max)
DEF_CPU(op_one_hot, "OneHot", 1, infer_one_hot, psg_grad_none, psg_cpu_one_hot)
DEF_CPU(op_shape, "Shape", 1, infer_shape, psg_grad_none, psg_cpu_shape)

const psg_op_def_t *const psg_compare_ops[] = {
    &op_maximum,   &op_minimum,         &op_greater, &op_greater_equal, &op_less,  &op_less_equal,
    &op_not_equal, &op_broadcast_equal, &op_max,     &op_one_hot,       &op_shape, NULL,
};

/* ---- builders (psgraph/ops_math.h) ---- */

psg_endpoint_t psg_maximum(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b) {
    return cmp_build(g, "Maximum", name, a, b);
}
psg_endpoint_t psg_minimum(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b) {
    return cmp_build(g, "Minimum", name, a, b);
}

psg_endpoint_t psg_compare(psg_graph_t *g, const char *name, const char *op, psg_endpoint_t a,
                           psg_endpoint_t b) {
    static const char *const ops[] = {"Greater", "GreaterEqual", "Less", "LessEqual", "NotEqual"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (op && !strcmp(op, ops[i])) return cmp_build(g, ops[i], name, a, b);
    if (op && !strcmp(op, "Equal")) return cmp_build(g, "BroadcastEqual", name, a, b);
    psg_node_builder_t *bad = psg_node_begin(g, op ? op : "(null)", name); /* names the op */
    psg_node_add_input(bad, a);
    psg_node_add_input(bad, b);
    return psg_node_finish_ep(bad);
}

psg_endpoint_t psg_reduce_max(psg_graph_t *g, const char *name, psg_endpoint_t x, int n_axes,
                              const int64_t *axes, bool keep_dims) {
    psg_node_builder_t *b = psg_node_begin(g, "Max", name);
    psg_node_add_input(b, x);
    psg_node_attr_ints(b, "axes", n_axes, axes);
    psg_node_attr_bool(b, "keep_dims", keep_dims);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_one_hot(psg_graph_t *g, const char *name, psg_endpoint_t indices, int64_t depth,
                           double on_value, double off_value) {
    psg_node_builder_t *b = psg_node_begin(g, "OneHot", name);
    psg_node_add_input(b, indices);
    psg_node_attr_int(b, "depth", depth);
    psg_node_attr_float(b, "on_value", on_value);
    psg_node_attr_float(b, "off_value", off_value);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_shape_of(psg_graph_t *g, const char *name, psg_endpoint_t x) {
    return psg_op_inputs(g, "Shape", name, 1, &x);
}
