/* The task server every psgraph process runs: one resource manager and one rendezvous per
 * process, a ZeroMQ ROUTER answering RegisterGraph, RunGraph, Recv (a peer pulls a tensor a
 * local Send left: TensorFlow's RecvTensor), Inspect, AbortStep, CleanupStep, WaitInit,
 * JobDone, SaveShard, RestoreShard and Shutdown. Not the worker's session (dist_session.h), which
 * drives it. */
#ifndef PSGRAPH_TASK_SERVER_H
#define PSGRAPH_TASK_SERVER_H

#include "psgraph/cluster.h"
#include "psgraph/graph.h"
#include "psgraph/rendezvous.h"
#include "psgraph/resource.h"
#include "psgraph/session.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct psg_task_server psg_task_server_t;

/* The requests, as the header's `op` (docs/distributed.md has their fields). */
#define PSG_TS_REGISTER_GRAPH "RegisterGraph"
#define PSG_TS_DEREGISTER_GRAPH "DeregisterGraph"
#define PSG_TS_RUN_GRAPH "RunGraph"
#define PSG_TS_RECV "Recv"
#define PSG_TS_RUN_GRAPH_RECV "RunGraphRecv"
#define PSG_TS_INSPECT "Inspect"
#define PSG_TS_ABORT_STEP "AbortStep"
#define PSG_TS_CLEANUP_STEP "CleanupStep"
#define PSG_TS_WAIT_INIT "WaitInit"
#define PSG_TS_JOB_DONE "JobDone"
#define PSG_TS_WAIT_DONE "WaitDone"
#define PSG_TS_SHUTDOWN "Shutdown"
/* Checkpoints of a cluster (docs/checkpoints.md): `step` S, `key` "k/N", body the log
 * directory. SaveShard writes this task's variables as shard k of N of the checkpoint at S
 * and replies key "FILE SIZE CRC32 TENSOR_BYTES", body the tensor names one a line;
 * RestoreShard loads shard k of the committed checkpoint at S (variables created when
 * absent) and replies key = the number of tensors restored. */
#define PSG_TS_SAVE_SHARD "SaveShard"
#define PSG_TS_RESTORE_SHARD "RestoreShard"
/* The timeline of a cluster: key "start PID STEP" records every node this task runs from
 * now on as trace pid PID, training step STEP; key "stop" with the body a path writes the
 * events recorded since to that file (a Chrome trace) and stops recording. */
#define PSG_TS_TRACE "Trace"
/* Chain replication (docs/replication.md): a primary's values of the variables a step wrote
 * (key "update") or of its whole shard (key "full"), as tensors named by the variables, kept
 * by its backup as backup copies; replied once applied. */
#define PSG_TS_REPLICATE "Replicate"

/* What one peer (a connection; under CURVE a client key, all its connections, the cluster's
 * own key excepted) may cost the task, and the task's memory; each <= 0 takes
 * its default. A request past a limit gets an error naming it (code PSG_ERR_LIMIT) and the
 * server goes on answering the others (docs/distributed.md, "Limits"). */
typedef struct {
    int64_t memory_bytes;               /* the task's memory, one budget for all its peers: the
                                         * graphs as built, every buffer their steps make (variables,
                                         * Random, temporaries), the requests waiting; a graph one of
                                         * whose outputs would pass what is left is refused by name;
                                         * default half the machine's memory */
    int64_t peer_memory_bytes;          /* a peer's share: what its registered graphs may allocate
                                         * in all (every output of a known shape, each variable once);
                                         * default half the task's */
    int max_graphs_per_peer;            /* registered and not deregistered; default 256 */
    int64_t max_graph_bytes_per_peer;   /* their bytes as built (psg_graph_footprint: ~14x
                                         * the serialized bytes); default 1 GiB */
    int max_pending_per_peer;           /* RunGraph queued or running; default 64 */
    int max_running_per_peer;           /* RunGraph on runner threads at once: the rest of the
                                         * peer's wait in the queue, so that one peer's waiting
                                         * steps never hold every runner; default half the runners
                                         * (at least 1) */
    int max_recvs_per_peer;             /* Recv waiting for its tensor (one a variable a step:
                                         * Inception-v3 pulls ~400 a step); default 16384 */
    int64_t max_pending_bytes_per_peer; /* the bytes pending RunGraphs hold; default memory / 4 */
    int max_waiters_per_peer;           /* WaitInit, WaitDone; default 16 */
    int max_queue;                      /* RunGraphs queued for the runner threads; default 1024 */
    int max_peers;                      /* peers with a connection open holding anything at once
                                         * (closed ones, waiting out graph_grace_ms, are bounded
                                         * apart to as many); default 1024 */
    int max_peers_per_address;          /* of those, from one address (a client key is not
                                         * counted); default 64 */
    int64_t max_wait_ms;                /* the longest wait of an accumulator take or a token
                                         * dequeue, whatever a graph asks; default 10 minutes */
    int max_connections;                /* connections open at once (psg_wire_opts_t); default
                                         * what ulimit -n allows, less 128 */
    int64_t graph_grace_ms;             /* a peer's graphs outlive its last connection this long (a
                                         * worker that reconnects keeps them), then are released;
                                         * default 60 s */
} psg_task_limits_t;

/* The limits with every default filled in (memory from the machine's). */
psg_task_limits_t psg_task_limits_resolve(const psg_task_limits_t *given);

#define PSG_TS_MAX_LOGDIRS 4

typedef struct {
    /* the cluster (borrowed, must outlive the server): the peers a Recv pulls from, and
     * this process's task when task_name is NULL; may be NULL for a lone task */
    const psg_cluster_t *cluster;
    /* this process's task, "/job:ps/task:0" in any accepted form; NULL: the cluster's */
    const char *task_name;
    /* where to bind; NULL: the task's address in the cluster ("tcp://127.0.0.1:*" when
     * there is no cluster) */
    const char *endpoint;
    int num_threads;         /* executor threads per step (<= 1: the step's own thread) */
    int max_steps;           /* steps run at once (runner threads; <= 0: 8) */
    int64_t recv_timeout_ms; /* how long a Recv (local or pulled) waits; <= 0: 60000 */
    int64_t idle_timeout_ms; /* stop after this long without a request; 0: never */
    int peer_timeout_ms;     /* heartbeats: a peer silent this long is dropped (psgraph/wire.h);
                              * 0: the cluster's, else PSG_WIRE_PEER_TIMEOUT_MS */
    int expect_workers;      /* stop once this many workers sent JobDone; 0: never */
    /* where SaveShard and Trace may write (each made when absent; a path under one of
     * them); none: they are refused */
    const char *logdirs[PSG_TS_MAX_LOGDIRS];
    psg_task_limits_t limits;
    /* CURVE keys (borrowed, must outlive the server; psgraph/curve.h); NULL: the cluster's */
    const psg_curve_keys_t *keys;
    /* may listen without keys off loopback (psg_curve_listen_check) */
    bool insecure;
} psg_task_server_options_t;

/* Binds the server and starts its thread; returns once it serves. NULL with the error set
 * (naming the endpoint or the task) on a bad task, a busy port, out of memory, or an
 * address it must not listen on without keys. */
psg_task_server_t *psg_task_server_new(const psg_task_server_options_t *opt);
/* Stops serving (fails pending Recvs and steps), joins every thread, frees all. NULL-safe. */
void psg_task_server_destroy(psg_task_server_t **ts);

/* Waits up to timeout_ms (< 0: forever) for the server to stop by itself (Shutdown, every
 * expected worker done, idle timeout). Returns 1 when it stopped, 0 on timeout. */
int psg_task_server_wait(psg_task_server_t *ts, int64_t timeout_ms);
/* Why it stopped ("" while it serves): "shutdown requested by ...", "job done", "idle ...". */
const char *psg_task_server_stop_reason(psg_task_server_t *ts);

/* The bound endpoint ("tcp://127.0.0.1:41234"), its port, the canonical task name
 * ("/job:ps/replica:0/task:0"). */
const char *psg_task_server_endpoint(const psg_task_server_t *ts);
int psg_task_server_port(const psg_task_server_t *ts);
const char *psg_task_server_task(const psg_task_server_t *ts);
psg_resource_mgr_t *psg_task_server_resources(psg_task_server_t *ts);
psg_rendezvous_t *psg_task_server_rendezvous(psg_task_server_t *ts);

/* ---- in-process calls (the worker's session uses them for its own task) ---- */

/* Registers a serialized partition (psg_graph_serialize's bytes, untrusted) to be run with
 * feeds[i] (node, index) fed, fetches[i] returned and targets[i] run; builds its plan.
 * Sets *handle. Returns 0, or -1 with the error naming the task (a graph that does not
 * parse, an id out of range, a Recv from a task the cluster does not have). */
int psg_task_server_register(psg_task_server_t *ts, const void *graph, size_t len, int n_feeds,
                             const psg_endpoint_t *feeds, int n_fetches,
                             const psg_endpoint_t *fetches, int n_targets, const int *targets,
                             uint64_t *handle);
/* Runs registered graph `handle` for step `step` on the calling thread: first asks the
 * sending tasks for the tensors its Recvs need, then runs the plan. feeds: as many as
 * registered (checked against the placeholders' dtype and shape); fetched[i] receives new
 * references. Returns 0, or -1 with the error "task T: ..." (and the step aborted here). */
int psg_task_server_run(psg_task_server_t *ts, uint64_t handle, int64_t step, int n_feeds,
                        psg_tensor_t *const *feeds, psg_tensor_t **fetched);
/* Asks now for the tensors the Recvs of graph `handle` need in step `step`, which
 * psg_task_server_run then does not ask for again: a worker that knows its next step's id
 * has them on their way while it still runs this one. -1 with the error set on an unknown
 * handle or when the puller is stopped. psg_task_server_cleanup_step forgets them. */
int psg_task_server_prepare(psg_task_server_t *ts, uint64_t handle, int64_t step);
/* Says that the tensors the Recvs of graph `handle` need in step `step` come another way
 * (a RunGraphRecv's reply puts them into this server's rendezvous): psg_task_server_run
 * asks for none of them. -1 with the error set on an unknown handle, or when as many steps
 * of the graph are prepared already as it keeps (then nothing changed). */
int psg_task_server_prepare_delivered(psg_task_server_t *ts, uint64_t handle, int64_t step);
/* Calls fn(ctx, ...) after each node of every partition this server runs from now on (the
 * executor's timing hook; NULL: off). A step already running keeps the hook it started with. */
void psg_task_server_set_node_hook(psg_task_server_t *ts, psg_node_timing_fn fn, void *ctx);
/* Number of fetches of a registered graph (-1 for an unknown handle). */
int psg_task_server_num_fetches(psg_task_server_t *ts, uint64_t handle);
/* Ends a step here: drops its tensors, waiters and pulls. */
void psg_task_server_cleanup_step(psg_task_server_t *ts, int64_t step);
/* Fails a step here: its Recvs stop waiting, with `why`. */
void psg_task_server_abort_step(psg_task_server_t *ts, int64_t step, const char *why);
/* Fails at once the pulls from `task` still waiting (their steps aborted with `why`): a
 * failover found the task lost, and a step of another thread (a sync chief's apply) must not
 * wait for the puller's own peer timeout to learn it. */
void psg_task_server_fail_pulls_from(psg_task_server_t *ts, const char *task, const char *why);
/* The Inspect report: JSON {"task", "variables": [{"name", "dtype", "shape", "bytes",
 * "initialized"}], "graphs", "pending", "received", "rejected", "refused" (peers CURVE refused)};
 * malloc'd, caller frees. */
char *psg_task_server_inspect(psg_task_server_t *ts);

/* Tensor bytes (payload, headers excluded) that peers pulled from this task's sends
 * (*served: a worker's pushed gradients) and that this task pulled from peers (*pulled: a
 * worker's variable reads), since it started. */
void psg_task_server_tensor_bytes(psg_task_server_t *ts, int64_t *served, int64_t *pulled);

#endif
