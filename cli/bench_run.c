/* The run of `psgraph bench inception3`: the Inception-v3 graph with its
 * RMSProp recipe in one process (towers splitting the batch when asked), or
 * as one worker task of a cluster (variables on the ps tasks; async for one
 * worker, sync replicas with backup workers otherwise); then the timed
 * steps on one synthetic batch or ImageNet, images/sec per interval and one
 * final JSON line. Not the option parsing or the local launch (bench_cmd.c). */
#include "cli/bench.h"
#include "ops/cpu/blas.h"
#include "psgraph/psgraph.h"
#include "worker/replica.h"
#include "worker/sync_train.h"
#include "worker/worker_task.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const psg_bench_opts_t *o;
    const char *cmd;
    psg_inception3_config_t cfg;
    psg_inception3_recipe_t recipe;
    psg_graph_t *g;
    psg_inception3_t m; /* tower 0's */
    psg_model_stats_t st;
    int train_op;
    psg_endpoint_t *ema_vars; /* the model's variables, taken before an optimizer's slots */
    int n_ema_vars;
    /* one process */
    psg_session_t *sess;
    psg_callable_t *step;
    psg_trace_t *trace;        /* --trace: the timed steps' ops */
    psg_op_profile_t *profile; /* --op-profile: the timed steps' ops by type */
    double profiled_ms;        /* the profiled steps' wall time */
    psg_towers_t *towers;      /* NULL: one tower */
    bool gpu;
    psg_inception3_t tower_models[PSG_MAX_TOWERS];
    /* a cluster */
    bool in_cluster;
    psg_train_config_t tc; /* the cluster's and sync replicas' settings */
    psg_worker_task_t w;
    psg_dist_session_t *dsess;
    psg_replica_t rep;      /* the replica: model or towers, the strategy */
    psg_sync_train_t *sync; /* rep.sync: the strategy's worker (worker/sync_train.c) */
    psg_optimizer_t *opt;   /* the strategy's (borrowed by sync) */
    int num_required;       /* gradients a global step (N) */
    /* input */
    psg_imagenet_t *inet;
    psg_batch_iter_t *it;
    psg_tensor_t *img, *lab;
} bench_t;

static void on_skip(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "psgraph: skipped: %s\n", msg);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Tower k of a towers graph (worker/towers.c): Inception-v3 sharing tower 0's
 * variables; tower 0 also fixes the variables the moving average covers. */
static int build_tower(void *ctx, psg_graph_t *g, int k, psg_model_t *mm) {
    bench_t *b = ctx;
    psg_inception3_t *m = &b->tower_models[k];
    if (psg_inception3_build(g, &b->cfg, m) < 0) return -1;
    /* tower 0's size (not the optimizer's learning-rate nodes built before it) */
    if (k == 0 && psg_model_stats(g, "InceptionV3/", &b->st) < 0) return -1;
    if (k == 0 && (b->n_ema_vars = psg_inception3_variables(g, &b->ema_vars)) < 0) return -1;
    *mm = (psg_model_t){m->images, m->labels, m->logits, m->loss, m->correct};
    return 0;
}

/* Inception-v3 towers on "/device:CPU:k" or "/device:GPU:k"; in a cluster
 * the variables on the ps tasks' CPUs. */
static psg_towers_config_t towers_config(bench_t *b) {
    const psg_bench_opts_t *o = b->o;
    return (psg_towers_config_t){.model = "inception3",
                                 .classes = o->classes,
                                 .seed = o->seed,
                                 .num_towers = o->towers,
                                 .device = b->gpu ? PSG_TOWERS_GPU : PSG_TOWERS_CPU,
                                 .build = build_tower,
                                 .build_ctx = b,
                                 .variable_device = b->in_cluster ? "/device:CPU:0" : NULL};
}

/* K towers, the gradients averaged in-graph; the step also runs tower 0's
 * batch-norm updates, then the EMA. */
static int build_towers(bench_t *b) {
    psg_optimizer_t *opt = psg_inception3_optimizer(b->g, &b->recipe, NULL);
    if (!opt) return -1;
    psg_towers_config_t tc = towers_config(b);
    b->towers = calloc(1, sizeof *b->towers);
    int rc =
        b->towers ? psg_towers_build(b->g, &tc, opt, b->towers) : psg_error_set("out of memory");
    psg_optimizer_destroy(&opt);
    if (rc < 0) return -1;
    b->m = b->tower_models[0];
    psg_graph_push_device(b->g, b->towers->variable_device);
    rc = psg_inception3_finish_train_op(b->g, &b->recipe, b->towers->train_op, b->m.bn_updates,
                                        b->n_ema_vars, b->ema_vars, &b->train_op);
    psg_graph_pop_device(b->g);
    psg_placement_options_t po = {.allow_soft_placement = true};
    return rc < 0 ? -1 : psg_place(b->g, &po); /* the nodes added after the towers' placement */
}

/* The one-tower model of psg_replica_build: Inception-v3, its size, the variables the
 * moving average covers (before an optimizer's slots). */
static int build_one(void *ctx, psg_graph_t *g, psg_model_t *mm) {
    bench_t *b = ctx;
    if (psg_inception3_build(g, &b->cfg, &b->m) < 0 || psg_model_stats(g, NULL, &b->st) < 0 ||
        (b->n_ema_vars = psg_inception3_variables(g, &b->ema_vars)) < 0)
        return -1;
    *mm = (psg_model_t){b->m.images, b->m.labels, b->m.logits, b->m.loss, b->m.correct};
    return 0;
}

/* Joins the cluster as this worker task and builds its replica through the strategy
 * (--sync; by default sync replicas aggregating N = workers - b gradients a step, or
 * async for one worker and no backups): a worker's step also runs tower 0's batch-norm
 * updates, and the moving average follows each update. */
static int build_replica(bench_t *b) {
    const psg_bench_opts_t *o = b->o;
    psg_train_config_t *tc = &b->tc;
    psg_train_config_defaults(tc);
    tc->cluster_file = o->cluster_file;
    tc->job = o->job;
    tc->task = o->task;
    tc->threads = o->threads;
    tc->seed = o->seed;
    tc->step_timeout_ms = o->step_timeout_ms;
    tc->steps = o->warmup + o->steps;
    tc->backup_workers = o->backups;
    tc->stragglers = o->stragglers.v;
    tc->num_stragglers = o->stragglers.n;
    tc->sync_opt = o->sync_opt;
    if (psg_worker_task_join(&b->w, tc, "psgraph bench inception3") < 0) return -1;
    int W = b->w.num_workers;
    if (o->workers > 0 && o->workers + o->backups != W)
        return psg_error_set("--workers %d --backup-workers %d: the cluster has %d worker tasks, "
                             "not %d",
                             o->workers, o->backups, W, o->workers + o->backups);
    if (o->backups >= W)
        return psg_error_set("--backup-workers %d: the cluster has only %d worker tasks",
                             o->backups, W);
    tc->sync = o->sync ? o->sync : W > 1 || o->backups > 0 ? "sync" : "async";
    b->num_required = W - o->backups;
    b->recipe.replicas = b->num_required;
    /* the optimizer's learning-rate decay reads the global step: on the ps tasks */
    psg_graph_push_replica_setter(b->g, b->w.setter);
    b->opt = psg_inception3_optimizer(b->g, &b->recipe, NULL);
    psg_graph_pop_device(b->g);
    if (!b->opt) return -1;
    psg_towers_config_t twc = towers_config(b);
    psg_replica_spec_t rs = {.c = tc,
                             .w = &b->w,
                             .opt = b->opt,
                             .towers = o->towers > 1 || b->gpu ? &twc : NULL,
                             .build_one = build_one,
                             .ctx = b,
                             .out = stdout};
    if (psg_replica_build(b->g, &rs, &b->rep) < 0) return -1;
    b->sync = b->rep.sync;
    b->towers = b->rep.towers;
    if (b->towers) b->m = b->tower_models[0];
    int ema = -1;
    psg_graph_push_replica_setter(b->g, b->w.setter);
    int rc = psg_inception3_finish_train_op(b->g, &b->recipe, psg_sync_train_after_update(b->sync),
                                            -1, b->n_ema_vars, b->ema_vars, &ema);
    psg_graph_pop_device(b->g);
    if (rc < 0) return -1;
    psg_sync_train_add_ops(b->sync, b->m.bn_updates, ema);
    psg_dist_session_options_t so = {
        .cluster = b->w.cluster, .server = b->w.server, .step_timeout_ms = o->step_timeout_ms};
    if (!(b->dsess = psg_dist_session_new(b->g, &so))) return -1;
    if (psg_sync_train_init_local(b->sync, b->dsess) < 0) return -1;
    if (b->w.chief ? psg_dist_session_run_init(b->dsess) < 0
                   : psg_dist_session_wait_init(b->dsess, o->step_timeout_ms) < 0)
        return psg_error_wrap("the variables");
    return psg_sync_train_start(b->sync, b->dsess, b->w.cluster, b->w.server, b->w.chief, NULL);
}

/* The graph and its runner: a cluster's replica, towers, or the plain graph. */
static int build(bench_t *b) {
    const psg_bench_opts_t *o = b->o;
    if (b->in_cluster) return build_replica(b);
    bool towers = !o->forward_only && (o->towers > 1 || b->gpu);
    if (towers) {
        if (build_towers(b) < 0) return -1;
    } else if (psg_inception3_build(b->g, &b->cfg, &b->m) < 0 ||
               psg_model_stats(b->g, NULL, &b->st) < 0 ||
               (!o->forward_only &&
                psg_inception3_train_op(b->g, &b->recipe, &b->m, &b->train_op, NULL) < 0)) {
        return -1;
    }
    psg_session_options_t so = {.num_threads = o->threads};
    if (!(b->sess = psg_session_new(b->g, &so, NULL)) || psg_session_run_init(b->sess) < 0)
        return -1;
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS] = {b->m.images, b->m.labels};
    psg_endpoint_t fetch = o->forward_only ? b->m.xent : b->m.loss;
    if (towers) {
        psg_towers_feeds(b->towers, feeds);
        fetch = b->towers->loss;
    }
    b->step = psg_session_make_callable(b->sess, towers ? 2 * o->towers : 2, feeds, 1, &fetch,
                                        o->forward_only ? 0 : 1, &b->train_op);
    return b->step ? 0 : -1;
}

/* The input: ImageNet's batches (a worker reads its shard), or one random
 * batch made once (tf_cnn_benchmarks' synthetic data; each worker its own). */
static int make_input(bench_t *b) {
    const psg_bench_opts_t *o = b->o;
    int rank = b->in_cluster ? b->w.rank : 0;
    if (b->inet) {
        psg_batch_iter_options_t bo = psg_batch_iter_train_options(o->batch, o->seed);
        if (b->in_cluster) {
            bo.num_shards = b->w.num_workers;
            bo.shard_index = rank;
        }
        b->it = psg_batch_iter_new(psg_imagenet_dataset(b->inet), &bo);
        return b->it ? 0 : -1;
    }
    unsigned seed = (unsigned)(o->seed * 1000 + (uint64_t)rank);
    b->img =
        psg_tensor_new(PSG_DT_F32, &(psg_shape_t){4, {o->batch, o->image_size, o->image_size, 3}});
    b->lab = psg_tensor_new(PSG_DT_I32, &(psg_shape_t){1, {o->batch}});
    if (!b->img || !b->lab) return psg_error_set("out of memory");
    for (int64_t i = 0; i < psg_tensor_numel(b->img); i++)
        psg_tensor_f32(b->img)[i] = (float)rand_r(&seed) / (float)RAND_MAX * 2.0f - 1.0f;
    for (int i = 0; i < o->batch; i++) psg_tensor_i32(b->lab)[i] = rand_r(&seed) % o->classes;
    return 0;
}

/* One step on (img, lab): *loss new; *over when sync training is over. */
static int run_step(bench_t *b, psg_tensor_t *img, psg_tensor_t *lab, psg_tensor_t **loss,
                    bool *over) {
    *over = false;
    if (b->sync) return psg_sync_train_step(b->sync, img, lab, loss, over);
    psg_tensor_t *fv[2 * PSG_MAX_TOWERS] = {img, lab};
    int n = 0;
    if (b->towers) {
        if (psg_towers_split(b->towers, img, lab, fv) < 0) return -1;
        n = 2 * b->towers->num_towers;
    }
    int rc = psg_callable_run(b->step, fv, loss);
    for (int i = 0; i < n; i++) psg_tensor_destroy(&fv[i]);
    return rc;
}

/* --step-times FILE: each timed step's milliseconds, one a line (psgraph simulate --samples). */
static int write_step_times(const char *path, const double *ms, int64_t n) {
    FILE *f = fopen(path, "w");
    if (!f) return psg_error_set("--step-times %s: %s", path, strerror(errno));
    for (int64_t i = 0; i < n; i++) fprintf(f, "%.3f\n", ms[i]);
    if (fclose(f) != 0) return psg_error_set("--step-times %s: %s", path, strerror(errno));
    return 0;
}

static void print_model(const psg_bench_opts_t *o, const psg_model_stats_t *s) {
    printf("inception3: %dx%dx3 input, %d classes, auxiliary head %s\n", o->image_size,
           o->image_size, o->classes, o->aux ? "on" : "off");
    printf("parameters: %lld (trainable %lld; batch-norm moving mean and variance %lld; "
           "batch norm has beta only, no gamma, as Keras's conv2d_bn)\n",
           (long long)s->params, (long long)s->trainable, (long long)(s->params - s->trainable));
    printf("forward multiply-adds per image: %lld (%.3f G; conv and fully connected layers)\n",
           (long long)s->macs_per_example, (double)s->macs_per_example / 1e9);
    printf(
        "{\"model\":\"inception3\",\"image_size\":%d,\"classes\":%d,\"aux_logits\":%s,\"params\":%lld,"
        "\"trainable_params\":%lld,\"macs_per_image\":%lld}\n",
        o->image_size, o->classes, o->aux ? "true" : "false", (long long)s->params,
        (long long)s->trainable, (long long)s->macs_per_example);
}

static void print_header(const bench_t *b) {
    const psg_bench_opts_t *o = b->o;
    printf("psgraph %s: inception3 %s, %s, batch %d, %dx%d, %d classes, %d threads, %s, "
           "%lld params, %.2f GMACs/image\n",
           b->cmd, o->forward_only ? "forward" : "training", o->data, o->batch, o->image_size,
           o->image_size, o->classes, o->threads,
           o->forward_only
               ? "no optimizer"
               : "RMSProp(0.9, momentum 0.9, eps 1.0), lr 0.045 x0.94/2 epochs, EMA 0.9999",
           (long long)b->st.params, (double)b->st.macs_per_example / 1e9);
    if (b->towers)
        printf("%d %s towers, %d images each, gradients averaged in-graph\n", b->towers->num_towers,
               b->gpu ? "GPU" : "CPU", o->batch / b->towers->num_towers);
    if (b->in_cluster)
        printf("%s of %d workers (%s), %s, variables on %d ps tasks\n", b->w.task, b->w.num_workers,
               b->w.chief ? "chief" : "not chief", b->tc.sync,
               psg_cluster_num_tasks(b->w.cluster, "ps"));
    if (b->sync && psg_sync_train_graph(b->sync)->chief_op >= 0)
        printf(
            "sync replicas: the mean of the first %d of %d gradients a step, %d backup worker%s\n",
            b->num_required, b->w.num_workers, o->backups, o->backups == 1 ? "" : "s");
    if (!o->forward_only)
        printf("learning rate %g, decay every %lld steps\n", o->lr,
               (long long)psg_inception3_decay_steps(&b->recipe));
    printf("Step\tImg/sec\ttotal_loss\n");
    fflush(stdout);
}

/* The cluster's fields of the chief's final line, each followed by a comma. */
static void cluster_json(bench_t *b, char *buf, size_t size) {
    char sj[1536] = "";
    int W = b->w.num_workers;
    double *rates = malloc(sizeof *rates * (size_t)W);
    psg_sync_train_json(b->sync, sj, sizeof sj);
    int nr = rates ? psg_sync_train_worker_rates(b->sync, rates) : 0;
    size_t len =
        (size_t)snprintf(buf, size, "\"ps\":%d,\"workers\":%d,%s\"per_worker_images_per_sec\":[",
                         psg_cluster_num_tasks(b->w.cluster, "ps"), b->num_required, sj);
    for (int i = 0; i < nr && len + 32 < size; i++) {
        if (rates[i] < 0)
            len += (size_t)snprintf(buf + len, size - len, "%snull", i ? "," : "");
        else
            len += (size_t)snprintf(buf + len, size - len, "%s%.3f", i ? "," : "", rates[i]);
    }
    if (len + 4 < size) snprintf(buf + len, size - len, "],");
    free(rates);
}

/* After the steps, in a cluster: the sync end and counts, the chief waits for
 * the others, everyone tells the ps tasks it is done. */
static int finish_cluster(bench_t *b, double own_ips) {
    if (psg_dist_session_drain(b->dsess) < 0) return -1; /* the last overlapped step */
    if (psg_sync_train_finish(b->sync, own_ips) < 0) return -1;
    if (b->w.chief) {
        if (psg_dist_session_wait_workers(b->dsess, b->w.num_workers - 1, b->o->step_timeout_ms) <
            0) {
            printf("warning: %s; reporting anyway\n", psg_error_message());
            fflush(stdout);
        }
        psg_sync_train_count(b->sync, b->dsess, b->w.cluster);
    }
    return psg_dist_session_job_done(b->dsess);
}

static void bench_free(bench_t *b) {
    if (b->towers != b->rep.towers) free(b->towers); /* one process's (build_towers) */
    psg_replica_free(&b->rep);
    psg_dist_session_destroy(&b->dsess);
    psg_worker_task_leave(&b->w);
    psg_optimizer_destroy(&b->opt);
    psg_tensor_destroy(&b->img);
    psg_tensor_destroy(&b->lab);
    psg_batch_iter_destroy(&b->it);
    psg_imagenet_destroy(&b->inet);
    psg_callable_destroy(&b->step);
    psg_session_destroy(&b->sess);
    psg_trace_destroy(&b->trace);
    psg_op_profile_destroy(&b->profile);
    free(b->ema_vars);
    psg_graph_destroy(&b->g);
}

/* The model's config, the recipe, the device and the input's reader; 1 after printing
 * the model (--print-model): nothing to run. 0, 1, or -1 with the error set. */
static int setup(bench_t *b) {
    const psg_bench_opts_t *o = b->o;
    b->cfg = psg_inception3_defaults();
    b->cfg.image_size = o->image_size;
    b->cfg.classes = o->classes;
    b->cfg.aux_logits = o->aux;
    b->cfg.is_training = !o->forward_only;
    b->cfg.seed = o->seed;
    b->recipe = psg_inception3_recipe_defaults();
    b->recipe.learning_rate = o->lr;
    b->recipe.batch = o->batch;
    if (o->plain_sgd) {
        b->recipe.plain_sgd = true;
        b->recipe.ema_decay = 0;
        b->cfg.weight_decay = 0;
    }
    b->in_cluster = !o->print_model && (o->cluster_file || psg_cluster_env_given());
    b->gpu = !strcmp(o->device, "gpu");
    if (b->gpu && !o->print_model && psg_gpu_count() == 0) {
        printf("psgraph %s: --device gpu: %s; running on the CPU\n", b->cmd, psg_gpu_status());
        b->gpu = false;
    }
    if (!(b->g = psg_graph_new())) return psg_error_set("out of memory");
    /* before any node: the products of every tower and gradient are built under it */
    if (psg_graph_set_precision(b->g, o->precision) < 0) return -1;
    if (o->print_model) {
        if (psg_inception3_build(b->g, &b->cfg, &b->m) < 0 ||
            psg_model_stats(b->g, NULL, &b->st) < 0)
            return -1;
        print_model(o, &b->st);
        return 1;
    }
    if (!strcmp(o->data, "imagenet")) {
        psg_imagenet_options_t io = psg_imagenet_defaults(true);
        io.image_size = o->image_size;
        io.classes = o->classes;
        io.threads = o->decode_threads;
        io.seed = o->seed;
        io.compression = o->compression;
        io.dct_method = o->dct_method;
        io.report = on_skip;
        if (!(b->inet = psg_imagenet_new(o->data_dir, &io))) return -1;
        b->recipe.examples_per_epoch = psg_imagenet_num_records(b->inet);
    }
    return build(b) < 0 || make_input(b) < 0 ? -1 : 0;
}

/* What the timed steps gave. */
typedef struct {
    double *times;     /* each timed step's ms */
    int64_t k, cap, s; /* timed steps, room, steps run */
    double loss, timed;
    int per_step; /* images a step as reported: the chief's are N workers' */
} timing_t;

/* One step's time (after the warmup) and the interval's images/sec line. */
static int record(bench_t *b, timing_t *t, double t0, double dt, bool over, double *interval_start,
                  int *interval_steps) {
    const psg_bench_opts_t *o = b->o;
    if (t->k == t->cap) {
        double *nt = realloc(t->times, (size_t)(t->cap *= 2) * sizeof *t->times);
        if (!nt) return psg_error_set("out of memory");
        t->times = nt;
    }
    t->times[t->k++] = dt * 1000.0;
    t->timed += dt;
    if (*interval_steps == 0) *interval_start = t0;
    (*interval_steps)++;
    if (t->k % o->log_every == 0 || t->k == o->steps || over) {
        double ips = *interval_steps * t->per_step / (psg_now_sec() - *interval_start);
        printf("%lld\timages/sec: %.2f\t%.3f\n", (long long)t->k, ips, t->loss);
        fflush(stdout);
        *interval_steps = 0;
    }
    return 0;
}

/* The warmup and timed steps. */
static int loop(bench_t *b, timing_t *t) {
    const psg_bench_opts_t *o = b->o;
    /* a strategy with tokens (sync): a worker steps until training is over; a fast one may
     * take more tokens than there are global steps, never more than all of them */
    int64_t total = o->warmup + o->steps;
    bool tokens = b->sync && psg_sync_train_graph(b->sync)->chief_op >= 0;
    int64_t limit = tokens ? total * b->w.num_workers + 16 : total;
    t->cap = total;
    if (!(t->times = calloc((size_t)t->cap, sizeof *t->times)))
        return psg_error_set("out of memory");
    t->per_step = b->in_cluster && b->w.chief ? b->num_required * o->batch : o->batch;
    t->loss = NAN;
    double interval_start = 0;
    int interval_steps = 0;
    bool over = false;
    for (t->s = 0; t->s < limit && !over; t->s++) {
        psg_tensor_t *bi = b->img, *bl = b->lab, *out = NULL;
        if (o->trace && b->sess && t->s == o->warmup) {
            if (!(b->trace = psg_trace_new(0, "/job:localhost/replica:0/task:0", "CPU:0")))
                return psg_error_set("out of memory");
            psg_session_set_node_hook(b->sess, psg_trace_node_hook, b->trace);
        }
        if (o->op_profile && b->sess && t->s == o->warmup) {
            if (!(b->profile = psg_op_profile_new())) return -1;
            psg_session_set_node_hook(b->sess, psg_op_profile_node_hook, b->profile);
            psg_session_set_gpu_sync(b->sess, b->gpu);
        }
        if (b->trace) psg_trace_set_step(b->trace, t->s + 1);
        double t0 = psg_now_sec();
        if (b->it) {
            bi = bl = NULL;
            if (psg_batch_iter_next(b->it, &bi, &bl) != 1) return -1;
        }
        int src = run_step(b, bi, bl, &out, &over);
        if (b->it) {
            psg_tensor_destroy(&bi);
            psg_tensor_destroy(&bl);
        }
        if (src < 0) return psg_error_wrap("step %lld", (long long)t->s);
        t->loss = psg_tensor_f32(out)[0];
        psg_tensor_destroy(&out);
        double dt = psg_now_sec() - t0;
        if (b->profile) b->profiled_ms += dt * 1e3;
        if (!isfinite(t->loss))
            return psg_error_set("step %lld: the loss is %g", (long long)t->s, t->loss);
        if (t->s < o->warmup) {
            printf("warmup %lld\t%.2f s\t%.3f\n", (long long)t->s + 1, dt, t->loss);
            fflush(stdout);
        } else if (record(b, t, t0, dt, over, &interval_start, &interval_steps) < 0) {
            return -1;
        }
    }
    return 0;
}

/* The end: the cluster's, then the chief's (or one process's) final JSON line. */
static int report(bench_t *b, timing_t *t) {
    const psg_bench_opts_t *o = b->o;
    double own_ips = t->timed > 0 ? (double)t->k * o->batch / t->timed : 0;
    double ips = t->timed > 0 ? (double)t->k * t->per_step / t->timed : 0;
    if (b->in_cluster && finish_cluster(b, own_ips) < 0) return -1;
    if (b->in_cluster && !b->w.chief) {
        printf("{\"event\":\"worker_done\",\"task\":\"%s\",\"steps\":%lld,\"images_per_sec\":%.3f,"
               "\"final_loss\":%.4f}\n",
               b->w.task, (long long)t->s, own_ips, t->loss);
        return 0;
    }
    if (o->step_times && write_step_times(o->step_times, t->times, t->k) < 0) return -1;
    if (o->logdir && !b->in_cluster) {
        psg_resource_mgr_t *rm = psg_session_resources(b->sess);
        if (psg_checkpoint_save(o->logdir, t->s, 1, &rm, 5, NULL) < 0)
            return psg_error_wrap("--logdir");
        printf("checkpoint %s/" PSG_CKPT_PREFIX "-%lld.index.json written\n", o->logdir,
               (long long)t->s);
    }
    if (b->trace && psg_trace_write(b->trace, o->trace) < 0) return psg_error_wrap("--trace");
    if (b->profile && psg_op_profile_write_json(
                          b->profile, b->g, b->towers ? o->batch / b->towers->num_towers : o->batch,
                          t->k, b->profiled_ms, stdout) < 0)
        return psg_error_wrap("--op-profile");
    double median = 0, p90 = 0;
    if (t->k > 0) {
        qsort(t->times, (size_t)t->k, sizeof *t->times, cmp_double);
        median = t->times[(t->k - 1) / 2];
        p90 = t->times[(int64_t)ceil(0.9 * (double)(t->k - 1))];
    }
    char cl[3072] = "";
    if (b->in_cluster) cluster_json(b, cl, sizeof cl);
    printf("total images/sec: %.2f\n", ips);
    printf(
        "{\"bench\":\"inception3\",\"device\":\"%s\",\"precision\":\"%s\",\"towers\":%d,%s\"mode\":\"%s\",\"data\":\"%s\","
        "\"batch\":%d,\"image_size\":%d,\"classes\":%d,\"threads\":%d,\"warmup_steps\":%d,\"steps\":%lld,"
        "\"images_per_sec\":%.3f,\"step_ms_median\":%.1f,\"step_ms_p90\":%.1f,\"final_loss\":%.4f,"
        "\"params\":%lld,\"macs_per_image\":%lld,\"gmacs_per_sec\":%.2f,\"skipped_records\":%lld,"
        "\"blas\":\"%s\"}\n",
        b->gpu ? "gpu" : "cpu", psg_precision_name(psg_graph_compute_dtype(b->g)),
        b->towers ? b->towers->num_towers : 1, cl, o->forward_only ? "forward" : "train", o->data,
        o->batch, o->image_size, o->classes, o->threads, o->warmup, (long long)t->k, ips, median,
        p90, t->loss, (long long)b->st.params, (long long)b->st.macs_per_example,
        ips * (double)b->st.macs_per_example * (o->forward_only ? 1 : 3) / 1e9,
        b->inet ? (long long)psg_imagenet_num_skipped(b->inet) : 0LL, psg_blas_core());
    return 0;
}

int psg_bench_run(const psg_bench_opts_t *o, const char *cmd) {
    bench_t b = {.o = o, .cmd = cmd, .train_op = -1};
    timing_t t = {0};
    int rc = setup(&b);
    if (rc == 0) {
        print_header(&b);
        rc = loop(&b, &t) < 0 || report(&b, &t) < 0 ? -1 : 0;
    }
    if (rc < 0) {
        if (b.in_cluster && b.w.task[0]) psg_error_wrap("%s", b.w.task);
        psg_graph_wrap_error(b.g);
        fprintf(stderr, "psgraph %s: %s\n", cmd, psg_error_message());
    }
    bool config = rc < 0 && psg_error_code() == PSG_ERR_CONFIG; /* exit 2, as server and train */
    free(t.times);
    bench_free(&b);
    return rc < 0 ? (config ? 2 : 1) : 0;
}
