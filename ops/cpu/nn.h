/* CPU kernels of the nn ops (ops/nn.c holds their defs), and the window
 * geometry (strides, SAME/VALID padding) that defs and kernels share.
 * Not the GEMM (ops/cpu/gemm.h) and not the math ops. */
#ifndef PSGRAPH_OPS_CPU_NN_H
#define PSGRAPH_OPS_CPU_NN_H

#include "psgraph/kernel.h"

#include <stdbool.h>
#include <stdint.h>

/* A sliding window's attributes: "ksize" (pools only), "strides", "padding",
 * "dilations" (must be all 1). ksize and strides are [h, w] or TensorFlow's
 * [1, h, w, 1]. */
typedef struct {
    int64_t kh, kw; /* window (pools) */
    int64_t sh, sw; /* strides */
    bool same;      /* padding SAME, else VALID */
} psg_nn_attrs_t;

/* Reads the window attributes of node n (ksize only when want_ksize).
 * Returns 0, or -1 with the error set ("strides must be ..."). */
int psg_nn_read_attrs(const psg_node_t *n, bool want_ksize, psg_nn_attrs_t *a);

/* TensorFlow's output size and padding before, for one spatial dim: VALID:
 * out = ceil((in - k + 1) / s), pad 0; SAME: out = ceil(in / s), pad_total =
 * max((out - 1) * s + k - in, 0), pad_before = pad_total / 2 (the odd one goes
 * after). in < 0 (unknown) gives out = -1. Returns -1 with the error set when
 * a VALID window does not fit. */
int psg_nn_out_size(int64_t in, int64_t k, int64_t s, bool same, int64_t *out, int64_t *pad);

/* The full geometry of one conv or pool on NHWC tensors. */
typedef struct {
    int64_t n, h, w, c; /* input (N, H, W, C) */
    int64_t kh, kw, oc; /* window; oc: output channels (conv) or c (pools) */
    int64_t oh, ow;     /* output spatial size */
    int64_t sh, sw;     /* strides */
    int64_t pt, pl;     /* padding before: top, left */
} psg_nn_geom_t;

/* Fills g from an NHWC input shape, the window (kh, kw) and the attributes.
 * Returns 0 or -1 with the error set. */
int psg_nn_geom(const psg_shape_t *in, int64_t kh, int64_t kw, int64_t oc, const psg_nn_attrs_t *a,
                psg_nn_geom_t *g);

int psg_cpu_conv2d(psg_kernel_ctx_t *c);
/* inputs: x, filter, bias (OC); Conv2D's output + bias, then ReLU when the params say so */
int psg_cpu_fused_conv2d(psg_kernel_ctx_t *c);

/* What FusedConv2D adds to a conv's sums, on each output row while it is in cache: + bias
 * (BiasAdd's x + b), or with scale the batch norm's affine x * scale + bias (FusedBatchNorm's
 * floats in inference: psg_batch_norm_affine), then ReLU when relu (Relu's x > 0 ? x : 0);
 * then, when pool is not NULL, MaxPool's of the result (pool: its geometry over the conv's
 * output). */
typedef struct {
    const float *scale; /* (OC), or NULL: no product */
    const float *bias;  /* (OC) */
    bool relu;
    const psg_nn_geom_t *pool;
} psg_conv_epilogue_t;

/* Batch norm as one affine map a channel, y = x * a + b: inv_std = 1 / sqrt(var + eps) (in
 * double, rounded once), a = scale * inv_std, b = offset - mean * a. FusedBatchNorm computes
 * its output with these, and FusedConv2D's batch norm form with the same floats. */
float psg_batch_norm_inv_std(float var, float eps);
void psg_batch_norm_affine(int64_t c, const float *scale, const float *offset, const float *mean,
                           const float *inv_std, float *a, float *b);

/* y = MaxPool(x) of geometry g, its output rows [r0, r1) (of N * OH). */
void psg_max_pool_rows(const psg_nn_geom_t *g, const float *x, float *y, int64_t r0, int64_t r1);
/* The same, all of them, over the pool's threads. */
void psg_max_pool_f32(psg_threadpool_t *pool, const psg_nn_geom_t *g, const float *x, float *y);

/* y (rows, oc) = epilogue(y), row by row. */
void psg_conv_epilogue_rows(const psg_conv_epilogue_t *e, float *y, int64_t rows, int64_t oc);
/* The same on channels [c0, c1) of rows `ld` floats apart (the floats of the whole rows'). */
void psg_conv_epilogue_block(const psg_conv_epilogue_t *e, float *y, int64_t rows, int64_t ld,
                             int64_t c0, int64_t c1);
/* The same over the pool's threads. */
void psg_conv_epilogue(psg_threadpool_t *pool, const psg_conv_epilogue_t *e, float *y, int64_t rows,
                       int64_t oc);
int psg_cpu_conv2d_backprop_input(psg_kernel_ctx_t *c);
int psg_cpu_conv2d_backprop_filter(psg_kernel_ctx_t *c);
int psg_cpu_max_pool(psg_kernel_ctx_t *c);
int psg_cpu_max_pool_grad(psg_kernel_ctx_t *c);
int psg_cpu_avg_pool(psg_kernel_ctx_t *c);
int psg_cpu_avg_pool_grad(psg_kernel_ctx_t *c);
int psg_cpu_bias_add(psg_kernel_ctx_t *c);
int psg_cpu_bias_add_grad(psg_kernel_ctx_t *c);
int psg_cpu_fused_batch_norm(psg_kernel_ctx_t *c);
int psg_cpu_fused_batch_norm_grad(psg_kernel_ctx_t *c);

#endif
