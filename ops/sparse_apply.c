/* The sparse updates: SparseApplyGradientDescent, SparseApplyMomentum, SparseApplyAdagrad,
 * SparseApplyFtrl and SparseApplyAdam (lazy: only the touched rows' slots move), which
 * change the rows `indices` of a variable and its slots in place, duplicate ids summed
 * first: defs, shape inference, the builder. Kernels: ops/cpu/sparse_apply.c. Not the
 * optimizers that choose them (runtime/optimizer.c). */
#include "ops/cpu/sparse_apply.h"
#include "psgraph/error.h"
#include "psgraph/ops_sparse.h"
#include "psgraph/ops_train.h"

#include <string.h>

/* input 0 the variable, 1..nslots its slots, `grad` the rows (n, d...), grad + 1 the
 * indices (n), every other input a scalar f32 */
typedef struct {
    int nslots;
    int grad;
    const char *const *names;
} sparse_sig_t;

static const char *const gd_names[] = {"var", "lr", "grad", "indices"};
static const char *const mom_names[] = {"var", "accum", "lr", "grad", "indices", "momentum"};
static const char *const adagrad_names[] = {"var", "accum", "lr", "grad", "indices"};
static const char *const ftrl_names[] = {"var", "accum", "linear", "grad",    "indices",
                                         "lr",  "l1",    "l2",     "lr_power"};
static const char *const adam_names[] = {"var",         "m",    "v",      "beta1_power",
                                         "beta2_power", "lr",   "beta1",  "beta2",
                                         "epsilon",     "grad", "indices"};

static const sparse_sig_t sig_gd = {0, 2, gd_names};
static const sparse_sig_t sig_mom = {1, 3, mom_names};
static const sparse_sig_t sig_adagrad = {1, 3, adagrad_names};
static const sparse_sig_t sig_ftrl = {2, 3, ftrl_names};
static const sparse_sig_t sig_adam = {2, 9, adam_names};

static int infer_sparse(psg_infer_ctx_t *c, const sparse_sig_t *sig) {
    const char *var = psg_node_get_str(c->node, "var_name", "?");
    const psg_shape_t *vs = &c->in_shapes[0];
    char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
    for (int k = 0; k <= sig->nslots; k++) {
        if (c->in_dtypes[k] != PSG_DT_RESOURCE)
            return psg_error_set("input %d (%s) must be a variable handle, got %s", k,
                                 sig->names[k], psg_dtype_name(c->in_dtypes[k]));
        if (k > 0 && !psg_shape_equal(&c->in_shapes[k], vs))
            return psg_error_set("slot %s of shape %s does not match variable '%s' of shape %s",
                                 sig->names[k], psg_shape_str(&c->in_shapes[k], a, sizeof a), var,
                                 psg_shape_str(vs, b, sizeof b));
    }
    if (vs->rank < 1) return psg_error_set("variable '%s' has no rows to update", var);
    const psg_shape_t *g = &c->in_shapes[sig->grad], *ix = &c->in_shapes[sig->grad + 1];
    if (c->in_dtypes[sig->grad] != PSG_DT_F32)
        return psg_error_set("gradient of variable '%s' must be f32, got %s", var,
                             psg_dtype_name(c->in_dtypes[sig->grad]));
    psg_dtype_t it = c->in_dtypes[sig->grad + 1];
    if ((it != PSG_DT_I32 && it != PSG_DT_I64) || (ix->rank >= 0 && ix->rank != 1))
        return psg_error_set("indices of variable '%s' must be i32 or i64 of rank 1, got %s%s", var,
                             psg_dtype_name(it), psg_shape_str(ix, a, sizeof a));
    bool ok = g->rank < 0 || g->rank == vs->rank;
    for (int d = 1; ok && g->rank > 0 && d < vs->rank; d++)
        ok = g->dims[d] < 0 || g->dims[d] == vs->dims[d];
    if (ok && g->rank > 0 && ix->rank == 1)
        ok = g->dims[0] < 0 || ix->dims[0] < 0 || g->dims[0] == ix->dims[0];
    if (!ok)
        return psg_error_set(
            "gradient rows %s at indices %s do not match variable '%s' of shape %s",
            psg_shape_str(g, a, sizeof a), psg_shape_str(ix, b, sizeof b), var,
            psg_shape_str(vs, (char[PSG_SHAPE_STR_MAX]){0}, PSG_SHAPE_STR_MAX));
    for (int i = sig->nslots + 1; i < c->num_inputs; i++) {
        if (i == sig->grad || i == sig->grad + 1) continue;
        const psg_shape_t *s = &c->in_shapes[i];
        if (c->in_dtypes[i] != PSG_DT_F32 || (s->rank > 0 && psg_shape_numel(s) != 1))
            return psg_error_set("%s (input %d) must be a scalar f32, got %s%s", sig->names[i], i,
                                 psg_dtype_name(c->in_dtypes[i]), psg_shape_str(s, a, sizeof a));
    }
    return 0;
}

static int infer_gd(psg_infer_ctx_t *c) {
    return infer_sparse(c, &sig_gd);
}
static int infer_mom(psg_infer_ctx_t *c) {
    return infer_sparse(c, &sig_mom);
}
static int infer_adagrad(psg_infer_ctx_t *c) {
    return infer_sparse(c, &sig_adagrad);
}
static int infer_ftrl(psg_infer_ctx_t *c) {
    return infer_sparse(c, &sig_ftrl);
}
static int infer_adam(psg_infer_ctx_t *c) {
    return infer_sparse(c, &sig_adam);
}

static const psg_op_def_t op_gd = {.name = "SparseApplyGradientDescent",
                                   .num_inputs = 4,
                                   .num_outputs = 0,
                                   .flags = PSG_OP_STATEFUL,
                                   .infer = infer_gd,
                                   .cpu = psg_cpu_sparse_apply_gradient_descent};
static const psg_op_def_t op_mom = {.name = "SparseApplyMomentum",
                                    .num_inputs = 6,
                                    .num_outputs = 0,
                                    .flags = PSG_OP_STATEFUL,
                                    .infer = infer_mom,
                                    .cpu = psg_cpu_sparse_apply_momentum};
static const psg_op_def_t op_adagrad = {.name = "SparseApplyAdagrad",
                                        .num_inputs = 5,
                                        .num_outputs = 0,
                                        .flags = PSG_OP_STATEFUL,
                                        .infer = infer_adagrad,
                                        .cpu = psg_cpu_sparse_apply_adagrad};
static const psg_op_def_t op_ftrl = {.name = "SparseApplyFtrl",
                                     .num_inputs = 9,
                                     .num_outputs = 0,
                                     .flags = PSG_OP_STATEFUL,
                                     .infer = infer_ftrl,
                                     .cpu = psg_cpu_sparse_apply_ftrl};
static const psg_op_def_t op_adam = {.name = "SparseApplyAdam",
                                     .num_inputs = 11,
                                     .num_outputs = 0,
                                     .flags = PSG_OP_STATEFUL,
                                     .infer = infer_adam,
                                     .cpu = psg_cpu_sparse_apply_adam};

const psg_op_def_t *const psg_sparse_apply_ops[] = {&op_gd,   &op_mom,  &op_adagrad,
                                                    &op_ftrl, &op_adam, NULL};

const char *psg_sparse_apply_op(const char *dense_op) {
    static const char *const pairs[][2] = {
        {"ApplyGradientDescent", "SparseApplyGradientDescent"},
        {"ApplyMomentum", "SparseApplyMomentum"},
        {"ApplyAdagrad", "SparseApplyAdagrad"},
        {"ApplyAdam", "SparseApplyAdam"},
        {"ApplyFtrl", "SparseApplyFtrl"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (!strcmp(dense_op, pairs[i][0])) return pairs[i][1];
    return NULL;
}
