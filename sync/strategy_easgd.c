/* The "easgd" strategy: elastic averaging SGD (Zhang, Choromanska, LeCun,
 * 2015), asynchronous form. As local SGD, the model's variables are each
 * worker's own; the ps holds a center variable per variable
 * ("easgd/center/<var>", initialized with the model's initial value).
 * Every tau steps a worker sends its copy x to the ps, which computes
 * d = alpha (x - center) and adds it to the center as graph ops beside the
 * center (read and add in one run, which the ps's executor orders against
 * every other run on that variable: atomic per variable); d comes back and
 * the worker subtracts it from x. No barrier, no chief. */
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "sync/strategy.h"

#include <stdlib.h>
#include <string.h>

/* Variable i's center on the ps, its initializer, and the elastic exchange. */
static int build_one(const psg_sync_build_t *b, int i, int *ops) {
    psg_graph_t *g = b->g;
    const char *v = psg_node_name(psg_graph_node(g, b->vars[i].node));
    char name[512];
    psg_endpoint_t x0 = psg_sync_initial_value(g, b->vars[i]);
    if (!psg_endpoint_valid(x0)) return psg_error_set("easgd: variable '%s' has no initializer", v);
    snprintf(name, sizeof name, "easgd/center/%s", v); /* not under v: beside v is the worker */
    psg_endpoint_t c = psg_var_handle(g, name, PSG_DT_F32, psg_graph_shape(g, b->vars[i]));
    psg_graph_add_to_collection(g, "variables", c.node);
    snprintf(name, sizeof name, "easgd/center/%s/init", v);
    psg_graph_add_to_collection(g, "init", psg_assign(g, name, c, x0));
    snprintf(name, sizeof name, "easgd/%s/own", v);
    bool here = psg_sync_push_device_of(g, b->vars[i]);
    psg_endpoint_t x = psg_read_variable(g, name, b->vars[i]);
    if (here) psg_graph_pop_device(g);
    /* on the ps, beside the center: d = alpha (x - center); center += d */
    bool there = psg_sync_push_device_of(g, c);
    snprintf(name, sizeof name, "easgd/center/%s/read", v);
    psg_endpoint_t cr = psg_read_variable(g, name, c);
    snprintf(name, sizeof name, "easgd/%s/diff", v);
    psg_endpoint_t diff = psg_sub(g, name, x, cr);
    snprintf(name, sizeof name, "easgd/%s/elastic", v);
    psg_endpoint_t d = psg_scale(g, name, diff, b->cfg->opt.elastic_alpha);
    snprintf(name, sizeof name, "easgd/center/%s/add", v);
    ops[0] = psg_assign_add(g, name, c, d);
    if (there) psg_graph_pop_device(g);
    /* on the worker: x -= d */
    here = psg_sync_push_device_of(g, b->vars[i]);
    snprintf(name, sizeof name, "easgd/%s/back", v);
    psg_endpoint_t nd = psg_scale(g, name, d, -1.0);
    snprintf(name, sizeof name, "easgd/%s/pull", v);
    ops[1] = psg_assign_add(g, name, b->vars[i], nd);
    if (here) psg_graph_pop_device(g);
    return psg_graph_status(g);
}

static int build_easgd(const psg_sync_build_t *b, psg_sync_graph_t *out) {
    psg_graph_t *g = b->g;
    char dev[256];
    snprintf(dev, sizeof dev, "%s", psg_node_device(psg_graph_node(g, b->vars[0].node)));
    if (psg_sync_local_update(b, &out->train_op) < 0) return -1;
    if ((out->local_init_op = psg_sync_local_inits(g, dev)) < 0) return -1;
    int *ops = malloc(sizeof *ops * 2 * (size_t)b->n);
    if (!ops) return psg_error_set("out of memory");
    int rc = 0;
    for (int i = 0; i < b->n && rc == 0; i++) rc = build_one(b, i, ops + 2 * i);
    if (rc == 0) {
        out->calls[0].targets[0] = psg_group(g, "easgd/exchange", 2 * b->n, ops);
        out->calls[0].n_targets = 1;
        out->num_calls = 1;
        out->global_step = psg_sync_read_global_step(g, "easgd/global_step", b->global_step, -1);
        rc = out->calls[0].targets[0] < 0 || psg_graph_error(g) ? -1 : 0;
    }
    free(ops);
    out->comm_per_step = 1.0 / (double)b->cfg->opt.local_steps;
    return rc;
}

/* A local step; every tau steps, the elastic exchange with the center. */
static int step_easgd(psg_sync_worker_t *w, psg_tensor_t **loss, psg_sync_step_t *st) {
    psg_tensor_t *fetched[1] = {0};
    if (w->run(w->ctx, 0, NULL, fetched) < 0) return -1;
    *loss = fetched[0];
    memset(st, 0, sizeof *st);
    st->local_step = w->local_step;
    st->next_step = w->local_step + 1;
    st->used = true;
    st->num_accepted = st->num_vars = w->sg->num_vars;
    st->staleness = 0; /* its gradient updates its own copy at once, as local SGD's */
    w->local_step++;
    if ((w->steps + 1) % w->cfg->opt.local_steps != 0) return 0;
    if (w->run(w->ctx, 1, NULL, NULL) == 0) return 0;
    psg_tensor_destroy(loss);
    return -1;
}

static int check_easgd(const psg_sync_config_t *cfg, int num_required) {
    (void)num_required;
    double a = cfg->opt.elastic_alpha;
    return a > 0 && a <= 1 ? 0 : psg_error_set("--elastic-alpha %g: must be in (0, 1]", a);
}

static const char *const easgd_options[] = {"--elastic-alpha", "--local-steps", NULL};

const psg_sync_strategy_t psg_sync_strategy_easgd = {
    .name = "easgd",
    .summary = "elastic averaging: local steps, and every tau steps each copy and a center on "
               "the ps pull toward each other by alpha",
    .options = easgd_options,
    .check = check_easgd,
    .lost_workers = psg_sync_lost_any,
    .build = build_easgd,
    .step = step_easgd,
    .local_model = true,
};
