/* A checkpoint's values in an inference graph's variables: which model it is, and each
 * variable's tensor found by name or merged from the shards a cluster made of it (column
 * shards of a fully connected weight, row shards of an embedding table). Not the graph
 * (serving/servable.c). */
#include "serving/servable_internal.h"

#include "psgraph/error.h"
#include "psgraph/ops_train.h"

#include <stdio.h>
#include <string.h>

#define MAX_PARTS 64

static bool has_prefix(const psg_checkpoint_t *ck, const char *prefix) {
    size_t n = strlen(prefix);
    for (int i = 0; i < psg_checkpoint_num_tensors(ck); i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        if (!strncmp(e.name, prefix, n)) return true;
    }
    return false;
}

bool psg_serving_has_ema(const psg_checkpoint_t *ck) {
    for (int i = 0; i < psg_checkpoint_num_tensors(ck); i++) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        const char *s = strstr(e.name, "/ExponentialMovingAverage");
        if (s && !s[strlen("/ExponentialMovingAverage")]) return true;
    }
    return false;
}

int psg_serving_detect_model(const psg_checkpoint_t *ck, char *model, size_t size) {
    const char *m = NULL;
    if (has_prefix(ck, "InceptionV3/"))
        m = "inception3";
    else if (has_prefix(ck, "wide_deep/"))
        m = "wide-deep";
    else if (has_prefix(ck, "model/conv1/"))
        m = "cnn";
    else if (has_prefix(ck, "model/fc3/"))
        m = "mlp";
    if (!m)
        return psg_error_set(
            "%s: no model of psgraph train in it (looked for InceptionV3/, wide_deep/, "
            "model/conv1/ (cnn), model/fc3/ (mlp)); name one with --model",
            psg_checkpoint_path(ck));
    snprintf(model, size, "%s", m);
    return 0;
}

/* The entries "name/part_0" .. "name/part_{n-1}" of ck into parts; their number (0: none).
 * -1 when there are more than MAX_PARTS. */
static int find_parts(const psg_checkpoint_t *ck, const char *name, psg_checkpoint_entry_t *parts) {
    int n = 0;
    for (;; n++) {
        char part[600];
        snprintf(part, sizeof part, "%s/part_%d", name, n);
        int i = psg_checkpoint_find(ck, part);
        if (i < 0) return n;
        if (n == MAX_PARTS) return psg_error_set("'%s' has more than %d shards", name, MAX_PARTS);
        psg_checkpoint_entry(ck, i, &parts[n]);
    }
}

/* Whether the parts are column shards (equal rows, columns added up) of a rank-2 tensor,
 * else row shards (equal trailing dims, rows added up), and the merged shape: the one of
 * `want` (the variable's shape) when given, else columns for a fully connected layer's
 * "weights" (what --shard-bytes splits), rows otherwise (a partitioned table). */
static int merged_shape(const char *name, int n, const psg_checkpoint_entry_t *parts,
                        const psg_shape_t *want, psg_shape_t *s, bool *columns) {
    bool rows_ok = true, cols_ok = parts[0].shape.rank == 2;
    int64_t rows = 0, cols = 0;
    for (int k = 0; k < n; k++) {
        const psg_shape_t *p = &parts[k].shape;
        if (parts[k].dtype != parts[0].dtype || p->rank != parts[0].shape.rank)
            return psg_error_set("the shards of '%s' differ in dtype or rank", name);
        for (int d = 1; d < p->rank; d++) rows_ok = rows_ok && p->dims[d] == parts[0].shape.dims[d];
        cols_ok = cols_ok && p->dims[0] == parts[0].shape.dims[0];
        rows += p->dims[0];
        if (p->rank == 2) cols += p->dims[1];
    }
    psg_shape_t by_rows = parts[0].shape, by_cols = parts[0].shape;
    by_rows.dims[0] = rows;
    if (cols_ok) by_cols.dims[1] = cols;
    if (want) {
        *columns = cols_ok && psg_shape_equal(&by_cols, want) &&
                   !(rows_ok && psg_shape_equal(&by_rows, want) && n == 1);
        if (!*columns && !(rows_ok && psg_shape_equal(&by_rows, want))) {
            char a[128];
            return psg_error_set("the %d shards of '%s' (each %s) make no %s", n, name,
                                 psg_shape_str(&parts[0].shape, a, sizeof a),
                                 psg_shape_str(want, a, sizeof a));
        }
    } else {
        *columns = n > 1 && cols_ok && strstr(name, "weights");
        if (!*columns && !rows_ok)
            return psg_error_set("the shards of '%s' are neither its rows nor its columns", name);
    }
    *s = *columns ? by_cols : by_rows;
    return 0;
}

int psg_serving_tensor_shape(const psg_checkpoint_t *ck, const char *name, psg_shape_t *shape) {
    int i = psg_checkpoint_find(ck, name);
    if (i >= 0) {
        psg_checkpoint_entry_t e;
        psg_checkpoint_entry(ck, i, &e);
        *shape = e.shape;
        return 0;
    }
    psg_checkpoint_entry_t parts[MAX_PARTS];
    int n = find_parts(ck, name, parts);
    bool columns;
    if (n <= 0 || merged_shape(name, n, parts, NULL, shape, &columns) < 0) return -1;
    return 0;
}

/* The parts merged into dst (of the merged shape). */
static void merge(int n, const psg_checkpoint_entry_t *parts, bool columns, bool div,
                  const psg_shape_t *s, size_t elem, unsigned char *dst) {
    int64_t rows = s->dims[0], row_bytes = (int64_t)elem;
    for (int d = 1; d < s->rank; d++) row_bytes *= s->dims[d];
    if (columns) { /* row r of the whole = row r of each part, side by side */
        int64_t at = 0;
        for (int k = 0; k < n; k++) {
            int64_t w = parts[k].shape.dims[1] * (int64_t)elem;
            for (int64_t r = 0; r < rows; r++)
                memcpy(dst + r * row_bytes + at, (const unsigned char *)parts[k].data + r * w,
                       (size_t)w);
            at += w;
        }
    } else if (div || n == 1) { /* contiguous ranges of rows */
        size_t at = 0;
        for (int k = 0; k < n; k++) {
            memcpy(dst + at, parts[k].data, parts[k].nbytes);
            at += parts[k].nbytes;
        }
    } else { /* mod: id i is row i / n of shard i % n */
        for (int64_t i = 0; i < rows; i++)
            memcpy(dst + i * row_bytes,
                   (const unsigned char *)parts[i % n].data + (i / n) * row_bytes,
                   (size_t)row_bytes);
    }
}

/* The parts holding variable `name` (its own tensor, or its shards "name/part_k"; a
 * variable "t/part_0" that is the whole table t of a one-shard build: the shards of t):
 * their number, or -1 with the error set. */
static int parts_of(const psg_checkpoint_t *ck, const char *name, const psg_variable_t *v,
                    psg_checkpoint_entry_t *parts) {
    int i = psg_checkpoint_find(ck, name);
    if (i >= 0) {
        psg_checkpoint_entry(ck, i, &parts[0]);
        if (psg_shape_equal(&parts[0].shape, &v->shape) || !strstr(name, "/part_0")) return 1;
    }
    char base[512];
    snprintf(base, sizeof base, "%s", name);
    char *tail = strstr(base, "/part_0");
    if (i >= 0 || (tail && !tail[7])) {
        if (!tail || tail[7]) return 1;
        *tail = 0; /* the whole table from its shards */
    }
    int n = find_parts(ck, base, parts);
    if (n == 0) {
        char a[128];
        return psg_error_set("variable '%s' (%s%s) is not in %s", name, psg_dtype_name(v->dtype),
                             psg_shape_str(&v->shape, a, sizeof a), psg_checkpoint_path(ck));
    }
    return n;
}

/* The value of variable v from ck. */
static int fill_one(const psg_checkpoint_t *ck, const char *name, psg_variable_t *v, bool div) {
    char a[128], b[128];
    psg_checkpoint_entry_t parts[MAX_PARTS];
    int n = parts_of(ck, name, v, parts);
    if (n < 0) return -1;
    psg_shape_t s = parts[0].shape;
    bool columns = false;
    if (n > 1 && merged_shape(name, n, parts, &v->shape, &s, &columns) < 0) return -1;
    if (parts[0].dtype != v->dtype || !psg_shape_equal(&s, &v->shape))
        return psg_error_set("tensor '%s' of %s is %s%s, the model's variable is %s%s", name,
                             psg_checkpoint_path(ck), psg_dtype_name(parts[0].dtype),
                             psg_shape_str(&s, a, sizeof a), psg_dtype_name(v->dtype),
                             psg_shape_str(&v->shape, b, sizeof b));
    merge(n, parts, columns, div, &s, psg_dtype_size(v->dtype), v->value->data);
    v->initialized = true;
    return 0;
}

int psg_serving_fill_values(const psg_graph_t *g, const psg_checkpoint_t *ck,
                            psg_resource_mgr_t *rm, const char *strategy) {
    bool div = strategy && !strcmp(strategy, "div");
    if (strategy && !div && strcmp(strategy, "mod"))
        return psg_error_set("partition strategy '%s' (mod or div)", strategy);
    for (int id = 0; id < psg_graph_num_nodes(g); id++) {
        const psg_node_t *n = psg_graph_node(g, id);
        if (strcmp(psg_node_op(n), "VarHandle")) continue;
        const char *name = psg_variable_name(g, (psg_endpoint_t){id, 0});
        const psg_attr_t *dt = psg_node_attr(n, "dtype"), *sh = psg_node_attr(n, "shape");
        if (!dt || dt->type != PSG_ATTR_DTYPE || !sh || sh->type != PSG_ATTR_SHAPE)
            return psg_error_set("variable '%s': no dtype or shape", name);
        psg_variable_t *v = psg_resource_variable(rm, name, dt->u.dtype, &sh->u.shape);
        if (!v || fill_one(ck, name, v, div) < 0) return -1;
    }
    return 0;
}
