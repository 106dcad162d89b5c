/* CPU kernels of Send (leaves its input in the step's rendezvous, no copy)
 * and Recv (async: takes it when it arrives, checked against the edge's
 * dtype and shape). Not the rendezvous (ops/state/rendezvous.c) nor the wire. */
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
        return psg_error_set("no rendezvous for key '%s' (Send runs only in a partitioned step)",
                             key);
    psg_tensor_t *t = psg_tensor_ref(c->inputs[0]);
    return psg_rendezvous_send(c->rendezvous, c->step_id, key, &t);
}

static void recv_done(void *arg, psg_tensor_t *t, psg_err_code_t code, const char *error) {
    psg_async_op_t *a = arg;
    const psg_node_t *n = psg_async_op_node(a);
    if (!t) {
        psg_error_set_code(code, "%s", error);
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
        return psg_error_set("no rendezvous for key '%s' (Recv runs only in a partitioned step)",
                             key);
    PSG_ASSERT(c->async);
    psg_rendezvous_recv_async(c->rendezvous, c->step_id, key,
                              psg_rendezvous_default_timeout_ms(c->rendezvous), recv_done,
                              c->async);
    return 0;
}
