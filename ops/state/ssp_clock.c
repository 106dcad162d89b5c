/* The clocks of stale-synchronous SGD (sync/strategy_ssp.c): on the ps, per
 * worker the steps it has read and the steps it has applied, and waits that
 * are answered when the slowest worker's clock reaches a step, holding no
 * thread, each with a deadline on the task's timer (as a token dequeue).
 * Not the ops (ops/sync.c) and not the strategy. */
#include "ops/state/handle.h"
#include "ops/state/timer.h"
#include "psgraph/error.h"
#include "ops/state/sync_resources.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct clock_waiter {
    int worker, half;
    int64_t want, timeout_ms;
    uint64_t timer_id;
    psg_ssp_clock_fn done;
    void *arg;
    struct clock_waiter *next;
} clock_waiter_t;

#define SSP_CLOCK_MAGIC 0x6b6c6373u /* "sclk" */

struct psg_ssp_clock {
    uint32_t magic; /* first: tells a handle to a clock from others */
    pthread_mutex_t lock;
    char *name;
    psg_timer_t *timer;
    int workers;
    int64_t *clocks;         /* [2 * workers]: the steps read, then the steps applied */
    bool *gone;              /* [workers]: lost (the chief's membership): never the slowest */
    char *error;             /* closed: why; later waits fail with it */
    clock_waiter_t *waiters; /* in arrival order */
};

static void *create_clock(void *ctx) {
    const void *const *c = ctx;
    int workers = *(const int *)c[2];
    psg_ssp_clock_t *k = calloc(1, sizeof *k);
    if (k) k->clocks = calloc(2 * (size_t)workers, sizeof *k->clocks);
    if (k) k->gone = calloc((size_t)workers, sizeof *k->gone);
    if (!k || !k->clocks || !k->gone || !(k->name = strdup(c[0]))) {
        if (k) free(k->clocks), free(k->gone);
        free(k);
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&k->lock, NULL);
    k->magic = SSP_CLOCK_MAGIC;
    k->timer = (psg_timer_t *)c[1];
    k->workers = workers;
    return k;
}

/* Fails every waiter with error (and, keep, every later wait). */
static void fail_waiters(psg_ssp_clock_t *k, const char *error, bool keep) {
    pthread_mutex_lock(&k->lock);
    if (keep && !k->error) k->error = strdup(error);
    clock_waiter_t *w = k->waiters;
    k->waiters = NULL;
    pthread_mutex_unlock(&k->lock);
    while (w) {
        clock_waiter_t *next = w->next;
        psg_timer_cancel(k->timer, w->timer_id, true);
        w->done(w->arg, 0, error);
        free(w);
        w = next;
    }
}

static void destroy_clock(void *obj) {
    psg_ssp_clock_t *k = obj;
    char msg[512];
    snprintf(msg, sizeof msg, "ssp clock '%s' destroyed", k->name);
    fail_waiters(k, msg, false);
    pthread_mutex_destroy(&k->lock);
    k->magic = 0;
    free(k->error);
    free(k->clocks);
    free(k->gone);
    free(k->name);
    free(k);
}

psg_ssp_clock_t *psg_ssp_clock_get(psg_resource_mgr_t *rm, const char *name, int workers) {
    if (workers < 1) {
        psg_error_set("ssp clock '%s': %d workers (at least 1)", name, workers);
        return NULL;
    }
    psg_timer_t *timer = psg_timer_of(rm);
    if (!timer) return NULL;
    const void *c[3] = {name, timer, &workers};
    psg_ssp_clock_t *k = psg_resource_lookup_or_create(rm, name, "ssp clock", create_clock,
                                                       (void *)c, destroy_clock);
    if (k && k->workers != workers) {
        psg_error_set("ssp clock '%s' has %d workers, asked for %d", name, k->workers, workers);
        return NULL;
    }
    return k;
}

psg_tensor_t *psg_ssp_clock_handle(psg_ssp_clock_t *k) {
    return psg_ps_handle_new(k);
}

psg_ssp_clock_t *psg_ssp_clock_from_handle(const psg_tensor_t *h) {
    return psg_ps_handle_object(h, SSP_CLOCK_MAGIC, "an ssp clock");
}

/* The least clock `half` of the workers not gone (of all when every one is). */
static int64_t least_locked(const psg_ssp_clock_t *k, int half) {
    const int64_t *c = k->clocks + (size_t)half * (size_t)k->workers;
    int64_t m = INT64_MAX, all = c[0];
    for (int i = 0; i < k->workers; i++) {
        all = c[i] < all ? c[i] : all;
        if (!k->gone[i]) m = c[i] < m ? c[i] : m;
    }
    return m == INT64_MAX ? all : m;
}

int64_t psg_ssp_clock_least(psg_ssp_clock_t *k, int half) {
    pthread_mutex_lock(&k->lock);
    int64_t m = least_locked(k, half ? 1 : 0);
    pthread_mutex_unlock(&k->lock);
    return m;
}

/* Detaches the waiters the clocks answer now into a list, each with its least in want. */
static clock_waiter_t *ready_locked(psg_ssp_clock_t *k) {
    clock_waiter_t *ready = NULL, **tail = &ready;
    for (clock_waiter_t **p = &k->waiters; *p;) {
        clock_waiter_t *w = *p;
        int64_t least = least_locked(k, w->half);
        if (least < w->want) {
            p = &w->next;
            continue;
        }
        *p = w->next;
        w->want = least;
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    return ready;
}

static void answer(psg_ssp_clock_t *k, clock_waiter_t *w) {
    while (w) {
        clock_waiter_t *next = w->next;
        psg_timer_cancel(k->timer, w->timer_id, true);
        w->done(w->arg, w->want, NULL);
        free(w);
        w = next;
    }
}

int psg_ssp_clock_tick(psg_ssp_clock_t *k, int worker, int half, int64_t delta) {
    if (worker < 0 || worker >= k->workers || half < 0 || half > 1)
        return psg_error_set("ssp clock '%s': no clock %d of worker %d (%d workers)", k->name, half,
                             worker, k->workers);
    pthread_mutex_lock(&k->lock);
    k->clocks[(size_t)half * (size_t)k->workers + (size_t)worker] += delta;
    clock_waiter_t *ready = ready_locked(k);
    pthread_mutex_unlock(&k->lock);
    answer(k, ready);
    return 0;
}

int psg_ssp_clock_set_live(psg_ssp_clock_t *k, const int32_t *live, int n) {
    if (n != k->workers)
        return psg_error_set("ssp clock '%s': %d live flags for %d workers", k->name, n,
                             k->workers);
    pthread_mutex_lock(&k->lock);
    int64_t least[2] = {least_locked(k, 0), least_locked(k, 1)};
    for (int i = 0; i < n; i++) {
        bool back = k->gone[i] && live[i];
        k->gone[i] = !live[i];
        /* one that answers again or joins starts at the slowest of the others, not behind */
        for (int h = 0; back && h < 2; h++) {
            int64_t *c = &k->clocks[(size_t)h * (size_t)k->workers + (size_t)i];
            if (*c < least[h]) *c = least[h];
        }
    }
    clock_waiter_t *ready = ready_locked(k);
    pthread_mutex_unlock(&k->lock);
    answer(k, ready);
    return 0;
}

void psg_ssp_clock_reset(psg_ssp_clock_t *k) {
    pthread_mutex_lock(&k->lock);
    memset(k->clocks, 0, sizeof *k->clocks * 2 * (size_t)k->workers);
    pthread_mutex_unlock(&k->lock);
}

static void wait_timed_out(void *arg, uint64_t id) {
    psg_ssp_clock_t *k = arg;
    pthread_mutex_lock(&k->lock);
    clock_waiter_t *w = NULL;
    for (clock_waiter_t **p = &k->waiters; *p; p = &(*p)->next) {
        if ((*p)->timer_id != id) continue;
        w = *p;
        *p = w->next;
        break;
    }
    int64_t least = w ? least_locked(k, w->half) : 0;
    pthread_mutex_unlock(&k->lock);
    if (!w) return;
    char msg[512];
    snprintf(msg, sizeof msg,
             "ssp clock '%s': worker %d waited %lld ms for every worker to have %s step %lld (the "
             "slowest is at %lld: a worker is dead, or slower than the timeout)",
             k->name, w->worker, (long long)w->timeout_ms, w->half ? "applied" : "read",
             (long long)w->want - 1, (long long)least);
    w->done(w->arg, 0, msg);
    free(w);
}

void psg_ssp_clock_wait_async(psg_ssp_clock_t *k, int worker, int half, int64_t want,
                              int64_t timeout_ms, psg_ssp_clock_fn done, void *arg) {
    half = half ? 1 : 0;
    pthread_mutex_lock(&k->lock);
    if (k->error) {
        char msg[512];
        snprintf(msg, sizeof msg, "ssp clock '%s' is closed: %s", k->name, k->error);
        pthread_mutex_unlock(&k->lock);
        done(arg, 0, msg);
        return;
    }
    int64_t least = least_locked(k, half);
    if (least >= want) {
        pthread_mutex_unlock(&k->lock);
        done(arg, least, NULL);
        return;
    }
    clock_waiter_t *w = calloc(1, sizeof *w);
    timeout_ms = psg_timer_wait_ms(k->timer, timeout_ms); /* always a deadline */
    if (w) {
        *w = (clock_waiter_t){worker, half, want, timeout_ms, 0, done, arg, NULL};
        w->timer_id = psg_timer_add(k->timer, timeout_ms, wait_timed_out, k);
    }
    if (!w || w->timer_id == 0) {
        pthread_mutex_unlock(&k->lock);
        free(w);
        char msg[512];
        snprintf(msg, sizeof msg, "ssp clock '%s': out of memory", k->name);
        done(arg, 0, msg);
        return;
    }
    clock_waiter_t **p = &k->waiters;
    while (*p) p = &(*p)->next;
    *p = w;
    pthread_mutex_unlock(&k->lock);
}

void psg_ssp_clock_close(psg_ssp_clock_t *k, const char *error) {
    fail_waiters(k, error, true);
}
