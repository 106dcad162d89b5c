/* The psgraph binary: one entry point, one subcommand per verb. */
#include "cli/commands.h"
#include "cli/serving_cmds.h"
#include "ops/cpu/blas.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"
#include "psgraph/fp_mode.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"train", psg_cmd_train, "train a model (psgraph train --help)"},
    {"server", psg_cmd_server, "run a task server, e.g. a ps task (psgraph server --help)"},
    {"launch", psg_cmd_launch, "start a local cluster: psgraph launch --ps P --workers W -- CMD"},
    {"keygen", psg_cmd_keygen,
     "make a cluster's CURVE keys: psgraph keygen DIR (docs/security.md)"},
    {"bench", psg_cmd_bench, "benchmark a model: psgraph bench inception3 --help"},
    {"simulate", psg_cmd_simulate, "predict sync-replicas scaling from measured numbers"},
    {"inspect", psg_cmd_inspect,
     "list a checkpoint's tensors with stats, or a running task's variables "
     "(psgraph inspect CHECKPOINT | --task HOST:PORT)"},
    {"compare", psg_cmd_compare,
     "run strategies on one workload, time to accuracy (psgraph compare --help)"},
    {"data", psg_cmd_data, "write a synthetic click log: psgraph data ctr --rows N --out FILE"},
    {"plot", psg_cmd_plot, "draw LOGDIR/metrics.jsonl to a PNG with gnuplot (psgraph plot LOGDIR)"},
    {"serve", psg_cmd_serve,
     "serve a model over TensorFlow Serving's REST API: psgraph serve --model-dir DIR"},
    {"predict", psg_cmd_predict,
     "a model's answers on files: psgraph predict --model-dir DIR FILE..."},
    {"export", psg_cmd_export,
     "a checkpoint's model as ONNX: psgraph export --logdir DIR --out FILE"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: psgraph <command> [options]\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

/* What the wire refuses (a peer without the cluster's keys), on stderr. */
static void log_line(void *ctx, const char *line) {
    (void)ctx;
    fprintf(stderr, "psgraph: %s\n", line);
    fflush(stderr);
}

int main(int argc, char **argv) {
    /* before any thread starts: it may set OPENBLAS_CORETYPE, inherited by the tasks we start */
    psg_blas_init();
    if (psg_fp_mode_from_env() < 0) {
        fprintf(stderr, "psgraph: %s\n", psg_error_message());
        return 2;
    }
    (void)psg_fp_enter(); /* this thread's and every thread's it starts: all of the process */
    psg_net_set_log(log_line, NULL);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "psgraph: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
