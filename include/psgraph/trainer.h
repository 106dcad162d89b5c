/* The training loop: build the model, minimize its loss, feed batches,
 * print progress, evaluate, write metrics; in one process, or as one worker
 * of a cluster (async between-graph replication over a distributed session).
 * Not the session (session.h, dist_session.h) nor the task server. */
#ifndef PSGRAPH_TRAINER_H
#define PSGRAPH_TRAINER_H

#include "psgraph/inception3.h"
#include "psgraph/sync_replicas.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *model; /* "mlp" | "cnn" | "inception3" | "wide-deep" */
    const char *data; /* "fashion-mnist" | "synthetic" | "imagenet" | "criteo"; NULL: the model's */
    const char *data_dir; /* Fashion-MNIST folder; imagenet: the TFRecord shards (train-*) */
    int epochs;           /* used when steps == 0 */
    int64_t steps;        /* > 0: stop after this many steps */
    int batch;            /* 0: the model's default */
    double lr; /* < 0: the model's default (psg_train_config_defaults); 0 trains nothing */
    const char *optimizer; /* NULL: the model's default (momentum 0.9) */
    double momentum;
    double l1, l2, lr_power; /* --optimizer ftrl: 0, 0, -0.5 (TensorFlow's FtrlOptimizer) */
    uint64_t seed;
    int threads;
    const char *logdir;    /* NULL: no metrics.jsonl */
    int log_every;         /* progress line every N steps */
    int64_t eval_every;    /* > 0: the chief (or one process) also evaluates every N steps */
    int64_t test_examples; /* > 0: evaluate on the first N test examples only (quick checks) */
    const char *device;    /* "cpu" | "gpu" (no GPU: the CPU, with a note) */
    int towers;            /* model copies, one per device (towers.h); 1: no towers */
    const char *precision; /* "f32" (NULL) | "mixed" (bf16) | "mixed-f16": precision.h */
    /* fully connected weights above this many bytes are column shards (models.h); -1: 512 KiB
     * in a cluster (each shard its own transfer and update), 0 in one process */
    int64_t dense_shard_bytes;
    FILE *out; /* progress and the final JSON line */
    /* the cluster: "async" (or "sync") trains as one worker of it (TF_CONFIG, or cluster_file with
     * job and task); NULL or "none": one process (unless TF_CONFIG or cluster_file is
     * given, which means "async") */
    const char *sync;
    const char *cluster_file;
    const char *job;           /* with cluster_file: this process's job ("worker") */
    int task;                  /* and index */
    int64_t step_timeout_ms;   /* a distributed step fails after this long; 0: 30000 */
    double peer_timeout_s;     /* a peer silent this long fails the step waiting on it, naming it
                                  (heartbeats); 0: the cluster's "peer_timeout", else 10 s */
    int ps_replicas;           /* 2: each ps shard has a backup (docs/replication.md); 0: the
                                  cluster's "ps_replicas", else 1 */
    double recovery_timeout_s; /* after a failed step, how long a lost ps is waited for before
                                  the job stops naming it; 0: 60 s */
    const char *keys_dir;      /* the cluster's CURVE keys (psgraph/curve.h); NULL: the cluster
                                  file's "keys", else $PSGRAPH_KEYS, else none */
    bool insecure;             /* this task may listen off loopback without keys */
    bool join;                 /* a worker that joins a running job (--join: not the chief) */
    const char *data_shards;   /* "dispatch": shards of each epoch handed out by ps0 (an
                                  elastic job's data, worker/shard_data.h); NULL or "fixed":
                                  each worker reads its fixed part of the data */
    int shard_batches;         /* with dispatch: batches a shard; 0: 20 */
    bool no_overlap;           /* async: each step waits for the ps to apply its gradients
                                  (default: the next step's reads overlap the apply) */
    /* "sync" (docs/sync.md): N of the N + b workers' gradients per step */
    int replicas_to_aggregate;     /* N; 0: the workers - backup_workers */
    int backup_workers;            /* b */
    psg_sync_options_t sync_opt;   /* the strategies' own options (sync_replicas.h) */
    const char *const *stragglers; /* --straggler specs (straggler.h), borrowed */
    int num_stragglers;
    /* checkpoints, TensorBoard scalars, timeline (worker/train_hooks.c) */
    const char *checkpoint_every; /* "N" steps or "Ns"; NULL: 600s (with a logdir) */
    int keep;                     /* checkpoints kept; 0: 5 */
    /* a --logdir whose checkpoints all fail verification: start from step 0 (true) or stop
     * with each file named (false, the default; worker/resume.h) */
    bool fresh_start;
    /* a safetensors file whose tensors are the initial values of the variables of the same
     * names (worker/init_from.h); init_strict: fail on a missing or unexpected name */
    const char *init_from;
    bool init_strict;
    const char *trace_path;          /* NULL: no timeline */
    int64_t trace_first, trace_last; /* steps traced, 1-based, inclusive */
    /* --model wide-deep (worker/ctr_train.c, docs/sparse.md) */
    int64_t buckets;                /* per categorical field; 0: 10^6 */
    int table_shards;               /* the embedding table's shards; 0: 1, or the ps tasks */
    const char *partition_strategy; /* "mod" (NULL) or "div" */
    int64_t ps_memory_limit;        /* > 0: bytes of variables one ps task may hold */
    /* --model inception3 (worker/inception_train.c, docs/inception3.md) */
    int image_size;          /* height = width; 0: 299 */
    int classes;             /* the data's classes; 0: 1000 (imagenet: logits 1001 at offset 0) */
    bool aux;                /* the auxiliary head */
    int label_offset;        /* imagenet: subtracted from image/class/label; -1: 0 (TF's trainer:
                                1001 classes, 0 the unused background) */
    int decode_threads;      /* imagenet: JPEG decode threads; 0: 2 */
    const char *compression; /* imagenet shards: "auto" (NULL) | "none" | "gzip" | "zlib" */
    const char *dct_method;  /* imagenet: the JPEG inverse DCT (NULL: INTEGER_FAST, TF's) */
    const char *eval_data;   /* imagenet: validation shards, a folder (validation-*) or a glob
                                pattern; NULL: data_dir's validation-* */
    bool no_distort;         /* imagenet: training images centrally cropped, not distorted */
    psg_inception3_recipe_t recipe; /* TF's inception_distributed_train.py flags */
    double label_smoothing;         /* < 0: 0.1 */
    double batchnorm_decay;         /* <= 0: 0.9997 (slim's) */
    int virtual_batch_size;         /* > 0: batch norm over groups of this many of a tower's
                                       images in training (TF's virtual_batch_size) */
    double warmup_epochs;           /* > 0: the rate ramps up linearly over these epochs */
    /* a benchmark of the loop (psgraph bench inception3): the first bench_warmup steps untimed,
     * then each step's time; the final JSON line's fields as tf_cnn_benchmarks' */
    bool bench;
    int bench_warmup;
    bool forward_only;      /* bench: inference steps, no gradients (one process) */
    bool op_profile;        /* bench: the timed steps' time by op type (one process) */
    const char *step_times; /* bench: each timed step's ms into this file (one process) */
} psg_train_config_t;

/* A cluster worker's default dense_shard_bytes: 512 KiB (the mlp's fc1 in 2 shards, the
 * cnn's in 8), measured on the mlp with 1 ps + 1 worker against 128, 256 and 384 KiB and
 * no shards (docs/distributed.md, "Sharded dense weights"). */
#define PSG_TRAIN_CLUSTER_SHARD_BYTES ((int64_t)512 << 10)

/* Fills c with the defaults of `psgraph train`. */
void psg_train_config_defaults(psg_train_config_t *c);
/* The data set a model trains on when none is named: inception3 "synthetic", the others
 * "fashion-mnist". */
const char *psg_train_default_data(const char *model);

/* The result a caller (or a test) checks. */
typedef struct {
    int64_t steps;
    double final_loss;
    double test_accuracy;    /* top-1 of the evaluated weights (inception3: the moving average's) */
    double top1[2], top5[2]; /* [0] the weights, [1] their moving average (-1: none) */
    double examples_per_sec; /* training steps after the first 20, evaluation excluded */
} psg_train_result_t;

/* Trains as configured. In a cluster, every worker trains its own replica on its shard of
 * the data (the workers together make `epochs` passes), the variables live on the ps
 * tasks, the chief (worker 0) initializes them, the others wait for that; the chief
 * evaluates, after the others are done, and prints the final line. Returns 0 and fills
 * *r, or -1 with the error set (naming the task when one failed). */
int psg_train(const psg_train_config_t *c, psg_train_result_t *r);

/* The metrics file of a training process in logdir (created if absent; docs/checkpoints.md),
 * for a training loop of its own (a Python script's) writing the records psgraph train
 * writes: metrics.jsonl when tag is NULL (the chief, or one process), else
 * metrics.<tag>.jsonl ("worker1"). Each whole line that starts with '{' goes out as one
 * write(2), "task":"<task>" put first, so the workers of a job never tear each other's
 * lines. fclose it. NULL with the error naming the file. */
FILE *psg_train_metrics_open(const char *logdir, const char *tag, const char *task);

#endif
