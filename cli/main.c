/* The psgraph binary: one entry point, one subcommand per verb. */
#include "psgraph/error.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: psgraph <command> [options]\n"
               "commands:\n"
               "  train     train a model (psgraph train --help)\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "psgraph: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
