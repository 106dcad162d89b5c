/* Straggler injection, for research and tests: delays chosen workers each
 * step by a fixed time or a draw from a named distribution, repeatably
 * from a seed. `--straggler worker=2,delay_ms=300` or
 * `--straggler worker=all,dist=lognormal,median_ms=20,sigma=1`. The trainer
 * asks for each step's delay; this module decides nothing else. */
#ifndef PSGRAPH_STRAGGLER_H
#define PSGRAPH_STRAGGLER_H

#include <stdint.h>

typedef enum {
    PSG_STRAGGLER_FIXED = 0,   /* delay_ms every step */
    PSG_STRAGGLER_EXPONENTIAL, /* mean mean_ms */
    PSG_STRAGGLER_LOGNORMAL,   /* ln(delay in ms) ~ Normal(mu, sigma^2); median = e^mu */
} psg_straggler_dist_t;

/* One --straggler: which worker and how it is delayed. */
typedef struct {
    int worker; /* a task index, or -1 for every worker ("all") */
    psg_straggler_dist_t dist;
    double delay_ms;  /* fixed */
    double mean_ms;   /* exponential */
    double mu, sigma; /* lognormal */
    double prob;      /* the chance a step is delayed at all, in (0, 1]; default 1 */
} psg_straggler_spec_t;

/* Parses "key=value,..." with keys worker (an index or "all", required),
 * dist (fixed | exponential | lognormal; default fixed), delay_ms (fixed),
 * mean_ms (exponential), median_ms or mu, and sigma (lognormal), prob.
 * Returns 0, or -1 with the error "--straggler 'TEXT': FIELD: why" naming
 * the bad field (unknown, missing, repeated, not a number, out of range,
 * or not used by the distribution). */
int psg_straggler_parse(const char *text, psg_straggler_spec_t *out);

typedef struct psg_straggler psg_straggler_t;

/* An empty set of stragglers drawing from `seed`. NULL on out of memory. */
psg_straggler_t *psg_straggler_new(uint64_t seed);
void psg_straggler_destroy(psg_straggler_t **s);
/* Parses text (psg_straggler_parse) and adds it. Returns 0 or -1 with the error set. */
int psg_straggler_add(psg_straggler_t *s, const char *text);
int psg_straggler_count(const psg_straggler_t *s);
const psg_straggler_spec_t *psg_straggler_at(const psg_straggler_t *s, int i);

/* The delay of worker's step, in ms: the sum over the specs that name the
 * worker (or all). A pure function of (seed, spec, worker, step): the same
 * in every run and process, whatever the order of calls. 0 when none. */
double psg_straggler_delay_ms(const psg_straggler_t *s, int worker, int64_t step);
/* Sleeps that delay and returns it (ms). NULL-safe (0). */
double psg_straggler_sleep(const psg_straggler_t *s, int worker, int64_t step);

#endif
