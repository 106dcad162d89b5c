/* CPU kernels of the sparse ops: row gathers (of a tensor, of a variable under its lock),
 * the dense value of an IndexedSlices, Unique over an id map, segment sums, DynamicStitch,
 * the ids of one shard, the combiners' weights. Not the sparse updates
 * (ops/cpu/sparse_apply.c). */
#include "ops/cpu/sparse.h"
#include "ops/cpu/array.h"
#include "psgraph/error.h"
#include "psgraph/resource.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the id map ---- */

int psg_id_map_init(psg_id_map_t *m, int64_t expected) {
    int64_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    m->cap = cap;
    m->n = 0;
    m->keys = malloc((size_t)cap * sizeof *m->keys);
    m->slot = malloc((size_t)cap * sizeof *m->slot);
    if (!m->keys || !m->slot) {
        psg_id_map_free(m);
        return psg_error_set("out of memory (an id map of %lld entries)", (long long)cap);
    }
    for (int64_t i = 0; i < cap; i++) m->slot[i] = -1;
    return 0;
}

void psg_id_map_free(psg_id_map_t *m) {
    free(m->keys);
    free(m->slot);
    m->keys = NULL;
    m->slot = NULL;
}

int32_t psg_id_map_put(psg_id_map_t *m, int64_t id) {
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    int64_t mask = m->cap - 1, i = (int64_t)(h >> 20) & mask;
    while (m->slot[i] >= 0) {
        if (m->keys[i] == id) return m->slot[i];
        i = (i + 1) & mask;
    }
    m->keys[i] = id;
    m->slot[i] = m->n;
    return m->n++;
}

/* ---- gathers ---- */

/* out (n, row bytes) = src rows ix (n); rows: src's row count. */
static int gather_rows(const char *what, const char *src, int64_t rows, size_t row_bytes,
                       const psg_tensor_t *ix, char *out, bool negative_is_zero) {
    int64_t n = psg_tensor_numel(ix);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = psg_index_at(ix, i);
        if (r < 0 && negative_is_zero) {
            memset(out + (size_t)i * row_bytes, 0, row_bytes);
            continue;
        }
        if (r < 0 || r >= rows)
            return psg_error_set("index %lld (element %lld of indices) is outside [0, %lld) of %s",
                                 (long long)r, (long long)i, (long long)rows, what);
        memcpy(out + (size_t)i * row_bytes, src + (size_t)r * row_bytes, row_bytes);
    }
    return 0;
}

static size_t row_bytes_of(const psg_tensor_t *t) {
    size_t b = psg_dtype_size(t->dtype);
    for (int d = 1; d < t->shape.rank; d++) b *= (size_t)t->shape.dims[d];
    return b;
}

int psg_cpu_gather(psg_kernel_ctx_t *c) {
    const psg_tensor_t *p = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    return gather_rows("params", p->data, p->shape.dims[0], row_bytes_of(p), c->inputs[1],
                       out->data, psg_node_get_bool(c->node, "negative_is_zero", false));
}

int psg_cpu_resource_gather(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_kernel_variable(c, 0);
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    char what[300];
    snprintf(what, sizeof what, "variable '%s'", v->name);
    pthread_mutex_lock(&v->lock);
    int rc = gather_rows(what, v->value->data, v->shape.dims[0], row_bytes_of(v->value),
                         c->inputs[1], out->data, false);
    pthread_mutex_unlock(&v->lock);
    return rc;
}

int psg_cpu_indexed_slices(psg_kernel_ctx_t *c) {
    const psg_tensor_t *vals = c->inputs[0], *ix = c->inputs[1];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    memset(out->data, 0, psg_tensor_nbytes(out));
    int64_t rows = out->shape.dims[0], n = psg_tensor_numel(ix);
    int64_t d = rows > 0 ? psg_tensor_numel(out) / rows : 0;
    if (psg_tensor_numel(vals) != n * d)
        return psg_error_set("values of %lld elements are not %lld rows of %lld",
                             (long long)psg_tensor_numel(vals), (long long)n, (long long)d);
    float *o = psg_tensor_f32(out);
    const float *v = psg_tensor_f32(vals);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = psg_index_at(ix, i);
        if (r < 0 || r >= rows)
            return psg_error_set("index %lld (element %lld of indices) is outside [0, %lld)",
                                 (long long)r, (long long)i, (long long)rows);
        float *dst = o + r * d;
        const float *src = v + i * d;
        for (int64_t k = 0; k < d; k++) dst[k] += src[k];
    }
    return 0;
}

/* ---- unique, segments, stitching ---- */

/* A new output tensor of a dynamic shape, set as output i; NULL on failure. */
static psg_tensor_t *dyn_output(psg_kernel_ctx_t *c, int i, psg_dtype_t dt, const psg_shape_t *s) {
    psg_tensor_t *t = psg_tensor_new(dt, s);
    if (!t) return NULL;
    psg_kernel_set_output(c, i, t);
    psg_tensor_destroy(&t);
    return c->outputs[i];
}

int psg_cpu_unique(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    int64_t n = psg_tensor_numel(x);
    if (n > INT32_MAX) return psg_error_set("Unique of %lld ids: at most 2^31 - 1", (long long)n);
    psg_id_map_t m;
    if (psg_id_map_init(&m, n) < 0) return -1;
    psg_shape_t s = psg_shape_1d(n);
    psg_tensor_t *idx = dyn_output(c, 1, PSG_DT_I32, &s);
    int64_t *first = malloc(((size_t)n + 1) * sizeof *first);
    if (!idx || !first) {
        free(first);
        psg_id_map_free(&m);
        return idx ? psg_error_set("out of memory") : -1;
    }
    int32_t *ix = psg_tensor_i32(idx);
    for (int64_t i = 0; i < n; i++) {
        int64_t id = psg_index_at(x, i);
        int32_t before = m.n, k = psg_id_map_put(&m, id);
        if (m.n > before) first[k] = id;
        ix[i] = k;
    }
    s = psg_shape_1d(m.n);
    psg_tensor_t *y = dyn_output(c, 0, x->dtype, &s);
    for (int32_t k = 0; y && k < m.n; k++) {
        if (x->dtype == PSG_DT_I64)
            psg_tensor_i64(y)[k] = first[k];
        else
            psg_tensor_i32(y)[k] = (int32_t)first[k];
    }
    free(first);
    psg_id_map_free(&m);
    return y ? 0 : -1;
}

int psg_cpu_unsorted_segment_sum(psg_kernel_ctx_t *c) {
    const psg_tensor_t *data = c->inputs[0], *ids = c->inputs[1];
    int64_t num = psg_index_at(c->inputs[2], 0), n = psg_tensor_numel(ids);
    if (num < 0) return psg_error_set("num_segments is %lld, must be >= 0", (long long)num);
    psg_shape_t s = {1, {num}};
    for (int k = ids->shape.rank; k < data->shape.rank; k++) s.dims[s.rank++] = data->shape.dims[k];
    psg_tensor_t *out = dyn_output(c, 0, PSG_DT_F32, &s);
    if (!out) return -1;
    memset(out->data, 0, psg_tensor_nbytes(out));
    int64_t d = n > 0 ? psg_tensor_numel(data) / n : 0;
    float *o = psg_tensor_f32(out);
    const float *x = psg_tensor_f32(data);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = psg_index_at(ids, i);
        if (r < 0) continue;
        if (r >= num)
            return psg_error_set("segment id %lld (element %lld) is not below num_segments %lld",
                                 (long long)r, (long long)i, (long long)num);
        for (int64_t k = 0; k < d; k++) o[r * d + k] += x[i * d + k];
    }
    return 0;
}

int psg_cpu_dynamic_stitch(psg_kernel_ctx_t *c) {
    int n = c->num_inputs / 2;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t rows = out->shape.dims[0];
    size_t rb = rows > 0 ? psg_tensor_nbytes(out) / (size_t)rows : 0;
    char *o = out->data;
    for (int k = 0; k < n; k++) {
        const psg_tensor_t *ix = c->inputs[k];
        const char *src = c->inputs[n + k]->data;
        for (int64_t i = 0, ni = psg_tensor_numel(ix); i < ni; i++) {
            int64_t r = psg_tensor_i32(ix)[i];
            if (r < 0 || r >= rows)
                return psg_error_set("index %lld of indices %d is outside [0, %lld)", (long long)r,
                                     k, (long long)rows);
            memcpy(o + (size_t)r * rb, src + (size_t)i * rb, rb);
        }
    }
    return 0;
}

/* The shard of id and its row there, for a table of `rows` rows in n shards. */
static void shard_of(int64_t id, int64_t rows, int64_t n, bool div, int64_t *shard, int64_t *row) {
    if (!div) {
        *shard = id % n;
        *row = id / n;
        return;
    }
    int64_t q = rows / n, extra = rows % n, big = extra * (q + 1);
    if (id < big) {
        *shard = id / (q + 1);
        *row = id % (q + 1);
    } else {
        *shard = extra + (id - big) / q;
        *row = (id - big) % q;
    }
}

int psg_cpu_partition_ids(psg_kernel_ctx_t *c) {
    const psg_tensor_t *ids = c->inputs[0];
    int64_t rows = psg_node_get_int(c->node, "rows", 0),
            n = psg_node_get_int(c->node, "num_shards", 1);
    int64_t want = psg_node_get_int(c->node, "shard", 0), m = 0, len = psg_tensor_numel(ids);
    bool div = !strcmp(psg_node_get_str(c->node, "strategy", "mod"), "div");
    if ((rows + n - 1) / n > INT32_MAX) return psg_error_set("a shard of more than 2^31 - 1 rows");
    for (int64_t i = 0; i < len; i++) {
        int64_t id = psg_index_at(ids, i), k, r;
        if (id < 0 || id >= rows)
            return psg_error_set("id %lld (element %lld of ids) is outside the table's %lld rows",
                                 (long long)id, (long long)i, (long long)rows);
        shard_of(id, rows, n, div, &k, &r);
        m += k == want;
    }
    psg_shape_t s = psg_shape_1d(m);
    psg_tensor_t *local = dyn_output(c, 0, PSG_DT_I32, &s), *pos = dyn_output(c, 1, PSG_DT_I32, &s);
    if (!local || !pos) return -1;
    int32_t *l = psg_tensor_i32(local), *p = psg_tensor_i32(pos);
    for (int64_t i = 0, j = 0; i < len; i++) {
        int64_t k, r;
        shard_of(psg_index_at(ids, i), rows, n, div, &k, &r);
        if (k != want) continue;
        l[j] = (int32_t)r;
        p[j++] = (int32_t)i;
    }
    return 0;
}

int psg_cpu_segment_weights(psg_kernel_ctx_t *c) {
    const psg_tensor_t *ids = c->inputs[0];
    int64_t num = psg_index_at(c->inputs[1], 0), n = psg_tensor_numel(ids);
    const char *comb = psg_node_get_str(c->node, "combiner", "sum");
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t *count = calloc((size_t)(num > 0 ? num : 1), sizeof *count);
    if (!count) return psg_error_set("out of memory");
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        int64_t r = psg_index_at(ids, i);
        if (r >= num)
            rc = psg_error_set("segment id %lld is not below num_segments %lld", (long long)r,
                               (long long)num);
        else if (r >= 0)
            count[r]++;
    }
    float *w = psg_tensor_f32(out);
    for (int64_t i = 0; i < n && rc == 0; i++) {
        int64_t r = psg_index_at(ids, i);
        double k = r >= 0 ? (double)count[r] : 1.0;
        w[i] = !strcmp(comb, "mean")    ? (float)(1.0 / k)
               : !strcmp(comb, "sqrtn") ? (float)(1.0 / sqrt(k))
                                        : 1.0f;
    }
    free(count);
    return rc;
}
