/* Loads the CUDA backend (libpsgraph_cuda.so, beside libpsgraph) on first
 * use, and the trampolines the op defs name for their GPU kernels. A process
 * that never touches a GPU never maps the CUDA libraries. */
#include "ops/gpu_module.h"
#include "ops/cuda/kernels.h"
#include "psgraph/error.h"

#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODULE_NAME "libpsgraph_cuda.so"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *handle;
static psg_cuda_api_t api;
static bool loaded;
static char load_error[1024];

/* PSG_CUDA_MODULE, else the module beside the libpsgraph this code is in,
 * else the loader's search path. */
static void *open_module(void) {
    const char *env = getenv("PSG_CUDA_MODULE");
    if (env && *env) return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    Dl_info info;
    if (dladdr((void *)psg_cuda_module, &info) && info.dli_fname) {
        char self[4096], path[4200];
        snprintf(self, sizeof self, "%s", info.dli_fname);
        snprintf(path, sizeof path, "%s/" MODULE_NAME, dirname(self));
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    return dlopen(MODULE_NAME, RTLD_NOW | RTLD_LOCAL);
}

static void *need(const char *name) {
    void *p = dlsym(handle, name);
    if (!p && !load_error[0])
        snprintf(load_error, sizeof load_error, "%s lacks %s", MODULE_NAME, name);
    return p;
}

static void load(void) {
    handle = open_module();
    if (!handle) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "the CUDA backend (%s) could not be loaded: %s",
                 MODULE_NAME, e ? e : "not found");
        return;
    }
    api.detect = (int (*)(char *, size_t))need("psg_cuda_detect");
    api.alloc = (void *(*)(int, size_t, void **))need("psg_cuda_alloc");
    api.free = (void (*)(void *, void *))need("psg_cuda_free");
    api.live_bytes = (size_t(*)(int))need("psg_cuda_live_bytes");
    api.cached_bytes = (size_t(*)(int))need("psg_cuda_cached_bytes");
    api.trim = (void (*)(void))need("psg_cuda_trim");
    api.pinned_alloc = (void *(*)(size_t, void **))need("psg_cuda_pinned_alloc");
    api.pinned_free = (void (*)(void *, void *))need("psg_cuda_pinned_free");
    api.copy_h2d = (int (*)(int, void *, const void *, size_t))need("psg_cuda_copy_h2d");
    api.copy_h2d_pinned =
        (int (*)(int, void *, const void *, size_t, void *))need("psg_cuda_copy_h2d_pinned");
    api.copy_d2h = (int (*)(int, void *, const void *, size_t))need("psg_cuda_copy_d2h");
    api.copy_d2d = (int (*)(int, void *, int, const void *, size_t))need("psg_cuda_copy_d2d");
    api.synchronize = (int (*)(int))need("psg_cuda_synchronize");
    loaded = !load_error[0];
}

const psg_cuda_api_t *psg_cuda_module(void) {
    pthread_once(&once, load);
    return loaded ? &api : NULL;
}

const char *psg_cuda_module_error(void) {
    pthread_once(&once, load);
    return load_error;
}

/* One trampoline per GPU kernel: resolves it on its first call. A kernel
 * runs only on a node placed on a GPU, which needs the module loaded. */
#define PSG_GPU_TRAMPOLINE(f)                                                                      \
    int f##_lazy(psg_kernel_ctx_t *c) {                                                            \
        static _Atomic(psg_kernel_fn) fn;                                                          \
        psg_kernel_fn k = atomic_load(&fn);                                                        \
        if (!k) {                                                                                  \
            if (!psg_cuda_module()) return psg_error_set("%s", psg_cuda_module_error());           \
            k = (psg_kernel_fn)dlsym(handle, #f);                                                  \
            if (!k) return psg_error_set("%s lacks the kernel %s", MODULE_NAME, #f);               \
            atomic_store(&fn, k);                                                                  \
        }                                                                                          \
        return k(c);                                                                               \
    }
PSG_GPU_KERNEL_LIST(PSG_GPU_TRAMPOLINE)
