/* The CUDA runtime behind ops/device.c, as plain C: GPU detection, the
 * caching device allocator, pinned staging buffers and the copies between
 * host and GPUs on the copy streams. Declared for C and for the .cu files;
 * no CUDA type appears here. Not the kernels (launch.h). */
#ifndef PSGRAPH_OPS_CUDA_RUNTIME_H
#define PSGRAPH_OPS_CUDA_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most GPUs one process drives. */
#define PSG_CUDA_MAX_GPUS 16

/* Looks for GPUs once (cudaGetDeviceCount). Returns how many (0 when none,
 * capped at PSG_CUDA_MAX_GPUS); when 0, `why` gets the reason ("no CUDA
 * device: cudaErrorNoDevice (100)"), else a one-line summary of the GPUs.
 * Thread-safe; later calls return the first answer. */
int psg_cuda_detect(char *why, size_t why_size);

/* size bytes of device memory on `gpu` from the caching allocator (a freed
 * block of the same size class is reused; cudaMalloc only on a miss, and
 * after trimming the cache when that fails). Blocks are stream-ordered on
 * the GPU's compute stream: a block freed after its last kernel was enqueued
 * may be handed to the next kernel at once. *hint gets the block's handle
 * for psg_cuda_free. NULL with the error set ("out of memory on GPU 0 ..."). */
void *psg_cuda_alloc(int gpu, size_t size, void **hint);
/* Returns a block to its GPU's cache (a psg_free_fn: data, hint). */
void psg_cuda_free(void *data, void *hint);
/* Bytes handed out / held in the cache of `gpu`. */
size_t psg_cuda_live_bytes(int gpu);
size_t psg_cuda_cached_bytes(int gpu);
/* Returns every cached block (device and pinned) to the driver. */
void psg_cuda_trim(void);

/* A pinned host block of `size` bytes for a device-to-host copy result; *hint
 * for psg_cuda_pinned_free. NULL with the error set. */
void *psg_cuda_pinned_alloc(size_t size, void **hint);
void psg_cuda_pinned_free(void *data, void *hint);

/* Copies n bytes from host memory to `dst` on `gpu`: through a pinned
 * staging block on the GPU's host-to-device copy stream, ordered after the
 * compute stream's work so far, and the compute stream waits for it. The
 * source may be reused when this returns. 0, or -1 with the error set. */
int psg_cuda_copy_h2d(int gpu, void *dst, const void *src, size_t n);
int psg_cuda_copy_h2d_pinned(int gpu, void *dst, const void *src, size_t n, void *hint);
/* Copies n bytes from `src` on `gpu` into host memory `dst` after the
 * compute stream's work so far, on the device-to-host copy stream, and
 * waits for it. dst should be pinned (psg_cuda_pinned_alloc) for speed. */
int psg_cuda_copy_d2h(int gpu, void *dst, const void *src, size_t n);
/* Copies n bytes between GPUs (or within one), ordered after both compute
 * streams' work so far; the destination's compute stream waits for it. */
int psg_cuda_copy_d2d(int dst_gpu, void *dst, int src_gpu, const void *src, size_t n);
/* Fills n bytes of dst on gpu with zeros, on the compute stream. */
int psg_cuda_memset0(int gpu, void *dst, size_t n);
/* Waits for all work queued on gpu's streams. */
int psg_cuda_synchronize(int gpu);

#ifdef __cplusplus
}
#endif

#endif
