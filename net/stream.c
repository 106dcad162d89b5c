/* The one-host transport's framing: frames with a "more" flag over a Unix stream socket
 * (net/stream.h). Reads go through a read-ahead buffer for the heads and small frames, and
 * straight into the frame's own memory for large ones; a message's frames leave in one
 * sendmsg when the socket has room. */
#include "net/stream.h"

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
}

void psg_stream_rx_clear(psg_stream_rx_t *rx) {
    for (int i = 0; i < rx->n; i++) zmq_msg_close(&rx->parts[i]);
    zmq_msg_close(&rx->body);
    free(rx->buf);
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
    for (;;) {
        ssize_t got = read(fd, rx->buf + rx->end, rx->cap - rx->end);
        if (got > 0) {
            rx->end += (size_t)got;
            return PSG_STREAM_MSG;
        }
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return PSG_STREAM_AGAIN;
        return closed((int)got, "read");
    }
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
                ssize_t got = read(fd, dst + rx->body_got, len - rx->body_got);
                if (got > 0) {
                    rx->body_got += (size_t)got;
                    continue;
                }
                if (got < 0 && errno == EINTR) continue;
                if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return PSG_STREAM_AGAIN;
                return closed((int)got, "read");
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
        uint32_t len =
            (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        if ((h[4] & ~1u) || h[5] || h[6] || h[7]) {
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
        rx->more = h[4] & 1;
        rx->start += HEAD_BYTES;
        zmq_msg_close(&rx->body);
        if (zmq_msg_init_size(&rx->body, len) < 0) {
            zmq_msg_init(&rx->body);
            psg_error_set("out of memory for a frame of %u bytes", len);
            return PSG_STREAM_BAD;
        }
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
        int rc = poll(&p, 1, left < 0 ? -1 : left > INT_MAX ? INT_MAX : (int)left);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) return psg_error_set("poll failed: %s", strerror(errno));
        if (rc > 0) return 0; /* room, or an error the write will say */
    }
}

int psg_stream_write(int fd, psg_codec_out_t *out, int timeout_ms) {
    int64_t deadline = timeout_ms < 0 ? -1 : psg_codec_now_ms() + timeout_ms;
    int rc = 0;
    uint8_t heads[IOV_BATCH / 2][HEAD_BYTES];
    struct iovec iov[IOV_BATCH];
    for (int first = 0; rc == 0 && first < out->n; first += IOV_BATCH / 2) {
        int count = out->n - first < IOV_BATCH / 2 ? out->n - first : IOV_BATCH / 2;
        for (int k = 0; k < count; k++) {
            zmq_msg_t *f = &out->parts[first + k];
            size_t len = zmq_msg_size(f);
            uint8_t *h = heads[k];
            h[0] = (uint8_t)len;
            h[1] = (uint8_t)(len >> 8);
            h[2] = (uint8_t)(len >> 16);
            h[3] = (uint8_t)(len >> 24);
            h[4] = out->more[first + k] ? 1 : 0;
            h[5] = h[6] = h[7] = 0;
            iov[2 * k] = (struct iovec){h, HEAD_BYTES};
            iov[2 * k + 1] = (struct iovec){zmq_msg_data(f), len};
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(2 * count)};
        while (mh.msg_iovlen > 0) {
            ssize_t put = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (put < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    if ((rc = wait_room(fd, deadline)) < 0) break;
                    continue;
                }
                int e = errno;
                rc = psg_error_set("send failed: %s", strerror(e));
                errno = e;
                break;
            }
            size_t left = (size_t)put;
            while (mh.msg_iovlen > 0 && left >= mh.msg_iov->iov_len) {
                left -= mh.msg_iov->iov_len;
                mh.msg_iov++;
                mh.msg_iovlen--;
            }
            if (mh.msg_iovlen > 0) {
                mh.msg_iov->iov_base = (uint8_t *)mh.msg_iov->iov_base + left;
                mh.msg_iov->iov_len -= left;
            }
        }
    }
    return rc;
}

void psg_stream_tune(int fd) {
    int size = SOCKET_BUFFER;
    /* past the system's cap (net.core.wmem_max) only with CAP_NET_ADMIN: else what it allows */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}
