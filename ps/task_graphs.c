/* The task server's registered graphs: registration (the graph a peer sends is parsed,
 * checked against the peer's limits and the task's memory, planned), reference counts so
 * a deregistered graph is freed as soon as no runner holds it, and a step's run. Not the
 * dispatch (task_server.c) nor the admin requests (task_admin.c). */
#include "ops/cpu/sendrecv.h"
#include "core/checked.h"
#include "core/membudget.h"
#include "ps/replicate.h"
#include "ps/task_server_internal.h"
#include "psgraph/error.h"
#include "psgraph/op.h"
#include "psgraph/serialize.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A partition with nothing that waits and at most this many nodes runs on the server
 * thread: two thread hand-offs cost more than it does (docs/distributed.md). */
#define INLINE_MAX_NODES 16

static void reg_graph_free(reg_graph_t *rg) {
    if (!rg) return;
    if (rg->budget) psg_membudget_release(rg->budget, (int64_t)rg->built_bytes);
    psg_membudget_unref(&rg->budget);
    psg_run_order_destroy(&rg->order);
    psg_plan_destroy(&rg->plan);
    free(rg->vars);
    free(rg->written);
    free(rg->handles);
    psg_graph_destroy(&rg->g);
    for (int i = 0; i < rg->n_pulls; i++) free(rg->pulls[i].key);
    free(rg->pulls);
    for (int i = 0; i < rg->n_sends; i++) free(rg->send_keys[i]);
    free(rg->send_keys);
    free(rg);
}

/* Finds where each Recv's tensor comes from, and the keys this graph sends. */
static int scan_sendrecv(psg_task_server_t *ts, reg_graph_t *rg) {
    int nn = psg_graph_num_nodes(rg->g);
    for (int i = 0; i < nn; i++) {
        const psg_node_t *n = psg_graph_node(rg->g, i);
        bool is_send = !strcmp(psg_node_op(n), "Send"), is_recv = !strcmp(psg_node_op(n), "Recv");
        if (!is_send && !is_recv) continue;
        char key[PSG_RENDEZVOUS_KEY_MAX];
        psg_sendrecv_key(n, key, sizeof key);
        psg_device_name_t src, dst;
        if (psg_device_name_parse(psg_node_get_str(n, "send_device", ""), &src) < 0 ||
            psg_device_name_parse(psg_node_get_str(n, "recv_device", ""), &dst) < 0)
            return psg_error_wrap("node '%s' (%s)", psg_node_name(n), psg_node_op(n));
        if (is_send) {
            if (!psg_device_name_same_task(&src, &ts->task_dn))
                return psg_error_set("node '%s' (Send) sends from %s, not from this task",
                                     psg_node_name(n), psg_node_get_str(n, "send_device", ""));
            char **v = realloc(rg->send_keys, (size_t)(rg->n_sends + 1) * sizeof *v);
            if (!v) return psg_error_set("out of memory");
            rg->send_keys = v;
            if (!(v[rg->n_sends] = strdup(key))) return psg_error_set("out of memory");
            rg->n_sends++;
            continue;
        }
        if (!psg_device_name_same_task(&dst, &ts->task_dn))
            return psg_error_set("node '%s' (Recv) receives on %s, not on this task",
                                 psg_node_name(n), psg_node_get_str(n, "recv_device", ""));
        if (psg_device_name_same_task(&src, &ts->task_dn)) continue; /* a local edge */
        if (!ts->cluster || !src.has_job || !src.has_task)
            return psg_error_set("node '%s' (Recv) receives from %s, which is not in the cluster",
                                 psg_node_name(n), psg_node_get_str(n, "send_device", ""));
        const char *addr = psg_cluster_address(ts->cluster, src.job, src.task);
        if (!addr) return psg_error_wrap("node '%s' (Recv)", psg_node_name(n));
        psg_remote_pull_t *p = realloc(rg->pulls, (size_t)(rg->n_pulls + 1) * sizeof *p);
        if (!p) return psg_error_set("out of memory");
        rg->pulls = p;
        p = &rg->pulls[rg->n_pulls];
        memset(p, 0, sizeof *p);
        if (!(p->key = strdup(key))) return psg_error_set("out of memory");
        psg_device_name_task_str(&src, p->task, sizeof p->task);
        snprintf(p->address, sizeof p->address, "%s", addr);
        rg->n_pulls++;
    }
    return 0;
}

/* The bytes of a VarHandle's variable (its shape and dtype attrs); 0 for any other node. */
static size_t var_bytes(const psg_node_t *n) {
    const psg_attr_t *sh = psg_node_attr(n, "shape"), *dt = psg_node_attr(n, "dtype");
    if (strcmp(psg_node_op(n), "VarHandle") || !sh || sh->type != PSG_ATTR_SHAPE) return 0;
    int64_t numel = psg_shape_numel(&sh->u.shape);
    size_t es = dt && dt->type == PSG_ATTR_DTYPE ? psg_dtype_size(dt->u.dtype) : 4;
    uint64_t b;
    if (numel < 0 || psg_ckd_mul_u64(&b, (uint64_t)numel, es ? es : 4) || b > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)b;
}

static const char *var_name_of(const psg_node_t *n) {
    const char *shared = psg_node_get_str(n, "shared_name", "");
    return shared[0] ? shared : psg_node_name(n);
}

/* A variable a graph's VarHandle names: its name (the graph's string) and bytes. */
struct psg_ts_var {
    const char *name;
    size_t bytes;
};

static int var_cmp(const void *a, const void *b) {
    return strcmp(((const struct psg_ts_var *)a)->name, ((const struct psg_ts_var *)b)->name);
}

/* rg->vars: the variables its VarHandles name, sorted by name. -1 on out of memory. */
static int collect_vars(reg_graph_t *rg) {
    int nn = psg_graph_num_nodes(rg->g), n = 0;
    for (int i = 0; i < nn; i++) n += var_bytes(psg_graph_node(rg->g, i)) > 0;
    if (!n) return 0;
    if (!(rg->vars = malloc(sizeof *rg->vars * (size_t)n)))
        return psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < nn; i++) {
        const psg_node_t *nd = psg_graph_node(rg->g, i);
        size_t b = var_bytes(nd);
        if (b) rg->vars[rg->n_vars++] = (struct psg_ts_var){var_name_of(nd), b};
    }
    qsort(rg->vars, (size_t)rg->n_vars, sizeof *rg->vars, var_cmp);
    return 0;
}

/* Under lock: the bytes of rg's variables that another graph of its owner already holds
 * (a variable is one resource of the task, however many graphs name it: a worker's step,
 * init and eval graphs all name the table's shard). */
static size_t vars_held_elsewhere(const psg_task_server_t *ts, const reg_graph_t *rg,
                                  const peer_t *owner) {
    size_t held = 0;
    for (int i = 0; i < rg->n_vars; i++) {
        const struct psg_ts_var *v = &rg->vars[i];
        bool found = false;
        for (int k = 0; k < ts->n_graphs && !found; k++) {
            const reg_graph_t *o = ts->graphs[k];
            if (o->owner != owner || !o->n_vars) continue;
            const struct psg_ts_var *m =
                bsearch(v, o->vars, (size_t)o->n_vars, sizeof *o->vars, var_cmp);
            found = m && m->bytes == v->bytes;
        }
        if (found && v->bytes != SIZE_MAX) held += v->bytes;
    }
    return held < rg->alloc_bytes ? held : rg->alloc_bytes;
}

/* The bytes a step of the graph may allocate, at most: every output of a known shape
 * (Random, constants, temporaries; not handles) and every variable a VarHandle creates. Saturates
 * at SIZE_MAX; *worst names the node that would make the most (a variable rm has already is not
 * made again), *top its bytes. */
static size_t graph_alloc_bytes(const psg_graph_t *g, psg_resource_mgr_t *rm,
                                const psg_node_t **worst, size_t *top_bytes) {
    size_t total = 0, top = 0;
    int nn = psg_graph_num_nodes(g);
    for (int i = 0; i < nn; i++) {
        const psg_node_t *n = psg_graph_node(g, i);
        size_t bytes = 0;
        for (int o = 0; o < psg_node_num_outputs(n); o++) {
            /* a handle (a variable's, an accumulator's) is a few bytes whatever the shape it
             * carries: the variable itself is counted at its VarHandle */
            if (psg_node_output_dtype(n, o) == PSG_DT_RESOURCE) continue;
            int64_t numel = psg_shape_numel(psg_node_output_shape(n, o));
            uint64_t b;
            if (numel > 0 && (psg_ckd_mul_u64(&b, (uint64_t)numel,
                                              psg_dtype_size(psg_node_output_dtype(n, o))) ||
                              psg_ckd_add_size(&bytes, bytes, b)))
                bytes = SIZE_MAX;
        }
        size_t made = bytes, vb = var_bytes(n);
        if (psg_ckd_add_size(&bytes, bytes, vb)) bytes = SIZE_MAX;
        if (vb && !psg_resource_find_variable(rm, var_name_of(n)) &&
            psg_ckd_add_size(&made, made, vb))
            made = SIZE_MAX;
        if (made > top) top = made, *worst = n;
        if (psg_ckd_add_size(&total, total, bytes)) total = SIZE_MAX;
    }
    *top_bytes = top;
    return total;
}

/* The peer's share of the task: graphs, their bytes as built, what they may allocate.
 * Under lock. */
static int check_owner_limits(psg_task_server_t *ts, const peer_t *p, size_t built, size_t alloc) {
    const psg_task_limits_t *l = &ts->lim;
    if (p->graphs + 1 > l->max_graphs_per_peer)
        return psg_error_set_code(PSG_ERR_LIMIT,
                                  "peer %s has %d graphs registered (the limit is %d per peer)",
                                  p->label, p->graphs, l->max_graphs_per_peer);
    if (p->graph_bytes + built > (size_t)l->max_graph_bytes_per_peer)
        return psg_error_set_code(
            PSG_ERR_LIMIT,
            "peer %s: graphs of %zu bytes as built registered, this one %zu (the limit is %" PRId64
            " bytes per peer)",
            p->label, p->graph_bytes, built, l->max_graph_bytes_per_peer);
    if (p->alloc_bytes + alloc > (size_t)l->peer_memory_bytes)
        return psg_error_set_code(
            PSG_ERR_LIMIT,
            "peer %s: its graphs may allocate %zu bytes, this one %zu more (a peer's share of "
            "the task's memory is %" PRId64 " bytes, --peer-memory)",
            p->label, p->alloc_bytes, alloc, l->peer_memory_bytes);
    return 0;
}

/* The task's budget against the graph as built and its largest output: a Random, a
 * VarHandle, a Fill that would pass what the task has left is refused by name. Charges the
 * graph's bytes as built (given back when it is freed). */
static int check_task_memory(psg_task_server_t *ts, reg_graph_t *rg, const psg_node_t *worst,
                             size_t top) {
    int64_t limit = psg_membudget_limit(ts->budget), held = psg_membudget_held(ts->budget);
    if (rg->alloc_bytes > (size_t)limit)
        return psg_error_set_code(
            PSG_ERR_LIMIT,
            "the graph may allocate %zu bytes, over the task's memory limit of %" PRId64
            " bytes (--memory-limit); the largest is node '%s' (%s)",
            rg->alloc_bytes, limit, worst ? psg_node_name(worst) : "?",
            worst ? psg_node_op(worst) : "?");
    if (worst && top > (size_t)(limit - held))
        return psg_error_set_code(PSG_ERR_LIMIT,
                                  "node '%s' (%s) would make %zu bytes: the task holds %" PRId64
                                  " of its %" PRId64 " bytes (--memory-limit)",
                                  psg_node_name(worst), psg_node_op(worst), top, held, limit);
    rg->built_bytes = psg_graph_footprint(rg->g) + psg_plan_footprint(rg->plan);
    if (psg_membudget_charge(ts->budget, (int64_t)rg->built_bytes) < 0)
        return psg_error_wrap("the graph takes %zu bytes as built", rg->built_bytes);
    rg->budget = psg_membudget_ref(ts->budget);
    return 0;
}

/* Parses and plans the graph: everything but the table. */
static reg_graph_t *build(psg_task_server_t *ts, const psg_req_register_t *r, bool limited) {
    reg_graph_t *rg = calloc(1, sizeof *rg);
    if (!rg) {
        psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    rg->body_bytes = r->len;
    /* a peer's graph as built, its constants included, is the task's memory */
    int64_t left = psg_membudget_limit(ts->budget) - psg_membudget_held(ts->budget);
    psg_membudget_t *outer = psg_membudget_enter(limited ? ts->budget : NULL);
    rg->g = psg_graph_deserialize_within(r->graph, r->len,
                                         limited ? (size_t)(left > 0 ? left : 0) : SIZE_MAX);
    psg_membudget_enter(outer);
    if (!rg->g) goto fail;
    const psg_node_t *worst = NULL;
    size_t top = 0;
    rg->alloc_bytes = graph_alloc_bytes(rg->g, ts->rm, &worst, &top);
    if (collect_vars(rg) < 0) goto fail;
    int nn = psg_graph_num_nodes(rg->g);
    for (int i = 0; i < r->n_feeds + r->n_fetches; i++) {
        psg_endpoint_t e = i < r->n_feeds ? r->feeds[i] : r->fetches[i - r->n_feeds];
        if (e.node < 0 || e.node >= nn || e.index < 0 ||
            e.index >= psg_node_num_outputs(psg_graph_node(rg->g, e.node))) {
            psg_error_set_code(PSG_ERR_BAD_REQUEST,
                               "%s %d names output %d of node %d, which the graph does not have",
                               i < r->n_feeds ? "feed" : "fetch",
                               i < r->n_feeds ? i : i - r->n_feeds, e.index, e.node);
            goto fail;
        }
        const psg_node_t *en = psg_graph_node(rg->g, e.node);
        if (psg_node_output_dtype(en, e.index) ==
            PSG_DT_RESOURCE) { /* a handle means nothing elsewhere */
            psg_error_set_code(
                PSG_ERR_BAD_REQUEST,
                "%s %d is output %d of node '%s' (%s), a resource handle, which cannot cross the "
                "wire: %s the variable's value (a read of it) instead",
                i < r->n_feeds ? "feed" : "fetch", i < r->n_feeds ? i : i - r->n_feeds, e.index,
                psg_node_name(en), psg_node_op(en), i < r->n_feeds ? "feed" : "fetch");
            goto fail;
        }
    }
    for (int i = 0; i < r->n_targets; i++)
        if (r->targets[i] < 0 || r->targets[i] >= nn) {
            psg_error_set_code(PSG_ERR_BAD_REQUEST,
                               "target %d names node %d, which the graph does not have", i,
                               r->targets[i]);
            goto fail;
        }
    if (scan_sendrecv(ts, rg) < 0) goto fail;
    rg->plan = psg_plan_new(rg->g, r->n_feeds, r->feeds, r->n_fetches, r->fetches, r->n_targets,
                            r->targets);
    if (!rg->plan) goto fail;
    rg->n_feeds = r->n_feeds;
    rg->n_fetches = r->n_fetches;
    /* the server thread runs only what cannot wait: no Recv, no accumulator take, no
     * token dequeue (once, a take with timeout 0 there stopped the server for good) */
    rg->run_inline = psg_plan_num_nodes(rg->plan) <= INLINE_MAX_NODES;
    for (int i = 0; i < nn && rg->run_inline; i++) {
        const psg_op_def_t *d = psg_op_lookup(psg_node_op(psg_graph_node(rg->g, i)));
        if (!d || (d->flags & PSG_OP_ASYNC)) rg->run_inline = false;
    }
    /* a step whose writes go to a backup waits for its ack: never on the server thread */
    if (ts->repl && (psg_ts_repl_written(rg->g, &rg->written, &rg->n_written) < 0 ||
                     psg_ts_repl_handles(rg->g, &rg->handles, &rg->n_handles) < 0))
        goto fail;
    if (rg->n_written) rg->run_inline = false;
    /* an inline step must never wait for the step before: the server thread runs it */
    if (!rg->run_inline && psg_plan_can_overlap(rg->plan) &&
        !(rg->order = psg_run_order_new(rg->plan)))
        goto fail;
    if (limited && check_task_memory(ts, rg, worst, top) < 0) goto fail;
    return rg;
fail:
    reg_graph_free(rg);
    return NULL;
}

/* A handle no live graph has: 63 random bits (not 0), so that a peer cannot guess another's
 * (each is also its registrant's alone: psg_ts_on_run, psg_ts_graph_deregister). Under lock. */
static uint64_t new_handle_locked(const psg_task_server_t *ts) {
    for (;;) {
        uint64_t h = 0;
        psg_wire_random(&h, sizeof h);
        h >>= 1; /* a JSON number and an int64 alike */
        bool taken = h == 0;
        for (int i = 0; i < ts->n_graphs && !taken; i++) taken = ts->graphs[i]->handle == h;
        if (!taken) return h;
    }
}

int psg_ts_graph_register(psg_task_server_t *ts, peer_t *owner, const psg_req_register_t *r,
                          uint64_t *handle) {
    reg_graph_t *rg = build(ts, r, owner != NULL);
    if (!rg) {
        /* the graph did not parse, infer or plan: the peer's request is at fault */
        if (psg_error_code() == PSG_ERR_UNKNOWN) psg_error_set_code_only(PSG_ERR_BAD_REQUEST);
        return psg_error_wrap("task %s: RegisterGraph", ts->task);
    }
    pthread_mutex_lock(&ts->lock);
    rg->charged_bytes = rg->alloc_bytes - (owner ? vars_held_elsewhere(ts, rg, owner) : 0);
    if (owner && check_owner_limits(ts, owner, rg->built_bytes, rg->charged_bytes) < 0)
        goto fail_locked;
    if (ts->n_graphs == ts->cap_graphs) {
        int cap = ts->cap_graphs ? 2 * ts->cap_graphs : 16;
        reg_graph_t **v = realloc(ts->graphs, (size_t)cap * sizeof *v);
        if (!v) {
            psg_error_set_code(PSG_ERR_NO_MEMORY, "out of memory");
            goto fail_locked;
        }
        ts->graphs = v;
        ts->cap_graphs = cap;
    }
    rg->handle = new_handle_locked(ts);
    rg->refs = 1;
    rg->owner = owner;
    if (owner) {
        owner->graphs++;
        owner->graph_bytes += rg->built_bytes;
        owner->alloc_bytes += rg->charged_bytes;
    }
    ts->graphs[ts->n_graphs++] = rg;
    pthread_mutex_unlock(&ts->lock);
    *handle = rg->handle;
    return 0;
fail_locked:
    pthread_mutex_unlock(&ts->lock);
    reg_graph_free(rg);
    return psg_error_wrap("task %s: RegisterGraph", ts->task);
}

int psg_task_server_register(psg_task_server_t *ts, const void *graph, size_t len, int n_feeds,
                             const psg_endpoint_t *feeds, int n_fetches,
                             const psg_endpoint_t *fetches, int n_targets, const int *targets,
                             uint64_t *handle) {
    psg_req_register_t r = {graph,
                            len,
                            n_feeds,
                            n_fetches,
                            n_targets,
                            (psg_endpoint_t *)feeds,
                            (psg_endpoint_t *)fetches,
                            (int *)targets};
    return psg_ts_graph_register(ts, NULL, &r, handle);
}

reg_graph_t *psg_ts_graph_get(psg_task_server_t *ts, uint64_t handle) {
    reg_graph_t *rg = NULL;
    pthread_mutex_lock(&ts->lock);
    for (int i = 0; i < ts->n_graphs && !rg; i++)
        if (ts->graphs[i]->handle == handle) rg = ts->graphs[i];
    if (rg) rg->refs++;
    pthread_mutex_unlock(&ts->lock);
    return rg;
}

void psg_ts_graph_put(psg_task_server_t *ts, reg_graph_t **rgp) {
    reg_graph_t *rg = *rgp;
    if (!rg) return;
    *rgp = NULL;
    pthread_mutex_lock(&ts->lock);
    bool last = --rg->refs == 0;
    pthread_mutex_unlock(&ts->lock);
    if (last) reg_graph_free(rg);
}

/* Under lock: takes graph i out of the table and its owner's counts. */
static reg_graph_t *unlink_locked(psg_task_server_t *ts, int i) {
    reg_graph_t *rg = ts->graphs[i];
    ts->graphs[i] = ts->graphs[--ts->n_graphs];
    if (rg->owner) {
        rg->owner->graphs--;
        rg->owner->graph_bytes -= rg->built_bytes;
        rg->owner->alloc_bytes -= rg->charged_bytes;
        rg->owner = NULL;
    }
    return rg;
}

int psg_ts_graph_deregister(psg_task_server_t *ts, const peer_t *peer, uint64_t handle) {
    reg_graph_t *rg = NULL;
    bool denied = false;
    pthread_mutex_lock(&ts->lock);
    for (int i = 0; i < ts->n_graphs && !rg && !denied; i++) {
        if (ts->graphs[i]->handle != handle) continue;
        if (ts->graphs[i]->owner != peer)
            denied = true;
        else
            rg = unlink_locked(ts, i);
    }
    pthread_mutex_unlock(&ts->lock);
    if (denied)
        return psg_error_set_code(PSG_ERR_DENIED,
                                  "graph %" PRIu64 " was registered by another peer", handle);
    if (!rg) return psg_error_set_code(PSG_ERR_NOT_FOUND, "unknown graph handle %" PRIu64, handle);
    psg_ts_graph_put(ts, &rg); /* the table's reference: freed now, or by the last runner */
    return 0;
}

int psg_ts_graphs_release_owner(psg_task_server_t *ts, peer_t *owner) {
    int n = 0;
    for (;;) {
        reg_graph_t *rg = NULL;
        pthread_mutex_lock(&ts->lock);
        for (int i = 0; i < ts->n_graphs && !rg; i++)
            if (ts->graphs[i]->owner == owner) rg = unlink_locked(ts, i);
        pthread_mutex_unlock(&ts->lock);
        if (!rg) return n;
        psg_ts_graph_put(ts, &rg);
        n++;
    }
}

void psg_ts_graphs_free_all(psg_task_server_t *ts) {
    for (int i = 0; i < ts->n_graphs; i++) reg_graph_free(ts->graphs[i]);
    free(ts->graphs);
    ts->graphs = NULL;
    ts->n_graphs = ts->cap_graphs = 0;
}

int psg_task_server_num_fetches(psg_task_server_t *ts, uint64_t handle) {
    reg_graph_t *rg = psg_ts_graph_get(ts, handle);
    int n = rg ? rg->n_fetches : -1;
    psg_ts_graph_put(ts, &rg);
    return n;
}

/* Whether step's pulls went out already (psg_task_server_prepare); forgets it. */
static bool take_prepared(psg_task_server_t *ts, reg_graph_t *rg, int64_t step) {
    bool found = false;
    pthread_mutex_lock(&ts->lock);
    for (int i = 0; i < PREPARED_STEPS && !found; i++)
        if (rg->prepared[i] == step) rg->prepared[i] = 0, found = true;
    pthread_mutex_unlock(&ts->lock);
    return found;
}

/* Takes a prepared slot for step; with pull, sends its pulls now. */
static int prepare(psg_task_server_t *ts, uint64_t handle, int64_t step, bool pull) {
    reg_graph_t *rg = psg_ts_graph_get(ts, handle);
    if (!rg)
        return psg_error_set_code(PSG_ERR_NOT_FOUND, "task %s: unknown graph handle %" PRIu64,
                                  ts->task, handle);
    int rc = 0;
    if (step == 0) rc = psg_error_set("task %s: step 0 cannot be prepared", ts->task);
    int slot = -1;
    pthread_mutex_lock(&ts->lock);
    for (int i = 0; i < PREPARED_STEPS && slot < 0 && rc == 0; i++)
        if (rg->prepared[i] == 0) slot = i;
    if (slot >= 0) rg->prepared[slot] = step;
    pthread_mutex_unlock(&ts->lock);
    /* all taken: the step's run pulls as usual */
    if (slot >= 0 && pull && psg_remote_rv_pull(ts->remote, step, rg->n_pulls, rg->pulls) < 0) {
        take_prepared(ts, rg, step);
        rc = psg_error_wrap("task %s", ts->task);
    }
    if (slot < 0 && !pull && rc == 0)
        rc = psg_error_set("task %s: %d steps of graph %" PRIu64 " prepared already", ts->task,
                           PREPARED_STEPS, handle);
    psg_ts_graph_put(ts, &rg);
    return rc;
}

int psg_task_server_prepare(psg_task_server_t *ts, uint64_t handle, int64_t step) {
    return prepare(ts, handle, step, true);
}

int psg_task_server_prepare_delivered(psg_task_server_t *ts, uint64_t handle, int64_t step) {
    return prepare(ts, handle, step, false);
}

bool psg_ts_graph_acquire(psg_task_server_t *ts, reg_graph_t *rg, job_t *j) {
    pthread_mutex_lock(&ts->lock);
    bool got = !rg->busy;
    if (got) {
        rg->busy = true;
    } else if (j) { /* waits in the graph's line, holding no runner */
        j->next = NULL;
        if (rg->waiting_tail)
            rg->waiting_tail->next = j;
        else
            rg->waiting_head = j;
        rg->waiting_tail = j;
    } else {
        while (rg->busy) pthread_cond_wait(&ts->graph_idle, &ts->lock);
        rg->busy = got = true;
    }
    pthread_mutex_unlock(&ts->lock);
    return got;
}

void psg_ts_graph_release(psg_task_server_t *ts, reg_graph_t *rg) {
    pthread_mutex_lock(&ts->lock);
    job_t *j = rg->waiting_head;
    if (j) { /* the graph passes to the next in line, which goes to the runners */
        rg->waiting_head = j->next;
        if (!rg->waiting_head) rg->waiting_tail = NULL;
        j->holds_graph = true;
        psg_ts_queue_locked(ts, j, true);
    } else {
        rg->busy = false;
        pthread_cond_broadcast(&ts->graph_idle);
    }
    pthread_mutex_unlock(&ts->lock);
}

int psg_ts_graph_step_start(psg_task_server_t *ts, reg_graph_t *rg, int64_t step,
                            psg_run_env_t *env) {
    int rc = 0;
    if (!take_prepared(ts, rg, step))
        rc = psg_remote_rv_pull(ts->remote, step, rg->n_pulls, rg->pulls);
    if (rc < 0) {
        psg_rendezvous_abort_step(ts->rv, step, psg_error_message());
        return psg_error_wrap("task %s", ts->task);
    }
    *env = (psg_run_env_t){.pool = ts->pool, .rm = ts->rm, .step_id = step, .rendezvous = ts->rv};
    pthread_mutex_lock(&ts->lock);
    env->on_node = ts->on_node;
    env->on_node_ctx = ts->on_node_ctx;
    pthread_mutex_unlock(&ts->lock);
    return 0;
}

/* In process, on the caller's thread (a worker's own partition): the run blocks it. */
static int graph_run_here(psg_task_server_t *ts, reg_graph_t *rg, psg_run_ticket_t *ticket,
                          int64_t step, int n_feeds, psg_tensor_t *const *feeds,
                          psg_tensor_t **fetched) {
    if (n_feeds != rg->n_feeds) {
        psg_run_ticket_release(&ticket);
        return psg_error_set_code(
            PSG_ERR_BAD_REQUEST, "task %s: RunGraph of graph %" PRIu64 " got %d feeds, it takes %d",
            ts->task, rg->handle, n_feeds, rg->n_feeds);
    }
    if (!ticket) psg_ts_graph_acquire(ts, rg, NULL);
    psg_run_env_t env;
    int rc = psg_ts_graph_step_start(ts, rg, step, &env);
    if (rc == 0) {
        env.ticket = ticket;
        env.budget = rg->budget; /* a peer's graph, even run in process: the task's memory */
        rc = psg_plan_run_with(rg->plan, &env, feeds, fetched);
    }
    if (ticket)
        psg_run_ticket_release(&ticket);
    else
        psg_ts_graph_release(ts, rg);
    if (rc < 0) {
        psg_rendezvous_abort_step(ts->rv, step, psg_error_message());
        return psg_error_wrap("task %s", ts->task);
    }
    return 0;
}

int psg_task_server_run(psg_task_server_t *ts, uint64_t handle, int64_t step, int n_feeds,
                        psg_tensor_t *const *feeds, psg_tensor_t **fetched) {
    reg_graph_t *rg = psg_ts_graph_get(ts, handle);
    if (!rg)
        return psg_error_set_code(PSG_ERR_NOT_FOUND, "task %s: unknown graph handle %" PRIu64,
                                  ts->task, handle);
    psg_run_ticket_t *ticket = NULL;
    int rc;
    if (rg->order && !(ticket = psg_run_order_take(rg->order)))
        rc = psg_error_wrap("task %s", ts->task);
    else
        rc = graph_run_here(ts, rg, ticket, step, n_feeds, feeds, fetched);
    psg_ts_graph_put(ts, &rg);
    return rc;
}

void psg_task_server_cleanup_step(psg_task_server_t *ts, int64_t step) {
    pthread_mutex_lock(&ts->lock);
    for (int g = 0; g < ts->n_graphs; g++)
        for (int i = 0; i < PREPARED_STEPS; i++)
            if (ts->graphs[g]->prepared[i] == step) ts->graphs[g]->prepared[i] = 0;
    pthread_mutex_unlock(&ts->lock);
    psg_remote_rv_cleanup_step(ts->remote, step);
    psg_rendezvous_cleanup_step(ts->rv, step);
}

bool psg_ts_graph_sends(const reg_graph_t *rg, const char *key) {
    for (int k = 0; k < rg->n_sends; k++)
        if (!strcmp(rg->send_keys[k], key)) return true;
    return false;
}

/* A key a peer may pull: one that a registered graph of this task sends. */
bool psg_ts_known_send_key(psg_task_server_t *ts, const char *key) {
    bool found = false;
    pthread_mutex_lock(&ts->lock);
    for (int i = 0; i < ts->n_graphs && !found; i++) found = psg_ts_graph_sends(ts->graphs[i], key);
    pthread_mutex_unlock(&ts->lock);
    return found;
}
