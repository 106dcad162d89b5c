/* `psgraph bench inception3`'s options, shared by its command line
 * (cli/bench_cmd.c: parsing, checks, starting a local cluster) and its run
 * (cli/bench_run.c: one process, towers, or one worker task of a cluster). */
#ifndef PSGRAPH_CLI_BENCH_H
#define PSGRAPH_CLI_BENCH_H

#include "cli/commands.h"
#include "psgraph/imagenet.h"
#include "psgraph/tfrecord.h"
#include "psgraph/sync_replicas.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t steps;
    int batch, warmup, image_size, classes, threads, log_every, decode_threads;
    int workers, ps, backups, towers; /* workers 0: not given */
    bool aux, print_model, forward_only;
    const char *model, *device, *data, *data_dir, *step_times;
    const char *optimizer; /* rmsprop (NULL) | sgd */
    bool plain_sgd;     /* --optimizer sgd: the PyTorch peer's plain SGD, no EMA, no weight decay */
    const char *trace;  /* --trace FILE: a Chrome trace of the timed steps (one process) */
    const char *logdir; /* --logdir DIR: a checkpoint at the end (one process) */
    bool op_profile;    /* --op-profile: time by op type over the timed steps (one process) */
    const char *precision;        /* f32 | mixed | mixed-f16 (psgraph/precision.h); NULL: f32 */
    const char *compression_name; /* --compression (NULL: auto) */
    psg_tfrecord_compression_t compression; /* of the ImageNet shards: auto (detected) */
    const char *dct_method_name;            /* --dct-method (NULL: INTEGER_FAST) */
    psg_jpeg_dct_t dct_method; /* the JPEG inverse DCT: INTEGER_FAST, TensorFlow's default */
    double lr;
    uint64_t seed;
    /* a worker task of a cluster: TF_CONFIG, or cluster_file with job and task */
    const char *cluster_file, *job;
    int task;
    int64_t step_timeout_ms;
    psg_cli_list_t stragglers;   /* --straggler specs (sync/straggler.c) */
    const char *sync;            /* --sync NAME; NULL: sync, or async for one worker and no b */
    psg_sync_options_t sync_opt; /* the strategies' own options (sync/strategies.c) */
} psg_bench_opts_t;

/* Runs the benchmark as *o says, in this process: alone (towers when
 * o->towers > 1 or on a GPU), or as the worker task of a cluster when one
 * is given (TF_CONFIG or o->cluster_file). Prints progress and the final
 * JSON line (the chief); cmd names the command in messages. Returns the
 * exit code (0, or 1 after printing the error). */
int psg_bench_run(const psg_bench_opts_t *o, const char *cmd);

#endif
