/* Ring all-reduce's step over the live workers (sync/allreduce_ring.c), and the calls of the
 * graph that sync/strategy_allreduce.c builds for it. Not public API. */
#ifndef PSGRAPH_SYNC_ALLREDUCE_RING_H
#define PSGRAPH_SYNC_ALLREDUCE_RING_H

#include "sync/strategy.h"

/* The calls of a worker's graph (w->run's k; 0 is the step: the loss, then the flat
 * gradient, the ring's record and its ready pair as the step's fetches). */
enum {
    PSG_RING_APPLY = 1, /* feed the mean (f32 [M]): the optimizer's update of the own copy */
    PSG_RING_TAKE,      /* feed a key (i64): this worker's mailbox's chunk for it */
    PSG_RING_RECORD,    /* fetch the record (f32 [1 + W]) and the ready pair (f32 [2]) */
    PSG_RING_SHARE,     /* the chief: its variables and slots to the ps; others: from it */
    PSG_RING_READY,     /* feed (generation, step) (f32 [2], exact below 2^24): the chief's share is
                           done */
    PSG_RING_DIGEST,    /* fetch the model's sum and sum of squares (f32 [2]) */
    PSG_RING_PUT0       /* + j: feed a chunk (f32) and a key: into rank j's mailbox (j != me,
                           ranks above me one lower) */
};

/* The most workers a ring takes (a put call for each other worker). */
#define PSG_RING_MAX_WORKERS (PSG_SYNC_MAX_CALLS - PSG_RING_PUT0 + 2)

/* The ring's record on the ps (f32 [1 + W]): the generation, then 1 for each member by rank.
 * Generation 0 is every worker (the record's zeros); one below 0 is training over. */
#define PSG_RING_OVER (-1e6f)
/* The longest a mailbox take waits before it looks at the record again. */
#define PSG_RING_SLICE_MS 200

/* One step of a worker in the ring of the record's live workers; re-forms the ring when the
 * record changed (docs/sync.md "allreduce"). */
int psg_ring_step(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st);

#endif
