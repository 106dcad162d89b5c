/* The interface a way of agreeing between replicas implements: one build
 * function that adds the worker's step (and the chief's, if any) to a
 * worker's graph. Each variant is one small file (sync/variant_*.c) and one
 * line in sync/sync_replicas.c's table. Not public API: users pick a variant
 * by name in psg_sync_config_t. */
#ifndef PSGRAPH_SYNC_VARIANT_H
#define PSGRAPH_SYNC_VARIANT_H

#include "psgraph/sync_replicas.h"

/* What a build gets: the config with N resolved, and the gradients. */
typedef struct {
    const psg_sync_config_t *cfg;
    int num_required;   /* N */
    int64_t timeout_ms; /* resolved: > 0, or <= 0 for no limit */
    psg_optimizer_t *opt;
    psg_graph_t *g;
    int n;
    const psg_endpoint_t *grads, *vars; /* only pairs with a gradient */
    psg_endpoint_t global_step;         /* the graph's global step handle */
} psg_sync_build_t;

typedef struct {
    const char *name;    /* what --sync takes */
    const char *summary; /* one line for help and docs */
    /* Adds the variant's nodes to b->g and fills *out (already reset: no
     * endpoints, ops -1, num_vars = b->n). Returns 0, or -1 with the error set. */
    int (*build)(const psg_sync_build_t *b, psg_sync_graph_t *out);
} psg_sync_variant_t;

extern const psg_sync_variant_t psg_sync_variant_sync;
extern const psg_sync_variant_t psg_sync_variant_async;

/* ReadVariable of the global step after node `after` (-1: none), named name. */
psg_endpoint_t psg_sync_read_global_step(psg_graph_t *g, const char *name, psg_endpoint_t gstep,
                                         int after);

#endif
