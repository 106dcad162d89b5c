/* `psgraph bench inception3`'s command line, as tf_cnn_benchmarks: the
 * options and their checks, and with --ps/--workers and no cluster given, a
 * local cluster of this binary's tasks (psg_launch_local); also what
 * `psgraph train --model inception3` runs. The run itself is bench_run.c. */
#include "cli/bench.h"
#include "cli/commands.h"
#include "psgraph/psgraph.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f, const char *cmd) {
    fprintf(f,
            "usage: psgraph %s [options]\n"
            "  --batch B             images per step (default 32)\n"
            "  --steps N             timed steps (default 10)\n"
            "  --warmup W            untimed steps first (default 2)\n"
            "  --image-size S        input height and width, >= 75 (default 299)\n"
            "  --classes C           (default 1000)\n"
            "  --aux                 with the auxiliary head\n"
            "  --forward-only        inference steps (no gradients)\n"
            "  --data synthetic|imagenet   (default synthetic: one random batch, made once)\n"
            "  --data-dir DIR        ImageNet TFRecord shards (train-*)\n"
            "  --compression auto|none|gzip|zlib  of the shards (default auto: from each file's first bytes)\n"
            "  --decode-threads T    JPEG decode threads (default 2)\n"
            "  --dct-method M        JPEG inverse DCT, as decode_jpeg's dct_method: INTEGER_FAST (default,\n"
            "                        TensorFlow's) or INTEGER_ACCURATE\n"
            "  --threads T           compute threads (default: the cores)\n"
            "  --lr X                initial learning rate (default 0.045)\n"
            "  --optimizer rmsprop|sgd  rmsprop: the paper's recipe, with a moving average of the\n"
            "                        weights and weight decay (default); sgd: plain SGD, neither\n"
            "                        (the PyTorch peer's, for bench/inception3.sh)\n"
            "  --seed S              (default 1)\n"
            "  --log-every N         a progress line every N steps (default 1)\n"
            "  --step-times FILE     write each timed step's milliseconds, one a line\n"
            "                        (input to psgraph simulate --samples)\n"
            "  --trace FILE          write a Chrome trace of the timed steps: each op's time\n"
            "  --op-profile          print where the timed steps' time goes, a JSON line an op\n"
            "                        type (time, share of the step, GFLOP, TFLOP/s); on a GPU\n"
            "                        each GPU node waits for its kernels (device times, slower steps)\n"
            "  --print-model         print parameters and multiply-adds, then exit\n"
            "  --device cpu|gpu      (default cpu; gpu without a GPU runs on the CPU, with a note)\n"
            "  --precision P         f32 (default), mixed (bf16 products, f32 variables) or\n"
            "                        mixed-f16 (f16 products, loss scale 1024): docs/mixed_precision.md\n"
            "  --towers K            K model copies in this process, each on B/K images, their\n"
            "                        gradients averaged in-graph (on --device's devices)\n"
            "a cluster (variables on the ps tasks; one worker: async, else sync replicas):\n"
            "  --ps P --workers W    without TF_CONFIG or --cluster: starts P ps tasks and W workers\n"
            "                        on this host (as psgraph launch); the chief prints the job's\n"
            "                        images/sec (W x batch a global step) and the final JSON line\n"
            "  --backup-workers b    b more workers; each step takes the first W of the W + b\n"
            "                        gradients and drops the rest (default 0)\n"
            "  --straggler SPEC      delay workers each step (repeatable; docs/sync.md)\n"
            "  --sync NAME           the strategy (default sync; async for one worker and no b) and its\n"
            "                        options, as psgraph train's (psgraph train --help)\n"
            "  --step-timeout S      a distributed step fails after S seconds (default 300)\n"
            "  --cluster FILE --job worker --task I   run as that task (or TF_CONFIG set)\n",
            cmd);
}

static int num(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "psgraph: %s: '%s' is not a number in [%g, %g]\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* The combinations that make no sense, named. */
static int check(const psg_bench_opts_t *o) {
    bool given = o->cluster_file || psg_cluster_env_given(); /* run as one task of it */
    bool cluster = given || o->ps > 0 || o->workers > 1 || o->backups > 0;
    if (strcmp(o->device, "cpu") && strcmp(o->device, "gpu"))
        return psg_error_set("--device: '%s' is not cpu or gpu", o->device);
    psg_dtype_t compute;
    if (o->precision && psg_precision_parse(o->precision, &compute) < 0) return psg_error_wrap("--precision");
    if (o->towers > o->batch)
        return psg_error_set("--towers %d is more than --batch %d: each tower needs at least one image",
                             o->towers, o->batch);
    if (o->cluster_file && !o->job)
        return psg_error_set("--cluster %s needs --job worker --task I", o->cluster_file);
    if (!given && (o->workers > 1 || o->backups > 0) && o->ps < 1)
        return psg_error_set(
            "--workers %d --backup-workers %d need --ps P >= 1: the variables live "
            "on the ps tasks",
            o->workers > 0 ? o->workers : 1, o->backups);
    if (cluster && o->forward_only)
        return psg_error_set("--forward-only runs in one process (a cluster trains)");
    if (cluster && o->trace) return psg_error_set("--trace is of one process (psgraph train --trace traces a cluster)");
    if (cluster && o->op_profile) return psg_error_set("--op-profile is of one process");
    if (o->trace && o->op_profile) return psg_error_set("--trace and --op-profile: one at a time (both time each op)");
    if (cluster && o->step_times)
        return psg_error_set("--step-times is of one process; psgraph simulate models the cluster");
    if (!cluster && o->num_stragglers)
        return psg_error_set("--straggler delays the workers of a cluster (--ps, --workers)");
    return 0;
}

/* Parses argv[first..]; returns 0, 1 for --help (printed), 2 on a bad option. */
static int parse(int argc, char **argv, int first, const char *cmd, psg_bench_opts_t *o) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (psg_bench_opts_t){.batch = 32, .steps = 10, .warmup = 2, .image_size = 299, .classes = 1000,
                        .threads = cores > 0 ? (int)cores : 1, .log_every = 1, .decode_threads = 2,
                        .workers = 0, .ps = 0, .backups = 0, .towers = 1, .device = "cpu",
                        .data = "synthetic", .lr = 0.045, .seed = 1, .step_timeout_ms = 300000};
    psg_sync_options_defaults(&o->sync_opt);
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, cmd);
            return 1;
        }
        if (!strcmp(a, "--aux")) { o->aux = true; continue; }
        if (!strcmp(a, "--print-model")) { o->print_model = true; continue; }
        if (!strcmp(a, "--forward-only")) { o->forward_only = true; continue; }
        if (!strcmp(a, "--op-profile")) { o->op_profile = true; continue; }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "psgraph %s: %s '%s'\n", cmd, i + 1 >= argc ? "missing value for" : "unexpected argument", a);
            return 2;
        }
        const char *v = argv[++i];
        double x = 0;
        int rc = 0;
        if (!strcmp(a, "--model")) {
            if (strcmp(v, "inception3")) {
                fprintf(stderr, "psgraph %s: only --model inception3 here\n", cmd);
                return 2;
            }
        } else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--precision")) o->precision = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--data-dir")) o->data_dir = v;
        else if (!strcmp(a, "--compression")) rc = psg_tfrecord_compression_parse(v, &o->compression);
        else if (!strcmp(a, "--dct-method")) rc = psg_jpeg_dct_parse(v, &o->dct_method);
        else if (!strcmp(a, "--step-times")) o->step_times = v;
        else if (!strcmp(a, "--trace")) o->trace = v;
        else if (!strcmp(a, "--optimizer")) {
            if (strcmp(v, "rmsprop") && strcmp(v, "sgd")) {
                fprintf(stderr, "psgraph %s: --optimizer %s: rmsprop or sgd\n", cmd, v);
                return 2;
            }
            o->plain_sgd = !strcmp(v, "sgd");
        }
        else if (!strcmp(a, "--batch")) { rc = num(a, v, 1, 1 << 16, &x); o->batch = (int)x; }
        else if (!strcmp(a, "--steps")) { rc = num(a, v, 1, 1e9, &x); o->steps = (int)x; }
        else if (!strcmp(a, "--warmup")) { rc = num(a, v, 0, 1e6, &x); o->warmup = (int)x; }
        else if (!strcmp(a, "--image-size")) { rc = num(a, v, 75, 4096, &x); o->image_size = (int)x; }
        else if (!strcmp(a, "--classes")) { rc = num(a, v, 2, 1e6, &x); o->classes = (int)x; }
        else if (!strcmp(a, "--threads")) { rc = num(a, v, 1, 1024, &x); o->threads = (int)x; }
        else if (!strcmp(a, "--decode-threads")) { rc = num(a, v, 1, 1024, &x); o->decode_threads = (int)x; }
        else if (!strcmp(a, "--log-every")) { rc = num(a, v, 1, 1e9, &x); o->log_every = (int)x; }
        else if (!strcmp(a, "--lr")) { rc = num(a, v, 1e-9, 100, &x); o->lr = x; }
        else if (!strcmp(a, "--seed")) { rc = num(a, v, 0, 1e18, &x); o->seed = (uint64_t)x; }
        else if (!strcmp(a, "--workers")) { rc = num(a, v, 1, 1e5, &x); o->workers = (int)x; }
        else if (!strcmp(a, "--ps")) { rc = num(a, v, 0, 1e5, &x); o->ps = (int)x; }
        else if (!strcmp(a, "--backup-workers")) { rc = num(a, v, 0, 1e5, &x); o->backups = (int)x; }
        else if (!strcmp(a, "--towers")) { rc = num(a, v, 1, PSG_MAX_TOWERS, &x); o->towers = (int)x; }
        else if (!strcmp(a, "--cluster")) o->cluster_file = v;
        else if (!strcmp(a, "--sync")) {
            o->sync = v;
            if ((rc = psg_sync_strategy_check_name(v)) < 0) fprintf(stderr, "psgraph %s: %s\n", cmd, psg_error_message());
        }
        else if ((rc = psg_sync_option_parse(&o->sync_opt, a, v)) != 0) { /* a strategy's (sync/strategies.c) */
            if (rc < 0) fprintf(stderr, "psgraph %s: %s\n", cmd, psg_error_message());
            rc = rc < 0 ? -1 : 0;
        }
        else if (!strcmp(a, "--job")) o->job = v;
        else if (!strcmp(a, "--task")) { rc = num(a, v, 0, 1e5, &x); o->task = (int)x; }
        else if (!strcmp(a, "--step-timeout")) { rc = num(a, v, 0.001, 1e6, &x); o->step_timeout_ms = (int64_t)(x * 1000); }
        else if (!strcmp(a, "--straggler")) {
            psg_straggler_spec_t sp;
            if (o->num_stragglers == BENCH_MAX_STRAGGLERS || psg_straggler_parse(v, &sp) < 0) {
                fprintf(stderr, "psgraph %s: --straggler: %s\n", cmd,
                        o->num_stragglers == BENCH_MAX_STRAGGLERS ? "at most 32" : psg_error_message());
                return 2;
            }
            o->stragglers[o->num_stragglers++] = v;
        }
        else {
            fprintf(stderr, "psgraph %s: unknown option '%s'\n", cmd, a);
            usage(stderr, cmd);
            return 2;
        }
        if (rc < 0) return 2;
    }
    if (check(o) < 0) {
        fprintf(stderr, "psgraph %s: %s\n", cmd, psg_error_message());
        return 2;
    }
    if (strcmp(o->data, "synthetic") && strcmp(o->data, "imagenet")) {
        fprintf(stderr, "psgraph %s: --data: unknown '%s' (synthetic, imagenet)\n", cmd, o->data);
        return 2;
    }
    if (!strcmp(o->data, "imagenet") && !o->data_dir) {
        fprintf(stderr, "psgraph %s: --data imagenet needs --data-dir\n", cmd);
        return 2;
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
    psg_launch_t l = {.ps = o->ps, .workers = workers, .cmd = args, .chief_json = json,
                      .chief_json_size = sizeof json, .worker_failures = o->backups};
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
        fprintf(argc < 2 ? stderr : stdout, "usage: psgraph bench inception3 [options] (psgraph bench inception3 --help)\n");
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
