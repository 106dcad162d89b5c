/* The CUDA kernels of the ops (psg_kernel_fn, for the `cuda` slot of the
 * op defs): C glue in ops/cuda/{array,math,nn,train}.c that reads the node,
 * allocates outputs on the kernel's GPU and calls the launchers of launch.h.
 * PSG_GPU_KERNEL(f) is f in a CUDA build and NULL without one, so the defs
 * name their kernels either way. */
#ifndef PSGRAPH_OPS_CUDA_KERNELS_H
#define PSGRAPH_OPS_CUDA_KERNELS_H

#include "psgraph/op.h"
#include "psgraph/resource.h"

#ifdef PSG_HAVE_CUDA
/* The defs name a trampoline in libpsgraph (graph/gpu_module.c) that loads
 * the CUDA module on its first call: a process that never uses a GPU never
 * maps cuBLAS or cuDNN (about 150 MB of RSS). */
#define PSG_GPU_KERNEL(f) f##_lazy
/* a CPU kernel that serves on the GPU as well (ops that only alias) */
#define PSG_GPU_SAME(f) f
#else
#define PSG_GPU_KERNEL(f) NULL
#define PSG_GPU_SAME(f) NULL
#endif

#include "ops/cuda/kernel_list.h"

#define PSG_GPU_DECLARE_LAZY(f) int f##_lazy(psg_kernel_ctx_t *c);
PSG_GPU_KERNEL_LIST(PSG_GPU_DECLARE_LAZY)
#undef PSG_GPU_DECLARE_LAZY

/* array and state (array.c) */
int psg_gpu_const(psg_kernel_ctx_t *c);
int psg_gpu_add_n(psg_kernel_ctx_t *c);
int psg_gpu_fill_like(psg_kernel_ctx_t *c);
int psg_gpu_sum_to_shape_of(psg_kernel_ctx_t *c);
int psg_gpu_broadcast_like(psg_kernel_ctx_t *c);
int psg_gpu_read_variable(psg_kernel_ctx_t *c);
int psg_gpu_assign(psg_kernel_ctx_t *c);
int psg_gpu_assign_add(psg_kernel_ctx_t *c);

/* The variable behind resource input `input`, its value moved to the
 * kernel's GPU on first use (under its lock): after that the variable lives
 * there. NULL with the error set. */
psg_variable_t *psg_gpu_variable(psg_kernel_ctx_t *c, int input);

/* math (math.c) */
int psg_gpu_add(psg_kernel_ctx_t *c);
int psg_gpu_sub(psg_kernel_ctx_t *c);
int psg_gpu_mul(psg_kernel_ctx_t *c);
int psg_gpu_div(psg_kernel_ctx_t *c);
int psg_gpu_relu_grad(psg_kernel_ctx_t *c);
int psg_gpu_sigmoid_grad(psg_kernel_ctx_t *c);
int psg_gpu_tanh_grad(psg_kernel_ctx_t *c);
int psg_gpu_neg(psg_kernel_ctx_t *c);
int psg_gpu_square(psg_kernel_ctx_t *c);
int psg_gpu_sqrt(psg_kernel_ctx_t *c);
int psg_gpu_exp(psg_kernel_ctx_t *c);
int psg_gpu_log(psg_kernel_ctx_t *c);
int psg_gpu_pow(psg_kernel_ctx_t *c);
int psg_gpu_scale(psg_kernel_ctx_t *c);
int psg_gpu_relu(psg_kernel_ctx_t *c);
int psg_gpu_sigmoid(psg_kernel_ctx_t *c);
int psg_gpu_tanh(psg_kernel_ctx_t *c);
int psg_gpu_softmax(psg_kernel_ctx_t *c);
int psg_gpu_log_softmax(psg_kernel_ctx_t *c);
int psg_gpu_sparse_xent(psg_kernel_ctx_t *c);
int psg_gpu_l2_loss(psg_kernel_ctx_t *c);
int psg_gpu_sum(psg_kernel_ctx_t *c);
int psg_gpu_mean(psg_kernel_ctx_t *c);
int psg_gpu_reduction_size(psg_kernel_ctx_t *c);
int psg_gpu_argmax(psg_kernel_ctx_t *c);
int psg_gpu_equal(psg_kernel_ctx_t *c);
int psg_gpu_matmul(psg_kernel_ctx_t *c);
int psg_gpu_dense(psg_kernel_ctx_t *c);
int psg_gpu_dense_backprop(psg_kernel_ctx_t *c);
int psg_gpu_concat(psg_kernel_ctx_t *c);
int psg_gpu_slice(psg_kernel_ctx_t *c);
int psg_gpu_slice_grad(psg_kernel_ctx_t *c);
int psg_gpu_cast(psg_kernel_ctx_t *c);
int psg_gpu_dropout(psg_kernel_ctx_t *c);

/* out = scale * x summed over the axes flagged in reduced (x's rank), as an
 * (A, R, B) reduction when the axes allow. 0 or -1 with the error set. */
int psg_gpu_reduce_axes(int gpu, const psg_tensor_t *x, const bool *reduced, psg_tensor_t *out,
                        float scale);

/* nn (nn.c) */
int psg_gpu_conv2d(psg_kernel_ctx_t *c);
int psg_gpu_conv2d_backprop_input(psg_kernel_ctx_t *c);
int psg_gpu_conv2d_backprop_filter(psg_kernel_ctx_t *c);
int psg_gpu_max_pool(psg_kernel_ctx_t *c);
int psg_gpu_max_pool_grad(psg_kernel_ctx_t *c);
int psg_gpu_avg_pool(psg_kernel_ctx_t *c);
int psg_gpu_avg_pool_grad(psg_kernel_ctx_t *c);
int psg_gpu_bias_add(psg_kernel_ctx_t *c);
int psg_gpu_bias_add_grad(psg_kernel_ctx_t *c);
int psg_gpu_fused_batch_norm(psg_kernel_ctx_t *c);
int psg_gpu_fused_batch_norm_grad(psg_kernel_ctx_t *c);

/* training (train.c) */
int psg_gpu_apply_gradient_descent(psg_kernel_ctx_t *c);
int psg_gpu_apply_momentum(psg_kernel_ctx_t *c);
int psg_gpu_apply_rmsprop(psg_kernel_ctx_t *c);
int psg_gpu_apply_adam(psg_kernel_ctx_t *c);
int psg_gpu_apply_adagrad(psg_kernel_ctx_t *c);
int psg_gpu_scale_variable(psg_kernel_ctx_t *c);
int psg_gpu_increment_variable(psg_kernel_ctx_t *c);
int psg_gpu_exponential_decay(psg_kernel_ctx_t *c);

#endif
