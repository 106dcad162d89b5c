/* The thread pool behind inter-op scheduling and psg_parallel_for.
 * A parallel_for caller works through its own chunks, so a kernel running on
 * a pool thread never deadlocks waiting for a busy pool. */
#include "psgraph/error.h"
#include "psgraph/fp_mode.h"
#include "psgraph/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

typedef struct task {
    void (*fn)(void *);
    void *arg;
    struct task *next;
} task_t;

struct psg_threadpool {
    int size;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    task_t *head, *tail, *free_tasks;
    bool stopping;
    atomic_int queued;  /* tasks in the queue: what a spinning thread watches, lock-free */
    atomic_int spin_us; /* how long an idle thread polls for work before it sleeps */
    int spinning;       /* threads polling now (under the lock) */
};

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Called with the lock held and the queue empty: polls `queued` for up to spin_us without
 * the lock (a task queued meanwhile is taken without a wake-up: no futex, no scheduler),
 * then takes the lock again. */
static void spin_for_work(psg_threadpool_t *p) {
    int us = atomic_load_explicit(&p->spin_us, memory_order_relaxed);
    if (us <= 0) return;
    p->spinning++;
    pthread_mutex_unlock(&p->lock);
    int64_t until = mono_ns() + (int64_t)us * 1000;
    for (unsigned i = 1; atomic_load_explicit(&p->queued, memory_order_acquire) == 0; i++) {
        CPU_RELAX();
        if (i % 64 == 0 &&
            (mono_ns() > until || !atomic_load_explicit(&p->spin_us, memory_order_relaxed)))
            break; /* no work came, or polling was turned off meanwhile */
    }
    pthread_mutex_lock(&p->lock);
    p->spinning--;
}

static void *worker_main(void *arg) {
    psg_threadpool_t *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (!p->head && !p->stopping) spin_for_work(p);
        while (!p->head && !p->stopping) pthread_cond_wait(&p->wake, &p->lock);
        if (!p->head) break;
        task_t *t = p->head;
        p->head = t->next;
        atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
        if (!p->head) p->tail = NULL;
        void (*fn)(void *) = t->fn;
        void *targ = t->arg;
        t->next = p->free_tasks;
        p->free_tasks = t;
        pthread_mutex_unlock(&p->lock);
        unsigned fp = psg_fp_enter(); /* a task is a kernel's share: its mode */
        fn(targ);
        psg_fp_leave(fp);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

psg_threadpool_t *psg_threadpool_new(int num_threads) {
    if (num_threads < 1) num_threads = 1;
    psg_threadpool_t *p = calloc(1, sizeof *p);
    if (!p) {
        psg_error_set("out of memory");
        return NULL;
    }
    p->size = num_threads;
    atomic_init(&p->queued, 0);
    atomic_init(&p->spin_us, 0);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = calloc((size_t)num_threads, sizeof(pthread_t));
    if (!p->threads) {
        psg_error_set("out of memory");
        psg_threadpool_destroy(&p);
        return NULL;
    }
    for (int i = 0; i < num_threads - 1; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            p->size = i + 1;
            psg_error_set("cannot start thread %d of the pool", i);
            psg_threadpool_destroy(&p);
            return NULL;
        }
    }
    return p;
}

void psg_threadpool_destroy(psg_threadpool_t **pp) {
    if (!pp || !*pp) return;
    psg_threadpool_t *p = *pp;
    *pp = NULL;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; p->threads && i < p->size - 1; i++) pthread_join(p->threads[i], NULL);
    for (task_t *t = p->free_tasks; t;) {
        task_t *next = t->next;
        free(t);
        t = next;
    }
    PSG_ASSERT(!p->head); /* tasks left behind: someone destroyed a busy pool */
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p);
}

int psg_threadpool_size(const psg_threadpool_t *p) {
    return p ? p->size : 1;
}

void psg_threadpool_set_spin(psg_threadpool_t *p, int us) {
    if (p) atomic_store(&p->spin_us, us > 0 ? us : 0);
}

void psg_threadpool_submit(psg_threadpool_t *p, void (*fn)(void *), void *arg) {
    if (!p || p->size == 1) {
        fn(arg);
        return;
    }
    pthread_mutex_lock(&p->lock);
    task_t *t = p->free_tasks;
    if (t)
        p->free_tasks = t->next;
    else
        t = malloc(sizeof *t);
    PSG_ASSERT(t);
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    if (p->tail)
        p->tail->next = t;
    else
        p->head = t;
    p->tail = t;
    /* a polling thread takes it without a wake-up; more tasks than pollers wake sleepers */
    if (atomic_fetch_add_explicit(&p->queued, 1, memory_order_release) + 1 > p->spinning)
        pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

/* One parallel_for: chunks are claimed by an atomic counter. The job is on the
 * heap and reference-counted: a helper queued behind busy threads may start
 * after the caller returned, find no chunk left, and must not touch freed
 * memory. The caller waits only for chunks already claimed, which are being
 * run by live threads, so it never waits on the queue. */
typedef struct {
    psg_range_fn fn;
    void *ctx;
    int64_t n, chunk, num_chunks;
    atomic_llong next;
    atomic_llong done;
    atomic_int refs;
} pfor_job_t;

static void pfor_work(pfor_job_t *j) {
    for (;;) {
        int64_t c = atomic_fetch_add(&j->next, 1);
        if (c >= j->num_chunks) break;
        int64_t begin = c * j->chunk;
        int64_t end = begin + j->chunk < j->n ? begin + j->chunk : j->n;
        j->fn(j->ctx, begin, end);
        atomic_fetch_add(&j->done, 1);
    }
}

static void pfor_release(pfor_job_t *j) {
    if (atomic_fetch_sub(&j->refs, 1) == 1) free(j);
}

static void pfor_helper(void *arg) {
    pfor_job_t *j = arg;
    pfor_work(j);
    pfor_release(j);
}

void psg_parallel_for(psg_threadpool_t *p, int64_t n, int64_t grain, psg_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int threads = psg_threadpool_size(p);
    int64_t max_chunks = n / grain;
    pfor_job_t *j = NULL;
    if (threads > 1 && max_chunks >= 2) j = malloc(sizeof *j);
    if (!j) {
        fn(ctx, 0, n);
        return;
    }
    int64_t num_chunks = max_chunks < threads ? max_chunks : threads;
    j->fn = fn;
    j->ctx = ctx;
    j->n = n;
    j->chunk = (n + num_chunks - 1) / num_chunks;
    j->num_chunks = (n + j->chunk - 1) / j->chunk;
    atomic_init(&j->next, 0);
    atomic_init(&j->done, 0);
    int helpers = (int)(j->num_chunks - 1);
    atomic_init(&j->refs, helpers + 1);
    for (int i = 0; i < helpers; i++) psg_threadpool_submit(p, pfor_helper, j);
    pfor_work(j);
    while (atomic_load(&j->done) < j->num_chunks) sched_yield();
    pfor_release(j);
}
