/* `psgraph train`: parses the options (cli/option_table.c) into a psg_train_config_t and
 * runs it. */
#include "cli/commands.h"
#include "cli/options.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"
#include "psgraph/models.h"
#include "psgraph/sync_replicas.h"
#include "psgraph/trace.h"
#include "psgraph/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void train_usage(FILE *f) {
    char names[256];
    fprintf(f, "usage: psgraph train [options]\n  --model %s  the model (default cnn):\n",
            psg_model_names("|", names, sizeof names));
    for (int i = 0; i < psg_model_count(); i++)
        fprintf(f, "      %-11s batch %d, lr %g: %s\n", psg_model_info(i)->name,
                psg_model_info(i)->defaults.batch, psg_model_info(i)->defaults.lr,
                psg_model_info(i)->description);
    psg_cli_print_help(PSG_CLI_TRAIN, f, 24);
    psg_sync_print_help(f);
}

/* The options (cli/option_table.c) into a->c; 0, 1 after --help, -1 or -2 (psg_cli_parse). */
static int train_parse(int argc, char **argv, psg_train_args_t *a) {
    memset(a, 0, sizeof *a);
    psg_train_config_defaults(&a->c);
    a->overlap = -1;
    const char *insecure_env = getenv(PSG_CURVE_INSECURE_ENV);
    a->c.insecure = insecure_env && !strcmp(insecure_env, "1");
    int rc = psg_cli_parse(PSG_CLI_TRAIN, argc, argv, 1, a, NULL);
    if (rc) return rc;
    if (psg_cli_check_scope(PSG_CLI_TRAIN, argc, argv, 1, a->c.model, a->c.data) < 0) return -1;
    psg_cli_list_drop(&a->stragglers, "none");
    a->c.stragglers = a->stragglers.v;
    a->c.num_stragglers = a->stragglers.n;
    /* --overlap on: the staleness of one step that asking ahead brings, said in its own words
     * (--max-staleness 1); off: never ahead, whatever --max-staleness says */
    a->c.no_overlap = a->overlap == 1;
    if (a->overlap == 0 && a->c.sync_opt.max_staleness < 1) a->c.sync_opt.max_staleness = 1;
    if (a->trace_steps) psg_trace_parse_steps(a->trace_steps, &a->c.trace_first, &a->c.trace_last);
    if (a->c.trace_path && a->c.trace_first == 0) a->c.trace_first = 5, a->c.trace_last = 6;
    for (int i = 1; i + 1 < argc;
         i++) /* --steps 0: the initial variables (checkpointed with --logdir) */
        if (!strcmp(argv[i], "--steps") && a->c.steps == 0) a->c.epochs = 0;
    return 0;
}

int psg_cmd_train(int argc, char **argv) {
    psg_train_args_t a;
    int rc = train_parse(argc, argv, &a);
    if (rc == 1) train_usage(stdout);
    if (rc < 0) fprintf(stderr, "psgraph train: %s\n", psg_error_message());
    if (rc == -2) train_usage(stderr);
    if (rc) return rc == 1 ? 0 : 2;
    if (a.print_model || a.print_keras_names) {
        if (strcmp(a.c.model, "inception3")) {
            fprintf(stderr, "psgraph train: --print-model, --print-keras-names: of --model "
                            "inception3\n");
            return 2;
        }
        if (psg_cli_print_inception3(&a.c, a.print_keras_names) < 0) {
            fprintf(stderr, "psgraph train: %s\n", psg_error_message());
            return 1;
        }
        return 0;
    }
    psg_train_result_t r;
    if (psg_train(&a.c, &r) < 0) {
        fprintf(stderr, "psgraph train: %s\n", psg_error_message());
        return psg_error_code() == PSG_ERR_CONFIG ? 2 : 1; /* 2: as server, a wrong TF_CONFIG */
    }
    return 0;
}
