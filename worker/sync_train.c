/* `psgraph train --sync sync` in a cluster: the worker's sync replica, its
 * steps with tokens and statistics, stragglers, the chief's runner on its
 * own distributed session, the clean end and the summary (sync_train.h).
 * The protocol itself is sync/variant_sync.c's; the resources are the ps's. */
#include "worker/sync_train.h"

#include "psgraph/clock.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/straggler.h"
#include "psgraph/sync_replicas.h"
#include "psgraph/towers.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct psg_sync_train {
    psg_sync_replicas_t *sr;
    psg_sync_graph_t sg;
    psg_straggler_t *stragglers;
    psg_graph_t *g;
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS]; /* images, labels of each tower */
    int num_feeds;
    const psg_towers_t *towers; /* borrowed; NULL: one tower */
    psg_endpoint_t loss;
    int worker_op, chief_op; /* psg_sync_train_add_ops: -1 none */
    int rank, num_workers, num_required, backups;
    int64_t step_timeout_ms;
    FILE *out, *metrics;
    /* running */
    psg_dist_callable_t *step;       /* owned by the worker's session */
    psg_dist_session_t *chief_sess;  /* the chief's runner's own session */
    psg_dist_callable_t *chief_step; /* owned by chief_sess */
    psg_dist_callable_t *close_step; /* owned by the worker's session */
    psg_dist_session_t *sess;        /* the worker's (borrowed) */
    psg_sync_chief_t *runner;
    int64_t local_step, chief_steps, total_steps;
    bool over, finished;
    double runner_start, runner_sec, straggler_sec;
    double first_step_at, last_step_at; /* when the runner's first and last steps ended */
    psg_sync_stats_t stats;
    int64_t ps_used, ps_dropped; /* psg_sync_train_count; -1: unknown */
    /* each worker's counts, reported at its end: a [workers, 4] f32 variable on a ps
     * (used, dropped, reported, examples/sec) that each worker adds its row to */
    psg_endpoint_t counts_delta, counts_read;
    int counts_add;
    float *counts; /* [workers * COUNTS], read by the chief's count; NULL: not read */
};

#define COUNTS 4 /* the columns of a worker's row of counts */

/* The global step that ends training: --steps, or 0 (the end of the data). */
static int64_t cfg_total(const psg_train_config_t *c) {
    return c->steps > 0 ? c->steps : 0;
}

bool psg_sync_train_wanted(const psg_train_config_t *c) {
    return c->sync && !strcmp(c->sync, "sync");
}

/* The replica's sync graph for grads of vars (NULL grads: the gradients of
 * loss, psg_sync_replicas_minimize) and the job's counts. */
static psg_sync_train_t *sync_train_new(const psg_train_config_t *c, psg_graph_t *g,
                                        psg_optimizer_t *opt, psg_endpoint_t loss, int n,
                                        const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                                        int rank, int num_workers, FILE *out) {
    psg_sync_train_t *st = calloc(1, sizeof *st);
    if (!st) {
        psg_error_set("out of memory");
        return NULL;
    }
    st->g = g;
    st->worker_op = st->chief_op = -1;
    st->loss = loss;
    st->rank = rank;
    st->num_workers = num_workers;
    st->out = out;
    st->ps_used = st->ps_dropped = -1;
    st->total_steps = cfg_total(c);
    st->step_timeout_ms = c->step_timeout_ms > 0 ? c->step_timeout_ms : 30000;
    psg_sync_config_t cfg;
    psg_sync_config_defaults(&cfg);
    cfg.num_workers = num_workers;
    cfg.replicas_to_aggregate = c->replicas_to_aggregate;
    cfg.backup_workers = c->backup_workers;
    cfg.worker_index = rank;
    cfg.total_steps = st->total_steps;
    /* the ps answers a take or a token that does not come before the session gives
     * up on the step, so the error says what was waited for */
    cfg.timeout_ms = st->step_timeout_ms * 3 / 4 > 0 ? st->step_timeout_ms * 3 / 4 : 1;
    st->stragglers = psg_straggler_new(c->seed);
    if (!st->stragglers) {
        psg_error_set("out of memory");
        goto fail;
    }
    for (int i = 0; i < c->num_stragglers; i++)
        if (psg_straggler_add(st->stragglers, c->stragglers[i]) < 0) goto fail;
    if (!(st->sr = psg_sync_replicas_new(opt, &cfg))) goto fail;
    st->num_required = psg_sync_replicas_num_required(st->sr);
    st->backups = c->backup_workers;
    if ((grads ? psg_sync_replicas_apply_gradients(st->sr, g, n, grads, vars, &st->sg)
               : psg_sync_replicas_minimize(st->sr, g, loss, &st->sg)) < 0)
        goto fail;
    psg_shape_t cs = psg_shape_2d(num_workers, COUNTS);
    psg_endpoint_t cv = psg_variable(g, "sync_replicas/worker_counts", PSG_DT_F32, &cs,
                                     (psg_initializer_t){"zeros", 0, 0}, false);
    st->counts_delta = psg_placeholder(g, "sync_replicas/worker_counts_delta", PSG_DT_F32, &cs);
    st->counts_add = psg_assign_add(g, "sync_replicas/report_counts", cv, st->counts_delta);
    st->counts_read = psg_read_variable(g, "sync_replicas/worker_counts/read", cv);
    if (psg_graph_error(g)) {
        psg_error_set("%s", psg_graph_error(g));
        goto fail;
    }
    return st;
fail:
    psg_error_wrap("--sync sync");
    psg_sync_train_destroy(&st);
    return NULL;
}

psg_sync_train_t *psg_sync_train_new(const psg_train_config_t *c, psg_graph_t *g,
                                     psg_optimizer_t *opt, psg_endpoint_t loss,
                                     psg_endpoint_t images, psg_endpoint_t labels, int rank,
                                     int num_workers, FILE *out) {
    psg_sync_train_t *st = sync_train_new(c, g, opt, loss, 0, NULL, NULL, rank, num_workers, out);
    if (!st) return NULL;
    st->feeds[0] = images;
    st->feeds[1] = labels;
    st->num_feeds = 2;
    return st;
}

psg_sync_train_t *psg_sync_train_new_towers(const psg_train_config_t *c, psg_graph_t *g,
                                            psg_optimizer_t *opt, const psg_towers_t *t, int n,
                                            const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                                            int rank, int num_workers, FILE *out) {
    if (!grads) {
        psg_error_set("--sync sync: towers without gradients");
        return NULL;
    }
    psg_sync_train_t *st =
        sync_train_new(c, g, opt, t->loss, n, grads, vars, rank, num_workers, out);
    if (!st) return NULL;
    st->towers = t;
    st->num_feeds = 2 * t->num_towers;
    psg_towers_feeds(t, st->feeds);
    return st;
}

const psg_sync_graph_t *psg_sync_train_graph(const psg_sync_train_t *st) {
    return &st->sg;
}

void psg_sync_train_add_ops(psg_sync_train_t *st, int worker_op, int chief_op) {
    st->worker_op = worker_op;
    st->chief_op = chief_op;
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
    psg_sync_replicas_destroy(&st->sr);
    psg_straggler_destroy(&st->stragglers);
    free(st->counts);
    free(st);
    *stp = NULL;
}

/* The chief's step for psg_sync_chief_start: take, apply, advance, release. */
static int chief_run(void *ctx, int64_t *global_step) {
    psg_sync_train_t *st = ctx;
    psg_tensor_t *gs = NULL;
    if (psg_dist_callable_run(st->chief_step, NULL, &gs) < 0) return -1;
    *global_step = psg_tensor_i64(gs)[0];
    psg_tensor_destroy(&gs);
    st->last_step_at = psg_now_sec(); /* the runner's thread only, read after the join */
    if (st->first_step_at == 0) st->first_step_at = st->last_step_at;
    return 0;
}

int psg_sync_train_start(psg_sync_train_t *st, psg_dist_session_t *s, const psg_cluster_t *cluster,
                         psg_task_server_t *server, bool chief, FILE *metrics) {
    psg_sync_graph_t *sg = &st->sg;
    st->metrics = metrics;
    st->sess = s;
    if (metrics) setvbuf(metrics, NULL, _IOLBF, 0);
    /* the towers' images and labels, then the local step */
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS + 1], fetches[4] = {st->loss};
    memcpy(feeds, st->feeds, sizeof *feeds * (size_t)st->num_feeds);
    feeds[st->num_feeds] = sg->local_step;
    int nf = 1 + psg_sync_graph_fetches(sg, fetches + 1);
    int targets[2] = {sg->train_op, st->worker_op}, chief_targets[2] = {sg->chief_op, st->chief_op};
    st->step = psg_dist_session_make_callable(s, st->num_feeds + 1, feeds, nf, fetches,
                                              st->worker_op >= 0 ? 2 : 1, targets);
    st->close_step =
        st->step ? psg_dist_session_make_callable(s, 0, NULL, 0, NULL, 1, &sg->close_op) : NULL;
    if (!st->close_step) return psg_error_wrap("--sync sync: the worker's step");
    if (chief && psg_dist_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &sg->chief_init_op) < 0)
        return psg_error_wrap("--sync sync: the chief's init");
    psg_tensor_t *gs = NULL;
    if (psg_dist_session_run(s, 0, NULL, NULL, 1, &sg->global_step, &gs, 0, NULL) < 0)
        return psg_error_wrap("--sync sync: reading the global step");
    st->local_step = psg_tensor_i64(gs)[0];
    psg_tensor_destroy(&gs);
    if (!chief) return 0;
    /* the runner's steps go on beside the chief's own: a session is one caller's */
    psg_dist_session_options_t o = {.cluster = cluster,
                                    .server = server,
                                    .step_timeout_ms = st->step_timeout_ms,
                                    .id_stream = 1};
    if (!(st->chief_sess = psg_dist_session_new(st->g, &o))) return -1;
    st->chief_step = psg_dist_session_make_callable(st->chief_sess, 0, NULL, 1,
                                                    &sg->chief_global_step,
                                                    st->chief_op >= 0 ? 2 : 1, chief_targets);
    if (!st->chief_step) return psg_error_wrap("--sync sync: the chief's step");
    st->runner_start = psg_now_sec();
    st->runner = psg_sync_chief_start(chief_run, st, st->total_steps);
    return st->runner ? 0 : -1;
}

int psg_sync_train_step(psg_sync_train_t *st, psg_tensor_t *images, psg_tensor_t *labels,
                        psg_tensor_t **loss, bool *over) {
    *loss = NULL;
    *over = false;
    double t0 = psg_now_sec();
    st->straggler_sec += psg_straggler_sleep(st->stragglers, st->rank, st->local_step) * 1e-3;
    /* one tower: the batch itself; towers: views of its rows, then the local step */
    psg_tensor_t *fv[2 * PSG_MAX_TOWERS + 1] = {images, labels}, *fetched[4] = {0};
    if (st->towers && psg_towers_split(st->towers, images, labels, fv) < 0) return -1;
    psg_tensor_t *ls = psg_tensor_scalar_i64(st->local_step);
    int rc = ls ? 0 : psg_error_set("out of memory");
    fv[st->num_feeds] = ls;
    if (rc == 0) rc = psg_dist_callable_run(st->step, fv, fetched);
    psg_tensor_destroy(&ls);
    for (int i = 0; st->towers && i < st->num_feeds; i++)
        psg_tensor_destroy(&fv[i]);
    psg_sync_step_t s;
    if (rc == 0) rc = psg_sync_step_read(&st->sg, fetched + 1, st->local_step, psg_now_sec() - t0, &s);
    if (rc == 0) {
        psg_sync_stats_add(&st->stats, &s);
        if (st->metrics) {
            char line[512];
            psg_sync_step_json(&s, st->rank, line, sizeof line);
            fprintf(st->metrics, "%s\n", line);
        }
        st->local_step = s.next_step;
        *over = st->over = s.next_step < 0;
        *loss = fetched[0];
        fetched[0] = NULL;
    }
    for (int i = 0; i < 4; i++)
        psg_tensor_destroy(&fetched[i]);
    return rc;
}

int psg_sync_train_finish(psg_sync_train_t *st, double examples_per_sec) {
    if (st->finished) return 0;
    st->finished = true;
    int rc = 0;
    /* out of data before the queue closed: end it for everyone, cleanly */
    if (!st->over && psg_dist_callable_run(st->close_step, NULL, NULL) < 0)
        rc = psg_error_wrap("--sync sync: closing the token queue");
    /* this worker's row of the job's counts, for the chief's final line */
    psg_shape_t cs = psg_shape_2d(st->num_workers, COUNTS);
    psg_tensor_t *delta = psg_tensor_zeros(PSG_DT_F32, &cs);
    if (!delta) return psg_error_set("out of memory");
    float *row = psg_tensor_f32(delta) + COUNTS * st->rank;
    row[0] = (float)st->stats.used;
    row[1] = (float)st->stats.dropped;
    row[2] = 1;
    row[3] = (float)examples_per_sec;
    if (psg_dist_session_run(st->sess, 1, &st->counts_delta, &delta, 0, NULL, NULL, 1,
                             &st->counts_add) < 0 &&
        rc == 0)
        rc = psg_error_wrap("--sync sync: reporting the counts");
    psg_tensor_destroy(&delta);
    if (st->runner) {
        int jr = psg_sync_chief_join(&st->runner, &st->chief_steps);
        st->runner_sec = psg_now_sec() - st->runner_start;
        if (jr < 0 && rc == 0) rc = -1;
    }
    char line[768];
    snprintf(line, sizeof line,
             "{\"event\":\"sync_summary\",\"worker\":%d,\"steps\":%" PRId64
             ",\"gradients_used\":%" PRId64 ",\"gradients_dropped\":%" PRId64
             ",\"compute_sec\":%.3f,\"token_wait_sec\":%.3f,"
             "\"straggler_sec\":%.3f}",
             st->rank, st->stats.steps, st->stats.used, st->stats.dropped, st->stats.compute_sec,
             st->stats.token_wait_sec, st->straggler_sec);
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

void psg_sync_train_count(psg_sync_train_t *st, psg_dist_session_t *s,
                          const psg_cluster_t *cluster) {
    /* the gradients as the ps counted them: the first accumulator's (every
     * gradient is offered to every accumulator) */
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
    psg_tensor_t *counts = NULL;
    if (psg_dist_session_run(s, 0, NULL, NULL, 1, &st->counts_read, &counts, 0, NULL) == 0 &&
        psg_tensor_numel(counts) == COUNTS * st->num_workers &&
        (st->counts = malloc(sizeof(float) * COUNTS * (size_t)st->num_workers)))
        memcpy(st->counts, psg_tensor_f32(counts), sizeof(float) * COUNTS * (size_t)st->num_workers);
    psg_tensor_destroy(&counts);
}

void psg_sync_train_json(const psg_sync_train_t *st, char *buf, size_t size) {
    /* the pace between the first and the last global step: not the start-up (the
     * other workers' registration, the first step's plans) */
    double span = st->last_step_at - st->first_step_at;
    double sps = st->chief_steps > 1 && span > 0 ? (double)(st->chief_steps - 1) / span
                 : st->runner_sec > 0            ? (double)st->chief_steps / st->runner_sec
                                                 : 0;
    snprintf(buf, size,
             "\"sync\":\"sync\",\"replicas_to_aggregate\":%d,\"backup_workers\":%d,"
             "\"global_steps\":%" PRId64 ",\"steps_per_sec\":%.3f,\"gradients_used\":%" PRId64
             ",\"gradients_dropped\":%" PRId64 ",",
             st->num_required, st->backups, st->chief_steps, sps, st->ps_used, st->ps_dropped);
    /* "per_worker":[[used, dropped], ..., null (never reported: dead)] */
    size_t len = strlen(buf);
    for (int i = 0; st->counts && i < st->num_workers && len + 64 < size; i++) {
        const float *r = st->counts + COUNTS * i;
        len += (size_t)snprintf(buf + len, size - len, "%s", i ? "," : "\"per_worker\":[");
        if (r[2] > 0)
            len += (size_t)snprintf(buf + len, size - len, "[%.0f,%.0f]", r[0], r[1]);
        else
            len += (size_t)snprintf(buf + len, size - len, "null");
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
