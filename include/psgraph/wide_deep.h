/* The wide-and-deep click model of `psgraph train --model wide-deep`, built as a graph:
 * placeholders for a batch of Criteo rows, one embedding table of the 26 fields (each row
 * holds a field value's deep embedding and its wide weight), the deep MLP, the logit, the
 * mean log-loss and the click probability. Not the optimizer nor the loop (ctr_train). */
#ifndef PSGRAPH_WIDE_DEEP_H
#define PSGRAPH_WIDE_DEEP_H

#include "psgraph/graph.h"
#include "psgraph/ops_sparse.h"
#include "psgraph/placement.h"

typedef struct {
    int64_t buckets;                   /* per field (default 10^6) */
    int dim;                           /* deep embedding dim (16) */
    int table_shards;                  /* the table's shards along its rows (1: one variable) */
    psg_partition_strategy_t strategy; /* which shard holds an id (mod) */
    uint64_t seed;
} psg_wide_deep_config_t;

typedef struct {
    psg_endpoint_t dense;        /* placeholder f32 (?, 13): log(1 + max(x, 0)) */
    psg_endpoint_t ids;          /* placeholder i64 (?, 26): field f's bucket + f * buckets */
    psg_endpoint_t labels;       /* placeholder f32 (?): 0 or 1 */
    psg_endpoint_t logits;       /* (?) */
    psg_endpoint_t prob;         /* (?) sigmoid(logits) */
    psg_endpoint_t loss;         /* scalar: mean log-loss */
    psg_partitioned_var_t table; /* (26 * buckets, dim + 1): columns 0..dim-1 deep, dim wide */
} psg_wide_deep_t;

/* The defaults: 10^6 buckets, dim 16, one shard, mod, seed 1. */
psg_wide_deep_config_t psg_wide_deep_defaults(void);

/* Builds the model into g under the scope "wide_deep": the table (uniform +-0.05), the MLP
 * 13 + 26 * dim -> 256 -> 128 -> 1 with ReLU and the wide linear 13 -> 1 (both initialized
 * as PyTorch's Linear), logit = deep + sum of the ids' wide weights + wide linear.
 * Returns 0 or -1 with the error set. */
int psg_wide_deep_build(psg_graph_t *g, const psg_wide_deep_config_t *c, psg_wide_deep_t *m);

#endif
