/* CUDA kernels (C glue) of the array and state ops: constants copied to the
 * GPU, AddN, fills, broadcasts and their reductions, and variables whose
 * value moves to the GPU of the first kernel that uses them. The ops that
 * only alias (Identity, Reshape, VarHandle, NoOp) use their CPU kernels,
 * which never touch the bytes. */
#include "ops/cpu/array.h"
#include "ops/cpu/broadcast.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "psgraph/device.h"
#include "psgraph/error.h"

#include <string.h>

/* The value is copied to the GPU by the plan's first run and kept in the
 * kernel's state (psg_const_state_t), as TensorFlow's ConstantOp holds its
 * tensor: a copy each run put a host-to-device copy, and its waits, on every
 * step (an H100, Inception-v3: 94 Consts, 0.5 ms each). */
int psg_gpu_const(psg_kernel_ctx_t *c) {
    psg_const_state_t *st = c->state;
    if (!st->value) {
        st->value = psg_tensor_to_device(psg_node_attr(c->node, "value")->u.tensor,
                                         PSG_DEVICE_GPU(c->device));
        if (!st->value) return -1;
    }
    psg_kernel_set_output(c, 0, st->value);
    return 0;
}

int psg_gpu_add_n(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (out->dtype != PSG_DT_F32) return psg_error_set("AddN supports f32 only");
    int64_t n = psg_tensor_numel(out);
    for (int i = 1; i < c->num_inputs; i++)
        if (psg_tensor_numel(c->inputs[i]) != n)
            return psg_error_set("input %d has another size", i);
    if (psg_cuda_memcpy(c->device, out->data, c->inputs[0]->data, psg_tensor_nbytes(out)) < 0)
        return -1;
    for (int i = 1; i < c->num_inputs; i++)
        if (psg_cuda_add_into(c->device, psg_tensor_f32(out), psg_tensor_f32(c->inputs[i]), n) < 0)
            return -1;
    return 0;
}

int psg_gpu_fill_like(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    return psg_cuda_fill(c->device, (int)out->dtype, out->data, psg_tensor_numel(out),
                         psg_node_get_float(c->node, "value", 0.0));
}

int psg_gpu_sum_to_shape_of(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (out->dtype != PSG_DT_F32) return psg_error_set("SumToShapeOf supports f32 only");
    const psg_tensor_t *x = c->inputs[0];
    bool reduced[PSG_MAX_RANK];
    int shift = x->shape.rank - out->shape.rank;
    for (int i = 0; i < x->shape.rank; i++)
        reduced[i] = i < shift || (out->shape.dims[i - shift] == 1 && x->shape.dims[i] != 1);
    return psg_gpu_reduce_axes(c->device, x, reduced, out, 1.0f);
}

int psg_gpu_broadcast_like(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (out->dtype != PSG_DT_F32) return psg_error_set("BroadcastLike supports f32 only");
    psg_cu_bcast_t bc = {.rank = out->shape.rank};
    memcpy(bc.dims, out->shape.dims, sizeof(int64_t) * (size_t)out->shape.rank);
    psg_broadcast_strides(&c->inputs[0]->shape, &out->shape, bc.sa);
    return psg_cuda_broadcast(c->device, psg_tensor_f32(c->inputs[0]), psg_tensor_f32(out), &bc);
}

psg_variable_t *psg_gpu_variable(psg_kernel_ctx_t *c, int input) {
    psg_variable_t *v = psg_kernel_variable(c, input);
    int rc = 0;
    pthread_mutex_lock(&v->lock);
    if (psg_tensor_gpu(v->value) != c->device) {
        psg_tensor_t *t = psg_tensor_to_device(v->value, PSG_DEVICE_GPU(c->device));
        if (t) {
            psg_tensor_t *old = psg_variable_swap_value(v, t);
            psg_tensor_destroy(&old);
        } else {
            rc = psg_error_wrap("moving variable '%s' to GPU %d", v->name, c->device);
        }
    }
    pthread_mutex_unlock(&v->lock);
    return rc == 0 ? v : NULL;
}

int psg_gpu_read_variable(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_gpu_variable(c, 0);
    if (!v) return -1;
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    psg_tensor_t *t = psg_variable_value_ref(v); /* as ops/cpu/array.c's ReadVariable */
    psg_kernel_set_output(c, 0, t);
    psg_tensor_destroy(&t);
    return 0;
}

int psg_gpu_assign(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_gpu_variable(c, 0);
    if (!v || psg_variable_check_value(v, c->inputs[1]) < 0) return -1;
    pthread_mutex_lock(&v->lock);
    int rc =
        psg_cuda_memcpy(c->device, v->value->data, c->inputs[1]->data, psg_tensor_nbytes(v->value));
    if (rc == 0) v->initialized = true;
    pthread_mutex_unlock(&v->lock);
    return rc;
}

int psg_gpu_assign_add(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_gpu_variable(c, 0);
    if (!v || psg_variable_check_value(v, c->inputs[1]) < 0) return -1;
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    if (v->dtype != PSG_DT_F32) return psg_error_set("AssignAdd supports f32 only");
    pthread_mutex_lock(&v->lock);
    int rc = psg_cuda_add_into(c->device, psg_tensor_f32(v->value), psg_tensor_f32(c->inputs[1]),
                               psg_tensor_numel(v->value));
    pthread_mutex_unlock(&v->lock);
    return rc;
}
