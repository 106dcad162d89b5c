/* `psgraph data ctr`: writes a synthetic click log in the Criteo format from a planted
 * model (examples/data/ctr_synth.c) and prints the planted model's AUC. `psgraph data
 * imagenet`: writes a small ImageNet-format set of learnable shapes as TF's
 * build_imagenet_data.py lays ImageNet out (examples/data/imagenet_synth.c). The options
 * are the table's (cli/option_table.c). */
#include "cli/commands.h"
#include "cli/options.h"
#include "psgraph/criteo.h"
#include "psgraph/error.h"
#include "psgraph/imagenet.h"

#include <stdio.h>
#include <string.h>

static void data_usage(FILE *f) {
    fprintf(
        f,
        "usage: psgraph data ctr --rows N --out FILE [--seed S]\n"
        "  writes N rows in the Criteo format (label, 13 integers, 26 hexadecimal categoricals,\n"
        "  tab-separated; gzip when FILE ends in .gz) drawn from a planted wide-and-deep model\n"
        "  (Zipf ids, seed S, default 1), and prints a JSON line with the click rate and the\n"
        "  planted model's AUC and log-loss on the last 10%% of the rows (the held-out part of\n"
        "  psgraph train --model wide-deep): the best AUC a learner can reach on it\n"
        "usage: psgraph data imagenet --out DIR [--classes C] [--train N] [--validation N]\n"
        "       [--image-size S] [--shards K] [--seed S]\n"
        "  writes TFRecord shards as TF's build_imagenet_data.py writes ImageNet\n"
        "  (train-NNNNN-of-NNNNN, validation-...: a JPEG, image/class/label 1..C, the object's\n"
        "  image/object/bbox) of C learnable shapes, for psgraph train --model inception3\n"
        "  --data imagenet --data-dir DIR (docs/inception3.md)\n");
    psg_cli_print_help(PSG_CLI_DATA, f, 24);
}

int psg_cmd_data(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        data_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    bool ctr = !strcmp(argv[1], "ctr");
    if (!ctr && strcmp(argv[1], "imagenet")) {
        fprintf(stderr, "psgraph data: unknown data set '%s' (known: ctr, imagenet)\n", argv[1]);
        return 2;
    }
    psg_imagenet_synth_t d = psg_imagenet_synth_defaults();
    psg_data_args_t a = {.seed = 1,
                         .classes = d.classes,
                         .train = d.train,
                         .validation = d.validation,
                         .image_size = d.image_size,
                         .shards = d.shards};
    int rc = psg_cli_parse(PSG_CLI_DATA, argc, argv, 2, &a, NULL);
    if (rc == 1) data_usage(stdout);
    if (rc < 0) fprintf(stderr, "psgraph data %s: %s\n", argv[1], psg_error_message());
    if (rc == -2) data_usage(stderr);
    if (rc) return rc == 1 ? 0 : 2;
    if (!a.out || (ctr && a.rows < 10)) {
        fprintf(stderr, "psgraph data %s: needs %s\n", argv[1],
                ctr ? "--rows N (N >= 10) and --out FILE" : "--out DIR");
        return 2;
    }
    if (ctr) {
        rc = psg_ctr_synthesize(a.out, a.rows, a.seed, stdout, NULL);
    } else {
        d = (psg_imagenet_synth_t){.classes = a.classes,
                                   .train = a.train,
                                   .validation = a.validation,
                                   .image_size = a.image_size,
                                   .shards = a.shards,
                                   .seed = a.seed};
        rc = psg_imagenet_synthesize(a.out, &d, stdout);
    }
    if (rc < 0) {
        fprintf(stderr, "psgraph data %s: %s\n", argv[1], psg_error_message());
        return 1;
    }
    return 0;
}
