/* Memory budgets (core/membudget.h): an atomic count of bytes held against a limit, its
 * peak, and the budget the current thread's buffers are charged to. Not the buffers
 * (buffer.c charges and gives back). */
#include "core/membudget.h"

#include "psgraph/error.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct psg_membudget {
    atomic_int refs;
    _Atomic int64_t held, peak;
    int64_t limit;
    char what[96];
};

static _Thread_local psg_membudget_t *current;

psg_membudget_t *psg_membudget_new(int64_t limit, const char *what) {
    psg_membudget_t *b = calloc(1, sizeof *b);
    if (!b) {
        psg_error_set("out of memory");
        return NULL;
    }
    atomic_init(&b->refs, 1);
    b->limit = limit > 0 ? limit : INT64_MAX;
    snprintf(b->what, sizeof b->what, "%s", what ? what : "the memory budget");
    return b;
}

psg_membudget_t *psg_membudget_ref(psg_membudget_t *b) {
    if (b) atomic_fetch_add(&b->refs, 1);
    return b;
}

void psg_membudget_unref(psg_membudget_t **bp) {
    if (!bp || !*bp) return;
    psg_membudget_t *b = *bp;
    *bp = NULL;
    if (atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

int psg_membudget_charge(psg_membudget_t *b, int64_t bytes) {
    if (bytes < 0) bytes = INT64_MAX;
    int64_t held = atomic_load(&b->held);
    do {
        if (bytes > b->limit - held)
            return psg_error_set_code(
                PSG_ERR_LIMIT, "%s: %lld bytes held, %lld more would pass its limit of %lld bytes",
                b->what, (long long)held, (long long)bytes, (long long)b->limit);
    } while (!atomic_compare_exchange_weak(&b->held, &held, held + bytes));
    int64_t now = held + bytes, peak = atomic_load(&b->peak);
    while (now > peak && !atomic_compare_exchange_weak(&b->peak, &peak, now)) {
    }
    return 0;
}

void psg_membudget_release(psg_membudget_t *b, int64_t bytes) {
    atomic_fetch_sub(&b->held, bytes);
}
int64_t psg_membudget_held(const psg_membudget_t *b) {
    return atomic_load(&((psg_membudget_t *)b)->held);
}
int64_t psg_membudget_peak(const psg_membudget_t *b) {
    return atomic_load(&((psg_membudget_t *)b)->peak);
}
int64_t psg_membudget_limit(const psg_membudget_t *b) {
    return b->limit;
}

psg_membudget_t *psg_membudget_enter(psg_membudget_t *b) {
    psg_membudget_t *before = current;
    current = b;
    return before;
}

psg_membudget_t *psg_membudget_current(void) {
    return current;
}
