/* `psgraph keygen DIR`: the cluster's CURVE key pair in a private folder (docs/security.md).
 * Not the key format nor the checks (net/curve_keys.c): options and messages only. */
#include "cli/commands.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"

#include <stdio.h>
#include <string.h>

static void keygen_usage(FILE *f) {
    fprintf(
        f,
        "usage: psgraph keygen DIR [--name NAME]\n"
        "  writes the cluster's CURVE key pair in czmq's certificate format: DIR/cluster.key\n"
        "  (public) and DIR/cluster.key_secret (mode 0600); DIR is made with mode 0700, and a\n"
        "  folder open to other users is refused. Give every task --keys DIR (or \"keys\": \"DIR\"\n"
        "  in the cluster file); `psgraph launch` makes its own unless given --keys DIR.\n"
        "  --name NAME   another pair, NAME.key/NAME.key_secret: a client of its own; every\n"
        "                NAME.key in DIR is in the allow-list of the tasks that load DIR\n");
}

int psg_cmd_keygen(int argc, char **argv) {
    const char *dir = NULL, *name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            keygen_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--name") && i + 1 < argc) {
            name = argv[++i];
        } else if (argv[i][0] != '-' && !dir) {
            dir = argv[i];
        } else {
            fprintf(stderr, "psgraph keygen: unexpected argument '%s'\n", argv[i]);
            keygen_usage(stderr);
            return 2;
        }
    }
    if (!dir) {
        keygen_usage(stderr);
        return 2;
    }
    if (psg_curve_keygen(dir, name) < 0) {
        fprintf(stderr, "psgraph keygen: %s\n", psg_error_message());
        return 1;
    }
    const char *n = name ? name : PSG_CURVE_CLUSTER;
    psg_curve_keys_t *k =
        psg_curve_keys_load(dir, name); /* NULL for a client's folder without cluster.key */
    printf("psgraph keygen: wrote %s/%s.key and %s/%s.key_secret (0600)", dir, n, dir, n);
    if (k)
        printf("; public key %s; %d key%s in the allow-list of %s", psg_curve_keys_public(k),
               psg_curve_keys_allowed(k), psg_curve_keys_allowed(k) == 1 ? "" : "s", dir);
    printf("\n");
    psg_curve_keys_destroy(&k);
    return 0;
}
