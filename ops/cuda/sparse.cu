/* CUDA kernel of Gather (rows of a tensor at indices), a thread per output byte so that
 * any dtype is gathered; an index outside the rows is counted, and the C glue
 * (ops/cuda/sparse.c) turns a count into the CPU kernel's error. Not ResourceGather,
 * Unique or the sparse updates: they run on the variable's device, the CPU. */
#include "ops/cuda/common.h"

/* out (n, row_bytes) = src (rows, row_bytes) at rows ix (n, i32 or i64); a negative
 * index gives a zero row when neg_zero; one outside [0, rows) a zero row and *bad += 1 */
__global__ static void gather_kernel(const unsigned char *src, int64_t rows, int64_t row_bytes,
                                     const void *ix, bool ix64, bool neg_zero, unsigned char *out,
                                     int64_t total, unsigned int *bad) {
    PSG_GRID_STRIDE(i, total) {
        int64_t k = i / row_bytes, b = i % row_bytes;
        int64_t r = ix64 ? ((const int64_t *)ix)[k] : (int64_t)((const int32_t *)ix)[k];
        if (r < 0 || r >= rows) {
            out[i] = 0;
            if (b == 0 && !(r < 0 && neg_zero)) atomicAdd(bad, 1u);
            continue;
        }
        out[i] = src[r * row_bytes + b];
    }
}

extern "C" int psg_cuda_gather(int gpu, const void *src, int64_t rows, int64_t row_bytes,
                               const void *ix, bool ix64, int64_t n, bool negative_is_zero,
                               void *out, int64_t *bad) {
    PSG_CUDA_DEV(d, gpu);
    *bad = 0;
    int64_t total = n * row_bytes;
    if (total == 0) return 0;
    unsigned int *dbad = NULL, hbad = 0;
    PSG_CUDA_CHECK(cudaMallocAsync((void **)&dbad, sizeof *dbad, d->compute));
    cudaError_t e = cudaMemsetAsync(dbad, 0, sizeof *dbad, d->compute);
    if (e == cudaSuccess) {
        gather_kernel<<<psg_cuda_blocks(total), PSG_CUDA_THREADS, 0, d->compute>>>(
            (const unsigned char *)src, rows, row_bytes, ix, ix64, negative_is_zero,
            (unsigned char *)out, total, dbad);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&hbad, dbad, sizeof hbad, cudaMemcpyDeviceToHost, d->compute);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->compute);
    cudaFreeAsync(dbad, d->compute);
    PSG_CUDA_CHECK(e);
    *bad = hbad;
    return 0;
}
