/* Hot failover of a training job (docs/replication.md): after a failed step, each ps task
 * serving a shard is probed; one that is gone or came back as a new process hands its shards
 * to its backup (the next ps task in the ring), which the session then runs them on. Not
 * the session's re-placement (worker/dist_failover.c) nor the checkpoint restore it falls
 * back to (worker/cluster_ckpt.c). */
#ifndef PSGRAPH_WORKER_FAILOVER_H
#define PSGRAPH_WORKER_FAILOVER_H

#include "psgraph/cluster.h"
#include "psgraph/dist_session.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Probes every ps task serving a shard (each within probe_ms) and fails over from each
 * one lost: *moved tells whether any was. Says what it did on out (and a "failover" event
 * on metrics, may be NULL) for step `step`. -1 with the error set when a lost task's backup
 * is lost too or does not hold the shard (a second failure of the shard before it was
 * re-replicated): the caller falls back to the checkpoint restore; the session then runs
 * every shard on its own task again. */
int psg_failover_recover(psg_dist_session_t *ds, const psg_cluster_t *cluster, int64_t probe_ms,
                         int64_t wait_ms, FILE *out, FILE *metrics, int64_t step, bool *moved);

/* Whether an Inspect report (JSON) holds an initialized variable of the task's own shard
 * (not a backup copy of another's). */
bool psg_failover_holds_own(const char *json);

#endif
