/* What the .cu files share: each GPU's streams and cuBLAS handle, the check
 * macros that turn CUDA and cuBLAS codes into psgraph errors, and grid sizing.
 * Included by .cu files only (it includes CUDA headers); cuDNN stays in
 * cudnn.cu. Not an API for C code: that is runtime.h and launch.h. */
#ifndef PSGRAPH_OPS_CUDA_COMMON_H
#define PSGRAPH_OPS_CUDA_COMMON_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

extern "C" {
#include "psgraph/error.h"
}
#include "ops/cuda/launch.h"
#include "ops/cuda/runtime.h"

/* One GPU's runtime state, made on first use. */
typedef struct {
    cudaStream_t compute;  /* every kernel of the GPU, in enqueue order */
    cudaStream_t copy_in;  /* host to device */
    cudaStream_t copy_out; /* device to host, device to device */
    cublasHandle_t blas;   /* bound to `compute` */
    pthread_mutex_t lock;  /* cuBLAS and cuDNN handles are not for concurrent callers */
} psg_cuda_dev_t;

/* The state of `gpu` (made on first call), or NULL with the error set. */
psg_cuda_dev_t *psg_cuda_dev(int gpu);

/* A CUDA runtime call that must succeed; on failure returns -1 from the
 * calling function with "what: cudaErrorX (code): message". */
#define PSG_CUDA_CHECK(call)                                                                       \
    do {                                                                                           \
        cudaError_t psg_e_ = (call);                                                               \
        if (psg_e_ != cudaSuccess)                                                                 \
            return psg_error_set("%s: %s (%d): %s", #call, cudaGetErrorName(psg_e_), (int)psg_e_,  \
                                 cudaGetErrorString(psg_e_));                                      \
    } while (0)

/* A cuBLAS call that must succeed, as PSG_CUDA_CHECK. */
#define PSG_CUBLAS_CHECK(call)                                                                     \
    do {                                                                                           \
        cublasStatus_t psg_s_ = (call);                                                            \
        if (psg_s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return psg_error_set("%s: %s (%d)", #call, cublasGetStatusName(psg_s_), (int)psg_s_);  \
    } while (0)

/* After a kernel launch: a bad configuration shows here, not at the launch. */
#define PSG_CUDA_LAUNCHED(what) PSG_CUDA_CHECK((cudaPeekAtLastError(), cudaGetLastError()))

/* Sets the current device and fetches its state into `d` (a
 * psg_cuda_dev_t *), or returns -1 with the error set. */
#define PSG_CUDA_DEV(d, gpu)                                                                       \
    psg_cuda_dev_t *d = psg_cuda_dev(gpu);                                                         \
    if (!d) return -1

#define PSG_CUDA_THREADS 256

/* Blocks of PSG_CUDA_THREADS for n items, capped: kernels loop grid-stride. */
static inline unsigned psg_cuda_blocks(int64_t n) {
    int64_t b = (n + PSG_CUDA_THREADS - 1) / PSG_CUDA_THREADS;
    if (b < 1) b = 1;
    if (b > 65535L * 8) b = 65535L * 8;
    return (unsigned)b;
}

#define PSG_GRID_STRIDE(i, n)                                                                      \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)blockDim.x * gridDim.x)

#endif
