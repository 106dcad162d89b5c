/* CPU kernels of the sparse updates (ops/sparse_apply.c holds their defs). */
#ifndef PSGRAPH_OPS_CPU_SPARSE_APPLY_H
#define PSGRAPH_OPS_CPU_SPARSE_APPLY_H

#include "psgraph/kernel.h"

int psg_cpu_sparse_apply_gradient_descent(psg_kernel_ctx_t *c);
int psg_cpu_sparse_apply_momentum(psg_kernel_ctx_t *c);
int psg_cpu_sparse_apply_adagrad(psg_kernel_ctx_t *c);
int psg_cpu_sparse_apply_ftrl(psg_kernel_ctx_t *c);
int psg_cpu_sparse_apply_adam(psg_kernel_ctx_t *c);

#endif
