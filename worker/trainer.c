/* The training loop behind `psgraph train`: model, optimizer, session (one
 * process, or a distributed one as a worker of a cluster), batches from a
 * prefetching iterator, progress lines, evaluation after every epoch,
 * metrics.jsonl, and one final JSON line. */
#include "psgraph/clock.h"
#include "psgraph/data.h"
#include "psgraph/device.h"
#include "psgraph/dist_session.h"
#include "worker/shard_data.h"
#include "psgraph/error.h"
#include "psgraph/models.h"
#include "psgraph/ops_array.h"
#include "psgraph/optimizer.h"
#include "psgraph/precision.h"
#include "psgraph/session.h"
#include "psgraph/towers.h"
#include "ops/cpu/blas.h"
#include "psgraph/trainer.h"
#include "worker/bench_timing.h"
#include "worker/ctr_train.h"
#include "worker/evaluator.h"
#include "worker/inception_train.h"
#include "worker/membership.h"
#include "worker/membership_leave.h"
#include "worker/init_from.h"
#include "worker/metrics_log.h"
#include "worker/replica.h"
#include "worker/sync_train.h"
#include "worker/train_data.h"
#include "worker/train_hooks.h"
#include "worker/worker_task.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#define WARMUP_STEPS 20

void psg_train_config_defaults(psg_train_config_t *c) {
    memset(c, 0, sizeof *c);
    c->model = "cnn"; /* data NULL: the model's (psg_train_resolve) */
    c->epochs = 2;
    c->lr = -1; /* the model's */
    c->seed = 1;
    c->threads = 1;
    c->log_every = 100;
    c->momentum = 0.9;
    c->lr_power = -0.5;
    c->device = "cpu";
    c->towers = 1;
    c->dense_shard_bytes = -1;
    c->out = stdout;
    psg_sync_options_defaults(&c->sync_opt);
    c->label_offset = -1;
    c->label_smoothing = -1;
    c->recipe = psg_inception3_recipe_defaults();
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

typedef struct {
    const psg_train_config_t *c;
    FILE *out;
    psg_graph_t *g;
    psg_session_t *sess;
    psg_optimizer_t *opt;
    psg_dataset_t *train, *test;
    psg_batch_iter_t *it;
    psg_callable_t *step, *eval;
    FILE *metrics;
    psg_replica_t rep; /* the model, its towers, the strategy in a cluster (worker/replica.c) */
    psg_sync_train_t *sync;     /* rep.sync: a cluster's strategy (worker/sync_train.c) */
    psg_init_from_t *init_from; /* --init-from (worker/init_from.c) */
    bool inception;             /* --model inception3: its recipe (worker/inception_train.c) */
    psg_inception_train_t inc;
    psg_eval_models_t em;      /* the evaluation models: images fed, logits fetched */
    psg_bench_timing_t *bench; /* --bench: the timed steps (worker/bench_timing.c) */
    /* in a cluster */
    psg_worker_task_t w;
    psg_dist_session_t *dsess;
    psg_dist_callable_t *dstep, *deval; /* owned by dsess */
    psg_membership_t *members;          /* the chief's: the live workers (worker/membership.c) */
    psg_shard_data_t *shards;           /* --data-shards dispatch: the data (worker/shard_data.c) */
    int64_t evaluated_epoch;            /* with shards: the last epoch evaluated after */
    int64_t every_mark;                 /* a sync chief: the last --eval-every multiple evaluated */
    psg_train_hooks_t *hooks;           /* checkpoints, TensorBoard, timeline */
    psg_train_config_t hook_cfg;        /* the hooks' config (borrowed by them) */
    /* the recipe and the run */
    int batch;
    double lr;
    const char *opt_kind;
    bool gpu;
    int64_t start_step, per_epoch, total;
    double run_start, steady_time, interval_start, loss_sum, last_loss, rss_at_100;
    int64_t steady_examples, interval_steps;
    double all_time; /* every step's, for a run shorter than the warm-up */
    int64_t all_examples;
    bool left; /* SIGTERM: this worker left the job at a step boundary */
} trainer_t;

static void trainer_free(trainer_t *t) {
    psg_membership_destroy(&t->members); /* first: its thread calls the strategy */
    psg_bench_timing_destroy(&t->bench);
    psg_inception_train_free(&t->inc);
    psg_init_from_destroy(&t->init_from);
    psg_replica_free(&t->rep);
    psg_train_hooks_destroy(&t->hooks);
    psg_callable_destroy(&t->step);
    psg_callable_destroy(&t->eval);
    psg_batch_iter_destroy(&t->it);
    psg_shard_data_destroy(&t->shards);
    psg_dataset_destroy(&t->train);
    psg_dataset_destroy(&t->test);
    psg_optimizer_destroy(&t->opt);
    psg_session_destroy(&t->sess);
    psg_dist_session_destroy(&t->dsess);
    psg_worker_task_leave(&t->w);
    psg_graph_destroy(&t->g);
    if (t->metrics) fclose(t->metrics);
}

/* The cluster of a distributed run (NULL config: one process): this worker's place in it
 * (worker/worker_task.c). */
static int join_cluster(const psg_train_config_t *c, trainer_t *t) {
    bool want = psg_worker_task_wanted(c);
    if ((c->sync && !strcmp(c->sync, "none")) || (!c->sync && !want)) return 0;
    if (psg_sync_strategy_check_name(psg_sync_train_strategy(c)) < 0) return -1;
    if (!want)
        return psg_error_set(
            "--sync %s needs a cluster: TF_CONFIG, or --cluster FILE --job worker --task I",
            c->sync);
    return psg_worker_task_join(&t->w, c, "psgraph train");
}

/* Makes the step and eval callables, locally or over the cluster, and initializes the
 * variables (one process; in a cluster worker/cluster_ckpt.c does, or waits for them). */
static int make_runners(trainer_t *t) {
    const psg_train_config_t *c = t->c;
    psg_replica_t *r = &t->rep;
    if (!t->w.cluster) {
        psg_session_options_t so = {.num_threads = c->threads};
        t->sess = psg_session_new(t->g, &so, NULL);
        if (!t->sess || psg_session_run_init(t->sess) < 0) return -1;
        t->step = psg_session_make_callable(t->sess, r->n_feeds, r->feeds, 1, &r->loss,
                                            c->forward_only ? 0 : 1, &r->train_op);
        t->eval = t->step ? psg_session_make_callable(t->sess, t->em.n, t->em.images, t->em.n,
                                                      t->em.logits, 0, NULL)
                          : NULL;
        return t->eval ? 0 : -1;
    }
    psg_dist_session_options_t o = {.cluster = t->w.cluster,
                                    .server = t->w.server,
                                    .step_timeout_ms = c->step_timeout_ms,
                                    .ps_memory_limit = c->ps_memory_limit};
    if (!(t->dsess = psg_dist_session_new(t->g, &o))) return -1;
    /* the steps are the strategy's (worker/sync_train.c); this one only evaluates */
    t->deval = psg_dist_session_make_callable(t->dsess, t->em.n, t->em.images, t->em.n,
                                              t->em.logits, 0, NULL);
    return t->deval ? 0 : psg_error_wrap("%s", t->w.task);
}

/* In a cluster, after the hooks: the chief restores or initializes the ps tasks' variables
 * (or finds them held: it restarted), the others wait for them; checkpoints and recovery
 * from here on (worker/cluster_ckpt.c); then the strategy starts. */
static int start_cluster(trainer_t *t) {
    const psg_train_config_t *c = t->c;
    if (psg_sync_train_init_local(t->sync, t->dsess) < 0) return -1;
    if (psg_train_hooks_join_cluster(t->hooks, c, &t->w, t->dsess, t->out, t->metrics,
                                     &t->start_step) < 0)
        return -1;
    return psg_sync_train_start(t->sync, t->dsess, t->w.cluster, t->w.server, t->w.chief,
                                t->metrics);
}

static int load_data(const psg_train_config_t *c, trainer_t *t) {
    return psg_train_load_data(c, &t->train, &t->test);
}

/* inception3's top-1 and top-5 of the weights and their moving average as JSON fields
 * (each after a comma), or "". */
static void topk_json(const trainer_t *t, const psg_train_eval_t *e, char *buf, size_t size) {
    buf[0] = 0;
    if (!t->inception) return;
    size_t n = (size_t)snprintf(buf, size, ",\"top1\":%.6f,\"top5\":%.6f", e->top1[0], e->top5[0]);
    if (e->n_models > 1 && n < size)
        snprintf(buf + n, size - n, ",\"top1_ema\":%.6f,\"top5_ema\":%.6f", e->top1[1], e->top5[1]);
}

/* An evaluation at step (a sync chief's: the global step) after the worker's own steps (its
 * epoch's measure). */
static void write_eval(trainer_t *t, int64_t step, int64_t own, const psg_train_eval_t *e) {
    char tk[160];
    topk_json(t, e, tk, sizeof tk);
    if (t->metrics)
        fprintf(
            t->metrics,
            "{\"event\":\"eval\",\"step\":%lld,\"epoch\":%.4f,\"test_accuracy\":%.6f%s,\"examples\":%lld,\"wall_sec\":%.3f}\n",
            (long long)step, (double)own / (double)t->per_epoch, e->accuracy, tk,
            (long long)e->examples, psg_now_sec() - t->run_start);
}

/* The evaluation's line: "test accuracy A", and inception3's top-1 and top-5. */
static void print_eval(trainer_t *t, int64_t step, int64_t own, const psg_train_eval_t *e,
                       const char *tail) {
    int64_t epoch = (own + t->per_epoch - 1) / t->per_epoch;
    if (t->shards) /* the epochs whose shards were all handed out */
        epoch = own >= t->total ? t->c->epochs : psg_shard_data_epoch(t->shards);
    fprintf(t->out, "epoch %lld  ", (long long)epoch);
    if (t->inception) fprintf(t->out, "step %lld  ", (long long)step);
    fprintf(t->out, "test accuracy %.4f", e->accuracy);
    if (t->inception) {
        fprintf(t->out, "  top-1 %.4f  top-5 %.4f", e->top1[0], e->top5[0]);
        if (e->n_models > 1)
            fprintf(t->out, "  moving average: top-1 %.4f  top-5 %.4f", e->top1[1], e->top5[1]);
        fprintf(t->out, "  (%lld images)", (long long)e->examples);
    }
    fprintf(t->out, "%s\n", tail);
    fflush(t->out);
}

static void keep_eval(psg_train_result_t *r, const psg_train_eval_t *e) {
    r->test_accuracy = e->accuracy;
    for (int m = 0; m < 2; m++) r->top1[m] = e->top1[m], r->top5[m] = e->top5[m];
}

/* Test accuracy now: printed, logged, given to the hooks. */
static int eval_now(trainer_t *t, int64_t step, int64_t own, psg_train_result_t *r) {
    double eval_start = psg_now_sec();
    psg_train_eval_t e;
    if (psg_train_evaluate(t->eval, t->deval, t->em.n, t->test, &e) < 0) return -1;
    keep_eval(r, &e);
    print_eval(t, step, own, &e, "");
    write_eval(t, step, own, &e);
    if (psg_train_hooks_eval(t->hooks, step, &e, t->inception) < 0) return -1;
    t->interval_start += psg_now_sec() - eval_start; /* evaluation is not training time */
    return 0;
}

/* The end of a worker's run: the others tell the ps they are done and leave; the chief
 * waits for them, evaluates the final variables, then says it is done too (the ps tasks
 * exit once every worker did). */
static int finish_cluster(trainer_t *t, psg_train_result_t *r) {
    const psg_train_config_t *c = t->c;
    if (!t->w.chief) return psg_dist_session_job_done(t->dsess);
    /* a worker that died (as many as the strategy tolerates) never says it is done: the
     * wait follows the live set (worker/membership.c), the ps tasks are told of the lost */
    int64_t wait_ms = psg_sync_train_graph(t->sync)->chief_op >= 0
                          ? (c->step_timeout_ms > 0 ? c->step_timeout_ms : 30000)
                          : 600000;
    bool all_done = false;
    int nlost =
        psg_membership_end(t->members, t->dsess, t->w.num_workers - 1, wait_ms, t->out, &all_done);
    psg_sync_train_count(t->sync, t->dsess, t->w.cluster);
    /* every update is in now: the final checkpoint holds them all, named by the job's global
     * step (async: every worker's steps), and the accuracy below is that checkpoint's */
    int64_t gs = psg_sync_train_global_steps(t->sync);
    if (psg_train_hooks_final_checkpoint(t->hooks, gs > r->steps ? gs : r->steps) < 0) return -1;
    if (!c->bench || c->eval_every > 0) { /* a benchmark times the loop only */
        psg_train_eval_t e;
        if (psg_train_evaluate(NULL, t->deval, t->em.n, t->test, &e) < 0) return -1;
        keep_eval(r, &e);
        char tail[64];
        snprintf(tail, sizeof tail, "  (%s %d workers done%s)", all_done ? "all" : "not all",
                 t->w.num_workers - nlost, nlost ? ", the others lost" : "");
        print_eval(t, t->total, t->total, &e, tail);
        write_eval(t, t->total, t->total, &e);
        if (psg_train_hooks_eval(t->hooks, t->total, &e, t->inception) < 0) return -1;
    }
    return psg_dist_session_job_done(t->dsess);
}

/* --shard-bytes, or its default: 512 KiB in a cluster, none in one process */
static int64_t shard_bytes(const trainer_t *t) {
    return t->c->dense_shard_bytes >= 0 ? t->c->dense_shard_bytes
           : t->w.cluster               ? PSG_TRAIN_CLUSTER_SHARD_BYTES
                                        : 0;
}

/* The one model of psg_replica_build (no towers). */
static int build_one(void *ctx, psg_graph_t *g, psg_model_t *m) {
    trainer_t *t = ctx;
    psg_shape_t ex = psg_dataset_example_shape(t->train);
    psg_model_options_t mo = {.dense_shard_bytes = shard_bytes(t)};
    return psg_model_build_with(g, t->c->model, (int)ex.dims[0], (int)ex.dims[1], (int)ex.dims[2],
                                psg_dataset_num_classes(t->train), t->c->seed, &mo, m);
}

/* The recipe, the data, the cluster, the graph and its optimizer. */
static int setup(trainer_t *t) {
    const psg_train_config_t *c = t->c;
    psg_model_defaults_t d;
    if (psg_model_defaults(c->model, &d) < 0) return psg_error_wrap("--model");
    t->batch = c->batch > 0 ? c->batch : d.batch;
    t->lr = c->lr >= 0 ? c->lr : d.lr;
    t->inception = !strcmp(c->model, "inception3");
    t->opt_kind = c->optimizer ? c->optimizer : t->inception ? "rmsprop" : "momentum";
    if (c->towers >
        t->batch) /* in a cluster too: --batch is each worker's, split over its towers */
        return psg_error_set(
            "--towers %d is more than --batch %d: each tower needs at least one example", c->towers,
            t->batch);
    if (load_data(c, t) < 0) return -1;
    if (psg_dataset_example_shape(t->train).rank != 3)
        return psg_error_set("data set examples must be (height, width, channels)");
    if (join_cluster(c, t) < 0) return -1;
    t->g = psg_graph_new();
    /* before any node: every model and gradient (towers, strategies) is built under it */
    if (!t->g || psg_graph_set_precision(t->g, c->precision) < 0) return -1;
    if (c->init_from && !(t->init_from = psg_init_from_new(c->init_from, c->init_strict, t->g)))
        return -1;
    t->gpu = c->device && !strcmp(c->device, "gpu");
    if (t->gpu && psg_gpu_count() == 0) {
        fprintf(t->out, "psgraph train: --device gpu: %s; running on the CPU\n", psg_gpu_status());
        t->gpu = false;
    }
    if (t->inception) return 0; /* its optimizer reads the global step: built with the graph */
    psg_optimizer_config_t oc = psg_optimizer_defaults(t->opt_kind);
    oc.learning_rate = (float)t->lr;
    if (!strcmp(t->opt_kind, "momentum")) oc.momentum = (float)c->momentum;
    oc.l1 = (float)c->l1, oc.l2 = (float)c->l2, oc.lr_power = (float)c->lr_power;
    if (!(t->opt = psg_optimizer_new(&oc))) return psg_error_wrap("--optimizer");
    return 0;
}

/* The gradients a step aggregates in a cluster (the decay's replicas): sync's N, else 1. */
static int replicas(const trainer_t *t) {
    const psg_train_config_t *c = t->c;
    if (!t->w.cluster || strcmp(psg_sync_train_strategy(c), "sync")) return 1;
    return c->replicas_to_aggregate > 0 ? c->replicas_to_aggregate
                                        : t->w.num_workers - c->backup_workers;
}

/* inception3's config, recipe and optimizer (under the replica setter in a cluster: its
 * learning rate reads the global step). */
static int inception_setup(trainer_t *t) {
    const psg_train_config_t *c = t->c;
    if (psg_inception_train_init(&t->inc, c, c->image_size, psg_dataset_num_classes(t->train),
                                 psg_dataset_size(t->train), t->batch, replicas(t)) < 0)
        return -1;
    if (c->lr < 0) t->lr = t->inc.recipe.learning_rate;
    if (t->init_from) { /* Keras's names for slim's (examples/inception3_names.c) */
        psg_inception3_name_t *pairs;
        int n = psg_inception3_keras_names(&t->inc.cfg, &pairs);
        int rc = n < 0 ? -1 : psg_init_from_alias(t->init_from, n, pairs);
        free(pairs);
        if (rc < 0) return -1;
    }
    if (t->w.cluster) psg_graph_push_replica_setter(t->g, t->w.setter);
    t->opt = psg_inception_train_optimizer(&t->inc, t->g);
    if (t->w.cluster) psg_graph_pop_device(t->g);
    return t->opt ? 0 : -1;
}

/* After the replica: inception3's step (batch-norm updates, moving average), then the
 * evaluation models, placed as the replica is (towers: soft placement of the nodes added
 * after them; a cluster: the replica setter). mlp and cnn evaluate the training model. */
static int finish_graph(trainer_t *t) {
    psg_replica_t *r = &t->rep;
    if (!t->inception) {
        t->em = (psg_eval_models_t){1, {r->m.images}, {r->m.logits}};
        return 0;
    }
    const char *dev = r->towers && !t->w.cluster ? r->towers->variable_device : NULL;
    if (dev) psg_graph_push_device(t->g, dev);
    int rc = psg_inception_train_finish(&t->inc, t->g, &r->train_op, t->sync, t->w.setter);
    if (dev) psg_graph_pop_device(t->g);
    if (rc < 0) return -1;
    if (t->w.cluster) psg_graph_push_replica_setter(t->g, t->w.setter);
    rc = psg_inception_train_eval_models(&t->inc, t->g, &t->em);
    if (t->w.cluster) psg_graph_pop_device(t->g);
    if (rc < 0) return -1;
    psg_placement_options_t po = {.allow_soft_placement = true};
    return r->towers && !t->w.cluster ? psg_place(t->g, &po) : 0;
}

/* The replica (worker/replica.c decides model x towers x one process or strategy). */
static int build_graph(trainer_t *t) {
    const psg_train_config_t *c = t->c;
    psg_shape_t ex = psg_dataset_example_shape(t->train);
    psg_towers_config_t tc = {.model = c->model,
                              .height = (int)ex.dims[0],
                              .width = (int)ex.dims[1],
                              .channels = (int)ex.dims[2],
                              .classes = psg_dataset_num_classes(t->train),
                              .seed = c->seed,
                              .num_towers = c->towers,
                              .device = t->gpu ? PSG_TOWERS_GPU : PSG_TOWERS_CPU,
                              .variable_device = t->w.cluster ? "/device:CPU:0" : NULL,
                              .dense_shard_bytes = shard_bytes(t)};
    if (t->inception) {
        if (inception_setup(t) < 0) return -1;
        tc.build = psg_inception_train_build_tower;
        tc.build_ctx = &t->inc;
    }
    psg_replica_spec_t rs = {.c = c,
                             .w = &t->w,
                             .opt = t->opt,
                             .towers = t->gpu || c->towers > 1 ? &tc : NULL,
                             .build_one = t->inception ? psg_inception_train_build_one : build_one,
                             .ctx = t->inception ? (void *)&t->inc : t,
                             .out = t->out,
                             .forward_only = c->forward_only};
    if (psg_replica_build(t->g, &rs, &t->rep) < 0) return -1;
    t->sync = t->rep.sync;
    bool dispatch = c->data_shards && !strcmp(c->data_shards, "dispatch");
    if (dispatch && !t->w.cluster)
        return psg_error_set("--data-shards dispatch needs a cluster (the shards are on ps0)");
    psg_shard_data_options_t so = {.ds = t->train,
                                   .batch = t->batch,
                                   .shard_batches = c->shard_batches > 0 ? c->shard_batches : 20,
                                   .epochs = c->epochs > 0 ? c->epochs : 2,
                                   .seed = c->seed,
                                   .rank = t->w.rank,
                                   .out = t->out};
    if (dispatch && !(t->shards = psg_shard_data_new(t->g, &so))) return -1;
    if (finish_graph(t) < 0) return -1;
    return t->init_from ? psg_init_from_report(t->init_from, t->out) : 0;
}

/* The chief's membership thread: the strategy follows the live workers. */
static int set_live(void *arg, const bool *alive, int n) {
    trainer_t *t = arg;
    return psg_sync_train_set_live(t->sync, alive, n);
}

/* --data-shards dispatch: the batches from the shards ps0 hands out until the data of every
 * epoch is done (or --steps); an epoch's steps as one process would take them. */
static int start_shards(trainer_t *t) {
    const psg_train_config_t *c = t->c;
    if (psg_shard_data_start(t->shards, t->dsess, t->metrics) < 0) return -1;
    int64_t all = psg_shard_data_batches_per_epoch(t->shards);
    t->per_epoch = (all + t->w.num_workers - 1) / t->w.num_workers;
    t->total = c->steps > 0 ? c->steps : INT64_MAX / 2;
    psg_train_hooks_set_last_step(t->hooks, t->total);
    fprintf(t->out,
            "psgraph train: model %s, %s, batch %d, %s lr %g, %s, %lld batches an epoch in shards "
            "of %d handed out by ps0 (--data-shards dispatch), %d threads\n",
            c->model, c->data, t->batch, t->opt_kind, t->lr,
            c->steps > 0 ? "--steps" : "until every epoch's shards are done", (long long)all,
            c->shard_batches > 0 ? c->shard_batches : 20, c->threads);
    fprintf(t->out, "psgraph train: %s of %d workers (%s), %s, variables on %d ps tasks\n",
            t->w.task, t->w.num_workers, t->w.chief ? "chief" : "not chief",
            psg_sync_train_strategy(c), psg_cluster_num_tasks(t->w.cluster, "ps"));
    fflush(t->out);
    t->evaluated_epoch = 0;
    t->run_start = t->interval_start = psg_now_sec();
    t->last_loss = NAN;
    return 0;
}

/* Runners, metrics, hooks, the cluster's start, the batches from the restored step. */
static int start(trainer_t *t) {
    const psg_train_config_t *c = t->c;
    if (make_runners(t) < 0) return -1;
    if (c->logdir && !(t->metrics = psg_metrics_open_worker(c->logdir, &t->w))) return -1;
    /* the local hooks checkpoint and trace a local session; in a cluster the chief
     * checkpoints through the ps tasks and traces through their servers
     * (worker/cluster_ckpt.c, started below), so the local hooks keep out of it */
    t->hook_cfg = *c; /* the hooks keep a pointer to it */
    if (t->w.cluster) {
        t->hook_cfg.logdir = NULL;
        t->hook_cfg.trace_path = NULL;
    }
    if (!(t->hooks =
              psg_train_hooks_new(&t->hook_cfg, t->sess, t->out, t->metrics, &t->start_step)))
        return -1;
    if (c->join && (!t->w.cluster || t->w.chief))
        return psg_error_set_code(PSG_ERR_CONFIG,
                                  "--join: %s starts the job, it cannot join one (only a worker "
                                  "other than the chief joins)",
                                  t->w.cluster ? t->w.task : "a process without a cluster");
    if (t->w.cluster && start_cluster(t) < 0) return -1;
    /* a scaled-in pod's SIGTERM: the step in progress ends, the chief is told, the job goes on */
    if (t->w.cluster && !t->w.chief) psg_membership_leave_arm();
    if (t->w.cluster && t->w.chief && t->w.num_workers > 1 &&
        !(t->members = psg_membership_new(t->w.cluster, t->w.task, t->out)))
        return -1;
    if (t->members && t->sync) psg_membership_on_live(t->members, set_live, t);
    if (t->members && t->shards) psg_shard_data_watch(t->shards, t->members);
    if (t->shards) return start_shards(t);
    /* the batches go on where the restored step left them */
    psg_batch_iter_options_t io = psg_batch_iter_train_options(t->batch, c->seed);
    if (t->w.cluster) {
        io.num_shards = t->w.num_workers;
        io.shard_index = t->w.rank;
    }
    io.start_batch = t->start_step;
    io.pin_memory = t->gpu;
    if (!(t->it = psg_batch_iter_new(t->train, &io))) return -1;
    t->per_epoch = psg_batch_iter_batches_per_epoch(t->it);
    t->total = c->steps > 0 ? c->steps : t->per_epoch * c->epochs;
    psg_train_hooks_set_last_step(t->hooks, t->total);
    fprintf(
        t->out,
        "psgraph train: model %s, %s, batch %d, %s lr %g, %lld steps (%lld per epoch), %d threads, %d %s tower%s\n",
        c->model, c->data, t->batch, t->opt_kind, t->lr, (long long)t->total,
        (long long)t->per_epoch, c->threads, c->towers, t->gpu ? "GPU" : "CPU",
        c->towers == 1 ? "" : "s");
    if (t->w.cluster)
        fprintf(t->out,
                "psgraph train: %s of %d workers (%s), %s, variables on %d ps tasks%s, shard %d\n",
                t->w.task, t->w.num_workers, t->w.chief ? "chief" : "not chief",
                psg_sync_train_strategy(c), psg_cluster_num_tasks(t->w.cluster, "ps"),
                psg_cluster_ps_replicas(t->w.cluster) > 1
                    ? " (each shard backed up on the next ps task: --ps-replicas 2)"
                    : "",
                t->w.rank);
    if (t->rep.towers)
        fprintf(t->out, "%d %s towers, %d images each, gradients averaged in-graph\n",
                t->rep.towers->num_towers, t->gpu ? "GPU" : "CPU",
                t->batch / t->rep.towers->num_towers);
    if (t->inception) {
        fprintf(t->out, "psgraph train: inception3, %lld params, %.2f GMACs/image; ",
                (long long)t->inc.stats.params, (double)t->inc.stats.macs_per_example / 1e9);
        psg_inception_train_describe(&t->inc, t->out);
    }
    fflush(t->out);
    if (c->bench && !(t->bench = psg_bench_timing_new(c))) return -1;
    t->run_start = t->interval_start = psg_now_sec();
    t->last_loss = NAN;
    return 0;
}

/* One step on the next batch: *loss new, *over when the strategy ended training. */
static int one_step(trainer_t *t, int64_t step, psg_tensor_t **loss, bool *over) {
    psg_tensor_t *images = NULL, *labels = NULL;
    *over = false;
    *loss = NULL;
    int got = t->shards ? psg_shard_data_next(t->shards, &images, &labels)
                        : psg_batch_iter_next(t->it, &images, &labels);
    if (got == 0 && t->shards) return (*over = true), 0; /* every epoch's shards are done */
    if (got <= 0) return got == 0 ? psg_error_set("the training data ended early") : -1;
    psg_tensor_t *fv[2 * PSG_MAX_TOWERS] = {images, labels};
    int rc;
    if (t->sync) { /* the strategy splits the batch itself */
        rc = psg_sync_train_step(t->sync, images, labels, loss, over);
        /* a strategy without tokens: a step that hit a restarted ps is retried once the ps
         * is back; with tokens (sync), after a failover to the backups, from the token the
         * chief releases again (docs/replication.md) */
        const psg_sync_graph_t *sg = psg_sync_train_graph(t->sync);
        bool tokens = sg->chief_op >= 0;
        bool retries = !sg->no_retry && (!tokens || psg_sync_train_can_rejoin(t->sync));
        /* the job is done (the ps tasks stop, nothing crashed): nothing to recover */
        for (int retry = 0;
             rc < 0 && retries && retry < 3 && psg_error_code() != PSG_ERR_JOB_DONE &&
             psg_train_hooks_recover(t->hooks, step) == 0;
             retry++) {
            bool applied = false;
            if (tokens && psg_sync_train_rejoin(t->sync, &applied) < 0) break;
            if (applied) { /* its gradient was used: the batch is done, its loss not known */
                *loss = psg_tensor_scalar_f32(isfinite(t->last_loss) ? t->last_loss : 0);
                rc = *loss ? 0 : psg_error_set("out of memory");
                break;
            }
            rc = psg_sync_train_step(t->sync, images, labels, loss, over);
        }
    } else {
        rc = t->rep.towers ? psg_towers_split(t->rep.towers, images, labels, fv) : 0;
        if (rc == 0) rc = psg_callable_run(t->step, fv, loss);
        for (int i = 0; t->rep.towers && i < t->rep.n_feeds; i++) psg_tensor_destroy(&fv[i]);
    }
    psg_tensor_destroy(&images);
    psg_tensor_destroy(&labels);
    return rc;
}

/* The progress line every --log-every steps (and the last). */
static int log_progress(trainer_t *t, int64_t step, double now) {
    double dt = now - t->interval_start;
    double eps = (double)t->interval_steps * t->batch / dt,
           mean = t->loss_sum / (double)t->interval_steps;
    char eta[32];
    fprintf(t->out, "step %lld  epoch %.2f  loss %.4f  examples/sec %.0f  sec/batch %.4f  eta %s\n",
            (long long)(step + 1), (double)(step + 1) / (double)t->per_epoch, mean, eps,
            dt / (double)t->interval_steps,
            psg_train_hooks_eta((double)(t->total - step - 1) * dt / (double)t->interval_steps, eta,
                                sizeof eta));
    fflush(t->out);
    if (t->metrics)
        fprintf(
            t->metrics,
            "{\"event\":\"progress\",\"step\":%lld,\"epoch\":%.4f,\"loss\":%.6f,\"learning_rate\":%g,\"examples_per_sec\":%.1f,\"rss_mb\":%.1f,\"wall_sec\":%.3f}\n",
            (long long)(step + 1), (double)(step + 1) / (double)t->per_epoch, mean, t->lr, eps,
            rss_mb(), now - t->run_start);
    if (psg_train_hooks_progress(t->hooks, step + 1, mean, t->lr, eps) < 0) return -1;
    t->loss_sum = 0;
    t->interval_steps = 0;
    t->interval_start = psg_now_sec();
    return 0;
}

/* The steps, with progress lines and evaluations (every epoch, or --eval-every). */
static int train_loop(trainer_t *t, psg_train_result_t *r) {
    const psg_train_config_t *c = t->c;
    r->steps = t->start_step;
    t->every_mark = c->eval_every > 0 ? t->start_step / c->eval_every : 0;
    for (int64_t step = t->start_step; step < t->total; step++) {
        psg_tensor_t *loss = NULL;
        bool over = false;
        double t0 = psg_now_sec();
        psg_train_hooks_before_step(t->hooks, step);
        if (t->bench && psg_bench_timing_before_step(t->bench, step, t->sess, t->gpu) < 0)
            return -1;
        if (one_step(t, step, &loss, &over) < 0)
            return psg_error_wrap("step %lld", (long long)step);
        if (!loss) break; /* no step: the data is done (--data-shards dispatch) */
        t->last_loss = psg_tensor_f32(loss)[0];
        psg_tensor_destroy(&loss);
        if (!isfinite(t->last_loss))
            return psg_error_set("step %lld: the loss is %g", (long long)step, t->last_loss);
        if (psg_train_hooks_after_step(t->hooks, step + 1) < 0) return -1;
        double t1 = psg_now_sec();
        if (t->bench && psg_bench_timing_after_step(t->bench, step, t1 - t0) < 0) return -1;
        if (step >= (c->bench ? c->bench_warmup : WARMUP_STEPS)) {
            t->steady_time += t1 - t0;
            t->steady_examples += t->batch;
        }
        t->all_time += t1 - t0;
        t->all_examples += t->batch;
        if (step + 1 == 100) t->rss_at_100 = rss_mb();
        t->loss_sum += t->last_loss;
        t->interval_steps++;
        if (((step + 1) % c->log_every == 0 || step + 1 == t->total) &&
            log_progress(t, step, t1) < 0)
            return -1;
        bool chief = !t->w.cluster || t->w.chief;
        /* a sync chief evaluates at the global step, as TF's: its own steps fall behind it
         * when it is the dropped worker; --eval-every N then counts global steps */
        int64_t at = t->w.cluster && t->sync ? psg_sync_train_token_step(t->sync) : -1;
        bool every = c->eval_every > 0 && (at >= 0 ? at / c->eval_every > t->every_mark
                                                   : (step + 1) % c->eval_every == 0);
        if (every && at >= 0) t->every_mark = at / c->eval_every;
        /* each epoch, or instead every N steps (--eval-every N); a benchmark only when
         * told to (--eval-every) */
        bool epoch_end = t->shards ? psg_shard_data_epoch(t->shards) > t->evaluated_epoch
                                   : (step + 1) % t->per_epoch == 0;
        bool due = (!c->bench && c->eval_every <= 0 && epoch_end) || every;
        if (t->shards && due) t->evaluated_epoch = psg_shard_data_epoch(t->shards);
        bool last = step + 1 == t->total && !t->w.cluster && (!c->bench || c->eval_every > 0);
        if (((due && step + 1 < t->total && chief && !over) || last) &&
            eval_now(t, at >= 0 ? at : step + 1, step + 1, r) < 0)
            return -1;
        r->steps = step + 1;
        psg_membership_set_step(t->members, step + 1);
        if (t->w.cluster && !t->w.chief && psg_membership_leave_asked()) {
            t->left = true; /* SIGTERM: leaves at this step boundary */
            break;
        }
        if (over) break; /* the strategy ended training (sync: the token queue closed) */
    }
    if (t->shards && t->total > r->steps) t->total = r->steps; /* the data's end, for the lines */
    return 0;
}

/* The chief's (or one process's) final JSON line. */
static void final_line(trainer_t *t, const psg_train_result_t *r) {
    const psg_train_config_t *c = t->c;
    char line[8192], cluster_desc[5632] = "", sync_desc[4096] = "", tk[160] = "", loss[32] = "null";
    if (isfinite(r->final_loss)) /* none after --steps 0: null, JSON has no nan */
        snprintf(loss, sizeof loss, "%.6f", r->final_loss);
    if (t->w.cluster) {
        psg_sync_train_json(t->sync, sync_desc, sizeof sync_desc);
        char members[1024] = "";
        if (t->members) psg_membership_json(t->members, members, sizeof members);
        snprintf(cluster_desc, sizeof cluster_desc, "%s%s\"workers\":%d,\"ps\":%d,", sync_desc,
                 members, t->w.num_workers, psg_cluster_num_tasks(t->w.cluster, "ps"));
    }
    if (t->inception && r->top1[0] >= 0) {
        psg_train_eval_t e = {.n_models = r->top1[1] >= 0 ? 2 : 1};
        for (int m = 0; m < 2; m++) e.top1[m] = r->top1[m], e.top5[m] = r->top5[m];
        topk_json(t, &e, tk, sizeof tk);
    }
    snprintf(line, sizeof line,
             "{\"event\":\"done\",\"model\":\"%s\",\"data\":\"%s\",%s\"steps\":%lld,\"batch\":%d,"
             "\"threads\":%d,\"precision\":\"%s\",\"final_loss\":%s,\"test_accuracy\":%.4f%s,"
             "\"examples_per_sec\":%.1f,\"wall_sec\":%.3f,"
             "\"peak_rss_mb\":%.1f,\"rss_mb_at_step_100\":%.1f,\"rss_mb_at_end\":%.1f,"
             "\"blas\":\"%s\"}",
             c->model, c->data, cluster_desc, (long long)r->steps, t->batch, c->threads,
             psg_precision_name(psg_graph_compute_dtype(t->g)), loss, r->test_accuracy, tk,
             r->examples_per_sec, psg_now_sec() - t->run_start, peak_rss_mb(), t->rss_at_100,
             rss_mb(), psg_blas_core());
    fprintf(t->out, "%s\n", line);
    fflush(t->out);
    if (t->metrics) fprintf(t->metrics, "%s\n", line);
}

/* The cluster's fields of a bench line, each followed by a comma: N as "workers", the
 * strategy's, and each worker's own images/sec. */
static void bench_cluster(trainer_t *t, char *buf, size_t size) {
    char sj[4096] = "";
    int W = t->w.num_workers;
    double *rates = malloc(sizeof *rates * (size_t)W);
    psg_sync_train_json(t->sync, sj, sizeof sj);
    int nr = rates ? psg_sync_train_worker_rates(t->sync, rates) : 0;
    size_t len =
        (size_t)snprintf(buf, size, "\"ps\":%d,\"workers\":%d,%s\"per_worker_images_per_sec\":[",
                         psg_cluster_num_tasks(t->w.cluster, "ps"), replicas(t), sj);
    for (int i = 0; i < nr && len + 32 < size; i++)
        len += rates[i] < 0
                   ? (size_t)snprintf(buf + len, size - len, "%snull", i ? "," : "")
                   : (size_t)snprintf(buf + len, size - len, "%s%.3f", i ? "," : "", rates[i]);
    if (len + 4 < size) snprintf(buf + len, size - len, "],");
    free(rates);
}

/* psgraph bench's line after the final one (worker/bench_timing.c). */
static int bench_line(trainer_t *t, const psg_train_result_t *r) {
    const psg_train_config_t *c = t->c;
    char cl[6144] = "";
    if (t->w.cluster) bench_cluster(t, cl, sizeof cl);
    int towers = t->rep.towers ? t->rep.towers->num_towers : 1;
    psg_bench_line_t l = {.model = c->model,
                          .data = c->data,
                          .device = t->gpu ? "gpu" : "cpu",
                          .precision = psg_precision_name(psg_graph_compute_dtype(t->g)),
                          .mode = c->forward_only ? "forward" : "train",
                          .towers = towers,
                          .batch = t->batch,
                          .image_size = c->image_size,
                          .classes = c->classes,
                          .threads = c->threads,
                          .per_step = t->w.cluster ? replicas(t) * t->batch : t->batch,
                          .job_steps_per_sec =
                              t->w.cluster && t->sync ? psg_sync_train_steps_per_sec(t->sync) : 0,
                          .final_loss = r->final_loss,
                          .params = t->inc.stats.params,
                          .macs_per_image = t->inc.stats.macs_per_example,
                          .cluster = cl,
                          .g = t->g,
                          .profile_batch = t->batch / towers};
    return psg_bench_timing_report(t->bench, &l, t->out);
}

/* A worker asked to leave (SIGTERM) after its step: the chief told, said, exit 0. Neither the
 * strategy's end (sync's would close the token queue for everyone) nor a JobDone to the ps
 * tasks (the chief tells them at the job's end, as for a lost worker). */
static int leave(trainer_t *t, const psg_train_result_t *r) {
    if (psg_dist_session_drain(t->dsess) < 0) psg_error_clear(); /* its last step: done or not */
    bool told = psg_membership_leave_tell(t->w.cluster, t->w.task) == 0;
    if (!told) {
        fprintf(t->out,
                "psgraph train: %s: warning: %s (it is found lost after the peer timeout)\n",
                t->w.task, psg_error_message());
        psg_error_clear();
    }
    fprintf(t->out,
            "psgraph train: %s: SIGTERM: leaves the job after its step %lld%s\n"
            "{\"event\":\"worker_left\",\"task\":\"%s\",\"signal\":\"SIGTERM\",\"steps\":%lld,"
            "\"chief_told\":%s}\n",
            t->w.task, (long long)r->steps, told ? " (the chief was told)" : "", t->w.task,
            (long long)r->steps, told ? "true" : "false");
    fflush(t->out);
    return 0;
}

/* After the loop: the strategy's end, the hooks', the cluster's, the final line. */
static int finish(trainer_t *t, psg_train_result_t *r) {
    r->final_loss = t->last_loss;
    /* past the warm-up steps (plans, first touches); a shorter run: all of its steps */
    r->examples_per_sec = t->steady_time > 0 ? (double)t->steady_examples / t->steady_time
                          : t->all_time > 0  ? (double)t->all_examples / t->all_time
                                             : 0;
    if (t->left) return leave(t, r);
    if (t->dsess && psg_dist_session_drain(t->dsess) < 0) return -1; /* the last overlapped step */
    if (t->sync && psg_sync_train_finish(t->sync, r->examples_per_sec) < 0) return -1;
    if (psg_train_hooks_end(t->hooks, r->steps) < 0) return -1;
    if (t->w.cluster && finish_cluster(t, r) < 0) return -1;
    if (t->w.cluster && !t->w.chief) {
        fprintf(t->out,
                "{\"event\":\"worker_done\",\"task\":\"%s\",\"steps\":%lld,\"final_loss\":%.6f,"
                "\"examples_per_sec\":%.1f}\n",
                t->w.task, (long long)r->steps, r->final_loss, r->examples_per_sec);
        fflush(t->out);
        return 0;
    }
    final_line(t, r);
    return t->bench ? bench_line(t, r) : 0;
}

/* Whether a worker's run failed because the job ended without it (the ps tasks stop: every
 * worker said it is done, this one left out, e.g. one that joined at the job's end): said,
 * the run is over, nothing crashed. */
static bool job_ended(trainer_t *t, const psg_train_result_t *r) {
    if (psg_error_code() != PSG_ERR_JOB_DONE || !t->w.cluster || t->w.chief) return false;
    char when[64] = "before this worker's first step";
    if (r->steps >= t->total)
        snprintf(when, sizeof when, "after this worker's last step");
    else if (r->steps > t->start_step)
        snprintf(when, sizeof when, "before this worker's step %lld", (long long)r->steps + 1);
    /* the ps task's reply ("task /job:ps/...: job done: ..."), not the steps' wrapping */
    const char *msg = psg_error_message(), *ps = strstr(msg, "task /job:"), *next;
    while (ps && (next = strstr(ps + 1, "task /job:"))) ps = next;
    /* a pull's abort wraps the reason: "rendezvous: aborted (REASON) while waiting for ..." */
    char reason[512];
    snprintf(reason, sizeof reason, "%s", ps ? ps : msg);
    char *wrap = strstr(reason, ") while ");
    if (wrap) *wrap = 0;
    fprintf(t->out, "psgraph train: %s: the job ended (%s) %s: it stops here\n", t->w.task, reason,
            when);
    fflush(t->out);
    psg_error_clear();
    return true;
}

int psg_train(const psg_train_config_t *given, psg_train_result_t *r) {
    psg_train_config_t cfg = *given;
    const psg_train_config_t *c = &cfg;
    psg_train_resolve(&cfg);
    if (psg_evaluator_wanted(c)) return psg_evaluator_run(c, r); /* TF_CONFIG's evaluator task */
    if (!strcmp(c->model, "wide-deep") && c->data_shards && !strcmp(c->data_shards, "dispatch"))
        return psg_error_set("--data-shards dispatch: not with --model wide-deep (its own data)");
    if (!strcmp(c->model, "wide-deep")) return psg_train_ctr(c, r);
    trainer_t t = {.c = c, .out = c->out ? c->out : stdout};
    memset(r, 0, sizeof *r);
    r->top1[0] = r->top1[1] = r->top5[0] = r->top5[1] = -1;
    int rc = setup(&t) < 0 || build_graph(&t) < 0 || start(&t) < 0 || train_loop(&t, r) < 0 ||
                     finish(&t, r) < 0
                 ? -1
                 : 0;
    if (rc < 0 && job_ended(&t, r)) rc = 0;
    if (rc < 0) psg_graph_wrap_error(t.g);
    psg_err_code_t code = psg_error_code();
    trainer_free(&t);
    if (rc < 0) psg_error_recode(code); /* the caller decides on it (a wrong TF_CONFIG: exit 2) */
    return rc;
}
