/* The device runtime: where a tensor's bytes live (host memory or one GPU),
 * GPU detection once per process, GPU tensors from a caching allocator, and
 * copies between host and GPUs through pinned buffers on copy streams.
 * Not device names (device_name.h) and not the kernels (ops/cuda/). Without
 * the CUDA backend, or on a machine without a GPU, psg_gpu_count() is 0 and
 * every GPU call fails with that reason. */
#ifndef PSGRAPH_DEVICE_H
#define PSGRAPH_DEVICE_H

#include "psgraph/tensor.h"

#include <stdbool.h>
#include <stddef.h>

/* psg_buffer_t.device: host memory, or GPU k as PSG_DEVICE_GPU(k). */
#define PSG_DEVICE_HOST 0
#define PSG_DEVICE_GPU(k) ((k) + 1)

/* The GPU holding t's bytes, or -1 for host memory. */
static inline int psg_tensor_gpu(const psg_tensor_t *t) {
    return t->buf->device - 1;
}
static inline bool psg_tensor_on_host(const psg_tensor_t *t) {
    return t->buf->device == PSG_DEVICE_HOST;
}

/* True when this build has the CUDA backend. */
bool psg_cuda_available(void);

/* The number of usable GPUs, found once at the first call (0 without the
 * backend or without a GPU). Thread-safe. */
int psg_gpu_count(void);

/* One line: the GPUs found ("1 GPU: [0] NVIDIA H100 ..."), or why there are
 * none ("built without CUDA", "no CUDA device: cudaErrorNoDevice (100) ...").
 * Static storage. */
const char *psg_gpu_status(void);

/* A tensor on GPU `gpu` with uninitialized contents, from the caching
 * allocator. NULL with the error set (a bad shape, no such GPU, out of
 * device memory). The caller owns it. */
psg_tensor_t *psg_gpu_tensor_new(int gpu, psg_dtype_t dt, const psg_shape_t *shape);

/* A host tensor in pinned (page-locked) memory, uninitialized: copied to a GPU
 * by psg_tensor_to_device without a staging copy on the host (as PyTorch's
 * pin_memory). Write it before the first such copy, never after (the copy
 * reads it on the GPU's time). Without a GPU, a plain host tensor. NULL with
 * the error set. The caller owns it. */
psg_tensor_t *psg_tensor_new_pinned(psg_dtype_t dt, const psg_shape_t *shape);

/* t's contents on `device` (PSG_DEVICE_HOST or PSG_DEVICE_GPU(k)): a new
 * reference to t when it is there already, else a copy (host to GPU through
 * a pinned staging block, or straight from t's memory when t is
 * psg_tensor_new_pinned's; GPU to host into a pinned block that becomes the
 * new tensor's buffer, so no second host copy is made; GPU to GPU by peer
 * copy). The copy is ordered after the work queued so far on the GPUs
 * involved; a copy to the host has finished when this returns. NULL with the
 * error set. The caller owns the result. */
psg_tensor_t *psg_tensor_to_device(psg_tensor_t *t, int device);

/* A copy of t's contents in host memory (t may live anywhere), as
 * psg_tensor_to_device(t, PSG_DEVICE_HOST). */
psg_tensor_t *psg_tensor_to_host(psg_tensor_t *t);

/* Waits for everything queued on GPU `gpu`. 0, or -1 with the error set. */
int psg_gpu_synchronize(int gpu);

/* Bytes of GPU `gpu` handed out by the allocator / held in its cache. */
size_t psg_gpu_live_bytes(int gpu);
size_t psg_gpu_cached_bytes(int gpu);
/* Returns cached device and pinned blocks to the driver. */
void psg_gpu_cache_trim(void);

#endif
