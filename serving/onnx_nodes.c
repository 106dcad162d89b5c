/* The ONNX form of each psgraph op the writer knows: one table row per op, each emitter
 * reading the node's attributes as its kernel does and adding opset-17 nodes. Rank-4
 * tensors are NHWC in psgraph and NCHW in ONNX's Conv, pools and BatchNormalization:
 * layout-neutral ops (activations, BiasAdd, Concat on channels, the global mean) keep
 * a tensor in NCHW, so a network transposes once in and once out. Not the walk
 * (serving/onnx_export.c). */
#include "serving/onnx_internal.h"

#include "psgraph/error.h"
#include "psgraph/op.h"
#include "psgraph/ops_train.h"

#include <stdint.h>
#include <string.h>

typedef int (*emit_fn)(ox_t *x, const psg_node_t *n, const char *onnx_op);

static const psg_shape_t *in_shape(ox_t *x, const psg_node_t *n, int i) {
    return psg_graph_shape(x->g, psg_node_input(n, i));
}

static const psg_attr_t *ints_attr(const psg_node_t *n, const char *key) {
    const psg_attr_t *a = psg_node_attr(n, key);
    return a && a->type == PSG_ATTR_INTS ? a : NULL;
}

/* One ONNX node of op_type from the listed input values to node n's output 0. */
static Onnx__NodeProto *simple(ox_t *x, const psg_node_t *n, const char *op_type, int n_in,
                               const char *const *in, bool nchw) {
    const char *out = ox_out_name(x, n, 0);
    Onnx__NodeProto *node = ox_node(x, op_type, psg_node_name(n), n_in, in, 1, &out);
    ox_set_out(x, n, 0, out, nchw);
    return node;
}

/* ---- values without computation ---- */

static int emit_alias(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    psg_endpoint_t e = psg_node_input(n, 0);
    const ox_value_t *v = &x->vals[e.node * PSG_MAX_OUTPUTS + e.index];
    x->vals[psg_node_id(n) * PSG_MAX_OUTPUTS] = *v;
    return 0;
}

static int emit_variable(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    const char *name = psg_variable_name(x->g, (psg_endpoint_t){psg_node_id(n), 0});
    psg_variable_t *v = x->spec->values ? psg_resource_find_variable(x->spec->values, name) : NULL;
    if (!v || !v->initialized) return psg_error_set("variable '%s' has no value to export", name);
    if (!ox_elem_type(v->dtype))
        return psg_error_set("variable '%s' is of dtype %s, which ONNX has no form of", name,
                             psg_dtype_name(v->dtype));
    const char *init = ox_initializer(x, name, v->dtype, &v->shape, v->value->data);
    if (!init) return -1;
    ox_set_out(x, n, 0, init, false);
    return 0;
}

static int emit_const(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    const psg_attr_t *a = psg_node_attr(n, "value");
    if (!a || a->type != PSG_ATTR_TENSOR) return psg_error_set("no 'value' tensor");
    const psg_tensor_t *t = a->u.tensor;
    if (!ox_elem_type(t->dtype))
        return psg_error_set("a constant of dtype %s", psg_dtype_name(t->dtype));
    const char *init = ox_initializer(x, psg_node_name(n), t->dtype, &t->shape, t->data);
    if (!init) return -1;
    ox_set_out(x, n, 0, init, false);
    return 0;
}

static int emit_placeholder(ox_t *x, const psg_node_t *n, const char *op) {
    (void)x, (void)n, (void)op;
    return psg_error_set("a placeholder the outputs need is not among the export's inputs");
}

static int emit_training_only(ox_t *x, const psg_node_t *n, const char *op) {
    (void)x, (void)n, (void)op;
    return psg_error_set("runs only in training: build the graph with is_training false");
}

/* ---- elementwise ---- */

/* A unary op keeps its input's layout. */
static int emit_unary(ox_t *x, const psg_node_t *n, const char *op) {
    bool nchw = ox_in_is_nchw(x, n, 0);
    const char *in = nchw ? ox_in_nchw(x, n, 0) : ox_in(x, n, 0);
    simple(x, n, op, 1, &in, nchw);
    return 0;
}

static int emit_square(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    bool nchw = ox_in_is_nchw(x, n, 0);
    const char *in = nchw ? ox_in_nchw(x, n, 0) : ox_in(x, n, 0);
    simple(x, n, "Mul", 2, (const char *[]){in, in}, nchw);
    return 0;
}

/* Scale (x * s) and Pow (x ^ e): a constant second operand. */
static int emit_with_constant(ox_t *x, const psg_node_t *n, const char *op) {
    bool pow = !strcmp(op, "Pow");
    bool nchw = ox_in_is_nchw(x, n, 0);
    const char *in = nchw ? ox_in_nchw(x, n, 0) : ox_in(x, n, 0);
    float c = (float)psg_node_get_float(n, pow ? "exponent" : "scale", 1.0);
    simple(x, n, op, 2, (const char *[]){in, ox_const_f32(x, psg_node_name(n), c)}, nchw);
    return 0;
}

/* Broadcasting binary ops: NCHW only when both sides are rank-4 tensors already in it. */
static int emit_binary(ox_t *x, const psg_node_t *n, const char *op) {
    bool nchw = ox_in_is_nchw(x, n, 0) && ox_in_is_nchw(x, n, 1);
    const char *a = nchw ? ox_in_nchw(x, n, 0) : ox_in(x, n, 0);
    const char *b = nchw ? ox_in_nchw(x, n, 1) : ox_in(x, n, 1);
    simple(x, n, op, 2, (const char *[]){a, b}, nchw);
    return 0;
}

static int emit_add_n(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    int k = psg_node_num_inputs(n);
    const char *in[64];
    if (k > 64) return psg_error_set("AddN of %d inputs (at most 64 export)", k);
    for (int i = 0; i < k; i++) in[i] = ox_in(x, n, i);
    simple(x, n, "Sum", k, in, false);
    return 0;
}

static int emit_cast(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    const psg_attr_t *a = psg_node_attr(n, "dtype");
    int to = a && a->type == PSG_ATTR_DTYPE ? ox_elem_type(a->u.dtype) : 0;
    if (!to) return psg_error_set("a cast to a dtype ONNX has no form of");
    bool nchw = ox_in_is_nchw(x, n, 0);
    const char *in = nchw ? ox_in_nchw(x, n, 0) : ox_in(x, n, 0);
    ox_attr_int(x, simple(x, n, "Cast", 1, &in, nchw), "to", to);
    return 0;
}

/* BiasAdd: x [..., C] + b [C]; in NCHW the bias as [C, 1, 1]. */
static int emit_bias_add(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    bool nchw = ox_in_is_nchw(x, n, 0) && in_shape(x, n, 0)->rank == 4;
    const char *b = ox_in(x, n, 1);
    if (nchw) {
        const char *shape = ox_const_i64(x, psg_node_name(n), 3, (const int64_t[]){-1, 1, 1});
        const char *r = ox_fresh(x, psg_node_name(n), "bias_chw");
        ox_node(x, "Reshape", r, 2, (const char *[]){b, shape}, 1, &r);
        b = r;
    }
    const char *in = nchw ? ox_in_nchw(x, n, 0) : ox_in(x, n, 0);
    simple(x, n, "Add", 2, (const char *[]){in, b}, nchw);
    return 0;
}

/* ---- products ---- */

static const char *transpose2(ox_t *x, const psg_node_t *n, const char *in) {
    const char *t = ox_fresh(x, psg_node_name(n), "t");
    ox_attr_ints(x, ox_node(x, "Transpose", t, 1, &in, 1, &t), "perm", 2, (const int64_t[]){1, 0});
    return t;
}

static int emit_matmul(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    const char *a = ox_in(x, n, 0), *b = ox_in(x, n, 1);
    bool ta = psg_node_get_bool(n, "transpose_a", false),
         tb = psg_node_get_bool(n, "transpose_b", false);
    if ((ta || tb) && (in_shape(x, n, 0)->rank != 2 || in_shape(x, n, 1)->rank != 2))
        return psg_error_set("a transposed batched MatMul");
    if (ta) a = transpose2(x, n, a);
    if (tb) b = transpose2(x, n, b);
    simple(x, n, "MatMul", 2, (const char *[]){a, b}, false);
    return 0;
}

/* Dense: x [N, in] w [in, out] + b [out], then ReLU when asked: Gemm (+ Relu). */
static int emit_dense(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    if (in_shape(x, n, 0)->rank != 2)
        return psg_error_set("a Dense of rank-%d input", in_shape(x, n, 0)->rank);
    const char *in[3] = {ox_in(x, n, 0), ox_in(x, n, 1), ox_in(x, n, 2)};
    if (!psg_node_get_bool(n, "relu", false)) {
        simple(x, n, "Gemm", 3, in, false);
        return 0;
    }
    const char *y = ox_fresh(x, psg_node_name(n), "gemm");
    ox_node(x, "Gemm", y, 3, in, 1, &y);
    simple(x, n, "Relu", 1, &y, false);
    return 0;
}

/* ---- the NCHW ops ---- */

/* ONNX's pads [top, left, bottom, right] for psgraph's SAME (TensorFlow's: the odd cell
 * at the end) or VALID window over an input of in[0] x in[1]. */
static int pads_of(const char *padding, const int64_t in[2], int64_t kh, int64_t kw, int64_t sh,
                   int64_t sw, int64_t pads[4]) {
    memset(pads, 0, 4 * sizeof *pads);
    if (strcmp(padding, "SAME")) return 0;
    int64_t k[2] = {kh, kw}, st[2] = {sh, sw};
    for (int d = 0; d < 2; d++) {
        if (in[d] < 0) return psg_error_set("SAME padding over an unknown spatial size");
        int64_t out = (in[d] + st[d] - 1) / st[d];
        int64_t total = (out - 1) * st[d] + k[d] - in[d];
        if (total < 0) total = 0;
        pads[d] = total / 2;
        pads[d + 2] = total - total / 2;
    }
    return 0;
}

/* pads_of the window of node n (its "padding") over its input 0. */
static int window_pads(ox_t *x, const psg_node_t *n, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                       int64_t pads[4]) {
    const psg_shape_t *s = in_shape(x, n, 0);
    const int64_t in[2] = {s->dims[1], s->dims[2]};
    return pads_of(psg_node_get_str(n, "padding", "VALID"), in, kh, kw, sh, sw, pads);
}

static int pair(const psg_node_t *n, const char *key, int64_t *h, int64_t *w) {
    const psg_attr_t *a = ints_attr(n, key);
    if (a && a->u.ints.n == 2) {
        *h = a->u.ints.v[0], *w = a->u.ints.v[1];
        return 0;
    }
    if (a && a->u.ints.n == 4) {
        *h = a->u.ints.v[1], *w = a->u.ints.v[2];
        return 0;
    }
    return psg_error_set("attribute '%s' is not [h, w]", key);
}

/* FusedConv2D's pool after the conv's output y (NCHW, of spatial size out): a MaxPool to node n's
 * output. */
static int emit_fused_pool(ox_t *x, const psg_node_t *n, const char *y, const int64_t out[2]) {
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, pads[4];
    if (pair(n, "pool_ksize", &kh, &kw) < 0 || pair(n, "pool_strides", &sh, &sw) < 0 ||
        pads_of(psg_node_get_str(n, "pool_padding", "VALID"), out, kh, kw, sh, sw, pads) < 0)
        return -1;
    Onnx__NodeProto *p = simple(x, n, "MaxPool", 1, &y, true);
    ox_attr_ints(x, p, "kernel_shape", 2, (const int64_t[]){kh, kw});
    ox_attr_ints(x, p, "strides", 2, (const int64_t[]){sh, sw});
    ox_attr_ints(x, p, "pads", 4, pads);
    return 0;
}

/* One node of a conv layer's chain: op of in, giving node n's output when last, else a fresh
 * name, in *y either way. */
static Onnx__NodeProto *chain_step(ox_t *x, const psg_node_t *n, const char *op, int n_in,
                                   const char *const *in, bool last, const char **y) {
    if (last) {
        Onnx__NodeProto *p = simple(x, n, op, n_in, in, true);
        *y = ox_out_name(x, n, 0);
        return p;
    }
    const char *out = ox_fresh(x, psg_node_name(n), op);
    *y = out;
    return ox_node(x, op, out, n_in, in, 1, &out);
}

/* Conv2D: Conv of the NCHW input and the OIHW filter; FusedConv2D: the same with its bias as
 * Conv's third input, or followed by BatchNormalization (its batch norm form), then Relu and
 * MaxPool when the node has them. */
static int emit_conv(ox_t *x, const psg_node_t *n, const char *op) {
    const psg_shape_t *f = in_shape(x, n, 1), *s = in_shape(x, n, 0);
    int64_t sh = 1, sw = 1, pads[4];
    if (f->rank != 4 || pair(n, "strides", &sh, &sw) < 0)
        return psg_error_set("a Conv2D without a 4-d filter and strides");
    if (window_pads(x, n, f->dims[0], f->dims[1], sh, sw, pads) < 0) return -1;
    const char *w = ox_in(x, n, 1), *oihw = ox_fresh(x, psg_node_name(n), "oihw");
    ox_attr_ints(x, ox_node(x, "Transpose", oihw, 1, &w, 1, &oihw), "perm", 4,
                 (const int64_t[]){3, 2, 0, 1});
    (void)op;
    bool fused = !strcmp(psg_node_op(n), "FusedConv2D"), bn = fused && psg_node_num_inputs(n) == 6;
    bool relu = fused && psg_node_get_bool(n, "relu", false);
    bool pool = fused && psg_node_attr(n, "pool_ksize");
    int after = bn + relu + pool; /* the chain's nodes after the Conv */
    const char *in[3] = {ox_in_nchw(x, n, 0), oihw, fused && !bn ? ox_in(x, n, 2) : NULL}, *y;
    Onnx__NodeProto *c = chain_step(x, n, "Conv", in[2] ? 3 : 2, in, after == 0, &y);
    ox_attr_ints(x, c, "kernel_shape", 2, (const int64_t[]){f->dims[0], f->dims[1]});
    ox_attr_ints(x, c, "strides", 2, (const int64_t[]){sh, sw});
    ox_attr_ints(x, c, "pads", 4, pads);
    if (bn) {
        const char *b[5] = {y, ox_in(x, n, 2), ox_in(x, n, 3), ox_in(x, n, 4), ox_in(x, n, 5)};
        ox_attr_float(x, chain_step(x, n, "BatchNormalization", 5, b, --after == 0, &y), "epsilon",
                      (float)psg_node_get_float(n, "epsilon", 1e-3));
    }
    if (relu) chain_step(x, n, "Relu", 1, (const char *[]){y}, --after == 0, &y);
    if (!pool) return 0;
    /* the conv's output size: the pool's input (TensorFlow's SAME: ceil(in / stride)) */
    int64_t st[2] = {sh, sw}, out[2];
    for (int d = 0; d < 2; d++) {
        int64_t i = s->dims[1 + d], k = f->dims[d];
        out[d] = !strcmp(psg_node_get_str(n, "padding", "VALID"), "SAME") ? (i + st[d] - 1) / st[d]
                                                                          : (i - k) / st[d] + 1;
    }
    return emit_fused_pool(x, n, y, out);
}

static int emit_pool(ox_t *x, const psg_node_t *n, const char *op) {
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, pads[4];
    if (pair(n, "ksize", &kh, &kw) < 0 || pair(n, "strides", &sh, &sw) < 0) return -1;
    if (window_pads(x, n, kh, kw, sh, sw, pads) < 0) return -1;
    const char *in = ox_in_nchw(x, n, 0);
    Onnx__NodeProto *p = simple(x, n, op, 1, &in, true);
    ox_attr_ints(x, p, "kernel_shape", 2, (const int64_t[]){kh, kw});
    ox_attr_ints(x, p, "strides", 2, (const int64_t[]){sh, sw});
    ox_attr_ints(x, p, "pads", 4, pads);
    /* AveragePool's default count_include_pad = 0 averages over the cells inside the
     * input, as psgraph (and TensorFlow) do with SAME */
    return 0;
}

static int emit_batch_norm(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    if (psg_node_get_bool(n, "is_training", true))
        return psg_error_set(
            "batch norm in training mode (batch statistics): build the graph with is_training false");
    if (in_shape(x, n, 0)->rank != 4)
        return psg_error_set("batch norm of a rank-%d input", in_shape(x, n, 0)->rank);
    const char *in[5] = {ox_in_nchw(x, n, 0), ox_in(x, n, 1), ox_in(x, n, 2), ox_in(x, n, 3),
                         ox_in(x, n, 4)};
    Onnx__NodeProto *bn = simple(x, n, "BatchNormalization", 5, in, true);
    ox_attr_float(x, bn, "epsilon", (float)psg_node_get_float(n, "epsilon", 1e-3));
    return 0;
}

/* ---- shapes ---- */

static int emit_reshape(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    const psg_attr_t *a = psg_node_attr(n, "shape");
    if (!a || a->type != PSG_ATTR_SHAPE) return psg_error_set("no 'shape' attribute");
    const char *shape = ox_const_i64(x, psg_node_name(n), a->u.shape.rank, a->u.shape.dims);
    simple(x, n, "Reshape", 2, (const char *[]){ox_in(x, n, 0), shape}, false);
    return 0;
}

static int emit_expand_dims(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    const psg_attr_t *a = ints_attr(n, "axes");
    if (!a) return psg_error_set("no 'axes' attribute");
    const char *axes = ox_const_i64(x, psg_node_name(n), a->u.ints.n, a->u.ints.v);
    simple(x, n, "Unsqueeze", 2, (const char *[]){ox_in(x, n, 0), axes}, false);
    return 0;
}

static int emit_concat(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    int k = psg_node_num_inputs(n), rank = in_shape(x, n, 0)->rank;
    int64_t axis = psg_node_get_int(n, "axis", 0);
    if (axis < 0) axis += rank;
    bool nchw = rank == 4 && axis == 3;
    for (int i = 0; nchw && i < k; i++) nchw = ox_in_is_nchw(x, n, i);
    const char *in[256];
    if (k > 256) return psg_error_set("a Concat of %d inputs (at most 256 export)", k);
    for (int i = 0; i < k; i++) in[i] = nchw ? ox_in_nchw(x, n, i) : ox_in(x, n, i);
    ox_attr_int(x, simple(x, n, "Concat", k, in, nchw), "axis", nchw ? 1 : axis);
    return 0;
}

static int emit_slice(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    const psg_attr_t *b = ints_attr(n, "begin"), *s = ints_attr(n, "size");
    if (!b || !s || b->u.ints.n != s->u.ints.n || b->u.ints.n > PSG_MAX_RANK)
        return psg_error_set("'begin' and 'size' must be lists of one length");
    int r = b->u.ints.n;
    int64_t ends[PSG_MAX_RANK], axes[PSG_MAX_RANK];
    for (int d = 0; d < r; d++) {
        ends[d] = s->u.ints.v[d] < 0 ? INT64_MAX : b->u.ints.v[d] + s->u.ints.v[d];
        axes[d] = d;
    }
    const char *name = psg_node_name(n);
    simple(x, n, "Slice", 4,
           (const char *[]){ox_in(x, n, 0), ox_const_i64(x, name, r, b->u.ints.v),
                            ox_const_i64(x, name, r, ends), ox_const_i64(x, name, r, axes)},
           false);
    return 0;
}

/* Sum and Mean over "axes" (none: all). The global mean of an NCHW tensor over H and W
 * stays in NCHW (it gives [N, C] either way). */
static int emit_reduce(ox_t *x, const psg_node_t *n, const char *op) {
    const psg_attr_t *a = ints_attr(n, "axes");
    bool keep = psg_node_get_bool(n, "keep_dims", false);
    int rank = in_shape(x, n, 0)->rank, k = a ? a->u.ints.n : 0;
    int64_t axes[PSG_MAX_RANK];
    if (k > PSG_MAX_RANK) return psg_error_set("%d axes", k);
    for (int i = 0; i < k; i++)
        axes[i] = a->u.ints.v[i] < 0 ? a->u.ints.v[i] + rank : a->u.ints.v[i];
    bool nchw = rank == 4 && !keep && k == 2 && ox_in_is_nchw(x, n, 0) &&
                ((axes[0] == 1 && axes[1] == 2) || (axes[0] == 2 && axes[1] == 1));
    if (nchw) axes[0] = 2, axes[1] = 3;
    const char *in = nchw ? ox_in_nchw(x, n, 0) : ox_in(x, n, 0);
    Onnx__NodeProto *r;
    if (!strcmp(op, "ReduceSum")) { /* opset 13: axes is an input */
        const char *ins[2] = {in, k ? ox_const_i64(x, psg_node_name(n), k, axes) : NULL};
        r = simple(x, n, op, k ? 2 : 1, ins, false);
    } else {
        r = simple(x, n, op, 1, &in, false);
        if (k) ox_attr_ints(x, r, "axes", k, axes);
    }
    ox_attr_int(x, r, "keepdims", keep);
    return 0;
}

/* Softmax, LogSoftmax and ArgMax over the last axis. */
static int emit_last_axis(ox_t *x, const psg_node_t *n, const char *op) {
    const char *in = ox_in(x, n, 0);
    Onnx__NodeProto *r = simple(x, n, op, 1, &in, false);
    ox_attr_int(x, r, "axis", -1);
    if (!strcmp(op, "ArgMax")) ox_attr_int(x, r, "keepdims", 0);
    return 0;
}

/* ---- gathers ---- */

static int emit_gather(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    if (psg_node_get_bool(n, "negative_is_zero", false))
        return psg_error_set("a gather that zeroes negative ids");
    simple(x, n, "Gather", 2, (const char *[]){ox_in(x, n, 0), ox_in(x, n, 1)}, false);
    return 0;
}

/* Unique: ONNX's unsorted Unique (first occurrences in order, as psgraph's); psgraph's
 * second output is ONNX's inverse_indices, as i32. */
static int emit_unique(ox_t *x, const psg_node_t *n, const char *op) {
    (void)op;
    const char *in = ox_in(x, n, 0), *y = ox_out_name(x, n, 0),
               *inv = ox_fresh(x, psg_node_name(n), "inverse");
    const char *outs[3] = {y, ox_fresh(x, psg_node_name(n), "indices"), inv};
    ox_attr_int(x, ox_node(x, "Unique", psg_node_name(n), 1, &in, 3, outs), "sorted", 0);
    ox_set_out(x, n, 0, y, false);
    const char *idx = ox_out_name(x, n, 1);
    Onnx__NodeProto *c = ox_node(x, "Cast", idx, 1, &inv, 1, &idx);
    ox_attr_int(x, c, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
    ox_set_out(x, n, 1, idx, false);
    return 0;
}

/* ---- the table ---- */

static const struct {
    const char *op;      /* psgraph's */
    const char *onnx_op; /* the main ONNX node, passed to emit */
    emit_fn emit;
} forms[] = {
    {"Placeholder", NULL, emit_placeholder},
    {"VarHandle", NULL, emit_variable},
    {"ReadVariable", NULL, emit_alias},
    {"Identity", NULL, emit_alias},
    {"StopGradient", NULL, emit_alias},
    {"Const", NULL, emit_const},
    {"Relu", "Relu", emit_unary},
    {"Sigmoid", "Sigmoid", emit_unary},
    {"Tanh", "Tanh", emit_unary},
    {"Exp", "Exp", emit_unary},
    {"Log", "Log", emit_unary},
    {"Sqrt", "Sqrt", emit_unary},
    {"Neg", "Neg", emit_unary},
    {"Square", "Mul", emit_square},
    {"Scale", "Mul", emit_with_constant},
    {"Pow", "Pow", emit_with_constant},
    {"Add", "Add", emit_binary},
    {"Sub", "Sub", emit_binary},
    {"Mul", "Mul", emit_binary},
    {"Div", "Div", emit_binary},
    {"Equal", "Equal", emit_binary},
    {"AddN", "Sum", emit_add_n},
    {"Cast", "Cast", emit_cast},
    {"BiasAdd", "Add", emit_bias_add},
    {"MatMul", "MatMul", emit_matmul},
    {"Dense", "Gemm", emit_dense},
    {"Conv2D", "Conv", emit_conv},
    {"FusedConv2D", "Conv", emit_conv},
    {"MaxPool", "MaxPool", emit_pool},
    {"AvgPool", "AveragePool", emit_pool},
    {"FusedBatchNorm", "BatchNormalization", emit_batch_norm},
    {"Reshape", "Reshape", emit_reshape},
    {"ExpandDims", "Unsqueeze", emit_expand_dims},
    {"Concat", "Concat", emit_concat},
    {"Slice", "Slice", emit_slice},
    {"Sum", "ReduceSum", emit_reduce},
    {"Mean", "ReduceMean", emit_reduce},
    {"Softmax", "Softmax", emit_last_axis},
    {"LogSoftmax", "LogSoftmax", emit_last_axis},
    {"ArgMax", "ArgMax", emit_last_axis},
    {"Gather", "Gather", emit_gather},
    {"ResourceGather", "Gather", emit_gather},
    {"Unique", "Unique", emit_unique},
    {"Dropout", NULL, emit_training_only},
};

static int find_form(const char *op) {
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (!strcmp(forms[i].op, op)) return (int)i;
    return -1;
}

bool psg_onnx_supports(const char *op) {
    int i = op ? find_form(op) : -1;
    return i >= 0 && forms[i].emit != emit_training_only && forms[i].emit != emit_placeholder;
}

int ox_emit(ox_t *x, const psg_node_t *n) {
    int i = find_form(psg_node_op(n));
    if (i < 0)
        return psg_error_set("no ONNX form (the writer knows %zu ops: serving/onnx_nodes.c)",
                             sizeof forms / sizeof forms[0]);
    for (int k = 0; k < psg_node_num_inputs(n); k++) {
        psg_endpoint_t e = psg_node_input(n, k);
        const ox_value_t *v = &x->vals[e.node * PSG_MAX_OUTPUTS + e.index];
        if (!v->nhwc && !v->nchw && forms[i].emit != emit_variable)
            return psg_error_set("input %d (node '%s' output %d) has no ONNX value", k,
                                 psg_node_name(psg_graph_node(x->g, e.node)), e.index);
    }
    return forms[i].emit(x, n, forms[i].onnx_op);
}
