/* The token queue of sync replicas: the chief puts N + b tokens carrying
 * the new global step; a worker takes the first token newer than its local
 * step before its next step, waiting without a thread, with a timeout.
 * Not the accumulators (ops/state/accumulator.c) and not the ops (ops/sync.c). */
#include "ops/state/blocking.h"
#include "ops/state/handle.h"
#include "ops/state/timer.h"
#include "psgraph/error.h"
#include "ops/state/sync_resources.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct waiter {
    int worker;
    int64_t after_step;
    int64_t timeout_ms;
    uint64_t timer_id;
    psg_token_fn done;
    void *arg;
    struct waiter *next;
} waiter_t;

#define TOKEN_QUEUE_MAGIC 0x716b6f74u /* "tokq" */

struct psg_token_queue {
    uint32_t magic; /* first: tells a handle to a token queue from others */
    pthread_mutex_t lock;
    char *name;
    psg_timer_t *timer;
    int64_t *tokens; /* FIFO: tokens[0..n) */
    int *owner;      /* owner[i]: the only worker that may take tokens[i]; -1: any */
    int n, cap;
    bool *live;            /* NULL: tokens for any worker; else by rank, set by the chief */
    int64_t *served;       /* by rank: the newest token each worker took, -1 none */
    int ranks;             /* the length of live and served */
    int64_t last_released; /* the newest token enqueued, -1 before the first */
    int live_repeat;       /* set by the chief as workers come and go; 0: the enqueue's own */
    int last_repeat;       /* the copies of last_released enqueued */
    bool closed;
    char *error;       /* the close's error; NULL: closed cleanly */
    waiter_t *waiters; /* in arrival order */
};

static void *create_queue(void *ctx) {
    const void *const *c = ctx;
    psg_token_queue_t *q = calloc(1, sizeof *q);
    if (!q || !(q->name = strdup(c[0]))) {
        free(q);
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&q->lock, NULL);
    q->magic = TOKEN_QUEUE_MAGIC;
    q->timer = (psg_timer_t *)c[1];
    q->last_released = -1;
    return q;
}

static void destroy_queue(void *obj) {
    psg_token_queue_t *q = obj;
    psg_token_queue_close(q, "token queue destroyed");
    pthread_mutex_destroy(&q->lock);
    q->magic = 0;
    free(q->tokens);
    free(q->owner);
    free(q->live);
    free(q->served);
    free(q->error);
    free(q->name);
    free(q);
}

psg_token_queue_t *psg_token_queue_get(psg_resource_mgr_t *rm, const char *name) {
    psg_timer_t *timer = psg_timer_of(rm);
    if (!timer) return NULL;
    const void *c[2] = {name, timer};
    return psg_resource_lookup_or_create(rm, name, "token queue", create_queue, (void *)c,
                                         destroy_queue);
}

PSG_PS_HANDLE_ACCESSORS(psg_token_queue_t, psg_token_queue, TOKEN_QUEUE_MAGIC, "a token queue")

/* A waiter served or failed, finished after the lock is released. */
typedef struct {
    waiter_t *w;
    int64_t token;
} served_t;

/* The index of the first token > after that worker may take, or -1. */
static int find_token_locked(psg_token_queue_t *q, int64_t after, int worker) {
    for (int i = 0; i < q->n; i++)
        if (q->tokens[i] > after && (q->owner[i] < 0 || q->owner[i] == worker)) return i;
    return -1;
}

/* Room for `need` tokens; -1 out of memory. */
static int reserve_locked(psg_token_queue_t *q, int need) {
    if (need <= q->cap) return 0;
    int cap = need > 2 * q->cap ? need : 2 * q->cap;
    int64_t *t = realloc(q->tokens, sizeof(int64_t) * (size_t)cap);
    if (t) q->tokens = t;
    int *o = t ? realloc(q->owner, sizeof(int) * (size_t)cap) : NULL;
    if (o) q->owner = o;
    if (!t || !o) return -1;
    q->cap = cap;
    return 0;
}

static void push_locked(psg_token_queue_t *q, int64_t token, int owner) {
    q->tokens[q->n] = token;
    q->owner[q->n++] = owner;
}

/* Takes token i for worker, remembering the newest each live-tracked worker took. */
static int64_t take_token_locked(psg_token_queue_t *q, int i, int worker) {
    int64_t token = q->tokens[i];
    memmove(&q->tokens[i], &q->tokens[i + 1], sizeof(int64_t) * (size_t)(q->n - i - 1));
    memmove(&q->owner[i], &q->owner[i + 1], sizeof(int) * (size_t)(q->n - i - 1));
    q->n--;
    if (worker >= 0 && worker < q->ranks && token > q->served[worker]) q->served[worker] = token;
    return token;
}

/* Detaches every waiter the queue can answer now into out (room for all). */
static int serve_locked(psg_token_queue_t *q, served_t *out) {
    int k = 0;
    for (waiter_t **p = &q->waiters; *p;) {
        waiter_t *w = *p;
        int i = q->closed ? -1 : find_token_locked(q, w->after_step, w->worker);
        if (!q->closed && i < 0) {
            p = &w->next;
            continue;
        }
        *p = w->next;
        out[k].w = w;
        out[k].token = i >= 0 ? take_token_locked(q, i, w->worker) : -1;
        k++;
    }
    return k;
}

static int count_waiters_locked(psg_token_queue_t *q) {
    int n = 0;
    for (waiter_t *w = q->waiters; w; w = w->next) n++;
    return n;
}

/* Runs the detached waiters' callbacks; error: the queue's close error. */
static void finish_served(psg_token_queue_t *q, served_t *s, int k, const char *error) {
    for (int i = 0; i < k; i++) {
        psg_timer_cancel(q->timer, s[i].w->timer_id, true);
        s[i].w->done(s[i].w->arg, error ? 0 : s[i].token, error);
        free(s[i].w);
    }
}

/* Hands the queued tokens to the waiters they fit, then drops the lock (taken by the caller). */
static void serve_waiters_unlock(psg_token_queue_t *q) {
    int nw = count_waiters_locked(q);
    served_t *s = nw ? malloc(sizeof *s * (size_t)nw) : NULL;
    int k = s ? serve_locked(q, s) : 0;
    pthread_mutex_unlock(&q->lock);
    finish_served(q, s, k, NULL);
    free(s);
}

int psg_token_queue_enqueue_many(psg_token_queue_t *q, const int64_t *tokens, int n, int repeat,
                                 int64_t end_step) {
    if (n < 0 || repeat < 1)
        return psg_error_set("token queue '%s': bad count %d x %d", q->name, n, repeat);
    pthread_mutex_lock(&q->lock);
    if (q->live_repeat > 0) repeat = q->live_repeat;
    if (q->closed) {
        int rc = q->error ? psg_error_set("token queue '%s' is closed: %s", q->name, q->error) : 0;
        pthread_mutex_unlock(&q->lock);
        return rc;
    }
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int i = 0; i < n; i++) {
        lo = tokens[i] < lo ? tokens[i] : lo;
        hi = tokens[i] > hi ? tokens[i] : hi;
    }
    if (n > 0 && end_step > 0 && hi >= end_step) {
        q->closed = true; /* the last step is done: training is over */
        q->n = 0;
    } else if (n > 0) {
        int keep = 0;
        for (int i = 0; i < q->n; i++)
            if (q->tokens[i] >= lo) {
                q->owner[keep] = q->owner[i];
                q->tokens[keep++] = q->tokens[i];
            }
        q->n = keep;
        int per = q->live ? 0 : repeat; /* the live workers' tokens: one for each */
        for (int r = 0; q->live && r < q->ranks; r++) per += q->live[r];
        if (reserve_locked(q, q->n + n * per) < 0) {
            pthread_mutex_unlock(&q->lock);
            return psg_error_set("token queue '%s': out of memory", q->name);
        }
        for (int i = 0; i < n; i++)
            if (q->live) {
                for (int r = 0; r < q->ranks; r++)
                    if (q->live[r]) push_locked(q, tokens[i], r);
            } else {
                for (int r = 0; r < repeat; r++) push_locked(q, tokens[i], -1);
            }
        if (hi > q->last_released) q->last_released = hi;
        q->last_repeat = per;
    }
    serve_waiters_unlock(q);
    return 0;
}

int psg_token_queue_set_repeat(psg_token_queue_t *q, int repeat) {
    if (repeat < 1)
        return psg_error_set("token queue '%s': repeat must be >= 1, got %d", q->name, repeat);
    pthread_mutex_lock(&q->lock);
    q->live_repeat = repeat;
    /* more workers than the last release counted (one joined): as many more tokens of that
     * step, so that the step, which waits for its gradient now, gets it */
    int more = q->closed || q->last_released < 0 || q->live ? 0 : repeat - q->last_repeat;
    if (more > 0 && reserve_locked(q, q->n + more) < 0) {
        pthread_mutex_unlock(&q->lock);
        return psg_error_set("token queue '%s': out of memory", q->name);
    }
    for (int i = 0; i < more; i++) push_locked(q, q->last_released, -1);
    if (more > 0) {
        q->last_repeat = repeat;
        serve_waiters_unlock(q);
    } else {
        pthread_mutex_unlock(&q->lock);
    }
    return 0;
}

/* Grows live and served to n ranks (new ones not live, served none); -1 out of memory. */
static int grow_ranks_locked(psg_token_queue_t *q, int n) {
    if (n <= q->ranks && q->live) return 0;
    int ranks = n > q->ranks ? n : q->ranks;
    bool *l = realloc(q->live, sizeof(bool) * (size_t)(ranks ? ranks : 1));
    if (l) q->live = l;
    int64_t *sv = l ? realloc(q->served, sizeof(int64_t) * (size_t)(ranks ? ranks : 1)) : NULL;
    if (sv) q->served = sv;
    if (!l || !sv) return -1;
    for (int r = q->ranks; r < ranks; r++) {
        q->live[r] = false;
        q->served[r] = -1;
    }
    q->ranks = ranks;
    return 0;
}

int psg_token_queue_set_live(psg_token_queue_t *q, const int32_t *live, int n) {
    if (n < 1) return psg_error_set("token queue '%s': no live flags", q->name);
    pthread_mutex_lock(&q->lock);
    if (grow_ranks_locked(q, n) < 0 || reserve_locked(q, q->n + q->ranks) < 0) {
        pthread_mutex_unlock(&q->lock);
        return psg_error_set("token queue '%s': out of memory", q->name);
    }
    for (int r = 0; r < q->ranks; r++) q->live[r] = r < n && live[r];
    /* a token only a live worker can take: a worker found lost (perhaps still running) takes
     * none of the tokens the live ones need */
    int keep = 0;
    for (int i = 0; i < q->n; i++)
        if (q->owner[i] >= 0 && q->live[q->owner[i]]) {
            q->owner[keep] = q->owner[i];
            q->tokens[keep++] = q->tokens[i];
        }
    q->n = keep;
    /* each live worker that has not taken the last release's token (it joined, came back,
     * or its anyone's token is gone) gets one: the step waits for its gradient now */
    for (int r = 0; r < q->ranks && !q->closed && q->last_released >= 0; r++) {
        bool has = q->served[r] >= q->last_released;
        for (int i = 0; i < q->n && !has; i++) has = q->owner[i] == r;
        if (q->live[r] && !has) push_locked(q, q->last_released, r);
    }
    serve_waiters_unlock(q);
    return 0;
}

static void dequeue_timed_out(void *arg, uint64_t id) {
    psg_token_queue_t *q = arg;
    pthread_mutex_lock(&q->lock);
    waiter_t *w = NULL;
    for (waiter_t **p = &q->waiters; *p; p = &(*p)->next) {
        if ((*p)->timer_id != id) continue;
        w = *p;
        *p = w->next;
        break;
    }
    int64_t last = q->last_released;
    bool out = w && q->live && (w->worker < 0 || w->worker >= q->ranks || !q->live[w->worker]);
    pthread_mutex_unlock(&q->lock);
    if (!w) return;
    char msg[512];
    if (out) {
        snprintf(msg, sizeof msg,
                 "token queue '%s': worker %d got no token for a step after %lld within %lld ms: "
                 "it is not among the live workers (the chief found it lost and has not heard it "
                 "since)",
                 q->name, w->worker, (long long)w->after_step, (long long)w->timeout_ms);
        w->done(w->arg, 0, msg);
        free(w);
        return;
    }
    if (last < 0)
        snprintf(msg, sizeof msg,
                 "token queue '%s': worker %d got no token for a step after %lld within %lld ms "
                 "(no step has completed yet: a worker or the chief is dead, or slower than the "
                 "timeout)",
                 q->name, w->worker, (long long)w->after_step, (long long)w->timeout_ms);
    else
        snprintf(msg, sizeof msg,
                 "token queue '%s': worker %d got no token for a step after %lld within %lld ms "
                 "(the last tokens released were for step %lld: a worker or the chief is dead, or "
                 "slower than the timeout)",
                 q->name, w->worker, (long long)w->after_step, (long long)w->timeout_ms,
                 (long long)last);
    w->done(w->arg, 0, msg);
    free(w);
}

void psg_token_queue_dequeue_async(psg_token_queue_t *q, int worker, int64_t after_step,
                                   int64_t timeout_ms, psg_token_fn done, void *arg) {
    char msg[512] = "";
    int64_t token = -1;
    pthread_mutex_lock(&q->lock);
    int i = q->closed ? -1 : find_token_locked(q, after_step, worker);
    if (i >= 0) {
        token = take_token_locked(q, i, worker);
    } else if (q->closed && q->error) {
        snprintf(msg, sizeof msg, "token queue '%s' is closed: %s", q->name, q->error);
    } else if (!q->closed) {
        waiter_t *w = calloc(1, sizeof *w);
        timeout_ms = psg_timer_wait_ms(q->timer, timeout_ms); /* always a deadline */
        if (w) {
            *w = (waiter_t){worker, after_step, timeout_ms, 0, done, arg, NULL};
            w->timer_id = psg_timer_add(q->timer, timeout_ms, dequeue_timed_out, q);
        }
        if (!w || w->timer_id == 0) {
            free(w);
            snprintf(msg, sizeof msg, "token queue '%s': out of memory", q->name);
        } else {
            waiter_t **p = &q->waiters;
            while (*p) p = &(*p)->next;
            *p = w;
            pthread_mutex_unlock(&q->lock);
            return;
        }
    }
    pthread_mutex_unlock(&q->lock);
    done(arg, msg[0] ? 0 : token, msg[0] ? msg : NULL);
}

typedef struct {
    psg_blocking_t b;
    int64_t token;
} dequeue_wait_t;

static void dequeue_wait_done(void *arg, int64_t token, const char *error) {
    dequeue_wait_t *w = arg;
    w->token = token;
    psg_blocking_finish(&w->b, error);
}

int psg_token_queue_dequeue(psg_token_queue_t *q, int worker, int64_t after_step,
                            int64_t timeout_ms, int64_t *token) {
    dequeue_wait_t w = {.token = 0};
    psg_blocking_init(&w.b);
    psg_token_queue_dequeue_async(q, worker, after_step, timeout_ms, dequeue_wait_done, &w);
    psg_blocking_wait(&w.b);
    *token = w.token;
    return w.b.error[0] ? psg_error_set("%s", w.b.error) : 0;
}

void psg_token_queue_close(psg_token_queue_t *q, const char *error) {
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        pthread_mutex_unlock(&q->lock);
        return;
    }
    q->closed = true;
    q->n = 0;
    if (error) q->error = strdup(error);
    int nw = count_waiters_locked(q);
    served_t *s = nw ? malloc(sizeof *s * (size_t)nw) : NULL;
    int k = s ? serve_locked(q, s) : 0;
    char *err = q->error ? strdup(q->error) : NULL;
    pthread_mutex_unlock(&q->lock);
    finish_served(q, s, k, error ? (err ? err : error) : NULL);
    free(err);
    free(s);
}

void psg_token_queue_restart(psg_token_queue_t *q, int64_t step) {
    pthread_mutex_lock(&q->lock);
    q->n = 0;
    int nw = count_waiters_locked(q);
    served_t *s = nw ? malloc(sizeof *s * (size_t)nw) : NULL;
    int k = 0;
    for (waiter_t **p = &q->waiters; s && *p;) {
        waiter_t *w = *p;
        if (w->after_step < step) { /* the step's new tokens serve it */
            p = &w->next;
            continue;
        }
        *p = w->next;
        s[k++] = (served_t){w, -1};
    }
    pthread_mutex_unlock(&q->lock);
    char msg[512];
    snprintf(msg, sizeof msg,
             "token queue '%s': global step %lld starts again after a failover (its tokens are "
             "released again)",
             q->name, (long long)step);
    finish_served(q, s, k, msg);
    free(s);
}

int psg_token_queue_size(psg_token_queue_t *q) {
    pthread_mutex_lock(&q->lock);
    int n = q->n;
    pthread_mutex_unlock(&q->lock);
    return n;
}
