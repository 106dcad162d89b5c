/* `psgraph bench inception3`'s command line, as tf_cnn_benchmarks: the
 * options and their checks, and with --ps/--workers and no cluster given, a
 * local cluster of this binary's tasks (psg_launch_local). The run is the
 * training loop's (psg_train, worker/trainer.c) with its benchmark side on. */
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "psgraph/psgraph.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f, const char *cmd) {
    fprintf(f, "usage: psgraph %s [options]\n", cmd);
    psg_cli_print_help(PSG_CLI_BENCH, f, 21);
}

/* The combinations that make no sense, named. */
static int check(const psg_bench_opts_t *o) {
    const psg_train_config_t *c = &o->c;
    bool given = c->cluster_file || psg_cluster_env_given(); /* run as one task of it */
    bool cluster = given || o->ps > 0 || o->workers > 1 || c->backup_workers > 0;
    if (c->towers > c->batch)
        return psg_error_set(
            "--towers %d is more than --batch %d: each tower needs at least one image", c->towers,
            c->batch);
    if (c->cluster_file && !c->job)
        return psg_error_set("--cluster %s needs --job worker --task I", c->cluster_file);
    if (!given && (o->workers > 1 || c->backup_workers > 0) && o->ps < 1)
        return psg_error_set(
            "--workers %d --backup-workers %d need --ps P >= 1: the variables live "
            "on the ps tasks",
            o->workers > 0 ? o->workers : 1, c->backup_workers);
    if (c->forward_only && (cluster || c->towers > 1))
        return psg_error_set("--forward-only runs in one process (a cluster trains), one tower");
    if (cluster && o->trace)
        return psg_error_set("--trace is of one process (psgraph train --trace traces a cluster)");
    if (cluster && c->op_profile) return psg_error_set("--op-profile is of one process");
    if (o->trace && c->op_profile)
        return psg_error_set("--trace and --op-profile: one at a time (both time each op)");
    if (cluster && c->step_times)
        return psg_error_set("--step-times is of one process; psgraph simulate models the cluster");
    if (!cluster && o->stragglers.n)
        return psg_error_set("--straggler delays the workers of a cluster (--ps, --workers)");
    return 0;
}

/* The values given as words (the table stores them as given). */
static int check_words(psg_bench_opts_t *o) {
    psg_train_config_t *c = &o->c;
    if (strcmp(c->model, "inception3")) return psg_error_set("only --model inception3 here");
    if (c->optimizer && strcmp(c->optimizer, "rmsprop") && strcmp(c->optimizer, "sgd"))
        return psg_error_set("--optimizer %s: rmsprop or sgd", c->optimizer);
    if (strcmp(c->data, "synthetic") && strcmp(c->data, "imagenet"))
        return psg_error_set("--data: unknown '%s' (synthetic, imagenet)", c->data);
    if (!strcmp(c->data, "imagenet") && !c->data_dir)
        return psg_error_set("--data imagenet needs --data-dir");
    psg_cli_list_drop(&o->stragglers, "none");
    return 0;
}

/* Parses argv[first..] (cli/option_table.c); returns 0, 1 for --help (printed), 2 on a
 * bad option. */
static int parse(int argc, char **argv, int first, const char *cmd, psg_bench_opts_t *o) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    memset(o, 0, sizeof *o);
    psg_train_config_t *c = &o->c;
    psg_train_config_defaults(c);
    c->model = "inception3";
    c->data = "synthetic";
    c->batch = 32;
    c->steps = 10;
    c->bench = true;
    c->bench_warmup = 2;
    c->threads = cores > 0 ? (int)cores : 1;
    c->log_every = 1;
    c->step_timeout_ms = 300000;
    int rc = psg_cli_parse(PSG_CLI_BENCH, argc, argv, first, o, NULL);
    if (rc == 1) usage(stdout, cmd);
    if (rc == 0 && (check_words(o) < 0 || check(o) < 0)) rc = -1;
    if (rc < 0) fprintf(stderr, "psgraph %s: %s\n", cmd, psg_error_message());
    if (rc == -2) usage(stderr, cmd);
    if (rc) return rc < 0 ? 2 : rc;
    /* the loop runs the warm-up steps, then the timed ones; --trace traces those */
    c->steps += c->bench_warmup;
    c->stragglers = o->stragglers.v;
    c->num_stragglers = o->stragglers.n;
    if (o->trace) {
        c->trace_path = o->trace;
        c->trace_first = c->bench_warmup + 1;
        c->trace_last = c->steps;
    }
    return 0;
}

/* With --ps/--workers and no cluster given: P ps tasks and W + b workers of this same
 * command on this host, each with its TF_CONFIG (psg_launch_local). A worker gets the
 * cores shared out unless --threads was given. The chief's final JSON line is printed
 * again, untagged, last. Returns the worst exit code of the tasks. */
static int launch_local(int argc, char **argv, const psg_bench_opts_t *o, const char *cmd) {
    bool threads_given = false;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--threads")) threads_given = true;
    int workers = (o->workers > 0 ? o->workers : 1) + o->c.backup_workers;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char self[4096], threads[32], json[16384];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        fprintf(stderr, "psgraph %s: cannot find this binary: %s\n", cmd, strerror(errno));
        return 1;
    }
    self[sl] = 0;
    snprintf(threads, sizeof threads, "%ld", cores / workers > 1 ? cores / workers : 1);
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args) {
        fprintf(stderr, "psgraph %s: out of memory\n", cmd);
        return 1;
    }
    int n = 0;
    args[n++] = self;
    for (int i = 0; i < argc; i++) args[n++] = argv[i];
    if (!threads_given) {
        args[n++] = "--threads";
        args[n++] = threads;
    }
    printf("psgraph %s: a local cluster: %d ps + %d workers (%d backup), %s threads each\n", cmd,
           o->ps, workers, o->c.backup_workers, threads_given ? "--threads" : threads);
    fflush(stdout);
    /* b backup workers: the sync replicas can lose b of the workers and go on */
    psg_launch_t l = {.ps = o->ps,
                      .workers = workers,
                      .cmd = args,
                      .chief_json = json,
                      .chief_json_size = sizeof json,
                      .worker_failures = o->c.backup_workers};
    int rc = psg_launch_local(&l);
    if (rc == 0 && json[0]) printf("%s\n", json);
    free(args);
    return rc;
}

/* The worker task of a cluster: --workers must be the cluster's (W + b of its tasks); the
 * strategy sync, or async for one worker and no backup. */
static int cluster_task(psg_bench_opts_t *o) {
    psg_train_config_t *c = &o->c;
    psg_cluster_t *cl = c->cluster_file ? psg_cluster_from_file(c->cluster_file, c->job, c->task)
                                        : psg_cluster_from_env();
    if (!cl) return -1;
    char task[64];
    psg_task_t me = psg_cluster_task(cl);
    psg_device_name(me.job, me.index, NULL, task, sizeof task);
    int W = psg_cluster_num_tasks(cl, "worker") + psg_cluster_num_tasks(cl, "chief");
    psg_cluster_destroy(&cl);
    if (o->workers > 0 && o->workers + c->backup_workers != W)
        return psg_error_set("%s: --workers %d --backup-workers %d: the cluster has %d worker "
                             "tasks, not %d",
                             task, o->workers, c->backup_workers, W,
                             o->workers + c->backup_workers);
    if (c->backup_workers >= W)
        return psg_error_set("%s: --backup-workers %d: the cluster has only %d worker tasks", task,
                             c->backup_workers, W);
    if (!c->sync) c->sync = W > 1 || c->backup_workers > 0 ? "sync" : "async";
    return 0;
}

/* Runs the parsed options: the model's size, a local cluster, or this process (alone or as
 * a task) through the training loop. */
static int dispatch(int argc, char **argv, psg_bench_opts_t *o, const char *cmd) {
    psg_train_config_t *c = &o->c;
    if (o->print_model) return psg_cli_print_inception3(c, false) < 0 ? 1 : 0;
    bool given = c->cluster_file || psg_cluster_env_given();
    if (!given && (o->ps > 0 || o->workers > 1 || c->backup_workers > 0))
        return launch_local(argc, argv, o, cmd);
    psg_train_result_t r;
    if ((given && cluster_task(o) < 0) || psg_train(c, &r) < 0) {
        fprintf(stderr, "psgraph %s: %s\n", cmd, psg_error_message());
        return psg_error_code() == PSG_ERR_CONFIG ? 2 : 1; /* exit 2, as server and train */
    }
    return 0;
}

/* {"slim name": "Keras name" or null, ...} of cfg's model. */
static int print_keras_names(const psg_inception3_config_t *cfg) {
    psg_inception3_name_t *p;
    int n = psg_inception3_keras_names(cfg, &p);
    if (n < 0) return -1;
    printf("{");
    for (int i = 0; i < n; i++)
        printf(p[i].keras[0] ? "%s\"%s\":\"%s\"" : "%s\"%s\":null", i ? "," : "", p[i].slim,
               p[i].keras);
    printf("}\n");
    free(p);
    return 0;
}

int psg_cli_print_inception3(const psg_train_config_t *c, bool keras_names) {
    psg_inception3_config_t cfg = psg_inception3_defaults();
    cfg.image_size = c->image_size > 0 ? c->image_size : 299;
    cfg.classes = c->classes > 0 ? c->classes : 1000;
    cfg.aux_logits = c->aux;
    if (keras_names) return print_keras_names(&cfg);
    psg_graph_t *g = psg_graph_new();
    psg_inception3_t m;
    psg_model_stats_t s;
    int rc =
        g && psg_inception3_build(g, &cfg, &m) == 0 && psg_model_stats(g, NULL, &s) == 0 ? 0 : -1;
    psg_graph_destroy(&g);
    if (rc < 0) return -1;
    printf("inception3: %dx%dx3 input, %d classes, auxiliary head %s\n", cfg.image_size,
           cfg.image_size, cfg.classes, cfg.aux_logits ? "on" : "off");
    printf("parameters: %lld (trainable %lld; batch-norm moving mean and variance %lld; "
           "batch norm has beta only, no gamma, as Keras's conv2d_bn)\n",
           (long long)s.params, (long long)s.trainable, (long long)(s.params - s.trainable));
    printf("forward multiply-adds per image: %lld (%.3f G; conv and fully connected layers)\n",
           (long long)s.macs_per_example, (double)s.macs_per_example / 1e9);
    printf("{\"model\":\"inception3\",\"image_size\":%d,\"classes\":%d,\"aux_logits\":%s,"
           "\"params\":%lld,\"trainable_params\":%lld,\"macs_per_image\":%lld}\n",
           cfg.image_size, cfg.classes, cfg.aux_logits ? "true" : "false", (long long)s.params,
           (long long)s.trainable, (long long)s.macs_per_example);
    return 0;
}

int psg_cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: psgraph bench inception3 [options] (psgraph bench inception3 --help)\n");
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "inception3")) {
        fprintf(stderr, "psgraph bench: unknown benchmark '%s' (known: inception3)\n", argv[1]);
        return 2;
    }
    psg_bench_opts_t o;
    int rc = parse(argc, argv, 2, "bench inception3", &o);
    if (rc) return rc == 1 ? 0 : 2;
    return dispatch(argc, argv, &o, "bench inception3");
}
