/* CPU support of the 16-bit float dtypes (bf16, f16) of mixed precision:
 * array conversions to and from f32, and running an f32 kernel on 16-bit
 * tensors (the reference kernels of MatMul and the Conv2D family in bf16 and
 * f16). Not the rounding itself (psgraph/half.h) nor the Cast op's def. */
#ifndef PSGRAPH_OPS_CPU_HALF_H
#define PSGRAPH_OPS_CPU_HALF_H

#include "psgraph/kernel.h"

#include <stdbool.h>

/* True for PSG_DT_BF16 and PSG_DT_F16. */
bool psg_dtype_is_half(psg_dtype_t dt);

/* y (n, dtype to) = x (n, dtype from) where one of from, to is f32 and the
 * other bf16 or f16, rounding to nearest even; split over pool when large.
 * Returns 0, or -1 with the error set for another pair. */
int psg_cpu_convert_half(psg_threadpool_t *pool, psg_dtype_t from, const void *x, psg_dtype_t to,
                         void *y, int64_t n);

/* Runs f32_kernel on c's inputs and outputs with every bf16 / f16 tensor
 * converted to f32 (inputs) and rounded back (outputs): f32 arithmetic and
 * accumulation, one rounding of each result, as cuBLAS and cuDNN compute
 * 16-bit products with an f32 compute type. Returns f32_kernel's result. */
int psg_cpu_run_as_f32(psg_kernel_ctx_t *c, psg_kernel_fn f32_kernel);

#endif
