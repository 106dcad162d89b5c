/* Internal to the simulator (examples/simulate*.c): what the serial and the overlap model
 * share. Not public: include/psgraph/simulate.h is. */
#ifndef PSGRAPH_EXAMPLES_SIMULATE_INTERNAL_H
#define PSGRAPH_EXAMPLES_SIMULATE_INTERNAL_H

#include "psgraph/simulate.h"

#include <stdint.h>

/* One compute time in ms from c's tail (mean about c->step_ms). Always draws the same count
 * of numbers per call, so a worker's stream stays aligned across runs. */
double psg_sim_draw(const psg_sim_config_t *c, uint64_t *s);

/* 0, or -1 with the error naming what is out of range in c, workers or backups. */
int psg_sim_check(const psg_sim_config_t *c, int workers, int backups);

/* r's step (the model's own, in r->step_ms) as the largest of it and the CPU bounds
 * (psg_sim_cpu_step_ms, psg_sim_path_step_ms) for r->workers_per_step workers on r->ps ps
 * tasks; r->link_step_ms keeps the model's. *one (one worker's step on one_ps) likewise.
 * Then the rates and the speedup over one worker. */
void psg_sim_finish(const psg_sim_config_t *c, psg_sim_result_t *r, double apply_ms,
                    int trace_workers, double one, int one_ps);

#endif
