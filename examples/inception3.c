/* Inception-v3 built from graph ops, with TF-slim's scope names and Keras's
 * parameter count, its label-smoothed loss, its size (parameters, multiply-
 * adds) and its training recipe (RMSProp, decay, moving averages). Not the
 * input pipeline and not the training loop. */
#include "psgraph/inception3.h"

#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_nn.h"
#include "psgraph/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

psg_inception3_config_t psg_inception3_defaults(void) {
    return (psg_inception3_config_t){
        .image_size = 299,
        .classes = 1000,
        .aux_logits = false,
        .is_training = true,
        .read_ema = false,
        .dropout_rate = 0.2f,
        .label_smoothing = 0.1f,
        .aux_weight = 0.4f,
        .weight_decay = 4e-5f,
        .bn_decay = 0.9997f,
        .bn_epsilon = 0.001f,
        .seed = 1,
    };
}

/* The builder's state: the graph, the config, the moving-average updates and
 * the weights that weight decay applies to. */
typedef struct {
    psg_graph_t *g;
    const psg_inception3_config_t *cfg;
    uint64_t seed;
    int *updates;
    int n_updates, cap_updates;
    psg_endpoint_t *decayed;
    int n_decayed, cap_decayed;
    size_t outer; /* length of the scope the model is built under ("tower_1"); 0: the root */
} builder_t;

static void push_id(int **v, int *n, int *cap, int id) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 64;
        int *nv = realloc(*v, (size_t)c * sizeof *nv);
        PSG_ASSERT(nv);
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = id;
}

static void push_ep(builder_t *b, psg_endpoint_t e) {
    if (b->n_decayed == b->cap_decayed) {
        int c = b->cap_decayed ? 2 * b->cap_decayed : 64;
        psg_endpoint_t *nv = realloc(b->decayed, (size_t)c * sizeof *nv);
        PSG_ASSERT(nv);
        b->decayed = nv;
        b->cap_decayed = c;
    }
    b->decayed[b->n_decayed++] = e;
}

/* The variable g already has under the name this one gets at the root, or
 * PSG_NO_ENDPOINT: a model built under a scope (a tower, worker/towers.c)
 * shares the variables of the one built at the root. */
static psg_endpoint_t shared_variable(builder_t *b, const char *name) {
    if (!b->outer) return PSG_NO_ENDPOINT;
    char root[512];
    snprintf(root, sizeof root, "%s/%s", psg_graph_scope(b->g) + b->outer + 1, name);
    int id = psg_graph_find(b->g, root);
    if (id < 0 || strcmp(psg_node_op(psg_graph_node(b->g, id)), "VarHandle"))
        return PSG_NO_ENDPOINT;
    return (psg_endpoint_t){id, 0};
}

/* A model variable's value: the variable itself (shared with a model built
 * at the root), or (read_ema) its shadow, created by the training graph in
 * the same resource manager. */
static psg_endpoint_t param(builder_t *b, const char *name, const psg_shape_t *shape,
                            psg_initializer_t init, bool trainable, psg_endpoint_t *handle) {
    psg_endpoint_t h;
    if (b->cfg->read_ema) { /* the shadow of a model at the root, or its own handle */
        char shadow[256];
        snprintf(shadow, sizeof shadow, "%s/ExponentialMovingAverage", name);
        h = shared_variable(b, shadow);
        if (!psg_endpoint_valid(h)) h = psg_var_handle(b->g, shadow, PSG_DT_F32, shape);
    } else if (!psg_endpoint_valid(h = shared_variable(b, name))) {
        h = psg_variable(b->g, name, PSG_DT_F32, shape, init, trainable);
    }
    if (handle) *handle = h;
    return psg_read_variable(b->g, NULL, h);
}

static int64_t channels(builder_t *b, psg_endpoint_t x) {
    const psg_shape_t *s = psg_graph_shape(b->g, x);
    return s && s->rank == 4 ? s->dims[3] : -1;
}

static int64_t spatial(builder_t *b, psg_endpoint_t x, int axis) {
    const psg_shape_t *s = psg_graph_shape(b->g, x);
    return s && s->rank == 4 ? s->dims[axis] : -1;
}

/* The batch norm's parameters of a conv of c channels (its scope "BatchNorm", current): gamma
 * a constant 1 (no scale, as slim), beta, and the moving statistics with their handles. */
typedef struct {
    psg_endpoint_t gamma, beta, mean, variance, mean_h, variance_h;
} bn_params_t;

static bool bn_params(builder_t *b, int64_t c, bn_params_t *p) {
    psg_shape_t s = psg_shape_1d(c);
    psg_tensor_t *ones = psg_tensor_new(PSG_DT_F32, &s);
    if (!ones) return false;
    for (int64_t i = 0; i < c; i++) psg_tensor_f32(ones)[i] = 1.0f;
    p->gamma = psg_const(b->g, "gamma", &ones);
    p->beta = param(b, "beta", &s, (psg_initializer_t){"zeros", 0, 0}, true, NULL);
    p->mean = param(b, "moving_mean", &s, (psg_initializer_t){"zeros", 0, 0}, false, &p->mean_h);
    p->variance =
        param(b, "moving_variance", &s, (psg_initializer_t){"ones", 0, 0}, false, &p->variance_h);
    return true;
}

/* Training batch norm over groups of virtual_batch_size consecutive images (its "ghost"
 * batches, as TF's BatchNormalization(virtual_batch_size=), whose groups take every
 * (batch / V)-th image instead: here a group is one sync worker's batch). Each group is
 * normalized by its own statistics, the outputs in the batch's order, and the batch's
 * statistics are the groups' mean (what the moving statistics move toward). */
static psg_batch_norm_t ghost_batch_norm(builder_t *b, psg_endpoint_t x, const bn_params_t *p) {
    psg_graph_t *g = b->g;
    int64_t v = b->cfg->virtual_batch_size, groups = b->cfg->batch / v;
    psg_endpoint_t ys[PSG_INCEPTION3_MAX_GHOSTS], means[PSG_INCEPTION3_MAX_GHOSTS],
        vars[PSG_INCEPTION3_MAX_GHOSTS];
    for (int64_t k = 0; k < groups; k++) {
        const int64_t begin[4] = {k * v, 0, 0, 0}, size[4] = {v, -1, -1, -1};
        psg_batch_norm_t gk =
            psg_fused_batch_norm(g, NULL, psg_slice(g, NULL, x, 4, begin, size), p->gamma, p->beta,
                                 PSG_NO_ENDPOINT, PSG_NO_ENDPOINT, b->cfg->bn_epsilon, true);
        ys[k] = gk.y;
        means[k] = gk.batch_mean;
        vars[k] = gk.batch_var;
    }
    psg_batch_norm_t bn = {.y = psg_concat(g, NULL, (int)groups, ys, 0)};
    bn.batch_mean =
        psg_scale(g, NULL, psg_add_n(g, NULL, (int)groups, means), 1.0 / (double)groups);
    bn.batch_var = psg_scale(g, NULL, psg_add_n(g, NULL, (int)groups, vars), 1.0 / (double)groups);
    return bn;
}

/* Batch norm without scale over the last dim of x, then ReLU. In training
 * the moving statistics move toward the batch's by (1 - bn_decay). */
static psg_endpoint_t bn_relu(builder_t *b, psg_endpoint_t x, int64_t c) {
    psg_graph_t *g = b->g;
    if (psg_graph_push_scope(g, "BatchNorm") < 0) return PSG_NO_ENDPOINT;
    bn_params_t p;
    if (!bn_params(b, c, &p)) {
        psg_graph_pop_scope(g);
        return PSG_NO_ENDPOINT;
    }
    psg_batch_norm_t bn;
    if (b->cfg->is_training) {
        bn = b->cfg->virtual_batch_size > 0
                 ? ghost_batch_norm(b, x, &p)
                 : psg_fused_batch_norm(g, NULL, x, p.gamma, p.beta, PSG_NO_ENDPOINT,
                                        PSG_NO_ENDPOINT, b->cfg->bn_epsilon, true);
        double rate = 1.0 - (double)b->cfg->bn_decay;
        psg_endpoint_t dm = psg_scale(g, NULL, psg_sub(g, NULL, bn.batch_mean, p.mean), rate);
        psg_endpoint_t dv = psg_scale(g, NULL, psg_sub(g, NULL, bn.batch_var, p.variance), rate);
        int um = psg_assign_add(g, "update_moving_mean", p.mean_h, dm);
        int uv = psg_assign_add(g, "update_moving_variance", p.variance_h, dv);
        if (um >= 0 && uv >= 0) {
            push_id(&b->updates, &b->n_updates, &b->cap_updates, um);
            push_id(&b->updates, &b->n_updates, &b->cap_updates, uv);
        }
    } else {
        bn = psg_fused_batch_norm(g, NULL, x, p.gamma, p.beta, p.mean, p.variance,
                                  b->cfg->bn_epsilon, false);
    }
    psg_graph_pop_scope(g);
    return psg_relu(g, NULL, bn.y);
}

/* conv(x, w) + batch norm + ReLU in one FusedConv2D node (inference: the moving statistics);
 * the batch norm's variables where bn_relu has them. */
static psg_endpoint_t fused_conv_bn_relu(builder_t *b, psg_endpoint_t x, psg_endpoint_t w,
                                         int64_t c, int stride, psg_padding_t pad,
                                         const psg_fused_pool_t *pool) {
    if (psg_graph_push_scope(b->g, "BatchNorm") < 0) return PSG_NO_ENDPOINT;
    bn_params_t p;
    bool ok = bn_params(b, c, &p);
    psg_graph_pop_scope(b->g);
    if (!ok) return PSG_NO_ENDPOINT;
    psg_fused_bn_t bn = {p.gamma, p.beta, p.mean, p.variance, b->cfg->bn_epsilon};
    return psg_fused_conv2d_batch_norm(b->g, NULL, x, w, &bn, stride, stride, pad, true, pool);
}

/* conv kh x kw (no bias) + batch norm + ReLU, as Keras's conv2d_bn, and then the max pool
 * `pool` when not NULL (only with fused_conv). The weights start as slim's
 * variance_scaling_initializer (He, truncated). */
static psg_endpoint_t conv(builder_t *b, const char *scope, psg_endpoint_t x, int64_t out, int kh,
                           int kw, int stride, psg_padding_t pad, const psg_fused_pool_t *pool) {
    psg_graph_t *g = b->g;
    int64_t in = channels(b, x);
    if (in <= 0 || psg_graph_push_scope(g, scope) < 0) return PSG_NO_ENDPOINT;
    double fan_in = (double)kh * kw * (double)in;
    psg_initializer_t init = {"truncated_normal", sqrt(2.0 / fan_in) / 0.87962566103423978,
                              b->seed++};
    psg_endpoint_t wh;
    psg_endpoint_t w = param(b, "weights", &(psg_shape_t){4, {kh, kw, in, out}}, init, true, &wh);
    if (!b->cfg->read_ema) push_ep(b, w);
    psg_endpoint_t y;
    if (b->cfg->fused_conv) {
        y = fused_conv_bn_relu(b, x, w, out, stride, pad, pool);
    } else {
        y = psg_conv2d(g, NULL, x, w, stride, stride, pad);
        y = bn_relu(b, y, out);
    }
    psg_graph_pop_scope(g);
    return y;
}

#define SAME PSG_PADDING_SAME
#define VALID PSG_PADDING_VALID

static psg_endpoint_t concat(builder_t *b, int n, const psg_endpoint_t *xs) {
    return psg_concat(b->g, "concat", n, xs, 3);
}

static bool enter(builder_t *b, const char *scope) {
    return psg_graph_push_scope(b->g, scope) == 0;
}
static void leave(builder_t *b) {
    psg_graph_pop_scope(b->g);
}

/* One layer of the network as a table row: a conv (kh x kw, `out` channels,
 * WIDTH: the block's width argument), a 3 x 3 pool, or SPLIT: this conv and
 * the next both read the same input and the branch goes on with their
 * concatenation (Mixed_7b/7c's 1x3 / 3x1 pairs). */
typedef enum { CONV, SPLIT, AVG_POOL, MAX_POOL } layer_kind_t;
typedef struct {
    layer_kind_t kind;
    const char *name;
    int out, kh, kw, stride;
    psg_padding_t pad;
} layer_t;
#define WIDTH (-1)
#define MAX_LAYERS 8 /* a branch's layers, the last one's name NULL */

/* Layer l of x; a conv's max pool `pool` (NULL: none) goes in its FusedConv2D node. */
static psg_endpoint_t layer(builder_t *b, const layer_t *l, psg_endpoint_t x, int width,
                            const psg_fused_pool_t *pool) {
    switch (l->kind) {
    case AVG_POOL:
        return psg_avg_pool(b->g, l->name, x, l->kh, l->kw, l->stride, l->stride, l->pad);
    case MAX_POOL:
        return psg_max_pool(b->g, l->name, x, l->kh, l->kw, l->stride, l->stride, l->pad);
    default:
        return conv(b, l->name, x, l->out == WIDTH ? width : l->out, l->kh, l->kw, l->stride,
                    l->pad, pool);
    }
}

/* The layers of one branch in order, each reading the one before; with fused_conv a conv's
 * max pool right after it (the stem's) is part of the conv's node. */
static psg_endpoint_t branch(builder_t *b, const layer_t *l, psg_endpoint_t x, int width) {
    for (; l->name; l++) {
        if (l->kind == CONV && b->cfg->fused_conv && l[1].name && l[1].kind == MAX_POOL) {
            psg_fused_pool_t pool = {l[1].kh, l[1].kw, l[1].stride, l[1].stride, l[1].pad};
            x = layer(b, l++, x, width, &pool);
            continue;
        }
        if (l->kind != SPLIT) {
            x = layer(b, l, x, width, NULL);
            continue;
        }
        psg_endpoint_t s[2];
        s[0] = layer(b, l, x, width, NULL);
        s[1] = layer(b, ++l, x, width, NULL);
        x = concat(b, 2, s);
    }
    return x;
}

/* A Mixed block: branches Branch_0.. from the same input, concatenated. */
typedef struct {
    int n_branches;
    layer_t branches[4][MAX_LAYERS];
} block_t;

/* Mixed_5b/5c/5d (Keras mixed0-2): 35 x 35, four branches; WIDTH: the pool branch's channels. */
static const block_t block_a = {
    4,
    {
        {{CONV, "Conv2d_0a_1x1", 64, 1, 1, 1, SAME}},
        {{CONV, "Conv2d_0a_1x1", 48, 1, 1, 1, SAME}, {CONV, "Conv2d_0b_5x5", 64, 5, 5, 1, SAME}},
        {{CONV, "Conv2d_0a_1x1", 64, 1, 1, 1, SAME},
         {CONV, "Conv2d_0b_3x3", 96, 3, 3, 1, SAME},
         {CONV, "Conv2d_0c_3x3", 96, 3, 3, 1, SAME}},
        {{AVG_POOL, "AvgPool_0a_3x3", 0, 3, 3, 1, SAME},
         {CONV, "Conv2d_0b_1x1", WIDTH, 1, 1, 1, SAME}},
    }};

/* Mixed_6a (Keras mixed3): 35 -> 17, grid reduction. */
static const block_t block_b = {3,
                                {
                                    {{CONV, "Conv2d_1a_1x1", 384, 3, 3, 2, VALID}},
                                    {{CONV, "Conv2d_0a_1x1", 64, 1, 1, 1, SAME},
                                     {CONV, "Conv2d_0b_3x3", 96, 3, 3, 1, SAME},
                                     {CONV, "Conv2d_1a_1x1", 96, 3, 3, 2, VALID}},
                                    {{MAX_POOL, "MaxPool_1a_3x3", 0, 3, 3, 2, VALID}},
                                }};

/* Mixed_6b..6e (Keras mixed4-7): 17 x 17 with factorized 1x7 / 7x1; WIDTH: their channels. */
static const block_t block_c = {4,
                                {
                                    {{CONV, "Conv2d_0a_1x1", 192, 1, 1, 1, SAME}},
                                    {{CONV, "Conv2d_0a_1x1", WIDTH, 1, 1, 1, SAME},
                                     {CONV, "Conv2d_0b_1x7", WIDTH, 1, 7, 1, SAME},
                                     {CONV, "Conv2d_0c_7x1", 192, 7, 1, 1, SAME}},
                                    {{CONV, "Conv2d_0a_1x1", WIDTH, 1, 1, 1, SAME},
                                     {CONV, "Conv2d_0b_7x1", WIDTH, 7, 1, 1, SAME},
                                     {CONV, "Conv2d_0c_1x7", WIDTH, 1, 7, 1, SAME},
                                     {CONV, "Conv2d_0d_7x1", WIDTH, 7, 1, 1, SAME},
                                     {CONV, "Conv2d_0e_1x7", 192, 1, 7, 1, SAME}},
                                    {{AVG_POOL, "AvgPool_0a_3x3", 0, 3, 3, 1, SAME},
                                     {CONV, "Conv2d_0b_1x1", 192, 1, 1, 1, SAME}},
                                }};

/* Mixed_7a (Keras mixed8): 17 -> 8, grid reduction. */
static const block_t block_d = {
    3,
    {
        {{CONV, "Conv2d_0a_1x1", 192, 1, 1, 1, SAME}, {CONV, "Conv2d_1a_3x3", 320, 3, 3, 2, VALID}},
        {{CONV, "Conv2d_0a_1x1", 192, 1, 1, 1, SAME},
         {CONV, "Conv2d_0b_1x7", 192, 1, 7, 1, SAME},
         {CONV, "Conv2d_0c_7x1", 192, 7, 1, 1, SAME},
         {CONV, "Conv2d_1a_3x3", 192, 3, 3, 2, VALID}},
        {{MAX_POOL, "MaxPool_1a_3x3", 0, 3, 3, 2, VALID}},
    }};

/* Mixed_7b/7c (Keras mixed9-10): 8 x 8 with split 1x3 / 3x1. */
static const block_t block_e = {4,
                                {
                                    {{CONV, "Conv2d_0a_1x1", 320, 1, 1, 1, SAME}},
                                    {{CONV, "Conv2d_0a_1x1", 384, 1, 1, 1, SAME},
                                     {SPLIT, "Conv2d_0b_1x3", 384, 1, 3, 1, SAME},
                                     {CONV, "Conv2d_0b_3x1", 384, 3, 1, 1, SAME}},
                                    {{CONV, "Conv2d_0a_1x1", 448, 1, 1, 1, SAME},
                                     {CONV, "Conv2d_0b_3x3", 384, 3, 3, 1, SAME},
                                     {SPLIT, "Conv2d_0c_1x3", 384, 1, 3, 1, SAME},
                                     {CONV, "Conv2d_0d_3x1", 384, 3, 1, 1, SAME}},
                                    {{AVG_POOL, "AvgPool_0a_3x3", 0, 3, 3, 1, SAME},
                                     {CONV, "Conv2d_0b_1x1", 192, 1, 1, 1, SAME}},
                                }};

/* The stem: 299 -> 149 -> 147 -> 147 -> 73 -> 73 -> 71 -> 35 */
static const layer_t stem[MAX_LAYERS] = {
    {CONV, "Conv2d_1a_3x3", 32, 3, 3, 2, VALID},
    {CONV, "Conv2d_2a_3x3", 32, 3, 3, 1, VALID},
    {CONV, "Conv2d_2b_3x3", 64, 3, 3, 1, SAME},
    {MAX_POOL, "MaxPool_3a_3x3", 0, 3, 3, 2, VALID},
    {CONV, "Conv2d_3b_1x1", 80, 1, 1, 1, VALID},
    {CONV, "Conv2d_4a_3x3", 192, 3, 3, 1, VALID},
    {MAX_POOL, "MaxPool_5a_3x3", 0, 3, 3, 2, VALID},
};

static psg_endpoint_t block(builder_t *b, const char *scope, const block_t *k, psg_endpoint_t x,
                            int width) {
    if (!enter(b, scope)) return PSG_NO_ENDPOINT;
    psg_endpoint_t br[4];
    for (int i = 0; i < k->n_branches; i++) {
        char name[24];
        snprintf(name, sizeof name, "Branch_%d", i);
        enter(b, name);
        br[i] = branch(b, k->branches[i], x, width);
        leave(b);
    }
    psg_endpoint_t y = concat(b, k->n_branches, br);
    leave(b);
    return y;
}

/* The Mixed blocks in order; the auxiliary head reads the output of Mixed_6e. */
static const struct {
    const char *scope;
    const block_t *block;
    int width;
} mixed[] = {
    {"Mixed_5b", &block_a, 32},  {"Mixed_5c", &block_a, 64},  {"Mixed_5d", &block_a, 64},
    {"Mixed_6a", &block_b, 0},   {"Mixed_6b", &block_c, 128}, {"Mixed_6c", &block_c, 160},
    {"Mixed_6d", &block_c, 160}, {"Mixed_6e", &block_c, 192}, {"Mixed_7a", &block_d, 0},
    {"Mixed_7b", &block_e, 0},   {"Mixed_7c", &block_e, 0},
};
#define AUX_AFTER "Mixed_6e"

/* A fully connected layer on (N, in): weights glorot-uniform, biases zero. */
static psg_endpoint_t logits_layer(builder_t *b, const char *scope, psg_endpoint_t x, int64_t in) {
    psg_graph_t *g = b->g;
    int64_t classes = b->cfg->classes;
    if (!enter(b, scope)) return PSG_NO_ENDPOINT;
    psg_endpoint_t w = param(b, "weights", &(psg_shape_t){2, {in, classes}},
                             (psg_initializer_t){"glorot_uniform", 0, b->seed++}, true, NULL);
    if (!b->cfg->read_ema) push_ep(b, w);
    psg_endpoint_t bias = param(b, "biases", &(psg_shape_t){1, {classes}},
                                (psg_initializer_t){"zeros", 0, 0}, true, NULL);
    psg_endpoint_t y = psg_dense(g, NULL, x, w, bias, false);
    leave(b);
    return y;
}

/* The auxiliary head on the 17 x 17 x 768 output of Mixed_6e: avg pool 5/3,
 * conv 1x1 128, conv 5x5 768 (both with batch norm), logits. Below 299
 * pixels the 5 x 5 windows shrink to the grid, as slim's
 * _reduced_kernel_size_for_small_input. */
static psg_endpoint_t aux_head(builder_t *b, psg_endpoint_t x) {
    if (!enter(b, "AuxLogits")) return PSG_NO_ENDPOINT;
    int kh = (int)spatial(b, x, 1), kw = (int)spatial(b, x, 2);
    kh = kh < 5 ? kh : 5;
    kw = kw < 5 ? kw : 5;
    psg_endpoint_t y = psg_avg_pool(b->g, "AvgPool_1a_5x5", x, kh, kw, 3, 3, VALID);
    y = conv(b, "Conv2d_1b_1x1", y, 128, 1, 1, 1, SAME, NULL);
    kh = (int)spatial(b, y, 1);
    kw = (int)spatial(b, y, 2);
    kh = kh < 5 ? kh : 5;
    kw = kw < 5 ? kw : 5;
    y = conv(b, "Conv2d_2a_5x5", y, 768, kh, kw, 1, VALID, NULL);
    const int64_t axes[2] = {1, 2};
    y = psg_mean(b->g, "GlobalPool", y, 2, axes, false);
    y = logits_layer(b, "Conv2d_2b_1x1", y, 768);
    leave(b);
    return y;
}

/* Mean over the batch of the cross-entropy against the smoothed target
 * t = (1 - e) * onehot(label) + e / C:
 * -sum_c t_c log p_c = (1 - e) * xent(label) + (e / C) * sum_c -log p_c. */
psg_endpoint_t psg_smoothed_xent(psg_graph_t *g, const char *scope, psg_endpoint_t logits,
                                 psg_endpoint_t labels, double e) {
    const psg_shape_t *ls = psg_graph_shape(g, logits);
    int64_t classes = ls && ls->rank == 2 ? ls->dims[1] : -1;
    if (e > 0 && classes <= 0) {
        psg_error_set("smoothed cross-entropy: the logits must be (N, classes) with classes known");
        return PSG_NO_ENDPOINT;
    }
    if (psg_graph_push_scope(g, scope) < 0) return PSG_NO_ENDPOINT;
    psg_endpoint_t xent = psg_sparse_softmax_cross_entropy(g, "xent", logits, labels);
    psg_endpoint_t per_example = xent;
    if (e > 0) {
        psg_endpoint_t logp = psg_log_softmax(g, "log_softmax", logits);
        const int64_t last = -1;
        psg_endpoint_t sum_logp = psg_sum(g, "sum_log_p", logp, 1, &last, false);
        per_example = psg_add(g, "smoothed", psg_scale(g, NULL, xent, 1.0 - e),
                              psg_scale(g, NULL, sum_logp, -e / (double)classes));
    }
    psg_endpoint_t loss = psg_mean(g, "mean", per_example, 0, NULL, false);
    psg_graph_pop_scope(g);
    return loss;
}

static int build_error(psg_graph_t *g, builder_t *b) {
    free(b->updates);
    free(b->decayed);
    const char *e = psg_graph_error(g);
    return psg_error_set("inception3: %s", e ? e : psg_error_message());
}

int psg_inception3_build(psg_graph_t *g, const psg_inception3_config_t *cfg, psg_inception3_t *m) {
    if (cfg->image_size < 75)
        return psg_error_set("inception3: image size %d is below the minimum of 75",
                             cfg->image_size);
    if (cfg->classes < 2) return psg_error_set("inception3: %d classes (at least 2)", cfg->classes);
    if (cfg->fused_conv && cfg->is_training)
        return psg_error_set("inception3: fused_conv is for inference (FusedConv2D has no "
                             "gradient): set is_training false");
    if (cfg->dropout_rate < 0 || cfg->dropout_rate >= 1 || cfg->label_smoothing < 0 ||
        cfg->label_smoothing >= 1)
        return psg_error_set("inception3: dropout rate and label smoothing must lie in [0, 1)");
    if (cfg->virtual_batch_size < 0 ||
        (cfg->virtual_batch_size > 0 && cfg->is_training &&
         !psg_inception3_virtual_batch_ok(cfg->batch, cfg->virtual_batch_size)))
        return psg_error_set("inception3: a virtual batch size of %d does not divide the batch "
                             "of %d into 1 to %d groups",
                             cfg->virtual_batch_size, cfg->batch, PSG_INCEPTION3_MAX_GHOSTS);
    builder_t b = {
        .g = g, .cfg = cfg, .seed = cfg->seed * 1000 + 1, .outer = strlen(psg_graph_scope(g))};
    int64_t S = cfg->image_size;
    m->images = psg_placeholder(g, "images", PSG_DT_F32, &(psg_shape_t){4, {-1, S, S, 3}});
    m->labels = psg_placeholder(g, "labels", PSG_DT_I32, &(psg_shape_t){1, {-1}});
    m->aux_logits = PSG_NO_ENDPOINT;
    m->bn_updates = -1;
    if (!enter(&b, "InceptionV3")) return build_error(g, &b);
    psg_endpoint_t x = branch(&b, stem, m->images, 0);
    for (size_t i = 0; i < sizeof mixed / sizeof mixed[0]; i++) {
        x = block(&b, mixed[i].scope, mixed[i].block, x, mixed[i].width);
        if (cfg->aux_logits && !strcmp(mixed[i].scope, AUX_AFTER)) m->aux_logits = aux_head(&b, x);
    }
    if (enter(&b, "Logits")) {
        const int64_t axes[2] = {1, 2};
        int64_t features = channels(&b, x);
        x = psg_mean(g, "GlobalPool", x, 2, axes, false);
        if (cfg->is_training && cfg->dropout_rate > 0)
            x = psg_dropout(g, "Dropout_1b", x, cfg->dropout_rate, cfg->seed * 7919 + 13);
        m->logits = logits_layer(&b, "Conv2d_1c_1x1", x, features);
        leave(&b);
    }
    leave(&b);
    if (psg_graph_error(g)) return build_error(g, &b);

    double e = cfg->label_smoothing;
    m->xent = psg_smoothed_xent(g, "xent", m->logits, m->labels, e);
    int n_terms = 0;
    psg_endpoint_t terms[3];
    terms[n_terms++] = m->xent;
    if (cfg->aux_logits) {
        psg_endpoint_t aux = psg_smoothed_xent(g, "aux_xent", m->aux_logits, m->labels, e);
        terms[n_terms++] = psg_scale(g, "aux_loss", aux, cfg->aux_weight);
    }
    if (cfg->is_training && cfg->weight_decay > 0 && b.n_decayed > 0) {
        psg_graph_push_scope(g, "weight_decay");
        psg_endpoint_t *l2 = malloc((size_t)b.n_decayed * sizeof *l2);
        PSG_ASSERT(l2);
        for (int i = 0; i < b.n_decayed; i++) l2[i] = psg_l2_loss(g, NULL, b.decayed[i]);
        /* slim: weight_decay * l2_loss(w) = weight_decay * sum(w^2) / 2 */
        terms[n_terms++] =
            psg_scale(g, "total", psg_add_n(g, "sum", b.n_decayed, l2), cfg->weight_decay);
        free(l2);
        psg_graph_pop_scope(g);
    }
    m->loss = psg_add_n(g, "loss", n_terms, terms);
    psg_endpoint_t pred = psg_cast(g, "predicted", psg_argmax(g, "argmax", m->logits), PSG_DT_I32);
    psg_endpoint_t hits = psg_cast(g, "hits", psg_equal(g, "equal", pred, m->labels), PSG_DT_F32);
    m->correct = psg_sum(g, "correct", hits, 0, NULL, false);
    if (cfg->is_training) m->bn_updates = psg_group(g, "update_ops", b.n_updates, b.updates);
    if (psg_graph_error(g)) return build_error(g, &b);
    free(b.updates);
    free(b.decayed);
    return 0;
}

/* ---- size ---- */

static bool has_prefix(const char *s, const char *p) {
    return !strncmp(s, p, strlen(p));
}

int psg_model_stats(const psg_graph_t *g, const char *prefix, psg_model_stats_t *s) {
    memset(s, 0, sizeof *s);
    int n;
    const int *vars = psg_graph_collection(g, "variables", &n);
    for (int i = 0; i < n; i++) {
        const psg_node_t *v = psg_graph_node(g, vars[i]);
        if (prefix && !has_prefix(psg_node_name(v), prefix)) continue;
        int64_t k = psg_shape_numel(psg_node_output_shape(v, 0));
        if (k < 0) return psg_error_set("variable '%s' has an unknown shape", psg_node_name(v));
        s->params += k;
    }
    const int *train = psg_graph_collection(g, "trainable_variables", &n);
    for (int i = 0; i < n; i++) {
        const psg_node_t *v = psg_graph_node(g, train[i]);
        if (prefix && !has_prefix(psg_node_name(v), prefix)) continue;
        s->trainable += psg_shape_numel(psg_node_output_shape(v, 0));
    }
    for (int id = 0; id < psg_graph_num_nodes(g); id++) {
        const psg_node_t *nd = psg_graph_node(g, id);
        const char *name = psg_node_name(nd), *op = psg_node_op(nd);
        if (has_prefix(name, "gradients") || (prefix && !has_prefix(name, prefix))) continue;
        const psg_shape_t *out = psg_node_output_shape(nd, 0);
        int64_t macs = 0;
        if (!strcmp(op, "Conv2D")) {
            const psg_shape_t *f = psg_graph_shape(g, psg_node_input(nd, 1));
            if (out->rank != 4 || f->rank != 4 || out->dims[1] < 0 || out->dims[2] < 0)
                return psg_error_set("node '%s': shape unknown at build time", name);
            macs = out->dims[1] * out->dims[2] * f->dims[0] * f->dims[1] * f->dims[2] * f->dims[3];
        } else if (!strcmp(op, "Dense")) {
            const psg_shape_t *w = psg_graph_shape(g, psg_node_input(nd, 1));
            macs = w->dims[0] * w->dims[1];
        } else if (!strcmp(op, "MatMul")) {
            const psg_shape_t *a = psg_graph_shape(g, psg_node_input(nd, 0));
            bool ta = psg_node_get_bool(nd, "transpose_a", false);
            macs = a->dims[ta ? 0 : 1] * out->dims[1];
        }
        if (macs < 0) return psg_error_set("node '%s': shape unknown at build time", name);
        s->macs_per_example += macs;
    }
    return 0;
}

/* ---- the recipe ---- */

psg_inception3_recipe_t psg_inception3_recipe_defaults(void) {
    return (psg_inception3_recipe_t){
        .learning_rate = 0.045,
        .lr_decay = 0.94,
        .epochs_per_decay = 2.0,
        .examples_per_epoch = 1281167,
        .batch = 32,
        .replicas = 1,
        .rmsprop_decay = 0.9,
        .momentum = 0.9,
        .epsilon = 1.0,
        .ema_decay = 0.9999,
    };
}

int64_t psg_inception3_decay_steps(const psg_inception3_recipe_t *r) {
    double per_epoch = (double)r->examples_per_epoch / (r->batch > 0 ? r->batch : 1);
    int64_t steps =
        (int64_t)(per_epoch * r->epochs_per_decay / (r->replicas > 0 ? r->replicas : 1));
    return steps > 0 ? steps : 1;
}

/* The initializer of the variable behind handle node `var`: the node of the
 * "init" collection that assigns to it, or -1. (Found by its input, not by
 * name: psg_variable nests the scope of its initializer.) */
static int init_node(psg_graph_t *g, int var) {
    int n;
    const int *init = psg_graph_collection(g, "init", &n);
    for (int i = 0; i < n; i++) {
        const psg_node_t *a = psg_graph_node(g, init[i]);
        if (psg_node_num_inputs(a) > 0 && psg_node_input(a, 0).node == var) return init[i];
    }
    return -1;
}

/* ReadVariable of h (dtype dt) ordered after node `after` (-1: unordered). */
static psg_endpoint_t read_after(psg_graph_t *g, psg_endpoint_t h, int after, psg_dtype_t dt) {
    psg_node_builder_t *nb = psg_node_begin(g, "ReadVariable", NULL);
    psg_node_add_input(nb, h);
    if (after >= 0) psg_node_add_control(nb, after);
    psg_node_attr_dtype(nb, "dtype", dt);
    return psg_node_finish_ep(nb);
}

int psg_ema_apply(psg_graph_t *g, double decay, int n, const psg_endpoint_t *vars, int after,
                  int *op) {
    if (decay <= 0 || decay >= 1)
        return psg_error_set("moving average: decay %g outside (0, 1)", decay);
    psg_endpoint_t gs = psg_global_step(g); /* outside the scope: found or made by its root name */
    if (psg_graph_push_scope(g, "ExponentialMovingAverage") < 0) return -1;
    /* d = min(decay, (1 + step) / (10 + step)); min(a, b) = (a + b - |a - b|) / 2 */
    psg_endpoint_t step = psg_cast(g, "step", read_after(g, gs, after, PSG_DT_I64), PSG_DT_F32);
    psg_endpoint_t one = psg_const_scalar(g, "one", 1.0f), ten = psg_const_scalar(g, "ten", 10.0f);
    psg_endpoint_t ratio =
        psg_div(g, "ratio", psg_add(g, NULL, step, one), psg_add(g, NULL, step, ten));
    psg_endpoint_t dc = psg_const_scalar(g, "decay", (float)decay);
    psg_endpoint_t diff = psg_sub(g, NULL, dc, ratio);
    psg_endpoint_t absd = psg_sqrt(g, NULL, psg_square(g, NULL, diff));
    psg_endpoint_t d =
        psg_scale(g, "effective_decay", psg_sub(g, NULL, psg_add(g, NULL, dc, ratio), absd), 0.5);
    psg_endpoint_t rate = psg_sub(g, "rate", one, d);
    psg_graph_pop_scope(g);
    int *updates = malloc((size_t)(n > 0 ? n : 1) * sizeof *updates);
    PSG_ASSERT(updates);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const psg_node_t *vn = psg_graph_node(g, vars[i].node);
        const char *vname = psg_node_name(vn);
        const psg_shape_t *shape = psg_node_output_shape(vn, 0);
        /* the shadow and its update beside the variable (TF colocates them): in a cluster
         * on the variable's ps, not on the worker that builds them (the chief, which would
         * pull and push every variable a step: the slowest worker, dropped with backups) */
        char dev[PSG_DEVICE_NAME_MAX];
        snprintf(dev, sizeof dev, "%s", psg_node_device(vn));
        if (dev[0]) psg_graph_push_device(g, dev);
        char sname[512];
        snprintf(sname, sizeof sname, "%s/ExponentialMovingAverage", vname);
        psg_endpoint_t sh = psg_var_handle(g, sname, PSG_DT_F32, shape);
        if (!psg_endpoint_valid(sh)) {
            if (dev[0]) psg_graph_pop_device(g);
            rc = -1;
            break;
        }
        /* the shadow starts as the variable's initial value */
        char iname[600];
        snprintf(iname, sizeof iname, "%s/init", sname);
        int init = psg_assign(g, iname, sh,
                              read_after(g, vars[i], init_node(g, vars[i].node), PSG_DT_F32));
        psg_graph_add_to_collection(g, "variables", sh.node);
        psg_graph_add_to_collection(g, "init", init);
        psg_graph_add_to_collection(g, "moving_average_variables", sh.node);
        psg_endpoint_t v = read_after(g, vars[i], after, PSG_DT_F32);
        psg_endpoint_t s = read_after(g, sh, after, PSG_DT_F32);
        snprintf(iname, sizeof iname, "%s/update", sname);
        updates[i] = psg_assign_add(g, iname, sh, psg_mul(g, NULL, psg_sub(g, NULL, v, s), rate));
        if (dev[0]) psg_graph_pop_device(g);
        if (init < 0 || updates[i] < 0) rc = -1;
    }
    if (rc == 0) *op = psg_group(g, "ExponentialMovingAverage/update", n, updates);
    free(updates);
    if (rc < 0 || *op < 0 || psg_graph_error(g))
        return psg_error_set("moving average: %s",
                             psg_graph_error(g) ? psg_graph_error(g) : psg_error_message());
    return 0;
}

int psg_inception3_variables(const psg_graph_t *g, psg_endpoint_t **vars) {
    int nv;
    const int *vids = psg_graph_collection(g, "variables", &nv);
    *vars = malloc((size_t)(nv > 0 ? nv : 1) * sizeof **vars);
    if (!*vars) return psg_error_set("out of memory");
    int n = 0;
    for (int i = 0; i < nv; i++)
        if (has_prefix(psg_node_name(psg_graph_node(g, vids[i])), "InceptionV3/"))
            (*vars)[n++] = (psg_endpoint_t){vids[i], 0};
    return n;
}

psg_optimizer_t *psg_inception3_optimizer(psg_graph_t *g, const psg_inception3_recipe_t *r,
                                          psg_endpoint_t *lr) {
    psg_endpoint_t step = psg_read_variable(g, NULL, psg_global_step(g));
    psg_endpoint_t rate =
        psg_exponential_decay(g, "learning_rate", (float)r->learning_rate, step,
                              psg_inception3_decay_steps(r), (float)r->lr_decay, true);
    if (psg_endpoint_valid(rate) && r->warmup_steps > 0) {
        /* rate * min(1, (step + 1) / W), min(a, 1) = (a + 1 - |a - 1|) / 2 */
        psg_endpoint_t one = psg_const_scalar(g, "learning_rate/warmup/one", 1.0f);
        psg_endpoint_t f = psg_scale(g, "learning_rate/warmup/fraction",
                                     psg_add(g, NULL, psg_cast(g, NULL, step, PSG_DT_F32), one),
                                     1.0 / (double)r->warmup_steps);
        psg_endpoint_t d = psg_sub(g, NULL, f, one);
        psg_endpoint_t m = psg_scale(
            g, "learning_rate/warmup/factor",
            psg_sub(g, NULL, psg_add(g, NULL, f, one), psg_sqrt(g, NULL, psg_square(g, NULL, d))),
            0.5);
        rate = psg_mul(g, "learning_rate/warmed", rate, m);
    }
    if (!psg_endpoint_valid(rate)) {
        psg_error_set("inception3 recipe: the learning rate: %s",
                      psg_graph_error(g) ? psg_graph_error(g) : psg_error_message());
        return NULL;
    }
    psg_optimizer_config_t oc = psg_optimizer_defaults(r->plain_sgd ? "sgd" : "rmsprop");
    oc.learning_rate = (float)r->learning_rate;
    if (!r->plain_sgd) {
        oc.rho = (float)r->rmsprop_decay;
        oc.momentum = (float)r->momentum;
        oc.epsilon = (float)r->epsilon;
    }
    psg_optimizer_t *opt = psg_optimizer_new(&oc);
    if (opt) psg_optimizer_set_learning_rate_tensor(opt, rate);
    if (opt && lr) *lr = rate;
    return opt;
}

int psg_inception3_finish_train_op(psg_graph_t *g, const psg_inception3_recipe_t *r, int apply,
                                   int bn_updates, int n, const psg_endpoint_t *vars,
                                   int *train_op) {
    int parts[2] = {apply, bn_updates};
    int step_op = psg_group(g, "train_step", bn_updates >= 0 ? 2 : 1, parts);
    *train_op = step_op;
    if (step_op >= 0 && r->ema_decay > 0) {
        int ema;
        if (psg_ema_apply(g, r->ema_decay, n, vars, step_op, &ema) < 0) return -1;
        *train_op = psg_group(g, "train_op", 1, &ema);
    }
    if (*train_op < 0) return psg_error_set("inception3 recipe: %s", psg_graph_error(g));
    return 0;
}

int psg_inception3_train_op(psg_graph_t *g, const psg_inception3_recipe_t *r,
                            const psg_inception3_t *m, int *train_op, psg_endpoint_t *lr) {
    /* the variables to average: the model's, taken before the optimizer adds slots */
    psg_endpoint_t *vars;
    int n = psg_inception3_variables(g, &vars);
    if (n < 0) return -1;
    psg_optimizer_t *opt = psg_inception3_optimizer(g, r, lr);
    int rc = -1, apply = -1;
    if (opt && psg_optimizer_minimize(opt, g, m->loss, &apply) == 0)
        rc = psg_inception3_finish_train_op(g, r, apply, m->bn_updates, n, vars, train_op);
    if (rc < 0) {
        psg_graph_wrap_error(g);
        psg_error_wrap("inception3 recipe");
    }
    psg_optimizer_destroy(&opt);
    free(vars);
    return rc;
}
