/* The monotonic clock the training loops, checkpoints and the launcher time
 * themselves with. */
#ifndef PSGRAPH_CLOCK_H
#define PSGRAPH_CLOCK_H

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin: for differences only). */
double psg_now_sec(void);

#endif
