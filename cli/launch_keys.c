/* The keys of a cluster `psgraph launch` starts: the folder given with --keys (checked by
 * loading it), or a fresh pair in a private run folder (0700) removed when the launch ends,
 * and the files of it a task elsewhere needs (copied over ssh, put in a Kubernetes Secret).
 * Every task finds them through $PSGRAPH_KEYS. Not the key format (net/curve_keys.c). */
#include "cli/commands.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
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
            fprintf(stderr,
                    "psgraph launch: cannot make a private folder for the cluster's keys (%s)\n",
                    k->run);
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

/* A file a task elsewhere needs: NAME.key (the cluster's public key, the allow-list) and the
 * cluster's secret; no other identity's secret, nothing hidden ("..data" of a Secret). */
static int wanted(const struct dirent *e) {
    const char *n = e->d_name;
    size_t len = strlen(n);
    if (n[0] == '.' || len > 64) return 0;
    for (const char *p = n; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_-.", *p)) return 0;
    return (len > 4 && !strcmp(n + len - 4, ".key")) || !strcmp(n, PSG_CURVE_CLUSTER ".key_secret");
}

int psg_launch_keys_each(const char *dir, psg_launch_key_fn fn, void *ctx) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, wanted, alphasort), rc = 0;
    if (n < 0) {
        fprintf(stderr, "psgraph launch: key folder %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char *text = malloc(PSG_LAUNCH_KEY_FILE_MAX + 1);
    if (!text) {
        fprintf(stderr, "psgraph launch: out of memory\n");
        rc = -1;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        FILE *f = fopen(path, "rb");
        size_t len = f ? fread(text, 1, PSG_LAUNCH_KEY_FILE_MAX + 1, f) : 0;
        if (!f || ferror(f) || len > PSG_LAUNCH_KEY_FILE_MAX || memchr(text, 0, len)) {
            fprintf(stderr, "psgraph launch: %s: %s\n", path,
                    !f || ferror(f) ? strerror(errno) : "not a key file (over 64 KiB, or binary)");
            rc = -1;
        } else {
            text[len] = 0;
            rc = fn(ctx, names[i]->d_name, text, len);
        }
        if (f) fclose(f);
    }
    /* the secret does not linger in freed memory */
    if (text) memset(text, 0, PSG_LAUNCH_KEY_FILE_MAX + 1);
    free(text);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}
