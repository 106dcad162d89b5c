/* Internal to psgraph: the benchmark side of the training loop (psgraph bench
 * inception3, psg_train_config_t.bench): each timed step's time after the untimed warm-up
 * steps, the op profile of the timed steps (one process), the step times file, and the
 * final JSON line in tf_cnn_benchmarks' terms (images/sec, median and p90 step ms).
 * Not the loop itself (worker/trainer.c). */
#ifndef PSGRAPH_WORKER_BENCH_TIMING_H
#define PSGRAPH_WORKER_BENCH_TIMING_H

#include "psgraph/graph.h"
#include "psgraph/session.h"
#include "psgraph/trainer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct psg_bench_timing psg_bench_timing_t;

/* For c's run (c->bench_warmup untimed steps, c->op_profile, c->step_times). NULL with
 * the error set (out of memory). */
psg_bench_timing_t *psg_bench_timing_new(const psg_train_config_t *c);
void psg_bench_timing_destroy(psg_bench_timing_t **b);

/* Before step `step` (0-based): the op profile starts with the first timed step on sess
 * (one process; NULL: none), each GPU node waiting for its kernels when gpu. */
int psg_bench_timing_before_step(psg_bench_timing_t *b, int64_t step, psg_session_t *sess,
                                 bool gpu);
/* After step `step` of dt seconds. */
int psg_bench_timing_after_step(psg_bench_timing_t *b, int64_t step, double dt);

/* What a bench line reports beyond the timings. */
typedef struct {
    const char *model, *data, *device, *precision, *mode;
    int towers, batch, image_size, classes, threads;
    int per_step; /* images a step as reported (the chief: N workers' batches) */
    /* a cluster chief's: the job's global steps a second, which give its images/sec when
     * none of its own steps was timed (the others ended the job first); 0: none */
    double job_steps_per_sec;
    double final_loss;
    int64_t params, macs_per_image;
    const char *cluster;  /* the cluster's fields, each followed by a comma; "" none */
    const psg_graph_t *g; /* the op profile's graph (FLOPs from its shapes) */
    int profile_batch;    /* examples a tower runs a step */
} psg_bench_line_t;

/* After the run: the step times file, the op profile's lines, "total images/sec: X" and
 * the JSON line {"bench":model,...} on out. Returns 0, or -1 with the error set. */
int psg_bench_timing_report(psg_bench_timing_t *b, const psg_bench_line_t *l, FILE *out);

#endif
