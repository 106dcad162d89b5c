/* Builders for the math ops: elementwise arithmetic with numpy broadcasting,
 * activations, softmax and losses, reductions, MatMul and the fused Dense
 * layer, Concat/Slice, Dropout, Cast, ArgMax. Each returns the new node's
 * output 0, or PSG_NO_ENDPOINT with the graph's error set ("node 'name' (Op):
 * why"). Not the nn ops (conv, pool, batch norm, bias_add: ops_nn.h). */
#ifndef PSGRAPH_OPS_MATH_H
#define PSGRAPH_OPS_MATH_H

#include "psgraph/graph.h"

/* ---- elementwise, f32 ---- */

/* a op b with numpy broadcasting (either side may be the smaller). */
psg_endpoint_t psg_add(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b);
psg_endpoint_t psg_sub(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b);
psg_endpoint_t psg_mul(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b);
psg_endpoint_t psg_div(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b);

psg_endpoint_t psg_neg(psg_graph_t *g, const char *name, psg_endpoint_t x);
psg_endpoint_t psg_square(psg_graph_t *g, const char *name, psg_endpoint_t x);
psg_endpoint_t psg_sqrt(psg_graph_t *g, const char *name, psg_endpoint_t x);
psg_endpoint_t psg_exp(psg_graph_t *g, const char *name, psg_endpoint_t x);
psg_endpoint_t psg_log(psg_graph_t *g, const char *name, psg_endpoint_t x);
/* x ** exponent (a constant attribute). */
psg_endpoint_t psg_pow(psg_graph_t *g, const char *name, psg_endpoint_t x, double exponent);
/* x * scale (a constant attribute). */
psg_endpoint_t psg_scale(psg_graph_t *g, const char *name, psg_endpoint_t x, double scale);

psg_endpoint_t psg_relu(psg_graph_t *g, const char *name, psg_endpoint_t x);
psg_endpoint_t psg_sigmoid(psg_graph_t *g, const char *name, psg_endpoint_t x);
psg_endpoint_t psg_tanh(psg_graph_t *g, const char *name, psg_endpoint_t x);
/* The activations' backprops, as TensorFlow's, from the forward OUTPUT y:
 * ReluGrad = dy * (y > 0), SigmoidGrad = dy * y * (1 - y), TanhGrad = dy * (1 - y^2). */
psg_endpoint_t psg_relu_grad(psg_graph_t *g, const char *name, psg_endpoint_t dy, psg_endpoint_t y);
psg_endpoint_t psg_sigmoid_grad(psg_graph_t *g, const char *name, psg_endpoint_t dy,
                                psg_endpoint_t y);
psg_endpoint_t psg_tanh_grad(psg_graph_t *g, const char *name, psg_endpoint_t dy, psg_endpoint_t y);

/* ---- softmax and losses ---- */

/* Softmax / log-softmax over the last axis (numerically stable). */
psg_endpoint_t psg_softmax(psg_graph_t *g, const char *name, psg_endpoint_t logits);
psg_endpoint_t psg_log_softmax(psg_graph_t *g, const char *name, psg_endpoint_t logits);
/* logits (N, C) f32, labels (N) i32 or i64. Output 0: the loss per example (N);
 * output 1 ({node, 1}): its backprop softmax - onehot (N, C). A label outside
 * [0, C) fails the run with an error naming the label and its row. */
psg_endpoint_t psg_sparse_softmax_cross_entropy(psg_graph_t *g, const char *name,
                                                psg_endpoint_t logits, psg_endpoint_t labels);
/* sum(x^2) / 2, a scalar. */
psg_endpoint_t psg_l2_loss(psg_graph_t *g, const char *name, psg_endpoint_t x);

/* ---- reductions ---- */

/* Sum / mean over `axes` (n_axes of them; negative counts from the end;
 * n_axes == 0: all axes). keep_dims keeps reduced axes as size 1. */
psg_endpoint_t psg_sum(psg_graph_t *g, const char *name, psg_endpoint_t x, int n_axes,
                       const int64_t *axes, bool keep_dims);
psg_endpoint_t psg_mean(psg_graph_t *g, const char *name, psg_endpoint_t x, int n_axes,
                        const int64_t *axes, bool keep_dims);
/* Inserts size-1 dims at the output positions `axes` (sorted, >= 0). */
psg_endpoint_t psg_expand_dims(psg_graph_t *g, const char *name, psg_endpoint_t x, int n_axes,
                               const int64_t *axes);
/* Index of the largest element along the last axis, i64, shape x's without
 * the last axis. Not differentiable. */
psg_endpoint_t psg_argmax(psg_graph_t *g, const char *name, psg_endpoint_t x);
/* a == b elementwise (same dtype; same shape, or b a scalar): bool. */
psg_endpoint_t psg_equal(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b);

/* ---- comparisons, extrema, one-hot, shapes (ops/compare.c) ---- */

/* max(a, b) / min(a, b) elementwise, f32 with numpy broadcasting; the gradient goes to a
 * where a >= b (max) or a <= b (min), else to b. */
psg_endpoint_t psg_maximum(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b);
psg_endpoint_t psg_minimum(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b);
/* a op b elementwise, bool, with numpy broadcasting; a and b of one dtype (f32, i32, i64).
 * op is "Greater", "GreaterEqual", "Less", "LessEqual", "NotEqual" or "Equal" (a
 * BroadcastEqual node: psg_equal's Equal takes one shape or a scalar); another op fails
 * naming it. Not differentiable. */
psg_endpoint_t psg_compare(psg_graph_t *g, const char *name, const char *op, psg_endpoint_t a,
                           psg_endpoint_t b);
/* The maximum over `axes` (as psg_sum); the gradient is shared by the elements equal to
 * it. f32. */
psg_endpoint_t psg_reduce_max(psg_graph_t *g, const char *name, psg_endpoint_t x, int n_axes,
                              const int64_t *axes, bool keep_dims);
/* indices (any shape, i32 or i64) to f32 indices.shape + [depth]: on_value at each index,
 * off_value elsewhere (everywhere for an index outside [0, depth)). Not differentiable. */
psg_endpoint_t psg_one_hot(psg_graph_t *g, const char *name, psg_endpoint_t indices, int64_t depth,
                           double on_value, double off_value);
/* The shape of x as an i32 vector (its length: x's rank, which must be known when built). */
psg_endpoint_t psg_shape_of(psg_graph_t *g, const char *name, psg_endpoint_t x);

/* ---- matrix products ---- */

/* op(a) * op(b), rank 2; op transposes when the flag is set. */
psg_endpoint_t psg_matmul(psg_graph_t *g, const char *name, psg_endpoint_t a, psg_endpoint_t b,
                          bool transpose_a, bool transpose_b);
/* A fully connected layer in one kernel: x (N, K) * w (K, M) + bias (M),
 * then ReLU when `relu`. The bias and ReLU are applied to each slice of rows
 * right after its GEMM, while it is in cache. */
psg_endpoint_t psg_dense(psg_graph_t *g, const char *name, psg_endpoint_t x, psg_endpoint_t w,
                         psg_endpoint_t bias, bool relu);

/* ---- shapes, randomness, types ---- */

/* Concatenates n tensors (same dtype, same dims but `axis`) along axis
 * (negative counts from the end). */
psg_endpoint_t psg_concat(psg_graph_t *g, const char *name, int n, const psg_endpoint_t *xs,
                          int axis);
/* x[begin[i] : begin[i] + size[i]] along each axis (size -1: to the end).
 * rank entries each. */
psg_endpoint_t psg_slice(psg_graph_t *g, const char *name, psg_endpoint_t x, int rank,
                         const int64_t *begin, const int64_t *size);
/* Inverted dropout: each element kept with probability 1 - rate and scaled by
 * 1 / (1 - rate), else 0. The mask differs from step to step (seed mixed with
 * the step id) and is output 1 ({node, 1}: 0 or 1/(1-rate), f32), which the
 * gradient reuses. rate in [0, 1). */
psg_endpoint_t psg_dropout(psg_graph_t *g, const char *name, psg_endpoint_t x, double rate,
                           uint64_t seed);
/* Converts between f32, i32, i64 (and from bool); float to int truncates
 * toward zero and saturates (NaN gives 0). */
psg_endpoint_t psg_cast(psg_graph_t *g, const char *name, psg_endpoint_t x, psg_dtype_t dtype);

#endif
