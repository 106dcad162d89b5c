/* A cluster worker's strategy in the training loop: the replica built by the
 * strategy, the callables of its calls, each step through its step function
 * with stragglers and statistics, the chief's runner on its own distributed
 * session, the clean end and the summary (sync_train.h). The strategies are
 * sync/'s; the resources are the ps's. */
#include "worker/sync_train.h"

#include "psgraph/autodiff.h"
#include "psgraph/clock.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/straggler.h"
#include "sync/strategy.h"
#include "worker/failover.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FETCH (1 + 8 + PSG_SYNC_CALL_MAX)
/* the columns of a worker's row of counts: used, dropped, reported, examples/sec,
 * staleness n, sum, min, max, tensor bytes pushed and pulled a step (as its task server
 * counted them), and the dropped ones by why: stale, partial, closed */
#define COUNTS 13

struct psg_sync_train {
    psg_sync_replicas_t *sr;
    const psg_sync_strategy_t *strategy;
    psg_sync_config_t cfg;
    psg_sync_graph_t sg;
    psg_straggler_t *stragglers;
    psg_graph_t *g;
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS]; /* the model's: images, labels of each tower */
    int num_feeds;
    const psg_towers_t *towers; /* borrowed; NULL: one tower */
    psg_endpoint_t loss;
    int worker_op, after_op; /* psg_sync_train_add_ops: -1 none */
    int rank, num_workers, num_required, backups;
    /* what the chief's set_live last set (the membership's thread): N and the live workers */
    atomic_int live_required, live_workers;
    int64_t step_timeout_ms;
    bool no_overlap;
    int64_t model_bytes; /* of the variables the strategy moves */
    FILE *out, *metrics;
    /* running */
    psg_dist_callable_t *calls[1 + PSG_SYNC_MAX_CALLS]; /* owned by the worker's session */
    psg_tensor_t *model_values[2 * PSG_MAX_TOWERS];     /* this step's, borrowed */
    psg_sync_worker_t w;
    psg_dist_session_t *chief_sess;  /* the chief's runner's own session */
    psg_dist_callable_t *chief_step; /* owned by chief_sess */
    psg_dist_callable_t *close_step; /* owned by the worker's session; NULL: none */
    psg_dist_callable_t *rejoin;     /* the worker's token after a failover; NULL: none */
    psg_dist_callable_t *reissue;    /* the chief's tokens after a failover; NULL: none */
    psg_dist_callable_t *abort_step; /* the queue closed with an error (chief_sess's); NULL */
    psg_dist_session_t *peer_sess;   /* the calls into other workers (sg.peer_calls_from) */
    psg_dist_callable_t *fast_step;  /* sg.fast_step_op's, on peer_sess (made at its first run) */
    psg_dist_session_t *live_sess;   /* the chief's, for set_live: the membership's thread */
    psg_dist_callable_t *live_step;  /* owned by live_sess; NULL: the strategy has no N */
    const psg_cluster_t *cluster;    /* borrowed; NULL in one process */
    /* the last step's model feeds (copies; one tower only) and its local step: a failover
     * that took that step's update back runs it again (psg_sync_train_rejoin) */
    psg_tensor_t *prev_values[2];
    int64_t prev_step;
    psg_dist_session_t *sess;       /* the worker's (borrowed) */
    psg_task_server_t *server;      /* this worker's (borrowed): its byte counts */
    char task[PSG_DEVICE_NAME_MAX]; /* its task, as metrics.jsonl names it ("" in one process) */
    int64_t served0, pulled0;       /* the counts when training started */
    int64_t served_at, pulled_at;   /* and after the last step */
    psg_sync_chief_t *runner;
    int64_t chief_steps, total_steps, global_steps;
    int64_t runner_gs;       /* the global step after the runner's last step (its thread's) */
    int64_t chief_steps_run; /* the runner's steps so far (its thread's) */
    bool failed_over;        /* the runner's session failed over (its thread's) */
    /* the runner's failure, written by its thread before runner_failed is set: the chief's
     * own step, whose token never comes then, names it */
    char runner_error[1024];
    psg_err_code_t runner_code;
    int64_t runner_failed_at;
    atomic_bool runner_failed;
    bool over, finished, chief, join;
    double runner_start, runner_sec, straggler_sec, start_sec, end_sec;
    double first_step_at, last_step_at; /* when the runner's first and last steps ended */
    psg_sync_stats_t stats;
    int64_t ps_used, ps_dropped; /* psg_sync_train_count; -1: unknown */
    psg_endpoint_t counts_delta, counts_read;
    int counts_add;
    float *counts; /* [workers * COUNTS], read by the chief's count; NULL: not read */
};

const char *psg_sync_train_strategy(const psg_train_config_t *c) {
    return c->sync ? c->sync : "async";
}

bool psg_sync_train_local_model(const psg_train_config_t *c) {
    const psg_sync_strategy_t *s = psg_sync_strategy_find(psg_sync_train_strategy(c));
    return s && s->local_model;
}

/* The job's counts: a [workers, COUNTS] f32 variable on a ps each worker adds its row to. */
static int build_counts(psg_sync_train_t *st) {
    psg_graph_t *g = st->g;
    psg_shape_t cs = psg_shape_2d(st->num_workers, COUNTS);
    psg_endpoint_t cv = psg_variable(g, "sync_replicas/worker_counts", PSG_DT_F32, &cs,
                                     (psg_initializer_t){"zeros", 0, 0}, false);
    st->counts_delta = psg_placeholder(g, "sync_replicas/worker_counts_delta", PSG_DT_F32, &cs);
    st->counts_add = psg_assign_add(g, "sync_replicas/report_counts", cv, st->counts_delta);
    st->counts_read = psg_read_variable(g, "sync_replicas/worker_counts/read", cv);
    return psg_graph_status(g);
}

/* The strategy's config from c. */
static void strategy_config(psg_sync_train_t *st, const psg_train_config_t *c) {
    psg_sync_config_t *cfg = &st->cfg;
    psg_sync_config_defaults(cfg);
    cfg->strategy = psg_sync_train_strategy(c);
    cfg->opt = c->sync_opt;
    cfg->num_workers = st->num_workers;
    cfg->replicas_to_aggregate = c->replicas_to_aggregate;
    cfg->backup_workers = c->backup_workers;
    cfg->worker_index = st->rank;
    cfg->total_steps = st->total_steps;
    /* the ps answers a take or a token that does not come before the session gives
     * up on the step, so the error says what was waited for */
    cfg->timeout_ms = st->step_timeout_ms * 3 / 4 > 0 ? st->step_timeout_ms * 3 / 4 : 1;
    /* the trainer's, else the cluster's default (a cluster file's own is not known yet) */
    cfg->peer_timeout_ms = c->peer_timeout_s > 0 ? (int64_t)(c->peer_timeout_s * 1000) : 10000;
}

/* Bytes of the f32 variables of vars[n]. */
static int64_t vars_bytes(psg_graph_t *g, int n, const psg_endpoint_t *vars) {
    int64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        const psg_shape_t *s = psg_graph_shape(g, vars[i]);
        int64_t numel = 1;
        for (int d = 0; s && d < s->rank; d++) numel *= s->dims[d] > 0 ? s->dims[d] : 1;
        bytes += numel * 4;
    }
    return bytes;
}

/* The strategy's graph for grads of vars (NULL grads: the gradients of loss). */
static int build_strategy(psg_sync_train_t *st, psg_optimizer_t *opt, int n,
                          const psg_endpoint_t *grads, const psg_endpoint_t *vars) {
    psg_endpoint_t *own = NULL;
    if (!grads) {
        if (psg_trainable_gradients(st->g, st->loss, &n, &own) < 0) return -1;
        vars = own;
        grads = own + n;
    }
    int rc = -1;
    if ((st->sr = psg_sync_replicas_new(opt, &st->cfg))) {
        st->strategy = psg_sync_replicas_strategy(st->sr);
        st->num_required = psg_sync_replicas_num_required(st->sr);
        atomic_store(&st->live_required, st->num_required);
        atomic_store(&st->live_workers, st->num_workers);
        st->model_bytes = vars_bytes(st->g, n, vars);
        rc = psg_sync_replicas_apply_gradients(st->sr, st->g, n, grads, vars, &st->sg);
    }
    free(own);
    return rc;
}

psg_sync_train_t *psg_sync_train_new(const psg_train_config_t *c, psg_graph_t *g,
                                     psg_optimizer_t *opt, int n, const psg_endpoint_t *grads,
                                     const psg_endpoint_t *vars, psg_endpoint_t loss, int n_feeds,
                                     const psg_endpoint_t *feeds, const psg_towers_t *towers,
                                     int rank, int num_workers, FILE *out) {
    psg_sync_train_t *st = calloc(1, sizeof *st);
    if (!st) {
        psg_error_set("out of memory");
        return NULL;
    }
    st->g = g;
    st->worker_op = st->after_op = -1;
    st->loss = loss;
    st->towers = towers;
    st->num_feeds = n_feeds;
    memcpy(st->feeds, feeds, sizeof *feeds * (size_t)n_feeds);
    st->rank = rank;
    st->num_workers = num_workers;
    st->out = out;
    st->ps_used = st->ps_dropped = -1;
    st->total_steps = c->steps > 0 ? c->steps : 0; /* 0: the end of the data */
    st->step_timeout_ms = c->step_timeout_ms > 0 ? c->step_timeout_ms : 30000;
    st->no_overlap = c->no_overlap;
    st->backups = c->backup_workers;
    st->join = c->join;
    strategy_config(st, c);
    st->stragglers = psg_straggler_new(c->seed);
    if (!st->stragglers) {
        psg_error_set("out of memory");
        goto fail;
    }
    for (int i = 0; i < c->num_stragglers; i++)
        if (psg_straggler_add(st->stragglers, c->stragglers[i]) < 0) goto fail;
    if (build_strategy(st, opt, n, grads, vars) < 0 || build_counts(st) < 0) goto fail;
    return st;
fail:
    psg_error_wrap("--sync %s", st->cfg.strategy);
    psg_sync_train_destroy(&st);
    return NULL;
}

const psg_sync_graph_t *psg_sync_train_graph(const psg_sync_train_t *st) {
    return &st->sg;
}

int psg_sync_train_after_update(const psg_sync_train_t *st) {
    return st->strategy->chief_runner ? st->sg.chief_global_step.node : st->sg.train_op;
}

void psg_sync_train_add_ops(psg_sync_train_t *st, int worker_op, int after_op) {
    st->worker_op = worker_op;
    st->after_op = after_op;
}

void psg_sync_train_destroy(psg_sync_train_t **stp) {
    if (!stp || !*stp) return;
    psg_sync_train_t *st = *stp;
    if (st->runner) { /* the caller's error stays the one reported */
        char saved[1024];
        snprintf(saved, sizeof saved, "%s", psg_error_message());
        psg_sync_chief_join(&st->runner, NULL);
        psg_error_set("%s", saved);
    }
    psg_dist_session_destroy(&st->chief_sess);
    psg_dist_session_destroy(&st->live_sess);
    psg_dist_session_destroy(&st->peer_sess);
    psg_sync_replicas_destroy(&st->sr);
    psg_straggler_destroy(&st->stragglers);
    free(st->w.state);
    free(st->counts);
    for (int i = 0; i < 2; i++) psg_tensor_destroy(&st->prev_values[i]);
    free(st);
    *stp = NULL;
}

/* With a backup of every shard, after a failed step of the chief's (docs/replication.md):
 * its session fails over from the lost ps tasks, takes back what the failed step applied
 * anywhere, empties every accumulator at the global step and releases its tokens again, so
 * that every worker sends that step's gradient again and the step is applied once. -1 with
 * the step's own error kept when no ps task was lost or it cannot fail over. */
static int chief_failover(psg_sync_train_t *st) {
    char why[1024];
    snprintf(why, sizeof why, "%s", psg_error_message());
    psg_err_code_t code = psg_error_code();
    if (!st->cluster || !st->reissue || psg_cluster_ps_replicas(st->cluster) < 2 ||
        code == PSG_ERR_CLOSED)
        return -1;
    fprintf(st->out,
            "recovery: the chief's step after global step %" PRId64
            " failed (%s); probing the ps tasks\n",
            st->runner_gs, why);
    fflush(st->out);
    double t0 = psg_now_sec();
    int64_t probe = 1000, peer = psg_cluster_peer_timeout_ms(st->cluster);
    if (peer > 0 && peer < probe) probe = peer;
    int64_t wait = st->step_timeout_ms < 5000 ? st->step_timeout_ms : 5000;
    bool moved = false;
    if (psg_failover_recover(st->chief_sess, st->cluster, probe, wait, st->out, st->metrics,
                             st->runner_gs, &moved) < 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", psg_error_message());
        fprintf(st->out, "failover: %s\n", msg);
        fflush(st->out);
        return psg_error_set_code(code, "%s (no failover: %s)", why, msg);
    }
    /* none lost now, but a failover happened: a worker may have come back after the take's
     * timeout (its step held up to its own timeout), so the step is released again */
    if (!moved && !st->failed_over) return psg_error_set_code(code, "%s", why);
    st->failed_over = true;
    psg_tensor_t *gs = NULL;
    if (psg_dist_session_undo_failed(st->chief_sess, st->chief_step) < 0 ||
        psg_dist_callable_run(st->reissue, NULL, &gs) < 0)
        return psg_error_wrap("the chief's failover");
    fprintf(st->out,
            "failover: the chief took back its failed step's update and released the tokens of "
            "global step %" PRId64 " again (%.3f s): every worker sends that step's gradient "
            "again\n",
            psg_tensor_i64(gs)[0], psg_now_sec() - t0);
    fflush(st->out);
    psg_tensor_destroy(&gs);
    return 0;
}

/* The runner failed (not a clean close): says so at once and closes the token queue with an
 * error (the strategy's abort_op), so that every worker's step waiting on a token fails now,
 * naming the chief, instead of at its token timeout. The runner's error stays set. */
static void runner_abort(psg_sync_train_t *st) {
    psg_err_code_t code = psg_error_code();
    if (code == PSG_ERR_CLOSED) return;
    snprintf(st->runner_error, sizeof st->runner_error, "%s", psg_error_message());
    st->runner_code = code;
    st->runner_failed_at = st->chief_steps_run + 1;
    atomic_store(&st->runner_failed, true);
    fprintf(st->out,
            "sync replicas: the chief's runner failed at its step %" PRId64
            " (%s): %s; no more tokens\n",
            st->runner_failed_at, psg_error_code_name(code), st->runner_error);
    fflush(st->out);
    if (st->abort_step && psg_dist_callable_run(st->abort_step, NULL, NULL) < 0) {
        fprintf(st->out,
                "sync replicas: closing the token queue after the runner's failure failed too: "
                "%s\n",
                psg_error_message());
        fflush(st->out);
    }
    psg_error_set_code(code, "%s", st->runner_error);
}

/* The chief's step for psg_sync_chief_start: take, apply, advance, release. */
static int chief_run(void *ctx, int64_t *global_step) {
    psg_sync_train_t *st = ctx;
    psg_tensor_t *gs = NULL;
    for (int tries = 0; psg_dist_callable_run(st->chief_step, NULL, &gs) < 0; tries++)
        if (tries == 3 || chief_failover(st) < 0) {
            runner_abort(st);
            return -1;
        }
    st->chief_steps_run++;
    *global_step = st->runner_gs = psg_tensor_i64(gs)[0];
    psg_tensor_destroy(&gs);
    st->last_step_at = psg_now_sec(); /* the runner's thread only, read after the join */
    if (st->first_step_at == 0) st->first_step_at = st->last_step_at;
    return 0;
}

/* The session of the calls into other workers: it waits at most the peer timeout (or the
 * step timeout, if shorter) for a worker that is not up. */
static int peer_session(psg_sync_train_t *st) {
    if (st->peer_sess || !st->cluster) return 0;
    int64_t peer = psg_cluster_peer_timeout_ms(st->cluster);
    psg_dist_session_options_t o = {
        .cluster = st->cluster,
        .server = st->server,
        .step_timeout_ms = peer > 0 && peer < st->step_timeout_ms ? peer : st->step_timeout_ms,
        .id_stream = 3};
    return (st->peer_sess = psg_dist_session_new(st->g, &o)) ? 0 : -1;
}

/* Call k into another worker (sg.peer_calls_from), made at its first run on the session of
 * such calls: it waits at most the peer timeout (or the step timeout, if shorter) for a worker
 * that is not up, to register the partition or to run it. */
static psg_dist_callable_t *peer_call(psg_sync_train_t *st, int k) {
    if (st->calls[k]) return st->calls[k];
    if (peer_session(st) < 0) return NULL;
    const psg_sync_graph_t *sg = &st->sg;
    int i = k - 1;
    return st->calls[k] = psg_dist_session_make_callable(
               st->peer_sess ? st->peer_sess : st->sess, sg->calls[i].n_feeds, sg->calls[i].feeds,
               sg->calls[i].n_fetches, sg->calls[i].fetches, sg->calls[i].n_targets,
               sg->calls[i].targets);
}

/* The step's second form (sg.fast_step_op), made at its first run on the session of the
 * peer calls: its puts run on other workers. */
static int fast_step(psg_sync_train_t *st) {
    const psg_sync_graph_t *sg = &st->sg;
    if (st->fast_step) return 0;
    if (sg->fast_step_op < 0) return psg_error_set("the strategy has no second form of the step");
    if (peer_session(st) < 0) return -1;
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS + 1], fetches[MAX_FETCH] = {st->loss};
    memcpy(feeds, st->feeds, sizeof *feeds * (size_t)st->num_feeds);
    feeds[st->num_feeds] = sg->fast_key;
    int nf = 1 + psg_sync_graph_fetches(sg, fetches + 1);
    fetches[nf++] = sg->fast_fetch;
    int targets[3] = {sg->fast_step_op}, nt = 1;
    if (st->worker_op >= 0) targets[nt++] = st->worker_op;
    if (st->after_op >= 0 && !st->strategy->chief_runner) targets[nt++] = st->after_op;
    st->fast_step =
        psg_dist_session_make_callable(st->peer_sess ? st->peer_sess : st->sess, st->num_feeds + 1,
                                       feeds, nf, fetches, nt, targets);
    return st->fast_step ? 0 : -1;
}

/* Runs call k for the strategy's step function (sync/strategy.h). */
static int run_call(void *ctx, int k, psg_tensor_t *const *feeds, psg_tensor_t **fetched) {
    psg_sync_train_t *st = ctx;
    if (k > 0 && st->sg.peer_calls_from > 0 && k - 1 >= st->sg.peer_calls_from) {
        psg_dist_callable_t *c = peer_call(st, k);
        return c ? psg_dist_callable_run(c, feeds, fetched) : -1;
    }
    if (k > 0) return psg_dist_callable_run(st->calls[k], feeds, fetched);
    psg_tensor_t *fv[2 * PSG_MAX_TOWERS + 1];
    memcpy(fv, st->model_values, sizeof *fv * (size_t)st->num_feeds);
    if (k == PSG_SYNC_FAST_STEP) {
        fv[st->num_feeds] = feeds[0];
        return fast_step(st) < 0 ? -1 : psg_dist_callable_run(st->fast_step, fv, fetched);
    }
    if (psg_endpoint_valid(st->sg.local_step)) fv[st->num_feeds] = feeds[0];
    return psg_dist_callable_run(st->calls[0], fv, fetched);
}

/* The worker's step (the model's feeds, the local step; the loss and the strategy's
 * fetches) and the strategy's other calls. */
static int make_calls(psg_sync_train_t *st, psg_dist_session_t *s) {
    psg_sync_graph_t *sg = &st->sg;
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS + 1], fetches[MAX_FETCH] = {st->loss};
    memcpy(feeds, st->feeds, sizeof *feeds * (size_t)st->num_feeds);
    int nfeeds = st->num_feeds;
    if (psg_endpoint_valid(sg->local_step)) feeds[nfeeds++] = sg->local_step;
    int nf = 1 + psg_sync_graph_fetches(sg, fetches + 1);
    int targets[3], nt = 0;
    targets[nt++] = sg->train_op;
    if (st->worker_op >= 0) targets[nt++] = st->worker_op;
    if (st->after_op >= 0 && !st->strategy->chief_runner) targets[nt++] = st->after_op;
    st->calls[0] = psg_dist_session_make_callable(s, nfeeds, feeds, nf, fetches, nt, targets);
    if (!st->calls[0]) return -1;
    if (sg->overlap && !st->no_overlap) psg_dist_callable_set_overlap(st->calls[0], true);
    if (sg->ahead && !st->no_overlap) psg_dist_callable_set_ahead(st->calls[0], true);
    for (int k = 0; k < sg->num_calls && (sg->peer_calls_from <= 0 || k < sg->peer_calls_from);
         k++) {
        st->calls[k + 1] = psg_dist_session_make_callable(
            s, sg->calls[k].n_feeds, sg->calls[k].feeds, sg->calls[k].n_fetches,
            sg->calls[k].fetches, sg->calls[k].n_targets, sg->calls[k].targets);
        if (!st->calls[k + 1]) return -1;
    }
    if (sg->close_op >= 0 &&
        !(st->close_step = psg_dist_session_make_callable(s, 0, NULL, 0, NULL, 1, &sg->close_op)))
        return -1;
    if (psg_endpoint_valid(sg->rejoin_token) &&
        !(st->rejoin =
              psg_dist_session_make_callable(s, 1, &sg->local_step, 1, &sg->rejoin_token, 0, NULL)))
        return -1;
    st->w = (psg_sync_worker_t){&st->cfg, sg, run_call, st, 0, 0, NULL};
    return 0;
}

/* The chief's set_live_op (the strategy follows the live workers: psg_sync_train_set_live)
 * on a session of its own, for the membership's thread; none when the strategy has none. */
static int start_live(psg_sync_train_t *st, psg_dist_session_options_t *o) {
    const psg_sync_graph_t *sg = &st->sg;
    if (sg->set_live_op < 0) return 0;
    o->id_stream = 2;
    psg_endpoint_t all[2] = {sg->live_required, sg->live_mask}, feeds[2];
    int n = 0;
    for (int i = 0; i < 2; i++)
        if (psg_endpoint_valid(all[i])) feeds[n++] = all[i];
    if (!(st->live_sess = psg_dist_session_new(st->g, o)) ||
        !(st->live_step = psg_dist_session_make_callable(st->live_sess, n, feeds, 0, NULL, 1,
                                                         &sg->set_live_op)))
        return psg_error_wrap("the chief's count of live workers");
    return 0;
}

/* The chief's runner on its own session: a session is one caller's. */
static int start_runner(psg_sync_train_t *st, const psg_cluster_t *cluster,
                        psg_task_server_t *server) {
    psg_sync_graph_t *sg = &st->sg;
    psg_dist_session_options_t o = {.cluster = cluster,
                                    .server = server,
                                    .step_timeout_ms = st->step_timeout_ms,
                                    .id_stream = 1};
    if (!(st->chief_sess = psg_dist_session_new(st->g, &o))) return -1;
    int targets[2] = {sg->chief_op, st->after_op};
    st->chief_step = psg_dist_session_make_callable(
        st->chief_sess, 0, NULL, 1, &sg->chief_global_step, st->after_op >= 0 ? 2 : 1, targets);
    if (!st->chief_step) return psg_error_wrap("the chief's step");
    if (sg->reissue_op >= 0 &&
        !(st->reissue = psg_dist_session_make_callable(st->chief_sess, 0, NULL, 1, &sg->global_step,
                                                       1, &sg->reissue_op)))
        return psg_error_wrap("the chief's tokens after a failover");
    if (sg->abort_op >= 0 && !(st->abort_step = psg_dist_session_make_callable(
                                   st->chief_sess, 0, NULL, 0, NULL, 1, &sg->abort_op)))
        return psg_error_wrap("the chief's abort of the token queue");
    if (start_live(st, &o) < 0) return -1;
    st->runner_start = psg_now_sec();
    st->runner = psg_sync_chief_start(chief_run, st, st->total_steps);
    return st->runner ? 0 : -1;
}

int psg_sync_train_set_live(psg_sync_train_t *st, const bool *alive, int n) {
    const psg_sync_graph_t *sg = &st->sg;
    int workers = 0;
    for (int i = 0; i < n; i++) workers += alive[i];
    /* a loss spends the backups first (N kept while N workers live: the same batch a step),
     * then N; a worker that joins adds to N (the b backups kept) */
    int n0 = st->num_required, b = st->num_workers - n0;
    int required = workers < n0 ? workers : n0;
    if (workers - b > required) required = workers - b;
    if (!st->live_step) { /* nothing to set (async, easgd): the done line's count only */
        atomic_store(&st->live_required, required);
        atomic_store(&st->live_workers, workers);
        return 0;
    }
    psg_shape_t ms = psg_shape_1d(st->num_workers);
    psg_tensor_t *mask = psg_tensor_new(PSG_DT_I32, &ms), *feeds[2] = {0};
    for (int i = 0; mask && i < st->num_workers; i++) psg_tensor_i32(mask)[i] = i < n && alive[i];
    psg_tensor_t *all[2] = {psg_tensor_scalar_i64(required), mask};
    psg_endpoint_t eps[2] = {sg->live_required, sg->live_mask};
    int nf = 0, rc = all[0] && mask ? 0 : psg_error_set("out of memory");
    for (int i = 0; i < 2; i++)
        if (psg_endpoint_valid(eps[i])) feeds[nf++] = all[i];
    if (rc == 0) rc = psg_dist_callable_run(st->live_step, feeds, NULL);
    for (int i = 0; i < 2; i++) psg_tensor_destroy(&all[i]);
    if (rc < 0)
        return psg_error_wrap("--sync %s: following %d live workers", st->cfg.strategy, workers);
    atomic_store(&st->live_required, required);
    atomic_store(&st->live_workers, workers);
    if (!strcmp(st->cfg.strategy, "allreduce")) /* sync/allreduce_ring.c */
        fprintf(st->out,
                "membership: --sync allreduce now rings the %d live workers (the ring re-forms "
                "at their next step, from the chief's variables)\n",
                workers);
    else if (psg_endpoint_valid(sg->live_required))
        fprintf(st->out,
                "membership: --sync %s now averages %d of %d gradients a step (%d live workers)\n",
                st->cfg.strategy, required, workers, workers);
    else
        fprintf(st->out,
                "membership: --sync %s now waits for the %d live workers, each gradient divided "
                "by %d\n",
                st->cfg.strategy, workers, workers);
    fflush(st->out);
    return 0;
}

int psg_sync_train_init_local(psg_sync_train_t *st, psg_dist_session_t *s) {
    int op = st->sg.local_init_op;
    if (op < 0) return 0;
    return psg_dist_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &op) < 0
               ? psg_error_wrap("--sync %s: this worker's own variables", st->cfg.strategy)
               : 0;
}

int psg_sync_train_start(psg_sync_train_t *st, psg_dist_session_t *s, const psg_cluster_t *cluster,
                         psg_task_server_t *server, bool chief, FILE *metrics) {
    psg_sync_graph_t *sg = &st->sg;
    st->metrics = metrics;
    st->sess = s;
    st->chief = chief;
    st->server = server;
    st->cluster = cluster;
    psg_task_t me = psg_cluster_task(cluster);
    if (me.job) psg_device_name(me.job, me.index, NULL, st->task, sizeof st->task);
    if (metrics) setvbuf(metrics, NULL, _IOLBF, 0);
    if (make_calls(st, s) < 0)
        return psg_error_wrap("--sync %s: the worker's step", st->cfg.strategy);
    if (chief && sg->chief_init_op >= 0 &&
        psg_dist_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &sg->chief_init_op) < 0)
        return psg_error_wrap("--sync %s: the chief's init", st->cfg.strategy);
    if (sg->start_op >= 0 &&
        psg_dist_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &sg->start_op) < 0)
        return psg_error_wrap("--sync %s: the worker's start", st->cfg.strategy);
    psg_tensor_t *gs = NULL;
    if (psg_dist_session_run(s, 0, NULL, NULL, 1, &sg->global_step, &gs, 0, NULL) < 0)
        return psg_error_wrap("--sync %s: reading the global step", st->cfg.strategy);
    st->w.local_step = psg_tensor_i64(gs)[0];
    psg_tensor_destroy(&gs);
    if (st->join) { /* the chief admits it once it answers (worker/membership.c) */
        fprintf(st->out, "psgraph train: %s joins the running job at global step %" PRId64 "\n",
                st->task, st->w.local_step);
        fflush(st->out);
    }
    st->start_sec = psg_now_sec();
    if (server) psg_task_server_tensor_bytes(server, &st->served0, &st->pulled0);
    st->served_at = st->served0, st->pulled_at = st->pulled0;
    if (!chief) return 0;
    if (!st->strategy->chief_runner) {
        psg_dist_session_options_t o = {
            .cluster = cluster, .server = server, .step_timeout_ms = st->step_timeout_ms};
        return start_live(st, &o) < 0 ? psg_error_wrap("--sync %s", st->cfg.strategy) : 0;
    }
    return start_runner(st, cluster, server) < 0 ? psg_error_wrap("--sync %s", st->cfg.strategy)
                                                 : 0;
}

/* The --straggler delay before a step, keyed by the worker's own step count, not its
 * local step: local SGD keeps one local step for H steps (each would draw the same
 * delay, H times), and every strategy's j-th step then draws the same delay. */
static double straggle(psg_sync_train_t *st) {
    double ms = psg_straggler_sleep(st->stragglers, st->rank, st->w.steps);
    st->straggler_sec += ms * 1e-3;
    return ms;
}

/* The step on st->model_values (the model's feeds). */
static int step_fed(psg_sync_train_t *st, psg_tensor_t **loss, bool *over, double delay_ms) {
    psg_sync_step_t s;
    int64_t local = st->w.local_step;
    int rc = (st->strategy->step ? st->strategy->step : psg_sync_step_default)(&st->w, loss, &s);
    for (int i = 0; st->towers && i < st->num_feeds; i++) psg_tensor_destroy(&st->model_values[i]);
    if (rc < 0 && atomic_load(&st->runner_failed)) { /* its token never came: say why */
        char step_error[1024];
        snprintf(step_error, sizeof step_error, "%s", psg_error_message());
        return psg_error_set_code(st->runner_code,
                                  "the chief's runner failed at its step %" PRId64
                                  ", so no token came: %s (this step: %s)",
                                  st->runner_failed_at, st->runner_error, step_error);
    }
    if (rc < 0) return -1;
    if (st->rejoin && !st->towers && st->num_feeds == 2) {
        for (int i = 0; i < 2; i++) {
            psg_tensor_destroy(&st->prev_values[i]);
            st->prev_values[i] = psg_tensor_copy(st->model_values[i]);
        }
        st->prev_step = st->prev_values[0] && st->prev_values[1] ? local : -1;
    }
    s.straggler_ms = delay_ms;
    s.wall_sec = psg_now_sec() - st->start_sec;
    s.has_loss = *loss && (*loss)->dtype == PSG_DT_F32 && psg_tensor_numel(*loss) >= 1;
    if (s.has_loss) s.loss = psg_tensor_f32(*loss)[0];
    s.push_bytes = s.pull_bytes = -1;
    if (st->server) { /* this step's bytes: the counts' change since the last step */
        int64_t served = 0, pulled = 0;
        psg_task_server_tensor_bytes(st->server, &served, &pulled);
        s.push_bytes = served - st->served_at, s.pull_bytes = pulled - st->pulled_at;
        st->served_at = served, st->pulled_at = pulled;
    }
    st->w.steps++;
    psg_sync_stats_add(&st->stats, &s);
    if (st->metrics) {
        char line[1024];
        psg_sync_step_json(&s, st->rank, line, sizeof line);
        fprintf(st->metrics, "%s\n", line);
    }
    *over = st->over = s.next_step < 0;
    return 0;
}

int psg_sync_train_step(psg_sync_train_t *st, psg_tensor_t *images, psg_tensor_t *labels,
                        psg_tensor_t **loss, bool *over) {
    *loss = NULL;
    *over = false;
    double delay_ms = straggle(st);
    /* one tower: the batch itself; towers: views of its rows */
    st->model_values[0] = images;
    st->model_values[1] = labels;
    if (st->towers && psg_towers_split(st->towers, images, labels, st->model_values) < 0) return -1;
    return step_fed(st, loss, over, delay_ms);
}

int psg_sync_train_step_feeds(psg_sync_train_t *st, int n, psg_tensor_t *const *values,
                              psg_tensor_t **loss, bool *over) {
    *loss = NULL;
    *over = false;
    if (st->towers || n != st->num_feeds)
        return psg_error_set("--sync %s: %d feeds for a step of %d%s", st->cfg.strategy, n,
                             st->num_feeds, st->towers ? " with towers" : "");
    double delay_ms = straggle(st);
    for (int i = 0; i < n; i++) st->model_values[i] = values[i];
    return step_fed(st, loss, over, delay_ms);
}

bool psg_sync_train_can_rejoin(const psg_sync_train_t *st) {
    return st->rejoin && st->cluster && psg_cluster_ps_replicas(st->cluster) > 1;
}

/* The last step again, from local step prev_step (its update was taken back). */
static int replay_prev(psg_sync_train_t *st) {
    psg_tensor_t *loss = NULL;
    psg_sync_step_t s;
    st->model_values[0] = st->prev_values[0];
    st->model_values[1] = st->prev_values[1];
    st->w.local_step = st->prev_step;
    int rc = (st->strategy->step ? st->strategy->step : psg_sync_step_default)(&st->w, &loss, &s);
    psg_tensor_destroy(&loss);
    return rc;
}

int psg_sync_train_rejoin(psg_sync_train_t *st, bool *applied) {
    *applied = false;
    if (!st->rejoin) return psg_error_set("--sync %s: no token to rejoin with", st->cfg.strategy);
    /* any token: the queue of the lost ps is a new one, which holds only the chief's
     * release of the step that runs again (it may be the step this worker failed in, the one
     * after when that step was applied, or the one before when its update was taken back) */
    psg_tensor_t *after = psg_tensor_scalar_i64(-1), *token = NULL;
    if (!after) return psg_error_set("out of memory");
    int rc = psg_dist_callable_run(st->rejoin, &after, &token);
    psg_tensor_destroy(&after);
    if (rc < 0) return psg_error_wrap("--sync %s: rejoining after a failover", st->cfg.strategy);
    int64_t t = psg_tensor_i64(token)[0];
    psg_tensor_destroy(&token);
    /* -1: training ended meanwhile; the step then sees the queue closed */
    if (t < 0) return 0;
    int64_t was = st->w.local_step;
    bool replay = t + 1 == was && t == st->prev_step && st->prev_values[0];
    fprintf(st->out,
            "failover: %s rejoins at global step %" PRId64 " (its step failed at %" PRId64 "%s)\n",
            st->task[0] ? st->task : "the worker", t, was,
            t == was + 1 ? ": that step was applied"
            : replay     ? ": the step before it runs again first"
                         : "");
    fflush(st->out);
    *applied = t == was + 1;
    st->w.local_step = t;
    if (replay && replay_prev(st) < 0)
        return psg_error_wrap("--sync %s: the step before the failover again", st->cfg.strategy);
    return 0;
}

/* This worker's row of the job's counts, added to the variable on the ps. */
static int report_counts(psg_sync_train_t *st, double examples_per_sec) {
    psg_shape_t cs = psg_shape_2d(st->num_workers, COUNTS);
    psg_tensor_t *delta = psg_tensor_zeros(PSG_DT_F32, &cs);
    if (!delta) return psg_error_set("out of memory");
    float *row = psg_tensor_f32(delta) + COUNTS * st->rank;
    const psg_sync_stats_t *s = &st->stats;
    int64_t served = 0, pulled = 0;
    if (st->server) psg_task_server_tensor_bytes(st->server, &served, &pulled);
    double steps = s->steps > 0 ? (double)s->steps : 1;
    float r[COUNTS] = {(float)s->used,
                       (float)s->dropped,
                       1,
                       (float)examples_per_sec,
                       (float)s->stale_n,
                       (float)s->stale_sum,
                       (float)s->stale_min,
                       (float)s->stale_max,
                       (float)((double)(served - st->served0) / steps),
                       (float)((double)(pulled - st->pulled0) / steps),
                       (float)s->dropped_stale,
                       (float)s->dropped_partial,
                       (float)s->dropped_closed};
    memcpy(row, r, sizeof r);
    int rc = psg_dist_session_run(st->sess, 1, &st->counts_delta, &delta, 0, NULL, NULL, 1,
                                  &st->counts_add);
    psg_tensor_destroy(&delta);
    return rc < 0 ? psg_error_wrap("--sync %s: reporting the counts", st->cfg.strategy) : 0;
}

int psg_sync_train_finish(psg_sync_train_t *st, double examples_per_sec) {
    if (st->finished) return 0;
    st->finished = true;
    st->end_sec = psg_now_sec();
    int rc = 0;
    /* out of data before the queue closed: end it for everyone, cleanly */
    if (!st->over && st->close_step && psg_dist_callable_run(st->close_step, NULL, NULL) < 0)
        rc = psg_error_wrap("--sync %s: closing the token queue", st->cfg.strategy);
    if (report_counts(st, examples_per_sec) < 0 && rc == 0) rc = -1;
    if (st->runner) {
        int jr = psg_sync_chief_join(&st->runner, &st->chief_steps);
        st->runner_sec = psg_now_sec() - st->runner_start;
        if (jr < 0 && rc == 0) rc = -1;
    }
    char line[1800], stale[800];
    psg_sync_stats_staleness_json(&st->stats, stale, sizeof stale);
    snprintf(line, sizeof line,
             "{\"event\":\"sync_summary\",\"worker\":%d,\"sync\":\"%s\",\"steps\":%" PRId64
             ",\"gradients_used\":%" PRId64 ",\"gradients_dropped\":%" PRId64
             ",\"dropped\":{\"stale\":%" PRId64 ",\"partial\":%" PRId64 ",\"closed\":%" PRId64 "}"
             ",\"compute_sec\":%.3f,\"token_wait_sec\":%.3f,\"wait_sec\":%.3f,"
             "\"straggler_sec\":%.3f,%s}",
             st->rank, st->cfg.strategy, st->stats.steps, st->stats.used, st->stats.dropped,
             st->stats.dropped_stale, st->stats.dropped_partial, st->stats.dropped_closed,
             st->stats.compute_sec, st->stats.token_wait_sec, st->stats.wait_sec, st->straggler_sec,
             stale);
    /* "worker" is the rank (--straggler worker=N's); the task names it as the cluster does
     * (with a "chief" job, /job:worker/task:0 is rank 1), as metrics.jsonl's prefix does */
    const char *head = "{\"event\":\"sync_summary\",";
    if (st->task[0])
        fprintf(st->out, "%s\"task\":\"%s\",%s\n", head, st->task, line + strlen(head));
    else
        fprintf(st->out, "%s\n", line);
    fflush(st->out);
    if (st->metrics) fprintf(st->metrics, "%s\n", line);
    return rc;
}

/* The number after "key": in s, or -1. */
static int64_t json_int(const char *s, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(s, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The gradients as the ps counted them: the first accumulator's (every gradient is offered
 * to every accumulator); -1 when there is none. */
static void count_accumulators(psg_sync_train_t *st, psg_dist_session_t *s,
                               const psg_cluster_t *cluster) {
    int64_t used = -1, dropped = -1;
    int nps = psg_cluster_num_tasks(cluster, "ps");
    for (int i = 0; i < nps && used < 0; i++) {
        char task[64];
        snprintf(task, sizeof task, "/job:ps/task:%d", i);
        char *json = psg_dist_session_inspect(s, task);
        const char *acc = json ? strstr(json, "\"accumulators\":[{") : NULL;
        if (acc) {
            used = json_int(acc, "accepted");
            dropped = json_int(acc, "stale") + json_int(acc, "late") + json_int(acc, "closed");
        }
        free(json);
    }
    st->ps_used = used;
    st->ps_dropped = dropped;
}

void psg_sync_train_count(psg_sync_train_t *st, psg_dist_session_t *s,
                          const psg_cluster_t *cluster) {
    count_accumulators(st, s, cluster);
    psg_tensor_t *counts = NULL, *gs = NULL;
    if (psg_dist_session_run(s, 0, NULL, NULL, 1, &st->counts_read, &counts, 0, NULL) == 0 &&
        psg_tensor_numel(counts) == COUNTS * st->num_workers &&
        (st->counts = malloc(sizeof(float) * COUNTS * (size_t)st->num_workers)))
        memcpy(st->counts, psg_tensor_f32(counts),
               sizeof(float) * COUNTS * (size_t)st->num_workers);
    psg_tensor_destroy(&counts);
    if (psg_dist_session_run(s, 0, NULL, NULL, 1, &st->sg.global_step, &gs, 0, NULL) == 0)
        st->global_steps = psg_tensor_i64(gs)[0];
    psg_tensor_destroy(&gs);
}

int64_t psg_sync_train_global_steps(const psg_sync_train_t *st) {
    return st->strategy->chief_runner ? st->chief_steps : st->global_steps;
}

int64_t psg_sync_train_token_step(const psg_sync_train_t *st) {
    /* local SGD's and DiLoCo's runners count rounds, their tokens a round's first step */
    return !strcmp(st->cfg.strategy, "sync") ? st->w.local_step : -1;
}

/* The job's staleness from the workers' rows into *out (stale_* fields only). */
static void job_staleness(const psg_sync_train_t *st, psg_sync_stats_t *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; st->counts && i < st->num_workers; i++) {
        const float *r = st->counts + COUNTS * i;
        if (r[2] <= 0 || r[4] <= 0) continue;
        int64_t mn = (int64_t)r[6], mx = (int64_t)r[7];
        if (out->stale_n == 0 || mn < out->stale_min) out->stale_min = mn;
        if (out->stale_n == 0 || mx > out->stale_max) out->stale_max = mx;
        out->stale_n += (int64_t)r[4];
        out->stale_sum += (int64_t)r[5];
    }
}

/* The tensor bytes a worker pushed and pulled a step, as the workers' task servers counted
 * them: the mean over the workers other than the chief (whose evaluations pull the model
 * too), or the chief's when it is alone. */
static void measured_bytes(const psg_sync_train_t *st, double *push, double *pull) {
    int n = 0;
    for (int pass = 0; pass < 2 && n == 0; pass++)
        for (int i = pass ? 0 : 1; st->counts && i < (pass ? 1 : st->num_workers); i++) {
            const float *r = st->counts + COUNTS * i;
            if (r[2] <= 0) continue;
            *push += r[8];
            *pull += r[9];
            n++;
        }
    if (n > 0) *push /= n, *pull /= n;
}

double psg_sync_train_steps_per_sec(const psg_sync_train_t *st) {
    /* the pace between the first and the last global step: not the start-up (the other
     * workers' registration, the first step's plans) */
    double span = st->last_step_at - st->first_step_at;
    int64_t steps = psg_sync_train_global_steps(st);
    return st->chief_steps > 1 && span > 0 ? (double)(st->chief_steps - 1) / span
           : st->runner_sec > 0            ? (double)st->chief_steps / st->runner_sec
           : st->end_sec > st->start_sec   ? (double)steps / (st->end_sec - st->start_sec)
                                           : 0;
}

void psg_sync_train_json(const psg_sync_train_t *st, char *buf, size_t size) {
    int64_t steps = psg_sync_train_global_steps(st);
    double sps = psg_sync_train_steps_per_sec(st);
    /* the ps's accumulators count since they were made: a ps that restarted (recovery)
     * counts from then on, so what the workers reported, each of its own, wins when more */
    int64_t used = st->ps_used, dropped = st->ps_dropped, w_used = 0, w_dropped = 0;
    for (int i = 0; st->counts && i < st->num_workers; i++) {
        w_used += (int64_t)st->counts[COUNTS * i];
        w_dropped += (int64_t)st->counts[COUNTS * i + 1];
    }
    if (st->counts && w_used > used) used = w_used, dropped = w_dropped;
    psg_sync_stats_t js;
    job_staleness(st, &js);
    char stale[160];
    psg_sync_stats_staleness_json(&js, stale, sizeof stale);
    double comm = st->sg.comm_per_step > 0 ? st->sg.comm_per_step : 1, push = 0, pull = 0;
    measured_bytes(st, &push, &pull);
    snprintf(buf, size,
             "\"sync\":\"%s\",\"replicas_to_aggregate\":%d,\"replicas_to_aggregate_live\":%d,"
             "\"workers_live\":%d,\"backup_workers\":%d,\"global_steps\":%" PRId64
             ",\"steps_per_sec\":%.3f,\"gradients_used\":%" PRId64 ",\"gradients_dropped\":%" PRId64
             ",%s,\"push_bytes_per_step\":%.0f,"
             "\"pull_bytes_per_step\":%.0f,\"model_push_bytes_per_step\":%.0f,"
             "\"model_pull_bytes_per_step\":%.0f,",
             st->cfg.strategy, st->num_required, atomic_load(&st->live_required),
             atomic_load(&st->live_workers), st->backups, steps, sps, used, dropped, stale, push,
             pull, (double)st->model_bytes * comm * (st->sg.push_scale > 0 ? st->sg.push_scale : 1),
             (double)st->model_bytes * comm);
    /* "per_worker":[[used, dropped], ..., null (never reported: dead)], and
     * "per_worker_dropped":[{"stale":s,"partial":p,"closed":c}, ..., null] */
    size_t len = strlen(buf);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; st->counts && i < st->num_workers && len + 96 < size; i++) {
            const float *r = st->counts + COUNTS * i;
            len += (size_t)snprintf(buf + len, size - len, "%s",
                                    i           ? ","
                                    : pass == 0 ? "\"per_worker\":["
                                                : "\"per_worker_dropped\":[");
            if (r[2] <= 0)
                len += (size_t)snprintf(buf + len, size - len, "null");
            else if (pass == 0)
                len += (size_t)snprintf(buf + len, size - len, "[%.0f,%.0f]", r[0], r[1]);
            else
                len += (size_t)snprintf(buf + len, size - len,
                                        "{\"stale\":%.0f,\"partial\":%.0f,\"closed\":%.0f}", r[10],
                                        r[11], r[12]);
            if (i + 1 == st->num_workers) len += (size_t)snprintf(buf + len, size - len, "],");
        }
}

int psg_sync_train_worker_rates(const psg_sync_train_t *st, double *rates) {
    for (int i = 0; st->counts && i < st->num_workers; i++) {
        const float *r = st->counts + COUNTS * i;
        rates[i] = r[2] > 0 ? r[3] : -1;
    }
    return st->counts ? st->num_workers : 0;
}
