/* The one-host transport's framing: frames with a "more" flag over a Unix stream socket
 * (net/stream.h). Reads go through a read-ahead buffer for the heads and small frames, and
 * straight into the frame's own memory for large ones; a message's frames leave in one
 * sendmsg when the socket has room. */
#include "net/stream.h"

#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define HEAD_BYTES 8
#define READ_AHEAD (64 * 1024)
/* at most this many iovecs a sendmsg (IOV_MAX is 1024 on Linux) */
#define IOV_BATCH 512
#define SOCKET_BUFFER (4 * 1024 * 1024)
/* a head's flags byte */
#define FLAG_MORE 1u   /* more frames of the message follow */
#define FLAG_PLACED 2u /* the frame lies in the arena: 16 bytes, its offset and length */
#define FLAG_ARENA 4u  /* the arena: 8 bytes, its size; its memfd beside them */

/* Frames this large are read into a block of the buffer cache (core/buffer.c), not into
 * ZeroMQ's malloc: a step receives the same sizes every step, and malloc handed each one
 * fresh pages (96 % of an async mlp job's page faults were the copies out of the arena). */
#define CACHED_FRAME_BYTES (64 * 1024)

/* body: a frame of len bytes to be filled; an error said when there is no memory for it */
static int frame_init(zmq_msg_t *body, size_t len) {
    if (len >= CACHED_FRAME_BYTES) {
        psg_buffer_t *b = psg_buffer_new(len);
        if (b && zmq_msg_init_data(body, b->data, len, psg_codec_free_buffer_ref, b) == 0) return 0;
        psg_buffer_unref(&b);
    } else if (zmq_msg_init_size(body, len) == 0) {
        return 0;
    }
    zmq_msg_init(body);
    return psg_error_set("out of memory for a frame of %zu bytes", len);
}

static void put_head(uint8_t *h, size_t len, uint8_t flags) {
    for (int i = 0; i < 4; i++) h[i] = (uint8_t)(len >> (8 * i));
    h[4] = flags;
    h[5] = h[6] = h[7] = 0;
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* n little-endian bytes from p */
static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void psg_stream_hello(uint8_t out[PSG_STREAM_HELLO_WIRE], const uint8_t id[PSG_STREAM_ID_BYTES]) {
    put_head(out, PSG_STREAM_HELLO_BYTES, 0);
    memcpy(out + HEAD_BYTES, PSG_STREAM_MAGIC, PSG_STREAM_MAGIC_BYTES);
    memcpy(out + HEAD_BYTES + PSG_STREAM_MAGIC_BYTES, id, PSG_STREAM_ID_BYTES);
}

bool psg_stream_hello_id(const zmq_msg_t *parts, int n, psg_route_t *route) {
    if (n != 1 || zmq_msg_size((zmq_msg_t *)&parts[0]) != PSG_STREAM_HELLO_BYTES) return false;
    const uint8_t *p = zmq_msg_data((zmq_msg_t *)&parts[0]);
    if (memcmp(p, PSG_STREAM_MAGIC, PSG_STREAM_MAGIC_BYTES)) return false;
    route->len = PSG_STREAM_ID_BYTES;
    memcpy(route->id, p + PSG_STREAM_MAGIC_BYTES, PSG_STREAM_ID_BYTES);
    return true;
}

bool psg_stream_endpoint(const char *endpoint) {
    if (strncmp(endpoint, "ipc://", 6) != 0) return false;
    const char *ipc = getenv("PSGRAPH_IPC");
    return !(ipc && !strcmp(ipc, "zmq"));
}

const char *psg_stream_path(const char *endpoint) {
    return endpoint + 6;
}

void psg_stream_rx_init(psg_stream_rx_t *rx) {
    memset(rx, 0, sizeof *rx);
    zmq_msg_init(&rx->body);
    rx->passed_fd = -1;
}

void psg_stream_rx_clear(psg_stream_rx_t *rx) {
    for (int i = 0; i < rx->n; i++) zmq_msg_close(&rx->parts[i]);
    zmq_msg_close(&rx->body);
    free(rx->buf);
    psg_arena_rx_clear(&rx->arena);
    if (rx->passed_fd >= 0) close(rx->passed_fd);
    psg_stream_rx_init(rx);
}

bool psg_stream_buffered(const psg_stream_rx_t *rx) {
    return rx->end > rx->start && !rx->starved;
}

static psg_stream_result_t closed(int got, const char *what) {
    if (got == 0) {
        psg_error_set("the peer closed the connection");
        return PSG_STREAM_CLOSED;
    }
    psg_error_set("%s: %s", what, strerror(errno));
    return PSG_STREAM_CLOSED;
}

/* read(2) that also takes a descriptor passed beside the bytes (the arena's): kept for the
 * arena frame; one more than that, or one with no arena frame to come, is closed. */
static ssize_t recv_some(psg_stream_rx_t *rx, int fd, void *buf, size_t len) {
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {buf, len};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t got = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    for (struct cmsghdr *c = got >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int passed;
            memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
            if (rx->passed_fd < 0)
                rx->passed_fd = passed;
            else
                close(passed);
        }
    }
    return got;
}

/* One read of what the socket has into dst[*got, want), *got advanced: PSG_STREAM_MSG when
 * bytes came, PSG_STREAM_AGAIN when none wait, PSG_STREAM_CLOSED at the end or a failure. */
static psg_stream_result_t recv_into(psg_stream_rx_t *rx, int fd, uint8_t *dst, size_t *got,
                                     size_t want) {
    for (;;) {
        ssize_t n = recv_some(rx, fd, dst + *got, want - *got);
        if (n > 0) {
            *got += (size_t)n;
            return PSG_STREAM_MSG;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return PSG_STREAM_AGAIN;
        return closed((int)n, "read");
    }
}

/* Reads what the socket has into the read-ahead buffer, after the bytes still there. */
static psg_stream_result_t fill(psg_stream_rx_t *rx, int fd) {
    if (!rx->buf) {
        if (!(rx->buf = malloc(READ_AHEAD))) {
            psg_error_set("out of memory for a connection's buffer");
            return PSG_STREAM_CLOSED;
        }
        rx->cap = READ_AHEAD;
    }
    if (rx->start > 0) { /* under a head's bytes are left: move them to the front */
        memmove(rx->buf, rx->buf + rx->start, rx->end - rx->start);
        rx->end -= rx->start;
        rx->start = 0;
    }
    return recv_into(rx, fd, rx->buf, &rx->end, rx->cap);
}

/* The frame being read is whole: into the message's frames (past the cap: dropped). */
static void frame_done(psg_stream_rx_t *rx) {
    if (rx->n < PSG_CODEC_MAX_PARTS) {
        zmq_msg_init(&rx->parts[rx->n]);
        zmq_msg_move(&rx->parts[rx->n], &rx->body);
        rx->n++;
    } else {
        zmq_msg_close(&rx->body);
        zmq_msg_init(&rx->body);
        rx->too_many = true;
    }
    rx->in_body = false;
}

/* The arena passed (its descriptor came with the bytes), or a frame placed in it, copied out.
 * PSG_STREAM_AGAIN: go on reading; PSG_STREAM_MSG: the message is whole. */
static psg_stream_result_t take_control(psg_stream_rx_t *rx, uint8_t flags, const uint8_t *p) {
    if (flags == FLAG_ARENA) {
        int passed = rx->passed_fd;
        rx->passed_fd = -1;
        if (passed < 0) {
            psg_error_set("the shared arena announced without its descriptor");
            return PSG_STREAM_BAD;
        }
        return psg_arena_rx_map(&rx->arena, passed, get_le(p, 8)) < 0 ? PSG_STREAM_BAD
                                                                      : PSG_STREAM_AGAIN;
    }
    uint64_t at = get_le(p, 8), len = get_le(p + 8, 8);
    if (len > rx->arena.size) {
        psg_error_set("a frame of %llu bytes in an arena of %zu", (unsigned long long)len,
                      rx->arena.size);
        return PSG_STREAM_BAD;
    }
    zmq_msg_close(&rx->body);
    if (frame_init(&rx->body, len) < 0) return PSG_STREAM_BAD;
    if (psg_arena_rx_take(&rx->arena, at, len, zmq_msg_data(&rx->body)) < 0) return PSG_STREAM_BAD;
    rx->more = flags & FLAG_MORE;
    frame_done(rx);
    return rx->more ? PSG_STREAM_AGAIN : PSG_STREAM_MSG;
}

static psg_stream_result_t read_message(psg_stream_rx_t *rx, int fd) {
    for (;;) {
        if (rx->in_body) {
            size_t len = zmq_msg_size(&rx->body);
            uint8_t *dst = zmq_msg_data(&rx->body);
            size_t have = rx->end - rx->start, want = len - rx->body_got;
            size_t take = have < want ? have : want;
            if (take) {
                memcpy(dst + rx->body_got, rx->buf + rx->start, take);
                rx->start += take;
                rx->body_got += take;
            }
            while (rx->body_got < len) { /* the rest straight into the frame */
                psg_stream_result_t r = recv_into(rx, fd, dst, &rx->body_got, len);
                if (r != PSG_STREAM_MSG) return r;
            }
            bool last = !rx->more;
            frame_done(rx);
            if (last) return PSG_STREAM_MSG;
            continue;
        }
        if (rx->end - rx->start < HEAD_BYTES) {
            psg_stream_result_t r = fill(rx, fd);
            if (r != PSG_STREAM_MSG) return r;
            continue;
        }
        const uint8_t *h = rx->buf + rx->start;
        uint32_t len = (uint32_t)get_le(h, 4);
        if ((h[4] & ~(FLAG_MORE | FLAG_PLACED | FLAG_ARENA)) || h[5] || h[6] || h[7] ||
            (h[4] & FLAG_ARENA && h[4] != FLAG_ARENA) || (h[4] & FLAG_PLACED && len != 16) ||
            (h[4] & FLAG_ARENA && len != 8)) {
            psg_error_set("a frame's head has unknown flags (%02x %02x %02x %02x): not psgraph's "
                          "stream transport",
                          h[4], h[5], h[6], h[7]);
            return PSG_STREAM_BAD;
        }
        if (len > PSG_WIRE_MAX_FRAME) {
            psg_error_set("a frame of %u bytes, over the limit of %llu", len,
                          (unsigned long long)PSG_WIRE_MAX_FRAME);
            return PSG_STREAM_BAD;
        }
        if (h[4] & (FLAG_PLACED | FLAG_ARENA)) { /* small: whole in the buffer first */
            if (rx->end - rx->start < HEAD_BYTES + len) {
                psg_stream_result_t r = fill(rx, fd);
                if (r != PSG_STREAM_MSG) return r;
                continue;
            }
            psg_stream_result_t r = take_control(rx, h[4], h + HEAD_BYTES);
            rx->start += HEAD_BYTES + len;
            if (r != PSG_STREAM_AGAIN) return r;
            continue;
        }
        rx->more = h[4] & FLAG_MORE;
        rx->start += HEAD_BYTES;
        zmq_msg_close(&rx->body);
        if (frame_init(&rx->body, len) < 0) return PSG_STREAM_BAD;
        rx->in_body = true;
        rx->body_got = 0;
    }
}

psg_stream_result_t psg_stream_read(psg_stream_rx_t *rx, int fd) {
    psg_stream_result_t r = read_message(rx, fd);
    rx->starved = r == PSG_STREAM_AGAIN;
    return r;
}

/* Waits until fd takes bytes or the deadline (-1: none) passes. */
static int wait_room(int fd, int64_t deadline) {
    for (;;) {
        int64_t left = psg_codec_left(deadline);
        if (left == 0) {
            errno = EAGAIN;
            return psg_error_set("send timed out");
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int rc = poll(&p, 1, psg_codec_poll_ms(left));
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) return psg_error_set("poll failed: %s", strerror(errno));
        if (rc > 0) return 0; /* room, or an error the write will say */
    }
}

/* Sends all of mh's iovecs (its control message, if any, with the first bytes), waiting for
 * room until the deadline. */
static int send_all(int fd, struct msghdr *mh, int64_t deadline) {
    while (mh->msg_iovlen > 0) {
        ssize_t put = sendmsg(fd, mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (put < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (wait_room(fd, deadline) < 0) return -1;
                continue;
            }
            int e = errno;
            psg_error_set("send failed: %s", strerror(e));
            errno = e;
            return -1;
        }
        mh->msg_control = NULL; /* the descriptor went with the first bytes */
        mh->msg_controllen = 0;
        size_t left = (size_t)put;
        while (mh->msg_iovlen > 0 && left >= mh->msg_iov->iov_len) {
            left -= mh->msg_iov->iov_len;
            mh->msg_iov++;
            mh->msg_iovlen--;
        }
        if (mh->msg_iovlen > 0) {
            mh->msg_iov->iov_base = (uint8_t *)mh->msg_iov->iov_base + left;
            mh->msg_iov->iov_len -= left;
        }
    }
    return 0;
}

/* The arena's frame and its memfd, once a connection, before the first frame placed there. */
static int tell_arena(int fd, psg_arena_tx_t *a, int64_t deadline) {
    uint8_t frame[HEAD_BYTES + 8];
    put_head(frame, 8, FLAG_ARENA);
    put_u64(frame + HEAD_BYTES, a->size);
    struct iovec iov = {frame, sizeof frame};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &a->fd, sizeof(int));
    if (send_all(fd, &mh, deadline) < 0) return -1;
    a->told = true;
    return 0;
}

/* Frame f into the arena when it is large and there is room: its head and the place's
 * offset and length in head and desc, iov[1] pointing at desc. false: it goes whole. */
static bool place_frame(int fd, psg_stream_tx_t *tx, zmq_msg_t *f, bool more, uint8_t *head,
                        uint8_t *desc, struct iovec *iov, int64_t deadline) {
    size_t len = zmq_msg_size(f), at;
    if (!tx || len < PSG_ARENA_MIN_FRAME || psg_arena_tx_place(&tx->arena, len, &at) < 0)
        return false;
    if (!tx->arena.told && tell_arena(fd, &tx->arena, deadline) < 0) {
        psg_arena_tx_clear(&tx->arena);
        tx->arena.fd = -2; /* no arena on this connection: its frames go whole */
        return false;
    }
    memcpy(tx->arena.base + at, zmq_msg_data(f), len);
    put_head(head, 16, (more ? FLAG_MORE : 0) | FLAG_PLACED);
    put_u64(desc, at);
    put_u64(desc + 8, len);
    iov[0] = (struct iovec){head, HEAD_BYTES};
    iov[1] = (struct iovec){desc, 16};
    return true;
}

int psg_stream_write(int fd, psg_stream_tx_t *tx, psg_codec_out_t *out, int timeout_ms) {
    int64_t deadline = timeout_ms < 0 ? -1 : psg_codec_now_ms() + timeout_ms;
    uint8_t heads[IOV_BATCH / 2][HEAD_BYTES], descs[IOV_BATCH / 2][16];
    struct iovec iov[IOV_BATCH];
    for (int first = 0; first < out->n; first += IOV_BATCH / 2) {
        int count = out->n - first < IOV_BATCH / 2 ? out->n - first : IOV_BATCH / 2;
        for (int k = 0; k < count; k++) {
            zmq_msg_t *f = &out->parts[first + k];
            bool more = out->more[first + k];
            if (place_frame(fd, tx, f, more, heads[k], descs[k], &iov[2 * k], deadline)) continue;
            put_head(heads[k], zmq_msg_size(f), more ? FLAG_MORE : 0);
            iov[2 * k] = (struct iovec){heads[k], HEAD_BYTES};
            iov[2 * k + 1] = (struct iovec){zmq_msg_data(f), zmq_msg_size(f)};
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(2 * count)};
        if (send_all(fd, &mh, deadline) < 0) return -1;
    }
    return 0;
}

void psg_stream_tx_init(psg_stream_tx_t *tx) {
    psg_arena_tx_init(&tx->arena);
}

void psg_stream_tx_clear(psg_stream_tx_t *tx) {
    psg_arena_tx_clear(&tx->arena);
}

void psg_stream_tune(int fd) {
    int size = SOCKET_BUFFER;
    /* past the system's cap (net.core.wmem_max) only with CAP_NET_ADMIN: else what it allows */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}
