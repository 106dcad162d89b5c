/* Framing of wire messages: a psg_msg_t becomes ZeroMQ frames without copying tensor bytes,
 * large tensors become pipelined chunk messages, and received frames become a psg_msg_t
 * again (zero-copy where the frame is aligned, reassembled per sender otherwise).
 * Not the header format (net/header.c) and not the socket roles (server.c, client.c). */
#include "net/codec.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Below this many bytes a frame is copied: a zero-copy frame costs ZeroMQ an allocation
 * and an atomic refcount, more than a small memcpy. */
#define COPY_BELOW 32768
/* The most frames one ZeroMQ message may have: route, header, tensors, body. */
#define MAX_PARTS PSG_CODEC_MAX_PARTS
/* The most partial messages a receiver keeps. */
#define MAX_PENDING 1024

int64_t psg_codec_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t psg_codec_left(int64_t deadline) {
    if (deadline < 0) return -1;
    int64_t left = deadline - psg_codec_now_ms();
    return left > 0 ? left : 0;
}

int psg_codec_poll(void *sock, int fd, int64_t wait_ms) {
    zmq_pollitem_t items[2] = {{sock, 0, ZMQ_POLLIN, 0}, {NULL, fd, ZMQ_POLLIN, 0}};
    int rc = zmq_poll(items, fd >= 0 ? 2 : 1, wait_ms < 0 ? -1 : (long)wait_ms);
    if (rc < 0) {
        if (errno == EINTR) return 0;
        return psg_error_set("poll failed: %s", zmq_strerror(errno));
    }
    return rc > 0 ? ((items[0].revents & ZMQ_POLLIN) ? 1 : 0) |
                        ((items[1].revents & ZMQ_POLLIN) ? 2 : 0)
                  : 0;
}

int psg_codec_endpoint(const char *in, char *out, size_t size) {
    if (!in || !*in) return psg_error_set("empty endpoint");
    bool has_scheme = strstr(in, "://") != NULL;
    if (has_scheme && strncmp(in, "tcp://", 6) != 0 && strncmp(in, "ipc://", 6) != 0 &&
        strncmp(in, "inproc://", 9) != 0)
        return psg_error_set("endpoint \"%s\": only tcp://, ipc:// and inproc:// are supported",
                             in);
    if (!has_scheme && !strrchr(in, ':'))
        return psg_error_set("endpoint \"%s\" is not host:port", in);
    int n = snprintf(out, size, "%s%s", has_scheme ? "" : "tcp://", in);
    if (n < 0 || (size_t)n >= size) return psg_error_set("endpoint \"%.40s...\" is too long", in);
    return 0;
}

static pthread_once_t czmq_once = PTHREAD_ONCE_INIT;
static void czmq_init_once(void) {
    zsys_handler_set(NULL);
}
void psg_codec_init_czmq(void) {
    pthread_once(&czmq_once, czmq_init_once);
}

/* ---- sending ------------------------------------------------------------------------ */

static int out_reserve(psg_codec_out_t *out, int extra) {
    if (out->n + extra <= out->cap) return 0;
    int cap = out->cap ? out->cap * 2 : 8;
    while (cap < out->n + extra) cap *= 2;
    zmq_msg_t *p = realloc(out->parts, (size_t)cap * sizeof *p);
    if (!p) return psg_error_set("out of memory encoding a message");
    out->parts = p;
    bool *m = realloc(out->more, (size_t)cap * sizeof *m);
    if (!m) return psg_error_set("out of memory encoding a message");
    out->more = m;
    out->cap = cap;
    return 0;
}

static int out_copy(psg_codec_out_t *out, const void *data, size_t size, bool more) {
    if (out_reserve(out, 1) < 0) return -1;
    zmq_msg_t *p = &out->parts[out->n];
    if (zmq_msg_init_size(p, size) < 0) return psg_error_set("out of memory encoding a frame");
    if (size) memcpy(zmq_msg_data(p), data, size);
    out->more[out->n++] = more;
    return 0;
}

void psg_codec_free_buffer_ref(void *data, void *hint) {
    (void)data;
    psg_buffer_t *b = hint;
    psg_buffer_unref(&b);
}

/* A frame over `size` bytes of buf at `data`, holding a reference to buf until ZeroMQ is done. */
static int out_ref(psg_codec_out_t *out, psg_buffer_t *buf, void *data, size_t size, bool more) {
    if (size < COPY_BELOW) return out_copy(out, data, size, more);
    if (out_reserve(out, 1) < 0) return -1;
    zmq_msg_t *p = &out->parts[out->n];
    psg_buffer_ref(buf);
    if (zmq_msg_init_data(p, data, size, psg_codec_free_buffer_ref, buf) < 0) {
        psg_buffer_unref(&buf);
        return psg_error_set("out of memory encoding a frame");
    }
    out->more[out->n++] = more;
    return 0;
}

static int out_sbuf(psg_codec_out_t *out, msgpack_sbuffer *sb, bool more) {
    int rc = out_copy(out, sb->data, sb->size, more);
    msgpack_sbuffer_clear(sb);
    return rc;
}

/* Where each tensor travels: chunks above the chunk threshold; inline, in the header's frame,
 * while the small ones (and then the body) fit in PSG_WIRE_INLINE_BYTES in all; else a frame. */
static int check_outgoing(const psg_msg_t *m, const psg_wire_opts_t *o, uint8_t *place,
                          bool *body_inline) {
    if (m->kind <= PSG_MSG_INVALID || m->kind >= PSG_MSG_KIND_COUNT)
        return psg_error_set("cannot send a message of kind %d", (int)m->kind);
    if (m->ntensors < 0 || m->ntensors > PSG_WIRE_MAX_TENSORS)
        return psg_error_set("cannot send %d tensors", m->ntensors);
    if (m->op && strlen(m->op) > PSG_WIRE_MAX_OP)
        return psg_error_set("op name over %d bytes", PSG_WIRE_MAX_OP);
    if (m->key && strlen(m->key) > PSG_WIRE_MAX_KEY)
        return psg_error_set("key over %d bytes", PSG_WIRE_MAX_KEY);
    uint64_t total = m->body ? m->body->size : 0;
    if (m->body && m->body->size > PSG_WIRE_MAX_FRAME)
        return psg_error_set("body of %zu bytes is over the frame limit of %zu", m->body->size,
                             PSG_WIRE_MAX_FRAME);
    size_t above = o->chunk_above ? o->chunk_above : o->chunk_bytes,
           inline_left = PSG_WIRE_INLINE_BYTES;
    if (above == 0 || above > PSG_WIRE_MAX_FRAME) above = PSG_WIRE_MAX_FRAME;
    for (int i = 0; i < m->ntensors; i++) {
        const psg_tensor_t *t = m->tensors[i];
        if (!t || t->dtype <= PSG_DT_INVALID || t->dtype >= PSG_DT_COUNT ||
            t->dtype == PSG_DT_RESOURCE || !psg_shape_is_complete(&t->shape))
            return psg_error_set("tensor %d (%s) cannot cross the wire", i,
                                 m->names[i] ? m->names[i] : "unnamed");
        if (m->names[i] && strlen(m->names[i]) > PSG_WIRE_MAX_KEY)
            return psg_error_set("tensor %d: name over %d bytes", i, PSG_WIRE_MAX_KEY);
        size_t nb = psg_tensor_nbytes(t);
        place[i] = nb > above ? PSG_PLACE_CHUNKS : PSG_PLACE_FRAME;
        if (place[i] == PSG_PLACE_FRAME && nb < PSG_WIRE_INLINE_BYTES && nb <= inline_left) {
            place[i] = PSG_PLACE_INLINE;
            inline_left -= nb;
        }
        total += nb;
    }
    *body_inline = m->body && m->body->size > 0 && m->body->size <= inline_left;
    if (total > o->max_msg_bytes)
        return psg_error_set("message of %llu bytes is over the limit of %zu bytes",
                             (unsigned long long)total, o->max_msg_bytes);
    return 0;
}

/* The header frame: the msgpack map in sb, then the inline tensors (each at an aligned
 * offset, zero padding between) and the inline body. One copy of their bytes. */
static int out_header(psg_codec_out_t *out, msgpack_sbuffer *sb, const psg_msg_t *m,
                      const uint8_t *place, bool body_inline, bool more) {
    uint64_t size = sb->size;
    for (int i = 0; i < m->ntensors; i++)
        if (place[i] == PSG_PLACE_INLINE)
            size = psg_codec_inline_at(size) + psg_tensor_nbytes(m->tensors[i]);
    if (body_inline) size += m->body->size;
    if (size == sb->size) return out_sbuf(out, sb, more);
    if (out_reserve(out, 1) < 0) return -1;
    zmq_msg_t *p = &out->parts[out->n];
    if (zmq_msg_init_size(p, size) < 0) return psg_error_set("out of memory encoding a frame");
    char *d = zmq_msg_data(p);
    memcpy(d, sb->data, sb->size);
    uint64_t at = sb->size;
    for (int i = 0; i < m->ntensors; i++) {
        if (place[i] != PSG_PLACE_INLINE) continue;
        uint64_t to = psg_codec_inline_at(at);
        memset(d + at, 0, to - at);
        size_t nb = psg_tensor_nbytes(m->tensors[i]);
        if (nb) memcpy(d + to, m->tensors[i]->data, nb);
        at = to + nb;
    }
    if (body_inline) memcpy(d + at, m->body->data, m->body->size);
    out->more[out->n++] = more;
    msgpack_sbuffer_clear(sb);
    return 0;
}

int psg_codec_encode(const psg_msg_t *m, const psg_route_t *route, const psg_wire_opts_t *o,
                     psg_codec_out_t *out) {
    uint8_t place_small[16];
    uint8_t *place = m->ntensors <= 16 ? place_small : calloc((size_t)m->ntensors, 1);
    if (!place) return psg_error_set("out of memory encoding a message");
    int rc = -1;
    bool body_inline = false;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (check_outgoing(m, o, place, &body_inline) < 0) goto done;
    size_t chunk = o->chunk_bytes;
    if (chunk == 0 || chunk > PSG_WIRE_MAX_FRAME) chunk = PSG_WIRE_MAX_FRAME;
    int nframes = 0;
    for (int i = 0; i < m->ntensors; i++) nframes += place[i] == PSG_PLACE_FRAME;
    if (route && out_copy(out, route->id, route->len, true) < 0) goto done;
    psg_codec_pack_header(&sb, m, place, body_inline);
    /* an empty body travels as none */
    int after = nframes + (m->body && m->body->size > 0 && !body_inline);
    if (out_header(out, &sb, m, place, body_inline, after > 0) < 0) goto done;
    for (int i = 0; i < m->ntensors; i++) {
        if (place[i] != PSG_PLACE_FRAME) continue;
        psg_tensor_t *t = m->tensors[i];
        if (out_ref(out, t->buf, t->data, psg_tensor_nbytes(t), --after > 0) < 0) goto done;
    }
    if (m->body && m->body->size > 0 && !body_inline &&
        out_ref(out, m->body, m->body->data, m->body->size, false) < 0)
        goto done;
    for (int i = 0; i < m->ntensors; i++) {
        if (place[i] != PSG_PLACE_CHUNKS) continue;
        psg_tensor_t *t = m->tensors[i];
        size_t nb = psg_tensor_nbytes(t);
        for (size_t off = 0; off < nb; off += chunk) {
            size_t len = nb - off < chunk ? nb - off : chunk;
            if (route && out_copy(out, route->id, route->len, true) < 0) goto done;
            psg_codec_pack_chunk(&sb, m->id, (uint32_t)i, off);
            if (out_sbuf(out, &sb, true) < 0) goto done;
            if (out_ref(out, t->buf, (char *)t->data + off, len, false) < 0) goto done;
        }
    }
    rc = 0;
done:
    msgpack_sbuffer_destroy(&sb);
    if (place != place_small) free(place);
    if (rc < 0) psg_codec_out_clear(out);
    return rc;
}

/* Sends out's frames from `first` on, waiting for room; closes those it could not send (their
 * buffer references go; zmq_msg_send took the frames it sent). Empties out. */
static int send_frames_from(void *sock, psg_codec_out_t *out, int first) {
    int rc = 0, i = first;
    for (; i < out->n; i++) {
        if (zmq_msg_send(&out->parts[i], sock, out->more[i] ? ZMQ_SNDMORE : 0) < 0) {
            int e = errno;
            rc = psg_error_set("send failed: %s", e == EAGAIN ? "timed out" : zmq_strerror(e));
            errno = e;
            break;
        }
    }
    for (; i < out->n; i++) zmq_msg_close(&out->parts[i]);
    out->n = 0;
    return rc;
}

int psg_codec_send(void *sock, psg_codec_out_t *out) {
    return send_frames_from(sock, out, 0);
}

int psg_codec_try_send(void *sock, psg_codec_out_t *out) {
    if (out->n == 0) return psg_codec_send(sock, out) < 0 ? -1 : 1;
    /* once ZeroMQ took a message's first frame it takes the rest at once */
    if (zmq_msg_send(&out->parts[0], sock, ZMQ_DONTWAIT | (out->more[0] ? ZMQ_SNDMORE : 0)) < 0) {
        int e = errno;
        if (e == EAGAIN) return 0;
        psg_error_set("send failed: %s", zmq_strerror(e));
        errno = e;
        return -1;
    }
    zmq_msg_close(&out->parts[0]); /* sent: an empty message now */
    return send_frames_from(sock, out, 1) < 0 ? -1 : 1;
}

void psg_codec_out_clear(psg_codec_out_t *out) {
    for (int i = 0; i < out->n; i++) zmq_msg_close(&out->parts[i]);
    free(out->parts);
    free(out->more);
    memset(out, 0, sizeof *out);
}

/* ---- receiving ---------------------------------------------------------------------- */

typedef struct pending {
    psg_route_t route;
    uint64_t id;
    psg_msg_t *msg;
    bool *chunked; /* per tensor */
    int cur;       /* the chunked tensor being filled */
    uint64_t got;  /* bytes of it received so far */
    size_t bytes;  /* all chunked bytes, for the pending total */
    int64_t since; /* when the first part came */
    char peer[64];
    struct pending *next;
} pending_t;

struct psg_codec_rx {
    psg_wire_opts_t opts;
    psg_codec_header_t hdr;
    zmq_msg_t parts[MAX_PARTS];
    pending_t *pending;
    int npending;
    size_t pending_bytes;
};

psg_codec_rx_t *psg_codec_rx_new(const psg_wire_opts_t *o) {
    psg_codec_rx_t *rx = calloc(1, sizeof *rx);
    if (!rx) {
        psg_error_set("out of memory");
        return NULL;
    }
    rx->opts = *o;
    return rx;
}

static void pending_free(pending_t *p) {
    psg_msg_destroy(&p->msg);
    free(p->chunked);
    free(p);
}

static void pending_remove(psg_codec_rx_t *rx, pending_t *p) {
    for (pending_t **pp = &rx->pending; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            rx->npending--;
            rx->pending_bytes -= p->bytes;
            return;
        }
    }
}

void psg_codec_rx_destroy(psg_codec_rx_t **rxp) {
    if (!rxp || !*rxp) return;
    psg_codec_rx_t *rx = *rxp;
    *rxp = NULL;
    while (rx->pending) {
        pending_t *p = rx->pending;
        rx->pending = p->next;
        pending_free(p);
    }
    free(rx);
}

size_t psg_codec_rx_pending_bytes(const psg_codec_rx_t *rx) {
    return rx->pending_bytes;
}

static void free_zmq_msg(void *data, void *hint) {
    (void)data;
    zmq_msg_t *m = hint;
    zmq_msg_close(m);
    free(m);
}

static psg_buffer_t *frame_copy(const void *data, size_t size) {
    psg_buffer_t *b = psg_buffer_new(size);
    if (b && size) memcpy(b->data, data, size);
    return b;
}

/* A buffer over a received frame: the frame itself when it is aligned to `align` (it then
 * owns the ZeroMQ message), else a copy. */
static psg_buffer_t *frame_buffer(zmq_msg_t *part, size_t align) {
    size_t size = zmq_msg_size(part);
    void *data = zmq_msg_data(part);
    if (size >= COPY_BELOW && ((uintptr_t)data % align) == 0) {
        zmq_msg_t *heap = malloc(sizeof *heap);
        if (!heap) {
            psg_error_set("out of memory receiving a frame");
            return NULL;
        }
        zmq_msg_init(heap);
        zmq_msg_move(heap, part);
        psg_buffer_t *b = psg_buffer_wrap(zmq_msg_data(heap), size, free_zmq_msg, heap);
        if (!b) free_zmq_msg(NULL, heap);
        return b;
    }
    return frame_copy(data, size);
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static pending_t *pending_find(psg_codec_rx_t *rx, const psg_route_t *route, uint64_t id) {
    for (pending_t *p = rx->pending; p; p = p->next)
        if (p->id == id && p->route.len == route->len &&
            memcmp(p->route.id, route->id, route->len) == 0)
            return p;
    return NULL;
}

/* Advances p->cur past complete tensors; true when every chunked tensor is complete. */
static bool pending_advance(pending_t *p) {
    while (p->cur < p->msg->ntensors &&
           (!p->chunked[p->cur] || p->got == psg_tensor_nbytes(p->msg->tensors[p->cur]))) {
        p->cur++;
        p->got = 0;
    }
    return p->cur == p->msg->ntensors;
}

/* Checks a first part's frames against its header (their count and sizes, the total) and
 * that a message with chunks can be kept; *chunked_bytes: the bytes its chunks will bring. */
static int check_first(psg_codec_rx_t *rx, zmq_msg_t *parts, int n, const psg_route_t *route,
                       uint64_t *chunked_bytes) {
    psg_codec_header_t *h = &rx->hdr;
    int nframes = 0, nchunked = 0;
    uint64_t total = h->body;
    *chunked_bytes = 0;
    for (int i = 0; i < h->ntensors; i++) {
        total += h->t[i].nbytes;
        if (h->t[i].chunked) {
            nchunked++;
            *chunked_bytes += h->t[i].nbytes;
            if (h->t[i].nbytes == 0) return psg_error_set("tensor %d: chunked with 0 bytes", i);
        } else {
            nframes += h->t[i].place == PSG_PLACE_FRAME;
        }
    }
    if (total > rx->opts.max_msg_bytes)
        return psg_error_set("message of %llu bytes is over the limit of %zu bytes",
                             (unsigned long long)total, rx->opts.max_msg_bytes);
    int want = 1 + nframes + (h->body > 0 && !h->body_inline);
    if (n != want) return psg_error_set("message has %d frames, its header announces %d", n, want);
    for (int i = 0, f = 1; i < h->ntensors; i++) {
        if (h->t[i].place != PSG_PLACE_FRAME) continue;
        size_t got = zmq_msg_size(&parts[f++]);
        if (got != h->t[i].nbytes)
            return psg_error_set("tensor %d: frame of %zu bytes, header says %llu", i, got,
                                 (unsigned long long)h->t[i].nbytes);
    }
    if (h->body && !h->body_inline && zmq_msg_size(&parts[n - 1]) != h->body)
        return psg_error_set("body: frame of %zu bytes, header says %llu",
                             zmq_msg_size(&parts[n - 1]), (unsigned long long)h->body);
    if (nchunked) {
        if (rx->npending >= MAX_PENDING ||
            rx->pending_bytes + *chunked_bytes > rx->opts.max_msg_bytes)
            return psg_error_set("receiver busy: %d partial messages of %zu bytes pending",
                                 rx->npending, rx->pending_bytes);
        if (pending_find(rx, route, h->id))
            return psg_error_set("message id %llu is already being received",
                                 (unsigned long long)h->id);
    }
    return 0;
}

/* ZeroMQ keeps a frame of up to 33 bytes inside its message struct, where a move would
 * take it from under the header's pointers: such a frame is copied, never wrapped. */
#define WRAP_ABOVE 64

/* The buffer the inline tensors are views of: the header frame itself when its address suits
 * every dtype (the buffer then owns the ZeroMQ message: no copy), else one copy of it. The
 * frame's bytes keep their address when moved (WRAP_ABOVE), so h's pointers stay valid. */
static psg_buffer_t *inline_buffer(zmq_msg_t *frame) {
    size_t size = zmq_msg_size(frame);
    void *data = zmq_msg_data(frame);
    if (size <= WRAP_ABOVE || (uintptr_t)data % PSG_CODEC_INLINE_ALIGN != 0) {
        psg_buffer_t *b = psg_buffer_new(size);
        if (b) memcpy(b->data, data, size);
        return b;
    }
    zmq_msg_t *heap = malloc(sizeof *heap);
    if (!heap) {
        psg_error_set("out of memory receiving a frame");
        return NULL;
    }
    zmq_msg_init(heap);
    zmq_msg_move(heap, frame);
    if (zmq_msg_data(heap) != data) abort(); /* a ZeroMQ that moves large frames' bytes */
    psg_buffer_t *b = psg_buffer_wrap(data, size, free_zmq_msg, heap);
    if (!b) free_zmq_msg(NULL, heap);
    return b;
}

/* A message's first part: parts[0] is the header. */
static psg_rx_result_t take_first(psg_codec_rx_t *rx, zmq_msg_t *parts, int n,
                                  const psg_route_t *route, const psg_conn_t *conn,
                                  const char *peer, const char *peer_key, psg_msg_t **out) {
    psg_codec_header_t *h = &rx->hdr;
    uint64_t chunked_bytes;
    if (check_first(rx, parts, n, route, &chunked_bytes) < 0) return PSG_RX_BAD;
    int nchunked = 0;
    for (int i = 0; i < h->ntensors; i++) nchunked += h->t[i].chunked;
    psg_buffer_t *inl = NULL;

    psg_msg_t *m = psg_msg_new((psg_msg_kind_t)h->kind, NULL);
    if (!m) return PSG_RX_BAD;
    m->id = h->id;
    m->step = h->step;
    m->incarnation = h->incarnation;
    m->code = h->code;
    m->route = *route;
    m->conn = *conn;
    psg_codec_copy_text(m->peer, sizeof m->peer, peer);
    psg_codec_copy_text(m->peer_key, sizeof m->peer_key, peer_key);
    if ((h->op && !(m->op = dup_n(h->op, h->op_len))) ||
        (h->key && !(m->key = dup_n(h->key, h->key_len))) ||
        (h->err && !(m->error = dup_n(h->err, h->err_len)))) {
        psg_error_set("out of memory");
        goto oom;
    }
    if (h->body && h->body_inline &&
        !(m->body = frame_copy((const char *)zmq_msg_data(&parts[0]) + h->body_at, h->body)))
        goto oom;
    if (h->body && !h->body_inline && !(m->body = frame_buffer(&parts[n - 1], 1))) goto oom;
    if (h->ninline && !(inl = inline_buffer(&parts[0]))) goto oom;
    for (int i = 0, f = 1; i < h->ntensors; i++) {
        psg_codec_tdesc_t *d = &h->t[i];
        psg_tensor_t *t;
        if (d->chunked) {
            t = psg_tensor_new(d->dtype, &d->shape);
        } else if (d->place == PSG_PLACE_INLINE) {
            t = psg_tensor_from_buffer(d->dtype, &d->shape, inl, d->at);
        } else {
            psg_buffer_t *b = frame_buffer(&parts[f++], 8);
            t = b ? psg_tensor_from_buffer(d->dtype, &d->shape, b, 0) : NULL;
            psg_buffer_unref(&b);
        }
        if (!t) goto oom;
        char *name = h->names[i] ? dup_n(h->names[i], h->name_lens[i]) : NULL;
        int rc = (h->names[i] && !name) ? psg_error_set("out of memory")
                                        : psg_msg_add_tensor(m, NULL, t);
        psg_tensor_destroy(&t);
        if (rc < 0) {
            free(name);
            goto oom;
        }
        m->names[m->ntensors - 1] = name;
    }
    psg_buffer_unref(&inl);
    if (!nchunked) {
        *out = m;
        return PSG_RX_MSG;
    }
    pending_t *p = calloc(1, sizeof *p);
    if (!p || !(p->chunked = calloc((size_t)h->ntensors, sizeof *p->chunked))) {
        free(p);
        psg_error_set("out of memory");
        goto oom;
    }
    for (int i = 0; i < h->ntensors; i++) p->chunked[i] = h->t[i].chunked;
    p->route = *route;
    p->id = h->id;
    p->msg = m;
    p->bytes = chunked_bytes;
    p->since = psg_codec_now_ms();
    psg_codec_copy_text(p->peer, sizeof p->peer, peer);
    pending_advance(p);
    p->next = rx->pending;
    rx->pending = p;
    rx->npending++;
    rx->pending_bytes += p->bytes;
    return PSG_RX_NONE;
oom:
    /* A peer can declare sizes that cannot be allocated: its fault, not the socket's. */
    psg_buffer_unref(&inl);
    psg_msg_destroy(&m);
    psg_error_wrap("cannot allocate the message");
    return PSG_RX_BAD;
}

static psg_rx_result_t take_chunk(psg_codec_rx_t *rx, zmq_msg_t *parts, int n,
                                  const psg_route_t *route, psg_msg_t **out) {
    psg_codec_header_t *h = &rx->hdr;
    pending_t *p = pending_find(rx, route, h->id);
    if (!p)
        return psg_error_set("chunk of unknown message id %llu", (unsigned long long)h->id),
               PSG_RX_BAD;
    psg_rx_result_t bad = PSG_RX_BAD;
    if (n != 2) {
        psg_error_set("chunk has %d frames, not 2", n);
        goto drop;
    }
    if (h->ti != (uint32_t)p->cur || h->off != p->got) {
        psg_error_set("chunk of tensor %u at offset %llu, expected tensor %d at offset %llu", h->ti,
                      (unsigned long long)h->off, p->cur, (unsigned long long)p->got);
        goto drop;
    }
    psg_tensor_t *t = p->msg->tensors[p->cur];
    size_t len = zmq_msg_size(&parts[1]);
    size_t left = psg_tensor_nbytes(t) - p->got;
    if (len == 0 || len > left) {
        psg_error_set("chunk of %zu bytes for tensor %d, which has %zu bytes left", len, p->cur,
                      left);
        goto drop;
    }
    memcpy((char *)t->data + p->got, zmq_msg_data(&parts[1]), len);
    p->got += len;
    if (!pending_advance(p)) return PSG_RX_NONE;
    pending_remove(rx, p);
    *out = p->msg;
    p->msg = NULL;
    pending_free(p);
    return PSG_RX_MSG;
drop:
    pending_remove(rx, p);
    pending_free(p);
    return bad;
}

psg_rx_result_t psg_codec_rx_feed(psg_codec_rx_t *rx, zmq_msg_t *parts, int np, bool too_many,
                                  const psg_route_t *route, const psg_conn_t *conn,
                                  const char *peer, const char *key, psg_msg_t **out,
                                  uint64_t *bad_id) {
    psg_rx_result_t res = PSG_RX_BAD;
    *out = NULL;
    *bad_id = 0;
    if (too_many) {
        psg_error_set("message has more than %d frames", MAX_PARTS);
        goto done;
    }
    if (np < 1) {
        psg_error_set("message has no header frame");
        goto done;
    }
    if (psg_codec_decode_header(zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]), &rx->hdr) < 0) {
        *bad_id = rx->hdr.id;
        psg_error_wrap("bad header");
        goto done;
    }
    *bad_id = rx->hdr.id;
    if (rx->hdr.kind == PSG_CODEC_CHUNK)
        res = take_chunk(rx, parts, np, route, out);
    else
        res = take_first(rx, parts, np, route, conn, peer, key, out);
done:
    for (int i = 0; i < np; i++) zmq_msg_close(&parts[i]);
    return res;
}

psg_rx_result_t psg_codec_rx_read(psg_codec_rx_t *rx, void *sock, bool with_route, psg_msg_t **out,
                                  uint64_t *bad_id, psg_route_t *bad_route, char *bad_peer,
                                  size_t bad_peer_size) {
    int n = 0;
    bool more = true, too_many = false;
    *out = NULL;
    *bad_id = 0;
    bad_route->len = 0;
    while (more) {
        zmq_msg_t scratch;
        zmq_msg_t *part = n < MAX_PARTS ? &rx->parts[n] : &scratch;
        zmq_msg_init(part);
        if (zmq_msg_recv(part, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            int e = errno;
            zmq_msg_close(part);
            for (int i = 0; i < n; i++) zmq_msg_close(&rx->parts[i]);
            if (n == 0 && (e == EAGAIN || e == EINTR)) return PSG_RX_AGAIN;
            psg_error_set("receive failed: %s", zmq_strerror(e));
            return PSG_RX_FAIL;
        }
        more = zmq_msg_more(part);
        if (n < MAX_PARTS) {
            n++;
        } else {
            zmq_msg_close(part);
            too_many = true;
        }
    }
    /* a ROUTER's routing frame is made by the socket and has no metadata: the last frame's */
    const char *addr = zmq_msg_gets(&rx->parts[n > 0 ? n - 1 : 0], "Peer-Address");
    psg_codec_copy_text(bad_peer, bad_peer_size, addr ? addr : "unknown peer");
    /* the ZAP handler's answer for the connection (curve_guard.c): its key's name */
    const char *key = zmq_msg_gets(&rx->parts[n > 0 ? n - 1 : 0], "User-Id");
    psg_route_t route = {0};
    /* the connection it came by: ZeroMQ's descriptor (ZMQ_SRCFD) and its socket's inode */
    psg_conn_t conn = {.fd = with_route && n > 0 ? zmq_msg_get(&rx->parts[n - 1], ZMQ_SRCFD) : -1};
    struct stat st;
    if (conn.fd >= 0 && fstat(conn.fd, &st) == 0)
        conn.ino = (uint64_t)st.st_ino;
    else
        conn.fd = -1;
    zmq_msg_t *parts = rx->parts;
    int np = n;
    psg_rx_result_t res = PSG_RX_BAD;
    if (with_route) {
        size_t rl = zmq_msg_size(&parts[0]);
        if (rl == 0 || rl > PSG_WIRE_MAX_ROUTE) {
            psg_error_set("bad routing frame of %zu bytes", rl);
            goto done;
        }
        route.len = (uint8_t)rl;
        memcpy(route.id, zmq_msg_data(&parts[0]), rl);
        *bad_route = route;
        parts++;
        np--;
    }
    res = psg_codec_rx_feed(rx, parts, np, too_many, &route, &conn, bad_peer, key ? key : "", out,
                            bad_id);
    if (with_route) zmq_msg_close(&rx->parts[0]); /* feed closed the others */
    return res;
done:
    for (int i = 0; i < n; i++) zmq_msg_close(&rx->parts[i]);
    return res;
}

int psg_codec_rx_expire(psg_codec_rx_t *rx, psg_codec_expired_fn fn, void *ctx) {
    if (!rx->pending || rx->opts.timeout_ms < 0) return 0;
    int64_t now = psg_codec_now_ms();
    int count = 0;
    pending_t **pp = &rx->pending;
    while (*pp) {
        pending_t *p = *pp;
        if (now - p->since < rx->opts.timeout_ms) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        rx->npending--;
        rx->pending_bytes -= p->bytes;
        char why[160];
        snprintf(why, sizeof why, "message id %llu incomplete after %d ms (tensor %d short)",
                 (unsigned long long)p->id, rx->opts.timeout_ms, p->cur);
        if (fn) fn(ctx, &p->route, p->id, p->peer, why);
        pending_free(p);
        count++;
    }
    return count;
}
