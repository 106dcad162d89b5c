/* The worker's distributed session: placement with the cluster's jobs, partitions per step
 * signature, RegisterGraph once per partition, and each step RunGraph on every task with
 * one step id, the local partition run in process. Not the task server (ps/), and not the
 * training loop. */
#include "psgraph/dist_session.h"

#include "ps/client.h"
#include "worker/dist_session_internal.h"
#include "psgraph/device.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/op.h"
#include "runtime/partition.h"
#include "psgraph/serialize.h"
#include "psgraph/wire.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

psg_replica_setter_t *psg_dist_replica_setter_new(const psg_cluster_t *cluster,
                                                  psg_ps_strategy_t strategy) {
    psg_task_t me = psg_cluster_task(cluster);
    if (!me.job) {
        psg_error_set("the cluster names no task for this process");
        return NULL;
    }
    char worker[PSG_DEVICE_NAME_MAX];
    psg_device_name(me.job, me.index, NULL, worker, sizeof worker);
    psg_replica_setter_options_t o = {.ps_tasks = psg_cluster_num_tasks(cluster, "ps"),
                                      .ps_device = "/job:ps",
                                      .worker_device = worker,
                                      .strategy = strategy};
    return psg_replica_setter_new(&o);
}

static int peer_index(psg_dist_session_t *s, const char *task) {
    for (int i = 0; i < s->n_peers; i++)
        if (!strcmp(s->peers[i].task, task)) return i;
    psg_device_name_t d;
    if (psg_device_name_parse(task, &d) < 0) return -1;
    const char *addr = psg_cluster_address(s->cluster, d.job, d.task);
    if (!addr) return -1;
    peer_t *v = realloc(s->peers, (size_t)(s->n_peers + 1) * sizeof *v);
    if (!v) return psg_error_set("out of memory");
    s->peers = v;
    peer_t *p = &v[s->n_peers];
    memset(p, 0, sizeof *p);
    snprintf(p->task, sizeof p->task, "%s", task);
    snprintf(p->address, sizeof p->address, "%s", addr);
    if (strcmp(task, s->task)) {
        if (!(p->client = psg_ts_client_new(task, addr, s->timeout_ms,
                                            psg_cluster_peer_timeout_ms(s->cluster),
                                            psg_cluster_keys(s->cluster))))
            return -1;
    }
    return s->n_peers++;
}

psg_dist_session_t *psg_dist_session_new(psg_graph_t *g, const psg_dist_session_options_t *opt) {
    psg_task_t me = psg_cluster_task(opt->cluster);
    if (!me.job) {
        psg_error_set("the cluster names no task for this process");
        return NULL;
    }
    if (!opt->server) {
        psg_error_set("a distributed session needs its process's task server");
        return NULL;
    }
    psg_dist_session_t *s = calloc(1, sizeof *s);
    if (!s) {
        psg_error_set("out of memory");
        return NULL;
    }
    s->g = g;
    s->cluster = opt->cluster;
    s->server = opt->server;
    s->timeout_ms = opt->step_timeout_ms > 0 ? opt->step_timeout_ms : 30000;
    s->ps_memory_limit = opt->ps_memory_limit;
    snprintf(s->task, sizeof s->task, "%s", psg_task_server_task(opt->server));
    snprintf(s->device, sizeof s->device, "%s/device:CPU:0", s->task);
    /* a retried step is known as such; each session of a process (the sync chief's runner
     * beside the worker's loop) counts its own steps */
    if (psg_cluster_ps_replicas(opt->cluster) > 1)
        snprintf(s->writer, sizeof s->writer, "%s@%016" PRIx64 ".%d", s->task,
                 psg_wire_incarnation(), opt->id_stream & 3);
    /* step ids: unique across the workers sharing a ps (the task in the high bits) and
     * across restarts of this one (a few bits of time and pid) */
    uint64_t inc = ((uint64_t)time(NULL) ^ (uint64_t)getpid() * 2654435761u) & 0x3fff;
    s->step_base = (int64_t)((inc << 48) | ((uint64_t)(me.index & 0xffff) << 32) |
                             ((uint64_t)(strcmp(me.job, "worker") ? 1 : 0) << 62) |
                             ((uint64_t)(opt->id_stream & 3) << 30));
    return s;
}

static void reqs_clear(step_reqs_t *r, int np) {
    for (int k = 0; r->reqs && k < np; k++) {
        psg_msg_destroy(&r->reqs[k].reply);
        free(r->reqs[k].lost);
        r->reqs[k] = (part_req_t){0};
    }
}

void psg_dist_callable_unbuild(psg_dist_callable_t *c) {
    if (c->set) {
        reqs_clear(&c->cur, c->set->num_partitions);
        reqs_clear(&c->open, c->set->num_partitions);
        reqs_clear(&c->next, c->set->num_partitions);
    }
    free(c->cur.reqs);
    free(c->open.reqs);
    free(c->next.reqs);
    c->cur.reqs = c->open.reqs = c->next.reqs = NULL;
    c->has_next = false;
    if (c->s && c->s->asked == c) c->s->asked = NULL;
    psg_dist_recv_replies_free(c);
    free(c->runs);
    c->runs = NULL;
    psg_partition_set_destroy(&c->set);
}

static void callable_free(psg_dist_callable_t *c) {
    if (!c) return;
    psg_dist_callable_unbuild(c);
    free(c->feeds);
    free(c->fetches);
    free(c->targets);
    free(c);
}

void psg_dist_session_destroy(psg_dist_session_t **sp) {
    if (!sp || !*sp) return;
    psg_dist_session_t *s = *sp;
    *sp = NULL;
    (void)psg_dist_session_drain(s); /* the error of a step nobody waits for any more */
    for (int i = 0; i < s->n_callables; i++) callable_free(s->callables[i]);
    free(s->callables);
    for (int i = 0; i < s->n_peers; i++) psg_ts_client_destroy(&s->peers[i].client);
    free(s->peers);
    free(s->served_by);
    psg_dist_placement_forget(s);
    free(s);
}

static bool same_signature(const psg_dist_callable_t *c, int nf, const psg_endpoint_t *f, int nx,
                           const psg_endpoint_t *x, int nt, const int *t) {
    if (c->n_feeds != nf || c->n_fetches != nx || c->n_targets != nt) return false;
    for (int i = 0; i < nf; i++)
        if (c->feeds[i].node != f[i].node || c->feeds[i].index != f[i].index) return false;
    for (int i = 0; i < nx; i++)
        if (c->fetches[i].node != x[i].node || c->fetches[i].index != x[i].index) return false;
    for (int i = 0; i < nt; i++)
        if (c->targets[i] != t[i]) return false;
    return true;
}

static int register_partition(psg_dist_session_t *s, const psg_partition_t *p, part_run_t *run) {
    char *bytes = NULL;
    size_t len = 0;
    if (psg_graph_serialize(p->graph, &bytes, &len) < 0) return -1;
    int rc;
    if (run->peer < 0) {
        rc = psg_task_server_register(s->server, bytes, len, p->num_feeds, p->feeds, p->num_fetches,
                                      p->fetches, p->num_targets, p->targets, &run->handle);
    } else {
        peer_t *peer = &s->peers[run->peer];
        psg_req_t r = {.type = PSG_REQ_REGISTER_GRAPH,
                       .u.reg = {bytes, len, p->num_feeds, p->num_fetches, p->num_targets, p->feeds,
                                 p->fetches, p->targets}};
        psg_rep_t rep;
        psg_msg_t *m = psg_ts_call(peer->client, &r, &rep, s->timeout_ms);
        rc = m ? 0 : -1;
        if (m) run->handle = rep.u.handle;
        psg_msg_destroy(&m);
    }
    free(bytes);
    return rc;
}

/* Appends id to out, or, for a group (a NoOp with only control inputs), its members;
 * each node once. */
static void add_members(const psg_graph_t *g, int id, char *seen, int *out, int *m) {
    if (id < 0 || id >= psg_graph_num_nodes(g)) {
        out[(*m)++] = id; /* the partitioner names it */
        return;
    }
    if (seen[id]) return;
    seen[id] = 1;
    const psg_node_t *node = psg_graph_node(g, id);
    if (strcmp(psg_node_op(node), "NoOp") || psg_node_num_inputs(node) > 0 ||
        psg_node_num_controls(node) == 0) {
        out[(*m)++] = id;
        return;
    }
    for (int j = 0; j < psg_node_num_controls(node); j++)
        add_members(g, psg_node_control(node, j), seen, out, m);
}

/* The targets with every group (a NoOp target) replaced by its control inputs, recursively:
 * running a group only means running its members, and a group on this worker over updates
 * on the ps tasks would otherwise make the worker's partition wait for each update
 * (a control Recv per update), which an overlapped step must not. Malloc'ed; NULL with the
 * error set. */
static int *expand_groups(const psg_graph_t *g, int n, const int *targets, int *n_out) {
    int nn = psg_graph_num_nodes(g), m = 0;
    char *seen = calloc((size_t)nn + 1, 1);
    int *out =
        malloc(((size_t)nn + (size_t)n + 1) * sizeof *out); /* each node once, plus bad ids */
    if (!seen || !out) {
        free(seen);
        free(out);
        psg_error_set("out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) add_members(g, targets[i], seen, out, &m);
    free(seen);
    *n_out = m;
    return out;
}

int psg_dist_callable_build(psg_dist_session_t *s, psg_dist_callable_t *c) {
    int n_run = 0, *run_targets = expand_groups(s->g, c->n_targets, c->targets, &n_run);
    if (!run_targets) return -1;
    /* one partition a task: a worker's towers on its logical CPUs or its GPUs run in its
     * one partition, the executor copying between its devices */
    psg_partition_options_t popt = {.by_task = true};
    if (psg_dist_placement_lock(s) < 0) {
        free(run_targets);
        return -1;
    }
    c->set = psg_partition_graph(s->g, c->n_feeds, c->feeds, c->n_fetches, c->fetches, n_run,
                                 run_targets, &popt);
    psg_dist_placement_unlock();
    free(run_targets);
    if (!c->set) return -1;
    int np = c->set->num_partitions;
    c->runs = calloc((size_t)np + 1, sizeof *c->runs);
    c->cur.reqs = calloc((size_t)np + 1, sizeof *c->cur.reqs);
    c->open.reqs = calloc((size_t)np + 1, sizeof *c->open.reqs);
    c->next.reqs = calloc((size_t)np + 1, sizeof *c->next.reqs);
    if (!c->runs || !c->cur.reqs || !c->open.reqs || !c->next.reqs)
        return psg_error_set("out of memory");
    c->local = -1;
    for (int k = 0; k < np; k++) {
        const psg_partition_t *p = &c->set->partitions[k];
        if (!strcmp(p->task, s->task)) {
            c->runs[k].peer = -1;
            c->local = k;
        } else if ((c->runs[k].peer = peer_index(s, p->task)) < 0) {
            return -1;
        }
        if (register_partition(s, p, &c->runs[k]) < 0) return -1;
    }
    if (psg_dist_recv_replies_plan(c) < 0) return -1;
    psg_dist_callable_set_overlap(c, c->want_overlap);
    return 0;
}

psg_dist_callable_t *psg_dist_session_make_callable(psg_dist_session_t *s, int n_feeds,
                                                    const psg_endpoint_t *feeds, int n_fetches,
                                                    const psg_endpoint_t *fetches, int n_targets,
                                                    const int *targets) {
    for (int i = 0; i < s->n_callables; i++)
        if (same_signature(s->callables[i], n_feeds, feeds, n_fetches, fetches, n_targets, targets))
            return s->callables[i];
    psg_dist_callable_t *c = calloc(1, sizeof *c);
    if (!c) {
        psg_error_set("out of memory");
        return NULL;
    }
    c->s = s;
    c->n_feeds = n_feeds;
    c->n_fetches = n_fetches;
    c->n_targets = n_targets;
    c->feeds = calloc((size_t)n_feeds + 1, sizeof *c->feeds);
    c->fetches = calloc((size_t)n_fetches + 1, sizeof *c->fetches);
    c->targets = calloc((size_t)n_targets + 1, sizeof *c->targets);
    if (!c->feeds || !c->fetches || !c->targets) {
        psg_error_set("out of memory");
        goto fail;
    }
    if (n_feeds) memcpy(c->feeds, feeds, (size_t)n_feeds * sizeof *feeds);
    if (n_fetches) memcpy(c->fetches, fetches, (size_t)n_fetches * sizeof *fetches);
    if (n_targets) memcpy(c->targets, targets, (size_t)n_targets * sizeof *targets);
    if (psg_dist_callable_build(s, c) < 0) goto fail;
    psg_dist_callable_t **v = realloc(s->callables, (size_t)(s->n_callables + 1) * sizeof *v);
    if (!v) {
        psg_error_set("out of memory");
        goto fail;
    }
    s->callables = v;
    v[s->n_callables++] = c;
    return c;
fail:
    callable_free(c);
    return NULL;
}

int psg_dist_callable_num_tasks(const psg_dist_callable_t *c) {
    return c->set->num_partitions;
}

/* Sends a request that needs no answer now (its reply is dropped by id later), only when
 * the task's connection takes it at once: a note to a task that is down waited for the whole
 * step timeout (a sync worker's step on a ps that failed over reported its failure 30 s
 * late); a dead or restarted task holds nothing of the step (one cut off keeps the step's
 * leftovers, as with any note lost on a link; its Recvs fail at their own timeout). */
static void send_note(peer_t *peer, psg_req_type_t type, int64_t step, const char *reason) {
    psg_req_t r = {.type = type, .step = step};
    if (type == PSG_REQ_ABORT_STEP) r.u.reason = reason;
    (void)psg_ts_send_note(peer->client, &r);
}

/* Files a reply of this callable into the open or the current step it answers; replies of
 * neither (earlier requests that timed out) are dropped. */
static void file_reply(psg_dist_callable_t *c, int k, psg_msg_t *m) {
    step_reqs_t *all[3] = {&c->cur, &c->open, &c->next};
    for (int i = 0; i < 3; i++) {
        part_req_t *q = &all[i]->reqs[k];
        if (q->waiting && m->id == q->pending_id) {
            q->waiting = false;
            psg_msg_destroy(&q->reply);
            q->reply = m;
            return;
        }
    }
    psg_msg_destroy(&m);
}

/* Peer p's connection was lost (why): every request of the callable's steps waiting on it
 * fails with that, as their replies will never come. */
static void mark_lost(psg_dist_callable_t *c, int p, const char *why) {
    step_reqs_t *all[3] = {&c->cur, &c->open, &c->next};
    for (int i = 0; i < 3; i++)
        for (int k = 0; all[i]->reqs && k < c->set->num_partitions; k++) {
            part_req_t *q = &all[i]->reqs[k];
            if (c->runs[k].peer != p || !q->waiting) continue;
            q->waiting = false;
            q->unreachable = true; /* no notes: each would wait for a connection */
            free(q->lost);
            q->lost = strdup(why);
        }
}

/* Whether a request of the callable's steps still waits for a reply from peer p. */
static bool peer_awaited(const psg_dist_callable_t *c, int p) {
    const step_reqs_t *all[3] = {&c->cur, &c->open, &c->next};
    for (int i = 0; i < 3; i++)
        for (int k = 0; all[i]->reqs && k < c->set->num_partitions; k++)
            if (c->runs[k].peer == p && all[i]->reqs[k].waiting) return true;
    return false;
}

/* Reads what arrived from the task of partition k: its replies, a lost connection. Stops at
 * the reply that leaves nothing waiting on the task: another read would find nothing and
 * check the connection, two system calls each on every step's critical path (issue 33); what
 * else came stays queued for the next read, a loss is seen by the next send or wait. */
static void read_peer(psg_dist_callable_t *c, int k) {
    int p = c->runs[k].peer;
    psg_ts_client_t *client = c->s->peers[p].client;
    int rc;
    for (;;) {
        psg_msg_t *m = NULL;
        rc = psg_ts_client_recv(client, &m);
        if (rc < 0 && psg_error_code() == PSG_ERR_UNAVAILABLE) mark_lost(c, p, psg_error_message());
        if (rc <= 0) break;
        file_reply(c, k, m);
        if (!peer_awaited(c, p)) return;
    }
    /* a recv that found nothing (0) checked the connection already */
    if (rc < 0 && psg_ts_client_check(client) < 0) mark_lost(c, p, psg_error_message());
}

/* The error of partition k's request q, or NULL: its connection lost, its task restarted
 * (a new incarnation: it lost its variables and graphs, whatever the reply says). */
static const char *peer_failure(psg_dist_callable_t *c, const part_req_t *q, int k, char *buf,
                                size_t size) {
    peer_t *peer = &c->s->peers[c->runs[k].peer];
    if (q->lost) return q->lost;
    uint64_t restarts = psg_ts_client_restarts(peer->client);
    if (restarts == peer->restarts_seen) return NULL;
    peer->restarts_seen = restarts;
    snprintf(buf, size,
             "task %s (%s) restarted (it answers as incarnation %016" PRIx64
             "): its variables and graphs are gone",
             peer->task, peer->address, psg_ts_client_incarnation(peer->client));
    return buf;
}

/* Whether a task that answered its part of step r has been lost since (its connection down
 * for the peer timeout) while the step still waits on other tasks, whose replies may then
 * never come (a sync chief's take waits for gradients that the workers' failed steps send
 * again only after its failover): the step fails naming it (err, code). */
static bool answered_task_lost(psg_dist_callable_t *c, const step_reqs_t *r, char *err,
                               size_t errsize, psg_err_code_t *code) {
    for (int k = 0; k < c->set->num_partitions; k++) {
        const part_req_t *q = &r->reqs[k];
        if (c->runs[k].peer < 0 || q->waiting || !q->reply) continue;
        peer_t *peer = &c->s->peers[c->runs[k].peer];
        if (!psg_ts_client_lost(peer->client)) continue;
        snprintf(err, errsize,
                 "task %s (%s): lost (its connection has been down for the peer timeout) after "
                 "it answered its part of the step, while the step waited on other tasks",
                 peer->task, peer->address);
        *code = PSG_ERR_UNAVAILABLE;
        return true;
    }
    return false;
}

/* Collects the RunGraph replies of step r's remote partitions until deadline (replies of
 * the callable's other step in flight are kept for later), then reads them: fetches into
 * fetched (NULL: the step fetches nothing remotely), the first failure into err. A task
 * whose connection is lost fails the step at once (heartbeats: the peer timeout). */
#define CHECK_MS 250
static void collect(psg_dist_callable_t *c, step_reqs_t *r, int64_t deadline,
                    psg_tensor_t **fetched, char *err, size_t errsize, psg_err_code_t *code) {
    psg_dist_session_t *s = c->s;
    int np = c->set->num_partitions;
    psg_ts_client_t *clients[64];
    bool ready[64];
    int item_part[64];
    bool gave_up = false; /* on the others, a task of the step being lost */
    for (;;) {
        int n = 0;
        for (int k = 0; k < np && n < 64; k++) {
            if (!r->reqs[k].waiting) continue;
            item_part[n] = k;
            clients[n++] = s->peers[c->runs[k].peer].client;
        }
        if (n == 0) break;
        int64_t left = deadline - psg_ts_now_ms();
        if (left <= 0) break;
        /* woken at least every CHECK_MS: a task whose connection went down before a request
         * was sent to it says nothing more, its loss is told by the time it stays down */
        bool any = psg_ts_client_poll(clients, n, ready, left < CHECK_MS ? left : CHECK_MS) > 0;
        for (int i = 0; i < n; i++)
            if (ready[i] || !any) read_peer(c, item_part[i]);
        if (!any && answered_task_lost(c, r, err, errsize, code)) {
            gave_up = true;
            break;
        }
    }
    for (int k = 0; k < np; k++) {
        part_req_t *q = &r->reqs[k];
        if (c->runs[k].peer < 0) continue;
        peer_t *peer = &s->peers[c->runs[k].peer];
        const psg_partition_t *p = &c->set->partitions[k];
        psg_msg_t *m = q->reply;
        char why[1024];
        const char *failure = peer_failure(c, q, k, why, sizeof why);
        if (failure) { /* the root cause of whatever else this task's reply says */
            if (!err[0] || *code != PSG_ERR_UNAVAILABLE) {
                snprintf(err, errsize, "%s", failure);
                *code = PSG_ERR_UNAVAILABLE;
            }
            q->waiting = false;
        } else if (q->waiting) { /* the deadline passed: name the first silent task */
            q->waiting = false;
            if (!err[0]) {
                snprintf(err, errsize,
                         "task %s (%s): no reply to RunGraph of step %" PRId64 " within %" PRId64
                         " ms (task down or stuck)",
                         peer->task, peer->address, r->step, s->timeout_ms);
                *code = PSG_ERR_TIMEOUT;
            }
            if (!gave_up) /* silent to the deadline: not waited for any more */
                psg_ts_client_reset(peer->client);
        } else if (!m) {
            continue; /* not sent */
        } else if (m->kind == PSG_MSG_ERROR) {
            /* the first failure, unless it was only the abort another failure caused */
            if (!err[0] || psg_error_is_cause_of(*code, (psg_err_code_t)m->code)) {
                snprintf(err, errsize, "%s", m->error ? m->error : "error");
                *code = m->code > 0 && m->code < PSG_ERR_CODE_COUNT ? (psg_err_code_t)m->code
                                                                    : PSG_ERR_UNKNOWN;
            }
        } else if (m->ntensors != p->num_fetches + (q->with_recvs ? c->runs[k].n_recv_keys : 0)) {
            if (!err[0])
                snprintf(err, errsize, "task %s: RunGraph replied %d tensors, expected %d",
                         peer->task, m->ntensors,
                         p->num_fetches + (q->with_recvs ? c->runs[k].n_recv_keys : 0));
        } else if (q->with_recvs && !err[0] &&
                   psg_dist_recv_replies_deliver(c, k, m, r->step, err, errsize) < 0) {
            /* a reply that does not carry what was asked: err says so */
        } else if (fetched) {
            for (int j = 0; j < p->num_fetches; j++)
                fetched[p->fetch_index[j]] = psg_tensor_ref(m->tensors[j]);
        }
        psg_msg_destroy(&q->reply);
    }
}

/* The end of step r, failed (err set) or not: the other tasks abort it, the local
 * rendezvous forgets it. A step that succeeded left nothing behind on the other tasks:
 * every Send was received, every pull answered. A failed one may have: tensors, waiters,
 * an abort to forget. */
static void end_step(psg_dist_callable_t *c, step_reqs_t *r, const char *err) {
    psg_dist_session_t *s = c->s;
    int np = c->set->num_partitions;
    if (err[0] && c->local >= 0) psg_task_server_abort_step(s->server, r->step, err);
    for (int k = 0; err[0] && k < np; k++)
        if (c->runs[k].peer >= 0 && !r->reqs[k].unreachable)
            send_note(&s->peers[c->runs[k].peer], PSG_REQ_CLEANUP_STEP, r->step, NULL);
    psg_task_server_cleanup_step(s->server, r->step);
    reqs_clear(r, np);
}

/* Waits for the open step of an overlapped callable and ends it. -1 with the step's
 * error. */
static int close_open_step(psg_dist_callable_t *c) {
    if (c->s->open != c) return 0;
    c->s->open = NULL;
    char err[2048] = "";
    psg_err_code_t code = PSG_ERR_UNKNOWN;
    collect(c, &c->open, psg_ts_now_ms() + c->s->timeout_ms, NULL, err, sizeof err, &code);
    int64_t step = c->open.step;
    end_step(c, &c->open, err);
    if (err[0]) return psg_error_set_code(code, "step %" PRId64 ": %s", step & 0x3fffffff, err);
    return 0;
}

/* Calls off the step asked for ahead: the other tasks abort it (their Recvs stop waiting;
 * nothing was updated, as no gradient of it was sent), their replies are read, and every
 * task forgets it. */
static void cancel_next(psg_dist_callable_t *c) {
    psg_dist_session_t *s = c->s;
    if (s->asked == c) s->asked = NULL;
    if (!c->has_next) return;
    c->has_next = false;
    char why[] = "the step asked for ahead was not run";
    for (int k = 0; k < c->set->num_partitions; k++)
        if (c->runs[k].peer >= 0 && !c->next.reqs[k].unreachable)
            send_note(&s->peers[c->runs[k].peer], PSG_REQ_ABORT_STEP, c->next.step, why);
    char err[2048] = "";
    psg_err_code_t code = PSG_ERR_UNKNOWN;
    collect(c, &c->next, psg_ts_now_ms() + s->timeout_ms, NULL, err, sizeof err, &code);
    end_step(c, &c->next, why);
}

int psg_dist_session_drain(psg_dist_session_t *s) {
    if (s->asked) cancel_next(s->asked);
    if (!s->open) return 0;
    cancel_next(s->open);
    return close_open_step(s->open);
}

/* overlap and ahead from what was asked and what the partitions allow */
static void set_modes(psg_dist_callable_t *c) {
    bool remote_fetches = false, remote_feeds = false;
    for (int k = 0; k < c->set->num_partitions; k++) {
        remote_fetches |= c->runs[k].peer >= 0 && c->set->partitions[k].num_fetches > 0;
        remote_feeds |= c->runs[k].peer >= 0 && c->set->partitions[k].num_feeds > 0;
    }
    /* with backups of the shards, a step's reply is its ack and a failed step is retried
     * with its own update id: a step left open (or asked for ahead) would fail inside the
     * next one's, whose retry does not carry it (docs/replication.md) */
    bool backups = c->s->writer[0] != 0;
    c->overlap = c->want_overlap && !remote_fetches && !backups;
    c->ahead = (c->overlap || c->want_ahead) && !remote_feeds && c->local >= 0 && !backups;
}

void psg_dist_callable_set_overlap(psg_dist_callable_t *c, bool on) {
    c->want_overlap = on;
    set_modes(c);
}

void psg_dist_callable_set_ahead(psg_dist_callable_t *c, bool on) {
    c->want_ahead = on;
    set_modes(c);
}

bool psg_dist_callable_asks_ahead(const psg_dist_callable_t *c) {
    return c->ahead;
}

bool psg_dist_callable_overlaps(const psg_dist_callable_t *c) {
    return c->overlap;
}

/* A fresh step id: the task in the high bits (step_base), so that workers sharing a ps never
 * share one. */
static int64_t new_step_id(psg_dist_session_t *s) {
    return s->step_base | (++s->step_counter & 0x3fffffff);
}

static void swap_reqs(step_reqs_t *a, step_reqs_t *b) {
    step_reqs_t t = *a;
    *a = *b;
    *b = t;
}

/* Sends step r's RunGraph to every remote partition; the first failure into err, its code
 * into *code (a task that cannot be reached: PSG_ERR_UNREACHABLE). */
static void send_run_graphs(psg_dist_callable_t *c, step_reqs_t *r,
                            psg_tensor_t *const *feed_values, bool with_recvs, char *err,
                            size_t errsize, psg_err_code_t *code) {
    psg_dist_session_t *s = c->s;
    for (int k = 0; k < c->set->num_partitions && !err[0]; k++) {
        part_run_t *run = &c->runs[k];
        if (run->peer < 0) continue;
        const psg_partition_t *p = &c->set->partitions[k];
        psg_tensor_t *feeds[PSG_WIRE_MAX_TENSORS];
        int nf = p->num_feeds < PSG_WIRE_MAX_TENSORS ? p->num_feeds : PSG_WIRE_MAX_TENSORS;
        for (int i = 0; i < nf; i++) feeds[i] = feed_values[p->feed_index[i]];
        psg_req_t req = {
            .type = PSG_REQ_RUN_GRAPH, .step = r->step, .u.run = {run->handle, nf, feeds, ""}};
        if (s->writer[0] && r->seq > 0)
            snprintf(req.u.run.update, sizeof req.u.run.update, "%s %" PRId64, s->writer, r->seq);
        r->reqs[k].with_recvs = with_recvs && run->n_recv_keys > 0;
        if (r->reqs[k].with_recvs) {
            req.type = PSG_REQ_RUN_GRAPH_RECV;
            req.u.run.n_recv_keys = run->n_recv_keys;
            req.u.run.recv_keys = run->recv_keys;
        }
        int rc = psg_ts_send(s->peers[run->peer].client, &req, &r->reqs[k].pending_id);
        r->reqs[k].unreachable = rc < 0;
        if (rc < 0) {
            snprintf(err, errsize, "%s", psg_error_message()); /* names the task */
            *code = psg_error_code();
        } else
            r->reqs[k].waiting = true;
    }
}

/* Asks for the step after cur now (RunGraph to the remote tasks, the local partition's
 * pulls), before cur's local partition runs. A ps then starts it beside cur, and each of
 * its variable reads waits only for cur's update of that variable (the task server orders
 * each resource's steps), so the new values leave as soon as each is updated, while this
 * worker still runs backprop, instead of after this step ended. The values read are the
 * same as one step at a time. Only when no remote partition takes feeds (they are
 * not known yet). A failure here only means the next step is asked for when it runs. */
static void ask_ahead(psg_dist_callable_t *c) {
    psg_dist_session_t *s = c->s;
    step_reqs_t *r = &c->next;
    r->step = new_step_id(s);
    r->seq = ++s->update_seq;
    char err[2048] = "";
    psg_err_code_t code = PSG_ERR_UNKNOWN;
    send_run_graphs(c, r, NULL, false, err, sizeof err, &code);
    c->has_next = true;
    s->asked = c;
    if (!err[0] && psg_task_server_prepare(s->server, c->runs[c->local].handle, r->step) < 0)
        snprintf(err, sizeof err, "%s", psg_error_message());
    if (err[0]) cancel_next(c);
}

int psg_dist_callable_run(psg_dist_callable_t *c, psg_tensor_t *const *feed_values,
                          psg_tensor_t **fetched) {
    psg_dist_session_t *s = c->s;
    /* another callable's open step ends first: its updates come before this step */
    if (((s->open && s->open != c) || (s->asked && s->asked != c)) && psg_dist_session_drain(s) < 0)
        return -1;
    int np = c->set->num_partitions;
    step_reqs_t *r = &c->cur;
    int64_t deadline = psg_ts_now_ms() + s->timeout_ms;
    char err[2048] = "";
    psg_err_code_t code = PSG_ERR_UNKNOWN; /* the first failure's, with err */
    for (int i = 0; i < c->n_fetches; i++) fetched[i] = NULL;
    bool first = false; /* the remote partitions' replies before the local run */
    if (c->has_next) {  /* asked for ahead by the last run: its RunGraphs and pulls are out */
        swap_reqs(&c->cur, &c->next);
        c->has_next = false;
        s->asked = NULL;
    } else {
        r->step = new_step_id(s);
        r->seq = c->retry_seq ? c->retry_seq : ++s->update_seq; /* a retry: the same update */
        c->retry_seq = 0;
        /* the remote partitions first, their replies carrying the local partition's pulls
         * (when the local run cannot be told not to pull, as usual) */
        first =
            c->replies_first && !c->ahead && !c->overlap &&
            psg_task_server_prepare_delivered(s->server, c->runs[c->local].handle, r->step) == 0;
        send_run_graphs(c, r, feed_values, first, err, sizeof err, &code);
    }
    int64_t seq = r->seq;
    int64_t step = r->step;
    if (!err[0] && c->ahead) ask_ahead(c);
    if (!err[0] && first) collect(c, r, deadline, fetched, err, sizeof err, &code);
    if (!err[0] && c->local >= 0) {
        const psg_partition_t *p = &c->set->partitions[c->local];
        psg_tensor_t *lf[64], *lx[64];
        if (p->num_feeds > 64 || p->num_fetches > 64) {
            snprintf(err, sizeof err, "too many feeds or fetches in one partition");
        } else {
            for (int i = 0; i < p->num_feeds; i++) lf[i] = feed_values[p->feed_index[i]];
            if (psg_task_server_run(s->server, c->runs[c->local].handle, step, p->num_feeds, lf,
                                    lx) < 0) {
                code = psg_error_code();
                snprintf(err, sizeof err, "%s", psg_error_message());
            } else
                for (int i = 0; i < p->num_fetches; i++) fetched[p->fetch_index[i]] = lx[i];
        }
    }
    /* the previous overlapped step: its remote partitions ran beside this one's start */
    bool err_names_step = false;
    if (s->open == c && close_open_step(c) < 0 && !err[0]) {
        code = psg_error_code();
        snprintf(err, sizeof err, "%s", psg_error_message()); /* "step N: ..." of the open one */
        err_names_step = true;
    }
    if (err[0]) { /* tell the others now, so that they stop waiting for this step */
        for (int k = 0; k < np; k++) /* not the tasks known lost: a note would wait for them */
            if (c->runs[k].peer >= 0) read_peer(c, k);
        cancel_next(c);
        for (int k = 0; k < np; k++)
            if (c->runs[k].peer >= 0 && !r->reqs[k].unreachable)
                send_note(&s->peers[c->runs[k].peer], PSG_REQ_ABORT_STEP, step, err);
    }
    if (!err[0] && c->overlap) { /* leave it open: the next step starts now */
        swap_reqs(&c->open, &c->cur);
        s->open = c;
        return 0;
    }
    collect(c, r, deadline, fetched, err, sizeof err, &code);
    end_step(c, r, err);
    if (err[0]) {
        c->retry_seq = seq; /* a shard may hold this step's update: its retry says so */
        for (int i = 0; i < c->n_fetches; i++) psg_tensor_destroy(&fetched[i]);
        if (err_names_step) return psg_error_set_code(code, "%s", err);
        return psg_error_set_code(code, "step %" PRId64 ": %s", step & 0x3fffffff, err);
    }
    return 0;
}

int psg_dist_session_run(psg_dist_session_t *s, int n_feeds, const psg_endpoint_t *feeds,
                         psg_tensor_t *const *feed_values, int n_fetches,
                         const psg_endpoint_t *fetches, psg_tensor_t **fetched, int n_targets,
                         const int *targets) {
    psg_dist_callable_t *c =
        psg_dist_session_make_callable(s, n_feeds, feeds, n_fetches, fetches, n_targets, targets);
    return c ? psg_dist_callable_run(c, feed_values, fetched) : -1;
}

/* Runs the initializers init[n] in steps of at most INIT_PART_BYTES of initial values:
 * a constant initial value travels inside the registered graph, and one graph of a large
 * model's (Inception-v3 with its RMSProp slots: 175 MB) is over the wire's frame limit. */
#define INIT_PART_BYTES (PSG_WIRE_MAX_FRAME / 4)
static int run_init_parts(psg_dist_session_t *s, int n, const int *init) {
    int start = 0;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        const psg_node_t *a = psg_graph_node(s->g, init[i]);
        const psg_shape_t *sh =
            psg_node_num_inputs(a) > 1 ? psg_graph_shape(s->g, psg_node_input(a, 1)) : NULL;
        int64_t numel = 1;
        for (int d = 0; sh && d < sh->rank; d++) numel *= sh->dims[d] > 0 ? sh->dims[d] : 1;
        size_t b = (size_t)numel * sizeof(float);
        if (i > start && bytes + b > INIT_PART_BYTES) {
            if (psg_dist_session_run(s, 0, NULL, NULL, 0, NULL, NULL, i - start, init + start) < 0)
                return -1;
            start = i;
            bytes = 0;
        }
        bytes += b;
    }
    return n > start
               ? psg_dist_session_run(s, 0, NULL, NULL, 0, NULL, NULL, n - start, init + start)
               : 0;
}

int psg_dist_session_run_init(psg_dist_session_t *s) {
    int n = 0;
    const int *init = psg_graph_collection(s->g, "init", &n);
    return run_init_parts(s, n, init);
}

/* The canonical name of a task ("/job:ps/task:0" -> "/job:ps/replica:0/task:0"). */
static int canonical_task(const char *task, char *out, size_t size) {
    psg_device_name_t d;
    if (psg_device_name_parse(task, &d) < 0) return -1;
    if (!d.has_replica) d.has_replica = true, d.replica = 0;
    psg_device_name_task_str(&d, out, size);
    return 0;
}

/* A request to task `task` and its reply (NULL with the error naming the task). */
static psg_msg_t *call_task(psg_dist_session_t *s, const char *task, psg_msg_t **m,
                            int64_t timeout_ms) {
    char canon[PSG_DEVICE_NAME_MAX];
    if (canonical_task(task, canon, sizeof canon) < 0) {
        psg_msg_destroy(m);
        return NULL;
    }
    int i = peer_index(s, canon);
    if (i < 0) {
        psg_msg_destroy(m);
        return NULL;
    }
    if (!s->peers[i].client) {
        psg_msg_destroy(m);
        psg_error_set("task %s is this process", canon);
        return NULL;
    }
    return psg_ts_call_msg(s->peers[i].client, m, timeout_ms);
}

int psg_dist_session_wait_init(psg_dist_session_t *s, int64_t timeout_ms) {
    if (psg_dist_session_drain(s) < 0) return -1;
    psg_task_vars_t *lists = NULL;
    int n = 0, rc = psg_dist_session_variables_by_task(s, &lists, &n);
    for (int k = 0; k < n && rc == 0; k++) {
        psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, psg_proto_entry(PSG_REQ_WAIT_INIT)->op);
        if (!m || psg_msg_set_body(m, lists[k].names, lists[k].len) < 0) {
            psg_msg_destroy(&m);
            rc = psg_error_set("out of memory");
            break;
        }
        psg_msg_t *r = call_task(s, lists[k].task, &m, timeout_ms);
        if (!r) rc = psg_error_wrap("waiting for the variables to be initialized");
        psg_msg_destroy(&r);
    }
    psg_task_vars_free(&lists, &n);
    return rc;
}

int psg_dist_session_job_done(psg_dist_session_t *s) {
    return psg_dist_session_job_done_for(s, s->task);
}

int psg_dist_session_job_done_for(psg_dist_session_t *s, const char *worker) {
    if (psg_dist_session_drain(s) < 0) return -1;
    int nps = psg_cluster_num_tasks(s->cluster, "ps"), rc = 0;
    char first[2048] = "";
    for (int i = 0; i < nps; i++) {
        char task[PSG_DEVICE_NAME_MAX];
        psg_device_name("ps", i, NULL, task, sizeof task);
        psg_req_t jd = {.type = PSG_REQ_JOB_DONE, .u.worker = worker};
        psg_msg_t *m = psg_req_encode(&jd);
        psg_msg_t *r = m ? call_task(s, task, &m, 5000) : NULL;
        /* a ps task that failed over serves no shard: told if it answers, not waited for */
        if (!r && !first[0] && psg_dist_session_ps_serving(s, i) == i) {
            snprintf(first, sizeof first, "%s", psg_error_message());
            rc = -1;
        }
        psg_msg_destroy(&r);
    }
    if (rc < 0) psg_error_set("%s", first);
    return rc;
}

int psg_dist_session_wait_workers(psg_dist_session_t *s, int n, int64_t timeout_ms) {
    if (psg_dist_session_drain(s) < 0) return -1;
    if (n <= 0 || psg_cluster_num_tasks(s->cluster, "ps") == 0) return 0;
    psg_req_t wd = {.type = PSG_REQ_WAIT_DONE, .u.workers = n};
    psg_msg_t *m = psg_req_encode(&wd);
    if (!m) return -1;
    char task[PSG_DEVICE_NAME_MAX]; /* ps0, or the task serving its shard since a failover */
    psg_device_name("ps", psg_dist_session_ps_serving(s, 0), NULL, task, sizeof task);
    psg_msg_t *r = call_task(s, task, &m, timeout_ms);
    if (!r) return psg_error_wrap("waiting for %d workers to finish", n);
    psg_msg_destroy(&r);
    return 0;
}

char *psg_dist_session_inspect(psg_dist_session_t *s, const char *task) {
    return psg_dist_session_inspect_within(s, task, s->timeout_ms);
}

char *psg_dist_session_inspect_within(psg_dist_session_t *s, const char *task, int64_t timeout_ms) {
    if (psg_dist_session_drain(s) < 0) return NULL;
    psg_req_t in = {.type = PSG_REQ_INSPECT};
    psg_msg_t *m = psg_req_encode(&in);
    psg_msg_t *r = m ? call_task(s, task, &m, timeout_ms) : NULL;
    return r ? psg_dist_session_reply_text(&r) : NULL;
}

char *psg_dist_session_reply_text(psg_msg_t **r) {
    size_t n = (*r)->body ? (*r)->body->size : 0;
    char *out = malloc(n + 1);
    if (out) {
        if (n) memcpy(out, (*r)->body->data, n);
        out[n] = 0;
    } else {
        psg_error_set("out of memory");
    }
    psg_msg_destroy(r);
    return out;
}

uint64_t psg_dist_session_incarnation(psg_dist_session_t *s, const char *task) {
    char canon[PSG_DEVICE_NAME_MAX];
    if (canonical_task(task, canon, sizeof canon) < 0) return 0;
    for (int i = 0; i < s->n_peers; i++)
        if (!strcmp(s->peers[i].task, canon) && s->peers[i].client) {
            s->peers[i].restarts_seen = psg_ts_client_restarts(s->peers[i].client);
            return psg_ts_client_incarnation(s->peers[i].client);
        }
    return 0;
}

psg_msg_t *psg_dist_session_call(psg_dist_session_t *s, const char *task, psg_msg_t **m,
                                 int64_t timeout_ms) {
    return call_task(s, task, m, timeout_ms);
}

int psg_dist_session_reregister(psg_dist_session_t *s) {
    (void)psg_dist_session_drain(s); /* a restarted task lost that step anyway */
    if (psg_dist_session_place(s) < 0) return -1;
    for (int i = 0; i < s->n_callables; i++) {
        psg_dist_callable_t *c = s->callables[i];
        if (!c->set) { /* dropped by a failover */
            if (psg_dist_callable_build(s, c) < 0) return -1;
            continue;
        }
        for (int k = 0; k < c->set->num_partitions; k++) {
            part_run_t *run = &c->runs[k];
            if (run->peer < 0) continue;
            /* the old graph, if the task still has it (it did not restart): not kept twice */
            psg_req_t d = {.type = PSG_REQ_DEREGISTER_GRAPH, .u.handle = run->handle};
            psg_rep_t rep;
            psg_msg_t *m = run->handle
                               ? psg_ts_call(s->peers[run->peer].client, &d, &rep, s->timeout_ms)
                               : NULL;
            psg_msg_destroy(&m);
            if (register_partition(s, &c->set->partitions[k], run) < 0) return -1;
        }
    }
    return 0;
}

int psg_dist_session_run_init_on(psg_dist_session_t *s, const char *task) {
    int m = 0;
    int *mine = psg_dist_session_init_ops_on(s, task, &m);
    if (!mine) return -1;
    int rc = run_init_parts(s, m, mine);
    free(mine);
    return rc;
}
