/* Broadcasting support for CPU kernels: strides of an input over an output
 * shape (0 along broadcast dims), and an odometer over the outer dims. */
#ifndef PSGRAPH_OPS_CPU_BROADCAST_H
#define PSGRAPH_OPS_CPU_BROADCAST_H

#include "psgraph/tensor.h"

/* strides[i] for each dim i of `out` (rank out->rank): the element stride of
 * `in` along that dim, 0 where `in` is broadcast (missing or size 1). `in`
 * must be broadcast-compatible with `out`. */
void psg_broadcast_strides(const psg_shape_t *in, const psg_shape_t *out, int64_t *strides);

/* out[j] += in[...] summed down: reduces `in` (shape in_shape) to out_shape,
 * where out_shape broadcasts to in_shape. out is zeroed first. f32. */
void psg_reduce_to_shape_f32(const float *in, const psg_shape_t *in_shape, float *out,
                             const psg_shape_t *out_shape);
/* out (out_shape) = in (in_shape) broadcast. f32. */
void psg_broadcast_to_f32(const float *in, const psg_shape_t *in_shape, float *out,
                          const psg_shape_t *out_shape);

#endif
