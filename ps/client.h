/* The client half of the task server's protocol: a connection to one task that sends
 * requests encoded through the protocol table (ps/protocol.h) and hands back their
 * replies, and a poll over several such connections. What the worker's session
 * (worker/dist_session.c) talks through: ZeroMQ and the codec stay behind it. Not the
 * server (ps/task_server.c). */
#ifndef PSGRAPH_PS_CLIENT_H
#define PSGRAPH_PS_CLIENT_H

#include "ps/protocol.h"
#include "psgraph/curve.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct psg_ts_client psg_ts_client_t;

/* Connects (in the background) to the task `task` at `address` ("host:port", tcp://,
 * ipc://), a CURVE client with `keys` (borrowed; NULL: plain frames). NULL with the error
 * set on a malformed address. */
psg_ts_client_t *psg_ts_client_new(const char *task, const char *address, int64_t timeout_ms,
                                   int peer_timeout_ms, const psg_curve_keys_t *keys);
/* Closes the connection, dropping what is queued. NULL-safe; sets *c to NULL. */
void psg_ts_client_destroy(psg_ts_client_t **c);

/* Sends r and waits up to timeout_ms for its reply; decodes it into *rep (pointers into
 * the returned message, which the caller destroys). NULL with the error "task T: ..." and
 * the peer's code (psg_error_code) when the peer failed or did not answer. */
psg_msg_t *psg_ts_call(psg_ts_client_t *c, const psg_req_t *r, psg_rep_t *rep, int64_t timeout_ms);
/* As psg_ts_call, with a request message built by the caller (consumed). */
psg_msg_t *psg_ts_call_msg(psg_ts_client_t *c, psg_msg_t **m, int64_t timeout_ms);
/* Sends r without waiting; *id (may be NULL) receives the request's id. -1 with the error
 * set when the peer cannot be reached. */
int psg_ts_send(psg_ts_client_t *c, const psg_req_t *r, uint64_t *id);
/* Sends r, a note whose reply nobody waits for, only when the connection takes it at once
 * (psg_client_send_note): 1 sent, 0 not (the task is not connected), -1 on an error. */
int psg_ts_send_note(psg_ts_client_t *c, const psg_req_t *r);
/* The next reply that arrived, without waiting: 1 and *out (an ERROR reply is a message
 * of kind PSG_MSG_ERROR), 0 when none, -1 on a malformed reply. */
int psg_ts_client_recv(psg_ts_client_t *c, psg_msg_t **out);
/* Waits up to wait_ms for a reply or a lost connection on any of the n clients; ready[i]
 * tells which (then read with psg_ts_client_recv and psg_ts_client_check). Returns how many
 * are ready, 0 on timeout or a signal. */
int psg_ts_client_poll(psg_ts_client_t *const *cs, int n, bool *ready, int64_t wait_ms);
/* Drops the connection and what is queued on it, and connects again (after a timeout, so
 * that a late reply cannot be taken for the next one's). */
void psg_ts_client_reset(psg_ts_client_t *c);
/* -1 with the error "task T: ..." (code PSG_ERR_UNAVAILABLE) when the connection that
 * carried requests in flight was lost (psg_client_check): their replies will never come. */
int psg_ts_client_check(psg_ts_client_t *c);
/* Whether the task's connection has been down for the peer timeout (psg_client_peer_lost). */
bool psg_ts_client_lost(psg_ts_client_t *c);
/* The task's incarnation as its latest reply gave it (0: none yet), and how often it
 * changed since this client was made: each change is a restart of the task. */
uint64_t psg_ts_client_incarnation(const psg_ts_client_t *c);
uint64_t psg_ts_client_restarts(const psg_ts_client_t *c);
/* Monotonic milliseconds (the deadlines of the calls above). */
int64_t psg_ts_now_ms(void);

#endif
