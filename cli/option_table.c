/* The table of the options of psgraph's commands: one row a flag (its kind and bounds, the
 * same for every command), and in it, for each command that takes the flag, the field its
 * value goes to and its --help line. The rows are in --help's order. A new option: one
 * row here (tests/test_cli_options.c checks every row by itself). The strategies' options
 * are sync/strategies.c's table; the parser and the printer are cli/options.c. */
#include "cli/options.h"
#include "psgraph/checkpoint.h"
#include "psgraph/error.h"
#include "psgraph/imagenet.h"
#include "psgraph/precision.h"
#include "psgraph/straggler.h"
#include "psgraph/sync_replicas.h"
#include "psgraph/tfrecord.h"
#include "psgraph/towers.h"
#include "psgraph/trace.h"

#include <stddef.h>
#include <string.h>

/* ---- the checks of STRING rows: -1 with the error (the parser adds the flag's name) ---- */

static int check_precision(const char *v) {
    psg_dtype_t dt;
    return psg_precision_parse(v, &dt);
}

static int check_sync(const char *v) {
    return strcmp(v, "none") ? psg_sync_strategy_check_name(v) : 0;
}

/* "none": no delay (psgraph compare's word; train and bench drop it) */
static int check_straggler(const char *v) {
    psg_straggler_spec_t sp;
    return strcmp(v, "none") ? psg_straggler_parse(v, &sp) : 0;
}

static int check_checkpoint(const char *v) {
    psg_checkpoint_policy_t p;
    return psg_checkpoint_policy_parse(v, &p);
}

static int check_trace_steps(const char *v) {
    int64_t a, b;
    return psg_trace_parse_steps(v, &a, &b);
}

static int check_compression(const char *v) {
    psg_tfrecord_compression_t c;
    return psg_tfrecord_compression_parse(v, &c);
}

static int check_dct_method(const char *v) {
    psg_jpeg_dct_t d;
    return psg_jpeg_dct_parse(v, &d);
}

static int check_counts(const char *v, int lo) {
    int n[PSG_CLI_COUNTS_MAX];
    if (psg_cli_counts(v, n, PSG_CLI_COUNTS_MAX, lo, 100000) <= 0)
        return psg_error_set("'%s' is not a list of counts", v);
    return 0;
}

static int check_workers(const char *v) {
    return check_counts(v, 1);
}
static int check_backups(const char *v) {
    return check_counts(v, 0);
}

/* launch's --workers W or MIN:MAX (cli/launch_cmd.c reads it: psg_cli_workers_range) */
static int check_launch_workers(const char *v) {
    int lo, hi;
    return psg_cli_workers_range(v, &lo, &hi);
}

static const char *const device_words[] = {"cpu", "gpu", NULL};
static const char *const on_off[] = {"on", "off", NULL};
static const char *const partition_words[] = {"mod", "div", NULL};
static const char *const data_shards_words[] = {"fixed", "dispatch", NULL};
static const char *const transport_words[] = {"ipc", "tcp", NULL};
static const char *const restart_words[] = {"never", "on-failure", NULL};
static const char *const tail_words[] = {"none", "normal", "lognormal", "pareto",
                                         NULL}; /* psg_sim_tail_t */

/* ---- a command's use of a row: its field (the C type found from it) and --help line ---- */

#define CTYPE(x)                                                                                   \
    _Generic((x), bool: PSG_AT_BOOL, int: PSG_AT_INT, int64_t: PSG_AT_I64, uint64_t: PSG_AT_U64,   \
        double: PSG_AT_DOUBLE, const char *: PSG_AT_STR, psg_cli_list_t: PSG_AT_LIST)
#define AT(T, f) .at = offsetof(T, f) + 1, .ctype = CTYPE(((T *)0)->f)
#define USE(cmd, T, f, l, h) [cmd] = {AT(T, f), .label = l, .help = h}
#define TRAIN(f, l, h) USE(PSG_CLI_TRAIN, psg_train_args_t, f, l, h)
/* an option of one model's only: refused with another (psg_cli_check_scope) */
#define TRAIN_OF(m, f, l, h)                                                                       \
    [PSG_CLI_TRAIN] = {AT(psg_train_args_t, f), .label = l, .help = h, .models = m}
/* an option of one data set's only; of a model's or a data set's */
#define TRAIN_DATA(d, f, l, h)                                                                     \
    [PSG_CLI_TRAIN] = {AT(psg_train_args_t, f), .label = l, .help = h, .data = d}
#define TRAIN_OF_OR_DATA(m, d, f, l, h)                                                            \
    [PSG_CLI_TRAIN] = {AT(psg_train_args_t, f), .label = l, .help = h, .models = m, .data = d}
#define BENCH(f, l, h) USE(PSG_CLI_BENCH, psg_bench_opts_t, f, l, h)
#define LAUNCH(f) USE(PSG_CLI_LAUNCH, psg_launch_args_t, f, NULL, NULL)
#define COMPARE(f) USE(PSG_CLI_COMPARE, psg_compare_args_t, f, NULL, NULL)
#define SIM(f, l, h) USE(PSG_CLI_SIMULATE, psg_simulate_args_t, f, l, h)
#define SERVER(f, l, h) USE(PSG_CLI_SERVER, psg_server_args_t, f, l, h)
#define DATA(f, l, h) USE(PSG_CLI_DATA, psg_data_args_t, f, l, h)
/* the flag and its value appended to a list (launch's --k8s options, read by launch_k8s.c) */
#define K8S_USE                                                                                    \
    [PSG_CLI_LAUNCH] = {.at = offsetof(psg_launch_args_t, k8s_args) + 1, .ctype = PSG_AT_PAIRS}
#define K8S(name)                                                                                  \
    {                                                                                              \
        name, PSG_OPT_STRING, .use = { K8S_USE }                                                   \
    }

_Static_assert(PSG_TS_MAX_LOGDIRS == 4, "server's --logdir help says up to 4");

static const psg_cli_option_t rows[] = {
    /* train's --model line and its models come from examples/models.c (cli/train_cmd.c) */
    {"--model", PSG_OPT_STRING,
     .use = {TRAIN(c.model, NULL, NULL),
             BENCH(c.model, "--model inception3",
                   "the only one here (psgraph train --model inception3 runs it)"),
             COMPARE(model)}},
    {"--strategy", PSG_OPT_STRING, .use = {COMPARE(strategies)}},
    {"--variant", PSG_OPT_STRING, .use = {COMPARE(strategies)}}, /* --strategy's older name */
    {"--data", PSG_OPT_STRING,
     .use = {TRAIN(c.data, "--data fashion-mnist|synthetic|imagenet|criteo",
                   "(default: fashion-mnist; inception3: synthetic, or imagenet:\n"
                   "TF's TFRecord shards; wide-deep: criteo)"),
             BENCH(c.data, "--data synthetic|imagenet ",
                   "(default synthetic: random images from a pool of 16, made once)"),
             COMPARE(data),
             /* launch --k8s --data PVC|/PATH: the workers' data volume (cli/launch_k8s.c) */
             K8S_USE}},
    {"--data-dir", PSG_OPT_STRING,
     .use = {TRAIN(c.data_dir, "--data-dir DIR",
                   "Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist);\n"
                   "criteo: a Criteo-format file or folder (psgraph data ctr writes one);\n"
                   "imagenet: the folder of TF's shards (train-*, validation-*)"),
             BENCH(c.data_dir, "--data-dir DIR", "ImageNet TFRecord shards (train-*)")}},
    {"--eval-data", PSG_OPT_STRING,
     .use = {TRAIN_DATA("imagenet", c.eval_data, "--eval-data DIR|PATTERN",
                        "imagenet: the validation shards, a folder's validation-* or a\n"
                        "pattern (default: --data-dir's validation-*)"),
             BENCH(c.eval_data, "--eval-data DIR|PATTERN",
                   "the validation shards (default: --data-dir's validation-*)")}},
    {"--label-offset", PSG_OPT_INT, 0, 1,
     .use = {TRAIN_DATA("imagenet", c.label_offset, "--label-offset 0|1",
                        "imagenet: subtracted from image/class/label: 0 keeps TF's\n"
                        "labels 1..C and 0 as the unused background (C + 1 logits, as\n"
                        "TF's trainer and slim checkpoints; default), 1 gives C logits"),
             BENCH(c.label_offset, "--label-offset 0|1",
                   "0: C + 1 logits with TF's background class (default); 1: C")}},
    {"--no-distort", PSG_OPT_FLAG,
     .use = {TRAIN_DATA("imagenet", c.no_distort, "--no-distort",
                        "imagenet: training images centrally cropped as the evaluation's\n"
                        "(default: inception_preprocessing's distortions)")}},
    {"--compression", PSG_OPT_STRING, .check = check_compression,
     .use = {TRAIN_DATA("imagenet", c.compression, "--compression auto|none|gzip|zlib",
                        "imagenet: of the shards (default auto: from each file's first bytes)"),
             BENCH(c.compression, "--compression auto|none|gzip|zlib",
                   "of the shards (default auto: from each file's first bytes)")}},
    {"--dct-method", PSG_OPT_STRING, .check = check_dct_method,
     .use = {TRAIN_DATA("imagenet", c.dct_method, "--dct-method INTEGER_FAST|INTEGER_ACCURATE",
                        "imagenet: the JPEG inverse DCT, as decode_jpeg's dct_method\n"
                        "(default INTEGER_FAST: TensorFlow's default decode_jpeg)"),
             BENCH(c.dct_method, "--dct-method INTEGER_FAST|INTEGER_ACCURATE",
                   "the JPEG inverse DCT, as decode_jpeg's dct_method (default\n"
                   "INTEGER_FAST: TensorFlow's default decode_jpeg, pixel for pixel)")}},
    {"--buckets", PSG_OPT_INT, 1, 1099511627776.0,
     .use = {TRAIN_OF("wide-deep", c.buckets, "--buckets N",
                      "wide-deep: hash buckets per categorical field (default 1000000)")}},
    {"--table-shards", PSG_OPT_INT, 1, 64,
     .use = {TRAIN_OF("wide-deep", c.table_shards, "--table-shards N",
                      "wide-deep: the embedding table's shards (default 1, or the ps tasks)")}},
    {"--partition-strategy", PSG_OPT_WORDS, .words = partition_words,
     .use = {TRAIN_OF("wide-deep", c.partition_strategy, "--partition-strategy mod|div",
                      "wide-deep: which shard holds an id (default mod)")}},
    {"--ps-memory-limit", PSG_OPT_BYTES, 1, 9e18,
     .use = {TRAIN(c.ps_memory_limit, "--ps-memory-limit N[K|M|G]",
                   "bytes of variables one ps task may hold: the wide-deep table\n"
                   "spreads over enough shards; a graph that cannot fit is refused")}},
    {"--epochs", PSG_OPT_INT, 1, 1e6,
     .use = {TRAIN(c.epochs, "--epochs E", "passes over the training set (default 2)"),
             COMPARE(epochs)}},
    {"--steps", PSG_OPT_INT, 0, 1e12,
     .use = {TRAIN(c.steps, "--steps N",
                   "stop after N steps (overrides --epochs); 0: train nothing,\n"
                   "                           only the initial checkpoint (with --logdir)")}},
    {"--steps", PSG_OPT_INT, 1, 1e12,
     .use = {BENCH(c.steps, "--steps N", "timed steps (default 10)")}},
    {"--warmup", PSG_OPT_INT, 0, 1e6,
     .use = {BENCH(c.bench_warmup, "--warmup W", "untimed steps first (default 2)")}},
    {"--image-size", PSG_OPT_INT, 75, 4096,
     .use = {DATA(image_size, "--image-size S", "imagenet: height and width (default 75)"),
             TRAIN_OF_OR_DATA("inception3", "imagenet", c.image_size, "--image-size S",
                              "inception3: input height and width, >= 75 (default 299)"),
             BENCH(c.image_size, "--image-size S", "input height and width, >= 75 (default 299)")}},
    {"--classes", PSG_OPT_INT, 2, 1e6,
     .use = {DATA(classes, "--classes C", "imagenet: 2..10 shapes (default 10)"),
             TRAIN_OF_OR_DATA("inception3", "imagenet", c.classes, "--classes C",
                              "inception3: the data's classes (default 1000; imagenet at\n"
                              "--label-offset 0: C + 1 logits)"),
             BENCH(c.classes, "--classes C", "(default 1000)")}},
    {"--aux", PSG_OPT_FLAG,
     .use = {TRAIN_OF("inception3", c.aux, "--aux",
                      "inception3: with the auxiliary head (loss weight 0.4)"),
             BENCH(c.aux, "--aux", "with the auxiliary head")}},
    /* TF's inception_distributed_train.py's flags and constants, with its defaults */
    {"--initial-learning-rate", PSG_OPT_REAL, 1e-12, 1e6,
     .use = {TRAIN_OF("inception3", c.recipe.learning_rate, "--initial-learning-rate X",
                      "inception3: TF's recipe (inception_distributed_train.py), its\n"
                      "defaults: the rate before decay (0.045; --lr too)"),
             BENCH(c.recipe.learning_rate, "--initial-learning-rate X",
                   "TF's recipe, its defaults: the rate before decay (0.045)")}},
    {"--num-epochs-per-decay", PSG_OPT_REAL, 1e-9, 1e9,
     .use = {TRAIN_OF("inception3", c.recipe.epochs_per_decay, "--num-epochs-per-decay E",
                      "epochs between decays (2); the decay steps are divided by\n"
                      "the gradients a step aggregates (sync's N), as TF's trainer"),
             BENCH(c.recipe.epochs_per_decay, "--num-epochs-per-decay E", "(2)")}},
    {"--learning-rate-decay-factor", PSG_OPT_REAL, 1e-9, 1,
     .use = {TRAIN_OF("inception3", c.recipe.lr_decay, "--learning-rate-decay-factor F",
                      "each decay's (0.94)"),
             BENCH(c.recipe.lr_decay, "--learning-rate-decay-factor F", "(0.94)")}},
    {"--rmsprop-decay", PSG_OPT_REAL, 0, 1,
     .use = {TRAIN_OF("inception3", c.recipe.rmsprop_decay, "--rmsprop-decay D",
                      "RMSProp's decay (0.9)"),
             BENCH(c.recipe.rmsprop_decay, "--rmsprop-decay D", "(0.9)")}},
    {"--rmsprop-momentum", PSG_OPT_REAL, 0, 1,
     .use = {TRAIN_OF("inception3", c.recipe.momentum, "--rmsprop-momentum M",
                      "RMSProp's momentum (0.9)"),
             BENCH(c.recipe.momentum, "--rmsprop-momentum M", "(0.9)")}},
    {"--rmsprop-epsilon", PSG_OPT_REAL, 1e-12, 1e6,
     .use = {TRAIN_OF("inception3", c.recipe.epsilon, "--rmsprop-epsilon E",
                      "RMSProp's epsilon (1.0)"),
             BENCH(c.recipe.epsilon, "--rmsprop-epsilon E", "(1.0)")}},
    {"--moving-average-decay", PSG_OPT_REAL, 0, 0.999999999,
     .use = {TRAIN_OF("inception3", c.recipe.ema_decay, "--moving-average-decay D",
                      "the weights' moving average, evaluated beside them (0.9999;\n"
                      "0: none)"),
             BENCH(c.recipe.ema_decay, "--moving-average-decay D", "(0.9999; 0: none)")}},
    {"--batchnorm-decay", PSG_OPT_REAL, 0, 0.999999,
     .use = {TRAIN_OF("inception3", c.batchnorm_decay, "--batchnorm-decay D",
                      "the batch-norm moving statistics' decay (0.9997, TF's\n"
                      "BATCHNORM_MOVING_AVERAGE_DECAY; short runs: lower)"),
             BENCH(c.batchnorm_decay, "--batchnorm-decay D", "(0.9997)")}},
    {"--virtual-batch-size", PSG_OPT_INT, 1, 1e6,
     .use = {TRAIN_OF("inception3", c.virtual_batch_size, "--virtual-batch-size V",
                      "inception3: batch norm normalizes groups of V consecutive\n"
                      "images in training (as TF's virtual_batch_size, \"ghost\"\n"
                      "batch norm; V divides --batch): one process at batch N x V\n"
                      "normalizes as N sync workers at V do")}},
    {"--label-smoothing", PSG_OPT_REAL, 0, 0.999999,
     .use = {TRAIN_OF("inception3", c.label_smoothing, "--label-smoothing E", "(0.1)"),
             BENCH(c.label_smoothing, "--label-smoothing E", "(0.1)")}},
    {"--warmup-epochs", PSG_OPT_REAL, 0, 1e6,
     .use = {TRAIN_OF("inception3", c.warmup_epochs, "--warmup-epochs E",
                      "the rate ramps up linearly over E epochs (of N replicas'\n"
                      "steps; Goyal et al. 2017; default 0: none, as TF's trainer)"),
             BENCH(c.warmup_epochs, "--warmup-epochs E", "linear warm-up of the rate (0)")}},
    {"--forward-only", PSG_OPT_FLAG,
     .use = {BENCH(c.forward_only, "--forward-only", "inference steps (no gradients)")}},
    /* simulate's model of a cluster (examples/simulate.c checks the same ranges) */
    {"--step-ms", PSG_OPT_REAL, 1e-6, 1e9,
     .use = {SIM(c.step_ms, "--step-ms X",
                 "one worker's mean compute time per step (default 1300)")}},
    {"--tail", PSG_OPT_WORDS, .words = tail_words,
     .use = {SIM(tail, "--tail none|normal|lognormal|pareto ",
                 "spread of step times (default pareto)")}},
    {"--cv", PSG_OPT_REAL, 0, 1e6,
     .use = {SIM(c.cv, "--cv X --sigma X --straggle-p X --alpha X ",
                 "tail parameters (0.03, 0.1, 0.02, 1.5)")}},
    {"--sigma", PSG_OPT_REAL, 0, 1e6, .use = {SIM(c.sigma, NULL, NULL)}},
    {"--straggle-p", PSG_OPT_REAL, 0, 1, .use = {SIM(c.straggle_p, NULL, NULL)}},
    {"--alpha", PSG_OPT_REAL, 1e-9, 1e6, .use = {SIM(c.alpha, NULL, NULL)}},
    {"--samples", PSG_OPT_STRING,
     .use = {SIM(samples, "--samples FILE",
                 "measured step times in ms, one a line (psgraph bench\n"
                 "inception3 --step-times FILE); sets --tail samples")}},
    {"--bytes", PSG_OPT_REAL, 0, 9e18,
     .use = {SIM(c.bytes_per_step, "--bytes N",
                 "bytes pulled and pushed per worker and step (default 95269408:\n"
                 "Inception-v3's trainable variables in f32)")}},
    {"--link-gbps", PSG_OPT_REAL, 1e-9, 1e9,
     .use = {SIM(c.link_gbps, "--link-gbps X", "each machine's link, per direction (default 10)")}},
    {"--slow-link-gbps", PSG_OPT_REAL, 0, 1e9,
     .use = {SIM(c.slow_link_gbps, "--slow-link-gbps X",
                 "the last worker's link instead (one capped worker; default: as the others)")}},
    {"--ps-link-gbps", PSG_OPT_REAL, 0, 1e9,
     .use = {SIM(c.ps_link_gbps, "--ps-link-gbps X",
                 "each ps's link instead (default: as the others)")}},
    {"--latency-ms", PSG_OPT_REAL, 0, 1e9,
     .use = {SIM(c.latency_ms, "--latency-ms X", "per message (default 0.07)")}},
    {"--overlap", PSG_OPT_FLAG,
     .use = {SIM(overlap, "--overlap",
                 "the overlap model on --step-ms and --bytes (one pull needed\n"
                 "at once, one push at the end; the links as shared queues)")}},
    {"--burst-ms", PSG_OPT_REAL, 0, 1e9,
     .use = {SIM(c.burst_ms, "--burst-ms X --burst-min-bytes N",
                 "overlap model: a capped link's token bucket, X ms of its rate\n"
                 "and at least N bytes (tc tbf's burst; default 0, 0)")}},
    {"--burst-min-bytes", PSG_OPT_REAL, 0, 9e18, .use = {SIM(c.burst_min_bytes, NULL, NULL)}},
    {"--line-gbps", PSG_OPT_REAL, 1e-9, 1e9,
     .use = {SIM(c.line_gbps, "--line-gbps X",
                 "overlap model: the wire under a cap, an uncapped link (10)")}},
    {"--chunk-bytes", PSG_OPT_REAL, 1, 9e18,
     .use = {SIM(c.chunk_bytes, "--chunk-bytes N",
                 "overlap model: links share their time in chunks of N (65536)")}},
    {"--link-fifo", PSG_OPT_FLAG,
     .use = {SIM(c.link_fifo, "--link-fifo",
                 "overlap model: a link sends one peer's queued messages before\n"
                 "the next peer's (first come, first served) instead of round-robin chunks")}},
    {"--link-window-bytes", PSG_OPT_REAL, 0, 9e18,
     .use = {SIM(c.window_bytes, "--link-window-bytes N",
                 "overlap model: a link serves a peer up to N bytes a turn, then the next\n"
                 "(0: one chunk a turn)")}},
    {"--cores", PSG_OPT_REAL, 0, 1e6,
     .use = {SIM(
         c.cores, "--cores N --worker-cpu-ms X --ps-cpu-ms X",
         "the hosts share N cores (emulated hosts on one\n"
         "machine: its cores, or what others leave of them); a step is at least the CPU of the N + b\n"
         "workers (X each) and the ps (X per step serving the traced run's\n"
         "workers) over N cores (default 0: each host its own cores); with\n"
         "either CPU time, also a worker's X (N + b of them over N cores when\n"
         "more) and then the ps's CPU of the step serial (its critical path)")}},
    {"--worker-cpu-ms", PSG_OPT_REAL, 0, 1e9, .use = {SIM(c.worker_cpu_ms, NULL, NULL)}},
    {"--ps-cpu-ms", PSG_OPT_REAL, 0, 1e9, .use = {SIM(c.ps_cpu_ms, NULL, NULL)}},
    {"--cpu-speed", PSG_OPT_REAL, 1e-6, 1e6,
     .use = {SIM(cpu_speed, "--cpu-speed X",
                 "the machine runs CPU work X times as fast as the one the inputs\n"
                 "were measured on: the compute, the applies, the overheads and\n"
                 "the CPU times / X (default 1)")}},
    /* simulate's ps, steps, workers and backups are a model's, not a cluster's: rows of their
     * own (a command sees one row a name) */
    {"--ps", PSG_OPT_INT, 0, 100000,
     .use = {SIM(c.ps, "--ps P", "parameter servers (default: (W + b) / 4, rounded up)")}},
    {"--overhead-ms", PSG_OPT_REAL, 0, 1e9,
     .use = {SIM(c.overhead_ms, "--overhead-ms X",
                 "per step: chief's apply, tokens (default 2; with --trace 0:\n"
                 "the trace's applies are modelled)")}},
    {"--batch", PSG_OPT_INT, 1, 1 << 20,
     .use = {TRAIN(c.batch, "--batch B", "batch size (default: the model's, above)"),
             BENCH(c.batch, "--batch B", "images per step (default 32)"), COMPARE(batch),
             SIM(c.batch, "--batch B", "per worker (default 32)")}},
    {"--steps", PSG_OPT_INT, 1, 1e9,
     .use = {SIM(c.steps, "--steps N", "Monte Carlo steps per point (default 2000)")}},
    {"--workers", PSG_OPT_STRING, .check = check_workers,
     .use = {SIM(workers, "--workers LIST", "e.g. 1,2,4,8,16,32,50,64,100,200 (default)")}},
    {"--backups", PSG_OPT_STRING, .check = check_backups,
     .use = {SIM(backups, "--backups LIST", "e.g. 0,1,2,4,8 (default 0,2,4,8)")}},
    {"--lr", PSG_OPT_REAL, 0, 1e6, /* 0 trains nothing, as TensorFlow allows */
     .use = {TRAIN(c.lr, "--lr X", "learning rate (default: the model's, above)"),
             BENCH(c.lr, "--lr X", "initial learning rate (default 0.045)")}},
    {"--optimizer", PSG_OPT_STRING,
     .use = {TRAIN(c.optimizer, "--optimizer NAME",
                   "sgd|momentum|rmsprop|adam|adagrad|ftrl (default momentum)"),
             BENCH(c.optimizer, "--optimizer rmsprop|sgd",
                   "rmsprop: the paper's recipe, with a moving average of the\n"
                   "weights and weight decay (default); sgd: plain SGD, neither\n"
                   "(the PyTorch peer's, for bench/inception3.sh)")}},
    {"--momentum", PSG_OPT_REAL, 0, 1,
     .use = {TRAIN(c.momentum, "--momentum M", "momentum (default 0.9)")}},
    {"--l1", PSG_OPT_REAL, 0, 1e9,
     .use = {TRAIN(c.l1, "--l1 X --l2 X",
                   "ftrl: L1 and L2 regularization strengths (default 0, 0)")}},
    {"--l2", PSG_OPT_REAL, 0, 1e9, .use = {TRAIN(c.l2, NULL, NULL)}},
    {"--lr-power", PSG_OPT_REAL, -1e9, 0,
     .use = {TRAIN(c.lr_power, "--lr-power P",
                   "ftrl: the learning-rate power, <= 0 (default -0.5)")}},
    {"--seed", PSG_OPT_INT, 0, 1e18,
     .use = {TRAIN(c.seed, "--seed S", "seed of initialization and shuffling (default 1)"),
             BENCH(c.seed, "--seed S", "(default 1)"), COMPARE(seed), SIM(c.seed, "--seed S", ""),
             DATA(seed, "--seed S", "(default 1)")}},
    {"--threads", PSG_OPT_INT, 1, 1024,
     .use = {TRAIN(c.threads, "--threads T", "compute threads in all (default 1)"),
             BENCH(c.threads, "--threads T", "compute threads (default: the cores)"),
             SERVER(threads, "--threads T", "executor threads per step (default 1)")}},
    {"--decode-threads", PSG_OPT_INT, 1, 1024,
     .use = {TRAIN_DATA("imagenet", c.decode_threads, "--decode-threads T",
                        "imagenet: JPEG decode and preprocessing threads (default 2)"),
             BENCH(c.decode_threads, "--decode-threads T", "JPEG decode threads (default 2)")}},
    {"--idle-timeout", PSG_OPT_REAL, 0, 1e9,
     .use = {SERVER(idle, "--idle-timeout S",
                    "stop after S seconds without a request (default 600; 0: never)")}},
    {"--recv-timeout", PSG_OPT_REAL, 0.001, 1e9,
     .use = {SERVER(recv_timeout, "--recv-timeout S",
                    "how long a Recv waits for its tensor (default 60)")}},
    {"--logdir", PSG_OPT_STRING,
     .use =
         {TRAIN(c.logdir, "--logdir DIR", "write DIR/metrics.jsonl"),
          BENCH(c.logdir, "--logdir DIR",
                "metrics.jsonl, checkpoints (one at the end: for psgraph\n"
                "export / serve, docs/serving.md), as psgraph train's"),
          [PSG_CLI_SERVER] = {AT(psg_server_args_t, logdirs), .max = PSG_TS_MAX_LOGDIRS,
                              .label = "--logdir DIR",
                              .help = "where SaveShard and Trace may write (repeatable, up to 4;\n"
                                      "none: they are refused)"}}},
    {"--log-every", PSG_OPT_INT, 1, 1e9,
     .use = {TRAIN(c.log_every, "--log-every N", "progress line every N steps (default 100)"),
             BENCH(c.log_every, "--log-every N", "a progress line every N steps (default 1)")}},
    {"--step-times", PSG_OPT_STRING,
     .use = {BENCH(c.step_times, "--step-times FILE",
                   "write each timed step's milliseconds, one a line\n"
                   "(input to psgraph simulate --samples)")}},
    {"--op-profile", PSG_OPT_FLAG,
     .use = {BENCH(c.op_profile, "--op-profile",
                   "print where the timed steps' time goes, a JSON line an op\n"
                   "type (time, share of the step, GFLOP, TFLOP/s); on a GPU\n"
                   "each GPU node waits for its kernels (device times, slower steps)")}},
    {"--print-model", PSG_OPT_FLAG,
     .use = {TRAIN(print_model, "--print-model",
                   "inception3: print parameters and multiply-adds, then exit"),
             BENCH(print_model, "--print-model", "print parameters and multiply-adds, then exit")}},
    {"--print-keras-names", PSG_OPT_FLAG,
     .use = {TRAIN(print_keras_names, "--print-keras-names",
                   "inception3: a JSON object of its variables' slim names and\n"
                   "Keras's InceptionV3 names (null: none, the aux head), then exit")}},
    {"--device", PSG_OPT_WORDS, .words = device_words,
     .use = {TRAIN(c.device, "--device cpu|gpu",
                   "where the towers run (default cpu; gpu without a GPU: cpu)"),
             BENCH(c.device, "--device cpu|gpu",
                   "(default cpu; gpu without a GPU runs on the CPU, with a note)")}},
    {"--towers", PSG_OPT_INT, 1, PSG_MAX_TOWERS,
     .use = {TRAIN(c.towers, "--towers K",
                   "model copies, one per device, each on 1/K of the batch (default 1)"),
             BENCH(c.towers, "--towers K",
                   "K model copies in this process, each on B/K images, their\n"
                   "gradients averaged in-graph (on --device's devices)")}},
    {"--precision", PSG_OPT_STRING, .check = check_precision,
     .use = {TRAIN(c.precision, "--precision f32|mixed|mixed-f16",
                   "mixed: MatMul and Conv2D (and their gradients) in bf16 with\n"
                   "f32 accumulation, variables and the rest f32; mixed-f16: f16 with a\n"
                   "static loss scale of 1024 (default f32; docs/mixed_precision.md)"),
             BENCH(c.precision, "--precision P",
                   "f32 (default), mixed (bf16 products, f32 variables) or\n"
                   "mixed-f16 (f16 products, loss scale 1024): docs/mixed_precision.md")}},
    {"--straggler", PSG_OPT_STRING, .check = check_straggler,
     .use = {TRAIN(stragglers, "--straggler SPEC",
                   "delay workers each step (repeatable): worker=2,delay_ms=300 or\n"
                   "worker=all,dist=lognormal,median_ms=20,sigma=1 (docs/sync.md)"),
             BENCH(stragglers, "--straggler SPEC",
                   "delay workers each step (repeatable; docs/sync.md)"),
             COMPARE(straggler)}},
    {"--cluster", PSG_OPT_STRING,
     .use = {TRAIN(c.cluster_file, "--cluster FILE",
                   "the cluster as TF_CONFIG JSON, with --job and --task"),
             BENCH(c.cluster_file, "--cluster FILE --job worker --task I ",
                   "run as that task (or TF_CONFIG set)"),
             SERVER(cluster_file, NULL, NULL)}},
    {"--job", PSG_OPT_STRING,
     .use = {TRAIN(c.job, "--job NAME --task I",
                   "this process's task in --cluster FILE (e.g. worker 1)\n"
                   "(task evaluator: trains nothing, evaluates each new checkpoint\n"
                   "of --logdir, exits when the job ends; docs/distributed.md)"),
             BENCH(c.job, NULL, NULL), SERVER(job, NULL, NULL)}},
    {"--task", PSG_OPT_INT, 0, 1e6,
     .use = {TRAIN(c.task, NULL, NULL), BENCH(c.task, NULL, NULL), SERVER(task, NULL, NULL)}},
    {"--task-name", PSG_OPT_STRING, .use = {SERVER(task_name, NULL, NULL)}},
    {"--listen", PSG_OPT_STRING, .use = {SERVER(listen, NULL, NULL)}},
    {"--step-timeout", PSG_OPT_REAL, 0.001, 1e6, .scale = 1000,
     .use = {TRAIN(c.step_timeout_ms, "--step-timeout S",
                   "a distributed step fails after S seconds (default 30)"),
             BENCH(c.step_timeout_ms, "--step-timeout S",
                   "a distributed step fails after S seconds (default 300)")}},
    {"--peer-timeout", PSG_OPT_REAL, 0.001, 86400,
     .use = {TRAIN(c.peer_timeout_s, "--peer-timeout S",
                   "a ps silent S seconds (heartbeats) fails the step, naming it\n"
                   "(default: the cluster file's \"peer_timeout\", else 10)"),
             SERVER(peer_timeout, "--peer-timeout S",
                    "a peer silent S seconds (heartbeats) is dropped and its requests\n"
                    "fail, naming it (default: the cluster file's \"peer_timeout\", else 10)")}},
    {"--ps-replicas", PSG_OPT_INT, 1, 2,
     .use = {TRAIN(c.ps_replicas, "--ps-replicas N",
                   "copies of each ps shard: 2 keeps a backup on the next ps task,\n"
                   "updated before each step is acknowledged, which the workers switch\n"
                   "to when the primary is lost (default: the cluster file's\n"
                   "\"ps_replicas\", else 1; docs/replication.md)"),
             SERVER(ps_replicas, "--ps-replicas N",
                    "2: forward every update of this task's shard to its backup (the\n"
                    "next ps task) before answering (default: the cluster file's\n"
                    "\"ps_replicas\", else 1)")}},
    {"--expect-workers", PSG_OPT_INT, 0, 1e6,
     .use = {SERVER(expect, "--expect-workers N",
                    "stop once N workers said they are done (default: the\n"
                    "cluster's workers and chief; 0: never)")}},
    {"--recovery-timeout", PSG_OPT_REAL, 0.001, 86400,
     .use = {TRAIN(c.recovery_timeout_s, "--recovery-timeout S",
                   "after a failed step, wait S seconds for a lost ps to come back\n"
                   "(launch --restart on-failure restarts it), then stop (default 60)")}},
    {"--keys", PSG_OPT_STRING,
     .use = {TRAIN(c.keys_dir, "--keys DIR",
                   "the cluster's CURVE keys (psgraph keygen DIR; default: the cluster\n"
                   "file's \"keys\", else $PSGRAPH_KEYS; docs/security.md)"),
             LAUNCH(l.keys),
             SERVER(keys_dir, "--keys DIR",
                    "the cluster's CURVE keys (psgraph keygen DIR); default: the\n"
                    "cluster file's \"keys\", else $PSGRAPH_KEYS")}},
    {"--insecure", PSG_OPT_FLAG,
     .use = {TRAIN(c.insecure, "--insecure", "this task may listen off loopback without keys"),
             SERVER(insecure, "--insecure",
                    "listen off loopback without keys (a network you trust)")}},
    {"--memory-limit", PSG_OPT_BYTES, 1, 9e18,
     .use = {SERVER(lim.memory_bytes, "--memory-limit BYTES",
                    "the task's memory, for all its peers: graphs as built, what\n"
                    "their steps allocate, requests waiting (suffix K, M, G;\n"
                    "default half the machine's)")}},
    {"--peer-memory", PSG_OPT_BYTES, 1, 9e18,
     .use = {SERVER(lim.peer_memory_bytes, "--peer-memory BYTES",
                    "a peer's share: what its graphs may allocate in all\n"
                    "(default half of --memory-limit)")}},
    {"--max-pending", PSG_OPT_INT, 1, 1e9,
     .use = {SERVER(lim.max_pending_per_peer, "--max-pending N",
                    "RunGraph requests a peer may have pending (default 64)")}},
    {"--max-running", PSG_OPT_INT, 1, 1e9,
     .use = {SERVER(lim.max_running_per_peer, "--max-running N",
                    "of those, how many run at once (default 4: half the runners)")}},
    {"--max-graphs", PSG_OPT_INT, 1, 1e9,
     .use = {SERVER(lim.max_graphs_per_peer, "--max-graphs N",
                    "graphs a peer may have registered (default 256)")}},
    {"--max-peers-per-address", PSG_OPT_INT, 1, 1e9,
     .use = {SERVER(lim.max_peers_per_address, "--max-peers-per-address N",
                    "open connections from one address holding anything here\n"
                    "(a closed one's graphs wait out --graph-grace; default 64).\n"
                    "With --keys a peer is a client key, all its connections\n"
                    "one quota (the cluster's own key: per connection)")}},
    {"--max-connections", PSG_OPT_INT, 1, 1e6,
     .use = {SERVER(lim.max_connections, "--max-connections N",
                    "connections open at once; at the cap a new one closes the\n"
                    "oldest that never finished its handshake, or itself\n"
                    "(default: what ulimit -n allows, less 128)")}},
    {"--graph-grace", PSG_OPT_REAL, 0.001, 86400,
     .use = {SERVER(graph_grace, "--graph-grace S",
                    "a peer's graphs outlive its last connection S seconds (a\n"
                    "worker that reconnects keeps them), then are released\n"
                    "(default 60)")}},
    {"--max-wait", PSG_OPT_REAL, 0.001, 1e9,
     .use = {SERVER(max_wait, "--max-wait S",
                    "the longest wait of an accumulator take or token dequeue,\n"
                    "whatever a graph asks (default 600)")}},
    {"--shard-bytes", PSG_OPT_INT, 0, 1 << 30,
     .use = {TRAIN(c.dense_shard_bytes, "--shard-bytes N",
                   "fully connected weights above N bytes are split into column\n"
                   "shards, each its own variable (default: 524288 in a cluster,\n"
                   "0, no shards, in one process)")}},
    {"--overlap", PSG_OPT_WORDS, .words = on_off,
     .use = {TRAIN(overlap, "--overlap on|off",
                   "on: async overlaps steps, the same as --max-staleness 1;\n"
                   "off: never ahead, whatever --max-staleness says (default:\n"
                   "a lone async worker asks for the next step's reads ahead,\n"
                   "each after this step's update of its variable: no staleness;\n"
                   "overlap as --max-staleness says)")}},
    {"--eval-every", PSG_OPT_INT, 1, 1e12,
     .use = {TRAIN(c.eval_every, "--eval-every N",
                   "the chief evaluates every N (sync: global) steps, not each epoch\n"
                   "(default: each epoch)"),
             BENCH(c.eval_every, "--eval-every N",
                   "evaluate every N steps, untimed (default: never)"),
             COMPARE(eval_every)}},
    {"--test-examples", PSG_OPT_INT, 1, 1e12,
     .use = {TRAIN(c.test_examples, "--test-examples N",
                   "evaluate on the first N test examples only (default: all)")}},
    {"--checkpoint-every", PSG_OPT_STRING, .check = check_checkpoint,
     .use = {TRAIN(c.checkpoint_every, "--checkpoint-every N|Ns",
                   "checkpoint to --logdir every N steps or N seconds (default 600s);\n"
                   "a run with the same --logdir resumes from the latest checkpoint")}},
    {"--keep", PSG_OPT_INT, 1, 1e6,
     .use = {TRAIN(c.keep, "--keep K", "checkpoints kept (default 5)")}},
    {"--init-from", PSG_OPT_STRING,
     .use = {TRAIN(c.init_from, "--init-from FILE",
                   "initial values of the variables from a safetensors file, by name\n"
                   "(any writer's: Python's safetensors, a psgraph shard); reports\n"
                   "matched, missing and unexpected names; a checkpoint of --logdir wins")}},
    {"--strict", PSG_OPT_FLAG,
     .use = {TRAIN(c.init_strict, "--strict",
                   "with --init-from: fail on any missing or unexpected name")}},
    {"--join", PSG_OPT_FLAG,
     .use = {TRAIN(c.join, "--join",
                   "a worker that joins a running job (not the chief): the chief\n"
                   "admits it at a step boundary (docs/distributed.md \"Membership\")")}},
    {"--data-shards", PSG_OPT_WORDS, .words = data_shards_words,
     .use = {TRAIN(c.data_shards, "--data-shards fixed|dispatch",
                   "in a cluster: each worker reads its fixed part of the data (fixed,\n"
                   "the default), or takes shards of each epoch from ps0 as it goes\n"
                   "(dispatch: each example once an epoch as workers come and go;\n"
                   "docs/distributed.md \"Membership\")")}},
    {"--shard-batches", PSG_OPT_INT, 1, 1e9,
     .use = {TRAIN(c.shard_batches, "--shard-batches N",
                   "with --data-shards dispatch: batches a shard (default 20)")}},
    {"--fresh-start", PSG_OPT_FLAG,
     .use = {TRAIN(c.fresh_start, "--fresh-start",
                   "when every checkpoint of --logdir fails verification, start\n"
                   "from step 0 (default: stop, naming each file and why)")}},
    {"--trace", PSG_OPT_STRING,
     .use = {TRAIN(c.trace_path, "--trace FILE",
                   "write a Chrome trace (Perfetto, chrome://tracing) of some steps"),
             BENCH(trace, "--trace FILE",
                   "write a Chrome trace of the timed steps: each op's time"),
             SIM(trace, "--trace FILE",
                 "the overlap model, calibrated from the merged trace of one\n"
                 "uncapped run (psgraph launch ... train --trace FILE): each\n"
                 "pull and push, its bytes, when the compute needs or makes it")}},
    {"--trace-steps", PSG_OPT_STRING, .check = check_trace_steps,
     .use = {TRAIN(trace_steps, "--trace-steps A:B",
                   "the steps traced, 1-based, inclusive (default 5:6)")}},
    /* a cluster: bench's and launch's (the local cluster psg_launch_local runs: ps + workers
     * <= 192 of its 256 tasks), compare's runs */
    {"--ps", PSG_OPT_INT, 0, 64,
     .use = {[PSG_CLI_BENCH] =
                 {AT(psg_bench_opts_t, ps), .label = "--ps P --workers W",
                  .heading = "a cluster (variables on the ps tasks; one worker: async, "
                             "else sync replicas):",
                  .help = "without TF_CONFIG or --cluster: starts P ps tasks and W workers\n"
                          "on this host (as psgraph launch); the chief prints the job's\n"
                          "images/sec (W x batch a global step) and the final JSON line"},
             LAUNCH(l.ps),
             COMPARE(ps)}},
    {"--workers", PSG_OPT_INT, 1, 128, .use = {BENCH(workers, NULL, NULL), COMPARE(workers)}},
    {"--workers", PSG_OPT_STRING, .check = check_launch_workers, .use = {LAUNCH(workers)}},
    /* the strategies' options that the command keeps (sync/strategies.c prints them for
     * train: psg_sync_print_help) */
    {"--backup-workers", PSG_OPT_INT, 0, 1e6,
     .use = {TRAIN(c.backup_workers, NULL, NULL),
             BENCH(c.backup_workers, "--backup-workers b",
                   "b more workers; each step takes the first W of the W + b\n"
                   "gradients and drops the rest (default 0)")}},
    {"--replicas-to-aggregate", PSG_OPT_INT, 1, 1e6,
     .use = {TRAIN(c.replicas_to_aggregate, NULL, NULL)}},
    {"--sync", PSG_OPT_STRING, .check = check_sync,
     .use = {TRAIN(c.sync, NULL, NULL),
             BENCH(c.sync, "--sync NAME",
                   "the strategy (default sync; async for one worker and no b) and its\n"
                   "options, as psgraph train's (psgraph train --help)")}},
    /* psgraph launch (its usage text names them; cli/launch_cmd.c) */
    {"--transport", PSG_OPT_WORDS, .words = transport_words, .use = {LAUNCH(transport)}},
    {"--port-base", PSG_OPT_INT, 1, 65535 - 256, .use = {LAUNCH(l.port_base)}},
    {"--host", PSG_OPT_STRING, .use = {LAUNCH(host)}},
    {"--restart", PSG_OPT_WORDS, .words = restart_words, .use = {LAUNCH(l.restart)}},
    {"--max-restarts", PSG_OPT_INT, 0, 1000, .use = {LAUNCH(l.max_restarts)}},
    {"--allow-worker-failures", PSG_OPT_INT, 0, 255, .use = {LAUNCH(l.worker_failures)}},
    {"--ssh", PSG_OPT_FLAG, .use = {LAUNCH(ssh)}},
    {"--hosts", PSG_OPT_STRING, .use = {LAUNCH(hosts)}},
    {"--hosts-file", PSG_OPT_STRING, .use = {LAUNCH(hosts_file)}},
    {"--ssh-config", PSG_OPT_STRING, .use = {LAUNCH(l.ssh_config)}},
    {"--ssh-option", PSG_OPT_STRING,
     .use = {[PSG_CLI_LAUNCH] = {AT(psg_launch_args_t, ssh_options), .max = 31}}},
    {"--remote-bin", PSG_OPT_STRING, .use = {LAUNCH(l.remote_bin)}},
    {"--keys-shared", PSG_OPT_FLAG, .use = {LAUNCH(l.keys_shared)}},
    {"--slurm", PSG_OPT_FLAG, .use = {LAUNCH(l.slurm)}},
    {"--k8s", PSG_OPT_FLAG, .use = {LAUNCH(k8s)}},
    K8S("--image"),
    K8S("--namespace"),
    K8S("--name"),
    {"--gpus-per-worker", PSG_OPT_INT, 0, 64, .use = {K8S_USE}},
    K8S("--cpu"),
    K8S("--memory"),
    K8S("--logdir-volume"),
    {"--out", PSG_OPT_STRING,
     .use = {K8S_USE, DATA(out, "--out FILE|DIR",
                           "ctr: the file (gzip when it ends in .gz); imagenet: the folder")}},
    K8S("--node-selector"),
    K8S("--toleration"),
    {"--ttl-after-finished", PSG_OPT_INT, 0, 1e9, .use = {K8S_USE}},
    {"--active-deadline", PSG_OPT_INT, 0, 1e9, .use = {K8S_USE}},
    /* psgraph data (cli/data_cmd.c) */
    {"--rows", PSG_OPT_INT, 10, 1e12, .use = {DATA(rows, "--rows N", "ctr: rows, >= 10")}},
    {"--train", PSG_OPT_INT, 1, 1e8,
     .use = {DATA(train, "--train N --validation N",
                  "imagenet: images of each split (default 400, 100)")}},
    {"--validation", PSG_OPT_INT, 1, 1e8, .use = {DATA(validation, NULL, NULL)}},
    {"--shards", PSG_OPT_INT, 1, 1024,
     .use = {DATA(shards, "--shards N", "imagenet: TFRecord files of each split (default 2)")}},
    /* psgraph compare (its usage text names them; cli/compare_cmd.c) */
    {"--launch-arg", PSG_OPT_STRING,
     .use = {[PSG_CLI_COMPARE] = {AT(psg_compare_args_t, launch), .max = 16}}},
    {"--target", PSG_OPT_REAL, 1e-9, 1, .use = {COMPARE(target)}},
    {"--target-top1", PSG_OPT_REAL, 1e-9, 1, .use = {COMPARE(target)}},
    {"--outdir", PSG_OPT_STRING, .use = {COMPARE(outdir)}},
    {"--repeats", PSG_OPT_INT, 1, 1000, .use = {COMPARE(repeats)}},
    {"--seeds", PSG_OPT_STRING, .use = {COMPARE(seeds)}},
    {"--load-margin", PSG_OPT_REAL, 0, 1e6, .use = {COMPARE(load_margin)}},
    {"--png", PSG_OPT_STRING, .use = {COMPARE(png)}},
    {"--script", PSG_OPT_STRING, .use = {COMPARE(script)}},
    {"--python", PSG_OPT_STRING, .use = {COMPARE(python)}},
};

const psg_cli_option_t *psg_cli_options(int *n) {
    *n = (int)(sizeof rows / sizeof rows[0]);
    return rows;
}
