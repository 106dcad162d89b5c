/* The data shards of an elastic job (ElasticDL's task queue; docs/distributed.md
 * "Membership"): on the ps that holds the global step, each epoch's training set cut into
 * `shards` ranges of the epoch's example order; per shard todo, doing (the worker and its
 * incarnation) or done. A worker takes a shard when its last one is used up and reports it
 * done with the next take; a shard held by a process the chief found dead (a worker and its
 * incarnation) or by an older incarnation of the same worker goes back to todo, first in line. When
 * todo is empty the next epoch's shards are added, in an order that depends only on (seed, epoch),
 * so a worker never waits for the slowest holder of the epoch's last shards. Thread-safe. Not the
 * op (ops/sync.c) and not the worker's side (worker/shard_data.c). */
#ifndef PSGRAPH_OPS_SHARD_QUEUE_H
#define PSGRAPH_OPS_SHARD_QUEUE_H

#include "psgraph/graph.h"
#include "psgraph/resource.h"
#include "psgraph/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct psg_shard_queue psg_shard_queue_t;

/* The queue `name` of rm for `shards` (>= 1) shards an epoch over `epochs` (>= 1) epochs,
 * created when absent; one that exists with other counts or seed is an error naming it.
 * The manager owns it. */
psg_shard_queue_t *psg_shard_queue_get(psg_resource_mgr_t *rm, const char *name, int64_t shards,
                                       int64_t epochs, uint64_t seed);
const char *psg_shard_queue_name(const psg_shard_queue_t *q);
psg_tensor_t *psg_shard_queue_handle(psg_shard_queue_t *q);
psg_shard_queue_t *psg_shard_queue_from_handle(const psg_tensor_t *h);

/* One take of worker `worker` (>= 0) in its process `incarnation`: first the shards held by
 * the processes the chief found dead go back to todo (`dead`: n_dead (worker, incarnation)
 * pairs, 2 * n_dead values; only the chief sends them, worker/shard_data.c) and so do those of
 * an older incarnation of this worker (its new process took over); a shard is never given
 * back on a worker's name alone, so a process that took a shard after the chief's verdict on
 * its worker keeps it (docs/distributed.md "Membership"). Then `done` (a shard this process
 * took, or -1: none) is marked done; a done shard it no longer holds (given back meanwhile) is
 * counted stale and left to its new holder. *shard gets the next shard (epoch * shards +
 * index), or -1 when every shard of every epoch is handed out; *finished is true once every
 * one is done. -1 with the error naming the queue on a worker or shard out of range (nothing
 * changed). */
int psg_shard_queue_take(psg_shard_queue_t *q, int worker, uint64_t incarnation, int64_t done,
                         const int64_t *dead, int64_t n_dead, int64_t *shard, bool *finished);

/* The processes that hold shards now: (worker, incarnation) pairs, each once, into a new
 * array of 2 * *n values (the caller frees it); NULL with the error set on out of memory
 * (none held: a 1-value array, *n 0). The chief watches them (worker/shard_data.c). */
int64_t *psg_shard_queue_holders(psg_shard_queue_t *q, int64_t *n);

typedef struct {
    int64_t shards, epochs;
    int64_t done;       /* shards done, all epochs */
    int64_t given_back; /* shards a dead process (or an older incarnation) held, back in todo */
    int64_t stale_done; /* done reports for a shard given back meanwhile */
    int64_t doing;      /* held now */
    int64_t todo;       /* waiting now (the epochs not filled yet not counted) */
} psg_shard_queue_stats_t;
void psg_shard_queue_stats(psg_shard_queue_t *q, psg_shard_queue_stats_t *out);

/* The position in epoch `epoch`'s queue of shard index k's range: the order the shards of an
 * epoch are handed out in, a permutation of 0..shards-1 that depends only on (seed, epoch).
 * order holds `shards` entries. */
void psg_shard_queue_order(int64_t shards, uint64_t seed, int64_t epoch, int64_t *order);

/* ShardQueueHandle: the queue `name` (shards an epoch, epochs, seed as attrs). */
psg_endpoint_t psg_shard_queue_op(psg_graph_t *g, const char *name, int64_t shards, int64_t epochs,
                                  uint64_t seed);
/* ShardQueueTake(handle, incarnation i64 scalar, done i64 scalar, dead i64 [2 n]) for `worker`:
 * psg_shard_queue_take; output i64 [2 + 2 h]: the shard (-1: none left), 1 once all are
 * done, then the h holders after the take (psg_shard_queue_holders). */
psg_endpoint_t psg_shard_queue_take_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                       psg_endpoint_t incarnation, psg_endpoint_t done,
                                       psg_endpoint_t dead, int worker);

#endif
