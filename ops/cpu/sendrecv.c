/* CPU kernels of Send (leaves its input in the step's rendezvous), Recv
 * (async: takes it when it arrives, checked against the edge's dtype and
 * shape) and the shard ops (Concat by copy, Slice as a view, no copy).
 * Not the rendezvous (graph/rendezvous.c) nor the wire. */
#include "ops/cpu/sendrecv.h"
#include "psgraph/error.h"
#include "psgraph/rendezvous.h"

#include <string.h>

char *psg_sendrecv_key(const psg_node_t *n, char *buf, size_t size) {
    return psg_rendezvous_key(psg_node_get_str(n, "send_device", ""),
                              (uint64_t)psg_node_get_int(n, "send_device_incarnation", 0),
                              psg_node_get_str(n, "recv_device", ""),
                              psg_node_get_str(n, "tensor_name", ""), buf, size);
}

int psg_cpu_send(psg_kernel_ctx_t *c) {
    char key[PSG_RENDEZVOUS_KEY_MAX];
    psg_sendrecv_key(c->node, key, sizeof key);
    if (!c->rendezvous)
        return psg_error_set("no rendezvous for key '%s' (Send runs only in a partitioned step)", key);
    psg_tensor_t *t = psg_tensor_ref(c->inputs[0]);
    return psg_rendezvous_send(c->rendezvous, c->step_id, key, &t);
}

static void recv_done(void *arg, psg_tensor_t *t, const char *error) {
    psg_async_op_t *a = arg;
    const psg_node_t *n = psg_async_op_node(a);
    if (!t) {
        psg_error_set("%s", error);
        psg_async_op_done(a, -1);
        return;
    }
    const psg_attr_t *dta = psg_node_attr(n, "dtype");
    psg_dtype_t dt = dta && dta->type == PSG_ATTR_DTYPE ? dta->u.dtype : PSG_DT_INVALID;
    const psg_attr_t *sh = psg_node_attr(n, "shape");
    if (t->dtype != dt || (sh && !psg_shape_compatible(&t->shape, &sh->u.shape))) {
        char key[PSG_RENDEZVOUS_KEY_MAX], a1[PSG_SHAPE_STR_MAX], a2[PSG_SHAPE_STR_MAX];
        psg_error_set("key '%s' brought %s%s, the edge is %s%s",
                      psg_sendrecv_key(n, key, sizeof key), psg_dtype_name(t->dtype),
                      psg_shape_str(&t->shape, a1, sizeof a1), psg_dtype_name(dt),
                      sh ? psg_shape_str(&sh->u.shape, a2, sizeof a2) : "");
        psg_tensor_destroy(&t);
        psg_async_op_done(a, -1);
        return;
    }
    psg_async_op_set_output(a, 0, t);
    psg_tensor_destroy(&t);
    psg_async_op_done(a, 0);
}

int psg_cpu_recv(psg_kernel_ctx_t *c) {
    char key[PSG_RENDEZVOUS_KEY_MAX];
    psg_sendrecv_key(c->node, key, sizeof key);
    if (!c->rendezvous)
        return psg_error_set("no rendezvous for key '%s' (Recv runs only in a partitioned step)", key);
    PSG_ASSERT(c->async);
    psg_rendezvous_recv_async(c->rendezvous, c->step_id, key,
                              psg_rendezvous_default_timeout_ms(c->rendezvous), recv_done, c->async);
    return 0;
}

int psg_cpu_concat_axis0(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    char *o = out->data;
    size_t at = 0, total = psg_tensor_nbytes(out);
    for (int i = 0; i < c->num_inputs; i++) {
        size_t nb = psg_tensor_nbytes(c->inputs[i]);
        if (at + nb > total) return psg_error_set("input %d does not fit the output", i);
        if (nb) memcpy(o + at, c->inputs[i]->data, nb);
        at += nb;
    }
    if (at != total) return psg_error_set("inputs fill %zu of %zu bytes", at, total);
    return 0;
}

int psg_cpu_slice_axis0(psg_kernel_ctx_t *c) {
    /* x is (N, ...), the output (size, ...) from row begin: a view of x's buffer */
    const psg_tensor_t *x = c->inputs[0];
    int64_t begin = psg_node_get_int(c->node, "begin", 0);
    int64_t row = x->shape.dims[0] ? psg_tensor_numel(x) / x->shape.dims[0] : 0;
    size_t offset = (size_t)((char *)x->data - (char *)x->buf->data) +
                    (size_t)(begin * row) * psg_dtype_size(x->dtype);
    psg_tensor_t *t = psg_tensor_from_buffer(x->dtype, &c->out_shapes[0], x->buf, offset);
    if (!t) return -1;
    psg_kernel_set_output(c, 0, t);
    psg_tensor_destroy(&t);
    return 0;
}
