/* CUDA kernels (C glue) of the training ops: the checks of ops/cpu/train.c
 * on the host (dtypes, shapes, initialization), then the update on the GPU
 * with the scalar hyper-parameters read there. The NaN/Inf check of a
 * gradient skips the update on the GPU instead of failing the step: failing
 * would need a host sync per variable per step. */
#include "ops/cpu/train.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/params.h"
#include "psgraph/device.h"
#include "psgraph/error.h"

static int scalar_input(psg_kernel_ctx_t *c, int i, const char *what, const float **out) {
    if (psg_update_check_scalar(c, i, what) < 0) return -1;
    *out = psg_tensor_f32(c->inputs[i]);
    return 0;
}

/* The variable (input 0), nslots slots (inputs 1..), the gradient (input gi)
 * and the scalars (inputs named in order), then the rule under the lock. */
static int apply(psg_kernel_ctx_t *c, psg_cu_rule_t rule, int nslots, int gi, int nhp,
                 const int *hp_inputs, const char *const *hp_names) {
    psg_variable_t *v = NULL, *s[2];
    if (psg_update_operands(c, psg_gpu_variable, nslots, gi, &v, s) < 0) return -1;
    const psg_tensor_t *g = c->inputs[gi];
    const float *hp[6];
    for (int k = 0; k < nhp; k++)
        if (scalar_input(c, hp_inputs[k], hp_names[k], &hp[k]) < 0) return -1;
    psg_variable_lock_update(v, s, nslots);
    int rc = psg_cuda_apply(
        c->device, rule, psg_tensor_f32(v->value), s[0] ? psg_tensor_f32(s[0]->value) : NULL,
        s[1] ? psg_tensor_f32(s[1]->value) : NULL, psg_tensor_f32(g), psg_tensor_numel(g), hp,
        ((const psg_apply_params_t *)psg_kernel_params(c))->use_nesterov,
        ((const psg_apply_params_t *)psg_kernel_params(c))->check_numerics);
    psg_variable_unlock_update(v, s, nslots);
    return rc;
}

/* inputs: var, lr, grad */
int psg_gpu_apply_gradient_descent(psg_kernel_ctx_t *c) {
    static const int in[] = {1};
    static const char *const names[] = {"lr"};
    return apply(c, PSG_CU_SGD, 0, 2, 1, in, names);
}

/* inputs: var, accum, lr, grad, momentum */
int psg_gpu_apply_momentum(psg_kernel_ctx_t *c) {
    static const int in[] = {2, 4};
    static const char *const names[] = {"lr", "momentum"};
    return apply(c, PSG_CU_MOMENTUM, 1, 3, 2, in, names);
}

/* inputs: var, ms, mom, lr, rho, momentum, epsilon, grad */
int psg_gpu_apply_rmsprop(psg_kernel_ctx_t *c) {
    static const int in[] = {3, 4, 5, 6};
    static const char *const names[] = {"lr", "rho", "momentum", "epsilon"};
    return apply(c, PSG_CU_RMSPROP, 2, 7, 4, in, names);
}

/* inputs: var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad */
int psg_gpu_apply_adam(psg_kernel_ctx_t *c) {
    static const int in[] = {3, 4, 5, 6, 7, 8};
    static const char *const names[] = {"beta1_power", "beta2_power", "lr",
                                        "beta1",       "beta2",       "epsilon"};
    return apply(c, PSG_CU_ADAM, 2, 9, 6, in, names);
}

/* inputs: var, accum, lr, grad */
int psg_gpu_apply_adagrad(psg_kernel_ctx_t *c) {
    static const int in[] = {2};
    static const char *const names[] = {"lr"};
    return apply(c, PSG_CU_ADAGRAD, 1, 3, 1, in, names);
}

/* inputs: var (f32), factor (scalar f32) */
int psg_gpu_scale_variable(psg_kernel_ctx_t *c) {
    psg_variable_t *v = NULL;
    const float *f = NULL;
    if (psg_update_variable(c, psg_gpu_variable, 0, &v) < 0 || scalar_input(c, 1, "factor", &f) < 0)
        return -1;
    pthread_mutex_lock(&v->lock);
    int rc = psg_cuda_scale_by(c->device, psg_tensor_f32(v->value), psg_tensor_numel(v->value), f);
    pthread_mutex_unlock(&v->lock);
    return rc;
}

/* input: var (i64, i32 or f32): var += attr "by" */
int psg_gpu_increment_variable(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_gpu_variable(c, 0);
    if (!v) return -1;
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    pthread_mutex_lock(&v->lock);
    int rc = psg_cuda_increment(c->device, (int)v->dtype, v->value->data,
                                psg_tensor_numel(v->value), psg_node_get_int(c->node, "by", 1));
    pthread_mutex_unlock(&v->lock);
    return rc;
}

/* input: step (scalar i64, i32 or f32); output: scalar f32 */
int psg_gpu_exponential_decay(psg_kernel_ctx_t *c) {
    const psg_tensor_t *t = c->inputs[0];
    if (t->dtype != PSG_DT_I64 && t->dtype != PSG_DT_I32 && t->dtype != PSG_DT_F32)
        return psg_error_set("step must be i64, i32 or f32, got %s", psg_dtype_name(t->dtype));
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    return psg_cuda_exponential_decay(c->device, (int)t->dtype, t->data, psg_tensor_f32(out),
                                      psg_node_get_float(c->node, "learning_rate", 0.0),
                                      psg_node_get_float(c->node, "decay_steps", 1.0),
                                      psg_node_get_float(c->node, "decay_rate", 1.0),
                                      psg_node_get_bool(c->node, "staircase", false));
}
