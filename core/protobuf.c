/* Protocol buffers written by hand (core/protobuf.h). */
#include "core/protobuf.h"

#include <stdlib.h>
#include <string.h>

void psg_pb_bytes(psg_pb_t *p, const void *d, size_t n) {
    if (p->oom || n == 0) return;
    if (p->len + n > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + n) cap *= 2;
        uint8_t *q = realloc(p->b, cap);
        if (!q) {
            p->oom = true;
            return;
        }
        p->b = q;
        p->cap = cap;
    }
    memcpy(p->b + p->len, d, n);
    p->len += n;
}

void psg_pb_varint(psg_pb_t *p, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    psg_pb_bytes(p, tmp, (size_t)n);
}

void psg_pb_fixed(psg_pb_t *p, uint64_t v, int nbytes) {
    uint8_t tmp[8];
    for (int i = 0; i < nbytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    psg_pb_bytes(p, tmp, (size_t)nbytes);
}

void psg_pb_tag(psg_pb_t *p, int field, int wire) {
    psg_pb_varint(p, (uint64_t)field << 3 | (uint64_t)wire);
}

void psg_pb_len_field(psg_pb_t *p, int field, const void *d, size_t n) {
    psg_pb_tag(p, field, PSG_PB_LEN);
    psg_pb_varint(p, n);
    psg_pb_bytes(p, d, n);
}

size_t psg_pb_varint_len(uint64_t v) {
    size_t k = 1;
    while (v > 0x7f) v >>= 7, k++;
    return k;
}
