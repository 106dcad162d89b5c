/* A model of synchronous data-parallel training on a parameter-server
 * cluster (N workers + b backup workers + P parameter servers), driven by
 * measured numbers: one worker's step-time distribution, the bytes a step
 * moves, link bandwidth and latency. Monte Carlo over steps; predicts
 * steps/sec, images/sec and the speedup over one worker. A model, not the
 * runtime: no network, no threads. */
#ifndef PSGRAPH_SIMULATE_H
#define PSGRAPH_SIMULATE_H

#include <stdint.h>

/* How one worker's compute time per step spreads around step_ms. */
typedef enum {
    PSG_SIM_TAIL_NONE = 0,  /* always step_ms */
    PSG_SIM_TAIL_NORMAL,    /* step_ms * (1 + cv * z), z ~ N(0, 1), at least 0.1 * step_ms */
    PSG_SIM_TAIL_LOGNORMAL, /* lognormal with mean step_ms and log-stddev sigma */
    PSG_SIM_TAIL_PARETO,    /* normal (cv) plus, with probability straggle_p, a delay of
                             * step_ms * Pareto(x_min 0.5, alpha) (capped at 50 * step_ms):
                             * rare, heavy stragglers */
    PSG_SIM_TAIL_SAMPLES,   /* drawn (with replacement) from measured samples */
} psg_sim_tail_t;

typedef struct {
    double step_ms;        /* mean compute time of one worker's step: 1300 (batch 32,
                            * Inception-v3 on a 2016 GPU, ~25 images/s) */
    psg_sim_tail_t tail;   /* PSG_SIM_TAIL_PARETO */
    double cv;             /* normal jitter: 0.03 */
    double sigma;          /* lognormal: 0.1 */
    double straggle_p;     /* pareto: 0.02 */
    double alpha;          /* pareto: 1.5 */
    const double *samples; /* PSG_SIM_TAIL_SAMPLES: measured step times in ms (borrowed) */
    int n_samples;
    double bytes_per_step; /* pulled and pushed by each worker per step: 4 * 23,817,352 */
    double link_gbps;      /* each machine's link, each direction, Gbit/s: 10 */
    double slow_link_gbps; /* the last worker's link instead (one capped worker); 0: link_gbps */
    double ps_link_gbps;   /* each ps's link instead; 0: link_gbps */
    double latency_ms;     /* one message: 0.07 (psgraph's measured round trip, docs/wire.md) */
    int ps;                /* parameter servers; 0: ceil((N + b) / 4) */
    double overhead_ms;    /* per step: the chief's apply and the token queue: 2 */
    int batch;             /* per worker: 32 */
    int steps;             /* Monte Carlo steps per point: 2000 */
    uint64_t seed;         /* 1 */
} psg_sim_config_t;

typedef struct {
    int workers, backups, ps;
    double step_ms;     /* mean simulated step */
    double compute_ms;  /* mean of the N-th fastest of N + b compute times */
    double transfer_ms; /* pull + push, each direction's bandwidth shared */
    double steps_per_sec;
    double images_per_sec; /* workers * batch * steps_per_sec (backups' batches dropped) */
    double speedup;        /* images/sec over one worker's without backups, same seed */
} psg_sim_result_t;

psg_sim_config_t psg_sim_defaults(void);

/* "none", "normal", "lognormal", "pareto", "samples" and back; -1 / "?" when unknown. */
int psg_sim_tail_from_name(const char *name);
const char *psg_sim_tail_name(psg_sim_tail_t t);

/* Simulates `workers` + `backups` for c->steps steps. A step: every worker
 * pulls the variables, computes, pushes its gradient; it ends when the
 * workers-th fastest gradient has arrived (the rest are dropped) plus the
 * overhead. Transfers of one direction take latency + max(bytes / link,
 * (N + b) * bytes / (P * ps link)): a ps's link is shared by every worker, the
 * backups' included; a worker's time is its compute plus both its transfers (a
 * worker on a slow link is the last one in, and dropped when b > 0). Worker k draws its times from
 * its own stream of the seed, so one worker is the same in every run and speedup <= N for b = 0.
 * Returns 0, or -1 with the error set on a bad config. */
int psg_sim_run(const psg_sim_config_t *c, int workers, int backups, psg_sim_result_t *r);

#endif
