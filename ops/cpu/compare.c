/* CPU kernels of the comparison family: plain loops over a broadcast odometer
 * (Maximum, Minimum, the comparisons), a strided reduction (Max), OneHot and
 * Shape. Not Equal (ops/cpu/math.c). */
#include "ops/cpu/compare.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/math.h"
#include "psgraph/error.h"

#include <math.h>
#include <string.h>

/* The offsets of a and b (broadcast to out) at each position of out, in order: calls
 * fn(ctx, i, offset_a, offset_b) for i in [0, numel(out)). */
typedef void (*pair_fn)(void *ctx, int64_t i, int64_t oa, int64_t ob);

static void walk_pairs(const psg_shape_t *a, const psg_shape_t *b, const psg_shape_t *out,
                       pair_fn fn, void *ctx) {
    int64_t sa[PSG_MAX_RANK], sb[PSG_MAX_RANK], idx[PSG_MAX_RANK] = {0};
    psg_broadcast_strides(a, out, sa);
    psg_broadcast_strides(b, out, sb);
    int64_t n = psg_shape_numel(out), oa = 0, ob = 0;
    int r = out->rank;
    for (int64_t i = 0; i < n; i++) {
        fn(ctx, i, oa, ob);
        for (int d = r - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < out->dims[d]) break;
            oa -= sa[d] * out->dims[d];
            ob -= sb[d] * out->dims[d];
            idx[d] = 0;
        }
    }
}

typedef struct {
    const float *a, *b; /* broadcast to out */
    float *out;
    bool is_max;
} extremum_t;

static void extremum_at(void *ctx, int64_t i, int64_t oa, int64_t ob) {
    extremum_t *e = ctx;
    float x = e->a[oa], y = e->b[ob];
    e->out[i] = e->is_max ? (x >= y ? x : y) : (x <= y ? x : y);
}

int psg_cpu_extremum(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    extremum_t e = {psg_tensor_f32(c->inputs[0]), psg_tensor_f32(c->inputs[1]), psg_tensor_f32(out),
                    !strcmp(psg_node_op(c->node), "Maximum")};
    walk_pairs(&c->inputs[0]->shape, &c->inputs[1]->shape, &out->shape, extremum_at, &e);
    return 0;
}

typedef enum { CMP_GT, CMP_GE, CMP_LT, CMP_LE, CMP_NE, CMP_EQ } cmp_t;

typedef struct {
    const psg_tensor_t *a, *b;
    uint8_t *out;
    cmp_t op;
} compare_t;

static double value_at(const psg_tensor_t *t, int64_t k) {
    switch (t->dtype) {
    case PSG_DT_F32: return psg_tensor_f32(t)[k];
    case PSG_DT_I32: return psg_tensor_i32(t)[k];
    default: return (double)psg_tensor_i64(t)[k]; /* exact below 2^53, the ids and steps compared */
    }
}

static void compare_at(void *ctx, int64_t i, int64_t oa, int64_t ob) {
    compare_t *k = ctx;
    double x = value_at(k->a, oa), y = value_at(k->b, ob);
    bool r = k->op == CMP_GT   ? x > y
             : k->op == CMP_GE ? x >= y
             : k->op == CMP_LT ? x < y
             : k->op == CMP_LE ? x <= y
             : k->op == CMP_NE ? x != y
                               : x == y;
    k->out[i] = r;
}

int psg_cpu_compare(psg_kernel_ctx_t *c) {
    static const char *const names[] = {"Greater",   "GreaterEqual", "Less",
                                        "LessEqual", "NotEqual",     "BroadcastEqual"};
    compare_t k = {c->inputs[0], c->inputs[1], NULL, CMP_NE};
    for (int i = 0; i < 6; i++)
        if (!strcmp(psg_node_op(c->node), names[i])) k.op = (cmp_t)i;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    k.out = out->data;
    walk_pairs(&k.a->shape, &k.b->shape, &out->shape, compare_at, &k);
    return 0;
}

int psg_cpu_max(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    bool reduced[PSG_MAX_RANK];
    if (psg_math_reduced_axes(c->node, x->shape.rank, reduced) < 0) return -1;
    /* the output's stride along each dim of x: 0 along a reduced one */
    int r = x->shape.rank;
    int64_t so[PSG_MAX_RANK], s = 1, idx[PSG_MAX_RANK] = {0};
    for (int d = r - 1; d >= 0; d--) {
        so[d] = reduced[d] ? 0 : s;
        if (!reduced[d]) s *= x->shape.dims[d];
    }
    float *o = psg_tensor_f32(out);
    const float *xv = psg_tensor_f32(x);
    int64_t n_out = psg_tensor_numel(out), n = psg_tensor_numel(x), off = 0;
    for (int64_t i = 0; i < n_out; i++) o[i] = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float v = xv[i];
        if (v > o[off] || isnan(v)) o[off] = v; /* a NaN wins, as TensorFlow's */
        for (int d = r - 1; d >= 0; d--) {
            off += so[d];
            if (++idx[d] < x->shape.dims[d]) break;
            off -= so[d] * x->shape.dims[d];
            idx[d] = 0;
        }
    }
    return 0;
}

int psg_cpu_one_hot(psg_kernel_ctx_t *c) {
    const psg_tensor_t *ids = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t depth = psg_node_get_int(c->node, "depth", 1);
    float on = (float)psg_node_get_float(c->node, "on_value", 1.0);
    float off = (float)psg_node_get_float(c->node, "off_value", 0.0);
    float *o = psg_tensor_f32(out);
    int64_t n = psg_tensor_numel(ids);
    for (int64_t i = 0; i < n; i++) {
        int64_t id = ids->dtype == PSG_DT_I32 ? psg_tensor_i32(ids)[i] : psg_tensor_i64(ids)[i];
        for (int64_t k = 0; k < depth; k++)
            o[i * depth + k] = k == id ? on : off; /* an id outside [0, depth): all off */
    }
    return 0;
}

int psg_cpu_shape(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    for (int d = 0; d < x->shape.rank; d++) {
        if (x->shape.dims[d] > INT32_MAX)
            return psg_error_set("dim %d (%lld) does not fit in i32", d,
                                 (long long)x->shape.dims[d]);
        psg_tensor_i32(out)[d] = (int32_t)x->shape.dims[d];
    }
    return 0;
}
