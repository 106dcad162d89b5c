/* The interface a strategy (a way for replicas to agree) implements, and the
 * table that lists them (sync/strategies.c). A strategy is one file
 * (sync/strategy_*.c) holding one psg_sync_strategy_t, and one line in the
 * table; docs/sync.md, "Adding a strategy", walks through one. Not public
 * API: users pick a strategy by name (--sync NAME, psg_sync_config_t.strategy). */
#ifndef PSGRAPH_SYNC_STRATEGY_H
#define PSGRAPH_SYNC_STRATEGY_H

#include "psgraph/sync_replicas.h"

#include <stdio.h>

/* What build gets: the config with N resolved, and the gradients. */
typedef struct {
    const psg_sync_config_t *cfg;
    int num_required;   /* N */
    int64_t timeout_ms; /* resolved: > 0, or <= 0 for no limit */
    psg_optimizer_t *opt;
    psg_graph_t *g;
    int n;
    const psg_endpoint_t *grads, *vars; /* only pairs with a gradient */
    psg_endpoint_t global_step;         /* the graph's global step handle */
} psg_sync_build_t;

#define PSG_SYNC_FAST_STEP (-1)

/* One worker running a strategy: what its step function gets. */
typedef struct psg_sync_worker psg_sync_worker_t;
struct psg_sync_worker {
    const psg_sync_config_t *cfg;
    const psg_sync_graph_t *sg;
    /* Runs call k: 0 is the worker's step (the model's feeds, then feeds[] for
     * sg->local_step if it is valid; fetched[0] the loss, then psg_sync_graph_fetches'
     * and the staleness pair's), k >= 1 is sg->calls[k - 1] (feeds and fetches its own),
     * PSG_SYNC_FAST_STEP the step's second form (sg->fast_step_op: feeds[0] for fast_key;
     * the step's fetches, then fast_fetch).
     * Returns 0, or -1 with the error set. */
    int (*run)(void *ctx, int k, psg_tensor_t *const *feeds, psg_tensor_t **fetched);
    void *ctx;
    int64_t local_step; /* the step's local step: the step function advances it */
    int64_t steps;      /* the worker's steps before this one */
    void *state;        /* the strategy's own between steps (free()d at the end); NULL first */
};

/* One of the table of options (sync/strategies.c): a --flag and where its value goes. */
typedef struct {
    const char *flag;           /* "--staleness" */
    const char *metavar;        /* "S" */
    const char *help;           /* one line for --help */
    size_t offset;              /* an int64_t (or, real: a double) in psg_sync_options_t */
    double lo, hi;              /* the range a value must be in */
    bool real;                  /* a number with a fraction, else an integer */
    const char *const *choices; /* non-NULL: one of these names, stored as its index */
} psg_sync_option_t;

typedef struct {
    const char *name;    /* what --sync takes */
    const char *summary; /* one line for --help and docs */
    /* the flags of the options table it reads (NULL-ended; NULL: none) */
    const char *const *options;
    /* Checks cfg (options and cluster size) before anything is built: 0, or -1 with the
     * error naming the option. NULL: nothing to check. */
    int (*check)(const psg_sync_config_t *cfg, int num_required);
    /* The workers it can lose and go on (NULL: none). */
    int (*lost_workers)(const psg_sync_config_t *cfg, int num_required);
    /* Adds the strategy's nodes to b->g and fills *out (already reset: no endpoints,
     * ops -1, num_vars = b->n, no calls). The worker's graph and the ps's: nodes built
     * beside a variable (its device pushed) run on its ps task. Returns 0, or -1 with the
     * error set. */
    int (*build)(const psg_sync_build_t *b, psg_sync_graph_t *out);
    /* One worker step (NULL: psg_sync_step_default). *loss gets the loss (new); fills
     * *st. Returns 0, or -1 with the error set. */
    int (*step)(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st);
    /* a chief's runner runs chief_op in a loop (sync's averaging) */
    bool chief_runner;
    /* the model's variables are each worker's own (the trainer builds them under the
     * worker's device; build gets them as vars and keeps the ps's copies itself) */
    bool local_model;
    /* takes --compress: build gets the gradients as the ps rebuilds them (sync/compress.c) */
    bool compress;
} psg_sync_strategy_t;

/* ---- the table (sync/strategies.c): the built-in strategies, then the added ones ---- */

/* The strategy named name (NULL: "sync"), or NULL with the error listing the known ones. */
const psg_sync_strategy_t *psg_sync_strategy_find(const char *name);
/* How many the table holds, and the i-th (0 <= i < psg_sync_num_strategies(); else NULL),
 * in --help's order. */
int psg_sync_num_strategies(void);
const psg_sync_strategy_t *psg_sync_strategy_at(int i);

/* The most strategies psg_sync_strategy_register adds. */
#define PSG_SYNC_MAX_ADDED 8
/* Adds a strategy of a program's own (a test's) after the built-in ones: from then on
 * --sync takes its name, --help shows it, psg_sync_replicas_new builds it by name. s is
 * borrowed for the life of the process. Call it at start-up, before anything reads the
 * table (tests/strategy_halved.c does it from a constructor). Returns 0, or -1 with the
 * error set when its name is malformed or taken, its summary or build is missing, it
 * lists an option the options table does not have, or PSG_SYNC_MAX_ADDED were added. */
int psg_sync_strategy_register(const psg_sync_strategy_t *s);

/* The step every strategy without its own runs: call 0, feeding local_step when the
 * graph has one, its fetches read into *st (psg_sync_step_read), local_step advanced. */
int psg_sync_step_default(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st);

/* ReadVariable of the global step after node `after` (-1: none), named name. */
psg_endpoint_t psg_sync_read_global_step(psg_graph_t *g, const char *name, psg_endpoint_t gstep,
                                         int after);
/* The staleness pair of an update train_op (an apply_gradients group, whose
 * IncrementVariable of the global step it finds): out->read_step, the global step as the
 * step's reads saw it, and out->applied_step, after its increment, each an Identity on
 * the worker so that fetching them does not fetch from a ps. Returns 0 or -1. */
int psg_sync_staleness_pair(psg_graph_t *g, psg_endpoint_t gstep, int train_op,
                            psg_sync_graph_t *out);
/* Pushes the device the node of e asked for (so the replica setter keeps what it decided
 * for a variable); returns whether it pushed (then pop it). */
bool psg_sync_push_device_of(psg_graph_t *g, psg_endpoint_t e);
/* The strategy of a wrapper. */
const psg_sync_strategy_t *psg_sync_replicas_strategy(const psg_sync_replicas_t *sr);
/* A local_model strategy's pieces (sync/strategy_local.c): the optimizer's update of the
 * worker's own variables without the global step's increment (*train_op), and a group of
 * the initializers of the variables on device dev (the worker's own), or -1. */
int psg_sync_local_update(const psg_sync_build_t *b, int *train_op);
int psg_sync_local_inits(psg_graph_t *g, const char *dev);
/* The initial value the model gave variable v (its "init" Assign's value), or none. */
psg_endpoint_t psg_sync_initial_value(psg_graph_t *g, psg_endpoint_t v);
/* Compressed gradients (sync/compress.c): what it added. */
typedef struct {
    int init_op;       /* the residuals' initializers (the worker's own variables); -1 none */
    int update_op;     /* the residuals' update, to run with each step; -1 none */
    double push_scale; /* bytes sent for each byte of the uncompressed gradients */
} psg_sync_compressed_t;
/* The options of the compression (sync/compress.c), for the options list of a strategy
 * that takes --compress (async, sync). */
#define PSG_SYNC_COMPRESS_OPTIONS                                                                  \
    "--compress", "--compress-ratio", "--compress-min-size", "--compress-warmup",                  \
        "--compress-warmup-ratio", "--compress-momentum"
/* grads[i] of vars[i] (n pairs) compressed as o says (--compress): dense[i] gets the
 * gradient the ps rebuilds (grads[i] itself without compression); momentum: the
 * optimizer's, for --compress-momentum worker*. 0, or -1 with the error set. */
int psg_sync_compress(psg_graph_t *g, const psg_sync_options_t *o, double momentum, int n,
                      const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                      psg_endpoint_t *dense, psg_sync_compressed_t *out);
/* Local SGD's graph (sync/strategy_local.c) with the outer optimizer outer: every H steps
 * the chief applies it to the mean over the workers of d = global - local on the ps's copies
 * (SGD with rate 1: the copies' mean, local SGD; Nesterov momentum: DiLoCo), its slots
 * beside the copies; the step that runs it. */
int psg_sync_build_local(const psg_sync_build_t *b, psg_sync_graph_t *out,
                         const psg_optimizer_config_t *outer);
int psg_sync_step_local(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st);
/* Every worker but the chief (lost_workers of every strategy that goes on without one: the
 * chief's membership lowers sync's N, answers ssp's clocks; async and easgd wait for none). */
int psg_sync_lost_any(const psg_sync_config_t *cfg, int num_required);
/* sync's graph (sync/strategy_sync.c), for a strategy that averages through it. */
int psg_sync_build_sync(const psg_sync_build_t *b, psg_sync_graph_t *out);

#endif
