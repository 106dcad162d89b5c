/* The setup the CPU and the CUDA kernels of the math ops share (math_setup.h). */
#include "ops/math_setup.h"
#include "ops/cpu/math.h"
#include "ops/params.h"

int psg_reduce_setup(psg_kernel_ctx_t *c, psg_reduce_setup_t *s) {
    const psg_tensor_t *x = c->inputs[0];
    s->mean = ((const psg_math_fn_params_t *)psg_kernel_params(c))->fn == PSG_MATH_MEAN;
    s->out = psg_kernel_alloc_output(c, 0);
    if (!s->out || psg_math_reduced_axes(c->node, x->shape.rank, s->reduced) < 0) return -1;
    s->n = psg_tensor_numel(x);
    s->m = psg_tensor_numel(s->out);
    return 0;
}

int psg_reduction_size_setup(psg_kernel_ctx_t *c, psg_tensor_t **out, int64_t *count) {
    *count = psg_math_reduced_count(c->node, &c->inputs[0]->shape);
    *out = *count < 0 ? NULL : psg_kernel_alloc_output(c, 0);
    return *out ? 0 : -1;
}

int psg_rows_setup(psg_kernel_ctx_t *c, psg_rows_setup_t *s) {
    const psg_shape_t *x = &c->inputs[0]->shape;
    s->log = c->params && ((const psg_math_fn_params_t *)c->params)->fn == PSG_MATH_LOG_SOFTMAX;
    s->out = psg_kernel_alloc_output(c, 0);
    if (!s->out) return -1;
    s->C = x->rank ? x->dims[x->rank - 1] : 1;
    s->rows = s->C ? psg_tensor_numel(c->inputs[0]) / s->C : 0;
    return 0;
}

int psg_matmul_setup(psg_kernel_ctx_t *c, psg_matmul_setup_t *s) {
    const psg_matmul_params_t *p = psg_kernel_params(c);
    s->ta = p->transpose_a;
    s->tb = p->transpose_b;
    s->out = psg_kernel_alloc_output(c, 0);
    if (!s->out) return -1;
    s->M = s->out->shape.dims[0];
    s->N = s->out->shape.dims[1];
    s->K = c->inputs[0]->shape.dims[s->ta ? 0 : 1];
    return 0;
}

int psg_dense_backprop_setup(psg_kernel_ctx_t *c, bool *relu, psg_tensor_t **dz,
                             psg_tensor_t **db) {
    *relu = ((const psg_matmul_params_t *)psg_kernel_params(c))->relu;
    if (*relu) {
        *dz = psg_kernel_alloc_output(c, 0);
        if (!*dz) return -1;
    } else {
        psg_kernel_set_output(c, 0, c->inputs[0]);
        *dz = c->outputs[0];
    }
    *db = psg_kernel_alloc_output(c, 1);
    return *db ? 0 : -1;
}

int psg_cast_setup(psg_kernel_ctx_t *c, psg_tensor_t **out) {
    *out = NULL;
    if (c->inputs[0]->dtype == c->out_dtypes[0]) {
        psg_kernel_set_output(c, 0, c->inputs[0]);
        return 0;
    }
    *out = psg_kernel_alloc_output(c, 0);
    return *out ? 0 : -1;
}

int psg_concat_setup(psg_kernel_ctx_t *c, psg_concat_setup_t *s) {
    s->out = psg_kernel_alloc_output(c, 0);
    if (!s->out) return -1;
    const psg_shape_t *o = &s->out->shape;
    s->axis = ((const psg_concat_params_t *)psg_kernel_params(c))->axis;
    if (s->axis < 0) s->axis += o->rank;
    s->outer = s->inner = 1;
    for (int i = 0; i < s->axis; i++) s->outer *= o->dims[i];
    for (int i = s->axis + 1; i < o->rank; i++) s->inner *= o->dims[i];
    s->out_row = psg_concat_row(s, s->out);
    return 0;
}

size_t psg_concat_row(const psg_concat_setup_t *s, const psg_tensor_t *x) {
    return (size_t)(x->shape.dims[s->axis] * s->inner) * psg_dtype_size(x->dtype);
}

const int64_t *psg_slice_begin(const psg_node_t *n) {
    return psg_node_attr(n, "begin")->u.ints.v;
}
