/* The GEMM of the CUDA kernels: row-major products through cuBLAS's
 * column-major sgemm (C^T = op(B)^T op(A)^T), on the GPU's compute stream,
 * in cuBLAS's default math (f32, no TF32), as the CPU's f32. Not convolution. */
#include "ops/cuda/common.h"

extern "C" int psg_cuda_gemm(int gpu, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                             float beta, float *c, int64_t ldc) {
    PSG_CUDA_DEV(d, gpu);
    if (m == 0 || n == 0) return 0;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
        ldc > INT32_MAX)
        return psg_error_set("GEMM of (%lld, %lld, %lld) is too large for cublasSgemm",
                             (long long)m, (long long)n, (long long)k);
    if (k == 0) return psg_cuda_fill(gpu, PSG_CU_F32, c, m * n, 0.0); /* ldc == n here */
    /* row-major C (m, n) is column-major C^T (n, m) = op(B)^T (n, k) op(A)^T (k, m) */
    pthread_mutex_lock(&d->lock);
    cublasStatus_t s = cublasSgemm(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b,
                                   (int)ldb, a, (int)lda, &beta, c, (int)ldc);
    pthread_mutex_unlock(&d->lock);
    PSG_CUBLAS_CHECK(s);
    return 0;
}
