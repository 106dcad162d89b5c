/* `psgraph bench inception3`'s options (cli/bench_cmd.c: parsing, checks, starting a
 * local cluster): the training loop's config (psg_train, with .bench set) and what only
 * the command has. */
#ifndef PSGRAPH_CLI_BENCH_H
#define PSGRAPH_CLI_BENCH_H

#include "cli/commands.h"
#include "psgraph/trainer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    psg_train_config_t c; /* the loop's; c.steps: the timed steps (c.bench_warmup more run) */
    int workers, ps;      /* a local cluster: W (0: not given) + c.backup_workers, P */
    bool print_model;
    const char *trace;         /* --trace FILE: the timed steps' ops (one process) */
    psg_cli_list_t stragglers; /* --straggler specs (sync/straggler.c) */
} psg_bench_opts_t;

/* Prints Inception-v3's size for c (image size, classes, aux head): parameters and
 * multiply-adds, and a JSON line; or (keras_names) a JSON object of its variables' slim
 * names and their Keras names. Returns 0, or -1 with the error set. */
int psg_cli_print_inception3(const psg_train_config_t *c, bool keras_names);

#endif
