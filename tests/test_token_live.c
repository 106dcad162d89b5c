/* The token queue following the live workers (the chief's membership, docs/sync.md "A dead
 * or stalled worker"): each release carries one token for each live worker and only for it,
 * whatever the order of losses and joins, so that a worker found lost that still runs never
 * takes the token a live one needs (the stall of a sync job, issue 31: a false loss, a join,
 * then the lost one killed holding a live worker's token). */
#include "ops/state/sync_resources.h"
#include "tests/testutil.h"

#include <pthread.h>

/* Live flags for workers 0..2. */
static int set_live(psg_token_queue_t *q, int w0, int w1, int w2) {
    int32_t live[3] = {w0, w1, w2};
    return psg_token_queue_set_live(q, live, 3);
}

static bool takes(psg_token_queue_t *q, int worker, int64_t after, int64_t want) {
    int64_t tok = -2;
    return psg_token_queue_dequeue(q, worker, after, 2000, &tok) == 0 && tok == want;
}

/* A worker that is not live takes nothing and says why. */
static bool refused(psg_token_queue_t *q, int worker, int64_t after) {
    int64_t tok = -2;
    if (psg_token_queue_dequeue(q, worker, after, 30, &tok) == 0) return false;
    CHECK_ERROR_HAS("it is not among the live workers");
    return true;
}

static int64_t release(psg_token_queue_t *q, int64_t step) {
    CHECK(psg_token_queue_enqueue_many(q, &step, 1, 3, 0) == 0);
    return step;
}

/* The order of the failed run: worker1 found lost (alive), worker2 joins, worker1 killed. */
static void test_loss_then_join(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_token_queue_t *q = psg_token_queue_get(rm, "q");
    CHECK(set_live(q, 1, 1, 0) == 0 && psg_token_queue_size(q) == 0);
    release(q, 51);
    CHECK(psg_token_queue_size(q) == 2);
    CHECK(takes(q, 0, 50, 51) && takes(q, 1, 50, 51));
    CHECK(set_live(q, 1, 0, 0) == 0); /* worker1 lost: it still runs */
    release(q, 52);
    CHECK(psg_token_queue_size(q) == 1);
    CHECK(refused(q, 1, 51)); /* the one token is worker0's */
    CHECK(takes(q, 0, 51, 52));
    CHECK(set_live(q, 1, 0, 1) == 0); /* worker2 joins: a token of 52 for it */
    CHECK(psg_token_queue_size(q) == 1 && refused(q, 1, 51) && takes(q, 2, 51, 52));
    release(q, 53);
    CHECK(psg_token_queue_size(q) == 2 && refused(q, 1, 51));
    CHECK(takes(q, 2, 52, 53) && takes(q, 0, 52, 53));
    /* the same flags again (the chief says it twice) hand out nothing more */
    CHECK(set_live(q, 1, 0, 1) == 0 && psg_token_queue_size(q) == 0);
    psg_resource_mgr_destroy(&rm);
}

/* The other order: worker2 joins while worker1 holds no token yet, then worker1 is lost. */
static void test_join_then_loss(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_token_queue_t *q = psg_token_queue_get(rm, "q");
    CHECK(set_live(q, 1, 1, 0) == 0);
    release(q, 60);
    CHECK(takes(q, 0, 59, 60));
    CHECK(set_live(q, 1, 1, 1) == 0 && psg_token_queue_size(q) == 2); /* worker1's, worker2's */
    CHECK(set_live(q, 1, 0, 1) == 0 && psg_token_queue_size(q) == 1); /* worker1's dropped */
    CHECK(refused(q, 1, 59) && takes(q, 2, 59, 60));
    release(q, 61);
    CHECK(psg_token_queue_size(q) == 2 && refused(q, 1, 59));
    CHECK(takes(q, 0, 60, 61) && takes(q, 2, 60, 61));
    psg_resource_mgr_destroy(&rm);
}

typedef struct {
    psg_token_queue_t *q;
    int worker;
    int64_t after, token;
    int rc;
} dequeuer_t;

static void *dequeuer_main(void *arg) {
    dequeuer_t *d = arg;
    d->rc = psg_token_queue_dequeue(d->q, d->worker, d->after, 20000, &d->token);
    return NULL;
}

/* A worker found lost that is in fact alive waits; answering again (the chief readmits it)
 * it gets the token of the step that now waits for it, once. */
static void test_lost_worker_comes_back(void) {
    psg_resource_mgr_t *rm = psg_resource_mgr_new();
    psg_token_queue_t *q = psg_token_queue_get(rm, "q");
    CHECK(set_live(q, 1, 1, 0) == 0);
    release(q, 7);
    CHECK(takes(q, 0, 6, 7) && takes(q, 1, 6, 7));
    CHECK(set_live(q, 1, 0, 0) == 0);
    release(q, 8);
    dequeuer_t d = {q, 1, 7, -2, -2};
    pthread_t th;
    pthread_create(&th, NULL, dequeuer_main, &d);
    CHECK(takes(q, 0, 7, 8));
    CHECK(psg_token_queue_size(q) == 0);
    CHECK(set_live(q, 1, 1, 0) == 0); /* answers again: served now, whenever it asked */
    pthread_join(th, NULL);
    CHECK(d.rc == 0 && d.token == 8);
    CHECK(set_live(q, 1, 1, 0) == 0 && psg_token_queue_size(q) == 0);
    release(q, 9);
    CHECK(psg_token_queue_size(q) == 2 && takes(q, 1, 8, 9) && takes(q, 0, 8, 9));
    CHECK(set_live(q, 0, 0, 0) == 0 && refused(q, 0, 9));
    int32_t none[1] = {1};
    CHECK(psg_token_queue_set_live(q, none, 0) < 0);
    CHECK_ERROR_HAS("token queue 'q': no live flags");
    psg_resource_mgr_destroy(&rm);
}

int main(void) {
    RUN_TEST(test_loss_then_join);
    RUN_TEST(test_join_then_loss);
    RUN_TEST(test_lost_worker_comes_back);
    return psg_test_summary();
}
