/* Thread-local error message storage behind include/psgraph/error.h. */
#include "psgraph/error.h"

#include <stdarg.h>
#include <string.h>

#define PSG_ERROR_MAX 1024

static _Thread_local char error_message[PSG_ERROR_MAX];
static _Thread_local psg_err_code_t error_code;

int psg_error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    error_code = PSG_ERR_UNKNOWN;
    return -1;
}

int psg_error_set_code(psg_err_code_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    error_code = code >= 0 && code < PSG_ERR_CODE_COUNT ? code : PSG_ERR_UNKNOWN;
    return -1;
}

int psg_error_recode(psg_err_code_t code) {
    error_code = code >= 0 && code < PSG_ERR_CODE_COUNT ? code : PSG_ERR_UNKNOWN;
    return -1;
}

psg_err_code_t psg_error_code(void) {
    return error_code;
}

void psg_error_set_code_only(psg_err_code_t code) {
    error_code = code;
}

const char *psg_error_code_name(int code) {
    static const char *const names[PSG_ERR_CODE_COUNT] = {
        "unknown",     "bad_request", "not_found",   "limit",   "timeout",
        "aborted",     "closed",      "stopping",    "denied",  "no_memory",
        "unavailable", "config",      "unreachable", "job_done"};
    return code >= 0 && code < PSG_ERR_CODE_COUNT ? names[code] : "unknown";
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

const char *psg_error_message(void) {
    return error_message;
}

void psg_error_clear(void) {
    error_message[0] = '\0';
    error_code = PSG_ERR_UNKNOWN;
}
