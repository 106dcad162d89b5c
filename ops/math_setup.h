/* What the CPU kernel (ops/cpu/) and the CUDA glue (ops/cuda/) of a math op
 * both derive from the kernel ctx before their work: the outputs they
 * allocate or alias, and the sizes from the prepared params and the shapes.
 * Each returns 0, or -1 with the error set (an allocation failed). */
#ifndef PSGRAPH_OPS_MATH_SETUP_H
#define PSGRAPH_OPS_MATH_SETUP_H

#include "psgraph/kernel.h"

#include <stdbool.h>

/* Sum or Mean: output 0 (allocated), the reduced axes, whether it is a Mean,
 * and the elements of the input (n) and of the output (m). */
typedef struct {
    psg_tensor_t *out;
    bool reduced[PSG_MAX_RANK];
    bool mean;
    int64_t n, m;
} psg_reduce_setup_t;

int psg_reduce_setup(psg_kernel_ctx_t *c, psg_reduce_setup_t *s);

/* ReductionSize: output 0 (allocated, one f32) and the count to write there. */
int psg_reduction_size_setup(psg_kernel_ctx_t *c, psg_tensor_t **out, int64_t *count);

/* Softmax, LogSoftmax, ArgMax: output 0 (allocated) and input 0 as rows of
 * its last dim C (rows 0 when C is 0); log: the op is LogSoftmax. */
typedef struct {
    psg_tensor_t *out;
    int64_t rows, C;
    bool log;
} psg_rows_setup_t;

int psg_rows_setup(psg_kernel_ctx_t *c, psg_rows_setup_t *s);

/* MatMul: output 0 (allocated, M x N), the transposes and the inner size K. */
typedef struct {
    psg_tensor_t *out;
    bool ta, tb;
    int64_t M, N, K;
} psg_matmul_setup_t;

int psg_matmul_setup(psg_kernel_ctx_t *c, psg_matmul_setup_t *s);

/* DenseBackprop: dz (output 0), a fresh tensor when the Dense had a ReLU
 * (*relu), else the incoming gradient itself; db (output 1), fresh. */
int psg_dense_backprop_setup(psg_kernel_ctx_t *c, bool *relu, psg_tensor_t **dz, psg_tensor_t **db);

/* Cast: *out NULL when the dtypes match and output 0 is input 0 itself (the
 * work done), else output 0 allocated. */
int psg_cast_setup(psg_kernel_ctx_t *c, psg_tensor_t **out);

/* Concat: output 0 (allocated) as `outer` rows (the product of the dims
 * before the axis) of out_row bytes; psg_concat_row: input k's part of a row,
 * in bytes (its dim on the axis times the inner size, the dims after it). */
typedef struct {
    psg_tensor_t *out;
    int axis;
    int64_t outer, inner;
    size_t out_row;
} psg_concat_setup_t;

int psg_concat_setup(psg_kernel_ctx_t *c, psg_concat_setup_t *s);
size_t psg_concat_row(const psg_concat_setup_t *s, const psg_tensor_t *x);

/* begin of a Slice or SliceGrad node, rank entries (attr "begin"). */
const int64_t *psg_slice_begin(const psg_node_t *n);

#endif
