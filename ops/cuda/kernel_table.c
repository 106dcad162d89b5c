/* The CUDA module's table of its kernels, one per entry of kernel_list.h:
 * it makes the module refer to each, so that an entry without its kernel
 * fails the module's link (--no-undefined), not a run on a GPU. */
#include "ops/cuda/kernels.h"

#define PSG_GPU_ENTRY(f) f,
psg_kernel_fn const psg_gpu_kernel_table[] = {PSG_GPU_KERNEL_LIST(PSG_GPU_ENTRY) NULL};
#undef PSG_GPU_ENTRY
