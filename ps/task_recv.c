/* The serving half of cross-process Send/Recv (docs/distributed.md): a Recv request names
 * one or more rendezvous keys of a step that this task's graphs send; each is answered by
 * its own reply when its Send leaves the tensor here (from the sender's thread), the reply
 * naming its key when the request named several. Not the pulling half
 * (ps/remote_rendezvous.c) nor the rendezvous map. */
#include "ps/protocol.h"
#include "ps/task_server_internal.h"
#include "psgraph/error.h"
#include "psgraph/rendezvous.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* A Recv request being answered: one reply a key, the request kept until the last. */
typedef struct {
    psg_task_server_t *ts;
    psg_msg_t *req;
    char **more; /* the decoded keys after the first (the request's block) */
    peer_t *peer;
    bool named;       /* several keys: each reply names its key */
    _Atomic int left; /* keys not answered yet */
} recv_batch_t;

typedef struct {
    recv_batch_t *b;
    const char *key; /* in b's request or block */
} recv_ctx_t;

static void recv_done(void *arg, psg_tensor_t *t, psg_err_code_t code, const char *error) {
    recv_ctx_t *c = arg;
    recv_batch_t *b = c->b;
    if (!t) {
        psg_ts_reply_error(b->ts, b->req, code, "%s", error);
    } else {
        psg_rep_t rep = {.type = PSG_REQ_RECV, .u.tensor = t};
        psg_msg_t *m = psg_rep_encode(PSG_REQ_RECV, &rep);
        if (m && b->named && psg_msg_set_key(m, c->key) < 0) psg_msg_destroy(&m);
        if (m) {
            atomic_fetch_add(&b->ts->bytes_served, (int64_t)psg_tensor_nbytes(t));
            m->step = b->req->step;
            psg_ts_reply_ok(b->ts, b->req, &m);
        } else {
            psg_ts_reply_error(b->ts, b->req, PSG_ERR_NO_MEMORY, "out of memory");
        }
        psg_tensor_destroy(&t);
    }
    psg_ts_put_pending(b->ts, b->peer, 0, true);
    free(c);
    if (atomic_fetch_sub(&b->left, 1) == 1) {
        psg_msg_destroy(&b->req);
        free(b->more);
        free(b);
    }
}

/* Under ts->lock: n Recvs of the requester taken, or none. */
static int take_recvs_locked(psg_task_server_t *ts, const psg_msg_t *req, int n, peer_t **out) {
    for (int i = 0; i < n; i++) {
        peer_t *p = NULL;
        if (psg_ts_take_pending_locked(ts, req, 0, false, true, &p) < 0) {
            if (i > 0) (*out)->recvs -= i;
            return -1;
        }
        *out = p;
    }
    return 0;
}

/* The error set, once a key of req: the requester counts a reply a key. */
static void reply_error_each(psg_task_server_t *ts, const psg_msg_t *req, int n) {
    psg_err_code_t code = psg_error_code();
    char why[PSG_WIRE_MAX_ERROR];
    snprintf(why, sizeof why, "%s", psg_error_message());
    for (int i = 0; i < n; i++) psg_ts_reply_error(ts, req, code, "%s", why);
}

void psg_ts_on_recv(psg_task_server_t *ts, psg_msg_t **reqp, psg_req_t *r) {
    psg_msg_t *req = *reqp;
    int n = 1 + r->u.recv.n_more;
    PSG_ASSERT(n >= 1 && n <= PSG_PROTO_MAX_RECV_KEYS); /* as decoded */
    for (int i = 0; i < n; i++) {
        const char *key = i ? r->u.recv.more[i - 1] : r->u.recv.first;
        psg_rendezvous_key_t parsed;
        if (psg_rendezvous_key_parse(key, &parsed) < 0) {
            char why[512];
            snprintf(why, sizeof why, "%s", psg_error_message());
            psg_error_set_code(PSG_ERR_BAD_REQUEST, "Recv: %s", why);
            reply_error_each(ts, req, n);
            return;
        }
        if (!psg_ts_known_send_key(ts, key)) {
            psg_error_set_code(PSG_ERR_NOT_FOUND,
                               "unknown rendezvous key '%s' (no registered graph sends it)", key);
            reply_error_each(ts, req, n);
            return;
        }
    }
    recv_batch_t *b = calloc(1, sizeof *b);
    recv_ctx_t **c = calloc((size_t)n, sizeof *c);
    for (int i = 0; b && c && i < n; i++)
        if (!(c[i] = calloc(1, sizeof **c))) break;
    bool ok = b && c && c[n - 1];
    pthread_mutex_lock(&ts->lock);
    int rc = ok ? take_recvs_locked(ts, req, n, &b->peer)
                : psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_unlock(&ts->lock);
    if (rc < 0) {
        reply_error_each(ts, req, n);
        for (int i = 0; c && i < n; i++) free(c[i]);
        free(c);
        free(b);
        return;
    }
    b->ts = ts;
    b->req = req;
    b->more = r->u.recv.more; /* the keys stay until the last reply */
    r->u.recv.more = NULL;
    r->u.recv.n_more = 0;
    b->named = n > 1;
    atomic_init(&b->left, n);
    *reqp = NULL;
    for (int i = 0; i < n; i++) {
        c[i]->b = b;
        c[i]->key = i ? b->more[i - 1] : req->key;
    }
    /* each callback may free b (the last one): read nothing of b after the loop's last call */
    for (int i = 0; i < n; i++) {
        recv_ctx_t *ci = c[i];
        psg_rendezvous_recv_async(ts->rv, req->step, ci->key, ts->recv_timeout_ms, recv_done, ci);
    }
    free(c);
}
