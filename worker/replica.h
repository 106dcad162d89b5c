/* Internal to psgraph: the one place that decides how a training graph is
 * built from (model, towers, one process or a cluster's strategy): the
 * model or its towers, their gradients, and either the optimizer's update
 * (one process) or the strategy's (a cluster worker, worker/sync_train.h).
 * Used by the training loop (worker/trainer.c), which `psgraph bench inception3` runs
 * too. Not the loop, not the session. */
#ifndef PSGRAPH_WORKER_REPLICA_H
#define PSGRAPH_WORKER_REPLICA_H

#include "psgraph/graph.h"
#include "psgraph/models.h"
#include "psgraph/optimizer.h"
#include "psgraph/towers.h"
#include "psgraph/trainer.h"
#include "worker/sync_train.h"
#include "worker/worker_task.h"

#include <stdio.h>

typedef struct {
    const psg_train_config_t *c;       /* the strategy's settings (a cluster) */
    const psg_worker_task_t *w;        /* this worker's place; NULL or no cluster: one process */
    psg_optimizer_t *opt;              /* borrowed */
    const psg_towers_config_t *towers; /* towers (K > 1 or a GPU); NULL: one model */
    /* one model: builds it into g (under whatever device is pushed) */
    int (*build_one)(void *ctx, psg_graph_t *g, psg_model_t *m);
    void *ctx;
    FILE *out;
    bool forward_only; /* one model in one process, no optimizer: train_op -1 */
} psg_replica_spec_t;

typedef struct {
    psg_model_t m;        /* tower 0's */
    psg_towers_t *towers; /* NULL: one model; owned (free) */
    psg_endpoint_t loss, correct;
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS];
    int n_feeds;
    int train_op;           /* one process: the update; a cluster: the loss's node */
    psg_sync_train_t *sync; /* a cluster: the strategy's worker; owned */
} psg_replica_t;

/* Builds the replica into g (in a cluster the replica device setter is pushed around the
 * build; a local_model strategy builds the model under this worker's own device).
 * Returns 0, or -1 with the error set; psg_replica_free either way. */
int psg_replica_build(psg_graph_t *g, const psg_replica_spec_t *s, psg_replica_t *r);
void psg_replica_free(psg_replica_t *r);

#endif
