/* CUDA kernels (C glue) of the math ops: elementwise with broadcasting,
 * reductions (as (A, R, B) when the axes allow), row-wise softmax and
 * cross-entropy, MatMul and the fused Dense through cuBLAS, concat, slices,
 * casts, dropout. Each mirrors its CPU kernel in ops/cpu/math*.c and matmul.c. */
#include "ops/math_setup.h"
#include "ops/cpu/math.h"
#include "ops/cpu/broadcast.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/runtime.h"
#include "ops/params.h"
#include "psgraph/device.h"
#include "psgraph/error.h"

#include <math.h>
#include <string.h>

/* ---- elementwise ---- */

static int binary(psg_kernel_ctx_t *c, psg_cu_binary_t op) {
    const psg_tensor_t *a = c->inputs[0], *b = c->inputs[1];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    psg_cu_bcast_t bc = {.rank = out->shape.rank};
    memcpy(bc.dims, out->shape.dims, sizeof(int64_t) * (size_t)out->shape.rank);
    psg_broadcast_strides(&a->shape, &out->shape, bc.sa);
    psg_broadcast_strides(&b->shape, &out->shape, bc.sb);
    return psg_cuda_binary(c->device, op, psg_tensor_f32(a), psg_tensor_f32(b), psg_tensor_f32(out),
                           &bc);
}

/* psg_math_fn_t lists the binary and the unary functions in the launchers' orders */
_Static_assert(PSG_MATH_TANH_GRAD - PSG_MATH_ADD == PSG_CU_TANH_GRAD &&
                   PSG_MATH_NEG == PSG_MATH_TANH_GRAD + 1,
               "psg_math_fn_t's binary functions are not in psg_cu_binary_t's order");
_Static_assert(PSG_MATH_TANH - PSG_MATH_NEG == PSG_CU_TANH &&
                   PSG_MATH_POW - PSG_MATH_NEG == PSG_CU_POW,
               "psg_math_fn_t's unary functions are not in psg_cu_unary_t's order");

/* Add..TanhGrad: the prepared function (ops/params.h) */
int psg_gpu_binary(psg_kernel_ctx_t *c) {
    return binary(c, (psg_cu_binary_t)(((const psg_math_fn_params_t *)psg_kernel_params(c))->fn -
                                       PSG_MATH_ADD));
}

static int unary(psg_kernel_ctx_t *c, psg_cu_unary_t op, float p) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    return psg_cuda_unary(c->device, op, p, psg_tensor_f32(c->inputs[0]), psg_tensor_f32(out),
                          psg_tensor_numel(out));
}

/* Neg..Tanh: the prepared function and its constant */
int psg_gpu_unary(psg_kernel_ctx_t *c) {
    const psg_math_fn_params_t *p = psg_kernel_params(c);
    return unary(c, (psg_cu_unary_t)(p->fn - PSG_MATH_NEG), p->p);
}

/* ---- reductions ---- */

int psg_gpu_reduce_axes(int gpu, const psg_tensor_t *x, const bool *reduced, psg_tensor_t *out,
                        float scale) {
    int64_t A, R, B;
    if (psg_math_reduce_as_arb(&x->shape, reduced, &A, &R, &B))
        return psg_cuda_reduce_arb(gpu, psg_tensor_f32(x), psg_tensor_f32(out), A, R, B, scale);
    return psg_cuda_reduce(gpu, psg_tensor_f32(x), x->shape.dims, x->shape.rank, reduced,
                           psg_tensor_f32(out), scale);
}

int psg_gpu_reduce(psg_kernel_ctx_t *c) {
    psg_reduce_setup_t s;
    if (psg_reduce_setup(c, &s) < 0) return -1;
    if (s.n == 0) /* the mean of nothing is NaN, as numpy says; the sum is 0 */
        return psg_cuda_fill(c->device, PSG_CU_F32, s.out->data, s.m, s.mean ? (double)NAN : 0.0);
    float scale = s.mean ? (float)((double)s.m / (double)s.n) : 1.0f;
    return psg_gpu_reduce_axes(c->device, c->inputs[0], s.reduced, s.out, scale);
}

int psg_gpu_reduction_size(psg_kernel_ctx_t *c) {
    psg_tensor_t *out;
    int64_t count;
    if (psg_reduction_size_setup(c, &out, &count) < 0) return -1;
    return psg_cuda_fill(c->device, PSG_CU_F32, out->data, 1, (double)count);
}

int psg_gpu_l2_loss(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    return psg_cuda_sum_squares(c->device, psg_tensor_f32(c->inputs[0]),
                                psg_tensor_numel(c->inputs[0]), 0.5f, psg_tensor_f32(out));
}

/* ---- rows ---- */

int psg_gpu_softmax(psg_kernel_ctx_t *c) {
    psg_rows_setup_t s;
    if (psg_rows_setup(c, &s) < 0) return -1;
    if (s.C == 0) return 0;
    return psg_cuda_softmax(c->device, psg_tensor_f32(c->inputs[0]), psg_tensor_f32(s.out), s.rows,
                            s.C, s.log);
}

/* Labels are not checked before the work, as the CPU kernel does: that
 * needs them on the host. A label outside [0, C) gives NaN on its row. */
int psg_gpu_sparse_xent(psg_kernel_ctx_t *c) {
    const psg_tensor_t *logits = c->inputs[0], *labels = c->inputs[1];
    psg_tensor_t *loss = psg_kernel_alloc_output(c, 0);
    psg_tensor_t *back = loss ? psg_kernel_alloc_output(c, 1) : NULL;
    if (!back) return -1;
    return psg_cuda_sparse_xent(c->device, psg_tensor_f32(logits), labels->data,
                                labels->dtype == PSG_DT_I64, psg_tensor_f32(loss),
                                psg_tensor_f32(back), logits->shape.dims[0], logits->shape.dims[1]);
}

int psg_gpu_argmax(psg_kernel_ctx_t *c) {
    psg_rows_setup_t s;
    if (psg_rows_setup(c, &s) < 0) return -1;
    if (s.C == 0) return psg_error_set("ArgMax over an empty axis");
    return psg_cuda_argmax(c->device, psg_tensor_f32(c->inputs[0]), psg_tensor_i64(s.out), s.rows,
                           s.C);
}

int psg_gpu_equal(psg_kernel_ctx_t *c) {
    const psg_tensor_t *a = c->inputs[0], *b = c->inputs[1];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    return psg_cuda_equal(c->device, (int)a->dtype, (int)psg_dtype_size(a->dtype), a->data, b->data,
                          psg_tensor_numel(b) == 1, out->data, psg_tensor_numel(out));
}

/* ---- matrix products ---- */

int psg_gpu_matmul(psg_kernel_ctx_t *c) {
    const psg_tensor_t *a = c->inputs[0], *b = c->inputs[1];
    psg_matmul_setup_t s;
    if (psg_matmul_setup(c, &s) < 0) return -1;
    psg_tensor_t *out = s.out;
    bool ta = s.ta, tb = s.tb;
    int64_t M = s.M, N = s.N, K = s.K;
    if (a->dtype != PSG_DT_F32) /* bf16 or f16 (mixed precision): f32 accumulation */
        return psg_cuda_gemm_half(c->device, (int)a->dtype, ta, tb, M, N, K, a->data,
                                  a->shape.dims[1], b->data, b->shape.dims[1], out->data, N);
    return psg_cuda_gemm(c->device, ta, tb, M, N, K, 1.0f, psg_tensor_f32(a), a->shape.dims[1],
                         psg_tensor_f32(b), b->shape.dims[1], 0.0f, psg_tensor_f32(out), N);
}

/* y = x w, then bias and ReLU in one pass over y */
int psg_gpu_dense(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0], *w = c->inputs[1], *b = c->inputs[2];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t N = x->shape.dims[0], K = x->shape.dims[1], M = w->shape.dims[1];
    if (psg_cuda_gemm(c->device, false, false, N, M, K, 1.0f, psg_tensor_f32(x), K,
                      psg_tensor_f32(w), M, 0.0f, psg_tensor_f32(out), M) < 0)
        return -1;
    return psg_cuda_bias_add(c->device, psg_tensor_f32(out), psg_tensor_f32(b), psg_tensor_f32(out),
                             N, M, ((const psg_matmul_params_t *)psg_kernel_params(c))->relu);
}

/* inputs dy, y (N, M): dz = dy masked by y > 0 (relu) or dy itself; db = column sums of dz */
int psg_gpu_dense_backprop(psg_kernel_ctx_t *c) {
    const psg_tensor_t *dy = c->inputs[0], *y = c->inputs[1];
    bool relu;
    psg_tensor_t *dz, *db;
    if (psg_dense_backprop_setup(c, &relu, &dz, &db) < 0) return -1;
    if (relu) {
        psg_cu_bcast_t bc = {.rank = 1, .dims = {psg_tensor_numel(dy)}, .sa = {1}, .sb = {1}};
        if (psg_cuda_binary(c->device, PSG_CU_RELU_GRAD, psg_tensor_f32(dy), psg_tensor_f32(y),
                            psg_tensor_f32(dz), &bc) < 0)
            return -1;
    }
    return psg_cuda_reduce_arb(c->device, psg_tensor_f32(dz), psg_tensor_f32(db), 1,
                               dy->shape.dims[0], dy->shape.dims[1], 1.0f);
}

/* ---- layout ---- */

int psg_gpu_concat(psg_kernel_ctx_t *c) {
    psg_concat_setup_t s;
    if (psg_concat_setup(c, &s) < 0) return -1;
    size_t at = 0;
    for (int k = 0; k < c->num_inputs; k++) {
        const psg_tensor_t *x = c->inputs[k];
        size_t row = psg_concat_row(&s, x);
        if (psg_cuda_memcpy2d(c->device, (char *)s.out->data + at, s.out_row, x->data, row, row,
                              (size_t)s.outer) < 0)
            return -1;
        at += row;
    }
    return 0;
}

int psg_gpu_slice(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t zero[PSG_MAX_RANK] = {0};
    return psg_cuda_copy_block(c->device, (int)psg_dtype_size(x->dtype), x->shape.rank,
                               out->shape.dims, x->data, x->shape.dims, psg_slice_begin(c->node),
                               out->data, out->shape.dims, zero);
}

int psg_gpu_slice_grad(psg_kernel_ctx_t *c) {
    const psg_tensor_t *dy = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t zero[PSG_MAX_RANK] = {0};
    if (psg_cuda_memset0(c->device, out->data, psg_tensor_nbytes(out)) < 0) return -1;
    return psg_cuda_copy_block(c->device, (int)psg_dtype_size(dy->dtype), dy->shape.rank,
                               dy->shape.dims, dy->data, dy->shape.dims, zero, out->data,
                               out->shape.dims, psg_slice_begin(c->node));
}

int psg_gpu_cast(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    psg_tensor_t *out;
    if (psg_cast_setup(c, &out) < 0) return -1;
    if (!out) return 0; /* the same dtype: output 0 is input 0 */
    return psg_cuda_cast(c->device, (int)x->dtype, x->data, (int)out->dtype, out->data,
                         psg_tensor_numel(out));
}

/* The CPU kernel's key and threshold: the same mask on either device. */
int psg_gpu_dropout(psg_kernel_ctx_t *c) {
    psg_tensor_t *y = psg_kernel_alloc_output(c, 0);
    psg_tensor_t *mask = y ? psg_kernel_alloc_output(c, 1) : NULL;
    if (!mask) return -1;
    double rate = psg_node_get_float(c->node, "rate", 0.0);
    return psg_cuda_dropout(c->device, psg_tensor_f32(c->inputs[0]), psg_tensor_f32(y),
                            psg_tensor_f32(mask), psg_tensor_numel(y),
                            psg_math_dropout_key(c->node, c->step_id),
                            (uint32_t)(rate * 16777216.0), (float)(1.0 / (1.0 - rate)));
}
