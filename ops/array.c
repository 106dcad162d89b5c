/* The array and state ops: Const, Placeholder, Identity, StopGradient,
 * Reshape(Like), AddN, FillLike, SumToShapeOf / BroadcastLike (the pair that
 * broadcasting gradients need), variables (VarHandle, ReadVariable, Assign,
 * AssignAdd), random initializers and NoOp: defs, shape inference,
 * gradients and graph builders. Kernels: ops/cpu/array.c. */
#include "ops/cpu/array.h"
#include "ops/cuda/kernels.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"

#include "core/checked.h"

#include <math.h>
#include <string.h>

/* ---- inference ---- */

static int infer_const(psg_infer_ctx_t *c) {
    const psg_attr_t *a = psg_node_attr(c->node, "value");
    if (!a || a->type != PSG_ATTR_TENSOR) return psg_error_set("missing tensor attribute 'value'");
    c->out_dtypes[0] = a->u.tensor->dtype;
    c->out_shapes[0] = a->u.tensor->shape;
    return 0;
}

static int infer_placeholder(psg_infer_ctx_t *c) {
    const psg_attr_t *dt = psg_node_attr(c->node, "dtype");
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    if (!dt || dt->type != PSG_ATTR_DTYPE || psg_dtype_size(dt->u.dtype) == 0)
        return psg_error_set("missing or invalid attribute 'dtype'");
    c->out_dtypes[0] = dt->u.dtype;
    c->out_shapes[0] = (sh && sh->type == PSG_ATTR_SHAPE) ? sh->u.shape : psg_shape_unknown();
    return 0;
}

/* PlaceholderWithDefault: its input's dtype, the declared "shape" (which the input must
 * fit), so that a feed of any shape the declaration allows is taken; unfed, the input
 * passes through with its own shape (the op is PSG_OP_DYNAMIC_SHAPE: the kernel's output
 * is the input, not a shape inferred here). */
static int infer_placeholder_with_default(psg_infer_ctx_t *c) {
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    psg_shape_t declared = sh && sh->type == PSG_ATTR_SHAPE ? sh->u.shape : psg_shape_unknown();
    if (!psg_shape_compatible(&declared, &c->in_shapes[0])) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        return psg_error_set("the default %s does not fit the shape %s",
                             psg_shape_str(&c->in_shapes[0], a, sizeof a),
                             psg_shape_str(&declared, b, sizeof b));
    }
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = declared;
    return 0;
}

static int infer_same_as_input0(psg_infer_ctx_t *c) {
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = c->in_shapes[0];
    return 0;
}

static int infer_reshape(psg_infer_ctx_t *c) {
    const psg_attr_t *a = psg_node_attr(c->node, "shape");
    if (!a || a->type != PSG_ATTR_SHAPE) return psg_error_set("missing shape attribute 'shape'");
    psg_shape_t out = a->u.shape;
    int unknown_at = -1;
    int64_t known = 1;
    for (int i = 0; i < out.rank; i++) {
        if (out.dims[i] < 0) {
            if (unknown_at >= 0) return psg_error_set("at most one dim of the new shape may be -1");
            unknown_at = i;
        } else if (psg_ckd_mul_i64(&known, known, out.dims[i])) {
            char a2[PSG_SHAPE_STR_MAX];
            return psg_error_set("new shape %s: its element count overflows",
                                 psg_shape_str(&out, a2, sizeof a2));
        }
    }
    int64_t n = psg_shape_numel(&c->in_shapes[0]);
    char a1[PSG_SHAPE_STR_MAX], a2[PSG_SHAPE_STR_MAX];
    if (n >= 0) {
        if (unknown_at >= 0) {
            if (known == 0 || n % known)
                return psg_error_set("cannot reshape %s to %s",
                                     psg_shape_str(&c->in_shapes[0], a1, sizeof a1),
                                     psg_shape_str(&out, a2, sizeof a2));
            out.dims[unknown_at] = n / known;
        } else if (known != n) {
            return psg_error_set("cannot reshape %s (%lld elements) to %s (%lld elements)",
                                 psg_shape_str(&c->in_shapes[0], a1, sizeof a1), (long long)n,
                                 psg_shape_str(&out, a2, sizeof a2), (long long)known);
        }
    }
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = out;
    return 0;
}

static int infer_reshape_like(psg_infer_ctx_t *c) {
    int64_t a = psg_shape_numel(&c->in_shapes[0]), b = psg_shape_numel(&c->in_shapes[1]);
    if (a >= 0 && b >= 0 && a != b)
        return psg_error_set("cannot reshape %lld elements to %lld", (long long)a, (long long)b);
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = c->in_shapes[1];
    return 0;
}

static int infer_add_n(psg_infer_ctx_t *c) {
    psg_shape_t s = c->in_shapes[0];
    for (int i = 1; i < c->num_inputs; i++) {
        if (c->in_dtypes[i] != c->in_dtypes[0])
            return psg_error_set("input %d is %s, input 0 is %s", i,
                                 psg_dtype_name(c->in_dtypes[i]), psg_dtype_name(c->in_dtypes[0]));
        if (!psg_shape_compatible(&s, &c->in_shapes[i])) {
            char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
            return psg_error_set("input %d has shape %s, input 0 has %s", i,
                                 psg_shape_str(&c->in_shapes[i], a, sizeof a),
                                 psg_shape_str(&s, b, sizeof b));
        }
        if (s.rank < 0) s = c->in_shapes[i];
        for (int d = 0; d < s.rank && c->in_shapes[i].rank == s.rank; d++)
            if (s.dims[d] < 0) s.dims[d] = c->in_shapes[i].dims[d];
    }
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = s;
    return 0;
}

static int infer_sum_to_shape_of(psg_infer_ctx_t *c) {
    psg_shape_t b;
    if (psg_shape_broadcast(&c->in_shapes[1], &c->in_shapes[0], &b) < 0) return -1;
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = c->in_shapes[1];
    return 0;
}

static int infer_broadcast_like(psg_infer_ctx_t *c) {
    psg_shape_t b;
    if (psg_shape_broadcast(&c->in_shapes[0], &c->in_shapes[1], &b) < 0) return -1;
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = b;
    return 0;
}

static int infer_var_handle(psg_infer_ctx_t *c) {
    const psg_attr_t *dt = psg_node_attr(c->node, "dtype");
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    if (!dt || dt->type != PSG_ATTR_DTYPE || psg_dtype_size(dt->u.dtype) == 0)
        return psg_error_set("missing or invalid attribute 'dtype'");
    if (!sh || sh->type != PSG_ATTR_SHAPE || !psg_shape_is_complete(&sh->u.shape))
        return psg_error_set("a variable needs a complete shape");
    if (!psg_node_get_str(c->node, "shared_name", NULL))
        return psg_error_set("missing attribute 'shared_name'");
    c->out_dtypes[0] = PSG_DT_RESOURCE;
    c->out_shapes[0] = sh->u.shape;
    return 0;
}

static int infer_read_variable(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    const psg_attr_t *dt = psg_node_attr(c->node, "dtype");
    c->out_dtypes[0] = dt && dt->type == PSG_ATTR_DTYPE ? dt->u.dtype : PSG_DT_F32;
    c->out_shapes[0] = c->in_shapes[0];
    return 0;
}

static int infer_assign(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (!psg_shape_compatible(&c->in_shapes[0], &c->in_shapes[1])) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        return psg_error_set("value of shape %s does not fit variable of shape %s",
                             psg_shape_str(&c->in_shapes[1], a, sizeof a),
                             psg_shape_str(&c->in_shapes[0], b, sizeof b));
    }
    return 0;
}

static int infer_none(psg_infer_ctx_t *c) {
    (void)c;
    return 0;
}

static int infer_random(psg_infer_ctx_t *c) {
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    if (!sh || sh->type != PSG_ATTR_SHAPE || !psg_shape_is_complete(&sh->u.shape))
        return psg_error_set("a random op needs a complete 'shape'");
    const char *dist = psg_node_get_str(c->node, "distribution", "");
    if (strcmp(dist, "uniform") && strcmp(dist, "normal") && strcmp(dist, "truncated_normal") &&
        strcmp(dist, "constant"))
        return psg_error_set("unknown distribution '%s'", dist);
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = sh->u.shape;
    return 0;
}

/* RandomLike: the Random op's draws, of the shape its input has at run time. */
static int infer_random_like(psg_infer_ctx_t *c) {
    const char *dist = psg_node_get_str(c->node, "distribution", "");
    if (strcmp(dist, "uniform") && strcmp(dist, "normal") && strcmp(dist, "truncated_normal"))
        return psg_error_set("unknown distribution '%s'", dist);
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = c->in_shapes[0];
    return 0;
}

/* ---- gradients ---- */

static int grad_identity(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                         psg_endpoint_t *dx) {
    (void)g;
    (void)n;
    dx[0] = dy[0];
    return 0;
}

psg_endpoint_t psg_reshape_like(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                psg_endpoint_t like) {
    return psg_op_inputs(g, "ReshapeLike", name, 2, (psg_endpoint_t[]){x, like});
}

static int grad_reshape(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                        psg_endpoint_t *dx) {
    dx[0] = psg_reshape_like(g, NULL, dy[0], psg_node_input(n, 0));
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

static int grad_reshape_like(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                             psg_endpoint_t *dx) {
    dx[0] = psg_reshape_like(g, NULL, dy[0], psg_node_input(n, 0));
    dx[1] = PSG_NO_ENDPOINT;
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

static int grad_add_n(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                      psg_endpoint_t *dx) {
    (void)g;
    for (int i = 0; i < psg_node_num_inputs(n); i++) dx[i] = dy[0];
    return 0;
}

psg_endpoint_t psg_broadcast_like(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                  psg_endpoint_t like) {
    return psg_op_inputs(g, "BroadcastLike", name, 2, (psg_endpoint_t[]){x, like});
}

static int grad_sum_to_shape_of(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                                psg_endpoint_t *dx) {
    dx[0] = psg_broadcast_like(g, NULL, dy[0], psg_node_input(n, 0));
    dx[1] = PSG_NO_ENDPOINT;
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

static int grad_broadcast_like(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                               psg_endpoint_t *dx) {
    dx[0] = psg_sum_to_shape_of(g, NULL, dy[0], psg_node_input(n, 0));
    dx[1] = PSG_NO_ENDPOINT;
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

/* ---- defs ---- */

static const psg_op_def_t op_const = {.name = "Const",
                                      .num_inputs = 0,
                                      .num_outputs = 1,
                                      .infer = infer_const,
                                      .grad = psg_grad_none,
                                      .cpu = psg_cpu_const,
                                      .cuda = PSG_GPU_KERNEL(psg_gpu_const),
                                      .state_size = sizeof(psg_const_state_t),
                                      .state_free = psg_const_state_free};
static const psg_op_def_t op_placeholder = {.name = "Placeholder",
                                            .num_inputs = 0,
                                            .num_outputs = 1,
                                            .flags = PSG_OP_SOURCE_FEED,
                                            .infer = infer_placeholder,
                                            .grad = psg_grad_none,
                                            .cpu = psg_cpu_placeholder,
                                            .cuda = PSG_GPU_SAME(psg_cpu_placeholder)};
static const psg_op_def_t op_identity = {.name = "Identity",
                                         .num_inputs = 1,
                                         .num_outputs = 1,
                                         .infer = infer_same_as_input0,
                                         .grad = grad_identity,
                                         .cpu = psg_cpu_identity,
                                         .cuda = PSG_GPU_SAME(psg_cpu_identity)};
static const psg_op_def_t op_placeholder_with_default = {.name = "PlaceholderWithDefault",
                                                         .num_inputs = 1,
                                                         .num_outputs = 1,
                                                         .flags = PSG_OP_DYNAMIC_SHAPE,
                                                         .infer = infer_placeholder_with_default,
                                                         .grad = grad_identity,
                                                         .cpu = psg_cpu_identity,
                                                         .cuda = PSG_GPU_SAME(psg_cpu_identity)};
static const psg_op_def_t op_stop_gradient = {.name = "StopGradient",
                                              .num_inputs = 1,
                                              .num_outputs = 1,
                                              .infer = infer_same_as_input0,
                                              .grad = psg_grad_none,
                                              .cpu = psg_cpu_identity,
                                              .cuda = PSG_GPU_SAME(psg_cpu_identity)};
static const psg_op_def_t op_reshape = {.name = "Reshape",
                                        .num_inputs = 1,
                                        .num_outputs = 1,
                                        .infer = infer_reshape,
                                        .grad = grad_reshape,
                                        .cpu = psg_cpu_reshape,
                                        .cuda = PSG_GPU_SAME(psg_cpu_reshape)};
static const psg_op_def_t op_reshape_like = {.name = "ReshapeLike",
                                             .num_inputs = 2,
                                             .num_outputs = 1,
                                             .infer = infer_reshape_like,
                                             .grad = grad_reshape_like,
                                             .cpu = psg_cpu_reshape,
                                             .cuda = PSG_GPU_SAME(psg_cpu_reshape)};
static const psg_op_def_t op_add_n = {.name = "AddN",
                                      .num_inputs = -1,
                                      .num_outputs = 1,
                                      .infer = infer_add_n,
                                      .grad = grad_add_n,
                                      .cpu = psg_cpu_add_n,
                                      .cuda = PSG_GPU_KERNEL(psg_gpu_add_n)};
static const psg_op_def_t op_fill_like = {.name = "FillLike",
                                          .num_inputs = 1,
                                          .num_outputs = 1,
                                          .infer = infer_same_as_input0,
                                          .grad = psg_grad_none,
                                          .cpu = psg_cpu_fill_like,
                                          .cuda = PSG_GPU_KERNEL(psg_gpu_fill_like)};
static const psg_op_def_t op_sum_to_shape_of = {.name = "SumToShapeOf",
                                                .num_inputs = 2,
                                                .num_outputs = 1,
                                                .infer = infer_sum_to_shape_of,
                                                .grad = grad_sum_to_shape_of,
                                                .cpu = psg_cpu_sum_to_shape_of,
                                                .cuda = PSG_GPU_KERNEL(psg_gpu_sum_to_shape_of)};
static const psg_op_def_t op_broadcast_like = {.name = "BroadcastLike",
                                               .num_inputs = 2,
                                               .num_outputs = 1,
                                               .infer = infer_broadcast_like,
                                               .grad = grad_broadcast_like,
                                               .cpu = psg_cpu_broadcast_like,
                                               .cuda = PSG_GPU_KERNEL(psg_gpu_broadcast_like)};
static const psg_op_def_t op_var_handle = {.name = "VarHandle",
                                           .num_inputs = 0,
                                           .num_outputs = 1,
                                           .flags = PSG_OP_VARIABLE | PSG_OP_STATEFUL,
                                           .infer = infer_var_handle,
                                           .grad = psg_grad_none,
                                           .cpu = psg_cpu_var_handle,
                                           .cuda = PSG_GPU_SAME(psg_cpu_var_handle)};
static const psg_op_def_t op_read_variable = {.name = "ReadVariable",
                                              .num_inputs = 1,
                                              .num_outputs = 1,
                                              .flags = PSG_OP_STATEFUL,
                                              .infer = infer_read_variable,
                                              .grad = grad_identity,
                                              .cpu = psg_cpu_read_variable,
                                              .cuda = PSG_GPU_KERNEL(psg_gpu_read_variable)};
static const psg_op_def_t op_assign = {.name = "Assign",
                                       .num_inputs = 2,
                                       .num_outputs = 0,
                                       .flags = PSG_OP_STATEFUL,
                                       .infer = infer_assign,
                                       .cpu = psg_cpu_assign,
                                       .cuda = PSG_GPU_KERNEL(psg_gpu_assign)};
static const psg_op_def_t op_assign_add = {.name = "AssignAdd",
                                           .num_inputs = 2,
                                           .num_outputs = 0,
                                           .flags = PSG_OP_STATEFUL,
                                           .infer = infer_assign,
                                           .cpu = psg_cpu_assign_add,
                                           .cuda = PSG_GPU_KERNEL(psg_gpu_assign_add)};
static const psg_op_def_t op_no_op = {.name = "NoOp",
                                      .num_inputs = 0,
                                      .num_outputs = 0,
                                      .infer = infer_none,
                                      .cpu = psg_cpu_no_op,
                                      .cuda = PSG_GPU_SAME(psg_cpu_no_op)};
static const psg_op_def_t op_random = {.name = "Random",
                                       .num_inputs = 0,
                                       .num_outputs = 1,
                                       .flags = PSG_OP_STATEFUL,
                                       .infer = infer_random,
                                       .grad = psg_grad_none,
                                       .cpu = psg_cpu_random};

static const psg_op_def_t op_random_like = {.name = "RandomLike",
                                            .num_inputs = 1,
                                            .num_outputs = 1,
                                            .flags = PSG_OP_STATEFUL,
                                            .infer = infer_random_like,
                                            .grad = psg_grad_none,
                                            .cpu = psg_cpu_random};

const psg_op_def_t *const psg_array_ops[] = {
    &op_const,
    &op_placeholder,
    &op_identity,
    &op_stop_gradient,
    &op_placeholder_with_default,
    &op_reshape,
    &op_reshape_like,
    &op_add_n,
    &op_fill_like,
    &op_sum_to_shape_of,
    &op_broadcast_like,
    &op_var_handle,
    &op_read_variable,
    &op_assign,
    &op_assign_add,
    &op_no_op,
    &op_random,
    &op_random_like,
    NULL,
};

/* ---- builders ---- */

psg_endpoint_t psg_const(psg_graph_t *g, const char *name, psg_tensor_t **value) {
    psg_node_builder_t *b = psg_node_begin(g, "Const", name);
    psg_node_attr_tensor(b, "value", value);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_const_scalar(psg_graph_t *g, const char *name, float v) {
    psg_tensor_t *t = psg_tensor_scalar_f32(v);
    return psg_const(g, name, &t);
}

psg_endpoint_t psg_placeholder(psg_graph_t *g, const char *name, psg_dtype_t dt,
                               const psg_shape_t *shape) {
    psg_node_builder_t *b = psg_node_begin(g, "Placeholder", name);
    psg_node_attr_dtype(b, "dtype", dt);
    psg_node_attr_shape(b, "shape", shape);
    return psg_node_finish_ep(b);
}

static psg_endpoint_t unary(psg_graph_t *g, const char *op, const char *name, psg_endpoint_t x) {
    return psg_op_inputs(g, op, name, 1, &x);
}

psg_endpoint_t psg_identity(psg_graph_t *g, const char *name, psg_endpoint_t x) {
    return unary(g, "Identity", name, x);
}

psg_endpoint_t psg_placeholder_with_default(psg_graph_t *g, const char *name, psg_endpoint_t input,
                                            const psg_shape_t *shape) {
    psg_node_builder_t *b = psg_node_begin(g, "PlaceholderWithDefault", name);
    psg_node_add_input(b, input);
    psg_node_attr_shape(b, "shape", shape);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_stop_gradient(psg_graph_t *g, const char *name, psg_endpoint_t x) {
    return unary(g, "StopGradient", name, x);
}

psg_endpoint_t psg_reshape(psg_graph_t *g, const char *name, psg_endpoint_t x,
                           const psg_shape_t *shape) {
    psg_node_builder_t *b = psg_node_begin(g, "Reshape", name);
    psg_node_add_input(b, x);
    psg_node_attr_shape(b, "shape", shape);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_add_n(psg_graph_t *g, const char *name, int n, const psg_endpoint_t *xs) {
    if (n == 1) return psg_identity(g, name, xs[0]);
    psg_node_builder_t *b = psg_node_begin(g, "AddN", name);
    for (int i = 0; i < n; i++) psg_node_add_input(b, xs[i]);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_fill_like(psg_graph_t *g, const char *name, psg_endpoint_t x, float value) {
    psg_node_builder_t *b = psg_node_begin(g, "FillLike", name);
    psg_node_add_input(b, x);
    psg_node_attr_float(b, "value", value);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_ones_like(psg_graph_t *g, const char *name, psg_endpoint_t x) {
    return psg_fill_like(g, name ? name : "OnesLike", x, 1.0f);
}

psg_endpoint_t psg_zeros_like(psg_graph_t *g, const char *name, psg_endpoint_t x) {
    return psg_fill_like(g, name ? name : "ZerosLike", x, 0.0f);
}

psg_endpoint_t psg_sum_to_shape_of(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                   psg_endpoint_t like) {
    return psg_op_inputs(g, "SumToShapeOf", name, 2, (psg_endpoint_t[]){x, like});
}

psg_endpoint_t psg_var_handle(psg_graph_t *g, const char *name, psg_dtype_t dt,
                              const psg_shape_t *shape) {
    psg_node_builder_t *b = psg_node_begin(g, "VarHandle", name);
    psg_node_attr_dtype(b, "dtype", dt);
    psg_node_attr_shape(b, "shape", shape);
    /* the resource's name is the node's full name; finish may uniquify the
     * node name, so set shared_name from the scoped name first */
    psg_node_attr_str(b, "shared_name", "");
    int id = psg_node_finish(b);
    if (id < 0) return PSG_NO_ENDPOINT;
    return (psg_endpoint_t){id, 0};
}

psg_endpoint_t psg_read_variable(psg_graph_t *g, const char *name, psg_endpoint_t handle) {
    psg_node_builder_t *b = psg_node_begin(g, "ReadVariable", name);
    psg_node_add_input(b, handle);
    if (psg_endpoint_valid(handle)) {
        /* the handle's dtype attr is a DTYPE, which psg_node_get_int does not read */
        const psg_attr_t *dt = psg_node_attr(psg_graph_node(g, handle.node), "dtype");
        psg_node_attr_dtype(b, "dtype",
                            dt && dt->type == PSG_ATTR_DTYPE ? dt->u.dtype : PSG_DT_F32);
    }
    return psg_node_finish_ep(b);
}

static int assign_op(psg_graph_t *g, const char *op, const char *name, psg_endpoint_t handle,
                     psg_endpoint_t value) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    psg_node_add_input(b, handle);
    psg_node_add_input(b, value);
    return psg_node_finish(b);
}

int psg_assign(psg_graph_t *g, const char *name, psg_endpoint_t handle, psg_endpoint_t value) {
    return assign_op(g, "Assign", name, handle, value);
}

int psg_assign_add(psg_graph_t *g, const char *name, psg_endpoint_t handle, psg_endpoint_t value) {
    return assign_op(g, "AssignAdd", name, handle, value);
}

int psg_group(psg_graph_t *g, const char *name, int n, const int *nodes) {
    psg_node_builder_t *b = psg_node_begin(g, "NoOp", name);
    for (int i = 0; i < n; i++) psg_node_add_control(b, nodes[i]);
    return psg_node_finish(b);
}

/* Constant initializers above this many elements (1 MiB of f32) are filled by the
 * Random op's "constant" distribution instead of a Const. */
#define PSG_CONST_INIT_MAX_ELEMENTS (256 * 1024)

/* fan-in / fan-out: dense [in, out]; conv [kh, kw, in, out]; a vector: its length twice;
 * a scalar: 1 */
static void fans(const psg_shape_t *shape, double *fan_in, double *fan_out) {
    double receptive = 1;
    for (int i = 0; i + 2 < shape->rank; i++) receptive *= (double)shape->dims[i];
    *fan_in = shape->rank >= 2   ? (double)shape->dims[shape->rank - 2] * receptive
              : shape->rank == 1 ? (double)shape->dims[0]
                                 : 1.0;
    *fan_out = shape->rank >= 2 ? (double)shape->dims[shape->rank - 1] * receptive : *fan_in;
}

double psg_glorot_uniform_scale(const psg_shape_t *shape) {
    double fan_in, fan_out;
    fans(shape, &fan_in, &fan_out);
    return sqrt(6.0 / (fan_in + fan_out));
}

int psg_variance_scaling(const psg_shape_t *shape, double scale, const char *mode,
                         const char *distribution, uint64_t seed, psg_initializer_t *init) {
    double fan_in, fan_out, n;
    fans(shape, &fan_in, &fan_out);
    if (!(scale > 0)) return psg_error_set("variance scaling: scale %g must be positive", scale);
    if (mode && !strcmp(mode, "fan_in"))
        n = fan_in;
    else if (mode && !strcmp(mode, "fan_out"))
        n = fan_out;
    else if (mode && !strcmp(mode, "fan_avg"))
        n = (fan_in + fan_out) / 2.0;
    else
        return psg_error_set("variance scaling: unknown mode '%s' (fan_in, fan_out, fan_avg)",
                             mode ? mode : "(null)");
    if (n < 1) n = 1;
    double var = scale / n;
    const char *d = distribution ? distribution : "(null)";
    if (!strcmp(d, "uniform"))
        *init = (psg_initializer_t){"uniform", sqrt(3.0 * var), seed};
    else if (!strcmp(d, "truncated_normal") || !strcmp(d, "normal"))
        /* the stddev of a normal truncated at 2 stddevs is 0.8796... of the untruncated one */
        *init = (psg_initializer_t){"truncated_normal", sqrt(var) / 0.87962566103423978, seed};
    else if (!strcmp(d, "untruncated_normal"))
        *init = (psg_initializer_t){"normal", sqrt(var), seed};
    else
        return psg_error_set(
            "variance scaling: unknown distribution '%s' (uniform, truncated_normal, "
            "untruncated_normal)",
            d);
    return 0;
}

static psg_endpoint_t random_init(psg_graph_t *g, const char *name, const char *dist,
                                  const psg_shape_t *shape, double scale, uint64_t seed) {
    psg_node_builder_t *b = psg_node_begin(g, "Random", name);
    psg_node_attr_str(b, "distribution", dist);
    psg_node_attr_shape(b, "shape", shape);
    psg_node_attr_float(b, "scale", scale);
    psg_node_attr_int(b, "seed", (int64_t)seed);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_random(psg_graph_t *g, const char *name, const char *distribution,
                          const psg_shape_t *shape, double scale, uint64_t seed) {
    psg_node_builder_t *b = psg_node_begin(g, "Random", name);
    psg_node_attr_str(b, "distribution", distribution);
    psg_node_attr_shape(b, "shape", shape);
    psg_node_attr_float(b, "scale", scale);
    psg_node_attr_int(b, "seed", (int64_t)seed);
    psg_node_attr_bool(b, "per_step", true);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_random_like(psg_graph_t *g, const char *name, psg_endpoint_t like,
                               const char *distribution, double scale, uint64_t seed) {
    psg_node_builder_t *b = psg_node_begin(g, "RandomLike", name);
    psg_node_add_input(b, like);
    psg_node_attr_str(b, "distribution", distribution);
    psg_node_attr_float(b, "scale", scale);
    psg_node_attr_int(b, "seed", (int64_t)seed);
    psg_node_attr_bool(b, "per_step", true);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_initializer_value(psg_graph_t *g, const char *name, const psg_shape_t *shape,
                                     psg_initializer_t init) {
    if (!name) name = "initial_value";
    const char *k = init.kind ? init.kind : "zeros";
    if (!strcmp(k, "zeros") || !strcmp(k, "ones") || !strcmp(k, "constant")) {
        double v = !strcmp(k, "zeros") ? 0.0 : !strcmp(k, "ones") ? 1.0 : init.scale;
        /* a big one (an embedding table's optimizer slots) is filled when run: as a Const
         * it would be held by the graph and sent whole in every RegisterGraph */
        if (psg_shape_numel(shape) > PSG_CONST_INIT_MAX_ELEMENTS)
            return random_init(g, name, "constant", shape, v, 0);
        psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, shape);
        if (!t) return PSG_NO_ENDPOINT;
        float *d = psg_tensor_f32(t);
        for (int64_t i = 0, n = psg_tensor_numel(t); i < n; i++) d[i] = (float)v;
        return psg_const(g, name, &t);
    }
    if (!strcmp(k, "uniform") || !strcmp(k, "normal") || !strcmp(k, "truncated_normal"))
        return random_init(g, name, k, shape, init.scale, init.seed);
    if (!strcmp(k, "glorot_uniform")) {
        return random_init(g, name, "uniform", shape, psg_glorot_uniform_scale(shape), init.seed);
    }
    psg_error_set("unknown initializer '%s'", k);
    return PSG_NO_ENDPOINT;
}

static psg_endpoint_t variable_in_init_scope(psg_graph_t *g, const char *name, psg_dtype_t dt,
                                             const psg_shape_t *shape, psg_initializer_t init,
                                             bool trainable) {
    psg_endpoint_t h = psg_var_handle(g, name, dt, shape);
    if (!psg_endpoint_valid(h)) return h;
    const char *full = psg_node_name(psg_graph_node(g, h.node));
    /* the initializer lives under the variable's own name, relative to the
     * current scope (which the full name already starts with) */
    size_t outer = strlen(psg_graph_scope(g));
    if (psg_graph_push_scope(g, full + (outer ? outer + 1 : 0)) < 0) return PSG_NO_ENDPOINT;
    bool failed = false;
    psg_tensor_t *given = psg_graph_initial_value(g, full, dt, shape, &failed);
    psg_endpoint_t v = given    ? psg_const(g, "initial_value", &given)
                       : failed ? PSG_NO_ENDPOINT
                                : psg_initializer_value(g, "initial_value", shape, init);
    int assign = psg_endpoint_valid(v) ? psg_assign(g, "init", h, v) : -1;
    psg_graph_pop_scope(g);
    if (assign < 0) {
        psg_error_wrap("initializer of variable '%s'", full);
        return PSG_NO_ENDPOINT;
    }
    psg_graph_add_to_collection(g, "variables", h.node);
    if (trainable) psg_graph_add_to_collection(g, "trainable_variables", h.node);
    psg_graph_add_to_collection(g, "init", assign);
    return h;
}

psg_endpoint_t psg_variable(psg_graph_t *g, const char *name, psg_dtype_t dt,
                            const psg_shape_t *shape, psg_initializer_t init, bool trainable) {
    /* a variable and its initializer depend on no control context (tf.init_scope) */
    if (psg_graph_push_control(g, 0, NULL, true) < 0) return PSG_NO_ENDPOINT;
    psg_endpoint_t h = variable_in_init_scope(g, name, dt, shape, init, trainable);
    psg_graph_pop_control(g);
    return h;
}
