/* A memory budget: the bytes a task holds, charged as they are taken and given back as
 * they go, against one limit (a task server's --memory-limit). Buffers made on a thread
 * that entered a budget are charged to it for their life (core/buffer.c), so what a
 * peer's steps allocate, however it is shaped, cannot pass the limit. Not an allocator. */
#ifndef PSGRAPH_CORE_MEMBUDGET_H
#define PSGRAPH_CORE_MEMBUDGET_H

#include <stdint.h>

typedef struct psg_membudget psg_membudget_t;

/* A budget of `limit` bytes (> 0), named in its errors as `what` ("the task's memory
 * (--memory-limit)"); refcount 1. NULL on out of memory. */
psg_membudget_t *psg_membudget_new(int64_t limit, const char *what);
psg_membudget_t *psg_membudget_ref(psg_membudget_t *b);
/* Drops a reference (the budget goes with the last: every buffer charged holds one);
 * NULL-safe; sets *b to NULL. */
void psg_membudget_unref(psg_membudget_t **b);
/* Takes `bytes` from b; -1 with a PSG_ERR_LIMIT error naming the budget, the bytes held
 * and the limit when they do not fit (nothing taken). */
int psg_membudget_charge(psg_membudget_t *b, int64_t bytes);
void psg_membudget_release(psg_membudget_t *b, int64_t bytes);
int64_t psg_membudget_held(const psg_membudget_t *b);
int64_t psg_membudget_peak(const psg_membudget_t *b); /* the most held at once */
int64_t psg_membudget_limit(const psg_membudget_t *b);
/* Makes b (NULL: none) the budget of the buffers this thread makes from now on; returns
 * the one before, to enter again after. */
psg_membudget_t *psg_membudget_enter(psg_membudget_t *b);
psg_membudget_t *psg_membudget_current(void);

#endif
