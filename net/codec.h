/* Internal to net/: the codec between psg_msg_t and ZeroMQ frames, shared by the server
 * and the client. Not a public API (the public one is include/psgraph/wire.h), and it
 * knows nothing of sockets' roles: it encodes, decodes and reassembles. */
#ifndef PSGRAPH_NET_CODEC_H
#define PSGRAPH_NET_CODEC_H

#include "psgraph/wire.h"

#include <limits.h>
#include <msgpack.h>
#include <string.h>
#include <zmq.h>

/* Internal message kind: one chunk of a large tensor, after the message's first part. */
#define PSG_CODEC_CHUNK 4

/* Where a tensor's bytes travel (a tensor descriptor's last field; version 1 wrote a bool:
 * false for a frame, true for chunks, which a reader still takes). */
typedef enum {
    PSG_PLACE_FRAME = 0,  /* a frame of its own after the header */
    PSG_PLACE_CHUNKS = 1, /* chunk messages after the first message */
    PSG_PLACE_INLINE = 2  /* inside the header's frame, after the msgpack map */
} psg_codec_place_t;

/* Inline bytes start at offsets rounded up to this from the header frame's start. */
#define PSG_CODEC_INLINE_ALIGN 8

/* How a header describes one tensor. */
typedef struct {
    psg_dtype_t dtype;
    psg_shape_t shape;
    uint64_t nbytes;
    bool chunked;  /* its bytes follow in chunk messages, not in the first message */
    uint8_t place; /* psg_codec_place_t */
    uint64_t at;   /* inline: its offset in the header frame */
} psg_codec_tdesc_t;

/* A decoded header: either a message's first part (kind 1..3) or a chunk (kind 4). */
typedef struct {
    int kind;
    uint64_t id;
    uint64_t incarnation;       /* the sender's; 0: absent */
    const char *op, *key, *err; /* point into the header frame, not NUL-terminated */
    size_t op_len, key_len, err_len;
    int64_t step;
    int code; /* an ERROR's psg_err_code_t */
    uint64_t body;
    bool body_inline; /* the body's bytes are in the header frame, at body_at */
    uint64_t body_at;
    uint64_t map_bytes; /* the msgpack map's bytes: inline bytes start after them */
    uint64_t version;   /* as the peer wrote it (0: absent) */
    int ninline;        /* tensors placed inline */
    int ntensors;
    const char *names[PSG_WIRE_MAX_TENSORS];
    size_t name_lens[PSG_WIRE_MAX_TENSORS];
    psg_codec_tdesc_t t[PSG_WIRE_MAX_TENSORS];
    uint32_t ti;  /* chunk: the tensor's index */
    uint64_t off; /* chunk: the byte offset in the tensor */
} psg_codec_header_t;

/* Parses a header frame strictly (types, limits, known fields, dtype/shape/byte counts
 * consistent, the inline bytes exactly filling the frame after the map). Allocates nothing.
 * -1 with the error set on anything malformed (a peer of another wire version: an error
 * naming both versions); h->id is filled as soon as it is read, so an error reply can carry it. */
int psg_codec_decode_header(const void *data, size_t size, psg_codec_header_t *h);

/* Writes the header (the msgpack map) of m's first part into sb; place[i] says where
 * tensor i travels (psg_codec_place_t), body_inline where the body does. The inline bytes
 * are the caller's to append (psg_codec_inline_end gives their layout). */
int psg_codec_pack_header(msgpack_sbuffer *sb, const psg_msg_t *m, const uint8_t *place,
                          bool body_inline);
/* Where the next inline tensor starts once `at` bytes of the header frame are taken. */
/* Copies the text src into dst of size bytes, cut to fit and ended by a NUL: snprintf's "%s"
 * without its format parsing, for the few names copied on every message (issue 33). */
static inline void psg_codec_copy_text(char *dst, size_t size, const char *src) {
    if (size == 0) return;
    size_t n = src ? strnlen(src, size - 1) : 0;
    if (n) memcpy(dst, src, n);
    dst[n] = 0;
}

static inline uint64_t psg_codec_inline_at(uint64_t at) {
    return (at + PSG_CODEC_INLINE_ALIGN - 1) & ~(uint64_t)(PSG_CODEC_INLINE_ALIGN - 1);
}
/* Writes the header of a chunk of tensor ti of message id, at byte offset off. */
int psg_codec_pack_chunk(msgpack_sbuffer *sb, uint64_t id, uint32_t ti, uint64_t off);

/* A list of frames ready to send, grouped into ZeroMQ messages by `more` flags. */
typedef struct {
    int n, cap;
    zmq_msg_t *parts;
    bool *more;
} psg_codec_out_t;

/* Encodes m into out (zero-copy for tensor bytes: each frame holds a buffer reference).
 * With a route, every ZeroMQ message starts with it (for a ROUTER). -1 with the error set
 * on an invalid message or one over max_msg_bytes. */
int psg_codec_encode(const psg_msg_t *m, const psg_route_t *route, const psg_wire_opts_t *o,
                     psg_codec_out_t *out);
/* ZeroMQ's free function of a frame over a psg_buffer_t's bytes: hint, the buffer, unref'd. */
void psg_codec_free_buffer_ref(void *data, void *hint);
/* Sends the frames in order; closes every frame whatever happens. -1 with errno-based
 * error set if a send fails (EHOSTUNREACH: the peer is gone). */
int psg_codec_send(void *sock, psg_codec_out_t *out);
/* Sends out only if the socket takes it now: 1 sent (as psg_codec_send), 0 it would wait
 * (nothing sent, out kept), -1 with the error set and errno. */
int psg_codec_try_send(void *sock, psg_codec_out_t *out);
/* Closes any frames left and frees the arrays. */
void psg_codec_out_clear(psg_codec_out_t *out);

/* Reassembly of messages from their parts, per (route, id). */
typedef struct psg_codec_rx psg_codec_rx_t;
psg_codec_rx_t *psg_codec_rx_new(const psg_wire_opts_t *o);
void psg_codec_rx_destroy(psg_codec_rx_t **rx);

/* What the receive of one ZeroMQ message gave. */
typedef enum {
    PSG_RX_NONE = 0,  /* nothing (a chunk was stored) */
    PSG_RX_MSG = 1,   /* a complete message in *out */
    PSG_RX_BAD = -1,  /* a bad message: error set; *bad_id is its id (0 if unknown) */
    PSG_RX_FAIL = -2, /* the socket failed: error set */
    PSG_RX_AGAIN = -3 /* nothing to read */
} psg_rx_result_t;

/* The most frames one message may have (a header, a body, its tensors, a spare). */
#define PSG_CODEC_MAX_PARTS (PSG_WIRE_MAX_TENSORS + 3)

/* Feeds one received message's frames (np of them, too_many: more came and were dropped) to
 * the reassembly, and closes them. route: the sender (a server's; len 0 for a client's
 * replies); conn, peer, key: where it came from, as psg_msg_t's fields say. */
psg_rx_result_t psg_codec_rx_feed(psg_codec_rx_t *rx, zmq_msg_t *parts, int np, bool too_many,
                                  const psg_route_t *route, const psg_conn_t *conn,
                                  const char *peer, const char *key, psg_msg_t **out,
                                  uint64_t *bad_id);
/* Reads one ZeroMQ message from sock without waiting (with_route: a ROUTER's first frame
 * is the sender), and feeds it to the reassembly. A bad message is drained entirely. */
psg_rx_result_t psg_codec_rx_read(psg_codec_rx_t *rx, void *sock, bool with_route, psg_msg_t **out,
                                  uint64_t *bad_id, psg_route_t *bad_route, char *bad_peer,
                                  size_t bad_peer_size);
/* Drops partial messages older than the opts' timeout and returns how many; fn (may be
 * NULL) is told the sender, id and reason of each, for an error reply. */
typedef void (*psg_codec_expired_fn)(void *ctx, const psg_route_t *route, uint64_t id,
                                     const char *peer, const char *why);
int psg_codec_rx_expire(psg_codec_rx_t *rx, psg_codec_expired_fn fn, void *ctx);
/* Bytes held by partial messages (for tests). */
size_t psg_codec_rx_pending_bytes(const psg_codec_rx_t *rx);

/* Writes `in` as a ZeroMQ endpoint into out: "host:port" becomes "tcp://host:port";
 * tcp://, ipc:// and inproc:// pass as they are. -1 with the error set otherwise. */
int psg_codec_endpoint(const char *in, char *out, size_t size);
/* Waits up to wait_ms (-1: forever) for sock to be readable, or fd when fd >= 0.
 * Returns a mask (1: sock readable, 2: fd readable), 0 on timeout or a signal, -1 on failure. */
int psg_codec_poll(void *sock, int fd, int64_t wait_ms);
/* Milliseconds left until deadline (-1 deadline: forever, returned as -1); never below 0. */
int64_t psg_codec_left(int64_t deadline);
/* A wait of ms milliseconds (< 0: forever) as poll(2) takes it. */
static inline int psg_codec_poll_ms(int64_t ms) {
    return ms < 0 ? -1 : ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Monotonic milliseconds. */
int64_t psg_codec_now_ms(void);
/* Disables czmq's SIGINT/SIGTERM handler once: a library must not take the process's
 * signals (the CLI installs its own). */
void psg_codec_init_czmq(void);

#endif
