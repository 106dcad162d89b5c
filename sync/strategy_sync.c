/* The "sync" strategy: synchronous SGD with backup workers. A worker offers
 * its gradients, computed for its local step, to each variable's
 * accumulator and takes its next token; the chief takes the mean of the
 * first N of every accumulator, applies it with the wrapped optimizer,
 * advances the global step and releases N + b tokens carrying it. */
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_sparse.h"
#include "ops/state/sync_resources.h"
#include "sync/strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<var>/<suffix>", in buf. */
static const char *var_name(const psg_sync_build_t *b, int i, const char *suffix, char *buf,
                            size_t size) {
    snprintf(buf, size, "%s/%s", psg_node_name(psg_graph_node(b->g, b->vars[i].node)), suffix);
    return buf;
}

typedef struct {
    psg_endpoint_t *accums, *applied, *means;
    int *applies, *closes, *sets, *resets, *lives;
} nodes_t;

/* Variable i's accumulator, the worker's apply and the chief's take (t->accums[i],
 * t->applied[i], t->means[i]): for a sparse gradient (an IndexedSlices) a sparse one, to
 * which only the rows and ids travel and whose mean is applied as a sparse update. */
static int accumulator_of(const psg_sync_build_t *b, int i, psg_endpoint_t local_step, nodes_t *t) {
    psg_graph_t *g = b->g;
    char name[1024];
    const psg_shape_t *shape = psg_graph_shape(g, b->vars[i]);
    psg_endpoint_t v, ix;
    if (!psg_is_indexed_slices(g, b->grads[i], &v, &ix, NULL)) {
        t->accums[i] = psg_accumulator_op(g, var_name(b, i, "grad_accum", name, sizeof name), shape,
                                          b->num_required);
        t->applied[i] =
            psg_accumulator_apply_op(g, var_name(b, i, "grad_accum/apply", name, sizeof name),
                                     t->accums[i], local_step, b->grads[i]);
        t->means[i] =
            psg_accumulator_take_op(g, var_name(b, i, "grad_accum/take", name, sizeof name),
                                    t->accums[i], b->num_required, b->timeout_ms);
        return 0;
    }
    if (b->cfg->opt.compress)
        return psg_error_set(
            "--compress: variable '%s' has a sparse gradient (rows of an embedding), "
            "which is not compressed",
            psg_node_name(psg_graph_node(g, b->vars[i].node)));
    t->accums[i] = psg_sparse_accumulator_op(g, var_name(b, i, "grad_accum", name, sizeof name),
                                             shape, b->num_required);
    t->applied[i] = psg_sparse_accumulator_apply_op(
        g, var_name(b, i, "grad_accum/apply", name, sizeof name), t->accums[i], local_step, v, ix);
    psg_endpoint_t mix;
    psg_endpoint_t mv =
        psg_sparse_accumulator_take_op(g, var_name(b, i, "grad_accum/take", name, sizeof name),
                                       t->accums[i], b->num_required, b->timeout_ms, &mix);
    t->means[i] = psg_indexed_slices(g, var_name(b, i, "grad_accum/mean", name, sizeof name), mv,
                                     mix, b->vars[i]);
    return 0;
}

/* After a failover (docs/replication.md): every accumulator emptied at the global step, then
 * N + b tokens carrying it (the chief's reissue_op); the token a worker rejoins with (the
 * first above the local step it feeds, waiting for none of its applies). */
static int reissue(const psg_sync_build_t *b, nodes_t *t, psg_endpoint_t queue,
                   psg_sync_graph_t *out) {
    psg_graph_t *g = b->g;
    char name[1024];
    for (int i = 0; i < b->n; i++) {
        bool pushed = psg_sync_push_device_of(g, b->vars[i]);
        t->resets[i] =
            psg_accumulator_reset_op(g, var_name(b, i, "grad_accum/reset", name, sizeof name),
                                     t->accums[i], out->global_step);
        if (pushed) psg_graph_pop_device(g);
    }
    bool pushed = psg_sync_push_device_of(g, b->global_step);
    psg_node_builder_t *nb = psg_node_begin(g, "TokenQueueEnqueueMany", "sync_replicas/reissue");
    psg_node_add_input(nb, queue);
    psg_node_add_input(nb, out->global_step);
    psg_node_attr_int(nb, "repeat", b->cfg->num_workers);
    psg_node_attr_int(nb, "end_step", b->cfg->total_steps);
    psg_node_attr_int(nb, "restart", 1);
    for (int i = 0; i < b->n; i++) psg_node_add_control(nb, t->resets[i]);
    out->reissue_op = psg_node_finish(nb);
    nb = psg_node_begin(g, "TokenQueueDequeue", "sync_replicas/rejoin_token");
    psg_node_add_input(nb, queue);
    psg_node_add_input(nb, out->local_step);
    psg_node_attr_int(nb, "worker", b->cfg->worker_index);
    psg_node_attr_int(nb, "timeout_ms", b->timeout_ms);
    out->rejoin_token = psg_node_finish_ep(nb);
    if (pushed) psg_graph_pop_device(g);
    return psg_graph_status(g);
}

/* As workers are lost or join (the chief's set_live_op, docs/distributed.md "Membership"):
 * every accumulator's N, fed, and the live workers by rank, whose tokens are theirs only (a
 * worker found lost that still runs takes none a live one needs). */
static int set_live(const psg_sync_build_t *b, nodes_t *t, psg_endpoint_t queue,
                    psg_sync_graph_t *out) {
    psg_graph_t *g = b->g;
    char name[1024];
    psg_shape_t scalar = psg_shape_scalar();
    if (psg_graph_push_scope(g, "sync_replicas") < 0) return -1;
    out->live_required = psg_placeholder(g, "live_required", PSG_DT_I64, &scalar);
    psg_shape_t ws = psg_shape_1d(b->cfg->num_workers);
    out->live_mask = psg_placeholder(g, "live", PSG_DT_I32, &ws);
    psg_graph_pop_scope(g);
    for (int i = 0; i < b->n; i++) {
        bool pushed = psg_sync_push_device_of(g, b->vars[i]);
        t->lives[i] = psg_accumulator_set_required_op(
            g, var_name(b, i, "grad_accum/set_required", name, sizeof name), t->accums[i],
            out->live_required);
        if (pushed) psg_graph_pop_device(g);
    }
    bool pushed = psg_sync_push_device_of(g, b->global_step);
    t->lives[b->n] =
        psg_token_queue_set_live_op(g, "sync_replicas/set_tokens", queue, out->live_mask);
    if (pushed) psg_graph_pop_device(g);
    if (psg_graph_push_scope(g, "sync_replicas") < 0) return -1;
    out->set_live_op = psg_group(g, "set_live", b->n + 1, t->lives);
    psg_graph_pop_scope(g);
    return psg_graph_status(g);
}

int psg_sync_build_sync(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_graph_t *g = b->g;
    int n = b->n, rc = -1;
    nodes_t t;
    void *mem = calloc((size_t)(n + 1), 3 * sizeof(psg_endpoint_t) + 5 * sizeof(int));
    if (!mem) return psg_error_set("out of memory");
    t.accums = mem;
    t.applied = t.accums + n + 1;
    t.means = t.applied + n + 1;
    t.applies = (int *)(t.means + n + 1);
    t.closes = t.applies + n + 1;
    t.sets = t.closes + n + 1;
    t.resets = t.sets + n + 1;
    t.lives = t.resets + n + 1;
    char name[1024];
    psg_shape_t scalar = psg_shape_scalar();

    if (psg_graph_push_scope(g, "sync_replicas") < 0) goto out;
    out->local_step = psg_placeholder(g, "local_step", PSG_DT_I64, &scalar);
    psg_graph_pop_scope(g);

    /* per variable, beside it: the accumulator, the worker's apply, the chief's take */
    for (int i = 0; i < n; i++) {
        bool pushed = psg_sync_push_device_of(g, b->vars[i]);
        if (accumulator_of(b, i, out->local_step, &t) < 0) {
            if (pushed) psg_graph_pop_device(g);
            goto out;
        }
        t.applies[i] = t.applied[i].node;
        t.closes[i] = psg_accumulator_close_op(
            g, var_name(b, i, "grad_accum/close", name, sizeof name), t.accums[i]);
        if (pushed) psg_graph_pop_device(g);
        if (psg_graph_error(g)) goto out;
    }

    /* the token queue beside the global step; the worker's dequeue after all its applies */
    bool pushed = psg_sync_push_device_of(g, b->global_step);
    psg_endpoint_t queue = psg_token_queue_op(g, "sync_token_q");
    psg_node_builder_t *nb = psg_node_begin(g, "TokenQueueDequeue", "sync_replicas/dequeue_token");
    psg_node_add_input(nb, queue);
    psg_node_add_input(nb, out->local_step);
    psg_node_attr_int(nb, "worker", b->cfg->worker_index);
    psg_node_attr_int(nb, "timeout_ms", b->timeout_ms);
    for (int i = 0; i < n; i++) psg_node_add_control(nb, t.applies[i]);
    psg_endpoint_t token = psg_node_finish_ep(nb);
    int close_queue = psg_token_queue_close_op(g, "sync_replicas/close_token_q", queue, "");
    out->abort_op = psg_token_queue_close_op(
        g, "sync_replicas/abort_token_q", queue,
        "the chief's runner failed (the chief's output names its error): no more tokens");
    if (pushed) psg_graph_pop_device(g);
    if (psg_graph_push_scope(g, "sync_replicas") < 0) goto out;
    out->num_accepted = psg_count_accepted(g, "num_accepted", n, t.applied);
    psg_graph_pop_scope(g);
    if (psg_graph_error(g)) goto out;
    out->next_step = token;
    out->token_wait = (psg_endpoint_t){token.node, 1};
    out->train_op = token.node;

    /* the chief: apply the means, advance the global step, release N + b tokens */
    int update = -1;
    if (psg_optimizer_apply_gradients(b->opt, g, n, t.means, b->vars, &update) < 0) goto out;
    if (psg_graph_push_scope(g, "sync_replicas") < 0) goto out;
    out->chief_global_step =
        psg_sync_read_global_step(g, "global_step_after_update", b->global_step, update);
    out->chief_op =
        psg_token_queue_enqueue_many_op(g, "release_tokens", queue, out->chief_global_step,
                                        b->cfg->num_workers, b->cfg->total_steps);
    /* the chief's init: accumulators at the global step (a restarted chief) */
    out->global_step = psg_sync_read_global_step(g, "global_step", b->global_step, -1);
    psg_graph_pop_scope(g);
    for (int i = 0; i < n; i++)
        t.sets[i] = psg_accumulator_set_global_step_op(
            g, var_name(b, i, "grad_accum/set_global_step", name, sizeof name), t.accums[i],
            out->global_step);
    t.closes[n] = close_queue;
    if (reissue(b, &t, queue, out) < 0 || set_live(b, &t, queue, out) < 0) goto out;
    if (psg_graph_push_scope(g, "sync_replicas") < 0) goto out;
    out->chief_init_op = psg_group(g, "chief_init", n, t.sets);
    out->close_op = psg_group(g, "close", n + 1, t.closes);
    psg_graph_pop_scope(g);
    rc = psg_graph_status(g);
out:
    free(mem);
    return rc;
}

static const char *const sync_options[] = {"--replicas-to-aggregate", "--backup-workers",
                                           PSG_SYNC_COMPRESS_OPTIONS, NULL};

const psg_sync_strategy_t psg_sync_strategy_sync = {
    .name = "sync",
    .summary = "synchronous SGD: the mean of the first N of N + b gradients a step, the b "
               "slowest dropped",
    .options = sync_options,
    .lost_workers = psg_sync_lost_any,
    .build = psg_sync_build_sync,
    .chief_runner = true,
    .compress = true,
};
