/* CPU kernels of the training ops (ops/train.c holds their defs): the
 * optimizer update rules applied in place to variables, and the small state
 * ops the optimizers need. Not the builder layer (ops/optimizer.c). */
#ifndef PSGRAPH_OPS_CPU_TRAIN_H
#define PSGRAPH_OPS_CPU_TRAIN_H

#include "psgraph/op.h"

int psg_cpu_apply_gradient_descent(psg_kernel_ctx_t *c);
int psg_cpu_apply_momentum(psg_kernel_ctx_t *c);
int psg_cpu_apply_rmsprop(psg_kernel_ctx_t *c);
int psg_cpu_apply_adam(psg_kernel_ctx_t *c);
int psg_cpu_apply_adagrad(psg_kernel_ctx_t *c);
int psg_cpu_scale_variable(psg_kernel_ctx_t *c);
int psg_cpu_increment_variable(psg_kernel_ctx_t *c);
int psg_cpu_exponential_decay(psg_kernel_ctx_t *c);

#endif
