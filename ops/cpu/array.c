/* CPU kernels of the array and state ops. Most alias their input (no copy):
 * Const, Identity, Reshape, ReadVariable return a tensor sharing the buffer. */
#include "core/rng.h"
#include "ops/cpu/array.h"
#include "ops/cpu/broadcast.h"
#include "psgraph/error.h"

#include <math.h>
#include <string.h>

int psg_cpu_const(psg_kernel_ctx_t *c) {
    psg_kernel_set_output(c, 0, psg_node_attr(c->node, "value")->u.tensor);
    return 0;
}

void psg_const_state_free(void *state) {
    psg_tensor_destroy(&((psg_const_state_t *)state)->value);
}

int psg_cpu_placeholder(psg_kernel_ctx_t *c) {
    (void)c;
    return psg_error_set("placeholder must be fed");
}

int psg_cpu_identity(psg_kernel_ctx_t *c) {
    psg_kernel_set_output(c, 0, c->inputs[0]);
    return 0;
}

int psg_cpu_reshape(psg_kernel_ctx_t *c) {
    psg_tensor_t *t = psg_tensor_reshaped(c->inputs[0], &c->out_shapes[0]);
    if (!t) return -1;
    psg_kernel_set_output(c, 0, t);
    psg_tensor_destroy(&t);
    return 0;
}

int psg_cpu_add_n(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (out->dtype != PSG_DT_F32) return psg_error_set("AddN supports f32 only");
    int64_t n = psg_tensor_numel(out);
    float *o = psg_tensor_f32(out);
    const float *a = psg_tensor_f32(c->inputs[0]);
    for (int64_t j = 0; j < n; j++) o[j] = a[j];
    for (int i = 1; i < c->num_inputs; i++) {
        if (psg_tensor_numel(c->inputs[i]) != n)
            return psg_error_set("input %d has another size", i);
        const float *x = psg_tensor_f32(c->inputs[i]);
        for (int64_t j = 0; j < n; j++) o[j] += x[j];
    }
    return 0;
}

int psg_cpu_fill_like(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    double v = psg_node_get_float(c->node, "value", 0.0);
    int64_t n = psg_tensor_numel(out);
    switch (out->dtype) {
    case PSG_DT_F32: {
        float *o = psg_tensor_f32(out);
        for (int64_t j = 0; j < n; j++) o[j] = (float)v;
        return 0;
    }
    case PSG_DT_I64: {
        int64_t *o = psg_tensor_i64(out);
        for (int64_t j = 0; j < n; j++) o[j] = (int64_t)v;
        return 0;
    }
    case PSG_DT_I32: {
        int32_t *o = psg_tensor_i32(out);
        for (int64_t j = 0; j < n; j++) o[j] = (int32_t)v;
        return 0;
    }
    default: return psg_error_set("FillLike does not support %s", psg_dtype_name(out->dtype));
    }
}

int psg_cpu_sum_to_shape_of(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (out->dtype != PSG_DT_F32) return psg_error_set("SumToShapeOf supports f32 only");
    psg_reduce_to_shape_f32(psg_tensor_f32(c->inputs[0]), &c->inputs[0]->shape, psg_tensor_f32(out),
                            &out->shape);
    return 0;
}

int psg_cpu_broadcast_like(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (out->dtype != PSG_DT_F32) return psg_error_set("BroadcastLike supports f32 only");
    psg_broadcast_to_f32(psg_tensor_f32(c->inputs[0]), &c->inputs[0]->shape, psg_tensor_f32(out),
                         &out->shape);
    return 0;
}

/* A handle is a scalar RESOURCE tensor holding the variable's address; it
 * never leaves the process (placement keeps users beside the variable). */
int psg_cpu_var_handle(psg_kernel_ctx_t *c) {
    const char *shared = psg_node_get_str(c->node, "shared_name", "");
    const char *name = shared[0] ? shared : psg_node_name(c->node);
    const psg_attr_t *dt = psg_node_attr(c->node, "dtype");
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    psg_variable_t *v = psg_resource_variable(c->resources, name, dt->u.dtype, &sh->u.shape);
    if (!v) return -1;
    psg_shape_t scalar = psg_shape_scalar();
    psg_tensor_t *h = psg_tensor_new(PSG_DT_RESOURCE, &scalar);
    if (!h) return -1;
    memcpy(h->data, &v, sizeof v);
    c->outputs[0] = h;
    return 0;
}

psg_variable_t *psg_kernel_variable(psg_kernel_ctx_t *c, int input) {
    psg_variable_t *v;
    PSG_ASSERT(c->inputs[input]->dtype == PSG_DT_RESOURCE);
    memcpy(&v, c->inputs[input]->data, sizeof v);
    return v;
}

int psg_cpu_read_variable(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_kernel_variable(c, 0);
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    /* without the variable's lock (a read does not wait for an update): an update kernel
     * publishes a value written aside only once it is whole (ops/cpu/train.c), and the
     * reference is taken under the pointer's own lock, so no later update frees it first */
    psg_tensor_t *t = psg_variable_value_ref(v);
    psg_kernel_set_output(c, 0, t);
    psg_tensor_destroy(&t);
    return 0;
}

int psg_cpu_assign(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_kernel_variable(c, 0);
    if (psg_variable_check_value(v, c->inputs[1]) < 0) return -1;
    pthread_mutex_lock(&v->lock);
    psg_variable_note_unlogged(v);
    if (v->value->data != c->inputs[1]->data)
        memcpy(v->value->data, c->inputs[1]->data, psg_tensor_nbytes(v->value));
    v->initialized = true;
    pthread_mutex_unlock(&v->lock);
    return 0;
}

int psg_cpu_assign_add(psg_kernel_ctx_t *c) {
    psg_variable_t *v = psg_kernel_variable(c, 0);
    if (psg_variable_check_value(v, c->inputs[1]) < 0) return -1;
    if (!v->initialized)
        return psg_error_set("variable '%s' is not initialized (run the init op first)", v->name);
    if (v->dtype != PSG_DT_F32) return psg_error_set("AssignAdd supports f32 only");
    pthread_mutex_lock(&v->lock);
    psg_variable_note_unlogged(v);
    float *d = psg_tensor_f32(v->value);
    const float *x = psg_tensor_f32(c->inputs[1]);
    /* numel read once: the stores through d could alias the shape, for the compiler */
    for (int64_t i = 0, n = psg_tensor_numel(v->value); i < n; i++) d[i] += x[i];
    pthread_mutex_unlock(&v->lock);
    return 0;
}

int psg_cpu_no_op(psg_kernel_ctx_t *c) {
    (void)c;
    return 0;
}

int psg_cpu_random(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    /* The seed mixes the node's name in, so two variables of one shape and
     * one seed differ, and a graph rebuilt the same way gets the same values. */
    uint64_t s = (uint64_t)psg_node_get_int(c->node, "seed", 0) * 0x100000001b3ull;
    for (const char *p = psg_node_name(c->node); *p; p++)
        s = (s ^ (unsigned char)*p) * 0x100000001b3ull;
    /* a draw of the model (tf.random_normal), not an initial value: new numbers each step */
    if (psg_node_get_bool(c->node, "per_step", false))
        s = (s ^ (uint64_t)c->step_id) * 0x100000001b3ull;
    double scale = psg_node_get_float(c->node, "scale", 1.0);
    const char *dist = psg_node_get_str(c->node, "distribution", "uniform");
    float *o = psg_tensor_f32(out);
    int64_t n = psg_tensor_numel(out);
    if (!strcmp(dist, "constant")) {
        for (int64_t i = 0; i < n; i++) o[i] = (float)scale;
    } else if (!strcmp(dist, "uniform")) {
        for (int64_t i = 0; i < n; i++) o[i] = (float)((2 * psg_uniform01(&s) - 1) * scale);
    } else if (!strcmp(dist, "normal")) {
        for (int64_t i = 0; i < n; i++) o[i] = (float)(psg_normal01(&s) * scale);
    } else {
        for (int64_t i = 0; i < n; i++) {
            double z;
            do z = psg_normal01(&s);
            while (fabs(z) > 2.0);
            o[i] = (float)(z * scale);
        }
    }
    return 0;
}
