/* The math ops: elementwise arithmetic with broadcasting, activations and
 * their backprops, softmax and losses, Sum/Mean, MatMul and the fused Dense
 * layer, Concat/Slice, Dropout, Cast, ArgMax, Equal: defs, shape inference,
 * gradients (as graph nodes). Builders: ops/math_build.c. Kernels: ops/cpu/math*.c, matmul.c.
 * Not the nn ops (conv, pool, batch norm, bias_add). */
#include "ops/cpu/math.h"
#include "ops/cpu/array.h"
#include "ops/cuda/kernels.h"
#include "ops/params.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_nn.h"
#include "psgraph/precision.h"

#include <math.h>
#include <string.h>

/* ---- inference ---- */

static int expect_f32(psg_infer_ctx_t *c) {
    for (int i = 0; i < c->num_inputs; i++)
        if (psg_infer_expect_dtype(c, i, PSG_DT_F32) < 0) return -1;
    return 0;
}

static int infer_binary(psg_infer_ctx_t *c) {
    if (expect_f32(c) < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    return psg_shape_broadcast(&c->in_shapes[0], &c->in_shapes[1], &c->out_shapes[0]);
}

static int infer_unary(psg_infer_ctx_t *c) {
    if (expect_f32(c) < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = c->in_shapes[0];
    return 0;
}

/* Two inputs of one shape (unknown dims filled from either). */
static int same_shapes(psg_infer_ctx_t *c, psg_shape_t *out) {
    const psg_shape_t *a = &c->in_shapes[0], *b = &c->in_shapes[1];
    if (!psg_shape_compatible(a, b)) {
        char sa[PSG_SHAPE_STR_MAX], sb[PSG_SHAPE_STR_MAX];
        return psg_error_set("inputs must have one shape, got %s and %s",
                             psg_shape_str(a, sa, sizeof sa), psg_shape_str(b, sb, sizeof sb));
    }
    *out = a->rank >= 0 ? *a : *b;
    for (int i = 0; i < out->rank && b->rank == out->rank; i++)
        if (out->dims[i] < 0) out->dims[i] = b->dims[i];
    return 0;
}

/* ReluGrad, SigmoidGrad, TanhGrad: (dy, y) of one shape. */
static int infer_act_grad(psg_infer_ctx_t *c) {
    if (expect_f32(c) < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    return same_shapes(c, &c->out_shapes[0]);
}

static int infer_softmax(psg_infer_ctx_t *c) {
    if (infer_unary(c) < 0) return -1;
    if (c->in_shapes[0].rank == 0) return psg_error_set("needs rank >= 1, got a scalar");
    return 0;
}

static int infer_xent(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_F32) < 0 || psg_infer_expect_rank(c, 0, 2) < 0 ||
        psg_infer_expect_rank(c, 1, 1) < 0)
        return -1;
    if (c->in_dtypes[1] != PSG_DT_I32 && c->in_dtypes[1] != PSG_DT_I64)
        return psg_error_set("labels (input 1) must be i32 or i64, got %s",
                             psg_dtype_name(c->in_dtypes[1]));
    const psg_shape_t *l = &c->in_shapes[0], *y = &c->in_shapes[1];
    int64_t n = l->rank == 2 ? l->dims[0] : -1, cls = l->rank == 2 ? l->dims[1] : -1;
    int64_t ny = y->rank == 1 ? y->dims[0] : -1;
    if (n >= 0 && ny >= 0 && n != ny)
        return psg_error_set("logits have %lld rows, labels %lld", (long long)n, (long long)ny);
    if (n < 0) n = ny;
    c->out_dtypes[0] = c->out_dtypes[1] = PSG_DT_F32;
    c->out_shapes[0] = psg_shape_1d(n);
    c->out_shapes[1] = psg_shape_2d(n, cls);
    return 0;
}

static int infer_scalar_f32(psg_infer_ctx_t *c) {
    if (expect_f32(c) < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = psg_shape_scalar();
    return 0;
}

int psg_math_reduced_axes(const psg_node_t *node, int rank, bool *reduced) {
    const psg_attr_t *a = psg_node_attr(node, "axes");
    int n = a && a->type == PSG_ATTR_INTS ? a->u.ints.n : 0;
    for (int i = 0; i < rank; i++) reduced[i] = n == 0;
    for (int k = 0; k < n; k++) {
        int64_t ax = a->u.ints.v[k];
        if (ax < -rank || ax >= rank)
            return psg_error_set("axis %lld is out of range for rank %d", (long long)ax, rank);
        if (ax < 0) ax += rank;
        if (reduced[ax]) return psg_error_set("axis %lld is repeated", (long long)a->u.ints.v[k]);
        reduced[ax] = true;
    }
    return 0;
}

int64_t psg_math_reduced_count(const psg_node_t *node, const psg_shape_t *x) {
    bool reduced[PSG_MAX_RANK];
    if (psg_math_reduced_axes(node, x->rank, reduced) < 0) return -1;
    int64_t count = 1;
    for (int i = 0; i < x->rank; i++)
        if (reduced[i]) count *= x->dims[i];
    return count;
}

int psg_math_infer_reduce(psg_infer_ctx_t *c) {
    if (expect_f32(c) < 0) return -1;
    const psg_shape_t *x = &c->in_shapes[0];
    bool keep = psg_node_get_bool(c->node, "keep_dims", false);
    c->out_dtypes[0] = PSG_DT_F32;
    if (x->rank < 0) {
        const psg_attr_t *a = psg_node_attr(c->node, "axes");
        bool all = !a || a->type != PSG_ATTR_INTS || a->u.ints.n == 0;
        c->out_shapes[0] = all && !keep ? psg_shape_scalar() : psg_shape_unknown();
        return 0;
    }
    bool reduced[PSG_MAX_RANK];
    if (psg_math_reduced_axes(c->node, x->rank, reduced) < 0) return -1;
    psg_shape_t out = {.rank = 0};
    for (int i = 0; i < x->rank; i++) {
        if (!reduced[i])
            out.dims[out.rank++] = x->dims[i];
        else if (keep)
            out.dims[out.rank++] = 1;
    }
    c->out_shapes[0] = out;
    return 0;
}

static int infer_reduction_size(psg_infer_ctx_t *c) {
    if (c->in_shapes[0].rank >= 0) {
        bool reduced[PSG_MAX_RANK];
        if (psg_math_reduced_axes(c->node, c->in_shapes[0].rank, reduced) < 0) return -1;
    }
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = psg_shape_scalar();
    return 0;
}

static int infer_expand_dims(psg_infer_ctx_t *c) {
    const psg_attr_t *a = psg_node_attr(c->node, "axes");
    int n = a && a->type == PSG_ATTR_INTS ? a->u.ints.n : 0;
    const psg_shape_t *x = &c->in_shapes[0];
    c->out_dtypes[0] = c->in_dtypes[0];
    if (x->rank < 0) {
        c->out_shapes[0] = psg_shape_unknown();
        return 0;
    }
    int rank = x->rank + n;
    if (rank > PSG_MAX_RANK)
        return psg_error_set("rank %d is over the limit %d", rank, PSG_MAX_RANK);
    psg_shape_t out = {.rank = rank};
    bool inserted[PSG_MAX_RANK] = {0};
    for (int k = 0; k < n; k++) {
        int64_t ax = a->u.ints.v[k];
        if (ax < 0 || ax >= rank || inserted[ax] || (k > 0 && ax <= a->u.ints.v[k - 1]))
            return psg_error_set("axes must be sorted, distinct and in [0, %d)", rank);
        inserted[ax] = true;
    }
    for (int i = 0, j = 0; i < rank; i++) out.dims[i] = inserted[i] ? 1 : x->dims[j++];
    c->out_shapes[0] = out;
    return 0;
}

static int infer_argmax(psg_infer_ctx_t *c) {
    if (expect_f32(c) < 0) return -1;
    const psg_shape_t *x = &c->in_shapes[0];
    if (x->rank == 0) return psg_error_set("needs rank >= 1, got a scalar");
    c->out_dtypes[0] = PSG_DT_I64;
    c->out_shapes[0] = x->rank < 0 ? *x : psg_shape_make(x->rank - 1, x->dims);
    return 0;
}

static int infer_equal(psg_infer_ctx_t *c) {
    if (c->in_dtypes[0] != c->in_dtypes[1])
        return psg_error_set("inputs must have one dtype, got %s and %s",
                             psg_dtype_name(c->in_dtypes[0]), psg_dtype_name(c->in_dtypes[1]));
    c->out_dtypes[0] = PSG_DT_BOOL;
    if (psg_shape_numel(&c->in_shapes[1]) == 1) {
        c->out_shapes[0] = c->in_shapes[0];
        return 0;
    }
    return same_shapes(c, &c->out_shapes[0]);
}

/* f32, or bf16 / f16 (mixed precision): the output has the inputs' dtype */
static int infer_matmul(psg_infer_ctx_t *c) {
    psg_dtype_t dt;
    if (psg_infer_expect_compute_dtype(c, &dt) < 0) return -1;
    bool ta = psg_node_get_bool(c->node, "transpose_a", false);
    bool tb = psg_node_get_bool(c->node, "transpose_b", false);
    const psg_shape_t *a = &c->in_shapes[0], *b = &c->in_shapes[1];
    char sa[PSG_SHAPE_STR_MAX], sb[PSG_SHAPE_STR_MAX];
    if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2))
        return psg_error_set("%s x %s: both inputs must have rank 2",
                             psg_shape_str(a, sa, sizeof sa), psg_shape_str(b, sb, sizeof sb));
    int64_t m = -1, ka = -1, kb = -1, n = -1;
    if (a->rank == 2) {
        m = a->dims[ta ? 1 : 0];
        ka = a->dims[ta ? 0 : 1];
    }
    if (b->rank == 2) {
        kb = b->dims[tb ? 1 : 0];
        n = b->dims[tb ? 0 : 1];
    }
    if (ka >= 0 && kb >= 0 && ka != kb)
        return psg_error_set("%s%s x %s%s: inner dimensions %lld and %lld do not match",
                             psg_shape_str(a, sa, sizeof sa), ta ? "^T" : "",
                             psg_shape_str(b, sb, sizeof sb), tb ? "^T" : "", (long long)ka,
                             (long long)kb);
    c->out_dtypes[0] = dt;
    c->out_shapes[0] = psg_shape_2d(m, n);
    return 0;
}

static int infer_dense(psg_infer_ctx_t *c) {
    if (expect_f32(c) < 0 || psg_infer_expect_rank(c, 0, 2) < 0 ||
        psg_infer_expect_rank(c, 1, 2) < 0 || psg_infer_expect_rank(c, 2, 1) < 0)
        return -1;
    const psg_shape_t *x = &c->in_shapes[0], *w = &c->in_shapes[1], *b = &c->in_shapes[2];
    int64_t n = x->rank == 2 ? x->dims[0] : -1, kx = x->rank == 2 ? x->dims[1] : -1;
    int64_t kw = w->rank == 2 ? w->dims[0] : -1, m = w->rank == 2 ? w->dims[1] : -1;
    int64_t mb = b->rank == 1 ? b->dims[0] : -1;
    char sa[PSG_SHAPE_STR_MAX], sb[PSG_SHAPE_STR_MAX];
    if (kx >= 0 && kw >= 0 && kx != kw)
        return psg_error_set("x %s x w %s: inner dimensions %lld and %lld do not match",
                             psg_shape_str(x, sa, sizeof sa), psg_shape_str(w, sb, sizeof sb),
                             (long long)kx, (long long)kw);
    if (m >= 0 && mb >= 0 && m != mb)
        return psg_error_set("bias %s does not match w %s (%lld outputs)",
                             psg_shape_str(b, sa, sizeof sa), psg_shape_str(w, sb, sizeof sb),
                             (long long)m);
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = psg_shape_2d(n, m >= 0 ? m : mb);
    return 0;
}

static int infer_dense_backprop(psg_infer_ctx_t *c) {
    if (expect_f32(c) < 0 || psg_infer_expect_rank(c, 0, 2) < 0) return -1;
    psg_shape_t s;
    if (same_shapes(c, &s) < 0) return -1;
    c->out_dtypes[0] = c->out_dtypes[1] = PSG_DT_F32;
    c->out_shapes[0] = s;
    c->out_shapes[1] = psg_shape_1d(s.rank == 2 ? s.dims[1] : -1);
    return 0;
}

static int infer_concat(psg_infer_ctx_t *c) {
    int64_t axis = psg_node_get_int(c->node, "axis", 0);
    psg_shape_t out = psg_shape_unknown();
    for (int i = 0; i < c->num_inputs; i++) {
        if (c->in_dtypes[i] != c->in_dtypes[0])
            return psg_error_set("input %d is %s, input 0 is %s", i,
                                 psg_dtype_name(c->in_dtypes[i]), psg_dtype_name(c->in_dtypes[0]));
        if (out.rank < 0 && c->in_shapes[i].rank >= 0) out = c->in_shapes[i];
    }
    c->out_dtypes[0] = c->in_dtypes[0];
    if (out.rank < 0) {
        c->out_shapes[0] = out;
        return 0;
    }
    if (axis < -out.rank || axis >= out.rank)
        return psg_error_set("axis %lld is out of range for rank %d", (long long)axis, out.rank);
    if (axis < 0) axis += out.rank;
    out.dims[axis] = 0;
    for (int i = 0; i < c->num_inputs; i++) {
        const psg_shape_t *s = &c->in_shapes[i];
        char sa[PSG_SHAPE_STR_MAX], sb[PSG_SHAPE_STR_MAX];
        if (s->rank < 0) {
            out.dims[axis] = -1;
            continue;
        }
        bool ok = s->rank == out.rank;
        for (int d = 0; ok && d < out.rank; d++) {
            if (d == axis) continue;
            if (s->dims[d] >= 0 && out.dims[d] >= 0 && s->dims[d] != out.dims[d]) ok = false;
            if (out.dims[d] < 0) out.dims[d] = s->dims[d];
        }
        if (!ok)
            return psg_error_set("input %d has shape %s, which does not fit %s along axis %lld", i,
                                 psg_shape_str(s, sa, sizeof sa),
                                 psg_shape_str(&c->in_shapes[0], sb, sizeof sb), (long long)axis);
        if (out.dims[axis] >= 0)
            out.dims[axis] = s->dims[axis] < 0 ? -1 : out.dims[axis] + s->dims[axis];
    }
    c->out_shapes[0] = out;
    return 0;
}

/* The slice attrs of `node` checked against a tensor of shape x: the output
 * shape in *out. */
static int slice_shape(const psg_node_t *node, const psg_shape_t *x, psg_shape_t *out) {
    const psg_attr_t *b = psg_node_attr(node, "begin"), *s = psg_node_attr(node, "size");
    if (!b || b->type != PSG_ATTR_INTS || !s || s->type != PSG_ATTR_INTS ||
        b->u.ints.n != s->u.ints.n)
        return psg_error_set("needs int lists 'begin' and 'size' of one length");
    int rank = b->u.ints.n;
    if (x->rank >= 0 && x->rank != rank)
        return psg_error_set("begin and size have %d entries, the input has rank %d", rank,
                             x->rank);
    *out = (psg_shape_t){.rank = rank};
    for (int i = 0; i < rank; i++) {
        int64_t beg = b->u.ints.v[i], size = s->u.ints.v[i];
        int64_t dim = x->rank >= 0 ? x->dims[i] : -1;
        if (beg < 0 || size < -1 || (dim >= 0 && (beg > dim || (size >= 0 && beg + size > dim))))
            return psg_error_set("slice [%lld, +%lld) of axis %d is outside its size %lld",
                                 (long long)beg, (long long)size, i, (long long)dim);
        out->dims[i] = size >= 0 ? size : (dim >= 0 ? dim - beg : -1);
    }
    return 0;
}

static int infer_slice(psg_infer_ctx_t *c) {
    c->out_dtypes[0] = c->in_dtypes[0];
    return slice_shape(c->node, &c->in_shapes[0], &c->out_shapes[0]);
}

/* SliceGrad(dy, x): x's shape, dy's dtype; dy must fit the slice of x. */
static int infer_slice_grad(psg_infer_ctx_t *c) {
    psg_shape_t s;
    if (slice_shape(c->node, &c->in_shapes[1], &s) < 0) return -1;
    if (!psg_shape_compatible(&s, &c->in_shapes[0])) {
        char sa[PSG_SHAPE_STR_MAX], sb[PSG_SHAPE_STR_MAX];
        return psg_error_set("gradient %s does not match the slice %s",
                             psg_shape_str(&c->in_shapes[0], sa, sizeof sa),
                             psg_shape_str(&s, sb, sizeof sb));
    }
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = c->in_shapes[1];
    return 0;
}

static int infer_dropout(psg_infer_ctx_t *c) {
    if (infer_unary(c) < 0) return -1;
    double rate = psg_node_get_float(c->node, "rate", 0.0);
    if (!(rate >= 0.0 && rate < 1.0)) return psg_error_set("rate %g is outside [0, 1)", rate);
    c->out_dtypes[1] = PSG_DT_F32;
    c->out_shapes[1] = c->in_shapes[0];
    return 0;
}

static bool castable(psg_dtype_t dt, bool as_target) {
    if (dt == PSG_DT_F32 || dt == PSG_DT_I32 || dt == PSG_DT_I64 || dt == PSG_DT_BF16 ||
        dt == PSG_DT_F16)
        return true;
    return !as_target && (dt == PSG_DT_F64 || dt == PSG_DT_BOOL || dt == PSG_DT_U8);
}

static int infer_cast(psg_infer_ctx_t *c) {
    const psg_attr_t *a = psg_node_attr(c->node, "dtype");
    if (!a || a->type != PSG_ATTR_DTYPE) return psg_error_set("missing dtype attribute 'dtype'");
    if (!castable(a->u.dtype, true) || !castable(c->in_dtypes[0], false))
        return psg_error_set("cannot cast %s to %s", psg_dtype_name(c->in_dtypes[0]),
                             psg_dtype_name(a->u.dtype));
    c->out_dtypes[0] = a->u.dtype;
    c->out_shapes[0] = c->in_shapes[0];
    return 0;
}

/* ---- prepare: once per plan node (ops/params.h) ---- */

int psg_matmul_prepare(const psg_graph_t *g, const psg_node_t *n, void *params) {
    (void)g;
    psg_matmul_params_t *p = params;
    p->transpose_a = psg_node_get_bool(n, "transpose_a", false);
    p->transpose_b = psg_node_get_bool(n, "transpose_b", false);
    p->relu = psg_node_get_bool(n, "relu", false);
    return 0;
}

int psg_concat_prepare(const psg_graph_t *g, const psg_node_t *n, void *params) {
    (void)g;
    psg_concat_params_t *p = params;
    p->axis = (int)psg_node_get_int(n, "axis", 0);
    int rank = psg_node_output_shape(n, 0)->rank;
    if (p->axis < 0 && rank > 0) p->axis += rank;
    return 0;
}

/* The op of each psg_math_fn_t, in its order. */
static const char *const math_fn_ops[PSG_MATH_FN_COUNT] = {
    "Add",  "Sub",     "Mul",  "Div", "ReluGrad", "SigmoidGrad", "TanhGrad",
    "Neg",  "Square",  "Sqrt", "Exp", "Log",      "Pow",         "Scale",
    "Relu", "Sigmoid", "Tanh", "Sum", "Mean",     "Softmax",     "LogSoftmax",
};

int psg_math_fn_prepare(const psg_graph_t *g, const psg_node_t *n, void *params) {
    (void)g;
    psg_math_fn_params_t *p = params;
    for (int fn = 0; fn < PSG_MATH_FN_COUNT; fn++) {
        if (strcmp(psg_node_op(n), math_fn_ops[fn])) continue;
        p->fn = (psg_math_fn_t)fn;
        const char *constant = fn == PSG_MATH_POW     ? "exponent"
                               : fn == PSG_MATH_SCALE ? "scale"
                                                      : NULL;
        p->p = constant ? (float)psg_node_get_float(n, constant, 1.0) : 0.0f;
        return 0;
    }
    return psg_error_set("node '%s': op %s has no math function", psg_node_name(n), psg_node_op(n));
}

/* ---- gradients ---- */

static psg_endpoint_t out0(const psg_node_t *n) {
    return (psg_endpoint_t){psg_node_id(n), 0};
}

/* True when input i is known to have the output's shape at run time, so its
 * gradient needs no reduction: every dim equal, and an unknown dim only where
 * the other input cannot broadcast it. */
static bool input_is_output_shaped(psg_graph_t *g, const psg_node_t *n, int i) {
    const psg_shape_t *in = psg_graph_shape(g, psg_node_input(n, i));
    const psg_shape_t *other = psg_graph_shape(g, psg_node_input(n, 1 - i));
    const psg_shape_t *out = psg_node_output_shape(n, 0);
    if (in->rank < 0 || other->rank < 0 || in->rank != out->rank) return false;
    for (int d = 0; d < out->rank; d++) {
        int od = d - (out->rank - other->rank);
        if (in->dims[d] != out->dims[d]) return false;
        if (in->dims[d] < 0 && od >= 0 && other->dims[od] != 1) return false;
    }
    return true;
}

/* d reduced to input i's shape (the adjoint of broadcasting it). */
static psg_endpoint_t sum_to_input(psg_graph_t *g, const psg_node_t *n, int i, psg_endpoint_t d) {
    if (!psg_endpoint_valid(d) || input_is_output_shaped(g, n, i)) return d;
    return psg_sum_to_shape_of(g, NULL, d, psg_node_input(n, i));
}

static int done2(const psg_endpoint_t *dx) {
    return psg_endpoint_valid(dx[0]) && psg_endpoint_valid(dx[1]) ? 0 : -1;
}

static int grad_add(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    dx[0] = sum_to_input(g, n, 0, dy[0]);
    dx[1] = sum_to_input(g, n, 1, dy[0]);
    return done2(dx);
}

static int grad_sub(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    dx[0] = sum_to_input(g, n, 0, dy[0]);
    dx[1] = sum_to_input(g, n, 1, psg_neg(g, NULL, dy[0]));
    return done2(dx);
}

static int grad_mul(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    psg_endpoint_t a = psg_node_input(n, 0), b = psg_node_input(n, 1);
    dx[0] = sum_to_input(g, n, 0, psg_mul(g, NULL, dy[0], b));
    dx[1] = sum_to_input(g, n, 1, psg_mul(g, NULL, dy[0], a));
    return done2(dx);
}

static int grad_div(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    /* y = a / b: da = dy / b, db = -dy * y / b */
    psg_endpoint_t b = psg_node_input(n, 1);
    dx[0] = sum_to_input(g, n, 0, psg_div(g, NULL, dy[0], b));
    psg_endpoint_t t = psg_div(g, NULL, psg_mul(g, NULL, dy[0], out0(n)), b);
    dx[1] = sum_to_input(g, n, 1, psg_neg(g, NULL, t));
    return done2(dx);
}

static int done1(const psg_endpoint_t *dx) {
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

static int grad_neg(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    (void)n;
    dx[0] = psg_neg(g, NULL, dy[0]);
    return done1(dx);
}

static int grad_square(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                       psg_endpoint_t *dx) {
    dx[0] = psg_mul(g, NULL, dy[0], psg_scale(g, NULL, psg_node_input(n, 0), 2.0));
    return done1(dx);
}

static int grad_sqrt(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                     psg_endpoint_t *dx) {
    dx[0] = psg_div(g, NULL, psg_scale(g, NULL, dy[0], 0.5), out0(n));
    return done1(dx);
}

static int grad_exp(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    dx[0] = psg_mul(g, NULL, dy[0], out0(n));
    return done1(dx);
}

static int grad_log(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    dx[0] = psg_div(g, NULL, dy[0], psg_node_input(n, 0));
    return done1(dx);
}

static int grad_pow(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    double p = psg_node_get_float(n, "exponent", 1.0);
    psg_endpoint_t x = psg_node_input(n, 0);
    psg_endpoint_t d = p == 2.0 ? x : psg_pow(g, NULL, x, p - 1.0);
    dx[0] = p == 1.0 ? dy[0] : psg_mul(g, NULL, dy[0], psg_scale(g, NULL, d, p));
    return done1(dx);
}

static int grad_scale(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                      psg_endpoint_t *dx) {
    dx[0] = psg_scale(g, NULL, dy[0], psg_node_get_float(n, "scale", 1.0));
    return done1(dx);
}

/* The builder of the backprop op (ReluGrad, SigmoidGrad, TanhGrad) of the
 * activation that node n is. */
typedef psg_endpoint_t (*act_grad_fn)(psg_graph_t *g, const char *name, psg_endpoint_t dy,
                                      psg_endpoint_t y);
static act_grad_fn act_grad(const psg_node_t *n) {
    const char *op = psg_node_op(n);
    if (!strncmp(op, "Relu", 4)) return psg_relu_grad;
    return !strncmp(op, "Sigmoid", 7) ? psg_sigmoid_grad : psg_tanh_grad;
}

/* Relu, Sigmoid, Tanh: dx = their backprop op (dy, y). */
static int grad_activation(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                           psg_endpoint_t *dx) {
    dx[0] = act_grad(n)(g, NULL, dy[0], out0(n));
    return done1(dx);
}

/* ReluGrad(dy, y) is linear in dy and piecewise constant in y. */
static int grad_relu_grad(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                          psg_endpoint_t *dx) {
    dx[0] = psg_relu_grad(g, NULL, dy[0], psg_node_input(n, 1));
    dx[1] = PSG_NO_ENDPOINT;
    return done1(dx);
}

/* SigmoidGrad(d, y) = d y (1 - y): by d, SigmoidGrad(g, y); by y, g d (1 - 2y). */
static int grad_sigmoid_grad(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                             psg_endpoint_t *dx) {
    psg_endpoint_t d = psg_node_input(n, 0), y = psg_node_input(n, 1);
    dx[0] = psg_sigmoid_grad(g, NULL, dy[0], y);
    psg_endpoint_t gd = psg_mul(g, NULL, dy[0], d);
    dx[1] = psg_sub(g, NULL, gd, psg_scale(g, NULL, psg_mul(g, NULL, gd, y), 2.0));
    return done2(dx);
}

/* TanhGrad(d, y) = d (1 - y^2): by d, TanhGrad(g, y); by y, -2 g d y. */
static int grad_tanh_grad(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                          psg_endpoint_t *dx) {
    psg_endpoint_t d = psg_node_input(n, 0), y = psg_node_input(n, 1);
    dx[0] = psg_tanh_grad(g, NULL, dy[0], y);
    dx[1] = psg_scale(g, NULL, psg_mul(g, NULL, psg_mul(g, NULL, dy[0], d), y), -2.0);
    return done2(dx);
}

static const int64_t last_axis[1] = {-1};

/* y = softmax(x): dx = y * (dy - sum(dy * y, last axis)) */
static int grad_softmax(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                        psg_endpoint_t *dx) {
    psg_endpoint_t y = out0(n);
    psg_endpoint_t s = psg_sum(g, NULL, psg_mul(g, NULL, dy[0], y), 1, last_axis, true);
    dx[0] = psg_mul(g, NULL, psg_sub(g, NULL, dy[0], s), y);
    return done1(dx);
}

/* y = log_softmax(x): dx = dy - exp(y) * sum(dy, last axis) */
static int grad_log_softmax(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                            psg_endpoint_t *dx) {
    psg_endpoint_t s = psg_sum(g, NULL, dy[0], 1, last_axis, true);
    dx[0] = psg_sub(g, NULL, dy[0], psg_mul(g, NULL, psg_exp(g, NULL, out0(n)), s));
    return done1(dx);
}

static int grad_xent(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                     psg_endpoint_t *dx) {
    if (psg_endpoint_valid(dy[1]))
        return psg_error_set("no gradient through the backprop output (output 1)");
    static const int64_t col[1] = {1};
    psg_endpoint_t back = {psg_node_id(n), 1};
    dx[0] = psg_mul(g, NULL, back, psg_expand_dims(g, NULL, dy[0], 1, col));
    dx[1] = PSG_NO_ENDPOINT;
    return done1(dx);
}

static int grad_l2_loss(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                        psg_endpoint_t *dx) {
    dx[0] = psg_mul(g, NULL, psg_node_input(n, 0), dy[0]);
    return done1(dx);
}

/* A node like n (an op reading attr "axes") on x, with n's axes. */
static psg_endpoint_t with_axes(psg_graph_t *g, const char *op, const psg_node_t *n,
                                psg_endpoint_t x) {
    psg_node_builder_t *b = psg_node_begin(g, op, NULL);
    psg_node_add_input(b, x);
    const psg_attr_t *a = psg_node_attr(n, "axes");
    if (a && a->type == PSG_ATTR_INTS) psg_node_attr_ints(b, "axes", a->u.ints.n, a->u.ints.v);
    return psg_node_finish_ep(b);
}

/* Sum / Mean: dy with the reduced axes put back as 1s, broadcast like x,
 * and for Mean divided by the count (a constant when known when built). */
static int grad_reduce(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                       psg_endpoint_t *dx, bool mean) {
    psg_endpoint_t x = psg_node_input(n, 0);
    const psg_shape_t *xs = psg_graph_shape(g, x);
    if (xs->rank < 0) return psg_error_set("the gradient needs the input's rank when built");
    bool reduced[PSG_MAX_RANK];
    if (psg_math_reduced_axes(n, xs->rank, reduced) < 0) return -1;
    psg_endpoint_t d = dy[0];
    int64_t axes[PSG_MAX_RANK], count = 1;
    int na = 0;
    for (int i = 0; i < xs->rank; i++) {
        if (!reduced[i]) continue;
        axes[na++] = i;
        count = count < 0 || xs->dims[i] < 0 ? -1 : count * xs->dims[i];
    }
    if (na && !psg_node_get_bool(n, "keep_dims", false)) d = psg_expand_dims(g, NULL, d, na, axes);
    d = psg_broadcast_like(g, NULL, d, x);
    if (mean && count >= 0)
        d = psg_scale(g, NULL, d, count ? 1.0 / (double)count : 0.0);
    else if (mean)
        d = psg_div(g, NULL, d, with_axes(g, "ReductionSize", n, x));
    dx[0] = d;
    return done1(dx);
}

static int grad_sum(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                    psg_endpoint_t *dx) {
    return grad_reduce(g, n, dy, dx, false);
}

static int grad_mean(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                     psg_endpoint_t *dx) {
    return grad_reduce(g, n, dy, dx, true);
}

static int grad_expand_dims(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                            psg_endpoint_t *dx) {
    dx[0] = psg_reshape_like(g, NULL, dy[0], psg_node_input(n, 0));
    return done1(dx);
}

/* C = op(A) op(B); each case keeps to transpose flags, never a Transpose:
 *   A B:     dA = dC B^T,     dB = A^T dC
 *   A B^T:   dA = dC B,       dB = dC^T A
 *   A^T B:   dA = B dC^T,     dB = A dC
 *   A^T B^T: dA = B^T dC^T,   dB = dC^T A^T */
static int grad_matmul(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                       psg_endpoint_t *dx) {
    bool ta = psg_node_get_bool(n, "transpose_a", false);
    bool tb = psg_node_get_bool(n, "transpose_b", false);
    psg_endpoint_t a = psg_node_input(n, 0), b = psg_node_input(n, 1), d = dy[0];
    if (!ta && !tb) {
        dx[0] = psg_matmul(g, NULL, d, b, false, true);
        dx[1] = psg_matmul(g, NULL, a, d, true, false);
    } else if (!ta && tb) {
        dx[0] = psg_matmul(g, NULL, d, b, false, false);
        dx[1] = psg_matmul(g, NULL, d, a, true, false);
    } else if (ta && !tb) {
        dx[0] = psg_matmul(g, NULL, b, d, false, true);
        dx[1] = psg_matmul(g, NULL, a, d, false, false);
    } else {
        dx[0] = psg_matmul(g, NULL, b, d, true, true);
        dx[1] = psg_matmul(g, NULL, d, a, true, true);
    }
    return done2(dx);
}

/* Dense: one DenseBackprop node (ReLU mask and bias sums in one pass), then
 * dx = dz w^T and dw = x^T dz. */
static int grad_dense(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                      psg_endpoint_t *dx) {
    psg_node_builder_t *b = psg_node_begin(g, "DenseBackprop", NULL);
    psg_node_add_input(b, dy[0]);
    psg_node_add_input(b, out0(n));
    psg_node_attr_bool(b, "relu", psg_node_get_bool(n, "relu", false));
    int bp = psg_node_finish(b);
    if (bp < 0) return -1;
    psg_endpoint_t dz = {bp, 0};
    dx[0] = psg_matmul(g, NULL, dz, psg_node_input(n, 1), false, true);
    dx[1] = psg_matmul(g, NULL, psg_node_input(n, 0), dz, true, false);
    dx[2] = (psg_endpoint_t){bp, 1};
    return done2(dx);
}

static int grad_concat(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                       psg_endpoint_t *dx) {
    const psg_shape_t *out = psg_node_output_shape(n, 0);
    if (out->rank < 0) return psg_error_set("the gradient needs the output's rank when built");
    int64_t axis = psg_node_get_int(n, "axis", 0);
    if (axis < 0) axis += out->rank;
    int64_t begin[PSG_MAX_RANK] = {0}, size[PSG_MAX_RANK];
    for (int i = 0; i < out->rank; i++) size[i] = -1;
    for (int k = 0; k < psg_node_num_inputs(n); k++) {
        const psg_shape_t *s = psg_graph_shape(g, psg_node_input(n, k));
        if (s->rank < 0 || s->dims[axis] < 0)
            return psg_error_set("the gradient needs input %d's size along axis %lld when built", k,
                                 (long long)axis);
        size[axis] = s->dims[axis];
        dx[k] = psg_slice(g, NULL, dy[0], out->rank, begin, size);
        if (!psg_endpoint_valid(dx[k])) return -1;
        begin[axis] += s->dims[axis];
    }
    return 0;
}

static psg_endpoint_t slice_op(psg_graph_t *g, const char *op, const psg_node_t *like,
                               psg_endpoint_t x, psg_endpoint_t x2) {
    psg_node_builder_t *b = psg_node_begin(g, op, NULL);
    psg_node_add_input(b, x);
    if (psg_endpoint_valid(x2)) psg_node_add_input(b, x2);
    const psg_attr_t *be = psg_node_attr(like, "begin"), *sz = psg_node_attr(like, "size");
    psg_node_attr_ints(b, "begin", be->u.ints.n, be->u.ints.v);
    psg_node_attr_ints(b, "size", sz->u.ints.n, sz->u.ints.v);
    return psg_node_finish_ep(b);
}

static int grad_slice(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                      psg_endpoint_t *dx) {
    dx[0] = slice_op(g, "SliceGrad", n, dy[0], psg_node_input(n, 0));
    return done1(dx);
}

static int grad_slice_grad(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                           psg_endpoint_t *dx) {
    dx[0] = slice_op(g, "Slice", n, dy[0], PSG_NO_ENDPOINT);
    dx[1] = PSG_NO_ENDPOINT;
    return done1(dx);
}

static int grad_dropout(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                        psg_endpoint_t *dx) {
    if (!psg_endpoint_valid(dy[0])) return 0; /* only the mask is used: no gradient */
    dx[0] = psg_mul(g, NULL, dy[0], (psg_endpoint_t){psg_node_id(n), 1});
    return done1(dx);
}

static bool is_float(psg_dtype_t dt) {
    return dt == PSG_DT_F32 || dt == PSG_DT_BF16 || dt == PSG_DT_F16;
}

/* Between float dtypes the cast is the identity up to rounding: the gradient
 * is dy cast back to the input's dtype (mixed precision's f32 <-> bf16). */
static int grad_cast(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                     psg_endpoint_t *dx) {
    psg_dtype_t from = psg_graph_dtype(g, psg_node_input(n, 0));
    if (!is_float(from) || !is_float(psg_node_output_dtype(n, 0))) return 0;
    dx[0] = from == psg_graph_dtype(g, dy[0]) ? dy[0] : psg_cast(g, NULL, dy[0], from);
    return done1(dx);
}

/* ---- defs ---- */

/* A def: its fields, then the optional ones (`...`: at least one designated field). */
#define DEF_OP(var, op_name, nin, nout, infer_fn, grad_fn, cpu_fn, cuda_fn, ...)                   \
    static const psg_op_def_t var = {.name = op_name,                                              \
                                     .num_inputs = nin,                                            \
                                     .num_outputs = nout,                                          \
                                     .infer = infer_fn,                                            \
                                     .grad = grad_fn,                                              \
                                     .cpu = cpu_fn,                                                \
                                     .cuda = PSG_GPU_KERNEL(cuda_fn),                              \
                                     __VA_ARGS__};
#define DEF(var, op_name, nin, nout, infer_fn, grad_fn, cpu_fn, cuda_fn)                           \
    DEF_OP(var, op_name, nin, nout, infer_fn, grad_fn, cpu_fn, cuda_fn, .prepare = NULL)
/* A def whose kernels read a prepared struct (ops/params.h). */
#define DEF_PREPARED(var, op_name, nin, nout, infer_fn, grad_fn, cpu_fn, cuda_fn, prepare_fn,      \
                     params_type)                                                                  \
    DEF_OP(var, op_name, nin, nout, infer_fn, grad_fn, cpu_fn, cuda_fn, .prepare = prepare_fn,     \
           .params_size = sizeof(params_type))
/* A def of the math functions (psg_math_fn_t): kind is binary, unary, reduce or softmax. */
#define DEF_FN(var, op_name, nin, infer_fn, grad_fn, kind)                                         \
    DEF_PREPARED(var, op_name, nin, 1, infer_fn, grad_fn, psg_cpu_##kind, psg_gpu_##kind,          \
                 psg_math_fn_prepare, psg_math_fn_params_t)

DEF_FN(op_add, "Add", 2, infer_binary, grad_add, binary)
DEF_FN(op_sub, "Sub", 2, infer_binary, grad_sub, binary)
DEF_FN(op_mul, "Mul", 2, infer_binary, grad_mul, binary)
DEF_FN(op_div, "Div", 2, infer_binary, grad_div, binary)
DEF_FN(op_neg, "Neg", 1, infer_unary, grad_neg, unary)
DEF_FN(op_square, "Square", 1, infer_unary, grad_square, unary)
DEF_FN(op_sqrt, "Sqrt", 1, infer_unary, grad_sqrt, unary)
DEF_FN(op_exp, "Exp", 1, infer_unary, grad_exp, unary)
DEF_FN(op_log, "Log", 1, infer_unary, grad_log, unary)
DEF_FN(op_pow, "Pow", 1, infer_unary, grad_pow, unary)
DEF_FN(op_scale, "Scale", 1, infer_unary, grad_scale, unary)
DEF_FN(op_relu, "Relu", 1, infer_unary, grad_activation, unary)
DEF_FN(op_sigmoid, "Sigmoid", 1, infer_unary, grad_activation, unary)
DEF_FN(op_tanh, "Tanh", 1, infer_unary, grad_activation, unary)
DEF_FN(op_relu_grad, "ReluGrad", 2, infer_act_grad, grad_relu_grad, binary)
DEF_FN(op_sigmoid_grad, "SigmoidGrad", 2, infer_act_grad, grad_sigmoid_grad, binary)
DEF_FN(op_tanh_grad, "TanhGrad", 2, infer_act_grad, grad_tanh_grad, binary)
DEF_FN(op_softmax, "Softmax", 1, infer_softmax, grad_softmax, softmax)
DEF_FN(op_log_softmax, "LogSoftmax", 1, infer_softmax, grad_log_softmax, softmax)
DEF(op_xent, "SparseSoftmaxCrossEntropyWithLogits", 2, 2, infer_xent, grad_xent,
    psg_cpu_sparse_xent, psg_gpu_sparse_xent)
DEF(op_l2_loss, "L2Loss", 1, 1, infer_scalar_f32, grad_l2_loss, psg_cpu_l2_loss, psg_gpu_l2_loss)
DEF_FN(op_sum, "Sum", 1, psg_math_infer_reduce, grad_sum, reduce)
DEF_FN(op_mean, "Mean", 1, psg_math_infer_reduce, grad_mean, reduce)
DEF(op_reduction_size, "ReductionSize", 1, 1, infer_reduction_size, psg_grad_none,
    psg_cpu_reduction_size, psg_gpu_reduction_size)
/* ExpandDims only aliases: its CPU kernel serves on a GPU too */
static const psg_op_def_t op_expand_dims = {.name = "ExpandDims",
                                            .num_inputs = 1,
                                            .num_outputs = 1,
                                            .infer = infer_expand_dims,
                                            .grad = grad_expand_dims,
                                            .cpu = psg_cpu_reshape,
                                            .cuda = PSG_GPU_SAME(psg_cpu_reshape)};
DEF(op_argmax, "ArgMax", 1, 1, infer_argmax, psg_grad_none, psg_cpu_argmax, psg_gpu_argmax)
DEF(op_equal, "Equal", 2, 1, infer_equal, psg_grad_none, psg_cpu_equal, psg_gpu_equal)
DEF_PREPARED(op_matmul, "MatMul", 2, 1, infer_matmul, grad_matmul, psg_cpu_matmul, psg_gpu_matmul,
             psg_matmul_prepare, psg_matmul_params_t)
DEF_PREPARED(op_dense, "Dense", 3, 1, infer_dense, grad_dense, psg_cpu_dense, psg_gpu_dense,
             psg_matmul_prepare, psg_matmul_params_t)
DEF_PREPARED(op_dense_backprop, "DenseBackprop", 2, 2, infer_dense_backprop, NULL,
             psg_cpu_dense_backprop, psg_gpu_dense_backprop, psg_matmul_prepare,
             psg_matmul_params_t)
DEF_PREPARED(op_concat, "Concat", -1, 1, infer_concat, grad_concat, psg_cpu_concat, psg_gpu_concat,
             psg_concat_prepare, psg_concat_params_t)
DEF(op_slice, "Slice", 1, 1, infer_slice, grad_slice, psg_cpu_slice, psg_gpu_slice)
DEF(op_slice_grad, "SliceGrad", 2, 1, infer_slice_grad, grad_slice_grad, psg_cpu_slice_grad,
    psg_gpu_slice_grad)
DEF(op_cast, "Cast", 1, 1, infer_cast, grad_cast, psg_cpu_cast, psg_gpu_cast)
static const psg_op_def_t op_dropout = {.name = "Dropout",
                                        .num_inputs = 1,
                                        .num_outputs = 2,
                                        .flags = PSG_OP_STATEFUL,
                                        .infer = infer_dropout,
                                        .grad = grad_dropout,
                                        .cpu = psg_cpu_dropout,
                                        .cuda = PSG_GPU_KERNEL(psg_gpu_dropout)};

const psg_op_def_t *const psg_math_ops[] = {
    &op_add,          &op_sub,       &op_mul,
    &op_div,          &op_neg,       &op_square,
    &op_sqrt,         &op_exp,       &op_log,
    &op_pow,          &op_scale,     &op_relu,
    &op_sigmoid,      &op_tanh,      &op_relu_grad,
    &op_sigmoid_grad, &op_tanh_grad, &op_softmax,
    &op_log_softmax,  &op_xent,      &op_l2_loss,
    &op_sum,          &op_mean,      &op_reduction_size,
    &op_expand_dims,  &op_argmax,    &op_equal,
    &op_matmul,       &op_dense,     &op_dense_backprop,
    &op_concat,       &op_slice,     &op_slice_grad,
    &op_cast,         &op_dropout,   NULL,
};
