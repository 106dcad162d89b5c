/* `psgraph train`: parses the options into a psg_train_config_t and runs it. */
#include "cli/commands.h"
#include "psgraph/checkpoint.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"
#include "psgraph/models.h"
#include "psgraph/precision.h"
#include "psgraph/straggler.h"
#include "psgraph/sync_replicas.h"
#include "psgraph/trace.h"
#include "psgraph/trainer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void train_usage(FILE *f) {
    char names[256];
    fprintf(f, "usage: psgraph train [options]\n  --model %s  the model (default cnn):\n",
            psg_model_names("|", names, sizeof names));
    for (int i = 0; i < psg_model_count(); i++)
        fprintf(f, "      %-11s batch %d, lr %g: %s\n", psg_model_info(i)->name, psg_model_info(i)->defaults.batch,
                psg_model_info(i)->defaults.lr, psg_model_info(i)->description);
    fprintf(f,
            "  --data fashion-mnist|synthetic|criteo  (wide-deep: criteo)\n"
            "  --data-dir DIR           Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist);\n"
            "                           criteo: a Criteo-format file or folder (psgraph data ctr writes one)\n"
            "  --buckets N              wide-deep: hash buckets per categorical field (default 1000000)\n"
            "  --table-shards N         wide-deep: the embedding table's shards (default 1, or the ps tasks)\n"
            "  --partition-strategy mod|div  wide-deep: which shard holds an id (default mod)\n"
            "  --ps-memory-limit N[K|M|G]  bytes of variables one ps task may hold: the wide-deep table\n"
            "                           spreads over enough shards; a graph that cannot fit is refused\n"
            "  --epochs E               passes over the training set (default 2)\n"
            "  --steps N                stop after N steps (overrides --epochs); 0: train nothing,\n"
            "                           only the initial checkpoint (with --logdir)\n"
            "  --batch B                batch size (default: the model's, above)\n"
            "  --lr X                   learning rate (default: the model's, above)\n"
            "  --optimizer NAME         sgd|momentum|rmsprop|adam|adagrad|ftrl (default momentum)\n"
            "  --momentum M             momentum (default 0.9)\n"
            "  --l1 X --l2 X            ftrl: L1 and L2 regularization strengths (default 0, 0)\n"
            "  --lr-power P             ftrl: the learning-rate power, <= 0 (default -0.5)\n"
            "  --seed S                 seed of initialization and shuffling (default 1)\n"
            "  --threads T              compute threads in all (default 1)\n"
            "  --logdir DIR             write DIR/metrics.jsonl\n"
            "  --log-every N            progress line every N steps (default 100)\n"
            "  --device cpu|gpu         where the towers run (default cpu; gpu without a GPU: cpu)\n"
            "  --towers K               model copies, one per device, each on 1/K of the batch (default 1)\n"
            "  --precision f32|mixed|mixed-f16  mixed: MatMul and Conv2D (and their gradients) in bf16 with\n"
            "                           f32 accumulation, variables and the rest f32; mixed-f16: f16 with a\n"
            "                           static loss scale of 1024 (default f32; docs/mixed_precision.md)\n"
            "  --straggler SPEC         delay workers each step (repeatable): worker=2,delay_ms=300 or\n"
            "                           worker=all,dist=lognormal,median_ms=20,sigma=1 (docs/sync.md)\n"
            "  --cluster FILE           the cluster as TF_CONFIG JSON, with --job and --task\n"
            "  --job NAME --task I      this process's task in --cluster FILE (e.g. worker 1)\n"
            "                           (task evaluator: trains nothing, evaluates each new checkpoint\n"
            "                           of --logdir, exits when the job ends; docs/distributed.md)\n"
            "  --step-timeout S         a distributed step fails after S seconds (default 30)\n"
            "  --peer-timeout S         a ps silent S seconds (heartbeats) fails the step, naming it\n"
            "                           (default: the cluster file's \"peer_timeout\", else 10)\n"
            "  --recovery-timeout S     after a failed step, wait S seconds for a lost ps to come back\n"
            "                           (launch --restart on-failure restarts it), then stop (default 60)\n"
            "  --keys DIR               the cluster's CURVE keys (psgraph keygen DIR; default: the cluster\n"
            "                           file's \"keys\", else $PSGRAPH_KEYS; docs/security.md)\n"
            "  --insecure               this task may listen off loopback without keys\n"
            "  --shard-bytes N          fully connected weights above N bytes are split into column\n"
            "                           shards, each its own variable (default: 524288 in a cluster,\n"
            "                           0, no shards, in one process)\n"
            "  --overlap on|off         on: async asks for the next step ahead, the same as\n"
            "                           --max-staleness 1; off: never ahead, whatever --max-staleness\n"
            "                           says (default: as --max-staleness says, 0: never ahead)\n"
            "  --eval-every N           the chief also evaluates every N of its steps (default: each epoch)\n"
            "  --test-examples N        evaluate on the first N test examples only (default: all)\n"
            "  --checkpoint-every N|Ns  checkpoint to --logdir every N steps or N seconds (default 600s);\n"
            "                           a run with the same --logdir resumes from the latest checkpoint\n"
            "  --keep K                 checkpoints kept (default 5)\n"
            "  --init-from FILE         initial values of the variables from a safetensors file, by name\n"
            "                           (any writer's: Python's safetensors, a psgraph shard); reports\n"
            "                           matched, missing and unexpected names; a checkpoint of --logdir wins\n"
            "  --strict                 with --init-from: fail on any missing or unexpected name\n"
            "  --fresh-start            when every checkpoint of --logdir fails verification, start\n"
            "                           from step 0 (default: stop, naming each file and why)\n"
            "  --trace FILE             write a Chrome trace (Perfetto, chrome://tracing) of some steps\n"
            "  --trace-steps A:B        the steps traced, 1-based, inclusive (default 5:6)\n");
    psg_sync_print_help(f);
}

/* Bytes with an optional K, M, G suffix (powers of 1024); on error names the option. */
static int parse_bytes(const char *opt, const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
    if (unit > 1) end++;
    if (errno || end == s || *end || !(v > 0) || v * unit > 9e18)
        return psg_error_set("%s: '%s' is not a size in bytes (e.g. 512M, 4G)", opt, s);
    *out = (int64_t)(v * unit);
    return 0;
}

/* Parses a number option; on error names the option. */
static int parse_num(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi)
        return psg_error_set("%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
    *out = v;
    return 0;
}

/* --overlap on: the staleness of one step that asking ahead brings, said in its own words
 * (--max-staleness 1); off: never ahead, whatever --max-staleness says. */
static int parse_overlap(const char *v, psg_train_config_t *c) {
    if (strcmp(v, "on") && strcmp(v, "off")) return psg_error_set("--overlap: '%s' is not on or off", v);
    c->no_overlap = !strcmp(v, "off");
    if (!c->no_overlap && c->sync_opt.max_staleness < 1) c->sync_opt.max_staleness = 1;
    return 0;
}

int psg_cmd_train(int argc, char **argv) {
    /* inception3 trains with its own recipe and options (cli/bench_cmd.c) */
    for (int i = 1; i + 1 < argc; i++) {
        const psg_model_info_t *m = !strcmp(argv[i], "--model") ? psg_model_find(argv[i + 1]) : NULL;
        if (m && !m->built_here) return psg_cmd_train_inception3(argc, argv);
    }
    psg_train_config_t c;
    psg_train_config_defaults(&c);
    const char *stragglers[32];
    const char *insecure_env = getenv(PSG_CURVE_INSECURE_ENV);
    c.insecure = insecure_env && !strcmp(insecure_env, "1");
    bool no_steps = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            train_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--insecure")) {
            c.insecure = true;
            continue;
        }
        if (!strcmp(a, "--fresh-start") || !strcmp(a, "--strict")) { /* the flags without a value */
            if (a[2] == 'f') c.fresh_start = true;
            else c.init_strict = true;
            continue;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "psgraph train: %s '%s'\n", i + 1 >= argc ? "missing value for" : "unexpected argument", a);
            train_usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        double x = 0;
        int rc = 0;
        if (!strcmp(a, "--model")) c.model = v;
        else if (!strcmp(a, "--data")) c.data = v;
        else if (!strcmp(a, "--data-dir")) c.data_dir = v;
        else if (!strcmp(a, "--buckets")) { rc = parse_num(a, v, 1, 1099511627776.0, &x); c.buckets = (int64_t)x; }
        else if (!strcmp(a, "--table-shards")) { rc = parse_num(a, v, 1, 64, &x); c.table_shards = (int)x; }
        else if (!strcmp(a, "--partition-strategy")) c.partition_strategy = v;
        else if (!strcmp(a, "--ps-memory-limit")) rc = parse_bytes(a, v, &c.ps_memory_limit);
        else if (!strcmp(a, "--optimizer")) c.optimizer = v;
        else if (!strcmp(a, "--logdir")) c.logdir = v;
        else if (!strcmp(a, "--init-from")) c.init_from = v;
        else if (!strcmp(a, "--device")) {
            c.device = v;
            if (strcmp(v, "cpu") && strcmp(v, "gpu")) rc = psg_error_set("--device: '%s' is not cpu or gpu", v);
        }
        else if (!strcmp(a, "--precision")) {
            psg_dtype_t dt;
            c.precision = v;
            rc = psg_precision_parse(v, &dt);
        }
        else if (!strcmp(a, "--shard-bytes")) { rc = parse_num(a, v, 0, 1 << 30, &x); c.dense_shard_bytes = (int64_t)x; }
        else if (!strcmp(a, "--towers")) { rc = parse_num(a, v, 1, 16, &x); c.towers = (int)x; }
        else if (!strcmp(a, "--sync")) {
            c.sync = v;
            if (strcmp(v, "none")) rc = psg_sync_strategy_check_name(v);
        }
        else if ((rc = psg_sync_option_parse(&c.sync_opt, a, v)) != 0) {
            if (rc > 0) rc = 0; /* a strategy's own option (sync/strategies.c) */
        }
        else if (!strcmp(a, "--eval-every")) { rc = parse_num(a, v, 1, 1e12, &x); c.eval_every = (int64_t)x; }
        else if (!strcmp(a, "--test-examples")) { rc = parse_num(a, v, 1, 1e12, &x); c.test_examples = (int64_t)x; }
        else if (!strcmp(a, "--overlap")) rc = parse_overlap(v, &c);
        else if (!strcmp(a, "--replicas-to-aggregate")) { rc = parse_num(a, v, 1, 1e6, &x); c.replicas_to_aggregate = (int)x; }
        else if (!strcmp(a, "--backup-workers")) { rc = parse_num(a, v, 0, 1e6, &x); c.backup_workers = (int)x; }
        else if (!strcmp(a, "--straggler")) {
            psg_straggler_spec_t sp;
            if (c.num_stragglers == 32) rc = psg_error_set("--straggler: at most 32");
            else if ((rc = psg_straggler_parse(v, &sp)) == 0) stragglers[c.num_stragglers++] = v;
            c.stragglers = stragglers;
        }
        else if (!strcmp(a, "--cluster")) c.cluster_file = v;
        else if (!strcmp(a, "--job")) c.job = v;
        else if (!strcmp(a, "--keys")) c.keys_dir = v;
        else if (!strcmp(a, "--task")) { rc = parse_num(a, v, 0, 1e6, &x); c.task = (int)x; }
        else if (!strcmp(a, "--step-timeout")) { rc = parse_num(a, v, 0.001, 1e6, &x); c.step_timeout_ms = (int64_t)(x * 1000); }
        else if (!strcmp(a, "--peer-timeout")) rc = parse_num(a, v, 0.001, 86400, &c.peer_timeout_s);
        else if (!strcmp(a, "--recovery-timeout")) rc = parse_num(a, v, 0.001, 86400, &c.recovery_timeout_s);
        else if (!strcmp(a, "--epochs")) { rc = parse_num(a, v, 1, 1e6, &x); c.epochs = (int)x; }
        else if (!strcmp(a, "--steps")) { rc = parse_num(a, v, 0, 1e12, &x); c.steps = (int64_t)x; no_steps = x == 0; }
        else if (!strcmp(a, "--batch")) { rc = parse_num(a, v, 1, 1 << 20, &x); c.batch = (int)x; }
        else if (!strcmp(a, "--lr")) { rc = parse_num(a, v, 1e-12, 1e6, &x); c.lr = x; }
        else if (!strcmp(a, "--momentum")) { rc = parse_num(a, v, 0, 1, &x); c.momentum = x; }
        else if (!strcmp(a, "--l1")) { rc = parse_num(a, v, 0, 1e9, &x); c.l1 = x; }
        else if (!strcmp(a, "--l2")) { rc = parse_num(a, v, 0, 1e9, &x); c.l2 = x; }
        else if (!strcmp(a, "--lr-power")) { rc = parse_num(a, v, -1e9, 0, &x); c.lr_power = x; }
        else if (!strcmp(a, "--seed")) { rc = parse_num(a, v, 0, 1e18, &x); c.seed = (uint64_t)x; }
        else if (!strcmp(a, "--threads")) { rc = parse_num(a, v, 1, 1024, &x); c.threads = (int)x; }
        else if (!strcmp(a, "--log-every")) { rc = parse_num(a, v, 1, 1e9, &x); c.log_every = (int)x; }
        /* checkpoints and the timeline (psgraph/checkpoint.h, psgraph/trace.h) */
        else if (!strcmp(a, "--checkpoint-every")) {
            psg_checkpoint_policy_t p;
            c.checkpoint_every = v;
            if ((rc = psg_checkpoint_policy_parse(v, &p)) < 0) psg_error_wrap("%s", a);
        }
        else if (!strcmp(a, "--keep")) { rc = parse_num(a, v, 1, 1e6, &x); c.keep = (int)x; }
        else if (!strcmp(a, "--trace")) c.trace_path = v;
        else if (!strcmp(a, "--trace-steps")) {
            if ((rc = psg_trace_parse_steps(v, &c.trace_first, &c.trace_last)) < 0) psg_error_wrap("%s", a);
        }
        else {
            fprintf(stderr, "psgraph train: unknown option '%s'\n", a);
            train_usage(stderr);
            return 2;
        }
        if (rc < 0) {
            fprintf(stderr, "psgraph train: %s\n", psg_error_message());
            return 2;
        }
    }
    if (c.trace_path && c.trace_first == 0) c.trace_first = 5, c.trace_last = 6;
    if (no_steps) c.epochs = 0; /* --steps 0: the initial variables (checkpointed with --logdir) */
    psg_train_result_t r;
    if (psg_train(&c, &r) == 0) return 0;
    fprintf(stderr, "psgraph train: %s\n", psg_error_message());
    return 1;
}
