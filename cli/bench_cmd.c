/* `psgraph bench inception3`'s command line, as tf_cnn_benchmarks: the
 * options and their checks, and with --ps/--workers and no cluster given, a
 * local cluster of this binary's tasks (psg_launch_local); also what
 * `psgraph train --model inception3` runs. The run itself is bench_run.c. */
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
    bool given = o->cluster_file || psg_cluster_env_given(); /* run as one task of it */
    bool cluster = given || o->ps > 0 || o->workers > 1 || o->backups > 0;
    if (o->towers > o->batch)
        return psg_error_set(
            "--towers %d is more than --batch %d: each tower needs at least one image", o->towers,
            o->batch);
    if (o->cluster_file && !o->job)
        return psg_error_set("--cluster %s needs --job worker --task I", o->cluster_file);
    if (!given && (o->workers > 1 || o->backups > 0) && o->ps < 1)
        return psg_error_set(
            "--workers %d --backup-workers %d need --ps P >= 1: the variables live "
            "on the ps tasks",
            o->workers > 0 ? o->workers : 1, o->backups);
    if (cluster && o->forward_only)
        return psg_error_set("--forward-only runs in one process (a cluster trains)");
    if (cluster && o->trace)
        return psg_error_set("--trace is of one process (psgraph train --trace traces a cluster)");
    if (cluster && o->op_profile) return psg_error_set("--op-profile is of one process");
    if (o->trace && o->op_profile)
        return psg_error_set("--trace and --op-profile: one at a time (both time each op)");
    if (cluster && o->step_times)
        return psg_error_set("--step-times is of one process; psgraph simulate models the cluster");
    if (!cluster && o->stragglers.n)
        return psg_error_set("--straggler delays the workers of a cluster (--ps, --workers)");
    return 0;
}

/* The values given as words (the table stores them as given): the model, the optimizer,
 * the shards' compression, the strategy. */
static int check_words(psg_bench_opts_t *o) {
    if (o->model && strcmp(o->model, "inception3"))
        return psg_error_set("only --model inception3 here");
    if (o->optimizer && strcmp(o->optimizer, "rmsprop") && strcmp(o->optimizer, "sgd"))
        return psg_error_set("--optimizer %s: rmsprop or sgd", o->optimizer);
    o->plain_sgd = o->optimizer && !strcmp(o->optimizer, "sgd");
    if (o->compression_name &&
        psg_tfrecord_compression_parse(o->compression_name, &o->compression) < 0)
        return psg_error_wrap("--compression");
    if (o->dct_method_name && psg_jpeg_dct_parse(o->dct_method_name, &o->dct_method) < 0)
        return psg_error_wrap("--dct-method");
    if (o->sync && psg_sync_strategy_check_name(o->sync) < 0) return -1;
    if (strcmp(o->data, "synthetic") && strcmp(o->data, "imagenet"))
        return psg_error_set("--data: unknown '%s' (synthetic, imagenet)", o->data);
    if (!strcmp(o->data, "imagenet") && !o->data_dir)
        return psg_error_set("--data imagenet needs --data-dir");
    psg_cli_list_drop(&o->stragglers, "none");
    return 0;
}

/* Parses argv[first..] (cli/option_table.c); returns 0, 1 for --help (printed), 2 on a
 * bad option. */
static int parse(int argc, char **argv, int first, const char *cmd, psg_bench_opts_t *o) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (psg_bench_opts_t){.batch = 32,
                            .steps = 10,
                            .warmup = 2,
                            .image_size = 299,
                            .classes = 1000,
                            .threads = cores > 0 ? (int)cores : 1,
                            .log_every = 1,
                            .decode_threads = 2,
                            .towers = 1,
                            .device = "cpu",
                            .data = "synthetic",
                            .lr = 0.045,
                            .seed = 1,
                            .step_timeout_ms = 300000};
    psg_sync_options_defaults(&o->sync_opt);
    int rc = psg_cli_parse(PSG_CLI_BENCH, argc, argv, first, o, NULL);
    if (rc == 1) usage(stdout, cmd);
    if (rc == 0 && (check_words(o) < 0 || check(o) < 0)) rc = -1;
    if (rc < 0) fprintf(stderr, "psgraph %s: %s\n", cmd, psg_error_message());
    if (rc == -2) usage(stderr, cmd);
    return rc < 0 ? 2 : rc;
}

/* With --ps/--workers and no cluster given: P ps tasks and W + b workers of this same
 * command on this host, each with its TF_CONFIG (psg_launch_local). A worker gets the
 * cores shared out unless --threads was given. The chief's final JSON line is printed
 * again, untagged, last. Returns the worst exit code of the tasks. */
static int launch_local(int argc, char **argv, const psg_bench_opts_t *o, const char *cmd) {
    bool threads_given = false;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--threads")) threads_given = true;
    int workers = (o->workers > 0 ? o->workers : 1) + o->backups;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char self[4096], threads[32], json[4096];
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
           o->ps, workers, o->backups, threads_given ? "--threads" : threads);
    fflush(stdout);
    /* b backup workers: the sync replicas can lose b of the workers and go on */
    psg_launch_t l = {.ps = o->ps,
                      .workers = workers,
                      .cmd = args,
                      .chief_json = json,
                      .chief_json_size = sizeof json,
                      .worker_failures = o->backups};
    int rc = psg_launch_local(&l);
    if (rc == 0 && json[0]) printf("%s\n", json);
    free(args);
    return rc;
}

/* Runs the parsed options: a local cluster, or this process (alone or as a task). */
static int dispatch(int argc, char **argv, const psg_bench_opts_t *o, const char *cmd) {
    bool given = o->cluster_file || psg_cluster_env_given();
    if (!given && !o->print_model && (o->ps > 0 || o->workers > 1 || o->backups > 0))
        return launch_local(argc, argv, o, cmd);
    return psg_bench_run(o, cmd);
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

int psg_cmd_train_inception3(int argc, char **argv) {
    psg_bench_opts_t o;
    int rc = parse(argc, argv, 1, "train", &o);
    if (rc) return rc == 1 ? 0 : 2;
    return dispatch(argc, argv, &o, "train");
}
