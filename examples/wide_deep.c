/* The wide-and-deep click model as graph ops: one table of 26 * buckets rows of dim + 1
 * (the deep embedding and the wide weight of a field value share a row, so a step pulls and
 * pushes each touched row once), looked up with Unique (each id once a step); the MLP
 * and wide linear as the PyTorch peer's (../shared/peers/torch_ref.py, wide-deep). */
#include "psgraph/criteo.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/wide_deep.h"

#include <math.h>
#include <stdio.h>

psg_wide_deep_config_t psg_wide_deep_defaults(void) {
    return (psg_wide_deep_config_t){
        .buckets = 1000000, .dim = 16, .table_shards = 1, .strategy = PSG_PARTITION_MOD, .seed = 1};
}

/* x (N, in) -> (N, out), PyTorch's Linear init (uniform +-1/sqrt(in)). */
static psg_endpoint_t linear(psg_graph_t *g, const char *scope, psg_endpoint_t x, int64_t in,
                             int64_t out, bool relu, uint64_t seed) {
    if (psg_graph_push_scope(g, scope) < 0) return PSG_NO_ENDPOINT;
    psg_initializer_t init = {"uniform", 1.0 / sqrt((double)in), seed};
    psg_endpoint_t w =
        psg_variable(g, "weights", PSG_DT_F32, &(psg_shape_t){2, {in, out}}, init, true);
    init.seed = seed + 1;
    psg_endpoint_t b = psg_variable(g, "biases", PSG_DT_F32, &(psg_shape_t){1, {out}}, init, true);
    psg_endpoint_t y =
        psg_dense(g, NULL, x, psg_read_variable(g, NULL, w), psg_read_variable(g, NULL, b), relu);
    psg_graph_pop_scope(g);
    return y;
}

/* mean over the batch of max(z, 0) - z * y + log(1 + exp(-|z|)) */
static psg_endpoint_t log_loss(psg_graph_t *g, psg_endpoint_t z, psg_endpoint_t y) {
    psg_endpoint_t pos = psg_relu(g, NULL, z), neg = psg_relu(g, NULL, psg_neg(g, NULL, z));
    psg_endpoint_t absz = psg_add(g, "abs", pos, neg);
    psg_endpoint_t soft = psg_log(g, NULL,
                                  psg_add(g, NULL, psg_exp(g, NULL, psg_neg(g, NULL, absz)),
                                          psg_const_scalar(g, "one", 1.0f)));
    psg_endpoint_t l = psg_add(g, NULL, psg_sub(g, NULL, pos, psg_mul(g, NULL, z, y)), soft);
    return psg_mean(g, "loss", l, 0, NULL, false);
}

int psg_wide_deep_build(psg_graph_t *g, const psg_wide_deep_config_t *c, psg_wide_deep_t *m) {
    const int F = PSG_CTR_FIELDS, D = PSG_CTR_DENSE, dim = c->dim;
    if (c->buckets < 1 || dim < 1) return psg_error_set("wide-deep: buckets and dim must be >= 1");
    m->dense = psg_placeholder(g, "dense", PSG_DT_F32, &(psg_shape_t){2, {-1, D}});
    m->ids = psg_placeholder(g, "ids", PSG_DT_I64, &(psg_shape_t){2, {-1, F}});
    m->labels = psg_placeholder(g, "labels", PSG_DT_F32, &(psg_shape_t){1, {-1}});
    if (psg_graph_push_scope(g, "wide_deep") < 0) return -1;
    psg_partitioner_t p = {.num_shards = c->table_shards > 0 ? c->table_shards : 1};
    psg_shape_t ts = {2, {(int64_t)F * c->buckets, dim + 1}};
    if (psg_partitioned_variable(g, "embeddings", PSG_DT_F32, &ts,
                                 (psg_initializer_t){"uniform", 0.05, c->seed * 7 + 3}, true, &p,
                                 &m->table) < 0) {
        psg_graph_pop_scope(g);
        return -1;
    }
    psg_embedding_table_t t = {m->table.num_shards, m->table.shards, ts.dims[0], c->strategy, true};
    psg_endpoint_t e = psg_embedding_lookup(g, "lookup", &t, m->ids); /* (N, 26, dim + 1) */
    psg_endpoint_t deep =
        psg_slice(g, "deep_part", e, 3, (int64_t[]){0, 0, 0}, (int64_t[]){-1, F, dim});
    psg_endpoint_t wide =
        psg_slice(g, "wide_part", e, 3, (int64_t[]){0, 0, dim}, (int64_t[]){-1, F, 1});
    deep = psg_reshape(g, "deep_flat", deep, &(psg_shape_t){2, {-1, (int64_t)F * dim}});
    wide = psg_reshape(g, "wide_flat", wide, &(psg_shape_t){2, {-1, F}});
    psg_endpoint_t x = psg_concat(g, "mlp_input", 2, (psg_endpoint_t[]){m->dense, deep}, 1);
    uint64_t s = c->seed * 16;
    x = linear(g, "fc1", x, D + (int64_t)F * dim, 256, true, s + 1);
    x = linear(g, "fc2", x, 256, 128, true, s + 3);
    x = linear(g, "fc3", x, 128, 1, false, s + 5);
    psg_endpoint_t wl = linear(g, "wide_linear", m->dense, D, 1, false, s + 7);
    psg_endpoint_t logit = psg_add(g, NULL, psg_add(g, NULL, x, wl),
                                   psg_sum(g, "wide_sum", wide, 1, (int64_t[]){1}, true));
    m->logits = psg_reshape(g, "logits", logit, &(psg_shape_t){1, {-1}});
    m->prob = psg_sigmoid(g, "prob", m->logits);
    psg_graph_pop_scope(g);
    m->loss = log_loss(g, m->logits, m->labels);
    if (psg_graph_status(g) < 0) return -1;
    return 0;
}
