/* Internal to psgraph: what `psgraph train --sync sync` adds to the training
 * loop of a cluster worker (docs/sync.md, "Across processes"): the replica's
 * sync graph (psg_sync_replicas_t under the replica device setter, so the
 * accumulators and the token queue live on the ps tasks), each step's local
 * step, token and statistics, stragglers, the chief's runner on a second
 * distributed session, the clean end, and the summary. The loop itself stays
 * in worker/trainer.c, which calls these in a few lines. */
#ifndef PSGRAPH_WORKER_SYNC_TRAIN_H
#define PSGRAPH_WORKER_SYNC_TRAIN_H

#include "psgraph/cluster.h"
#include "psgraph/dist_session.h"
#include "psgraph/graph.h"
#include "psgraph/optimizer.h"
#include "psgraph/sync_replicas.h"
#include "psgraph/tensor.h"
#include "psgraph/towers.h"
#include "psgraph/trainer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct psg_sync_train psg_sync_train_t;

/* True when c asks for synchronous replicas (--sync sync). */
bool psg_sync_train_wanted(const psg_train_config_t *c);

/* Builds worker `rank` of num_workers's sync replica into g, in place of
 * psg_optimizer_minimize (call it under the replica device setter): the
 * gradients of loss for every trainable variable, offered to accumulators
 * beside the variables, the token queue, the chief's step. images and
 * labels are the step's feeds. opt and out are borrowed. NULL with the error set (a bad N, b or
 * --straggler). */
psg_sync_train_t *psg_sync_train_new(const psg_train_config_t *c, psg_graph_t *g,
                                     psg_optimizer_t *opt, psg_endpoint_t loss,
                                     psg_endpoint_t images, psg_endpoint_t labels, int rank,
                                     int num_workers, FILE *out);
/* As psg_sync_train_new for a worker of towers (psg_towers_build_gradients):
 * grads[i] of vars[i] (n pairs; borrowed for the call) are the towers'
 * averaged gradients, one per variable offered to its accumulator; the step
 * feeds the 2K tower placeholders (psg_towers_feeds) and fetches t->loss.
 * t is borrowed and must outlive st. NULL with the error set. */
psg_sync_train_t *psg_sync_train_new_towers(const psg_train_config_t *c, psg_graph_t *g,
                                            psg_optimizer_t *opt, const psg_towers_t *t, int n,
                                            const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                                            int rank, int num_workers, FILE *out);
/* The replica's sync graph, borrowed: to build around it (after the chief's
 * update: chief_global_step's node). */
const psg_sync_graph_t *psg_sync_train_graph(const psg_sync_train_t *st);
/* Before start: a node run with each of this worker's steps (worker_op: the
 * batch-norm updates of Inception-v3) and one run with each of the chief's
 * steps (chief_op: a moving average after the update); -1: none. */
void psg_sync_train_add_ops(psg_sync_train_t *st, int worker_op, int chief_op);

/* Joins the chief's runner if it still runs (it ends by the step timeout at
 * the latest), frees. NULL-safe. */
void psg_sync_train_destroy(psg_sync_train_t **st);

/* After the variables are initialized (s borrowed, as the cluster, the
 * server and metrics, which may be NULL and is made line-buffered: the
 * workers of a job may append to one file): makes the step's callable and reads the first local
 * step; the chief also sets the accumulators to the global step and starts its runner on a second
 * session. Returns 0, or -1 with the error set. */
int psg_sync_train_start(psg_sync_train_t *st, psg_dist_session_t *s, const psg_cluster_t *cluster,
                         psg_task_server_t *server, bool chief, FILE *metrics);

/* One worker step on (images, labels), the worker's whole batch (a worker
 * of towers splits it into views, psg_towers_split): the straggler's delay, the step,
 * its statistics (a metrics.jsonl line). *loss gets the loss (new); *over
 * is set when training is over (the token queue was closed). Returns 0, or
 * -1 with the error set. */
int psg_sync_train_step(psg_sync_train_t *st, psg_tensor_t *images, psg_tensor_t *labels,
                        psg_tensor_t **loss, bool *over);

/* The end of this worker's training: closes the token queue and the
 * accumulators when it stopped on its own (out of data) rather than being
 * told training is over, adds its counts and its examples_per_sec to the
 * job's (a variable on a ps), waits for the chief's runner, prints and logs
 * the summary line. Returns 0, or -1 with the error. */
int psg_sync_train_finish(psg_sync_train_t *st, double examples_per_sec);

/* The chief, once every worker is done or gone, before the ps tasks hear
 * the job is done: asks them for the accumulators' counts (Inspect), the
 * gradients used and dropped in all (-1 when none answers), and reads the
 * workers' reported counts. */
void psg_sync_train_count(psg_sync_train_t *st, psg_dist_session_t *s,
                          const psg_cluster_t *cluster);
/* The chief's fields for its final JSON line, after finish and count:
 * "sync":"sync", N, b, global_steps, steps_per_sec (of the chief's runner,
 * from its first step to its last), gradients_used, gradients_dropped,
 * per_worker ([used, dropped] as each worker reported at its end, null for
 * one that never did: dead), each followed by a comma. */
void psg_sync_train_json(const psg_sync_train_t *st, char *buf, size_t size);

/* The chief, after count: the examples/sec each worker reported at its end
 * into rates[num_workers] (-1 for one that never did). Returns num_workers,
 * or 0 when the counts could not be read. */
int psg_sync_train_worker_rates(const psg_sync_train_t *st, double *rates);

#endif
