/* "halved", a strategy written as docs/sync.md ("Adding a strategy") says, added to the
 * table of a test binary (test_sync) the way a program adds its own: async whose update
 * applies each gradient times 1/2, counting its steps in its own state. Its file is this
 * one; its row is the registration at the bottom, which puts it after the built-in
 * strategies, where test_sync.c finds it by name as --sync would. */
#include "psgraph/error.h"
#include "psgraph/ops_math.h"
#include "sync/strategy.h"

#include <stdlib.h>

static int build_halved(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_endpoint_t half[64];
    if (b->n > 64) return psg_error_set("halved: %d gradients (at most 64)", b->n);
    for (int i = 0; i < b->n; i++) half[i] = psg_scale(b->g, "halved/grad", b->grads[i], 0.5);
    return psg_optimizer_apply_gradients(b->opt, b->g, b->n, half, b->vars, &out->train_op);
}

/* The default step, counted in w->state. */
static int step_halved(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    int64_t *count = w->state;
    if (!count && !(w->state = count = calloc(1, sizeof *count))) return -1;
    if (psg_sync_step_default(w, loss, st) < 0) return -1;
    ++*count;
    return 0;
}

const psg_sync_strategy_t psg_sync_strategy_halved = {.name = "halved",
                                                      .summary = "async at half the rate",
                                                      .build = build_halved,
                                                      .step = step_halved};

__attribute__((constructor)) static void add_halved(void) {
    PSG_ASSERT(psg_sync_strategy_register(&psg_sync_strategy_halved) == 0);
}
