/* The checkpoint directory: a whole save of one process (shards in parallel,
 * then the index), keep-last-K pruning, finding the newest checkpoint that
 * verifies, and the saver interval of a training loop. Not the file formats
 * (ps/checkpoint.c). */
#include "ps/checkpoint_internal.h"

#include "psgraph/clock.h"
#include "psgraph/error.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    psg_resource_mgr_t *rm;
    const char *dir;
    int64_t step;
    int shard, num_shards;
    psg_checkpoint_shard_t out;
    int rc;
    char error[1024];
} shard_job_t;

int psg_logdir_make(const char *dir) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s", dir) >= sizeof path)
        return psg_error_set("%.64s...: too long", dir);
    /* each missing parent first, as TensorFlow's makedirs; one that cannot be made shows below */
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            (void)mkdir(path, 0755);
            *p = '/';
        }
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return psg_error_set("%s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return psg_error_set("%s: not a directory", dir);
    return 0;
}

static void *shard_main(void *arg) {
    shard_job_t *j = arg;
    j->rc = psg_checkpoint_write_shard(j->rm, j->dir, j->step, j->shard, j->num_shards, &j->out);
    if (j->rc < 0) snprintf(j->error, sizeof j->error, "%s", psg_error_message());
    return NULL;
}

int psg_checkpoint_save(const char *dir, int64_t step, int num_shards,
                        psg_resource_mgr_t *const *rms, int keep, double *seconds) {
    double t0 = psg_now_sec();
    if (num_shards < 1) return psg_error_set("%s: no shards to save", dir);
    /* the folder itself only: the trainer made --logdir with its parents (psg_logdir_make) */
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return psg_error_set("%s: %s", dir, strerror(errno));
    shard_job_t *jobs = calloc((size_t)num_shards, sizeof *jobs);
    pthread_t *th = calloc((size_t)num_shards, sizeof *th);
    bool *started = calloc((size_t)num_shards, sizeof *started);
    if (!jobs || !th || !started) {
        free(jobs);
        free(th);
        free(started);
        return psg_error_set("out of memory");
    }
    for (int s = 0; s < num_shards; s++) {
        jobs[s] = (shard_job_t){
            .rm = rms[s], .dir = dir, .step = step, .shard = s, .num_shards = num_shards};
        /* shard 0 runs on this thread; a shard whose thread cannot start too */
        if (s > 0) started[s] = pthread_create(&th[s], NULL, shard_main, &jobs[s]) == 0;
    }
    shard_main(&jobs[0]);
    for (int s = 1; s < num_shards; s++) {
        if (started[s])
            pthread_join(th[s], NULL);
        else
            shard_main(&jobs[s]);
    }
    psg_checkpoint_shard_t *outs = calloc((size_t)num_shards, sizeof *outs);
    int rc = outs ? 0 : psg_error_set("out of memory");
    for (int s = 0; rc == 0 && s < num_shards; s++)
        if (jobs[s].rc < 0) rc = psg_error_set("%s", jobs[s].error);
    for (int s = 0; rc == 0 && s < num_shards; s++) outs[s] = jobs[s].out;
    if (rc == 0) rc = psg_checkpoint_write_index(dir, step, num_shards, outs);
    if (rc == 0 && keep > 0) rc = psg_checkpoint_prune(dir, keep);
    for (int s = 0; s < num_shards; s++) psg_checkpoint_shard_clear(&jobs[s].out);
    free(outs);
    free(jobs);
    free(th);
    free(started);
    if (seconds) *seconds = psg_now_sec() - t0;
    return rc;
}

/* The step of a checkpoint file name: "model.ckpt-S..." or ".model.ckpt-S..."
 * (a temp file); *is_index tells an index. -1 for other names. */
static int64_t step_of(const char *name, bool *is_index) {
    *is_index = false;
    bool hidden = name[0] == '.';
    if (hidden) name++;
    size_t pl = strlen(PSG_CKPT_PREFIX);
    if (strncmp(name, PSG_CKPT_PREFIX "-", pl + 1)) return -1;
    const char *p = name + pl + 1;
    char *end;
    if (*p < '0' || *p > '9') return -1;
    long long v = strtoll(p, &end, 10);
    *is_index = !hidden && !strcmp(end, ".index.json");
    if (*end != '-' && *end != '.') return -1;
    return v;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x > y ? -1 : x < y;
}

/* The steps of dir's committed checkpoints, newest first (caller frees).
 * Returns the count, 0 when dir is missing, -1 on error. */
static int list_indexes(const char *dir, int64_t **steps) {
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : psg_error_set("%s: %s", dir, strerror(errno));
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        bool idx;
        int64_t s = step_of(e->d_name, &idx);
        if (s < 0 || !idx) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *p = realloc(*steps, (size_t)cap * sizeof *p);
            if (!p) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                return psg_error_set("out of memory");
            }
            *steps = p;
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n) qsort(*steps, (size_t)n, sizeof **steps, cmp_desc);
    return n;
}

int psg_checkpoint_prune(const char *dir, int keep) {
    if (keep <= 0) return 0;
    int64_t *steps;
    int n = list_indexes(dir, &steps);
    if (n < 0) return -1;
    if (n <= keep) {
        free(steps);
        return 0;
    }
    int64_t oldest_kept = steps[keep - 1];
    free(steps);
    /* indexes first, so that no committed checkpoint ever lacks a shard */
    for (int pass = 0; pass < 2; pass++) {
        DIR *d = opendir(dir);
        if (!d) return psg_error_set("%s: %s", dir, strerror(errno));
        struct dirent *e;
        while ((e = readdir(d))) {
            bool idx;
            int64_t s = step_of(e->d_name, &idx);
            if (s < 0 || s >= oldest_kept || idx != (pass == 0)) continue;
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) < 0 && errno != ENOENT) {
                closedir(d);
                return psg_error_set("%s: %s", path, strerror(errno));
            }
        }
        closedir(d);
    }
    return 0;
}

int psg_checkpoint_open_latest(const char *dir, int shard, psg_checkpoint_skip_fn skip, void *ctx,
                               psg_checkpoint_t **out) {
    *out = NULL;
    int64_t *steps;
    int n = list_indexes(dir, &steps);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        char name[PSG_CKPT_NAME_MAX], path[PATH_MAX];
        psg_ckpt_index_name(name, sizeof name, steps[i]);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        *out = psg_checkpoint_open(path, shard);
        if (*out) break;
        if (skip) skip(ctx, path, psg_error_message());
    }
    free(steps);
    return *out ? 1 : 0;
}

/* ---- the saver interval ---- */

int psg_checkpoint_policy_parse(const char *s, psg_checkpoint_policy_t *p) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0)
        return psg_error_set("'%s' is not a positive number of steps (20) or seconds (30s, 5m)", s);
    if (!*end) {
        if (v != (double)(int64_t)v) return psg_error_set("'%s': steps must be a whole number", s);
        p->every_steps = (int64_t)v;
        p->every_secs = 0;
    } else if (!strcmp(end, "s") || !strcmp(end, "m")) {
        p->every_secs = *end == 'm' ? v * 60 : v;
        p->every_steps = 0;
    } else {
        return psg_error_set("'%s' is not a positive number of steps (20) or seconds (30s, 5m)", s);
    }
    return 0;
}

bool psg_checkpoint_policy_due(const psg_checkpoint_policy_t *p, int64_t step, int64_t last_step,
                               double now, double last_time) {
    if (step <= last_step) return false;
    if (p->every_steps > 0 && step % p->every_steps == 0) return true;
    return p->every_secs > 0 && now - last_time >= p->every_secs;
}
