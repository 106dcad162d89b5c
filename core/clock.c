/* psg_now_sec: CLOCK_MONOTONIC in seconds. */
#include "psgraph/clock.h"

#include <time.h>

double psg_now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
