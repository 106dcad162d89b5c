/* Internal to psgraph: a cluster worker's strategy (sync/strategy.h) in the
 * training loop (docs/sync.md, "Across processes"): the replica's graph built
 * by the strategy under the replica device setter, the distributed callables
 * of its calls, each step through the strategy's step function, stragglers,
 * the chief's runner on a second distributed session, the clean end and the
 * summary. Every strategy (async included) goes through it; the loops
 * (worker/trainer.c, cli/bench_run.c) call these in a few lines. */
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

/* The strategy c trains with in a cluster: c->sync, or "async" when it names none. */
const char *psg_sync_train_strategy(const psg_train_config_t *c);
/* True when that strategy keeps the model's variables on the worker (local SGD): build
 * the model under the worker's own device, not under the replica setter. */
bool psg_sync_train_local_model(const psg_train_config_t *c);

/* Builds worker `rank` of num_workers's replica into g with c's strategy (call it under
 * the replica device setter): grads[i] of vars[i] (n pairs, borrowed for the call; NULL
 * grads: the gradients of loss for every trainable variable) given to the strategy;
 * the step feeds feeds[n_feeds] (the model's, borrowed) and fetches loss. towers
 * (borrowed, may be NULL) splits each batch into its towers' feeds. opt and out are
 * borrowed. NULL with the error set (a bad N, b, option or --straggler). */
psg_sync_train_t *psg_sync_train_new(const psg_train_config_t *c, psg_graph_t *g,
                                     psg_optimizer_t *opt, int n, const psg_endpoint_t *grads,
                                     const psg_endpoint_t *vars, psg_endpoint_t loss, int n_feeds,
                                     const psg_endpoint_t *feeds, const psg_towers_t *towers,
                                     int rank, int num_workers, FILE *out);
/* The replica's graph, borrowed: to build around it. */
const psg_sync_graph_t *psg_sync_train_graph(const psg_sync_train_t *st);
/* The node after which the update is done (sync: the chief's, chief_global_step's; the
 * others: the worker's train_op): where a moving average goes. */
int psg_sync_train_after_update(const psg_sync_train_t *st);
/* Before start: a node run with each of this worker's steps (worker_op: the batch-norm
 * updates of Inception-v3) and one run after each update (after_op: a moving average;
 * with the chief's steps when the strategy has a chief's runner, else with the
 * worker's); -1: none. */
void psg_sync_train_add_ops(psg_sync_train_t *st, int worker_op, int after_op);

/* Joins the chief's runner if it still runs (it ends by the step timeout at
 * the latest), frees. NULL-safe. */
void psg_sync_train_destroy(psg_sync_train_t **st);

/* Before the variables are initialized (a local_model strategy: this worker's own
 * copies, which no other task initializes). Returns 0 or -1. */
int psg_sync_train_init_local(psg_sync_train_t *st, psg_dist_session_t *s);

/* After the variables are initialized (s borrowed, as the cluster, the server and
 * metrics, which may be NULL and is made line-buffered: the workers of a job may append
 * to one file): makes the calls' callables (the step overlapped when the strategy
 * allows it and c did not say --overlap off) and reads the first local step; the chief
 * also runs the strategy's init and starts its runner on a second session. Returns 0,
 * or -1 with the error set. */
int psg_sync_train_start(psg_sync_train_t *st, psg_dist_session_t *s, const psg_cluster_t *cluster,
                         psg_task_server_t *server, bool chief, FILE *metrics);

/* The chief, as workers are lost or join (docs/distributed.md "Membership"): alive[r] for
 * each rank r < n (the chief's 0). sync, local, diloco: each step (the pending one too)
 * averages max(min(N, live), live - b) gradients of the live workers it releases tokens to
 * (a loss spends the backups first); ssp: the clocks wait for the live workers only. Said
 * on out. A no-op for strategies that wait for no other worker (async, easgd). Called from
 * one thread (the membership's). 0, or -1 with the error set. */
int psg_sync_train_set_live(psg_sync_train_t *st, const bool *alive, int n);

/* One worker step on (images, labels), the worker's whole batch: the straggler's delay,
 * the strategy's step, its statistics (a metrics.jsonl line). *loss gets the loss (new);
 * *over is set when training is over. Returns 0, or -1 with the error set. */
int psg_sync_train_step(psg_sync_train_t *st, psg_tensor_t *images, psg_tensor_t *labels,
                        psg_tensor_t **loss, bool *over);

/* The same on any model's feeds without towers: values[n], one for each feed given to
 * psg_sync_train_new (borrowed). The model of `psgraph train --model wide-deep` uses it. */
int psg_sync_train_step_feeds(psg_sync_train_t *st, int n, psg_tensor_t *const *values,
                              psg_tensor_t **loss, bool *over);

/* Whether a failed step of a strategy with tokens (sync) can be run again after a failover:
 * the cluster keeps a backup of every shard. */
bool psg_sync_train_can_rejoin(const psg_sync_train_t *st);
/* After this worker's session failed over (docs/replication.md): waits for a token the
 * chief released again and takes its step as the worker's local step, so that the next
 * psg_sync_train_step sends that step's gradient. When it is the step before the failed one
 * (its update was taken back), runs that step again first on its batch; *applied when it is
 * the step after (the failed step's gradient was applied: its batch is done). -1 with the
 * error set. */
int psg_sync_train_rejoin(psg_sync_train_t *st, bool *applied);
/* The end of this worker's training: closes the strategy's queues when it stopped on its
 * own, adds its counts and examples_per_sec to the job's (a variable on a ps), waits for
 * the chief's runner, prints and logs the summary line. Returns 0, or -1 with the error. */
int psg_sync_train_finish(psg_sync_train_t *st, double examples_per_sec);

/* The chief, once every worker is done or gone: the ps's counts (Inspect), the global
 * step and the workers' reported counts. */
void psg_sync_train_count(psg_sync_train_t *st, psg_dist_session_t *s,
                          const psg_cluster_t *cluster);
/* After count: the job's global step as the final JSON line gives it ("global_steps": the
 * chief's runner's updates, else the global step variable's value); -1 when unknown. */
int64_t psg_sync_train_global_steps(const psg_sync_train_t *st);
/* During training: the global step now, as the worker's last token gave it (the step its
 * next gradient is for), under sync; -1 under the others, whose local step is the
 * worker's own clock (or a round's). */
int64_t psg_sync_train_token_step(const psg_sync_train_t *st);
/* The chief, after finish and count: the job's global steps a second ("steps_per_sec" of
 * the final JSON line), 0 when unknown. */
double psg_sync_train_steps_per_sec(const psg_sync_train_t *st);
/* The chief's fields for its final JSON line, after finish and count: "sync":NAME, N, b,
 * global_steps, steps_per_sec, gradients_used, gradients_dropped, staleness {min, mean,
 * max, n} over all workers, push_bytes_per_step, pull_bytes_per_step, per_worker, each
 * followed by a comma. */
void psg_sync_train_json(const psg_sync_train_t *st, char *buf, size_t size);

/* The chief, after count: the examples/sec each worker reported at its end
 * into rates[num_workers] (-1 for one that never did). Returns num_workers,
 * or 0 when the counts could not be read. */
int psg_sync_train_worker_rates(const psg_sync_train_t *st, double *rates);

#endif
