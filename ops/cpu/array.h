/* CPU kernels of the array and state ops (ops/array.c holds their defs). */
#ifndef PSGRAPH_OPS_CPU_ARRAY_H
#define PSGRAPH_OPS_CPU_ARRAY_H

#include "psgraph/kernel.h"

int psg_cpu_const(psg_kernel_ctx_t *c);
/* Const's kernel state: its value's copy on the plan node's GPU (the CUDA kernel's). */
typedef struct {
    psg_tensor_t *value;
} psg_const_state_t;
void psg_const_state_free(void *state);
int psg_cpu_placeholder(psg_kernel_ctx_t *c);
int psg_cpu_identity(psg_kernel_ctx_t *c);
int psg_cpu_reshape(psg_kernel_ctx_t *c);
int psg_cpu_add_n(psg_kernel_ctx_t *c);
int psg_cpu_fill_like(psg_kernel_ctx_t *c);
int psg_cpu_sum_to_shape_of(psg_kernel_ctx_t *c);
int psg_cpu_broadcast_like(psg_kernel_ctx_t *c);
int psg_cpu_var_handle(psg_kernel_ctx_t *c);
int psg_cpu_read_variable(psg_kernel_ctx_t *c);
int psg_cpu_assign(psg_kernel_ctx_t *c);
int psg_cpu_assign_add(psg_kernel_ctx_t *c);
int psg_cpu_no_op(psg_kernel_ctx_t *c);
int psg_cpu_random(psg_kernel_ctx_t *c);

/* The variable behind a resource-handle input (never NULL for a handle made
 * by VarHandle's kernel). */
struct psg_variable *psg_kernel_variable(psg_kernel_ctx_t *c, int input);

#endif
