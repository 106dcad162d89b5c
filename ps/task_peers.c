/* The task server's peers and their limits (docs/distributed.md, "Limits" and "Graphs
 * belong to their peer"): who a request's peer is (a client key, else a connection), what it
 * holds against the limits, when its connections closed and its graphs are released. Not the
 * dispatch (task_server.c) nor the graphs themselves (task_graphs.c). */
#include "ps/task_server_internal.h"

#include "core/membudget.h"
#include "ops/state/timer.h"
#include "psgraph/curve.h"
#include "psgraph/error.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The key whose connections share one quota: a client's, not the cluster's own (NULL). */
static const char *quota_key(const psg_msg_t *req) {
    return req->peer_key[0] && strcmp(req->peer_key, PSG_CURVE_CLUSTER) ? req->peer_key : NULL;
}

/* The peer as errors name it, at the address of its latest request. */
static void peer_label(peer_t *p, const char *addr) {
    snprintf(p->addr, sizeof p->addr, "%s", addr);
    if (p->key[0])
        snprintf(p->label, sizeof p->label, "key '%s' (%s)", p->key, p->addr);
    else
        snprintf(p->label, sizeof p->label, "%s", p->addr);
}

/* A request of p came by connection c: p is open again (a worker that reconnected). */
static void peer_note_conn(peer_t *p, const psg_conn_t *c) {
    p->closed_ms = 0;
    for (int i = 0; i < p->n_conns; i++)
        if (p->conns[i].fd == c->fd && p->conns[i].ino == c->ino) return;
    if (p->n_conns == PEER_CONNS)
        memmove(p->conns, p->conns + 1, (size_t)--p->n_conns * sizeof *p->conns);
    p->conns[p->n_conns++] = *c;
}

/* Whether none of p's connections is open any more; notes since when. Under lock. */
static bool peer_closed_locked(peer_t *p, int64_t now) {
    if (p->closed_ms) return true;
    if (p->n_conns == 0) return false;
    for (int i = 0; i < p->n_conns; i++)
        if (psg_conn_open(&p->conns[i])) return false;
    p->closed_ms = now;
    return true;
}

/* Whether p holds anything here: one that holds nothing is forgotten (prune) and does not
 * count against the limits. */
static bool peer_holds(const peer_t *p) {
    return p->pending || p->running || p->recvs || p->waiters || p->graphs;
}

/* The bucket of ts->peer_index of a client key, else of a routing id (FNV-1a, seeded). */
static peer_t **peer_bucket(psg_task_server_t *ts, const char *key, const psg_route_t *route) {
    const uint8_t *b = key ? (const uint8_t *)key : route->id;
    size_t n = key ? strlen(key) : route->len;
    uint32_t h = 2166136261u ^ ts->peer_seed;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return &ts->peer_index[h % PEER_BUCKETS];
}

static peer_t *peer_find_locked(psg_task_server_t *ts, const psg_msg_t *req, const char *key) {
    for (peer_t *p = *peer_bucket(ts, key, &req->route); p; p = p->hnext) {
        if (key ? !strcmp(p->key, key)
                : !p->key[0] && p->route.len == req->route.len &&
                      !memcmp(p->route.id, req->route.id, req->route.len)) {
            if (key && strcmp(p->addr, req->peer)) peer_label(p, req->peer); /* it moved */
            return p;
        }
    }
    return NULL;
}

peer_t *psg_ts_peer_find_locked(psg_task_server_t *ts, const psg_msg_t *req) {
    return peer_find_locked(ts, req, quota_key(req));
}

peer_t *psg_ts_peer_locked(psg_task_server_t *ts, const psg_msg_t *req) {
    const char *key = quota_key(req);
    peer_t *found = peer_find_locked(ts, req, key);
    if (found) {
        peer_note_conn(found, &req->conn);
        return found;
    }
    /* only peers with a connection open count: a closed one's graphs wait out their grace
     * (peers_sweep in task_server.c) without locking its address out */
    int open = 0, same = 0; /* same: connections without a key of their own from its address */
    int64_t now = psg_codec_now_ms();
    for (peer_t *q = ts->peers; q; q = q->next) {
        if (!peer_holds(q) || peer_closed_locked(q, now)) continue;
        open++;
        same += !q->key[0] && !strcmp(q->addr, req->peer);
    }
    if (open >= ts->lim.max_peers) {
        psg_error_set_code(PSG_ERR_LIMIT, "%s: %d peers hold requests here (the limit is %d)",
                           req->op, open, ts->lim.max_peers);
        return NULL;
    }
    if (!key && same >= ts->lim.max_peers_per_address) {
        psg_error_set_code(
            PSG_ERR_LIMIT,
            "%s: %d connections from %s hold requests here (the limit is %d per address)", req->op,
            same, req->peer, ts->lim.max_peers_per_address);
        return NULL;
    }
    peer_t *p = calloc(1, sizeof *p);
    if (!p) {
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    if (key)
        snprintf(p->key, sizeof p->key, "%s", key);
    else
        p->route = req->route;
    peer_label(p, req->peer);
    peer_note_conn(p, &req->conn);
    p->next = ts->peers;
    ts->peers = p;
    peer_t **bucket = peer_bucket(ts, key, &req->route);
    p->hnext = *bucket;
    *bucket = p;
    ts->n_peers++;
    return p;
}

/* Peers whose released graphs are named in the log, at most, a minute: a peer that opens
 * connections, registers a graph on each and closes it would have the ps write a line a
 * connection (a thousand a second); the others are summed in one line a minute. */
#define RELEASED_NAMED_PER_MIN 16

/* Logs the release of n graphs of p (the minute's budget allowing), its connection closed
 * `ago` ms before; at a new minute, the sum of the last one's unnamed releases first. */
static void released_log(psg_task_server_t *ts, int64_t now, const peer_t *p, int n, int64_t ago,
                         bool due) {
    if (now - ts->released_since >= 60000) {
        if (ts->released_quiet_peers)
            psg_net_log("task %s: released %d graph%s of %d more peer%s whose connections closed, "
                        "in the minute before (at most %d named a minute)",
                        ts->task, ts->released_quiet_graphs,
                        ts->released_quiet_graphs == 1 ? "" : "s", ts->released_quiet_peers,
                        ts->released_quiet_peers == 1 ? "" : "s", RELEASED_NAMED_PER_MIN);
        ts->released_since = now;
        ts->released_named = ts->released_quiet_peers = ts->released_quiet_graphs = 0;
    }
    if (!p) return;
    if (ts->released_named == RELEASED_NAMED_PER_MIN) {
        ts->released_quiet_peers++;
        ts->released_quiet_graphs += n;
        return;
    }
    ts->released_named++;
    psg_net_log("task %s: released %d graph%s of peer %s: its connection closed %.1f s ago (%s)",
                ts->task, n, n == 1 ? "" : "s", p->label, (double)ago / 1e3,
                due ? "--graph-grace" : "more closed peers than --max-peers hold graphs");
}

/* Releases the graphs of peers whose connections closed longer than the grace ago (a
 * worker that reconnects within it keeps them), and at once those of the longest closed
 * while more than max_peers closed ones hold graphs. On the server thread: only it frees
 * peers (peers_prune_locked). */
void psg_ts_peers_sweep(psg_task_server_t *ts) {
    int64_t now = psg_codec_now_ms();
    released_log(ts, now, NULL, 0, 0, false); /* a past minute's sum */
    for (;;) {
        peer_t *oldest = NULL, *due = NULL;
        int closed = 0;
        pthread_mutex_lock(&ts->lock);
        for (peer_t *p = ts->peers; p; p = p->next) {
            if (!p->graphs || !peer_closed_locked(p, now)) continue;
            closed++;
            if (now - p->closed_ms >= ts->lim.graph_grace_ms) due = p;
            if (!oldest || p->closed_ms < oldest->closed_ms) oldest = p;
        }
        peer_t *p = due ? due : closed > ts->lim.max_peers ? oldest : NULL;
        int64_t ago = p ? now - p->closed_ms : 0;
        pthread_mutex_unlock(&ts->lock);
        if (!p) return;
        int n = psg_ts_graphs_release_owner(ts, p);
        released_log(ts, now, p, n, ago, due != NULL);
    }
}

/* Forgets peers that hold nothing any more (a connection that came and went). */
void psg_ts_peers_prune_locked(psg_task_server_t *ts) {
    for (peer_t **pp = &ts->peers; *pp;) {
        peer_t *p = *pp;
        if (peer_holds(p)) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        peer_t **hp = peer_bucket(ts, p->key[0] ? p->key : NULL, &p->route);
        while (*hp != p) hp = &(*hp)->hnext;
        *hp = p->hnext;
        free(p);
        ts->n_peers--;
    }
}

int psg_ts_peers_holding_locked(psg_task_server_t *ts) {
    int n = 0;
    for (const peer_t *p = ts->peers; p; p = p->next) n += peer_holds(p);
    return n;
}

/* Takes a pending slot of req's peer for `bytes`; -1 with a PSG_ERR_LIMIT error naming
 * the limit when the peer or the task is full. Under lock. */
int psg_ts_take_pending_locked(psg_task_server_t *ts, const psg_msg_t *req, size_t bytes,
                               bool queued, bool recv, peer_t **out) {
    const psg_task_limits_t *l = &ts->lim;
    peer_t *p = psg_ts_peer_locked(ts, req);
    if (!p) return -1;
    if (recv && p->recvs >= l->max_recvs_per_peer)
        return psg_error_set_code(PSG_ERR_LIMIT,
                                  "%s: peer %s has %d Recvs pending (the limit is %d per peer)",
                                  req->op, p->label, p->recvs, l->max_recvs_per_peer);
    if (!recv && p->pending >= l->max_pending_per_peer)
        return psg_error_set_code(PSG_ERR_LIMIT,
                                  "%s: peer %s has %d steps pending (the limit is %d per peer)",
                                  req->op, p->label, p->pending, l->max_pending_per_peer);
    if (p->pending_bytes + bytes > (size_t)l->max_pending_bytes_per_peer)
        return psg_error_set_code(
            PSG_ERR_LIMIT,
            "%s: peer %s has %zu bytes pending, this request %zu (the limit is %" PRId64
            " bytes per peer)",
            req->op, p->label, p->pending_bytes, bytes, l->max_pending_bytes_per_peer);
    if (queued && ts->jq_len >= l->max_queue)
        return psg_error_set_code(PSG_ERR_LIMIT,
                                  "%s: %d steps queued for the runners (the limit is %d)", req->op,
                                  ts->jq_len, l->max_queue);
    /* what it holds while it waits is the task's memory too */
    if (bytes && psg_membudget_charge(ts->budget, (int64_t)bytes) < 0)
        return psg_error_wrap("%s", req->op);
    if (recv)
        p->recvs++;
    else
        p->pending++;
    p->pending_bytes += bytes;
    *out = p;
    return 0;
}

void psg_ts_put_pending(psg_task_server_t *ts, peer_t *p, size_t bytes, bool recv) {
    pthread_mutex_lock(&ts->lock);
    if (recv)
        p->recvs--;
    else
        p->pending--;
    p->pending_bytes -= bytes;
    pthread_mutex_unlock(&ts->lock);
    if (bytes) psg_membudget_release(ts->budget, (int64_t)bytes);
}

psg_task_limits_t psg_task_limits_resolve(const psg_task_limits_t *given) {
    psg_task_limits_t l = given ? *given : (psg_task_limits_t){0};
    if (l.memory_bytes <= 0) {
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        l.memory_bytes = pages > 0 && size > 0 ? (int64_t)pages * size / 2 : (int64_t)4 << 30;
    }
    if (l.peer_memory_bytes <= 0) l.peer_memory_bytes = l.memory_bytes / 2;
    if (l.max_graphs_per_peer <= 0) l.max_graphs_per_peer = 256;
    if (l.max_graph_bytes_per_peer <= 0) l.max_graph_bytes_per_peer = (int64_t)1 << 30;
    if (l.max_pending_per_peer <= 0) l.max_pending_per_peer = 64;
    /* max_running_per_peer: set by the server, which knows its runners */
    if (l.max_pending_bytes_per_peer <= 0) l.max_pending_bytes_per_peer = l.memory_bytes / 4;
    if (l.max_waiters_per_peer <= 0) l.max_waiters_per_peer = 16;
    if (l.max_recvs_per_peer <= 0) l.max_recvs_per_peer = 16384;
    if (l.max_queue <= 0) l.max_queue = 1024;
    if (l.max_peers <= 0) l.max_peers = 1024;
    if (l.max_peers_per_address <= 0) l.max_peers_per_address = 64;
    if (l.max_wait_ms <= 0) l.max_wait_ms = PSG_TIMER_MAX_WAIT_MS;
    if (l.graph_grace_ms <= 0) l.graph_grace_ms = 60000;
    return l;
}
