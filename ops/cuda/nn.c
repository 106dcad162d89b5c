/* CUDA kernels (C glue) of the nn ops: Conv2D and its gradients (cuDNN,
 * cudnn.cu; f32, bf16 or f16 tensors), pooling (pool.cu), BiasAdd and its gradient, fused batch
 * norm. The geometry comes from the same prepared params (ops/params.h) as the CPU kernels'. */
#include "ops/cpu/nn.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/params.h"
#include "psgraph/error.h"

static void to_cu(const psg_nn_geom_t *g, psg_cu_geom_t *o) {
    *o = (psg_cu_geom_t){g->n,  g->h,  g->w,  g->c,  g->kh, g->kw, g->oc,
                         g->oh, g->ow, g->sh, g->sw, g->pt, g->pl};
}

/* The geometry of a conv on inputs[0] (x or its shape) and inputs[1] (the
 * filter or its shape), from the node's prepared params. */
static int conv_geom(psg_kernel_ctx_t *c, psg_cu_geom_t *g) {
    psg_nn_geom_t tmp;
    const psg_nn_geom_t *ng = psg_nn_kernel_geom(c, false, &tmp);
    if (!ng) return -1;
    to_cu(ng, g);
    return 0;
}

/* An f32 1x1 convolution of stride 1 without padding is, in NHWC, a matrix
 * product over the N*H*W rows (the filter (1, 1, C, OC) is the (C, OC)
 * matrix): cuBLAS's SGEMM on the tensors as they are, without cuDNN's
 * layout copies (cudnn.cu) and at a higher f32 rate (Inception-v3 has 45 of
 * them). Rows M = N*H*W. */
static bool conv_is_gemm(const psg_cu_geom_t *g, psg_dtype_t dt) {
    return dt == PSG_DT_F32 && g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 &&
           g->pl == 0 && g->oh == g->h && g->ow == g->w;
}

/* inputs: x (N, H, W, C), filter (KH, KW, C, OC) */
int psg_gpu_conv2d(psg_kernel_ctx_t *c) {
    psg_cu_geom_t g;
    if (conv_geom(c, &g) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (conv_is_gemm(&g, out->dtype)) /* y (M, OC) = x (M, C) w (C, OC) */
        return psg_cuda_gemm(c->device, false, false, g.n * g.h * g.w, g.oc, g.c, 1.0f,
                             c->inputs[0]->data, g.c, c->inputs[1]->data, g.oc, 0.0f, out->data,
                             g.oc);
    return psg_cuda_conv2d(c->device, (int)out->dtype, &g, c->inputs[0]->data, c->inputs[1]->data,
                           out->data);
}

/* inputs: x (only its shape), filter (KH, KW, C, OC), dy (N, OH, OW, OC) */
int psg_gpu_conv2d_backprop_input(psg_kernel_ctx_t *c) {
    psg_cu_geom_t g;
    if (conv_geom(c, &g) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (conv_is_gemm(&g, out->dtype)) /* dx (M, C) = dy (M, OC) w^T */
        return psg_cuda_gemm(c->device, false, true, g.n * g.h * g.w, g.c, g.oc, 1.0f,
                             c->inputs[2]->data, g.oc, c->inputs[1]->data, g.oc, 0.0f, out->data,
                             g.c);
    return psg_cuda_conv2d_backprop_input(c->device, (int)out->dtype, &g, c->inputs[1]->data,
                                          c->inputs[2]->data, out->data);
}

/* inputs: x (N, H, W, C), filter (only its shape), dy (N, OH, OW, OC) */
int psg_gpu_conv2d_backprop_filter(psg_kernel_ctx_t *c) {
    psg_cu_geom_t g;
    if (conv_geom(c, &g) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    if (conv_is_gemm(&g, out->dtype)) /* dw (C, OC) = x^T (C, M) dy (M, OC) */
        return psg_cuda_gemm(c->device, true, false, g.c, g.oc, g.n * g.h * g.w, 1.0f,
                             c->inputs[0]->data, g.c, c->inputs[2]->data, g.oc, 0.0f, out->data,
                             g.oc);
    return psg_cuda_conv2d_backprop_filter(c->device, (int)out->dtype, &g, c->inputs[0]->data,
                                           c->inputs[2]->data, out->data);
}

static int pool_geom(psg_kernel_ctx_t *c, psg_cu_geom_t *g) {
    psg_nn_geom_t tmp;
    const psg_nn_geom_t *ng = psg_nn_kernel_geom(c, true, &tmp);
    if (!ng) return -1;
    to_cu(ng, g);
    return 0;
}

static int pool(psg_kernel_ctx_t *c, bool max) {
    psg_cu_geom_t g;
    if (pool_geom(c, &g) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    return psg_cuda_pool(c->device, max, &g, psg_tensor_f32(c->inputs[0]), psg_tensor_f32(out));
}

/* inputs: x (N, H, W, C) [, dy (N, OH, OW, C)] */
static int pool_grad(psg_kernel_ctx_t *c, bool max) {
    psg_cu_geom_t g;
    if (pool_geom(c, &g) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    return psg_cuda_pool_grad(c->device, max, &g, psg_tensor_f32(c->inputs[0]),
                              psg_tensor_f32(c->inputs[1]), psg_tensor_f32(out));
}

int psg_gpu_max_pool(psg_kernel_ctx_t *c) {
    return pool(c, true);
}
int psg_gpu_avg_pool(psg_kernel_ctx_t *c) {
    return pool(c, false);
}
int psg_gpu_max_pool_grad(psg_kernel_ctx_t *c) {
    return pool_grad(c, true);
}
int psg_gpu_avg_pool_grad(psg_kernel_ctx_t *c) {
    return pool_grad(c, false);
}

/* rows and channels of a (..., C) tensor */
static void rows_c(const psg_tensor_t *x, int64_t *rows, int64_t *ch) {
    const psg_shape_t *s = &x->shape;
    *ch = s->dims[s->rank - 1];
    *rows = *ch > 0 ? psg_tensor_numel(x) / *ch : 0;
}

/* inputs: x (..., C), bias (C) */
int psg_gpu_bias_add(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t rows, ch;
    rows_c(c->inputs[0], &rows, &ch);
    return psg_cuda_bias_add(c->device, psg_tensor_f32(c->inputs[0]), psg_tensor_f32(c->inputs[1]),
                             psg_tensor_f32(out), rows, ch, false);
}

/* input: dy (..., C); output (C) */
int psg_gpu_bias_add_grad(psg_kernel_ctx_t *c) {
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t rows, ch;
    rows_c(c->inputs[0], &rows, &ch);
    return psg_cuda_reduce_arb(c->device, psg_tensor_f32(c->inputs[0]), psg_tensor_f32(out), 1,
                               rows, ch, 1.0f);
}

/* As psg_cpu_fused_batch_norm. */
int psg_gpu_fused_batch_norm(psg_kernel_ctx_t *c) {
    bool training = psg_node_get_bool(c->node, "is_training", true);
    float eps = (float)psg_node_get_float(c->node, "epsilon", 1e-3);
    for (int o = 0; o < 5; o++)
        if (!psg_kernel_alloc_output(c, o)) return -1;
    int64_t rows, ch;
    rows_c(c->inputs[0], &rows, &ch);
    const float *mean = c->num_inputs > 3 ? psg_tensor_f32(c->inputs[3]) : NULL;
    const float *var = c->num_inputs > 4 ? psg_tensor_f32(c->inputs[4]) : NULL;
    if (!training && (!mean || !var))
        return psg_error_set("inference needs the mean and variance inputs");
    return psg_cuda_batch_norm(
        c->device, training, eps, rows, ch, (int)c->inputs[0]->dtype, c->inputs[0]->data,
        psg_tensor_f32(c->inputs[1]), psg_tensor_f32(c->inputs[2]), mean, var,
        psg_tensor_f32(c->outputs[0]), psg_tensor_f32(c->outputs[1]), psg_tensor_f32(c->outputs[2]),
        psg_tensor_f32(c->outputs[3]), psg_tensor_f32(c->outputs[4]));
}

/* As psg_cpu_fused_batch_norm_grad. */
int psg_gpu_fused_batch_norm_grad(psg_kernel_ctx_t *c) {
    bool training = psg_node_get_bool(c->node, "is_training", true);
    for (int o = 0; o < 3; o++)
        if (!psg_kernel_alloc_output(c, o)) return -1;
    int64_t rows, ch;
    rows_c(c->inputs[0], &rows, &ch);
    return psg_cuda_batch_norm_grad(c->device, training, rows, ch, (int)c->inputs[1]->dtype,
                                    psg_tensor_f32(c->inputs[0]), c->inputs[1]->data,
                                    psg_tensor_f32(c->inputs[2]), psg_tensor_f32(c->inputs[3]),
                                    psg_tensor_f32(c->inputs[4]), c->outputs[0]->data,
                                    psg_tensor_f32(c->outputs[1]), psg_tensor_f32(c->outputs[2]));
}
