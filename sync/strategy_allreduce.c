/* The "allreduce" strategy: ring all-reduce among the live workers (Baidu's ring, Horovod),
 * with no ps in the step for the model. The model's variables are each worker's own (the
 * trainer builds them under the worker's device, as local SGD's); a step computes the
 * gradients flattened into one vector of M floats, and the step function
 * (sync/allreduce_ring.c) runs the ring over the workers the chief's membership finds live:
 * the vector cut into n chunks, n - 1 phases of reduce-scatter (the worker at position i
 * sends its running sum of chunk i - k to the next, which adds it to its own) and n - 1 of
 * all-gather (the summed chunks go round), so each worker sends 2 (n - 1) / n x M floats a
 * step. A chunk travels by the cluster's Send/Recv (CURVE when on) into the receiver's
 * mailbox on its task server (ops/state/mailbox.c), keyed by the ring's generation, step
 * and phase; each worker then applies the mean with the optimizer to its own copy (with SGD,
 * sync's step with b = 0). This file builds the calls the step function runs: the step (the
 * gradient), a put into each other worker's mailbox, a take from its own, the apply, and the
 * ring's record on the ps (its generation and members, which the chief's set_live_op
 * changes), with the copies of every worker-own variable (model and slots) the chief shares
 * when the ring re-forms. The ps keeps the global step (the chief advances it each step) and
 * the copy of the model, "allreduce/model/<var>", that the chief writes at the start, at
 * each re-forming and at the end (checkpoints and tests read it). */
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_sparse.h"
#include "psgraph/ops_train.h"
#include "ops/state/sync_resources.h"
#include "sync/allreduce_ring.h"

#include <stdlib.h>
#include <string.h>

/* The device of the worker of rank r, from this worker's own (dev, of rank me): the "worker"
 * job's task r, or with a "chief" job rank 0 the chief and rank r worker r - 1 (a device
 * with no job and task is the worker job's task me). */
static int rank_device(const char *dev, int me, int r, char *buf, size_t size) {
    psg_device_name_t d;
    if (psg_device_name_parse(dev, &d) < 0) return psg_error_wrap("allreduce");
    if (!d.has_job || !d.has_task) { /* a graph of one process (a test's): the worker job's */
        d.has_job = d.has_task = true;
        snprintf(d.job, sizeof d.job, "worker");
        d.task = me;
    }
    bool chief_job = !strcmp(d.job, "chief") || (!strcmp(d.job, "worker") && d.task == me - 1);
    if (chief_job && r == 0) {
        snprintf(d.job, sizeof d.job, "chief");
        d.task = 0;
    } else {
        snprintf(d.job, sizeof d.job, "worker");
        d.task = chief_job ? r - 1 : r;
    }
    psg_device_name_str(&d, buf, size);
    return 0;
}

typedef struct {
    const psg_sync_build_t *b;
    psg_sync_graph_t *out;
    int me, n; /* this worker's rank, the workers */
    char own[PSG_DEVICE_NAME_MAX];
    int64_t m;           /* the floats of the flat gradient */
    psg_endpoint_t grad; /* the flat gradient */
} ring_build_t;

/* Call k (PSG_RING_*) of out: its feeds, fetches and targets. */
static void set_call(psg_sync_graph_t *out, int k, int nf, const psg_endpoint_t *feeds, int nx,
                     const psg_endpoint_t *fetches, int nt, const int *targets) {
    out->calls[k - 1].n_feeds = nf;
    out->calls[k - 1].n_fetches = nx;
    out->calls[k - 1].n_targets = nt;
    for (int i = 0; i < nf; i++) out->calls[k - 1].feeds[i] = feeds[i];
    for (int i = 0; i < nx; i++) out->calls[k - 1].fetches[i] = fetches[i];
    for (int i = 0; i < nt; i++) out->calls[k - 1].targets[i] = targets[i];
    if (k > out->num_calls) out->num_calls = k;
}

/* The step: the gradients flattened into one vector on the worker (its first fetch). */
static int build_gradient(ring_build_t *r) {
    const psg_sync_build_t *b = r->b;
    psg_graph_t *g = b->g;
    psg_endpoint_t *flat = calloc((size_t)b->n, sizeof *flat);
    if (!flat) return psg_error_set("out of memory");
    char name[512];
    psg_shape_t any = psg_shape_1d(-1);
    int rc = 0;
    for (int i = 0; rc == 0 && i < b->n; i++) {
        if (psg_is_indexed_slices(g, b->grads[i], NULL, NULL, NULL)) {
            rc = psg_error_set("allreduce: variable '%s' has a sparse gradient (rows of an "
                               "embedding), which the ring does not sum (async and sync do)",
                               psg_node_name(psg_graph_node(g, b->vars[i].node)));
            break;
        }
        r->m += psg_shape_numel(psg_graph_shape(g, b->vars[i]));
        snprintf(name, sizeof name, "allreduce/flat%d", i);
        flat[i] = psg_reshape(g, name, b->grads[i], &any);
    }
    if (rc == 0) {
        psg_endpoint_t all =
            b->n == 1 ? flat[0] : psg_concat(g, "allreduce/gradients", b->n, flat, 0);
        psg_endpoint_t grad = psg_identity(g, "allreduce/gradient", all);
        r->out->train_op = grad.node;
        r->grad = grad;
        r->out->step_fetches[r->out->n_step_fetches++] = grad;
        rc = psg_graph_status(g);
    }
    /* the model's digest (its own call, run before the step's exchange when it is said): its
     * sum and its sum of squares, which the step function logs so that the workers' copies
     * can be compared */
    for (int i = 0; rc == 0 && i < b->n; i++) {
        snprintf(name, sizeof name, "allreduce/digest/read%d", i);
        psg_endpoint_t v = psg_read_variable(g, name, b->vars[i]);
        snprintf(name, sizeof name, "allreduce/digest/flat%d", i);
        flat[i] = psg_reshape(g, name, v, &any);
    }
    if (rc == 0) {
        psg_endpoint_t all =
            b->n == 1 ? flat[0] : psg_concat(g, "allreduce/digest/model", b->n, flat, 0);
        psg_endpoint_t sums[2] = {psg_sum(g, "allreduce/digest/sum", all, 0, NULL, true),
                                  psg_sum(g, "allreduce/digest/sum2",
                                          psg_square(g, "allreduce/digest/sq", all), 0, NULL,
                                          true)};
        psg_endpoint_t digest = psg_concat(g, "allreduce/digest", 2, sums, 0);
        set_call(r->out, PSG_RING_DIGEST, 0, NULL, 1, &digest, 0, NULL);
        rc = psg_graph_status(g);
    }
    free(flat);
    return rc;
}

/* Phase k of the one-call ring: x into the next worker's mailbox k, keyed by the fed key; the
 * previous worker's chunk of phase k (len floats) from this worker's into *got. */
static void fast_phase(ring_build_t *r, psg_endpoint_t key, int k, psg_endpoint_t x, int64_t len,
                       int64_t wait_ms, const char *next, const char *prev, int *put,
                       psg_endpoint_t *got) {
    psg_graph_t *g = r->b->g;
    char name[128];
    psg_graph_push_device(g, next);
    snprintf(name, sizeof name, "allreduce/all/w%d/phase%d", (r->me + 1) % r->n, k);
    psg_endpoint_t box = psg_mailbox_op(g, name);
    snprintf(name, sizeof name, "allreduce/all/w%d/phase%d/put", (r->me + 1) % r->n, k);
    *put = psg_mailbox_put_op(g, name, box, key, x);
    psg_graph_pop_device(g);
    snprintf(name, sizeof name, "allreduce/all/w%d/phase%d", r->me, k);
    psg_endpoint_t mine = psg_mailbox_op(g, name);
    snprintf(name, sizeof name, "allreduce/all/w%d/phase%d/take", r->me, k);
    psg_shape_t s = psg_shape_1d(len);
    *got = psg_mailbox_take_op(g, name, mine, key, &s, prev, wait_ms);
}

/* The step's second form: the whole ring over every worker in one call, as the step function
 * runs it while the ring's members are all the workers (the chunks, phases and sums of the
 * calls' ring, so the same floats); its mailboxes "allreduce/all/w<j>/phase<k>" keyed by
 * generation << 40 | step, each take waiting at most the peer timeout (a loss then re-forms the
 * ring by the calls); it fetches the sum. */
static int build_fast(ring_build_t *r) {
    const psg_sync_build_t *b = r->b;
    psg_graph_t *g = b->g;
    int n = r->n, me = r->me, puts[2 * PSG_RING_MAX_WORKERS], np = 0;
    if (n < 2 || r->m < n) return 0;
    char next[PSG_DEVICE_NAME_MAX], prev[32], name[128];
    if (rank_device(r->own, me, (me + 1) % n, next, sizeof next) < 0) return -1;
    snprintf(prev, sizeof prev, "worker%d", (me + n - 1) % n); /* as the membership names it */
    int64_t peer = b->cfg->peer_timeout_ms, wait = b->timeout_ms;
    if (peer > 0 && (wait <= 0 || peer < wait)) wait = peer;
    psg_endpoint_t cur[PSG_RING_MAX_WORKERS];
    int64_t off[PSG_RING_MAX_WORKERS], len[PSG_RING_MAX_WORKERS];
    psg_shape_t scalar = psg_shape_scalar();
    psg_graph_push_device(g, r->own);
    psg_endpoint_t key = psg_placeholder(g, "allreduce/all/key", PSG_DT_I64, &scalar);
    for (int c = 0; c < n; c++) {
        off[c] = r->m * c / n;
        len[c] = r->m * (c + 1) / n - off[c];
        snprintf(name, sizeof name, "allreduce/all/chunk%d", c);
        cur[c] = psg_slice(g, name, r->grad, 1, &off[c], &len[c]);
    }
    for (int k = 0; k < 2 * (n - 1); k++) { /* reduce-scatter, then all-gather */
        bool scatter = k < n - 1;
        int j = scatter ? k : k - (n - 1);
        int s = ((me - j + (scatter ? 0 : 1)) % n + n) % n,
            c = ((me - j - (scatter ? 1 : 0)) % n + n) % n;
        psg_endpoint_t got;
        fast_phase(r, key, k, cur[s], len[c], wait, next, prev, &puts[np++], &got);
        snprintf(name, sizeof name, "allreduce/all/chunk%d/sum%d", c, k);
        cur[c] = scatter ? psg_add(g, name, cur[c], got) : got;
    }
    psg_endpoint_t sum = psg_concat(g, "allreduce/all/sum", n, cur, 0);
    psg_graph_pop_device(g);
    r->out->fast_step_op = psg_group(g, "allreduce/all/puts", np, puts);
    r->out->fast_key = key;
    r->out->fast_fetch = sum;
    return psg_graph_status(g);
}

/* The apply: the mean fed (f32 [M]), cut back into the variables' shapes, applied to the own
 * copy; the chief also counts the step on the ps. */
static int build_apply(ring_build_t *r) {
    const psg_sync_build_t *b = r->b;
    psg_graph_t *g = b->g;
    psg_endpoint_t *avg = malloc(sizeof *avg * (size_t)b->n);
    if (!avg) return psg_error_set("out of memory");
    char name[512];
    psg_shape_t ms = psg_shape_1d(r->m);
    psg_graph_push_device(g, r->own);
    psg_endpoint_t mean = psg_placeholder(g, "allreduce/mean", PSG_DT_F32, &ms);
    int64_t begin = 0;
    for (int i = 0; i < b->n; i++) {
        int64_t size = psg_shape_numel(psg_graph_shape(g, b->vars[i]));
        snprintf(name, sizeof name, "allreduce/mean%d", i);
        psg_endpoint_t part = psg_slice(g, name, mean, 1, &begin, &size);
        snprintf(name, sizeof name, "allreduce/mean%d/shaped", i);
        avg[i] = psg_reshape(g, name, part, psg_graph_shape(g, b->vars[i]));
        begin += size;
    }
    psg_graph_pop_device(g);
    psg_sync_build_t ab = *b;
    ab.grads = avg;
    int ops[2], n = 0, rc = psg_sync_local_update(&ab, &ops[n++]);
    free(avg);
    if (rc < 0) return -1;
    if (r->me == 0) { /* the chief counts the steps on the ps */
        bool pushed = psg_sync_push_device_of(g, b->global_step);
        ops[n++] = psg_increment_variable(g, "allreduce/count_step", b->global_step, 1);
        if (pushed) psg_graph_pop_device(g);
    }
    int apply = psg_group(g, "allreduce/apply", n, ops);
    set_call(r->out, PSG_RING_APPLY, 1, &mean, 0, NULL, 1, &apply);
    return psg_graph_status(g);
}

/* This worker's mailbox and its take (fed the key), a put into each other worker's. */
static int build_mailboxes(ring_build_t *r) {
    psg_graph_t *g = r->b->g;
    char name[128], dev[PSG_DEVICE_NAME_MAX];
    psg_shape_t scalar = psg_shape_scalar(), any = psg_shape_1d(-1);
    psg_graph_push_device(g, r->own);
    psg_endpoint_t key = psg_placeholder(g, "allreduce/key", PSG_DT_I64, &scalar);
    psg_endpoint_t chunk = psg_placeholder(g, "allreduce/chunk", PSG_DT_F32, &any);
    psg_graph_pop_device(g);
    for (int j = 0; j < r->n; j++) {
        if (rank_device(r->own, r->me, j, dev, sizeof dev) < 0) return -1;
        psg_graph_push_device(g, dev);
        snprintf(name, sizeof name, "allreduce/ring/w%d", j);
        psg_endpoint_t box = psg_mailbox_op(g, name);
        if (j == r->me) {
            snprintf(name, sizeof name, "allreduce/ring/w%d/take", j);
            psg_endpoint_t got = psg_mailbox_take_op(
                g, name, box, key, &any, "the previous worker of the ring", PSG_RING_SLICE_MS);
            set_call(r->out, PSG_RING_TAKE, 1, &key, 1, &got, 0, NULL);
        } else {
            snprintf(name, sizeof name, "allreduce/ring/w%d/put%d", j, r->me);
            int put = psg_mailbox_put_op(g, name, box, key, chunk);
            psg_endpoint_t feeds[2] = {chunk, key};
            set_call(r->out, PSG_RING_PUT0 + (j < r->me ? j : j - 1), 2, feeds, 0, NULL, 1, &put);
        }
        psg_graph_pop_device(g);
    }
    return psg_graph_status(g);
}

/* The ring's record and ready pair on the global step's ps: their reads (the step's fetches
 * and the record call), the chief's set_live_op (the generation + 1, the members fed by
 * rank), its ready call, and the close (training over). */
static int build_record(ring_build_t *r, int *close_ring) {
    const psg_sync_build_t *b = r->b;
    psg_graph_t *g = b->g;
    psg_sync_graph_t *out = r->out;
    psg_shape_t rs = psg_shape_1d(1 + r->n), two = psg_shape_1d(2), ws = psg_shape_1d(r->n),
                one = psg_shape_1d(1);
    psg_graph_push_device(g, r->own);
    out->live_mask = psg_placeholder(g, "allreduce/ring/live", PSG_DT_I32, &ws);
    psg_endpoint_t ready_value = psg_placeholder(g, "allreduce/ring/ready_value", PSG_DT_F32, &two);
    psg_graph_pop_device(g);
    bool pushed = psg_sync_push_device_of(g, b->global_step);
    psg_endpoint_t rec = psg_variable(g, "allreduce/ring/record", PSG_DT_F32, &rs,
                                      (psg_initializer_t){"zeros", 0, 0}, false);
    psg_endpoint_t ready = psg_variable(g, "allreduce/ring/ready", PSG_DT_F32, &two,
                                        (psg_initializer_t){"zeros", 0, 0}, false);
    psg_endpoint_t reads[2] = {psg_read_variable(g, "allreduce/ring/record/read", rec),
                               psg_read_variable(g, "allreduce/ring/ready/read", ready)};
    int64_t at = 0, len = 1;
    psg_endpoint_t gen = psg_slice(g, "allreduce/ring/generation", reads[0], 1, &at, &len);
    psg_tensor_t *onev = psg_tensor_new(PSG_DT_F32, &one), *over = psg_tensor_new(PSG_DT_F32, &rs);
    if (!onev || !over) {
        psg_tensor_destroy(&onev);
        psg_tensor_destroy(&over);
        if (pushed) psg_graph_pop_device(g);
        return psg_error_set("out of memory");
    }
    psg_tensor_f32(onev)[0] = 1;
    psg_tensor_f32(over)[0] = PSG_RING_OVER;
    psg_endpoint_t next[2] = {
        psg_add(g, "allreduce/ring/next", gen, psg_const(g, "allreduce/ring/one", &onev)),
        psg_cast(g, "allreduce/ring/members", out->live_mask, PSG_DT_F32)};
    out->set_live_op = psg_assign(g, "allreduce/ring/set_live", rec,
                                  psg_concat(g, "allreduce/ring/new", 2, next, 0));
    *close_ring =
        psg_assign(g, "allreduce/ring/close", rec, psg_const(g, "allreduce/ring/over", &over));
    int set_ready = psg_assign(g, "allreduce/ring/set_ready", ready, ready_value);
    if (pushed) psg_graph_pop_device(g);
    out->step_fetches[out->n_step_fetches++] = reads[0];
    out->step_fetches[out->n_step_fetches++] = reads[1];
    set_call(out, PSG_RING_RECORD, 0, NULL, 2, reads, 0, NULL);
    set_call(out, PSG_RING_READY, 1, &ready_value, 0, NULL, 1, &set_ready);
    return psg_graph_status(g);
}

/* Each variable on the worker's own device (the model's, which b->vars hold, and the
 * optimizer's slots): a copy on a ps, "allreduce/model/<var>" for the model's, else
 * "allreduce/state/<var>". The chief's share writes its own into them (*publish, also the
 * start and the end's), another worker's loads them into its own (*load). */
static int build_share(ring_build_t *r, int *publish, int *load) {
    psg_graph_t *g = r->b->g;
    int n = 0, nv = 0;
    const int *init = psg_graph_collection(g, "init", &n);
    /* the own variables first: each copy adds to the collection */
    psg_endpoint_t *vs = malloc(sizeof *vs * (size_t)(2 * n + 2)), *values = vs + n + 1;
    int *ids = malloc(sizeof *ids * (size_t)(2 * n + 2)), np = 0, nl = 0, *loads = ids + n + 1;
    if (!ids || !vs) {
        free(ids);
        free(vs);
        return psg_error_set("out of memory");
    }
    for (int i = 0; i < n; i++) {
        const psg_node_t *a = psg_graph_node(g, init[i]);
        if (psg_node_num_inputs(a) < 1) continue;
        psg_endpoint_t v = psg_node_input(a, 0);
        if (psg_node_num_inputs(a) < 2 ||
            strcmp(psg_node_device(psg_graph_node(g, v.node)), r->own))
            continue;
        values[nv] = psg_node_input(a, 1); /* the initial value: its dtype is the variable's */
        vs[nv++] = v;
    }
    char name[600];
    for (int i = 0; i < nv; i++) {
        psg_endpoint_t v = vs[i];
        bool model = false;
        for (int k = 0; k < r->b->n; k++) model |= r->b->vars[k].node == v.node;
        const char *kind = model ? "model" : "state",
                   *vn = psg_node_name(psg_graph_node(g, v.node));
        snprintf(name, sizeof name, "allreduce/%s/%s", kind, vn);
        psg_endpoint_t copy =
            psg_variable(g, name, psg_graph_dtype(g, values[i]), psg_graph_shape(g, v),
                         (psg_initializer_t){"zeros", 0, 0}, false);
        bool pushed = psg_sync_push_device_of(g, v);
        snprintf(name, sizeof name, "%s/for_ps", vn);
        psg_endpoint_t own = psg_read_variable(g, name, v);
        if (pushed) psg_graph_pop_device(g);
        pushed = psg_sync_push_device_of(g, copy);
        snprintf(name, sizeof name, "allreduce/%s/%s/publish", kind, vn);
        ids[np++] = psg_assign(g, name, copy, own);
        snprintf(name, sizeof name, "allreduce/%s/%s/for_worker", kind, vn);
        psg_endpoint_t shared = psg_read_variable(g, name, copy);
        if (pushed) psg_graph_pop_device(g);
        pushed = psg_sync_push_device_of(g, v);
        snprintf(name, sizeof name, "%s/from_chief", vn);
        loads[nl++] = psg_assign(g, name, v, shared);
        if (pushed) psg_graph_pop_device(g);
    }
    *publish = psg_group(g, "allreduce/publish", np, ids);
    *load = psg_group(g, "allreduce/load", nl, loads);
    free(ids);
    free(vs);
    return *publish < 0 || *load < 0 ? -1 : psg_graph_status(g);
}

static int build_allreduce(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_graph_t *g = b->g;
    ring_build_t r = {.b = b, .out = out, .me = b->cfg->worker_index, .n = b->cfg->num_workers};
    snprintf(r.own, sizeof r.own, "%s", psg_node_device(psg_graph_node(g, b->vars[0].node)));
    int close_ring = -1, publish = -1, load = -1;
    psg_graph_push_device(g, r.own);
    int rc = build_gradient(&r);
    psg_graph_pop_device(g);
    if (rc < 0 || build_fast(&r) < 0 || build_apply(&r) < 0 || build_mailboxes(&r) < 0 ||
        build_record(&r, &close_ring) < 0 || build_share(&r, &publish, &load) < 0)
        return -1;
    int share = r.me == 0 ? publish : load;
    set_call(out, PSG_RING_SHARE, 0, NULL, 0, NULL, 1, &share);
    out->global_step = psg_sync_read_global_step(g, "allreduce/global_step", b->global_step, -1);
    out->local_init_op = psg_sync_local_inits(g, r.own);
    int ends[2] = {close_ring, publish};
    /* the first worker out of data or steps ends the ring for all; the chief's copy last */
    out->close_op = psg_group(g, "allreduce/close", r.me == 0 ? 2 : 1, ends);
    if (r.me == 0) out->start_op = publish;
    out->peer_calls_from = PSG_RING_PUT0 - 1; /* the puts: made at their first run */
    out->push_scale = r.n > 1 ? 2.0 * (r.n - 1) / r.n : 0;
    out->no_retry = true;
    return psg_graph_status(g);
}

static int check_allreduce(const psg_sync_config_t *cfg, int num_required) {
    if (cfg->backup_workers > 0 || num_required != cfg->num_workers)
        return psg_error_set("allreduce: every worker's gradient is in every step (no "
                             "--backup-workers, no --replicas-to-aggregate below the workers)");
    if (cfg->num_workers > PSG_RING_MAX_WORKERS)
        return psg_error_set("allreduce: %d workers; the ring takes at most %d", cfg->num_workers,
                             PSG_RING_MAX_WORKERS);
    return 0;
}

const psg_sync_strategy_t psg_sync_strategy_allreduce = {
    .name = "allreduce",
    .summary = "ring all-reduce: the live workers sum their gradients among themselves "
               "(reduce-scatter, all-gather), each applies the mean to its own copy; no ps "
               "in the step",
    .check = check_allreduce,
    .lost_workers = psg_sync_lost_any,
    .build = build_allreduce,
    .step = psg_ring_step,
    .local_model = true,
};
