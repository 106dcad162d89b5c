/* Internal to the worker's distributed session (worker/dist_session.c) and its failover
 * (worker/dist_failover.c): the session's and a callable's state. Nothing else includes it. */
#ifndef PSGRAPH_WORKER_DIST_SESSION_INTERNAL_H
#define PSGRAPH_WORKER_DIST_SESSION_INTERNAL_H

#include "ps/client.h"
#include "psgraph/device_name.h"
#include "psgraph/dist_session.h"
#include "runtime/partition.h"

typedef struct {
    char task[PSG_DEVICE_NAME_MAX]; /* canonical "/job:ps/replica:0/task:0" */
    char address[256];
    psg_ts_client_t *client; /* NULL for this process's task */
    uint64_t restarts_seen;  /* the client's restarts already reported in a step's error */
} peer_t;

typedef struct {
    int peer;         /* index into the session's peers; -1: local */
    uint64_t handle;  /* on that task */
    char **recv_keys; /* with replies_first: the keys of what it sends to this task */
    int n_recv_keys;
} part_run_t;

/* A step's RunGraph requests to the remote partitions, one entry per partition. */
typedef struct {
    uint64_t pending_id;
    bool waiting;
    bool unreachable; /* the RunGraph could not be sent (send no notes) */
    psg_msg_t *reply; /* arrived, not yet read (a reply of the other open step) */
    char *lost;       /* its connection was lost: why (then not waiting) */
    bool with_recvs;  /* sent as RunGraphRecv: the reply carries the run's recv_keys */
} part_req_t;

typedef struct {
    int64_t step;
    int64_t seq;      /* its update id's SEQ (0: none; docs/replication.md) */
    part_req_t *reqs; /* one per partition */
} step_reqs_t;

struct psg_dist_callable {
    psg_dist_session_t *s;
    int n_feeds, n_fetches, n_targets;
    psg_endpoint_t *feeds, *fetches;
    int *targets;
    psg_partition_set_t *set;
    part_run_t *runs;  /* one per partition */
    int local;         /* the partition this process runs, or -1 */
    bool want_overlap; /* psg_dist_callable_set_overlap's */
    bool want_ahead;   /* psg_dist_callable_set_ahead's */
    bool overlap;      /* psg_dist_callable_set_overlap, and no remote partition fetches */
    bool ahead;        /* overlap or want_ahead, a local partition, no remote partition's feeds */
    /* cur: the step being run; open: an overlapped step whose remote partitions may
     * still run (valid while the session's open callable is this one); next: the step
     * after cur, asked for one ahead (valid while has_next) */
    step_reqs_t cur, open, next;
    bool has_next;
    /* no remote partition receives, and their Sends are all the local partition's pulls:
     * a step not overlapped runs them first, RunGraphRecv (worker/dist_recv_reply.c) */
    bool replies_first;
    int64_t retry_seq; /* a failed step's SEQ, which the next run (its retry) carries again */
};

struct psg_dist_session {
    psg_graph_t *g;
    const psg_cluster_t *cluster;
    psg_task_server_t *server;
    int64_t timeout_ms, ps_memory_limit;
    char task[PSG_DEVICE_NAME_MAX];
    char device[PSG_DEVICE_NAME_MAX + 16];
    int placed_nodes; /* node count at the last placement */
    peer_t *peers;
    int n_peers;
    psg_dist_callable_t **callables;
    int n_callables;
    int64_t step_base, step_counter;
    psg_dist_callable_t *open;  /* the callable with an overlapped step still open, or NULL */
    psg_dist_callable_t *asked; /* the callable with a step asked for ahead, or NULL */
    /* failover (worker/dist_failover.c): ps task k's nodes run on ps task served_by[k] */
    int *served_by;
    int n_ps;
    /* with backups of the shards: every step's RunGraphs carry "WRITER SEQ", WRITER this
     * task and process, SEQ counting this session's steps ("" without) */
    char writer[PSG_DEVICE_NAME_MAX + 24];
    int64_t update_seq;
};

/* Takes the lock on the placement of s's graph, shared by every session of the process
 * (dist_place.c), and places the graph for s when it grew, placed_nodes was reset or
 * another session placed it last, then applies s's failovers: the nodes' assigned devices
 * are s's until psg_dist_placement_unlock. -1 (not locked) with the error set. */
int psg_dist_placement_lock(psg_dist_session_t *s);
void psg_dist_placement_unlock(void);
/* After s is gone: another session at its address is not taken for it. */
void psg_dist_placement_forget(const psg_dist_session_t *s);
/* psg_dist_placement_lock, then unlock. */
int psg_dist_session_place(psg_dist_session_t *s);

/* The variables of the graph held by one task other than this one, as WaitInit asks. */
typedef struct {
    char task[PSG_DEVICE_NAME_MAX];
    char *names; /* "NAME\n" each, not terminated */
    size_t len, cap;
} psg_task_vars_t;
/* The graph's variables grouped by the task s places them on; -1 with the error set. */
int psg_dist_session_variables_by_task(psg_dist_session_t *s, psg_task_vars_t **out, int *n_out);
void psg_task_vars_free(psg_task_vars_t **lists, int *n);
/* The init ops s places on task (malloc'd, *n_out of them); NULL with the error set. */
int *psg_dist_session_init_ops_on(psg_dist_session_t *s, const char *task, int *n_out);
/* Partitions c's signature on the session's placed graph and registers each piece with
 * its task (dist_session.c). -1 with the error naming the task that refused. */
int psg_dist_callable_build(psg_dist_session_t *s, psg_dist_callable_t *c);
/* replies_first and the runs' recv_keys, from c's partitions (after they are registered);
 * -1 on out of memory. */
int psg_dist_recv_replies_plan(psg_dist_callable_t *c);
void psg_dist_recv_replies_free(psg_dist_callable_t *c);
/* Puts the tensors after the fetches of partition k's RunGraphRecv reply m into the local
 * rendezvous for step; -1 with err set when the reply does not name them as asked. */
int psg_dist_recv_replies_deliver(psg_dist_callable_t *c, int k, const psg_msg_t *m, int64_t step,
                                  char *err, size_t errsize);
/* Drops c's partitions and its steps' requests, keeping its signature (dist_session.c);
 * psg_dist_session_reregister builds it again. */
void psg_dist_callable_unbuild(psg_dist_callable_t *c);
/* Moves the nodes placed on a ps task that failed over to the task serving its shard now
 * (dist_failover.c); after each placement. -1 with the error set. */
int psg_dist_session_apply_failover(psg_dist_session_t *s);

#endif
