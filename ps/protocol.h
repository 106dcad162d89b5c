/* The task server's protocol as one table (ps/protocol.c): every request with its typed
 * fields, the tensors it carries, its reply, the coders of both, and the server's
 * handler. Both ends encode and decode through it: the client half (ps/client.c) and the
 * dispatch (ps/task_server.c). A program (or a test) adds its own requests through the
 * same rows (psg_proto_register). Errors travel as a psg_err_code_t plus a message. Not
 * the wire (net/), which moves the messages; docs/distributed.md shows the table as text,
 * docs/wire.md walks through adding a request. */
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
    PSG_REQ_REPLICATE,
    PSG_REQ_RUN_GRAPH_RECV,
    PSG_REQ_COUNT
} psg_req_type_t;

/* Bounds a decoder checks before anything is allocated from a request's numbers. */
#define PSG_PROTO_MAX_ENDPOINTS 1000000             /* feeds, fetches, targets of RegisterGraph */
#define PSG_PROTO_MAX_NAMES_BYTES ((size_t)4 << 20) /* WaitInit's variable names */
#define PSG_PROTO_MAX_PATH 4096 /* SaveShard/RestoreShard's directory, Trace's file */
#define PSG_PROTO_MAX_SHARDS 4096
#define PSG_PROTO_MAX_UPDATE 192     /* RunGraph's update id, "WRITER SEQ" (docs/replication.md) */
#define PSG_PROTO_MAX_RECV_KEYS 1024 /* RunGraphRecv's keys, a Recv's */

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
 * outlive it), except what psg_req_clear frees. type: a psg_req_type_t, or the value
 * psg_proto_register gave a row added at run time. */
typedef struct {
    psg_req_type_t type;
    int64_t step; /* RunGraph, Recv, AbortStep, CleanupStep, SaveShard, RestoreShard, Trace */
    union {
        psg_req_register_t reg;
        uint64_t handle; /* DeregisterGraph: key the handle in decimal */
        struct {         /* RunGraph: key the handle, the feeds as tensors, body (optional) the
                          * update id "WRITER SEQ": a step retried after a failover carries the
                          * same, and a variable that holds it already is not updated twice */
            uint64_t handle;
            int n_feeds;
            psg_tensor_t *const *feeds;
            char update[PSG_PROTO_MAX_UPDATE]; /* "" when none */
            /* RunGraphRecv: the rendezvous keys of the tensors the partition sends to the
             * requester, which the reply carries after the fetches (the requester does not
             * pull them); the body's lines after the update id's. Owned: one block */
            int n_recv_keys;
            char **recv_keys;
        } run;
        const char *key; /* Replicate: "update" or "full"; Inspect: "brief" or NULL */
        struct {         /* Recv: key the first rendezvous key; body (optional) the step's
                          * further keys from the same task, one a line (a puller asks for
                          * a step's tensors at once): each key is answered by its own
                          * reply, which names it in its key when there are several */
            const char *first;
            int n_more;
            char **more; /* owned: one block */
        } recv;
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
        void *ext; /* a row added with psg_proto_register: its own fields, as its coders keep
                    * them (what its decode allocates, its clear frees) */
    } u;
} psg_req_t;

/* A decoded reply; pointers into the reply message. */
typedef struct {
    psg_req_type_t type;
    union {
        uint64_t handle; /* RegisterGraph: key */
        struct {         /* RunGraph: the fetches, the message's references; RunGraphRecv: then
                          * the tensors asked for, each named by its key (names: NULL for
                          * RunGraph; the message's names when decoded) */
            int n;
            psg_tensor_t *const *t;
            char *const *names;
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

/* One row of the table: a request and its reply, each with its coders. An encoder adds
 * its fields to m (the op, and for a request the step, are set already); a decoder reads
 * them from an untrusted m and returns -1 with the error naming the field (a request's
 * decoder with code PSG_ERR_BAD_REQUEST, as bad() in ps/protocol.c; the caller adds the
 * op). */
typedef struct {
    psg_req_type_t type; /* a built-in row's; psg_proto_register gives an added row its own */
    const char *op;      /* the header's op */
    const char *fields;  /* the request's fields and tensors, as docs/distributed.md has them */
    const char *reply;   /* the reply's */
    int (*encode)(const psg_req_t *r, psg_msg_t *m);
    int (*decode)(const psg_msg_t *m, psg_req_t *r);
    void (*clear)(psg_req_t *r); /* frees what decode allocated; NULL: nothing */
    int (*encode_reply)(const psg_rep_t *rep, psg_msg_t *m);
    int (*decode_reply)(const psg_msg_t *m, psg_rep_t *rep);
    psg_req_handler_fn handler;
} psg_proto_entry_t;

/* Whether r is an Inspect that asks for the brief report (key "brief": a liveness answer
 * that reads no variable: a backup does not apply its log for it). */
bool psg_proto_inspect_brief(const psg_req_t *r);

/* The row of `op`, or NULL. */
const psg_proto_entry_t *psg_proto_find(const char *op);
/* The row of type t: a psg_req_type_t, or a type psg_proto_register returned. */
const psg_proto_entry_t *psg_proto_entry(psg_req_type_t t);

/* The most rows psg_proto_register adds. */
#define PSG_PROTO_MAX_ADDED 16
/* Adds a request of the program's own (a test's) to the table, on both ends: row (copied)
 * names its op, its coders (clear optional) and its handler, which runs on the server
 * thread as a built-in one does. Call it before any server or client uses the table, in
 * every process that sends or serves the request. Returns the row's type (its
 * psg_req_t.type, PSG_REQ_COUNT and up), or -1 with the error set when the op is taken,
 * a coder or the handler is missing, or PSG_PROTO_MAX_ADDED rows were added. */
int psg_proto_register(const psg_proto_entry_t *row);

/* A REQUEST message of r (tensors referenced, not copied). NULL with the error set. */
psg_msg_t *psg_req_encode(const psg_req_t *r);
/* Decodes request m by its op. -1 with the error naming the op and the field, and the code
 * PSG_ERR_NOT_FOUND (an unknown op) or PSG_ERR_BAD_REQUEST; r is then cleared. */
int psg_req_decode(const psg_msg_t *m, psg_req_t *r);
/* Frees what a decode allocated. NULL-safe, idempotent. */
void psg_req_clear(psg_req_t *r);

/* A REPLY message to a request of type t, by its row's reply encoder. NULL with the error
 * set. */
psg_msg_t *psg_rep_encode(psg_req_type_t t, const psg_rep_t *rep);
/* Decodes a REPLY to a request of type t by its row's reply decoder; -1 with the error
 * "<op> reply: ..." naming the field. */
int psg_rep_decode(const psg_msg_t *m, psg_req_type_t t, psg_rep_t *rep);

#endif
