/* The device runtime behind include/psgraph/device.h: GPU tensors as buffers
 * wrapped around blocks of the caching allocator (ops/cuda/runtime.cu), and
 * the copies between devices. Without the CUDA backend every GPU call fails
 * with "built without CUDA". Not the executor's placement decisions. */
#include "psgraph/device.h"
#include "psgraph/error.h"

#include <stdio.h>
#include <string.h>

#ifdef PSG_HAVE_CUDA
#include "ops/gpu_module.h"

#include <pthread.h>

static pthread_once_t status_once = PTHREAD_ONCE_INIT;
static char status[512];
static int count;

static void find_gpus(void) {
    const psg_cuda_api_t *m = psg_cuda_module();
    if (!m) {
        snprintf(status, sizeof status, "%s", psg_cuda_module_error());
        count = 0;
        return;
    }
    count = m->detect(status, sizeof status);
}

/* The module, once a GPU exists (every caller below checked for one). */
#define CUDA (psg_cuda_module())

bool psg_cuda_available(void) {
    return true;
}

int psg_gpu_count(void) {
    pthread_once(&status_once, find_gpus);
    return count;
}

const char *psg_gpu_status(void) {
    pthread_once(&status_once, find_gpus);
    return status;
}

static int check_gpu(int gpu) {
    if (gpu < 0 || gpu >= psg_gpu_count())
        return psg_error_set("GPU %d does not exist (%s)", gpu, psg_gpu_status());
    return 0;
}

psg_tensor_t *psg_gpu_tensor_new(int gpu, psg_dtype_t dt, const psg_shape_t *shape) {
    if (check_gpu(gpu) < 0) return NULL;
    int64_t n = psg_shape_numel(shape);
    size_t es = psg_dtype_size(dt);
    if (n < 0 || es == 0) {
        /* psg_tensor_new words the error for a bad dtype or shape */
        psg_tensor_t *t = psg_tensor_new(dt, shape);
        psg_tensor_destroy(&t);
        return NULL;
    }
    size_t nbytes = (size_t)n * es;
    void *hint = NULL;
    void *p = CUDA->alloc(gpu, nbytes ? nbytes : 1, &hint);
    if (!p) return NULL;
    psg_buffer_t *buf = psg_buffer_wrap(p, nbytes, CUDA->free, hint);
    if (!buf) {
        CUDA->free(p, hint);
        return NULL;
    }
    buf->device = PSG_DEVICE_GPU(gpu);
    psg_tensor_t *t = psg_tensor_from_buffer(dt, shape, buf, 0);
    psg_buffer_unref(&buf);
    return t;
}

/* The free function of psg_tensor_new_pinned's blocks: it tells them from
 * the blocks a copy to the host lands in, which may become a variable's
 * storage and be written while a copy from them is under way. */
static void pinned_input_free(void *data, void *hint) {
    CUDA->pinned_free(data, hint);
}

/* A host tensor whose buffer is a pinned block, freed by free_fn. */
static psg_tensor_t *pinned_tensor_new(psg_dtype_t dt, const psg_shape_t *shape, size_t nbytes,
                                       psg_free_fn free_fn) {
    void *hint = NULL;
    void *p = CUDA->pinned_alloc(nbytes ? nbytes : 1, &hint);
    if (!p) return NULL;
    psg_buffer_t *buf = psg_buffer_wrap(p, nbytes, free_fn, hint);
    if (!buf) {
        CUDA->pinned_free(p, hint);
        return NULL;
    }
    psg_tensor_t *t = psg_tensor_from_buffer(dt, shape, buf, 0);
    psg_buffer_unref(&buf);
    return t;
}

psg_tensor_t *psg_tensor_new_pinned(psg_dtype_t dt, const psg_shape_t *shape) {
    if (psg_gpu_count() == 0) return psg_tensor_new(dt, shape);
    int64_t n = psg_shape_numel(shape);
    size_t es = psg_dtype_size(dt);
    if (n < 0 || es == 0) return psg_tensor_new(dt, shape); /* it words the error */
    return pinned_tensor_new(dt, shape, (size_t)n * es, pinned_input_free);
}

/* Whether t is psg_tensor_new_pinned's, copied to a GPU without staging. */
static bool pinned_input(const psg_tensor_t *t) {
    return t->buf->device == PSG_DEVICE_HOST && t->buf->free_fn == pinned_input_free;
}

psg_tensor_t *psg_tensor_to_device(psg_tensor_t *t, int device) {
    int from = t->buf->device;
    if (from == device || t->dtype == PSG_DT_RESOURCE) return psg_tensor_ref(t);
    size_t n = psg_tensor_nbytes(t);
    psg_tensor_t *out = NULL;
    int rc;
    if (device == PSG_DEVICE_HOST) {
        out = pinned_tensor_new(t->dtype, &t->shape, n, CUDA->pinned_free);
        if (!out) return NULL;
        rc = CUDA->copy_d2h(from - 1, out->data, t->data, n);
    } else {
        out = psg_gpu_tensor_new(device - 1, t->dtype, &t->shape);
        if (!out) return NULL;
        if (from == PSG_DEVICE_HOST && pinned_input(t))
            rc = CUDA->copy_h2d_pinned(device - 1, out->data, t->data, n, t->buf->hint);
        else if (from == PSG_DEVICE_HOST)
            rc = CUDA->copy_h2d(device - 1, out->data, t->data, n);
        else
            rc = CUDA->copy_d2d(device - 1, out->data, from - 1, t->data, n);
    }
    if (rc < 0) {
        psg_tensor_destroy(&out);
        return NULL;
    }
    return out;
}

int psg_gpu_synchronize(int gpu) {
    if (check_gpu(gpu) < 0) return -1;
    return CUDA->synchronize(gpu);
}

size_t psg_gpu_live_bytes(int gpu) {
    return psg_gpu_count() > 0 ? CUDA->live_bytes(gpu) : 0;
}
size_t psg_gpu_cached_bytes(int gpu) {
    return psg_gpu_count() > 0 ? CUDA->cached_bytes(gpu) : 0;
}

void psg_gpu_cache_trim(void) {
    if (psg_gpu_count() > 0) CUDA->trim();
}

#else /* no CUDA backend */

#define NO_CUDA "built without CUDA (meson -Dcuda=disabled, or no toolkit found)"

bool psg_cuda_available(void) {
    return false;
}
int psg_gpu_count(void) {
    return 0;
}
const char *psg_gpu_status(void) {
    return NO_CUDA;
}

psg_tensor_t *psg_gpu_tensor_new(int gpu, psg_dtype_t dt, const psg_shape_t *shape) {
    (void)dt;
    (void)shape;
    psg_error_set("GPU %d: %s", gpu, NO_CUDA);
    return NULL;
}

psg_tensor_t *psg_tensor_new_pinned(psg_dtype_t dt, const psg_shape_t *shape) {
    return psg_tensor_new(dt, shape);
}

psg_tensor_t *psg_tensor_to_device(psg_tensor_t *t, int device) {
    if (t->buf->device == device || t->dtype == PSG_DT_RESOURCE) return psg_tensor_ref(t);
    psg_error_set("GPU %d: %s", device - 1, NO_CUDA);
    return NULL;
}

int psg_gpu_synchronize(int gpu) {
    return psg_error_set("GPU %d: %s", gpu, NO_CUDA);
}
size_t psg_gpu_live_bytes(int gpu) {
    (void)gpu;
    return 0;
}
size_t psg_gpu_cached_bytes(int gpu) {
    (void)gpu;
    return 0;
}
void psg_gpu_cache_trim(void) {}

#endif

psg_tensor_t *psg_tensor_to_host(psg_tensor_t *t) {
    return psg_tensor_to_device(t, PSG_DEVICE_HOST);
}
