/* The Recv puller (ps/remote_rendezvous.c) against peers that are plain ZeroMQ ROUTERs: a pull
 * in flight to a peer that dies fails its step, naming the lost connection, once the puller is
 * free to look, also when the puller was held meanwhile by a send to a port nobody listens on,
 * a later pull to the dead peer's send read the connection's loss event, and pulls to a third
 * peer every 50 ms keep waking the puller (its check of lost peers runs every 250 ms whatever
 * wakes it: it once ran only when a poll found nothing for 250 ms); the third peer's pulls go
 * on; a pull to a task a failover found lost fails at once (psg_remote_rv_fail_task). */
#include "ps/remote_rendezvous.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define PEER_TIMEOUT_MS 400
#define SEND_TIMEOUT_MS 1500 /* the puller's bound on a send to a peer never reached */

/* A ROUTER on 127.0.0.1:port that answers nothing. */
static void *silent_peer(void *ctx, int port) {
    void *s = zmq_socket(ctx, ZMQ_ROUTER);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    CHECK(zmq_bind(s, ep) == 0);
    return s;
}

/* Whether a request came to s within ms (its frames read and dropped). */
static bool got_request(void *s, int ms) {
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0) return false;
    int more = 1;
    size_t len = sizeof more;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, s, 0);
        zmq_msg_close(&m);
        zmq_getsockopt(s, ZMQ_RCVMORE, &more, &len);
    }
    return true;
}

static void pull(psg_remote_rv_t *r, int64_t step, const char *key, int port) {
    psg_remote_pull_t p = {.key = (char *)key};
    snprintf(p.task, sizeof p.task, "/job:ps/replica:0/task:%d", port);
    snprintf(p.address, sizeof p.address, "127.0.0.1:%d", port);
    CHECK(psg_remote_rv_pull(r, step, 1, &p) == 0);
}

/* Two silent peers a and b and a puller feeding `local`, its peer timeout given. */
typedef struct {
    void *ctx, *a, *b;
    int port_a, port_b;
    psg_rendezvous_t *local;
    psg_remote_rv_t *r;
} rig_t;

static void rig_open(rig_t *g, int peer_timeout_ms) {
    g->ctx = zmq_ctx_new();
    g->port_a = psg_test_free_port();
    g->port_b = psg_test_free_port();
    g->a = silent_peer(g->ctx, g->port_a);
    g->b = silent_peer(g->ctx, g->port_b);
    g->local = psg_rendezvous_new(60000);
    g->r = psg_remote_rv_new(g->local, SEND_TIMEOUT_MS);
    CHECK(g->local && g->r);
    psg_remote_rv_set_peer_timeout(g->r, peer_timeout_ms);
}

static void rig_close(rig_t *g) {
    psg_remote_rv_destroy(&g->r);
    psg_rendezvous_destroy(&g->local);
    if (g->a) zmq_close(g->a);
    zmq_close(g->b);
    zmq_ctx_term(g->ctx);
}

static void test_dead_peer_while_busy(void) {
    rig_t g;
    rig_open(&g, PEER_TIMEOUT_MS);
    psg_remote_rv_t *r = g.r;
    psg_rendezvous_t *local = g.local;
    int port_a = g.port_a, port_b = g.port_b;
    void *a = g.a, *b = g.b;
    pull(r, 1, "a", port_a);
    CHECK(got_request(a, 5000)); /* in flight */
    /* the puller held by a send to a port nobody listens on, while a dies and a second pull
     * to it is queued: that pull's send, next, reads the loss event of a's connection */
    pull(r, 3, "c", psg_test_free_port());
    nanosleep(&(struct timespec){0, 100000000}, NULL);
    zmq_close(a);
    g.a = NULL;
    double died = psg_test_now_sec();
    nanosleep(&(struct timespec){0, 100000000}, NULL);
    pull(r, 2, "a2", port_a);
    double aborted = -1;
    int busy = 0;
    /* a liveness bound, not a timing: the send that holds the puller takes SEND_TIMEOUT_MS */
    for (int i = 1; psg_test_now_sec() - died < 30.0; i++) {
        pull(r, 100 + i, "b", port_b); /* a wake-up of the puller every 50 ms */
        busy += got_request(b, 0);
        psg_tensor_t *t = NULL;
        if (psg_rendezvous_recv(local, 1, "a", 50, &t) < 0 && psg_error_code() != PSG_ERR_TIMEOUT) {
            aborted = psg_test_now_sec() - died;
            CHECK_ERROR_HAS("lost the connection");
            printf("the pull in flight to the dead peer failed %.3f s after it died\n", aborted);
            break;
        }
        psg_tensor_destroy(&t);
    }
    if (aborted < 0) fprintf(stderr, "  the pull in flight to the dead peer never failed\n");
    CHECK(aborted > 0);
    while (got_request(b, 1000)) busy++;
    CHECK(busy > 0); /* the other peer's pulls went on */
    rig_close(&g);
}

/* A failover found the peer lost: its pulls fail at once, with the reason and the task named;
 * the other peer's pull still waits. */
static void test_fail_task(void) {
    rig_t g;
    rig_open(&g, 60000); /* the puller would not find it itself */
    psg_remote_rv_t *r = g.r;
    psg_rendezvous_t *local = g.local;
    int port_a = g.port_a, port_b = g.port_b;
    void *a = g.a, *b = g.b;
    pull(r, 1, "a", port_a);
    pull(r, 2, "b", port_b);
    CHECK(got_request(a, 5000) && got_request(b, 5000)); /* both in flight */
    char task[64];
    snprintf(task, sizeof task, "/job:ps/replica:0/task:%d", port_a);
    psg_remote_rv_fail_task(r, task, "failed over to its backup");
    psg_tensor_t *t = NULL;
    CHECK(psg_rendezvous_recv(local, 1, "a", 2000, &t) < 0);
    CHECK(psg_error_code() != PSG_ERR_TIMEOUT); /* failed, not waited out */
    CHECK_ERROR_HAS("failed over to its backup");
    CHECK_ERROR_HAS(task);
    CHECK(psg_rendezvous_recv(local, 2, "b", 200, &t) < 0 && psg_error_code() == PSG_ERR_TIMEOUT);
    psg_remote_rv_fail_task(r, "no such task", "ignored"); /* not a task name: nothing */
    rig_close(&g);
}

int main(void) {
    RUN_TEST(test_dead_peer_while_busy);
    RUN_TEST(test_fail_task);
    return psg_test_summary();
}
