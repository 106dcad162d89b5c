/* The resources of sync replicas, kept by a parameter server's resource
 * manager: the gradient accumulator of one variable (TensorFlow's
 * ConditionalAccumulator: gradients for an old step are dropped as stale,
 * the first num_required of a step are averaged) and the token queue that
 * releases each step to the workers. Thread-safe. Not the graph ops that
 * drive them (ops/sync.c) and not the protocol (sync_replicas.h). */
#ifndef PSGRAPH_SYNC_RESOURCES_H
#define PSGRAPH_SYNC_RESOURCES_H

#include "psgraph/error.h"
#include "psgraph/graph.h"
#include "psgraph/resource.h"
#include "psgraph/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* The end of every "closed" error (a take ended by psg_accumulator_close: training is
 * over), whose code is PSG_ERR_CLOSED: callers decide on the code, people read the text. */
#define PSG_SYNC_CLOSED_TEXT "training is over"

/* ---- the gradient accumulator ---- */

typedef struct psg_accumulator psg_accumulator_t;

/* Counts since creation, for statistics and tests. */
typedef struct {
    int64_t accepted; /* gradients averaged into a step */
    int64_t stale;    /* dropped: computed for a step older than the accumulator's */
    int64_t late;     /* dropped: the step already had its num_required gradients */
    int64_t closed;   /* dropped: the accumulator was closed */
    int64_t takes;    /* means returned */
} psg_accumulator_counts_t;

/* The accumulator `name` of rm, created when absent for f32 gradients of
 * `shape` (complete), at global step 0. num_required > 0 caps the gradients
 * a step keeps: once a step has that many, later ones for it are dropped
 * (the slowest replicas); 0: no cap until a take sets one. Fails, naming
 * it, when it exists with another shape or the name is taken by another
 * kind of resource. The manager owns it. */
psg_accumulator_t *psg_accumulator_get(psg_resource_mgr_t *rm, const char *name,
                                       const psg_shape_t *shape, int num_required);
/* The same for sparse gradients (TensorFlow's SparseConditionalAccumulator): each
 * gradient is rows of a tensor of `shape` (rank >= 1) and their ids; a step's rows are
 * summed per id (duplicate ids added) and the mean is those sums / the gradients counted,
 * as rows and ids. Fails, naming it, when `name` is a dense accumulator. */
psg_accumulator_t *psg_sparse_accumulator_get(psg_resource_mgr_t *rm, const char *name,
                                              const psg_shape_t *shape, int num_required);
bool psg_accumulator_is_sparse(const psg_accumulator_t *a);
const char *psg_accumulator_name(const psg_accumulator_t *a);
/* A handle to a (a scalar RESOURCE tensor, as a variable's), new; NULL on
 * out of memory. */
psg_tensor_t *psg_accumulator_handle(psg_accumulator_t *a);
/* The accumulator behind handle h; NULL with the error set when h is not
 * an accumulator's handle (a variable's, say). */
psg_accumulator_t *psg_accumulator_from_handle(const psg_tensor_t *h);

/* Offers a gradient (f32, the accumulator's shape) computed for local_step:
 * *accepted is true when it counts toward the current step's mean; false
 * when it is dropped: local_step is older than the accumulator's global
 * step (stale), the step is full, or the accumulator is closed. A gradient
 * that completes a pending take returns its mean from this call. Returns 0,
 * or -1 with the error naming the accumulator on a dtype or shape mismatch
 * (nothing counted). */
int psg_accumulator_apply(psg_accumulator_t *a, int64_t local_step, const psg_tensor_t *grad,
                          bool *accepted);

/* A sparse accumulator's apply: values (k, shape[1:]) f32 rows, indices (k) i32 or i64
 * their ids in [0, shape[0]); accepted or dropped as psg_accumulator_apply. -1 with the
 * error naming the accumulator on a dtype, shape or id that does not fit (nothing
 * counted), or when it is a dense one. */
int psg_accumulator_apply_sparse(psg_accumulator_t *a, int64_t local_step,
                                 const psg_tensor_t *values, const psg_tensor_t *indices,
                                 bool *accepted);

/* Receives a take's mean (a reference the callee owns; a sparse accumulator's: its rows,
 * with their ids in indices, i64, also owned; a dense one's indices is NULL) and error
 * NULL, or mean NULL, the kind of failure (PSG_ERR_CLOSED: training is over, a clean end;
 * PSG_ERR_TIMEOUT, ...) and the reason (valid during the call only). */
typedef void (*psg_accumulator_take_fn)(void *arg, psg_tensor_t *mean, psg_tensor_t *indices,
                                        psg_err_code_t code, const char *error);

/* Asks for the mean of num_required (>= 1) gradients of the current step:
 * done runs once, at once if they are in, else from the psg_accumulator_apply
 * that brings the last one, from the timer after timeout_ms (<= 0 or longer than the longest wait
 * of the task, 10 minutes unless set: that longest wait) with an error that says how many came, or
 * from psg_accumulator_close. On success the sum is reset and the global step advances by one, so
 * gradients still computed for the old step are stale. One take at a time:
 * a second one fails at once. */
void psg_accumulator_take_async(psg_accumulator_t *a, int num_required, int64_t timeout_ms,
                                psg_accumulator_take_fn done, void *arg);
/* Blocking take: *mean gets the mean (caller owns it). Returns 0 or -1 with
 * the error set. */
int psg_accumulator_take(psg_accumulator_t *a, int num_required, int64_t timeout_ms,
                         psg_tensor_t **mean);
/* The same for a sparse accumulator: *mean the mean rows, *indices (i64) their ids, in
 * order of first appearance in the step (caller owns both). */
int psg_accumulator_take_sparse(psg_accumulator_t *a, int num_required, int64_t timeout_ms,
                                psg_tensor_t **mean, psg_tensor_t **indices);

/* Sets the gradients a step needs from now on, whatever the takes ask (the chief, as
 * workers are lost or join: docs/distributed.md "Membership"): a pending take wants that
 * many and completes at once when the step holds them (its mean over those it holds); the
 * cap of later gradients is the same. -1 with the error naming it when num_required < 1. */
int psg_accumulator_set_required(psg_accumulator_t *a, int num_required);
/* Sets the global step (a chief that restarts sets it from the global step
 * variable); gradients accumulated for another step are dropped. */
void psg_accumulator_set_global_step(psg_accumulator_t *a, int64_t step);
/* Sets the global step and drops every gradient accumulated, of this step too, and fails a
 * pending take (the step of a failover starts again: docs/replication.md). */
void psg_accumulator_reset(psg_accumulator_t *a, int64_t step);
/* Fails a pending take (code PSG_ERR_ABORTED, "accumulator NAME <why>"), keeping what was
 * accumulated: a ps task lost meanwhile (docs/replication.md). No-op when none waits. */
void psg_accumulator_fail_take(psg_accumulator_t *a, const char *why);
int64_t psg_accumulator_global_step(psg_accumulator_t *a);
/* Gradients of the current step accumulated so far. */
int psg_accumulator_num_accumulated(psg_accumulator_t *a);
void psg_accumulator_counts(psg_accumulator_t *a, psg_accumulator_counts_t *out);
/* Ends it: a pending take fails with PSG_ERR_CLOSED, later gradients
 * are dropped and later takes fail the same way. Idempotent. */
void psg_accumulator_close(psg_accumulator_t *a);

/* ---- the token queue ---- */

typedef struct psg_token_queue psg_token_queue_t;

/* The token queue `name` of rm, created empty when absent. The manager owns it. */
psg_token_queue_t *psg_token_queue_get(psg_resource_mgr_t *rm, const char *name);
const char *psg_token_queue_name(const psg_token_queue_t *q);
/* Handles, as for accumulators. */
psg_tensor_t *psg_token_queue_handle(psg_token_queue_t *q);
psg_token_queue_t *psg_token_queue_from_handle(const psg_tensor_t *h);

/* Appends each of tokens[0..n) `repeat` times (the chief releases N + b
 * tokens carrying the new global step). Tokens older than the oldest new
 * one are dropped first: a step started from them could only be stale.
 * When end_step > 0 and a token is >= end_step, the queue is closed
 * instead (training is over) and nothing is appended. Waiting dequeues are
 * served. Returns 0, or -1 with the error set when the queue was closed by
 * an error. Enqueueing into a cleanly closed queue does nothing. */
int psg_token_queue_enqueue_many(psg_token_queue_t *q, const int64_t *tokens, int n, int repeat,
                                 int64_t end_step);

/* Sets how many times each later token is enqueued, whatever the enqueue asks (the chief,
 * as workers are lost or join: one token per live worker). More than the last release
 * carried (a worker joined): the difference is enqueued now as copies of that release's
 * token (the worker that joined takes one: the others are past it), waiters served. -1 with
 * the error when < 1 or out of memory. */
int psg_token_queue_set_repeat(psg_token_queue_t *q, int repeat);

/* Follows the live workers (the chief's membership; live[r] 1 for a live worker, by rank):
 * from now on each release carries one token for each live worker, which only that worker
 * takes (the repeat is not used any more). Tokens of workers not live are dropped, and so are
 * tokens any worker could take; each live worker that has not taken the last release's token
 * gets one now (it joined or answers again: the step waits for its gradient). A worker not
 * live waits until it is live again or its timeout, then fails saying so. -1 with the error
 * when n < 1 or out of memory. */
int psg_token_queue_set_live(psg_token_queue_t *q, const int32_t *live, int n);

/* Receives a dequeued token (-1: the queue is closed, training is over)
 * and error NULL, or the reason of a failure (valid during the call only). */
typedef void (*psg_token_fn)(void *arg, int64_t token, const char *error);

/* Asks for the first token greater than after_step (the worker's local
 * step: a worker never takes two tokens of one step); `worker` names the
 * worker in messages. done runs once: at once when such a token is there or
 * the queue is closed, else when one is enqueued, on close, or after
 * timeout_ms (<= 0 or longer than the longest wait of the task, 10 minutes unless set: that longest
 * wait) with an error naming the queue, the worker and the step it waits for. */
void psg_token_queue_dequeue_async(psg_token_queue_t *q, int worker, int64_t after_step,
                                   int64_t timeout_ms, psg_token_fn done, void *arg);
/* Blocking dequeue into *token. Returns 0 or -1 with the error set. */
int psg_token_queue_dequeue(psg_token_queue_t *q, int worker, int64_t after_step,
                            int64_t timeout_ms, int64_t *token);
/* Closes it: error NULL ends training cleanly (waiters and later dequeues
 * get -1); else they fail with `error`. The first close wins. */
void psg_token_queue_close(psg_token_queue_t *q, const char *error);
/* The tokens dropped and every dequeue waiting for a token above `step` failed (a failover:
 * the chief releases the tokens of `step` again, docs/replication.md); dequeues waiting for
 * a token at or below it stay, for the new ones. */
void psg_token_queue_restart(psg_token_queue_t *q, int64_t step);
/* Tokens held now. */
int psg_token_queue_size(psg_token_queue_t *q);

/* ---- the clocks of stale-synchronous SGD (ops/state/ssp_clock.c) ---- */

typedef struct psg_ssp_clock psg_ssp_clock_t;

/* The clocks `name` of rm for `workers` workers, created at zero when absent (an
 * existing one of another size is an error). The manager owns it. */
psg_ssp_clock_t *psg_ssp_clock_get(psg_resource_mgr_t *rm, const char *name, int workers);
psg_tensor_t *psg_ssp_clock_handle(psg_ssp_clock_t *k);
psg_ssp_clock_t *psg_ssp_clock_from_handle(const psg_tensor_t *h);
/* Adds delta to clock `half` (0: steps read, 1: steps applied) of `worker` and answers
 * the waits it satisfies. 0, or -1 with the error naming the clock. */
int psg_ssp_clock_tick(psg_ssp_clock_t *k, int worker, int half, int64_t delta);
/* The workers the chief's membership counts live (live[i] != 0, n: the clock's workers):
 * a lost one is never the slowest (the waits it held up are answered); one live again
 * starts at the slowest of the others when behind. -1 with the error when n does not fit. */
int psg_ssp_clock_set_live(psg_ssp_clock_t *k, const int32_t *live, int n);
/* Every clock back to 0 (a job's start); waits stay. */
void psg_ssp_clock_reset(psg_ssp_clock_t *k);
/* The least of clock `half` over the workers. */
int64_t psg_ssp_clock_least(psg_ssp_clock_t *k, int half);
/* Receives the least clock (>= the step waited for) and error NULL, or the reason of a
 * failure (valid during the call only). */
typedef void (*psg_ssp_clock_fn)(void *arg, int64_t least, const char *error);
/* Waits, holding no thread, until every worker's clock `half` is at least want: done
 * runs once, at once when it is, else on the tick that makes it so, on close, or after
 * timeout_ms (<= 0 or longer than the task's longest wait: that longest wait) with an
 * error naming the clock, `worker` and the step. */
void psg_ssp_clock_wait_async(psg_ssp_clock_t *k, int worker, int half, int64_t want,
                              int64_t timeout_ms, psg_ssp_clock_fn done, void *arg);
/* Fails the waits and every later one with error (the task server stopping). */
void psg_ssp_clock_close(psg_ssp_clock_t *k, const char *error);

/* ---- the mailboxes of ring all-reduce (ops/state/mailbox.c) ---- */

typedef struct psg_mailbox psg_mailbox_t;

/* The mailbox `name` of rm, created empty when absent. The manager owns it. */
psg_mailbox_t *psg_mailbox_get(psg_resource_mgr_t *rm, const char *name);
const char *psg_mailbox_name(const psg_mailbox_t *m);
psg_tensor_t *psg_mailbox_handle(psg_mailbox_t *m);
psg_mailbox_t *psg_mailbox_from_handle(const psg_tensor_t *h);
/* Leaves value (a new reference is kept) for step: it answers the take waiting for that
 * step, or is kept until one asks. Dropped when the mailbox is closed or step was taken
 * already. 0, or -1 with the error naming the mailbox on out of memory or a second put for
 * one step. */
int psg_mailbox_put(psg_mailbox_t *m, int64_t step, psg_tensor_t *value);
/* Receives a take's tensor (borrowed: ref it to keep it) and error NULL, or value NULL and
 * the reason (valid during the call only). */
typedef void (*psg_mailbox_fn)(void *arg, psg_tensor_t *value, const char *error);
/* Asks for step's tensor (steps are taken in increasing order; letters of older steps are
 * dropped): done runs once, at once when it is there, else from the put that brings it,
 * from psg_mailbox_close, or after timeout_ms (<= 0 or longer than the task's longest
 * wait: that longest wait) with an error naming the mailbox, `from` (the sender, for
 * people) and the step. One take at a time: a second one fails at once. */
void psg_mailbox_take_async(psg_mailbox_t *m, int64_t step, const char *from, int64_t timeout_ms,
                            psg_mailbox_fn done, void *arg);
/* Fails the pending take and every later one with error; drops what it holds. */
void psg_mailbox_close(psg_mailbox_t *m, const char *error);
/* Tensors held, not yet taken. */
int psg_mailbox_size(psg_mailbox_t *m);

/* ---- the graph ops (ops/sync.c) ----
 * Each builder returns the node's output endpoint (or its id for ops with no
 * outputs), or PSG_NO_ENDPOINT / -1 with the graph's error set. Resources
 * are named by the handle node's full name and shared by every graph run in
 * the same resource manager; every op that takes a handle runs beside it
 * (placement keeps users of a RESOURCE with its producer). */

/* AccumulatorHandle: the accumulator `name` for f32 gradients of `shape`,
 * capped at num_required per step (0: none until a take). */
psg_endpoint_t psg_accumulator_op(psg_graph_t *g, const char *name, const psg_shape_t *shape,
                                  int num_required);
/* AccumulatorApplyGradient(handle, local_step i64 scalar, grad f32): an i32
 * scalar, 1 when the gradient counts toward the step's mean, 0 when dropped. */
psg_endpoint_t psg_accumulator_apply_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                        psg_endpoint_t local_step, psg_endpoint_t grad);
/* The sparse ones: SparseAccumulatorHandle (shape: the variable's),
 * SparseAccumulatorApplyGradient(handle, local_step, values, indices) -> accepted i32,
 * SparseAccumulatorTakeGradient(handle) -> mean rows (output 0) and their i64 ids
 * (output 1, *indices). */
psg_endpoint_t psg_sparse_accumulator_op(psg_graph_t *g, const char *name, const psg_shape_t *shape,
                                         int num_required);
psg_endpoint_t psg_sparse_accumulator_apply_op(psg_graph_t *g, const char *name,
                                               psg_endpoint_t handle, psg_endpoint_t local_step,
                                               psg_endpoint_t values, psg_endpoint_t indices);
psg_endpoint_t psg_sparse_accumulator_take_op(psg_graph_t *g, const char *name,
                                              psg_endpoint_t handle, int num_required,
                                              int64_t timeout_ms, psg_endpoint_t *indices);
/* AccumulatorTakeGradient(handle): the mean of num_required gradients, waiting
 * without a thread; fails after timeout_ms (<= 0: the longest wait, 10 minutes unless set) or when
 * closed. */
psg_endpoint_t psg_accumulator_take_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                       int num_required, int64_t timeout_ms);
/* AccumulatorSetGlobalStep(handle, step i64 scalar). */
int psg_accumulator_set_global_step_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                       psg_endpoint_t step);
/* AccumulatorSetGlobalStep with attr reset 1: psg_accumulator_reset. */
int psg_accumulator_reset_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                             psg_endpoint_t step);
/* AccumulatorNumAccumulated(handle): an i32 scalar. */
psg_endpoint_t psg_accumulator_num_accumulated_op(psg_graph_t *g, const char *name,
                                                  psg_endpoint_t handle);
/* AccumulatorClose(handle). */
int psg_accumulator_close_op(psg_graph_t *g, const char *name, psg_endpoint_t handle);

/* TokenQueueHandle: the token queue `name`. */
psg_endpoint_t psg_token_queue_op(psg_graph_t *g, const char *name);
/* TokenQueueEnqueueMany(handle, tokens i64, any shape): each token `repeat`
 * times; closes the queue instead when a token reaches end_step (> 0). With attr restart 1,
 * psg_token_queue_restart at the least token first. */
int psg_token_queue_enqueue_many_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                    psg_endpoint_t tokens, int repeat, int64_t end_step);
/* AccumulatorSetRequired(handle, n i64 scalar): psg_accumulator_set_required.
 * TokenQueueSetRepeat(handle, n i64 scalar): psg_token_queue_set_repeat. No outputs. */
int psg_accumulator_set_required_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                    psg_endpoint_t n);
int psg_token_queue_set_repeat_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                  psg_endpoint_t n);
/* TokenQueueSetLive(handle, live i32 [workers]): psg_token_queue_set_live. No outputs. */
int psg_token_queue_set_live_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                psg_endpoint_t live);
/* TokenQueueDequeue(handle, after_step i64 scalar): output 0 the token (i64
 * scalar, -1 when training is over), output 1 the seconds it waited (f32
 * scalar). `worker` names the caller in errors; fails after timeout_ms. */
psg_endpoint_t psg_token_queue_dequeue_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                          psg_endpoint_t after_step, int worker,
                                          int64_t timeout_ms);
/* TokenQueueClose(handle): error "" ends training cleanly, else fails the
 * waiters with it. */
int psg_token_queue_close_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                             const char *error);
/* SspClockHandle: the clocks `name` of `workers` workers. */
psg_endpoint_t psg_ssp_clock_op(psg_graph_t *g, const char *name, int workers);
/* SspClockTick(handle), after the nodes after[n_after]: adds delta to clock `half` of
 * `worker`; no outputs. */
int psg_ssp_clock_tick_op(psg_graph_t *g, const char *name, psg_endpoint_t handle, int worker,
                          int half, int64_t delta, int n_after, const int *after);
/* SspClockSetLive(handle, live i32 [workers]): psg_ssp_clock_set_live. */
int psg_ssp_clock_set_live_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                              psg_endpoint_t live);
/* SspClockReset(handle): every clock to 0. */
int psg_ssp_clock_reset_op(psg_graph_t *g, const char *name, psg_endpoint_t handle);
/* SspClockWait(handle, want i64 scalar): waits, holding no thread, until every worker's
 * clock `half` is at least want; output 0 the least clock (i64 scalar), output 1 the
 * seconds it waited (f32 scalar). Fails after timeout_ms naming `worker`. */
psg_endpoint_t psg_ssp_clock_wait_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                     psg_endpoint_t want, int worker, int half, int64_t timeout_ms);
/* MailboxHandle: the mailbox `name`. */
psg_endpoint_t psg_mailbox_op(psg_graph_t *g, const char *name);
/* MailboxPut(handle, step i64 scalar, value f32): leaves value for step; no outputs. */
int psg_mailbox_put_op(psg_graph_t *g, const char *name, psg_endpoint_t handle, psg_endpoint_t step,
                       psg_endpoint_t value);
/* MailboxTake(handle, step i64 scalar): the f32 tensor of `shape` (-1 on an axis: any size) put for
 * step, waiting without a thread; fails after timeout_ms naming `from` (the sender's task). */
psg_endpoint_t psg_mailbox_take_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                   psg_endpoint_t step, const psg_shape_t *shape, const char *from,
                                   int64_t timeout_ms);
/* CountAccepted(flags...): how many of n i32 scalars are nonzero (i32 scalar). */
psg_endpoint_t psg_count_accepted(psg_graph_t *g, const char *name, int n,
                                  const psg_endpoint_t *flags);

#endif
