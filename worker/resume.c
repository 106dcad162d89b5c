/* The resume rule of worker/resume.h: the newest checkpoint that verifies, or a stop that
 * names every one that does not (a week-long run must not restart from step 0 silently).
 * Not the directory listing (ps/checkpoint_dir.c) nor the restore. */
#include "worker/resume.h"

#include "psgraph/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    FILE *out;
    char *why; /* "PATH: WHY" lines, each skipped checkpoint */
    size_t len;
    int skipped;
} skips_t;

static void on_skip(void *ctx, const char *path, const char *why) {
    skips_t *s = ctx;
    fprintf(s->out, "checkpoint %s is incomplete or corrupt, using an older one: %s\n", path, why);
    fflush(s->out);
    s->skipped++;
    size_t n = strlen(path) + strlen(why) + 8;
    char *p = realloc(s->why, s->len + n);
    if (!p) return;
    s->why = p;
    s->len += (size_t)snprintf(s->why + s->len, n, "\n  %s: %s", path, why);
}

int psg_resume_open_latest(const char *logdir, bool fresh_start, FILE *out, psg_checkpoint_t **ck) {
    skips_t s = {.out = out};
    int found = psg_checkpoint_open_latest(logdir, -1, on_skip, &s, ck);
    int rc = found;
    if (found == 0 && s.skipped) {
        if (fresh_start) {
            fprintf(out,
                    "--fresh-start: none of the %d checkpoints of %s verifies; starting from "
                    "step 0 with fresh weights\n",
                    s.skipped, logdir);
            fflush(out);
        } else {
            rc = psg_error_set(
                "%s holds %d checkpoint%s and none verifies; not starting from step 0 "
                "with fresh weights (--fresh-start to do so, or move them away):%s",
                logdir, s.skipped, s.skipped == 1 ? "" : "s", s.why ? s.why : "");
        }
    }
    free(s.why);
    return rc;
}
