/* Thread-local error message storage behind include/psgraph/error.h. */
#include "psgraph/error.h"

#include <stdarg.h>
#include <string.h>

#define PSG_ERROR_MAX 1024

static _Thread_local char error_message[PSG_ERROR_MAX];

int psg_error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return -1;
}

int psg_error_wrap(const char *fmt, ...) {
    char prefix[PSG_ERROR_MAX];
    char old[PSG_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_message, sizeof old);
    /* both halves are bounded: a long chain of context is cut at the end */
    size_t n = strnlen(prefix, PSG_ERROR_MAX / 2);
    memcpy(error_message, prefix, n);
    snprintf(error_message + n, sizeof error_message - n, ": %s", old);
    return -1;
}

const char *psg_error_message(void) { return error_message; }

void psg_error_clear(void) { error_message[0] = '\0'; }
