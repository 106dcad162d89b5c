/* The extern "C" launchers of the CUDA kernels, as plain C: each enqueues its
 * work on GPU `gpu`'s compute stream and returns 0, or -1 with the error set.
 * Pointers are device pointers unless said otherwise; shapes are in the
 * comments. The C glue (the .c files of ops/cuda) calls them from the ops' kernels. */
#ifndef PSGRAPH_OPS_CUDA_LAUNCH_H
#define PSGRAPH_OPS_CUDA_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
