/* The ops that partitioning and partitioned variables add: Send and Recv
 * (one cut edge, matched through the rendezvous by key and step id) and the
 * shard ops ConcatAxis0 / SliceAxis0 (the read of a partitioned variable and
 * its gradient). Defs, shape inference, gradients, builders; kernels in
 * ops/cpu/sendrecv.c. Not the partitioner that inserts Send/Recv (graph/). */
#include "ops/cpu/sendrecv.h"
#include "psgraph/error.h"
#include "psgraph/placement.h"

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

static int infer_concat_axis0(psg_infer_ctx_t *c) {
    int known = -1;
    bool some_unknown = false;
    for (int i = 0; i < c->num_inputs; i++) {
        if (c->in_dtypes[i] != c->in_dtypes[0] || c->in_dtypes[i] == PSG_DT_RESOURCE)
            return psg_error_set("input %d is %s, input 0 is %s", i, psg_dtype_name(c->in_dtypes[i]),
                                 psg_dtype_name(c->in_dtypes[0]));
        if (c->in_shapes[i].rank == 0) return psg_error_set("input %d is a scalar: nothing to concatenate", i);
        if (c->in_shapes[i].rank < 0) some_unknown = true;
        else if (known < 0) known = i;
    }
    psg_shape_t out = known < 0 ? psg_shape_unknown() : c->in_shapes[known];
    for (int i = 0; known >= 0 && i < c->num_inputs; i++) {
        const psg_shape_t *s = &c->in_shapes[i];
        if (s->rank < 0 || i == known) continue;
        bool ok = s->rank == out.rank;
        for (int d = 1; ok && d < s->rank; d++)
            ok = s->dims[d] < 0 || out.dims[d] < 0 || s->dims[d] == out.dims[d];
        if (!ok) {
            char a[PSG_SHAPE_STR_MAX], b[PSG_SHAPE_STR_MAX];
            return psg_error_set("input %d has shape %s, which does not stack on %s", i,
                                 psg_shape_str(s, a, sizeof a),
                                 psg_shape_str(&c->in_shapes[known], b, sizeof b));
        }
        for (int d = 1; d < s->rank; d++)
            if (out.dims[d] < 0) out.dims[d] = s->dims[d];
        out.dims[0] = (out.dims[0] < 0 || s->dims[0] < 0) ? -1 : out.dims[0] + s->dims[0];
    }
    if (known >= 0 && some_unknown) out.dims[0] = -1;
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = out;
    return 0;
}

static int infer_slice_axis0(psg_infer_ctx_t *c) {
    int64_t begin = psg_node_get_int(c->node, "begin", -1), size = psg_node_get_int(c->node, "size", -1);
    const psg_shape_t *s = &c->in_shapes[0];
    if (begin < 0 || size < 0) return psg_error_set("needs attributes 'begin' >= 0 and 'size' >= 0");
    if (s->rank == 0) return psg_error_set("input 0 is a scalar: nothing to slice");
    if (s->rank > 0 && s->dims[0] >= 0 && begin + size > s->dims[0])
        return psg_error_set("rows [%lld, %lld) are outside the %lld rows of input 0",
                             (long long)begin, (long long)(begin + size), (long long)s->dims[0]);
    psg_shape_t out = *s;
    if (out.rank > 0) out.dims[0] = size;
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = out;
    return 0;
}

/* ---- gradients ---- */

/* Each input gets its rows of dy: the partitioned variable's shards each get
 * the slice of the gradient that belongs to them. */
static int grad_concat_axis0(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                             psg_endpoint_t *dx) {
    int64_t at = 0;
    for (int i = 0; i < psg_node_num_inputs(n); i++) {
        const psg_shape_t *s = psg_graph_shape(g, psg_node_input(n, i));
        if (s->rank < 1 || s->dims[0] < 0)
            return psg_error_set("ConcatAxis0's gradient needs the first dim of input %d", i);
        dx[i] = psg_slice_axis0(g, NULL, dy[0], at, s->dims[0]);
        if (!psg_endpoint_valid(dx[i])) return -1;
        at += s->dims[0];
    }
    return 0;
}

/* ---- defs ---- */

static const psg_op_def_t op_send = {"Send", 1, 0, PSG_OP_STATEFUL, infer_send, NULL, psg_cpu_send, NULL};
static const psg_op_def_t op_recv = {"Recv", 0, 1, PSG_OP_STATEFUL | PSG_OP_ASYNC, infer_recv, NULL,
                                     psg_cpu_recv, NULL};
static const psg_op_def_t op_concat_axis0 = {"ConcatAxis0", -1, 1, 0, infer_concat_axis0,
                                             grad_concat_axis0, psg_cpu_concat_axis0, NULL};
static const psg_op_def_t op_slice_axis0 = {"SliceAxis0", 1, 1, 0, infer_slice_axis0, NULL,
                                            psg_cpu_slice_axis0, NULL};

const psg_op_def_t *const psg_sendrecv_ops[] = {
    &op_send, &op_recv, &op_concat_axis0, &op_slice_axis0, NULL,
};

/* ---- builders ---- */

psg_endpoint_t psg_concat_axis0(psg_graph_t *g, const char *name, int n, const psg_endpoint_t *xs) {
    psg_node_builder_t *b = psg_node_begin(g, "ConcatAxis0", name);
    for (int i = 0; i < n; i++) psg_node_add_input(b, xs[i]);
    return psg_node_finish_ep(b);
}

psg_endpoint_t psg_slice_axis0(psg_graph_t *g, const char *name, psg_endpoint_t x, int64_t begin,
                               int64_t size) {
    psg_node_builder_t *b = psg_node_begin(g, "SliceAxis0", name);
    psg_node_add_input(b, x);
    psg_node_attr_int(b, "begin", begin);
    psg_node_attr_int(b, "size", size);
    return psg_node_finish_ep(b);
}
