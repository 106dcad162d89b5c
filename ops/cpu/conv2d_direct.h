/* Direct convolution kernels (NHWC, f32): the forward pass and the filter
 * gradient computed from the (zero-padded) input image itself, with no im2col
 * column buffer: register tiles of output pixels (or filter rows) times 16 to
 * 64 output channels, vectorized over the channels. The input gradient of a
 * stride-1 conv is the forward pass with the flipped filter (conv2d.c).
 * Not the dispatch (conv2d.c) and not the im2col + GEMM path. */
#ifndef PSGRAPH_OPS_CPU_CONV2D_DIRECT_H
#define PSGRAPH_OPS_CPU_CONV2D_DIRECT_H

#include "ops/cpu/nn.h"
#include "psgraph/threadpool.h"

#include <stdbool.h>

/* Whether the direct kernels take conv g on pool: every image is one unit of
 * work, so the batch must fill the pool's threads. */
bool psg_conv_direct_applies(const psg_nn_geom_t *g, psg_threadpool_t *pool);

/* Whether psg_conv_direct_forward takes conv g on pool: a batch that fills the pool, or
 * fewer images whose output rows go around its threads (a served batch of one). */
bool psg_conv_direct_forward_applies(const psg_nn_geom_t *g, psg_threadpool_t *pool);

/* Whether psg_conv_direct_forward takes an epilogue's pool on conv g: a batch that fills the
 * pool, each image pooled as it is finished; else the caller pools. */
bool psg_conv_direct_pools(const psg_nn_geom_t *g, psg_threadpool_t *pool);
/* y (N, OH, OW, OC) = conv(x (N, H, W, C), w (KH, KW, C, OC)): whole images a thread,
 * or, with fewer images than threads, bands of each image's output rows (the same
 * sums in the same order either way). Returns 0, or -1 with the error set (out of
 * memory). ep: FusedConv2D's bias and ReLU on each image's outputs (and its pool, y then
 * pooled, where psg_conv_direct_pools), or NULL. */
int psg_conv_direct_forward(psg_threadpool_t *pool, const psg_nn_geom_t *g, const float *x,
                            const float *w, const psg_conv_epilogue_t *ep, float *y);

/* dw (KH, KW, C, OC) = the filter gradient from x (N, H, W, C) and
 * dy (N, OH, OW, OC). Returns 0, or -1 with the error set. */
int psg_conv_direct_filter(psg_threadpool_t *pool, const psg_nn_geom_t *g, const float *x,
                           const float *dy, float *dw);

#endif
