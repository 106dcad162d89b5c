/* CPU kernels of the comparison family (ops/compare.c holds their defs, shapes and
 * gradients): Maximum/Minimum, the comparisons, Max, OneHot, Shape. */
#ifndef PSGRAPH_OPS_CPU_COMPARE_H
#define PSGRAPH_OPS_CPU_COMPARE_H

#include "psgraph/op.h"

int psg_cpu_extremum(psg_kernel_ctx_t *c); /* Maximum, Minimum */
int psg_cpu_compare(psg_kernel_ctx_t *c);  /* Greater, GreaterEqual, Less, LessEqual, NotEqual,
                                             BroadcastEqual */
int psg_cpu_max(psg_kernel_ctx_t *c);
int psg_cpu_one_hot(psg_kernel_ctx_t *c);
int psg_cpu_shape(psg_kernel_ctx_t *c);

#endif
