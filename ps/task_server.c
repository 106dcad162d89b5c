/* The task server: a ROUTER thread answering the requests of task_server.h, runner
 * threads that run registered partitions (so the server keeps answering while a step
 * waits), and the Recv puller for tensors sent in other tasks. Not the worker's session,
 * and not the wire (net/), which checks every frame before this file sees a request. */
#include "psgraph/task_server.h"

#include "runtime/executor.h"
#include "net/codec.h"
#include "ps/remote_rendezvous.h"
#include "psgraph/checkpoint.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/op.h"
#include "psgraph/serialize.h"
#include "ops/state/sync_resources.h"
#include "psgraph/threadpool.h"
#include "psgraph/trace.h"
#include "psgraph/wire.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define LOOP_MS 50
#define MAX_WORKERS_DONE 1024
/* A partition without Recv and with at most this many nodes runs on the server thread:
 * it cannot wait, and two thread hand-offs cost more than it does (docs/distributed.md). */
#define INLINE_MAX_NODES 16
/* Steps of one graph whose pulls may be out before they run (a worker runs one ahead). */
#define PREPARED_STEPS 4

typedef struct {
    uint64_t handle;
    bool dead; /* deregistered: kept until the server goes, a runner may still hold it */
    psg_graph_t *g;
    psg_plan_t *plan;
    /* Steps of a plan whose state is all in resources overlap, each resource
     * seeing them in the order they came (order); others run one at a time
     * (run_lock). */
    psg_run_order_t *order;
    pthread_mutex_t run_lock;
    int n_feeds, n_fetches;
    int n_pulls;
    psg_remote_pull_t *pulls;
    int n_sends;
    char **send_keys;
    bool run_inline; /* no Recv and a few nodes: it cannot wait, the server thread runs it */
    /* steps whose pulls psg_task_server_prepare sent (0: a free slot), under ts->lock */
    int64_t prepared[PREPARED_STEPS];
} reg_graph_t;

typedef struct job {
    psg_msg_t *req;
    reg_graph_t *rg;
    psg_run_ticket_t *ticket; /* taken as the request came, when rg->order */
    struct job *next;
} job_t;

typedef struct {
    psg_msg_t *req;
    int64_t deadline;
} waiter_t;

typedef struct {
    waiter_t *v;
    int n, cap;
} waiter_list_t;

struct psg_task_server {
    const psg_cluster_t *cluster;
    const psg_curve_keys_t *keys; /* NULL: plain frames */
    bool insecure;
    char task[PSG_DEVICE_NAME_MAX];
    psg_device_name_t task_dn;
    char bind[256];
    char endpoint[256];
    int port;
    int num_threads, max_steps, expect_workers;
    int64_t recv_timeout_ms, idle_timeout_ms;

    psg_resource_mgr_t *rm;
    psg_rendezvous_t *rv;
    psg_threadpool_t *pool;
    psg_remote_rv_t *remote;
    _Atomic int64_t bytes_served; /* tensor bytes peers pulled from this task */
    psg_server_t *server; /* made, used and destroyed by the server thread */

    pthread_t thread;
    bool thread_started;
    pthread_t *runners;
    int n_runners;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_cond_t jobs_cond; /* a queued job or the runners' stop: one runner per job */
    bool ready, stopped, stop_requested, runners_stop;
    char start_error[1024];
    char stop_reason[512];
    reg_graph_t **graphs;
    int n_graphs, cap_graphs;
    uint64_t next_handle;
    job_t *jq_head, *jq_tail;
    char *workers_done[MAX_WORKERS_DONE];
    int n_workers_done;

    psg_node_timing_fn on_node; /* under lock */
    void *on_node_ctx;
    psg_trace_t *trace; /* a Trace request's recording; kept until the server goes */

    /* the server thread's own */
    waiter_list_t wait_init, wait_done;
    int64_t last_request_ms;
};

/* ---- registered graphs ---- */

static void reg_graph_free(reg_graph_t *rg) {
    if (!rg) return;
    psg_run_order_destroy(&rg->order);
    psg_plan_destroy(&rg->plan);
    psg_graph_destroy(&rg->g);
    for (int i = 0; i < rg->n_pulls; i++) free(rg->pulls[i].key);
    free(rg->pulls);
    for (int i = 0; i < rg->n_sends; i++) free(rg->send_keys[i]);
    free(rg->send_keys);
    pthread_mutex_destroy(&rg->run_lock);
    free(rg);
}

static char *node_key(const psg_node_t *n, char *buf, size_t size) {
    return psg_rendezvous_key(psg_node_get_str(n, "send_device", ""),
                              (uint64_t)psg_node_get_int(n, "send_device_incarnation", 0),
                              psg_node_get_str(n, "recv_device", ""),
                              psg_node_get_str(n, "tensor_name", ""), buf, size);
}

/* Finds where each Recv's tensor comes from, and the keys this graph sends. */
static int scan_sendrecv(psg_task_server_t *ts, reg_graph_t *rg) {
    int nn = psg_graph_num_nodes(rg->g);
    for (int i = 0; i < nn; i++) {
        const psg_node_t *n = psg_graph_node(rg->g, i);
        bool is_send = !strcmp(psg_node_op(n), "Send"), is_recv = !strcmp(psg_node_op(n), "Recv");
        if (!is_send && !is_recv) continue;
        char key[PSG_RENDEZVOUS_KEY_MAX];
        node_key(n, key, sizeof key);
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

int psg_task_server_register(psg_task_server_t *ts, const void *graph, size_t len, int n_feeds,
                             const psg_endpoint_t *feeds, int n_fetches,
                             const psg_endpoint_t *fetches, int n_targets, const int *targets,
                             uint64_t *handle) {
    reg_graph_t *rg = calloc(1, sizeof *rg);
    if (!rg) return psg_error_set("task %s: out of memory", ts->task);
    pthread_mutex_init(&rg->run_lock, NULL);
    rg->g = psg_graph_deserialize(graph, len);
    if (!rg->g) goto fail;
    int nn = psg_graph_num_nodes(rg->g);
    for (int i = 0; i < n_feeds + n_fetches; i++) {
        psg_endpoint_t e = i < n_feeds ? feeds[i] : fetches[i - n_feeds];
        if (e.node < 0 || e.node >= nn || e.index < 0 ||
            e.index >= psg_node_num_outputs(psg_graph_node(rg->g, e.node))) {
            psg_error_set("%s %d names output %d of node %d, which the graph does not have",
                          i < n_feeds ? "feed" : "fetch", i < n_feeds ? i : i - n_feeds, e.index,
                          e.node);
            goto fail;
        }
    }
    for (int i = 0; i < n_targets; i++)
        if (targets[i] < 0 || targets[i] >= nn) {
            psg_error_set("target %d names node %d, which the graph does not have", i, targets[i]);
            goto fail;
        }
    if (scan_sendrecv(ts, rg) < 0) goto fail;
    rg->plan = psg_plan_new(rg->g, n_feeds, feeds, n_fetches, fetches, n_targets, targets);
    if (!rg->plan) goto fail;
    rg->n_feeds = n_feeds;
    rg->n_fetches = n_fetches;
    rg->run_inline = psg_plan_num_nodes(rg->plan) <= INLINE_MAX_NODES;
    for (int i = 0; i < nn && rg->run_inline; i++)
        if (!strcmp(psg_node_op(psg_graph_node(rg->g, i)), "Recv")) rg->run_inline = false;
    /* an inline step must never wait for the step before: the server thread runs it */
    if (!rg->run_inline && psg_plan_can_overlap(rg->plan) && !(rg->order = psg_run_order_new(rg->plan)))
        goto fail;
    pthread_mutex_lock(&ts->lock);
    if (ts->n_graphs == ts->cap_graphs) {
        int cap = ts->cap_graphs ? 2 * ts->cap_graphs : 16;
        reg_graph_t **v = realloc(ts->graphs, (size_t)cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&ts->lock);
            psg_error_set("out of memory");
            goto fail;
        }
        ts->graphs = v;
        ts->cap_graphs = cap;
    }
    rg->handle = ++ts->next_handle;
    ts->graphs[ts->n_graphs++] = rg;
    pthread_mutex_unlock(&ts->lock);
    *handle = rg->handle;
    return 0;
fail:
    reg_graph_free(rg);
    return psg_error_wrap("task %s: RegisterGraph", ts->task);
}

static reg_graph_t *find_graph(psg_task_server_t *ts, uint64_t handle) {
    reg_graph_t *rg = NULL;
    pthread_mutex_lock(&ts->lock);
    for (int i = 0; i < ts->n_graphs && !rg; i++)
        if (ts->graphs[i]->handle == handle && !ts->graphs[i]->dead) rg = ts->graphs[i];
    pthread_mutex_unlock(&ts->lock);
    return rg;
}

int psg_task_server_num_fetches(psg_task_server_t *ts, uint64_t handle) {
    reg_graph_t *rg = find_graph(ts, handle);
    return rg ? rg->n_fetches : -1;
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

int psg_task_server_prepare(psg_task_server_t *ts, uint64_t handle, int64_t step) {
    reg_graph_t *rg = find_graph(ts, handle);
    if (!rg) return psg_error_set("task %s: unknown graph handle %" PRIu64, ts->task, handle);
    if (step == 0) return psg_error_set("task %s: step 0 cannot be prepared", ts->task);
    pthread_mutex_lock(&ts->lock);
    int slot = -1;
    for (int i = 0; i < PREPARED_STEPS && slot < 0; i++)
        if (rg->prepared[i] == 0) slot = i;
    if (slot >= 0) rg->prepared[slot] = step;
    pthread_mutex_unlock(&ts->lock);
    if (slot < 0) return 0; /* all taken: the step's run pulls as usual */
    if (psg_remote_rv_pull(ts->remote, step, rg->n_pulls, rg->pulls) < 0) {
        take_prepared(ts, rg, step);
        return psg_error_wrap("task %s", ts->task);
    }
    return 0;
}

/* Runs a step of rg: with the ticket taken when it was asked for when rg's
 * steps overlap (released here), else alone. */
static int run_graph(psg_task_server_t *ts, reg_graph_t *rg, psg_run_ticket_t *ticket, int64_t step,
                     int n_feeds, psg_tensor_t *const *feeds, psg_tensor_t **fetched) {
    if (n_feeds != rg->n_feeds) {
        psg_run_ticket_release(&ticket);
        return psg_error_set("task %s: RunGraph of graph %" PRIu64 " got %d feeds, it takes %d",
                             ts->task, rg->handle, n_feeds, rg->n_feeds);
    }
    if (!ticket) pthread_mutex_lock(&rg->run_lock);
    int rc = 0;
    if (!take_prepared(ts, rg, step)) rc = psg_remote_rv_pull(ts->remote, step, rg->n_pulls, rg->pulls);
    if (rc < 0) {
        psg_rendezvous_abort_step(ts->rv, step, psg_error_message());
    } else {
        psg_run_env_t env = {.pool = ts->pool, .rm = ts->rm, .step_id = step, .rendezvous = ts->rv,
                             .ticket = ticket};
        pthread_mutex_lock(&ts->lock);
        env.on_node = ts->on_node;
        env.on_node_ctx = ts->on_node_ctx;
        pthread_mutex_unlock(&ts->lock);
        rc = psg_plan_run_with(rg->plan, &env, feeds, fetched);
    }
    if (ticket)
        psg_run_ticket_release(&ticket);
    else
        pthread_mutex_unlock(&rg->run_lock);
    if (rc < 0) {
        psg_rendezvous_abort_step(ts->rv, step, psg_error_message());
        return psg_error_wrap("task %s", ts->task);
    }
    return 0;
}

int psg_task_server_run(psg_task_server_t *ts, uint64_t handle, int64_t step, int n_feeds,
                        psg_tensor_t *const *feeds, psg_tensor_t **fetched) {
    reg_graph_t *rg = find_graph(ts, handle);
    if (!rg)
        return psg_error_set("task %s: unknown graph handle %" PRIu64, ts->task, handle);
    psg_run_ticket_t *ticket = NULL;
    if (rg->order && !(ticket = psg_run_order_take(rg->order))) return psg_error_wrap("task %s", ts->task);
    return run_graph(ts, rg, ticket, step, n_feeds, feeds, fetched);
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

void psg_task_server_abort_step(psg_task_server_t *ts, int64_t step, const char *why) {
    psg_rendezvous_abort_step(ts->rv, step, why);
}

/* ---- inspect ---- */

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) PSG_PRINTF(2, 3);
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* A JSON string of s (names are graph names: quotes and controls are escaped anyway). */
static void sb_json_str(sbuf_t *b, const char *s) {
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20)
            sb_printf(b, "\\u%04x", c);
        else
            sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

char *psg_task_server_inspect(psg_task_server_t *ts) {
    sbuf_t b = {0};
    sb_printf(&b, "{\"task\":");
    sb_json_str(&b, ts->task);
    sb_printf(&b, ",\"variables\":[");
    int nv = psg_resource_num_variables(ts->rm);
    for (int i = 0; i < nv; i++) {
        psg_variable_t *v = psg_resource_variable_at(ts->rm, i);
        sb_printf(&b, "%s{\"name\":", i ? "," : "");
        sb_json_str(&b, v->name);
        sb_printf(&b, ",\"dtype\":\"%s\",\"shape\":[", psg_dtype_name(v->dtype));
        for (int d = 0; d < v->shape.rank; d++) sb_printf(&b, "%s%" PRId64, d ? "," : "", v->shape.dims[d]);
        int64_t numel = psg_shape_numel(&v->shape);
        sb_printf(&b, "],\"bytes\":%" PRId64 ",\"initialized\":%s}",
                  numel < 0 ? 0 : numel * (int64_t)psg_dtype_size(v->dtype),
                  v->initialized ? "true" : "false");
    }
    /* the sync accumulators' counts (docs/sync.md): gradients used and dropped */
    sb_printf(&b, "],\"accumulators\":[");
    int na = psg_resource_count(ts->rm, "accumulator");
    for (int i = 0; i < na; i++) {
        const char *name = NULL;
        psg_accumulator_t *a = psg_resource_at(ts->rm, "accumulator", i, &name);
        psg_accumulator_counts_t c = {0};
        if (a) psg_accumulator_counts(a, &c);
        sb_printf(&b, "%s{\"name\":", i ? "," : "");
        sb_json_str(&b, name ? name : "");
        sb_printf(&b, ",\"accepted\":%" PRId64 ",\"stale\":%" PRId64 ",\"late\":%" PRId64
                      ",\"closed\":%" PRId64 ",\"takes\":%" PRId64 "}",
                  c.accepted, c.stale, c.late, c.closed, c.takes);
    }
    pthread_mutex_lock(&ts->lock);
    int ng = 0;
    for (int i = 0; i < ts->n_graphs; i++) ng += !ts->graphs[i]->dead;
    int nd = ts->n_workers_done;
    pthread_mutex_unlock(&ts->lock);
    sb_printf(&b, "],\"graphs\":%d,\"pending\":%d,\"workers_done\":%d", ng,
              psg_rendezvous_num_pending(ts->rv), nd);
    if (ts->server) {
        psg_server_stats_t st = psg_server_stats(ts->server);
        sb_printf(&b, ",\"received\":%" PRIu64 ",\"rejected\":%" PRIu64 ",\"refused\":%" PRIu64, st.received,
                  st.rejected, st.refused);
    }
    sb_printf(&b, "}");
    if (b.oom) {
        free(b.s);
        psg_error_set("out of memory");
        return NULL;
    }
    return b.s;
}

/* ---- requests ---- */

static void reply_error(psg_task_server_t *ts, const psg_msg_t *req, const char *why) {
    psg_server_reply_error(ts->server, req, "task %s: %s", ts->task, why);
}

static void reply_ok(psg_task_server_t *ts, const psg_msg_t *req, psg_msg_t **rep) {
    psg_msg_t *r = rep ? *rep : psg_msg_new(PSG_MSG_REPLY, req->op);
    if (rep) *rep = NULL;
    if (!r) {
        reply_error(ts, req, "out of memory");
        return;
    }
    psg_server_reply(ts->server, req, &r);
}

/* An i64 tensor of shape [n, 2] (cols 2) or [n] (cols 1) named `name`, as endpoints / ids. */
static int read_ids(const psg_msg_t *m, const char *name, int cols, int *n, int64_t **out) {
    psg_tensor_t *t = psg_msg_tensor(m, name);
    *n = 0;
    *out = NULL;
    if (!t || (t->dtype == PSG_DT_I64 && psg_tensor_numel(t) == 0)) return 0;
    if (t->dtype != PSG_DT_I64 || t->shape.rank != (cols == 2 ? 2 : 1) ||
        (cols == 2 && t->shape.dims[1] != 2) || t->shape.dims[0] > 1000000)
    {
        char sh[PSG_SHAPE_STR_MAX];
        return psg_error_set("'%s' must be i64 [n%s], got %s%s", name, cols == 2 ? ", 2" : "",
                             psg_dtype_name(t->dtype), psg_shape_str(&t->shape, sh, sizeof sh));
    }
    *n = (int)t->shape.dims[0];
    *out = psg_tensor_i64(t);
    return 0;
}

/* An endpoint from untrusted numbers: anything out of range becomes an invalid one, which
 * registration then rejects by its index. */
static psg_endpoint_t to_endpoint(int64_t node, int64_t index) {
    return (psg_endpoint_t){node < 0 || node > INT32_MAX ? -1 : (int)node,
                            index < 0 || index > PSG_MAX_OUTPUTS ? -1 : (int)index};
}

static void handle_register(psg_task_server_t *ts, psg_msg_t *req) {
    int nf, nx, nt;
    int64_t *f, *x, *t;
    if (!req->body || read_ids(req, "feeds", 2, &nf, &f) < 0 || read_ids(req, "fetches", 2, &nx, &x) < 0 ||
        read_ids(req, "targets", 1, &nt, &t) < 0) {
        reply_error(ts, req, req->body ? psg_error_message() : "RegisterGraph without a graph");
        return;
    }
    psg_endpoint_t *fe = calloc((size_t)nf + 1, sizeof *fe), *xe = calloc((size_t)nx + 1, sizeof *xe);
    int *te = calloc((size_t)nt + 1, sizeof *te);
    if (!fe || !xe || !te) {
        reply_error(ts, req, "out of memory");
        goto done;
    }
    for (int i = 0; i < nf; i++) fe[i] = to_endpoint(f[2 * i], f[2 * i + 1]);
    for (int i = 0; i < nx; i++) xe[i] = to_endpoint(x[2 * i], x[2 * i + 1]);
    for (int i = 0; i < nt; i++) te[i] = t[i] < 0 || t[i] > INT32_MAX ? -1 : (int)t[i];
    uint64_t h;
    if (psg_task_server_register(ts, req->body->data, req->body->size, nf, fe, nx, xe, nt, te, &h) < 0) {
        psg_server_reply_error(ts->server, req, "%s", psg_error_message());
        goto done;
    }
    psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, req->op);
    char key[32];
    snprintf(key, sizeof key, "%" PRIu64, h);
    if (r) psg_msg_set_key(r, key);
    reply_ok(ts, req, &r);
done:
    free(fe);
    free(xe);
    free(te);
}

static bool parse_handle(const char *key, uint64_t *h) {
    if (!key || !*key) return false;
    char *end;
    unsigned long long v = strtoull(key, &end, 10);
    if (*end || key[0] == '-') return false;
    *h = v;
    return true;
}

static void run_job(psg_task_server_t *ts, job_t *j);

static void handle_run(psg_task_server_t *ts, psg_msg_t **reqp) {
    psg_msg_t *req = *reqp;
    uint64_t h = 0;
    reg_graph_t *rg = parse_handle(req->key, &h) ? find_graph(ts, h) : NULL;
    if (!rg) {
        char why[PSG_WIRE_MAX_KEY + 64];
        snprintf(why, sizeof why, "unknown graph handle '%s'", req->key ? req->key : "");
        reply_error(ts, req, why);
        return;
    }
    if (req->ntensors != rg->n_feeds) {
        char why[128];
        snprintf(why, sizeof why, "RunGraph of graph %" PRIu64 " got %d feeds, it takes %d", h,
                 req->ntensors, rg->n_feeds);
        reply_error(ts, req, why);
        return;
    }
    job_t *j = calloc(1, sizeof *j);
    if (!j) {
        reply_error(ts, req, "out of memory");
        return;
    }
    j->req = req;
    j->rg = rg;
    if (rg->order && !(j->ticket = psg_run_order_take(rg->order))) {
        reply_error(ts, req, "out of memory");
        free(j);
        return;
    }
    *reqp = NULL;
    if (rg->run_inline && pthread_mutex_trylock(&rg->run_lock) == 0) {
        /* run_job takes the lock itself: hand it over by releasing it just before */
        pthread_mutex_unlock(&rg->run_lock);
        run_job(ts, j);
        return;
    }
    pthread_mutex_lock(&ts->lock);
    if (ts->jq_tail)
        ts->jq_tail->next = j;
    else
        ts->jq_head = j;
    ts->jq_tail = j;
    pthread_cond_signal(&ts->jobs_cond);
    pthread_mutex_unlock(&ts->lock);
}

static void run_job(psg_task_server_t *ts, job_t *j) {
    psg_msg_t *req = j->req;
    reg_graph_t *rg = j->rg;
    psg_tensor_t **fetched = calloc((size_t)rg->n_fetches + 1, sizeof *fetched);
    if (!fetched) {
        psg_run_ticket_release(&j->ticket);
        reply_error(ts, req, "out of memory");
    } else if (run_graph(ts, rg, j->ticket, req->step, req->ntensors, req->tensors, fetched) < 0) {
        psg_server_reply_error(ts->server, req, "%s", psg_error_message());
    } else {
        psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, req->op);
        for (int i = 0; r && i < rg->n_fetches; i++)
            if (psg_msg_add_tensor(r, NULL, fetched[i]) < 0) psg_msg_destroy(&r);
        if (r) {
            r->step = req->step;
            psg_server_reply(ts->server, req, &r);
        } else {
            reply_error(ts, req, "cannot build the reply");
        }
    }
    for (int i = 0; fetched && i < rg->n_fetches; i++) psg_tensor_destroy(&fetched[i]);
    free(fetched);
    psg_msg_destroy(&j->req);
    free(j);
}

static void *runner_main(void *arg) {
    psg_task_server_t *ts = arg;
    pthread_mutex_lock(&ts->lock);
    for (;;) {
        while (!ts->jq_head && !ts->runners_stop) pthread_cond_wait(&ts->jobs_cond, &ts->lock);
        job_t *j = ts->jq_head;
        if (!j) break;
        ts->jq_head = j->next;
        if (!ts->jq_head) ts->jq_tail = NULL;
        pthread_mutex_unlock(&ts->lock);
        run_job(ts, j);
        pthread_mutex_lock(&ts->lock);
    }
    pthread_mutex_unlock(&ts->lock);
    return NULL;
}

typedef struct {
    psg_task_server_t *ts;
    psg_msg_t *req;
} recv_ctx_t;

static void recv_done(void *arg, psg_tensor_t *t, const char *error) {
    recv_ctx_t *c = arg;
    if (!t) {
        reply_error(c->ts, c->req, error);
    } else {
        psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, "Recv");
        if (r && psg_msg_add_tensor(r, NULL, t) == 0) {
            atomic_fetch_add(&c->ts->bytes_served, (int64_t)psg_tensor_nbytes(t));
            r->step = c->req->step;
            psg_server_reply(c->ts->server, c->req, &r);
        } else {
            psg_msg_destroy(&r);
            reply_error(c->ts, c->req, "out of memory");
        }
        psg_tensor_destroy(&t);
    }
    psg_msg_destroy(&c->req);
    free(c);
}

/* A key a peer may pull: one that a registered graph of this task sends. */
static bool known_send_key(psg_task_server_t *ts, const char *key) {
    bool found = false;
    pthread_mutex_lock(&ts->lock);
    for (int i = 0; i < ts->n_graphs && !found; i++)
        for (int k = 0; k < ts->graphs[i]->n_sends && !found; k++)
            found = !strcmp(ts->graphs[i]->send_keys[k], key);
    pthread_mutex_unlock(&ts->lock);
    return found;
}

static void handle_recv(psg_task_server_t *ts, psg_msg_t **reqp) {
    psg_msg_t *req = *reqp;
    psg_rendezvous_key_t parsed;
    if (!req->key || psg_rendezvous_key_parse(req->key, &parsed) < 0) {
        reply_error(ts, req, req->key ? psg_error_message() : "Recv without a key");
        return;
    }
    if (!known_send_key(ts, req->key)) {
        char why[PSG_WIRE_MAX_KEY + 96];
        snprintf(why, sizeof why, "unknown rendezvous key '%s' (no registered graph sends it)", req->key);
        reply_error(ts, req, why);
        return;
    }
    recv_ctx_t *c = calloc(1, sizeof *c);
    if (!c) {
        reply_error(ts, req, "out of memory");
        return;
    }
    c->ts = ts;
    c->req = req;
    *reqp = NULL;
    psg_rendezvous_recv_async(ts->rv, req->step, req->key, ts->recv_timeout_ms, recv_done, c);
}

static bool variables_ready(psg_task_server_t *ts, const psg_msg_t *req) {
    const char *p = (const char *)req->body->data, *end = p + req->body->size;
    char name[1024];
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        if (len > 0 && len < sizeof name) {
            memcpy(name, p, len);
            name[len] = 0;
            psg_variable_t *v = psg_resource_find_variable(ts->rm, name);
            if (!v || !v->initialized) return false;
        }
        p += len + 1;
    }
    return true;
}

static int count_workers_done(psg_task_server_t *ts) {
    pthread_mutex_lock(&ts->lock);
    int n = ts->n_workers_done;
    pthread_mutex_unlock(&ts->lock);
    return n;
}

static bool waiter_ready(psg_task_server_t *ts, const psg_msg_t *req) {
    if (!strcmp(req->op, PSG_TS_WAIT_INIT)) return variables_ready(ts, req);
    return count_workers_done(ts) >= req->step;
}

static void add_waiter(psg_task_server_t *ts, waiter_list_t *l, psg_msg_t **reqp) {
    psg_msg_t *req = *reqp;
    if (waiter_ready(ts, req)) {
        reply_ok(ts, req, NULL);
        return;
    }
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        waiter_t *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) {
            reply_error(ts, req, "out of memory");
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (waiter_t){req, psg_codec_now_ms() + ts->recv_timeout_ms};
    *reqp = NULL;
}

/* Answers the waiters that are ready or expired; all of them when `all` (stopping). */
static void check_waiters(psg_task_server_t *ts, waiter_list_t *l, bool all) {
    int64_t now = psg_codec_now_ms();
    for (int i = 0; i < l->n;) {
        waiter_t *w = &l->v[i];
        if (!all && waiter_ready(ts, w->req)) {
            reply_ok(ts, w->req, NULL);
        } else if (all || now >= w->deadline) {
            char why[128];
            snprintf(why, sizeof why, "%s: %s", w->req->op,
                     all ? "the server is stopping" : "still not ready after the Recv timeout");
            reply_error(ts, w->req, why);
        } else {
            i++;
            continue;
        }
        psg_msg_destroy(&w->req);
        l->v[i] = l->v[--l->n];
    }
}

static void request_stop(psg_task_server_t *ts, const char *fmt, ...) PSG_PRINTF(2, 3);
static void request_stop(psg_task_server_t *ts, const char *fmt, ...) {
    pthread_mutex_lock(&ts->lock);
    if (!ts->stop_requested) {
        ts->stop_requested = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ts->stop_reason, sizeof ts->stop_reason, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&ts->lock);
}

static void handle_job_done(psg_task_server_t *ts, const psg_msg_t *req) {
    const char *who = req->key && req->key[0] ? req->key : req->peer;
    pthread_mutex_lock(&ts->lock);
    bool seen = false;
    for (int i = 0; i < ts->n_workers_done && !seen; i++) seen = !strcmp(ts->workers_done[i], who);
    if (!seen && ts->n_workers_done < MAX_WORKERS_DONE) {
        char *s = strdup(who);
        if (s) ts->workers_done[ts->n_workers_done++] = s;
    }
    int n = ts->n_workers_done;
    pthread_mutex_unlock(&ts->lock);
    reply_ok(ts, req, NULL);
    if (ts->expect_workers > 0 && n >= ts->expect_workers)
        request_stop(ts, "job done: %d workers finished", n);
}

/* SaveShard / RestoreShard's fields: shard k of n, the log directory (NUL-terminated). */
static bool shard_request(const psg_msg_t *req, int *k, int *n, char *dir, size_t size) {
    if (!req->key || sscanf(req->key, "%d/%d", k, n) != 2 || *k < 0 || *n <= *k || *n > 4096 ||
        !req->body || req->body->size == 0 || req->body->size >= size || req->step < 0)
        return false;
    memcpy(dir, req->body->data, req->body->size);
    dir[req->body->size] = 0;
    return strlen(dir) == req->body->size;
}

/* Writes this task's variables as one shard (on the server thread: the variables are
 * read under their locks while runner threads go on updating them). */
static void handle_save_shard(psg_task_server_t *ts, const psg_msg_t *req) {
    int k, n;
    char dir[4096];
    if (!shard_request(req, &k, &n, dir, sizeof dir)) {
        reply_error(ts, req, "SaveShard needs step S, key \"k/N\" and the directory as body");
        return;
    }
    psg_checkpoint_shard_t sh = {0};
    if (psg_checkpoint_write_shard(ts->rm, dir, req->step, k, n, &sh) < 0) {
        reply_error(ts, req, psg_error_message());
        return;
    }
    size_t cap = 1, len = 0;
    for (int i = 0; i < sh.num_tensors; i++) cap += strlen(sh.names[i]) + 1;
    char *names = malloc(cap), key[PSG_CKPT_NAME_MAX + 96];
    for (int i = 0; names && i < sh.num_tensors; i++)
        len += (size_t)sprintf(names + len, "%s\n", sh.names[i]);
    snprintf(key, sizeof key, "%s %" PRIu64 " %08x %" PRIu64, sh.file, sh.size, (unsigned)sh.crc32,
             sh.tensor_bytes);
    psg_msg_t *r = names ? psg_msg_new(PSG_MSG_REPLY, req->op) : NULL;
    if (r && psg_msg_set_key(r, key) == 0 && psg_msg_set_body(r, names, len) == 0)
        reply_ok(ts, req, &r);
    else
        reply_error(ts, req, "out of memory");
    psg_msg_destroy(&r);
    free(names);
    psg_checkpoint_shard_clear(&sh);
}

/* Loads shard k of the committed checkpoint at the request's step into this task. */
static void handle_restore_shard(psg_task_server_t *ts, const psg_msg_t *req) {
    int k, n;
    char dir[4096], path[4096 + PSG_CKPT_NAME_MAX];
    if (!shard_request(req, &k, &n, dir, sizeof dir)) {
        reply_error(ts, req, "RestoreShard needs step S, key \"k/N\" and the directory as body");
        return;
    }
    snprintf(path, sizeof path, "%s/%s-%" PRId64 ".index.json", dir, PSG_CKPT_PREFIX, req->step);
    psg_checkpoint_t *ck = psg_checkpoint_open(path, k);
    if (!ck || psg_checkpoint_restore(ck, ts->rm, false) < 0) {
        reply_error(ts, req, psg_error_message());
        psg_checkpoint_destroy(&ck);
        return;
    }
    char key[32];
    snprintf(key, sizeof key, "%d", psg_checkpoint_num_tensors(ck));
    psg_checkpoint_destroy(&ck);
    psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, req->op);
    if (r && psg_msg_set_key(r, key) == 0)
        reply_ok(ts, req, &r);
    else
        reply_error(ts, req, "out of memory");
    psg_msg_destroy(&r);
}

void psg_task_server_set_node_hook(psg_task_server_t *ts, psg_node_timing_fn fn, void *ctx) {
    pthread_mutex_lock(&ts->lock);
    ts->on_node = fn;
    ts->on_node_ctx = ctx;
    pthread_mutex_unlock(&ts->lock);
}

static void handle_trace(psg_task_server_t *ts, const psg_msg_t *req) {
    int pid = 0;
    long long step = 0;
    char path[4096], key[32];
    if (req->key && sscanf(req->key, "start %d %lld", &pid, &step) == 2) {
        if (!ts->trace && !(ts->trace = psg_trace_new(pid, ts->task, "CPU:0"))) {
            reply_error(ts, req, "out of memory");
            return;
        }
        psg_trace_set_step(ts->trace, step);
        psg_task_server_set_node_hook(ts, psg_trace_node_hook, ts->trace);
        reply_ok(ts, req, NULL);
        return;
    }
    if (!req->key || strcmp(req->key, "stop") || !ts->trace || !req->body || !req->body->size ||
        req->body->size >= sizeof path) {
        reply_error(ts, req, "Trace needs key \"start PID STEP\", or \"stop\" after a start with a path as body");
        return;
    }
    psg_task_server_set_node_hook(ts, NULL, NULL);
    memcpy(path, req->body->data, req->body->size);
    path[req->body->size] = 0;
    if (psg_trace_write(ts->trace, path) < 0) {
        reply_error(ts, req, psg_error_message());
        return;
    }
    snprintf(key, sizeof key, "%d", psg_trace_num_events(ts->trace));
    psg_msg_t *r = psg_msg_new(PSG_MSG_REPLY, req->op);
    if (r && psg_msg_set_key(r, key) == 0)
        reply_ok(ts, req, &r);
    else
        reply_error(ts, req, "out of memory");
    psg_msg_destroy(&r);
}

static void handle(psg_task_server_t *ts, psg_msg_t **reqp) {
    psg_msg_t *req = *reqp;
    const char *op = req->op ? req->op : "";
    if (!strcmp(op, PSG_TS_RUN_GRAPH)) {
        handle_run(ts, reqp);
    } else if (!strcmp(op, PSG_TS_RECV)) {
        handle_recv(ts, reqp);
    } else if (!strcmp(op, PSG_TS_REGISTER_GRAPH)) {
        handle_register(ts, req);
    } else if (!strcmp(op, PSG_TS_CLEANUP_STEP)) {
        psg_task_server_cleanup_step(ts, req->step);
        reply_ok(ts, req, NULL);
    } else if (!strcmp(op, PSG_TS_ABORT_STEP)) {
        char why[PSG_WIRE_MAX_KEY + 64];
        snprintf(why, sizeof why, "aborted by %s: %s", req->peer, req->key ? req->key : "no reason given");
        psg_task_server_abort_step(ts, req->step, why);
        reply_ok(ts, req, NULL);
    } else if (!strcmp(op, PSG_TS_INSPECT)) {
        char *json = psg_task_server_inspect(ts);
        psg_msg_t *r = json ? psg_msg_new(PSG_MSG_REPLY, op) : NULL;
        if (r && psg_msg_set_body(r, json, strlen(json)) == 0)
            reply_ok(ts, req, &r);
        else
            reply_error(ts, req, "out of memory");
        psg_msg_destroy(&r);
        free(json);
    } else if (!strcmp(op, PSG_TS_DEREGISTER_GRAPH)) {
        uint64_t h = 0;
        reg_graph_t *rg = parse_handle(req->key, &h) ? find_graph(ts, h) : NULL;
        if (!rg) {
            reply_error(ts, req, "unknown graph handle");
            return;
        }
        pthread_mutex_lock(&ts->lock);
        rg->dead = true;
        pthread_mutex_unlock(&ts->lock);
        reply_ok(ts, req, NULL);
    } else if (!strcmp(op, PSG_TS_WAIT_INIT)) {
        if (!req->body) {
            reply_error(ts, req, "WaitInit without the variable names");
            return;
        }
        add_waiter(ts, &ts->wait_init, reqp);
    } else if (!strcmp(op, PSG_TS_WAIT_DONE)) {
        add_waiter(ts, &ts->wait_done, reqp);
    } else if (!strcmp(op, PSG_TS_JOB_DONE)) {
        handle_job_done(ts, req);
    } else if (!strcmp(op, PSG_TS_SAVE_SHARD)) {
        handle_save_shard(ts, req);
    } else if (!strcmp(op, PSG_TS_RESTORE_SHARD)) {
        handle_restore_shard(ts, req);
    } else if (!strcmp(op, PSG_TS_TRACE)) {
        handle_trace(ts, req);
    } else if (!strcmp(op, PSG_TS_SHUTDOWN)) {
        reply_ok(ts, req, NULL);
        request_stop(ts, "shutdown requested by %s", req->peer);
    } else {
        char why[PSG_WIRE_MAX_OP + 64];
        snprintf(why, sizeof why, "unknown request '%.64s'", op);
        reply_error(ts, req, why);
    }
}

/* ---- the server thread ---- */

static void stop_runners(psg_task_server_t *ts) {
    pthread_mutex_lock(&ts->lock);
    ts->runners_stop = true;
    pthread_cond_broadcast(&ts->jobs_cond);
    pthread_mutex_unlock(&ts->lock);
    for (int i = 0; i < ts->n_runners; i++) pthread_join(ts->runners[i], NULL);
    ts->n_runners = 0;
    /* steps queued but never started */
    while (ts->jq_head) {
        job_t *j = ts->jq_head;
        ts->jq_head = j->next;
        reply_error(ts, j->req, "the server is stopping");
        psg_run_ticket_release(&j->ticket);
        psg_msg_destroy(&j->req);
        free(j);
    }
    ts->jq_tail = NULL;
}

static void *server_main(void *arg) {
    psg_task_server_t *ts = arg;
    psg_wire_opts_t wo = psg_wire_opts_default();
    wo.max_msg_bytes = (size_t)2 << 30;
    wo.keys = ts->keys;
    wo.insecure = ts->insecure;
    ts->server = psg_server_new(ts->bind, &wo);
    pthread_mutex_lock(&ts->lock);
    if (!ts->server) {
        snprintf(ts->start_error, sizeof ts->start_error, "task %s: %s", ts->task, psg_error_message());
        ts->stopped = true;
    } else {
        snprintf(ts->endpoint, sizeof ts->endpoint, "%s", psg_server_endpoint(ts->server));
        ts->port = psg_server_port(ts->server);
    }
    ts->ready = true;
    pthread_cond_broadcast(&ts->cond);
    pthread_mutex_unlock(&ts->lock);
    if (!ts->server) return NULL;
    ts->last_request_ms = psg_codec_now_ms();
    for (;;) {
        psg_msg_t *m = NULL;
        int r = psg_server_recv(ts->server, &m, LOOP_MS);
        if (r < 0) {
            request_stop(ts, "socket failure: %s", psg_error_message());
        } else if (r == 1) {
            ts->last_request_ms = psg_codec_now_ms();
            handle(ts, &m);
            psg_msg_destroy(&m);
        }
        check_waiters(ts, &ts->wait_init, false);
        check_waiters(ts, &ts->wait_done, false);
        if (ts->idle_timeout_ms > 0 && psg_codec_now_ms() - ts->last_request_ms > ts->idle_timeout_ms)
            request_stop(ts, "idle: no request for %" PRId64 " ms", ts->idle_timeout_ms);
        pthread_mutex_lock(&ts->lock);
        bool stop = ts->stop_requested;
        pthread_mutex_unlock(&ts->lock);
        if (stop) break;
    }
    /* Fail what waits, finish what runs, and give the replies a moment to leave. */
    check_waiters(ts, &ts->wait_init, true);
    check_waiters(ts, &ts->wait_done, true);
    psg_rendezvous_abort(ts->rv, "the task server is stopping");
    stop_runners(ts);
    psg_remote_rv_destroy(&ts->remote);
    int64_t until = psg_codec_now_ms() + 100;
    while (psg_codec_now_ms() < until) {
        psg_msg_t *m = NULL;
        if (psg_server_recv(ts->server, &m, (int)(until - psg_codec_now_ms())) == 1)
            reply_error(ts, m, "the server is stopping");
        psg_msg_destroy(&m);
    }
    psg_server_destroy(&ts->server);
    free(ts->wait_init.v);
    free(ts->wait_done.v);
    pthread_mutex_lock(&ts->lock);
    ts->stopped = true;
    pthread_cond_broadcast(&ts->cond);
    pthread_mutex_unlock(&ts->lock);
    return NULL;
}

/* Where to bind a task's address "host:port": an IP or localhost as given, a host name on
 * every interface (ZeroMQ binds interfaces, not names); "ipc://path" as given. */
static void bind_address(const char *addr, char *out, size_t size) {
    const char *colon = strrchr(addr, ':');
    if (!colon || !strncmp(addr, "ipc://", 6)) {
        snprintf(out, size, "%s", addr);
        return;
    }
    int hl = (int)(colon - addr);
    bool numeric = hl > 0 && strspn(addr, "0123456789.") == (size_t)hl;
    if (!strncmp(addr, "localhost:", 10))
        snprintf(out, size, "tcp://127.0.0.1%s", colon);
    else if (numeric)
        snprintf(out, size, "tcp://%s", addr);
    else
        snprintf(out, size, "tcp://*%s", colon);
}

psg_task_server_t *psg_task_server_new(const psg_task_server_options_t *opt) {
    psg_task_server_t *ts = calloc(1, sizeof *ts);
    if (!ts) {
        psg_error_set("out of memory");
        return NULL;
    }
    pthread_mutex_init(&ts->lock, NULL);
    pthread_cond_init(&ts->cond, NULL);
    pthread_cond_init(&ts->jobs_cond, NULL);
    ts->cluster = opt->cluster;
    ts->keys = opt->keys ? opt->keys : psg_cluster_keys(opt->cluster);
    ts->insecure = opt->insecure;
    ts->num_threads = opt->num_threads;
    ts->max_steps = opt->max_steps > 0 ? opt->max_steps : 8;
    ts->recv_timeout_ms = opt->recv_timeout_ms > 0 ? opt->recv_timeout_ms : 60000;
    ts->idle_timeout_ms = opt->idle_timeout_ms;
    ts->expect_workers = opt->expect_workers;
    const char *task = opt->task_name;
    char from_cluster[PSG_DEVICE_NAME_MAX];
    psg_task_t me = {0};
    if (!task && opt->cluster) {
        me = psg_cluster_task(opt->cluster);
        if (me.job) task = psg_device_name(me.job, me.index, NULL, from_cluster, sizeof from_cluster);
    }
    if (!task) task = "/job:localhost/task:0";
    if (psg_device_name_parse(task, &ts->task_dn) < 0) goto fail;
    if (!ts->task_dn.has_job || !ts->task_dn.has_task) {
        psg_error_set("task '%s' must name a job and a task", task);
        goto fail;
    }
    if (!ts->task_dn.has_replica) {
        ts->task_dn.has_replica = true;
        ts->task_dn.replica = 0;
    }
    ts->task_dn.has_type = ts->task_dn.has_id = false;
    psg_device_name_task_str(&ts->task_dn, ts->task, sizeof ts->task);
    if (opt->endpoint) {
        snprintf(ts->bind, sizeof ts->bind, "%s", opt->endpoint);
    } else if (opt->cluster) {
        const char *addr = psg_cluster_address(opt->cluster, ts->task_dn.job, ts->task_dn.task);
        if (!addr) goto fail;
        bind_address(addr, ts->bind, sizeof ts->bind);
    } else {
        snprintf(ts->bind, sizeof ts->bind, "tcp://127.0.0.1:*");
    }
    ts->rm = psg_resource_mgr_new();
    ts->rv = psg_rendezvous_new(ts->recv_timeout_ms);
    ts->remote = ts->rv ? psg_remote_rv_new(ts->rv, 2000) : NULL;
    if (!ts->rm || !ts->remote) goto fail;
    psg_remote_rv_set_keys(ts->remote, ts->keys);
    if (ts->num_threads > 1 && !(ts->pool = psg_threadpool_new(ts->num_threads))) goto fail;
    ts->runners = calloc((size_t)ts->max_steps, sizeof *ts->runners);
    if (!ts->runners) {
        psg_error_set("out of memory");
        goto fail;
    }
    for (int i = 0; i < ts->max_steps; i++) {
        if (pthread_create(&ts->runners[i], NULL, runner_main, ts) != 0) {
            psg_error_set("cannot start a step runner thread");
            goto fail;
        }
        ts->n_runners++;
    }
    if (pthread_create(&ts->thread, NULL, server_main, ts) != 0) {
        psg_error_set("cannot start the server thread");
        goto fail;
    }
    ts->thread_started = true;
    pthread_mutex_lock(&ts->lock);
    while (!ts->ready) pthread_cond_wait(&ts->cond, &ts->lock);
    bool failed = ts->start_error[0] != 0;
    pthread_mutex_unlock(&ts->lock);
    if (failed) {
        psg_error_set("%s", ts->start_error);
        goto fail;
    }
    return ts;
fail:
    if (!ts->thread_started) psg_error_wrap("task server %s", task ? task : "");
    {
        char keep[2048];
        snprintf(keep, sizeof keep, "%s", psg_error_message());
        psg_task_server_destroy(&ts);
        psg_error_set("%s", keep);
    }
    return NULL;
}

void psg_task_server_destroy(psg_task_server_t **tsp) {
    if (!tsp || !*tsp) return;
    psg_task_server_t *ts = *tsp;
    *tsp = NULL;
    if (ts->thread_started) {
        request_stop(ts, "destroyed by its owner");
        pthread_join(ts->thread, NULL);
    }
    if (ts->rv) psg_rendezvous_abort(ts->rv, "the task server is stopping");
    /* without a server thread (a failed start), the runners still need stopping */
    if (ts->n_runners) {
        pthread_mutex_lock(&ts->lock);
        ts->runners_stop = true;
        pthread_cond_broadcast(&ts->jobs_cond);
        pthread_mutex_unlock(&ts->lock);
        for (int i = 0; i < ts->n_runners; i++) pthread_join(ts->runners[i], NULL);
    }
    free(ts->runners);
    psg_remote_rv_destroy(&ts->remote);
    for (int i = 0; i < ts->n_graphs; i++) reg_graph_free(ts->graphs[i]);
    free(ts->graphs);
    for (int i = 0; i < ts->n_workers_done; i++) free(ts->workers_done[i]);
    psg_threadpool_destroy(&ts->pool);
    psg_rendezvous_destroy(&ts->rv);
    psg_resource_mgr_destroy(&ts->rm);
    psg_trace_destroy(&ts->trace);
    pthread_cond_destroy(&ts->cond);
    pthread_cond_destroy(&ts->jobs_cond);
    pthread_mutex_destroy(&ts->lock);
    free(ts);
}

int psg_task_server_wait(psg_task_server_t *ts, int64_t timeout_ms) {
    int64_t deadline = timeout_ms < 0 ? -1 : psg_codec_now_ms() + timeout_ms;
    pthread_mutex_lock(&ts->lock);
    while (!ts->stopped) {
        if (deadline >= 0) {
            int64_t left = deadline - psg_codec_now_ms();
            if (left <= 0) break;
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            int64_t ns = t.tv_nsec + (left % 1000) * 1000000;
            t.tv_sec += left / 1000 + ns / 1000000000;
            t.tv_nsec = ns % 1000000000;
            pthread_cond_timedwait(&ts->cond, &ts->lock, &t);
        } else {
            pthread_cond_wait(&ts->cond, &ts->lock);
        }
    }
    int stopped = ts->stopped;
    pthread_mutex_unlock(&ts->lock);
    return stopped;
}

const char *psg_task_server_stop_reason(psg_task_server_t *ts) { return ts->stop_reason; }
const char *psg_task_server_endpoint(const psg_task_server_t *ts) { return ts->endpoint; }
int psg_task_server_port(const psg_task_server_t *ts) { return ts->port; }
const char *psg_task_server_task(const psg_task_server_t *ts) { return ts->task; }
psg_resource_mgr_t *psg_task_server_resources(psg_task_server_t *ts) { return ts->rm; }
psg_rendezvous_t *psg_task_server_rendezvous(psg_task_server_t *ts) { return ts->rv; }

void psg_task_server_tensor_bytes(psg_task_server_t *ts, int64_t *served, int64_t *pulled) {
    *served = ts ? atomic_load(&ts->bytes_served) : 0;
    *pulled = ts ? psg_remote_rv_bytes_pulled(ts->remote) : 0;
}
