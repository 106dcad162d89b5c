/* A fixed pool of threads shared by inter-op scheduling (the executor) and
 * intra-op parallelism (psg_parallel_for inside kernels), so that one option
 * bounds all of psgraph's threads. Not a general task system. */
#ifndef PSGRAPH_THREADPOOL_H
#define PSGRAPH_THREADPOOL_H

#include <stdint.h>

typedef struct psg_threadpool psg_threadpool_t;

/* A pool that runs work on `num_threads` threads in all, the caller's thread
 * counted: num_threads - 1 are started. NULL on failure. */
psg_threadpool_t *psg_threadpool_new(int num_threads);
void psg_threadpool_destroy(psg_threadpool_t **p);
/* The total thread count it was made with (>= 1). NULL pool counts as 1. */
int psg_threadpool_size(const psg_threadpool_t *p);

/* How long (microseconds) an idle pool thread polls for a new task before it sleeps;
 * 0 (the default): it sleeps at once, and threads polling now stop within a microsecond. Polling
 * saves a wake-up (futex, scheduler, an idle CPU's exit) per task where tasks follow each other
 * closely (a served model's kernels a batch); it burns that CPU when none comes. */
void psg_threadpool_set_spin(psg_threadpool_t *p, int us);

/* Queues fn(arg) on a pool thread (or runs it inline on a 1-thread pool). */
void psg_threadpool_submit(psg_threadpool_t *p, void (*fn)(void *), void *arg);

/* Runs fn(ctx, begin, end) over [0, n) split in chunks of at least `grain`
 * items, on the calling thread and whatever pool threads are idle; returns
 * when all chunks are done. Safe to call from a pool thread (the caller works
 * through the chunks itself, so it never waits on a busy pool). NULL pool:
 * runs inline. */
typedef void (*psg_range_fn)(void *ctx, int64_t begin, int64_t end);
void psg_parallel_for(psg_threadpool_t *p, int64_t n, int64_t grain, psg_range_fn fn, void *ctx);

#endif
