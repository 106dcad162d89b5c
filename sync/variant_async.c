/* The "async" variant: every worker applies its own gradient at once with
 * the wrapped optimizer (Downpour / TensorFlow's default between-graph
 * training); nothing waits, nothing is dropped. */
#include "psgraph/error.h"
#include "sync/variant.h"

static int build_async(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    if (psg_optimizer_apply_gradients(b->opt, b->g, b->n, b->grads, b->vars, &out->train_op) < 0)
        return -1;
    out->global_step =
        psg_sync_read_global_step(b->g, "sync_replicas/global_step", b->global_step, -1);
    return psg_endpoint_valid(out->global_step) ? 0 : -1;
}

const psg_sync_variant_t psg_sync_variant_async = {
    "async",
    "asynchronous SGD: each worker applies its gradient as soon as it has it",
    build_async,
};
