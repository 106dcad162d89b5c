/* CPU kernels of the math ops (ops/math.c holds their defs, shape inference
 * and gradients). Elementwise and casts: cpu/math.c; reductions, softmax,
 * losses, concat/slice: cpu/math_reduce.c; MatMul and Dense: cpu/matmul.c. */
#ifndef PSGRAPH_OPS_CPU_MATH_H
#define PSGRAPH_OPS_CPU_MATH_H

#include "psgraph/kernel.h"

/* Above this many elements a kernel splits its loop over the pool. */
#define PSG_MATH_PARALLEL_MIN 32768

/* elementwise binary with numpy broadcasting, and unary (cpu/math.c): the
 * function is the prepared one (psg_math_fn_params_t, ops/params.h) */
int psg_cpu_binary(psg_kernel_ctx_t *c);
int psg_cpu_unary(psg_kernel_ctx_t *c);
/* randomness, types, comparisons */
int psg_cpu_dropout(psg_kernel_ctx_t *c);
int psg_cpu_cast(psg_kernel_ctx_t *c);
int psg_cpu_equal(psg_kernel_ctx_t *c);

/* reductions, softmax, losses, layout (cpu/math_reduce.c) */
int psg_cpu_reduce(psg_kernel_ctx_t *c); /* Sum, Mean (prepared) */
int psg_cpu_reduction_size(psg_kernel_ctx_t *c);
int psg_cpu_softmax(psg_kernel_ctx_t *c); /* Softmax, LogSoftmax (prepared) */
int psg_cpu_sparse_xent(psg_kernel_ctx_t *c);
int psg_cpu_l2_loss(psg_kernel_ctx_t *c);
int psg_cpu_argmax(psg_kernel_ctx_t *c);
int psg_cpu_concat(psg_kernel_ctx_t *c);
int psg_cpu_slice(psg_kernel_ctx_t *c);
int psg_cpu_slice_grad(psg_kernel_ctx_t *c);

/* matrix products (cpu/matmul.c) */
int psg_cpu_matmul(psg_kernel_ctx_t *c);
int psg_cpu_dense(psg_kernel_ctx_t *c);
int psg_cpu_dense_backprop(psg_kernel_ctx_t *c);

/* The reduced axes of a Sum/Mean/ReductionSize/Max node for an input of rank
 * `rank`: reduced[i] set for each reduced axis (attr "axes", negative from
 * the end, empty: all). Returns 0, or -1 with the error set on a bad axis. */
int psg_math_reduced_axes(const psg_node_t *node, int rank, bool *reduced);
/* The shape inference of Sum, Mean and Max: f32, the reduced axes dropped (or kept as 1s
 * with attr "keep_dims"). */
int psg_math_infer_reduce(psg_infer_ctx_t *c);
/* The number of elements a Sum/Mean/ReductionSize node over x reduces into
 * each output element (ReductionSize's value). -1 with the error set on a bad axis. */
int64_t psg_math_reduced_count(const psg_node_t *node, const psg_shape_t *x);

/* Coalesces the dims of s into runs of kept / reduced dims; true (with A, R,
 * B set: x is (A, R, B), the output (A, B)) when the pattern is one of K, R,
 * KR, RK, KRK. */
bool psg_math_reduce_as_arb(const psg_shape_t *s, const bool *reduced, int64_t *A, int64_t *R,
                            int64_t *B);

/* Dropout's per-step key: the node's seed and name mixed with the step, so
 * the CPU and CUDA kernels draw the same mask. */
uint64_t psg_math_dropout_key(const psg_node_t *node, int64_t step_id);

#endif
