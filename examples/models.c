/* The mlp and cnn of `psgraph train`, built from graph ops: the same layers,
 * initialization and loss as the PyTorch peer (../shared/peers/torch_ref.py). */
#include "psgraph/error.h"
#include "psgraph/models.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const psg_model_info_t models[] = {
    {"mlp", "fully connected layers of 256, 256, then the classes, ReLU", {128, 0.05, 0.9}, true},
    {"cnn",
     "two 5x5 conv + max pool blocks (32, 64 channels), fully connected 512, the classes",
     {64, 0.01, 0.9},
     true},
    {"inception3",
     "Inception-v3 with TF's recipe (RMSProp, decay, moving average; docs/inception3.md)",
     {32, 0.045, 0.9},
     false},
    {"wide-deep",
     "wide-and-deep click model on Criteo-format data (--data criteo; worker/ctr_train.c)",
     {512, 0.001, 0.9},
     true},
};

int psg_model_count(void) {
    return (int)(sizeof models / sizeof models[0]);
}

const psg_model_info_t *psg_model_info(int i) {
    PSG_ASSERT(i >= 0 && i < psg_model_count());
    return &models[i];
}

const psg_model_info_t *psg_model_find(const char *name) {
    for (int i = 0; name && i < psg_model_count(); i++)
        if (!strcmp(models[i].name, name)) return &models[i];
    return NULL;
}

const char *psg_model_names(const char *sep, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < psg_model_count() && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? sep : "", models[i].name);
    return buf;
}

int psg_model_defaults(const char *name, psg_model_defaults_t *d) {
    const psg_model_info_t *m = psg_model_find(name);
    char known[256];
    if (!m)
        return psg_error_set("unknown model '%s' (known: %s)", name,
                             psg_model_names(", ", known, sizeof known));
    *d = m->defaults;
    return 0;
}

/* PyTorch's default init of Linear and Conv2d: weights and biases uniform in
 * +-1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5) reduces to this). The
 * variable "model/<layer>/<name>" is reused when g has it (another tower). */
static psg_endpoint_t param(psg_graph_t *g, const char *layer, const char *name,
                            const psg_shape_t *shape, int64_t fan_in, uint64_t seed) {
    char full[160];
    snprintf(full, sizeof full, "model/%s/%s", layer, name);
    int id = psg_graph_find(g, full);
    if (id >= 0 && !strcmp(psg_node_op(psg_graph_node(g, id)), "VarHandle"))
        return (psg_endpoint_t){id, 0};
    psg_initializer_t init = {"uniform", 1.0 / sqrt((double)fan_in), seed};
    return psg_variable(g, name, PSG_DT_F32, shape, init, true);
}

/* A fully connected layer: x (N, in) -> (N, out), fused bias and ReLU. With
 * shard_bytes, a weight bigger than that is column shards, one product each. */
static psg_endpoint_t dense(psg_graph_t *g, const char *scope, psg_endpoint_t x, int64_t in,
                            int64_t out, bool relu, uint64_t seed, int64_t shard_bytes) {
    if (psg_graph_push_scope(g, scope) < 0) return PSG_NO_ENDPOINT;
    psg_endpoint_t b = param(g, scope, "biases", &(psg_shape_t){1, {out}}, in, seed + 1);
    int64_t bytes = in * out * (int64_t)sizeof(float);
    int n = 1;
    if (shard_bytes > 0 && bytes > shard_bytes) {
        int64_t want = (bytes + shard_bytes - 1) / shard_bytes;
        n = (int)(want < PSG_MODEL_MAX_SHARDS ? want : PSG_MODEL_MAX_SHARDS);
        if (n > out) n = (int)out;
    }
    psg_endpoint_t y;
    if (n == 1) {
        psg_endpoint_t w = param(g, scope, "weights", &(psg_shape_t){2, {in, out}}, in, seed);
        y = psg_dense(g, NULL, x, psg_read_variable(g, NULL, w), psg_read_variable(g, NULL, b),
                      relu);
    } else {
        psg_endpoint_t parts[PSG_MODEL_MAX_SHARDS];
        for (int k = 0; k < n; k++) {
            int64_t cols = out / n + (k < out % n); /* the first out % n get one more */
            char name[32];
            snprintf(name, sizeof name, "weights/part_%d", k);
            psg_endpoint_t w = param(g, scope, name, &(psg_shape_t){2, {in, cols}}, in,
                                     seed + 1000003u * (uint64_t)(k + 1));
            parts[k] = psg_matmul(g, NULL, x, psg_read_variable(g, NULL, w), false, false);
        }
        y = psg_bias_add(g, NULL, psg_concat(g, NULL, n, parts, 1), psg_read_variable(g, NULL, b));
        if (relu) y = psg_relu(g, NULL, y);
    }
    psg_graph_pop_scope(g);
    return y;
}

/* conv k x k SAME + bias + ReLU + maxpool 2: x (N, H, W, in) -> (N, H/2, W/2, out). */
static psg_endpoint_t conv_block(psg_graph_t *g, const char *scope, psg_endpoint_t x, int64_t k,
                                 int64_t in, int64_t out, uint64_t seed, bool fused) {
    if (psg_graph_push_scope(g, scope) < 0) return PSG_NO_ENDPOINT;
    psg_endpoint_t w =
        param(g, scope, "weights", &(psg_shape_t){4, {k, k, in, out}}, k * k * in, seed);
    psg_endpoint_t b = param(g, scope, "biases", &(psg_shape_t){1, {out}}, k * k * in, seed + 1);
    psg_endpoint_t y;
    if (fused) {
        psg_fused_pool_t pool = {2, 2, 2, 2, PSG_PADDING_VALID};
        y = psg_fused_conv2d(g, NULL, x, psg_read_variable(g, NULL, w),
                             psg_read_variable(g, NULL, b), 1, 1, PSG_PADDING_SAME, true, &pool);
    } else {
        y = psg_conv2d(g, NULL, x, psg_read_variable(g, NULL, w), 1, 1, PSG_PADDING_SAME);
        y = psg_bias_add(g, NULL, y, psg_read_variable(g, NULL, b));
        y = psg_relu(g, NULL, y);
        y = psg_max_pool(g, NULL, y, 2, 2, 2, 2, PSG_PADDING_VALID);
    }
    psg_graph_pop_scope(g);
    return y;
}

int psg_model_build(psg_graph_t *g, const char *name, int height, int width, int channels,
                    int classes, uint64_t seed, psg_model_t *m) {
    return psg_model_build_with(g, name, height, width, channels, classes, seed, NULL, m);
}

int psg_model_build_with(psg_graph_t *g, const char *name, int height, int width, int channels,
                         int classes, uint64_t seed, const psg_model_options_t *opt,
                         psg_model_t *m) {
    int64_t shard = opt ? opt->dense_shard_bytes : 0;
    bool fused = opt && opt->fused_conv;
    const psg_model_info_t *info = psg_model_find(name);
    psg_model_defaults_t d;
    if (psg_model_defaults(name, &d) < 0) return -1;
    if (!info->built_here)
        return psg_error_set("model '%s' is built by its own builder (psgraph/inception3.h)", name);
    m->images =
        psg_placeholder(g, "images", PSG_DT_F32, &(psg_shape_t){4, {-1, height, width, channels}});
    m->labels = psg_placeholder(g, "labels", PSG_DT_I32, &(psg_shape_t){1, {-1}});
    if (psg_graph_push_scope(g, "model") < 0) return -1;
    int64_t pixels = (int64_t)height * width * channels;
    if (!strcmp(name, "mlp")) {
        psg_endpoint_t x = psg_reshape(g, "flatten", m->images, &(psg_shape_t){2, {-1, pixels}});
        x = dense(g, "fc1", x, pixels, 256, true, seed * 16 + 1, shard);
        x = dense(g, "fc2", x, 256, 256, true, seed * 16 + 3, shard);
        m->logits = dense(g, "fc3", x, 256, classes, false, seed * 16 + 5, shard);
    } else {
        psg_endpoint_t x = conv_block(g, "conv1", m->images, 5, channels, 32, seed * 16 + 1, fused);
        x = conv_block(g, "conv2", x, 5, 32, 64, seed * 16 + 3, fused);
        int64_t flat = (int64_t)(height / 4) * (width / 4) * 64;
        x = psg_reshape(g, "flatten", x, &(psg_shape_t){2, {-1, flat}});
        x = dense(g, "fc1", x, flat, 512, true, seed * 16 + 5, shard);
        m->logits = dense(g, "fc2", x, 512, classes, false, seed * 16 + 7, shard);
    }
    psg_graph_pop_scope(g);
    psg_endpoint_t xent = psg_sparse_softmax_cross_entropy(g, "xent", m->logits, m->labels);
    m->loss = psg_mean(g, "loss", xent, 0, NULL, false);
    psg_endpoint_t pred = psg_cast(g, "predicted", psg_argmax(g, "argmax", m->logits), PSG_DT_I32);
    psg_endpoint_t hits = psg_cast(g, "hits", psg_equal(g, "equal", pred, m->labels), PSG_DT_F32);
    m->correct = psg_sum(g, "correct", hits, 0, NULL, false);
    if (psg_graph_status(g) < 0) return -1;
    return 0;
}
