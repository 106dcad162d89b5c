/* The process's guard of its servers' connections: one czmq actor that answers ZeroMQ's
 * authentication requests (ZAP, inproc://zeromq.zap.01) for every CURVE server of the
 * process against that server's allow-list, and watches every server's connections through
 * socket monitors: each refused CURVE peer is counted and logged once per address and reason
 * (a refused peer never completes its handshake: ZeroMQ hands none of its frames to the
 * server), and a server's open connections are capped. Not the keys (curve_keys.c) nor the
 * sockets (server.c). */
#include "net/codec.h"
#include "net/curve_internal.h"

#include "psgraph/error.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define MAX_WATCHED 256
#define MAX_FDS 256
#define MAX_LOGGED 1024
#define MAX_CAP_NAMED 32 /* connections closed at the cap named in the log, per server */
/* (no HANDSHAKE_SUCCEEDED: libzmq gives it the value 0, not the descriptor; see written_bytes) */
#define MONITOR_EVENTS                                                                             \
    (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |           \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
/* The most a server writes to a connection whose handshake has not finished: ZMTP 3's greeting
 * (64 bytes, RFC 23), then with CURVE its WELCOME (168 bytes and a 2-byte frame header, RFC 26)
 * and the ERROR that refuses an INITIATE (6 + 1 + a 3-digit status code, framed: 12). Past it
 * only by READY, the last command of the handshake, which libzmq's CURVE server sends once
 * the client's INITIATE checked out and ZAP said 200 (>= 52 bytes: it names the socket type).
 * With NULL (plain TCP) the server sends its READY as soon as the peer's greeting arrived. */
#define GREETING_BYTES 64
#define CURVE_UNFINISHED_MAX (GREETING_BYTES + 170 + 12)
/* tcpi_bytes_acked's offset in the kernel's struct tcp_info (linux/tcp.h: 8 bytes of u8
 * fields, 24 u32, tcpi_pacing_rate, tcpi_max_pacing_rate); glibc's struct, which czmq
 * includes (linux/tcp.h clashes with it), stops before it. The kernel only appends fields. */
#define TCPI_BYTES_ACKED_AT 120
/* a handshake the peer broke off (a failure code of ours, not ZeroMQ's): a client without
 * keys sees the mismatch too, and when it hangs up first the server never reads its greeting */
#define FAILURE_PEER_LEFT 0xffffffffu

typedef struct {
    char domain[32];
    char endpoint[256]; /* as bound, once a connection showed it; else as asked */
    const psg_curve_keys_t *keys;
    atomic_uint_fast64_t *refused;
    zsock_t *mon;
    struct {
        int fd;
        char addr[64];
    } fds[MAX_FDS]; /* accepted connections and their peers; fd -1: free */
    /* handshake failures waiting for their DISCONNECTED, oldest first (0: refused by ZAP,
     * which logged it): two failing handshakes can interleave, HF HF D D */
    uint32_t failures[8];
    int nfailures;
    /* its open connections, oldest first, against its cap */
    struct conn {
        int fd;
        uint64_t ino;
        bool shook; /* finished its handshake (seen once: it stays so) */
    } * conns;
    int nconns, cap;
    uint64_t capped; /* connections closed at the cap */
    int named;       /* of them named in the log (MAX_CAP_NAMED) */
} watched_t;

typedef struct {
    zsock_t *pipe, *zap;
    zpoller_t *poller;
    watched_t *w[MAX_WATCHED];
    int nw;
    char (*logged)[160]; /* "domain|address|reason" already logged */
    int nlogged;
} guard_t;

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static zactor_t *guard;
static int guard_refs;
static unsigned long long guard_next;

/* ---- refusals ---- */

/* Logs what happened to a peer unless this (address, kind) was logged before. */
static void log_once(guard_t *g, watched_t *w, const char *addr, const char *kind,
                     const char *what) {
    char key[160];
    snprintf(key, sizeof key, "%s|%s|%s", w->domain, addr, kind);
    for (int i = 0; i < g->nlogged; i++)
        if (!strcmp(g->logged[i], key)) return;
    if (g->nlogged == MAX_LOGGED) return;
    snprintf(g->logged[g->nlogged++], sizeof g->logged[0], "%s", key);
    psg_net_log("%s: %s", w->endpoint, what);
    if (g->nlogged == MAX_LOGGED)
        psg_net_log("%s: %d refusals logged; further ones are counted, not logged", w->endpoint,
                    MAX_LOGGED);
}

/* Counts a refusal and logs it unless this (address, reason) was logged before. */
static void refuse(guard_t *g, watched_t *w, const char *addr, const char *kind, const char *why) {
    atomic_fetch_add(w->refused, 1);
    char what[512];
    snprintf(what, sizeof what,
             "refused a peer at %s: %s (CURVE; further refusals of this peer "
             "for this reason are counted, not logged)",
             addr, why);
    log_once(g, w, addr, kind, what);
}

static watched_t *find_domain(guard_t *g, const char *domain, size_t len) {
    for (int i = 0; i < g->nw; i++) /* a server without keys has no ZAP domain of its own */
        if (g->w[i]->keys && strlen(g->w[i]->domain) == len &&
            !memcmp(g->w[i]->domain, domain, len))
            return g->w[i];
    return NULL;
}

/* ---- the handshake monitor ---- */

static void fd_put(watched_t *w, int fd, const char *addr) {
    int free_slot = -1;
    for (int i = 0; i < MAX_FDS; i++) {
        if (w->fds[i].fd == fd || (free_slot < 0 && w->fds[i].fd < 0)) free_slot = i;
        if (w->fds[i].fd == fd) break;
    }
    if (free_slot < 0) free_slot = fd % MAX_FDS; /* full: forget one */
    w->fds[free_slot].fd = fd;
    snprintf(w->fds[free_slot].addr, sizeof w->fds[free_slot].addr, "%s", addr);
}

/* The peer of accepted connection fd, taken at once: the fd may be closed soon. Checked to
 * be a connection to this server's port (the number may have been reused already). */
static void peer_of(int fd, const char *endpoint, char *out, size_t size) {
    snprintf(out, size, "an address unknown (it left before the monitor saw it)");
    struct sockaddr_storage peer, self;
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) < 0 ||
        getsockname(fd, (struct sockaddr *)&self, &sl) < 0)
        return;
    const char *colon = strrchr(endpoint, ':');
    int port = colon ? atoi(colon + 1) : -1;
    char host[INET6_ADDRSTRLEN] = "?";
    int self_port = -1; /* the host names the peer: a client's port changes with every retry */
    if (peer.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&peer)->sin_addr, host, sizeof host);
        self_port = ntohs(((struct sockaddr_in *)&self)->sin_port);
    } else if (peer.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&peer)->sin6_addr, host, sizeof host);
        self_port = ntohs(((struct sockaddr_in6 *)&self)->sin6_port);
    }
    if (self_port == port) snprintf(out, size, "%s", host);
}

/* ---- the cap on connections ---- */

static void conn_drop(watched_t *w, int i) {
    memmove(&w->conns[i], &w->conns[i + 1], (size_t)(w->nconns - i - 1) * sizeof *w->conns);
    w->nconns--;
}

/* Forgets the connections whose descriptor was closed (or holds another socket now). */
static void conn_prune(watched_t *w) {
    for (int i = w->nconns - 1; i >= 0; i--) {
        struct stat st;
        if (fstat(w->conns[i].fd, &st) < 0 || (uint64_t)st.st_ino != w->conns[i].ino)
            conn_drop(w, i);
    }
}

/* The bytes this end wrote to connection fd: those the peer acknowledged (TCP_INFO) plus those
 * still queued (SIOCOUTQ); -1 when fd is no TCP socket (ipc://) or the kernel predates
 * tcpi_bytes_acked (Linux 4.1). Read in that order, again while the acknowledged count moved: an
 * ACK between the reads would move bytes from the queue to the count after it was read (at
 * worst, after 3 tries, a lower bound: never more than was written).
 *
 * Why this tells a finished handshake: ZeroMQ's HANDSHAKE_SUCCEEDED event carries the value
 * 0, not the descriptor (libzmq 4.3, stream_engine_base.cpp mechanism_ready), and nothing
 * else it tells the guard names the connection. The descriptor of a peer's messages
 * (ZMQ_SRCFD) is seen by the server's thread, not here, and only once the peer sends: a
 * client that finished its handshake and has not sent yet would look idle. The bytes a peer
 * sent are its to choose: a greeting, a HELLO and most of a long INITIATE pass any count
 * without finishing. What the server wrote is not: the peer cannot make it write READY
 * without passing the handshake (CURVE_UNFINISHED_MAX). */
static long long written_bytes(int fd) {
    uint64_t a[32], b[32]; /* struct tcp_info as the kernel fills it (TCPI_BYTES_ACKED_AT) */
    for (int tries = 0;; tries++) {
        socklen_t al = sizeof a, bl = sizeof b;
        int queued = 0; /* TIOCOUTQ is SIOCOUTQ (linux/sockios.h) on a socket */
        uint64_t acked_a, acked_b;
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, a, &al) < 0 || ioctl(fd, TIOCOUTQ, &queued) < 0 ||
            getsockopt(fd, IPPROTO_TCP, TCP_INFO, b, &bl) < 0 || al < TCPI_BYTES_ACKED_AT + 8)
            return -1;
        memcpy(&acked_a, (const char *)a + TCPI_BYTES_ACKED_AT, 8);
        memcpy(&acked_b, (const char *)b + TCPI_BYTES_ACKED_AT, 8);
        if (acked_a == acked_b || tries == 2) return (long long)acked_a + (queued > 0 ? queued : 0);
    }
}

/* Whether a connection finished its handshake: for CURVE, the server wrote its READY; for
 * NULL, the peer sent its greeting (plain TCP authenticates no one: any peer can finish). A
 * connection whose count cannot be read (ipc://) counts as not finished. */
static bool conn_finished(const watched_t *w, struct conn *c) {
    if (!c->shook)
        c->shook = written_bytes(c->fd) > (w->keys ? CURVE_UNFINISHED_MAX : GREETING_BYTES);
    return c->shook;
}

/* "host:port" of the peer of fd, "an address unknown" when it cannot be read. */
static void peer_name(int fd, char *out, size_t size) {
    struct sockaddr_storage peer;
    socklen_t pl = sizeof peer;
    char host[INET6_ADDRSTRLEN];
    snprintf(out, size, "an address unknown");
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) < 0) return;
    if (peer.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&peer;
        if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof host))
            snprintf(out, size, "%s:%u", host, (unsigned)ntohs(in->sin_port));
    } else if (peer.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&peer;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host))
            snprintf(out, size, "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
    }
}

/* Closes connection fd at the cap (ZeroMQ sees it end), naming its peer in the log up to
 * MAX_CAP_NAMED times per server, then saying that no more are named. */
static void cap_close(watched_t *w, int fd, bool is_new) {
    char addr[96];
    peer_name(fd, addr, sizeof addr);
    w->capped++;
    if (w->named < MAX_CAP_NAMED && is_new)
        psg_net_log("%s: closed the new connection of %s at the cap: every open one finished its "
                    "handshake",
                    w->endpoint, addr);
    else if (w->named < MAX_CAP_NAMED)
        psg_net_log("%s: closed the connection of %s at the cap: it never %s", w->endpoint, addr,
                    w->keys ? "finished its CURVE handshake" : "sent its ZMTP greeting");
    if (w->named < MAX_CAP_NAMED && ++w->named == MAX_CAP_NAMED)
        psg_net_log("%s: %d connections closed at the cap named; further ones are counted, not "
                    "logged",
                    w->endpoint, MAX_CAP_NAMED);
    shutdown(fd, SHUT_RDWR); /* after its line: whoever sees it closed finds it logged */
}

/* A connection accepted: at the cap, the oldest that never finished its handshake (a client
 * that connected and sent nothing, or stopped mid-handshake) is closed for it, else the new
 * one; the cap logged once, each closed connection named. */
static void conn_accepted(guard_t *g, watched_t *w, int fd) {
    struct stat st;
    if (fstat(fd, &st) < 0) return; /* gone already */
    if (w->nconns >= w->cap) conn_prune(w);
    if (w->nconns >= w->cap) {
        int victim = -1;
        for (int i = 0; i < w->nconns && victim < 0; i++)
            if (!conn_finished(w, &w->conns[i])) victim = i;
        char what[512];
        snprintf(
            what, sizeof what,
            "%d connections open, at its cap of %d (--max-connections, or what ulimit -n leaves): "
            "closing %s; further ones are counted, not logged",
            w->nconns, w->cap,
            victim >= 0 ? "the oldest that never finished its handshake for each new one"
                        : "new ones");
        log_once(g, w, "-", "cap", what);
        cap_close(w, victim >= 0 ? w->conns[victim].fd : fd, victim < 0);
        if (victim < 0) return;
        conn_drop(w, victim);
    }
    if (w->nconns == w->cap) return; /* no room to track it (cap 0) */
    w->conns[w->nconns++] = (struct conn){fd, (uint64_t)st.st_ino, false};
}

/* A connection closed: out of the table. */
static void conn_closed(watched_t *w, int fd) {
    for (int i = 0; i < w->nconns; i++)
        if (w->conns[i].fd == fd) {
            conn_drop(w, i);
            return;
        }
}

static const char *protocol_reason(uint32_t code, const char **kind) {
    switch (code) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        *kind = "plain";
        return "it does not speak CURVE (a client without keys, sending plain frames)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
        *kind = "crypto";
        return "its hello does not decrypt with this cluster's key (it was given another "
               "server key: keys of another cluster?)";
    default:
        *kind = "protocol";
        return "the CURVE handshake failed (a malformed or unexpected handshake command)";
    }
}

static void push_failure(watched_t *w, uint32_t failure) {
    int cap = (int)(sizeof w->failures / sizeof w->failures[0]);
    if (w->nfailures == cap) /* the oldest never got its DISCONNECTED: dropped */
        memmove(w->failures, w->failures + 1, (size_t)--w->nfailures * sizeof *w->failures);
    w->failures[w->nfailures++] = failure;
}

/* One monitor event: [u16 event, u32 value] then the socket's endpoint. */
static void monitor_event(guard_t *g, watched_t *w) {
    zmsg_t *m = zmsg_recv(w->mon);
    zframe_t *f = m ? zmsg_first(m) : NULL;
    char *ep = m && zmsg_size(m) >= 2 ? zframe_strdup(zmsg_next(m)) : NULL;
    if (f && zframe_size(f) == 6) {
        uint16_t ev;
        uint32_t value;
        memcpy(&ev, zframe_data(f), 2);
        memcpy(&value, zframe_data(f) + 2, 4);
        if (ep && !strncmp(ep, "tcp://", 6)) snprintf(w->endpoint, sizeof w->endpoint, "%s", ep);
        if (ev == ZMQ_EVENT_ACCEPTED) {
            char addr[64];
            peer_of((int)value, w->endpoint, addr, sizeof addr);
            fd_put(w, (int)value, addr);
            conn_accepted(g, w, (int)value);
        } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            /* ZeroMQ says which connection only in the DISCONNECTED that follows at once */
            push_failure(w, value ? value : ZMQ_PROTOCOL_ERROR_ZMTP_UNSPECIFIED);
        } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            push_failure(w, 0); /* the ZAP handler refused it, and logged it */
        } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            push_failure(w, FAILURE_PEER_LEFT);
        } else if (ev == ZMQ_EVENT_DISCONNECTED) {
            conn_closed(w, (int)value);
            const char *addr = "an address unknown";
            int slot = -1;
            for (int i = 0; i < MAX_FDS && slot < 0; i++)
                if (w->fds[i].fd == (int)value) slot = i;
            if (slot >= 0) addr = w->fds[slot].addr;
            uint32_t failure = 0;
            if (w->nfailures > 0) {
                failure = w->failures[0];
                memmove(w->failures, w->failures + 1, (size_t)--w->nfailures * sizeof *w->failures);
            }
            if (failure == FAILURE_PEER_LEFT) {
                /* not counted as refused: a cluster's own client may be closed mid-handshake */
                char what[256];
                snprintf(what, sizeof what,
                         "a peer at %s closed its connection during the CURVE "
                         "handshake (a client without keys hangs up so; not counted as refused)",
                         addr);
                log_once(g, w, addr, "left", what);
            } else if (failure) {
                const char *kind;
                const char *why = protocol_reason(failure, &kind);
                refuse(g, w, addr, kind, why);
            }
            if (slot >= 0) w->fds[slot].fd = -1;
        }
    }
    free(ep);
    zmsg_destroy(&m);
}

static void drain_monitors(guard_t *g) {
    for (int i = 0; i < g->nw; i++)
        while (zsock_events(g->w[i]->mon) & ZMQ_POLLIN) monitor_event(g, g->w[i]);
}

/* ---- ZAP (RFC 27): version, request id, domain, address, identity, mechanism, key ---- */

static void zap_reply(guard_t *g, zframe_t **request_id, const char *code, const char *text,
                      const char *user) {
    zmsg_t *r = zmsg_new();
    zmsg_addstr(r, "1.0");
    zmsg_append(r, request_id);
    zmsg_addstr(r, code);
    zmsg_addstr(r, text);
    zmsg_addstr(r, user);
    zmsg_addmem(r, "", 0);
    zmsg_send(&r, g->zap);
}

static void zap_request(guard_t *g) {
    zmsg_t *m = zmsg_recv(g->zap);
    if (!m) return;
    drain_monitors(g); /* the endpoint as bound, before it is named in a log line */
    zframe_t *version = zmsg_pop(m), *id = zmsg_pop(m), *domain = zmsg_pop(m);
    char *address = zmsg_popstr(m);
    zframe_t *identity = zmsg_pop(m);
    char *mechanism = zmsg_popstr(m);
    zframe_t *key = zmsg_pop(m);
    if (!id) {
        /* not a ZAP request: nothing to answer */
    } else if (!version || !zframe_streq(version, "1.0") || !domain || !mechanism) {
        zap_reply(g, &id, "500", "malformed ZAP request", "");
    } else {
        watched_t *w = find_domain(g, (const char *)zframe_data(domain), zframe_size(domain));
        const char *name = NULL;
        char peer[96];
        snprintf(peer, sizeof peer, "%s", address && *address ? address : "an address unknown");
        if (!w) {
            /* a CURVE socket of this process that is not psgraph's: what ZeroMQ does for it
             * without a handler (psgraph's own sockets always have their domain here) */
            zap_reply(g, &id, "200", "OK", "");
        } else if (strcmp(mechanism, "CURVE") || !key || zframe_size(key) != PSG_CURVE_KEY_BYTES) {
            refuse(g, w, peer, "mechanism", "it does not speak CURVE");
            zap_reply(g, &id, "400", "CURVE only", "");
        } else if (!(name = psg_curve_keys_name(w->keys, zframe_data(key)))) {
            char z85[41], why[300];
            zmq_z85_encode(z85, zframe_data(key), PSG_CURVE_KEY_BYTES);
            snprintf(why, sizeof why, "its key %s is not in the allow-list of %s", z85,
                     psg_curve_keys_dir(w->keys));
            refuse(g, w, peer, "key", why);
            zap_reply(g, &id, "400", "key not in the allow-list", "");
        } else {
            /* the User-Id ZeroMQ puts on every frame of the connection: psg_msg_t.peer_key */
            zap_reply(g, &id, "200", "OK", name);
        }
    }
    zframe_destroy(&version);
    zframe_destroy(&id);
    zframe_destroy(&domain);
    zframe_destroy(&identity);
    zframe_destroy(&key);
    free(address);
    free(mechanism);
    zmsg_destroy(&m);
}

/* ---- the actor ---- */

static void watch_remove(guard_t *g, int i) {
    zpoller_remove(g->poller, g->w[i]->mon);
    zsock_destroy(&g->w[i]->mon);
    free(g->w[i]->conns);
    free(g->w[i]);
    g->w[i] = g->w[--g->nw];
}

/* A command from the pipe: ADD domain endpoint monitor keys refused | DEL domain | $TERM.
 * Returns false on $TERM. */
static bool command(guard_t *g) {
    char *cmd = NULL, *domain = NULL, *endpoint = NULL, *monitor = NULL;
    void *keys = NULL, *refused = NULL;
    int cap = 0;
    if (zsock_recv(g->pipe, "ssssppi", &cmd, &domain, &endpoint, &monitor, &keys, &refused, &cap) <
        0)
        return false;
    bool go_on = cmd && strcmp(cmd, "$TERM");
    int status = 0;
    if (cmd && !strcmp(cmd, "ADD")) {
        watched_t *w = g->nw < MAX_WATCHED ? calloc(1, sizeof *w) : NULL;
        if (w && !(w->conns = calloc((size_t)cap + 1, sizeof *w->conns))) {
            free(w);
            w = NULL;
        }
        if (w && (w->mon = zsock_new_pair(monitor)) != NULL) {
            w->cap = cap;
            snprintf(w->domain, sizeof w->domain, "%s", domain);
            snprintf(w->endpoint, sizeof w->endpoint, "%s", endpoint);
            w->keys = keys;
            w->refused = refused;
            for (int i = 0; i < MAX_FDS; i++) w->fds[i].fd = -1;
            zpoller_add(g->poller, w->mon);
            g->w[g->nw++] = w;
        } else {
            if (w) free(w->conns);
            free(w);
            status = -1;
        }
    } else if (cmd && !strcmp(cmd, "DEL")) {
        for (int i = 0; i < g->nw; i++)
            if (!strcmp(g->w[i]->domain, domain)) {
                drain_monitors(g);
                watch_remove(g, i);
                break;
            }
    }
    if (go_on) zsock_signal(g->pipe, (byte)(status < 0));
    free(cmd);
    free(domain);
    free(endpoint);
    free(monitor);
    return go_on;
}

static void guard_actor(zsock_t *pipe, void *args) {
    guard_t g = {.pipe = pipe};
    int *started = args;
    g.zap = zsock_new(ZMQ_REP);
    g.logged = calloc(MAX_LOGGED, sizeof *g.logged);
    bool bound = g.zap && zsock_bind(g.zap, "%s", ZAP_ENDPOINT) == 0;
    if (!bound || !g.logged || !(g.poller = zpoller_new(pipe, g.zap, NULL))) {
        *started = -1;
        zsock_signal(pipe, 0);
    } else {
        *started = 1;
        zsock_signal(pipe, 0);
        for (;;) {
            void *which = zpoller_wait(g.poller, -1);
            if (!which) {
                if (zpoller_terminated(g.poller)) break;
                continue;
            }
            if (which == pipe) {
                if (!command(&g)) break;
            } else if (which == g.zap) {
                zap_request(&g);
            } else {
                for (int i = 0; i < g.nw; i++)
                    if (which == g.w[i]->mon) monitor_event(&g, g.w[i]);
            }
        }
    }
    while (g.nw) watch_remove(&g, g.nw - 1);
    zpoller_destroy(&g.poller);
    /* let the endpoint go now, not when ZeroMQ's reaper gets to the socket: a server made
     * right after the last one closed starts a new guard, which binds it again */
    if (bound) zsock_unbind(g.zap, "%s", ZAP_ENDPOINT);
    zsock_destroy(&g.zap);
    free(g.logged);
}

/* ---- attach, detach ---- */

int psg_curve_guard_attach(void *sock, const char *endpoint, const psg_curve_keys_t *k,
                           int max_connections, atomic_uint_fast64_t *refused, char *domain,
                           size_t size) {
    psg_codec_init_czmq();
    pthread_mutex_lock(&guard_lock);
    int rc = 0;
    if (!guard) {
        int started = 0;
        guard = zactor_new(guard_actor, &started);
        if (!guard || started != 1) {
            zactor_destroy(&guard);
            pthread_mutex_unlock(&guard_lock);
            return psg_error_set("cannot start the CURVE authentication handler: %s is taken "
                                 "(another ZAP handler in this process?)",
                                 ZAP_ENDPOINT);
        }
        /* a guard that died can never hang a server's start or close */
        zsock_set_rcvtimeo(zactor_sock(guard), 5000);
    }
    unsigned long long n = ++guard_next;
    snprintf(domain, size, "psgraph-%llu", n);
    char monitor[96];
    snprintf(monitor, sizeof monitor, "inproc://psgraph-curve-monitor-%llu", n);
    if ((k && zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) < 0) ||
        zmq_socket_monitor(sock, monitor, MONITOR_EVENTS) < 0) {
        rc = psg_error_set("cannot watch the connections of %s: %s", endpoint, zmq_strerror(errno));
    } else if (zsock_send(guard, "ssssppi", "ADD", domain, endpoint, monitor, (void *)k,
                          (void *)refused, max_connections) < 0 ||
               zsock_wait(guard) != 0) {
        zmq_socket_monitor(sock, NULL, 0);
        rc = psg_error_set("cannot watch the connections of %s", endpoint);
    }
    if (rc == 0)
        guard_refs++;
    else
        domain[0] = 0; /* nothing for detach to undo */
    if (rc < 0 && guard_refs == 0) zactor_destroy(&guard);
    pthread_mutex_unlock(&guard_lock);
    return rc;
}

void psg_curve_guard_detach(void *sock, const char *domain) {
    if (!domain || !*domain) return;
    zmq_socket_monitor(sock, NULL, 0);
    pthread_mutex_lock(&guard_lock);
    if (guard) {
        zsock_send(guard, "ssssppi", "DEL", domain, "", "", NULL, NULL, 0);
        zsock_wait(guard);
        if (--guard_refs == 0) zactor_destroy(&guard);
    }
    pthread_mutex_unlock(&guard_lock);
}
