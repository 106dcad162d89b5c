/* CUDA kernel (C glue) of Gather: the rows are gathered on the GPU (ops/cuda/sparse.cu),
 * and an index outside the rows fails the op as the CPU kernel does (ops/cpu/sparse.c),
 * which is its reference in tests/test_cuda.c. Not the other sparse ops: CPU only. */
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "psgraph/device.h"
#include "psgraph/error.h"

/* inputs: params (rows, ...), indices (n, i32 or i64), both on the GPU; output (n, ...) */
int psg_gpu_gather(psg_kernel_ctx_t *c) {
    const psg_tensor_t *p = c->inputs[0], *ix = c->inputs[1];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (ix->dtype != PSG_DT_I32 && ix->dtype != PSG_DT_I64)
        return psg_error_set("indices must be i32 or i64, got %s", psg_dtype_name(ix->dtype));
    int64_t rows = p->shape.rank > 0 ? p->shape.dims[0] : 0;
    int64_t row_bytes = (int64_t)psg_dtype_size(p->dtype);
    for (int d = 1; d < p->shape.rank; d++) row_bytes *= p->shape.dims[d];
    int64_t bad = 0;
    if (psg_cuda_gather(c->device, p->data, rows, row_bytes, ix->data, ix->dtype == PSG_DT_I64,
                        psg_tensor_numel(ix), psg_node_get_bool(c->node, "negative_is_zero", false),
                        out->data, &bad) < 0)
        return -1;
    if (bad > 0)
        return psg_error_set("%lld of the indices are outside [0, %lld) of params", (long long)bad,
                             (long long)rows);
    return 0;
}
