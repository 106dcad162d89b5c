/* Wire version 2's one-frame messages: small tensors (each under PSG_WIRE_INLINE_BYTES,
 * that many in all) and a small body travel inside the header's frame; larger tensors keep
 * frames of their own. Checks the frames a message becomes, and round trips through a real
 * server and client (same thread: ZeroMQ's I/O threads carry the bytes), byte for byte. */
#include "net/codec.h"
#include "psgraph/wire.h"
#include "tests/tensor_pattern.h"

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

static void add(psg_msg_t *m, const char *name, psg_dtype_t dt, psg_shape_t shape, unsigned seed) {
    psg_tensor_t *t = psg_test_patterned(dt, shape, seed);
    psg_msg_add_tensor(m, name, t);
    psg_tensor_destroy(&t);
}

/* How many ZeroMQ frames m becomes (no route: a DEALER's request). */
static int frames_of(const psg_msg_t *m) {
    psg_wire_opts_t o = psg_wire_opts_default();
    psg_codec_out_t out = {0};
    if (psg_codec_encode(m, NULL, &o, &out) < 0) return -1;
    int n = out.n;
    psg_codec_out_clear(&out);
    return n;
}

static void test_frames(void) {
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "RunGraph");
    CHECK(frames_of(m) == 1);
    add(m, "scalar", PSG_DT_F32, psg_shape_scalar(), 1);
    add(m, "ids", PSG_DT_I64, psg_shape_1d(100), 2);
    CHECK(psg_msg_set_body(m, "writer 7", 8) == 0);
    CHECK(frames_of(m) == 1); /* all of it inline */
    add(m, "big", PSG_DT_F32, psg_shape_1d(1 << 18), 3);
    CHECK(frames_of(m) == 2); /* the 1 MiB tensor keeps its frame (zero-copy) */
    psg_msg_destroy(&m);

    /* 4096 bytes in all: two tensors of 1500 inline, the third in a frame; one of exactly
     * PSG_WIRE_INLINE_BYTES never inline; a body that no longer fits in its own frame. */
    m = psg_msg_new(PSG_MSG_REPLY, NULL);
    for (int i = 0; i < 3; i++) add(m, NULL, PSG_DT_U8, psg_shape_1d(1500), 4 + (unsigned)i);
    CHECK(frames_of(m) == 2);
    add(m, NULL, PSG_DT_U8, psg_shape_1d(PSG_WIRE_INLINE_BYTES), 8);
    CHECK(frames_of(m) == 3);
    char body[1200] = {0};
    CHECK(psg_msg_set_body(m, body, sizeof body) == 0);
    CHECK(frames_of(m) == 4);
    psg_msg_destroy(&m);
}

/* Sends m (kept) from c to s, answers it with its own tensors, body and key; the reply. */
static psg_msg_t *bounce(psg_server_t *s, psg_client_t *c, psg_msg_t *m) {
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "echo");
    for (int i = 0; i < m->ntensors; i++) psg_msg_add_tensor(req, m->names[i], m->tensors[i]);
    if (m->body) req->body = psg_buffer_ref(m->body);
    if (m->key) psg_msg_set_key(req, m->key);
    uint64_t id;
    if (psg_client_send(c, &req, &id) < 0) return NULL;
    psg_msg_t *got = NULL;
    if (psg_server_recv(s, &got, 10000) != 1) return NULL;
    psg_msg_t *rep = psg_msg_new(PSG_MSG_REPLY, NULL);
    for (int i = 0; i < got->ntensors; i++) psg_msg_add_tensor(rep, got->names[i], got->tensors[i]);
    if (got->body) rep->body = psg_buffer_ref(got->body);
    if (got->key) psg_msg_set_key(rep, got->key);
    int rc = psg_server_reply(s, got, &rep);
    psg_msg_destroy(&got);
    if (rc < 0) return NULL;
    /* the server's thread sends queued replies from its receive loop */
    for (int i = 0; i < 100; i++) {
        psg_msg_t *out = NULL;
        int r = psg_client_recv(c, &out, 20);
        if (r == 1) return out;
        if (r < 0) return NULL;
        psg_msg_t *none = NULL;
        if (psg_server_recv(s, &none, 0) == 1) psg_msg_destroy(&none);
    }
    return NULL;
}

static void test_round_trip(void) {
    psg_server_t *s = psg_server_new("tcp://127.0.0.1:*", NULL);
    CHECK(s);
    psg_client_t *c = psg_client_new(psg_server_endpoint(s), NULL);
    CHECK(c);
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, NULL);
    /* odd sizes, so the next tensor's offset is rounded up; every dtype's alignment */
    add(m, "u8", PSG_DT_U8, psg_shape_1d(3), 1);
    add(m, "f64", PSG_DT_F64, psg_shape_2d(2, 3), 2);
    add(m, NULL, PSG_DT_BOOL, psg_shape_1d(5), 3);
    add(m, "i64", PSG_DT_I64, psg_shape_scalar(), 4);
    add(m, "empty", PSG_DT_F32, psg_shape_1d(0), 5);
    add(m, "f16", PSG_DT_F16, psg_shape_1d(7), 6);
    add(m, "big", PSG_DT_F32, psg_shape_1d(40000), 7); /* a frame of its own */
    CHECK(psg_msg_set_body(m, "a body\n", 7) == 0);
    for (int round = 0; round < 20; round++) { /* the frame lands at varied addresses */
        psg_msg_t *rep = bounce(s, c, m);
        CHECK(rep && rep->kind == PSG_MSG_REPLY && rep->ntensors == m->ntensors);
        for (int i = 0; i < m->ntensors; i++) {
            const psg_tensor_t *a = m->tensors[i], *b = rep->tensors[i];
            CHECK(a->dtype == b->dtype && psg_shape_equal(&a->shape, &b->shape));
            CHECK(memcmp(a->data, b->data, psg_tensor_nbytes(a)) == 0);
            CHECK((m->names[i] == NULL) == (rep->names[i] == NULL));
            CHECK(!m->names[i] || strcmp(m->names[i], rep->names[i]) == 0);
            CHECK((uintptr_t)b->data % psg_dtype_size(b->dtype) == 0);
        }
        /* the small ones are views of one buffer (the frame, or one copy of it) */
        CHECK(rep->tensors[0]->buf == rep->tensors[1]->buf);
        CHECK(rep->tensors[6]->buf != rep->tensors[0]->buf);
        CHECK(rep->body && rep->body->size == 7 && memcmp(rep->body->data, "a body\n", 7) == 0);
        psg_msg_destroy(&rep);
    }
    psg_msg_destroy(&m);

    /* A header frame over ZeroMQ's 8 KiB receive batch (a 4096-byte key and 4096 bytes of
     * inline tensors) gets a message of its own, at an aligned address: the inline tensors
     * are then views of the frame itself, no copy (its buffer owns the ZeroMQ message). */
    m = psg_msg_new(PSG_MSG_REQUEST, NULL);
    add(m, "a", PSG_DT_F32, psg_shape_1d(1000), 8);
    add(m, "b", PSG_DT_I64, psg_shape_1d(12), 9);
    char key[PSG_WIRE_MAX_KEY + 1];
    memset(key, 'k', PSG_WIRE_MAX_KEY);
    key[PSG_WIRE_MAX_KEY] = 0;
    psg_msg_set_key(m, key);
    int wrapped = 0;
    for (int round = 0; round < 5; round++) {
        psg_msg_t *rep = bounce(s, c, m);
        CHECK(rep && rep->ntensors == 2);
        for (int i = 0; i < 2; i++)
            CHECK(memcmp(m->tensors[i]->data, rep->tensors[i]->data,
                         psg_tensor_nbytes(m->tensors[i])) == 0);
        wrapped += rep->tensors[0]->buf->free_fn != NULL; /* psgraph's own allocator: NULL */
        psg_msg_destroy(&rep);
    }
    CHECK(wrapped > 0);
    psg_msg_destroy(&m);
    psg_client_destroy(&c);
    psg_server_destroy(&s);
}

int main(void) {
    test_frames();
    printf("%s frames\n", failures ? "FAIL" : "ok  ");
    int before = failures;
    test_round_trip();
    printf("%s round_trip\n", failures == before ? "ok  " : "FAIL");
    psg_buffer_cache_trim();
    return failures ? 1 : 0;
}
