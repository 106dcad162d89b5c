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

/* What kind of failure an error is, beside its message: the code crosses the wire with the
 * message (an ERROR reply's "code"), so a caller decides on the code, never on the text. */
#include <stdbool.h>

typedef enum {
    PSG_ERR_UNKNOWN = 0,     /* unclassified (every psg_error_set) */
    PSG_ERR_BAD_REQUEST = 1, /* a malformed request or field; the message names it */
    PSG_ERR_NOT_FOUND = 2,   /* an unknown request, graph handle, rendezvous key */
    PSG_ERR_LIMIT = 3,       /* over a limit of the task or of the peer; the message names it */
    PSG_ERR_TIMEOUT = 4,     /* a wait ran past its deadline */
    PSG_ERR_ABORTED = 5,     /* the step was aborted */
    PSG_ERR_CLOSED = 6,      /* an accumulator or a token queue was closed (training ended) */
    PSG_ERR_STOPPING = 7,    /* the server is stopping */
    PSG_ERR_DENIED = 8,      /* not allowed (a path outside the task's logdir) */
    PSG_ERR_NO_MEMORY = 9,
    PSG_ERR_UNAVAILABLE = 10, /* a peer cannot be reached */
    PSG_ERR_CONFIG = 11,      /* the cluster's configuration (TF_CONFIG, --cluster FILE) is wrong or
                                 names no task for this process: commands exit 2 on it */
    PSG_ERR_UNREACHABLE = 12, /* a peer took no request within the wait (not up yet, gone, or
                                 its address wrong); unlike PSG_ERR_UNAVAILABLE, no connection to
                                 it was known lost: nothing of a request was sent */
    PSG_ERR_JOB_DONE = 13,    /* the task server stops because the job is done (every worker
                                 said JobDone): what a request waited for will never come, and
                                 nothing crashed (a worker stops; no recovery) */
    PSG_ERR_CODE_COUNT
} psg_err_code_t;

/* Replaces this thread's error message (its code becomes PSG_ERR_UNKNOWN). Always returns
 * -1, so that `return psg_error_set("...")` reads naturally. */
int psg_error_set(const char *fmt, ...) PSG_PRINTF(1, 2);
/* As psg_error_set, with a code. */
int psg_error_set_code(psg_err_code_t code, const char *fmt, ...) PSG_PRINTF(2, 3);
/* Gives this thread's error `code`, its message kept. Always returns -1. */
int psg_error_recode(psg_err_code_t code);
/* This thread's last error code (psg_error_wrap keeps it). */
psg_err_code_t psg_error_code(void);
/* Gives this thread's last error the code, its message kept. */
void psg_error_set_code_only(psg_err_code_t code);
/* The name of a code ("limit", "closed"), "unknown" for any other value. */
const char *psg_error_code_name(int code);
/* Which of two failures of one step to report: `next` replaces `kept` only when kept was
 * just the abort that another failure caused (PSG_ERR_ABORTED) and next is not, so the
 * root cause wins wherever the partitions' errors are gathered. */
static inline bool psg_error_is_cause_of(psg_err_code_t kept, psg_err_code_t next) {
    return kept == PSG_ERR_ABORTED && next != PSG_ERR_ABORTED;
}

/* Prepends context to this thread's error message: "ctx: old message"; the code stays.
 * Always returns -1. */
int psg_error_wrap(const char *fmt, ...) PSG_PRINTF(1, 2);

/* This thread's last error message; "" when none. Valid until the next
 * psg_error_* call on this thread. */
const char *psg_error_message(void);

void psg_error_clear(void);

/* A broken internal invariant: never a user error. Always compiled. */
#define PSG_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: psgraph invariant failed: %s\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
