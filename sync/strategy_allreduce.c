/* The "allreduce" strategy: ring all-reduce among the workers (Baidu's ring, Horovod),
 * with no ps in the step for the model. The model's variables are each worker's own (the
 * trainer builds them under the worker's device, as local SGD's); a step flattens the
 * gradients into one vector of M floats, cut into N chunks, and runs the ring: N - 1
 * phases of reduce-scatter (worker i sends its running sum of chunk i - k to worker i + 1,
 * which adds it to its own) and N - 1 of all-gather (the summed chunks go round), so each
 * worker sends 2 (N - 1) / N x M floats a step. A chunk travels by the cluster's Send/Recv
 * (CURVE when on) into a mailbox of the receiver's task server (ops/state/mailbox.c), keyed
 * by the worker's step; the receiver's take waits for it like a token dequeue, and fails
 * after the step's timeout naming the worker that did not send. Each worker then applies the
 * mean (the sum / N) with the optimizer to its own copy: with SGD, sync's step with b = 0.
 * The ps keeps the global step (the chief advances it each step) and a copy of the model,
 * "allreduce/model/<var>", that the chief writes at the start and at the end (checkpoints
 * and tests read it); in between it holds the start's values. */
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_sparse.h"
#include "psgraph/ops_train.h"
#include "ops/state/sync_resources.h"
#include "sync/strategy.h"

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
    psg_graph_t *g;
    psg_endpoint_t step; /* the mailboxes' step (fed) */
    int me, n;           /* this worker's rank, the workers */
    char own[PSG_DEVICE_NAME_MAX], next[PSG_DEVICE_NAME_MAX], prev[PSG_DEVICE_NAME_MAX];
    int64_t timeout_ms;
    int *puts, num_puts;
} ring_t;

/* Phase k: chunks[send] into the next worker's mailbox k, then mailbox k's (from the
 * previous worker, len floats) into *got, on this worker. */
static int exchange(ring_t *r, int k, psg_endpoint_t chunk, int64_t len, psg_endpoint_t *got) {
    psg_graph_t *g = r->g;
    char name[128];
    psg_graph_push_device(g, r->next);
    snprintf(name, sizeof name, "allreduce/w%d/phase%d", (r->me + 1) % r->n, k);
    psg_endpoint_t box = psg_mailbox_op(g, name);
    snprintf(name, sizeof name, "allreduce/w%d/phase%d/put", (r->me + 1) % r->n, k);
    r->puts[r->num_puts++] = psg_mailbox_put_op(g, name, box, r->step, chunk);
    psg_graph_pop_device(g);
    snprintf(name, sizeof name, "allreduce/w%d/phase%d", r->me, k);
    psg_endpoint_t mine = psg_mailbox_op(g, name);
    snprintf(name, sizeof name, "allreduce/w%d/phase%d/take", r->me, k);
    psg_shape_t s = psg_shape_1d(len);
    *got = psg_mailbox_take_op(g, name, mine, r->step, &s, r->prev, r->timeout_ms);
    return psg_graph_status(g);
}

/* The ring on cur[n] (this worker's chunks, each replaced by the sum over the workers). */
static int ring(ring_t *r, psg_endpoint_t *cur, const int64_t *len) {
    int n = r->n, me = r->me;
    char name[128];
    for (int k = 0; k < n - 1; k++) { /* reduce-scatter: after it, chunk me + 1 is summed */
        int s = ((me - k) % n + n) % n, c = ((me - k - 1) % n + n) % n;
        psg_endpoint_t got;
        if (exchange(r, k, cur[s], len[c], &got) < 0) return -1;
        snprintf(name, sizeof name, "allreduce/chunk%d/sum%d", c, k);
        cur[c] = psg_add(r->g, name, cur[c], got);
    }
    for (int k = 0; k < n - 1; k++) { /* all-gather: the summed chunks go round */
        int s = ((me + 1 - k) % n + n) % n, c = ((me - k) % n + n) % n;
        if (exchange(r, n - 1 + k, cur[s], len[c], &cur[c]) < 0) return -1;
    }
    return psg_graph_status(r->g);
}

/* The mean over the workers of b's gradients into avg[b->n], on this worker; the puts into
 * r->puts. */
static int average(const psg_sync_build_t *b, ring_t *r, psg_endpoint_t *avg) {
    psg_graph_t *g = b->g;
    int n = r->n, nv = b->n;
    int64_t *size = calloc((size_t)(nv + 2 * n), sizeof *size), *len = size + nv, *off = len + n;
    psg_endpoint_t *flat = calloc((size_t)(nv + n), sizeof *flat), *cur = flat + nv;
    if (!size || !flat) {
        free(size);
        free(flat);
        return psg_error_set("out of memory");
    }
    char name[512];
    int64_t m = 0;
    psg_shape_t any = psg_shape_1d(-1);
    for (int i = 0; i < nv; i++) {
        if (psg_is_indexed_slices(g, b->grads[i], NULL, NULL, NULL)) {
            free(size);
            free(flat);
            return psg_error_set("allreduce: variable '%s' has a sparse gradient (rows of an "
                                 "embedding), which the ring does not sum (async and sync do)",
                                 psg_node_name(psg_graph_node(g, b->vars[i].node)));
        }
        size[i] = psg_shape_numel(psg_graph_shape(g, b->vars[i]));
        snprintf(name, sizeof name, "allreduce/flat%d", i);
        flat[i] = psg_reshape(g, name, b->grads[i], &any);
        m += size[i];
    }
    int rc = 0;
    if (m < n)
        rc = psg_error_set("allreduce: %lld floats cannot be cut into %d chunks", (long long)m, n);
    psg_endpoint_t all = nv == 1 ? flat[0] : psg_concat(g, "allreduce/gradients", nv, flat, 0);
    for (int c = 0; rc == 0 && c < n; c++) {
        off[c] = m * c / n;
        len[c] = m * (c + 1) / n - off[c];
        snprintf(name, sizeof name, "allreduce/chunk%d", c);
        cur[c] = psg_slice(g, name, all, 1, &off[c], &len[c]);
    }
    if (rc == 0) rc = ring(r, cur, len);
    if (rc == 0) {
        psg_endpoint_t sum = psg_concat(g, "allreduce/sum", n, cur, 0);
        psg_endpoint_t mean = psg_scale(g, "allreduce/mean", sum, 1.0 / n);
        int64_t begin = 0;
        for (int i = 0; i < nv; begin += size[i], i++) {
            snprintf(name, sizeof name, "allreduce/mean%d", i);
            psg_endpoint_t part = psg_slice(g, name, mean, 1, &begin, &size[i]);
            snprintf(name, sizeof name, "allreduce/mean%d/shaped", i);
            avg[i] = psg_reshape(g, name, part, psg_graph_shape(g, b->vars[i]));
        }
        rc = psg_graph_status(g);
    }
    free(size);
    free(flat);
    return rc;
}

/* The ps's copy of the model, and the chief's writes of its own into it (*publish). */
static int build_copies(const psg_sync_build_t *b, int *publish) {
    psg_graph_t *g = b->g;
    int *assigns = malloc(sizeof *assigns * (size_t)b->n);
    if (!assigns) return psg_error_set("out of memory");
    char name[512];
    for (int i = 0; i < b->n; i++) {
        const char *v = psg_node_name(psg_graph_node(g, b->vars[i].node));
        snprintf(name, sizeof name, "allreduce/model/%s", v);
        psg_endpoint_t copy = psg_variable(g, name, PSG_DT_F32, psg_graph_shape(g, b->vars[i]),
                                           (psg_initializer_t){"zeros", 0, 0}, false);
        bool pushed = psg_sync_push_device_of(g, b->vars[i]);
        snprintf(name, sizeof name, "%s/for_ps", v);
        psg_endpoint_t own = psg_read_variable(g, name, b->vars[i]);
        if (pushed) psg_graph_pop_device(g);
        pushed = psg_sync_push_device_of(g, copy);
        snprintf(name, sizeof name, "allreduce/model/%s/publish", v);
        assigns[i] = psg_assign(g, name, copy, own);
        if (pushed) psg_graph_pop_device(g);
    }
    *publish = psg_group(g, "allreduce/publish", b->n, assigns);
    free(assigns);
    return *publish < 0 ? -1 : 0;
}

static int build_allreduce(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_graph_t *g = b->g;
    ring_t r = {.g = g, .me = b->cfg->worker_index, .n = b->cfg->num_workers};
    r.timeout_ms = b->timeout_ms;
    snprintf(r.own, sizeof r.own, "%s", psg_node_device(psg_graph_node(g, b->vars[0].node)));
    if (rank_device(r.own, r.me, (r.me + 1) % r.n, r.next, sizeof r.next) < 0 ||
        rank_device(r.own, r.me, (r.me + r.n - 1) % r.n, r.prev, sizeof r.prev) < 0)
        return -1;
    psg_endpoint_t *avg = malloc(sizeof *avg * (size_t)b->n);
    r.puts = malloc(sizeof *r.puts * (size_t)(2 * r.n + 2));
    int rc = avg && r.puts ? 0 : psg_error_set("out of memory");
    psg_graph_push_device(g, r.own);
    psg_shape_t scalar = psg_shape_scalar();
    out->local_step = r.step = psg_placeholder(g, "allreduce/step", PSG_DT_I64, &scalar);
    if (rc == 0 && r.n > 1) rc = average(b, &r, avg);
    psg_graph_pop_device(g);
    int update = -1;
    if (rc == 0) {
        psg_sync_build_t ab = *b;
        ab.grads = r.n > 1 ? avg : b->grads;
        rc = psg_sync_local_update(&ab, &update);
    }
    if (rc == 0) {
        r.puts[r.num_puts++] = update;
        if (r.me == 0) { /* the chief counts the steps on the ps */
            bool pushed = psg_sync_push_device_of(g, b->global_step);
            r.puts[r.num_puts++] =
                psg_increment_variable(g, "allreduce/count_step", b->global_step, 1);
            if (pushed) psg_graph_pop_device(g);
        }
        out->train_op = psg_group(g, "allreduce/step_done", r.num_puts, r.puts);
        out->global_step =
            psg_sync_read_global_step(g, "allreduce/global_step", b->global_step, -1);
        out->local_init_op = psg_sync_local_inits(g, r.own);
        rc = psg_graph_status(g);
    }
    if (rc == 0 && r.me == 0 && (rc = build_copies(b, &out->start_op)) == 0)
        out->close_op = out->start_op;
    free(avg);
    free(r.puts);
    out->push_scale = r.n > 1 ? 2.0 * (r.n - 1) / r.n : 0;
    out->no_retry = true;
    return rc < 0 ? -1 : psg_graph_status(g);
}

/* The mailboxes' step is the worker's own count of steps (the same on every worker: each
 * takes every step), not the global step the chief advances. */
static int step_allreduce(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    w->local_step = w->steps;
    if (psg_sync_step_default(w, loss, st) < 0) return -1;
    st->staleness = 0; /* every gradient is the step's */
    return 0;
}

static int check_allreduce(const psg_sync_config_t *cfg, int num_required) {
    if (cfg->backup_workers > 0 || num_required != cfg->num_workers)
        return psg_error_set("allreduce: every worker's gradient is in every step (no "
                             "--backup-workers, no --replicas-to-aggregate below the workers)");
    return 0;
}

const psg_sync_strategy_t psg_sync_strategy_allreduce = {
    .name = "allreduce",
    .summary = "ring all-reduce: the workers sum their gradients among themselves "
               "(reduce-scatter, all-gather), each applies the mean to its own copy; no ps "
               "in the step",
    .check = check_allreduce,
    .build = build_allreduce,
    .step = step_allreduce,
    .local_model = true,
};
