/* The backup's log of forwards (ps/repl_queue.c): held unapplied until a drain, which
 * applies them in the order taken; a snapshot drops the ones held before it; beyond its bounds
 * the oldest are applied; a failed apply refuses the next forward once; a destroy drops what
 * is held. Not what a forward does (tests/test_repl_log.c, tests/test_replication.sh). */
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
    psg_repl_queue_push(q, &m, key && !strcmp(key, "full"), 1);
    CHECK(m == NULL); /* taken */
}

static bool applied_in_order(applier_t *a, int from, int n) {
    bool ok = applied(a) == n;
    for (int i = 0; ok && i < n; i++) ok = a->order[i] == from + i;
    return ok;
}

static void test_held_until_drain(void) {
    applier_t a;
    applier_init(&a, true);
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a, 1000, (size_t)1 << 30);
    CHECK(q != NULL);
    if (!q) return;
    for (int i = 0; i < 100; i++) {
        CHECK(psg_repl_queue_ready(q) == 0);
        push(q, i, "update");
    }
    uint64_t held = 0, dropped = 0;
    psg_repl_queue_stats(q, &held, &dropped);
    CHECK(held == 100 && dropped == 0);
    CHECK(applied(&a) == 0); /* nothing reads the copies: nothing applied */
    CHECK(psg_repl_queue_drain(q) == 100);
    CHECK(applied_in_order(&a, 0, 100));
    CHECK(psg_repl_queue_drain(q) == 0); /* current */
    psg_repl_queue_destroy(&q);
    CHECK(q == NULL);
    psg_repl_queue_destroy(&q); /* NULL-safe */
}

static void test_snapshot_drops_before(void) {
    applier_t a;
    applier_init(&a, true);
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a, 1000, (size_t)1 << 30);
    CHECK(q != NULL);
    if (!q) return;
    for (int i = 1; i <= 5; i++) push(q, i, "update");
    push(q, 6, "full");
    push(q, 7, "update");
    push(q, 8, "update");
    uint64_t held = 0, dropped = 0;
    psg_repl_queue_stats(q, &held, &dropped);
    CHECK(held == 3 && dropped == 5);
    CHECK(psg_repl_queue_drain(q) == 3);
    CHECK(applied_in_order(&a, 6, 3)); /* the snapshot, then the log after it */
    push(q, 9, "full");                /* nothing held before it: nothing dropped */
    CHECK(psg_repl_queue_drain(q) == 1);
    CHECK(applied(&a) == 4 && a.order[3] == 9);
    psg_repl_queue_stats(q, &held, &dropped);
    CHECK(held == 0 && dropped == 5);
    psg_repl_queue_destroy(&q);
}

static void test_bounds_apply_oldest(void) {
    applier_t a;
    applier_init(&a, true);
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a, 3, (size_t)1 << 30);
    CHECK(q != NULL);
    if (!q) return;
    for (int i = 0; i < 10; i++) push(q, i, "update");
    /* the thread applies the oldest until 3 are held: waited for, generously */
    uint64_t held = 10, dropped = 0;
    for (int t = 0; t < 6000 && (held > 3 || applied(&a) < 7); t++) {
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        psg_repl_queue_stats(q, &held, &dropped);
    }
    CHECK(held == 3);
    CHECK(applied_in_order(&a, 0, 7));
    CHECK(psg_repl_queue_drain(q) == 3);
    CHECK(applied_in_order(&a, 0, 10));
    psg_repl_queue_destroy(&q);
}

static void test_failure_said_once(void) {
    applier_t a;
    applier_init(&a, true);
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a, 1000, (size_t)1 << 30);
    CHECK(q != NULL);
    if (!q) return;
    push(q, 1, "update");
    push(q, 2, "bad");
    push(q, 3, "update");
    psg_repl_queue_drain(q);
    CHECK(applied(&a) == 3); /* the ones after a failure are applied too */
    CHECK(psg_repl_queue_ready(q) < 0);
    CHECK(psg_error_code() == PSG_ERR_DENIED);
    CHECK_ERROR_HAS("forward 2 refused");
    CHECK(psg_repl_queue_ready(q) == 0); /* said once: the whole copy that follows goes */
    psg_repl_queue_destroy(&q);
}

typedef struct {
    psg_repl_queue_t *q;
    pthread_mutex_t lock;
    bool returned;
} drainer_t;

static void *drain_all(void *arg) {
    drainer_t *d = arg;
    psg_repl_queue_drain(d->q);
    pthread_mutex_lock(&d->lock);
    d->returned = true;
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

static void test_drain_waits_for_apply(void) {
    applier_t a;
    applier_init(&a, false); /* nothing applies until the gate opens */
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a, 1000, (size_t)1 << 30);
    CHECK(q != NULL);
    if (!q) return;
    push(q, 1, "update");
    push(q, 2, "update");
    drainer_t d = {.q = q};
    pthread_mutex_init(&d.lock, NULL);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, drain_all, &d) == 0);
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    pthread_mutex_lock(&d.lock);
    CHECK(!d.returned); /* none applied: it cannot return */
    pthread_mutex_unlock(&d.lock);
    applier_open(&a);
    pthread_join(th, NULL);
    CHECK(d.returned && applied_in_order(&a, 1, 2));
    pthread_mutex_destroy(&d.lock);
    psg_repl_queue_destroy(&q);
}

static void test_destroy_drops_held(void) {
    applier_t a;
    applier_init(&a, true);
    psg_repl_queue_t *q = psg_repl_queue_new(apply, &a, 1000, (size_t)1 << 30);
    CHECK(q != NULL);
    for (int i = 0; q && i < 10; i++) push(q, i, "update");
    psg_repl_queue_destroy(&q); /* the task stops: nothing reads its copies */
    CHECK(applied(&a) == 0);
}

int main(void) {
    RUN_TEST(test_held_until_drain);
    RUN_TEST(test_snapshot_drops_before);
    RUN_TEST(test_bounds_apply_oldest);
    RUN_TEST(test_failure_said_once);
    RUN_TEST(test_drain_waits_for_apply);
    RUN_TEST(test_destroy_drops_held);
    return psg_test_summary();
}
