/* psg_client_poll (net/client.c): the wait of a worker's step on its tasks' replies. It asks
 * each socket's ZMQ_EVENTS once and then sleeps on the sockets' ZMQ_FD, which is
 * edge-triggered: a reply that arrived while the client sent (the send took the socket's
 * commands, and with them the edge) must still end the wait, as must a reply arriving during
 * the sleep and the loss of a connection; a wait with nothing coming ends at its timeout.
 * Deadlines are generous (a loaded machine under AddressSanitizer): nothing here asserts a
 * time, only what ends each wait. */
#include "psgraph/wire.h"

#include <czmq.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__,      \
                    #cond, psg_error_message());                                                   \
            failures++;                                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define WAIT_MS 30000

/* Sends a request named op on c and has the server take it: the request it holds. */
static psg_msg_t *hold(psg_server_t *s, psg_client_t *c, const char *op) {
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, op), *got = NULL;
    if (psg_client_send(c, &req, NULL) < 0) return NULL;
    if (psg_server_recv(s, &got, WAIT_MS) != 1) return NULL;
    return got;
}

static int answer(psg_server_t *s, psg_msg_t **req) {
    psg_msg_t *rep = psg_msg_new(PSG_MSG_REPLY, NULL);
    psg_msg_set_key(rep, (*req)->op);
    int rc = psg_server_reply(s, *req, &rep);
    psg_msg_destroy(req);
    return rc;
}

/* Polls the n clients until one has a reply (a client may also be ready for a connection
 * event, such as its connection coming up: it is read and the wait goes on); the reply's
 * client into *from. */
static psg_msg_t *next_reply(psg_client_t **c, int n, int *from) {
    for (int tries = 0; tries < 100; tries++) {
        bool ready[2] = {false, false};
        if (psg_client_poll(c, n, ready, WAIT_MS) < 0) return NULL;
        for (int i = 0; i < n; i++) {
            psg_msg_t *m = NULL;
            if (ready[i] && psg_client_recv(c[i], &m, 0) == 1) {
                *from = i;
                return m;
            }
        }
    }
    return NULL;
}

/* A reply the client did not read yet ends the wait, for that client only; with nothing
 * coming a wait ends at its timeout. */
static void test_ready_one_of_two(psg_server_t *s, psg_client_t *c[2]) {
    psg_msg_t *h0 = hold(s, c[0], "first"), *h1 = hold(s, c[1], "second");
    CHECK(h0 && h1);
    CHECK(answer(s, &h1) == 0);
    int from = -1;
    psg_msg_t *m = next_reply(c, 2, &from);
    CHECK(m && from == 1 && m->key && !strcmp(m->key, "second"));
    psg_msg_destroy(&m);
    bool ready[2] = {false, false};
    int n = 1;
    for (int tries = 0; tries < 100 && n > 0; tries++) { /* connection events read, if any */
        n = psg_client_poll(c, 2, ready, 50);
        for (int i = 0; i < 2; i++) {
            CHECK(psg_client_recv(c[i], &m, 0) == 0 && !m); /* no reply: none was sent */
            CHECK(psg_client_check(c[i]) == 0);
        }
    }
    CHECK(n == 0 && !ready[0] && !ready[1]);
    CHECK(answer(s, &h0) == 0);
    m = next_reply(c, 2, &from);
    CHECK(m && from == 0 && m->key && !strcmp(m->key, "first"));
    psg_msg_destroy(&m);
}

typedef struct {
    psg_server_t *s;
    psg_msg_t *req;
    int rc;
} late_t;

static void *answer_later(void *arg) {
    late_t *l = arg;
    zclock_sleep(100);
    l->rc = answer(l->s, &l->req);
    return NULL;
}

/* A reply that arrives while the client sleeps wakes it; one that arrived before a send of
 * the same client (which took the socket's pending commands) is still seen. */
static void test_wakes(psg_server_t *s, psg_client_t *c) {
    late_t l = {s, hold(s, c, "late"), -1};
    CHECK(l.req);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, answer_later, &l) == 0);
    int from = -1;
    psg_msg_t *m = next_reply(&c, 1, &from);
    pthread_join(t, NULL);
    CHECK(l.rc == 0 && m && !strcmp(m->key, "late"));
    psg_msg_destroy(&m);
    for (int round = 0; round < 200; round++) {
        psg_msg_t *h = hold(s, c, "before the send");
        CHECK(h && answer(s, &h) == 0);
        zclock_sleep(round % 3); /* the reply lands before, during or after the send below */
        psg_msg_t *other = hold(s, c, "after");
        CHECK(other);
        m = next_reply(&c, 1, &from);
        CHECK(m && !strcmp(m->key, "before the send"));
        psg_msg_destroy(&m);
        CHECK(answer(s, &other) == 0);
        m = next_reply(&c, 1, &from);
        CHECK(m && !strcmp(m->key, "after"));
        psg_msg_destroy(&m);
    }
}

/* The server gone with a request in flight: the wait ends (no reply ever comes) and the
 * client's check says so, naming the peer. */
static void test_lost(void) {
    psg_wire_opts_t o = psg_wire_opts_default();
    o.peer_timeout_ms = 2000;
    psg_server_t *s = psg_server_new("tcp://127.0.0.1:0", &o);
    CHECK(s);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", psg_server_endpoint(s));
    psg_client_t *c = psg_client_new(ep, &o);
    CHECK(c);
    psg_msg_t *h = hold(s, c, "held");
    CHECK(h);
    psg_msg_destroy(&h);
    psg_server_destroy(&s);
    bool ready = false;
    int checked = 0;
    for (int tries = 0; tries < 100 && checked == 0; tries++)
        if (psg_client_poll(&c, 1, &ready, WAIT_MS) > 0) checked = psg_client_check(c);
    CHECK(checked < 0 && ready);
    CHECK(strstr(psg_error_message(), "lost the connection to the peer with 1 request in flight"));
    psg_client_destroy(&c);
}

int main(void) {
    psg_wire_opts_t o = psg_wire_opts_default();
    psg_server_t *s = psg_server_new("tcp://127.0.0.1:0", &o);
    psg_client_t *c[2] = {NULL, NULL};
    if (s) {
        c[0] = psg_client_new(psg_server_endpoint(s), &o);
        c[1] = psg_client_new(psg_server_endpoint(s), &o);
    }
    if (!s || !c[0] || !c[1]) {
        fprintf(stderr, "test_wire_poll: setup: %s\n", psg_error_message());
        return 1;
    }
    test_ready_one_of_two(s, c);
    test_wakes(s, c[0]);
    psg_client_destroy(&c[0]);
    psg_client_destroy(&c[1]);
    psg_server_destroy(&s);
    test_lost();
    if (failures) {
        fprintf(stderr, "test_wire_poll: %d failures\n", failures);
        return 1;
    }
    printf("test_wire_poll: OK\n");
    return 0;
}
