/* The task server's protocol as one table (ps/protocol.c): every request with its typed
 * fields, the tensors it carries, its reply, and the server's handler. Both ends encode
 * and decode through it: the client half (ps/client.c) and the dispatch
 * (ps/task_server.c). Errors travel as a psg_err_code_t plus a message. Not the wire
 * (net/), which moves the messages; docs/distributed.md shows the table as text. */
#ifndef PSGRAPH_PS_PROTOCOL_H
#define PSGRAPH_PS_PROTOCOL_H

#include "psgraph/graph.h"
#include "psgraph/task_server.h"
#include "psgraph/wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    PSG_REQ_REGISTER_GRAPH,
    PSG_REQ_DEREGISTER_GRAPH,
    PSG_REQ_RUN_GRAPH,
    PSG_REQ_RECV,
    PSG_REQ_INSPECT,
    PSG_REQ_ABORT_STEP,
    PSG_REQ_CLEANUP_STEP,
    PSG_REQ_WAIT_INIT,
    PSG_REQ_WAIT_DONE,
    PSG_REQ_JOB_DONE,
    PSG_REQ_SAVE_SHARD,
    PSG_REQ_RESTORE_SHARD,
    PSG_REQ_TRACE,
    PSG_REQ_SHUTDOWN,
    PSG_REQ_COUNT
} psg_req_type_t;

/* Bounds a decoder checks before anything is allocated from a request's numbers. */
#define PSG_PROTO_MAX_ENDPOINTS 1000000             /* feeds, fetches, targets of RegisterGraph */
#define PSG_PROTO_MAX_NAMES_BYTES ((size_t)4 << 20) /* WaitInit's variable names */
#define PSG_PROTO_MAX_PATH 4096 /* SaveShard/RestoreShard's directory, Trace's file */
#define PSG_PROTO_MAX_SHARDS 4096

/* RegisterGraph's fields: the graph (body) and its endpoints (i64 tensors "feeds" [n, 2],
 * "fetches" [n, 2], "targets" [n]). */
typedef struct {
    const void *graph;
    size_t len;
    int n_feeds, n_fetches, n_targets;
    psg_endpoint_t *feeds, *fetches; /* owned by the request */
    int *targets;                    /* owned by the request */
} psg_req_register_t;

/* A decoded request. Pointers point into the message it was decoded from (which must
 * outlive it), except what psg_req_clear frees. */
typedef struct {
    psg_req_type_t type;
    int64_t step; /* RunGraph, Recv, AbortStep, CleanupStep, SaveShard, RestoreShard, Trace */
    union {
        psg_req_register_t reg;
        uint64_t handle; /* DeregisterGraph: key the handle in decimal */
        struct {         /* RunGraph: key the handle, the feeds as tensors */
            uint64_t handle;
            int n_feeds;
            psg_tensor_t *const *feeds;
        } run;
        const char *key;    /* Recv: a rendezvous key */
        const char *reason; /* AbortStep: key the reason ("" when none) */
        struct {            /* WaitInit: body the variable names, one a line */
            int n;
            char **names; /* owned: one block, each NUL-terminated */
        } init;
        int64_t workers;    /* WaitDone: step the count of workers done to wait for */
        const char *worker; /* JobDone: key the worker ("" : the sender) */
        struct {            /* SaveShard, RestoreShard: key "k/N", body the directory */
            int shard, num_shards;
            char dir[PSG_PROTO_MAX_PATH];
        } shard;
        struct { /* Trace: key "start PID STEP" (step then the training step), or "stop"
                  * with body the file to write */
            bool start;
            int pid;
            char path[PSG_PROTO_MAX_PATH];
        } trace;
    } u;
} psg_req_t;

/* A decoded reply; pointers into the reply message. */
typedef struct {
    psg_req_type_t type;
    union {
        uint64_t handle; /* RegisterGraph: key */
        struct {         /* RunGraph: the fetches, the message's references */
            int n;
            psg_tensor_t *const *t;
        } fetched;
        psg_tensor_t *tensor; /* Recv: the one tensor */
        struct {              /* Inspect: body JSON (not NUL-terminated) */
            const char *text;
            size_t len;
        } json;
        struct { /* SaveShard: key "FILE SIZE CRC32 TENSOR_BYTES", body the names one a line */
            const char *line;
            const char *names;
            size_t names_len;
        } saved;
        int64_t count; /* RestoreShard: tensors restored; Trace stop: events written */
    } u;
} psg_rep_t;

struct psg_task_server;
/* A request's handler, on the server thread. It may take *req (then sets it NULL: a
 * request answered later, from a runner thread or when a waiter is ready). */
typedef void (*psg_req_handler_fn)(struct psg_task_server *ts, psg_msg_t **req, psg_req_t *r);

/* One row of the table. */
typedef struct {
    psg_req_type_t type;
    const char *op;     /* the header's op */
    const char *fields; /* the request's fields and tensors, as docs/distributed.md has them */
    const char *reply;  /* the reply's */
    int (*encode)(const psg_req_t *r, psg_msg_t *m);
    int (*decode)(const psg_msg_t *m, psg_req_t *r);
    psg_req_handler_fn handler;
} psg_proto_entry_t;

/* The row of `op`, or NULL. */
const psg_proto_entry_t *psg_proto_find(const char *op);
/* The row of type t (0 <= t < PSG_REQ_COUNT). */
const psg_proto_entry_t *psg_proto_entry(psg_req_type_t t);

/* A REQUEST message of r (tensors referenced, not copied). NULL with the error set. */
psg_msg_t *psg_req_encode(const psg_req_t *r);
/* Decodes request m by its op. -1 with the error naming the op and the field, and the code
 * PSG_ERR_NOT_FOUND (an unknown op) or PSG_ERR_BAD_REQUEST; r is then cleared. */
int psg_req_decode(const psg_msg_t *m, psg_req_t *r);
/* Frees what a decode allocated. NULL-safe, idempotent. */
void psg_req_clear(psg_req_t *r);

/* A REPLY message to a request of type t. NULL with the error set. */
psg_msg_t *psg_rep_encode(psg_req_type_t t, const psg_rep_t *rep);
/* Decodes a REPLY to a request of type t; -1 with the error naming the field. */
int psg_rep_decode(const psg_msg_t *m, psg_req_type_t t, psg_rep_t *rep);

#endif
