/* Tests of the one-host stream transport (net/stream.c, net/stream_server.c, the ipc:// paths
 * of net/client.c and net/server.c): real Unix sockets in a private folder. Tensors byte for
 * byte (whole, chunked, from several clients at once, replies from other threads), hostile
 * raw peers beside a good client, lost connections told, a server restarted at its path
 * reached again by the same client, a path with no server, the poll of stream clients, and
 * PSGRAPH_IPC=zmq giving ZeroMQ's ipc:// back. */
#include "net/codec.h"
#include "psgraph/wire.h"
#include "tests/tensor_pattern.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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

static char dir[] = "/tmp/psg_test_stream.XXXXXX";

static void endpoint(char *out, size_t size, const char *name) {
    snprintf(out, size, "ipc://%s/%s", dir, name);
}

/* ---- an echo server on its own thread; "later" is answered from another thread -------- */

typedef struct {
    char endpoint[256];
    psg_wire_opts_t opts;
    pthread_t thread;
    atomic_int ready;
    atomic_bool stop;
    psg_server_t *server;
} echo_t;

typedef struct {
    psg_server_t *server;
    psg_msg_t stub;
    pthread_t thread;
} later_t;

static void *later_main(void *arg) {
    later_t *l = arg;
    psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, NULL);
    psg_msg_set_key(r, "from another thread");
    psg_server_reply(l->server, &l->stub, &r);
    return NULL;
}

static void *echo_main(void *arg) {
    echo_t *e = arg;
    e->server = psg_server_new(e->endpoint, &e->opts);
    atomic_store(&e->ready, e->server ? 1 : -1);
    if (!e->server) return NULL;
    later_t laters[64];
    int nlater = 0;
    while (!atomic_load(&e->stop)) {
        psg_msg_t *req = NULL;
        if (psg_server_recv(e->server, &req, 20) <= 0) continue;
        if (req->op && !strcmp(req->op, "later") && nlater < 64) {
            later_t *l = &laters[nlater];
            l->server = e->server;
            l->stub.route = req->route;
            l->stub.id = req->id;
            if (pthread_create(&l->thread, NULL, later_main, l) == 0) nlater++;
        } else if (req->op && !strcmp(req->op, "held")) {
            /* no reply */
        } else {
            psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, "echo");
            psg_msg_set_key(r, req->key);
            r->step = req->step;
            for (int i = 0; i < req->ntensors; i++)
                psg_msg_add_tensor(r, req->names[i], req->tensors[i]);
            psg_server_reply(e->server, req, &r);
        }
        psg_msg_destroy(&req);
    }
    for (int i = 0; i < nlater; i++) pthread_join(laters[i].thread, NULL);
    psg_server_destroy(&e->server);
    return NULL;
}

static int echo_start(echo_t *e, const char *name) {
    memset(e, 0, sizeof *e);
    endpoint(e->endpoint, sizeof e->endpoint, name);
    e->opts = psg_wire_opts_default();
    if (pthread_create(&e->thread, NULL, echo_main, e) != 0) return -1;
    while (atomic_load(&e->ready) == 0) usleep(1000);
    return atomic_load(&e->ready) == 1 ? 0 : -1;
}

static void echo_stop(echo_t *e) {
    atomic_store(&e->stop, true);
    pthread_join(e->thread, NULL);
}

/* One echo call of t; true when it came back the same. */
static bool echoed(psg_client_t *c, const psg_tensor_t *t, int64_t step) {
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "echo");
    if (!req || psg_msg_add_tensor(req, "x", (psg_tensor_t *)t) < 0) return false;
    psg_msg_set_key(req, "edge/x;0");
    req->step = step;
    psg_msg_t *rep = psg_client_call(c, &req, 20000);
    bool ok = rep && rep->ntensors == 1 && psg_test_same_tensor(rep->tensors[0], t) &&
              rep->step == step && rep->key && !strcmp(rep->key, "edge/x;0");
    psg_msg_destroy(&rep);
    return ok;
}

/* ---- round trips ------------------------------------------------------------------------- */

static void test_round_trip(void) {
    echo_t e;
    CHECK(echo_start(&e, "echo") == 0);
    psg_client_t *c = psg_client_new(e.endpoint, NULL);
    CHECK(c && psg_client_socket(c) == NULL && psg_client_fd(c) >= 0);
    psg_shape_t shapes[] = {
        {0, {0}},          {1, {0}},
        {1, {1000}},       {1, {(1 << 18) + 3}},
        {2, {1024, 4096}}, /* 16 MB whole */ {1, {(16 << 20) + 1}}, /* 64 MB: chunks */
    };
    for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++) {
        psg_tensor_t *t = psg_test_patterned(PSG_DT_F32, shapes[i], (unsigned)i);
        CHECK(t);
        bool ok = echoed(c, t, -42 - i);
        psg_tensor_destroy(&t);
        CHECK(ok);
    }
    /* answered from another thread than the server's */
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "later"), *m = NULL;
    CHECK(psg_client_send(c, &req, NULL) == 0);
    CHECK(psg_client_recv(c, &m, 5000) == 1 && m->key && !strcmp(m->key, "from another thread"));
    psg_msg_destroy(&m);
    psg_client_destroy(&c);
    echo_stop(&e);
}

/* A large frame is read into a block of the buffer cache, which later frames of its size
 * take again (fresh pages from malloc every step were most of a job's page faults). */
static void test_frames_cached(void) {
    echo_t e;
    CHECK(echo_start(&e, "cached") == 0);
    psg_client_t *c = psg_client_new(e.endpoint, NULL);
    psg_tensor_t *t = psg_test_patterned(PSG_DT_F32, (psg_shape_t){1, {1 << 18}}, 7); /* 1 MiB */
    size_t block = t ? psg_tensor_nbytes(t) : 0, first = 0;
    bool echoed_all = c && t, reply_cached = true;
    for (int round = 0; round < 20 && echoed_all; round++) {
        psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "echo");
        if (!req || psg_msg_add_tensor(req, "x", t) < 0) {
            psg_msg_destroy(&req);
            echoed_all = false;
            break;
        }
        psg_msg_t *rep = psg_client_call(c, &req, 20000);
        echoed_all = rep && rep->ntensors == 1 && psg_test_same_tensor(rep->tensors[0], t);
        /* held: t and the reply's frame are both blocks (whatever the server still holds) */
        reply_cached = reply_cached && psg_buffer_live_bytes() >= 2 * block;
        psg_msg_destroy(&rep);
        if (round == 0) first = psg_buffer_live_bytes() + psg_buffer_cached_bytes();
    }
    /* a few blocks go round (the server's request, the client's reply), not one a round */
    size_t last = psg_buffer_live_bytes() + psg_buffer_cached_bytes();
    size_t grown = last > first ? last - first : 0;
    psg_tensor_destroy(&t);
    psg_client_destroy(&c);
    echo_stop(&e);
    CHECK(echoed_all);
    CHECK(reply_cached);
    CHECK(grown <= 4 * block);
}

typedef struct {
    const char *endpoint;
    unsigned seed;
    atomic_int *bad;
} hammer_t;

static void *hammer_main(void *arg) {
    hammer_t *h = arg;
    psg_client_t *c = psg_client_new(h->endpoint, NULL);
    psg_tensor_t *t = psg_test_patterned(PSG_DT_F32, psg_shape_1d((1 << 18) + h->seed), h->seed);
    for (int i = 0; i < 40; i++)
        if (!c || !t || !echoed(c, t, i)) atomic_fetch_add(h->bad, 1);
    psg_tensor_destroy(&t);
    psg_client_destroy(&c);
    return NULL;
}

/* Four clients at once, each 40 round trips of 1 MB, and replies from other threads between
 * them: every byte back to its own sender. */
static void test_clients_at_once(void) {
    echo_t e;
    CHECK(echo_start(&e, "many") == 0);
    atomic_int bad = 0;
    hammer_t h[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (hammer_t){e.endpoint, (unsigned)i + 1, &bad};
        CHECK(pthread_create(&t[i], NULL, hammer_main, &h[i]) == 0);
    }
    psg_client_t *c = psg_client_new(e.endpoint, NULL);
    for (int i = 0; c && i < 20; i++) {
        psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "later"), *m = NULL;
        if (psg_client_send(c, &req, NULL) < 0 || psg_client_recv(c, &m, 5000) != 1)
            atomic_fetch_add(&bad, 1);
        psg_msg_destroy(&m);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    psg_client_destroy(&c);
    echo_stop(&e);
    CHECK(atomic_load(&bad) == 0);
}

/* Twelve requests of 1.5 MiB sent before any reply is read: the server's arena (8 MiB) is full
 * after five replies and the others go through the socket; every byte back, in order. */
static void test_arena_full(void) {
    echo_t e;
    CHECK(echo_start(&e, "full") == 0);
    psg_client_t *c = psg_client_new(e.endpoint, NULL);
    psg_tensor_t *t[12];
    uint64_t id[12];
    for (int i = 0; i < 12; i++) {
        t[i] = psg_test_patterned(PSG_DT_U8, psg_shape_1d((3 << 19) + (size_t)i), (unsigned)i + 50);
        psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "echo");
        CHECK(c && t[i] && psg_msg_add_tensor(req, "x", t[i]) == 0);
        CHECK(psg_client_send(c, &req, &id[i]) == 0);
    }
    usleep(200000); /* the server answers all while nobody reads */
    for (int i = 0; i < 12; i++) {
        psg_msg_t *m = NULL;
        CHECK(psg_client_recv(c, &m, 10000) == 1);
        bool ok = m->id == id[i] && m->ntensors == 1 && psg_test_same_tensor(m->tensors[0], t[i]);
        psg_msg_destroy(&m);
        psg_tensor_destroy(&t[i]);
        CHECK(ok);
    }
    psg_client_destroy(&c);
    echo_stop(&e);
}

/* ---- hostile peers ------------------------------------------------------------------------ */

static int raw_connect(const char *ep) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    psg_codec_copy_text(a.sun_path, sizeof a.sun_path, ep + 6);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void head(uint8_t *h, uint32_t len, uint8_t flags) {
    memset(h, 0, 8);
    memcpy(h, &len, 4); /* little-endian host */
    h[4] = flags;
}

static bool raw_hello(int fd) {
    uint8_t m[8 + 24];
    head(m, 24, 0);
    memcpy(m + 8, "psgrstr1", 8);
    for (int i = 0; i < 16; i++) m[16 + i] = (uint8_t)(0xa0 + i);
    return write(fd, m, sizeof m) == (ssize_t)sizeof m;
}

/* Whether the server closed fd within 3 s (what it sent before is read and dropped). */
static bool closed_by_server(int fd) {
    char buf[4096];
    for (int64_t t0 = psg_codec_now_ms(); psg_codec_now_ms() - t0 < 3000;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t got = read(fd, buf, sizeof buf);
            if (got <= 0) return true;
        }
    }
    return false;
}

static void test_hostile(void) {
    echo_t e;
    CHECK(echo_start(&e, "hostile") == 0);
    psg_client_t *good = psg_client_new(e.endpoint, NULL);
    psg_tensor_t *t = psg_test_patterned(PSG_DT_F32, psg_shape_1d(1000), 7);
    CHECK(good && t);
    uint8_t h[8];
    /* no hello: bytes that are no frame head */
    int fd = raw_connect(e.endpoint);
    CHECK(fd >= 0 && write(fd, "GET / HTTP/1.1\r\n\r\n", 18) == 18 && closed_by_server(fd));
    close(fd);
    CHECK(echoed(good, t, 1));
    /* a hello of the wrong size, a wrong magic */
    fd = raw_connect(e.endpoint);
    head(h, 3, 0);
    CHECK(fd >= 0 && write(fd, h, 8) == 8 && write(fd, "abc", 3) == 3 && closed_by_server(fd));
    close(fd);
    CHECK(echoed(good, t, 2));
    /* after a hello: a head with unknown flags; a frame over the limit */
    uint8_t flags[] = {0x02, 0x01};
    uint32_t lens[] = {4, (uint32_t)PSG_WIRE_MAX_FRAME + 1};
    for (int i = 0; i < 2; i++) {
        fd = raw_connect(e.endpoint);
        head(h, lens[i], flags[i]);
        if (i == 1) h[4] = 0;
        CHECK(fd >= 0 && raw_hello(fd) && write(fd, h, 8) == 8 && closed_by_server(fd));
        close(fd);
        CHECK(echoed(good, t, 3 + i));
    }
    /* after a hello: a whole frame that is no message: answered with an error, kept open */
    fd = raw_connect(e.endpoint);
    head(h, 11, 0);
    CHECK(fd >= 0 && raw_hello(fd) && write(fd, h, 8) == 8 && write(fd, "not msgpack", 11) == 11);
    char buf[4096] = {0};
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK(poll(&p, 1, 3000) == 1);
    ssize_t got = read(fd, buf, sizeof buf - 1);
    CHECK(got > 8);
    CHECK(memmem(buf, (size_t)got, "rejected the message", 20));
    close(fd);
    /* after a hello: a frame placed in an arena never passed; an arena without its
     * descriptor; an arena that is no sealed memfd */
    uint8_t placed[8 + 16] = {0};
    head(placed, 16, 0x02);
    placed[8] = 64;
    placed[16] = 10;
    fd = raw_connect(e.endpoint);
    CHECK(fd >= 0 && raw_hello(fd) && write(fd, placed, sizeof placed) == (ssize_t)sizeof placed &&
          closed_by_server(fd));
    close(fd);
    uint8_t arena[8 + 8] = {0};
    head(arena, 8, 0x04);
    arena[8 + 2] = 0x10; /* 1 MiB */
    fd = raw_connect(e.endpoint);
    CHECK(fd >= 0 && raw_hello(fd) && write(fd, arena, sizeof arena) == (ssize_t)sizeof arena &&
          closed_by_server(fd));
    close(fd);
    fd = raw_connect(e.endpoint);
    int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
    CHECK(fd >= 0 && unsealed >= 0 && ftruncate(unsealed, 1 << 20) == 0 && raw_hello(fd));
    struct iovec iov = {arena, sizeof arena};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl = {{0}};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &unsealed, sizeof(int));
    CHECK(sendmsg(fd, &mh, 0) == (ssize_t)sizeof arena && closed_by_server(fd));
    close(unsealed);
    close(fd);
    CHECK(echoed(good, t, 6));
    fd = raw_connect(e.endpoint);
    CHECK(fd >= 0 && raw_hello(fd));
    /* half a frame, then gone */
    head(h, 1000, 0);
    CHECK(write(fd, h, 8) == 8 && write(fd, "part", 4) == 4);
    close(fd);
    CHECK(echoed(good, t, 5));
    psg_server_stats_t st = psg_server_stats(e.server);
    CHECK(st.rejected >= 1 && st.dropped >= 7);
    psg_tensor_destroy(&t);
    psg_client_destroy(&good);
    echo_stop(&e);
}

/* At the cap (max_connections 2), two connections that never say hello: the oldest is closed
 * for a client that comes, which is served; with every connection past its hello, a new one
 * is refused. */
static void test_cap(void) {
    char ep[256];
    endpoint(ep, sizeof ep, "cap");
    psg_wire_opts_t o = psg_wire_opts_default();
    o.max_connections = 2;
    psg_server_t *s = psg_server_new(ep, &o);
    CHECK(s);
    int silent[2] = {raw_connect(ep), -1};
    usleep(20000);
    silent[1] = raw_connect(ep);
    CHECK(silent[0] >= 0 && silent[1] >= 0);
    psg_msg_t *got = NULL;
    CHECK(psg_server_recv(s, &got, 50) == 0); /* the server takes both */
    psg_client_t *c = psg_client_new(ep, &o);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "ping");
    CHECK(c && psg_client_send(c, &req, NULL) == 0);
    CHECK(psg_server_recv(s, &got, 5000) == 1);
    psg_msg_destroy(&got);
    CHECK(closed_by_server(silent[0]));
    CHECK(psg_server_stats(s).refused == 1);
    /* now both past their hello (the server reads it first): a third is refused */
    CHECK(raw_hello(silent[1]) && psg_server_recv(s, &got, 100) == 0);
    int third = raw_connect(ep);
    CHECK(third >= 0 && psg_server_recv(s, &got, 100) == 0 && closed_by_server(third));
    CHECK(psg_server_stats(s).refused == 2);
    close(third);
    close(silent[0]);
    close(silent[1]);
    psg_client_destroy(&c);
    psg_server_destroy(&s);
}

/* ---- losses, restarts, a path with no server ---------------------------------------------- */

static void test_lost_and_back(void) {
    char ep[256];
    endpoint(ep, sizeof ep, "lost");
    psg_wire_opts_t o = psg_wire_opts_default();
    o.peer_timeout_ms = 2000;
    psg_server_t *s = psg_server_new(ep, &o);
    psg_client_t *c = psg_client_new(ep, &o);
    CHECK(s && c);
    psg_msg_t *got = NULL, *m = NULL, *req = NULL;
    for (int i = 0; i < 2; i++) {
        req = psg_msg_new(PSG_MSG_REQUEST, "held");
        CHECK(psg_client_send(c, &req, NULL) == 0);
        CHECK(psg_server_recv(s, &got, 5000) == 1);
        psg_msg_destroy(&got);
    }
    psg_server_destroy(&s);
    /* the loss ends a wait without a deadline, naming the peer and the requests lost */
    CHECK(psg_client_recv(c, &m, -1) < 0 && !m);
    CHECK(psg_error_code() == PSG_ERR_UNAVAILABLE);
    CHECK(strstr(psg_error_message(), ep));
    CHECK(strstr(psg_error_message(), "lost the connection to the peer with 2 requests in flight"));
    /* a server back at the path: the same client's next call reaches it, as the same peer */
    s = psg_server_new(ep, &o);
    CHECK(s);
    req = psg_msg_new(PSG_MSG_REQUEST, "ping");
    CHECK(psg_client_send(c, &req, NULL) == 0);
    CHECK(psg_server_recv(s, &got, 5000) == 1);
    psg_route_t first = got->route;
    psg_msg_t *rep = psg_msg_new(PSG_MSG_REPLY, NULL);
    CHECK(psg_server_reply(s, got, &rep) == 0);
    psg_msg_destroy(&got);
    CHECK(psg_client_recv(c, &m, 5000) == 1);
    psg_msg_destroy(&m);
    /* a reset connects afresh with the same routing id: the server answers the new one */
    CHECK(psg_client_reset(c) == 0);
    req = psg_msg_new(PSG_MSG_REQUEST, "ping");
    CHECK(psg_client_send(c, &req, NULL) == 0);
    CHECK(psg_server_recv(s, &got, 5000) == 1);
    CHECK(got->route.len == first.len && !memcmp(got->route.id, first.id, first.len));
    rep = psg_msg_new(PSG_MSG_REPLY, NULL);
    CHECK(psg_server_reply(s, got, &rep) == 0);
    psg_msg_destroy(&got);
    CHECK(psg_client_recv(c, &m, 5000) == 1);
    psg_msg_destroy(&m);
    /* closed with nothing in flight: no error */
    psg_server_destroy(&s);
    CHECK(psg_client_recv(c, &m, 200) == 0 && !m);
    CHECK(psg_client_check(c) == 0);
    psg_client_destroy(&c);
}

static void test_no_server(void) {
    char ep[256];
    endpoint(ep, sizeof ep, "nobody");
    psg_wire_opts_t o = psg_wire_opts_default();
    o.timeout_ms = 200;
    psg_client_t *c = psg_client_new(ep, &o);
    CHECK(c && psg_client_fd(c) == -1);
    int64_t t0 = psg_codec_now_ms();
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "RunGraph");
    CHECK(psg_client_call(c, &req, -1) == NULL);
    int64_t took = psg_codec_now_ms() - t0;
    CHECK(took >= 150 && took < 2000);
    CHECK(strstr(psg_error_message(), "cannot reach the peer within 200 ms to send RunGraph"));
    CHECK(psg_error_code() == PSG_ERR_UNREACHABLE);
    int wake[2];
    CHECK(pipe(wake) == 0 && write(wake[1], "x", 1) == 1);
    CHECK(psg_client_wait_writable(c, wake[0], 60000) == 0);
    close(wake[0]);
    close(wake[1]);
    /* the server comes up later: a send waits for it */
    psg_server_t *s = psg_server_new(ep, NULL);
    CHECK(s);
    req = psg_msg_new(PSG_MSG_REQUEST, "late");
    CHECK(psg_client_send(c, &req, NULL) == 0);
    psg_msg_t *got = NULL;
    CHECK(psg_server_recv(s, &got, 5000) == 1 && got->op && !strcmp(got->op, "late"));
    psg_msg_destroy(&got);
    psg_server_destroy(&s);
    psg_client_destroy(&c);
}

/* psg_client_poll over stream clients: the one that has a reply, and a reply that comes
 * during the sleep. */
static void test_poll(void) {
    echo_t e;
    CHECK(echo_start(&e, "poll") == 0);
    psg_client_t *c[2] = {psg_client_new(e.endpoint, NULL), psg_client_new(e.endpoint, NULL)};
    CHECK(c[0] && c[1]);
    bool ready[2];
    CHECK(psg_client_poll(c, 2, ready, 50) == 0);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "later"), *m = NULL;
    CHECK(psg_client_send(c[1], &req, NULL) == 0);
    CHECK(psg_client_poll(c, 2, ready, 5000) == 1 && !ready[0] && ready[1]);
    CHECK(psg_client_recv(c[1], &m, 0) == 1);
    psg_msg_destroy(&m);
    CHECK(psg_client_recv(c[1], &m, 0) == 0);
    psg_client_destroy(&c[0]);
    psg_client_destroy(&c[1]);
    echo_stop(&e);
}

/* PSGRAPH_IPC=zmq: ipc:// on ZeroMQ's own transport, as before this one. */
static void test_zmq_ipc(void) {
    setenv("PSGRAPH_IPC", "zmq", 1);
    echo_t e;
    int rc = echo_start(&e, "zmq");
    psg_client_t *c = rc == 0 ? psg_client_new(e.endpoint, NULL) : NULL;
    psg_tensor_t *t = psg_test_patterned(PSG_DT_F32, psg_shape_1d(5000), 3);
    bool ok = c && psg_client_socket(c) != NULL && psg_client_fd(c) == -1 && echoed(c, t, 9);
    psg_tensor_destroy(&t);
    psg_client_destroy(&c);
    if (rc == 0) echo_stop(&e);
    unsetenv("PSGRAPH_IPC");
    CHECK(rc == 0 && ok);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"round_trip", test_round_trip},
        {"frames_cached", test_frames_cached},
        {"clients_at_once", test_clients_at_once},
        {"arena_full", test_arena_full},
        {"hostile", test_hostile},
        {"cap", test_cap},
        {"lost_and_back", test_lost_and_back},
        {"no_server", test_no_server},
        {"poll", test_poll},
        {"zmq_ipc", test_zmq_ipc},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = failures;
        tests[i].fn();
        printf("%s %s\n", failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    rmdir(dir);
    psg_buffer_cache_trim();
    return failures ? 1 : 0;
}
