/* The rendezvous of a partitioned step (ops/state/rendezvous.c): Send and Recv by key and
 * step in either order, deadlines, a step's abort (with its cause's code) and its cleanup,
 * what is remembered of aborted steps, the keys' text. */
#include "psgraph/rendezvous.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *late_sender(void *arg) {
    psg_rendezvous_t *rv = arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    psg_tensor_t *t = psg_tensor_scalar_f32(42.0f);
    psg_rendezvous_send(rv, 5, "late", &t);
    return NULL;
}

static void *waiter(void *arg) {
    psg_rendezvous_t *rv = arg;
    psg_tensor_t *t = NULL;
    int rc = psg_rendezvous_recv(rv, 9, "never", 0, &t);
    static char msg[512];
    snprintf(msg, sizeof msg, "%s", rc < 0 ? psg_error_message() : "received?");
    return msg;
}

typedef struct {
    bool called;
    psg_err_code_t code;
    char error[512];
} slow_wait_t;

static void slow_done(void *arg, psg_tensor_t *t, psg_err_code_t code, const char *error) {
    slow_wait_t *w = arg;
    w->called = true;
    w->code = code;
    snprintf(w->error, sizeof w->error, "%s", error ? error : "");
    psg_tensor_destroy(&t);
}

static void test_rendezvous(void) {
    psg_rendezvous_t *rv = psg_rendezvous_new(0);
    psg_tensor_t *t = psg_tensor_scalar_f32(1.5f), *out = NULL;
    /* send first, then receive */
    CHECK(psg_rendezvous_send(rv, 1, "a", &t) == 0 && t == NULL);
    CHECK(psg_rendezvous_num_pending(rv) == 1);
    CHECK(psg_rendezvous_recv(rv, 1, "a", 100, &out) == 0 && out && psg_tensor_f32(out)[0] == 1.5f);
    psg_tensor_destroy(&out);
    /* the same key in another step is another entry */
    t = psg_tensor_scalar_f32(1);
    CHECK(psg_rendezvous_send(rv, 2, "a", &t) == 0);
    t = psg_tensor_scalar_f32(2);
    CHECK(psg_rendezvous_send(rv, 2, "a", &t) < 0 && t == NULL);
    CHECK_ERROR_HAS("key 'a' sent twice in step 2");
    CHECK(psg_rendezvous_recv(rv, 3, "a", 30, &out) < 0);
    CHECK_ERROR_HAS("timed out after 30 ms waiting for key 'a' (step 3)");
    /* a waiter due sooner than every other still wakes the timer: 30 ms behind one of 60 s */
    slow_wait_t slow = {0};
    psg_rendezvous_recv_async(rv, 7, "slow", 60000, slow_done, &slow);
    double t0 = psg_now_sec();
    CHECK(psg_rendezvous_recv(rv, 8, "soon", 30, &out) < 0);
    CHECK_ERROR_HAS("timed out after 30 ms waiting for key 'soon' (step 8)");
    CHECK(psg_error_code() == PSG_ERR_TIMEOUT);
    CHECK(psg_now_sec() - t0 < 30.0); /* not the 60 s waiter's deadline */
    CHECK(!slow.called);
    psg_rendezvous_cleanup_step(rv, 7);
    CHECK(slow.called && strstr(slow.error, "step ended"));
    CHECK(slow.code == PSG_ERR_ABORTED);
    psg_rendezvous_cleanup_step(rv, 2);
    CHECK(psg_rendezvous_num_pending(rv) == 0);
    /* receive first, the send arrives from another thread */
    pthread_t th;
    pthread_create(&th, NULL, late_sender, rv);
    CHECK(psg_rendezvous_recv(rv, 5, "late", 5000, &out) == 0 && out &&
          psg_tensor_f32(out)[0] == 42.0f);
    psg_tensor_destroy(&out);
    pthread_join(th, NULL);
    /* a step abort fails that step only */
    psg_rendezvous_abort_step(rv, 4, "worker 1 died");
    CHECK(psg_rendezvous_recv(rv, 4, "x", 0, &out) < 0);
    CHECK_ERROR_HAS("aborted (worker 1 died) while waiting for key 'x' (step 4)");
    CHECK(psg_error_code() == PSG_ERR_ABORTED);
    t = psg_tensor_scalar_f32(1);
    CHECK(psg_rendezvous_send(rv, 4, "x", &t) < 0);
    CHECK_ERROR_HAS("while sending key 'x'");
    t = psg_tensor_scalar_f32(1);
    CHECK(psg_rendezvous_send(rv, 6, "x", &t) == 0);
    /* after its cleanup an aborted step still fails at once (a late peer's pull) */
    psg_rendezvous_cleanup_step(rv, 4);
    CHECK(psg_rendezvous_recv(rv, 4, "x", 5000, &out) < 0);
    CHECK_ERROR_HAS("aborted (worker 1 died)");
    t = psg_tensor_scalar_f32(1);
    CHECK(psg_rendezvous_send(rv, 4, "x", &t) < 0);
    /* only the last 64 are remembered */
    for (int64_t k = 100; k < 164; k++) {
        psg_rendezvous_abort_step(rv, k, "gone");
        psg_rendezvous_cleanup_step(rv, k);
    }
    t = psg_tensor_scalar_f32(1);
    CHECK(psg_rendezvous_send(rv, 4, "x", &t) == 0);
    CHECK(psg_rendezvous_recv(rv, 163, "x", 0, &out) < 0);
    CHECK_ERROR_HAS("aborted (gone)");
    psg_rendezvous_cleanup_step(rv, 4);
    /* steps aborted and never cleaned up (a peer whose steps fail and that never sends
     * CleanupStep) are remembered 256 at most, then 64 more as if cleaned up: a record
     * each for good grew the task server by every failed step of such a peer */
    for (int64_t k = 1000; k < 1000 + 256 + 64 + 10; k++)
        psg_rendezvous_abort_step(rv, k, "no cleanup");
    for (int64_t k = 1000; k < 1010; k++) { /* forgotten: a send waits for its receiver */
        t = psg_tensor_scalar_f32(1);
        CHECK(psg_rendezvous_send(rv, k, "x", &t) == 0);
        psg_rendezvous_cleanup_step(rv, k);
    }
    for (int64_t k = 1010; k < 1000 + 256 + 64 + 10; k += 37) { /* remembered: refused */
        t = psg_tensor_scalar_f32(1);
        CHECK(psg_rendezvous_send(rv, k, "x", &t) < 0);
        CHECK_ERROR_HAS("aborted (no cleanup)");
        psg_tensor_destroy(&t);
    }
    CHECK(psg_rendezvous_recv(rv, 1000 + 256 + 64 + 9, "x", 0, &out) < 0);
    CHECK_ERROR_HAS("aborted (no cleanup)");
    /* an abort wakes a receiver that waits with no limit, naming its key */
    pthread_create(&th, NULL, waiter, rv);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    psg_rendezvous_abort(rv, "shutting down");
    void *msg = NULL;
    pthread_join(th, &msg);
    CHECK(msg && strstr(msg, "aborted (shutting down) while waiting for key 'never' (step 9)"));
    CHECK(psg_rendezvous_num_pending(rv) == 0);
    psg_rendezvous_destroy(&rv);
    CHECK(rv == NULL);
    psg_rendezvous_destroy(&rv);

    /* keys */
    char key[PSG_RENDEZVOUS_KEY_MAX];
    psg_rendezvous_key("/job:ps/replica:0/task:1/device:CPU:0", 0xabcdef,
                       "/job:worker/replica:0/task:0/device:CPU:0", "layer/w/read:0", key,
                       sizeof key);
    CHECK(!strcmp(key, "/job:ps/replica:0/task:1/device:CPU:0;0000000000abcdef;"
                       "/job:worker/replica:0/task:0/device:CPU:0;layer/w/read:0;0:0"));
    psg_rendezvous_key_t k;
    CHECK(psg_rendezvous_key_parse(key, &k) == 0);
    CHECK(!strcmp(k.src_device, "/job:ps/replica:0/task:1/device:CPU:0") &&
          k.src_incarnation == 0xabcdef);
    CHECK(!strcmp(k.dst_device, "/job:worker/replica:0/task:0/device:CPU:0") &&
          !strcmp(k.edge_name, "layer/w/read:0"));
    CHECK(psg_rendezvous_key_parse("a;b;c", &k) < 0);
    CHECK_ERROR_HAS("malformed rendezvous key 'a;b;c'");
    CHECK(psg_rendezvous_key_parse("a;000000000000000g;c;d;0:0", &k) < 0);
    CHECK_ERROR_HAS("incarnation");
    CHECK(psg_rendezvous_key_parse(";0000000000000000;c;d;0:0", &k) < 0);
}

/* An abort with its cause's code: a pull from a ps that stopped because the job is done
 * fails the step's waiters, and its later sends and receives, as job done (the worker
 * stops; no recovery); a second abort of the step keeps the first one's code; a plain abort
 * is PSG_ERR_ABORTED. */
static void test_rendezvous_abort_code(void) {
    psg_rendezvous_t *rv = psg_rendezvous_new(0);
    psg_tensor_t *t = NULL, *out = NULL;
    slow_wait_t pulled = {0};
    psg_rendezvous_recv_async(rv, 9, "pulled", 60000, slow_done, &pulled);
    psg_rendezvous_abort_step_code(rv, 9, PSG_ERR_JOB_DONE,
                                   "task /job:ps/replica:0/task:0: job done");
    CHECK(pulled.called && pulled.code == PSG_ERR_JOB_DONE && strstr(pulled.error, "job done"));
    psg_rendezvous_abort_step(rv, 9, "the executor's abort after it");
    CHECK(psg_rendezvous_recv(rv, 9, "y", 0, &out) < 0 && psg_error_code() == PSG_ERR_JOB_DONE);
    CHECK_ERROR_HAS("aborted (task /job:ps/replica:0/task:0: job done) while waiting for key 'y'");
    t = psg_tensor_scalar_f32(1);
    CHECK(psg_rendezvous_send(rv, 9, "y", &t) < 0 && psg_error_code() == PSG_ERR_JOB_DONE);
    psg_rendezvous_cleanup_step(rv, 9); /* cleaned up, the step still fails with its code */
    CHECK(psg_rendezvous_recv(rv, 9, "z", 0, &out) < 0 && psg_error_code() == PSG_ERR_JOB_DONE);
    psg_rendezvous_abort_step(rv, 10, "a failed partition");
    CHECK(psg_rendezvous_recv(rv, 10, "z", 0, &out) < 0 && psg_error_code() == PSG_ERR_ABORTED);
    psg_rendezvous_destroy(&rv);
}

/* A destroyed rendezvous fails its waiters rather than leaving them hanging. */
static void done_count(void *arg, psg_tensor_t *t, psg_err_code_t code, const char *error) {
    int *n = arg;
    if (!t && code == PSG_ERR_STOPPING && error && strstr(error, "rendezvous destroyed")) (*n)++;
    psg_tensor_destroy(&t);
}

static void test_rendezvous_destroy_fails_waiters(void) {
    psg_rendezvous_t *rv = psg_rendezvous_new(0);
    int failed = 0;
    psg_rendezvous_recv_async(rv, 1, "k1", 0, done_count, &failed);
    psg_rendezvous_recv_async(rv, 1, "k2", 60000, done_count, &failed);
    psg_tensor_t *t = psg_tensor_scalar_f32(1);
    psg_rendezvous_send(rv, 1, "unreceived", &t);
    CHECK(psg_rendezvous_num_pending(rv) == 3);
    psg_rendezvous_destroy(&rv);
    CHECK(failed == 2);
}

int main(void) {
    RUN_TEST(test_rendezvous);
    RUN_TEST(test_rendezvous_abort_code);
    RUN_TEST(test_rendezvous_destroy_fails_waiters);
    return psg_test_summary();
}
