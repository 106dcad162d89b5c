/* Errors: a thread-local message set by the function that failed.
 * Not a logging facility: library code never prints, it returns -1 or NULL and
 * leaves the reason here for the caller to read or wrap. */
#ifndef PSGRAPH_ERROR_H
#define PSGRAPH_ERROR_H

#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define PSG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PSG_PRINTF(a, b)
#endif

/* Replaces this thread's error message. Always returns -1, so that
 * `return psg_error_set("...")` reads naturally. */
int psg_error_set(const char *fmt, ...) PSG_PRINTF(1, 2);

/* Prepends context to this thread's error message: "ctx: old message".
 * Always returns -1. */
int psg_error_wrap(const char *fmt, ...) PSG_PRINTF(1, 2);

/* This thread's last error message; "" when none. Valid until the next
 * psg_error_* call on this thread. */
const char *psg_error_message(void);

void psg_error_clear(void);

/* A broken internal invariant: never a user error. Always compiled. */
#define PSG_ASSERT(cond)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: psgraph invariant failed: %s\n", __FILE__,    \
                    __LINE__, #cond);                                             \
            abort();                                                              \
        }                                                                         \
    } while (0)

#endif
