/* The wire's client side: a czmq DEALER connected to one server, with request ids, timeouts
 * that name the peer, and a reset that drops a dead connection's leftovers.
 * Not a session: it does not know what the requests mean, nor which tasks exist. */
#include "net/codec.h"
#include "net/curve_internal.h"
#include "net/stream.h"

#include <czmq.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct psg_client {
    zsock_t *zs;
    void *sock;
    zsock_t *events; /* the DEALER's monitor: connections up and lost; NULL without heartbeats */
    psg_wire_opts_t opts;
    char endpoint[256];
    psg_codec_rx_t *rx;
    uint64_t next_id;
    int sndtimeo; /* as last set on the socket */
    /* requests sent and not answered, and the connections lost: a loss while some are in
     * flight means their replies will never come (drops_at_send: the count when the oldest
     * of them was sent) */
    bool up;
    int64_t down_since; /* when a connection that was up went down (ms); 0: up, or not yet */
    uint64_t drops, drops_at_send;
    int64_t in_flight;
    uint64_t peer_inc, peer_restarts;
    int64_t redialed_at; /* when a send to the lost peer last connected afresh (ms) */
    /* its routing id, drawn once and kept by every connection and reset: a server knows a
     * client that reconnects as the same peer (its registered graphs stay its own) */
    uint8_t routing_id[16];
    /* ipc:// on psgraph's own transport (net/stream.h): a Unix stream socket this thread
     * writes and reads, no ZeroMQ socket; fd -1 while not connected */
    bool stream;
    int fd;
    psg_stream_rx_t srx;
    psg_stream_tx_t stx;
};

static atomic_uint_fast64_t monitor_seq;

/* Heartbeats on the socket and a monitor of its connections (before it connects, so that
 * no event is missed). */
static int watch_connections(psg_client_t *c) {
    int ivl = 0, timeout = 0;
    psg_wire_heartbeat(c->opts.peer_timeout_ms, &ivl, &timeout);
    if (ivl <= 0) return 0;
    zsock_set_heartbeat_ivl(c->zs, ivl);
    zsock_set_heartbeat_timeout(c->zs, timeout);
    zsock_set_heartbeat_ttl(c->zs, ivl + timeout); /* the server drops us as we drop it */
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://psgraph-client-events-%llu",
             (unsigned long long)atomic_fetch_add(&monitor_seq, 1));
    if (zmq_socket_monitor(c->sock, ep, ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) <
            0 ||
        !(c->events = zsock_new_pair(ep)))
        return psg_error_set("%s: cannot watch the connection: %s", c->endpoint,
                             zmq_strerror(errno));
    return 0;
}

/* A connection that broke (the peer closed it, a write failed): closed here; what was in
 * flight on it is lost, told by psg_client_check. */
static void stream_close(psg_client_t *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    psg_stream_rx_clear(&c->srx);
    psg_stream_tx_clear(&c->stx);
}

static void stream_lost(psg_client_t *c) {
    stream_close(c);
    if (c->up) {
        c->up = false;
        c->down_since = psg_codec_now_ms();
        c->drops++;
    }
}

/* Connects to the stream server and says hello (its routing id). 0: up; -1: not there now
 * (tried again by the next send: as ZeroMQ's reconnects, without an error). */
static int stream_dial(psg_client_t *c) {
    const char *path = psg_stream_path(c->endpoint);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) return -1;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    uint8_t hello[PSG_STREAM_HELLO_WIRE];
    psg_stream_hello(hello, c->routing_id);
    /* a fresh socket's buffer takes the hello whole */
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 ||
        send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) {
        close(fd);
        return -1;
    }
    psg_stream_tune(fd);
    c->fd = fd;
    c->up = true;
    c->down_since = 0;
    return 0;
}

static int client_connect(psg_client_t *c) {
    if (c->stream) {
        psg_stream_rx_init(&c->srx);
        psg_stream_tx_init(&c->stx);
        if (!(c->rx = psg_codec_rx_new(&c->opts))) return -1;
        (void)stream_dial(c); /* a server not up yet is waited for by the first send */
        return 0;
    }
    c->zs = zsock_new(ZMQ_DEALER);
    if (!c->zs) return psg_error_set("cannot create a ZeroMQ DEALER socket");
    c->sock = zsock_resolve(c->zs);
    /* IMMEDIATE: queue nothing for a peer that is not connected, so a dead peer makes a
     * send time out instead of piling requests up to be delivered to its successor. */
    zsock_set_immediate(c->zs, 1);
    zsock_set_linger(c->zs, 0);
    zsock_set_maxmsgsize(c->zs, (int)PSG_WIRE_MAX_FRAME);
    zsock_set_reconnect_ivl(c->zs, 50);
    zsock_set_reconnect_ivl_max(c->zs, 1000);
    /* a connect not done in 1 s starts again: TCP's own SYN retries back off to 15 s, so a
     * peer whose link came back would otherwise be reached only that late */
    int connect_ms = 1000;
    zmq_setsockopt(c->sock, ZMQ_CONNECT_TIMEOUT, &connect_ms, sizeof connect_ms);
    zsock_set_sndhwm(c->zs, 100000);
    zmq_setsockopt(c->sock, ZMQ_ROUTING_ID, c->routing_id, sizeof c->routing_id);
    c->sndtimeo = c->opts.timeout_ms;
    zsock_set_sndtimeo(c->zs, c->sndtimeo);
    if (c->opts.keys && !strncmp(c->endpoint, "tcp://", 6) &&
        psg_curve_apply_client(c->sock, c->opts.keys) < 0)
        return psg_error_wrap("%s", c->endpoint);
    if (watch_connections(c) < 0) return -1;
    if (zmq_connect(c->sock, c->endpoint) < 0)
        return psg_error_set("cannot connect to %s: %s", c->endpoint, zmq_strerror(errno));
    if (!(c->rx = psg_codec_rx_new(&c->opts))) return -1;
    return 0;
}

static void client_disconnect(psg_client_t *c) {
    if (c->stream) stream_close(c);
    if (c->events) zmq_socket_monitor(c->sock, NULL, 0);
    zsock_destroy(&c->events);
    zsock_destroy(&c->zs);
    c->sock = NULL;
    psg_codec_rx_destroy(&c->rx);
    /* what was in flight is dropped with the socket: nothing to wait for, nothing lost */
    c->up = false;
    c->down_since = 0;
    c->in_flight = 0;
    c->drops_at_send = c->drops;
}

psg_client_t *psg_client_new(const char *endpoint, const psg_wire_opts_t *opts) {
    psg_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        psg_error_set("out of memory");
        return NULL;
    }
    c->opts = opts ? *opts : psg_wire_opts_default();
    if (psg_codec_endpoint(endpoint, c->endpoint, sizeof c->endpoint) < 0) {
        free(c);
        return NULL;
    }
    psg_codec_init_czmq();
    c->stream = psg_stream_endpoint(c->endpoint);
    c->fd = -1;
    psg_wire_random(c->routing_id, sizeof c->routing_id);
    c->routing_id[0] |= 0x80; /* ZeroMQ's own ids start with a 0 byte */
    if (client_connect(c) < 0) {
        psg_client_destroy(&c);
        return NULL;
    }
    return c;
}

void psg_client_destroy(psg_client_t **cp) {
    if (!cp || !*cp) return;
    psg_client_t *c = *cp;
    *cp = NULL;
    client_disconnect(c);
    free(c);
}

const char *psg_client_endpoint(const psg_client_t *c) {
    return c->endpoint;
}
void *psg_client_socket(psg_client_t *c) {
    return c->sock;
}
int psg_client_fd(const psg_client_t *c) {
    return c->stream ? c->fd : -1;
}
void *psg_client_events_socket(psg_client_t *c) {
    return c->events ? zsock_resolve(c->events) : NULL;
}
uint64_t psg_client_peer_incarnation(const psg_client_t *c) {
    return c->peer_inc;
}
uint64_t psg_client_peer_restarts(const psg_client_t *c) {
    return c->peer_restarts;
}

/* One monitor event: [u16 event, u32 value] then the endpoint. */
static void read_event(psg_client_t *c) {
    zmsg_t *m = zmsg_recv(c->events);
    zframe_t *f = m ? zmsg_first(m) : NULL;
    if (f && zframe_size(f) == 6) {
        uint16_t ev;
        memcpy(&ev, zframe_data(f), 2);
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            c->up = true;
            c->down_since = 0;
        } else if (ev == ZMQ_EVENT_DISCONNECTED && c->up) { /* not a connect that failed */
            c->up = false;
            c->down_since = psg_codec_now_ms();
            c->drops++;
        }
    }
    zmsg_destroy(&m);
}

/* Reads the connection's events that arrived (up, down), reporting nothing. */
static void read_events(psg_client_t *c) {
    while (c->events && (zsock_events(c->events) & ZMQ_POLLIN)) read_event(c);
}

/* The peer timeout (heartbeats' interval + timeout), 0 without heartbeats. */
static int peer_timeout(const psg_client_t *c) {
    int ivl = 0, timeout = 0;
    psg_wire_heartbeat(c->opts.peer_timeout_ms, &ivl, &timeout);
    return ivl > 0 ? ivl + timeout : 0;
}

/* Requests in flight when a connection was lost since the oldest of them was sent: their
 * replies will never come, and no check said so yet. */
static bool loss_untold(const psg_client_t *c) {
    return c->in_flight > 0 && c->drops != c->drops_at_send;
}

int psg_client_check(psg_client_t *c) {
    read_events(c);
    int ivl = 0, timeout = 0;
    psg_wire_heartbeat(c->opts.peer_timeout_ms, &ivl, &timeout);
    /* requests sent after the connection went down: lost too once it stayed down for the
     * peer timeout (no other loss is coming for them: the peer may be gone for good) */
    if (c->in_flight > 0 && !c->up && c->down_since > 0 && ivl > 0 &&
        psg_codec_now_ms() - c->down_since > ivl + timeout) {
        c->drops++;
        c->down_since = psg_codec_now_ms();
    }
    if (!loss_untold(c)) return 0;
    int64_t lost = c->in_flight;
    c->in_flight = 0;
    c->drops_at_send = c->drops;
    return psg_error_set_code(PSG_ERR_UNAVAILABLE,
                              "%s: lost the connection to the peer with %lld request%s in flight: "
                              "it closed it (it stopped or restarted), or was silent for %d ms "
                              "(the peer timeout)",
                              c->endpoint, (long long)lost, lost == 1 ? "" : "s", ivl + timeout);
}

bool psg_client_peer_lost(psg_client_t *c) {
    /* a stream's peer that closed while nothing is in flight: nothing to read before its end
     * (with requests in flight their replies come first: the reader meets the end after them).
     * Not looked at before each send: a send to a closed peer finds it out itself (EPIPE) */
    if (c->stream && c->fd >= 0 && c->in_flight == 0) {
        struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) stream_lost(c);
    }
    read_events(c);
    int pt = peer_timeout(c);
    return pt > 0 && !c->up && c->down_since > 0 && psg_codec_now_ms() - c->down_since > pt;
}

/* A reply arrived: one request less in flight, and the peer's incarnation. */
static void got_reply(psg_client_t *c, const psg_msg_t *m) {
    if (c->in_flight > 0) c->in_flight--;
    if (!m->incarnation) return;
    if (c->peer_inc && m->incarnation != c->peer_inc) c->peer_restarts++;
    c->peer_inc = m->incarnation;
}

int psg_client_reset(psg_client_t *c) {
    client_disconnect(c);
    return client_connect(c);
}

/* How long a connection that went down may still be waited for: the peer timeout from when it
 * went down (then the peer is lost, as psg_client_check says of the requests in flight); -1
 * when it is up, never came up, or there are no heartbeats (no limit but the caller's). */
static int64_t down_left_ms(const psg_client_t *c) {
    int t = peer_timeout(c);
    if (c->up || c->down_since <= 0 || t <= 0) return -1;
    int64_t left = c->down_since + t - psg_codec_now_ms();
    return left > 0 ? left : 0;
}

/* A send to a peer already lost (down for the peer timeout) still looks this long for its
 * connection: a caller that loops until the peer comes back does not spin. */
#define LOST_LOOK_MS 100

/* A send to a lost peer connects to it afresh (at most once a look): ZeroMQ's own reconnects
 * have backed off to 1 s by then, so a peer that came back (a ps restarted, which the recovery
 * saw answer on its own connection) was reached up to 1 s late, after the look had given up
 * (test_replication's retried step failed so). The socket stays: its routing id, its monitor,
 * the pollers that hold it. Nothing is in flight on a lost connection to be dropped. */
static void redial(psg_client_t *c) {
    int64_t now = psg_codec_now_ms();
    if (now - c->redialed_at < LOST_LOOK_MS) return;
    c->redialed_at = now;
    zmq_disconnect(c->sock, c->endpoint);    /* its pending reconnect, and the back-off, dropped */
    (void)zmq_connect(c->sock, c->endpoint); /* if it fails, the look fails as before, naming it */
}

/* The error of a send whose peer could not be reached: lost (down for the peer timeout), or
 * not up within timeout_ms. */
static int unreachable(psg_client_t *c, bool lost, int timeout_ms, const char *what) {
    if (lost)
        return psg_error_set_code(PSG_ERR_UNAVAILABLE,
                                  "%s: cannot reach the peer to send %s: its connection has "
                                  "been down for the peer timeout (%d ms)",
                                  c->endpoint, what ? what : "a request", peer_timeout(c));
    if (what)
        return psg_error_set_code(PSG_ERR_UNREACHABLE,
                                  "%s: cannot reach the peer within %d ms to send %s (is it up?)",
                                  c->endpoint, timeout_ms, what);
    return psg_error_set_code(PSG_ERR_UNREACHABLE,
                              "%s: cannot reach the peer within %d ms (is it up?)", c->endpoint,
                              timeout_ms);
}

/* A stream client not connected tries again this often while a send waits. */
#define STREAM_DIAL_MS 20

/* Waits up to timeout_ms (< 0: no limit) for the socket to take a message at once (a
 * connection is up: IMMEDIATE queues nothing for a peer not connected), or for wake_fd (-1:
 * none) to be readable; a connection that went down is waited for until it stayed down for
 * the peer timeout (a send to a dead peer once held a worker's step for its whole step
 * timeout). 1: ready; 0: woken; -1 with the error set, naming the peer and what (NULL:
 * nothing named). */
static int wait_out(psg_client_t *c, int wake_fd, int timeout_ms, const char *what) {
    int64_t deadline = timeout_ms < 0 ? -1 : psg_codec_now_ms() + timeout_ms;
    for (;;) {
        read_events(c);
        int64_t left = timeout_ms < 0 ? -1 : psg_codec_left(deadline);
        int64_t down = down_left_ms(c);
        bool lost = down >= 0 && (left < 0 || down <= left);
        int64_t wait = !lost                              ? left
                       : down > 0                         ? down
                       : left >= 0 && left < LOST_LOOK_MS ? left
                                                          : LOST_LOOK_MS;
        bool last = lost ? down == 0 : left == 0;
        if (c->stream) { /* up, or connected now: a stream socket takes a message at once */
            if (c->fd >= 0 || stream_dial(c) == 0) return 1;
            int64_t nap = wait < 0 || wait > STREAM_DIAL_MS ? STREAM_DIAL_MS : wait;
            struct pollfd p = {.fd = wake_fd, .events = POLLIN};
            int n = poll(&p, 1, (int)nap);
            if (n < 0 && errno != EINTR)
                return psg_error_set("%s: poll failed: %s", c->endpoint, strerror(errno));
            if (n > 0) return 0;
            if (!last || nap < wait) continue;
            if (stream_dial(c) == 0) return 1;
            return unreachable(c, lost, timeout_ms, what);
        }
        if (lost && down == 0) redial(c);
        zmq_pollitem_t items[3] = {{c->sock, 0, ZMQ_POLLOUT, 0},
                                   {NULL, wake_fd, ZMQ_POLLIN, 0},
                                   {psg_client_events_socket(c), 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, c->events ? 3 : 2, (long)wait);
        if (n < 0 && errno != EINTR)
            return psg_error_set("%s: poll failed: %s", c->endpoint, zmq_strerror(errno));
        if (n > 0 && (items[0].revents & ZMQ_POLLOUT)) return 1;
        if (n > 0 && (items[1].revents & ZMQ_POLLIN)) return 0;
        if (n != 0 || !last) continue; /* its events (read above), or time still left */
        return unreachable(c, lost, timeout_ms, what);
    }
}

/* A request's frames on the stream: connected first if it is not (as a send waits for
 * ZeroMQ's connection); a peer found gone by the write (it restarted since the last message)
 * is connected to again once, the message written whole on the new connection. */
static int stream_send(psg_client_t *c, psg_codec_out_t *out, int timeout_ms, const char *op) {
    for (int attempt = 0;; attempt++) {
        if (c->fd < 0 && wait_out(c, -1, timeout_ms, op) <= 0) {
            psg_codec_out_clear(out);
            return -1;
        }
        if (c->in_flight++ == 0) c->drops_at_send = c->drops;
        int rc = psg_stream_write(c->fd, &c->stx, out, timeout_ms);
        int e = errno;
        if (rc == 0) {
            psg_codec_out_clear(out);
            return 0;
        }
        c->in_flight--;
        if ((e == EPIPE || e == ECONNRESET) && attempt == 0) {
            stream_lost(c);
            continue;
        }
        psg_codec_out_clear(out);
        if (e == EAGAIN)
            psg_error_set_code(PSG_ERR_UNREACHABLE,
                               "%s: the peer took nothing of %s for %d ms (is it stuck?)",
                               c->endpoint, op, timeout_ms);
        else
            psg_error_wrap("%s: sending %s", c->endpoint, op);
        psg_client_reset(c); /* a message may be half written */
        return -1;
    }
}

static int send_with_timeout(psg_client_t *c, psg_msg_t **req, uint64_t *id, int timeout_ms) {
    psg_msg_t *m = *req;
    *req = NULL;
    if (!m) return psg_error_set("psg_client_send: NULL request");
    m->kind = PSG_MSG_REQUEST;
    m->id = ++c->next_id;
    if (id) *id = m->id;
    psg_codec_out_t out = {0};
    int rc = psg_codec_encode(m, NULL, &c->opts, &out);
    char op[PSG_WIRE_MAX_OP + 1];
    psg_codec_copy_text(op, sizeof op, m->op ? m->op : "request");
    psg_msg_destroy(&m);
    if (rc < 0) return psg_error_wrap("%s: cannot encode %s", c->endpoint, op);
    if (!c->stream && timeout_ms != c->sndtimeo) {
        c->sndtimeo = timeout_ms;
        zsock_set_sndtimeo(c->zs, timeout_ms);
    }
    (void)psg_client_check(c); /* a loss before this send is not this request's */
    if (c->stream) return stream_send(c, &out, timeout_ms, op);
    if (c->in_flight++ == 0) c->drops_at_send = c->drops;
    /* the usual case, a connection up that takes it at once, without a poll (a poll of
     * ZeroMQ sockets is several syscalls: a one-op step's send made six) */
    rc = psg_codec_try_send(c->sock, &out);
    if (rc == 0) {
        c->in_flight--;
        /* nothing sent when the peer cannot be reached: the connection stays as it is (a
         * reset would drop the requests in flight on it, whose loss is then never told) */
        if (wait_out(c, -1, timeout_ms, op) <= 0) {
            psg_codec_out_clear(&out);
            return -1;
        }
        if (c->in_flight++ == 0) c->drops_at_send = c->drops;
        rc = psg_codec_send(c->sock, &out);
    }
    rc = rc < 0 ? -1 : 0;
    int e = errno;
    psg_codec_out_clear(&out);
    if (rc < 0) {
        if (e == EAGAIN)
            psg_error_set_code(PSG_ERR_UNREACHABLE,
                               "%s: cannot reach the peer within %d ms to send %s (is it up?)",
                               c->endpoint, timeout_ms, op);
        else
            psg_error_wrap("%s: sending %s", c->endpoint, op);
        /* A multipart message may be half sent: start over on a clean connection. */
        psg_client_reset(c);
        return -1;
    }
    return 0;
}

int psg_client_send(psg_client_t *c, psg_msg_t **req, uint64_t *id) {
    return send_with_timeout(c, req, id, c->opts.timeout_ms);
}

int psg_client_send_many(psg_client_t *c, psg_msg_t **req, uint64_t *id, int replies) {
    if (send_with_timeout(c, req, id, c->opts.timeout_ms) < 0) return -1;
    if (replies > 1) c->in_flight += replies - 1;
    return 0;
}

int psg_client_wait_writable(psg_client_t *c, int wake_fd, int timeout_ms) {
    return wait_out(c, wake_fd, timeout_ms, NULL);
}

int psg_client_send_note(psg_client_t *c, psg_msg_t **req) {
    char op[PSG_WIRE_MAX_OP + 1];
    snprintf(op, sizeof op, "%s", *req && (*req)->op ? (*req)->op : "request");
    if (wait_out(c, -1, 0, op) <= 0) { /* no connection up now: not sent, not waited for */
        psg_msg_destroy(req);
        return 0;
    }
    return send_with_timeout(c, req, NULL, c->opts.timeout_ms) < 0 ? -1 : 1;
}

/* One reply from the stream, without waiting. A connection that broke is closed: the loss of
 * what was in flight on it is told by psg_client_check. */
static psg_rx_result_t stream_read(psg_client_t *c, psg_msg_t **m, uint64_t *bad_id) {
    *m = NULL;
    *bad_id = 0;
    if (c->fd < 0) return PSG_RX_AGAIN;
    psg_stream_result_t r = psg_stream_read(&c->srx, c->fd);
    if (r == PSG_STREAM_AGAIN) return PSG_RX_AGAIN;
    if (r != PSG_STREAM_MSG) {
        stream_lost(c);
        return PSG_RX_AGAIN;
    }
    psg_route_t no_route = {0};
    psg_conn_t conn = {.fd = -1};
    psg_rx_result_t res = psg_codec_rx_feed(c->rx, c->srx.parts, c->srx.n, c->srx.too_many,
                                            &no_route, &conn, c->endpoint, "", m, bad_id);
    c->srx.n = 0;
    c->srx.too_many = false;
    return res;
}

int psg_client_recv(psg_client_t *c, psg_msg_t **out, int timeout_ms) {
    *out = NULL;
    int64_t deadline = timeout_ms < 0 ? -1 : psg_codec_now_ms() + timeout_ms;
    for (;;) {
        psg_msg_t *m = NULL;
        uint64_t bad_id;
        psg_route_t no_route;
        char peer[64];
        psg_rx_result_t r = c->stream ? stream_read(c, &m, &bad_id)
                                      : psg_codec_rx_read(c->rx, c->sock, false, &m, &bad_id,
                                                          &no_route, peer, sizeof peer);
        if (r == PSG_RX_MSG) {
            if (m->kind == PSG_MSG_REQUEST) {
                psg_msg_destroy(&m);
                return psg_error_set("%s: sent a request to a client", c->endpoint);
            }
            psg_codec_copy_text(m->peer, sizeof m->peer, c->endpoint);
            got_reply(c, m);
            *out = m;
            return 1;
        }
        if (r == PSG_RX_BAD || r == PSG_RX_FAIL)
            return psg_error_wrap("%s: bad reply (id %llu)", c->endpoint,
                                  (unsigned long long)bad_id);
        if (r == PSG_RX_NONE) continue;
        if (psg_client_check(c) < 0) return -1;
        if (psg_codec_rx_expire(c->rx, NULL, NULL) > 0)
            return psg_error_set("%s: a reply stayed incomplete for %d ms", c->endpoint,
                                 c->opts.timeout_ms);
        int64_t left = psg_codec_left(deadline);
        if (left == 0 && timeout_ms == 0) return 0; /* a poll found nothing: not an error */
        if (left == 0)
            return psg_error_set_code(PSG_ERR_TIMEOUT,
                                      "%s: no reply within %d ms (peer down or busy)", c->endpoint,
                                      timeout_ms),
                   0;
        if (c->stream) {
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            /* not connected: nothing comes, the caller's time runs out (a send connects) */
            if (poll(&p, 1, psg_codec_poll_ms(left)) < 0 && errno != EINTR)
                return psg_error_set("%s: poll failed: %s", c->endpoint, strerror(errno));
            continue;
        }
        zmq_pollitem_t items[2] = {{c->sock, 0, ZMQ_POLLIN, 0},
                                   {psg_client_events_socket(c), 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, c->events ? 2 : 1, left < 0 ? -1 : (long)left) < 0 && errno != EINTR)
            return psg_error_set("%s: poll failed: %s", c->endpoint, zmq_strerror(errno));
    }
}

/* Whether a message waits on sock now. ZMQ_EVENTS also takes the socket's pending commands,
 * so that its ZMQ_FD signals the next message: ZMQ_FD is edge-triggered. */
static bool has_message(void *sock) {
    int events = 0;
    size_t len = sizeof events;
    return zmq_getsockopt(sock, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN);
}

/* The socket's ZMQ_FD: readable when the socket has commands to take. */
static int socket_fd(void *sock) {
    int fd = -1;
    size_t len = sizeof fd;
    return zmq_getsockopt(sock, ZMQ_FD, &fd, &len) == 0 ? fd : -1;
}

/* zmq_poll of the clients' sockets and event sockets, with fewer system calls on a step's
 * critical path (issue 33): zmq_poll polls every descriptor once without waiting and asks
 * each socket's ZMQ_EVENTS before it sleeps and again after; here each socket is asked once
 * before, and after the sleep only a socket whose descriptor woke it. */
int psg_client_poll(psg_client_t *const *cs, int n, bool *ready, int timeout_ms) {
    if (n > PSG_CLIENT_POLL_MAX) n = PSG_CLIENT_POLL_MAX;
    struct pollfd fds[2 * PSG_CLIENT_POLL_MAX];
    int64_t deadline = timeout_ms < 0 ? -1 : psg_codec_now_ms() + timeout_ms;
    for (;;) {
        int count = 0;
        for (int i = 0; i < n; i++) { /* also re-arms each descriptor's edge */
            psg_client_t *c = cs[i];
            if (c->stream) { /* read ahead, or a loss not told yet: the caller reads now */
                ready[i] = psg_stream_buffered(&c->srx) || loss_untold(c);
                count += ready[i];
                fds[2 * i] = (struct pollfd){.fd = c->fd, .events = POLLIN};
                fds[2 * i + 1] = (struct pollfd){.fd = -1};
                continue;
            }
            void *events = c->events ? zsock_resolve(c->events) : NULL;
            ready[i] = has_message(c->sock) || (events && has_message(events));
            count += ready[i];
            fds[2 * i] = (struct pollfd){.fd = socket_fd(c->sock), .events = POLLIN};
            fds[2 * i + 1] =
                (struct pollfd){.fd = events ? socket_fd(events) : -1, .events = POLLIN};
        }
        int64_t left = timeout_ms < 0 ? -1 : psg_codec_left(deadline);
        if (count > 0 || left == 0) return count;
        int rc = poll(fds, (nfds_t)(2 * n), left < 0 ? -1 : left > INT_MAX ? INT_MAX : (int)left);
        if (rc < 0 && errno != EINTR)
            return psg_error_set("poll of %d connections failed: %s", n, strerror(errno));
        if (rc <= 0) return 0; /* the time ran out, or a signal */
        for (int i = 0; i < n; i++) {
            if (cs[i]->stream) {
                ready[i] = fds[2 * i].revents != 0;
            } else if (fds[2 * i + 1].revents) {
                ready[i] = true; /* the connection's events: the caller reads them */
            } else if (fds[2 * i].revents) {
                ready[i] = has_message(cs[i]->sock); /* not only another command */
            }
            count += ready[i];
        }
        if (count > 0) return count;
    }
}

psg_msg_t *psg_client_call(psg_client_t *c, psg_msg_t **req, int timeout_ms) {
    if (timeout_ms < 0) timeout_ms = c->opts.timeout_ms;
    char op[PSG_WIRE_MAX_OP + 1];
    snprintf(op, sizeof op, "%s", *req && (*req)->op ? (*req)->op : "request");
    int64_t deadline = psg_codec_now_ms() + timeout_ms;
    uint64_t id = 0;
    if (send_with_timeout(c, req, &id, timeout_ms) < 0) return NULL;
    for (;;) {
        psg_msg_t *m = NULL;
        int r = psg_client_recv(c, &m, (int)psg_codec_left(deadline));
        if (r < 0) {
            psg_client_reset(c);
            return NULL;
        }
        if (r == 0) {
            /* a deadline past (TF's DeadlineExceeded), not a peer known lost */
            psg_error_set_code(PSG_ERR_TIMEOUT,
                               "%s: no reply to %s within %d ms (peer down or busy)", c->endpoint,
                               op, timeout_ms);
            /* The request may still sit in a queue, or its reply come late: drop both. */
            psg_client_reset(c);
            return NULL;
        }
        if (m->id != id) { /* the late reply of an earlier request: not ours */
            psg_msg_destroy(&m);
            continue;
        }
        if (m->kind == PSG_MSG_ERROR) {
            psg_error_set_code((psg_err_code_t)m->code, "%s: %s", c->endpoint,
                               m->error ? m->error : "error without a text");
            psg_msg_destroy(&m);
            return NULL;
        }
        return m;
    }
}
