/* What an op's own code calls: its kernel's context (the inputs, the outputs it
 * allocates or aliases, the finish of an async kernel) and the helpers of infer and
 * grad functions. All of it is the ops layer's (ops/kernel_ctx.c, ops/infer_util.c):
 * a kernel never calls up into the executor that runs it, which reaches the kernel
 * through the context it fills (ops/kernel_ctx.h). The def and the registry are
 * psgraph/op.h. */
#ifndef PSGRAPH_KERNEL_H
#define PSGRAPH_KERNEL_H

#include "psgraph/op.h"

struct psg_rendezvous;

/* What a kernel sees for one run of one node. */
struct psg_kernel_ctx {
    const psg_node_t *node;
    int num_inputs;
    psg_tensor_t *const *inputs;
    int num_outputs;
    psg_tensor_t **outputs;        /* the kernel sets each (alloc below or an alias) */
    const psg_dtype_t *out_dtypes; /* inferred from the concrete input shapes */
    const psg_shape_t *out_shapes;
    psg_resource_mgr_t *resources;
    psg_threadpool_t *pool; /* for psg_parallel_for; may be NULL */
    int64_t step_id;
    struct psg_rendezvous *rendezvous; /* the step's, for Send/Recv; NULL when the run has none */
    psg_async_op_t *async;             /* set for PSG_OP_ASYNC ops only */
    int device;         /* -1: a CPU kernel on host tensors; k: a CUDA kernel on GPU k's tensors */
    const void *params; /* the def's prepare struct for this node; NULL without prepare */
    void *state;        /* the def's state for this plan node; NULL without state_size */
};

/* Allocates output i with its inferred dtype and shape (uninitialized), in
 * host memory or on the kernel's GPU (ctx->device), and returns it (still
 * owned by the ctx). NULL with the error set on failure. */
psg_tensor_t *psg_kernel_alloc_output(psg_kernel_ctx_t *ctx, int i);
/* Makes output i an alias of t (takes a new reference). */
void psg_kernel_set_output(psg_kernel_ctx_t *ctx, int i, psg_tensor_t *t);

/* An op flagged PSG_OP_ASYNC: its kernel returns 0 once it has started the
 * work (or -1 with the error set if it could not, and then never calls done),
 * keeps ctx->async (the ctx itself is gone after the call) and later, from
 * any thread, sets each output and calls psg_async_op_done exactly once.
 * The outputs' shapes come from the data: no completeness check is made. */
/* Makes output i of the pending op t (takes a new reference). */
void psg_async_op_set_output(psg_async_op_t *a, int i, psg_tensor_t *t);
/* The node the pending op runs (for messages and attributes). */
const psg_node_t *psg_async_op_node(const psg_async_op_t *a);
/* Finishes the op: rc 0, or -1 with the error set on the calling thread.
 * a is gone after the call. */
void psg_async_op_done(psg_async_op_t *a, int rc);

/* The gradient of an op whose outputs do not vary smoothly with its inputs (ArgMax,
 * Equal, counts, shapes, ids): no gradient for any input. */
int psg_grad_none(psg_graph_t *g, const psg_node_t *n, const psg_endpoint_t *dy,
                  psg_endpoint_t *dx);

/* ---- helpers for infer functions ---- */

/* Checks input i has dtype dt; error "input i (name) must be f32, got i64". */
int psg_infer_expect_dtype(psg_infer_ctx_t *c, int i, psg_dtype_t dt);
/* For the ops that run in f32 or a 16-bit float (mixed precision): checks
 * every input is f32, bf16 or f16, all one dtype, and sets *dt to it. */
int psg_infer_expect_compute_dtype(psg_infer_ctx_t *c, psg_dtype_t *dt);
/* Checks input i has rank r (unknown rank passes). */
int psg_infer_expect_rank(psg_infer_ctx_t *c, int i, int rank);
/* Numpy broadcasting of two shapes into *out; -1 with the error set if they
 * cannot broadcast. Unknown dims broadcast to unknown. */
int psg_shape_broadcast(const psg_shape_t *a, const psg_shape_t *b, psg_shape_t *out);

#endif
