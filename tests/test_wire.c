/* Tests of the wire (net/): real sockets on 127.0.0.1 with ephemeral ports. Round trips of
 * tensors byte for byte, hostile input to a live server, timeouts, lost connections,
 * reconnects, replies from other threads. Not a test of the task server (ps/), which has its
 * own. */
#include "net/codec.h"
#include "psgraph/wire.h"
#include "tests/tensor_pattern.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdatomic.h>
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

/* ---- an echo server on its own thread ---------------------------------------------- */

typedef struct {
    psg_wire_opts_t opts;
    pthread_t thread;
    atomic_int ready; /* 1: up, -1: failed */
    atomic_bool stop;
    psg_server_t *server;
    char endpoint[256];
    int port;
} echo_t;

typedef struct {
    psg_server_t *server;
    psg_msg_t stub; /* route and id of the request */
} later_t;

static void *later_main(void *arg) {
    later_t *l = arg;
    psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, NULL);
    psg_msg_set_key(r, "from another thread");
    psg_server_reply(l->server, &l->stub, &r);
    return NULL;
}

static void echo_handle(echo_t *e, psg_msg_t *req, pthread_t *later_thread, later_t *later,
                        bool *later_started) {
    psg_server_t *s = e->server;
    const char *op = req->op ? req->op : "";
    if (strcmp(op, "echo") == 0) {
        psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, "echo");
        psg_msg_set_key(r, req->key);
        r->step = req->step;
        if (req->body) r->body = psg_buffer_ref(req->body);
        for (int i = 0; i < req->ntensors; i++)
            psg_msg_add_tensor(r, req->names[i], req->tensors[i]);
        psg_server_reply(s, req, &r);
    } else if (strcmp(op, "ack") == 0) {
        psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, NULL);
        psg_server_reply(s, req, &r);
    } else if (strcmp(op, "recv") == 0) {
        psg_server_reply_error(s, req, "unknown rendezvous key \"%s\"", req->key ? req->key : "");
    } else if (strcmp(op, "later") == 0 && !*later_started) {
        later->server = s;
        later->stub.route = req->route;
        later->stub.id = req->id;
        *later_started = pthread_create(later_thread, NULL, later_main, later) == 0;
    } else if (strcmp(op, "silent") == 0) {
        /* no reply: the client must time out */
    } else {
        psg_server_reply_error(s, req, "unknown op \"%s\"", op);
    }
}

static void *echo_main(void *arg) {
    echo_t *e = arg;
    e->server = psg_server_new("tcp://127.0.0.1:*", &e->opts);
    if (!e->server) {
        fprintf(stderr, "echo server: %s\n", psg_error_message());
        atomic_store(&e->ready, -1);
        return NULL;
    }
    snprintf(e->endpoint, sizeof e->endpoint, "%s", psg_server_endpoint(e->server));
    e->port = psg_server_port(e->server);
    atomic_store(&e->ready, 1);
    pthread_t later_thread;
    later_t later = {0};
    bool later_started = false;
    while (!atomic_load(&e->stop)) {
        psg_msg_t *req = NULL;
        int r = psg_server_recv(e->server, &req, 20);
        if (r < 0) {
            fprintf(stderr, "echo server: %s\n", psg_error_message());
            break;
        }
        if (r == 0) continue;
        echo_handle(e, req, &later_thread, &later, &later_started);
        psg_msg_destroy(&req);
    }
    if (later_started) pthread_join(later_thread, NULL);
    psg_server_destroy(&e->server);
    return NULL;
}

static int echo_start(echo_t *e, const psg_wire_opts_t *opts) {
    memset(e, 0, sizeof *e);
    e->opts = opts ? *opts : psg_wire_opts_default();
    if (pthread_create(&e->thread, NULL, echo_main, e) != 0) return -1;
    while (atomic_load(&e->ready) == 0) zclock_sleep(1);
    return atomic_load(&e->ready) == 1 ? 0 : -1;
}

static void echo_stop(echo_t *e) {
    atomic_store(&e->stop, true);
    pthread_join(e->thread, NULL);
}

/* ---- helpers ------------------------------------------------------------------------- */

/* ---- round trips ---------------------------------------------------------------------- */

static void test_round_trip(void) {
    echo_t e;
    CHECK(echo_start(&e, NULL) == 0);
    CHECK(e.port > 0);
    psg_client_t *c = psg_client_new(e.endpoint, NULL);
    CHECK(c);
    struct {
        psg_dtype_t dt;
        psg_shape_t shape;
    } cases[] = {
        {PSG_DT_F32, {0, {0}}}, /* scalar */
        {PSG_DT_F32, {1, {0}}}, /* empty */
        {PSG_DT_F64, {2, {3, 5}}},
        {PSG_DT_I32, {1, {1000}}},
        {PSG_DT_I64, {3, {2, 3, 17}}},
        {PSG_DT_U8, {1, {(1 << 20) + 3}}}, /* 1 MB, zero-copy frame */
        {PSG_DT_BF16, {1, {7}}},
        {PSG_DT_F16, {2, {100, 100}}},
        {PSG_DT_BOOL, {1, {9}}},
        {PSG_DT_F32, {2, {1024, 4096}}},     /* 16 MB: whole */
        {PSG_DT_F32, {1, {(16 << 20) + 1}}}, /* 64 MB + 4 bytes: 17 chunks of 4 MB */
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        psg_tensor_t *t = psg_test_patterned(cases[i].dt, cases[i].shape, (unsigned)i);
        CHECK(t);
        psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "echo");
        CHECK(psg_msg_add_tensor(req, "x", t) == 0);
        CHECK(psg_msg_set_key(req, "edge/x;0") == 0);
        req->step = -42 - i;
        psg_msg_t *rep = psg_client_call(c, &req, 20000);
        CHECK(req == NULL);
        CHECK(rep);
        CHECK(rep->kind == PSG_MSG_REPLY);
        CHECK(rep->ntensors == 1);
        CHECK(rep->names[0] && strcmp(rep->names[0], "x") == 0);
        CHECK(psg_test_same_tensor(rep->tensors[0], t));
        CHECK(rep->key && strcmp(rep->key, "edge/x;0") == 0);
        CHECK(rep->step == -42 - i);
        CHECK(((uintptr_t)rep->tensors[0]->data % psg_dtype_size(t->dtype)) == 0);
        psg_msg_destroy(&rep);
        psg_tensor_destroy(&t);
    }

    /* Several tensors, inline and chunked mixed, and a body, in one message; 1 MB chunks
     * on the way there (the last one of 1 byte), whole tensors on the way back. */
    psg_wire_opts_t small = psg_wire_opts_default();
    small.chunk_above = small.chunk_bytes = 1 << 20;
    psg_client_destroy(&c);
    c = psg_client_new(e.endpoint, &small);
    psg_tensor_t *a = psg_test_patterned(PSG_DT_F32, psg_shape_1d(3), 1);
    psg_tensor_t *b = psg_test_patterned(PSG_DT_F32, psg_shape_1d(3 << 20), 2); /* 12 MB, chunked */
    psg_tensor_t *cc = psg_test_patterned(PSG_DT_I64, psg_shape_2d(2, 2), 3);
    psg_tensor_t *d = psg_test_patterned(PSG_DT_U8, psg_shape_1d((5 << 20) + 1), 4); /* chunked */
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "echo");
    CHECK(psg_msg_add_tensor(req, "a", a) == 0 && psg_msg_add_tensor(req, NULL, b) == 0 &&
          psg_msg_add_tensor(req, "c", cc) == 0 && psg_msg_add_tensor(req, "d", d) == 0);
    CHECK(psg_msg_set_body(req, "graph bytes\0with a NUL", 22) == 0);
    psg_msg_t *rep = psg_client_call(c, &req, 20000);
    CHECK(rep && rep->ntensors == 4);
    CHECK(psg_test_same_tensor(rep->tensors[0], a) && psg_test_same_tensor(rep->tensors[1], b) &&
          psg_test_same_tensor(rep->tensors[2], cc) && psg_test_same_tensor(rep->tensors[3], d));
    CHECK(rep->names[1] == NULL && psg_msg_tensor(rep, "d") == rep->tensors[3]);
    CHECK(rep->body && rep->body->size == 22 &&
          memcmp(rep->body->data, "graph bytes\0with a NUL", 22) == 0);
    /* The 1 MB-and-up inline frames are used in place: their buffer belongs to ZeroMQ. */
    psg_msg_destroy(&rep);
    psg_tensor_destroy(&a);
    psg_tensor_destroy(&b);
    psg_tensor_destroy(&cc);
    psg_tensor_destroy(&d);
    psg_client_destroy(&c);
    echo_stop(&e);
}

/* A received large frame is used in place, not copied. */
static void test_zero_copy(void) {
    echo_t e;
    CHECK(echo_start(&e, NULL) == 0);
    psg_client_t *c = psg_client_new(e.endpoint, NULL);
    psg_tensor_t *t = psg_test_patterned(PSG_DT_F32, psg_shape_1d(1 << 18), 9); /* 1 MB */
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "echo");
    psg_msg_add_tensor(req, "x", t);
    /* The sender keeps the tensor: the reference travels with the frame. */
    CHECK(atomic_load(&t->buf->refcount) == 1);
    psg_msg_t *rep = psg_client_call(c, &req, 5000);
    CHECK(rep && psg_test_same_tensor(rep->tensors[0], t));
    CHECK(rep->tensors[0]->buf->free_fn != NULL); /* owned by a zmq message */
    psg_msg_destroy(&rep);
    psg_tensor_destroy(&t);
    psg_client_destroy(&c);
    echo_stop(&e);
}

static void test_error_reply_and_async(void) {
    echo_t e;
    CHECK(echo_start(&e, NULL) == 0);
    psg_client_t *c = psg_client_new(e.endpoint, NULL);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "recv");
    psg_msg_set_key(req, "step 3: w/grad");
    CHECK(psg_client_call(c, &req, 5000) == NULL);
    CHECK(strstr(psg_error_message(), "unknown rendezvous key \"step 3: w/grad\""));
    CHECK(strstr(psg_error_message(), e.endpoint));

    /* A reply sent by another thread than the server's. */
    req = psg_msg_new(PSG_MSG_REQUEST, "later");
    psg_msg_t *rep = psg_client_call(c, &req, 5000);
    CHECK(rep && rep->key && strcmp(rep->key, "from another thread") == 0);
    psg_msg_destroy(&rep);

    /* Pipelined requests: every reply comes back once, with its id. */
    uint64_t ids[16];
    int seen[16] = {0};
    for (int i = 0; i < 16; i++) {
        req = psg_msg_new(PSG_MSG_REQUEST, "echo");
        req->step = i;
        CHECK(psg_client_send(c, &req, &ids[i]) == 0);
    }
    for (int i = 0; i < 16; i++) {
        CHECK(psg_client_recv(c, &rep, 5000) == 1);
        CHECK(rep->step >= 0 && rep->step < 16 && rep->id == ids[rep->step]);
        seen[rep->step]++;
        psg_msg_destroy(&rep);
    }
    for (int i = 0; i < 16; i++) CHECK(seen[i] == 1);
    CHECK(psg_client_recv(c, &rep, 50) == 0); /* nothing more */
    psg_client_destroy(&c);
    echo_stop(&e);
}

/* ---- hostile input --------------------------------------------------------------------- */

typedef struct {
    zsock_t *zs;
    void *sock;
    psg_codec_rx_t *rx;
} raw_t;

static int raw_open(raw_t *r, const char *endpoint) {
    r->zs = zsock_new(ZMQ_DEALER);
    if (!r->zs) return -1;
    r->sock = zsock_resolve(r->zs);
    zsock_set_linger(r->zs, 0);
    psg_wire_opts_t o = psg_wire_opts_default();
    r->rx = psg_codec_rx_new(&o);
    return zmq_connect(r->sock, endpoint);
}

static void raw_close(raw_t *r) {
    zsock_destroy(&r->zs);
    psg_codec_rx_destroy(&r->rx);
}

/* Sends frames as one multipart message. */
static void raw_send(raw_t *r, int n, const void **data, const size_t *size) {
    for (int i = 0; i < n; i++) zmq_send(r->sock, data[i], size[i], i + 1 < n ? ZMQ_SNDMORE : 0);
}

/* The next error reply within 3 s, or NULL. */
static psg_msg_t *raw_reply(raw_t *r, int timeout_ms) {
    int64_t deadline = psg_codec_now_ms() + timeout_ms;
    for (;;) {
        psg_msg_t *m = NULL;
        uint64_t id;
        psg_route_t route;
        char peer[64];
        psg_rx_result_t res =
            psg_codec_rx_read(r->rx, r->sock, false, &m, &id, &route, peer, sizeof peer);
        if (res == PSG_RX_MSG) return m;
        if (res != PSG_RX_AGAIN && res != PSG_RX_NONE) return NULL;
        int64_t left = psg_codec_left(deadline);
        if (left == 0) return NULL;
        psg_codec_poll(r->sock, -1, left);
    }
}

static msgpack_sbuffer sb;
static msgpack_packer pk;
static void pk_reset(void) {
    msgpack_sbuffer_clear(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
}
static void pk_str(const char *s) {
    msgpack_pack_str(&pk, strlen(s));
    msgpack_pack_str_body(&pk, s, strlen(s));
}
/* Starts a header map of n fields with v, k=1 and id; the caller packs n - 3 more. */
static void pk_head(int n, uint64_t id) {
    pk_reset();
    msgpack_pack_map(&pk, (size_t)n);
    pk_str("v");
    msgpack_pack_uint32(&pk, PSG_WIRE_VERSION);
    pk_str("k");
    msgpack_pack_uint32(&pk, PSG_MSG_REQUEST);
    pk_str("id");
    msgpack_pack_uint64(&pk, id);
}
/* One tensor descriptor inside "t". */
static void pk_tensor(const char *dtype, int rank, const int64_t *dims, uint64_t nbytes,
                      bool chunked) {
    msgpack_pack_array(&pk, 5);
    pk_str("x");
    pk_str(dtype);
    msgpack_pack_array(&pk, (size_t)rank);
    for (int i = 0; i < rank; i++) msgpack_pack_int64(&pk, dims[i]);
    msgpack_pack_uint64(&pk, nbytes);
    if (chunked)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
}
/* A header with one tensor. */
static void pk_one(uint64_t id, const char *dtype, int rank, const int64_t *dims, uint64_t nbytes,
                   bool chunked) {
    pk_head(5, id);
    pk_str("op");
    pk_str("echo");
    pk_str("t");
    msgpack_pack_array(&pk, 1);
    pk_tensor(dtype, rank, dims, nbytes, chunked);
}

/* The server answers the bad message with an error containing `want`, with id `id`, and a
 * good request right after still works. */
static void expect_rejected(raw_t *r, psg_client_t *good, uint64_t id, const char *want,
                            const char *what) {
    psg_msg_t *m = raw_reply(r, 3000);
    if (!m || m->kind != PSG_MSG_ERROR || !m->error || !strstr(m->error, want) || m->id != id) {
        fprintf(stderr, "%s: expected an error with \"%s\" and id %llu, got %s (id %llu)\n", what,
                want, (unsigned long long)id, m && m->error ? m->error : "nothing",
                m ? (unsigned long long)m->id : 0ULL);
        failures++;
    }
    psg_msg_destroy(&m);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "ack");
    psg_msg_t *rep = psg_client_call(good, &req, 3000);
    if (!rep) {
        fprintf(stderr, "%s: the server stopped serving: %s\n", what, psg_error_message());
        failures++;
    }
    psg_msg_destroy(&rep);
}

/* Hostile input against one echo server: each part sends its kind through the raw socket
 * r, checks the rejection, and checks that the well-behaved client `good` is still served. */

static void hostile_random_headers(raw_t *r, psg_client_t *good) {
    const void *f[1];
    size_t z[1];
    /* Random bytes as a header, 200 times. */
    uint32_t x = 12345;
    for (int round = 0; round < 200; round++) {
        uint8_t junk[256];
        size_t len = 1 + round % 200;
        for (size_t i = 0; i < len; i++) {
            x = x * 1664525u + 1013904223u;
            junk[i] = (uint8_t)(x >> 24);
        }
        f[0] = junk;
        z[0] = len;
        raw_send(r, 1, f, z);
        psg_msg_t *m = raw_reply(r, 3000);
        CHECK(m && m->kind == PSG_MSG_ERROR && m->error && strstr(m->error, "rejected"));
        psg_msg_destroy(&m);
    }
    {
        psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "ack");
        psg_msg_t *rep = psg_client_call(good, &req, 3000);
        CHECK(rep);
        psg_msg_destroy(&rep);
    }
}

/* Malformed tensors in an otherwise valid header. */
static void hostile_bad_tensors(raw_t *r, psg_client_t *good) {
    const void *f[4];
    size_t z[4];
    uint8_t payload[64] = {0};
    /* A truncated header: a valid one cut in the middle. */
    int64_t d4[] = {4};
    pk_one(7, "f32", 1, d4, 16, false);
    f[0] = sb.data;
    z[0] = sb.size - 5;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 7, "bad header", "truncated header");

    /* A truncated frame: the header says 16 bytes, the frame has 12. */
    pk_one(8, "f32", 1, d4, 16, false);
    f[0] = sb.data, z[0] = sb.size, f[1] = payload, z[1] = 12;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 8, "tensor 0: frame of 12 bytes, header says 16", "short frame");

    /* A missing frame. */
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 8, "message has 1 frames, its header announces 2", "missing frame");

    /* An unknown dtype. */
    pk_one(9, "f99", 1, d4, 16, false);
    f[0] = sb.data, z[0] = sb.size, f[1] = payload, z[1] = 16;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 9, "unknown dtype \"f99\"", "bad dtype");

    /* A resource handle may not cross a process. */
    pk_one(10, "resource", 1, d4, 32, false);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 10, "unknown dtype", "resource dtype");

    /* A byte count that does not match dtype and shape. */
    pk_one(11, "f32", 1, d4, 12, false);
    f[0] = sb.data, z[0] = sb.size, f[1] = payload, z[1] = 12;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 11, "byte count 12 does not match dtype f32 and shape [4]",
                    "byte count");

    /* Negative and overflowing dims. */
    int64_t neg[] = {-4};
    pk_one(12, "f32", 1, neg, 16, false);
    f[0] = sb.data, z[0] = sb.size, f[1] = payload, z[1] = 16;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 12, "dim 0 is -4", "negative dim");
    int64_t huge[] = {(int64_t)1 << 40, (int64_t)1 << 40, 1 << 20};
    pk_one(13, "f32", 3, huge, 16, false);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 13, "does not match", "overflowing shape");
    int64_t rank9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    pk_one(14, "f32", 9, rank9, 4, false);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 14, "rank 9", "rank over the limit");
}

/* Headers over a limit, of an unknown kind, or with bad fields. */
static void hostile_bad_headers(raw_t *r, psg_client_t *good) {
    const void *f[4];
    size_t z[4];
    uint8_t payload[64] = {0};
    /* An oversized message: announced, never sent. */
    int64_t big[] = {(int64_t)1 << 30};
    pk_one(15, "f32", 1, big, (uint64_t)4 << 30, true);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 15, "over the limit of 268435456 bytes", "oversized message");

    /* An unknown header field, a wrong version, a chunk of a message never started. */
    pk_head(4, 16);
    pk_str("surprise");
    msgpack_pack_nil(&pk);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 16, "unknown header field \"surprise\"", "unknown field");
    pk_reset();
    msgpack_pack_map(&pk, 3);
    pk_str("v"), msgpack_pack_uint32(&pk, 99), pk_str("k"), msgpack_pack_uint32(&pk, 1);
    pk_str("id"), msgpack_pack_uint64(&pk, 17);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 17, "wire version 99", "wrong version");
    pk_reset();
    psg_codec_pack_chunk(&sb, 18, 0, 0);
    f[0] = sb.data, z[0] = sb.size, f[1] = payload, z[1] = 16;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 18, "chunk of unknown message id 18", "stray chunk");

    /* A key with a NUL inside, a key over the limit. */
    pk_head(4, 19);
    pk_str("key");
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "a\0b", 3);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 19, "key contains a NUL byte", "NUL in key");
    static char longkey[PSG_WIRE_MAX_KEY + 2];
    memset(longkey, 'k', PSG_WIRE_MAX_KEY + 1);
    pk_head(4, 20);
    pk_str("key");
    pk_str(longkey);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 20, "key is 4097 bytes", "long key");

    /* An incarnation that is not an unsigned integer; one on a chunk. */
    pk_head(4, 21);
    pk_str("inc");
    pk_str("new");
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 21, "header field \"inc\" is not an unsigned integer",
                    "string incarnation");
    pk_head(4, 22);
    pk_str("inc");
    msgpack_pack_int64(&pk, -5);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 22, "header field \"inc\" is not an unsigned integer",
                    "negative incarnation");
}

/* Chunks out of order, unfinished and misdirected messages, frame counts. */
/* Wire version 2: a version-1 peer is refused naming both versions; inline bytes (a tensor
 * placed 2, a body "bi") must fill the header's frame exactly. */
static void hostile_versions_inline(raw_t *r, psg_client_t *good) {
    const void *f[2];
    size_t z[2];
    uint8_t payload[64] = {0};
    const int64_t one[1] = {1};
    /* A version-1 peer (its tensor in a frame of its own, the flag a bool): refused by name. */
    pk_reset();
    msgpack_pack_map(&pk, 5);
    pk_str("v"), msgpack_pack_uint32(&pk, 1), pk_str("k"), msgpack_pack_uint32(&pk, 1);
    pk_str("id"), msgpack_pack_uint64(&pk, 24);
    pk_str("op"), pk_str("echo"), pk_str("t");
    msgpack_pack_array(&pk, 1);
    pk_tensor("f32", 1, one, 4, false);
    f[0] = sb.data, z[0] = sb.size, f[1] = payload, z[1] = 4;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 24, "wire version 1, this peer speaks 2", "version 1 peer");
    /* Inline bytes (placement 2) that do not fill the header frame, or overrun it. */
    pk_head(5, 25);
    pk_str("op"), pk_str("echo"), pk_str("t");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 5);
    pk_str("x"), pk_str("f32"), msgpack_pack_array(&pk, 1), msgpack_pack_int64(&pk, 1);
    msgpack_pack_uint64(&pk, 4), msgpack_pack_uint32(&pk, PSG_PLACE_INLINE);
    uint8_t frame0[256];
    size_t map_len = sb.size, at0 = psg_codec_inline_at(map_len);
    memset(frame0, 0, sizeof frame0);
    memcpy(frame0, sb.data, map_len);
    f[0] = frame0, z[0] = at0 + 2;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 25, "4 bytes inline, the header frame has 2 left", "short inline");
    f[0] = frame0, z[0] = at0 + 4, f[1] = payload, z[1] = 4; /* the tensor's bytes twice */
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 25, "message has 2 frames, its header announces 1", "inline + frame");
    f[0] = frame0, z[0] = at0 + 12;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 25, "its inline bytes end at", "inline, bytes over");
    pk_head(5, 26);
    pk_str("op"), pk_str("echo"), pk_str("bi"), msgpack_pack_true(&pk);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 26, "\"bi\" without a body", "inline body, no body");
}

static void hostile_bad_messages(raw_t *r, psg_client_t *good) {
    const void *f[4];
    size_t z[4];
    uint8_t payload[64] = {0};
    /* A chunk out of order, and a chunk bigger than what is left. */
    int64_t d8m[] = {2 << 20};
    pk_one(21, "f32", 1, d8m, 8 << 20, true);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    pk_reset();
    psg_codec_pack_chunk(&sb, 21, 0, 4096);
    f[0] = sb.data, z[0] = sb.size, f[1] = payload, z[1] = 64;
    raw_send(r, 2, f, z);
    expect_rejected(r, good, 21, "expected tensor 0 at offset 0", "chunk out of order");

    /* A message started and never finished: it expires with an error, memory returned. */
    pk_one(22, "f32", 1, d8m, 8 << 20, true);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 22, "incomplete after 300 ms", "unfinished message");

    /* A reply sent to a server. */
    pk_reset();
    msgpack_pack_map(&pk, 3);
    pk_str("v"), msgpack_pack_uint32(&pk, PSG_WIRE_VERSION), pk_str("k"),
        msgpack_pack_uint32(&pk, PSG_MSG_REPLY);
    pk_str("id"), msgpack_pack_uint64(&pk, 23);
    f[0] = sb.data, z[0] = sb.size;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 23, "not replies", "reply to a server");

    /* An empty message and one of 5000 frames. */
    f[0] = "", z[0] = 0;
    raw_send(r, 1, f, z);
    expect_rejected(r, good, 0, "bad header", "empty frame");
    for (int i = 0; i < 5000; i++) zmq_send(r->sock, "x", 1, i + 1 < 5000 ? ZMQ_SNDMORE : 0);
    expect_rejected(r, good, 0, "more than", "too many frames");
}

static void test_hostile(void) {
    echo_t e;
    psg_wire_opts_t o = psg_wire_opts_default();
    o.max_msg_bytes = 256 << 20;
    o.timeout_ms = 300; /* partial messages expire fast */
    CHECK(echo_start(&e, &o) == 0);
    psg_client_t *good = psg_client_new(e.endpoint, NULL);
    raw_t r;
    CHECK(raw_open(&r, e.endpoint) == 0);
    msgpack_sbuffer_init(&sb);
    hostile_random_headers(&r, good);
    hostile_bad_tensors(&r, good);
    hostile_bad_headers(&r, good);
    hostile_bad_messages(&r, good);
    hostile_versions_inline(&r, good);
    psg_server_stats_t st = psg_server_stats(e.server);
    CHECK(st.rejected == 200 + 22 + 5 && st.received >= 20);

    /* A frame over PSG_WIRE_MAX_FRAME: ZeroMQ drops the connection before allocating it;
     * the server goes on serving others. */
    size_t huge_len = PSG_WIRE_MAX_FRAME + 1;
    void *huge_frame = calloc(1, huge_len);
    CHECK(huge_frame);
    zmq_send(r.sock, huge_frame, huge_len, 0);
    free(huge_frame);
    psg_msg_t *m = raw_reply(&r, 500);
    CHECK(m == NULL);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "ack");
    psg_msg_t *rep = psg_client_call(good, &req, 3000);
    CHECK(rep);
    psg_msg_destroy(&rep);

    msgpack_sbuffer_destroy(&sb);
    raw_close(&r);
    psg_client_destroy(&good);
    echo_stop(&e);
}

/* The header parser on random and mutated input, in process: no crash, no leak, no
 * read out of bounds (run under ASan in CI). */
static void test_header_fuzz(void) {
    psg_codec_header_t *h = malloc(sizeof *h);
    CHECK(h);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "RunGraph");
    psg_tensor_t *t = psg_test_patterned(PSG_DT_F32, psg_shape_2d(3, 4), 1);
    psg_msg_add_tensor(m, "w", t);
    psg_msg_set_key(m, "k");
    m->id = 99;
    m->step = -5;
    uint8_t place[1] = {PSG_PLACE_FRAME};
    msgpack_sbuffer good;
    msgpack_sbuffer_init(&good);
    psg_codec_pack_header(&good, m, place, false);
    CHECK(psg_codec_decode_header(good.data, good.size, h) == 0);
    CHECK(h->id == 99 && h->step == -5 && h->ntensors == 1 && h->t[0].nbytes == 48);
    CHECK(h->op_len == 8 && memcmp(h->op, "RunGraph", 8) == 0);
    /* the same tensor inline: the map, zero padding to 8, its 48 bytes */
    uint8_t inl[512];
    msgpack_sbuffer map;
    msgpack_sbuffer_init(&map);
    place[0] = PSG_PLACE_INLINE;
    psg_codec_pack_header(&map, m, place, false);
    size_t at = psg_codec_inline_at(map.size), inl_len = at + 48;
    CHECK(inl_len <= sizeof inl);
    memset(inl, 0, sizeof inl);
    memcpy(inl, map.data, map.size);
    memcpy(inl + at, t->data, 48);
    CHECK(psg_codec_decode_header(inl, inl_len, h) == 0);
    CHECK(h->ninline == 1 && h->t[0].place == PSG_PLACE_INLINE && h->t[0].at == at);
    CHECK(psg_codec_decode_header(inl, inl_len - 1, h) < 0); /* one byte short */
    CHECK(strstr(psg_error_message(), "inline"));
    CHECK(psg_codec_decode_header(inl, inl_len + 1, h) < 0); /* one byte over */
    uint8_t buf[512];
    uint32_t x = 7;
    int accepted = 0;
    for (int round = 0; round < 200000; round++) {
        const uint8_t *src = round % 2 ? inl : (const uint8_t *)good.data;
        size_t len = round % 2 ? inl_len : good.size;
        memcpy(buf, src, len);
        int flips = 1 + round % 4;
        for (int k = 0; k < flips; k++) {
            x = x * 1664525u + 1013904223u;
            buf[(x >> 8) % len] = (uint8_t)(x >> 24);
        }
        if (round % 3 == 0) len = (x >> 4) % (len + 1);
        accepted += psg_codec_decode_header(buf, len, h) == 0;
    }
    CHECK(accepted < 200000);
    msgpack_sbuffer_destroy(&map);
    msgpack_sbuffer_destroy(&good);
    psg_tensor_destroy(&t);
    psg_msg_destroy(&m);
    free(h);
}

/* ---- dead peers, reconnects, limits ---------------------------------------------------- */

static void test_dead_peer(void) {
    /* A port held by a socket that never accepts nor speaks, so that no other test of a
     * parallel suite can take it (a freed port could be): no handshake ever completes. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
    char ep[256];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
    psg_wire_opts_t o = psg_wire_opts_default();
    o.timeout_ms = 200;
    psg_client_t *c = psg_client_new(ep, &o);
    CHECK(c);
    int64_t t0 = psg_codec_now_ms();
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "RunGraph");
    CHECK(psg_client_call(c, &req, -1) == NULL);
    int64_t took = psg_codec_now_ms() - t0;
    CHECK(took >= 150 && took < 2000);
    CHECK(strstr(psg_error_message(), ep));
    CHECK(strstr(psg_error_message(), "cannot reach the peer within 200 ms to send RunGraph"));
    CHECK(psg_error_code() == PSG_ERR_UNREACHABLE); /* not UNAVAILABLE: nothing was lost */
    /* waiting to be able to send: until the deadline, or until the wake fd is readable */
    CHECK(psg_client_wait_writable(c, -1, 200) < 0);
    CHECK(strstr(psg_error_message(), "cannot reach the peer within 200 ms (is it up?)"));
    CHECK(psg_error_code() == PSG_ERR_UNREACHABLE);
    /* a deadline already past (remote_rendezvous asks with 0 ms left): one poll, the error */
    CHECK(psg_client_wait_writable(c, -1, 0) < 0);
    CHECK(strstr(psg_error_message(), "cannot reach the peer within 0 ms (is it up?)"));
    int wake[2];
    CHECK(pipe(wake) == 0 && write(wake[1], "x", 1) == 1);
    CHECK(psg_client_wait_writable(c, wake[0], 60000) == 0);
    close(wake[0]);
    close(wake[1]);
    psg_client_destroy(&c);
    if (fd >= 0) close(fd);

    /* A live peer that never answers. */
    echo_t e;
    CHECK(echo_start(&e, NULL) == 0);
    c = psg_client_new(e.endpoint, &o);
    req = psg_msg_new(PSG_MSG_REQUEST, "silent");
    CHECK(psg_client_call(c, &req, 300) == NULL);
    CHECK(strstr(psg_error_message(), "no reply to silent within 300 ms"));
    CHECK(strstr(psg_error_message(), e.endpoint));
    CHECK(psg_error_code() == PSG_ERR_TIMEOUT); /* TF's DeadlineExceeded: the peer is up */
    /* The connection was reset: the next call works and gets its own reply. */
    req = psg_msg_new(PSG_MSG_REQUEST, "echo");
    req->step = 5;
    psg_msg_t *rep = psg_client_call(c, &req, 3000);
    CHECK(rep && rep->step == 5);
    psg_msg_destroy(&rep);
    psg_client_destroy(&c);
    echo_stop(&e);
}

/* With heartbeats (a peer timeout), a lost connection fails what is in flight at once, naming
 * the peer and how many requests were lost; a loss with nothing in flight is no error; a call
 * that timed out resets the connection and the count; a wait without a deadline waits. */
static void test_lost_connection(void) {
    psg_wire_opts_t o = psg_wire_opts_default();
    o.peer_timeout_ms = 2000;
    /* two requests the server holds, then it closes */
    psg_server_t *s = psg_server_new("tcp://127.0.0.1:0", &o);
    CHECK(s);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", psg_server_endpoint(s));
    psg_client_t *c = psg_client_new(ep, &o);
    CHECK(c);
    psg_msg_t *got = NULL, *m = NULL, *req = NULL;
    for (int i = 0; i < 2; i++) {
        req = psg_msg_new(PSG_MSG_REQUEST, "held");
        CHECK(psg_client_send(c, &req, NULL) == 0);
        CHECK(psg_server_recv(s, &got, 5000) == 1);
        psg_msg_destroy(&got);
    }
    psg_server_destroy(&s);
    /* waited for without a deadline: the loss itself ends the wait (the connection's events
     * are polled beside its socket) */
    CHECK(psg_client_recv(c, &m, -1) < 0 && !m);
    CHECK(psg_error_code() == PSG_ERR_UNAVAILABLE);
    CHECK(strstr(psg_error_message(), ep));
    CHECK(strstr(psg_error_message(), "lost the connection to the peer with 2 requests in flight"));
    psg_client_destroy(&c);
    /* a call answered, then the server closes with nothing in flight: no error */
    s = psg_server_new("tcp://127.0.0.1:0", &o);
    CHECK(s);
    c = psg_client_new(psg_server_endpoint(s), &o);
    req = psg_msg_new(PSG_MSG_REQUEST, "ping");
    CHECK(psg_client_send(c, &req, NULL) == 0);
    CHECK(psg_server_recv(s, &got, 5000) == 1);
    psg_msg_t *rep = psg_msg_new(PSG_MSG_REPLY, NULL);
    CHECK(psg_server_reply(s, got, &rep) == 0);
    psg_msg_destroy(&got);
    CHECK(psg_client_recv(c, &m, 5000) == 1 && m);
    psg_msg_destroy(&m);
    psg_server_destroy(&s);
    CHECK(psg_client_recv(c, &m, 300) == 0 && !m);
    psg_client_destroy(&c);
    /* a call the server never answers times out and resets the connection: a loss after it
     * counts only the request sent since */
    s = psg_server_new("tcp://127.0.0.1:0", &o);
    CHECK(s);
    c = psg_client_new(psg_server_endpoint(s), &o);
    req = psg_msg_new(PSG_MSG_REQUEST, "unanswered");
    CHECK(psg_client_call(c, &req, 300) == NULL);
    CHECK(strstr(psg_error_message(), "no reply to unanswered within 300 ms"));
    req = psg_msg_new(PSG_MSG_REQUEST, "held");
    CHECK(psg_client_send(c, &req, NULL) == 0);
    for (int i = 0; i < 2 && psg_server_recv(s, &got, 5000) == 1; i++) {
        bool held = got->op && !strcmp(got->op, "held");
        psg_msg_destroy(&got);
        if (held) break;
    }
    psg_server_destroy(&s);
    CHECK(psg_client_recv(c, &m, 10000) < 0);
    CHECK(strstr(psg_error_message(), "lost the connection to the peer with 1 request in flight"));
    psg_client_destroy(&c);
    /* no deadline (-1): the reply that comes is waited for */
    echo_t e;
    CHECK(echo_start(&e, &o) == 0);
    c = psg_client_new(e.endpoint, &o);
    req = psg_msg_new(PSG_MSG_REQUEST, "later");
    CHECK(psg_client_send(c, &req, NULL) == 0);
    CHECK(psg_client_recv(c, &m, -1) == 1 && m && m->key && !strcmp(m->key, "from another thread"));
    psg_msg_destroy(&m);
    psg_client_destroy(&c);
    echo_stop(&e);
}

/* A send to a peer whose connection went down fails once it stayed down for the peer timeout
 * (not the send's own timeout: a worker's note to a dead ps held its step 30 s), naming the
 * peer, nothing sent and the connection kept; a note to it is not sent and not waited for, a
 * note to a live peer is; the peer back at its address is reached again. */
/* Holds the TCP port of endpoint ep ("tcp://127.0.0.1:P") bound but not listening, so that a
 * connection to it is refused and no other test's server, binding port 0 in parallel, takes it
 * (that made a send to the lost peer succeed once in the full suite); -1 if it cannot. */
static int hold_port(const char *ep) {
    const char *colon = strrchr(ep, ':');
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 200; i++) { /* the server's listener closes in ZeroMQ's I/O thread */
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (fd < 0) return -1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        zclock_sleep(10);
    }
    return -1;
}

static void test_send_to_lost_peer(void) {
    psg_wire_opts_t o = psg_wire_opts_default();
    o.peer_timeout_ms = 2000;
    o.timeout_ms = 120000; /* what a send below would wait for a connection before */
    psg_server_t *s = psg_server_new("tcp://127.0.0.1:0", &o);
    CHECK(s);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", psg_server_endpoint(s));
    psg_client_t *c = psg_client_new(ep, &o);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "hello"), *got = NULL;
    CHECK(c && psg_client_send(c, &req, NULL) == 0); /* waits for the connection */
    CHECK(psg_server_recv(s, &got, 5000) == 1);
    psg_msg_destroy(&got);
    req = psg_msg_new(PSG_MSG_REQUEST, "note");
    CHECK(psg_client_send_note(c, &req) == 1 && !req);
    CHECK(psg_server_recv(s, &got, 5000) == 1 && got->op && !strcmp(got->op, "note"));
    psg_msg_destroy(&got);
    psg_server_destroy(&s);
    int held = hold_port(ep);
    CHECK(held >= 0);
    /* the loss seen (the two requests never answered): the connection is down from now */
    CHECK(psg_client_recv(c, &got, 10000) < 0 && !got);
    CHECK(strstr(psg_error_message(), "lost the connection to the peer with 2 requests"));
    /* ZeroMQ's I/O thread takes the dead connection's pipe away on its own time: a send before
     * that goes into it (and is lost, reported as above); in the full suite it did once */
    zclock_sleep(300);
    req = psg_msg_new(PSG_MSG_REQUEST, "RunGraph");
    CHECK(psg_client_send(c, &req, NULL) < 0 && !req);
    CHECK(psg_error_code() == PSG_ERR_UNAVAILABLE);
    CHECK(strstr(psg_error_message(), ep));
    CHECK(strstr(psg_error_message(),
                 "cannot reach the peer to send RunGraph: its connection has been down for the "
                 "peer timeout (2000 ms)"));
    req = psg_msg_new(PSG_MSG_REQUEST, "CleanupStep");
    CHECK(psg_client_send_note(c, &req) == 0 && !req);
    /* the ones not sent are not in flight: no loss to report for them */
    CHECK(psg_client_check(c) == 0);
    if (held >= 0) close(held);
    for (int i = 0; i < 200 && !(s = psg_server_new(ep, &o)); i++) zclock_sleep(10);
    CHECK(s);
    /* the first send's look reaches it: it connects afresh, not after ZeroMQ's reconnects
     * backed off to 1 s (a look is 100 ms: that send failed in most runs) */
    req = psg_msg_new(PSG_MSG_REQUEST, "again");
    CHECK(s && psg_client_send(c, &req, NULL) == 0);
    CHECK(psg_server_recv(s, &got, 5000) == 1 && got->op && !strcmp(got->op, "again"));
    psg_msg_destroy(&got);
    psg_server_destroy(&s);
    psg_client_destroy(&c);
}

static void test_limits_and_api(void) {
    CHECK(psg_server_new("tcp://256.1.1.1:1", NULL) == NULL);
    CHECK(strstr(psg_error_message(), "256.1.1.1"));
    CHECK(psg_client_new("udp://x:1", NULL) == NULL);
    CHECK(strstr(psg_error_message(), "udp://x:1"));
    CHECK(psg_client_new("nohostport", NULL) == NULL);
    CHECK(psg_client_new("tcp://nohost", NULL) == NULL); /* no port: the socket refuses it */
    CHECK(strstr(psg_error_message(), "cannot connect to tcp://nohost"));
    psg_server_t *a = psg_server_new("tcp://127.0.0.1:*", NULL);
    CHECK(a);
    char ep[256];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", psg_server_port(a));
    CHECK(psg_server_new(ep, NULL) == NULL); /* busy port */
    CHECK(strstr(psg_error_message(), "cannot bind") && strstr(psg_error_message(), ep));
    psg_server_destroy(&a);
    psg_server_destroy(&a); /* NULL-safe */
    psg_client_destroy(NULL);
    psg_msg_destroy(NULL);

    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "x");
    psg_tensor_t *t = psg_tensor_new(PSG_DT_RESOURCE, &(psg_shape_t){0, {0}});
    if (t) CHECK(psg_msg_add_tensor(m, "h", t) < 0);
    psg_tensor_destroy(&t);
    /* A message over max_msg_bytes is refused by the sender. */
    psg_wire_opts_t o = psg_wire_opts_default();
    o.max_msg_bytes = 1000;
    t = psg_tensor_zeros(PSG_DT_F32, &(psg_shape_t){1, {1000}});
    CHECK(psg_msg_add_tensor(m, "big", t) == 0);
    psg_codec_out_t out = {0};
    CHECK(psg_codec_encode(m, NULL, &o, &out) < 0);
    CHECK(strstr(psg_error_message(), "over the limit of 1000"));
    CHECK(out.n == 0);
    /* The frames of a message keep its tensors alive until sent or cleared. */
    o = psg_wire_opts_default();
    o.chunk_bytes = o.chunk_above = 1024;
    CHECK(psg_codec_encode(m, NULL, &o, &out) == 0);
    CHECK(out.n ==
          1 + 4 * 2); /* header, then 4 chunks (3 of 1024 bytes, 1 of 928) as [header, data] */
    psg_msg_destroy(&m);
    psg_codec_out_clear(&out);
    psg_tensor_destroy(&t);
}

int main(void) {
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"round_trip", test_round_trip},
        {"zero_copy", test_zero_copy},
        {"error_reply_and_async", test_error_reply_and_async},
        {"hostile", test_hostile},
        {"header_fuzz", test_header_fuzz},
        {"dead_peer", test_dead_peer},
        {"lost_connection", test_lost_connection},
        {"send_to_lost_peer", test_send_to_lost_peer},
        {"limits_and_api", test_limits_and_api},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = failures;
        tests[i].fn();
        printf("%s %s\n", failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    psg_buffer_cache_trim();
    return failures ? 1 : 0;
}
