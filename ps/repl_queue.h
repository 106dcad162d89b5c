/* The backup's side of chain replication off the server thread (docs/replication.md): the
 * forwards a backup took are held, in the order they came, as its log: "acknowledged = on
 * the backup" needs them held, not applied. A snapshot (the primary's whole shard by value)
 * drops the ones held before it unapplied; a thread of the queue's own applies what is held,
 * in order, only when something will read the copies (psg_repl_queue_drain: an Inspect, a
 * checkpoint, a failover to this task) or when more is held than the bounds allow. Internal
 * to ps/. Not what a forward holds or how it is applied (ps/replicate.c, ps/repl_log.c). */
#ifndef PSGRAPH_PS_REPL_QUEUE_H
#define PSGRAPH_PS_REPL_QUEUE_H

#include "psgraph/wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct psg_repl_queue psg_repl_queue_t;

/* Applies one forward, on the queue's thread; 0, or -1 with the error set. */
typedef int (*psg_repl_apply_fn)(void *ctx, const psg_msg_t *forward);

/* A queue whose thread applies each forward with apply(ctx, forward) (which says its own
 * failure where it should be seen). Beyond max_held forwards or max_bytes of their tensors
 * held, the oldest are applied (a primary that sends no snapshot holds the backup's memory
 * no further). NULL with the error set when the thread cannot start. */
psg_repl_queue_t *psg_repl_queue_new(psg_repl_apply_fn apply, void *ctx, int max_held,
                                     size_t max_bytes);
/* Stops the thread; what is held is dropped unapplied (the task stops: nothing reads its
 * copies again). NULL-safe; sets *q to NULL. */
void psg_repl_queue_destroy(psg_repl_queue_t **q);

/* Whether a forward may be taken: -1 with the error set when one taken before failed to
 * apply (said once: the primary then copies the whole shard, which overwrites what the
 * failed one left); else 0. */
int psg_repl_queue_ready(psg_repl_queue_t *q);
/* Holds *forward (taken; *forward set to NULL), after those before it; updates: the updates
 * it carries (counted when dropped). A snapshot drops the forwards held before it (not the
 * one being applied): it holds every value they would have written. */
void psg_repl_queue_push(psg_repl_queue_t *q, psg_msg_t **forward, bool snapshot, int updates);
/* Returns once every forward pushed before the call was applied or dropped under a snapshot
 * applied since; how many were held at the call (0: the copies were current). */
int psg_repl_queue_drain(psg_repl_queue_t *q);
/* The forwards held now, and the updates dropped unapplied under snapshots so far. */
void psg_repl_queue_stats(psg_repl_queue_t *q, uint64_t *held, uint64_t *dropped_updates);

#endif
