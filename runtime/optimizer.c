/* Optimizers: wire the update ops of ops/train.c to the gradients of a loss,
 * with slot variables named as TensorFlow's, Adam's beta powers, the global
 * step and one NoOp train op. Builds graph nodes only; it computes nothing
 * and is not the training loop. */
#include "psgraph/optimizer.h"
#include "psgraph/autodiff.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/ops_array.h"
#include "psgraph/ops_sparse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OPT_SGD, OPT_MOMENTUM, OPT_RMSPROP, OPT_ADAM, OPT_ADAGRAD, OPT_FTRL } opt_kind_t;

static const struct {
    const char *kind, *name, *op;
} kinds[] = {
    [OPT_SGD] = {"sgd", "GradientDescent", "ApplyGradientDescent"},
    [OPT_MOMENTUM] = {"momentum", "Momentum", "ApplyMomentum"},
    [OPT_RMSPROP] = {"rmsprop", "RMSProp", "ApplyRMSProp"},
    [OPT_ADAM] = {"adam", "Adam", "ApplyAdam"},
    [OPT_ADAGRAD] = {"adagrad", "Adagrad", "ApplyAdagrad"},
    [OPT_FTRL] = {"ftrl", "Ftrl", "ApplyFtrl"},
};
#define NUM_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

struct psg_optimizer {
    psg_optimizer_config_t cfg;
    opt_kind_t kind;
    psg_endpoint_t lr_tensor; /* PSG_NO_ENDPOINT: use cfg.learning_rate */
};

psg_optimizer_config_t psg_optimizer_defaults(const char *kind) {
    psg_optimizer_config_t c = {
        .kind = kind,
        .learning_rate = 0.01f,
        .momentum = 0.9f,
        .rho = 0.9f,
        .epsilon = 1e-8f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .initial_accumulator = 0.1f,
        .lr_power = -0.5f,
        .check_numerics = true,
    };
    if (kind && !strcmp(kind, "rmsprop")) {
        c.momentum = 0.0f;
        c.epsilon = 1e-10f;
    }
    return c;
}

psg_optimizer_t *psg_optimizer_new(const psg_optimizer_config_t *cfg) {
    int k = 0;
    while (k < NUM_KINDS && !(cfg->kind && !strcmp(cfg->kind, kinds[k].kind))) k++;
    if (k == NUM_KINDS) {
        psg_error_set("unknown optimizer '%s' (sgd, momentum, rmsprop, adam, adagrad, ftrl)",
                      cfg->kind ? cfg->kind : "(null)");
        return NULL;
    }
    const char *bad = NULL;
    if (!(cfg->learning_rate >= 0) || !isfinite(cfg->learning_rate))
        bad = "learning_rate";
    else if (!(cfg->momentum >= 0) || !isfinite(cfg->momentum))
        bad = "momentum";
    else if (!(cfg->rho >= 0 && cfg->rho <= 1))
        bad = "rho";
    else if (!(cfg->epsilon >= 0) || !isfinite(cfg->epsilon))
        bad = "epsilon";
    else if (!(cfg->beta1 >= 0 && cfg->beta1 < 1))
        bad = "beta1";
    else if (!(cfg->beta2 >= 0 && cfg->beta2 < 1))
        bad = "beta2";
    else if ((k == OPT_ADAGRAD || k == OPT_FTRL) && !(cfg->initial_accumulator > 0))
        bad = "initial_accumulator";
    else if (k == OPT_FTRL && !(cfg->learning_rate > 0))
        bad = "learning_rate (FTRL divides by it)";
    else if (k == OPT_FTRL && (!(cfg->l1 >= 0) || !isfinite(cfg->l1)))
        bad = "l1";
    else if (k == OPT_FTRL && (!(cfg->l2 >= 0) || !isfinite(cfg->l2)))
        bad = "l2";
    else if (k == OPT_FTRL && !(cfg->lr_power <= 0))
        bad = "lr_power";
    if (bad) {
        psg_error_set("optimizer '%s': %s is out of range", cfg->kind, bad);
        return NULL;
    }
    psg_optimizer_t *o = calloc(1, sizeof *o);
    if (!o) {
        psg_error_set("out of memory");
        return NULL;
    }
    o->cfg = *cfg;
    o->cfg.kind = kinds[k].kind; /* static: the caller's string may go */
    o->kind = (opt_kind_t)k;
    o->lr_tensor = PSG_NO_ENDPOINT;
    return o;
}

void psg_optimizer_destroy(psg_optimizer_t **opt) {
    if (!opt || !*opt) return;
    free(*opt);
    *opt = NULL;
}

const psg_optimizer_config_t *psg_optimizer_config(const psg_optimizer_t *opt) {
    return &opt->cfg;
}

psg_endpoint_t psg_optimizer_learning_rate_tensor(const psg_optimizer_t *opt) {
    return opt->lr_tensor;
}

void psg_optimizer_set_learning_rate_tensor(psg_optimizer_t *opt, psg_endpoint_t lr) {
    opt->lr_tensor = lr;
}

const char *psg_optimizer_name(const psg_optimizer_t *opt) {
    return kinds[opt->kind].name;
}

/* ---- graph helpers ---- */

static bool is_var_handle(const psg_graph_t *g, psg_endpoint_t e) {
    return e.node >= 0 && e.node < psg_graph_num_nodes(g) &&
           !strcmp(psg_node_op(psg_graph_node(g, e.node)), "VarHandle");
}

static psg_endpoint_t new_global_step(psg_graph_t *g);

psg_endpoint_t psg_global_step(psg_graph_t *g) {
    int n;
    const int *ids = psg_graph_collection(g, "global_step", &n);
    if (n > 0) return (psg_endpoint_t){ids[0], 0};
    /* a variable and its initializer depend on no control context (tf.init_scope) */
    if (psg_graph_push_control(g, 0, NULL, true) < 0) return PSG_NO_ENDPOINT;
    psg_endpoint_t h = new_global_step(g);
    psg_graph_pop_control(g);
    return h;
}

static psg_endpoint_t new_global_step(psg_graph_t *g) {
    psg_shape_t s = psg_shape_scalar();
    psg_endpoint_t h = psg_var_handle(g, "global_step", PSG_DT_I64, &s);
    if (!psg_endpoint_valid(h)) return PSG_NO_ENDPOINT;
    /* beside a variable of the user's named global_step the handle is "global_step_1": its
     * initializer goes under its own name ("global_step_1/init"), where it is looked for */
    const char *name = psg_node_name(psg_graph_node(g, h.node)), *leaf = strrchr(name, '/');
    if (psg_graph_push_scope(g, leaf ? leaf + 1 : name) < 0) return PSG_NO_ENDPOINT;
    psg_tensor_t *zero = psg_tensor_scalar_i64(0);
    psg_endpoint_t v = zero ? psg_const(g, "initial_value", &zero) : PSG_NO_ENDPOINT;
    int assign = psg_endpoint_valid(v) ? psg_assign(g, "init", h, v) : -1;
    psg_graph_pop_scope(g);
    psg_tensor_destroy(&zero);
    if (assign < 0) return PSG_NO_ENDPOINT;
    psg_graph_add_to_collection(g, "variables", h.node);
    psg_graph_add_to_collection(g, "global_step", h.node);
    psg_graph_add_to_collection(g, "init", assign);
    return h;
}

/* The slot "<var>/<suffix>" of var's shape, found by name or made with the
 * initializer `init` (a psg_initializer_t kind) and constant `value`. */
static psg_endpoint_t slot_variable(psg_graph_t *g, psg_endpoint_t var, const char *suffix,
                                    const char *init, float value) {
    const psg_node_t *vn = psg_graph_node(g, var.node);
    const psg_shape_t *shape = psg_node_output_shape(vn, 0);
    size_t len = strlen(psg_node_name(vn)) + strlen(suffix) + 2;
    char *name = malloc(len);
    if (!name) {
        psg_error_set("out of memory");
        return PSG_NO_ENDPOINT;
    }
    snprintf(name, len, "%s/%s", psg_node_name(vn), suffix);
    psg_endpoint_t s = {psg_graph_find(g, name), 0};
    if (s.node >= 0 && !(is_var_handle(g, s) && psg_shape_equal(psg_graph_shape(g, s), shape))) {
        psg_error_set("slot '%s' exists and is not a variable of the shape of '%s'", name,
                      psg_node_name(vn));
        s = PSG_NO_ENDPOINT;
    } else if (s.node < 0) {
        s = psg_variable(g, name, PSG_DT_F32, shape, (psg_initializer_t){init, value, 0}, false);
    }
    free(name);
    return s;
}

/* A node `op` on input var with control inputs (ScaleVariable's factor too). */
static int after_all(psg_graph_t *g, const char *op, const char *name, psg_endpoint_t var,
                     psg_endpoint_t factor, int n, const int *controls) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    psg_node_add_input(b, var);
    if (psg_endpoint_valid(factor))
        psg_node_add_input(b, factor);
    else
        psg_node_attr_int(b, "by", 1);
    for (int i = 0; i < n; i++) psg_node_add_control(b, controls[i]);
    return psg_node_finish(b);
}

typedef struct {
    psg_endpoint_t lr, momentum, rho, epsilon, beta1, beta2, beta1_power, beta2_power;
    psg_endpoint_t l1, l2, lr_power;
    psg_endpoint_t b1p_var, b2p_var;
} hyper_t;

static int make_hyper(psg_optimizer_t *o, psg_graph_t *g, psg_endpoint_t first_var, hyper_t *h) {
    const psg_optimizer_config_t *c = &o->cfg;
    for (psg_endpoint_t *e = &h->lr; e <= &h->b2p_var; e++) *e = PSG_NO_ENDPOINT;
    if (o->kind == OPT_ADAM) {
        /* beside the first variable, as TensorFlow colocates them */
        const char *dev = psg_node_device(psg_graph_node(g, first_var.node));
        if (dev[0]) psg_graph_push_device(g, dev);
        psg_shape_t s = psg_shape_scalar();
        int id1 = psg_graph_find(g, "beta1_power"), id2 = psg_graph_find(g, "beta2_power");
        h->b1p_var = id1 >= 0 ? (psg_endpoint_t){id1, 0}
                              : psg_variable(g, "beta1_power", PSG_DT_F32, &s,
                                             (psg_initializer_t){"constant", c->beta1, 0}, false);
        h->b2p_var = id2 >= 0 ? (psg_endpoint_t){id2, 0}
                              : psg_variable(g, "beta2_power", PSG_DT_F32, &s,
                                             (psg_initializer_t){"constant", c->beta2, 0}, false);
        if (dev[0]) psg_graph_pop_device(g);
        if (!is_var_handle(g, h->b1p_var) || !is_var_handle(g, h->b2p_var))
            return psg_error_set("cannot make Adam's beta power variables: %s",
                                 psg_graph_error(g) ? psg_graph_error(g)
                                                    : "a node of that name exists");
    }
    if (psg_graph_push_scope(g, kinds[o->kind].name) < 0) return -1;
    h->lr = psg_endpoint_valid(o->lr_tensor)
                ? o->lr_tensor
                : psg_const_scalar(g, "learning_rate", c->learning_rate);
    switch (o->kind) {
    case OPT_MOMENTUM: h->momentum = psg_const_scalar(g, "momentum", c->momentum); break;
    case OPT_RMSPROP:
        h->rho = psg_const_scalar(g, "rho", c->rho);
        h->momentum = psg_const_scalar(g, "momentum", c->momentum);
        h->epsilon = psg_const_scalar(g, "epsilon", c->epsilon);
        break;
    case OPT_FTRL:
        h->l1 = psg_const_scalar(g, "l1", c->l1);
        h->l2 = psg_const_scalar(g, "l2", c->l2);
        h->lr_power = psg_const_scalar(g, "lr_power", c->lr_power);
        break;
    case OPT_ADAM:
        h->beta1 = psg_const_scalar(g, "beta1", c->beta1);
        h->beta2 = psg_const_scalar(g, "beta2", c->beta2);
        h->epsilon = psg_const_scalar(g, "epsilon", c->epsilon);
        h->beta1_power = psg_read_variable(g, "beta1_power", h->b1p_var);
        h->beta2_power = psg_read_variable(g, "beta2_power", h->b2p_var);
        break;
    default: break;
    }
    psg_graph_pop_scope(g);
    return psg_graph_status(g);
}

/* Slots and the update op of one variable, on the variable's device. */
static int update_one(psg_optimizer_t *o, psg_graph_t *g, psg_endpoint_t var, psg_endpoint_t grad,
                      const hyper_t *h, int ready) {
    const char *name = kinds[o->kind].name;
    const char *dev = psg_node_device(psg_graph_node(g, var.node));
    if (dev[0]) psg_graph_push_device(g, dev);
    psg_endpoint_t s1 = PSG_NO_ENDPOINT, s2 = PSG_NO_ENDPOINT;
    char suffix2[32];
    snprintf(suffix2, sizeof suffix2, "%s_1", name);
    switch (o->kind) {
    case OPT_MOMENTUM: s1 = slot_variable(g, var, name, "zeros", 0); break;
    case OPT_RMSPROP:
        s1 = slot_variable(g, var, name, "ones", 1);
        s2 = slot_variable(g, var, suffix2, "zeros", 0);
        break;
    case OPT_ADAM:
        s1 = slot_variable(g, var, name, "zeros", 0);
        s2 = slot_variable(g, var, suffix2, "zeros", 0);
        break;
    case OPT_ADAGRAD:
        s1 = slot_variable(g, var, name, "constant", o->cfg.initial_accumulator);
        break;
    case OPT_FTRL:
        s1 = slot_variable(g, var, name, "constant", o->cfg.initial_accumulator);
        s2 = slot_variable(g, var, suffix2, "zeros", 0);
        break;
    default: break;
    }
    psg_endpoint_t in[12];
    int n = 0;
    switch (o->kind) {
    case OPT_SGD: n = 3, in[0] = var, in[1] = h->lr, in[2] = grad; break;
    case OPT_MOMENTUM:
        n = 5, in[0] = var, in[1] = s1, in[2] = h->lr, in[3] = grad, in[4] = h->momentum;
        break;
    case OPT_RMSPROP:
        n = 8, in[0] = var, in[1] = s1, in[2] = s2, in[3] = h->lr, in[4] = h->rho,
        in[5] = h->momentum, in[6] = h->epsilon, in[7] = grad;
        break;
    case OPT_ADAM:
        n = 10, in[0] = var, in[1] = s1, in[2] = s2, in[3] = h->beta1_power, in[4] = h->beta2_power,
        in[5] = h->lr, in[6] = h->beta1, in[7] = h->beta2, in[8] = h->epsilon, in[9] = grad;
        break;
    case OPT_ADAGRAD: n = 4, in[0] = var, in[1] = s1, in[2] = h->lr, in[3] = grad; break;
    case OPT_FTRL:
        n = 8, in[0] = var, in[1] = s1, in[2] = s2, in[3] = grad, in[4] = h->lr, in[5] = h->l1,
        in[6] = h->l2, in[7] = h->lr_power;
        break;
    }
    /* a sparse gradient of this variable: only its rows are updated (lazy Adam for adam) */
    const char *op = kinds[o->kind].op, *sparse_op = psg_sparse_apply_op(op);
    psg_endpoint_t vals, ix, like;
    if (sparse_op && psg_is_indexed_slices(g, grad, &vals, &ix, &like) && like.node == var.node) {
        int k = 0;
        while (k < n && !(in[k].node == grad.node && in[k].index == grad.index)) k++;
        memmove(&in[k + 2], &in[k + 1], sizeof in[0] * (size_t)(n - k - 1));
        in[k] = vals;
        in[k + 1] = ix;
        n++;
        op = sparse_op;
    }
    const char *vname = psg_node_name(psg_graph_node(g, var.node));
    size_t len = strlen(vname) + 8;
    char *node_name = malloc(len);
    int id = -1;
    if (node_name && psg_graph_push_scope(g, name) == 0) {
        snprintf(node_name, len, "update_%s", vname);
        id = psg_apply_update(g, op, node_name, n, in, o->cfg.check_numerics,
                              o->cfg.use_nesterov && o->kind == OPT_MOMENTUM, ready);
        psg_graph_pop_scope(g);
    }
    free(node_name);
    if (dev[0]) psg_graph_pop_device(g);
    return id;
}

/* The task a requested device names (job and task both given), for comparing. */
static bool task_of(const psg_node_t *node, psg_device_name_t *d) {
    return psg_device_name_parse(psg_node_device(node), d) == 0 && d->has_job && d->has_task;
}

/* True when every op that reads a variable of vars (a consumer of its ReadVariable, which
 * aliases the variable's buffer) is placed on another task than the variable: each reader
 * then gets a copy over the wire, and an update cannot change a buffer a gradient still
 * reads. So in a cluster the updates need no barrier: each applies as soon as its own
 * gradient is in (the first layers' large updates overlap the rest of the backward pass). */
static bool readers_remote(const psg_graph_t *g, int n, const psg_endpoint_t *vars) {
    int nn = psg_graph_num_nodes(g);
    for (int i = 0; i < nn; i++) {
        const psg_node_t *x = psg_graph_node(g, i);
        for (int k = 0; k < psg_node_num_inputs(x); k++) {
            const psg_node_t *r = psg_graph_node(g, psg_node_input(x, k).node);
            if (strcmp(psg_node_op(r), "ReadVariable") || psg_node_num_inputs(r) < 1) continue;
            int h = psg_node_input(r, 0).node, v = 0;
            while (v < n && vars[v].node != h) v++;
            if (v == n) continue;
            psg_device_name_t dv, dx;
            if (!task_of(psg_graph_node(g, h), &dv) || !task_of(x, &dx) ||
                (!strcmp(dv.job, dx.job) && dv.task == dx.task))
                return false;
        }
    }
    return true;
}

int psg_optimizer_apply_gradients(psg_optimizer_t *opt, psg_graph_t *g, int n,
                                  const psg_endpoint_t *grads, const psg_endpoint_t *vars,
                                  int *train_op) {
    *train_op = -1;
    int k = 0, first = -1;
    for (int i = 0; i < n; i++) {
        if (!is_var_handle(g, vars[i]))
            return psg_error_set("apply_gradients: vars[%d] is not a variable handle", i);
        if (psg_endpoint_valid(grads[i]) && grads[i].node >= psg_graph_num_nodes(g))
            return psg_error_set("apply_gradients: grads[%d] is not in the graph", i);
        if (psg_endpoint_valid(grads[i])) {
            if (first < 0) first = i;
            k++;
        }
    }
    if (k == 0) return psg_error_set("apply_gradients: no gradient for any of %d variables", n);
    const char *name = kinds[opt->kind].name;
    psg_endpoint_t gstep = psg_global_step(g);
    if (!psg_endpoint_valid(gstep)) return psg_error_wrap("global step");
    hyper_t h;
    if (make_hyper(opt, g, vars[first], &h) < 0) return -1;

    int *ids = malloc(sizeof(int) * (size_t)(2 * k + 3));
    if (!ids) return psg_error_set("out of memory");
    int m = 0, rc = -1;
    psg_endpoint_t sv, si;
    for (int i = 0; i < n; i++) {
        if (!psg_endpoint_valid(grads[i])) continue;
        /* a sparse gradient is ready when its rows and indices are (its dense value is
         * never computed) */
        if (psg_is_indexed_slices(g, grads[i], &sv, &si, NULL)) {
            ids[m++] = sv.node;
            ids[m++] = si.node;
        } else {
            ids[m++] = grads[i].node;
        }
    }
    /* updates change variables in place while a gradient may still read one (unless
     * every reader is on another task: readers_remote) */
    int ready = -1;
    if (!readers_remote(g, n, vars)) {
        if (psg_graph_push_scope(g, name) < 0) goto out;
        ready = psg_group(g, "gradients_ready", m, ids);
        psg_graph_pop_scope(g);
        if (ready < 0) goto out;
    }
    m = 0;
    for (int i = 0; i < n; i++) {
        if (!psg_endpoint_valid(grads[i])) continue;
        int id = update_one(opt, g, vars[i], grads[i], &h, ready);
        if (id < 0) {
            psg_error_wrap("apply_gradients of variable '%s'", psg_variable_name(g, vars[i]));
            goto out;
        }
        ids[m++] = id;
    }
    int updates = m;
    if (psg_graph_push_scope(g, name) < 0) goto out;
    if (opt->kind == OPT_ADAM) {
        ids[m++] =
            after_all(g, "ScaleVariable", "update_beta1_power", h.b1p_var, h.beta1, updates, ids);
        ids[m++] =
            after_all(g, "ScaleVariable", "update_beta2_power", h.b2p_var, h.beta2, updates, ids);
    }
    int inc =
        after_all(g, "IncrementVariable", "update_global_step", gstep, PSG_NO_ENDPOINT, m, ids);
    psg_graph_pop_scope(g);
    ids[m++] = inc;
    for (int i = 0; i < m; i++)
        if (ids[i] < 0) goto out;
    *train_op = psg_group(g, name, m, ids);
    rc = *train_op < 0 ? -1 : 0;
out:
    free(ids);
    return rc;
}

int psg_optimizer_minimize(psg_optimizer_t *opt, psg_graph_t *g, psg_endpoint_t loss,
                           int *train_op) {
    *train_op = -1;
    int n;
    psg_endpoint_t *vars;
    if (psg_trainable_gradients(g, loss, &n, &vars) < 0) return psg_error_wrap("minimize");
    int rc = psg_optimizer_apply_gradients(opt, g, n, vars + n, vars, train_op);
    free(vars);
    return rc;
}
