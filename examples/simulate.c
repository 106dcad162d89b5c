/* The sync-replicas cluster model behind `psgraph simulate`: per-worker
 * step times from a tail model or measured samples, the N-th order statistic
 * of N + b workers, transfers over shared parameter-server links. Not a
 * network simulator: no queues, no packet-level effects. */
#include "core/rng.h"
#include "examples/simulate_internal.h"
#include "psgraph/simulate.h"

#include "psgraph/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

psg_sim_config_t psg_sim_defaults(void) {
    return (psg_sim_config_t){
        .step_ms = 1300,
        .tail = PSG_SIM_TAIL_PARETO,
        .cv = 0.03,
        .sigma = 0.1,
        .straggle_p = 0.02,
        .alpha = 1.5,
        .bytes_per_step = 4.0 * 23817352,
        .link_gbps = 10,
        .latency_ms = 0.07,
        .ps = 0,
        .overhead_ms = 2,
        .batch = 32,
        .steps = 2000,
        .seed = 1,
        .line_gbps = 10,
        .chunk_bytes = 65536,
    };
}

static const char *const tail_names[] = {"none", "normal", "lognormal", "pareto", "samples"};

int psg_sim_tail_from_name(const char *name) {
    for (int i = 0; i < (int)(sizeof tail_names / sizeof tail_names[0]); i++)
        if (!strcmp(name, tail_names[i])) return i;
    return -1;
}

const char *psg_sim_tail_name(psg_sim_tail_t t) {
    return (unsigned)t < sizeof tail_names / sizeof tail_names[0] ? tail_names[t] : "?";
}

double psg_sim_draw(const psg_sim_config_t *c, uint64_t *s) {
    double z = psg_normal01(s), u = psg_uniform01(s), v = psg_uniform01(s);
    switch (c->tail) {
    case PSG_SIM_TAIL_NONE: return c->step_ms;
    case PSG_SIM_TAIL_NORMAL: return fmax(0.1 * c->step_ms, c->step_ms * (1 + c->cv * z));
    case PSG_SIM_TAIL_LOGNORMAL: return c->step_ms * exp(c->sigma * z - 0.5 * c->sigma * c->sigma);
    case PSG_SIM_TAIL_PARETO: {
        double t = fmax(0.1 * c->step_ms, c->step_ms * (1 + c->cv * z));
        if (u < c->straggle_p) t += c->step_ms * fmin(50.0, 0.5 * pow(v, -1.0 / c->alpha));
        return t;
    }
    case PSG_SIM_TAIL_SAMPLES: {
        int i = (int)(u * c->n_samples);
        return c->samples[i < c->n_samples ? i : c->n_samples - 1];
    }
    }
    return c->step_ms;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int psg_sim_check(const psg_sim_config_t *c, int workers, int backups) {
    if (workers < 1 || backups < 0 || workers + backups > 100000)
        return psg_error_set("simulate: %d workers + %d backups (need >= 1 worker, >= 0 backups)",
                             workers, backups);
    if (c->tail == PSG_SIM_TAIL_SAMPLES) {
        if (!c->samples || c->n_samples < 1) return psg_error_set("simulate: no step-time samples");
        for (int i = 0; i < c->n_samples; i++)
            if (!(c->samples[i] > 0) || !isfinite(c->samples[i]))
                return psg_error_set("simulate: step-time sample %d is %g ms (must be > 0)", i,
                                     c->samples[i]);
    } else if (!(c->step_ms > 0) || !isfinite(c->step_ms)) {
        return psg_error_set("simulate: step time %g ms must be > 0", c->step_ms);
    }
    if ((unsigned)c->tail > PSG_SIM_TAIL_SAMPLES)
        return psg_error_set("simulate: unknown tail model");
    if (c->cv < 0 || c->sigma < 0 || c->straggle_p < 0 || c->straggle_p > 1 || !(c->alpha > 0))
        return psg_error_set(
            "simulate: tail parameters out of range (cv, sigma >= 0; p in [0, 1]; alpha > 0)");
    if (!(c->link_gbps > 0) || c->slow_link_gbps < 0 || c->ps_link_gbps < 0 ||
        c->bytes_per_step < 0 || c->latency_ms < 0 || c->overhead_ms < 0 || c->ps < 0 ||
        c->batch < 1 || c->steps < 1)
        return psg_error_set(
            "simulate: link, bytes, latency, overhead, ps, batch or steps out of range");
    if (!(c->cores >= 0) || !(c->worker_cpu_ms >= 0) || !(c->ps_cpu_ms >= 0) ||
        !isfinite(c->cores) || !isfinite(c->worker_cpu_ms) || !isfinite(c->ps_cpu_ms))
        return psg_error_set("simulate: cores %g, worker CPU %g ms, ps CPU %g ms a step (must be "
                             ">= 0)",
                             c->cores, c->worker_cpu_ms, c->ps_cpu_ms);
    if (c->burst_ms < 0 || c->burst_min_bytes < 0 || !(c->line_gbps > 0) ||
        !(c->chunk_bytes >= 1) || !(c->window_bytes >= 0) || !isfinite(c->window_bytes))
        return psg_error_set("simulate: burst, line, chunk or window out of range (burst >= 0, "
                             "line > 0, chunk >= 1 byte, window >= 0)");
    return 0;
}

/* One direction of worker k's transfer in ms: latency + its own link or its share of the
 * ps links, whichever is slower (a worker pulls from and pushes to every ps in parallel). */
static double one_way_ms(const psg_sim_config_t *c, int k, int m, int ps) {
    double link = k == m - 1 && c->slow_link_gbps > 0 ? c->slow_link_gbps : c->link_gbps;
    double ps_link = c->ps_link_gbps > 0 ? c->ps_link_gbps : c->link_gbps;
    double own = c->bytes_per_step / (link * 1e9 / 8.0 / 1000.0);
    double shared = (double)m * c->bytes_per_step / ((double)ps * ps_link * 1e9 / 8.0 / 1000.0);
    return c->latency_ms + fmax(own, shared);
}

/* Mean step and compute over c->steps; writes the means. A worker's time in a step is its
 * compute plus its pull and push; the step ends with the n-th fastest of n + b. */
static void simulate(const psg_sim_config_t *c, int n, int b, int ps, double *step_ms,
                     double *compute_ms, double *transfer_ms) {
    int m = n + b;
    uint64_t *streams = malloc((size_t)m * sizeof *streams);
    double *t = malloc((size_t)m * sizeof *t), *u = malloc((size_t)m * sizeof *u);
    double *xfer = malloc((size_t)m * sizeof *xfer);
    PSG_ASSERT(streams && t && u && xfer);
    for (int k = 0; k < m; k++) {
        streams[k] = c->seed * 0x9e3779b97f4a7c15ull + (uint64_t)k * 0x632be59bd9b4e019ull;
        xfer[k] = 2 * one_way_ms(c, k, m, ps);
    }
    double sum = 0, sum_compute = 0;
    for (int s = 0; s < c->steps; s++) {
        for (int k = 0; k < m; k++) {
            u[k] = psg_sim_draw(c, &streams[k]);
            t[k] = u[k] + xfer[k];
        }
        qsort(t, (size_t)m, sizeof *t, cmp_double);
        qsort(u, (size_t)m, sizeof *u, cmp_double);
        sum += t[n - 1];
        sum_compute += u[n - 1];
    }
    *compute_ms = sum_compute / c->steps;
    *transfer_ms = sum / c->steps - *compute_ms;
    *step_ms = sum / c->steps + c->overhead_ms;
    free(streams);
    free(t);
    free(u);
    free(xfer);
}

double psg_sim_cpu_step_ms(const psg_sim_config_t *c, double m, double apply_ms,
                           int trace_workers) {
    if (!(c->cores > 0)) return 0;
    double apply = fmin(fmax(apply_ms, 0), c->ps_cpu_ms);
    double serve = (c->ps_cpu_ms - apply) / (trace_workers > 0 ? trace_workers : 1);
    return (m * c->worker_cpu_ms + apply + m * serve) / c->cores;
}

double psg_sim_path_step_ms(const psg_sim_config_t *c, int n, double m, double apply_ms,
                            int trace_workers, int ps) {
    if (!(c->worker_cpu_ms > 0) && !(c->ps_cpu_ms > 0)) return 0;
    double apply = fmin(fmax(apply_ms, 0), c->ps_cpu_ms);
    double serve = (c->ps_cpu_ms - apply) / (trace_workers > 0 ? trace_workers : 1);
    /* more workers than shared cores: the n whose gradients the step waits for take n X
     * of the cores' time before the last of them is in */
    double side_by_side = c->cores > 0 && n > c->cores ? n / c->cores : 1;
    return c->worker_cpu_ms * side_by_side + (apply + m * serve) / (ps > 0 ? ps : 1);
}

void psg_sim_finish(const psg_sim_config_t *c, psg_sim_result_t *r, double apply_ms,
                    int trace_workers, double one, int one_ps) {
    double m = r->workers_per_step;
    r->link_step_ms = r->step_ms;
    r->cpu_step_ms = psg_sim_cpu_step_ms(c, m, apply_ms, trace_workers);
    r->path_step_ms = psg_sim_path_step_ms(c, r->workers, m, apply_ms, trace_workers, r->ps);
    r->step_ms = fmax(r->step_ms, fmax(r->cpu_step_ms, r->path_step_ms));
    one = fmax(one, fmax(psg_sim_cpu_step_ms(c, 1, apply_ms, trace_workers),
                         psg_sim_path_step_ms(c, 1, 1, apply_ms, trace_workers, one_ps)));
    r->steps_per_sec = 1000.0 / r->step_ms;
    r->images_per_sec = r->steps_per_sec * r->workers * c->batch;
    r->speedup = r->images_per_sec / (1000.0 / one * c->batch);
}

int psg_sim_run(const psg_sim_config_t *c, int workers, int backups, psg_sim_result_t *r) {
    if (psg_sim_check(c, workers, backups) < 0) return -1;
    int ps = c->ps > 0 ? c->ps : (workers + backups + 3) / 4;
    memset(r, 0, sizeof *r);
    r->workers = workers;
    r->backups = backups;
    r->ps = ps;
    r->workers_per_step = workers + backups; /* every worker computes every step */
    simulate(c, workers, backups, ps, &r->step_ms, &r->compute_ms, &r->transfer_ms);
    double one_step, one_compute, one_transfer;
    int one_ps = c->ps > 0 ? c->ps : 1;
    simulate(c, 1, 0, one_ps, &one_step, &one_compute, &one_transfer);
    psg_sim_finish(c, r, 0, 1, one_step, one_ps);
    return 0;
}
