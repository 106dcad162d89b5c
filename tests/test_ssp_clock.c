/* SSP's clocks (ops/state/ssp_clock.c) and their ops: a worker more than s
 * steps ahead of the slowest blocks on the ps and is released by the tick that
 * lets the slowest catch up, without polling and holding no thread (the
 * releasing tick runs in the same one-thread session); a wait past its
 * deadline fails naming the clock, the worker and the step; a close fails the
 * waits; reset and bad ticks. */
#include "ops/state/sync_resources.h"
#include "psgraph/session.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

enum { READ, APPLIED };

static void pause_ms(int ms) {
    nanosleep(&(struct timespec){0, (long)ms * 1000000L}, NULL);
}

typedef struct {
    atomic_int calls;
    int64_t least;
    char error[512];
} answer_t;

static void on_answer(void *arg, int64_t least, const char *error) {
    answer_t *a = arg;
    a->least = least;
    if (error) snprintf(a->error, sizeof a->error, "%s", error);
    atomic_fetch_add(&a->calls, 1);
}

/* s = 1, two workers: worker 0 has applied 3 steps, worker 1 one. Worker 0's step 3
 * needs every worker to have applied step 3 - 1 - 1 = 1, i.e. 2 applied: it waits until
 * worker 1's second apply, which answers it with the least clock. */
static void test_ahead_worker_waits_for_the_slowest(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_ssp_clock_t *k = psg_ssp_clock_get(rm, "ssp/clock", 2);
    CHECK(k);
    for (int i = 0; i < 3; i++) CHECK(psg_ssp_clock_tick(k, 0, APPLIED, 1) == 0);
    CHECK(psg_ssp_clock_tick(k, 1, APPLIED, 1) == 0);
    const int64_t s = 1, step = 3;
    answer_t a = {0};
    psg_ssp_clock_wait_async(k, 0, APPLIED, step - s, 5000, on_answer, &a);
    pause_ms(30);
    CHECK(atomic_load(&a.calls) == 0); /* more than s ahead: blocked */
    CHECK(psg_ssp_clock_tick(k, 1, READ, 1) == 0);
    CHECK(atomic_load(&a.calls) == 0); /* a read is not an apply */
    CHECK(psg_ssp_clock_tick(k, 1, APPLIED, 1) == 0);
    CHECK(atomic_load(&a.calls) == 1 && a.least == 2 && !a.error[0]); /* released by the tick */
    /* within s: answered at once */
    answer_t b = {0};
    psg_ssp_clock_wait_async(k, 1, APPLIED, 2, 5000, on_answer, &b);
    CHECK(atomic_load(&b.calls) == 1 && b.least == 2);
    CHECK(psg_ssp_clock_least(k, APPLIED) == 2 && psg_ssp_clock_least(k, READ) == 0);
    psg_ssp_clock_reset(k);
    CHECK(psg_ssp_clock_least(k, APPLIED) == 0);
    /* the same name with another size, a worker out of range */
    CHECK(psg_ssp_clock_get(rm, "ssp/clock", 3) == NULL);
    CHECK_ERROR_HAS("ssp clock 'ssp/clock' has 2 workers, asked for 3");
    CHECK(psg_ssp_clock_tick(k, 2, APPLIED, 1) < 0);
    CHECK_ERROR_HAS("no clock 1 of worker 2 (2 workers)");
    psg_resource_mgr_destroy(&rm);
}

/* The chief's membership (psg_ssp_clock_set_live): a lost worker is never the slowest, so
 * the wait it held up is answered; when it is live again it starts at the slowest of the
 * others, not behind them; a mask of the wrong size is refused, naming the clock. */
static void test_lost_worker_holds_none_back(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_ssp_clock_t *k = psg_ssp_clock_get(rm, "ssp/clock", 3);
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 4; i++) CHECK(psg_ssp_clock_tick(k, w, APPLIED, 1) == 0);
    answer_t a = {0};
    psg_ssp_clock_wait_async(k, 0, APPLIED, 3, 5000, on_answer, &a);
    pause_ms(20);
    CHECK(atomic_load(&a.calls) == 0); /* worker 2 is at 0 */
    int32_t live[3] = {1, 1, 0};
    CHECK(psg_ssp_clock_set_live(k, live, 3) == 0);
    CHECK(atomic_load(&a.calls) == 1 && a.least == 4 && !a.error[0]);
    CHECK(psg_ssp_clock_least(k, APPLIED) == 4);
    live[2] = 1; /* back: at the slowest of the others */
    CHECK(psg_ssp_clock_set_live(k, live, 3) == 0);
    CHECK(psg_ssp_clock_least(k, APPLIED) == 4 && psg_ssp_clock_least(k, READ) == 0);
    CHECK(psg_ssp_clock_set_live(k, live, 2) < 0);
    CHECK_ERROR_HAS("ssp clock 'ssp/clock': 2 live flags for 3 workers");
    psg_resource_mgr_destroy(&rm);
}

static void test_deadline_and_close(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_ssp_clock_t *k = psg_ssp_clock_get(rm, "ssp/clock", 2);
    answer_t a = {0};
    psg_ssp_clock_wait_async(k, 1, APPLIED, 4, 30, on_answer, &a);
    for (int i = 0; i < 200 && atomic_load(&a.calls) == 0; i++) pause_ms(5);
    CHECK(atomic_load(&a.calls) == 1);
    CHECK(strstr(a.error, "ssp clock 'ssp/clock': worker 1 waited 30 ms for every worker to have "
                          "applied step 3 (the slowest is at 0") != NULL);
    answer_t b = {0}, c = {0};
    psg_ssp_clock_wait_async(k, 0, READ, 1, 5000, on_answer, &b);
    psg_ssp_clock_close(k, "the task server is stopping");
    CHECK(atomic_load(&b.calls) == 1 && strstr(b.error, "stopping"));
    psg_ssp_clock_wait_async(k, 0, READ, 1, 5000, on_answer, &c);
    CHECK(atomic_load(&c.calls) == 1 && strstr(c.error, "is closed: the task server is stopping"));
    psg_resource_mgr_destroy(&rm);
}

/* One worker (SSP of a single worker never waits for another), whose wait asks for no
 * timeout (it gets the task's longest), and no workers (refused). */
static void test_sizes(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    CHECK(psg_ssp_clock_get(rm, "none", 0) == NULL);
    CHECK_ERROR_HAS("ssp clock 'none': 0 workers (at least 1)");
    psg_ssp_clock_t *solo = psg_ssp_clock_get(rm, "solo", 1);
    CHECK(solo != NULL);
    answer_t a = {0};
    psg_ssp_clock_wait_async(solo, 0, READ, 1, 0, on_answer, &a); /* 0: the task's longest wait */
    pause_ms(50);
    CHECK(atomic_load(&a.calls) == 0);
    CHECK(psg_ssp_clock_tick(solo, 0, READ, 1) == 0);
    CHECK(atomic_load(&a.calls) == 1 && a.least == 1 && !a.error[0]);
    /* three waits, two of which one tick releases: both answered, the third still waits */
    answer_t w[3] = {0};
    psg_ssp_clock_wait_async(solo, 0, READ, 2, 5000, on_answer, &w[0]);
    psg_ssp_clock_wait_async(solo, 0, READ, 3, 5000, on_answer, &w[1]);
    psg_ssp_clock_wait_async(solo, 0, READ, 2, 5000, on_answer, &w[2]);
    CHECK(psg_ssp_clock_tick(solo, 0, READ, 1) == 0);
    CHECK(atomic_load(&w[0].calls) == 1 && atomic_load(&w[2].calls) == 1 &&
          atomic_load(&w[1].calls) == 0);
    CHECK(w[0].least == 2 && w[2].least == 2);
    CHECK(psg_ssp_clock_tick(solo, 0, READ, 1) == 0);
    CHECK(atomic_load(&w[1].calls) == 1 && w[1].least == 3);
    psg_resource_mgr_destroy(&rm);
}

typedef struct {
    psg_session_t *s;
    psg_endpoint_t want;
    psg_endpoint_t fetch[2];
    int64_t want_value;
    psg_tensor_t *got[2];
    int rc;
    atomic_int finished;
} waiter_t;

static void *wait_main(void *arg) {
    waiter_t *w = arg;
    psg_tensor_t *v = psg_tensor_scalar_i64(w->want_value);
    w->rc = psg_session_run(w->s, 1, &w->want, &v, 2, w->fetch, w->got, 0, NULL);
    psg_tensor_destroy(&v);
    atomic_store(&w->finished, 1);
    return NULL;
}

/* The ops in a session of one thread: a worker's wait blocks its run, and the slowest's
 * tick, run meanwhile in the same session, releases it: the wait held no thread. */
static void test_ops_wait_without_a_thread(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t sc = psg_shape_scalar();
    psg_endpoint_t h = psg_ssp_clock_op(g, "ssp/clock", 2);
    psg_endpoint_t want = psg_placeholder(g, "want", PSG_DT_I64, &sc);
    psg_endpoint_t least = psg_ssp_clock_wait_op(g, "wait", h, want, 0, APPLIED, 5000);
    int ahead = psg_ssp_clock_tick_op(g, "tick0", h, 0, APPLIED, 1, 0, NULL);
    int slow = psg_ssp_clock_tick_op(g, "tick1", h, 1, APPLIED, 1, 1, &ahead);
    int reset = psg_ssp_clock_reset_op(g, "reset", h);
    CHECK(psg_graph_error(g) == NULL && slow >= 0 && reset >= 0);
    psg_session_t *s = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
    CHECK(s);
    waiter_t w = {
        .s = s, .want = want, .fetch = {least, {least.node, 1}}, .want_value = 1, .rc = -2};
    pthread_t th;
    pthread_create(&th, NULL, wait_main, &w);
    pause_ms(30);
    CHECK(atomic_load(&w.finished) == 0);
    CHECK(psg_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &ahead) == 0); /* worker 0 only */
    pause_ms(10);
    CHECK(atomic_load(&w.finished) == 0);
    CHECK(psg_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &slow) ==
          0); /* worker 1 catches up */
    pthread_join(th, NULL);
    CHECK(w.rc == 0 && w.got[0] && psg_tensor_i64(w.got[0])[0] == 1);
    CHECK(w.got[1] && psg_tensor_f32(w.got[1])[0] > 0.02f); /* the seconds it waited */
    psg_tensor_destroy(&w.got[0]);
    psg_tensor_destroy(&w.got[1]);
    CHECK(psg_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &reset) == 0);
    psg_ssp_clock_t *k = psg_resource_find(psg_session_resources(s), "ssp/clock", "ssp clock");
    CHECK(k && psg_ssp_clock_least(k, APPLIED) == 0);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_ahead_worker_waits_for_the_slowest);
    RUN_TEST(test_lost_worker_holds_none_back);
    RUN_TEST(test_deadline_and_close);
    RUN_TEST(test_sizes);
    RUN_TEST(test_ops_wait_without_a_thread);
    return psg_test_summary();
}
