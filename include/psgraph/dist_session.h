/* The worker's distributed session: places a graph on the tasks of a cluster, cuts it per
 * step signature (cached), registers each piece once with the task server that runs it,
 * and runs a step as RunGraph on every task involved under one step id. A failed or
 * silent task fails the step with an error naming it, never a hang.
 * Not the task server (task_server.h) and not the training loop (trainer.h). */
#ifndef PSGRAPH_DIST_SESSION_H
#define PSGRAPH_DIST_SESSION_H

#include "psgraph/cluster.h"
#include "psgraph/graph.h"
#include "psgraph/placement.h"
#include "psgraph/task_server.h"
#include "psgraph/wire.h"

#include <stdint.h>

typedef struct psg_dist_session psg_dist_session_t;
typedef struct psg_dist_callable psg_dist_callable_t;

typedef struct {
    const psg_cluster_t *cluster; /* borrowed; its task is this process (a worker) */
    psg_task_server_t *server;    /* this process's task server (borrowed), which runs the
                                     local partition and answers the peers' Recvs */
    int64_t step_timeout_ms;      /* a step, a registration, a wait fails after this; <= 0: 30000 */
    int id_stream;                /* 0 to 3: sessions of one process (the sync chief's
                                     runner and its count of live workers beside the worker's
                                     loop) draw disjoint step ids */
    int64_t ps_memory_limit;      /* > 0: bytes of variables a ps task may hold (placement.h) */
} psg_dist_session_options_t;

/* A replica device setter for this worker (variables greedily, or round-robin, over the
 * cluster's ps tasks; everything else on this worker's task), to push on the graph before
 * building the model (psg_graph_push_replica_setter). NULL with the error set. */
psg_replica_setter_t *psg_dist_replica_setter_new(const psg_cluster_t *cluster,
                                                  psg_ps_strategy_t strategy);

/* A session over g (borrowed; it must outlive the session; nodes may be added between
 * make_callable calls: the graph is placed again when it grew). NULL with the error set. */
psg_dist_session_t *psg_dist_session_new(psg_graph_t *g, const psg_dist_session_options_t *opt);
/* Deregisters nothing (the task servers drop graphs when they stop), closes the
 * connections. NULL-safe. */
void psg_dist_session_destroy(psg_dist_session_t **s);

/* Places (if needed), partitions and registers the step signature. The callable belongs
 * to the session (do not destroy it; it stays valid as long as the session). A second call
 * with the same signature returns the same callable. NULL with the error set (placement,
 * partitioning or a task refusing the graph, named). */
psg_dist_callable_t *psg_dist_session_make_callable(psg_dist_session_t *s, int n_feeds,
                                                    const psg_endpoint_t *feeds, int n_fetches,
                                                    const psg_endpoint_t *fetches, int n_targets,
                                                    const int *targets);
/* Runs one step: RunGraph with a fresh step id on every task with a partition, the local
 * one on the calling thread. fetched[i] gets a new reference. Returns 0, or -1 with the
 * error naming the task that failed or did not answer within the step timeout; the step
 * is aborted and cleaned up on every task either way. */
int psg_dist_callable_run(psg_dist_callable_t *c, psg_tensor_t *const *feed_values,
                          psg_tensor_t **fetched);
/* Overlapped steps, for async training: a run returns once this worker's partition is
 * done, while the other tasks may still run the step (the ps applying the gradients it
 * pulls); the next run of this callable sends its RunGraphs and runs its own partition
 * first, then waits for that step, so that the next step's variable reads travel while the
 * last step's updates are applied. A failure of the open step fails the next run, naming
 * the step. The session's other requests (another callable's run, wait_init, job_done,
 * wait_workers, inspect, destroy) first wait for the open step; psg_dist_session_call does
 * not (threads may make calls at once to distinct tasks): drain first. Takes effect only when no
 * other task's partition fetches a tensor. Off by default. */
void psg_dist_callable_set_overlap(psg_dist_callable_t *c, bool on);
bool psg_dist_callable_overlaps(const psg_dist_callable_t *c);
/* Steps asked for one ahead, without overlap: each run also sends the next step's RunGraphs
 * to the other tasks and queues its own partition's pulls before its partition runs, so
 * that a ps reads each variable for the next step as soon as this step's update of it is
 * applied (each resource sees the steps in the order their RunGraphs came) and the value
 * travels while this worker still runs backprop. What is read is what one step at a time
 * reads; the run still waits for this step's replies. Takes effect only when this task
 * runs a partition and no other task's partition takes feeds. The next run of another
 * callable, and every request that waits for an open step (drain), first calls the step
 * asked for ahead off (nothing of it was applied). Off by default. */
void psg_dist_callable_set_ahead(psg_dist_callable_t *c, bool on);
bool psg_dist_callable_asks_ahead(const psg_dist_callable_t *c);
/* Calls off a step asked for ahead and waits for the open step of an overlapped callable,
 * if any. -1 with the open step's error. */
int psg_dist_session_drain(psg_dist_session_t *s);

/* Tasks a callable runs on (for tests and logs). */
int psg_dist_callable_num_tasks(const psg_dist_callable_t *c);

/* One step of a signature (made and cached as make_callable). */
int psg_dist_session_run(psg_dist_session_t *s, int n_feeds, const psg_endpoint_t *feeds,
                         psg_tensor_t *const *feed_values, int n_fetches,
                         const psg_endpoint_t *fetches, psg_tensor_t **fetched, int n_targets,
                         const int *targets);
/* Runs the graph's "init" collection (the chief does, once). */
int psg_dist_session_run_init(psg_dist_session_t *s);
/* Waits until every variable of the graph is initialized on the task holding it (a
 * non-chief worker, before its first step): one WaitInit request per task, answered by
 * the task when its variables are ready. -1 with the error naming the task on timeout. */
int psg_dist_session_wait_init(psg_dist_session_t *s, int64_t timeout_ms);

/* Tells every ps task this worker is done (JobDone). -1 naming the first task that did
 * not answer (the others are still told). */
int psg_dist_session_job_done(psg_dist_session_t *s);
/* As psg_dist_session_job_done, for worker task `worker`: the chief's, for a worker it found
 * lost (the ps tasks count it as finished and do not wait for it). */
int psg_dist_session_job_done_for(psg_dist_session_t *s, const char *worker);
/* Waits until n workers told ps task 0 they are done (the chief, before it evaluates). */
int psg_dist_session_wait_workers(psg_dist_session_t *s, int n, int64_t timeout_ms);

/* ---- recovery (docs/checkpoints.md) ---- */

/* Sends request *m (taken) to task `task` and returns its reply (caller destroys it), or
 * NULL with the error naming the task (an ERROR reply, no reply within timeout_ms). */
psg_msg_t *psg_dist_session_call(psg_dist_session_t *s, const char *task, psg_msg_t **m,
                                 int64_t timeout_ms);
/* A reply's body as a malloc'd string ("" when it has none); the reply *r is destroyed.
 * NULL with the error set when out of memory. */
char *psg_dist_session_reply_text(psg_msg_t **r);
/* Registers every callable's partition again on every other task (after a task restarted
 * and lost its graphs; a task that kept them holds a second, unused copy). -1 naming the
 * task that refused. */
int psg_dist_session_reregister(psg_dist_session_t *s);
/* Runs the part of the "init" collection placed on task `task` ("/job:ps/task:1"): the
 * initializers of the variables that task holds, and of no other. */
int psg_dist_session_run_init_on(psg_dist_session_t *s, const char *task);

/* ---- hot failover (docs/replication.md) ---- */

/* From now on the nodes placed on ps task `from` (and the shards it took over before) run
 * on ps task `to`, which holds their backup copies: the graph is placed again and every
 * callable partitioned and registered again (callables stay valid). -1 with the error
 * naming the task that refused a partition. */
int psg_dist_session_failover(psg_dist_session_t *s, int from, int to);
/* Every shard on its own ps task again (a fallback to the checkpoint restore); the callables
 * are partitioned and registered by the next psg_dist_session_reregister, which must come
 * before the next run. */
void psg_dist_session_failover_reset(psg_dist_session_t *s);
/* After a failed step of c (a sync chief's, whose takes emptied the accumulators): each
 * ps task serving a shard puts every variable whose last update is that step's back to its
 * value before it, so that the step can run again from the same values. 0 when c's last
 * step did not fail or carries no update id; -1 naming the task that did not answer. */
int psg_dist_session_undo_failed(psg_dist_session_t *s, psg_dist_callable_t *c);
/* The ps task serving ps task k's shard now: k until a failover moved it. */
int psg_dist_session_ps_serving(psg_dist_session_t *s, int k);

/* The incarnation of task `task` as its latest reply to this session gave it (0: none yet,
 * or this process's own task): a task restarted at the same address answers with a new
 * one (psgraph/wire.h). Reading it acknowledges a restart: steps no longer report it. */
uint64_t psg_dist_session_incarnation(psg_dist_session_t *s, const char *task);
/* The Inspect report of a task ("/job:ps/task:1"): JSON as psg_task_server_inspect,
 * malloc'd (the caller frees). NULL with the error set. */
char *psg_dist_session_inspect(psg_dist_session_t *s, const char *task);
/* As psg_dist_session_inspect, waiting at most timeout_ms instead of the step timeout. */
char *psg_dist_session_inspect_within(psg_dist_session_t *s, const char *task, int64_t timeout_ms);

#endif
