/* The ops that partitioning adds: Send and Recv, the two ends of one cut
 * edge, matched through the rendezvous by key and step id. Defs and shape
 * inference; kernels in ops/cpu/sendrecv.c. Not the partitioner that
 * inserts them (runtime/partition.c). */
#include "ops/cpu/sendrecv.h"
#include "psgraph/error.h"

#include <string.h>

/* ---- inference ---- */

static int check_edge_attrs(psg_infer_ctx_t *c) {
    static const char *const keys[] = {"tensor_name", "send_device", "recv_device"};
    for (int i = 0; i < 3; i++) {
        const char *v = psg_node_get_str(c->node, keys[i], NULL);
        if (!v || !v[0]) return psg_error_set("missing string attribute '%s'", keys[i]);
        if (strchr(v, ';')) return psg_error_set("attribute '%s' holds a ';'", keys[i]);
    }
    return 0;
}

static int infer_send(psg_infer_ctx_t *c) {
    if (check_edge_attrs(c) < 0) return -1;
    if (c->in_dtypes[0] == PSG_DT_RESOURCE)
        return psg_error_set("a resource handle cannot be sent (its users must sit beside it)");
    return 0;
}

static int infer_recv(psg_infer_ctx_t *c) {
    if (check_edge_attrs(c) < 0) return -1;
    const psg_attr_t *dt = psg_node_attr(c->node, "dtype");
    const psg_attr_t *sh = psg_node_attr(c->node, "shape");
    if (!dt || dt->type != PSG_ATTR_DTYPE || psg_dtype_size(dt->u.dtype) == 0 ||
        dt->u.dtype == PSG_DT_RESOURCE)
        return psg_error_set("missing or invalid attribute 'dtype'");
    if (sh && sh->type != PSG_ATTR_SHAPE) return psg_error_set("attribute 'shape' is not a shape");
    c->out_dtypes[0] = dt->u.dtype;
    c->out_shapes[0] = sh ? sh->u.shape : psg_shape_unknown();
    return 0;
}

/* ---- defs ---- */

static const psg_op_def_t op_send = {.name = "Send",
                                     .num_inputs = 1,
                                     .num_outputs = 0,
                                     .flags = PSG_OP_STATEFUL,
                                     .infer = infer_send,
                                     .cpu = psg_cpu_send};
static const psg_op_def_t op_recv = {.name = "Recv",
                                     .num_inputs = 0,
                                     .num_outputs = 1,
                                     .flags = PSG_OP_STATEFUL | PSG_OP_ASYNC,
                                     .infer = infer_recv,
                                     .cpu = psg_cpu_recv};

const psg_op_def_t *const psg_sendrecv_ops[] = {
    &op_send,
    &op_recv,
    NULL,
};
