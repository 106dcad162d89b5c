/* Checkpoints and recovery of a training job in a cluster (docs/checkpoints.md): the chief
 * decides when to save and asks every ps task to write its own shard (SaveShard, all ps in
 * parallel), then commits the index and prunes; on start and after a failed step it finds
 * ps tasks that lost their variables (restarted) and restores only their shard
 * (RestoreShard) from the latest complete checkpoint, stating the steps lost. A worker
 * that is not the chief waits for the variables. Not the single-process hooks
 * (train_hooks.c) and not the transport (task_server.c). */
#ifndef PSGRAPH_WORKER_CLUSTER_CKPT_H
#define PSGRAPH_WORKER_CLUSTER_CKPT_H

#include "psgraph/dist_session.h"
#include "psgraph/trainer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct psg_cluster_ckpt psg_cluster_ckpt_t;

/* c, cluster, ds, out and metrics (may be NULL) are borrowed and must outlive the result.
 * NULL with the error set (a bad --checkpoint-every, out of memory). */
psg_cluster_ckpt_t *psg_cluster_ckpt_new(const psg_train_config_t *c, const psg_cluster_t *cluster,
                                         psg_dist_session_t *ds, bool chief, const char *task,
                                         FILE *out, FILE *metrics);
void psg_cluster_ckpt_destroy(psg_cluster_ckpt_t **h);

/* Before the first step. The chief: each ps task that holds no initialized variable gets
 * its shard of the latest complete checkpoint of c->logdir (the chief names the step, so
 * that every ps loads the same one) or, without one, its initializers run; a ps that holds
 * its variables (the chief restarted, the job goes on) is left alone. Another worker waits
 * until the variables are initialized. *start_step: the latest checkpoint's step, or 0. */
int psg_cluster_ckpt_start(psg_cluster_ckpt_t *h, int64_t *start_step);
/* After `done` steps: the chief saves when the policy says so. A save that fails (a ps
 * down) is reported on out and not committed; training goes on (returns 0). */
int psg_cluster_ckpt_after_step(psg_cluster_ckpt_t *h, int64_t done);
/* After step `step` failed: waits (each try bounded by the step timeout, no fixed poll
 * interval) until every ps task answers, restores the shard of each ps that restarted (the
 * chief; the others wait for the variables), registers the graphs again. 0: retry the
 * step; -1 with the error set when the cluster did not come back. */
int psg_cluster_ckpt_recover(psg_cluster_ckpt_t *h, int64_t step);
/* The chief's control of the ps tasks' timeline: start (every ps records its nodes as
 * trace pid = its index, training step `step`) or stop (each writes PREFIX.ps<i>.json). */
int psg_cluster_ckpt_trace_ps(psg_cluster_ckpt_t *h, bool start, int64_t step, const char *prefix);
/* At the end, once every worker is done, named `step` (the job's global step): the chief's
 * last checkpoint, written even when one of that name exists (a periodic save of the same
 * step may predate the others' last updates). */
int psg_cluster_ckpt_end(psg_cluster_ckpt_t *h, int64_t step);

#endif
