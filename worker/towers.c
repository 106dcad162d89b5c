/* Towers on the devices of one process: the model built once per device with
 * shared variables, per-tower gradients averaged in-graph on the variables'
 * device, one optimizer update per variable; and the split of a batch into
 * the towers' feeds. Not the training loop (trainer.c), which calls these. */
#include "psgraph/towers.h"
#include "psgraph/autodiff.h"
#include "psgraph/device.h"
#include "psgraph/error.h"
#include "psgraph/op.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_math.h"
#include "psgraph/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device function of one tower: ops that create or use a variable go to
 * the variables' device, everything else to the tower's; an explicit device
 * wins. */
typedef struct {
    const char *tower_device;
    const char *variable_device;
} tower_place_t;

static const char *tower_device_fn(void *ctx, const psg_graph_t *g, const psg_node_t *n) {
    const tower_place_t *tp = ctx;
    if (psg_node_device(n)[0]) return NULL;
    if (psg_node_def(n) && (psg_node_def(n)->flags & PSG_OP_VARIABLE)) return tp->variable_device;
    for (int i = 0; i < psg_node_num_inputs(n); i++) {
        psg_endpoint_t e = psg_node_input(n, i);
        if (psg_graph_dtype(g, e) == PSG_DT_RESOURCE)
            return psg_node_device(psg_graph_node(g, e.node));
    }
    return tp->tower_device;
}

static int check_config(const psg_towers_config_t *c) {
    if (c->num_towers < 1 || c->num_towers > PSG_MAX_TOWERS)
        return psg_error_set("--towers %d: must be 1..%d", c->num_towers, PSG_MAX_TOWERS);
    if (c->device == PSG_TOWERS_GPU && psg_gpu_count() < c->num_towers)
        return psg_error_set("%d GPU tower%s asked for, this process has %d GPU%s (%s)",
                             c->num_towers, c->num_towers == 1 ? "" : "s", psg_gpu_count(),
                             psg_gpu_count() == 1 ? "" : "s", psg_gpu_status());
    return 0;
}

/* Tower k's model (and its gradients with respect to vars, once they are
 * known: n_vars 0 on tower 0's first pass) under its device function. */
static int build_tower(psg_graph_t *g, const psg_towers_config_t *c, int k, tower_place_t *tp,
                       psg_model_t *m) {
    char scope[32];
    snprintf(scope, sizeof scope, "tower_%d", k);
    psg_graph_push_device_fn(g, tower_device_fn, tp);
    int rc = 0;
    if (k > 0) rc = psg_graph_push_scope(g, scope);
    if (rc == 0) {
        rc = c->build ? c->build(c->build_ctx, g, k, m)
                      : psg_model_build_with(
                            g, c->model, c->height, c->width, c->channels, c->classes, c->seed,
                            &(psg_model_options_t){.dense_shard_bytes = c->dense_shard_bytes}, m);
        if (k > 0) psg_graph_pop_scope(g);
    }
    psg_graph_pop_device(g);
    return rc < 0 ? psg_error_wrap("tower %d", k) : 0;
}

static int tower_gradients(psg_graph_t *g, int k, tower_place_t *tp, const psg_model_t *m, int n,
                           const psg_endpoint_t *vars, psg_endpoint_t *grads) {
    char scope[32];
    snprintf(scope, sizeof scope, "tower_%d", k);
    psg_graph_push_device_fn(g, tower_device_fn, tp);
    int rc = k > 0 ? psg_graph_push_scope(g, scope) : 0;
    if (rc == 0) {
        rc = psg_loss_gradients(g, m->loss, n, vars, grads);
        if (k > 0) psg_graph_pop_scope(g);
    }
    psg_graph_pop_device(g);
    return rc < 0 ? psg_error_wrap("gradients of tower %d", k) : 0;
}

/* mean over the towers of xs[k] (one endpoint per tower), named name/... */
static psg_endpoint_t tower_mean(psg_graph_t *g, const char *name, int k, const psg_endpoint_t *xs,
                                 bool scale) {
    if (k == 1) return xs[0];
    char buf[160];
    snprintf(buf, sizeof buf, "%.150s/sum", name);
    psg_endpoint_t s = psg_add_n(g, buf, k, xs);
    if (!scale) return s;
    snprintf(buf, sizeof buf, "%.150s/mean", name);
    return psg_scale(g, buf, s, 1.0 / k);
}

/* The towers' endpoints of the same kind: loss (0) or correct (1). */
static void tower_outputs(const psg_towers_t *t, int which, psg_endpoint_t *out) {
    for (int k = 0; k < t->num_towers; k++)
        out[k] = which ? t->towers[k].correct : t->towers[k].loss;
}

int psg_towers_build_gradients(psg_graph_t *g, const psg_towers_config_t *c, psg_towers_t *t,
                               int *n_out, psg_endpoint_t **grads_out, psg_endpoint_t **vars_out) {
    memset(t, 0, sizeof *t);
    t->train_op = -1;
    *n_out = 0;
    *grads_out = *vars_out = NULL;
    if (check_config(c) < 0) return -1;
    int K = c->num_towers;
    const char *type = c->device == PSG_TOWERS_GPU ? "GPU" : "CPU";
    char devs[PSG_MAX_TOWERS][32];
    tower_place_t tp[PSG_MAX_TOWERS];
    snprintf(t->variable_device, sizeof t->variable_device, "/device:%s:0", type);
    /* in a cluster the variables' device is the ps task's CPU, not the worker's GPU 0 */
    const char *var_dev = c->variable_device ? c->variable_device : t->variable_device;
    for (int k = 0; k < K; k++) {
        snprintf(devs[k], sizeof devs[k], "/device:%s:%d", type, k);
        tp[k] = (tower_place_t){devs[k], var_dev};
    }
    t->num_towers = K;
    for (int k = 0; k < K; k++)
        if (build_tower(g, c, k, &tp[k], &t->towers[k]) < 0) return -1;
    int n = 0;
    const int *ids = psg_graph_collection(g, "trainable_variables", &n);
    if (n == 0) return psg_error_set("the model has no trainable variables");
    psg_endpoint_t *vars = malloc(sizeof *vars * (size_t)n), *avg = malloc(sizeof *avg * (size_t)n);
    psg_endpoint_t(*grads)[n] = malloc(sizeof *grads * (size_t)K);
    if (!vars || !avg || !grads) {
        free(vars);
        free(avg);
        free(grads);
        return psg_error_set("out of memory");
    }
    for (int i = 0; i < n; i++) vars[i] = (psg_endpoint_t){ids[i], 0};
    int rc = 0;
    for (int k = 0; k < K && rc == 0; k++)
        rc = tower_gradients(g, k, &tp[k], &t->towers[k], n, vars, grads[k]);
    /* the average and the summaries sit on tower 0's device: in a cluster the
     * worker's, so one gradient per variable crosses to the ps */
    psg_endpoint_t per_tower[PSG_MAX_TOWERS];
    psg_graph_push_device_fn(g, tower_device_fn, &tp[0]);
    for (int i = 0; i < n && rc == 0; i++) {
        char name[160];
        snprintf(name, sizeof name, "average_gradients/%d", i);
        for (int k = 0; k < K; k++) per_tower[k] = grads[k][i];
        avg[i] = psg_endpoint_valid(per_tower[0]) ? tower_mean(g, name, K, per_tower, true)
                                                  : PSG_NO_ENDPOINT;
    }
    tower_outputs(t, 0, per_tower);
    t->loss = tower_mean(g, "towers/loss", K, per_tower, true);
    tower_outputs(t, 1, per_tower);
    t->correct = tower_mean(g, "towers/correct", K, per_tower, false);
    psg_graph_pop_device(g);
    free(grads);
    if (rc == 0) rc = psg_graph_status(g);
    if (rc < 0) {
        free(vars);
        free(avg);
        return -1;
    }
    *n_out = n;
    *grads_out = avg;
    *vars_out = vars;
    return 0;
}

int psg_towers_build(psg_graph_t *g, const psg_towers_config_t *c, psg_optimizer_t *opt,
                     psg_towers_t *t) {
    int n;
    psg_endpoint_t *grads, *vars;
    if (psg_towers_build_gradients(g, c, t, &n, &grads, &vars) < 0) return -1;
    /* the update beside the variables */
    tower_place_t tp = {t->variable_device,
                        c->variable_device ? c->variable_device : t->variable_device};
    psg_graph_push_device_fn(g, tower_device_fn, &tp);
    int rc = psg_optimizer_apply_gradients(opt, g, n, grads, vars, &t->train_op);
    psg_graph_pop_device(g);
    free(grads);
    free(vars);
    if (rc < 0) return -1;
    if (psg_graph_status(g) < 0) return -1;
    psg_placement_options_t po = {.allow_soft_placement = true};
    return psg_place(g, &po);
}

void psg_towers_feeds(const psg_towers_t *t, psg_endpoint_t *feeds) {
    for (int k = 0; k < t->num_towers; k++) {
        feeds[2 * k] = t->towers[k].images;
        feeds[2 * k + 1] = t->towers[k].labels;
    }
}

/* rows [r0, r1) of x as a view of its buffer */
static psg_tensor_t *row_view(psg_tensor_t *x, int64_t r0, int64_t r1) {
    psg_shape_t s = x->shape;
    int64_t row_elems = s.dims[0] ? psg_tensor_numel(x) / s.dims[0] : 0;
    size_t off = (size_t)((char *)x->data - (char *)x->buf->data) +
                 (size_t)(r0 * row_elems) * psg_dtype_size(x->dtype);
    s.dims[0] = r1 - r0;
    return psg_tensor_from_buffer(x->dtype, &s, x->buf, off);
}

int psg_towers_split(const psg_towers_t *t, psg_tensor_t *images, psg_tensor_t *labels,
                     psg_tensor_t **values) {
    int K = t->num_towers;
    if (images->shape.rank < 1 || labels->shape.rank != 1 ||
        images->shape.dims[0] != labels->shape.dims[0])
        return psg_error_set("a batch needs images (N, ...) and labels (N) of the same N");
    int64_t N = images->shape.dims[0];
    if (N < K) return psg_error_set("a batch of %lld rows cannot feed %d towers", (long long)N, K);
    for (int k = 0; k < 2 * K; k++) values[k] = NULL;
    for (int k = 0; k < K; k++) {
        int64_t r0 = N * k / K, r1 = N * (k + 1) / K;
        values[2 * k] = row_view(images, r0, r1);
        values[2 * k + 1] = values[2 * k] ? row_view(labels, r0, r1) : NULL;
        if (!values[2 * k + 1]) {
            for (int j = 0; j < 2 * K; j++) psg_tensor_destroy(&values[j]);
            return psg_error_wrap("splitting the batch");
        }
    }
    return 0;
}
