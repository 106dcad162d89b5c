/* Ring all-reduce's mailboxes (ops/state/mailbox.c) and their ops: a take waits for its
 * step's put and is answered by it, holding no thread; a put a step ahead is kept until
 * its take; a take past its deadline fails naming the mailbox, the sender and the step; a
 * close fails the take and later ones; puts of old steps are dropped, a second put for a
 * step is refused; the ops in a one-thread session. */
#include "ops/state/sync_resources.h"
#include "psgraph/session.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

static void pause_ms(int ms) {
    nanosleep(&(struct timespec){0, (long)ms * 1000000L}, NULL);
}

typedef struct {
    atomic_int calls;
    float first;
    char error[640];
} answer_t;

static void on_answer(void *arg, psg_tensor_t *value, const char *error) {
    answer_t *a = arg;
    if (value) a->first = psg_tensor_f32(value)[0];
    if (error) snprintf(a->error, sizeof a->error, "%s", error);
    atomic_fetch_add(&a->calls, 1);
}

static psg_tensor_t *chunk(float v) {
    psg_shape_t s = psg_shape_1d(3);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &s);
    for (int i = 0; i < 3; i++) psg_tensor_f32(t)[i] = v + (float)i;
    return t;
}

static void put(psg_mailbox_t *m, int64_t step, float v) {
    psg_tensor_t *t = chunk(v);
    CHECK(psg_mailbox_put(m, step, t) == 0);
    psg_tensor_destroy(&t);
}

static void test_take_waits_for_its_step(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_mailbox_t *m = psg_mailbox_get(rm, "allreduce/w1/phase0");
    CHECK(m && psg_mailbox_get(rm, "allreduce/w1/phase0") == m);
    answer_t a = {0};
    psg_mailbox_take_async(m, 0, "/job:worker/task:0", 5000, on_answer, &a);
    pause_ms(20);
    CHECK(atomic_load(&a.calls) == 0); /* nothing put: waits */
    put(m, 1, 10);                     /* the sender a step ahead: kept */
    CHECK(atomic_load(&a.calls) == 0 && psg_mailbox_size(m) == 1);
    put(m, 0, 5); /* answers the take */
    CHECK(atomic_load(&a.calls) == 1 && a.first == 5 && !a.error[0]);
    answer_t b = {0};
    psg_mailbox_take_async(m, 1, "/job:worker/task:0", 5000, on_answer, &b);
    CHECK(atomic_load(&b.calls) == 1 && b.first == 10 && psg_mailbox_size(m) == 0);
    /* an old step's put is dropped; a second put for a step is refused */
    put(m, 1, 99);
    CHECK(psg_mailbox_size(m) == 0);
    put(m, 3, 1);
    psg_tensor_t *t = chunk(2);
    CHECK(psg_mailbox_put(m, 3, t) < 0);
    CHECK_ERROR_HAS("mailbox 'allreduce/w1/phase0': a second put for step 3");
    psg_tensor_destroy(&t);
    /* a take skips to step 3: the letters of older steps could never be taken */
    put(m, 2, 7);
    answer_t c = {0};
    psg_mailbox_take_async(m, 3, "x", 5000, on_answer, &c);
    CHECK(atomic_load(&c.calls) == 1 && c.first == 1 && psg_mailbox_size(m) == 0);
    answer_t d = {0};
    psg_mailbox_take_async(m, 2, "x", 5000, on_answer, &d);
    CHECK(atomic_load(&d.calls) == 1 && strstr(d.error, "step 2 was taken already"));
    psg_resource_mgr_destroy(&rm);
}

static void test_deadline_and_close(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_mailbox_t *m = psg_mailbox_get(rm, "box");
    answer_t a = {0};
    psg_mailbox_take_async(m, 4, "/job:worker/task:2", 30, on_answer, &a);
    for (int i = 0; i < 200 && atomic_load(&a.calls) == 0; i++) pause_ms(5);
    CHECK(atomic_load(&a.calls) == 1);
    CHECK(strstr(a.error,
                 "mailbox 'box': /job:worker/task:2 sent nothing for step 4 within 30 ms") != NULL);
    answer_t b = {0}, c = {0}, d = {0};
    psg_mailbox_take_async(m, 5, "w", 5000, on_answer, &b);
    psg_mailbox_take_async(m, 6, "w", 5000, on_answer, &d); /* one take at a time */
    CHECK(atomic_load(&d.calls) == 1 && strstr(d.error, "a take is already waiting"));
    psg_mailbox_close(m, "the task server is stopping");
    CHECK(atomic_load(&b.calls) == 1 && strstr(b.error, "stopping"));
    put(m, 7, 1); /* dropped */
    CHECK(psg_mailbox_size(m) == 0);
    psg_mailbox_take_async(m, 7, "w", 5000, on_answer, &c);
    CHECK(atomic_load(&c.calls) == 1 &&
          strstr(c.error, "mailbox 'box' is closed: the task server is stopping"));
    psg_resource_mgr_destroy(&rm);
}

typedef struct {
    psg_session_t *s;
    psg_endpoint_t step, got;
    psg_tensor_t *value;
    int rc;
    atomic_int finished;
} waiter_t;

static void *take_main(void *arg) {
    waiter_t *w = arg;
    psg_tensor_t *v = psg_tensor_scalar_i64(0);
    w->rc = psg_session_run(w->s, 1, &w->step, &v, 1, &w->got, &w->value, 0, NULL);
    psg_tensor_destroy(&v);
    atomic_store(&w->finished, 1);
    return NULL;
}

/* In a session of one thread: the take blocks its run, and the put, run meanwhile in the
 * same session, answers it (the take held no thread); a take of another shape fails. */
static void test_ops_without_a_thread(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t sc = psg_shape_scalar(), s3 = psg_shape_1d(3), s2 = psg_shape_1d(2);
    psg_endpoint_t h = psg_mailbox_op(g, "box");
    psg_endpoint_t step = psg_placeholder(g, "step", PSG_DT_I64, &sc);
    psg_endpoint_t value = psg_placeholder(g, "value", PSG_DT_F32, &s3);
    psg_endpoint_t got = psg_mailbox_take_op(g, "take", h, step, &s3, "/job:worker/task:0", 5000);
    psg_endpoint_t bad = psg_mailbox_take_op(g, "take2", h, step, &s2, "w", 5000);
    int p = psg_mailbox_put_op(g, "put", h, step, value);
    CHECK(psg_graph_error(g) == NULL && p >= 0 && bad.node >= 0);
    psg_session_t *s = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
    CHECK(s);
    waiter_t w = {.s = s, .step = step, .got = got, .rc = -2};
    pthread_t th;
    pthread_create(&th, NULL, take_main, &w);
    pause_ms(30);
    CHECK(atomic_load(&w.finished) == 0);
    psg_tensor_t *feeds[2] = {psg_tensor_scalar_i64(0), chunk(4)};
    psg_endpoint_t fe[2] = {step, value};
    CHECK(psg_session_run(s, 2, fe, feeds, 0, NULL, NULL, 1, &p) == 0);
    pthread_join(th, NULL);
    CHECK(w.rc == 0 && w.value && psg_tensor_f32(w.value)[2] == 6);
    psg_tensor_destroy(&w.value);
    /* step 1 put, taken as f32[2]: refused naming the take */
    psg_tensor_destroy(&feeds[0]);
    feeds[0] = psg_tensor_scalar_i64(1);
    CHECK(psg_session_run(s, 2, fe, feeds, 0, NULL, NULL, 1, &p) == 0);
    psg_tensor_t *out = NULL;
    CHECK(psg_session_run(s, 1, &step, &feeds[0], 1, &bad, &out, 0, NULL) < 0);
    CHECK_ERROR_HAS("take2: got f32[3], takes f32[2]");
    for (int i = 0; i < 2; i++) psg_tensor_destroy(&feeds[i]);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_take_waits_for_its_step);
    RUN_TEST(test_deadline_and_close);
    RUN_TEST(test_ops_without_a_thread);
    return psg_test_summary();
}
