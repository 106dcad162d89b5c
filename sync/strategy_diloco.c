/* The "diloco" strategy: DiLoCo (Douillard et al., 2023), local SGD whose outer step is
 * Nesterov momentum. Each worker takes H steps of the inner optimizer on its own copy; then
 * the pseudo-gradient, the mean over the workers of global - local, is averaged through the
 * ps with sync's protocol (strategy_local.c's graph) and the chief applies the outer
 * optimizer to the ps's copy: v = m v + delta, global -= lr (delta + m v) (TensorFlow's
 * Momentum with use_nesterov, its slot beside the copy on the ps); each worker pulls the new
 * global. With --outer-lr 1 and --outer-momentum 0 it is local SGD. Not the inner
 * optimizer (the trainer's --optimizer, each worker's own state). */
#include "psgraph/error.h"
#include "sync/strategy.h"

static int build_diloco(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_optimizer_config_t oc = psg_optimizer_defaults("momentum");
    oc.learning_rate = (float)b->cfg->opt.outer_lr;
    oc.momentum = (float)b->cfg->opt.outer_momentum;
    oc.use_nesterov = true;
    oc.check_numerics = false;
    return psg_sync_build_local(b, out, &oc);
}

static int check_diloco(const psg_sync_config_t *cfg, int num_required) {
    (void)num_required;
    const psg_sync_options_t *o = &cfg->opt;
    if (!(o->outer_lr > 0)) return psg_error_set("--outer-lr %g: must be > 0", o->outer_lr);
    if (!(o->outer_momentum >= 0 && o->outer_momentum < 1))
        return psg_error_set("--outer-momentum %g: must be in [0, 1)", o->outer_momentum);
    return 0;
}

static const char *const diloco_options[] = {
    "--local-steps", "--outer-lr", "--outer-momentum", "--local-after", "--backup-workers", NULL};

const psg_sync_strategy_t psg_sync_strategy_diloco = {
    .name = "diloco",
    .summary = "DiLoCo: local SGD whose outer step is Nesterov momentum on the averaged "
               "pseudo-gradient, on the ps",
    .options = diloco_options,
    .check = check_diloco,
    .lost_workers = psg_sync_lost_any,
    .build = build_diloco,
    .step = psg_sync_step_local,
    .chief_runner = true,
    .local_model = true,
};
