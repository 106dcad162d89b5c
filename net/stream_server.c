/* The one-host transport's server end (net/stream.h): a listening Unix stream socket, its
 * connections in an epoll set, each read by the owning thread and written by whichever
 * thread replies. A connection is known by the routing id of its client's hello, as a
 * ROUTER knows a DEALER: a client that connects again with the same id takes its place.
 *
 * A connection is freed when the table and every sender let go of it (refs): the owning
 * thread closes a broken one by shutdown(2), which also wakes a sender blocked on it, and the
 * descriptor is closed only with the last reference, so a number reused by another file is
 * never written. */
#include "net/stream.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A connection that says no hello in this long is closed (ZeroMQ's handshake interval). */
#define HELLO_MS 10000
#define EVENTS_AT_ONCE 64

typedef struct sconn {
    int fd;
    uint64_t ino;
    bool hello; /* its hello came: route is its client's */
    psg_route_t route;
    int64_t since;
    psg_stream_rx_t rx;
    psg_stream_tx_t tx;    /* under wlock */
    pthread_mutex_t wlock; /* one message written at a time */
    int refs;              /* under the server's lock: the table's, and each sender's */
    bool broken;           /* shut down: a sender writes nothing more */
    bool queued;           /* in the ready queue */
    char peer[48];
} sconn_t;

struct psg_stream_server {
    int listen_fd, epfd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int max_conns;
    atomic_uint_fast64_t *refused;
    pthread_mutex_t lock; /* the table and each connection's refs */
    sconn_t **conns;
    int n, cap;
    sconn_t **ready; /* connections to read before the next wait (the owner's) */
    int nready;
};

static void conn_unref_locked(sconn_t *c) {
    if (--c->refs > 0) return;
    close(c->fd);
    psg_stream_rx_clear(&c->rx);
    psg_stream_tx_clear(&c->tx);
    pthread_mutex_destroy(&c->wlock);
    free(c);
}

/* Takes c out of the table and the ready queue (the owner's thread). */
static void conn_close(psg_stream_server_t *ss, sconn_t *c) {
    epoll_ctl(ss->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    shutdown(c->fd, SHUT_RDWR);
    for (int i = 0; i < ss->nready; i++)
        if (ss->ready[i] == c) ss->ready[i--] = ss->ready[--ss->nready];
    pthread_mutex_lock(&ss->lock);
    c->broken = true;
    for (int i = 0; i < ss->n; i++)
        if (ss->conns[i] == c) {
            ss->conns[i] = ss->conns[--ss->n];
            break;
        }
    conn_unref_locked(c);
    pthread_mutex_unlock(&ss->lock);
}

psg_stream_server_t *psg_stream_server_new(const char *endpoint, int max_conns,
                                           atomic_uint_fast64_t *refused) {
    psg_stream_server_t *ss = calloc(1, sizeof *ss);
    if (!ss) {
        psg_error_set("out of memory");
        return NULL;
    }
    ss->listen_fd = ss->epfd = -1;
    ss->max_conns = max_conns;
    ss->refused = refused;
    pthread_mutex_init(&ss->lock, NULL);
    const char *path = psg_stream_path(endpoint);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) == 0 || strlen(path) >= sizeof addr.sun_path) {
        psg_error_set("cannot bind %s: the path is empty or over %zu bytes", endpoint,
                      sizeof addr.sun_path - 1);
        goto fail;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    ss->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ss->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ss->listen_fd < 0 || ss->epfd < 0) {
        psg_error_set("cannot bind %s: %s", endpoint, strerror(errno));
        goto fail;
    }
    (void)unlink(path); /* a socket file an earlier run left */
    if (bind(ss->listen_fd, (struct sockaddr *)&addr, sizeof addr) < 0 ||
        listen(ss->listen_fd, 1024) < 0) {
        psg_error_set("cannot bind %s: %s", endpoint, strerror(errno));
        goto fail;
    }
    memcpy(ss->path, path, strlen(path) + 1);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(ss->epfd, EPOLL_CTL_ADD, ss->listen_fd, &le) < 0) {
        psg_error_set("cannot watch %s: %s", endpoint, strerror(errno));
        goto fail;
    }
    return ss;
fail:
    psg_stream_server_destroy(&ss);
    return NULL;
}

void psg_stream_server_destroy(psg_stream_server_t **ssp) {
    if (!ssp || !*ssp) return;
    psg_stream_server_t *ss = *ssp;
    *ssp = NULL;
    while (ss->n > 0) conn_close(ss, ss->conns[ss->n - 1]);
    if (ss->listen_fd >= 0) close(ss->listen_fd);
    if (ss->path[0]) (void)unlink(ss->path);
    if (ss->epfd >= 0) close(ss->epfd);
    pthread_mutex_destroy(&ss->lock);
    free(ss->conns);
    free(ss->ready);
    free(ss);
}

/* At the cap: the oldest connection that said no hello yet is closed for a new one, as a
 * ZeroMQ server closes the oldest that never finished its handshake. false: none. */
static bool close_oldest_silent(psg_stream_server_t *ss) {
    sconn_t *oldest = NULL;
    for (int i = 0; i < ss->n; i++)
        if (!ss->conns[i]->hello && (!oldest || ss->conns[i]->since < oldest->since))
            oldest = ss->conns[i];
    if (!oldest) return false;
    conn_close(ss, oldest);
    if (ss->refused) atomic_fetch_add(ss->refused, 1);
    return true;
}

/* Room for one more connection in the table (senders read it under the lock: it moves only
 * under it) and in the ready queue. */
static int grow(psg_stream_server_t *ss) {
    if (ss->n < ss->cap) return 0;
    int cap = ss->cap ? 2 * ss->cap : 16;
    pthread_mutex_lock(&ss->lock);
    sconn_t **conns = realloc(ss->conns, (size_t)cap * sizeof *conns);
    if (conns) ss->conns = conns;
    pthread_mutex_unlock(&ss->lock);
    sconn_t **ready = conns ? realloc(ss->ready, (size_t)cap * sizeof *ready) : NULL;
    if (ready) ss->ready = ready;
    if (!ready) return -1;
    ss->cap = cap;
    return 0;
}

static void accept_all(psg_stream_server_t *ss) {
    for (;;) {
        int fd = accept4(ss->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN: all taken; anything else: tried again at the next wake */
        if (ss->n >= ss->max_conns && !close_oldest_silent(ss)) {
            close(fd);
            if (ss->refused) atomic_fetch_add(ss->refused, 1);
            continue;
        }
        sconn_t *c = calloc(1, sizeof *c);
        struct stat st;
        if (!c || fstat(fd, &st) < 0) {
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->ino = (uint64_t)st.st_ino;
        c->since = psg_codec_now_ms();
        c->refs = 1;
        psg_stream_rx_init(&c->rx);
        psg_stream_tx_init(&c->tx);
        pthread_mutex_init(&c->wlock, NULL);
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
            snprintf(c->peer, sizeof c->peer, "pid %d on this host", (int)cred.pid);
        else
            snprintf(c->peer, sizeof c->peer, "a process on this host");
        psg_stream_tune(fd);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(ss->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 || grow(ss) < 0) {
            epoll_ctl(ss->epfd, EPOLL_CTL_DEL, fd, NULL);
            conn_unref_locked(c);
            continue;
        }
        pthread_mutex_lock(&ss->lock);
        ss->conns[ss->n++] = c;
        pthread_mutex_unlock(&ss->lock);
    }
}

static void enqueue(psg_stream_server_t *ss, sconn_t *c) {
    if (c->queued) return;
    c->queued = true;
    ss->ready[ss->nready++] = c;
}

/* Connections silent since they connected, without a hello, are closed. */
static void close_silent(psg_stream_server_t *ss) {
    int64_t now = psg_codec_now_ms();
    for (int i = ss->n - 1; i >= 0; i--)
        if (!ss->conns[i]->hello && now - ss->conns[i]->since > HELLO_MS)
            conn_close(ss, ss->conns[i]);
}

/* Waits up to wait_ms for events and queues the connections they name. */
static int gather(psg_stream_server_t *ss, int64_t wait_ms) {
    struct epoll_event evs[EVENTS_AT_ONCE];
    int n = epoll_wait(ss->epfd, evs, EVENTS_AT_ONCE, psg_codec_poll_ms(wait_ms));
    if (n < 0 && errno != EINTR) return psg_error_set("epoll_wait failed: %s", strerror(errno));
    for (int i = 0; i < n; i++) {
        void *p = evs[i].data.ptr;
        if (p)
            enqueue(ss, p);
        else
            accept_all(ss);
    }
    if (n == 0) close_silent(ss);
    return 0;
}

int psg_stream_server_wait(psg_stream_server_t *ss, int64_t wait_ms) {
    return ss->nready > 0 ? 0 : gather(ss, wait_ms);
}

/* A hello: the client's routing id. A connection with the same id before it is replaced. */
static int take_hello(psg_stream_server_t *ss, sconn_t *c) {
    psg_stream_rx_t *rx = &c->rx;
    bool ok = !rx->too_many && psg_stream_hello_id(rx->parts, rx->n, &c->route);
    for (int i = 0; i < rx->n; i++) zmq_msg_close(&rx->parts[i]);
    rx->n = 0;
    rx->too_many = false;
    if (!ok) return -1;
    for (int i = 0; i < ss->n; i++) {
        sconn_t *o = ss->conns[i];
        if (o != c && o->hello && o->route.len == c->route.len &&
            !memcmp(o->route.id, c->route.id, c->route.len)) {
            conn_close(ss, o);
            break;
        }
    }
    pthread_mutex_lock(&ss->lock);
    c->hello = true;
    pthread_mutex_unlock(&ss->lock);
    return 0;
}

psg_rx_result_t psg_stream_server_read(psg_stream_server_t *ss, psg_codec_rx_t *rx, psg_msg_t **out,
                                       uint64_t *bad_id, psg_route_t *bad_route, char *bad_peer,
                                       size_t bad_peer_size, atomic_uint_fast64_t *dropped) {
    *out = NULL;
    *bad_id = 0;
    bad_route->len = 0;
    for (;;) {
        if (ss->nready == 0 && (gather(ss, 0) < 0 || ss->nready == 0))
            return ss->nready == 0 ? PSG_RX_AGAIN : PSG_RX_FAIL;
        sconn_t *c = ss->ready[0];
        psg_stream_result_t r = psg_stream_read(&c->rx, c->fd);
        if (r == PSG_STREAM_AGAIN) {
            c->queued = false;
            ss->ready[0] = ss->ready[--ss->nready];
            continue;
        }
        if (r != PSG_STREAM_MSG) {
            if (r == PSG_STREAM_BAD) atomic_fetch_add(dropped, 1);
            conn_close(ss, c);
            continue;
        }
        if (!psg_stream_buffered(&c->rx)) { /* the socket's next bytes wake the next wait */
            c->queued = false;
            ss->ready[0] = ss->ready[--ss->nready];
        }
        if (!c->hello) {
            if (take_hello(ss, c) < 0) {
                atomic_fetch_add(dropped, 1);
                conn_close(ss, c);
            }
            continue;
        }
        psg_conn_t conn = {.fd = c->fd, .ino = c->ino};
        psg_codec_copy_text(bad_peer, bad_peer_size, c->peer);
        *bad_route = c->route;
        psg_rx_result_t res = psg_codec_rx_feed(rx, c->rx.parts, c->rx.n, c->rx.too_many, &c->route,
                                                &conn, c->peer, "", out, bad_id);
        c->rx.n = 0;
        c->rx.too_many = false;
        return res;
    }
}

int psg_stream_server_send(psg_stream_server_t *ss, const psg_route_t *route, psg_codec_out_t *out,
                           int timeout_ms) {
    sconn_t *c = NULL;
    pthread_mutex_lock(&ss->lock);
    for (int i = 0; i < ss->n && !c; i++) {
        sconn_t *o = ss->conns[i];
        if (o->hello && !o->broken && o->route.len == route->len &&
            !memcmp(o->route.id, route->id, route->len))
            c = o;
    }
    if (c) c->refs++;
    pthread_mutex_unlock(&ss->lock);
    if (!c) {
        errno = EHOSTUNREACH;
        return psg_error_set("no connection to the peer");
    }
    pthread_mutex_lock(&c->wlock);
    int rc = psg_stream_write(c->fd, &c->tx, out, timeout_ms);
    int e = errno;
    if (rc < 0) shutdown(c->fd, SHUT_RDWR); /* maybe half written: the owner closes it */
    pthread_mutex_unlock(&c->wlock);
    pthread_mutex_lock(&ss->lock);
    conn_unref_locked(c);
    pthread_mutex_unlock(&ss->lock);
    /* the owner's thread, asleep in its wait, sees the shutdown as the connection's hang-up */
    errno = e == EPIPE || e == ECONNRESET ? EHOSTUNREACH : e;
    return rc;
}
