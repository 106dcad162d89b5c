/* The GEMM of the CUDA kernels: row-major products through cuBLAS's
 * column-major sgemm (C^T = op(B)^T op(A)^T), on the GPU's compute stream,
 * in cuBLAS's default math (f32, no TF32), as the CPU's f32; bf16 / f16
 * products (mixed precision) through cublasGemmEx with f32 accumulation.
 * Not convolution. */
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
    cublasStatus_t s =
        cublasSgemm(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                    (int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, c, (int)ldc);
    pthread_mutex_unlock(&d->lock);
    PSG_CUBLAS_CHECK(s);
    return 0;
}

extern "C" int psg_cuda_gemm_half(int gpu, int dtype, bool ta, bool tb, int64_t m, int64_t n,
                                  int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                                  void *c, int64_t ldc) {
    PSG_CUDA_DEV(d, gpu);
    if (dtype != PSG_CU_BF16 && dtype != PSG_CU_F16)
        return psg_error_set("16-bit GEMM: dtype %d is not bf16 or f16", dtype);
    if (m == 0 || n == 0) return 0;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
        ldc > INT32_MAX)
        return psg_error_set("GEMM of (%lld, %lld, %lld) is too large for cublasGemmEx",
                             (long long)m, (long long)n, (long long)k);
    if (k == 0) return psg_cuda_memset0(gpu, c, (size_t)(m * n) * 2); /* ldc == n here */
    cudaDataType_t t = dtype == PSG_CU_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    /* CUBLAS_COMPUTE_32F takes float alpha and beta, whatever the data type */
    const float alpha = 1.0f, beta = 0.0f;
    pthread_mutex_lock(&d->lock);
    cublasStatus_t s =
        cublasGemmEx(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                     (int)n, (int)m, (int)k, &alpha, b, t, (int)ldb, a, t, (int)lda, &beta, c, t,
                     (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    pthread_mutex_unlock(&d->lock);
    PSG_CUBLAS_CHECK(s);
    return 0;
}

/* ---- the benchmark peer: cuBLAS alone ---- */

extern "C" double psg_cuda_peer_gemm_seconds(int gpu, int64_t m, int64_t n, int64_t k, bool ta,
                                             bool tb, int iters) {
    if (!psg_cuda_dev(gpu)) return -1;
    cublasHandle_t h = NULL;
    cudaStream_t st = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float *a = NULL, *b = NULL, *c = NULL, ms = 0;
    const float one = 1.0f, zero = 0.0f;
    double sec = -1;
    int lda = (int)(ta ? m : k), ldb = (int)(tb ? k : n);
    if (cudaStreamCreate(&st) != cudaSuccess || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(h, st) != CUBLAS_STATUS_SUCCESS ||
        cudaMalloc(&a, sizeof(float) * (size_t)(m * k)) != cudaSuccess ||
        cudaMalloc(&b, sizeof(float) * (size_t)(k * n)) != cudaSuccess ||
        cudaMalloc(&c, sizeof(float) * (size_t)(m * n)) != cudaSuccess ||
        cudaMemset(a, 0, sizeof(float) * (size_t)(m * k)) != cudaSuccess ||
        cudaMemset(b, 0, sizeof(float) * (size_t)(k * n)) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        psg_error_set("peer GEMM: setting up cuBLAS, a stream or buffers failed");
        goto done;
    }
    for (int i = -3; i < iters; i++) {
        if (i == 0) cudaEventRecord(e0, st);
        if (cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                        (int)m, (int)k, &one, b, ldb, a, lda, &zero, c,
                        (int)n) != CUBLAS_STATUS_SUCCESS) {
            psg_error_set("peer GEMM: cublasSgemm failed");
            goto done;
        }
    }
    cudaEventRecord(e1, st);
    if (cudaEventSynchronize(e1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
        psg_error_set("peer GEMM: timing failed");
        goto done;
    }
    sec = (double)ms * 1e-3 / (iters > 0 ? iters : 1);
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    if (h) cublasDestroy(h);
    if (st) cudaStreamDestroy(st);
    return sec;
}
