/* A step whose remote partitions receive nothing runs them first and their RunGraphRecv
 * replies carry what they send to this task: one round trip where a RunGraph and a pull of
 * each Recv (on the puller's own connection and thread) took two, with their wake-ups. Which
 * callables qualify and with which keys (at build), and the tensors of a reply put into the
 * local rendezvous. Not the step's loop (worker/dist_session.c). */
#include "ops/cpu/sendrecv.h"
#include "psgraph/error.h"
#include "psgraph/op.h"
#include "psgraph/rendezvous.h"
#include "worker/dist_session_internal.h"

#include <stdlib.h>
#include <string.h>

/* Whether node n's device attribute (`attr`) is on task `dn`. */
static bool on_task(const psg_node_t *n, const char *attr, const psg_device_name_t *dn) {
    psg_device_name_t d;
    return psg_device_name_parse(psg_node_get_str(n, attr, ""), &d) == 0 &&
           psg_device_name_same_task(&d, dn);
}

/* Appends to run the keys of partition g's Sends to task `dn`. -1 on out of memory. */
static int add_send_keys(const psg_graph_t *g, const psg_device_name_t *dn, part_run_t *run) {
    for (int i = 0, nn = psg_graph_num_nodes(g); i < nn; i++) {
        const psg_node_t *n = psg_graph_node(g, i);
        if (strcmp(psg_node_op(n), "Send") || !on_task(n, "recv_device", dn)) continue;
        char key[PSG_RENDEZVOUS_KEY_MAX];
        psg_sendrecv_key(n, key, sizeof key);
        char **v = realloc(run->recv_keys, (size_t)(run->n_recv_keys + 1) * sizeof *v);
        if (!v) return psg_error_set("out of memory");
        run->recv_keys = v;
        if (!(v[run->n_recv_keys] = strdup(key))) return psg_error_set("out of memory");
        run->n_recv_keys++;
    }
    return 0;
}

void psg_dist_recv_replies_free(psg_dist_callable_t *c) {
    for (int k = 0; c->runs && c->set && k < c->set->num_partitions; k++) {
        part_run_t *run = &c->runs[k];
        for (int i = 0; i < run->n_recv_keys; i++) free(run->recv_keys[i]);
        free(run->recv_keys);
        run->recv_keys = NULL;
        run->n_recv_keys = 0;
    }
    c->replies_first = false;
}

int psg_dist_recv_replies_plan(psg_dist_callable_t *c) {
    c->replies_first = false;
    if (c->local < 0) return 0;
    psg_device_name_t me;
    if (psg_device_name_parse(c->set->partitions[c->local].task, &me) < 0) return -1;
    /* the remote partitions wait on nothing this one sends: their replies can come first */
    for (int k = 0; k < c->set->num_partitions; k++)
        if (k != c->local && c->set->partitions[k].num_recvs > 0) return 0;
    int pulls = 0; /* the local partition's Recvs from other tasks */
    const psg_graph_t *lg = c->set->partitions[c->local].graph;
    for (int i = 0, nn = psg_graph_num_nodes(lg); i < nn; i++) {
        const psg_node_t *n = psg_graph_node(lg, i);
        pulls += !strcmp(psg_node_op(n), "Recv") && !on_task(n, "send_device", &me);
    }
    if (pulls == 0) return 0; /* nothing to wait for: the local partition runs beside them */
    int keys = 0;
    for (int k = 0; k < c->set->num_partitions; k++) {
        if (k == c->local) continue;
        if (add_send_keys(c->set->partitions[k].graph, &me, &c->runs[k]) < 0) return -1;
        keys += c->runs[k].n_recv_keys;
    }
    c->replies_first = keys == pulls; /* every pull answered by a reply */
    if (!c->replies_first) psg_dist_recv_replies_free(c);
    return 0;
}

int psg_dist_recv_replies_deliver(psg_dist_callable_t *c, int k, const psg_msg_t *m, int64_t step,
                                  char *err, size_t errsize) {
    const part_run_t *run = &c->runs[k];
    int nf = c->set->partitions[k].num_fetches;
    psg_rendezvous_t *rv = psg_task_server_rendezvous(c->s->server);
    for (int i = 0; i < run->n_recv_keys; i++) {
        const char *name = m->names ? m->names[nf + i] : NULL;
        if (!name || strcmp(name, run->recv_keys[i])) {
            snprintf(err, errsize,
                     "task %s: RunGraphRecv replied '%.200s' as tensor %d, not '%.200s'",
                     c->set->partitions[k].task, name ? name : "", nf + i, run->recv_keys[i]);
            return -1;
        }
        psg_tensor_t *t = psg_tensor_ref(m->tensors[nf + i]);
        if (psg_rendezvous_send(rv, step, run->recv_keys[i], &t) < 0) {
            snprintf(err, errsize, "%s", psg_error_message());
            return -1;
        }
    }
    return 0;
}
