/* A model of synchronous data-parallel training on a parameter-server
 * cluster (N workers + b backup workers + P parameter servers), driven by
 * measured numbers: one worker's step-time distribution, the bytes a step
 * moves, link bandwidth and latency. Monte Carlo over steps; predicts
 * steps/sec, images/sec and the speedup over one worker. A model, not the
 * runtime: no network, no threads. */
#ifndef PSGRAPH_SIMULATE_H
#define PSGRAPH_SIMULATE_H

#include <stdbool.h>
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
    /* the overlap model's links (psg_sim_overlap_run) */
    double burst_ms;        /* a capped link's token bucket holds burst_ms of its rate (tc tbf's
                             * burst; bench/hosts.sh: 4): 0 */
    double burst_min_bytes; /* ... and at least this many bytes (bench/hosts.sh: 65536): 0 */
    double line_gbps;       /* the wire under a cap, and an uncapped link: 10 */
    double chunk_bytes;     /* links share their time in chunks of this size: 65536 */
    bool link_fifo;         /* true: a link sends a peer's queued messages to the end before the
                             * next peer's (first come, first served); false: round-robin chunks */
    double window_bytes;    /* > 0: a link serves a peer up to this many bytes a turn (TCP's
                             * bytes in flight in the link's one queue), then the next: 0 */
    /* the shared cores (psg_sim_cpu_step_ms): 0 cores, each host its own (no shared bound) */
    double cores;         /* cores every host shares (emulated hosts on one machine; a part
                           * of one counts: those other jobs leave): 0 */
    double worker_cpu_ms; /* CPU time (all threads, user + system) of one worker's step: 0 */
    double ps_cpu_ms;     /* the ps tasks' CPU time per step, all of them, serving the traced
                           * run's workers (the profile's trace_workers; 1 without one): 0 */
} psg_sim_config_t;

/* One tensor a worker moves each step in the overlap model: a pull (a variable, from
 * its ps to the worker) or a push (a gradient, from the worker to the ps). */
typedef struct {
    double bytes;
    double at_ms;    /* pull: the worker's compute done before the step needs it; push: the
                      * compute done when it is ready to send (ms of one step's compute) */
    double apply_ms; /* push: the ps's time to apply it once N are in; pull: unused */
    int ps;          /* the ps it comes from or goes to (taken modulo P); -1: split in P equal
                      * parts, one to each ps */
} psg_sim_msg_t;

/* What one worker's step does, in the order the runtime does it: its pulls (all asked for
 * at the step's start), its compute (the forward waits for each variable where it needs
 * it), its pushes (each sent when backprop made it). From a trace
 * (psg_sim_profile_from_trace) or the serial model's inputs (psg_sim_profile_serial). */
typedef struct {
    psg_sim_msg_t *pulls, *pushes;
    int n_pulls, n_pushes;
    double compute_ms;    /* one worker's compute a step */
    double overhead_ms;   /* a worker's time a step outside the modelled parts, serial with
                           * the rest (the session, RPCs, the token): psg_sim_calibrate */
    int trace_workers;    /* the traced run's workers (0: not from a trace) */
    double trace_step_ms; /* its measured step (start to next start), median */
    int trace_steps;      /* steps of the trace used */
} psg_sim_profile_t;

typedef struct {
    int workers, backups, ps;
    double step_ms;      /* mean simulated step */
    double compute_ms;   /* mean of the N-th fastest of N + b compute times */
    double transfer_ms;  /* pull + push, each direction's bandwidth shared */
    double link_step_ms; /* the step of the model alone (links, compute, overhead) */
    double cpu_step_ms;  /* the shared cores' bound (psg_sim_cpu_step_ms); 0 without cores */
    double path_step_ms; /* the ps's critical path (psg_sim_path_step_ms); 0 without CPU times */
    double workers_per_step; /* workers that start a step, per step: N + b, fewer where a
                              * backup on a slow link misses steps (the overlap model) */
    double steps_per_sec;
    double images_per_sec; /* workers * batch * steps_per_sec (backups' batches dropped) */
    double speedup;        /* images/sec over one worker's without backups, same seed */
} psg_sim_result_t;

psg_sim_config_t psg_sim_defaults(void);

/* The shared cores' bound on a step of m workers (N + b, or the overlap model's workers
 * that start a step, per step: a backup that misses steps computes none of them): every
 * worker's CPU a step (c->worker_cpu_ms) and the ps tasks' (apply_ms once a step, the rest
 * of c->ps_cpu_ms per worker served: (c->ps_cpu_ms - apply_ms) / trace_workers each)
 * shared by c->cores cores, processor sharing: their sum / c->cores. apply_ms is capped at
 * c->ps_cpu_ms. 0 when c->cores is 0 (each host its own cores). */
double psg_sim_cpu_step_ms(const psg_sim_config_t *c, double m, double apply_ms, int trace_workers);

/* The ps's critical path of a sync step of m workers (n of whose gradients it waits for: N)
 * on ps parameter servers: one worker's CPU a step (c->worker_cpu_ms: the workers run
 * theirs side by side; n x it over c->cores where n is more than the c->cores they share:
 * the step's n gradients need n x c->worker_cpu_ms of those cores) and then the ps's CPU
 * of the whole step, serial within a ps task: apply_ms once and (c->ps_cpu_ms - apply_ms)
 * / trace_workers for each of the m workers served, spread over the ps tasks. Lockstep
 * (every worker's push in before the ps's work of the step): no overlap of one worker's
 * CPU with the ps's. 0 when both CPU times are 0. The models' step is the largest of
 * theirs, this one and psg_sim_cpu_step_ms. */
double psg_sim_path_step_ms(const psg_sim_config_t *c, int n, double m, double apply_ms,
                            int trace_workers, int ps);

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

/* The overlap model: an event simulation of c->steps sync steps of `workers` + `backups`
 * workers running profile p. A worker's step starts when it has its token (the chief's
 * release, one latency later) plus p->overhead_ms; it asks for every pull at once, computes
 * (scaled by its draw from c's tail over c->step_ms), waits where a pull it needs is not in,
 * and sends each push as its compute passes the push's at_ms. Every message crosses its
 * sender's uplink and its receiver's downlink; each link serves its peers round-robin in
 * chunks of c->chunk_bytes at its rate, with a token bucket of c->burst_ms of the rate (at
 * least c->burst_min_bytes) drained at c->line_gbps (both directions of a link are
 * independent: full duplex). A ps applies push j when the N-th gradient of the current step
 * is in (its apply_ms, one at a time per ps); when all are applied, the chief releases the
 * next step after c->overhead_ms; gradients of an older step are dropped (backups). Links
 * and workers carry over from step to step: a slow worker's late push still holds the ps's
 * link. r's step is the mean over the steps after a warm-up (a fifth, at most 10); compute
 * is the mean draw x p->compute_ms; speedup is against 1 worker, same profile.
 * Returns 0, or -1 with the error set on a bad config or profile. */
int psg_sim_overlap_run(const psg_sim_config_t *c, const psg_sim_profile_t *p, int workers,
                        int backups, psg_sim_result_t *r);

/* The serial model's inputs as a profile (no overlap but the links' queues): one pull of
 * c->bytes_per_step needed at once, compute c->step_ms, one push of it at the end, each
 * spread evenly over the P ps (ps -1). msgs holds the two messages (the caller's). */
void psg_sim_profile_serial(const psg_sim_config_t *c, psg_sim_msg_t msgs[2], psg_sim_profile_t *p);

/* Reads a merged cluster trace (psgraph launch ... train --trace FILE; docs/checkpoints.md)
 * of an uncapped run into p: for the first worker's traced steps (but the first, a
 * warm-up), its compute (the union of its ops' spans other than Recv), each Recv's bytes
 * (args.bytes) and the compute done when it came in, each Send's bytes and the compute
 * done when it started; medians over the steps, matched by node name. The ps's update ops
 * of the step (types with "Apply") give the apply time, shared out over the pushes by bytes.
 * trace_step_ms: the median from one step's start to the next's. The ps of a message: its
 * peer's task in the node's name is not known, so the pulls and pushes are spread over the
 * ps tasks in turn. -1 with the error naming the file and what is missing. */
int psg_sim_profile_from_trace(const char *path, psg_sim_profile_t *p);
void psg_sim_profile_free(psg_sim_profile_t *p);

/* Sets p->overhead_ms so that the model of the traced run (p->trace_workers workers, no
 * backups, every link uncapped at c->line_gbps) steps in p->trace_step_ms. 0 when the
 * model alone is already slower (said in *note when note is not NULL). -1 on a bad config. */
int psg_sim_calibrate(const psg_sim_config_t *c, psg_sim_profile_t *p, const char **note);

/* The machine runs CPU work `speed` times as fast as the one c's and p's times were measured
 * on (a what-if: a faster machine, a faster minute of a shared one): every CPU time is
 * divided by it: a worker's compute (c->step_ms; p's compute, when each pull is needed and
 * each push made), the ps's applies, the overheads (c's and p's, calibrated first),
 * c->worker_cpu_ms and c->ps_cpu_ms. The links do not change. c->samples are borrowed:
 * the caller scales its own. p may be NULL. -1 with the error set when speed is not > 0. */
int psg_sim_scale_cpu(psg_sim_config_t *c, psg_sim_profile_t *p, double speed);

#endif
