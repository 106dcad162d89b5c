/* Internal to the task server's files: the server's state, its registered graphs, and the
 * limits that bound what one peer may cost (docs/distributed.md, "Limits"). The dispatch
 * (task_server.c), the registered graphs (task_graphs.c) and the admin requests
 * (task_admin.c) share it; nothing outside ps/ includes it. */
#ifndef PSGRAPH_PS_TASK_SERVER_INTERNAL_H
#define PSGRAPH_PS_TASK_SERVER_INTERNAL_H

#include "runtime/executor.h"
#include "net/codec.h"
#include "ps/protocol.h"
#include "ps/remote_rendezvous.h"
#include "psgraph/device_name.h"
#include "psgraph/task_server.h"
#include "psgraph/threadpool.h"
#include "psgraph/trace.h"
#include "psgraph/wire.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_WORKERS_DONE 1024
/* Steps of one graph whose pulls may be out before they run (a worker runs one ahead). */
#define PREPARED_STEPS 4

typedef struct peer peer_t;
typedef struct job job_t;
/* The connections a peer is known by: its latest few (a client key's may be several). */
#define PEER_CONNS 4
/* Buckets of the peers' index by key or routing id: a request finds its peer without walking
 * every peer (a thousand closed connections' peers hold their graphs through the grace). */
#define PEER_BUCKETS 1024

typedef struct {
    uint64_t handle;
    peer_t *owner; /* the peer that registered it (NULL: in-process); counts it */
    int refs;      /* under ts->lock: the table's (until deregistered) and each runner's */
    size_t body_bytes, alloc_bytes;
    size_t built_bytes;           /* as built (graph and plan), charged to budget */
    struct psg_membudget *budget; /* the task's, while charged (a reference) */
    size_t charged_bytes;         /* alloc_bytes less the variables its owner's other graphs hold */
    struct psg_ts_var *vars;      /* its VarHandles' variables, sorted by name */
    int n_vars;
    psg_graph_t *g;
    psg_plan_t *plan;
    /* Steps of a plan whose state is all in resources overlap, each resource
     * seeing them in the order they came (order); others run one at a time: busy while
     * one is started, the next ones waiting in line (holding no runner), under ts->lock. */
    psg_run_order_t *order;
    bool busy;
    job_t *waiting_head, *waiting_tail;
    int n_feeds, n_fetches;
    int n_pulls;
    psg_remote_pull_t *pulls;
    int n_sends;
    char **send_keys;
    bool run_inline;      /* nothing that waits and a few nodes: the server thread runs it */
    const char **written; /* the variables it writes (psg_ts_repl_written), into g's strings */
    int n_written;
    const char **handles; /* with a backup: every variable it names (psg_ts_repl_handles) */
    int n_handles;
    /* steps whose pulls psg_task_server_prepare sent (0: a free slot), under ts->lock */
    int64_t prepared[PREPARED_STEPS];
} reg_graph_t;

/* What one peer holds here, against the limits: a client key under CURVE (all its
 * connections), else a connection (a ZeroMQ routing id). Under ts->lock. */
struct peer {
    psg_route_t route;            /* the connection, when no key */
    char key[PSG_CURVE_NAME_MAX]; /* the client key's name; "": a peer by connection */
    char addr[64];
    char label[160]; /* how errors name it: "127.0.0.1", "key 'alice' (127.0.0.1)" */
    int pending;     /* RunGraph or RegisterGraph queued or running */
    int recvs;       /* Recv waiting for its tensor */
    int running;     /* RunGraph on a runner thread */
    uint64_t served; /* when a runner last took a job of it (ts->served's count; 0: never) */
    size_t pending_bytes;
    int waiters;                     /* WaitInit, WaitDone */
    int graphs;                      /* registered, not deregistered */
    size_t graph_bytes, alloc_bytes; /* its graphs as built; what they may allocate */
    psg_conn_t conns[PEER_CONNS];    /* the connections its latest requests came by */
    int n_conns;
    int64_t closed_ms; /* when none of them was open any more (0: one is): its graphs go
                        * after the grace (peers_sweep in task_server.c) */
    struct peer *next;
    struct peer *hnext; /* in its bucket of ts->peer_index */
};

/* A RunGraph from its arrival to its reply. Its run holds no runner while it waits (a Recv,
 * a take, a dequeue): its wake queues it again (psg_ts_queue_locked). Or a RegisterGraph,
 * whose graph a runner parses, infers and plans (never the server thread: a peer's huge
 * graphs would hold every other peer's requests behind them), then replies. */
struct job {
    psg_task_server_t *ts;
    psg_msg_t *req;
    reg_graph_t *rg; /* holds a reference */
    peer_t *peer;
    size_t bytes;
    psg_run_ticket_t *ticket;          /* taken as the request came, when rg->order */
    bool holds_graph;                  /* without an order: it is the graph's one run now */
    psg_run_t *run;                    /* once started */
    char update[PSG_PROTO_MAX_UPDATE]; /* the request's update id ("" none) */
    struct psg_ts_undo *undo;          /* a retried step's variables that hold it already */
    bool registers;                    /* a RegisterGraph: reg its fields (rg NULL) */
    psg_req_register_t reg;            /* pointing into req; its arrays its own */
    char **recv_keys;                  /* RunGraphRecv's keys (its own block), sent back */
    int n_recv_keys;
    struct job *next;
};

/* A WaitInit or WaitDone: only what the reply needs and the names, parsed once. */
typedef struct {
    psg_route_t route;
    uint64_t id;
    char peer_addr[64];
    peer_t *peer;
    psg_req_type_t type;
    int64_t deadline;
    int64_t workers;   /* WaitDone: how many */
    char **names;      /* WaitInit: the variables, one string block */
    int n_names, next; /* names[0, next) were initialized when last looked at */
} waiter_t;

typedef struct {
    waiter_t *v;
    int n, cap;
} waiter_list_t;

/* A runner or builder with no job, on its kind's stack of idle threads: a queued job wakes
 * the one that went idle last (task_server.c). */
typedef struct idle_thread {
    pthread_cond_t wake;
    bool woken;
    struct idle_thread *next;
} idle_thread_t;

struct psg_task_server {
    const psg_cluster_t *cluster;
    const psg_curve_keys_t *keys; /* NULL: plain frames */
    bool insecure;
    char task[PSG_DEVICE_NAME_MAX];
    psg_device_name_t task_dn;
    char bind[256];
    char endpoint[256];
    char logdirs[PSG_TS_MAX_LOGDIRS][4096]; /* realpaths; none: SaveShard and Trace refused */
    int n_logdirs;
    int port;
    int num_threads, max_steps, expect_workers;
    int64_t recv_timeout_ms, idle_timeout_ms;
    int peer_timeout_ms; /* heartbeats of its socket and its pulls' (0: the default) */
    psg_task_limits_t lim;
    struct psg_membudget *budget; /* --memory-limit: graphs as built, what peers' steps
                                   * allocate, the requests that wait (core/membudget.h) */

    psg_resource_mgr_t *rm;
    psg_rendezvous_t *rv;
    psg_threadpool_t *pool;
    psg_remote_rv_t *remote;
    _Atomic int64_t bytes_served; /* tensor bytes peers pulled from this task */
    psg_server_t *server;         /* made, used and destroyed by the server thread */

    pthread_t thread;
    bool thread_started;
    pthread_t *runners; /* max_steps runners, then the builders (of RegisterGraphs) */
    int n_runners;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    idle_thread_t *idle_runners; /* waiting for a job (a queued one, or the stop) */
    int runners_used;            /* runners that ever ran a job (Inspect) */
    bool ready, stopped, stop_requested, runners_stop;
    char start_error[1024];
    char stop_reason[512];
    /* the stop is the job's end (every worker said JobDone; stop_reason says so, written
     * before this is set and never after): what fails from then on fails with
     * PSG_ERR_JOB_DONE, not as a crash (psg_ts_reply_error) */
    atomic_bool job_done;
    reg_graph_t **graphs; /* live ones only: a deregistered graph leaves at once */
    int n_graphs, cap_graphs;
    job_t *jq_head, *jq_tail; /* RunGraphs not started */
    int jq_len;
    job_t *cq_head, *cq_tail; /* started ones with nodes to run again, and graphs' next in line */
    int live_runs;            /* started and not finished */
    uint64_t served;          /* jobs the runners took: the peers take turns */
    idle_thread_t *idle_builders; /* waiting for a RegisterGraph (or the stop) */
    bool draining;                /* stopping: what is started ends, nothing starts */
    pthread_cond_t graph_idle;    /* a graph's run ended (an in-process run waits for it) */
    peer_t *peers;
    int n_peers;
    peer_t *peer_index[PEER_BUCKETS]; /* the same peers by key or routing id */
    uint32_t peer_seed;               /* of the index's hash: a peer cannot aim at a bucket */
    char *workers_done[MAX_WORKERS_DONE];
    int n_workers_done;

    psg_node_timing_fn on_node; /* under lock */
    void *on_node_ctx;
    psg_trace_t *trace;       /* a Trace request's recording; kept until the server goes */
    struct psg_ts_repl *repl; /* the forward to this ps task's backup; NULL: none */

    /* the server thread's own */
    waiter_list_t wait_init, wait_done;
    int64_t last_request_ms;
    /* released peers named in the log this minute (since), the others summed (psg_ts_peers_sweep)
     */
    int64_t released_since;
    int released_named, released_quiet_peers, released_quiet_graphs;
};

/* ---- replies (task_server.c) ---- */
/* An ERROR reply: "task T: <text>" with the code. */
void psg_ts_reply_error(psg_task_server_t *ts, const psg_msg_t *req, psg_err_code_t code,
                        const char *fmt, ...) PSG_PRINTF(4, 5);
/* Replies *rep (consumed), or an empty reply of req's op when rep is NULL. */
void psg_ts_reply_ok(psg_task_server_t *ts, const psg_msg_t *req, psg_msg_t **rep);
/* Replies the current error (psg_error_message / psg_error_code). */
void psg_ts_reply_last_error(psg_task_server_t *ts, const psg_msg_t *req);
/* Asks the server thread to stop, the reason kept; false when a stop was asked already
 * (its reason kept). */
bool psg_ts_request_stop(psg_task_server_t *ts, const char *fmt, ...) PSG_PRINTF(2, 3);

/* ---- peers (task_server.c), under ts->lock ---- */
/* The peer of req (made on first sight): its client key's under CURVE, shared by every
 * connection of that key (the cluster's own key excepted: every task of the cluster holds it,
 * each of its connections is a peer); else its connection's. NULL with a PSG_ERR_LIMIT error
 * naming the limit when the table is full or the peer's address holds its share of it. */
peer_t *psg_ts_peer_locked(psg_task_server_t *ts, const psg_msg_t *req);
/* The peer of req if it holds anything here, else NULL (never made). Under ts->lock. */
peer_t *psg_ts_peer_find_locked(psg_task_server_t *ts, const psg_msg_t *req);
/* Takes a pending slot of req's peer (a RunGraph, or a Recv) for `bytes`; -1 with a
 * PSG_ERR_LIMIT error naming the limit when the peer or the task is full. Under lock. */
int psg_ts_take_pending_locked(psg_task_server_t *ts, const psg_msg_t *req, size_t bytes,
                               bool queued, bool recv, peer_t **out);
/* Gives it back (takes the lock). */
void psg_ts_put_pending(psg_task_server_t *ts, peer_t *p, size_t bytes, bool recv);
/* Releases the graphs of peers whose connections closed longer than --graph-grace ago;
 * on the server thread, which alone frees peers. */
void psg_ts_peers_sweep(psg_task_server_t *ts);
/* Forgets the peers that hold nothing any more. Under lock, on the server thread. */
void psg_ts_peers_prune_locked(psg_task_server_t *ts);
/* The peers that hold something (Inspect's "peers"; one not pruned yet may hold nothing). */
int psg_ts_peers_holding_locked(psg_task_server_t *ts);

/* ---- registered graphs (task_graphs.c) ---- */
/* The live graph `handle` with a reference taken, or NULL. */
reg_graph_t *psg_ts_graph_get(psg_task_server_t *ts, uint64_t handle);
void psg_ts_graph_put(psg_task_server_t *ts, reg_graph_t **rg);
/* Registers with the owner's limits checked (owner NULL: in-process, no limits). */
int psg_ts_graph_register(psg_task_server_t *ts, peer_t *owner, const psg_req_register_t *r,
                          uint64_t *handle);
/* Deregisters `handle` for `peer` (NULL: in-process): PSG_ERR_NOT_FOUND when unknown,
 * PSG_ERR_DENIED when another peer registered it. */
int psg_ts_graph_deregister(psg_task_server_t *ts, const peer_t *peer, uint64_t handle);
/* Deregisters every graph of `owner` (its connections closed); how many. */
int psg_ts_graphs_release_owner(psg_task_server_t *ts, peer_t *owner);
/* A plan that cannot overlap runs once at a time: takes the graph (true), else queues j in
 * its line (false: the release hands the graph to j and queues it for the runners), or with
 * j NULL (in process) waits for it. */
bool psg_ts_graph_acquire(psg_task_server_t *ts, reg_graph_t *rg, job_t *j);
void psg_ts_graph_release(psg_task_server_t *ts, reg_graph_t *rg);
/* A step's pulls (unless psg_task_server_prepare sent them) and its run's env (its ticket
 * left to the caller). -1 with the step aborted and the error set. */
int psg_ts_graph_step_start(psg_task_server_t *ts, reg_graph_t *rg, int64_t step,
                            psg_run_env_t *env);
/* Queues j for the runners: a started or graph-holding job first (cont), under ts->lock. */
void psg_ts_queue_locked(psg_task_server_t *ts, job_t *j, bool cont);
bool psg_ts_known_send_key(psg_task_server_t *ts, const char *key);
/* Whether graph rg sends key (its Sends' keys never change). */
bool psg_ts_graph_sends(const reg_graph_t *rg, const char *key);
void psg_ts_graphs_free_all(psg_task_server_t *ts);

/* ---- the handlers of the protocol table (ps/protocol.c), on the server thread ---- */
/* task_server.c */
void psg_ts_on_register(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_deregister(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_run(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_recv(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_abort_step(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_cleanup_step(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_shutdown(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
/* task_admin.c */
void psg_ts_on_inspect(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_save_shard(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_restore_shard(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_trace(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
void psg_ts_on_job_done(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
/* WaitInit / WaitDone: answered now when ready, else kept (without the request's bytes). */
void psg_ts_on_wait(psg_task_server_t *ts, psg_msg_t **req, psg_req_t *r);
/* Answers the waiters that are ready or expired; all of them when `all` (stopping). */
void psg_ts_check_waiters(psg_task_server_t *ts, bool all);

#endif
