/* The sync-replicas ops: handles to gradient accumulators and token
 * queues, applying and taking gradients, releasing and taking tokens
 * (TensorFlow's ConditionalAccumulator and FIFOQueue ops of
 * SyncReplicasOptimizer), SSP's clocks (ticks and waits for the slowest) and ring
 * all-reduce's mailboxes (a chunk put for a step, taken by the owner):
 * defs, shape inference and builders. Kernels:
 * ops/cpu/sync.c; the resources: ps/; the protocol: sync/. */
#include "ops/cpu/sync.h"
#include "psgraph/error.h"
#include "ops/state/sync_resources.h"
#include "ops/state/shard_queue.h"

#include <string.h>

/* ---- inference ---- */

static int expect_scalar(psg_infer_ctx_t *c, int i, psg_dtype_t dt, const char *what) {
    const psg_shape_t *s = &c->in_shapes[i];
    if (c->in_dtypes[i] != dt || (s->rank > 0 && psg_shape_numel(s) != 1)) {
        char b[PSG_SHAPE_STR_MAX];
        return psg_error_set("%s (input %d) must be a scalar %s, got %s%s", what, i,
                             psg_dtype_name(dt), psg_dtype_name(c->in_dtypes[i]),
                             psg_shape_str(s, b, sizeof b));
    }
    return 0;
}

static void set_output(psg_infer_ctx_t *c, int o, psg_dtype_t dt, psg_shape_t s) {
    c->out_dtypes[o] = dt;
    c->out_shapes[o] = s;
}

static int infer_accumulator(psg_infer_ctx_t *c) {
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    if (!sh || sh->type != PSG_ATTR_SHAPE || !psg_shape_is_complete(&sh->u.shape))
        return psg_error_set("an accumulator needs a complete 'shape'");
    if (psg_node_get_int(c->node, "num_required", 0) < 0)
        return psg_error_set("num_required must be >= 0");
    set_output(c, 0, PSG_DT_RESOURCE, sh->u.shape);
    return 0;
}

static int infer_apply(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (expect_scalar(c, 1, PSG_DT_I64, "local_step") < 0) return -1;
    if (c->in_dtypes[2] != PSG_DT_F32 ||
        !psg_shape_compatible(&c->in_shapes[2], &c->in_shapes[0])) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        return psg_error_set("gradient %s%s does not fit the accumulator's f32%s",
                             psg_dtype_name(c->in_dtypes[2]),
                             psg_shape_str(&c->in_shapes[2], a, sizeof a),
                             psg_shape_str(&c->in_shapes[0], b, sizeof b));
    }
    set_output(c, 0, PSG_DT_I32, psg_shape_scalar());
    return 0;
}

static int infer_take(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (psg_node_get_int(c->node, "num_required", 0) < 1)
        return psg_error_set("num_required must be >= 1");
    set_output(c, 0, PSG_DT_F32, c->in_shapes[0]);
    return 0;
}

static int infer_sparse_apply(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (expect_scalar(c, 1, PSG_DT_I64, "local_step") < 0) return -1;
    const psg_shape_t *v = &c->in_shapes[2], *h = &c->in_shapes[0];
    bool fits = c->in_dtypes[2] == PSG_DT_F32 && (v->rank == 0 || v->rank == h->rank);
    for (int d = 1; fits && v->rank > 0 && d < h->rank; d++)
        fits = v->dims[d] < 0 || v->dims[d] == h->dims[d];
    if (!fits) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        return psg_error_set("gradient rows %s%s do not fit the sparse accumulator's f32%s",
                             psg_dtype_name(c->in_dtypes[2]), psg_shape_str(v, a, sizeof a),
                             psg_shape_str(h, b, sizeof b));
    }
    if (c->in_dtypes[3] != PSG_DT_I32 && c->in_dtypes[3] != PSG_DT_I64)
        return psg_error_set("indices (input 3) must be i32 or i64, got %s",
                             psg_dtype_name(c->in_dtypes[3]));
    set_output(c, 0, PSG_DT_I32, psg_shape_scalar());
    return 0;
}

static int infer_sparse_take(psg_infer_ctx_t *c) {
    if (infer_take(c) < 0) return -1;
    psg_shape_t rows = c->in_shapes[0];
    if (rows.rank < 1) return psg_error_set("a sparse accumulator needs a shape of rank >= 1");
    rows.dims[0] = -1;
    set_output(c, 0, PSG_DT_F32, rows);
    set_output(c, 1, PSG_DT_I64, psg_shape_1d(-1));
    return 0;
}

static int infer_set_global_step(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    return expect_scalar(c, 1, PSG_DT_I64, "step");
}

static int infer_set_count(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    return expect_scalar(c, 1, PSG_DT_I64, "n");
}

static int infer_num_accumulated(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    set_output(c, 0, PSG_DT_I32, psg_shape_scalar());
    return 0;
}

static int infer_handle_only(psg_infer_ctx_t *c) {
    return psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE);
}

static int infer_token_queue(psg_infer_ctx_t *c) {
    set_output(c, 0, PSG_DT_RESOURCE, psg_shape_scalar());
    return 0;
}

static int infer_enqueue_many(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (psg_infer_expect_dtype(c, 1, PSG_DT_I64) < 0) return -1;
    if (psg_node_get_int(c->node, "repeat", 1) < 1) return psg_error_set("repeat must be >= 1");
    return 0;
}

static int infer_dequeue(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (expect_scalar(c, 1, PSG_DT_I64, "after_step") < 0) return -1;
    set_output(c, 0, PSG_DT_I64, psg_shape_scalar());
    set_output(c, 1, PSG_DT_F32, psg_shape_scalar());
    return 0;
}

static int infer_ssp_clock(psg_infer_ctx_t *c) {
    if (psg_node_get_int(c->node, "workers", 0) < 1) return psg_error_set("workers must be >= 1");
    set_output(c, 0, PSG_DT_RESOURCE, psg_shape_scalar());
    return 0;
}

static int infer_ssp_set_live(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    return psg_infer_expect_dtype(c, 1, PSG_DT_I32);
}

static int infer_ssp_clock_wait(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (expect_scalar(c, 1, PSG_DT_I64, "want") < 0) return -1;
    set_output(c, 0, PSG_DT_I64, psg_shape_scalar());
    set_output(c, 1, PSG_DT_F32, psg_shape_scalar());
    return 0;
}

static int infer_mailbox(psg_infer_ctx_t *c) {
    set_output(c, 0, PSG_DT_RESOURCE, psg_shape_scalar());
    return 0;
}

static int infer_mailbox_put(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (expect_scalar(c, 1, PSG_DT_I64, "step") < 0) return -1;
    return psg_infer_expect_dtype(c, 2, PSG_DT_F32);
}

static int infer_mailbox_take(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (expect_scalar(c, 1, PSG_DT_I64, "step") < 0) return -1;
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    if (!sh || sh->type != PSG_ATTR_SHAPE)
        return psg_error_set("a mailbox's take needs a 'shape' (-1: any size on that axis)");
    set_output(c, 0, PSG_DT_F32, sh->u.shape);
    return 0;
}

static int infer_count_accepted(psg_infer_ctx_t *c) {
    for (int i = 0; i < c->num_inputs; i++)
        if (expect_scalar(c, i, PSG_DT_I32, "flag") < 0) return -1;
    set_output(c, 0, PSG_DT_I32, psg_shape_scalar());
    return 0;
}

static int infer_shard_queue(psg_infer_ctx_t *c) {
    if (psg_node_get_int(c->node, "shards", 0) < 1 || psg_node_get_int(c->node, "epochs", 0) < 1)
        return psg_error_set("a shard queue needs shards >= 1 and epochs >= 1");
    set_output(c, 0, PSG_DT_RESOURCE, psg_shape_scalar());
    return 0;
}

static int infer_shard_take(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    if (expect_scalar(c, 1, PSG_DT_I64, "incarnation") < 0) return -1;
    if (expect_scalar(c, 2, PSG_DT_I64, "done") < 0) return -1;
    if (psg_infer_expect_dtype(c, 3, PSG_DT_I64) < 0) return -1;
    set_output(c, 0, PSG_DT_I64, psg_shape_1d(-1)); /* 2 + the holders' pairs */
    return 0;
}

/* ---- defs: none is differentiable ---- */

#define SYNC_OP(var, op_name, nin, nout, op_flags, infer_fn, kernel)                               \
    static const psg_op_def_t var = {.name = op_name,                                              \
                                     .num_inputs = nin,                                            \
                                     .num_outputs = nout,                                          \
                                     .flags = PSG_OP_STATEFUL | (op_flags),                        \
                                     .infer = infer_fn,                                            \
                                     .cpu = kernel}

SYNC_OP(op_accumulator, "AccumulatorHandle", 0, 1, 0, infer_accumulator, psg_cpu_accumulator);
SYNC_OP(op_apply, "AccumulatorApplyGradient", 3, 1, 0, infer_apply, psg_cpu_accumulator_apply);
SYNC_OP(op_take, "AccumulatorTakeGradient", 1, 1, PSG_OP_ASYNC, infer_take,
        psg_cpu_accumulator_take);
SYNC_OP(op_sparse_accumulator, "SparseAccumulatorHandle", 0, 1, 0, infer_accumulator,
        psg_cpu_sparse_accumulator);
SYNC_OP(op_sparse_apply, "SparseAccumulatorApplyGradient", 4, 1, 0, infer_sparse_apply,
        psg_cpu_accumulator_apply);
SYNC_OP(op_sparse_take, "SparseAccumulatorTakeGradient", 1, 2, PSG_OP_ASYNC | PSG_OP_DYNAMIC_SHAPE,
        infer_sparse_take, psg_cpu_accumulator_take);
SYNC_OP(op_set_global_step, "AccumulatorSetGlobalStep", 2, 0, 0, infer_set_global_step,
        psg_cpu_accumulator_set_global_step);
SYNC_OP(op_set_required, "AccumulatorSetRequired", 2, 0, 0, infer_set_count,
        psg_cpu_accumulator_set_required);
SYNC_OP(op_set_repeat, "TokenQueueSetRepeat", 2, 0, 0, infer_set_count,
        psg_cpu_token_queue_set_repeat);
SYNC_OP(op_set_live, "TokenQueueSetLive", 2, 0, 0, infer_ssp_set_live,
        psg_cpu_token_queue_set_live);
SYNC_OP(op_num_accumulated, "AccumulatorNumAccumulated", 1, 1, 0, infer_num_accumulated,
        psg_cpu_accumulator_num_accumulated);
SYNC_OP(op_accumulator_close, "AccumulatorClose", 1, 0, 0, infer_handle_only,
        psg_cpu_accumulator_close);
SYNC_OP(op_token_queue, "TokenQueueHandle", 0, 1, 0, infer_token_queue, psg_cpu_token_queue);
SYNC_OP(op_enqueue_many, "TokenQueueEnqueueMany", 2, 0, 0, infer_enqueue_many,
        psg_cpu_token_queue_enqueue_many);
SYNC_OP(op_dequeue, "TokenQueueDequeue", 2, 2, PSG_OP_ASYNC, infer_dequeue,
        psg_cpu_token_queue_dequeue);
SYNC_OP(op_token_queue_close, "TokenQueueClose", 1, 0, 0, infer_handle_only,
        psg_cpu_token_queue_close);
SYNC_OP(op_ssp_clock, "SspClockHandle", 0, 1, 0, infer_ssp_clock, psg_cpu_ssp_clock);
SYNC_OP(op_ssp_clock_tick, "SspClockTick", 1, 0, 0, infer_handle_only, psg_cpu_ssp_clock_tick);
SYNC_OP(op_ssp_clock_reset, "SspClockReset", 1, 0, 0, infer_handle_only, psg_cpu_ssp_clock_reset);
SYNC_OP(op_ssp_set_live, "SspClockSetLive", 2, 0, 0, infer_ssp_set_live,
        psg_cpu_ssp_clock_set_live);
SYNC_OP(op_ssp_clock_wait, "SspClockWait", 2, 2, PSG_OP_ASYNC, infer_ssp_clock_wait,
        psg_cpu_ssp_clock_wait);
SYNC_OP(op_mailbox, "MailboxHandle", 0, 1, 0, infer_mailbox, psg_cpu_mailbox);
SYNC_OP(op_mailbox_put, "MailboxPut", 3, 0, 0, infer_mailbox_put, psg_cpu_mailbox_put);
SYNC_OP(op_mailbox_take, "MailboxTake", 2, 1, PSG_OP_ASYNC, infer_mailbox_take,
        psg_cpu_mailbox_take);
SYNC_OP(op_shard_queue, "ShardQueueHandle", 0, 1, 0, infer_shard_queue, psg_cpu_shard_queue);
SYNC_OP(op_shard_take, "ShardQueueTake", 4, 1, PSG_OP_DYNAMIC_SHAPE, infer_shard_take,
        psg_cpu_shard_queue_take);
static const psg_op_def_t op_count_accepted = {.name = "CountAccepted",
                                               .num_inputs = -1,
                                               .num_outputs = 1,
                                               .infer = infer_count_accepted,
                                               .cpu = psg_cpu_count_accepted};

const psg_op_def_t *const psg_sync_ops[] = {
    &op_accumulator,
    &op_apply,
    &op_take,
    &op_set_global_step,
    &op_set_required,
    &op_set_repeat,
    &op_set_live,
    &op_num_accumulated,
    &op_accumulator_close,
    &op_token_queue,
    &op_enqueue_many,
    &op_dequeue,
    &op_token_queue_close,
    &op_count_accepted,
    &op_sparse_accumulator,
    &op_sparse_apply,
    &op_sparse_take,
    &op_ssp_clock,
    &op_ssp_clock_tick,
    &op_ssp_clock_reset,
    &op_ssp_clock_wait,
    &op_ssp_set_live,
    &op_mailbox,
    &op_mailbox_put,
    &op_mailbox_take,
    &op_shard_queue,
    &op_shard_take,
    NULL,
};

/* ---- builders ---- */

static psg_node_builder_t *begin(psg_graph_t *g, const char *op, const char *name, int n,
                                 const psg_endpoint_t *inputs) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    for (int i = 0; i < n; i++) psg_node_add_input(b, inputs[i]);
    return b;
}

/* A dense or sparse accumulator's handle op. */
static psg_endpoint_t handle_op(psg_graph_t *g, const char *op, const char *name,
                                const psg_shape_t *shape, int num_required) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    psg_node_attr_shape(b, "shape", shape);
    psg_node_attr_int(b, "num_required", num_required);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_accumulator_op(psg_graph_t *g, const char *name, const psg_shape_t *shape,
                                  int num_required) {
    return handle_op(g, "AccumulatorHandle", name, shape, num_required);
}

psg_endpoint_t psg_accumulator_apply_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                        psg_endpoint_t local_step, psg_endpoint_t grad) {
    psg_endpoint_t in[3] = {handle, local_step, grad};
    return psg_node_finish_ep(begin(g, "AccumulatorApplyGradient", name, 3, in));
}

/* A dense or sparse accumulator's take op. */
static psg_endpoint_t take_op(psg_graph_t *g, const char *op, const char *name,
                              psg_endpoint_t handle, int num_required, int64_t timeout_ms) {
    psg_node_builder_t *b = begin(g, op, name, 1, &handle);
    psg_node_attr_int(b, "num_required", num_required);
    psg_node_attr_int(b, "timeout_ms", timeout_ms);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_accumulator_take_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                       int num_required, int64_t timeout_ms) {
    return take_op(g, "AccumulatorTakeGradient", name, handle, num_required, timeout_ms);
}

psg_endpoint_t psg_sparse_accumulator_op(psg_graph_t *g, const char *name, const psg_shape_t *shape,
                                         int num_required) {
    return handle_op(g, "SparseAccumulatorHandle", name, shape, num_required);
}

psg_endpoint_t psg_sparse_accumulator_apply_op(psg_graph_t *g, const char *name,
                                               psg_endpoint_t handle, psg_endpoint_t local_step,
                                               psg_endpoint_t values, psg_endpoint_t indices) {
    psg_endpoint_t in[4] = {handle, local_step, values, indices};
    return psg_node_finish_ep(begin(g, "SparseAccumulatorApplyGradient", name, 4, in));
}

psg_endpoint_t psg_sparse_accumulator_take_op(psg_graph_t *g, const char *name,
                                              psg_endpoint_t handle, int num_required,
                                              int64_t timeout_ms, psg_endpoint_t *indices) {
    psg_endpoint_t v =
        take_op(g, "SparseAccumulatorTakeGradient", name, handle, num_required, timeout_ms);
    *indices = (psg_endpoint_t){v.node, 1};
    return v;
}

int psg_accumulator_set_global_step_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                       psg_endpoint_t step) {
    psg_endpoint_t in[2] = {handle, step};
    return psg_node_finish(begin(g, "AccumulatorSetGlobalStep", name, 2, in));
}

int psg_accumulator_set_required_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                    psg_endpoint_t n) {
    psg_endpoint_t in[2] = {handle, n};
    return psg_node_finish(begin(g, "AccumulatorSetRequired", name, 2, in));
}

int psg_token_queue_set_repeat_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                  psg_endpoint_t n) {
    psg_endpoint_t in[2] = {handle, n};
    return psg_node_finish(begin(g, "TokenQueueSetRepeat", name, 2, in));
}

int psg_token_queue_set_live_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                psg_endpoint_t live) {
    psg_endpoint_t in[2] = {handle, live};
    return psg_node_finish(begin(g, "TokenQueueSetLive", name, 2, in));
}

int psg_accumulator_reset_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                             psg_endpoint_t step) {
    psg_endpoint_t in[2] = {handle, step};
    psg_node_builder_t *b = begin(g, "AccumulatorSetGlobalStep", name, 2, in);
    psg_node_attr_int(b, "reset", 1);
    return psg_node_finish(b);
}

psg_endpoint_t psg_accumulator_num_accumulated_op(psg_graph_t *g, const char *name,
                                                  psg_endpoint_t handle) {
    return psg_node_finish_ep(begin(g, "AccumulatorNumAccumulated", name, 1, &handle));
}

int psg_accumulator_close_op(psg_graph_t *g, const char *name, psg_endpoint_t handle) {
    return psg_node_finish(begin(g, "AccumulatorClose", name, 1, &handle));
}

psg_endpoint_t psg_token_queue_op(psg_graph_t *g, const char *name) {
    return psg_node_finish_ep(psg_node_begin(g, "TokenQueueHandle", name));
}

/* A token queue op on (handle, x) with two int attributes. */
static psg_node_builder_t *queue_op(psg_graph_t *g, const char *op, const char *name,
                                    psg_endpoint_t handle, psg_endpoint_t x, const char *a1,
                                    int64_t v1, const char *a2, int64_t v2) {
    psg_node_builder_t *b = begin(g, op, name, 2, (psg_endpoint_t[]){handle, x});
    psg_node_attr_int(b, a1, v1);
    psg_node_attr_int(b, a2, v2);
    return b;
}

int psg_token_queue_enqueue_many_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                    psg_endpoint_t tokens, int repeat, int64_t end_step) {
    return psg_node_finish(queue_op(g, "TokenQueueEnqueueMany", name, handle, tokens, "repeat",
                                    repeat, "end_step", end_step));
}

psg_endpoint_t psg_token_queue_dequeue_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                          psg_endpoint_t after_step, int worker,
                                          int64_t timeout_ms) {
    return psg_node_finish_ep(queue_op(g, "TokenQueueDequeue", name, handle, after_step, "worker",
                                       worker, "timeout_ms", timeout_ms));
}

int psg_token_queue_close_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                             const char *error) {
    psg_node_builder_t *b = begin(g, "TokenQueueClose", name, 1, &handle);
    psg_node_attr_str(b, "error", error ? error : "");
    return psg_node_finish(b);
}

psg_endpoint_t psg_ssp_clock_op(psg_graph_t *g, const char *name, int workers) {
    psg_node_builder_t *b = psg_node_begin(g, "SspClockHandle", name);
    psg_node_attr_int(b, "workers", workers);
    return psg_node_finish_ep(b);
}

int psg_ssp_clock_tick_op(psg_graph_t *g, const char *name, psg_endpoint_t handle, int worker,
                          int half, int64_t delta, int n_after, const int *after) {
    psg_node_builder_t *b = begin(g, "SspClockTick", name, 1, &handle);
    for (int i = 0; i < n_after; i++) psg_node_add_control(b, after[i]);
    psg_node_attr_int(b, "worker", worker);
    psg_node_attr_int(b, "half", half);
    psg_node_attr_int(b, "delta", delta);
    return psg_node_finish(b);
}

int psg_ssp_clock_set_live_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                              psg_endpoint_t live) {
    psg_endpoint_t in[2] = {handle, live};
    return psg_node_finish(begin(g, "SspClockSetLive", name, 2, in));
}

int psg_ssp_clock_reset_op(psg_graph_t *g, const char *name, psg_endpoint_t handle) {
    return psg_node_finish(begin(g, "SspClockReset", name, 1, &handle));
}

psg_endpoint_t psg_ssp_clock_wait_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                     psg_endpoint_t want, int worker, int half,
                                     int64_t timeout_ms) {
    psg_endpoint_t in[2] = {handle, want};
    psg_node_builder_t *b = begin(g, "SspClockWait", name, 2, in);
    psg_node_attr_int(b, "worker", worker);
    psg_node_attr_int(b, "half", half);
    psg_node_attr_int(b, "timeout_ms", timeout_ms);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_count_accepted(psg_graph_t *g, const char *name, int n,
                                  const psg_endpoint_t *flags) {
    return psg_node_finish_ep(begin(g, "CountAccepted", name, n, flags));
}

psg_endpoint_t psg_mailbox_op(psg_graph_t *g, const char *name) {
    return psg_node_finish_ep(psg_node_begin(g, "MailboxHandle", name));
}

int psg_mailbox_put_op(psg_graph_t *g, const char *name, psg_endpoint_t handle, psg_endpoint_t step,
                       psg_endpoint_t value) {
    psg_endpoint_t in[3] = {handle, step, value};
    return psg_node_finish(begin(g, "MailboxPut", name, 3, in));
}

psg_endpoint_t psg_mailbox_take_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                   psg_endpoint_t step, const psg_shape_t *shape, const char *from,
                                   int64_t timeout_ms) {
    psg_endpoint_t in[2] = {handle, step};
    psg_node_builder_t *b = begin(g, "MailboxTake", name, 2, in);
    psg_node_attr_shape(b, "shape", shape);
    psg_node_attr_str(b, "from", from ? from : "");
    psg_node_attr_int(b, "timeout_ms", timeout_ms);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_shard_queue_op(psg_graph_t *g, const char *name, int64_t shards, int64_t epochs,
                                  uint64_t seed) {
    psg_node_builder_t *b = psg_node_begin(g, "ShardQueueHandle", name);
    psg_node_attr_int(b, "shards", shards);
    psg_node_attr_int(b, "epochs", epochs);
    psg_node_attr_int(b, "seed", (int64_t)seed);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_shard_queue_take_op(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                       psg_endpoint_t incarnation, psg_endpoint_t done,
                                       psg_endpoint_t dead, int worker) {
    psg_endpoint_t in[4] = {handle, incarnation, done, dead};
    psg_node_builder_t *b = begin(g, "ShardQueueTake", name, 4, in);
    psg_node_attr_int(b, "worker", worker);
    return psg_node_finish_ep(b);
}
