/* The client half of the task server's protocol (ps/client.h) over the wire's DEALER
 * client (net/): requests encoded by the protocol table, errors named by the task. Not
 * the worker's session, which uses it. */
#include "ps/client.h"

#include "net/codec.h"
#include "psgraph/error.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct psg_ts_client {
    char task[128];
    psg_client_t *client;
    int64_t timeout_ms;
};

psg_ts_client_t *psg_ts_client_new(const char *task, const char *address, int64_t timeout_ms,
                                   int peer_timeout_ms, const psg_curve_keys_t *keys) {
    psg_ts_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        psg_error_set("out of memory");
        return NULL;
    }
    snprintf(c->task, sizeof c->task, "%s", task);
    c->timeout_ms = timeout_ms;
    psg_wire_opts_t o = psg_wire_opts_default();
    o.timeout_ms = (int)timeout_ms;
    o.keys = keys;
    o.peer_timeout_ms = peer_timeout_ms;
    if (!(c->client = psg_client_new(address, &o))) {
        psg_error_wrap("task %s", task);
        free(c);
        return NULL;
    }
    return c;
}

void psg_ts_client_destroy(psg_ts_client_t **c) {
    if (!c || !*c) return;
    psg_client_destroy(&(*c)->client);
    free(*c);
    *c = NULL;
}

psg_msg_t *psg_ts_call_msg(psg_ts_client_t *c, psg_msg_t **m, int64_t timeout_ms) {
    psg_msg_t *r = psg_client_call(c->client, m, (int)timeout_ms);
    psg_msg_destroy(m);
    if (!r) psg_error_wrap("task %s", c->task);
    return r;
}

psg_msg_t *psg_ts_call(psg_ts_client_t *c, const psg_req_t *r, psg_rep_t *rep, int64_t timeout_ms) {
    psg_msg_t *m = psg_req_encode(r);
    if (!m) {
        psg_error_wrap("task %s", c->task);
        return NULL;
    }
    psg_msg_t *reply = psg_ts_call_msg(c, &m, timeout_ms);
    if (reply && psg_rep_decode(reply, r->type, rep) < 0) {
        psg_error_wrap("task %s", c->task);
        psg_msg_destroy(&reply);
    }
    return reply;
}

int psg_ts_send(psg_ts_client_t *c, const psg_req_t *r, uint64_t *id) {
    psg_msg_t *m = psg_req_encode(r);
    if (!m) return psg_error_wrap("task %s", c->task);
    int rc = psg_client_send(c->client, &m, id);
    psg_msg_destroy(&m);
    return rc < 0 ? psg_error_wrap("task %s", c->task) : 0;
}

int psg_ts_send_note(psg_ts_client_t *c, const psg_req_t *r) {
    psg_msg_t *m = psg_req_encode(r);
    if (!m) return psg_error_wrap("task %s", c->task);
    int rc = psg_client_send_note(c->client, &m);
    return rc < 0 ? psg_error_wrap("task %s", c->task) : rc;
}

int psg_ts_client_recv(psg_ts_client_t *c, psg_msg_t **out) {
    int rc = psg_client_recv(c->client, out, 0);
    return rc < 0 ? psg_error_wrap("task %s", c->task) : rc;
}

int psg_ts_client_poll(psg_ts_client_t *const *cs, int n, bool *ready, int64_t wait_ms) {
    psg_client_t *clients[PSG_CLIENT_POLL_MAX];
    if (n > PSG_CLIENT_POLL_MAX) n = PSG_CLIENT_POLL_MAX;
    for (int i = 0; i < n; i++) clients[i] = cs[i]->client;
    int k = psg_client_poll(clients, n, ready, wait_ms > INT_MAX ? INT_MAX : (int)wait_ms);
    return k < 0 ? 0 : k; /* a failed poll: as a timeout, the caller checks its connections */
}

int psg_ts_client_check(psg_ts_client_t *c) {
    return psg_client_check(c->client) < 0 ? psg_error_wrap("task %s", c->task) : 0;
}

bool psg_ts_client_lost(psg_ts_client_t *c) {
    return psg_client_peer_lost(c->client);
}

uint64_t psg_ts_client_incarnation(const psg_ts_client_t *c) {
    return psg_client_peer_incarnation(c->client);
}
uint64_t psg_ts_client_restarts(const psg_ts_client_t *c) {
    return psg_client_peer_restarts(c->client);
}

void psg_ts_client_reset(psg_ts_client_t *c) {
    psg_client_reset(c->client);
}

int64_t psg_ts_now_ms(void) {
    return psg_codec_now_ms();
}
