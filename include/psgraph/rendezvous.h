/* The rendezvous: where a Send leaves a tensor and the matching Recv takes
 * it, keyed by (step id, key string). Thread-safe; in-process it is a local
 * map, and the wire layer forwards remote Sends into a task's rendezvous.
 * Not the wire itself, and not the Send/Recv ops (ops/sendrecv.c). */
#ifndef PSGRAPH_RENDEZVOUS_H
#define PSGRAPH_RENDEZVOUS_H

#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <stdint.h>

typedef struct psg_rendezvous psg_rendezvous_t;

/* Room for any key built by psg_rendezvous_key from parsed device names. */
#define PSG_RENDEZVOUS_KEY_MAX 640

/* Called once per receive: with the tensor (a reference the callee owns)
 * and error NULL, or with t NULL, the kind of failure (PSG_ERR_ABORTED: the step was
 * aborted, the cause is elsewhere; PSG_ERR_TIMEOUT, ...) and the reason (valid during the
 * call only). May run on the receiver's thread (the tensor was there), the
 * sender's thread, or the rendezvous's timer thread: keep it short. */
typedef void (*psg_rendezvous_done_fn)(void *arg, psg_tensor_t *t, psg_err_code_t code,
                                       const char *error);

/* A rendezvous whose Recv ops wait at most default_timeout_ms (<= 0: no
 * limit). NULL on out of memory. */
psg_rendezvous_t *psg_rendezvous_new(int64_t default_timeout_ms);
/* Fails every waiter still registered ("rendezvous destroyed"), drops the
 * tensors nobody received, joins its timer thread. NULL-safe. */
void psg_rendezvous_destroy(psg_rendezvous_t **rv);
int64_t psg_rendezvous_default_timeout_ms(const psg_rendezvous_t *rv);

/* Leaves *t (taken: set NULL even on failure) under (step, key), or hands it
 * to the receiver already waiting there. Never blocks. Returns 0, or -1 with
 * the error naming the key when the rendezvous or the step was aborted or
 * the key was already sent in this step. */
int psg_rendezvous_send(psg_rendezvous_t *rv, int64_t step, const char *key, psg_tensor_t **t);

/* Asks for (step, key): done runs once, now if the tensor is there, else
 * when it is sent, the wait passes timeout_ms (<= 0: no limit), the step or
 * the rendezvous is aborted, or the step is cleaned up. Errors name the key. */
void psg_rendezvous_recv_async(psg_rendezvous_t *rv, int64_t step, const char *key,
                               int64_t timeout_ms, psg_rendezvous_done_fn done, void *arg);

/* Blocking receive: *out gets the tensor (caller owns it). Returns 0, or -1
 * with the error "rendezvous: timed out after N ms waiting for key 'K' (step
 * S)" or the abort's reason, also naming the key. */
int psg_rendezvous_recv(psg_rendezvous_t *rv, int64_t step, const char *key, int64_t timeout_ms,
                        psg_tensor_t **out);

/* Aborts every step, for good: all waiters fail with an error holding `why`
 * and their key; later sends and receives fail at once. */
void psg_rendezvous_abort(psg_rendezvous_t *rv, const char *why);
/* Aborts one step (a failed partition): its waiters fail, its tensors are
 * dropped, its later sends and receives fail, until psg_rendezvous_cleanup_step
 * (or until 256 later aborted steps wait for theirs: then as if cleaned up). */
void psg_rendezvous_abort_step(psg_rendezvous_t *rv, int64_t step, const char *why);
/* As psg_rendezvous_abort_step, its waiters failing with `code` rather than PSG_ERR_ABORTED:
 * the cause's, where it says more than an abort (PSG_ERR_JOB_DONE: a worker's pull from a ps
 * that stopped because the job is done; the worker then stops, without a recovery). */
void psg_rendezvous_abort_step_code(psg_rendezvous_t *rv, int64_t step, psg_err_code_t code,
                                    const char *why);
/* Ends a step: drops its unreceived tensors and fails its waiters ("step
 * ended"). An aborted step's later sends and receives still fail at once
 * (the last 64 aborted steps are remembered): a peer that runs the step late
 * is not left waiting. Call once every partition of the step ran, or gave up. */
void psg_rendezvous_cleanup_step(psg_rendezvous_t *rv, int64_t step);
/* Entries held (sent tensors not yet received plus waiting receivers). */
int psg_rendezvous_num_pending(psg_rendezvous_t *rv);

/* ---- keys ---- */

/* TensorFlow's key: "src_device;src_incarnation;dst_device;edge_name;0:0",
 * the incarnation as 16 hex digits, the edge name "node:index" (or
 * "^node" for a control edge). Writes into buf and returns it. */
char *psg_rendezvous_key(const char *src_device, uint64_t src_incarnation, const char *dst_device,
                         const char *edge_name, char *buf, size_t size);

/* A parsed key (for the wire: which task a tensor goes to). */
typedef struct {
    char src_device[PSG_RENDEZVOUS_KEY_MAX];
    uint64_t src_incarnation;
    char dst_device[PSG_RENDEZVOUS_KEY_MAX];
    char edge_name[PSG_RENDEZVOUS_KEY_MAX];
} psg_rendezvous_key_t;

/* Parses a key from psg_rendezvous_key. Returns 0, or -1 with the error
 * "malformed rendezvous key 'K': why". Safe on untrusted input. */
int psg_rendezvous_key_parse(const char *key, psg_rendezvous_key_t *out);

#endif
