/* Compressed gradients for the strategies that take them (--compress topk
 * --compress-ratio r; async and sync): each worker keeps a residual per
 * variable (error feedback: what was not sent is added to the next
 * gradient), sends the k = ceil(r * n) entries of largest magnitude of
 * gradient + residual as (values, indices), and the ps scatters them back into
 * a dense gradient beside the variable, which the strategy then uses as any
 * gradient. r = 1 sends every entry: the uncompressed result. Not the ops
 * (ops/compress.c). */
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "sync/strategy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Gradient i compressed: its residual and update on the worker, the dense gradient on the
 * ps into *dense; *init the residual's initializer, *update its assign. */
static int compress_one(psg_graph_t *g, const psg_sync_options_t *o, psg_endpoint_t grad,
                        psg_endpoint_t var, psg_endpoint_t *dense, int *init, int *update,
                        int64_t *k_out) {
    const char *v = psg_node_name(psg_graph_node(g, var.node));
    const psg_shape_t *shape = psg_graph_shape(g, var);
    int64_t n = psg_shape_numel(shape), k = (int64_t)ceil(o->compress_ratio * (double)n);
    if (k < 1) k = 1;
    if (k > n) k = n;
    *k_out = k;
    char name[512];
    bool here = psg_sync_push_device_of(g, grad);
    snprintf(name, sizeof name, "compress/%s/residual", v); /* not under v: v is on the ps */
    psg_endpoint_t e = psg_variable(g, name, PSG_DT_F32, shape, (psg_initializer_t){"zeros", 0, 0}, false);
    int ninit = 0;
    const int *inits = psg_graph_collection(g, "init", &ninit);
    *init = ninit > 0 ? inits[ninit - 1] : -1;
    snprintf(name, sizeof name, "compress/%s/residual/read", v);
    psg_endpoint_t er = psg_read_variable(g, name, e);
    snprintf(name, sizeof name, "compress/%s/with_residual", v);
    psg_endpoint_t acc = psg_add(g, name, grad, er);
    psg_endpoint_t vals, idx;
    snprintf(name, sizeof name, "compress/%s/topk", v);
    psg_topk_abs(g, name, acc, k, &vals, &idx);
    snprintf(name, sizeof name, "compress/%s/sent", v);
    psg_endpoint_t sent = psg_scatter_dense(g, name, vals, idx, shape);
    snprintf(name, sizeof name, "compress/%s/left", v);
    psg_endpoint_t left = psg_sub(g, name, acc, sent);
    snprintf(name, sizeof name, "compress/%s/residual/update", v);
    *update = psg_assign(g, name, e, left);
    if (here) psg_graph_pop_device(g);
    bool there = psg_sync_push_device_of(g, var);
    snprintf(name, sizeof name, "compress/%s/dense", v);
    *dense = psg_scatter_dense(g, name, vals, idx, shape);
    if (there) psg_graph_pop_device(g);
    return psg_graph_status(g);
}

int psg_sync_compress(psg_graph_t *g, const psg_sync_options_t *o, int n, const psg_endpoint_t *grads,
                      const psg_endpoint_t *vars, psg_endpoint_t *dense, psg_sync_compressed_t *out) {
    out->init_op = out->update_op = -1;
    out->push_scale = 1;
    if (o->compress == PSG_SYNC_COMPRESS_NONE) {
        for (int i = 0; i < n; i++) dense[i] = grads[i];
        return 0;
    }
    int *ids = calloc(2 * (size_t)(n > 0 ? n : 1), sizeof *ids);
    if (!ids) return psg_error_set("out of memory");
    double sent = 0, full = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t k = 0;
        if (psg_graph_dtype(g, grads[i]) != PSG_DT_F32) {
            rc = psg_error_set("--compress: the gradient of '%s' is not f32",
                               psg_node_name(psg_graph_node(g, vars[i].node)));
            break;
        }
        rc = compress_one(g, o, grads[i], vars[i], &dense[i], &ids[i], &ids[n + i], &k);
        sent += (double)k * 8; /* an f32 value and an i32 index */
        full += (double)psg_shape_numel(psg_graph_shape(g, vars[i])) * 4;
    }
    if (rc == 0) {
        out->init_op = psg_group(g, "compress/init_residuals", n, ids);
        out->update_op = psg_group(g, "compress/update_residuals", n, ids + n);
        out->push_scale = full > 0 ? sent / full : 1;
        rc = out->init_op < 0 || out->update_op < 0 ? -1 : 0;
    }
    free(ids);
    return rc;
}
