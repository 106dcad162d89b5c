/* Builders for the nn ops, all NHWC and f32: Conv2D and its two backprop ops,
 * MaxPool / AvgPool and their gradients, BiasAdd(Grad), FusedBatchNorm(Grad).
 * Each returns the new node's output endpoint, or PSG_NO_ENDPOINT with the
 * graph's error set ("node 'conv1' (Conv2D): ..."). Not the math ops. */
#ifndef PSGRAPH_OPS_NN_H
#define PSGRAPH_OPS_NN_H

#include "psgraph/graph.h"

/* TensorFlow's padding: VALID uses only windows inside the input; SAME pads
 * so that out = ceil(in / stride), the odd cell of padding going after. */
typedef enum { PSG_PADDING_VALID = 0, PSG_PADDING_SAME = 1 } psg_padding_t;

/* y = conv(x, filter): x is [N, H, W, C], filter [KH, KW, C, OC], y is
 * [N, OH, OW, OC]. Strides >= 1; dilation is 1 (a node carrying another
 * "dilations" attribute is rejected). Its gradient is the two ops below. */
psg_endpoint_t psg_conv2d(psg_graph_t *g, const char *name, psg_endpoint_t x, psg_endpoint_t filter,
                          int stride_h, int stride_w, psg_padding_t padding);
/* A max pool after a fused conv: window kh x kw, strides, padding. */
typedef struct {
    int kh, kw, stride_h, stride_w;
    psg_padding_t padding;
} psg_fused_pool_t;

/* y = conv(x, filter) + bias [OC], then ReLU when relu, then a max pool when pool is not NULL:
 * an inference graph's conv layer in one FusedConv2D node (TensorFlow's _FusedConv2D; ONNX's
 * Conv with its bias, Relu, MaxPool), the same floats as psg_conv2d, psg_bias_add, psg_relu and
 * psg_max_pool one after another, each image's outputs finished while they are in cache.
 * f32 only, and no gradient: training builds the separate ops. */
psg_endpoint_t psg_fused_conv2d(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                psg_endpoint_t filter, psg_endpoint_t bias, int stride_h,
                                int stride_w, psg_padding_t padding, bool relu,
                                const psg_fused_pool_t *pool);
/* A batch norm in inference after a fused conv: its scale, offset, moving mean and variance
 * ([OC] each) and epsilon, as psg_fused_batch_norm takes them with training false. */
typedef struct {
    psg_endpoint_t scale, offset, mean, variance;
    double epsilon;
} psg_fused_bn_t;
/* The same with the batch norm bn in place of the bias: the floats of psg_conv2d,
 * psg_fused_batch_norm (training false), psg_relu and psg_max_pool (ONNX's Conv,
 * BatchNormalization, Relu, MaxPool). */
psg_endpoint_t psg_fused_conv2d_batch_norm(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                           psg_endpoint_t filter, const psg_fused_bn_t *bn,
                                           int stride_h, int stride_w, psg_padding_t padding,
                                           bool relu, const psg_fused_pool_t *pool);
/* dx of a conv, from dy [N, OH, OW, OC]; x gives only its shape. */
psg_endpoint_t psg_conv2d_backprop_input(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                         psg_endpoint_t filter, psg_endpoint_t dy, int stride_h,
                                         int stride_w, psg_padding_t padding);
/* dfilter of a conv, from x and dy; filter gives only its shape. */
psg_endpoint_t psg_conv2d_backprop_filter(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                          psg_endpoint_t filter, psg_endpoint_t dy, int stride_h,
                                          int stride_w, psg_padding_t padding);

/* Max / average over windows kh x kw of x [N, H, W, C]. Average with SAME
 * padding divides by the number of cells inside the input, as TensorFlow. */
psg_endpoint_t psg_max_pool(psg_graph_t *g, const char *name, psg_endpoint_t x, int kh, int kw,
                            int stride_h, int stride_w, psg_padding_t padding);
psg_endpoint_t psg_avg_pool(psg_graph_t *g, const char *name, psg_endpoint_t x, int kh, int kw,
                            int stride_h, int stride_w, psg_padding_t padding);
/* dx of a max pool: dy goes to the first maximum of each window of x. */
psg_endpoint_t psg_max_pool_grad(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                 psg_endpoint_t dy, int kh, int kw, int stride_h, int stride_w,
                                 psg_padding_t padding);
/* dx of an average pool; x gives only its shape. */
psg_endpoint_t psg_avg_pool_grad(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                 psg_endpoint_t dy, int kh, int kw, int stride_h, int stride_w,
                                 psg_padding_t padding);

/* y = x + bias over the last dim: x is [..., C] (rank >= 2), bias [C]. */
psg_endpoint_t psg_bias_add(psg_graph_t *g, const char *name, psg_endpoint_t x,
                            psg_endpoint_t bias);
/* The sum of dy [..., C] over all but the last dim: [C]. */
psg_endpoint_t psg_bias_add_grad(psg_graph_t *g, const char *name, psg_endpoint_t dy);

/* The outputs of a FusedBatchNorm node. batch_var is the unbiased variance
 * (n / (n - 1)), the one to average, as TensorFlow; y is normalized with the
 * biased one. saved_* are what the gradient reads. */
typedef struct {
    psg_endpoint_t y, batch_mean, batch_var, saved_mean, saved_inv_std;
} psg_batch_norm_t;

/* y = scale * (x - mean) / sqrt(var + epsilon) + offset over the last dim of
 * x [..., C]; scale, offset, mean, variance are [C]. Training: mean and var
 * are the batch's (pass PSG_NO_ENDPOINT for mean and variance). Inference:
 * the given mean and variance. The moving averages are not updated here: the
 * model adds, per statistic, delta = (1 - momentum) * (batch_stat - moving)
 * with the math ops and psg_assign_add(moving, delta), and makes its train op
 * depend on those (TensorFlow's UPDATE_OPS). On failure every endpoint is
 * PSG_NO_ENDPOINT. */
psg_batch_norm_t psg_fused_batch_norm(psg_graph_t *g, const char *name, psg_endpoint_t x,
                                      psg_endpoint_t scale, psg_endpoint_t offset,
                                      psg_endpoint_t mean, psg_endpoint_t variance, float epsilon,
                                      bool is_training);

typedef struct {
    psg_endpoint_t dx, dscale, doffset;
} psg_batch_norm_grad_t;

/* The gradient of FusedBatchNorm's y: dx, dscale, doffset. */
psg_batch_norm_grad_t psg_fused_batch_norm_grad(psg_graph_t *g, const char *name, psg_endpoint_t dy,
                                                psg_endpoint_t x, psg_endpoint_t scale,
                                                psg_endpoint_t saved_mean,
                                                psg_endpoint_t saved_inv_std, float epsilon,
                                                bool is_training);

#endif
