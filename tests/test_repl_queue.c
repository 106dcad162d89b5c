/* The backup's queue of forwards (ps/repl_queue.c): applied in the order taken, a drain
 * returns once those before it are, a failed apply refuses the next forward once, a full
 * queue holds the one who takes the next, and a destroy applies what it took. Not what a
 * forward does (tests/test_repl_log.c, tests/test_replication.sh). */
#include "ps/repl_queue.h"
#include "psgraph/error.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool gate_open; /* apply waits while closed */
    int n;
    int order[256]; /* the step of each forward applied, in the order applied */
} applier_t;

static int apply(void *ctx, const psg_msg_t *m) {
    applier_t *a = ctx;
    pthread_mutex_lock(&a->lock);
    while (!a->gate_open) pthread_cond_wait(&a->cond, &a->lock);
    if (a->n < 256) a->order[a->n] = (int)m->step;
    a->n++;
    pthread_mutex_unlock(&a->lock);
    if (m->key && !strcmp(m->key, "bad"))
        return psg_error_set_code(PSG_ERR_DENIED, "forward %d refused", (int)m->step);
    return 0;
}

static void applier_init(applier_t *a, bool open) {
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    a->gate_open = open;
}

static void applier_open(applier_t *a) {
    pthread_mutex_lock(&a->lock);
    a->gate_open = true;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

static int applied(applier_t *a) {
    pthread_mutex_lock(&a->lock);
    int n = a->n;
    pthread_mutex_unlock(&a->lock);
    return n;
}

static void push(psg_repl_queue_t *q, int step, const char *key) {
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Replicate");
    CHECK(m != NULL);
    if (!m) return;
    m->step = step;
    if (key) CHECK(psg_msg_set_key(m, key) == 0);
    psg_repl_queue_push(q, &m);
    CHECK(m == NULL); /* taken */
}

static void test_order_and_drain(void) {
    applier_t a;
    applier_init(&a, true);
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a);
    CHECK(q != NULL);
    for (int i = 0; q && i < 100; i++) {
        CHECK(psg_repl_queue_ready(q, 1000) == 0);
        push(q, i, "update");
    }
    if (q) psg_repl_queue_drain(q);
    CHECK(applied(&a) == 100);
    bool in_order = true;
    for (int i = 0; i < 100; i++) in_order = in_order && a.order[i] == i;
    CHECK(in_order);
    psg_repl_queue_destroy(&q);
    CHECK(q == NULL);
    psg_repl_queue_destroy(&q); /* NULL-safe */
}

static void test_failure_said_once(void) {
    applier_t a;
    applier_init(&a, true);
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a);
    CHECK(q != NULL);
    if (!q) return;
    push(q, 1, "update");
    push(q, 2, "bad");
    push(q, 3, "update");
    psg_repl_queue_drain(q);
    CHECK(applied(&a) == 3); /* the ones after a failure are applied too */
    CHECK(psg_repl_queue_ready(q, 4) < 0);
    CHECK(psg_error_code() == PSG_ERR_DENIED);
    CHECK_ERROR_HAS("forward 2 refused");
    CHECK(psg_repl_queue_ready(q, 4) == 0); /* said once: the whole copy that follows goes */
    psg_repl_queue_destroy(&q);
}

typedef struct {
    psg_repl_queue_t *q;
    pthread_mutex_t lock;
    bool returned;
    int rc;
} taker_t;

static void *take_next(void *arg) {
    taker_t *t = arg;
    int rc = psg_repl_queue_ready(t->q, 2);
    pthread_mutex_lock(&t->lock);
    t->returned = true;
    t->rc = rc;
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

static void test_full_queue_waits(void) {
    applier_t a;
    applier_init(&a, false); /* nothing applies until the gate opens */
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a);
    CHECK(q != NULL);
    if (!q) return;
    push(q, 1, "update");
    push(q, 2, "update");
    taker_t t = {.q = q};
    pthread_mutex_init(&t.lock, NULL);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, take_next, &t) == 0);
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    pthread_mutex_lock(&t.lock);
    CHECK(!t.returned); /* 2 taken and none applied: it cannot return */
    pthread_mutex_unlock(&t.lock);
    applier_open(&a);
    pthread_join(th, NULL);
    CHECK(t.returned && t.rc == 0);
    psg_repl_queue_destroy(&q);
    CHECK(applied(&a) == 2);
}

static void test_destroy_applies_all(void) {
    applier_t a;
    applier_init(&a, false);
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a);
    CHECK(q != NULL);
    for (int i = 0; q && i < 10; i++) push(q, i, "update");
    applier_open(&a);
    psg_repl_queue_destroy(&q);
    CHECK(applied(&a) == 10);
}

int main(void) {
    RUN_TEST(test_order_and_drain);
    RUN_TEST(test_failure_said_once);
    RUN_TEST(test_full_queue_waits);
    RUN_TEST(test_destroy_applies_all);
    return psg_test_summary();
}
