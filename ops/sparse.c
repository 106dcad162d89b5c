/* The sparse ops: Gather, ResourceGather, IndexedSlices (the sparse gradient value),
 * Unique, UnsortedSegmentSum, DynamicStitch, PartitionIds, SegmentWeights: defs, shape
 * inference, gradients, builders, and embedding_lookup(_sparse) built from them.
 * Kernels: ops/cpu/sparse.c. Not the sparse updates (ops/sparse_apply.c). */
#include "ops/cpu/sparse.h"
#include "ops/cuda/kernels.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_sparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- inference ---- */

static bool is_int(psg_dtype_t dt) {
    return dt == PSG_DT_I32 || dt == PSG_DT_I64;
}

static int expect_int(psg_infer_ctx_t *c, int i, const char *what) {
    if (!is_int(c->in_dtypes[i]))
        return psg_error_set("%s (input %d) must be i32 or i64, got %s", what, i,
                             psg_dtype_name(c->in_dtypes[i]));
    return 0;
}

/* indices.shape + params.shape[1:] */
static int gather_shape(psg_infer_ctx_t *c, const psg_shape_t *params, psg_dtype_t dt) {
    const psg_shape_t *ix = &c->in_shapes[1];
    if (expect_int(c, 1, "indices") < 0) return -1;
    if (params->rank == 0) return psg_error_set("params must have rank >= 1");
    c->out_dtypes[0] = dt;
    if (params->rank < 0 || ix->rank < 0) {
        c->out_shapes[0] = psg_shape_unknown();
        return 0;
    }
    if (ix->rank + params->rank - 1 > PSG_MAX_RANK)
        return psg_error_set("the result would have rank %d, more than %d",
                             ix->rank + params->rank - 1, PSG_MAX_RANK);
    psg_shape_t o = *ix;
    for (int d = 1; d < params->rank; d++) o.dims[o.rank++] = params->dims[d];
    c->out_shapes[0] = o;
    return 0;
}

static int infer_gather(psg_infer_ctx_t *c) {
    return gather_shape(c, &c->in_shapes[0], c->in_dtypes[0]);
}

static int infer_resource_gather(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    const psg_attr_t *dt = psg_node_attr(c->node, "dtype");
    return gather_shape(c, &c->in_shapes[0],
                        dt && dt->type == PSG_ATTR_DTYPE ? dt->u.dtype : PSG_DT_F32);
}

static int infer_indexed_slices(psg_infer_ctx_t *c) {
    const psg_shape_t *v = &c->in_shapes[0], *ix = &c->in_shapes[1], *like = &c->in_shapes[2];
    if (expect_int(c, 1, "indices") < 0) return -1;
    if (c->in_dtypes[0] != PSG_DT_F32)
        return psg_error_set("values must be f32, got %s", psg_dtype_name(c->in_dtypes[0]));
    if (v->rank >= 0 && ix->rank >= 0 && like->rank >= 0) {
        bool ok = v->rank == ix->rank + like->rank - 1;
        for (int d = 0; ok && d < ix->rank; d++)
            ok = v->dims[d] < 0 || ix->dims[d] < 0 || v->dims[d] == ix->dims[d];
        for (int d = 1; ok && d < like->rank; d++)
            ok = v->dims[ix->rank + d - 1] < 0 || like->dims[d] < 0 ||
                 v->dims[ix->rank + d - 1] == like->dims[d];
        if (!ok) {
            char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX], e[PSG_SHAPE_STR_MAX];
            return psg_error_set("values %s are not rows %s of a tensor %s",
                                 psg_shape_str(v, a, sizeof a), psg_shape_str(ix, b, sizeof b),
                                 psg_shape_str(like, e, sizeof e));
        }
    }
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = *like;
    return 0;
}

static int infer_unique(psg_infer_ctx_t *c) {
    if (expect_int(c, 0, "x") < 0 || psg_infer_expect_rank(c, 0, 1) < 0) return -1;
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = psg_shape_1d(-1);
    c->out_dtypes[1] = PSG_DT_I32;
    c->out_shapes[1] = c->in_shapes[0];
    return 0;
}

static int expect_scalar_int(psg_infer_ctx_t *c, int i, const char *what) {
    if (expect_int(c, i, what) < 0) return -1;
    if (c->in_shapes[i].rank > 0 && psg_shape_numel(&c->in_shapes[i]) != 1)
        return psg_error_set("%s (input %d) must be a scalar", what, i);
    return 0;
}

/* data (n..., d...), ids (n...) -> (?, d...) */
static int infer_segment_sum(psg_infer_ctx_t *c) {
    const psg_shape_t *d = &c->in_shapes[0], *ix = &c->in_shapes[1];
    if (psg_infer_expect_dtype(c, 0, PSG_DT_F32) < 0 || expect_int(c, 1, "segment_ids") < 0 ||
        expect_scalar_int(c, 2, "num_segments") < 0)
        return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    if (d->rank < 0 || ix->rank < 0) {
        c->out_shapes[0] = psg_shape_unknown();
        return 0;
    }
    bool ok = d->rank >= ix->rank;
    for (int k = 0; ok && k < ix->rank; k++)
        ok = d->dims[k] < 0 || ix->dims[k] < 0 || d->dims[k] == ix->dims[k];
    if (!ok) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        return psg_error_set("segment_ids %s do not prefix data %s", psg_shape_str(ix, a, sizeof a),
                             psg_shape_str(d, b, sizeof b));
    }
    psg_shape_t o = {1, {-1}};
    for (int k = ix->rank; k < d->rank; k++) o.dims[o.rank++] = d->dims[k];
    c->out_shapes[0] = o;
    return 0;
}

/* indices_0..n-1 (m_k) i32, data_0..n-1 (m_k, d...) -> (sum m_k, d...) */
static int infer_dynamic_stitch(psg_infer_ctx_t *c) {
    int n = c->num_inputs / 2;
    if (c->num_inputs % 2 || n < 1)
        return psg_error_set("needs pairs of indices and data, got %d inputs", c->num_inputs);
    psg_shape_t o = c->in_shapes[n];
    if (o.rank < 1) return psg_error_set("data must have rank >= 1");
    o.dims[0] = 0;
    for (int k = 0; k < n; k++) {
        if (psg_infer_expect_dtype(c, k, PSG_DT_I32) < 0 || psg_infer_expect_rank(c, k, 1) < 0)
            return -1;
        if (c->in_dtypes[n + k] != c->in_dtypes[n])
            return psg_error_set("data %d is not of data 0's dtype", k);
        const psg_shape_t *s = &c->in_shapes[n + k];
        bool ok = s->rank == o.rank;
        for (int d = 1; ok && d < o.rank; d++) ok = s->dims[d] == o.dims[d];
        if (!ok) {
            char a[PSG_SHAPE_STR_MAX];
            return psg_error_set("data %d has shape %s, unlike data 0", k,
                                 psg_shape_str(s, a, sizeof a));
        }
        int64_t m = c->in_shapes[k].dims[0];
        o.dims[0] = o.dims[0] < 0 || m < 0 ? -1 : o.dims[0] + m;
    }
    c->out_dtypes[0] = c->in_dtypes[n];
    c->out_shapes[0] = o;
    return 0;
}

static int infer_partition_ids(psg_infer_ctx_t *c) {
    if (expect_int(c, 0, "ids") < 0 || psg_infer_expect_rank(c, 0, 1) < 0) return -1;
    int64_t rows = psg_node_get_int(c->node, "rows", 0),
            n = psg_node_get_int(c->node, "num_shards", 0);
    int64_t k = psg_node_get_int(c->node, "shard", -1);
    if (rows < 1 || n < 1 || n > rows || k < 0 || k >= n)
        return psg_error_set("shard %lld of %lld of a table of %lld rows does not exist",
                             (long long)k, (long long)n, (long long)rows);
    c->out_dtypes[0] = c->out_dtypes[1] = PSG_DT_I32;
    c->out_shapes[0] = c->out_shapes[1] = psg_shape_1d(-1);
    return 0;
}

static int infer_segment_weights(psg_infer_ctx_t *c) {
    if (expect_int(c, 0, "segment_ids") < 0 || psg_infer_expect_rank(c, 0, 1) < 0 ||
        expect_scalar_int(c, 1, "num_segments") < 0)
        return -1;
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = psg_shape_2d(c->in_shapes[0].dims[0], 1);
    return 0;
}

/* ---- gradients ---- */

/* A sparse gradient of `like` (a tensor or a handle) from dy (ix.shape + rows) at ix,
 * both flattened to (n, d...) and (n). */
static psg_endpoint_t slices_of(psg_graph_t *g, psg_endpoint_t dy, psg_endpoint_t ix,
                                psg_endpoint_t like) {
    const psg_shape_t *ls = psg_graph_shape(g, like);
    if (ls->rank < 1) {
        psg_error_set("the gradient needs the rank of the gathered tensor when built");
        return PSG_NO_ENDPOINT;
    }
    psg_shape_t vs = *ls;
    vs.dims[0] = -1;
    for (int d = 1; d < vs.rank; d++)
        if (vs.dims[d] < 0) {
            psg_error_set("the gradient needs the row shape of the gathered tensor when built");
            return PSG_NO_ENDPOINT;
        }
    psg_shape_t flat = psg_shape_1d(-1);
    /* indices already flat are used as they are: on a ps the update then reads the very
     * ids its gather read, sent once */
    const psg_shape_t *is = psg_graph_shape(g, ix);
    psg_endpoint_t v = psg_reshape(g, "values", dy, &vs);
    psg_endpoint_t i = is->rank == 1 ? ix : psg_reshape(g, "indices", ix, &flat);
    return psg_indexed_slices(g, NULL, v, i, like);
}

static int grad_gather(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                       psg_endpoint_t *dx) {
    dx[0] = slices_of(g, dy[0], psg_node_input(n, 1), psg_node_input(n, 0));
    dx[1] = PSG_NO_ENDPOINT;
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

static int grad_indexed_slices(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                               psg_endpoint_t *dx) {
    dx[0] = psg_gather(g, NULL, dy[0], psg_node_input(n, 1));
    dx[1] = dx[2] = PSG_NO_ENDPOINT;
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

static int grad_segment_sum(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                            psg_endpoint_t *dx) {
    /* a dropped row (negative id) gets no gradient: Gather refuses negative ids, so
     * the ids are clamped by the kernel's mode "drop negative" */
    psg_node_builder_t *b = psg_node_begin(g, "Gather", NULL);
    psg_node_add_input(b, dy[0]);
    psg_node_add_input(b, psg_node_input(n, 1));
    psg_node_attr_bool(b, "negative_is_zero", true);
    dx[0] = psg_node_finish_ep(b);
    dx[1] = dx[2] = PSG_NO_ENDPOINT;
    return psg_endpoint_valid(dx[0]) ? 0 : -1;
}

static int grad_dynamic_stitch(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                               psg_endpoint_t *dx) {
    int k = psg_node_num_inputs(n) / 2;
    for (int i = 0; i < k; i++) {
        dx[i] = PSG_NO_ENDPOINT;
        dx[k + i] = psg_gather(g, NULL, dy[0], psg_node_input(n, i));
        if (!psg_endpoint_valid(dx[k + i])) return -1;
    }
    return 0;
}

/* ---- defs ---- */

#define DYN PSG_OP_DYNAMIC_SHAPE
static const psg_op_def_t op_gather = {.name = "Gather",
                                       .num_inputs = 2,
                                       .num_outputs = 1,
                                       .infer = infer_gather,
                                       .grad = grad_gather,
                                       .cpu = psg_cpu_gather,
                                       .cuda = PSG_GPU_KERNEL(psg_gpu_gather)};
static const psg_op_def_t op_resource_gather = {.name = "ResourceGather",
                                                .num_inputs = 2,
                                                .num_outputs = 1,
                                                .flags = PSG_OP_STATEFUL,
                                                .infer = infer_resource_gather,
                                                .grad = grad_gather,
                                                .cpu = psg_cpu_resource_gather};
static const psg_op_def_t op_indexed_slices = {.name = "IndexedSlices",
                                               .num_inputs = 3,
                                               .num_outputs = 1,
                                               .infer = infer_indexed_slices,
                                               .grad = grad_indexed_slices,
                                               .cpu = psg_cpu_indexed_slices};
static const psg_op_def_t op_unique = {.name = "Unique",
                                       .num_inputs = 1,
                                       .num_outputs = 2,
                                       .flags = DYN,
                                       .infer = infer_unique,
                                       .grad = psg_grad_none,
                                       .cpu = psg_cpu_unique};
static const psg_op_def_t op_segment_sum = {.name = "UnsortedSegmentSum",
                                            .num_inputs = 3,
                                            .num_outputs = 1,
                                            .flags = DYN,
                                            .infer = infer_segment_sum,
                                            .grad = grad_segment_sum,
                                            .cpu = psg_cpu_unsorted_segment_sum};
static const psg_op_def_t op_dynamic_stitch = {.name = "DynamicStitch",
                                               .num_inputs = -1,
                                               .num_outputs = 1,
                                               .infer = infer_dynamic_stitch,
                                               .grad = grad_dynamic_stitch,
                                               .cpu = psg_cpu_dynamic_stitch};
static const psg_op_def_t op_partition_ids = {.name = "PartitionIds",
                                              .num_inputs = 1,
                                              .num_outputs = 2,
                                              .flags = DYN,
                                              .infer = infer_partition_ids,
                                              .grad = psg_grad_none,
                                              .cpu = psg_cpu_partition_ids};
static const psg_op_def_t op_segment_weights = {.name = "SegmentWeights",
                                                .num_inputs = 2,
                                                .num_outputs = 1,
                                                .infer = infer_segment_weights,
                                                .grad = psg_grad_none,
                                                .cpu = psg_cpu_segment_weights};

const psg_op_def_t *const psg_sparse_ops[] = {
    &op_gather,         &op_resource_gather, &op_indexed_slices,  &op_unique, &op_segment_sum,
    &op_dynamic_stitch, &op_partition_ids,   &op_segment_weights, NULL,
};

/* ---- builders ---- */

psg_endpoint_t psg_gather(psg_graph_t *g, const char *name, psg_endpoint_t params,
                          psg_endpoint_t indices) {
    return psg_op_inputs(g, "Gather", name, 2, (psg_endpoint_t[]){params, indices});
}

psg_endpoint_t psg_resource_gather(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                   psg_endpoint_t indices) {
    psg_node_builder_t *b = psg_node_begin(g, "ResourceGather", name);
    psg_node_add_input(b, handle);
    psg_node_add_input(b, indices);
    if (handle.node >= 0 && handle.node < psg_graph_num_nodes(g)) {
        const psg_attr_t *dt = psg_node_attr(psg_graph_node(g, handle.node), "dtype");
        if (dt && dt->type == PSG_ATTR_DTYPE) psg_node_attr_dtype(b, "dtype", dt->u.dtype);
    }
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_indexed_slices(psg_graph_t *g, const char *name, psg_endpoint_t values,
                                  psg_endpoint_t indices, psg_endpoint_t like) {
    return psg_op_inputs(g, "IndexedSlices", name, 3, (psg_endpoint_t[]){values, indices, like});
}

bool psg_is_indexed_slices(const psg_graph_t *g, psg_endpoint_t e, psg_endpoint_t *values,
                           psg_endpoint_t *indices, psg_endpoint_t *like) {
    if (e.node < 0 || e.node >= psg_graph_num_nodes(g) || e.index != 0) return false;
    const psg_node_t *n = psg_graph_node(g, e.node);
    if (strcmp(psg_node_op(n), "IndexedSlices")) return false;
    if (values) *values = psg_node_input(n, 0);
    if (indices) *indices = psg_node_input(n, 1);
    if (like) *like = psg_node_input(n, 2);
    return true;
}

psg_endpoint_t psg_sparse_sum(psg_graph_t *g, int n, const psg_endpoint_t *grads) {
    psg_endpoint_t like0 = PSG_NO_ENDPOINT, like,
                   *vals = malloc(sizeof *vals * ((size_t)n + 1) * 2), *ix = vals ? vals + n : NULL,
                   sum = PSG_NO_ENDPOINT;
    if (!vals) {
        psg_error_set("out of memory");
        return PSG_NO_ENDPOINT;
    }
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        ok = psg_is_indexed_slices(g, grads[i], &vals[i], &ix[i], &like);
        if (i == 0) like0 = like;
        ok = ok && like.node == like0.node && like.index == like0.index &&
             psg_graph_dtype(g, ix[i]) == psg_graph_dtype(g, ix[0]);
    }
    if (ok) {
        psg_endpoint_t v = psg_concat(g, "values", n, vals, 0),
                       i = psg_concat(g, "indices", n, ix, 0);
        sum = psg_indexed_slices(g, "sum", v, i, like0);
    }
    free(vals);
    return sum;
}

int psg_unique(psg_graph_t *g, const char *name, psg_endpoint_t x) {
    psg_node_builder_t *b = psg_node_begin(g, "Unique", name);
    psg_node_add_input(b, x);
    return psg_node_finish(b);
}

psg_endpoint_t psg_unsorted_segment_sum(psg_graph_t *g, const char *name, psg_endpoint_t data,
                                        psg_endpoint_t segment_ids, psg_endpoint_t num_segments) {
    return psg_op_inputs(g, "UnsortedSegmentSum", name, 3,
                         (psg_endpoint_t[]){data, segment_ids, num_segments});
}

psg_endpoint_t psg_dynamic_stitch(psg_graph_t *g, const char *name, int n,
                                  const psg_endpoint_t *indices, const psg_endpoint_t *data) {
    psg_node_builder_t *b = psg_node_begin(g, "DynamicStitch", name);
    for (int i = 0; i < n; i++) psg_node_add_input(b, indices[i]);
    for (int i = 0; i < n; i++) psg_node_add_input(b, data[i]);
    return psg_node_finish_ep(b);
}

int psg_partition_ids(psg_graph_t *g, const char *name, psg_endpoint_t ids, int64_t rows,
                      int num_shards, int shard, psg_partition_strategy_t strategy) {
    psg_node_builder_t *b = psg_node_begin(g, "PartitionIds", name);
    psg_node_add_input(b, ids);
    psg_node_attr_int(b, "rows", rows);
    psg_node_attr_int(b, "num_shards", num_shards);
    psg_node_attr_int(b, "shard", shard);
    psg_node_attr_str(b, "strategy", strategy == PSG_PARTITION_DIV ? "div" : "mod");
    return psg_node_finish(b);
}

psg_endpoint_t psg_segment_weights(psg_graph_t *g, const char *name, psg_endpoint_t segment_ids,
                                   psg_endpoint_t num_segments, psg_combiner_t combiner) {
    static const char *const names[] = {"sum", "mean", "sqrtn"};
    psg_node_builder_t *b = psg_node_begin(g, "SegmentWeights", name);
    psg_node_add_input(b, segment_ids);
    psg_node_add_input(b, num_segments);
    psg_node_attr_str(b, "combiner", names[(int)combiner % 3]);
    return psg_node_finish_ep(b);
}

int psg_partition_strategy_parse(const char *name, psg_partition_strategy_t *s) {
    if (name && !strcmp(name, "mod"))
        *s = PSG_PARTITION_MOD;
    else if (name && !strcmp(name, "div"))
        *s = PSG_PARTITION_DIV;
    else
        return psg_error_set("unknown partition strategy '%s' (mod, div)", name ? name : "(null)");
    return 0;
}

/* The most shards a lookup stitches (the placement's PSG_MAX_SHARDS). */
#define LOOKUP_MAX_SHARDS 64

/* The rows of flat ids (n) from the table's shards: (n, d...). */
static psg_endpoint_t lookup_flat(psg_graph_t *g, const psg_embedding_table_t *t,
                                  psg_endpoint_t ids) {
    if (t->num_shards == 1) return psg_resource_gather(g, "gather", t->shards[0], ids);
    psg_endpoint_t pos[LOOKUP_MAX_SHARDS], rows[LOOKUP_MAX_SHARDS];
    if (t->num_shards > LOOKUP_MAX_SHARDS) {
        psg_error_set("embedding table of %d shards: at most %d", t->num_shards, LOOKUP_MAX_SHARDS);
        return PSG_NO_ENDPOINT;
    }
    for (int k = 0; k < t->num_shards; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "partition_%d", k);
        int id = psg_partition_ids(g, nm, ids, t->rows, t->num_shards, k, t->strategy);
        if (id < 0) return PSG_NO_ENDPOINT;
        snprintf(nm, sizeof nm, "gather_%d", k);
        pos[k] = (psg_endpoint_t){id, 1};
        rows[k] = psg_resource_gather(g, nm, t->shards[k], (psg_endpoint_t){id, 0});
    }
    return psg_dynamic_stitch(g, "stitch", t->num_shards, pos, rows);
}

psg_endpoint_t psg_embedding_lookup(psg_graph_t *g, const char *name,
                                    const psg_embedding_table_t *table, psg_endpoint_t ids) {
    if (!table || table->num_shards < 1 || !table->shards) {
        psg_error_set("embedding_lookup '%s': a table needs at least one shard", name ? name : "");
        return PSG_NO_ENDPOINT;
    }
    const psg_shape_t *is = psg_graph_shape(g, ids), *ts = psg_graph_shape(g, table->shards[0]);
    if (!is || is->rank < 0 || !ts || ts->rank < 1) {
        psg_error_set("embedding_lookup '%s': ids need a known rank and the table rows",
                      name ? name : "");
        return PSG_NO_ENDPOINT;
    }
    psg_shape_t out = *is;
    for (int d = 1; d < ts->rank; d++) out.dims[out.rank++] = ts->dims[d];
    if (psg_graph_push_scope(g, name ? name : "embedding_lookup") < 0) return PSG_NO_ENDPOINT;
    psg_shape_t flat = psg_shape_1d(-1);
    psg_endpoint_t f = is->rank == 1 ? ids : psg_reshape(g, "flat_ids", ids, &flat), rows;
    if (table->unique) {
        int u = psg_unique(g, "unique", f);
        rows = u < 0 ? PSG_NO_ENDPOINT : lookup_flat(g, table, (psg_endpoint_t){u, 0});
        rows = psg_gather(g, "rows", rows, (psg_endpoint_t){u, 1});
    } else {
        rows = lookup_flat(g, table, f);
    }
    psg_endpoint_t r = is->rank == 1 ? rows : psg_reshape(g, "result", rows, &out);
    psg_graph_pop_scope(g);
    return r;
}

psg_endpoint_t psg_embedding_lookup_sparse(psg_graph_t *g, const char *name,
                                           const psg_embedding_table_t *table, psg_endpoint_t ids,
                                           psg_endpoint_t segment_ids, psg_endpoint_t num_segments,
                                           psg_combiner_t combiner) {
    if (psg_graph_push_scope(g, name ? name : "embedding_lookup_sparse") < 0)
        return PSG_NO_ENDPOINT;
    psg_endpoint_t rows = psg_embedding_lookup(g, "lookup", table, ids);
    if (combiner != PSG_COMBINER_SUM)
        rows = psg_mul(g, "weighted", rows,
                       psg_segment_weights(g, "weights", segment_ids, num_segments, combiner));
    psg_endpoint_t r = psg_unsorted_segment_sum(g, "combine", rows, segment_ids, num_segments);
    psg_graph_pop_scope(g);
    return r;
}
