/* The training loop of `psgraph train --model wide-deep --data criteo`: a Criteo-format
 * file read whole, its first 90% trained on in file order (each worker of a cluster takes
 * every W-th batch), lazy Adam on the table's touched rows and Adam on the rest, the last
 * 10% evaluated (AUC, log-loss), and a done-JSON with examples/sec and, in a cluster, the
 * tensor bytes a step pulled and pushed. Not the image trainer (worker/trainer.c). */
#include "ops/cpu/sparse.h"
#include "psgraph/clock.h"
#include "psgraph/criteo.h"
#include "psgraph/dist_session.h"
#include "psgraph/error.h"
#include "psgraph/optimizer.h"
#include "psgraph/session.h"
#include "psgraph/trainer.h"
#include "psgraph/wide_deep.h"
#include "worker/cluster_ckpt.h"
#include "worker/ctr_train.h"
#include "worker/membership.h"
#include "worker/sync_train.h"
#include "worker/train_hooks.h"
#include "worker/worker_task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_BATCH 4096
#define WARMUP_STEPS 20
#define BYTES_FROM 2 /* steps before the bytes a step moves are counted (registration, init) */

typedef struct {
    psg_ctr_data_t *data;
    psg_graph_t *g;
    psg_wide_deep_t m;
    psg_optimizer_t *opt;
    psg_session_t *sess;
    psg_callable_t *step, *eval;
    psg_worker_task_t w;
    psg_dist_session_t *dsess;
    psg_dist_callable_t *dstep, *deval;
    psg_train_hooks_t *hooks;
    psg_sync_train_t *sync;    /* --sync sync: the strategy's steps (worker/sync_train.c) */
    psg_membership_t *members; /* the chief's: the live workers (worker/membership.c) */
    FILE *metrics;
    psg_train_config_t hooks_config; /* what the hooks borrow: lives as long as they do */
} ctr_t;

static void ctr_free(ctr_t *t) {
    psg_sync_train_destroy(&t->sync);
    psg_train_hooks_destroy(&t->hooks);
    psg_callable_destroy(&t->step);
    psg_callable_destroy(&t->eval);
    psg_session_destroy(&t->sess);
    psg_membership_destroy(&t->members);
    psg_dist_session_destroy(&t->dsess);
    psg_worker_task_leave(&t->w);
    psg_optimizer_destroy(&t->opt);
    psg_graph_destroy(&t->g);
    psg_ctr_destroy(&t->data);
    if (t->metrics) fclose(t->metrics);
}

/* Rows [at, at + n) of the data as the three feeds. */
static int batch(const psg_ctr_data_t *d, int64_t at, int64_t n, psg_tensor_t **f) {
    f[0] = psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){2, {n, PSG_CTR_DENSE}},
                                d->dense + at * PSG_CTR_DENSE,
                                sizeof(float) * (size_t)(n * PSG_CTR_DENSE));
    f[1] = psg_tensor_from_data(PSG_DT_I64, &(psg_shape_t){2, {n, PSG_CTR_FIELDS}},
                                d->ids + at * PSG_CTR_FIELDS,
                                sizeof(int64_t) * (size_t)(n * PSG_CTR_FIELDS));
    f[2] = psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){1, {n}}, d->labels + at,
                                sizeof(float) * (size_t)n);
    if (f[0] && f[1] && f[2]) return 0;
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&f[i]);
    return -1;
}

static int run(ctr_t *t, bool train, psg_tensor_t *const *feeds, psg_tensor_t **out, bool *over) {
    if (train && t->sync) return psg_sync_train_step_feeds(t->sync, 3, feeds, out, over);
    if (t->dsess) return psg_dist_callable_run(train ? t->dstep : t->deval, feeds, out);
    return psg_callable_run(train ? t->step : t->eval, feeds, out);
}

/* Distinct ids of rows [at, at + n): the table rows a step pulls and pushes. */
static int64_t unique_ids(const psg_ctr_data_t *d, int64_t at, int64_t n) {
    psg_id_map_t m;
    if (psg_id_map_init(&m, n * PSG_CTR_FIELDS) < 0) return 0;
    for (int64_t i = at * PSG_CTR_FIELDS; i < (at + n) * PSG_CTR_FIELDS; i++)
        psg_id_map_put(&m, d->ids[i]);
    int64_t u = m.n;
    psg_id_map_free(&m);
    return u;
}

/* Bytes of the trainable variables outside the table: a cluster step pulls each and
 * pushes its gradient. */
static int64_t dense_bytes(const psg_graph_t *g) {
    int n;
    const int *ids = psg_graph_collection(g, "trainable_variables", &n);
    int64_t b = 0;
    for (int i = 0; i < n; i++) {
        const psg_node_t *v = psg_graph_node(g, ids[i]);
        if (strncmp(psg_node_name(v), "wide_deep/embeddings/", 21))
            b += psg_shape_numel(psg_node_output_shape(v, 0)) * 4;
    }
    return b;
}

/* AUC and log-loss of the held-out rows [from, rows). */
static int evaluate(ctr_t *t, int64_t from, double *auc, double *logloss) {
    const psg_ctr_data_t *d = t->data;
    int64_t n = d->rows - from;
    float *p = malloc(sizeof(float) * (size_t)(n + 1));
    if (!p) return psg_error_set("out of memory");
    double ll = 0;
    for (int64_t at = from; at < d->rows; at += EVAL_BATCH) {
        int64_t k = d->rows - at < EVAL_BATCH ? d->rows - at : EVAL_BATCH;
        psg_tensor_t *f[3], *prob = NULL;
        if (batch(d, at, k, f) < 0 || run(t, false, f, &prob, NULL) < 0) {
            free(p);
            for (int i = 0; i < 3; i++) psg_tensor_destroy(&f[i]);
            return psg_error_wrap("evaluation");
        }
        for (int64_t i = 0; i < k; i++) {
            double q = psg_tensor_f32(prob)[i], y = d->labels[at + i];
            q = q < 1e-7 ? 1e-7 : q > 1 - 1e-7 ? 1 - 1e-7 : q;
            ll -= y * log(q) + (1 - y) * log(1 - q);
            p[at - from + i] = psg_tensor_f32(prob)[i];
        }
        psg_tensor_destroy(&prob);
        for (int i = 0; i < 3; i++) psg_tensor_destroy(&f[i]);
    }
    *auc = psg_auc(p, d->labels + from, n);
    *logloss = n ? ll / (double)n : NAN;
    free(p);
    return 0;
}

/* The model, its optimizer (lazy Adam on the table), the session(s), the variables
 * initialized (or restored, or waited for in a cluster). */
static int build(const psg_train_config_t *c, ctr_t *t, FILE *out, int64_t *start_step) {
    psg_wide_deep_config_t wc = psg_wide_deep_defaults();
    wc.buckets = t->data->buckets;
    wc.seed = c->seed;
    wc.table_shards = c->table_shards > 0 ? c->table_shards
                      : t->w.cluster      ? psg_cluster_num_tasks(t->w.cluster, "ps")
                                          : 1;
    int ps = t->w.cluster ? psg_cluster_num_tasks(t->w.cluster, "ps") : 0;
    if (c->table_shards <= 0 && ps > 0 && c->ps_memory_limit > 0) {
        /* the table and its two Adam slots spread over as many shards as keep each ps
         * under the limit (a tenth left for the dense part), a multiple of the ps tasks */
        double need = 3.0 * (double)PSG_CTR_FIELDS * (double)wc.buckets * (wc.dim + 1) * 4;
        int64_t rounds = (int64_t)ceil(need / ((double)ps * 0.9 * (double)c->ps_memory_limit));
        int64_t n = (rounds < 1 ? 1 : rounds) * ps;
        wc.table_shards = (int)(n > PSG_MAX_SHARDS ? PSG_MAX_SHARDS : n);
    }
    if (c->partition_strategy &&
        psg_partition_strategy_parse(c->partition_strategy, &wc.strategy) < 0)
        return psg_error_wrap("--partition-strategy");
    if (!(t->g = psg_graph_new())) return -1;
    if (t->w.setter) psg_graph_push_replica_setter(t->g, t->w.setter);
    psg_optimizer_config_t oc = psg_optimizer_defaults(c->optimizer ? c->optimizer : "adam");
    oc.learning_rate = c->lr >= 0 ? (float)c->lr : 0.001f;
    oc.l1 = (float)c->l1, oc.l2 = (float)c->l2, oc.lr_power = (float)c->lr_power;
    int train_op = -1;
    int rc = psg_wide_deep_build(t->g, &wc, &t->m);
    psg_endpoint_t feeds[3] = {t->m.dense, t->m.ids, t->m.labels};
    if (rc == 0 && !(t->opt = psg_optimizer_new(&oc))) rc = psg_error_wrap("--optimizer");
    if (rc == 0 && t->w.cluster && !strcmp(psg_sync_train_strategy(c), "sync")) {
        /* sparse accumulators for the table's shards (sync/strategy_sync.c) */
        t->sync = psg_sync_train_new(c, t->g, t->opt, 0, NULL, NULL, t->m.loss, 3, feeds, NULL,
                                     t->w.rank, t->w.num_workers, out);
        rc = t->sync ? 0 : -1;
    } else if (rc == 0) {
        rc = psg_optimizer_minimize(t->opt, t->g, t->m.loss, &train_op);
    }
    if (t->w.setter) psg_graph_pop_device(t->g);
    if (rc < 0) return -1;
    psg_train_config_t *hc = &t->hooks_config;
    *hc = *c;
    if (!t->w.cluster) {
        psg_session_options_t so = {.num_threads = c->threads};
        if (!(t->sess = psg_session_new(t->g, &so, NULL)) || psg_session_run_init(t->sess) < 0)
            return -1;
        t->step = psg_session_make_callable(t->sess, 3, feeds, 1, &t->m.loss, 1, &train_op);
        t->eval =
            t->step ? psg_session_make_callable(t->sess, 3, feeds, 1, &t->m.prob, 0, NULL) : NULL;
        if (!t->eval) return -1;
        return (t->hooks = psg_train_hooks_new(hc, t->sess, out, t->metrics, start_step)) ? 0 : -1;
    }
    psg_dist_session_options_t o = {.cluster = t->w.cluster,
                                    .server = t->w.server,
                                    .step_timeout_ms = c->step_timeout_ms,
                                    .ps_memory_limit = c->ps_memory_limit};
    if (!(t->dsess = psg_dist_session_new(t->g, &o))) return -1;
    if (!t->sync)
        t->dstep = psg_dist_session_make_callable(t->dsess, 3, feeds, 1, &t->m.loss, 1, &train_op);
    t->deval = t->dstep || t->sync
                   ? psg_dist_session_make_callable(t->dsess, 3, feeds, 1, &t->m.prob, 0, NULL)
                   : NULL;
    if (!t->deval) return psg_error_wrap("%s", t->w.task);
    hc->logdir = NULL;
    hc->trace_path = NULL;
    if (!(t->hooks = psg_train_hooks_new(hc, NULL, out, t->metrics, start_step))) return -1;
    /* this task's part of the trace, which psgraph launch merges: "worker0", as the image trainer's
     */
    if (psg_train_hooks_join_cluster(t->hooks, c, &t->w, t->dsess, out, t->metrics, start_step) < 0)
        return -1;
    return t->sync ? psg_sync_train_start(t->sync, t->dsess, t->w.cluster, t->w.server, t->w.chief,
                                          t->metrics)
                   : 0;
}

/* In a cluster, after the steps: a worker says it is done; the chief waits for the others
 * (sync: as long as a step may take) and, with sync, counts the job's gradients. desc gets
 * the done line's strategy fields. */
static int end_cluster(const psg_train_config_t *c, ctr_t *t, FILE *out, int64_t total, char *desc,
                       size_t size) {
    snprintf(desc, size, "\"sync\":\"%s\",", t->sync ? "sync" : "async");
    if (!t->w.cluster) return 0;
    if (!t->w.chief) return psg_dist_session_job_done(t->dsess);
    int64_t wait_ms = t->sync ? (c->step_timeout_ms > 0 ? c->step_timeout_ms : 30000) : 600000;
    bool all_done = false;
    (void)psg_membership_end(t->members, t->dsess, t->w.num_workers - 1, wait_ms, out, &all_done);
    if (t->sync) {
        psg_sync_train_count(t->sync, t->dsess, t->w.cluster);
        psg_sync_train_json(t->sync, desc, size);
    }
    size_t len = strlen(desc);
    if (t->members && len < size) psg_membership_json(t->members, desc + len, size - len);
    /* every worker done: the final checkpoint holds every update */
    return psg_train_hooks_final_checkpoint(t->hooks, total);
}

/* The data and strategies the model trains on, else -1 with the error. */
static int check_config(const psg_train_config_t *c) {
    if (strcmp(c->data, "criteo"))
        return psg_error_set(
            "--model wide-deep trains on --data criteo (a Criteo-format file or folder), not '%s'",
            c->data);
    /* async applies the updates as they come; sync through sparse accumulators; the others
     * would need their own sparse paths */
    if (c->sync && strcmp(c->sync, "async") && strcmp(c->sync, "none") && strcmp(c->sync, "sync"))
        return psg_error_set(
            "--model wide-deep: --sync %s is not supported yet (use async or sync)", c->sync);
    return 0;
}

int psg_train_ctr(const psg_train_config_t *c, psg_train_result_t *r) {
    ctr_t t = {0};
    memset(r, 0, sizeof *r);
    FILE *out = c->out ? c->out : stdout;
    int rc = -1, bs = c->batch > 0 ? c->batch : 512;
    if (check_config(c) < 0) goto done;
    if (!(t.data = psg_ctr_load(c->data_dir, c->buckets > 0 ? c->buckets : 1000000))) goto done;
    if (psg_worker_task_wanted(c) && !(c->sync && !strcmp(c->sync, "none")) &&
        psg_worker_task_join(&t.w, c, "psgraph train") < 0)
        goto done;
    int64_t ntr = t.data->rows * 9 / 10, start_step = 0;
    int W = t.w.cluster ? t.w.num_workers : 1, rank = t.w.cluster ? t.w.rank : 0;
    if (ntr < bs) {
        psg_error_set("%s: %lld training rows, fewer than one batch of %d", c->data_dir,
                      (long long)ntr, bs);
        goto done;
    }
    if (build(c, &t, out, &start_step) < 0) goto done;
    if (t.w.cluster && t.w.chief && t.w.num_workers > 1 &&
        !(t.members = psg_membership_new(t.w.cluster, t.w.task, out)))
        goto done;
    int64_t per_epoch = ntr / bs, total = c->steps > 0 ? c->steps : per_epoch * c->epochs;
    psg_train_hooks_set_last_step(t.hooks, total);
    fprintf(
        out,
        "psgraph train: model wide-deep, %lld rows (%lld train, %lld held out), %lld buckets, batch %d, "
        "%lld steps, table in %d shards%s\n",
        (long long)t.data->rows, (long long)ntr, (long long)(t.data->rows - ntr),
        (long long)t.data->buckets, bs, (long long)total, t.m.table.num_shards,
        t.w.cluster ? " on the ps tasks" : "");
    fflush(out);
    double steady = 0, loss = NAN;
    int64_t steady_n = 0, steps = 0, served0 = 0, pulled0 = 0, served = 0, pulled = 0, uniq = 0;
    for (int64_t s = start_step + rank; s < total; s += W) {
        int64_t at = (s % per_epoch) * bs;
        psg_tensor_t *f[3], *l = NULL;
        if (steps == BYTES_FROM) psg_task_server_tensor_bytes(t.w.server, &served0, &pulled0);
        double t0 = psg_now_sec();
        psg_train_hooks_before_step(t.hooks, s);
        if (batch(t.data, at, bs, f) < 0) goto done;
        bool over = false;
        int src = run(&t, true, f, &l, &over);
        for (int i = 0; i < 3; i++) psg_tensor_destroy(&f[i]);
        if (src < 0) {
            psg_error_wrap("step %lld", (long long)s);
            goto done;
        }
        loss = psg_tensor_f32(l)[0];
        psg_tensor_destroy(&l);
        if (!isfinite(loss)) {
            psg_error_set("step %lld: the loss is %g", (long long)s, loss);
            goto done;
        }
        if (psg_train_hooks_after_step(t.hooks, s + 1) < 0) goto done;
        psg_membership_set_step(t.members, s + 1);
        double t1 = psg_now_sec();
        /* past the warm-up; a run no longer than it: every step */
        if (steps >= WARMUP_STEPS || (total - start_step) / W <= WARMUP_STEPS)
            steady += t1 - t0, steady_n += bs;
        if (steps++ >= BYTES_FROM && t.w.cluster)
            uniq += unique_ids(t.data, at, bs); /* not timed */
        if (steps % c->log_every == 0) {
            fprintf(out, "step %lld  epoch %.2f  loss %.4f  examples/sec %.0f\n",
                    (long long)(s + 1), (double)(s + 1) / (double)per_epoch, loss,
                    steady > 0 ? (double)steady_n / steady : 0.0);
            fflush(out);
        }
        if (over) break; /* sync: the token queue closed */
    }
    psg_task_server_tensor_bytes(t.w.server, &served, &pulled);
    if (t.dsess && psg_dist_session_drain(t.dsess) < 0) goto done;
    r->steps = steps;
    r->final_loss = loss;
    r->examples_per_sec = steady > 0 ? (double)steady_n / steady : 0;
    if (t.sync && psg_sync_train_finish(t.sync, r->examples_per_sec) < 0) goto done;
    if (psg_train_hooks_end(t.hooks, total) < 0) goto done;
    char sync_desc[4096];
    if (end_cluster(c, &t, out, total, sync_desc, sizeof sync_desc) < 0) goto done;
    double auc = NAN, ll = NAN;
    if ((!t.w.cluster || t.w.chief) && evaluate(&t, ntr, &auc, &ll) < 0) goto done;
    r->test_accuracy = auc;
    char eval[96] = "";
    if (!t.w.cluster || t.w.chief)
        snprintf(eval, sizeof eval, "\"test_auc\":%.4f,\"test_logloss\":%.4f,", auc, ll);
    int64_t counted = steps > BYTES_FROM ? steps - BYTES_FROM : 0;
    char bytes[512] = "";
    if (t.w.cluster && counted) {
        /* the table's share: all tensor bytes less the dense variables and their gradients */
        double pl = (double)(pulled - pulled0) / (double)counted,
               pu = (double)(served - served0) / (double)counted;
        double db = (double)dense_bytes(t.g), u = (double)uniq / (double)counted;
        snprintf(
            bytes, sizeof bytes,
            "\"bytes_pulled_per_step\":%.0f,\"bytes_pushed_per_step\":%.0f,\"dense_bytes\":%.0f,"
            "\"unique_ids_per_step\":%.1f,\"table_bytes_pulled_per_step\":%.0f,"
            "\"table_bytes_pushed_per_step\":%.0f,\"unique_ids_x_row_bytes\":%.0f,",
            pl, pu, db, u, pl - db, pu - db, u * (double)(t.m.table.shape.dims[1] * 4));
    }
    fprintf(
        out,
        "{\"event\":\"%s\",\"model\":\"wide-deep\",\"data\":\"criteo\",\"rows\":%lld,\"buckets\":%lld,"
        "\"table_shards\":%d,%s%s\"steps\":%lld,\"batch\":%d,\"threads\":%d,\"final_loss\":%.6f,"
        "%s\"examples_per_sec\":%.1f}\n",
        t.w.cluster && !t.w.chief ? "worker_done" : "done", (long long)t.data->rows,
        (long long)t.data->buckets, t.m.table.num_shards, t.w.cluster ? sync_desc : "", bytes,
        (long long)steps, bs, c->threads, loss, eval, r->examples_per_sec);
    fflush(out);
    if (t.w.cluster && t.w.chief && psg_dist_session_job_done(t.dsess) < 0) goto done;
    rc = 0;
done:
    if (rc < 0) psg_graph_wrap_error(t.g);
    ctr_free(&t);
    return rc;
}
