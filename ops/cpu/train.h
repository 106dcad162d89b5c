/* CPU kernels of the training ops (ops/train.c holds their defs): the
 * optimizer update rules applied in place to variables, and the small state
 * ops the optimizers need, and the input checks the CUDA glue shares. Not the
 * builder layer (runtime/optimizer.c). */
#ifndef PSGRAPH_OPS_CPU_TRAIN_H
#define PSGRAPH_OPS_CPU_TRAIN_H

#include "psgraph/kernel.h"

int psg_cpu_apply_gradient_descent(psg_kernel_ctx_t *c);
int psg_cpu_apply_momentum(psg_kernel_ctx_t *c);
int psg_cpu_apply_rmsprop(psg_kernel_ctx_t *c);
int psg_cpu_apply_adam(psg_kernel_ctx_t *c);
int psg_cpu_apply_adagrad(psg_kernel_ctx_t *c);
int psg_cpu_apply_ftrl(psg_kernel_ctx_t *c);
int psg_cpu_scale_variable(psg_kernel_ctx_t *c);
int psg_cpu_increment_variable(psg_kernel_ctx_t *c);
int psg_cpu_exponential_decay(psg_kernel_ctx_t *c);

/* The checks of an update's inputs, for the CPU and the CUDA kernels alike:
 * v (NULL: its lookup failed, the error is set) must be an initialized f32
 * variable; input i (`what`, for the message) a scalar f32. 0, or -1 with
 * the error set. */
int psg_update_check_variable(const psg_variable_t *v);
int psg_update_check_scalar(const psg_kernel_ctx_t *c, int i, const char *what);
/* A slot, or the gradient (f32), has the shape of variable v. */
int psg_update_check_slot(const psg_variable_t *slot, const psg_variable_t *v);
int psg_update_check_gradient(const psg_tensor_t *g, const psg_variable_t *v);

/* The backend's variable behind input i of c (psg_kernel_variable,
 * psg_gpu_variable); NULL with the error set. */
typedef psg_variable_t *(*psg_variable_lookup_fn)(psg_kernel_ctx_t *c, int input);
/* Input i's variable, found by lookup and checked by psg_update_check_variable. */
int psg_update_variable(psg_kernel_ctx_t *c, psg_variable_lookup_fn lookup, int i,
                        psg_variable_t **v);
/* An update's operands: the variable (input 0), its nslots slots (inputs
 * 1..nslots; s[k] NULL past them), each checked, and the gradient (input gi)
 * checked against the variable. */
int psg_update_operands(psg_kernel_ctx_t *c, psg_variable_lookup_fn lookup, int nslots, int gi,
                        psg_variable_t **v, psg_variable_t *s[2]);

#endif
