/* Sync replicas with backup workers (tf.train.SyncReplicasOptimizer, with
 * the dropped gradients made visible): a wrapper around an optimizer that
 * builds, in each worker's graph, the step that offers the worker's
 * gradients to per-variable accumulators and takes its next token, and the
 * chief's step that averages the first N gradients, applies them, advances
 * the global step and releases N + b tokens; per-step statistics; and the
 * chief's runner. Other ways to agree (async, ssp, local SGD, ...) are
 * strategies behind the same calls (sync/strategy.h, the table in
 * sync/strategies.c). Not the resources (ops/state/sync_resources.h) and not
 * the training loop. */
#ifndef PSGRAPH_SYNC_REPLICAS_H
#define PSGRAPH_SYNC_REPLICAS_H

#include "psgraph/graph.h"
#include "psgraph/optimizer.h"
#include "psgraph/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { PSG_SYNC_COMPRESS_NONE, PSG_SYNC_COMPRESS_TOPK };
/* where topk's momentum runs (--compress-momentum): the ps's optimizer, or the worker's
 * velocity (DGC's momentum correction; masked: with its momentum factor masking) with
 * plain SGD of the same rate on the ps, or nowhere (folded): plain SGD of rate
 * lr / (1 - m) on the ps, momentum SGD's rate once its velocity has settled */
enum {
    PSG_SYNC_COMPRESS_MOMENTUM_PS,
    PSG_SYNC_COMPRESS_MOMENTUM_WORKER,
    PSG_SYNC_COMPRESS_MOMENTUM_MASKED,
    PSG_SYNC_COMPRESS_MOMENTUM_FOLDED
};

/* The strategies' own settings, each a --flag of `psgraph train` (sync/strategies.c's
 * table of options; a strategy reads only the ones it lists). */
typedef struct {
    int64_t max_staleness;     /* async: steps a read may run ahead of this worker's own
                                  last update (steps asked for ahead); 0 (default): none */
    int64_t staleness;         /* ssp: the most steps a worker may be ahead of the slowest */
    int64_t local_steps;       /* local: H, steps on the worker's own copy between averages */
    int64_t local_after;       /* local: plain sync steps before local SGD starts (post-local) */
    double elastic_alpha;      /* easgd: how far a copy and the center move toward each other */
    int64_t compress;          /* async, sync: PSG_SYNC_COMPRESS_NONE or _TOPK (--compress) */
    double compress_ratio;     /* topk: the share of each gradient's entries sent (default 0.01) */
    int64_t compress_min_size; /* topk: a gradient of fewer entries is sent whole (dense) */
    int64_t compress_warmup;   /* topk: steps over which the share sent falls from
                                  compress_warmup_ratio to compress_ratio (0: none) */
    double compress_warmup_ratio; /* topk: the share sent at the first step of the warm-up */
    int64_t compress_momentum;    /* topk: PSG_SYNC_COMPRESS_MOMENTUM_* */
    double outer_lr;              /* diloco: the outer Nesterov step's rate (default 0.7) */
    double outer_momentum;        /* diloco: its momentum (default 0.9) */
} psg_sync_options_t;

/* The defaults of every strategy option. */
void psg_sync_options_defaults(psg_sync_options_t *o);
/* flag value, when flag is one of the strategies' options: stores it in *o. Returns 1
 * when it took it, 0 when flag is not a strategy option, -1 with the error naming the
 * flag on a bad value. */
int psg_sync_option_parse(psg_sync_options_t *o, const char *flag, const char *value);
/* The --sync lines of a usage text: every strategy, its summary and its options. */
void psg_sync_print_help(FILE *f);
/* The strategy named name (NULL: "sync") is known: 0, or -1 with the error listing them. */
int psg_sync_strategy_check_name(const char *name);
/* Whether the strategy named name (NULL: "sync") trains each worker's own copy of the model
 * (local, easgd, diloco: the model's variables are built on the worker's device, the ps
 * tasks hold the strategy's global or center copies): 1 or 0, or -1 with the error listing
 * the known ones. */
int psg_sync_strategy_local_model(const char *name);
/* A strategy as psgraph compare's --strategy takes it, "NAME [--flag VALUE]...", checked
 * against the table of strategies and the table of options before anything runs: NAME a
 * strategy's, every flag one the strategy lists, every value in its range. Returns 0, or
 * -1 with the error naming the unknown name or flag and the closest known one. */
int psg_sync_spec_check(const char *spec);

typedef struct {
    const char *strategy;      /* its name (NULL: "sync"); psg_sync_strategy_names() */
    int num_workers;           /* N + b: all the job's workers, >= 1 */
    int replicas_to_aggregate; /* N; <= 0: num_workers - backup_workers */
    int backup_workers;        /* b >= 0 */
    int worker_index;          /* this worker, in [0, num_workers); 0 is the chief */
    int64_t total_steps;     /* the chief ends training when the global step reaches it; 0: never */
    int64_t timeout_ms;      /* the longest a take or a token may wait; 0: 60000; < 0: no limit */
    int64_t peer_timeout_ms; /* a peer silent this long is lost (allreduce's one-call ring waits
                                at most this long for a chunk); 0: timeout_ms */
    psg_sync_options_t opt;  /* the strategy's own settings */
} psg_sync_config_t;

/* Fills c for one worker and no backups: strategy "sync", 60 s timeout. */
void psg_sync_config_defaults(psg_sync_config_t *c);

#define PSG_SYNC_MAX_CALLS 24
#define PSG_SYNC_CALL_MAX 64

/* What a strategy builds into one worker's graph. Endpoints a strategy does
 * not use are PSG_NO_ENDPOINT and ops -1. */
typedef struct {
    /* the worker's step: feed local_step (i64 scalar) with the worker's
     * local step (its first: the value of global_step; then each step's
     * next_step), run train_op and fetch psg_sync_graph_fetches */
    psg_endpoint_t local_step;
    int train_op;
    psg_endpoint_t num_accepted; /* i32 scalar: accumulators that kept this step's gradient */
    psg_endpoint_t next_step;    /* i64 scalar: the token taken, -1 once training is over */
    psg_endpoint_t token_wait;   /* f32 scalar: seconds the token took */
    int num_vars;                /* variables with a gradient */
    psg_endpoint_t global_step;  /* i64 scalar: the global step's value */
    /* staleness (async, ssp): i64 scalars fetched on the worker with the step, the global
     * step its variables were read at and the one its own update made; the gradient's
     * staleness is applied_step - read_step - 1, the other updates between the two */
    psg_endpoint_t read_step, applied_step;
    /* the chief: run chief_init_op once after init, then chief_op in a loop
     * (psg_sync_chief_start) fetching chief_global_step, the global step
     * after the update */
    int chief_op;
    psg_endpoint_t chief_global_step;
    int chief_init_op;
    /* after a failover (docs/replication.md): the chief runs reissue_op (every accumulator
     * emptied at the global step, N + b tokens carrying it), each worker fetches
     * rejoin_token (feed local_step: the token taken is the first above it) and runs that
     * step again; -1 / PSG_NO_ENDPOINT for strategies without tokens */
    int reissue_op;
    psg_endpoint_t rejoin_token;
    /* run by the chief as workers are lost or join (docs/distributed.md "Membership"), fed
     * those of its endpoints that are valid: live_required (i64 scalar: the gradients a step
     * averages from now on, the pending one's too), live_mask (i32 [num_workers]: 1 for a
     * live worker, by rank; sync's tokens, one for each live worker and only for it, and
     * ssp's clocks); -1 / PSG_NO_ENDPOINT for strategies that wait for no other worker */
    psg_endpoint_t live_required, live_mask;
    int set_live_op;
    /* run by a worker whose data ended: later takes, gradients and tokens
     * end training cleanly */
    int close_op;
    /* run by the chief when its runner failed (sync strategies; -1 none): the token queue
     * is closed with an error that says so, so every worker's wait for a token ends now,
     * not at its timeout */
    int abort_op;
    /* the strategy's other calls (its step function runs them: sync/strategy.h): feeds,
     * fetches and targets of each; no model feeds */
    struct {
        int n_feeds, n_fetches, n_targets;
        psg_endpoint_t feeds[PSG_SYNC_CALL_MAX], fetches[PSG_SYNC_CALL_MAX];
        int targets[PSG_SYNC_CALL_MAX];
    } calls[PSG_SYNC_MAX_CALLS];
    int num_calls;
    /* calls from index peer_calls_from on (0: none) each run a partition on another worker
     * that may not be up (allreduce's puts into the next worker of its ring): made at their
     * first run, on a session of their own whose wait for an unreachable peer is the peer
     * timeout (the step timeout if shorter) */
    int peer_calls_from;
    /* a second form of the step, run as call PSG_SYNC_FAST_STEP (sync/strategy.h), -1 none:
     * the step's feeds and fast_key (i64 scalar), its fetches and fast_fetch after them,
     * fast_step_op its target in train_op's place; made at its first run on the session of the
     * peer calls (allreduce: the whole ring in one call while its members stay) */
    int fast_step_op;
    psg_endpoint_t fast_key, fast_fetch;
    /* the step's fetches after psg_sync_graph_fetches' (ssp: the gradients) */
    int n_step_fetches;
    psg_endpoint_t step_fetches[PSG_SYNC_CALL_MAX];
    bool overlap;      /* steps may be asked for ahead (async with --max-staleness 1) */
    bool ahead;        /* the next step's reads asked for ahead, no staleness (async, 1 worker) */
    int local_init_op; /* local_model: this worker's own variables' initializers; -1 none */
    int start_op;      /* run by every worker once the variables are initialized; -1 none */
    double comm_per_step; /* share of steps that move the model (local SGD: 1/H); 0: 1 */
    double push_scale;    /* bytes pushed for each byte of the model (compression); 0: 1 */
    bool no_retry;        /* a failed step is not retried once the ps tasks are back (allreduce: the
                             other workers' exchange of that step failed too) */
} psg_sync_graph_t;

typedef struct psg_sync_replicas psg_sync_replicas_t;

/* The workers the strategy of cfg can lose and go on (sync, local, diloco, async: all but the
 * chief, as the chief follows the live workers;
 * others: 0). -1 with the error set on an unknown strategy. */
int psg_sync_lost_workers_tolerated(const psg_sync_config_t *cfg);

/* A wrapper of opt (borrowed: it must outlive the wrapper) with a copy of
 * *cfg. NULL with the error naming the field on a bad config (unknown
 * strategy, N < 1 or N + b > num_workers, worker_index out of range). */
psg_sync_replicas_t *psg_sync_replicas_new(psg_optimizer_t *opt, const psg_sync_config_t *cfg);
void psg_sync_replicas_destroy(psg_sync_replicas_t **sr);
/* The strategy's name and N (gradients averaged per step). */
const char *psg_sync_replicas_strategy_name(const psg_sync_replicas_t *sr);
int psg_sync_replicas_num_required(const psg_sync_replicas_t *sr);

/* Builds this worker's graph for grads[i] of vars[i] (handles; a pair
 * without a gradient is skipped) into g and fills *out. Build it under the
 * same replica device setter as the model, as every worker builds its own
 * graph (between-graph replication): the accumulators sit beside their
 * variables ("<var>/grad_accum"), the token queue beside the global step
 * ("sync_token_q"). Returns 0, or -1 with the error set. */
int psg_sync_replicas_apply_gradients(psg_sync_replicas_t *sr, psg_graph_t *g, int n,
                                      const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                                      psg_sync_graph_t *out);
/* The gradients of loss for every trainable variable, then apply_gradients. */
int psg_sync_replicas_minimize(psg_sync_replicas_t *sr, psg_graph_t *g, psg_endpoint_t loss,
                               psg_sync_graph_t *out);

/* The strategies known, comma-separated ("sync, async, ..."), in the table's order. */
const char *psg_sync_strategy_names(void);

/* ---- statistics of a worker's steps ---- */

/* The endpoints a worker fetches with each step, after its own (at most 5 +
 * n_step_fetches: num_accepted, next_step, token_wait, read_step, applied_step, the ones
 * the strategy has, then step_fetches). Returns
 * how many it wrote. */
int psg_sync_graph_fetches(const psg_sync_graph_t *sg, psg_endpoint_t *out);

typedef struct {
    int64_t local_step; /* the step its gradient was computed for */
    int64_t next_step;  /* its next local step; -1: training is over */
    bool used;          /* every accumulator kept the gradient */
    int num_accepted, num_vars;
    double step_sec;       /* the whole step, as the worker timed it */
    double token_wait_sec; /* of which waiting for the token */
    double compute_sec;    /* the rest: reads, compute, sends */
    int64_t staleness;     /* updates between its read and its own apply; -1: not known */
    double wait_sec;       /* of step_sec, waiting for others (ssp's clock) besides tokens */
    double straggler_ms;   /* the --straggler delay slept before the step (not in step_sec) */
    /* filled by the training loop (worker/sync_train.c), not by the strategy: */
    bool has_loss;      /* loss below is the step's training loss */
    double loss;        /* the worker's training loss of the step (its batch's mean) */
    double wall_sec;    /* when the step ended, seconds since the worker's training began; < 0
                           unknown */
    int64_t push_bytes; /* tensor bytes the worker's task server sent during the step; < 0
                           unknown (psg_task_server_tensor_bytes) */
    int64_t pull_bytes; /* and received */
} psg_sync_step_t;

/* Reads one step from the tensors fetched for psg_sync_graph_fetches (in
 * that order). Returns 0, or -1 with the error set on a missing or
 * malformed tensor. A strategy with no fetches gives used, next_step =
 * local_step + 1. */
int psg_sync_step_read(const psg_sync_graph_t *sg, psg_tensor_t *const *fetched, int64_t local_step,
                       double step_sec, psg_sync_step_t *st);

#define PSG_SYNC_STALE_BINS 33

typedef struct {
    int64_t steps, used, dropped;
    /* why each dropped one was (psg_sync_step_drop_reason): stale, partial, closed */
    int64_t dropped_stale, dropped_partial, dropped_closed;
    double compute_sec, token_wait_sec, wait_sec;
    /* staleness of the applied gradients whose staleness is known */
    int64_t stale_n, stale_min, stale_max, stale_sum;
    /* stale_hist[k]: how many had staleness k (the last bin: PSG_SYNC_STALE_BINS - 1 or more) */
    int64_t stale_hist[PSG_SYNC_STALE_BINS];
} psg_sync_stats_t;

/* "\"staleness\":{\"min\":A,\"mean\":B,\"max\":C,\"n\":N,\"hist\":[H0,H1,...]}" of s
 * (nulls and [] when none is known; hist up to its last non-zero bin), as snprintf. */
int psg_sync_stats_staleness_json(const psg_sync_stats_t *s, char *buf, size_t size);

void psg_sync_stats_add(psg_sync_stats_t *s, const psg_sync_step_t *st);
/* Why a step's gradient was dropped: NULL (used); "closed" (training ended before it was
 * taken); "stale" (no accumulator kept it: it was computed for a step the N fastest had
 * already ended); "partial" (some accumulators kept it, others had moved on). */
const char *psg_sync_step_drop_reason(const psg_sync_step_t *st);
/* One metrics.jsonl line (no newline) for worker's step: {"event":"sync_step", ...}.
 * Returns the length, as snprintf. */
int psg_sync_step_json(const psg_sync_step_t *st, int worker, char *buf, size_t size);

/* ---- one worker's steps, driven from outside psgraph's training loop ---- */

/* Runs call k of a worker's step for the strategy's step function: k = 0 is the worker's
 * step (the model's feeds, then feeds[0], the local step (i64 scalar), when
 * sg->local_step is valid; fetched[0] a tensor given back as the step's loss, then
 * psg_sync_graph_fetches' in their order), k >= 1 is sg->calls[k - 1] (its feeds and
 * fetches). Returns 0, or -1 with the error set. */
typedef int (*psg_sync_call_fn)(void *ctx, int k, psg_tensor_t *const *feeds,
                                psg_tensor_t **fetched);

typedef struct psg_sync_stepper psg_sync_stepper_t;

/* A worker of sr whose steps run sr's strategy's step function (the one `psgraph train`
 * runs) through run: what a Python script's training step uses. sr, sg (the graph sr
 * built) and ctx are borrowed and must outlive it; local_step is the worker's first (the
 * global step's value once the variables are initialized). NULL with the error set on out
 * of memory. */
psg_sync_stepper_t *psg_sync_stepper_new(const psg_sync_replicas_t *sr, const psg_sync_graph_t *sg,
                                         psg_sync_call_fn run, void *ctx, int64_t local_step);
void psg_sync_stepper_destroy(psg_sync_stepper_t **w);
/* One step: the strategy's calls in its order. *loss gets fetched[0] of call 0 (new; NULL
 * on failure); *st the step's statistics (the strategy's fields; not the training loop's:
 * loss, wall_sec, bytes, straggler_ms). Returns 0, or -1 with the error set. */
int psg_sync_stepper_step(psg_sync_stepper_t *w, psg_tensor_t **loss, psg_sync_step_t *st);
/* The steps it ran (the --straggler step count), and the local step the next one runs. */
int64_t psg_sync_stepper_steps(const psg_sync_stepper_t *w);
int64_t psg_sync_stepper_local_step(const psg_sync_stepper_t *w);

/* ---- the chief's runner ---- */

/* Runs the chief's step once (chief_op, fetching chief_global_step into
 * *global_step). Returns 0, or -1 with the error set. */
typedef int (*psg_sync_run_fn)(void *ctx, int64_t *global_step);

typedef struct psg_sync_chief psg_sync_chief_t;

/* Starts a thread that calls run until the global step reaches total_steps
 * (> 0), run fails because training was closed (a clean end), or run fails
 * otherwise. ctx is borrowed until psg_sync_chief_join. NULL with the
 * error set when the thread cannot start. */
psg_sync_chief_t *psg_sync_chief_start(psg_sync_run_fn run, void *ctx, int64_t total_steps);
/* Waits for the runner (make sure it ends: reach total_steps or run the
 * close_op), frees it and sets *steps (may be NULL) to the chief steps it
 * ran. Returns 0 on a clean end, or -1 with the runner's error. */
int psg_sync_chief_join(psg_sync_chief_t **c, int64_t *steps);

#endif
