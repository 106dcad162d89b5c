/* Every CUDA kernel an op def names, as an X-macro, the one list: kernels.h
 * declares each from it, ops/gpu_module.c makes a trampoline for each that
 * resolves the kernel from the CUDA module on its first call, and a def that
 * names a kernel not here fails to compile in every build (kernels.h). The
 * CUDA module links with --no-undefined: an entry without its kernel fails. */
#ifndef PSGRAPH_OPS_CUDA_KERNEL_LIST_H
#define PSGRAPH_OPS_CUDA_KERNEL_LIST_H

#define PSG_GPU_KERNEL_LIST(X)                                                                     \
    X(psg_gpu_add_n)                                                                               \
    X(psg_gpu_apply_adagrad)                                                                       \
    X(psg_gpu_apply_adam)                                                                          \
    X(psg_gpu_apply_gradient_descent)                                                              \
    X(psg_gpu_apply_momentum)                                                                      \
    X(psg_gpu_apply_rmsprop)                                                                       \
    X(psg_gpu_argmax)                                                                              \
    X(psg_gpu_assign)                                                                              \
    X(psg_gpu_assign_add)                                                                          \
    X(psg_gpu_avg_pool)                                                                            \
    X(psg_gpu_avg_pool_grad)                                                                       \
    X(psg_gpu_bias_add)                                                                            \
    X(psg_gpu_bias_add_grad)                                                                       \
    X(psg_gpu_binary)                                                                              \
    X(psg_gpu_broadcast_like)                                                                      \
    X(psg_gpu_cast)                                                                                \
    X(psg_gpu_concat)                                                                              \
    X(psg_gpu_const)                                                                               \
    X(psg_gpu_conv2d)                                                                              \
    X(psg_gpu_conv2d_backprop_filter)                                                              \
    X(psg_gpu_conv2d_backprop_input)                                                               \
    X(psg_gpu_dense)                                                                               \
    X(psg_gpu_dense_backprop)                                                                      \
    X(psg_gpu_dropout)                                                                             \
    X(psg_gpu_equal)                                                                               \
    X(psg_gpu_exponential_decay)                                                                   \
    X(psg_gpu_fill_like)                                                                           \
    X(psg_gpu_fused_batch_norm)                                                                    \
    X(psg_gpu_fused_batch_norm_grad)                                                               \
    X(psg_gpu_gather)                                                                              \
    X(psg_gpu_increment_variable)                                                                  \
    X(psg_gpu_l2_loss)                                                                             \
    X(psg_gpu_matmul)                                                                              \
    X(psg_gpu_max_pool)                                                                            \
    X(psg_gpu_max_pool_grad)                                                                       \
    X(psg_gpu_read_variable)                                                                       \
    X(psg_gpu_reduce)                                                                              \
    X(psg_gpu_reduction_size)                                                                      \
    X(psg_gpu_scale_variable)                                                                      \
    X(psg_gpu_slice)                                                                               \
    X(psg_gpu_slice_grad)                                                                          \
    X(psg_gpu_softmax)                                                                             \
    X(psg_gpu_sparse_xent)                                                                         \
    X(psg_gpu_sum_to_shape_of)                                                                     \
    X(psg_gpu_unary)

#endif
