/* The CUDA backend as a module loaded on demand (libpsgraph_cuda.so): the
 * runtime functions device.c calls, resolved once. Only built with CUDA. */
#ifndef PSGRAPH_GRAPH_GPU_MODULE_H
#define PSGRAPH_GRAPH_GPU_MODULE_H

#include <stdbool.h>
#include <stddef.h>

/* ops/cuda/runtime.h's functions, as pointers into the loaded module. */
typedef struct {
    int (*detect)(char *why, size_t why_size);
    void *(*alloc)(int gpu, size_t size, void **hint);
    void (*free)(void *data, void *hint);
    size_t (*live_bytes)(int gpu);
    size_t (*cached_bytes)(int gpu);
    void (*trim)(void);
    void *(*pinned_alloc)(size_t size, void **hint);
    void (*pinned_free)(void *data, void *hint);
    int (*copy_h2d)(int gpu, void *dst, const void *src, size_t n);
    /* from a pinned block's memory (hint: the block): no staging copy */
    int (*copy_h2d_pinned)(int gpu, void *dst, const void *src, size_t n, void *hint);
    int (*copy_d2h)(int gpu, void *dst, const void *src, size_t n);
    int (*copy_d2d)(int dst_gpu, void *dst, int src_gpu, const void *src, size_t n);
    int (*synchronize)(int gpu);
} psg_cuda_api_t;

/* The module's runtime, loading it on the first call (thread-safe); NULL
 * when it cannot be loaded, with the reason in psg_cuda_module_error(). */
const psg_cuda_api_t *psg_cuda_module(void);
const char *psg_cuda_module_error(void);

#endif
