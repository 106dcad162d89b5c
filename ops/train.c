/* The training ops: the optimizer update rules as ops that change a variable
 * and its slots in place (ApplyGradientDescent, ApplyMomentum, ApplyRMSProp,
 * ApplyAdam, ApplyAdagrad, ApplyFtrl, as TensorFlow's ResourceApply*), and the small
 * state ops around them (ScaleVariable, IncrementVariable, ExponentialDecay):
 * defs, shape inference and builders. Kernels: ops/cpu/train.c. Not the
 * optimizer objects that wire them to gradients (runtime/optimizer.c). */
#include "ops/cpu/train.h"
#include "ops/cuda/kernels.h"
#include "ops/params.h"
#include "psgraph/error.h"
#include "psgraph/ops_train.h"

#include <string.h>

/* The input layout of an update op: input 0 is the variable, inputs
 * 1..nslots its slots, `grad` the gradient, every other input a scalar. */
typedef struct {
    int nslots;
    int grad;
    const char *const *names; /* of each input, for messages */
} apply_sig_t;

static const char *const gd_names[] = {"var", "lr", "grad"};
static const char *const momentum_names[] = {"var", "accum", "lr", "grad", "momentum"};
static const char *const rmsprop_names[] = {"var", "ms",       "mom",     "lr",
                                            "rho", "momentum", "epsilon", "grad"};
static const char *const adam_names[] = {"var", "m",     "v",     "beta1_power", "beta2_power",
                                         "lr",  "beta1", "beta2", "epsilon",     "grad"};
static const char *const adagrad_names[] = {"var", "accum", "lr", "grad"};
static const char *const ftrl_names[] = {"var", "accum", "linear", "grad",
                                         "lr",  "l1",    "l2",     "lr_power"};

static const apply_sig_t sig_gd = {0, 2, gd_names};
static const apply_sig_t sig_momentum = {1, 3, momentum_names};
static const apply_sig_t sig_rmsprop = {2, 7, rmsprop_names};
static const apply_sig_t sig_adam = {2, 9, adam_names};
static const apply_sig_t sig_adagrad = {1, 3, adagrad_names};
static const apply_sig_t sig_ftrl = {2, 3, ftrl_names};

static int expect_scalar_f32(psg_infer_ctx_t *c, int i, const char *what) {
    const psg_shape_t *s = &c->in_shapes[i];
    if (c->in_dtypes[i] != PSG_DT_F32 || (s->rank > 0 && psg_shape_numel(s) != 1)) {
        char b[PSG_SHAPE_STR_MAX];
        return psg_error_set("%s (input %d) must be a scalar f32, got %s%s", what, i,
                             psg_dtype_name(c->in_dtypes[i]), psg_shape_str(s, b, sizeof b));
    }
    return 0;
}

/* Every message names the variable, from the attr the builder recorded. */
static int infer_apply(psg_infer_ctx_t *c, const apply_sig_t *sig) {
    const char *var = psg_node_get_str(c->node, "var_name", "?");
    char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
    const psg_shape_t *vs = &c->in_shapes[0];
    if (c->in_dtypes[0] != PSG_DT_RESOURCE)
        return psg_error_set("input 0 (var) must be a variable handle, got %s",
                             psg_dtype_name(c->in_dtypes[0]));
    for (int k = 1; k <= sig->nslots; k++) {
        if (c->in_dtypes[k] != PSG_DT_RESOURCE)
            return psg_error_set("input %d (%s) must be a variable handle, got %s", k,
                                 sig->names[k], psg_dtype_name(c->in_dtypes[k]));
        if (!psg_shape_equal(&c->in_shapes[k], vs))
            return psg_error_set("slot %s of shape %s does not match variable '%s' of shape %s",
                                 sig->names[k], psg_shape_str(&c->in_shapes[k], a, sizeof a), var,
                                 psg_shape_str(vs, b, sizeof b));
    }
    for (int i = sig->nslots + 1; i < c->num_inputs; i++) {
        if (i != sig->grad) {
            if (expect_scalar_f32(c, i, sig->names[i]) < 0) return -1;
            continue;
        }
        if (c->in_dtypes[i] != PSG_DT_F32)
            return psg_error_set("gradient of variable '%s' must be f32, got %s", var,
                                 psg_dtype_name(c->in_dtypes[i]));
        if (!psg_shape_compatible(&c->in_shapes[i], vs))
            return psg_error_set("gradient of shape %s does not match variable '%s' of shape %s",
                                 psg_shape_str(&c->in_shapes[i], a, sizeof a), var,
                                 psg_shape_str(vs, b, sizeof b));
    }
    return 0;
}

static int infer_gd(psg_infer_ctx_t *c) {
    return infer_apply(c, &sig_gd);
}
static int infer_momentum(psg_infer_ctx_t *c) {
    return infer_apply(c, &sig_momentum);
}
static int infer_rmsprop(psg_infer_ctx_t *c) {
    return infer_apply(c, &sig_rmsprop);
}
static int infer_adam(psg_infer_ctx_t *c) {
    return infer_apply(c, &sig_adam);
}
static int infer_adagrad(psg_infer_ctx_t *c) {
    return infer_apply(c, &sig_adagrad);
}

static int infer_ftrl(psg_infer_ctx_t *c) {
    return infer_apply(c, &sig_ftrl);
}

static int infer_scale_variable(psg_infer_ctx_t *c) {
    if (psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE) < 0) return -1;
    return expect_scalar_f32(c, 1, "factor");
}

static int infer_increment_variable(psg_infer_ctx_t *c) {
    return psg_infer_expect_dtype(c, 0, PSG_DT_RESOURCE);
}

static int infer_exponential_decay(psg_infer_ctx_t *c) {
    psg_dtype_t dt = c->in_dtypes[0];
    if (dt != PSG_DT_I64 && dt != PSG_DT_I32 && dt != PSG_DT_F32)
        return psg_error_set("step must be i64, i32 or f32, got %s", psg_dtype_name(dt));
    if (c->in_shapes[0].rank > 0 && psg_shape_numel(&c->in_shapes[0]) != 1)
        return psg_error_set("step must be a scalar");
    if (!(psg_node_get_float(c->node, "decay_steps", 0.0) > 0))
        return psg_error_set("decay_steps must be > 0");
    c->out_dtypes[0] = PSG_DT_F32;
    c->out_shapes[0] = psg_shape_scalar();
    return 0;
}

/* ---- the checks both kernels make (ops/cpu/train.h) ---- */

int psg_update_check_variable(const psg_variable_t *v) {
    if (!v) return -1;
    if (v->dtype != PSG_DT_F32)
        return psg_error_set("variable '%s' is %s; optimizers update f32 variables", v->name,
                             psg_dtype_name(v->dtype));
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    return 0;
}

int psg_update_check_slot(const psg_variable_t *slot, const psg_variable_t *v) {
    if (psg_shape_equal(&slot->shape, &v->shape)) return 0;
    char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
    return psg_error_set("slot '%s' %s does not match variable '%s' %s", slot->name,
                         psg_shape_str(&slot->shape, a, sizeof a), v->name,
                         psg_shape_str(&v->shape, b, sizeof b));
}

int psg_update_check_gradient(const psg_tensor_t *g, const psg_variable_t *v) {
    if (g->dtype == PSG_DT_F32 && psg_shape_equal(&g->shape, &v->shape)) return 0;
    char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
    return psg_error_set("gradient %s%s does not match variable '%s' f32%s",
                         psg_dtype_name(g->dtype), psg_shape_str(&g->shape, a, sizeof a), v->name,
                         psg_shape_str(&v->shape, b, sizeof b));
}

int psg_update_check_scalar(const psg_kernel_ctx_t *c, int i, const char *what) {
    const psg_tensor_t *t = c->inputs[i];
    if (t->dtype != PSG_DT_F32 || psg_tensor_numel(t) != 1) {
        char b[PSG_SHAPE_STR_MAX];
        return psg_error_set("%s (input %d) must be a scalar f32, got %s%s", what, i,
                             psg_dtype_name(t->dtype), psg_shape_str(&t->shape, b, sizeof b));
    }
    return 0;
}

int psg_update_variable(psg_kernel_ctx_t *c, psg_variable_lookup_fn lookup, int i,
                        psg_variable_t **v) {
    psg_variable_t *var = lookup(c, i);
    if (psg_update_check_variable(var) < 0) return -1;
    *v = var;
    return 0;
}

int psg_update_operands(psg_kernel_ctx_t *c, psg_variable_lookup_fn lookup, int nslots, int gi,
                        psg_variable_t **v, psg_variable_t *s[2]) {
    s[0] = s[1] = NULL;
    if (psg_update_variable(c, lookup, 0, v) < 0) return -1;
    for (int k = 0; k < nslots; k++)
        if (psg_update_variable(c, lookup, 1 + k, &s[k]) < 0 || psg_update_check_slot(s[k], *v) < 0)
            return -1;
    return psg_update_check_gradient(c->inputs[gi], *v);
}

/* ---- prepare: the update's flags, once per plan node (ops/params.h) ---- */

int psg_apply_prepare(const psg_graph_t *g, const psg_node_t *n, void *params) {
    (void)g;
    psg_apply_params_t *p = params;
    p->check_numerics = psg_node_get_bool(n, "check_numerics", true);
    p->use_nesterov = psg_node_get_bool(n, "use_nesterov", false);
    return 0;
}

/* ---- defs: no outputs, no gradients (like Assign) ---- */

static const psg_op_def_t op_gd = {.name = "ApplyGradientDescent",
                                   .num_inputs = 3,
                                   .num_outputs = 0,
                                   .flags = PSG_OP_STATEFUL,
                                   .infer = infer_gd,
                                   .cpu = psg_cpu_apply_gradient_descent,
                                   .cuda = PSG_GPU_KERNEL(psg_gpu_apply_gradient_descent),
                                   .prepare = psg_apply_prepare,
                                   .params_size = sizeof(psg_apply_params_t)};
static const psg_op_def_t op_momentum = {.name = "ApplyMomentum",
                                         .num_inputs = 5,
                                         .num_outputs = 0,
                                         .flags = PSG_OP_STATEFUL,
                                         .infer = infer_momentum,
                                         .cpu = psg_cpu_apply_momentum,
                                         .cuda = PSG_GPU_KERNEL(psg_gpu_apply_momentum),
                                         .prepare = psg_apply_prepare,
                                         .params_size = sizeof(psg_apply_params_t)};
static const psg_op_def_t op_rmsprop = {.name = "ApplyRMSProp",
                                        .num_inputs = 8,
                                        .num_outputs = 0,
                                        .flags = PSG_OP_STATEFUL,
                                        .infer = infer_rmsprop,
                                        .cpu = psg_cpu_apply_rmsprop,
                                        .cuda = PSG_GPU_KERNEL(psg_gpu_apply_rmsprop),
                                        .prepare = psg_apply_prepare,
                                        .params_size = sizeof(psg_apply_params_t)};
static const psg_op_def_t op_adam = {.name = "ApplyAdam",
                                     .num_inputs = 10,
                                     .num_outputs = 0,
                                     .flags = PSG_OP_STATEFUL,
                                     .infer = infer_adam,
                                     .cpu = psg_cpu_apply_adam,
                                     .cuda = PSG_GPU_KERNEL(psg_gpu_apply_adam),
                                     .prepare = psg_apply_prepare,
                                     .params_size = sizeof(psg_apply_params_t)};
static const psg_op_def_t op_adagrad = {.name = "ApplyAdagrad",
                                        .num_inputs = 4,
                                        .num_outputs = 0,
                                        .flags = PSG_OP_STATEFUL,
                                        .infer = infer_adagrad,
                                        .cpu = psg_cpu_apply_adagrad,
                                        .cuda = PSG_GPU_KERNEL(psg_gpu_apply_adagrad),
                                        .prepare = psg_apply_prepare,
                                        .params_size = sizeof(psg_apply_params_t)};
static const psg_op_def_t op_ftrl = {.name = "ApplyFtrl",
                                     .num_inputs = 8,
                                     .num_outputs = 0,
                                     .flags = PSG_OP_STATEFUL,
                                     .infer = infer_ftrl,
                                     .cpu = psg_cpu_apply_ftrl,
                                     .prepare = psg_apply_prepare,
                                     .params_size = sizeof(psg_apply_params_t)};
static const psg_op_def_t op_scale_variable = {.name = "ScaleVariable",
                                               .num_inputs = 2,
                                               .num_outputs = 0,
                                               .flags = PSG_OP_STATEFUL,
                                               .infer = infer_scale_variable,
                                               .cpu = psg_cpu_scale_variable,
                                               .cuda = PSG_GPU_KERNEL(psg_gpu_scale_variable)};
static const psg_op_def_t op_increment_variable = {.name = "IncrementVariable",
                                                   .num_inputs = 1,
                                                   .num_outputs = 0,
                                                   .flags = PSG_OP_STATEFUL,
                                                   .infer = infer_increment_variable,
                                                   .cpu = psg_cpu_increment_variable,
                                                   .cuda =
                                                       PSG_GPU_KERNEL(psg_gpu_increment_variable)};
static const psg_op_def_t op_exponential_decay = {.name = "ExponentialDecay",
                                                  .num_inputs = 1,
                                                  .num_outputs = 1,
                                                  .infer = infer_exponential_decay,
                                                  .cpu = psg_cpu_exponential_decay,
                                                  .cuda =
                                                      PSG_GPU_KERNEL(psg_gpu_exponential_decay)};

const psg_op_def_t *const psg_train_ops[] = {
    &op_gd,
    &op_momentum,
    &op_rmsprop,
    &op_adam,
    &op_adagrad,
    &op_ftrl,
    &op_scale_variable,
    &op_increment_variable,
    &op_exponential_decay,
    NULL,
};

/* ---- builders ---- */

const char *psg_variable_name(const psg_graph_t *g, psg_endpoint_t handle) {
    if (handle.node < 0 || handle.node >= psg_graph_num_nodes(g)) return "?";
    const psg_node_t *n = psg_graph_node(g, handle.node);
    const char *shared = psg_node_get_str(n, "shared_name", "");
    return shared[0] ? shared : psg_node_name(n);
}

int psg_apply_update(psg_graph_t *g, const char *op, const char *name, int n,
                     const psg_endpoint_t *inputs, bool check_numerics, bool use_nesterov,
                     int control) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    for (int i = 0; i < n; i++) psg_node_add_input(b, inputs[i]);
    if (control >= 0) psg_node_add_control(b, control);
    psg_node_attr_str(b, "var_name", n > 0 ? psg_variable_name(g, inputs[0]) : "?");
    psg_node_attr_bool(b, "check_numerics", check_numerics);
    if (use_nesterov) psg_node_attr_bool(b, "use_nesterov", true);
    return psg_node_finish(b);
}

int psg_apply_gradient_descent(psg_graph_t *g, const char *name, psg_endpoint_t var,
                               psg_endpoint_t lr, psg_endpoint_t grad) {
    psg_endpoint_t in[] = {var, lr, grad};
    return psg_apply_update(g, "ApplyGradientDescent", name, 3, in, true, false, -1);
}

int psg_apply_momentum(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t accum,
                       psg_endpoint_t lr, psg_endpoint_t grad, psg_endpoint_t momentum,
                       bool use_nesterov) {
    psg_endpoint_t in[] = {var, accum, lr, grad, momentum};
    return psg_apply_update(g, "ApplyMomentum", name, 5, in, true, use_nesterov, -1);
}

int psg_apply_rmsprop(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t ms,
                      psg_endpoint_t mom, psg_endpoint_t lr, psg_endpoint_t rho,
                      psg_endpoint_t momentum, psg_endpoint_t epsilon, psg_endpoint_t grad) {
    psg_endpoint_t in[] = {var, ms, mom, lr, rho, momentum, epsilon, grad};
    return psg_apply_update(g, "ApplyRMSProp", name, 8, in, true, false, -1);
}

int psg_apply_adam(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t m,
                   psg_endpoint_t v, psg_endpoint_t beta1_power, psg_endpoint_t beta2_power,
                   psg_endpoint_t lr, psg_endpoint_t beta1, psg_endpoint_t beta2,
                   psg_endpoint_t epsilon, psg_endpoint_t grad) {
    psg_endpoint_t in[] = {var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad};
    return psg_apply_update(g, "ApplyAdam", name, 10, in, true, false, -1);
}

int psg_apply_adagrad(psg_graph_t *g, const char *name, psg_endpoint_t var, psg_endpoint_t accum,
                      psg_endpoint_t lr, psg_endpoint_t grad) {
    psg_endpoint_t in[] = {var, accum, lr, grad};
    return psg_apply_update(g, "ApplyAdagrad", name, 4, in, true, false, -1);
}

int psg_scale_variable(psg_graph_t *g, const char *name, psg_endpoint_t var,
                       psg_endpoint_t factor) {
    psg_node_builder_t *b = psg_node_begin(g, "ScaleVariable", name);
    psg_node_add_input(b, var);
    psg_node_add_input(b, factor);
    return psg_node_finish(b);
}

int psg_increment_variable(psg_graph_t *g, const char *name, psg_endpoint_t var, int64_t by) {
    psg_node_builder_t *b = psg_node_begin(g, "IncrementVariable", name);
    psg_node_add_input(b, var);
    psg_node_attr_int(b, "by", by);
    return psg_node_finish(b);
}

psg_endpoint_t psg_exponential_decay(psg_graph_t *g, const char *name, float learning_rate,
                                     psg_endpoint_t step, int64_t decay_steps, float decay_rate,
                                     bool staircase) {
    psg_node_builder_t *b = psg_node_begin(g, "ExponentialDecay", name);
    psg_node_add_input(b, step);
    psg_node_attr_float(b, "learning_rate", learning_rate);
    psg_node_attr_float(b, "decay_steps", (double)decay_steps);
    psg_node_attr_float(b, "decay_rate", decay_rate);
    psg_node_attr_bool(b, "staircase", staircase);
    return psg_node_finish_ep(b);
}
