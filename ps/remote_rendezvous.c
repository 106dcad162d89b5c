/* The pulling half of cross-process Send/Recv: one thread, one DEALER per peer task, a
 * queue of (task, step, key) to ask for, and the replies sent into the local rendezvous.
 * Not the serving half (the Recv request in ps/task_server.c) nor the rendezvous map. */
#include "ps/remote_rendezvous.h"

#include "psgraph/clock.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#define RECENT_STEPS 256

typedef struct {
    uint64_t id; /* the request's id on its peer's client (0 while queued) */
    int peer;
    int64_t step;
    char *key;
} pull_t;

typedef struct {
    char task[PSG_DEVICE_NAME_MAX];
    char address[256];
    psg_client_t *client; /* made and used by the thread only */
} peer_t;

typedef struct {
    pull_t *v;
    int n, cap;
} pull_list_t;

struct psg_remote_rv {
    psg_rendezvous_t *local;
    int timeout_ms;
    int peer_timeout_ms; /* heartbeats of its connections (0: the default) */
    const psg_curve_keys_t *keys;
    pthread_mutex_t lock;
    int efd;
    pthread_t thread;
    bool started, stop;
    pull_list_t queued, pending; /* under lock */
    peer_t *peers;               /* under lock; entries never move once the thread reads them */
    int npeers, cap_peers;
    _Atomic int64_t bytes_pulled;
    int64_t recent[RECENT_STEPS]; /* steps cleaned up lately: their pulls are dropped */
    int recent_next;
};

static int list_push(pull_list_t *l, pull_t p) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        pull_t *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return psg_error_set("out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return 0;
}

static void list_free(pull_list_t *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i].key);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static bool recently_cleaned(const psg_remote_rv_t *r, int64_t step) {
    for (int i = 0; i < RECENT_STEPS; i++)
        if (r->recent[i] == step) return true;
    return false;
}

static void wake(psg_remote_rv_t *r) {
    uint64_t one = 1;
    ssize_t n = write(r->efd, &one, sizeof one);
    (void)n; /* a full counter still wakes the thread */
}

/* Under lock: the step failed on the peer or the peer is gone. */
static void fail_pull_code(psg_remote_rv_t *r, const pull_t *p, psg_err_code_t code,
                           const char *why) {
    char msg[1024];
    snprintf(msg, sizeof msg, "task %s (%s): %s", r->peers[p->peer].task, r->peers[p->peer].address,
             why);
    psg_rendezvous_abort_step_code(r->local, p->step, code, msg);
}

static void fail_pull(psg_remote_rv_t *r, const pull_t *p, const char *why) {
    fail_pull_code(r, p, PSG_ERR_ABORTED, why);
}

/* Waits until the peer's client takes a request at once, and never past a stop: the send
 * itself would wait for the connection unwoken (a missing worker's pulls held a stopping
 * ps for their timeout). NULL when ready, else why not. Sets *woke when it read a wake-up
 * meant for the loop (the caller gives it back). */
static const char *wait_for_peer(psg_remote_rv_t *r, psg_client_t *c, bool *woke) {
    double deadline = psg_now_sec() + r->timeout_ms * 1e-3;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        bool stop = r->stop;
        pthread_mutex_unlock(&r->lock);
        if (stop) return "the Recv puller is stopping";
        double left = deadline - psg_now_sec();
        int rc = psg_client_wait_writable(c, r->efd, left > 0 ? (int)(left * 1e3) : 0);
        if (rc > 0) return NULL;
        if (rc < 0) return psg_error_message();
        uint64_t v;
        ssize_t got = read(r->efd, &v, sizeof v);
        (void)got;
        *woke = true;
    }
}

/* The most keys one Recv asks for, and their bytes: a step's pulls from one task go in one
 * request, answered a reply a key (issue 33: 9 Recv requests a step each way for the mlp,
 * each a wake-up of both ends' I/O threads and of the server's) */
#define BATCH_KEYS 64
#define BATCH_BYTES 32768

/* Sends the pulls q->v[idx[0..n-1]] (one peer, one step) as one Recv, and gives each its
 * id. NULL when sent, else why not. */
static const char *send_batch(psg_remote_rv_t *r, pull_list_t *q, const int *idx, int n,
                              char *unreachable, bool *woke) {
    pull_t *p = &q->v[idx[0]];
    peer_t *peer = &r->peers[p->peer];
    pthread_mutex_lock(&r->lock);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->lock);
    if (stop) return "the Recv puller is stopping";
    if (unreachable && unreachable[p->peer]) return "the peer could not be reached";
    if (!peer->client) {
        psg_wire_opts_t o = psg_wire_opts_default();
        o.timeout_ms = r->timeout_ms;
        o.keys = r->keys;
        o.peer_timeout_ms = r->peer_timeout_ms;
        if (!(peer->client = psg_client_new(peer->address, &o))) return psg_error_message();
    }
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, "Recv");
    size_t len = 0;
    for (int k = 1; k < n; k++) len += strlen(q->v[idx[k]].key) + 1;
    char *body = len ? malloc(len) : NULL, *at = body;
    for (int k = 1; body && k < n; k++)
        at += sprintf(at, "%s%s", k > 1 ? "\n" : "", q->v[idx[k]].key);
    bool built = m && psg_msg_set_key(m, p->key) == 0 && (!len || body) &&
                 (!len || psg_msg_set_body(m, body, (size_t)(at - body)) == 0);
    free(body);
    const char *err = built ? NULL : "out of memory";
    if (!err && (err = wait_for_peer(r, peer->client, woke)) != NULL && unreachable)
        unreachable[p->peer] = 1;
    uint64_t id = 0;
    if (!err) {
        m->step = p->step;
        if (psg_client_send_many(peer->client, &m, &id, n) < 0) {
            err = psg_error_message();
            if (unreachable) unreachable[p->peer] = 1;
        }
    }
    psg_msg_destroy(&m);
    for (int k = 0; k < n; k++) q->v[idx[k]].id = id;
    return err;
}

/* Under lock: pull p sent (err NULL: now pending) or failed with err. */
static void settle_locked(psg_remote_rv_t *r, pull_t *p, const char *err) {
    if (recently_cleaned(r, p->step)) {
        free(p->key);
    } else if (err) {
        fail_pull(r, p, err);
        free(p->key);
    } else if (list_push(&r->pending, *p) < 0) {
        fail_pull(r, p, "out of memory");
        free(p->key);
    }
}

static void send_queued(psg_remote_rv_t *r) {
    pthread_mutex_lock(&r->lock);
    pull_list_t q = r->queued;
    memset(&r->queued, 0, sizeof r->queued);
    int npeers = r->npeers;
    pthread_mutex_unlock(&r->lock);
    /* a peer that could not be reached once in this batch is not waited for again (each
     * send would wait its timeout: a dead worker's pulls once held a stopping ps) */
    char *unreachable = calloc((size_t)npeers + 1, 1);
    char *taken = calloc((size_t)q.n + 1, 1);
    int *idx = malloc(((size_t)q.n + 1) * sizeof *idx);
    bool woke = false;
    for (int i = 0; i < q.n; i++) {
        PSG_ASSERT(q.v[i].peer < npeers);
        if (!taken || !idx) { /* out of memory: no batch to make */
            pthread_mutex_lock(&r->lock);
            settle_locked(r, &q.v[i], "out of memory");
            pthread_mutex_unlock(&r->lock);
            continue;
        }
        if (taken[i]) continue;
        /* i and the later pulls of its peer and step */
        int n = 0;
        size_t bytes = 0;
        for (int j = i; j < q.n && n < BATCH_KEYS; j++) {
            if (taken[j] || q.v[j].peer != q.v[i].peer || q.v[j].step != q.v[i].step) continue;
            size_t kl = strlen(q.v[j].key) + 1;
            if (n && bytes + kl > BATCH_BYTES) break;
            taken[j] = 1;
            idx[n++] = j;
            bytes += kl;
        }
        const char *err = send_batch(r, &q, idx, n, unreachable, &woke);
        pthread_mutex_lock(&r->lock);
        for (int k = 0; k < n; k++) settle_locked(r, &q.v[idx[k]], err);
        pthread_mutex_unlock(&r->lock);
    }
    free(idx);
    free(taken);
    free(unreachable);
    free(q.v);
    if (woke) wake(r);
}

void psg_remote_rv_set_keys(psg_remote_rv_t *r, const psg_curve_keys_t *keys) {
    r->keys = keys;
}
void psg_remote_rv_set_peer_timeout(psg_remote_rv_t *r, int ms) {
    r->peer_timeout_ms = ms;
}

/* A reply to a Recv: a tensor for the pull its key names (the first of the request's when it
 * names none: a Recv of one key), or an error that fails the step and every pull of that
 * request (its other keys' replies, errors too, then match nothing). */
static void take_reply(psg_remote_rv_t *r, int peer, psg_msg_t *m) {
    bool tensor = m->kind == PSG_MSG_REPLY && m->ntensors == 1;
    const char *named = tensor && m->key && *m->key ? m->key : NULL;
    bool failed = false;
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->pending.n;) {
        pull_t *p = &r->pending.v[i];
        if (p->peer != peer || p->id != m->id || (named && strcmp(p->key, named))) {
            i++;
            continue;
        }
        if (tensor) {
            psg_tensor_t *t = psg_tensor_ref(m->tensors[0]);
            atomic_fetch_add(&r->bytes_pulled, (int64_t)psg_tensor_nbytes(t));
            if (psg_rendezvous_send(r->local, p->step, p->key, &t) < 0) {
                /* the step was aborted here meanwhile: nothing to deliver */
            }
        } else if (!failed) {
            /* a ps that stopped because the job is done says so: the worker stops, no recovery */
            bool job_done = m->kind == PSG_MSG_ERROR && m->code == PSG_ERR_JOB_DONE;
            fail_pull_code(r, p, job_done ? PSG_ERR_JOB_DONE : PSG_ERR_ABORTED,
                           m->kind == PSG_MSG_ERROR && m->error
                               ? m->error
                               : "a reply to Recv without one tensor");
            failed = true;
        }
        free(p->key);
        r->pending.v[i] = r->pending.v[--r->pending.n];
        if (tensor) break;
    }
    pthread_mutex_unlock(&r->lock);
}

/* Under lock: fails every pull waiting on `peer`. */
static void fail_pulls_of_locked(psg_remote_rv_t *r, int peer, const char *why) {
    for (int i = 0; i < r->pending.n;) {
        pull_t *p = &r->pending.v[i];
        if (p->peer != peer) {
            i++;
            continue;
        }
        fail_pull(r, p, why);
        free(p->key);
        r->pending.v[i] = r->pending.v[--r->pending.n];
    }
}

/* Fails every pull waiting on `peer`: the connection that carried them was lost. */
static void fail_pulls_of(psg_remote_rv_t *r, int peer, const char *why) {
    pthread_mutex_lock(&r->lock);
    fail_pulls_of_locked(r, peer, why);
    pthread_mutex_unlock(&r->lock);
}

void psg_remote_rv_fail_task(psg_remote_rv_t *r, const char *task, const char *why) {
    psg_device_name_t want, have;
    if (!r || psg_device_name_parse(task, &want) < 0) return;
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->npeers; i++)
        if (psg_device_name_parse(r->peers[i].task, &have) == 0 &&
            psg_device_name_same_task(&have, &want))
            fail_pulls_of_locked(r, i, why);
    pthread_mutex_unlock(&r->lock);
}

/* How often the puller looks for peers lost while their pulls wait (the peer timeout tells). */
#define CHECK_SEC 0.25

static void *puller_main(void *arg) {
    psg_remote_rv_t *r = arg;
    zmq_pollitem_t *items = NULL;
    int *item_peer = NULL, cap = 0;
    double next_check = psg_now_sec() + CHECK_SEC;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        bool stop = r->stop;
        bool work = r->queued.n > 0;
        int npeers = r->npeers;
        pthread_mutex_unlock(&r->lock);
        if (stop) break;
        if (work) send_queued(r);
        if (2 * npeers + 1 > cap) {
            cap = 2 * (2 * npeers + 1);
            items = realloc(items, (size_t)cap * sizeof *items);
            item_peer = realloc(item_peer, (size_t)cap * sizeof *item_peer);
            PSG_ASSERT(items && item_peer);
        }
        int n = 0;
        items[n++] = (zmq_pollitem_t){NULL, r->efd, ZMQ_POLLIN, 0};
        for (int i = 0; i < npeers; i++) {
            if (!r->peers[i].client) continue;
            item_peer[n] = i;
            void *sock = psg_client_socket(r->peers[i].client);
            items[n++] =
                sock ? (zmq_pollitem_t){sock, 0, ZMQ_POLLIN, 0}
                     : (zmq_pollitem_t){NULL, psg_client_fd(r->peers[i].client), ZMQ_POLLIN, 0};
            void *events = psg_client_events_socket(r->peers[i].client);
            if (events) { /* a lost connection wakes the poll */
                item_peer[n] = -1;
                items[n++] = (zmq_pollitem_t){events, 0, ZMQ_POLLIN, 0};
            }
        }
        /* woken at least every CHECK_SEC: a pull sent after its connection went down hears
         * nothing more, its loss is told by the time it stays down (psg_client_check). Every
         * CHECK_SEC whether woken or not: the other peers' replies and new pulls (a failover's
         * steps) may wake it more often than that for as long as the lost peer's pulls wait */
        int woke = zmq_poll(items, n, (long)(CHECK_SEC * 1000));
        if (woke < 0) continue; /* EINTR */
        double now = psg_now_sec();
        /* a poll that timed out checks too: its timeout, in ms, may end a little short of
         * next_check, and one skipped check would make it twice as long to the next */
        if (woke == 0 || now >= next_check) {
            next_check = now + CHECK_SEC;
            for (int k = 1; k < n; k++)
                if (item_peer[k] >= 0 && psg_client_check(r->peers[item_peer[k]].client) < 0)
                    fail_pulls_of(r, item_peer[k], psg_error_message());
        }
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t got = read(r->efd, &v, sizeof v);
            (void)got;
        }
        for (int k = 1; k < n; k++) {
            if (!(items[k].revents & ZMQ_POLLIN)) continue;
            if (item_peer[k] < 0) { /* the events of the client before it */
                if (psg_client_check(r->peers[item_peer[k - 1]].client) < 0)
                    fail_pulls_of(r, item_peer[k - 1], psg_error_message());
                continue;
            }
            psg_client_t *c = r->peers[item_peer[k]].client;
            for (;;) {
                psg_msg_t *m = NULL;
                int rc = psg_client_recv(c, &m, 0);
                if (rc < 0 && psg_error_code() == PSG_ERR_UNAVAILABLE) /* the connection was lost */
                    fail_pulls_of(r, item_peer[k], psg_error_message());
                if (rc <= 0) break; /* drained, or a malformed reply (dropped) */
                take_reply(r, item_peer[k], m);
                psg_msg_destroy(&m);
            }
        }
    }
    free(items);
    free(item_peer);
    for (int i = 0; i < r->npeers; i++) psg_client_destroy(&r->peers[i].client);
    return NULL;
}

psg_remote_rv_t *psg_remote_rv_new(psg_rendezvous_t *local, int timeout_ms) {
    psg_remote_rv_t *r = calloc(1, sizeof *r);
    if (!r) {
        psg_error_set("out of memory");
        return NULL;
    }
    r->local = local;
    r->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
    for (int i = 0; i < RECENT_STEPS; i++) r->recent[i] = INT64_MIN;
    pthread_mutex_init(&r->lock, NULL);
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->efd < 0 || pthread_create(&r->thread, NULL, puller_main, r) != 0) {
        psg_error_set("cannot start the Recv puller thread");
        psg_remote_rv_destroy(&r);
        return NULL;
    }
    r->started = true;
    return r;
}

void psg_remote_rv_destroy(psg_remote_rv_t **rp) {
    if (!rp || !*rp) return;
    psg_remote_rv_t *r = *rp;
    *rp = NULL;
    if (r->started) {
        pthread_mutex_lock(&r->lock);
        r->stop = true;
        pthread_mutex_unlock(&r->lock);
        wake(r);
        pthread_join(r->thread, NULL);
    }
    if (r->efd >= 0) close(r->efd);
    list_free(&r->queued);
    list_free(&r->pending);
    free(r->peers);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* Under lock: the index of the peer at address, added when new; -1 with the error set. */
static int peer_of(psg_remote_rv_t *r, const char *task, const char *address) {
    for (int i = 0; i < r->npeers; i++)
        if (!strcmp(r->peers[i].address, address)) return i;
    /* the thread reads peers without the lock: grow only while it cannot be polling a
     * stale array, i.e. make room for plenty at once and never move afterwards */
    if (r->npeers == r->cap_peers) {
        if (r->cap_peers) return psg_error_set("too many peer tasks (%d)", r->cap_peers);
        r->cap_peers = 1024;
        r->peers = calloc((size_t)r->cap_peers, sizeof *r->peers);
        if (!r->peers) {
            r->cap_peers = 0;
            return psg_error_set("out of memory");
        }
    }
    int peer = r->npeers++;
    snprintf(r->peers[peer].task, sizeof r->peers[peer].task, "%s", task);
    snprintf(r->peers[peer].address, sizeof r->peers[peer].address, "%s", address);
    return peer;
}

int psg_remote_rv_pull(psg_remote_rv_t *r, int64_t step, int n, const psg_remote_pull_t *pulls) {
    if (n <= 0) return 0;
    pthread_mutex_lock(&r->lock);
    int rc = r->stop ? psg_error_set("the Recv puller is stopped") : 0;
    int queued = r->queued.n;
    for (int i = 0; rc == 0 && i < n; i++) {
        int peer = peer_of(r, pulls[i].task, pulls[i].address);
        char *key = peer < 0 ? NULL : strdup(pulls[i].key);
        if (peer >= 0 && !key) psg_error_set("out of memory");
        rc = key ? list_push(&r->queued, (pull_t){0, peer, step, key}) : -1;
        if (rc < 0) free(key);
    }
    /* on a failure none of them stays queued, so the caller may fail the step cleanly */
    while (rc < 0 && r->queued.n > queued) free(r->queued.v[--r->queued.n].key);
    pthread_mutex_unlock(&r->lock);
    if (rc < 0) return -1;
    wake(r);
    return 0;
}

void psg_remote_rv_cleanup_step(psg_remote_rv_t *r, int64_t step) {
    pthread_mutex_lock(&r->lock);
    r->recent[r->recent_next] = step;
    r->recent_next = (r->recent_next + 1) % RECENT_STEPS;
    for (int i = 0; i < r->pending.n;) {
        if (r->pending.v[i].step == step) {
            free(r->pending.v[i].key);
            r->pending.v[i] = r->pending.v[--r->pending.n];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&r->lock);
}

int64_t psg_remote_rv_bytes_pulled(psg_remote_rv_t *r) {
    return r ? atomic_load(&r->bytes_pulled) : 0;
}
