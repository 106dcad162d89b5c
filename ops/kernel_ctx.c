/* The kernel context's helpers (psgraph/kernel.h): a kernel's outputs, allocated on
 * its device or aliased, and the finish of an async kernel, which goes back to the
 * runner through the hook it filled (ops/kernel_ctx.h). Nothing here knows the
 * executor: the ops layer links against graph and core only. Not the kernels. */
#include "ops/kernel_ctx.h"

#include "psgraph/device.h"
#include "psgraph/error.h"

psg_tensor_t *psg_kernel_alloc_output(psg_kernel_ctx_t *ctx, int i) {
    PSG_ASSERT(i >= 0 && i < ctx->num_outputs && !ctx->outputs[i]);
    ctx->outputs[i] = ctx->device >= 0
                          ? psg_gpu_tensor_new(ctx->device, ctx->out_dtypes[i], &ctx->out_shapes[i])
                          : psg_tensor_new(ctx->out_dtypes[i], &ctx->out_shapes[i]);
    return ctx->outputs[i];
}

void psg_kernel_set_output(psg_kernel_ctx_t *ctx, int i, psg_tensor_t *t) {
    PSG_ASSERT(i >= 0 && i < ctx->num_outputs && !ctx->outputs[i]);
    ctx->outputs[i] = psg_tensor_ref(t);
}

void psg_async_op_set_output(psg_async_op_t *a, int i, psg_tensor_t *t) {
    PSG_ASSERT(i >= 0 && i < PSG_MAX_OUTPUTS && !a->outputs[i]);
    a->outputs[i] = psg_tensor_ref(t);
}

const psg_node_t *psg_async_op_node(const psg_async_op_t *a) {
    return a->node;
}

void psg_async_op_done(psg_async_op_t *a, int rc) {
    a->done(a, rc);
}
