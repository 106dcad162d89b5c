/* The CUDA runtime of psgraph: GPU detection (once), each GPU's streams and
 * cuBLAS handle, the caching device allocator, pinned staging blocks, and the
 * copies between host and GPUs ordered against the compute streams by events.
 * Not the kernels, and not cuDNN (cudnn.cu keeps its own handles). */
#include "ops/cuda/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- detection ---- */

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static int gpu_count;
static char detect_msg[512];

static void detect(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        snprintf(detect_msg, sizeof detect_msg, "no CUDA device: %s (%d): %s", cudaGetErrorName(e),
                 (int)e, cudaGetErrorString(e));
        (void)cudaGetLastError(); /* the failure is sticky only per call */
        gpu_count = 0;
        return;
    }
    if (n > PSG_CUDA_MAX_GPUS) n = PSG_CUDA_MAX_GPUS;
    size_t at = (size_t)snprintf(detect_msg, sizeof detect_msg, "%d GPU%s:", n, n == 1 ? "" : "s");
    for (int i = 0; i < n && at < sizeof detect_msg; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        at += (size_t)snprintf(detect_msg + at, sizeof detect_msg - at,
                               " [%d] %s (sm_%d%d, %.0f GiB)", i, p.name, p.major, p.minor,
                               (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    }
    gpu_count = n;
}

extern "C" int psg_cuda_detect(char *why, size_t why_size) {
    pthread_once(&detect_once, detect);
    if (why && why_size) snprintf(why, why_size, "%s", detect_msg);
    return gpu_count;
}

/* ---- per-GPU state ---- */

static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
static psg_cuda_dev_t *devs[PSG_CUDA_MAX_GPUS];

static int dev_init(int gpu, psg_cuda_dev_t *d) {
    PSG_CUDA_CHECK(cudaSetDevice(gpu));
    PSG_CUDA_CHECK(cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking));
    PSG_CUDA_CHECK(cudaStreamCreateWithFlags(&d->copy_in, cudaStreamNonBlocking));
    PSG_CUDA_CHECK(cudaStreamCreateWithFlags(&d->copy_out, cudaStreamNonBlocking));
    PSG_CUBLAS_CHECK(cublasCreate(&d->blas));
    PSG_CUBLAS_CHECK(cublasSetStream(d->blas, d->compute));
    pthread_mutex_init(&d->lock, NULL);
    return 0;
}

psg_cuda_dev_t *psg_cuda_dev(int gpu) {
    if (gpu < 0 || gpu >= psg_cuda_detect(NULL, 0)) {
        psg_error_set("GPU %d does not exist (%s)", gpu, detect_msg);
        return NULL;
    }
    pthread_mutex_lock(&devs_lock);
    psg_cuda_dev_t *d = devs[gpu];
    if (!d) {
        d = (psg_cuda_dev_t *)calloc(1, sizeof *d);
        if (!d) {
            psg_error_set("out of memory");
        } else if (dev_init(gpu, d) < 0) {
            psg_error_wrap("GPU %d: initializing its streams and cuBLAS", gpu);
            free(d); /* what was made before the failure is left to the driver */
            d = NULL;
        }
        devs[gpu] = d;
    }
    pthread_mutex_unlock(&devs_lock);
    if (d && cudaSetDevice(gpu) != cudaSuccess) {
        psg_error_set("cudaSetDevice(%d) failed", gpu);
        return NULL;
    }
    return d;
}

/* ---- size classes: 512-byte steps below 64 KiB, then four per power of two ---- */

#define NUM_CLASSES 320
#define PINNED_CACHE_MAX ((size_t)1 << 30)

static int size_class(size_t size, size_t *capacity) {
    if (size <= 65536) {
        size_t c = (size + 511) / 512;
        if (c == 0) c = 1;
        *capacity = c * 512;
        return (int)c - 1; /* 0..127 */
    }
    int log2 = 63 - __builtin_clzll((unsigned long long)(size - 1));
    size_t base = (size_t)1 << log2, step = base / 4;
    size_t sub = (size - base + step - 1) / step; /* 1..4 */
    *capacity = base + sub * step;
    int c = 128 + (log2 - 16) * 4 + (int)sub - 1;
    return c < NUM_CLASSES ? c : -1; /* -1: too big to cache, exact size */
}

/* ---- the caching device allocator ---- */

typedef struct dblock {
    void *ptr;
    size_t cap;
    int gpu, cls;
    struct dblock *next;
} dblock_t;

typedef struct {
    pthread_mutex_t lock;
    dblock_t *free_list[NUM_CLASSES];
    size_t cached, live;
} dpool_t;

static dpool_t dpools[PSG_CUDA_MAX_GPUS];
static pthread_once_t dpools_once = PTHREAD_ONCE_INIT;

static void dpools_init(void) {
    for (int i = 0; i < PSG_CUDA_MAX_GPUS; i++) pthread_mutex_init(&dpools[i].lock, NULL);
}

/* Frees every cached block of one GPU; the pool's lock is held. */
static void dpool_trim_locked(dpool_t *p, int gpu) {
    cudaSetDevice(gpu);
    for (int c = 0; c < NUM_CLASSES; c++) {
        while (p->free_list[c]) {
            dblock_t *b = p->free_list[c];
            p->free_list[c] = b->next;
            cudaFree(b->ptr); /* synchronizes the device: cached blocks may be in flight */
            free(b);
        }
    }
    p->cached = 0;
}

extern "C" void *psg_cuda_alloc(int gpu, size_t size, void **hint) {
    if (!psg_cuda_dev(gpu)) return NULL;
    pthread_once(&dpools_once, dpools_init);
    size_t cap = size;
    int cls = size_class(size, &cap);
    if (cls < 0) cap = size;
    dpool_t *p = &dpools[gpu];
    dblock_t *b = NULL;
    pthread_mutex_lock(&p->lock);
    if (cls >= 0 && p->free_list[cls]) {
        b = p->free_list[cls];
        p->free_list[cls] = b->next;
        p->cached -= b->cap;
    }
    if (!b) {
        b = (dblock_t *)calloc(1, sizeof *b);
        void *ptr = NULL;
        cudaError_t e = b ? cudaMalloc(&ptr, cap) : cudaErrorMemoryAllocation;
        if (e == cudaErrorMemoryAllocation && b) {
            (void)cudaGetLastError();
            dpool_trim_locked(p, gpu);
            e = cudaMalloc(&ptr, cap);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            pthread_mutex_unlock(&p->lock);
            free(b);
            psg_error_set("out of memory on GPU %d allocating %zu bytes (%zu in use): %s", gpu,
                          size, p->live, cudaGetErrorString(e));
            return NULL;
        }
        b->ptr = ptr;
        b->cap = cap;
        b->gpu = gpu;
        b->cls = cls;
    }
    p->live += b->cap;
    pthread_mutex_unlock(&p->lock);
    *hint = b;
    return b->ptr;
}

extern "C" void psg_cuda_free(void *data, void *hint) {
    (void)data;
    dblock_t *b = (dblock_t *)hint;
    if (!b) return;
    dpool_t *p = &dpools[b->gpu];
    pthread_mutex_lock(&p->lock);
    p->live -= b->cap;
    if (b->cls >= 0) {
        b->next = p->free_list[b->cls];
        p->free_list[b->cls] = b;
        p->cached += b->cap;
        b = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    if (b) {
        cudaSetDevice(b->gpu);
        cudaFree(b->ptr);
        free(b);
    }
}

/* One counter of gpu's pool, read under its lock (0 for a bad gpu). */
static size_t pool_count(int gpu, bool live) {
    if (gpu < 0 || gpu >= PSG_CUDA_MAX_GPUS) return 0;
    pthread_once(&dpools_once, dpools_init);
    pthread_mutex_lock(&dpools[gpu].lock);
    size_t n = live ? dpools[gpu].live : dpools[gpu].cached;
    pthread_mutex_unlock(&dpools[gpu].lock);
    return n;
}

extern "C" size_t psg_cuda_live_bytes(int gpu) {
    return pool_count(gpu, true);
}
extern "C" size_t psg_cuda_cached_bytes(int gpu) {
    return pool_count(gpu, false);
}

/* ---- pinned host blocks ---- */

/* A pinned block. `done` is recorded on the copy stream of `ev_gpu` when the
 * block stages a host-to-device copy: the block is reused only after it. */
typedef struct pblock {
    void *ptr;
    size_t cap;
    int cls;
    int ev_gpu; /* -1: no event yet */
    cudaEvent_t done;
    struct pblock *next;
} pblock_t;

static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;
static pblock_t *pinned_free[NUM_CLASSES];
static size_t pinned_cached;

static void pblock_release(pblock_t *b) {
    if (b->ev_gpu >= 0) {
        cudaSetDevice(b->ev_gpu);
        cudaEventDestroy(b->done);
    }
    cudaFreeHost(b->ptr);
    free(b);
}

/* A block of `size` whose last staged copy has finished. */
static pblock_t *pinned_get(size_t size) {
    size_t cap = size;
    int cls = size_class(size, &cap);
    if (cls < 0) cap = size;
    pthread_mutex_lock(&pinned_lock);
    pblock_t **pp = cls >= 0 ? &pinned_free[cls] : NULL;
    while (pp && *pp) {
        pblock_t *b = *pp;
        if (b->ev_gpu < 0 || cudaEventQuery(b->done) == cudaSuccess) {
            *pp = b->next;
            pinned_cached -= b->cap;
            pthread_mutex_unlock(&pinned_lock);
            return b;
        }
        (void)cudaGetLastError(); /* cudaErrorNotReady */
        pp = &b->next;
    }
    pthread_mutex_unlock(&pinned_lock);
    pblock_t *b = (pblock_t *)calloc(1, sizeof *b);
    if (!b) {
        psg_error_set("out of memory");
        return NULL;
    }
    cudaError_t e = cudaHostAlloc(&b->ptr, cap ? cap : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(b);
        psg_error_set("cudaHostAlloc of %zu pinned bytes: %s", cap, cudaGetErrorString(e));
        return NULL;
    }
    b->cap = cap;
    b->cls = cls;
    b->ev_gpu = -1;
    return b;
}

static void pinned_put(pblock_t *b) {
    pthread_mutex_lock(&pinned_lock);
    if (b->cls >= 0 && pinned_cached + b->cap <= PINNED_CACHE_MAX) {
        b->next = pinned_free[b->cls];
        pinned_free[b->cls] = b;
        pinned_cached += b->cap;
        b = NULL;
    }
    pthread_mutex_unlock(&pinned_lock);
    if (b) pblock_release(b);
}

extern "C" void *psg_cuda_pinned_alloc(size_t size, void **hint) {
    pblock_t *b = pinned_get(size);
    *hint = b;
    return b ? b->ptr : NULL;
}

extern "C" void psg_cuda_pinned_free(void *data, void *hint) {
    (void)data;
    if (hint) pinned_put((pblock_t *)hint);
}

extern "C" void psg_cuda_trim(void) {
    int n = psg_cuda_detect(NULL, 0);
    pthread_once(&dpools_once, dpools_init);
    for (int g = 0; g < n; g++) {
        pthread_mutex_lock(&dpools[g].lock);
        dpool_trim_locked(&dpools[g], g);
        pthread_mutex_unlock(&dpools[g].lock);
    }
    pthread_mutex_lock(&pinned_lock);
    for (int c = 0; c < NUM_CLASSES; c++) {
        pblock_t **pp = &pinned_free[c];
        while (*pp) {
            pblock_t *b = *pp;
            if (b->ev_gpu >= 0 && cudaEventQuery(b->done) != cudaSuccess) {
                (void)cudaGetLastError();
                pp = &b->next; /* still staging a copy */
                continue;
            }
            *pp = b->next;
            pinned_cached -= b->cap;
            pblock_release(b);
        }
    }
    pthread_mutex_unlock(&pinned_lock);
}

/* ---- copies ---- */

/* `waiter` waits for the work queued on `on` (a stream of on_gpu) so far.
 * Leaves on_gpu current: an event is recorded on its own device's stream. */
static int stream_wait(cudaStream_t waiter, cudaStream_t on, int on_gpu) {
    cudaEvent_t e;
    PSG_CUDA_CHECK(cudaSetDevice(on_gpu));
    PSG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaError_t r = cudaEventRecord(e, on);
    if (r == cudaSuccess) r = cudaStreamWaitEvent(waiter, e, 0);
    cudaEventDestroy(e); /* released by the driver once it has fired */
    PSG_CUDA_CHECK(r);
    return 0;
}

/* b's event on `gpu`, made on its first copy there (a block may stage copies
 * to several GPUs in turn). */
static int pblock_event_on(pblock_t *b, int gpu) {
    if (b->ev_gpu == gpu) return 0;
    if (b->ev_gpu >= 0) {
        cudaSetDevice(b->ev_gpu);
        cudaEventDestroy(b->done);
        cudaSetDevice(gpu);
    }
    b->ev_gpu = -1;
    PSG_CUDA_CHECK(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming));
    b->ev_gpu = gpu;
    return 0;
}

/* n bytes at src in the pinned block b to dst on gpu, on its copy-in stream:
 * after the work queued on compute so far (dst may be a block a queued kernel
 * still reads) and before the compute work queued next; b is reused only
 * after the copy. */
static int copy_from_pinned(int gpu, psg_cuda_dev_t *d, void *dst, pblock_t *b, const void *src,
                            size_t n) {
    if (pblock_event_on(b, gpu) < 0) return -1;
    if (stream_wait(d->copy_in, d->compute, gpu) < 0) return -1;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, d->copy_in);
    if (e == cudaSuccess) e = cudaEventRecord(b->done, d->copy_in);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(d->compute, b->done, 0);
    PSG_CUDA_CHECK(e);
    return 0;
}

extern "C" int psg_cuda_copy_h2d(int gpu, void *dst, const void *src, size_t n) {
    if (n == 0) return 0;
    PSG_CUDA_DEV(d, gpu);
    pblock_t *b = pinned_get(n);
    if (!b) return -1;
    memcpy(b->ptr, src, n);
    int rc = copy_from_pinned(gpu, d, dst, b, b->ptr, n);
    pinned_put(b);
    return rc;
}

/* As psg_cuda_copy_h2d, from the memory of a pinned block (hint: the block, as
 * psg_cuda_pinned_alloc gave it): no staging copy on the host, and the block
 * is reused only after this copy, so its owner may free it at once. */
extern "C" int psg_cuda_copy_h2d_pinned(int gpu, void *dst, const void *src, size_t n, void *hint) {
    if (n == 0) return 0;
    PSG_CUDA_DEV(d, gpu);
    return copy_from_pinned(gpu, d, dst, (pblock_t *)hint, src, n);
}

extern "C" int psg_cuda_copy_d2h(int gpu, void *dst, const void *src, size_t n) {
    if (n == 0) return 0;
    PSG_CUDA_DEV(d, gpu);
    if (stream_wait(d->copy_out, d->compute, gpu) < 0) return -1;
    PSG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, d->copy_out));
    PSG_CUDA_CHECK(cudaStreamSynchronize(d->copy_out));
    return 0;
}

extern "C" int psg_cuda_copy_d2d(int dst_gpu, void *dst, int src_gpu, const void *src, size_t n) {
    if (n == 0) return 0;
    PSG_CUDA_DEV(dd, dst_gpu);
    PSG_CUDA_DEV(sd, src_gpu);
    if (dst_gpu != src_gpu && stream_wait(sd->copy_out, dd->compute, dst_gpu) < 0) return -1;
    if (stream_wait(sd->copy_out, sd->compute, src_gpu) < 0) return -1; /* src_gpu current */
    if (dst_gpu == src_gpu)
        PSG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, sd->copy_out));
    else
        PSG_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_gpu, src, src_gpu, n, sd->copy_out));
    /* both ends wait: the source block may be freed and reused by its GPU's
     * next kernel as soon as this returns */
    if (stream_wait(sd->compute, sd->copy_out, src_gpu) < 0) return -1;
    if (dst_gpu != src_gpu && stream_wait(dd->compute, sd->copy_out, src_gpu) < 0) return -1;
    PSG_CUDA_CHECK(cudaSetDevice(dst_gpu));
    return 0;
}

extern "C" int psg_cuda_memset0(int gpu, void *dst, size_t n) {
    if (n == 0) return 0;
    PSG_CUDA_DEV(d, gpu);
    PSG_CUDA_CHECK(cudaMemsetAsync(dst, 0, n, d->compute));
    return 0;
}

extern "C" int psg_cuda_synchronize(int gpu) {
    PSG_CUDA_DEV(d, gpu);
    PSG_CUDA_CHECK(cudaStreamSynchronize(d->compute));
    PSG_CUDA_CHECK(cudaStreamSynchronize(d->copy_in));
    PSG_CUDA_CHECK(cudaStreamSynchronize(d->copy_out));
    return 0;
}
