/* Gradient compression ops (sync/compress.c uses them): TopKAbs keeps the k
 * entries of largest magnitude of a tensor as (values, flat indices), and
 * ScatterDense puts such a pair back into a dense tensor of a given shape,
 * zeros elsewhere. Not differentiable: they move gradients, they are not on a
 * path autodiff walks. Defs, shape inference, builders and the CPU kernels
 * (plain loops: the reference). */
#include "psgraph/error.h"
#include "psgraph/kernel.h"
#include "psgraph/ops_array.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* TopKAbs(x f32 any shape[, ratio f32 scalar]), attr k in [1, numel]: values f32 (k'),
 * indices i32 (k'), k' = k, or with a ratio max(k, ceil(ratio * numel)) up to numel (a
 * share that changes from step to step: the sparsity's warm-up). */
static int infer_topk_abs(psg_infer_ctx_t *c) {
    if (c->in_dtypes[0] != PSG_DT_F32)
        return psg_error_set("x must be f32, got %s", psg_dtype_name(c->in_dtypes[0]));
    if (c->num_inputs > 2)
        return psg_error_set("takes x and at most a ratio, got %d inputs", c->num_inputs);
    if (c->num_inputs == 2 && (c->in_dtypes[1] != PSG_DT_F32 || c->in_shapes[1].rank != 0))
        return psg_error_set("ratio must be an f32 scalar");
    int64_t k = psg_node_get_int(c->node, "k", 0);
    if (k < 1) return psg_error_set("k must be >= 1 (got %lld)", (long long)k);
    if (psg_shape_is_complete(&c->in_shapes[0]) && k > psg_shape_numel(&c->in_shapes[0]))
        return psg_error_set("k %lld is more than the %lld elements of x", (long long)k,
                             (long long)psg_shape_numel(&c->in_shapes[0]));
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_dtypes[1] = PSG_DT_I32;
    c->out_shapes[0] = c->out_shapes[1] = psg_shape_1d(c->num_inputs == 2 ? -1 : k);
    return 0;
}

/* ScatterDense(values f32 (k), indices i32 (k)), attr shape: f32 of that shape. */
static int infer_scatter_dense(psg_infer_ctx_t *c) {
    const psg_attr_t *a = psg_node_attr(c->node, "shape");
    if (!a || a->type != PSG_ATTR_SHAPE || !psg_shape_is_complete(&a->u.shape))
        return psg_error_set("needs a complete 'shape' attribute");
    if (c->in_dtypes[0] != PSG_DT_F32 || c->in_dtypes[1] != PSG_DT_I32)
        return psg_error_set("values must be f32 and indices i32");
    if (c->in_shapes[0].rank != 1 || c->in_shapes[1].rank != 1 ||
        c->in_shapes[0].dims[0] != c->in_shapes[1].dims[0])
        return psg_error_set("values and indices must be vectors of one length");
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = a->u.shape;
    return 0;
}

typedef struct {
    float mag;
    int32_t i;
} entry_t;

/* larger magnitude first; ties by the lower index, so the choice is repeatable */
static int by_magnitude(const void *pa, const void *pb) {
    const entry_t *a = pa, *b = pb;
    if (a->mag != b->mag) return a->mag < b->mag ? 1 : -1;
    return (a->i > b->i) - (a->i < b->i);
}

/* Moves the k entries first under by_magnitude to e[0..k), in that order: a quickselect
 * (a total order: indices differ), then a sort of those k only; the same k entries in the
 * same order as a sort of all n, in O(n + k log k). */
static void select_largest(entry_t *e, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        entry_t a = e[lo], b = e[lo + (hi - lo) / 2], c = e[hi], pivot; /* median of three */
        if (by_magnitude(&a, &b) > 0) {
            entry_t t = a;
            a = b;
            b = t;
        }
        if (by_magnitude(&b, &c) > 0) b = c;
        pivot = by_magnitude(&a, &b) > 0 ? a : b;
        int64_t i = lo, j = hi;
        while (i <= j) { /* Hoare partition around the pivot's value */
            while (by_magnitude(&e[i], &pivot) < 0) i++;
            while (by_magnitude(&e[j], &pivot) > 0) j--;
            if (i <= j) {
                entry_t t = e[i];
                e[i++] = e[j];
                e[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
    qsort(e, (size_t)k, sizeof *e, by_magnitude);
}

/* A new output tensor of k f32 (i = 0) or i32 entries, set as output i; NULL on failure. */
static psg_tensor_t *vector_output(psg_kernel_ctx_t *c, int i, int64_t k) {
    psg_shape_t s = psg_shape_1d(k);
    psg_tensor_t *t = psg_tensor_new(i == 0 ? PSG_DT_F32 : PSG_DT_I32, &s);
    if (!t) return NULL;
    psg_kernel_set_output(c, i, t);
    psg_tensor_destroy(&t);
    return c->outputs[i];
}

/* x is (numel); values, indices are (k): the k largest |x|, by magnitude. */
static int cpu_topk_abs(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    int64_t n = psg_tensor_numel(x), k = psg_node_get_int(c->node, "k", 0);
    if (c->num_inputs == 2) {
        double r = psg_tensor_f32(c->inputs[1])[0];
        if (!(r >= 0)) return psg_error_set("ratio %g is not >= 0", r);
        int64_t kr = r >= 1 ? n : (int64_t)ceil(r * (double)n);
        k = kr > k ? kr : k;
    }
    if (k < 1 || k > n || n > INT32_MAX)
        return psg_error_set("k %lld of %lld elements", (long long)k, (long long)n);
    psg_tensor_t *v = vector_output(c, 0, k), *ix = vector_output(c, 1, k);
    entry_t *e = malloc(sizeof *e * (size_t)n);
    if (!v || !ix || !e) {
        free(e);
        return v && ix ? psg_error_set("out of memory") : -1;
    }
    const float *xs = psg_tensor_f32(x);
    /* a NaN as the largest magnitude: the order stays total (the selection needs it) and
     * a diverged gradient reaches the ps */
    for (int64_t i = 0; i < n; i++)
        e[i] = (entry_t){isnan(xs[i]) ? INFINITY : fabsf(xs[i]), (int32_t)i};
    select_largest(e, n, k);
    for (int64_t j = 0; j < k; j++) {
        psg_tensor_f32(v)[j] = xs[e[j].i];
        psg_tensor_i32(ix)[j] = e[j].i;
    }
    free(e);
    return 0;
}

/* values, indices are (k); out is the attr's shape, zeros but at the indices (which
 * may come from a peer: each is checked). */
static int cpu_scatter_dense(psg_kernel_ctx_t *c) {
    const psg_tensor_t *v = c->inputs[0], *ix = c->inputs[1];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t n = psg_tensor_numel(out), k = psg_tensor_numel(v);
    if (psg_tensor_numel(ix) != k)
        return psg_error_set("%lld values but %lld indices", (long long)k,
                             (long long)psg_tensor_numel(ix));
    float *o = psg_tensor_f32(out);
    memset(o, 0, sizeof *o * (size_t)n);
    for (int64_t j = 0; j < k; j++) {
        int32_t i = psg_tensor_i32(ix)[j];
        if (i < 0 || i >= n)
            return psg_error_set("index %d at %lld is not in [0, %lld)", i, (long long)j,
                                 (long long)n);
        o[i] += psg_tensor_f32(v)[j];
    }
    return 0;
}

static const psg_op_def_t op_topk_abs = {.name = "TopKAbs",
                                         .num_inputs = -1,
                                         .num_outputs = 2,
                                         .flags = PSG_OP_DYNAMIC_SHAPE,
                                         .infer = infer_topk_abs,
                                         .cpu = cpu_topk_abs};
static const psg_op_def_t op_scatter_dense = {.name = "ScatterDense",
                                              .num_inputs = 2,
                                              .num_outputs = 1,
                                              .infer = infer_scatter_dense,
                                              .cpu = cpu_scatter_dense};

const psg_op_def_t *const psg_compress_ops[] = {&op_topk_abs, &op_scatter_dense, NULL};

int psg_topk_abs(psg_graph_t *g, const char *name, psg_endpoint_t x, int64_t k,
                 psg_endpoint_t *values, psg_endpoint_t *indices) {
    return psg_topk_abs_ratio(g, name, x, k, PSG_NO_ENDPOINT, values, indices);
}

int psg_topk_abs_ratio(psg_graph_t *g, const char *name, psg_endpoint_t x, int64_t k,
                       psg_endpoint_t ratio, psg_endpoint_t *values, psg_endpoint_t *indices) {
    psg_node_builder_t *b = psg_node_begin(g, "TopKAbs", name);
    psg_node_add_input(b, x);
    if (psg_endpoint_valid(ratio)) psg_node_add_input(b, ratio);
    psg_node_attr_int(b, "k", k);
    int id = psg_node_finish(b);
    *values = (psg_endpoint_t){id, 0};
    *indices = (psg_endpoint_t){id, 1};
    return id;
}

psg_endpoint_t psg_scatter_dense(psg_graph_t *g, const char *name, psg_endpoint_t values,
                                 psg_endpoint_t indices, const psg_shape_t *shape) {
    psg_node_builder_t *b = psg_node_begin(g, "ScatterDense", name);
    psg_node_add_input(b, values);
    psg_node_add_input(b, indices);
    psg_node_attr_shape(b, "shape", shape);
    return psg_node_finish_ep(b);
}
