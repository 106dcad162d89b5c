/* The keys of a cluster `psgraph launch` starts: the folder given with --keys (checked by
 * loading it), or a fresh pair in a private run folder (0700) removed when the launch ends.
 * Every task finds them through $PSGRAPH_KEYS. Not the key format (net/curve_keys.c). */
#include "cli/commands.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int psg_launch_keys_prepare(psg_launch_keys_t *k, const char *given) {
    memset(k, 0, sizeof *k);
    if (given) {
        psg_curve_keys_t *loaded = psg_curve_keys_load(given, NULL);
        if (!loaded) {
            fprintf(stderr, "psgraph launch: --keys: %s\n", psg_error_message());
            return -1;
        }
        psg_curve_keys_destroy(&loaded);
        snprintf(k->dir, sizeof k->dir, "%s", given);
    } else {
        snprintf(k->run, sizeof k->run, "/tmp/psgraph-keys-XXXXXX");
        if (!mkdtemp(k->run)) {
            fprintf(stderr, "psgraph launch: cannot make a private folder for the cluster's keys (%s)\n", k->run);
            k->run[0] = 0;
            return -1;
        }
        snprintf(k->dir, sizeof k->dir, "%s/keys", k->run);
        if (psg_curve_keygen(k->dir, NULL) < 0) {
            fprintf(stderr, "psgraph launch: %s\n", psg_error_message());
            psg_launch_keys_remove(k);
            return -1;
        }
    }
    /* the tasks are this process's children: they inherit it */
    setenv(PSG_CURVE_KEYS_ENV, k->dir, 1);
    return 0;
}

void psg_launch_keys_remove(psg_launch_keys_t *k) {
    if (!k->run[0]) return;
    char path[sizeof k->dir + 32];
    snprintf(path, sizeof path, "%s/%s.key_secret", k->dir, PSG_CURVE_CLUSTER);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s.key", k->dir, PSG_CURVE_CLUSTER);
    unlink(path);
    rmdir(k->dir);
    rmdir(k->run);
    k->run[0] = 0;
}
