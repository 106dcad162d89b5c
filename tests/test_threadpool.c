/* The thread pool: parallel_for covers every index once, nests inside pool
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

static void test_nested_no_deadlock(void) {
    psg_threadpool_t *p = psg_threadpool_new(3);
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
    RUN_TEST(test_inline_pool);
    RUN_TEST(test_clock);
    return psg_test_summary();
}
