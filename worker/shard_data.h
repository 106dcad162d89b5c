/* A worker's training data as shards handed out by the ps (--data-shards dispatch;
 * ElasticDL's task queue, docs/distributed.md "Membership"): each epoch's example order
 * (psg_data_epoch_order of the job's seed and the epoch) cut into shards of --shard-batches
 * batches; the worker takes a shard from the queue on ps0 (ops/state/shard_queue.h) when its
 * last one is used up, reporting that one done in the same take; ps0 names the processes
 * (worker, incarnation) that hold shards, the chief's membership judges them, and the chief's
 * takes name the dead ones, whose shards are handed out again. Each shard taken and done is a
 * JSON line ("shard_taken", "shard_done") on out and in the metrics. Not the queue itself. */
#ifndef PSGRAPH_WORKER_SHARD_DATA_H
#define PSGRAPH_WORKER_SHARD_DATA_H

#include "psgraph/data.h"
#include "psgraph/dist_session.h"
#include "psgraph/graph.h"
#include "worker/membership.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct psg_shard_data psg_shard_data_t;

typedef struct {
    const psg_dataset_t *ds; /* borrowed: outlives the shard data */
    int batch;               /* examples a batch (> 0) */
    int64_t shard_batches;   /* batches a shard (> 0) */
    int64_t epochs;          /* > 0 */
    uint64_t seed;
    int rank;  /* this worker */
    FILE *out; /* the JSON lines; NULL: none */
} psg_shard_data_options_t;

/* The queue's ops added to g on ps0 (under `data/shards`); NULL with the error set when the
 * data has fewer examples than one batch or out of memory. */
psg_shard_data_t *psg_shard_data_new(psg_graph_t *g, const psg_shard_data_options_t *o);
/* Its take made runnable on the worker's session s (which must outlive it); its JSON lines
 * also into metrics (NULL: none). */
int psg_shard_data_start(psg_shard_data_t *d, psg_dist_session_t *s, FILE *metrics);
/* The chief's: its takes name to ps0 the processes holding shards that `members` (which must
 * outlive d) found dead, and ps0 hands their shards out again. */
void psg_shard_data_watch(psg_shard_data_t *d, psg_membership_t *members);
/* The next batch (new tensors, the caller owns them): 1; 0 when every shard of every epoch is
 * done (training is over); -1 with the error set. While the last shards are held by others,
 * a worker with none left steps on its last shard again (not counted), so a sync step never
 * waits for it. */
int psg_shard_data_next(psg_shard_data_t *d, psg_tensor_t **images, psg_tensor_t **labels);
/* Batches of data an epoch (all workers together): the step count of one process's epoch. */
int64_t psg_shard_data_batches_per_epoch(const psg_shard_data_t *d);
/* The epoch of the shard now read (0-based; -1 before the first take). */
int64_t psg_shard_data_epoch(const psg_shard_data_t *d);
void psg_shard_data_destroy(psg_shard_data_t **d);

#endif
