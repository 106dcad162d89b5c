/* The evaluator task of worker/evaluator.h: the model built as the workers build it, a
 * local session, and a loop that restores the newest checkpoint of --logdir it has not
 * evaluated, evaluates it on the test set and records the result. Like TensorFlow's
 * checkpoints_iterator it takes the newest checkpoint each time (a slow evaluator skips
 * intermediate ones) and evaluates each at most once. Not the trainer's own evaluation. */
#include "worker/evaluator.h"

#include "psgraph/checkpoint.h"
#include "psgraph/clock.h"
#include "psgraph/cluster.h"
#include "psgraph/error.h"
#include "psgraph/models.h"
#include "psgraph/precision.h"
#include "psgraph/session.h"
#include "psgraph/summary.h"
#include "worker/inception_train.h"
#include "worker/metrics_log.h"
#include "worker/train_data.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define POLL_SECS 0.2

static psg_cluster_t *cluster_of(const psg_train_config_t *c) {
    if (c->cluster_file) return psg_cluster_from_file(c->cluster_file, c->job, c->task);
    return psg_cluster_env_given() ? psg_cluster_from_env() : NULL;
}

bool psg_evaluator_wanted(const psg_train_config_t *c) {
    if (!c->cluster_file && !psg_cluster_env_given()) return false;
    psg_cluster_t *cl = cluster_of(c);
    psg_task_t me = cl ? psg_cluster_task(cl) : (psg_task_t){0};
    bool yes = me.job && !strcmp(me.job, PSG_EVALUATOR_JOB);
    psg_cluster_destroy(&cl);
    return yes;
}

typedef struct {
    const psg_train_config_t *c;
    psg_dataset_t *train, *test;
    psg_graph_t *g;
    psg_session_t *sess;
    psg_callable_t *eval;
    psg_inception_train_t inc; /* --model inception3 */
    psg_eval_models_t em;
    FILE *metrics;
    psg_summary_writer_t *events;
    char task[PSG_DEVICE_NAME_MAX];
    int num_workers;
    int64_t total;      /* the job's last step */
    long metrics_start; /* the size of the chief's metrics.jsonl when we started */
} evaluator_t;

static void evaluator_free(evaluator_t *e) {
    psg_summary_writer_destroy(&e->events);
    if (e->metrics) fclose(e->metrics);
    psg_callable_destroy(&e->eval);
    psg_inception_train_free(&e->inc);
    psg_session_destroy(&e->sess);
    psg_graph_destroy(&e->g);
    psg_dataset_destroy(&e->train);
    psg_dataset_destroy(&e->test);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* Whether the chief wrote its final record ("event":"done") after we started. */
static bool job_done(const evaluator_t *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", e->c->logdir);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool done = false;
    char line[4096];
    if (fseek(f, e->metrics_start, SEEK_SET) == 0)
        while (!done && fgets(line, sizeof line, f))
            done = strstr(line, "\"event\":\"done\"") != NULL;
    fclose(f);
    return done;
}

/* The model as the workers build it (their variable names, shards included), a session. */
static int build(evaluator_t *e) {
    const psg_train_config_t *c = e->c;
    psg_model_defaults_t d;
    if (psg_model_defaults(c->model, &d) < 0) return psg_error_wrap("--model");
    if (psg_train_load_data(c, &e->train, &e->test) < 0) return -1;
    psg_shape_t ex = psg_dataset_example_shape(e->train);
    /* the job's last step: the chief's, shard 0 of the training set over the workers */
    psg_batch_iter_options_t io =
        psg_batch_iter_train_options(c->batch > 0 ? c->batch : d.batch, c->seed);
    io.num_shards = e->num_workers;
    io.prefetch = 0;
    psg_batch_iter_t *it = psg_batch_iter_new(e->train, &io);
    if (!it) return -1;
    e->total = c->steps > 0 ? c->steps : psg_batch_iter_batches_per_epoch(it) * c->epochs;
    psg_batch_iter_destroy(&it);
    if (!(e->g = psg_graph_new()) || psg_graph_set_precision(e->g, c->precision) < 0) return -1;
    if (!strcmp(c->model, "inception3")) { /* the evaluation models, as the chief's */
        if (psg_inception_train_init(&e->inc, c, (int)ex.dims[0], psg_dataset_num_classes(e->train),
                                     psg_dataset_size(e->train), c->batch > 0 ? c->batch : d.batch,
                                     1) < 0 ||
            psg_inception_train_eval_models(&e->inc, e->g, &e->em) < 0)
            return -1;
    } else {
        psg_model_options_t mo = {.dense_shard_bytes = c->dense_shard_bytes >= 0
                                                           ? c->dense_shard_bytes
                                                           : PSG_TRAIN_CLUSTER_SHARD_BYTES};
        psg_model_t m;
        if (psg_model_build_with(e->g, c->model, (int)ex.dims[0], (int)ex.dims[1], (int)ex.dims[2],
                                 psg_dataset_num_classes(e->train), c->seed, &mo, &m) < 0)
            return -1;
        e->em = (psg_eval_models_t){1, {m.images}, {m.logits}};
    }
    psg_session_options_t so = {.num_threads = c->threads};
    if (!(e->sess = psg_session_new(e->g, &so, NULL)) || psg_session_run_init(e->sess) < 0)
        return -1;
    e->eval =
        psg_session_make_callable(e->sess, e->em.n, e->em.images, e->em.n, e->em.logits, 0, NULL);
    return e->eval ? 0 : -1;
}

/* Restores ck into the session and evaluates it; records the result. */
static int evaluate_checkpoint(evaluator_t *e, psg_checkpoint_t *ck, double *acc) {
    int64_t step = psg_checkpoint_step(ck);
    double t0 = psg_now_sec();
    psg_train_eval_t ev;
    /* not all of a checkpoint's variables are the evaluation's (optimizer slots): the
     * checkpoint must hold every one of the evaluation's */
    if (psg_checkpoint_restore(ck, psg_session_resources(e->sess), true) < 0 ||
        psg_train_evaluate(e->eval, NULL, e->em.n, e->test, &ev) < 0)
        return psg_error_wrap("%s: checkpoint at step %lld", e->task, (long long)step);
    *acc = ev.accuracy;
    FILE *out = e->c->out ? e->c->out : stdout;
    char tk[160] = "";
    if (!strcmp(e->c->model, "inception3"))
        snprintf(tk, sizeof tk, ",\"top1\":%.6f,\"top5\":%.6f,\"top1_ema\":%.6f,\"top5_ema\":%.6f",
                 ev.top1[0], ev.top5[0], ev.top1[1], ev.top5[1]);
    fprintf(out, "%s: checkpoint %s: step %lld  test accuracy %.4f%s%s  (%.2f s)\n", e->task,
            psg_checkpoint_path(ck), (long long)step, *acc, tk[0] ? "  " : "", tk[0] ? tk + 1 : "",
            psg_now_sec() - t0);
    fflush(out);
    fprintf(e->metrics,
            "{\"event\":\"eval\",\"step\":%lld,\"test_accuracy\":%.6f%s,\"checkpoint\":\"%s\"}\n",
            (long long)step, *acc, tk, psg_checkpoint_path(ck));
    return psg_summary_scalar(e->events, step, "accuracy", (float)*acc);
}

/* The watch loop: until the last step's checkpoint is evaluated or the job is done. */
static int watch(evaluator_t *e, psg_train_result_t *r) {
    int64_t last = -1;
    double idle_since = psg_now_sec();
    long metrics_seen = e->metrics_start;
    char chief_metrics[4096];
    snprintf(chief_metrics, sizeof chief_metrics, "%s/metrics.jsonl", e->c->logdir);
    for (;;) {
        bool done = job_done(e); /* before the look: a checkpoint before "done" is seen */
        psg_checkpoint_t *ck = NULL;
        int found = psg_checkpoint_open_latest(e->c->logdir, -1, NULL, NULL, &ck);
        if (found < 0) return psg_error_wrap("%s", e->task);
        if (found > 0 && psg_checkpoint_step(ck) > last) {
            double acc = 0;
            int rc = evaluate_checkpoint(e, ck, &acc);
            last = psg_checkpoint_step(ck);
            psg_checkpoint_destroy(&ck);
            if (rc < 0) return -1;
            r->steps = last;
            r->test_accuracy = acc;
            idle_since = psg_now_sec();
            if (last >= e->total) return 0;
            continue;
        }
        psg_checkpoint_destroy(&ck);
        if (done) return 0;
        long sz = file_size(chief_metrics);
        if (sz != metrics_seen) {
            metrics_seen = sz;
            idle_since = psg_now_sec();
        }
        if (psg_now_sec() - idle_since > PSG_EVALUATOR_IDLE_SECS)
            return psg_error_set(
                "%s: no new checkpoint or metrics record in %s for %.0f s: the job is gone",
                e->task, e->c->logdir, PSG_EVALUATOR_IDLE_SECS);
        nanosleep(&(struct timespec){0, (long)(POLL_SECS * 1e9)}, NULL);
    }
}

int psg_evaluator_run(const psg_train_config_t *c, psg_train_result_t *r) {
    memset(r, 0, sizeof *r);
    evaluator_t e = {.c = c};
    psg_cluster_t *cl = cluster_of(c);
    if (!cl) return -1;
    psg_task_t me = psg_cluster_task(cl);
    psg_device_name(me.job, me.index, NULL, e.task, sizeof e.task);
    e.num_workers = psg_cluster_num_tasks(cl, "chief") + psg_cluster_num_tasks(cl, "worker");
    int nps = psg_cluster_num_tasks(cl, "ps");
    psg_cluster_destroy(&cl);
    if (nps == 0)
        return psg_error_set_code(
            PSG_ERR_CONFIG,
            "%s: the cluster has no \"ps\" job: psgraph keeps the variables on parameter servers",
            e.task);
    if (e.num_workers == 0)
        return psg_error_set_code(PSG_ERR_CONFIG,
                                  "%s: the cluster has no worker or chief job to evaluate", e.task);
    if (!c->logdir)
        return psg_error_set(
            "%s: the evaluator needs --logdir (the job's, where its checkpoints are)", e.task);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/metrics.jsonl", c->logdir);
    e.metrics_start = file_size(dir);
    snprintf(dir, sizeof dir, "%s/eval", c->logdir);
    int rc = -1;
    if (build(&e) < 0 || !(e.metrics = psg_metrics_open(c->logdir, PSG_EVALUATOR_JOB, e.task)) ||
        !(e.events = psg_summary_writer_new(dir)))
        goto done;
    FILE *out = c->out ? c->out : stdout;
    fprintf(out, "%s: watching %s for checkpoints of %s up to step %lld (TensorBoard: %s)\n",
            e.task, c->logdir, c->model, (long long)e.total, dir);
    fflush(out);
    rc = watch(&e, r);
    if (rc == 0) {
        fprintf(
            out,
            "{\"event\":\"evaluator_done\",\"task\":\"%s\",\"step\":%lld,\"test_accuracy\":%.4f}\n",
            e.task, (long long)r->steps, r->test_accuracy);
        fflush(out);
    }
done:
    evaluator_free(&e);
    return rc;
}
