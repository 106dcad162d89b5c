/* The runner's side of the kernel context (psgraph/kernel.h): what the executor fills
 * so that a kernel reaches it without calling up. A synchronous kernel needs nothing
 * from it (its outputs land in ctx->outputs, allocated by ops/kernel_ctx.c with the
 * host's or the GPU's allocator, both below the executor); an async one finishes
 * through the done hook of its psg_async_op. Not the kernels' API. */
#ifndef PSGRAPH_OPS_KERNEL_CTX_H
#define PSGRAPH_OPS_KERNEL_CTX_H

#include "psgraph/kernel.h"

/* A PSG_OP_ASYNC node between its kernel's start and its psg_async_op_done. The runner
 * allocates it, fills every field but outputs before the kernel starts, and owns it:
 * psg_async_op_done hands it back through done, which frees it. */
struct psg_async_op {
    const psg_node_t *node;
    /* the runner's: called once, on the thread of psg_async_op_done, with its rc (0, or
     * -1 with the error set); the outputs the kernel set are in a->outputs */
    void (*done)(psg_async_op_t *a, int rc);
    void *runner;     /* the runner's, for done: its run */
    int index;        /* the runner's, for done: the node in its plan */
    int64_t start_ns; /* the runner's, for done: when the kernel started (timing) */
    psg_tensor_t *outputs[PSG_MAX_OUTPUTS];
};

#endif
