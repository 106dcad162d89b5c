/* The backup's side of chain replication off the server thread (docs/replication.md): the
 * forwards a backup took are applied, in the order they came, by a thread of their own,
 * while the server thread answers the primary at once and goes on serving; any other
 * request waits for them first (psg_repl_queue_drain). Internal to ps/. Not what a forward
 * holds or how it is applied (ps/replicate.c, ps/repl_log.c). */
#ifndef PSGRAPH_PS_REPL_QUEUE_H
#define PSGRAPH_PS_REPL_QUEUE_H

#include "psgraph/wire.h"

typedef struct psg_repl_queue psg_repl_queue_t;

/* Applies one forward, on the queue's thread; 0, or -1 with the error set. */
typedef int (*psg_repl_apply_fn)(void *ctx, const psg_msg_t *forward);

/* A queue whose thread applies each forward with apply(ctx, forward) (which says its own
 * failure where it should be seen). NULL with the error set when the thread cannot start. */
psg_repl_queue_t *psg_repl_queue_new(psg_repl_apply_fn apply, void *ctx);
/* Applies what is queued, then stops the thread. NULL-safe; sets *q to NULL. */
void psg_repl_queue_destroy(psg_repl_queue_t **q);

/* Whether a forward may be taken: -1 with the error set when one taken before failed to
 * apply (said once: the primary then copies the whole shard, which overwrites what the
 * failed one left); else 0. Waits while `max_pending` forwards are queued (a backup slower
 * than its primary holds the primary, not its memory). */
int psg_repl_queue_ready(psg_repl_queue_t *q, int max_pending);
/* Queues *forward (taken; *forward set to NULL) to be applied after those before it. */
void psg_repl_queue_push(psg_repl_queue_t *q, psg_msg_t **forward);
/* Returns once every forward queued before the call was applied. */
void psg_repl_queue_drain(psg_repl_queue_t *q);

#endif
