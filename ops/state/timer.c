/* The deadline timer behind the timeouts of accumulators and token queues:
 * a list of entries sorted by deadline and one thread that sleeps until the
 * first. Not a general event loop: entries only fire or are cancelled. */
#include "ops/state/timer.h"
#include "psgraph/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

typedef struct entry {
    uint64_t id;
    struct timespec deadline;
    psg_timer_fn fn;
    void *arg;
    struct entry *next;
} entry_t;

struct psg_timer {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* an entry was added or the timer stops */
    pthread_cond_t fired;   /* the running callback returned */
    pthread_t thread;
    entry_t *head; /* sorted by deadline */
    uint64_t next_id;
    uint64_t running; /* id of the callback running now, 0 for none */
    bool stop;
    _Atomic int64_t max_wait_ms; /* the longest wait (psg_timer_wait_ms) */
};

static bool before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void *timer_main(void *arg) {
    psg_timer_t *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        if (!t->head) {
            pthread_cond_wait(&t->changed, &t->lock);
            continue;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (before(&now, &t->head->deadline)) {
            pthread_cond_timedwait(&t->changed, &t->lock, &t->head->deadline);
            continue;
        }
        entry_t *e = t->head;
        t->head = e->next;
        t->running = e->id;
        pthread_mutex_unlock(&t->lock);
        e->fn(e->arg, e->id);
        pthread_mutex_lock(&t->lock);
        t->running = 0;
        pthread_cond_broadcast(&t->fired);
        free(e);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

psg_timer_t *psg_timer_new(void) {
    psg_timer_t *t = calloc(1, sizeof *t);
    if (!t) {
        psg_error_set("timer: out of memory");
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->changed, &ca);
    pthread_cond_init(&t->fired, NULL);
    pthread_condattr_destroy(&ca);
    t->next_id = 1;
    if (pthread_create(&t->thread, NULL, timer_main, t) != 0) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->changed);
        pthread_cond_destroy(&t->fired);
        free(t);
        psg_error_set("timer: cannot start its thread");
        return NULL;
    }
    return t;
}

void psg_timer_destroy(psg_timer_t **tp) {
    if (!tp || !*tp) return;
    psg_timer_t *t = *tp;
    *tp = NULL;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    while (t->head) {
        entry_t *e = t->head;
        t->head = e->next;
        free(e);
    }
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->changed);
    pthread_cond_destroy(&t->fired);
    free(t);
}

static void *create_timer(void *ctx) {
    (void)ctx;
    return psg_timer_new();
}

static void destroy_timer(void *obj) {
    psg_timer_t *t = obj;
    psg_timer_destroy(&t);
}

psg_timer_t *psg_timer_of(psg_resource_mgr_t *rm) {
    return psg_resource_lookup_or_create(rm, "_psg_timer", "timer", create_timer, NULL,
                                         destroy_timer);
}

void psg_timer_set_max_wait(psg_timer_t *t, int64_t ms) {
    atomic_store(&t->max_wait_ms, ms > 0 ? ms : PSG_TIMER_MAX_WAIT_MS);
}

int64_t psg_timer_wait_ms(psg_timer_t *t, int64_t timeout_ms) {
    int64_t max = atomic_load(&t->max_wait_ms);
    if (max <= 0) max = PSG_TIMER_MAX_WAIT_MS;
    return timeout_ms <= 0 || timeout_ms > max ? max : timeout_ms;
}

uint64_t psg_timer_add(psg_timer_t *t, int64_t delay_ms, psg_timer_fn fn, void *arg) {
    entry_t *e = calloc(1, sizeof *e);
    if (!e) {
        psg_error_set("timer: out of memory");
        return 0;
    }
    if (delay_ms < 0) delay_ms = 0;
    clock_gettime(CLOCK_MONOTONIC, &e->deadline);
    e->deadline.tv_sec += delay_ms / 1000;
    e->deadline.tv_nsec += (delay_ms % 1000) * 1000000L;
    if (e->deadline.tv_nsec >= 1000000000L) {
        e->deadline.tv_sec++;
        e->deadline.tv_nsec -= 1000000000L;
    }
    e->fn = fn;
    e->arg = arg;
    pthread_mutex_lock(&t->lock);
    e->id = t->next_id++;
    entry_t **p = &t->head;
    while (*p && !before(&e->deadline, &(*p)->deadline)) p = &(*p)->next;
    e->next = *p;
    *p = e;
    uint64_t id = e->id;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->lock);
    return id;
}

bool psg_timer_cancel(psg_timer_t *t, uint64_t id, bool wait) {
    if (!t || id == 0) return false;
    pthread_mutex_lock(&t->lock);
    for (entry_t **p = &t->head; *p; p = &(*p)->next) {
        if ((*p)->id != id) continue;
        entry_t *e = *p;
        *p = e->next;
        pthread_mutex_unlock(&t->lock);
        free(e);
        return true;
    }
    /* a callback that cancels its own entry must not wait for itself */
    wait = wait && !pthread_equal(pthread_self(), t->thread);
    while (wait && t->running == id) pthread_cond_wait(&t->fired, &t->lock);
    pthread_mutex_unlock(&t->lock);
    return false;
}
