/* `psgraph data ctr`: writes a synthetic click log in the Criteo format from a planted
 * model (examples/data/ctr_synth.c) and prints the planted model's AUC. */
#include "cli/commands.h"
#include "psgraph/criteo.h"
#include "psgraph/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void data_usage(FILE *f) {
    fprintf(
        f,
        "usage: psgraph data ctr --rows N --out FILE [--seed S]\n"
        "  writes N rows in the Criteo format (label, 13 integers, 26 hexadecimal categoricals,\n"
        "  tab-separated; gzip when FILE ends in .gz) drawn from a planted wide-and-deep model\n"
        "  (Zipf ids, seed S, default 1), and prints a JSON line with the click rate and the\n"
        "  planted model's AUC and log-loss on the last 10%% of the rows (the held-out part of\n"
        "  psgraph train --model wide-deep): the best AUC a learner can reach on it\n");
}

int psg_cmd_data(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        data_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "ctr")) {
        fprintf(stderr, "psgraph data: unknown data set '%s' (known: ctr)\n", argv[1]);
        return 2;
    }
    long long rows = 0;
    unsigned long long seed = 1;
    const char *out = NULL;
    for (int i = 2; i < argc; i += 2) { /* each option and its value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!v) {
            fprintf(stderr, "psgraph data ctr: missing value for '%s'\n", a);
            return 2;
        }
        errno = 0;
        if (!strcmp(a, "--rows"))
            rows = strtoll(v, &end, 10);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, &end, 10);
        else if (!strcmp(a, "--out"))
            out = v;
        else {
            fprintf(stderr, "psgraph data ctr: unknown option '%s'\n", a);
            data_usage(stderr);
            return 2;
        }
        if (end && (errno || *end || end == v)) {
            fprintf(stderr, "psgraph data ctr: %s: '%s' is not a number\n", a, v);
            return 2;
        }
    }
    if (rows < 10 || !out) {
        fprintf(stderr, "psgraph data ctr: needs --rows N (N >= 10) and --out FILE\n");
        return 2;
    }
    if (psg_ctr_synthesize(out, rows, seed, stdout, NULL) < 0) {
        fprintf(stderr, "psgraph data ctr: %s\n", psg_error_message());
        return 1;
    }
    return 0;
}
