/* libFuzzer: every task-server request decoder, through the protocol table (ps/protocol.c).
 * The input picks the request (first byte) and fills the fields a message carries: key,
 * step, body and i64 tensors named as RegisterGraph's; what decodes is encoded again and
 * must decode to the same request type. Replies are decoded too. */
#include "ps/protocol.h"

#include <stdlib.h>
#include <string.h>

/* Takes a length-prefixed piece of the input (one byte of length). */
static const uint8_t *take(const uint8_t **p, size_t *left, size_t *n) {
    if (*left == 0) return NULL;
    *n = **p;
    (*p)++, (*left)--;
    if (*n > *left) *n = *left;
    const uint8_t *at = *p;
    *p += *n, *left -= *n;
    return at;
}

static void add_ids(psg_msg_t *m, const char *name, const uint8_t *d, size_t n, int cols) {
    int64_t rows = (int64_t)(n / 8 / (size_t)cols);
    psg_shape_t s = cols == 2 ? psg_shape_2d(rows, 2) : psg_shape_1d(rows);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_I64, &s);
    if (!t) return;
    memcpy(t->data, d, (size_t)rows * (size_t)cols * 8);
    psg_msg_add_tensor(m, name, t);
    psg_tensor_destroy(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const psg_proto_entry_t *e = psg_proto_entry((psg_req_type_t)(data[0] % PSG_REQ_COUNT));
    uint8_t flags = data[1];
    const uint8_t *p = data + 2;
    size_t left = size - 2, n = 0;
    psg_msg_t *m =
        psg_msg_new(flags & 1 ? PSG_MSG_REPLY : PSG_MSG_REQUEST, flags & 2 ? "Nope" : e->op);
    const uint8_t *key = take(&p, &left, &n);
    if (key && !(flags & 4)) {
        char *k = malloc(n + 1);
        memcpy(k, key, n);
        k[n] = 0;
        psg_msg_set_key(m, k);
        free(k);
    }
    if (left >= 8) {
        memcpy(&m->step, p, 8);
        p += 8, left -= 8;
    }
    const uint8_t *ids = take(&p, &left, &n);
    if (ids && (flags & 8))
        add_ids(m, flags & 16 ? "targets" : "feeds", ids, n, flags & 16 ? 1 : 2);
    if (ids && (flags & 32)) add_ids(m, "fetches", ids, n, 2);
    if (left || (flags & 64)) psg_msg_set_body(m, p, left);
    if (m->kind == PSG_MSG_REQUEST) {
        psg_req_t r;
        if (psg_req_decode(m, &r) == 0) {
            psg_msg_t *again = psg_req_encode(&r);
            psg_req_t r2;
            if (again && psg_req_decode(again, &r2) == 0) {
                if (r2.type != r.type) abort();
                psg_req_clear(&r2);
            }
            psg_msg_destroy(&again);
            psg_req_clear(&r);
        }
    } else {
        psg_rep_t rep;
        psg_rep_decode(m, e->type, &rep);
    }
    psg_msg_destroy(&m);
    return 0;
}
