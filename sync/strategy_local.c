/* The "local" strategy: local SGD (Stich, 2019; post-local SGD, Lin et al.,
 * 2020). The model's variables are each worker's own (the trainer builds
 * them under the worker's device); every step applies the optimizer to them
 * with no traffic; every H steps (every step during the first --local-after
 * steps) the workers average them through the ps with sync's protocol: each
 * offers d = global - local to the accumulators of the ps's copy, the chief
 * applies SGD with rate 1 to the mean (global - mean(d) = mean(local)), and
 * each worker copies the new global back. H = 1 with plain SGD is sync's
 * averaged gradient step. Not a strategy of the ps's copy's own optimizer
 * state (momentum stays each worker's). */
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "sync/strategy.h"

#include <stdlib.h>
#include <string.h>

/* The update's nodes and slots on the worker, beside its own variables; a node on a
 * resource (the global step's increment, never run) beside that resource. */
static const char *own_device_fn(void *ctx, const psg_graph_t *g, const psg_node_t *n) {
    if (psg_node_device(n)[0]) return NULL;
    for (int i = 0; i < psg_node_num_inputs(n); i++) {
        psg_endpoint_t e = psg_node_input(n, i);
        if (psg_graph_dtype(g, e) == PSG_DT_RESOURCE)
            return psg_node_device(psg_graph_node(g, e.node));
    }
    return ctx;
}

/* The optimizer's update of the worker's own variables, without the global step's
 * increment (the global step counts averages): a group of the update's other members. */
int psg_sync_local_update(const psg_sync_build_t *b, int *train_op) {
    psg_graph_t *g = b->g;
    char dev[256];
    snprintf(dev, sizeof dev, "%s", psg_node_device(psg_graph_node(g, b->vars[0].node)));
    psg_graph_push_device_fn(g, own_device_fn, dev);
    int update = -1,
        rc = psg_optimizer_apply_gradients(b->opt, g, b->n, b->grads, b->vars, &update);
    psg_graph_pop_device(g);
    if (rc < 0) return -1;
    const psg_node_t *grp = psg_graph_node(g, update);
    int nc = psg_node_num_controls(grp), m = 0, *ids = malloc(sizeof *ids * (size_t)(nc + 1));
    if (!ids) return psg_error_set("out of memory");
    for (int j = 0; j < nc; j++) {
        int c = psg_node_control(grp, j);
        if (strcmp(psg_node_op(psg_graph_node(g, c)), "IncrementVariable")) ids[m++] = c;
    }
    *train_op = psg_group(g, "local_sgd/update", m, ids);
    free(ids);
    return *train_op < 0 ? -1 : 0;
}

/* The initializers of the variables on the worker's device (its own, and their slots). */
int psg_sync_local_inits(psg_graph_t *g, const char *dev) {
    int n = 0;
    const int *init = psg_graph_collection(g, "init", &n);
    int *ids = malloc(sizeof *ids * (size_t)(n + 1)), m = 0;
    if (!ids) return psg_error_set("out of memory");
    for (int i = 0; i < n; i++) {
        const psg_node_t *a = psg_graph_node(g, init[i]);
        if (psg_node_num_inputs(a) < 1) continue;
        psg_endpoint_t h = psg_node_input(a, 0);
        if (!strcmp(psg_node_device(psg_graph_node(g, h.node)), dev)) ids[m++] = init[i];
    }
    int op = psg_group(g, "local_sgd/init_own", m, ids);
    free(ids);
    return op;
}

psg_endpoint_t psg_sync_initial_value(psg_graph_t *g, psg_endpoint_t v) {
    int n = 0;
    const int *init = psg_graph_collection(g, "init", &n);
    for (int i = 0; i < n; i++) {
        const psg_node_t *a = psg_graph_node(g, init[i]);
        if (psg_node_num_inputs(a) >= 2 && psg_node_input(a, 0).node == v.node)
            return psg_node_input(a, 1);
    }
    return PSG_NO_ENDPOINT;
}

/* The ps's copy of each variable, starting at the model's initial value (DiLoCo's first outer
 * gradient is x0 - mean(local): from zeros, its outer step at lr 0.7 shrank the model to 0.7 of
 * the workers' mean), d = global - local for the averaging, and the pull. */
static int build_globals(const psg_sync_build_t *b, psg_endpoint_t *globals, psg_endpoint_t *d,
                         int *pulls) {
    psg_graph_t *g = b->g;
    char name[512];
    for (int i = 0; i < b->n; i++) {
        const char *v = psg_node_name(psg_graph_node(g, b->vars[i].node));
        psg_endpoint_t x0 = psg_sync_initial_value(g, b->vars[i]);
        if (!psg_endpoint_valid(x0))
            return psg_error_set("--sync %s: variable '%s' has no initializer",
                                 b->cfg->strategy ? b->cfg->strategy : "local", v);
        snprintf(name, sizeof name, "local_sgd/global/%s",
                 v); /* not under v: beside v is the worker */
        globals[i] = psg_var_handle(g, name, PSG_DT_F32, psg_graph_shape(g, b->vars[i]));
        psg_graph_add_to_collection(g, "variables", globals[i].node);
        snprintf(name, sizeof name, "local_sgd/global/%s/init", v);
        psg_graph_add_to_collection(g, "init", psg_assign(g, name, globals[i], x0));
        snprintf(name, sizeof name, "local_sgd/global/%s/read", v);
        bool on_ps = psg_sync_push_device_of(g, globals[i]);
        psg_endpoint_t gr = psg_read_variable(g, name, globals[i]);
        if (on_ps) psg_graph_pop_device(g);
        bool pushed = psg_sync_push_device_of(g, b->vars[i]);
        snprintf(name, sizeof name, "%s/local/read", v);
        psg_endpoint_t lr = psg_read_variable(g, name, b->vars[i]);
        snprintf(name, sizeof name, "%s/to_global", v);
        d[i] = psg_sub(g, name, gr, lr);
        snprintf(name, sizeof name, "%s/pull", v);
        pulls[i] = psg_assign(g, name, b->vars[i], gr);
        if (pushed) psg_graph_pop_device(g);
    }
    return psg_graph_status(g);
}

/* The average every H steps: sync's protocol on the ps's copies (calls 1 and 2), the chief
 * applying the outer optimizer oc to the mean of the d. */
static int build_average(const psg_sync_build_t *b, psg_sync_graph_t *out,
                         const psg_endpoint_t *globals, const psg_endpoint_t *d, const int *pulls,
                         const psg_optimizer_config_t *oc) {
    psg_optimizer_t *sgd = psg_optimizer_new(oc);
    if (!sgd) return -1;
    psg_sync_config_t cfg = *b->cfg;
    cfg.total_steps = 0; /* the global step counts averages: training ends by the close */
    psg_sync_build_t ab = *b;
    ab.cfg = &cfg;
    ab.opt = sgd;
    ab.grads = d;
    ab.vars = globals;
    psg_sync_graph_t avg = *out;
    int rc = psg_sync_build_sync(&ab, &avg);
    psg_optimizer_destroy(&sgd);
    if (rc < 0) return -1;
    out->calls[0] = (__typeof__(out->calls[0])){.n_feeds = 1, .n_fetches = 3, .n_targets = 1};
    out->calls[0].feeds[0] = avg.local_step;
    out->calls[0].fetches[0] = avg.num_accepted;
    out->calls[0].fetches[1] = avg.next_step;
    out->calls[0].fetches[2] = avg.token_wait;
    out->calls[0].targets[0] = avg.train_op;
    out->calls[1].targets[0] = psg_group(b->g, "local_sgd/pull", b->n, pulls);
    out->calls[1].n_targets = 1;
    out->num_calls = 2;
    out->chief_op = avg.chief_op;
    out->chief_global_step = avg.chief_global_step;
    out->chief_init_op = avg.chief_init_op;
    out->close_op = avg.close_op;
    out->global_step = avg.global_step;
    out->set_live_op = avg.set_live_op;
    out->live_required = avg.live_required;
    out->live_mask = avg.live_mask;
    return out->calls[1].targets[0] < 0 ? -1 : 0;
}

int psg_sync_build_local(const psg_sync_build_t *b, psg_sync_graph_t *out,
                         const psg_optimizer_config_t *outer) {
    psg_graph_t *g = b->g;
    char dev[256];
    snprintf(dev, sizeof dev, "%s", psg_node_device(psg_graph_node(g, b->vars[0].node)));
    if (psg_sync_local_update(b, &out->train_op) < 0) return -1;
    if ((out->local_init_op = psg_sync_local_inits(g, dev)) < 0) return -1;
    psg_endpoint_t *mem = malloc(sizeof *mem * 2 * (size_t)b->n);
    int *pulls = malloc(sizeof *pulls * (size_t)b->n);
    int rc =
        mem && pulls ? build_globals(b, mem, mem + b->n, pulls) : psg_error_set("out of memory");
    if (rc == 0) rc = build_average(b, out, mem, mem + b->n, pulls, outer);
    free(mem);
    free(pulls);
    out->comm_per_step = 1.0 / (double)b->cfg->opt.local_steps;
    return rc;
}

/* Local SGD's outer step: SGD with rate 1 on the mean of global - local, the mean. */
static int build_local(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_optimizer_config_t oc = psg_optimizer_defaults("sgd");
    oc.learning_rate = 1;
    oc.check_numerics = false;
    return psg_sync_build_local(b, out, &oc);
}

int psg_sync_step_local(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    const psg_sync_options_t *o = &w->cfg->opt;
    int64_t j = w->steps + 1, local_step = w->local_step;
    const psg_sync_graph_t *sg = w->sg;
    psg_tensor_t *fetched[1] = {0};
    if (w->run(w->ctx, 0, NULL, fetched) < 0) return -1;
    *loss = fetched[0];
    memset(st, 0, sizeof *st);
    st->local_step = local_step;
    st->next_step = local_step;
    st->used = true;
    st->num_accepted = st->num_vars = sg->num_vars;
    st->staleness = -1;
    bool due = j <= o->local_after || (j - o->local_after) % o->local_steps == 0;
    if (!due) return 0;
    psg_tensor_t *ls = psg_tensor_scalar_i64(local_step), *f[3] = {0};
    int rc = ls ? w->run(w->ctx, 1, &ls, f) : psg_error_set("out of memory");
    psg_tensor_destroy(&ls);
    psg_sync_graph_t view = *sg; /* the average's fetches, read as sync's */
    view.num_accepted = sg->calls[0].fetches[0];
    view.next_step = sg->calls[0].fetches[1];
    view.token_wait = sg->calls[0].fetches[2];
    view.read_step = view.applied_step = PSG_NO_ENDPOINT;
    view.n_step_fetches = 0;
    if (rc == 0) rc = psg_sync_step_read(&view, f, local_step, 0, st);
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&f[i]);
    if (rc == 0 && st->next_step >= 0) rc = w->run(w->ctx, 2, NULL, NULL);
    if (rc < 0) {
        psg_tensor_destroy(loss);
        return -1;
    }
    w->local_step = st->next_step;
    return 0;
}

static const char *const local_options[] = {"--local-steps", "--local-after", "--backup-workers",
                                            NULL};

const psg_sync_strategy_t psg_sync_strategy_local = {
    .name = "local",
    .summary = "local SGD: each worker takes H steps on its own copy, then the copies are "
               "averaged through the ps",
    .options = local_options,
    .lost_workers = psg_sync_lost_any,
    .build = build_local,
    .step = psg_sync_step_local,
    .chief_runner = true,
    .local_model = true,
};
