/* The nn ops, NHWC and f32 (the Conv2D family also bf16 / f16, for mixed
 * precision): Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter, MaxPool(Grad), AvgPool(Grad),
 * BiasAdd(Grad), FusedBatchNorm(Grad): defs, window geometry, shape inference, gradients (as graph
 * nodes) and builders. Kernels: ops/cpu/{conv2d,pool,bias_add,batch_norm}.c. */
#include "ops/cpu/half.h"
#include "ops/cpu/nn.h"
#include "ops/cuda/kernels.h"
#include "ops/params.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_nn.h"
#include "psgraph/precision.h"

#include "core/checked.h"

#include <string.h>

/* ---- window attributes and geometry ---- */

static int read_pair(const psg_node_t *n, const char *key, int64_t *h, int64_t *w) {
    const psg_attr_t *a = psg_node_attr(n, key);
    if (!a) return psg_error_set("missing attribute '%s'", key);
    if (a->type != PSG_ATTR_INTS)
        return psg_error_set("attribute '%s' must be a list of ints", key);
    const int64_t *v = a->u.ints.v;
    if (a->u.ints.n == 2) {
        *h = v[0];
        *w = v[1];
    } else if (a->u.ints.n == 4 && v[0] == 1 && v[3] == 1) {
        *h = v[1];
        *w = v[2];
    } else {
        return psg_error_set("'%s' must be [h, w] or [1, h, w, 1] (NHWC), got %d values", key,
                             a->u.ints.n);
    }
    if (*h < 1 || *w < 1)
        return psg_error_set("'%s' must be positive, got [%lld, %lld]", key, (long long)*h,
                             (long long)*w);
    return 0;
}

/* Attribute `key`: "SAME" (*same true) or "VALID". */
static int read_padding(const psg_node_t *n, const char *key, bool *same) {
    const char *pad = psg_node_get_str(n, key, NULL);
    if (!pad) return psg_error_set("missing attribute '%s'", key);
    *same = strcmp(pad, "SAME") == 0;
    if (!*same && strcmp(pad, "VALID") != 0)
        return psg_error_set("%s must be SAME or VALID, got '%s'", key, pad);
    return 0;
}

int psg_nn_read_attrs(const psg_node_t *n, bool want_ksize, psg_nn_attrs_t *a) {
    memset(a, 0, sizeof *a);
    a->kh = a->kw = 1;
    if (want_ksize && read_pair(n, "ksize", &a->kh, &a->kw) < 0) return -1;
    if (read_pair(n, "strides", &a->sh, &a->sw) < 0) return -1;
    if (read_padding(n, "padding", &a->same) < 0) return -1;
    const psg_attr_t *d = psg_node_attr(n, "dilations");
    if (d) {
        if (d->type != PSG_ATTR_INTS) return psg_error_set("attribute 'dilations' must be ints");
        for (int i = 0; i < d->u.ints.n; i++)
            if (d->u.ints.v[i] != 1)
                return psg_error_set("dilation %lld is not supported (only 1)",
                                     (long long)d->u.ints.v[i]);
    }
    return 0;
}

int psg_nn_out_size(int64_t in, int64_t k, int64_t s, bool same, int64_t *out, int64_t *pad) {
    *pad = 0;
    if (in < 0 || k < 0) {
        *out = -1;
        return 0;
    }
    if (s < 1) return psg_error_set("stride %lld must be positive", (long long)s);
    if (same) {
        /* ceil(in / s), then the padding (out - 1) * s + k - in, each checked: a peer's
         * graph may carry any stride and window */
        int64_t span, total;
        *out = in / s + (in % s != 0);
        if (psg_ckd_mul_i64(&span, *out > 0 ? *out - 1 : 0, s) || psg_ckd_add_i64(&total, span, k))
            return psg_error_set(
                "SAME window of %lld with stride %lld overflows on an input of %lld", (long long)k,
                (long long)s, (long long)in);
        total -= in;
        *pad = total > 0 ? total / 2 : 0;
        return 0;
    }
    if (in < k)
        return psg_error_set("VALID window of %lld does not fit an input of %lld", (long long)k,
                             (long long)in);
    *out = (in - k) / s + 1;
    return 0;
}

int psg_nn_geom(const psg_shape_t *in, int64_t kh, int64_t kw, int64_t oc, const psg_nn_attrs_t *a,
                psg_nn_geom_t *g) {
    *g = (psg_nn_geom_t){.n = in->dims[0],
                         .h = in->dims[1],
                         .w = in->dims[2],
                         .c = in->dims[3],
                         .kh = kh,
                         .kw = kw,
                         .oc = oc,
                         .sh = a->sh,
                         .sw = a->sw};
    if (psg_nn_out_size(g->h, kh, a->sh, a->same, &g->oh, &g->pt) < 0) return -1;
    return psg_nn_out_size(g->w, kw, a->sw, a->same, &g->ow, &g->pl);
}

/* ---- prepare: once per plan node (ops/params.h) ---- */

static int nn_prepare(const psg_graph_t *g, const psg_node_t *n, psg_nn_params_t *p, bool pool) {
    if (psg_nn_read_attrs(n, pool, &p->a) < 0) return -1;
    const psg_shape_t *in = psg_graph_shape(g, psg_node_input(n, 0));
    const psg_shape_t *f = pool ? NULL : psg_graph_shape(g, psg_node_input(n, 1));
    if (!in || in->rank != 4 || !psg_shape_is_complete(in)) return 0;
    if (!pool && (!f || f->rank != 4 || !psg_shape_is_complete(f))) return 0;
    int64_t kh = pool ? p->a.kh : f->dims[0], kw = pool ? p->a.kw : f->dims[1];
    if (psg_nn_geom(in, kh, kw, pool ? in->dims[3] : f->dims[3], &p->a, &p->geom) < 0) return -1;
    p->have_geom = true;
    return 0;
}

int psg_nn_prepare_conv(const psg_graph_t *g, const psg_node_t *n, void *params) {
    return nn_prepare(g, n, params, false);
}

/* The pool of a FusedConv2D ("pool_ksize", "pool_strides", "pool_padding"): *has false when
 * the node has none. */
static int read_fused_pool(const psg_node_t *n, bool *has, psg_nn_attrs_t *a) {
    memset(a, 0, sizeof *a);
    *has = psg_node_attr(n, "pool_ksize") != NULL;
    if (!*has) return 0;
    if (read_pair(n, "pool_ksize", &a->kh, &a->kw) < 0 ||
        read_pair(n, "pool_strides", &a->sh, &a->sw) < 0)
        return -1;
    return read_padding(n, "pool_padding", &a->same);
}

int psg_nn_prepare_fused_conv(const psg_graph_t *g, const psg_node_t *n, void *params) {
    psg_nn_params_t *p = params;
    p->relu = psg_node_get_bool(n, "relu", false);
    p->epsilon = (float)psg_node_get_float(n, "epsilon", 1e-3);
    if (read_fused_pool(n, &p->pool, &p->pool_a) < 0) return -1;
    return nn_prepare(g, n, p, false);
}

int psg_nn_prepare_pool(const psg_graph_t *g, const psg_node_t *n, void *params) {
    return nn_prepare(g, n, params, true);
}

const psg_nn_geom_t *psg_nn_kernel_geom(const psg_kernel_ctx_t *c, bool pool, psg_nn_geom_t *tmp) {
    const psg_nn_params_t *p = psg_kernel_params(c);
    const psg_shape_t *in = &c->inputs[0]->shape, *f = pool ? NULL : &c->inputs[1]->shape;
    int64_t kh = pool ? p->a.kh : f->dims[0], kw = pool ? p->a.kw : f->dims[1];
    int64_t oc = pool ? in->dims[3] : f->dims[3];
    const psg_nn_geom_t *q = &p->geom;
    if (p->have_geom && q->n == in->dims[0] && q->h == in->dims[1] && q->w == in->dims[2] &&
        q->c == in->dims[3] && q->kh == kh && q->kw == kw && q->oc == oc)
        return q;
    return psg_nn_geom(in, kh, kw, oc, &p->a, tmp) < 0 ? NULL : tmp;
}

/* ---- inference ---- */

static int expect_f32(psg_infer_ctx_t *c) {
    for (int i = 0; i < c->num_inputs; i++)
        if (psg_infer_expect_dtype(c, i, PSG_DT_F32) < 0) return -1;
    return 0;
}

/* f32 inputs, but input xi may be 16-bit too: batch norm reads a 16-bit product's output
 * itself (exactly, as a Cast to f32 would give it) instead of an f32 copy made first. */
static int expect_f32_but_x(psg_infer_ctx_t *c, int xi) {
    for (int i = 0; i < c->num_inputs; i++)
        if ((i != xi || !psg_dtype_is_half(c->in_dtypes[i])) &&
            psg_infer_expect_dtype(c, i, PSG_DT_F32) < 0)
            return -1;
    return 0;
}

/* The output shape of a conv of input x (in_shapes[xi]) with filter
 * (in_shapes[fi]), with errors that show both shapes. */
static int conv_out_shape(psg_infer_ctx_t *c, int xi, int fi, psg_shape_t *out) {
    psg_dtype_t dt;
    if (psg_infer_expect_compute_dtype(c, &dt) < 0) return -1;
    if (psg_infer_expect_rank(c, xi, 4) < 0 || psg_infer_expect_rank(c, fi, 4) < 0) return -1;
    psg_nn_attrs_t a;
    if (psg_nn_read_attrs(c->node, false, &a) < 0) return -1;
    psg_shape_t x = c->in_shapes[xi], f = c->in_shapes[fi];
    if (x.rank < 0) x = psg_shape_4d(-1, -1, -1, -1);
    if (f.rank < 0) f = psg_shape_4d(-1, -1, -1, -1);
    char sx[PSG_SHAPE_STR_MAX], sf[PSG_SHAPE_STR_MAX];
    if (x.dims[3] >= 0 && f.dims[2] >= 0 && x.dims[3] != f.dims[2])
        return psg_error_set(
            "input %s has %lld channels but filter %s [KH, KW, C, OC] expects %lld",
            psg_shape_str(&x, sx, sizeof sx), (long long)x.dims[3],
            psg_shape_str(&f, sf, sizeof sf), (long long)f.dims[2]);
    psg_nn_geom_t g;
    if (psg_nn_geom(&x, f.dims[0], f.dims[1], f.dims[3], &a, &g) < 0)
        return psg_error_wrap("input %s, filter %s", psg_shape_str(&x, sx, sizeof sx),
                              psg_shape_str(&f, sf, sizeof sf));
    *out = psg_shape_4d(x.dims[0], g.oh, g.ow, f.dims[3]);
    return 0;
}

/* Checks that dy (in_shapes[di]) has the shape `expected` of the forward output. */
static int expect_dy(psg_infer_ctx_t *c, int di, const psg_shape_t *expected) {
    if (psg_shape_compatible(&c->in_shapes[di], expected)) return 0;
    char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
    return psg_error_set("dy %s does not match the forward output %s",
                         psg_shape_str(&c->in_shapes[di], a, sizeof a),
                         psg_shape_str(expected, b, sizeof b));
}

/* Conv2D: (x, filter) */
/* Conv2D and its backprops run in f32, or bf16 / f16 (mixed precision): the
 * output has the inputs' dtype. */
static int infer_conv2d(psg_infer_ctx_t *c) {
    c->out_dtypes[0] = c->in_dtypes[0];
    return conv_out_shape(c, 0, 1, &c->out_shapes[0]);
}

/* FusedConv2D: (x, filter, bias [OC]) or (x, filter, scale, offset, mean, variance [OC] each)
 * -> y, pooled when the node has a pool; f32 */
static int infer_fused_conv2d(psg_infer_ctx_t *c) {
    if (c->num_inputs != 3 && c->num_inputs != 6)
        return psg_error_set("%d inputs: x, filter and a bias, or x, filter and the batch norm's "
                             "scale, offset, mean and variance",
                             c->num_inputs);
    if (expect_f32(c) < 0 || infer_conv2d(c) < 0) return -1;
    bool pool;
    psg_nn_attrs_t pa;
    psg_nn_geom_t pg;
    psg_shape_t *y = &c->out_shapes[0];
    if (read_fused_pool(c->node, &pool, &pa) < 0) return -1;
    if (pool) {
        if (psg_nn_geom(y, pa.kh, pa.kw, y->dims[3], &pa, &pg) < 0)
            return psg_error_wrap("its pool");
        *y = psg_shape_4d(y->dims[0], pg.oh, pg.ow, y->dims[3]);
    }
    static const char *const names[] = {"bias", "scale", "offset", "mean", "variance"};
    const psg_shape_t *f = &c->in_shapes[1];
    int64_t oc = f->rank == 4 ? f->dims[3] : -1;
    for (int i = 2; i < c->num_inputs; i++) {
        const psg_shape_t *b = &c->in_shapes[i];
        if (b->rank < 0 || (b->rank == 1 && (oc < 0 || b->dims[0] < 0 || b->dims[0] == oc)))
            continue;
        char sb[PSG_SHAPE_STR_MAX], sf[PSG_SHAPE_STR_MAX];
        return psg_error_set("%s %s does not match the output channels of filter %s",
                             names[c->num_inputs == 3 ? 0 : i - 1], psg_shape_str(b, sb, sizeof sb),
                             psg_shape_str(f, sf, sizeof sf));
    }
    return 0;
}

/* Conv2DBackpropInput: (x for its shape, filter, dy) -> dx */
static int infer_conv2d_backprop_input(psg_infer_ctx_t *c) {
    psg_shape_t y;
    if (conv_out_shape(c, 0, 1, &y) < 0 || expect_dy(c, 2, &y) < 0) return -1;
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = c->in_shapes[0];
    return 0;
}

/* Conv2DBackpropFilter: (x, filter for its shape, dy) -> dfilter */
static int infer_conv2d_backprop_filter(psg_infer_ctx_t *c) {
    psg_shape_t y;
    if (conv_out_shape(c, 0, 1, &y) < 0 || expect_dy(c, 2, &y) < 0) return -1;
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = c->in_shapes[1];
    return 0;
}

static int pool_out_shape(psg_infer_ctx_t *c, psg_shape_t *out) {
    if (expect_f32(c) < 0 || psg_infer_expect_rank(c, 0, 4) < 0) return -1;
    psg_nn_attrs_t a;
    if (psg_nn_read_attrs(c->node, true, &a) < 0) return -1;
    psg_shape_t x = c->in_shapes[0];
    if (x.rank < 0) x = psg_shape_4d(-1, -1, -1, -1);
    psg_nn_geom_t g;
    if (psg_nn_geom(&x, a.kh, a.kw, x.dims[3], &a, &g) < 0) {
        char sx[PSG_SHAPE_STR_MAX];
        return psg_error_wrap("input %s", psg_shape_str(&x, sx, sizeof sx));
    }
    *out = psg_shape_4d(x.dims[0], g.oh, g.ow, x.dims[3]);
    return 0;
}

/* MaxPool, AvgPool: (x) */
static int infer_pool(psg_infer_ctx_t *c) {
    c->out_dtypes[0] = PSG_DT_F32;
    return pool_out_shape(c, &c->out_shapes[0]);
}

/* MaxPoolGrad, AvgPoolGrad: (x, dy) -> dx */
static int infer_pool_grad(psg_infer_ctx_t *c) {
    psg_shape_t y;
    if (pool_out_shape(c, &y) < 0 || expect_dy(c, 1, &y) < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = c->in_shapes[0];
    return 0;
}

/* The channel count of x (in_shapes[i], rank >= 2), -1 when unknown. */
static int channels_of(psg_infer_ctx_t *c, int i, int64_t *ch) {
    const psg_shape_t *s = &c->in_shapes[i];
    *ch = -1;
    if (s->rank < 0) return 0;
    if (s->rank < 2) {
        char b[PSG_SHAPE_STR_MAX];
        return psg_error_set("input %d must have rank >= 2 ([..., C]), got %s", i,
                             psg_shape_str(s, b, sizeof b));
    }
    *ch = s->dims[s->rank - 1];
    return 0;
}

/* Checks that input i is a vector [C] matching x (input xi), named `what`. */
static int expect_channel_vector(psg_infer_ctx_t *c, int i, int xi, int64_t ch, const char *what) {
    const psg_shape_t *s = &c->in_shapes[i];
    if (s->rank < 0) return 0;
    if (s->rank != 1 || (ch >= 0 && s->dims[0] >= 0 && s->dims[0] != ch)) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        return psg_error_set("%s %s does not match the last dim of %s %s", what,
                             psg_shape_str(s, a, sizeof a), xi == 0 ? "x" : "dy",
                             psg_shape_str(&c->in_shapes[xi], b, sizeof b));
    }
    return 0;
}

/* BiasAdd: (x [..., C], bias [C]) */
static int infer_bias_add(psg_infer_ctx_t *c) {
    int64_t ch;
    if (expect_f32(c) < 0 || channels_of(c, 0, &ch) < 0) return -1;
    if (expect_channel_vector(c, 1, 0, ch, "bias") < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = c->in_shapes[0];
    return 0;
}

/* BiasAddGrad: (dy [..., C]) -> [C] */
static int infer_bias_add_grad(psg_infer_ctx_t *c) {
    int64_t ch;
    if (expect_f32(c) < 0 || channels_of(c, 0, &ch) < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = psg_shape_1d(ch);
    return 0;
}

static const char *const bn_input_names[] = {"x", "scale", "offset", "mean", "variance"};

/* FusedBatchNorm: (x, scale, offset [, mean, variance]) */
static int infer_fused_batch_norm(psg_infer_ctx_t *c) {
    bool training = psg_node_get_bool(c->node, "is_training", true);
    if (c->num_inputs != 5 && !(training && c->num_inputs == 3))
        return psg_error_set("takes x, scale, offset%s; got %d inputs",
                             training ? " (and optionally mean, variance)"
                                      : ", mean, variance "
                                        "(inference mode)",
                             c->num_inputs);
    if (psg_node_get_float(c->node, "epsilon", 1e-3) < 0) return psg_error_set("epsilon < 0");
    int64_t ch;
    if (expect_f32_but_x(c, 0) < 0 || channels_of(c, 0, &ch) < 0) return -1;
    for (int i = 1; i < c->num_inputs; i++)
        if (expect_channel_vector(c, i, 0, ch, bn_input_names[i]) < 0) return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = c->in_shapes[0];
    for (int o = 1; o < 5; o++) {
        c->out_dtypes[o] = PSG_DT_F32;
        c->out_shapes[o] = psg_shape_1d(ch);
    }
    return 0;
}

/* FusedBatchNormGrad: (dy, x, scale, saved_mean, saved_inv_std) -> dx, dscale, doffset */
static int infer_fused_batch_norm_grad(psg_infer_ctx_t *c) {
    int64_t ch;
    if (expect_f32_but_x(c, 1) < 0 || channels_of(c, 1, &ch) < 0) return -1;
    if (!psg_shape_compatible(&c->in_shapes[0], &c->in_shapes[1])) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        return psg_error_set("dy %s does not match x %s",
                             psg_shape_str(&c->in_shapes[0], a, sizeof a),
                             psg_shape_str(&c->in_shapes[1], b, sizeof b));
    }
    static const char *const names[] = {"dy", "x", "scale", "saved_mean", "saved_inv_std"};
    for (int i = 2; i < 5; i++)
        if (expect_channel_vector(c, i, 1, ch, names[i]) < 0) return -1;
    c->out_dtypes[0] = c->in_dtypes[1]; /* dx as x: a 16-bit x gets its gradient rounded once */
    c->out_dtypes[1] = c->out_dtypes[2] = PSG_DT_F32;
    c->out_shapes[0] = c->in_shapes[1];
    c->out_shapes[1] = c->out_shapes[2] = psg_shape_1d(ch);
    return 0;
}

/* ---- gradients ---- */

/* A node of op `op` over n inputs, carrying the window attributes of `src`. */
static psg_endpoint_t like_node(psg_graph_t *g, const char *op, const psg_node_t *src, int n,
                                const psg_endpoint_t *in) {
    psg_node_builder_t *b = psg_node_begin(g, op, NULL);
    for (int i = 0; i < n; i++) psg_node_add_input(b, in[i]);
    static const char *const keys[] = {"ksize", "strides", "dilations"};
    for (int k = 0; k < 3; k++) {
        const psg_attr_t *a = psg_node_attr(src, keys[k]);
        if (a && a->type == PSG_ATTR_INTS) psg_node_attr_ints(b, keys[k], a->u.ints.n, a->u.ints.v);
    }
    psg_node_attr_str(b, "padding", psg_node_get_str(src, "padding", ""));
    return psg_node_finish_ep(b);
}

static int all_valid(int n, const psg_endpoint_t *e) {
    for (int i = 0; i < n; i++)
        if (!psg_endpoint_valid(e[i])) return -1;
    return 0;
}

/* y = Conv2D(x, W): dx = BackpropInput(x, W, dy), dW = BackpropFilter(x, W, dy) */
static int grad_conv2d(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                       psg_endpoint_t *dx) {
    psg_endpoint_t in[3] = {psg_node_input(n, 0), psg_node_input(n, 1), dy[0]};
    dx[0] = like_node(g, "Conv2DBackpropInput", n, 3, in);
    dx[1] = like_node(g, "Conv2DBackpropFilter", n, 3, in);
    return all_valid(2, dx);
}

/* dx = BackpropInput(x, W, d) is linear in W and d: with G its gradient,
 * dW = BackpropFilter(G, W, d) and dd = Conv2D(G, W). */
static int grad_conv2d_backprop_input(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                                      psg_endpoint_t *dx) {
    psg_endpoint_t w = psg_node_input(n, 1), d = psg_node_input(n, 2);
    dx[0] = PSG_NO_ENDPOINT;
    dx[1] = like_node(g, "Conv2DBackpropFilter", n, 3, (psg_endpoint_t[]){dy[0], w, d});
    dx[2] = like_node(g, "Conv2D", n, 2, (psg_endpoint_t[]){dy[0], w});
    return all_valid(2, dx + 1);
}

/* dW = BackpropFilter(x, W, d) is linear in x and d: with G its gradient,
 * dx = BackpropInput(x, G, d) and dd = Conv2D(x, G). */
static int grad_conv2d_backprop_filter(psg_graph_t *g, const psg_node_t *n,
                                       const psg_endpoint_t *dy, psg_endpoint_t *dx) {
    psg_endpoint_t x = psg_node_input(n, 0), d = psg_node_input(n, 2);
    dx[0] = like_node(g, "Conv2DBackpropInput", n, 3, (psg_endpoint_t[]){x, dy[0], d});
    dx[1] = PSG_NO_ENDPOINT;
    dx[2] = like_node(g, "Conv2D", n, 2, (psg_endpoint_t[]){x, dy[0]});
    return psg_endpoint_valid(dx[0]) && psg_endpoint_valid(dx[2]) ? 0 : -1;
}

static int grad_max_pool(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                         psg_endpoint_t *dx) {
    dx[0] = like_node(g, "MaxPoolGrad", n, 2, (psg_endpoint_t[]){psg_node_input(n, 0), dy[0]});
    return all_valid(1, dx);
}

static int grad_avg_pool(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                         psg_endpoint_t *dx) {
    dx[0] = like_node(g, "AvgPoolGrad", n, 2, (psg_endpoint_t[]){psg_node_input(n, 0), dy[0]});
    return all_valid(1, dx);
}

/* AvgPoolGrad is linear in dy and its adjoint is AvgPool. */
static int grad_avg_pool_grad(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                              psg_endpoint_t *dx) {
    dx[0] = PSG_NO_ENDPOINT;
    dx[1] = like_node(g, "AvgPool", n, 1, dy);
    return all_valid(1, dx + 1);
}

static int grad_bias_add(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                         psg_endpoint_t *dx) {
    (void)n;
    dx[0] = dy[0];
    dx[1] = psg_bias_add_grad(g, NULL, dy[0]);
    return all_valid(1, dx + 1);
}

/* BiasAddGrad sums rows; its adjoint repeats G over them. */
static int grad_bias_add_grad(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                              psg_endpoint_t *dx) {
    dx[0] = psg_broadcast_like(g, NULL, dy[0], psg_node_input(n, 0));
    return all_valid(1, dx);
}

/* Only y carries a gradient back; batch_mean / batch_var feed the moving
 * averages, which are not differentiated (as TensorFlow). The mean and
 * variance inputs of inference mode get none. */
static int grad_fused_batch_norm(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                                 psg_endpoint_t *dx) {
    for (int i = 0; i < psg_node_num_inputs(n); i++) dx[i] = PSG_NO_ENDPOINT;
    if (!psg_endpoint_valid(dy[0])) return 0;
    int id = psg_node_id(n);
    psg_batch_norm_grad_t r = psg_fused_batch_norm_grad(
        g, NULL, dy[0], psg_node_input(n, 0), psg_node_input(n, 1), (psg_endpoint_t){id, 3},
        (psg_endpoint_t){id, 4}, (float)psg_node_get_float(n, "epsilon", 1e-3),
        psg_node_get_bool(n, "is_training", true));
    dx[0] = r.dx;
    dx[1] = r.dscale;
    dx[2] = r.doffset;
    return all_valid(3, dx);
}

/* ---- defs ---- */

/* MaxPoolGrad and FusedBatchNormGrad have no gradient (no second order), nor FusedConv2D
 * (inference graphs only). */
static const psg_op_def_t op_conv2d = {.name = "Conv2D",
                                       .num_inputs = 2,
                                       .num_outputs = 1,
                                       .infer = infer_conv2d,
                                       .grad = grad_conv2d,
                                       .cpu = psg_cpu_conv2d,
                                       .cuda = PSG_GPU_KERNEL(psg_gpu_conv2d),
                                       .prepare = psg_nn_prepare_conv,
                                       .params_size = sizeof(psg_nn_params_t)};
static const psg_op_def_t op_fused_conv2d = {.name = "FusedConv2D",
                                             .num_inputs = -1, /* 3 or 6: infer says */
                                             .num_outputs = 1,
                                             .infer = infer_fused_conv2d,
                                             .cpu = psg_cpu_fused_conv2d,
                                             .prepare = psg_nn_prepare_fused_conv,
                                             .params_size = sizeof(psg_nn_params_t)};
static const psg_op_def_t op_conv2d_bi = {.name = "Conv2DBackpropInput",
                                          .num_inputs = 3,
                                          .num_outputs = 1,
                                          .infer = infer_conv2d_backprop_input,
                                          .grad = grad_conv2d_backprop_input,
                                          .cpu = psg_cpu_conv2d_backprop_input,
                                          .cuda = PSG_GPU_KERNEL(psg_gpu_conv2d_backprop_input),
                                          .prepare = psg_nn_prepare_conv,
                                          .params_size = sizeof(psg_nn_params_t)};
static const psg_op_def_t op_conv2d_bf = {.name = "Conv2DBackpropFilter",
                                          .num_inputs = 3,
                                          .num_outputs = 1,
                                          .infer = infer_conv2d_backprop_filter,
                                          .grad = grad_conv2d_backprop_filter,
                                          .cpu = psg_cpu_conv2d_backprop_filter,
                                          .cuda = PSG_GPU_KERNEL(psg_gpu_conv2d_backprop_filter),
                                          .prepare = psg_nn_prepare_conv,
                                          .params_size = sizeof(psg_nn_params_t)};
static const psg_op_def_t op_max_pool = {.name = "MaxPool",
                                         .num_inputs = 1,
                                         .num_outputs = 1,
                                         .infer = infer_pool,
                                         .grad = grad_max_pool,
                                         .cpu = psg_cpu_max_pool,
                                         .cuda = PSG_GPU_KERNEL(psg_gpu_max_pool),
                                         .prepare = psg_nn_prepare_pool,
                                         .params_size = sizeof(psg_nn_params_t)};
static const psg_op_def_t op_max_pool_grad = {.name = "MaxPoolGrad",
                                              .num_inputs = 2,
                                              .num_outputs = 1,
                                              .infer = infer_pool_grad,
                                              .cpu = psg_cpu_max_pool_grad,
                                              .cuda = PSG_GPU_KERNEL(psg_gpu_max_pool_grad),
                                              .prepare = psg_nn_prepare_pool,
                                              .params_size = sizeof(psg_nn_params_t)};
static const psg_op_def_t op_avg_pool = {.name = "AvgPool",
                                         .num_inputs = 1,
                                         .num_outputs = 1,
                                         .infer = infer_pool,
                                         .grad = grad_avg_pool,
                                         .cpu = psg_cpu_avg_pool,
                                         .cuda = PSG_GPU_KERNEL(psg_gpu_avg_pool),
                                         .prepare = psg_nn_prepare_pool,
                                         .params_size = sizeof(psg_nn_params_t)};
static const psg_op_def_t op_avg_pool_grad = {.name = "AvgPoolGrad",
                                              .num_inputs = 2,
                                              .num_outputs = 1,
                                              .infer = infer_pool_grad,
                                              .grad = grad_avg_pool_grad,
                                              .cpu = psg_cpu_avg_pool_grad,
                                              .cuda = PSG_GPU_KERNEL(psg_gpu_avg_pool_grad),
                                              .prepare = psg_nn_prepare_pool,
                                              .params_size = sizeof(psg_nn_params_t)};
static const psg_op_def_t op_bias_add = {.name = "BiasAdd",
                                         .num_inputs = 2,
                                         .num_outputs = 1,
                                         .infer = infer_bias_add,
                                         .grad = grad_bias_add,
                                         .cpu = psg_cpu_bias_add,
                                         .cuda = PSG_GPU_KERNEL(psg_gpu_bias_add)};
static const psg_op_def_t op_bias_add_grad = {.name = "BiasAddGrad",
                                              .num_inputs = 1,
                                              .num_outputs = 1,
                                              .infer = infer_bias_add_grad,
                                              .grad = grad_bias_add_grad,
                                              .cpu = psg_cpu_bias_add_grad,
                                              .cuda = PSG_GPU_KERNEL(psg_gpu_bias_add_grad)};
static const psg_op_def_t op_fused_bn = {.name = "FusedBatchNorm",
                                         .num_inputs = -1,
                                         .num_outputs = 5,
                                         .infer = infer_fused_batch_norm,
                                         .grad = grad_fused_batch_norm,
                                         .cpu = psg_cpu_fused_batch_norm,
                                         .cuda = PSG_GPU_KERNEL(psg_gpu_fused_batch_norm)};
static const psg_op_def_t op_fused_bn_grad = {.name = "FusedBatchNormGrad",
                                              .num_inputs = 5,
                                              .num_outputs = 3,
                                              .infer = infer_fused_batch_norm_grad,
                                              .cpu = psg_cpu_fused_batch_norm_grad,
                                              .cuda =
                                                  PSG_GPU_KERNEL(psg_gpu_fused_batch_norm_grad)};

const psg_op_def_t *const psg_nn_ops[] = {
    &op_conv2d,        &op_conv2d_bi,     &op_conv2d_bf, &op_max_pool,      &op_max_pool_grad,
    &op_avg_pool,      &op_avg_pool_grad, &op_bias_add,  &op_bias_add_grad, &op_fused_bn,
    &op_fused_bn_grad, &op_fused_conv2d,  NULL,
};

/* ---- builders ---- */

static const char *padding_str(psg_padding_t p) {
    return p == PSG_PADDING_SAME ? "SAME" : "VALID";
}

#define NO_KSIZE (-1) /* convs: no "ksize" attribute */

static psg_endpoint_t window_node(psg_graph_t *g, const char *op, const char *name, int n,
                                  const psg_endpoint_t *in, int kh, int kw, int sh, int sw,
                                  psg_padding_t padding) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    for (int i = 0; i < n; i++) psg_node_add_input(b, in[i]);
    if (kh != NO_KSIZE) psg_node_attr_ints(b, "ksize", 2, (int64_t[]){kh, kw});
    psg_node_attr_ints(b, "strides", 2, (int64_t[]){sh, sw});
    psg_node_attr_str(b, "padding", padding_str(padding));
    return psg_node_finish_ep(b);
}

/* A conv op under the graph's compute dtype (precision.h): f32 inputs cast
 * to it, the result cast back to f32. */
static psg_endpoint_t conv_node(psg_graph_t *g, const char *op, const char *name, int n,
                                psg_endpoint_t *in, int stride_h, int stride_w,
                                psg_padding_t padding) {
    bool back = psg_compute_inputs(g, n, in);
    char buf[256];
    psg_endpoint_t y = window_node(g, op, psg_compute_op_name(g, name, back, buf, sizeof buf), n,
                                   in, NO_KSIZE, 0, stride_h, stride_w, padding);
    return psg_compute_output(g, name, y, back);
}

psg_endpoint_t psg_conv2d(psg_graph_t *g, const char *name, psg_endpoint_t x, psg_endpoint_t filter,
                          int stride_h, int stride_w, psg_padding_t padding) {
    return conv_node(g, "Conv2D", name, 2, (psg_endpoint_t[]){x, filter}, stride_h, stride_w,
                     padding);
}

/* FusedConv2D with inputs args (n_args of them: the bias, or the batch norm's four) */
static psg_endpoint_t fused_conv_node(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                      psg_endpoint_t filter, int n_args, const psg_endpoint_t *args,
                                      int stride_h, int stride_w, psg_padding_t padding, bool relu,
                                      const psg_fused_pool_t *pool, double epsilon) {
    psg_node_builder_t *b = psg_node_begin(g, "FusedConv2D", name);
    psg_node_add_input(b, x);
    psg_node_add_input(b, filter);
    for (int i = 0; i < n_args; i++) psg_node_add_input(b, args[i]);
    psg_node_attr_ints(b, "strides", 2, (int64_t[]){stride_h, stride_w});
    psg_node_attr_str(b, "padding", padding_str(padding));
    psg_node_attr_bool(b, "relu", relu);
    if (n_args == 4) psg_node_attr_float(b, "epsilon", epsilon);
    if (pool) {
        psg_node_attr_ints(b, "pool_ksize", 2, (int64_t[]){pool->kh, pool->kw});
        psg_node_attr_ints(b, "pool_strides", 2, (int64_t[]){pool->stride_h, pool->stride_w});
        psg_node_attr_str(b, "pool_padding", padding_str(pool->padding));
    }
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_fused_conv2d(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                psg_endpoint_t filter, psg_endpoint_t bias, int stride_h,
                                int stride_w, psg_padding_t padding, bool relu,
                                const psg_fused_pool_t *pool) {
    return fused_conv_node(g, name, x, filter, 1, &bias, stride_h, stride_w, padding, relu, pool,
                           0);
}

psg_endpoint_t psg_fused_conv2d_batch_norm(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                           psg_endpoint_t filter, const psg_fused_bn_t *bn,
                                           int stride_h, int stride_w, psg_padding_t padding,
                                           bool relu, const psg_fused_pool_t *pool) {
    psg_endpoint_t args[4] = {bn->scale, bn->offset, bn->mean, bn->variance};
    return fused_conv_node(g, name, x, filter, 4, args, stride_h, stride_w, padding, relu, pool,
                           bn->epsilon);
}

psg_endpoint_t psg_conv2d_backprop_input(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                         psg_endpoint_t filter, psg_endpoint_t dy, int stride_h,
                                         int stride_w, psg_padding_t padding) {
    return conv_node(g, "Conv2DBackpropInput", name, 3, (psg_endpoint_t[]){x, filter, dy}, stride_h,
                     stride_w, padding);
}

psg_endpoint_t psg_conv2d_backprop_filter(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                          psg_endpoint_t filter, psg_endpoint_t dy, int stride_h,
                                          int stride_w, psg_padding_t padding) {
    return conv_node(g, "Conv2DBackpropFilter", name, 3, (psg_endpoint_t[]){x, filter, dy},
                     stride_h, stride_w, padding);
}

psg_endpoint_t psg_max_pool(psg_graph_t *g, const char *name, psg_endpoint_t x, int kh, int kw,
                            int stride_h, int stride_w, psg_padding_t padding) {
    return window_node(g, "MaxPool", name, 1, &x, kh, kw, stride_h, stride_w, padding);
}

psg_endpoint_t psg_avg_pool(psg_graph_t *g, const char *name, psg_endpoint_t x, int kh, int kw,
                            int stride_h, int stride_w, psg_padding_t padding) {
    return window_node(g, "AvgPool", name, 1, &x, kh, kw, stride_h, stride_w, padding);
}

psg_endpoint_t psg_max_pool_grad(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                 psg_endpoint_t dy, int kh, int kw, int stride_h, int stride_w,
                                 psg_padding_t padding) {
    return window_node(g, "MaxPoolGrad", name, 2, (psg_endpoint_t[]){x, dy}, kh, kw, stride_h,
                       stride_w, padding);
}

psg_endpoint_t psg_avg_pool_grad(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                 psg_endpoint_t dy, int kh, int kw, int stride_h, int stride_w,
                                 psg_padding_t padding) {
    return window_node(g, "AvgPoolGrad", name, 2, (psg_endpoint_t[]){x, dy}, kh, kw, stride_h,
                       stride_w, padding);
}

psg_endpoint_t psg_bias_add(psg_graph_t *g, const char *name, psg_endpoint_t x,
                            psg_endpoint_t bias) {
    psg_node_builder_t *b = psg_node_begin(g, "BiasAdd", name);
    psg_node_add_input(b, x);
    psg_node_add_input(b, bias);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_bias_add_grad(psg_graph_t *g, const char *name, psg_endpoint_t dy) {
    psg_node_builder_t *b = psg_node_begin(g, "BiasAddGrad", name);
    psg_node_add_input(b, dy);
    return psg_node_finish_ep(b);
}

/* The 16-bit tensor that x is the f32 Cast of, else x. Batch norm reads it itself, exactly as
 * the Cast would give it: a mixed-precision convolution's output is then not copied to f32
 * (nor kept in f32 for the gradient), and the gradient comes back in 16 bits, rounded once as
 * the Cast's gradient would round it (docs/gpu.md). The Cast stays for other consumers. */
static psg_endpoint_t uncast_half(const psg_graph_t *g, psg_endpoint_t x) {
    if (!psg_endpoint_valid(x) || x.index != 0) return x;
    const psg_node_t *n = psg_graph_node(g, x.node);
    if (!n || strcmp(psg_node_op(n), "Cast") || psg_node_num_inputs(n) != 1 ||
        psg_graph_dtype(g, x) != PSG_DT_F32)
        return x;
    psg_endpoint_t src = psg_node_input(n, 0);
    return psg_dtype_is_half(psg_graph_dtype(g, src)) ? src : x;
}

psg_batch_norm_t psg_fused_batch_norm(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                      psg_endpoint_t scale, psg_endpoint_t offset,
                                      psg_endpoint_t mean, psg_endpoint_t variance, float epsilon,
                                      bool is_training) {
    psg_batch_norm_t r = {PSG_NO_ENDPOINT, PSG_NO_ENDPOINT, PSG_NO_ENDPOINT, PSG_NO_ENDPOINT,
                          PSG_NO_ENDPOINT};
    x = uncast_half(g, x);
    psg_node_builder_t *b = psg_node_begin(g, "FusedBatchNorm", name);
    psg_node_add_input(b, x);
    psg_node_add_input(b, scale);
    psg_node_add_input(b, offset);
    /* training mode needs no statistics: leave them out unless both are given */
    if (!is_training || psg_endpoint_valid(mean) || psg_endpoint_valid(variance)) {
        psg_node_add_input(b, mean);
        psg_node_add_input(b, variance);
    }
    psg_node_attr_float(b, "epsilon", epsilon);
    psg_node_attr_bool(b, "is_training", is_training);
    int id = psg_node_finish(b);
    if (id < 0) return r;
    r.y = (psg_endpoint_t){id, 0};
    r.batch_mean = (psg_endpoint_t){id, 1};
    r.batch_var = (psg_endpoint_t){id, 2};
    r.saved_mean = (psg_endpoint_t){id, 3};
    r.saved_inv_std = (psg_endpoint_t){id, 4};
    return r;
}

psg_batch_norm_grad_t psg_fused_batch_norm_grad(psg_graph_t *g, const char *name, psg_endpoint_t dy,
                                                psg_endpoint_t x, psg_endpoint_t scale,
                                                psg_endpoint_t saved_mean,
                                                psg_endpoint_t saved_inv_std, float epsilon,
                                                bool is_training) {
    psg_batch_norm_grad_t r = {PSG_NO_ENDPOINT, PSG_NO_ENDPOINT, PSG_NO_ENDPOINT};
    psg_node_builder_t *b = psg_node_begin(g, "FusedBatchNormGrad", name);
    psg_endpoint_t in[5] = {dy, x, scale, saved_mean, saved_inv_std};
    for (int i = 0; i < 5; i++) psg_node_add_input(b, in[i]);
    psg_node_attr_float(b, "epsilon", epsilon);
    psg_node_attr_bool(b, "is_training", is_training);
    int id = psg_node_finish(b);
    if (id < 0) return r;
    r.dx = (psg_endpoint_t){id, 0};
    r.dscale = (psg_endpoint_t){id, 1};
    r.doffset = (psg_endpoint_t){id, 2};
    return r;
}
