/* The training loop behind `psgraph train`: model, optimizer, session (one
 * process, or a distributed one as a worker of a cluster), batches from a
 * prefetching iterator, progress lines, evaluation after every epoch,
 * metrics.jsonl, and one final JSON line. */
#include "psgraph/clock.h"
#include "psgraph/data.h"
#include "psgraph/device.h"
#include "psgraph/dist_session.h"
#include "psgraph/error.h"
#include "psgraph/models.h"
#include "psgraph/ops_array.h"
#include "psgraph/optimizer.h"
#include "psgraph/precision.h"
#include "psgraph/session.h"
#include "psgraph/towers.h"
#include "psgraph/trainer.h"
#include "worker/ctr_train.h"
#include "worker/sync_train.h"
#include "worker/train_hooks.h"
#include "worker/worker_task.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

/* Evaluation batches stay small enough that the cnn's activations do not
 * double the training RSS. */
#define EVAL_BATCH 250
#define WARMUP_STEPS 20

void psg_train_config_defaults(psg_train_config_t *c) {
    memset(c, 0, sizeof *c);
    c->model = "cnn";
    c->data = "fashion-mnist";
    c->data_dir = "/usr/share/datasets/fashion-mnist";
    c->epochs = 2;
    c->seed = 1;
    c->threads = 1;
    c->log_every = 100;
    c->momentum = 0.9;
    c->device = "cpu";
    c->towers = 1;
    c->dense_shard_bytes = -1;
    c->out = stdout;
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* Current RSS from /proc/self/statm, in MB (0 if unreadable). */
static double rss_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * 4096.0 / (1024.0 * 1024.0);
}

/* One run of a local or a distributed callable (exactly one is set). */
static int run_either(psg_callable_t *c, psg_dist_callable_t *dc, psg_tensor_t *const *feeds,
                      psg_tensor_t **out) {
    return dc ? psg_dist_callable_run(dc, feeds, out) : psg_callable_run(c, feeds, out);
}

/* Test accuracy over the whole evaluation set, in batches (tail included). */
static int evaluate(psg_callable_t *eval, psg_dist_callable_t *deval, const psg_dataset_t *test,
                    double *accuracy) {
    psg_batch_iter_options_t o = psg_batch_iter_eval_options(EVAL_BATCH);
    psg_batch_iter_t *it = psg_batch_iter_new(test, &o);
    if (!it) return -1;
    double correct = 0;
    int64_t seen = 0;
    psg_tensor_t *images = NULL, *labels = NULL;
    int rc;
    while ((rc = psg_batch_iter_next(it, &images, &labels)) == 1) {
        psg_tensor_t *feeds[2] = {images, labels}, *out = NULL;
        rc = run_either(eval, deval, feeds, &out);
        if (rc == 0) {
            correct += psg_tensor_f32(out)[0];
            seen += labels->shape.dims[0];
        }
        psg_tensor_destroy(&out);
        psg_tensor_destroy(&images);
        psg_tensor_destroy(&labels);
        if (rc < 0) break;
    }
    psg_batch_iter_destroy(&it);
    psg_buffer_cache_trim(); /* evaluation's block sizes are not the training step's */
    if (rc < 0) return psg_error_wrap("evaluation");
    *accuracy = seen ? correct / (double)seen : 0.0;
    return 0;
}

static FILE *open_metrics(const char *logdir) {
    if (!logdir) return NULL;
    if (mkdir(logdir, 0755) < 0 && errno != EEXIST) {
        psg_error_set("--logdir %s: %s", logdir, strerror(errno));
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", logdir);
    FILE *f = fopen(path, "a");
    if (!f) psg_error_set("%s: %s", path, strerror(errno));
    return f;
}

typedef struct {
    psg_graph_t *g;
    psg_session_t *sess;
    psg_optimizer_t *opt;
    psg_dataset_t *train, *test;
    psg_batch_iter_t *it;
    psg_callable_t *step, *eval;
    FILE *metrics;
    psg_towers_t *towers; /* NULL: the single-device graph */
    /* in a cluster */
    psg_worker_task_t w;
    psg_dist_session_t *dsess;
    psg_dist_callable_t *dstep, *deval; /* owned by dsess */
    psg_train_hooks_t *hooks; /* checkpoints, TensorBoard, timeline */
    psg_sync_train_t *sync;   /* --sync sync (worker/sync_train.c) */
} trainer_t;

static void trainer_free(trainer_t *t) {
    psg_sync_train_destroy(&t->sync);
    psg_train_hooks_destroy(&t->hooks);
    psg_callable_destroy(&t->step);
    psg_callable_destroy(&t->eval);
    psg_batch_iter_destroy(&t->it);
    psg_dataset_destroy(&t->train);
    psg_dataset_destroy(&t->test);
    psg_optimizer_destroy(&t->opt);
    psg_session_destroy(&t->sess);
    psg_dist_session_destroy(&t->dsess);
    psg_worker_task_leave(&t->w);
    psg_graph_destroy(&t->g);
    free(t->towers);
    if (t->metrics) fclose(t->metrics);
}

/* The cluster of a distributed run (NULL config: one process): this worker's place in it
 * (worker/worker_task.c). */
static int join_cluster(const psg_train_config_t *c, trainer_t *t) {
    bool want = psg_worker_task_wanted(c);
    if ((c->sync && !strcmp(c->sync, "none")) || (!c->sync && !want)) return 0;
    if (c->sync && strcmp(c->sync, "async") && strcmp(c->sync, "sync"))
        return psg_error_set("--sync: unknown mode '%s' (known: none, async, sync)", c->sync);
    if (!want)
        return psg_error_set("--sync %s needs a cluster: TF_CONFIG, or --cluster FILE --job worker --task I",
                             c->sync);
    return psg_worker_task_join(&t->w, c, "psgraph train");
}

/* Makes the step and eval callables, locally or over the cluster, and initializes the
 * variables (the chief) or waits until they are (the other workers). The step feeds
 * n_feeds placeholders (two per tower); evaluation feeds the first tower's two. */
static int make_runners(const psg_train_config_t *c, trainer_t *t, int n_feeds,
                        const psg_endpoint_t *feeds, psg_endpoint_t loss, psg_endpoint_t correct,
                        int train_op) {
    if (!t->w.cluster) {
        psg_session_options_t so = {.num_threads = c->threads};
        t->sess = psg_session_new(t->g, &so, NULL);
        if (!t->sess || psg_session_run_init(t->sess) < 0) return -1;
        t->step = psg_session_make_callable(t->sess, n_feeds, feeds, 1, &loss, 1, &train_op);
        t->eval = t->step ? psg_session_make_callable(t->sess, 2, feeds, 1, &correct, 0, NULL) : NULL;
        return t->eval ? 0 : -1;
    }
    psg_dist_session_options_t o = {.cluster = t->w.cluster, .server = t->w.server,
                                    .step_timeout_ms = c->step_timeout_ms,
                                    .ps_memory_limit = c->ps_memory_limit};
    if (!(t->dsess = psg_dist_session_new(t->g, &o))) return -1;
    /* the variables are initialized, restored or waited for by worker/cluster_ckpt.c */
    t->dstep = psg_dist_session_make_callable(t->dsess, n_feeds, feeds, 1, &loss, 1, &train_op);
    t->deval = t->dstep ? psg_dist_session_make_callable(t->dsess, 2, feeds, 1, &correct, 0, NULL) : NULL;
    /* async: the next step's variable reads travel while the ps applies this step's
     * gradients (dist_session.h); sync steps are the sync-replicas runner's */
    if (t->dstep && !t->sync && !c->no_overlap) psg_dist_callable_set_overlap(t->dstep, true);
    return t->deval ? 0 : psg_error_wrap("%s", t->w.task);
}

/* In a cluster, after the hooks: the chief restores or initializes the ps tasks' variables
 * (or finds them held: it restarted), the others wait for them; checkpoints and recovery
 * from here on (worker/cluster_ckpt.c). */
static int start_cluster(const psg_train_config_t *c, trainer_t *t, FILE *out, int64_t *start_step) {
    psg_cluster_ckpt_t *cc = psg_cluster_ckpt_new(c, t->w.cluster, t->dsess, t->w.chief, t->w.task, out, t->metrics);
    if (!cc || psg_cluster_ckpt_start(cc, start_step) < 0) {
        psg_cluster_ckpt_destroy(&cc);
        return psg_error_wrap("%s", t->w.task);
    }
    psg_task_t me = psg_cluster_task(t->w.cluster);
    char tag[64];
    snprintf(tag, sizeof tag, "%s%d", me.job, me.index);
    return psg_train_hooks_set_cluster(t->hooks, cc, t->w.chief, c, t->w.server,
                                       psg_cluster_num_tasks(t->w.cluster, "ps") + t->w.rank, t->w.task, tag);
}

static int load_data(const psg_train_config_t *c, trainer_t *t) {
    if (!strcmp(c->data, "fashion-mnist")) {
        t->train = psg_dataset_fashion_mnist(c->data_dir, true);
        t->test = t->train ? psg_dataset_fashion_mnist(c->data_dir, false) : NULL;
    } else if (!strcmp(c->data, "synthetic")) {
        psg_shape_t ex = {3, {28, 28, 1}};
        t->train = psg_dataset_synthetic(60000, &ex, 10, c->seed);
        t->test = t->train ? psg_dataset_synthetic(10000, &ex, 10, c->seed + 1) : NULL;
    } else {
        return psg_error_set("--data: unknown data set '%s' (known: fashion-mnist, synthetic)", c->data);
    }
    return t->train && t->test ? 0 : -1;
}

/* The end of a worker's run: the others tell the ps they are done and leave; the chief
 * waits for them, evaluates the final variables, then says it is done too (the ps tasks
 * exit once every worker did). */
static int finish_cluster(const psg_train_config_t *c, trainer_t *t, psg_train_result_t *r,
                          int64_t total, int64_t per_epoch, FILE *out) {
    if (!t->w.chief) return psg_dist_session_job_done(t->dsess);
    /* sync: training is over for all; a worker that died (b >= 1) never says so */
    int64_t wait_ms = t->sync ? (c->step_timeout_ms > 0 ? c->step_timeout_ms : 30000) : 600000;
    bool all_done = psg_dist_session_wait_workers(t->dsess, t->w.num_workers - 1, wait_ms) == 0;
    if (!all_done) {
        fprintf(out, "warning: %s; evaluating anyway\n", psg_error_message());
        fflush(out);
    }
    if (t->sync) psg_sync_train_count(t->sync, t->dsess, t->w.cluster);
    double acc = 0;
    if (evaluate(t->eval, t->deval, t->test, &acc) < 0) return -1;
    r->test_accuracy = acc;
    fprintf(out, "epoch %lld  test accuracy %.4f  (%s %d workers done)\n",
            (long long)((total + per_epoch - 1) / per_epoch), acc, all_done ? "all" : "not all",
            t->w.num_workers);
    fflush(out);
    if (t->metrics)
        fprintf(t->metrics, "{\"event\":\"eval\",\"step\":%lld,\"epoch\":%.4f,\"test_accuracy\":%.6f}\n",
                (long long)total, (double)total / (double)per_epoch, acc);
    return psg_dist_session_job_done(t->dsess);
}

int psg_train(const psg_train_config_t *c, psg_train_result_t *r) {
    trainer_t t = {0};
    memset(r, 0, sizeof *r);
    FILE *out = c->out ? c->out : stdout;
    if (!strcmp(c->model, "wide-deep")) return psg_train_ctr(c, r);
    psg_model_defaults_t d;
    if (psg_model_defaults(c->model, &d) < 0) return psg_error_wrap("--model");
    int batch = c->batch > 0 ? c->batch : d.batch;
    double lr = c->lr > 0 ? c->lr : d.lr;
    const char *opt_kind = c->optimizer ? c->optimizer : "momentum";
    int rc = -1;
    if (c->towers > batch) {
        /* in a cluster too: --batch is each worker's, split over its towers */
        psg_error_set("--towers %d is more than --batch %d: each tower needs at least one example",
                      c->towers, batch);
        goto done;
    }
    if (load_data(c, &t) < 0) goto done;
    psg_shape_t ex = psg_dataset_example_shape(t.train);
    if (ex.rank != 3) {
        psg_error_set("data set examples must be (height, width, channels)");
        goto done;
    }
    if (join_cluster(c, &t) < 0) goto done;
    t.g = psg_graph_new();
    /* before any node: every model and gradient (towers, sync replicas) is built under it */
    if (!t.g || psg_graph_set_precision(t.g, c->precision) < 0) goto done;
    if (t.w.setter) psg_graph_push_replica_setter(t.g, t.w.setter);
    psg_model_t m;
    psg_optimizer_config_t oc = psg_optimizer_defaults(opt_kind);
    oc.learning_rate = (float)lr;
    if (!strcmp(opt_kind, "momentum")) oc.momentum = (float)c->momentum;
    t.opt = psg_optimizer_new(&oc);
    if (!t.opt) {
        psg_error_wrap("--optimizer");
        goto done;
    }
    int train_op, n_feeds = 2;
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS], loss_ep;
    bool gpu = c->device && !strcmp(c->device, "gpu");
    if (gpu && psg_gpu_count() == 0) {
        fprintf(out, "psgraph train: --device gpu: %s; running on the CPU\n", psg_gpu_status());
        gpu = false;
    }
    if (gpu && t.w.cluster) {
        psg_error_set("--device gpu in a cluster: %s", PSG_TOWERS_CLUSTER_GPU);
        goto done;
    }
    int64_t shard_bytes = c->dense_shard_bytes >= 0 ? c->dense_shard_bytes
                          : t.w.cluster                 ? PSG_TRAIN_CLUSTER_SHARD_BYTES
                                                        : 0;
    if (gpu || c->towers > 1) {
        psg_towers_config_t tc = {.model = c->model,
                                  .height = (int)ex.dims[0],
                                  .width = (int)ex.dims[1],
                                  .channels = (int)ex.dims[2],
                                  .classes = psg_dataset_num_classes(t.train),
                                  .seed = c->seed,
                                  .num_towers = c->towers,
                                  .device = gpu ? PSG_TOWERS_GPU : PSG_TOWERS_CPU,
                                  .variable_device = t.w.cluster ? "/device:CPU:0" : NULL,
                                  .dense_shard_bytes = shard_bytes};
        if (!(t.towers = calloc(1, sizeof *t.towers))) {
            psg_error_set("out of memory");
            goto done;
        }
        if (t.w.cluster && psg_sync_train_wanted(c)) {
            /* the towers' mean gradient of each variable goes to the ps accumulators */
            int n;
            psg_endpoint_t *grads, *vars;
            if (psg_towers_build_gradients(t.g, &tc, t.towers, &n, &grads, &vars) < 0) goto done;
            t.sync = psg_sync_train_new_towers(c, t.g, t.opt, t.towers, n, grads, vars, t.w.rank,
                                               t.w.num_workers, out);
            free(grads);
            free(vars);
            if (!t.sync) goto done;
            train_op = t.towers->loss.node; /* the generic callable only evaluates */
        } else if (psg_towers_build(t.g, &tc, t.opt, t.towers) < 0) {
            goto done;
        } else {
            train_op = t.towers->train_op;
        }
        m = t.towers->towers[0];
        loss_ep = t.towers->loss;
        n_feeds = 2 * c->towers;
        psg_towers_feeds(t.towers, feeds);
    } else {
        psg_model_options_t mo = {.dense_shard_bytes = shard_bytes};
        if (psg_model_build_with(t.g, c->model, (int)ex.dims[0], (int)ex.dims[1], (int)ex.dims[2],
                                 psg_dataset_num_classes(t.train), c->seed, &mo, &m) < 0)
            goto done;
        if (t.w.cluster && psg_sync_train_wanted(c)) {
            t.sync = psg_sync_train_new(c, t.g, t.opt, m.loss, m.images, m.labels, t.w.rank,
                                        t.w.num_workers, out);
            train_op = m.loss.node; /* the generic callable only evaluates */
        } else if (psg_optimizer_minimize(t.opt, t.g, m.loss, &train_op) < 0) {
            goto done;
        }
        if (psg_sync_train_wanted(c) && !t.sync) goto done;
        loss_ep = m.loss;
        feeds[0] = m.images;
        feeds[1] = m.labels;
    }
    if (t.w.setter) psg_graph_pop_device(t.g);
    if (make_runners(c, &t, n_feeds, feeds, loss_ep, m.correct, train_op) < 0) goto done;
    if (c->logdir && !(t.metrics = open_metrics(c->logdir))) goto done;
    int64_t start_step = 0;
    /* the local hooks checkpoint and trace a local session; in a cluster the chief
     * checkpoints through the ps tasks and traces through their servers
     * (worker/cluster_ckpt.c, started below), so the local hooks keep out of it */
    psg_train_config_t hc = *c;
    if (t.w.cluster) {
        hc.logdir = NULL;
        hc.trace_path = NULL;
    }
    if (!(t.hooks = psg_train_hooks_new(&hc, t.sess, out, t.metrics, &start_step))) goto done;
    if (t.w.cluster && start_cluster(c, &t, out, &start_step) < 0) goto done;
    /* sync replicas start once the variables are initialized, restored or found */
    if (t.sync && psg_sync_train_start(t.sync, t.dsess, t.w.cluster, t.w.server, t.w.chief, t.metrics) < 0)
        goto done;
    r->steps = start_step;
    /* the batches go on where the restored step left them */
    psg_batch_iter_options_t io = psg_batch_iter_train_options(batch, c->seed);
    if (t.w.cluster) {
        io.num_shards = t.w.num_workers;
        io.shard_index = t.w.rank;
    }
    io.start_batch = start_step;
    if (!(t.it = psg_batch_iter_new(t.train, &io))) goto done;

    int64_t per_epoch = psg_batch_iter_batches_per_epoch(t.it);
    int64_t total = c->steps > 0 ? c->steps : per_epoch * c->epochs;
    fprintf(out, "psgraph train: model %s, %s, batch %d, %s lr %g, %lld steps (%lld per epoch), %d threads, %d %s tower%s\n",
            c->model, c->data, batch, opt_kind, lr, (long long)total, (long long)per_epoch, c->threads,
            c->towers, gpu ? "GPU" : "CPU", c->towers == 1 ? "" : "s");
    if (t.w.cluster)
        fprintf(out, "psgraph train: %s of %d workers (%s), %s, variables on %d ps tasks, shard %d\n",
                t.w.task, t.w.num_workers, t.w.chief ? "chief" : "not chief", t.sync ? "sync" : "async",
                psg_cluster_num_tasks(t.w.cluster, "ps"), t.w.rank);
    fflush(out);
    double steady_time = 0, interval_start = psg_now_sec(), loss_sum = 0, last_loss = NAN;
    int64_t steady_examples = 0, interval_steps = 0;
    double rss_at_100 = 0;
    for (int64_t step = start_step; step < total; step++) {
        psg_tensor_t *images = NULL, *labels = NULL, *loss = NULL;
        double t0 = psg_now_sec();
        psg_train_hooks_before_step(t.hooks, step);
        int got = psg_batch_iter_next(t.it, &images, &labels);
        if (got <= 0) {
            if (got == 0) psg_error_set("the training data ended early");
            goto done;
        }
        psg_tensor_t *fv[2 * PSG_MAX_TOWERS] = {images, labels};
        /* sync replicas split the batch themselves */
        int src = t.towers && !t.sync ? psg_towers_split(t.towers, images, labels, fv) : 0;
        bool over = false;
        if (src == 0)
            src = t.sync ? psg_sync_train_step(t.sync, images, labels, &loss, &over)
                         : run_either(t.step, t.dstep, fv, &loss);
        /* async: a step that hit a restarted ps is retried once the ps is back */
        for (int retry = 0; src < 0 && t.w.cluster && !t.sync && retry < 3 &&
                            psg_train_hooks_recover(t.hooks, step) == 0;
             retry++)
            src = run_either(t.step, t.dstep, fv, &loss);
        for (int i = 0; t.towers && !t.sync && i < n_feeds; i++)
            psg_tensor_destroy(&fv[i]);
        psg_tensor_destroy(&images);
        psg_tensor_destroy(&labels);
        if (src < 0) {
            psg_error_wrap("step %lld", (long long)step);
            goto done;
        }
        last_loss = psg_tensor_f32(loss)[0];
        psg_tensor_destroy(&loss);
        if (!isfinite(last_loss)) {
            psg_error_set("step %lld: the loss is %g", (long long)step, last_loss);
            goto done;
        }
        if (psg_train_hooks_after_step(t.hooks, step + 1) < 0) goto done;
        double t1 = psg_now_sec();
        if (step >= WARMUP_STEPS) {
            steady_time += t1 - t0;
            steady_examples += batch;
        }
        if (step + 1 == 100) rss_at_100 = rss_mb();
        loss_sum += last_loss;
        interval_steps++;
        bool epoch_end = (step + 1) % per_epoch == 0;
        if ((step + 1) % c->log_every == 0 || step + 1 == total) {
            double dt = t1 - interval_start;
            double eps = interval_steps * batch / dt;
            char eta[32];
            fprintf(out, "step %lld  epoch %.2f  loss %.4f  examples/sec %.0f  sec/batch %.4f  eta %s\n",
                    (long long)(step + 1), (double)(step + 1) / (double)per_epoch,
                    loss_sum / interval_steps, eps, dt / interval_steps,
                    psg_train_hooks_eta((double)(total - step - 1) * dt / interval_steps, eta, sizeof eta));
            fflush(out);
            if (t.metrics)
                fprintf(t.metrics, "{\"event\":\"progress\",\"step\":%lld,\"epoch\":%.4f,\"loss\":%.6f,\"learning_rate\":%g,\"examples_per_sec\":%.1f,\"rss_mb\":%.1f}\n",
                        (long long)(step + 1), (double)(step + 1) / (double)per_epoch,
                        loss_sum / interval_steps, lr, eps, rss_mb());
            if (psg_train_hooks_progress(t.hooks, step + 1, loss_sum / interval_steps, lr, eps) < 0) goto done;
            loss_sum = 0;
            interval_steps = 0;
            interval_start = psg_now_sec();
        }
        if ((epoch_end && step + 1 < total && (!t.w.cluster || t.w.chief)) ||
            (step + 1 == total && !t.w.cluster)) {
            double acc = 0, eval_start = psg_now_sec();
            if (evaluate(t.eval, t.deval, t.test, &acc) < 0) goto done;
            r->test_accuracy = acc;
            fprintf(out, "epoch %lld  test accuracy %.4f\n", (long long)((step + 1 + per_epoch - 1) / per_epoch), acc);
            fflush(out);
            if (t.metrics)
                fprintf(t.metrics, "{\"event\":\"eval\",\"step\":%lld,\"epoch\":%.4f,\"test_accuracy\":%.6f}\n",
                        (long long)(step + 1), (double)(step + 1) / (double)per_epoch, acc);
            if (psg_train_hooks_eval(t.hooks, step + 1, acc) < 0) goto done;
            interval_start += psg_now_sec() - eval_start; /* evaluation is not training time */
        }
        r->steps = step + 1;
        if (over) break; /* sync: the token queue closed */
    }
    if (t.dsess && psg_dist_session_drain(t.dsess) < 0) goto done; /* the last overlapped step */
    r->final_loss = last_loss;
    r->examples_per_sec = steady_time > 0 ? (double)steady_examples / steady_time : 0;
    if (t.sync && psg_sync_train_finish(t.sync, r->examples_per_sec) < 0) goto done;
    if (psg_train_hooks_end(t.hooks, r->steps) < 0) goto done;
    if (t.w.cluster && finish_cluster(c, &t, r, total, per_epoch, out) < 0) goto done;
    if (t.w.cluster && !t.w.chief) {
        fprintf(out, "{\"event\":\"worker_done\",\"task\":\"%s\",\"steps\":%lld,\"final_loss\":%.6f,"
                     "\"examples_per_sec\":%.1f}\n",
                t.w.task, (long long)r->steps, r->final_loss, r->examples_per_sec);
        fflush(out);
        rc = 0;
        goto done;
    }
    char line[2560], cluster_desc[1280] = "", sync_desc[1024] = "";
    if (t.sync) psg_sync_train_json(t.sync, sync_desc, sizeof sync_desc);
    if (t.w.cluster)
        snprintf(cluster_desc, sizeof cluster_desc, "%s\"workers\":%d,\"ps\":%d,",
                 t.sync ? sync_desc : "\"sync\":\"async\",", t.w.num_workers,
                 psg_cluster_num_tasks(t.w.cluster, "ps"));
    snprintf(line, sizeof line,
             "{\"event\":\"done\",\"model\":\"%s\",\"data\":\"%s\",%s\"steps\":%lld,\"batch\":%d,"
             "\"threads\":%d,\"precision\":\"%s\",\"final_loss\":%.6f,\"test_accuracy\":%.4f,"
             "\"examples_per_sec\":%.1f,"
             "\"peak_rss_mb\":%.1f,\"rss_mb_at_step_100\":%.1f,\"rss_mb_at_end\":%.1f}",
             c->model, c->data, t.w.cluster ? cluster_desc : "", (long long)r->steps, batch, c->threads,
             psg_precision_name(psg_graph_compute_dtype(t.g)), r->final_loss,
             r->test_accuracy, r->examples_per_sec, peak_rss_mb(), rss_at_100, rss_mb());
    fprintf(out, "%s\n", line);
    fflush(out);
    if (t.metrics) fprintf(t.metrics, "%s\n", line);
    rc = 0;
done:
    if (rc < 0 && t.g && psg_graph_error(t.g) && !strstr(psg_error_message(), psg_graph_error(t.g)))
        psg_error_set("%s", psg_graph_error(t.g));
    trainer_free(&t);
    return rc;
}
