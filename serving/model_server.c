/* The versions and the batcher of `psgraph serve`, behind serving/model_server.h: one
 * batcher thread joins concurrent requests for one version into a batch (TensorFlow
 * Serving's max_batch_size and batch_timeout_micros), one watcher thread loads a new
 * checkpoint of the directory beside the served one and swaps it in; a version is freed
 * when the last request holding it is answered. Not HTTP and not JSON. */
#include "serving/model_server.h"

#include "psgraph/checkpoint.h"
#include "psgraph/error.h"

#include <dirent.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct version {
    psg_servable_t *s;
    int refs;
    bool retired; /* a newer one is served: freed when refs reach 0 */
    struct version *next;
} version_t;

typedef struct req {
    psg_servable_t *s;
    psg_tensor_t *const *inputs;
    int64_t batch;
    psg_tensor_t *outputs[PSG_SERVABLE_MAX_IO];
    int64_t row0;
    int rc;
    sem_t answered; /* posted once the batch's results are in: the requester alone wakes,
                       without the server's lock (a broadcast woke every waiting requester
                       at once to queue on that lock) */
    char error[1024];
    struct req *next;
} req_t;

struct psg_model_server {
    psg_model_server_config_t c;
    char dir[4096];
    pthread_mutex_t lock;
    pthread_cond_t queued, stop;
    version_t *versions; /* newest first */
    req_t *head;
    int64_t queued_rows; /* rows in the queue */
    int64_t wake_rows;   /* queued rows that wake the batcher: it sleeps until then (or its
                            timeout) rather than waking at every request */
    bool stopping;
    int64_t failed_step; /* the newest checkpoint that did not load: not tried again */
    pthread_t batcher, watcher;
    bool threads;
    psg_model_server_stats_t stats;
};

static void logf_(psg_model_server_t *ms, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logf_(psg_model_server_t *ms, const char *fmt, ...) {
    if (!ms->c.log) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    ms->c.log(ms->c.log_ctx, line);
}

/* ---- versions ---- */

/* The step of dir's newest checkpoint index, -1 when none. */
static int64_t newest_step(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        int end = 0;
        if (sscanf(e->d_name, PSG_CKPT_PREFIX "-%lld.index.json%n", &step, &end) == 1 &&
            !e->d_name[end] && step > best)
            best = step;
    }
    closedir(d);
    return best;
}

/* Frees the retired versions nobody holds. Under the lock. */
static void sweep(psg_model_server_t *ms) {
    for (version_t **p = &ms->versions; *p;) {
        version_t *v = *p;
        if (v->retired && v->refs == 0) {
            *p = v->next;
            psg_servable_destroy(&v->s);
            free(v);
        } else {
            p = &v->next;
        }
    }
}

/* Serves s as the newest version, retiring the others. */
static int install(psg_model_server_t *ms, psg_servable_t *s) {
    version_t *v = calloc(1, sizeof *v);
    if (!v) return psg_error_set("out of memory");
    v->s = s;
    pthread_mutex_lock(&ms->lock);
    for (version_t *o = ms->versions; o; o = o->next) o->retired = true;
    v->next = ms->versions;
    ms->versions = v;
    sweep(ms);
    pthread_mutex_unlock(&ms->lock);
    return 0;
}

static void *watch(void *arg) {
    psg_model_server_t *ms = arg;
    pthread_mutex_lock(&ms->lock);
    while (!ms->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double secs = ms->c.poll_secs > 0 ? ms->c.poll_secs : 1.0;
        until.tv_sec += (time_t)secs;
        until.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&ms->stop, &ms->lock, &until);
        if (ms->stopping) break;
        int64_t served = psg_servable_step(ms->versions->s);
        pthread_mutex_unlock(&ms->lock);
        int64_t step = newest_step(ms->dir);
        if (step > served && step != ms->failed_step) {
            char path[4200];
            snprintf(path, sizeof path, "%s/" PSG_CKPT_PREFIX "-%lld.index.json", ms->dir,
                     (long long)step);
            psg_servable_t *s = psg_servable_load(path, &ms->c.load);
            if (!s || install(ms, s) < 0) {
                logf_(ms, "version %lld not loaded, version %lld goes on: %s", (long long)step,
                      (long long)served, psg_error_message());
                psg_servable_destroy(&s);
                ms->failed_step = step;
            } else {
                logf_(ms, "version %lld loaded from %s (was %lld)", (long long)step, path,
                      (long long)served);
            }
        }
        pthread_mutex_lock(&ms->lock);
    }
    pthread_mutex_unlock(&ms->lock);
    return NULL;
}

psg_servable_t *psg_model_server_acquire(psg_model_server_t *ms, int64_t version) {
    pthread_mutex_lock(&ms->lock);
    version_t *v = ms->versions;
    while (v && (v->retired || (version >= 0 && psg_servable_step(v->s) != version))) v = v->next;
    if (v) v->refs++;
    int64_t newest = ms->versions ? psg_servable_step(ms->versions->s) : -1;
    pthread_mutex_unlock(&ms->lock);
    if (!v)
        psg_error_set("no version %lld of the model: it serves version %lld", (long long)version,
                      (long long)newest);
    return v ? v->s : NULL;
}

void psg_model_server_release(psg_model_server_t *ms, psg_servable_t *s) {
    if (!s) return;
    pthread_mutex_lock(&ms->lock);
    for (version_t *v = ms->versions; v; v = v->next)
        if (v->s == s) v->refs--;
    sweep(ms);
    pthread_mutex_unlock(&ms->lock);
}

int psg_model_server_versions(psg_model_server_t *ms, int64_t *out, int max) {
    int n = 0;
    pthread_mutex_lock(&ms->lock);
    for (version_t *v = ms->versions; v && n < max; v = v->next)
        if (!v->retired) out[n++] = psg_servable_step(v->s);
    pthread_mutex_unlock(&ms->lock);
    return n;
}

/* ---- the batcher ---- */

/* inputs of the requests list (n of them) concatenated along dim 0. */
static int concat_inputs(req_t **list, int n, int n_in, psg_tensor_t **out) {
    psg_tensor_t **parts = malloc((size_t)n * sizeof *parts);
    int rc = parts ? 0 : psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; rc == 0 && i < n_in; i++) {
        for (int k = 0; k < n; k++) parts[k] = list[k]->inputs[i];
        if (!(out[i] = psg_tensor_concat_rows(parts, n))) rc = -1;
    }
    free(parts);
    return rc;
}

static void run_batch(psg_model_server_t *ms, req_t **list, int n, int64_t rows) {
    psg_servable_t *s = list[0]->s;
    int n_in = psg_servable_num_inputs(s), n_out = psg_servable_num_outputs(s);
    psg_tensor_t *joined[PSG_SERVABLE_MAX_IO] = {0}, *outs[PSG_SERVABLE_MAX_IO] = {0};
    int rc;
    if (n == 1)
        rc = psg_servable_run(s, list[0]->inputs, outs);
    else
        rc = concat_inputs(list, n, n_in, joined) < 0 ? -1 : psg_servable_run(s, joined, outs);
    pthread_mutex_lock(&ms->lock);
    ms->stats.batches++;
    ms->stats.requests += n;
    ms->stats.rows += rows;
    pthread_mutex_unlock(&ms->lock);
    int64_t row0 = 0;
    for (int k = 0; k < n; k++) { /* out of the queue: the requests are the batcher's */
        req_t *r = list[k];
        r->rc = rc;
        if (rc < 0) snprintf(r->error, sizeof r->error, "%s", psg_error_message());
        for (int j = 0; rc == 0 && j < n_out; j++) r->outputs[j] = psg_tensor_ref(outs[j]);
        r->row0 = row0;
        row0 += r->batch;
        sem_post(&r->answered); /* r (the requester's) is not touched after this */
    }
    for (int i = 0; i < PSG_SERVABLE_MAX_IO; i++) {
        psg_tensor_destroy(&joined[i]);
        psg_tensor_destroy(&outs[i]);
    }
}

/* Moves the queued requests for s that fit in max - *rows rows into list. Under the lock. */
static void take_matching(psg_model_server_t *ms, psg_servable_t *s, int64_t max, req_t **list,
                          int *n, int cap, int64_t *rows) {
    for (req_t **p = &ms->head; *p && *n < cap;) {
        req_t *r = *p;
        if (r->s == s && *rows + r->batch <= max) {
            *p = r->next;
            list[(*n)++] = r;
            *rows += r->batch;
            ms->queued_rows -= r->batch;
        } else {
            p = &r->next;
        }
    }
}

static void *batch_loop(void *arg) {
    psg_model_server_t *ms = arg;
    int64_t max = ms->c.max_batch > 0 ? ms->c.max_batch : 32;
    int64_t timeout_us = ms->c.batch_timeout_us >= 0 ? ms->c.batch_timeout_us : 1000;
    int cap = (int)max;
    req_t **list = malloc((size_t)cap * sizeof *list);
    PSG_ASSERT(list);
    pthread_mutex_lock(&ms->lock);
    for (;;) {
        ms->wake_rows = 1;
        while (!ms->stopping && !ms->head) pthread_cond_wait(&ms->queued, &ms->lock);
        if (!ms->head) break; /* stopping, nothing left */
        req_t *first = ms->head;
        ms->head = first->next;
        ms->queued_rows -= first->batch;
        int n = 1;
        int64_t rows = first->batch;
        list[0] = first;
        if (rows < max && timeout_us > 0) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += (long)(timeout_us % 1000000) * 1000;
            until.tv_sec += (time_t)(timeout_us / 1000000) + until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            for (;;) {
                take_matching(ms, first->s, max, list, &n, cap, &rows);
                if (rows >= max || n == cap || ms->stopping) break;
                ms->wake_rows = max - rows; /* a request that fills the batch wakes it */
                if (pthread_cond_timedwait(&ms->queued, &ms->lock, &until) != 0) {
                    take_matching(ms, first->s, max, list, &n, cap, &rows);
                    break;
                }
            }
        } else if (rows < max) {
            take_matching(ms, first->s, max, list, &n, cap, &rows);
        }
        ms->wake_rows = INT64_MAX; /* running: nobody to wake */
        pthread_mutex_unlock(&ms->lock);
        run_batch(ms, list, n, rows);
        pthread_mutex_lock(&ms->lock);
    }
    pthread_mutex_unlock(&ms->lock);
    free(list);
    return NULL;
}

int psg_model_server_predict(psg_model_server_t *ms, psg_servable_t *s, psg_tensor_t *const *inputs,
                             int64_t batch, psg_tensor_t **outputs, int64_t *row0) {
    req_t r = {.s = s, .inputs = inputs, .batch = batch};
    if (psg_servable_check_inputs(s, inputs) < 0)
        return -1; /* before a batch: never fails others */
    if (sem_init(&r.answered, 0, 0) != 0) return psg_error_set("cannot make a semaphore");
    pthread_mutex_lock(&ms->lock);
    if (ms->stopping) {
        pthread_mutex_unlock(&ms->lock);
        sem_destroy(&r.answered);
        return psg_error_set("the server is stopping");
    }
    req_t **tail = &ms->head;
    while (*tail) tail = &(*tail)->next;
    *tail = &r;
    ms->queued_rows += batch;
    if (ms->queued_rows >= ms->wake_rows) pthread_cond_signal(&ms->queued);
    pthread_mutex_unlock(&ms->lock);
    while (sem_wait(&r.answered) != 0) continue; /* EINTR: wait on */
    sem_destroy(&r.answered);
    if (r.rc < 0) return psg_error_set("%s", r.error);
    for (int j = 0; j < psg_servable_num_outputs(s); j++) outputs[j] = r.outputs[j];
    *row0 = r.row0;
    return 0;
}

void psg_model_server_stats(psg_model_server_t *ms, psg_model_server_stats_t *st) {
    pthread_mutex_lock(&ms->lock);
    *st = ms->stats;
    pthread_mutex_unlock(&ms->lock);
}

/* ---- life ---- */

psg_model_server_t *psg_model_server_new(const psg_model_server_config_t *c) {
    psg_model_server_t *ms = calloc(1, sizeof *ms);
    if (!ms) {
        psg_error_set("out of memory");
        return NULL;
    }
    ms->c = *c;
    snprintf(ms->dir, sizeof ms->dir, "%s", c->dir);
    ms->failed_step = -1;
    ms->wake_rows = 1;
    pthread_mutex_init(&ms->lock, NULL);
    pthread_cond_init(&ms->queued, NULL);
    pthread_cond_init(&ms->stop, NULL);
    psg_servable_t *s = psg_servable_load(ms->dir, &c->load);
    if (!s || install(ms, s) < 0) {
        psg_servable_destroy(&s);
        psg_model_server_destroy(&ms);
        return NULL;
    }
    if (pthread_create(&ms->batcher, NULL, batch_loop, ms) != 0) {
        psg_model_server_destroy(&ms);
        psg_error_set("cannot start the batcher thread");
        return NULL;
    }
    if (pthread_create(&ms->watcher, NULL, watch, ms) != 0) {
        ms->stopping = true;
        pthread_cond_broadcast(&ms->queued);
        pthread_join(ms->batcher, NULL);
        psg_model_server_destroy(&ms);
        psg_error_set("cannot start the watcher thread");
        return NULL;
    }
    ms->threads = true;
    return ms;
}

void psg_model_server_destroy(psg_model_server_t **msp) {
    if (!msp || !*msp) return;
    psg_model_server_t *ms = *msp;
    if (ms->threads) {
        pthread_mutex_lock(&ms->lock);
        ms->stopping = true;
        pthread_cond_broadcast(&ms->queued);
        pthread_cond_broadcast(&ms->stop);
        pthread_mutex_unlock(&ms->lock);
        pthread_join(ms->batcher, NULL);
        pthread_join(ms->watcher, NULL);
    }
    for (version_t *v = ms->versions, *next; v; v = next) {
        next = v->next;
        psg_servable_destroy(&v->s);
        free(v);
    }
    pthread_mutex_destroy(&ms->lock);
    pthread_cond_destroy(&ms->queued);
    pthread_cond_destroy(&ms->stop);
    free(ms);
    *msp = NULL;
}
