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

/* A zero f32 variable of shape on the current device named name; *init gets its initializer. */
static psg_endpoint_t worker_variable(psg_graph_t *g, const char *name, const psg_shape_t *shape,
                                      int *init) {
    psg_endpoint_t e =
        psg_variable(g, name, PSG_DT_F32, shape, (psg_initializer_t){"zeros", 0, 0}, false);
    int ninit = 0;
    const int *inits = psg_graph_collection(g, "init", &ninit);
    *init = ninit > 0 ? inits[ninit - 1] : -1;
    return e;
}

/* Whether the worker keeps a velocity (--compress-momentum worker*; folded keeps none). */
static bool worker_velocity(const psg_sync_options_t *o) {
    return o->compress_momentum == PSG_SYNC_COMPRESS_MOMENTUM_WORKER ||
           o->compress_momentum == PSG_SYNC_COMPRESS_MOMENTUM_MASKED;
}

/* With the momentum on the worker (DGC's momentum correction): the velocity
 * u = m * u + grad, which takes the gradient's place; its update, after the selection
 * (masked: zero where the entries were sent), in *update, its initializer in *init. */
static psg_endpoint_t velocity(psg_graph_t *g, double m, const char *v, const psg_shape_t *shape,
                               psg_endpoint_t grad, int *init, psg_endpoint_t *u_new) {
    char name[512];
    snprintf(name, sizeof name, "compress/%s/velocity", v);
    psg_endpoint_t u = worker_variable(g, name, shape, init);
    snprintf(name, sizeof name, "compress/%s/velocity/read", v);
    psg_endpoint_t ur = psg_read_variable(g, name, u);
    snprintf(name, sizeof name, "compress/%s/velocity/decayed", v);
    psg_endpoint_t decayed = psg_scale(g, name, ur, m);
    snprintf(name, sizeof name, "compress/%s/velocity/next", v);
    *u_new = psg_add(g, name, decayed, grad);
    return u;
}

/* A gradient sent whole with the momentum on the worker: *dense gets its velocity. */
static int dense_velocity(psg_graph_t *g, double m, psg_endpoint_t grad, psg_endpoint_t var,
                          psg_endpoint_t *dense, int *init, int *update) {
    const char *v = psg_node_name(psg_graph_node(g, var.node));
    char name[512];
    bool here = psg_sync_push_device_of(g, grad);
    psg_endpoint_t u = velocity(g, m, v, psg_graph_shape(g, var), grad, init, dense);
    snprintf(name, sizeof name, "compress/%s/velocity/update", v);
    *update = psg_assign(g, name, u, *dense);
    if (here) psg_graph_pop_device(g);
    return psg_graph_status(g);
}

/* Gradient i compressed: its residual (and velocity) and their updates on the worker, the
 * dense gradient on the ps into *dense; *init the initializers, *update the assigns. */
static int compress_one(psg_graph_t *g, const psg_sync_options_t *o, double m, psg_endpoint_t grad,
                        psg_endpoint_t var, psg_endpoint_t ratio, psg_endpoint_t *dense, int *init,
                        int *update, int64_t *k_out) {
    const char *v = psg_node_name(psg_graph_node(g, var.node));
    const psg_shape_t *shape = psg_graph_shape(g, var);
    int64_t n = psg_shape_numel(shape), k = (int64_t)ceil(o->compress_ratio * (double)n);
    if (k < 1) k = 1;
    if (k > n) k = n;
    *k_out = k;
    char name[512];
    bool here = psg_sync_push_device_of(g, grad);
    int inits[2] = {-1, -1}, updates[2] = {-1, -1}, nv = 0;
    psg_endpoint_t u = PSG_NO_ENDPOINT, u_new = PSG_NO_ENDPOINT;
    if (worker_velocity(o)) {
        u = velocity(g, m, v, shape, grad, &inits[1], &u_new);
        grad = u_new;
        nv = 1;
    }
    snprintf(name, sizeof name, "compress/%s/residual", v); /* not under v: v is on the ps */
    psg_endpoint_t e = worker_variable(g, name, shape, &inits[0]);
    snprintf(name, sizeof name, "compress/%s/residual/read", v);
    psg_endpoint_t er = psg_read_variable(g, name, e);
    snprintf(name, sizeof name, "compress/%s/with_residual", v);
    psg_endpoint_t acc = psg_add(g, name, grad, er);
    psg_endpoint_t vals, idx;
    snprintf(name, sizeof name, "compress/%s/topk", v);
    psg_topk_abs_ratio(g, name, acc, k, ratio, &vals, &idx);
    snprintf(name, sizeof name, "compress/%s/sent", v);
    psg_endpoint_t sent = psg_scatter_dense(g, name, vals, idx, shape);
    snprintf(name, sizeof name, "compress/%s/left", v);
    psg_endpoint_t left = psg_sub(g, name, acc, sent);
    snprintf(name, sizeof name, "compress/%s/residual/update", v);
    updates[0] = psg_assign(g, name, e, left);
    if (o->compress_momentum == PSG_SYNC_COMPRESS_MOMENTUM_MASKED) {
        /* momentum factor masking: the velocity forgets what was sent */
        snprintf(name, sizeof name, "compress/%s/sent_ones", v);
        psg_endpoint_t ones = psg_ones_like(g, name, vals);
        snprintf(name, sizeof name, "compress/%s/sent_mask", v);
        psg_endpoint_t mask = psg_scatter_dense(g, name, ones, idx, shape);
        snprintf(name, sizeof name, "compress/%s/velocity/sent", v);
        psg_endpoint_t gone = psg_mul(g, name, u_new, mask);
        snprintf(name, sizeof name, "compress/%s/velocity/masked", v);
        u_new = psg_sub(g, name, u_new, gone);
    }
    if (nv) {
        snprintf(name, sizeof name, "compress/%s/velocity/update", v);
        updates[1] = psg_assign(g, name, u, u_new);
    }
    snprintf(name, sizeof name, "compress/%s/init", v);
    *init = nv ? psg_group(g, name, 2, inits) : inits[0];
    snprintf(name, sizeof name, "compress/%s/update", v);
    *update = nv ? psg_group(g, name, 2, updates) : updates[0];
    if (here) psg_graph_pop_device(g);
    bool there = psg_sync_push_device_of(g, var);
    snprintf(name, sizeof name, "compress/%s/dense", v);
    *dense = psg_scatter_dense(g, name, vals, idx, shape);
    if (there) psg_graph_pop_device(g);
    return psg_graph_status(g);
}

/* The warm-up's share of this step, R0 * (R / R0)^(t / T) at the worker's step t (a
 * counter beside the first gradient, its initializer in *init and its increment, after
 * the share's read, in *update); PSG_NO_ENDPOINT without a warm-up (or R >= R0). */
static psg_endpoint_t warmup_ratio(psg_graph_t *g, const psg_sync_options_t *o, psg_endpoint_t grad,
                                   int *init, int *update) {
    *init = *update = -1;
    if (o->compress_warmup <= 0 || o->compress_ratio >= o->compress_warmup_ratio)
        return PSG_NO_ENDPOINT;
    bool here = psg_sync_push_device_of(g, grad);
    psg_shape_t scalar = {0};
    psg_endpoint_t t = worker_variable(g, "compress/warmup/step", &scalar, init);
    psg_endpoint_t tr = psg_read_variable(g, "compress/warmup/step/read", t);
    double slope = log(o->compress_ratio / o->compress_warmup_ratio) / (double)o->compress_warmup;
    psg_endpoint_t e = psg_add(
        g, "compress/warmup/log_ratio", psg_scale(g, "compress/warmup/slope", tr, slope),
        psg_const_scalar(g, "compress/warmup/log_start", (float)log(o->compress_warmup_ratio)));
    psg_endpoint_t ratio = psg_exp(g, "compress/warmup/ratio", e);
    psg_node_builder_t *nb = psg_node_begin(g, "AssignAdd", "compress/warmup/step/advance");
    psg_node_add_input(nb, t);
    psg_node_add_input(nb, psg_const_scalar(g, "compress/warmup/one", 1));
    psg_node_add_control(nb, ratio.node);
    *update = psg_node_finish(nb);
    if (here) psg_graph_pop_device(g);
    return ratio;
}

int psg_sync_compress(psg_graph_t *g, const psg_sync_options_t *o, double momentum, int n,
                      const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                      psg_endpoint_t *dense, psg_sync_compressed_t *out) {
    out->init_op = out->update_op = -1;
    out->push_scale = 1;
    if (o->compress == PSG_SYNC_COMPRESS_NONE) {
        for (int i = 0; i < n; i++) dense[i] = grads[i];
        return 0;
    }
    /* ids: the initializers, then the updates: one of each per residual and the warm-up's */
    int *ids = calloc(2 * (size_t)n + 2, sizeof *ids), m = 0;
    if (!ids) return psg_error_set("out of memory");
    double sent = 0, full = 0;
    int rc = 0;
    psg_endpoint_t ratio =
        n > 0 ? warmup_ratio(g, o, grads[0], &ids[0], &ids[n + 1]) : PSG_NO_ENDPOINT;
    if (psg_endpoint_valid(ratio)) m = 1;
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t k = 0, numel = psg_shape_numel(psg_graph_shape(g, vars[i]));
        full += (double)numel * 4;
        if (numel < o->compress_min_size) { /* small: sent whole, no residual */
            dense[i] = grads[i];
            sent += (double)numel * 4;
            if (worker_velocity(o)) { /* its momentum, unmasked */
                rc = dense_velocity(g, momentum, grads[i], vars[i], &dense[i], &ids[m],
                                    &ids[n + 1 + m]);
                m++;
            }
            continue;
        }
        if (psg_graph_dtype(g, grads[i]) != PSG_DT_F32) {
            rc = psg_error_set("--compress: the gradient of '%s' is not f32",
                               psg_node_name(psg_graph_node(g, vars[i].node)));
            break;
        }
        rc = compress_one(g, o, momentum, grads[i], vars[i], ratio, &dense[i], &ids[m],
                          &ids[n + 1 + m], &k);
        sent += (double)k * 8; /* an f32 value and an i32 index */
        m++;
    }
    if (rc == 0 && m > 0) {
        out->init_op = psg_group(g, "compress/init_residuals", m, ids);
        out->update_op = psg_group(g, "compress/update_residuals", m, ids + n + 1);
        out->push_scale = full > 0 ? sent / full : 1;
        rc = out->init_op < 0 || out->update_op < 0 ? -1 : 0;
    }
    free(ids);
    return rc;
}
