/* The wire's server side: a czmq ROUTER that returns complete, validated requests and sends
 * replies, from any thread, back to their sender. It answers malformed input itself.
 * Not the task server (ps/): it knows no op, no graph, no rendezvous.
 *
 * A reply leaves from the thread that makes it: the socket is used under a lock by every
 * thread (a ZeroMQ socket may move between threads across a full memory barrier), so a
 * runner's reply does not wait for the receiving thread to wake and send it (issue 33: that
 * hand-off was a context switch on every reply a step waits for). The receiving thread waits
 * on the socket's ZMQ_FD with poll(2), not in zmq_poll, so that it holds no lock while it
 * sleeps. ZMQ_FD is edge-triggered: another thread's send may take the socket's pending
 * commands and with them the edge the receiving thread waits for, so such a sender checks
 * ZMQ_EVENTS after its send and, when a message waits, wakes the receiving thread through
 * an eventfd. */
#include "net/codec.h"
#include "net/curve_internal.h"
#include "net/stream.h"

#include <czmq.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

/* How long the replies handed to ZeroMQ before a server closes may still take to leave. */
#define SERVER_CLOSE_LINGER_MS 500

struct psg_server {
    zsock_t *zs;
    void *sock;
    psg_wire_opts_t opts;
    char endpoint[256];
    int port;
    psg_codec_rx_t *rx;
    pthread_t owner;      /* the thread that receives */
    pthread_mutex_t lock; /* guards every call on sock */
    int zmq_fd;           /* the socket's ZMQ_FD: readable when it has commands to process */
    int wake_fd; /* an eventfd another thread writes when its send left a message waiting */
    atomic_uint_fast64_t received, rejected, dropped, replies_lost, refused;
    char zap_domain[32];         /* its watch under the guard (curve_guard.c); "" when none */
    psg_stream_server_t *stream; /* ipc:// on psgraph's own transport: no ZeroMQ socket */
};

/* The cap on open connections: as asked, else what the descriptors allow (ulimit -n) less
 * 128 for the process's other files and sockets. */
static int max_connections(const psg_wire_opts_t *o) {
    if (o->max_connections > 0) return o->max_connections;
    struct rlimit rl;
    rlim_t n = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    if (n == RLIM_INFINITY || n > (1 << 20)) n = 1 << 20;
    return n > 256 ? (int)(n - 128) : (int)(n / 2);
}

psg_server_t *psg_server_new(const char *endpoint, const psg_wire_opts_t *opts) {
    char ep[256];
    if (psg_codec_endpoint(endpoint, ep, sizeof ep) < 0) return NULL;
    const psg_wire_opts_t o = opts ? *opts : psg_wire_opts_default();
    if (psg_curve_listen_check(ep, o.keys, o.insecure) < 0) return NULL;
    psg_codec_init_czmq();
    psg_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        psg_error_set("out of memory");
        return NULL;
    }
    s->opts = o;
    s->owner = pthread_self();
    s->wake_fd = -1;
    s->zmq_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    if (psg_stream_endpoint(ep)) {
        if (!(s->stream = psg_stream_server_new(ep, max_connections(&o), &s->refused)) ||
            !(s->rx = psg_codec_rx_new(&s->opts)))
            goto fail;
        psg_codec_copy_text(s->endpoint, sizeof s->endpoint, ep);
        return s;
    }
    s->zs = zsock_new(ZMQ_ROUTER);
    if (!s->zs) {
        psg_error_set("cannot create a ZeroMQ ROUTER socket");
        goto fail;
    }
    s->sock = zsock_resolve(s->zs);
    zsock_set_router_mandatory(s->zs, 1);
    /* a client that reconnects keeps its routing id (client.c draws one per client): the new
     * connection takes it over from one the server has not yet seen closed (without this,
     * ZeroMQ never delivers the new connection's messages) */
    zsock_set_router_handover(s->zs, 1);
    zsock_set_maxmsgsize(s->zs, (int)PSG_WIRE_MAX_FRAME);
    zsock_set_sndtimeo(s->zs, s->opts.timeout_ms);
    zsock_set_linger(s->zs, 0);
    zsock_set_sndhwm(s->zs, 100000);
    int ivl = 0, timeout = 0; /* a client gone silent is dropped, and its requests' state freed */
    psg_wire_heartbeat(o.peer_timeout_ms, &ivl, &timeout);
    if (ivl > 0) {
        zsock_set_heartbeat_ivl(s->zs, ivl);
        zsock_set_heartbeat_timeout(s->zs, timeout);
    }
    /* CURVE before the bind: no connection may come in plain */
    bool curve = o.keys && !strncmp(ep, "tcp://", 6);
    if (curve && psg_curve_apply_server(s->sock, o.keys) < 0) {
        psg_error_wrap("%s", ep);
        goto fail;
    }
    /* its connections watched and capped; a plain server whose guard cannot start (the
     * process runs a ZAP handler of its own) goes without the cap */
    if (psg_curve_guard_attach(s->sock, ep, curve ? o.keys : NULL, max_connections(&o), &s->refused,
                               s->zap_domain, sizeof s->zap_domain) < 0 &&
        curve) {
        psg_error_wrap("%s", ep);
        goto fail;
    }
    /* a peer that connects and never finishes its handshake is dropped after 10 s */
    zsock_set_handshake_ivl(s->zs, 10000);
    if (zmq_bind(s->sock, ep) < 0) {
        psg_error_set("cannot bind %s: %s", ep, zmq_strerror(errno));
        goto fail;
    }
    char *last = zsock_last_endpoint(s->zs);
    snprintf(s->endpoint, sizeof s->endpoint, "%s", last ? last : ep);
    freen(last);
    const char *colon = strrchr(s->endpoint, ':');
    s->port = strncmp(s->endpoint, "tcp://", 6) == 0 && colon ? atoi(colon + 1) : 0;
    size_t fd_len = sizeof s->zmq_fd;
    if (zmq_getsockopt(s->sock, ZMQ_FD, &s->zmq_fd, &fd_len) < 0) {
        psg_error_set("cannot get the ZMQ_FD of %s: %s", ep, zmq_strerror(errno));
        goto fail;
    }
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0) {
        psg_error_set("eventfd: %s", strerror(errno));
        goto fail;
    }
    if (!(s->rx = psg_codec_rx_new(&s->opts))) goto fail;
    return s;
fail:
    psg_server_destroy(&s);
    return NULL;
}

void psg_server_destroy(psg_server_t **sp) {
    if (!sp || !*sp) return;
    psg_server_t *s = *sp;
    *sp = NULL;
    if (s->zs) {
        psg_curve_guard_detach(s->sock, s->zap_domain);
        /* the replies already handed to ZeroMQ still leave (a JobDone's own reply, sent
         * just before the job's end stops the server): a loaded machine's I/O thread can
         * take longer than the stop's moment for them; bounded, for a peer that is gone */
        zsock_set_linger(s->zs, SERVER_CLOSE_LINGER_MS);
    }
    zsock_destroy(&s->zs);
    psg_stream_server_destroy(&s->stream);
    psg_codec_rx_destroy(&s->rx);
    if (s->wake_fd >= 0) close(s->wake_fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

const char *psg_server_endpoint(const psg_server_t *s) {
    return s->endpoint;
}
int psg_server_port(const psg_server_t *s) {
    return s->port;
}
void *psg_server_socket(psg_server_t *s) {
    return s->sock;
}

psg_server_stats_t psg_server_stats(const psg_server_t *s) {
    return (psg_server_stats_t){
        .received = atomic_load(&s->received),
        .rejected = atomic_load(&s->rejected),
        .dropped = atomic_load(&s->dropped),
        .replies_lost = atomic_load(&s->replies_lost),
        .refused = atomic_load(&s->refused),
    };
}

/* The ROUTER's send, under the lock, and the receiving thread woken when it must be. -1 with
 * errno on a failed send. */
static int send_zmq(psg_server_t *s, psg_codec_out_t *out) {
    bool receiver = pthread_equal(pthread_self(), s->owner);
    pthread_mutex_lock(&s->lock);
    int rc = psg_codec_send(s->sock, out);
    int e = errno;
    /* the receiving thread reads the socket before it sleeps again: only another thread
     * must look whether its send took the edge of a message that waits */
    int events = 0;
    size_t len = sizeof events;
    if (!receiver && zmq_getsockopt(s->sock, ZMQ_EVENTS, &events, &len) < 0) events = 0;
    pthread_mutex_unlock(&s->lock);
    uint64_t one = 1;
    if ((events & ZMQ_POLLIN) && write(s->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN) {
        psg_error_set("cannot wake the server thread: %s", strerror(errno));
        errno = EIO; /* not a lost reply: the server's own failure */
        return -1;
    }
    errno = e;
    return rc;
}

/* Sends encoded frames, on any thread. A vanished or stuck peer only costs the reply
 * (counted); a failure of the socket itself is an error. */
static int send_out(psg_server_t *s, const psg_route_t *route, psg_codec_out_t *out) {
    int rc = s->stream ? psg_stream_server_send(s->stream, route, out, s->opts.timeout_ms)
                       : send_zmq(s, out);
    if (rc == 0) return 0;
    if (errno == EHOSTUNREACH || errno == EAGAIN) {
        atomic_fetch_add(&s->replies_lost, 1);
        return 0;
    }
    return -1;
}

/* Encodes a reply to (route, id) and sends it from this thread. Consumes *reply. */
static int reply_to(psg_server_t *s, const psg_route_t *route, uint64_t id, psg_msg_t **reply) {
    psg_msg_t *r = *reply;
    *reply = NULL;
    if (!r) return psg_error_set("psg_server_reply: NULL reply");
    if (r->kind != PSG_MSG_REPLY && r->kind != PSG_MSG_ERROR) {
        psg_msg_destroy(&r);
        return psg_error_set("psg_server_reply: a reply must be of kind REPLY or ERROR");
    }
    r->id = id;
    psg_codec_out_t out = {0};
    /* a ROUTER's message starts with its route; a stream's connection is found by it */
    int rc = psg_codec_encode(r, s->stream ? NULL : route, &s->opts, &out);
    psg_msg_destroy(&r);
    if (rc < 0) return psg_error_wrap("cannot encode the reply");
    rc = send_out(s, route, &out);
    psg_codec_out_clear(&out);
    return rc;
}

int psg_server_reply(psg_server_t *s, const psg_msg_t *req, psg_msg_t **reply) {
    return reply_to(s, &req->route, req->id, reply);
}

static int error_to(psg_server_t *s, const psg_route_t *route, uint64_t id, int code,
                    const char *text) {
    psg_msg_t *r = psg_msg_new(PSG_MSG_ERROR, NULL);
    if (!r || psg_msg_set_error(r, "%s", text) < 0) {
        psg_msg_destroy(&r);
        return -1;
    }
    r->code = code;
    return reply_to(s, route, id, &r);
}

static int verror(psg_server_t *s, const psg_msg_t *req, int code, const char *fmt, va_list ap) {
    char text[PSG_WIRE_MAX_ERROR];
    vsnprintf(text, sizeof text, fmt, ap);
    return error_to(s, &req->route, req->id, code, text);
}

int psg_server_reply_error(psg_server_t *s, const psg_msg_t *req, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = verror(s, req, PSG_ERR_UNKNOWN, fmt, ap);
    va_end(ap);
    return rc;
}

int psg_server_reply_error_code(psg_server_t *s, const psg_msg_t *req, int code, const char *fmt,
                                ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = verror(s, req, code, fmt, ap);
    va_end(ap);
    return rc;
}

/* A bad message: answered with an error when it can be addressed, else dropped. */
static void reject(psg_server_t *s, const psg_route_t *route, uint64_t id, const char *why) {
    if (route->len == 0) {
        atomic_fetch_add(&s->dropped, 1);
        return;
    }
    atomic_fetch_add(&s->rejected, 1);
    char text[PSG_WIRE_MAX_ERROR];
    snprintf(text, sizeof text, "%s rejected the message: %s", s->endpoint, why);
    error_to(s, route, id, PSG_ERR_BAD_REQUEST,
             text); /* a failure here is a lost reply, already counted */
}

static void on_expired(void *ctx, const psg_route_t *route, uint64_t id, const char *peer,
                       const char *why) {
    (void)peer;
    reject(ctx, route, id, why);
}

/* Sleeps until the socket may have a message (its ZMQ_FD, or another thread's wake-up after
 * its send) or wait_ms passed; the caller then reads, which re-arms the edge. */
static int wait_readable(psg_server_t *s, int64_t wait_ms) {
    struct pollfd fds[2] = {{.fd = s->zmq_fd, .events = POLLIN},
                            {.fd = s->wake_fd, .events = POLLIN}};
    int rc = poll(fds, 2, wait_ms < 0 ? -1 : (int)(wait_ms > INT_MAX ? INT_MAX : wait_ms));
    if (rc < 0 && errno != EINTR) return psg_error_set("poll failed: %s", strerror(errno));
    uint64_t ignored;
    if (rc > 0 && (fds[1].revents & POLLIN) && read(s->wake_fd, &ignored, sizeof ignored) < 0 &&
        errno != EAGAIN)
        return psg_error_set("cannot read the wake-up eventfd: %s", strerror(errno));
    return 0;
}

int psg_server_recv(psg_server_t *s, psg_msg_t **out, int timeout_ms) {
    *out = NULL;
    int64_t deadline = timeout_ms < 0 ? -1 : psg_codec_now_ms() + timeout_ms;
    for (;;) {
        psg_msg_t *m = NULL;
        uint64_t bad_id;
        psg_route_t bad_route;
        char peer[64];
        psg_rx_result_t r;
        if (s->stream) {
            r = psg_stream_server_read(s->stream, s->rx, &m, &bad_id, &bad_route, peer, sizeof peer,
                                       &s->dropped);
        } else {
            pthread_mutex_lock(&s->lock);
            r = psg_codec_rx_read(s->rx, s->sock, true, &m, &bad_id, &bad_route, peer, sizeof peer);
            pthread_mutex_unlock(&s->lock);
        }
        if (r == PSG_RX_FAIL) return -1;
        if (r == PSG_RX_BAD) {
            char why[PSG_WIRE_MAX_ERROR];
            snprintf(why, sizeof why, "%s", psg_error_message());
            reject(s, &bad_route, bad_id, why);
            continue;
        }
        if (r == PSG_RX_MSG) {
            if (m->kind == PSG_MSG_REQUEST) {
                atomic_fetch_add(&s->received, 1);
                *out = m;
                return 1;
            }
            /* Never answer an error with an error: two peers could ping-pong forever. */
            if (m->kind == PSG_MSG_ERROR)
                atomic_fetch_add(&s->dropped, 1);
            else
                reject(s, &m->route, m->id, "a server takes requests, not replies");
            psg_msg_destroy(&m);
            continue;
        }
        if (r == PSG_RX_NONE) continue;
        psg_codec_rx_expire(s->rx, on_expired, s);
        int64_t left = psg_codec_left(deadline);
        if (left == 0) return 0;
        /* Wake at least once a second while partial messages wait, to expire them. */
        int64_t wait = psg_codec_rx_pending_bytes(s->rx) && (left < 0 || left > 1000) ? 1000 : left;
        if ((s->stream ? psg_stream_server_wait(s->stream, wait) : wait_readable(s, wait)) < 0)
            return -1;
    }
}
