/* The CUDA kernels of the ops (psg_kernel_fn, for the `cuda` slot of the
 * op defs): C glue in ops/cuda/{array,math,nn,train}.c that reads the node,
 * allocates outputs on the kernel's GPU and calls the launchers of launch.h.
 * Their one list is kernel_list.h; the prototypes are made from it.
 * PSG_GPU_KERNEL(f) is f in a CUDA build and NULL without one, so the defs
 * name their kernels either way. */
#ifndef PSGRAPH_OPS_CUDA_KERNELS_H
#define PSGRAPH_OPS_CUDA_KERNELS_H

#include "psgraph/kernel.h"
#include "psgraph/resource.h"

#include "ops/cuda/kernel_list.h"

/* The kernels (in the CUDA module) and their trampolines (in libpsgraph),
 * declared from the one list in every build. */
#define PSG_GPU_DECLARE(f)                                                                         \
    int f(psg_kernel_ctx_t *c);                                                                    \
    int f##_lazy(psg_kernel_ctx_t *c);
PSG_GPU_KERNEL_LIST(PSG_GPU_DECLARE)
#undef PSG_GPU_DECLARE

#ifdef PSG_HAVE_CUDA
/* The defs name a trampoline in libpsgraph (ops/gpu_module.c) that loads
 * the CUDA module on its first call: a process that never uses a GPU never
 * maps cuBLAS or cuDNN (about 150 MB of RSS). */
#define PSG_GPU_KERNEL(f) f##_lazy
/* a CPU kernel that serves on the GPU as well (ops that only alias) */
#define PSG_GPU_SAME(f) f
#else
/* NULL, but only for a kernel of the list: a def naming a kernel missing
 * from kernel_list.h fails to compile here too, not only in a CUDA build. */
#define PSG_GPU_KERNEL(f) ((void *)(0 * sizeof(&f##_lazy)))
#define PSG_GPU_SAME(f) NULL
#endif

/* helpers of the glue */

/* array.c: the variable behind resource input `input`, its value moved to the
 * kernel's GPU on first use (under its lock): after that the variable lives
 * there. NULL with the error set. */
psg_variable_t *psg_gpu_variable(psg_kernel_ctx_t *c, int input);

/* math.c: out = scale * x summed over the axes flagged in reduced (x's rank), as an
 * (A, R, B) reduction when the axes allow. 0 or -1 with the error set. */
int psg_gpu_reduce_axes(int gpu, const psg_tensor_t *x, const bool *reduced, psg_tensor_t *out,
                        float scale);

#endif
