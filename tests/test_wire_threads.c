/* Replies sent by the threads that make them (net/server.c): a server whose requests are
 * answered by other threads than the one receiving, while clients keep requests coming.
 * Every request is answered with its own key and tensor, none is lost nor left waiting
 * (a receiving thread that missed a wake-up, because another thread's send took the
 * socket's edge, would leave a request unread and its client would time out), and no
 * reply is counted lost. */
#include "net/codec.h"
#include "psgraph/wire.h"

#include <czmq.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int failures;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__,      \
                    #cond, psg_error_message());                                                   \
            atomic_fetch_add(&failures, 1);                                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define REPLIERS 4
#define CLIENTS 3
#define PER_CLIENT 1000
#define WINDOW 8
/* Generous: a loaded 2-core machine under AddressSanitizer; a lost wake-up waits forever. */
#define REPLY_DEADLINE_MS 30000
#define BIG_FLOATS 20000 /* 80 KB: a frame of its own, sent zero-copy */

/* A request handed from the receiving thread to a replier. */
typedef struct job {
    psg_msg_t *req;
    struct job *next;
} job_t;

typedef struct {
    psg_server_t *server;
    char endpoint[256];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    job_t *head, **tail;
    bool closed;
    atomic_int ready;    /* 1: up, -1: failed */
    atomic_int timeouts; /* receives that found nothing in 60 s */
} served_t;

static psg_tensor_t *filled(int n, float v) {
    psg_shape_t sh = psg_shape_1d(n);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &sh);
    if (!t) return NULL;
    float *p = t->data;
    for (int i = 0; i < n; i++) p[i] = v + (float)i;
    return t;
}

/* The answer: the request's key, and its step as a tensor (large every third request). */
static void *replier_main(void *arg) {
    served_t *sv = arg;
    for (;;) {
        pthread_mutex_lock(&sv->lock);
        while (!sv->head && !sv->closed) pthread_cond_wait(&sv->cond, &sv->lock);
        job_t *j = sv->head;
        if (j) {
            sv->head = j->next;
            if (!sv->head) sv->tail = &sv->head;
        }
        pthread_mutex_unlock(&sv->lock);
        if (!j) return NULL;
        psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, NULL);
        psg_msg_set_key(r, j->req->key);
        psg_tensor_t *t = filled(j->req->step % 3 == 0 ? BIG_FLOATS : 4, (float)j->req->step);
        psg_msg_add_tensor(r, "v", t);
        psg_tensor_destroy(&t);
        if (psg_server_reply(sv->server, j->req, &r) < 0)
            fprintf(stderr, "replier: %s\n", psg_error_message());
        psg_msg_destroy(&j->req);
        free(j);
    }
}

static void *receiver_main(void *arg) {
    served_t *sv = arg;
    sv->server = psg_server_new("tcp://127.0.0.1:*", NULL);
    if (!sv->server) {
        fprintf(stderr, "server: %s\n", psg_error_message());
        atomic_store(&sv->ready, -1);
        return NULL;
    }
    snprintf(sv->endpoint, sizeof sv->endpoint, "%s", psg_server_endpoint(sv->server));
    atomic_store(&sv->ready, 1);
    for (;;) {
        psg_msg_t *req = NULL;
        int r = psg_server_recv(sv->server, &req, 60000);
        if (r < 0) break;
        if (r == 0) {
            atomic_fetch_add(&sv->timeouts, 1);
            continue;
        }
        if (req->op && !strcmp(req->op, "stop")) {
            psg_msg_t *ack = psg_msg_new(PSG_MSG_REPLY, NULL);
            psg_server_reply(sv->server, req, &ack); /* from this thread */
            psg_msg_destroy(&req);
            break;
        }
        job_t *j = calloc(1, sizeof *j);
        if (!j) abort();
        j->req = req;
        pthread_mutex_lock(&sv->lock);
        *sv->tail = j;
        sv->tail = &j->next;
        pthread_cond_signal(&sv->cond);
        pthread_mutex_unlock(&sv->lock);
    }
    return NULL;
}

typedef struct {
    const char *endpoint;
    int index;
    int answered;
} client_t;

/* Checks a reply: its key names the request, its tensor holds that request's step. */
static bool reply_ok(const psg_msg_t *m, int client, int64_t *step) {
    int c = -1;
    long long s = -1;
    if (m->kind != PSG_MSG_REPLY || !m->key || sscanf(m->key, "c%d/%lld", &c, &s) != 2 ||
        c != client || m->ntensors != 1)
        return false;
    const psg_tensor_t *t = m->tensors[0];
    int n = s % 3 == 0 ? BIG_FLOATS : 4;
    if (t->dtype != PSG_DT_F32 || psg_tensor_nbytes(t) != (size_t)n * sizeof(float)) return false;
    const float *p = t->data;
    for (int i = 0; i < n; i += n / 4)
        if (p[i] != (float)s + (float)i) return false;
    *step = s;
    return true;
}

/* Keeps WINDOW requests outstanding until PER_CLIENT were answered, each exactly once. */
static void *client_main(void *arg) {
    client_t *cl = arg;
    psg_client_t *c = psg_client_new(cl->endpoint, NULL);
    bool seen[PER_CLIENT] = {0};
    int sent = 0;
    while (c && cl->answered < PER_CLIENT) {
        while (sent < PER_CLIENT && sent - cl->answered < WINDOW) {
            psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "hand");
            char key[32];
            snprintf(key, sizeof key, "c%d/%d", cl->index, sent);
            psg_msg_set_key(req, key);
            req->step = sent;
            if (psg_client_send(c, &req, NULL) < 0) break;
            sent++;
        }
        psg_msg_t *m = NULL;
        if (psg_client_recv(c, &m, REPLY_DEADLINE_MS) != 1) {
            fprintf(stderr, "client %d: no reply after %d of %d: %s\n", cl->index, cl->answered,
                    PER_CLIENT, psg_error_message());
            break;
        }
        int64_t s = -1;
        bool ok = reply_ok(m, cl->index, &s) && s < PER_CLIENT && !seen[s];
        psg_msg_destroy(&m);
        if (!ok) {
            fprintf(stderr, "client %d: a wrong or repeated reply\n", cl->index);
            break;
        }
        seen[s] = true;
        cl->answered++;
    }
    psg_client_destroy(&c);
    return NULL;
}

static void test_replies_from_other_threads(void) {
    served_t sv = {.ready = 0};
    pthread_mutex_init(&sv.lock, NULL);
    pthread_cond_init(&sv.cond, NULL);
    sv.tail = &sv.head;
    pthread_t receiver, repliers[REPLIERS], clients[CLIENTS];
    CHECK(pthread_create(&receiver, NULL, receiver_main, &sv) == 0);
    while (atomic_load(&sv.ready) == 0) zclock_sleep(1);
    if (atomic_load(&sv.ready) < 0) pthread_join(receiver, NULL);
    CHECK(atomic_load(&sv.ready) == 1);
    for (int i = 0; i < REPLIERS; i++)
        CHECK(pthread_create(&repliers[i], NULL, replier_main, &sv) == 0);
    client_t cl[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        cl[i] = (client_t){.endpoint = sv.endpoint, .index = i};
        CHECK(pthread_create(&clients[i], NULL, client_main, &cl[i]) == 0);
    }
    for (int i = 0; i < CLIENTS; i++) pthread_join(clients[i], NULL);
    /* the stop, answered by the receiving thread */
    psg_client_t *c = psg_client_new(sv.endpoint, NULL);
    psg_msg_t *stop = psg_msg_new(PSG_MSG_REQUEST, "stop");
    psg_msg_t *ack = c ? psg_client_call(c, &stop, REPLY_DEADLINE_MS) : NULL;
    psg_msg_destroy(&stop);
    bool acked = ack != NULL;
    psg_msg_destroy(&ack);
    psg_client_destroy(&c);
    pthread_join(receiver, NULL);
    pthread_mutex_lock(&sv.lock);
    sv.closed = true;
    pthread_cond_broadcast(&sv.cond);
    pthread_mutex_unlock(&sv.lock);
    for (int i = 0; i < REPLIERS; i++) pthread_join(repliers[i], NULL);
    psg_server_stats_t st = psg_server_stats(sv.server);
    psg_server_destroy(&sv.server);
    pthread_mutex_destroy(&sv.lock);
    pthread_cond_destroy(&sv.cond);
    for (int i = 0; i < CLIENTS; i++) CHECK(cl[i].answered == PER_CLIENT);
    CHECK(acked);
    CHECK(st.received == CLIENTS * PER_CLIENT + 1);
    CHECK(st.replies_lost == 0 && st.rejected == 0 && st.dropped == 0);
    CHECK(atomic_load(&sv.timeouts) == 0);
}

int main(void) {
    test_replies_from_other_threads();
    if (failures) {
        fprintf(stderr, "test_wire_threads: %d failure(s)\n", atomic_load(&failures));
        return 1;
    }
    printf("test_wire_threads: OK\n");
    return 0;
}
