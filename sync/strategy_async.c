/* The "async" strategy: every worker applies its own gradient at once with
 * the wrapped optimizer (Downpour / TensorFlow's default between-graph
 * training); nothing waits, nothing is dropped. Each step fetches the global
 * step its reads saw and the one its update made: the staleness of its
 * gradient. A lone worker asks for its next step ahead (its reads of each variable after
 * this step's update of it); steps overlap only with --max-staleness 1. */
#include "psgraph/error.h"
#include "sync/strategy.h"

static int build_async(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    if (psg_optimizer_apply_gradients(b->opt, b->g, b->n, b->grads, b->vars, &out->train_op) < 0)
        return -1;
    out->global_step =
        psg_sync_read_global_step(b->g, "sync_replicas/global_step", b->global_step, -1);
    if (!psg_endpoint_valid(out->global_step)) return -1;
    out->overlap = b->cfg->opt.max_staleness > 0;
    /* One worker: the next step is asked for ahead even without overlap; its reads wait for
     * this step's update of each variable, so they read what one step at a time reads.
     * Not with more: a step asked for ahead takes its place in each variable's order when
     * asked, so it would miss the other workers' updates made meanwhile (staleness). */
    out->ahead = b->cfg->num_workers == 1;
    return psg_sync_staleness_pair(b->g, b->global_step, out->train_op, out);
}

static const char *const async_options[] = {"--max-staleness", PSG_SYNC_COMPRESS_OPTIONS, NULL};

const psg_sync_strategy_t psg_sync_strategy_async = {
    .name = "async",
    .summary = "asynchronous SGD: each worker applies its gradient as soon as it has it",
    .options = async_options,
    .lost_workers = psg_sync_lost_any,
    .build = build_async,
    .compress = true,
};
