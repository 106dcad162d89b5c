/* CPU kernels of the sync-replicas ops: thin calls into the accumulators
 * and token queues of the task's resource manager (ps/). Take and dequeue
 * are asynchronous: they hold no thread while they wait. */
#include "ops/cpu/sync.h"
#include "psgraph/error.h"
#include "ops/state/sync_resources.h"
#include "ops/state/shard_queue.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The resource's name: the shared_name attr, else the node's name. */
static const char *resource_name(const psg_node_t *n) {
    const char *shared = psg_node_get_str(n, "shared_name", "");
    return shared[0] ? shared : psg_node_name(n);
}

static int set_handle(psg_kernel_ctx_t *c, psg_tensor_t *h) {
    if (!h) return psg_error_set("out of memory");
    c->outputs[0] = h;
    return 0;
}

static int scalar_i64(psg_kernel_ctx_t *c, int i, int64_t *out) {
    const psg_tensor_t *t = c->inputs[i];
    if (t->dtype != PSG_DT_I64 || psg_tensor_numel(t) != 1)
        return psg_error_set("input %d must be a scalar i64, got %s", i, psg_dtype_name(t->dtype));
    *out = psg_tensor_i64(t)[0];
    return 0;
}

static int output_scalar_i32(psg_kernel_ctx_t *c, int32_t v) {
    psg_tensor_t *o = psg_kernel_alloc_output(c, 0);
    if (!o) return -1;
    psg_tensor_i32(o)[0] = v;
    return 0;
}

int psg_cpu_accumulator(psg_kernel_ctx_t *c) {
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    psg_accumulator_t *a = psg_accumulator_get(c->resources, resource_name(c->node), &sh->u.shape,
                                               (int)psg_node_get_int(c->node, "num_required", 0));
    return a ? set_handle(c, psg_accumulator_handle(a)) : -1;
}

int psg_cpu_sparse_accumulator(psg_kernel_ctx_t *c) {
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    psg_accumulator_t *a =
        psg_sparse_accumulator_get(c->resources, resource_name(c->node), &sh->u.shape,
                                   (int)psg_node_get_int(c->node, "num_required", 0));
    return a ? set_handle(c, psg_accumulator_handle(a)) : -1;
}

/* Dense and sparse accumulators' apply: a sparse gradient comes as rows (input 2) and ids
 * (input 3). */
int psg_cpu_accumulator_apply(psg_kernel_ctx_t *c) {
    psg_accumulator_t *a = psg_accumulator_from_handle(c->inputs[0]);
    int64_t step = 0;
    bool accepted;
    if (!a || scalar_i64(c, 1, &step) < 0) return -1;
    int rc = c->num_inputs == 4
                 ? psg_accumulator_apply_sparse(a, step, c->inputs[2], c->inputs[3], &accepted)
                 : psg_accumulator_apply(a, step, c->inputs[2], &accepted);
    return rc < 0 ? -1 : output_scalar_i32(c, accepted ? 1 : 0);
}

static void take_done(void *arg, psg_tensor_t *mean, psg_tensor_t *indices, psg_err_code_t code,
                      const char *error) {
    psg_async_op_t *op = arg;
    if (!mean) {
        psg_error_set_code(code, "%s", error);
        psg_async_op_done(op, -1);
        return;
    }
    psg_async_op_set_output(op, 0, mean);
    psg_tensor_destroy(&mean);
    if (indices) { /* a sparse accumulator's: its take has the ids as output 1 */
        psg_async_op_set_output(op, 1, indices);
        psg_tensor_destroy(&indices);
    }
    psg_async_op_done(op, 0);
}

/* Dense and sparse accumulators' take: a sparse one's kernel has two outputs. */
int psg_cpu_accumulator_take(psg_kernel_ctx_t *c) {
    psg_accumulator_t *a = psg_accumulator_from_handle(c->inputs[0]);
    if (!a) return -1;
    if (psg_accumulator_is_sparse(a) != (psg_node_num_outputs(c->node) == 2))
        return psg_error_set("accumulator '%s' is %s: take it with %s", psg_accumulator_name(a),
                             psg_accumulator_is_sparse(a) ? "sparse" : "dense",
                             psg_accumulator_is_sparse(a) ? "SparseAccumulatorTakeGradient"
                                                          : "AccumulatorTakeGradient");
    PSG_ASSERT(c->async);
    psg_accumulator_take_async(a, (int)psg_node_get_int(c->node, "num_required", 1),
                               psg_node_get_int(c->node, "timeout_ms", 0), take_done, c->async);
    return 0;
}

int psg_cpu_accumulator_set_global_step(psg_kernel_ctx_t *c) {
    psg_accumulator_t *a = psg_accumulator_from_handle(c->inputs[0]);
    int64_t step = 0;
    if (!a || scalar_i64(c, 1, &step) < 0) return -1;
    if (psg_node_get_int(c->node, "reset", 0))
        psg_accumulator_reset(a, step);
    else
        psg_accumulator_set_global_step(a, step);
    return 0;
}

/* n: AccumulatorSetRequired's and TokenQueueSetRepeat's count, in [1, INT32_MAX]. */
static int count_input(psg_kernel_ctx_t *c, int *n) {
    int64_t v = 0;
    if (scalar_i64(c, 1, &v) < 0) return -1;
    if (v < 1 || v > INT32_MAX)
        return psg_error_set("%s: n must be in [1, %d], got %lld", psg_node_name(c->node),
                             INT32_MAX, (long long)v);
    *n = (int)v;
    return 0;
}

int psg_cpu_accumulator_set_required(psg_kernel_ctx_t *c) {
    psg_accumulator_t *a = psg_accumulator_from_handle(c->inputs[0]);
    int n = 0;
    if (!a || count_input(c, &n) < 0) return -1;
    return psg_accumulator_set_required(a, n);
}

int psg_cpu_token_queue_set_repeat(psg_kernel_ctx_t *c) {
    psg_token_queue_t *q = psg_token_queue_from_handle(c->inputs[0]);
    int n = 0;
    if (!q || count_input(c, &n) < 0) return -1;
    return psg_token_queue_set_repeat(q, n);
}

/* Input 1: the live flags by rank (SspClockSetLive's, TokenQueueSetLive's); NULL, the error set. */
static const int32_t *live_flags(psg_kernel_ctx_t *c, int *n) {
    const psg_tensor_t *t = c->inputs[1];
    if (t->dtype != PSG_DT_I32) {
        psg_error_set("live flags must be i32");
        return NULL;
    }
    *n = (int)psg_tensor_numel(t);
    return psg_tensor_i32(t);
}

int psg_cpu_token_queue_set_live(psg_kernel_ctx_t *c) {
    psg_token_queue_t *q = psg_token_queue_from_handle(c->inputs[0]);
    int n = 0;
    const int32_t *live = q ? live_flags(c, &n) : NULL;
    return live ? psg_token_queue_set_live(q, live, n) : -1;
}

int psg_cpu_accumulator_num_accumulated(psg_kernel_ctx_t *c) {
    psg_accumulator_t *a = psg_accumulator_from_handle(c->inputs[0]);
    return a ? output_scalar_i32(c, psg_accumulator_num_accumulated(a)) : -1;
}

int psg_cpu_accumulator_close(psg_kernel_ctx_t *c) {
    psg_accumulator_t *a = psg_accumulator_from_handle(c->inputs[0]);
    if (!a) return -1;
    psg_accumulator_close(a);
    return 0;
}

int psg_cpu_token_queue(psg_kernel_ctx_t *c) {
    psg_token_queue_t *q = psg_token_queue_get(c->resources, resource_name(c->node));
    return q ? set_handle(c, psg_token_queue_handle(q)) : -1;
}

int psg_cpu_token_queue_enqueue_many(psg_kernel_ctx_t *c) {
    psg_token_queue_t *q = psg_token_queue_from_handle(c->inputs[0]);
    const psg_tensor_t *t = c->inputs[1];
    if (!q) return -1;
    if (t->dtype != PSG_DT_I64) return psg_error_set("tokens must be i64");
    int64_t n = psg_tensor_numel(t), lo = INT64_MAX;
    for (int64_t i = 0; i < n; i++) lo = psg_tensor_i64(t)[i] < lo ? psg_tensor_i64(t)[i] : lo;
    if (n > 0 && psg_node_get_int(c->node, "restart", 0)) psg_token_queue_restart(q, lo);
    return psg_token_queue_enqueue_many(q, psg_tensor_i64(t), (int)psg_tensor_numel(t),
                                        (int)psg_node_get_int(c->node, "repeat", 1),
                                        psg_node_get_int(c->node, "end_step", 0));
}

typedef struct {
    psg_async_op_t *op;
    struct timespec start;
} dequeue_t;

static void dequeue_done(void *arg, int64_t token, const char *error) {
    dequeue_t *d = arg;
    psg_async_op_t *op = d->op;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double waited =
        (double)(now.tv_sec - d->start.tv_sec) + (double)(now.tv_nsec - d->start.tv_nsec) * 1e-9;
    free(d);
    if (error) {
        psg_error_set("%s", error);
        psg_async_op_done(op, -1);
        return;
    }
    psg_tensor_t *t = psg_tensor_scalar_i64(token), *w = psg_tensor_scalar_f32((float)waited);
    if (!t || !w) {
        psg_tensor_destroy(&t);
        psg_tensor_destroy(&w);
        psg_error_set("out of memory");
        psg_async_op_done(op, -1);
        return;
    }
    psg_async_op_set_output(op, 0, t);
    psg_async_op_set_output(op, 1, w);
    psg_tensor_destroy(&t);
    psg_tensor_destroy(&w);
    psg_async_op_done(op, 0);
}

/* A wait's state, its start taken now; NULL with the error set. */
static dequeue_t *wait_begin(psg_kernel_ctx_t *c) {
    PSG_ASSERT(c->async);
    dequeue_t *d = malloc(sizeof *d);
    if (!d) {
        psg_error_set("out of memory");
        return NULL;
    }
    d->op = c->async;
    clock_gettime(CLOCK_MONOTONIC, &d->start);
    return d;
}

int psg_cpu_token_queue_dequeue(psg_kernel_ctx_t *c) {
    psg_token_queue_t *q = psg_token_queue_from_handle(c->inputs[0]);
    int64_t after = 0;
    if (!q || scalar_i64(c, 1, &after) < 0) return -1;
    dequeue_t *d = wait_begin(c);
    if (!d) return -1;
    psg_token_queue_dequeue_async(q, (int)psg_node_get_int(c->node, "worker", 0), after,
                                  psg_node_get_int(c->node, "timeout_ms", 0), dequeue_done, d);
    return 0;
}

int psg_cpu_token_queue_close(psg_kernel_ctx_t *c) {
    psg_token_queue_t *q = psg_token_queue_from_handle(c->inputs[0]);
    if (!q) return -1;
    const char *error = psg_node_get_str(c->node, "error", "");
    psg_token_queue_close(q, error[0] ? error : NULL);
    return 0;
}

int psg_cpu_ssp_clock(psg_kernel_ctx_t *c) {
    psg_ssp_clock_t *k = psg_ssp_clock_get(c->resources, resource_name(c->node),
                                           (int)psg_node_get_int(c->node, "workers", 0));
    return k ? set_handle(c, psg_ssp_clock_handle(k)) : -1;
}

int psg_cpu_ssp_clock_tick(psg_kernel_ctx_t *c) {
    psg_ssp_clock_t *k = psg_ssp_clock_from_handle(c->inputs[0]);
    return k ? psg_ssp_clock_tick(k, (int)psg_node_get_int(c->node, "worker", -1),
                                  (int)psg_node_get_int(c->node, "half", -1),
                                  psg_node_get_int(c->node, "delta", 0))
             : -1;
}

int psg_cpu_ssp_clock_reset(psg_kernel_ctx_t *c) {
    psg_ssp_clock_t *k = psg_ssp_clock_from_handle(c->inputs[0]);
    if (!k) return -1;
    psg_ssp_clock_reset(k);
    return 0;
}

int psg_cpu_ssp_clock_wait(psg_kernel_ctx_t *c) {
    psg_ssp_clock_t *k = psg_ssp_clock_from_handle(c->inputs[0]);
    int64_t want = 0;
    if (!k || scalar_i64(c, 1, &want) < 0) return -1;
    dequeue_t *d = wait_begin(c);
    if (!d) return -1;
    psg_ssp_clock_wait_async(
        k, (int)psg_node_get_int(c->node, "worker", 0), (int)psg_node_get_int(c->node, "half", 0),
        want, psg_node_get_int(c->node, "timeout_ms", 0), dequeue_done, d); /* least as the token */
    return 0;
}

int psg_cpu_ssp_clock_set_live(psg_kernel_ctx_t *c) {
    psg_ssp_clock_t *k = psg_ssp_clock_from_handle(c->inputs[0]);
    int n = 0;
    const int32_t *live = k ? live_flags(c, &n) : NULL;
    return live ? psg_ssp_clock_set_live(k, live, n) : -1;
}

int psg_cpu_count_accepted(psg_kernel_ctx_t *c) {
    int32_t n = 0;
    for (int i = 0; i < c->num_inputs; i++) {
        if (c->inputs[i]->dtype != PSG_DT_I32 || psg_tensor_numel(c->inputs[i]) != 1)
            return psg_error_set("input %d must be a scalar i32", i);
        n += psg_tensor_i32(c->inputs[i])[0] != 0;
    }
    return output_scalar_i32(c, n);
}

int psg_cpu_mailbox(psg_kernel_ctx_t *c) {
    psg_mailbox_t *m = psg_mailbox_get(c->resources, resource_name(c->node));
    return m ? set_handle(c, psg_mailbox_handle(m)) : -1;
}

int psg_cpu_mailbox_put(psg_kernel_ctx_t *c) {
    psg_mailbox_t *m = psg_mailbox_from_handle(c->inputs[0]);
    int64_t step = 0;
    if (!m || scalar_i64(c, 1, &step) < 0) return -1;
    return psg_mailbox_put(m, step, c->inputs[2]);
}

static void mailbox_take_done(void *arg, psg_tensor_t *value, const char *error) {
    psg_async_op_t *op = arg;
    if (!value) {
        psg_error_set_code(PSG_ERR_TIMEOUT, "%s", error);
        psg_async_op_done(op, -1);
        return;
    }
    const psg_node_t *n = psg_async_op_node(op);
    const psg_attr_t *sh = psg_node_attr(n, "shape");
    if (value->dtype != PSG_DT_F32 || !psg_shape_compatible(&value->shape, &sh->u.shape)) {
        char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
        psg_error_set("%s: got %s%s, takes f32%s", psg_node_name(n), psg_dtype_name(value->dtype),
                      psg_shape_str(&value->shape, a, sizeof a),
                      psg_shape_str(&sh->u.shape, b, sizeof b));
        psg_async_op_done(op, -1);
        return;
    }
    psg_async_op_set_output(op, 0, value);
    psg_async_op_done(op, 0);
}

int psg_cpu_mailbox_take(psg_kernel_ctx_t *c) {
    psg_mailbox_t *m = psg_mailbox_from_handle(c->inputs[0]);
    int64_t step = 0;
    if (!m || scalar_i64(c, 1, &step) < 0) return -1;
    PSG_ASSERT(c->async);
    psg_mailbox_take_async(m, step, psg_node_get_str(c->node, "from", ""),
                           psg_node_get_int(c->node, "timeout_ms", 0), mailbox_take_done, c->async);
    return 0;
}

int psg_cpu_shard_queue(psg_kernel_ctx_t *c) {
    psg_shard_queue_t *q = psg_shard_queue_get(
        c->resources, resource_name(c->node), psg_node_get_int(c->node, "shards", 0),
        psg_node_get_int(c->node, "epochs", 0), (uint64_t)psg_node_get_int(c->node, "seed", 0));
    return q ? set_handle(c, psg_shard_queue_handle(q)) : -1;
}

/* A peer's feeds checked here: worker, done and the dead processes by the queue. */
int psg_cpu_shard_queue_take(psg_kernel_ctx_t *c) {
    psg_shard_queue_t *q = psg_shard_queue_from_handle(c->inputs[0]);
    int64_t incarnation = 0, done = -1, shard = -1;
    if (!q || scalar_i64(c, 1, &incarnation) < 0 || scalar_i64(c, 2, &done) < 0) return -1;
    const psg_tensor_t *dead = c->inputs[3];
    if (dead->dtype != PSG_DT_I64) return psg_error_set("dead processes must be i64");
    int64_t n_dead = psg_tensor_numel(dead);
    if (n_dead > (1 << 20) || n_dead % 2)
        return psg_error_set("%lld values of dead processes: not (worker, incarnation) pairs, "
                             "or too many",
                             (long long)n_dead);
    int64_t worker = psg_node_get_int(c->node, "worker", -1);
    if (worker < 0 || worker > INT32_MAX) return psg_error_set("worker %lld", (long long)worker);
    bool finished = false;
    if (psg_shard_queue_take(q, (int)worker, (uint64_t)incarnation, done, psg_tensor_i64(dead),
                             n_dead / 2, &shard, &finished) < 0)
        return -1;
    int64_t n_held = 0;
    int64_t *held = psg_shard_queue_holders(q, &n_held);
    psg_shape_t sh = psg_shape_1d(2 + 2 * n_held);
    psg_tensor_t *o = held ? psg_tensor_new(PSG_DT_I64, &sh) : NULL;
    if (!o) {
        free(held);
        return held ? psg_error_set("out of memory") : -1;
    }
    psg_tensor_i64(o)[0] = shard;
    psg_tensor_i64(o)[1] = finished;
    memcpy(psg_tensor_i64(o) + 2, held, sizeof *held * (size_t)(2 * n_held));
    free(held);
    psg_kernel_set_output(c, 0, o);
    psg_tensor_destroy(&o);
    return 0;
}
