/* The wire: psgraph messages over ZeroMQ (a ROUTER server, a DEALER client per peer).
 * A message is a msgpack header plus raw tensor frames, sent and received without a copy;
 * large tensors travel as pipelined chunks. This is transport only: what a request means
 * (RegisterGraph, RunGraph, a rendezvous Send/Recv) is decided by the task server (ps/). */
#ifndef PSGRAPH_WIRE_H
#define PSGRAPH_WIRE_H

#include "psgraph/curve.h"
#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Version of the header format; a peer speaking another version gets an error reply naming
 * both. 2: small tensors and a small body may travel inside the header's frame. */
#define PSG_WIRE_VERSION 2
/* Tensors (each under this many bytes) and a body travel inside the header's frame while
 * their bytes stay within it in all: one ZeroMQ frame for a small message. */
#define PSG_WIRE_INLINE_BYTES 4096
/* Largest ZeroMQ frame a socket accepts (ZMQ_MAXMSGSIZE): a peer sending a bigger frame
 * is disconnected by ZeroMQ itself, before the frame is allocated. */
#define PSG_WIRE_MAX_FRAME ((size_t)64 << 20)
/* Limits a header must respect (checked on every received header). */
#define PSG_WIRE_MAX_OP 64        /* bytes of an op name */
#define PSG_WIRE_MAX_KEY 4096     /* bytes of a key, a tensor name */
#define PSG_WIRE_MAX_ERROR 4096   /* bytes of an error text */
#define PSG_WIRE_MAX_TENSORS 4096 /* tensors in one message */
#define PSG_WIRE_MAX_ROUTE 255    /* bytes of a ZeroMQ routing id */

typedef enum {
    PSG_MSG_INVALID = 0,
    PSG_MSG_REQUEST = 1, /* client -> server; the server answers with a REPLY or an ERROR */
    PSG_MSG_REPLY = 2,   /* server -> client, same id as the request */
    PSG_MSG_ERROR = 3,   /* server -> client, same id; `error` says why */
    PSG_MSG_KIND_COUNT
} psg_msg_kind_t;

/* Who sent a message to a server: the ZeroMQ routing id, opaque. A reply goes back by it. */
typedef struct {
    uint8_t len;
    uint8_t id[PSG_WIRE_MAX_ROUTE];
} psg_route_t;

/* One connection of a server's socket, as a request saw it: ZeroMQ's descriptor of it and
 * the socket's inode, which no other open socket shares (a descriptor number is reused at
 * once). fd -1: unknown (no descriptor, as inproc). */
typedef struct {
    int fd;
    uint64_t ino;
} psg_conn_t;

/* Whether the connection c is still open (true when unknown): its descriptor still the
 * socket, and the peer has not closed its end. Cheap: one fstat, one poll. */
bool psg_conn_open(const psg_conn_t *c);

/* n random bytes from the kernel (time and pid mixed in if it has none). */
void psg_wire_random(void *buf, size_t n);

/* One logical message. Plain data with owned members: build it with psg_msg_new and the
 * psg_msg_add_* / psg_msg_set_* helpers, free it with psg_msg_destroy. Every string is
 * owned by the message (NULL when absent); every tensor holds one reference. */
typedef struct psg_msg {
    psg_msg_kind_t kind;
    uint64_t id;          /* request id: set by the client, echoed by the reply */
    char *op;             /* what a request asks for: "RunGraph", "Recv", ... */
    char *key;            /* a rendezvous key, a resource name, a graph handle */
    int64_t step;         /* a step id; 0 when unused */
    uint64_t incarnation; /* the sender's process (psg_wire_incarnation): set on every message
                           * sent, read on every one received; 0: a peer that sends none */
    char *error;          /* the reason, in an ERROR message */
    int code;             /* in an ERROR message: a psg_err_code_t (0: unknown) */
    psg_buffer_t *body;   /* opaque bytes (a serialized graph, a status report); may be NULL */
    int ntensors;
    psg_tensor_t **tensors;            /* ntensors references */
    char **names;                      /* ntensors names, each may be NULL */
    psg_route_t route;                 /* on a server: the sender; set by psg_server_recv */
    psg_conn_t conn;                   /* on a server: the connection it came by (psg_conn_open) */
    char peer[64];                     /* on a server: the sender's address, for error messages */
    char peer_key[PSG_CURVE_NAME_MAX]; /* on a CURVE server: the name of the sender's key
                                        * (psgraph/curve.h: NAME of its NAME.key, "cluster" for the
                                        * cluster's own); "" without CURVE */
} psg_msg_t;

/* A new message of `kind` with a copy of `op` (may be NULL). NULL on out of memory. */
psg_msg_t *psg_msg_new(psg_msg_kind_t kind, const char *op);
/* Frees the message, its strings and its tensor references; sets *m to NULL. NULL-safe. */
void psg_msg_destroy(psg_msg_t **m);
/* Appends a tensor (takes a new reference; the caller keeps its own) under a name copied
 * from `name` (may be NULL). -1 with the error set on a bad dtype or too many tensors. */
int psg_msg_add_tensor(psg_msg_t *m, const char *name, psg_tensor_t *t);
/* Replaces the key with a copy of `key`. -1 on out of memory or a key too long. */
int psg_msg_set_key(psg_msg_t *m, const char *key);
/* Replaces the error text with a formatted copy (truncated to PSG_WIRE_MAX_ERROR). */
int psg_msg_set_error(psg_msg_t *m, const char *fmt, ...) PSG_PRINTF(2, 3);
/* Replaces the body with a copy of `size` bytes at `data`. -1 on out of memory. */
int psg_msg_set_body(psg_msg_t *m, const void *data, size_t size);
/* The tensor named `name`, or NULL (no error set). The message keeps its reference. */
psg_tensor_t *psg_msg_tensor(const psg_msg_t *m, const char *name);

/* Transport settings shared by servers and clients. */
typedef struct {
    size_t chunk_above;   /* a tensor larger than this travels in chunks (0: chunk_bytes) */
    size_t chunk_bytes;   /* the size of those chunks */
    size_t max_msg_bytes; /* the most tensor + body bytes one message may carry */
    int timeout_ms;       /* default wait for a reply, a send, a message's missing chunks */
    /* the cluster's keys (borrowed; must outlive the socket): CURVE on every tcp:// socket
     * (psgraph/curve.h); NULL: plain frames */
    const psg_curve_keys_t *keys;
    /* a server may listen without keys off loopback, or on an ipc:// folder open to others */
    bool insecure;
    /* heartbeats (ZeroMQ's PING/PONG, answered by its I/O thread even while the task is
     * busy): a connection silent this long is dropped, and a request sent on it fails
     * (psg_client_check). 0: PSG_WIRE_PEER_TIMEOUT_MS; < 0: no heartbeats */
    int peer_timeout_ms;
    /* a server's cap on its open connections: at the cap, a new one closes the oldest that
     * never finished its handshake, or is closed itself, logged once (psg_net_set_log).
     * 0: what the process's descriptors allow (ulimit -n, less 128 for the rest) */
    int max_connections;
} psg_wire_opts_t;

/* The default peer timeout: above the 6.2 s by which TCP's backed-off retransmissions
 * deliver again after a 3 s cut, so a short cut pauses a job instead of failing it. */
#define PSG_WIRE_PEER_TIMEOUT_MS 10000

/* This process's incarnation: a random 64-bit number (never 0) drawn at its first use and
 * carried in every message it sends, so that a peer tells a restarted task from the same
 * one (a task restarted at the same address has lost its variables and graphs). */
uint64_t psg_wire_incarnation(void);
/* The heartbeat period and timeout of a peer timeout (0: the default): ZeroMQ drops a
 * connection after `timeout_ms` without traffic, a PING sent every `ivl_ms` keeping an
 * idle one alive; the two add up to the peer timeout. 0, 0 when heartbeats are off. */
void psg_wire_heartbeat(int peer_timeout_ms, int *ivl_ms, int *timeout_ms);

/* The defaults, measured (docs/wire.md): tensors up to 24 MiB whole, larger ones in 4 MiB
 * chunks; messages up to 4 GiB; 30 s timeout. */
psg_wire_opts_t psg_wire_opts_default(void);

/* ---- server: a ROUTER bound to one endpoint ---------------------------------------- */

typedef struct psg_server psg_server_t;

/* What a server has seen, for tests and the inspect request. */
typedef struct {
    uint64_t received;     /* good messages returned by psg_server_recv */
    uint64_t rejected;     /* bad messages answered with an error */
    uint64_t dropped;      /* bad messages dropped without a reply (no way to address one) */
    uint64_t replies_lost; /* replies whose peer was gone */
    uint64_t refused;      /* peers refused by CURVE (no keys, a wrong key, not allowed) */
} psg_server_stats_t;

/* Binds a ROUTER to `endpoint` ("tcp://127.0.0.1:2222", "tcp://127.0.0.1:0" or
 * "tcp://127.0.0.1:*" for a free port, "ipc:///tmp/x"). `opts` may be NULL for the
 * defaults. With opts->keys a tcp:// server speaks CURVE and takes only clients whose key is
 * in the allow-list (a refused peer is counted in `refused` and logged: psg_net_set_log).
 * NULL with the error set (naming the endpoint) if the bind fails, or when
 * psg_curve_listen_check refuses the endpoint (no keys off loopback, an ipc:// folder open
 * to others, unless opts->insecure). The thread
 * that calls psg_server_new is the server's thread: only it may call psg_server_recv and
 * psg_server_destroy. */
psg_server_t *psg_server_new(const char *endpoint, const psg_wire_opts_t *opts);
/* Closes the socket, dropping queued replies. NULL-safe; sets *s to NULL. */
void psg_server_destroy(psg_server_t **s);
/* The endpoint actually bound, with the port resolved ("tcp://127.0.0.1:41234"). */
const char *psg_server_endpoint(const psg_server_t *s);
/* The bound TCP port; 0 for an ipc:// endpoint. */
int psg_server_port(const psg_server_t *s);
/* Waits up to timeout_ms (-1: forever, 0: poll) for the next complete request, and sends
 * the replies other threads queued meanwhile. Returns 1 and sets *out (the caller owns
 * it), or 0 when the time ran out, or -1 with the error set on a failure of the socket
 * itself. A bad message from a peer is never returned: it is answered with an ERROR reply
 * naming what was wrong (or dropped when it cannot be addressed), counted in the stats,
 * and the wait goes on. */
int psg_server_recv(psg_server_t *s, psg_msg_t **out, int timeout_ms);
/* Sends *reply to the sender of `req`, with req's id; consumes *reply (sets it to NULL).
 * kind must be PSG_MSG_REPLY or PSG_MSG_ERROR. Callable from any thread: from another
 * thread the reply is queued and sent by the server's thread in psg_server_recv. -1 with
 * the error set if the reply cannot be encoded or sent (a vanished peer is not an error
 * here: it is counted in replies_lost). */
int psg_server_reply(psg_server_t *s, const psg_msg_t *req, psg_msg_t **reply);
/* Sends an ERROR reply with a formatted text to the sender of `req`. As psg_server_reply. */
int psg_server_reply_error(psg_server_t *s, const psg_msg_t *req, const char *fmt, ...)
    PSG_PRINTF(3, 4);
/* As psg_server_reply_error, with a psg_err_code_t the client reads as psg_error_code(). */
int psg_server_reply_error_code(psg_server_t *s, const psg_msg_t *req, int code, const char *fmt,
                                ...) PSG_PRINTF(4, 5);
psg_server_stats_t psg_server_stats(const psg_server_t *s);
/* The ZeroMQ socket, for zmq_poll beside other sockets (readable: call psg_server_recv
 * with timeout 0). Owned by the server. */
void *psg_server_socket(psg_server_t *s);

/* ---- client: a DEALER connected to one server ---------------------------------------- */

typedef struct psg_client psg_client_t;

/* Connects a DEALER to `endpoint` ("tcp://host:port", or "host:port" as in a cluster
 * spec); with opts->keys a tcp:// connection is a CURVE client of the cluster (a server
 * that refuses it looks like one that is down: the call times out). The connection is made in the
 * background and re-made when the peer restarts; nothing waits here. NULL with the error set on a
 * malformed endpoint. */
psg_client_t *psg_client_new(const char *endpoint, const psg_wire_opts_t *opts);
/* Closes the socket, dropping what is queued. NULL-safe; sets *c to NULL. */
void psg_client_destroy(psg_client_t **c);
/* The peer's endpoint, as connected ("tcp://127.0.0.1:2222"). */
const char *psg_client_endpoint(const psg_client_t *c);
/* Sends a request and waits up to timeout_ms (-1: the opts' timeout) for the reply with
 * its id; consumes *req. Returns the reply (the caller owns it). Returns NULL with the
 * error set when: the peer cannot be reached (code PSG_ERR_UNREACHABLE) or does not answer
 * in time (the message names the peer's endpoint), the reply is malformed, or the peer answered
 * with an ERROR (the message is "<endpoint>: <peer's error>", psg_error_code() the peer's code).
 * After a timeout the connection is reset, so a late reply or a queued request cannot leak into the
 * next call. */
psg_msg_t *psg_client_call(psg_client_t *c, psg_msg_t **req, int timeout_ms);
/* The asynchronous half of psg_client_call: gives *req a fresh id (returned in *id when
 * id is not NULL), sends it and consumes it. -1 with the error set if the peer cannot be
 * reached within the opts' timeout (code PSG_ERR_UNREACHABLE), or (with heartbeats) once a
 * connection that went down stayed down for the peer timeout (code PSG_ERR_UNAVAILABLE: the
 * peer is lost). Nothing is sent then, and the connection is left as it is. */
int psg_client_send(psg_client_t *c, psg_msg_t **req, uint64_t *id);
/* psg_client_send of a request answered by `replies` replies, all with its id (a Recv of
 * several keys): each counts as in flight until it comes. */
int psg_client_send_many(psg_client_t *c, psg_msg_t **req, uint64_t *id, int replies);
/* Sends a request whose reply nobody waits for (a note: a step's abort or cleanup) only when
 * a connection takes it at once, never waiting: a peer that is down has nothing to be told
 * (a dead or restarted one holds nothing of the step). Consumes *req. 1: sent; 0: not sent
 * (no connection up); -1 with the error set on a send that failed. */
int psg_client_send_note(psg_client_t *c, psg_msg_t **req);
/* Waits up to timeout_ms for the client to take a request at once (a connection is up:
 * nothing is queued for a peer not connected) or for wake_fd to be readable (it is not
 * read), so a thread that sends can be stopped while its peer is missing. 1: ready; 0:
 * wake_fd readable; -1 with the error set, naming the peer, when the time ran out (code
 * PSG_ERR_UNREACHABLE), or (with heartbeats) once a connection that went down stayed down
 * for the peer timeout (PSG_ERR_UNAVAILABLE). */
int psg_client_wait_writable(psg_client_t *c, int wake_fd, int timeout_ms);
/* Waits up to timeout_ms (-1: forever, 0: poll) for the next complete reply, whatever its
 * id; an ERROR reply is returned as a message of kind PSG_MSG_ERROR. Returns 1 and sets
 * *out, 0 when the time ran out (error set, naming the peer; a poll that finds nothing sets
 * none: the pullers poll after every wake-up), -1 on a malformed reply. */
int psg_client_recv(psg_client_t *c, psg_msg_t **out, int timeout_ms);
/* Drops the connection and what is queued on it, and connects again. */
int psg_client_reset(psg_client_t *c);
/* Reads the connection's events. -1 with the error set (code PSG_ERR_UNAVAILABLE, naming the
 * peer and the peer timeout) when the connection that carried a request sent since the last
 * failed check was lost: the peer closed it, or was silent for the peer timeout; that
 * request's reply will never come. 0 otherwise. psg_client_recv and psg_client_call check. */
int psg_client_check(psg_client_t *c);
/* Whether the connection has been down for the peer timeout (the peer is lost, whether or not
 * a request is in flight on it); false without heartbeats. Reads the connection's events. */
bool psg_client_peer_lost(psg_client_t *c);
/* The incarnation of the peer's latest reply (0: none yet), and how often it changed: a
 * change means the peer's process restarted. */
uint64_t psg_client_peer_incarnation(const psg_client_t *c);
uint64_t psg_client_peer_restarts(const psg_client_t *c);
/* Waits up to timeout_ms (-1: forever) until a reply waits on one of the n clients (at most
 * PSG_CLIENT_POLL_MAX), or one of their connections has an event (call psg_client_check);
 * ready[i] says which. Returns how many, 0 when the time ran out or a signal came, -1 with
 * the error set when poll fails. Fewer system calls than zmq_poll of the same sockets. */
#define PSG_CLIENT_POLL_MAX 64
int psg_client_poll(psg_client_t *const *cs, int n, bool *ready, int timeout_ms);
/* The ZeroMQ socket, for zmq_poll beside other clients. Owned by the client. NULL for an
 * ipc:// client on psgraph's own transport: poll psg_client_fd instead. */
void *psg_client_socket(psg_client_t *c);
/* The descriptor of an ipc:// client's stream connection (readable: a reply or its end; call
 * psg_client_recv until it has nothing), -1 while it is not connected or for a ZeroMQ
 * client. It changes when the client connects again: ask before each poll. */
int psg_client_fd(const psg_client_t *c);
/* The socket of its connection events (readable: call psg_client_check), for zmq_poll
 * beside the client's socket, so that a lost connection wakes a wait. NULL without
 * heartbeats. Owned by the client. */
void *psg_client_events_socket(psg_client_t *c);

#endif
