/* Minimal assertions for psgraph's tests: each failed check prints file:line
 * and is counted; test_main returns non-zero if any failed. */
#ifndef PSGRAPH_TESTUTIL_H
#define PSGRAPH_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "psgraph/psgraph.h"

extern int psg_test_failures;
extern int psg_test_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        psg_test_checks++;                                                                         \
        if (!(cond)) {                                                                             \
            psg_test_failures++;                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__,      \
                    #cond, psg_error_message());                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double _a = (a), _b = (b);                                                                 \
        psg_test_checks++;                                                                         \
        if (!(fabs(_a - _b) <= (tol))) {                                                           \
            psg_test_failures++;                                                                   \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %g, %s = %g, tol %g\n", __FILE__,      \
                    __LINE__, #a, _a, #b, _b, (double)(tol));                                      \
        }                                                                                          \
    } while (0)

/* CHECK that the last error message contains `needle`. */
#define CHECK_ERROR_HAS(needle)                                                                    \
    do {                                                                                           \
        psg_test_checks++;                                                                         \
        if (!strstr(psg_error_message(), (needle))) {                                              \
            psg_test_failures++;                                                                   \
            fprintf(stderr, "%s:%d: error message '%s' lacks '%s'\n", __FILE__, __LINE__,          \
                    psg_error_message(), (needle));                                                \
        }                                                                                          \
    } while (0)

/* Runs a named test function and reports it. */
#define RUN_TEST(fn)                                                                               \
    do {                                                                                           \
        int _before = psg_test_failures;                                                           \
        fn();                                                                                      \
        printf("%s %s\n", psg_test_failures == _before ? "ok  " : "FAIL", #fn);                    \
    } while (0)

/* Exit status for main: 0 if all checks passed. */
int psg_test_summary(void);

/* A tensor from a float array (copied). */
psg_tensor_t *psg_test_tensor(const psg_shape_t *shape, const float *values);
/* A tensor of uniform random values in [lo, hi) from a seeded generator. */
/* A TCP port on 127.0.0.1 free right now (bound to 0, then closed). */
int psg_test_free_port(void);
/* CLOCK_MONOTONIC, in seconds. */
double psg_test_now_sec(void);
/* Waits (1 s at most) until every thread of pid is stopped: SIGSTOP is delivered
 * asynchronously. */
void psg_test_wait_stopped(pid_t pid);

psg_tensor_t *psg_test_random(const psg_shape_t *shape, float lo, float hi, unsigned *seed);

#endif
