/* The thread pool: parallel_for covers every index once (also with threads that poll
 * for work before they sleep), nests inside pool
 * tasks without deadlock, and a 1-thread pool runs everything inline. */
#include "tests/testutil.h"

#include <time.h>

#include <sched.h>
#include <stdatomic.h>

typedef struct {
    atomic_int *hits;
    psg_threadpool_t *pool;
    atomic_int inner_done;
} ctx_t;

static void mark(void *arg, int64_t begin, int64_t end) {
    ctx_t *c = arg;
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void test_covers_each_index_once(void) {
    for (int threads = 1; threads <= 4; threads++) {
        psg_threadpool_t *p = psg_threadpool_new(threads);
        CHECK(psg_threadpool_size(p) == threads);
        for (int64_t n = 0; n < 300; n += 37) {
            atomic_int hits[300];
            for (int i = 0; i < 300; i++) atomic_init(&hits[i], 0);
            ctx_t c = {.hits = hits};
            psg_parallel_for(p, n, 1, mark, &c);
            int wrong = 0;
            for (int64_t i = 0; i < 300; i++) wrong += atomic_load(&hits[i]) != (i < n ? 1 : 0);
            CHECK(wrong == 0);
        }
        psg_threadpool_destroy(&p);
        CHECK(p == NULL);
    }
}

/* A pool task that itself runs a parallel_for, many at once: every thread
 * can be busy in an outer task while inner chunks are queued behind them. */
static void inner_range(void *arg, int64_t begin, int64_t end) {
    ctx_t *c = arg;
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->hits[i % 64], 1);
}

static void outer_task(void *arg) {
    ctx_t *c = arg;
    psg_parallel_for(c->pool, 64, 1, inner_range, c);
    atomic_fetch_add(&c->inner_done, 1);
}

/* 20 outer tasks and the caller's own parallel_for on a pool of 3 whose idle threads poll
 * for spin_us before they sleep */
static void nested_no_deadlock(int spin_us) {
    psg_threadpool_t *p = psg_threadpool_new(3);
    psg_threadpool_set_spin(p, spin_us);
    atomic_int hits[64];
    for (int i = 0; i < 64; i++) atomic_init(&hits[i], 0);
    ctx_t c = {.hits = hits, .pool = p};
    atomic_init(&c.inner_done, 0);
    for (int i = 0; i < 20; i++) psg_threadpool_submit(p, outer_task, &c);
    /* the caller joins in too, as the executor's calling thread does */
    psg_parallel_for(p, 64, 1, inner_range, &c);
    while (atomic_load(&c.inner_done) < 20) sched_yield();
    int wrong = 0;
    for (int i = 0; i < 64; i++) wrong += atomic_load(&hits[i]) != 21;
    CHECK(wrong == 0);
    psg_threadpool_destroy(&p);
}

static void test_nested_no_deadlock(void) {
    nested_no_deadlock(0);
}

/* Threads that poll for work before they sleep: tasks queued while they poll (one, or more
 * than the pollers, which must wake the sleepers), queued after they slept, many
 * parallel_fors in a row, nested ones, and a pool destroyed while its threads poll. */
static void count_task(void *arg) {
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void test_spinning_pool(void) {
    for (int threads = 2; threads <= 4; threads++) {
        psg_threadpool_t *p = psg_threadpool_new(threads);
        psg_threadpool_set_spin(p, 2000);
        atomic_int ran;
        atomic_init(&ran, 0);
        int expect = 0;
        for (int round = 0; round < 50; round++) {
            int tasks = round % 7 + 1; /* 1 to 7: fewer and more than the pollers */
            for (int t = 0; t < tasks; t++) psg_threadpool_submit(p, count_task, &ran);
            expect += tasks;
            atomic_int hits[300];
            for (int i = 0; i < 300; i++) atomic_init(&hits[i], 0);
            ctx_t c = {.hits = hits};
            psg_parallel_for(p, 300, 1, mark, &c);
            int wrong = 0;
            for (int i = 0; i < 300; i++) wrong += atomic_load(&hits[i]) != 1;
            CHECK(wrong == 0);
            if (round == 25) {
                struct timespec ts = {0, 5 * 1000 * 1000}; /* past the poll: they sleep */
                nanosleep(&ts, NULL);
            }
        }
        /* every task ran (none left queued without a thread woken for it) */
        for (int ms = 0; ms < 10000 && atomic_load(&ran) < expect; ms++) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        CHECK(atomic_load(&ran) == expect);
        psg_threadpool_destroy(&p); /* its threads may be polling */
        CHECK(p == NULL);
    }
    nested_no_deadlock(2000);
}

static void test_inline_pool(void) {
    atomic_int hits[10];
    for (int i = 0; i < 10; i++) atomic_init(&hits[i], 0);
    ctx_t c = {.hits = hits};
    psg_parallel_for(NULL, 10, 1, mark, &c); /* NULL pool: inline */
    int wrong = 0;
    for (int i = 0; i < 10; i++) wrong += atomic_load(&hits[i]) != 1;
    CHECK(wrong == 0);
    CHECK(psg_threadpool_size(NULL) == 1);
}

/* The clock the loops time their steps with never goes back and does advance. */
static void test_clock(void) {
    double a = psg_now_sec();
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double b = psg_now_sec();
    CHECK(b > a && b - a >= 0.0019);
}

int main(void) {
    RUN_TEST(test_covers_each_index_once);
    RUN_TEST(test_nested_no_deadlock);
    RUN_TEST(test_spinning_pool);
    RUN_TEST(test_inline_pool);
    RUN_TEST(test_clock);
    return psg_test_summary();
}
