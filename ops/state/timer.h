/* A deadline timer: one thread that calls a function when a delay has
 * passed, for the timeouts of waits that hold no thread (an accumulator's
 * take, a token dequeue). Internal to ps/; not a scheduler or a thread pool. */
#ifndef PSGRAPH_PS_TIMER_H
#define PSGRAPH_PS_TIMER_H

#include "psgraph/resource.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct psg_timer psg_timer_t;

/* Runs on the timer's thread, without the timer's lock; keep it short. */
typedef void (*psg_timer_fn)(void *arg, uint64_t id);

/* A timer and its thread. NULL with the error set on failure. */
psg_timer_t *psg_timer_new(void);
/* Joins the thread; entries still pending are dropped without firing.
 * NULL-safe. */
void psg_timer_destroy(psg_timer_t **t);

/* The timer of resource manager rm (made on first use and registered there
 * as "_psg_timer", so it outlives every resource registered after it).
 * NULL with the error set on failure. */
psg_timer_t *psg_timer_of(psg_resource_mgr_t *rm);

/* The longest any wait may last unless the task says otherwise (10 minutes): a graph a
 * peer registers may ask for "no timeout", and a wait without a deadline once stopped a
 * task server for good. */
#define PSG_TIMER_MAX_WAIT_MS ((int64_t)600000)
/* Sets the longest wait of the waits timed by t (<= 0: PSG_TIMER_MAX_WAIT_MS). */
void psg_timer_set_max_wait(psg_timer_t *t, int64_t ms);
/* The deadline a wait asking for timeout_ms gets: timeout_ms, or the longest wait when
 * timeout_ms is <= 0 (none asked) or longer. */
int64_t psg_timer_wait_ms(psg_timer_t *t, int64_t timeout_ms);

/* Calls fn(arg, id) once delay_ms from now. Returns the entry's id (> 0),
 * or 0 with the error set on out of memory. */
uint64_t psg_timer_add(psg_timer_t *t, int64_t delay_ms, psg_timer_fn fn, void *arg);
/* Removes entry id: true when it had not fired yet (it never will), false
 * when it fired or is firing. With wait, a firing entry is waited for (so
 * call it without any lock the function takes). id 0 is ignored. */
bool psg_timer_cancel(psg_timer_t *t, uint64_t id, bool wait);

#endif
