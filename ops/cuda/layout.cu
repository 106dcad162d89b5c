/* NHWC <-> NCHW copies of activations for the convolutions that cuDNN runs
 * in NCHW (cudnn.cu): a batched 2-D transpose of each image's (H*W, C)
 * through a shared-memory tile, so both the reads and the writes are
 * coalesced, with the NCHW side optionally padded (rows and columns after
 * the H x W interior, which these copies neither read nor write). They
 * replace cudnnTransformTensor there (PSG_CUDNN_TRANSPOSE=cudnn keeps it,
 * for measuring one against the other). Elements of 4 or 2 bytes, moved as
 * bits. Not the filters' transposes (small; cudnn.cu). */
#include "ops/cuda/common.h"

#define TILE 32
#define ROWS 8 /* a block is TILE x ROWS threads; each moves TILE / ROWS elements */

/* Element i of a (wide: 4-byte, else 2-byte) array, as bits. */
__device__ static inline uint32_t load(const void *a, int64_t i, bool wide) {
    return wide ? ((const uint32_t *)a)[i] : ((const uint16_t *)a)[i];
}
__device__ static inline void store(void *a, int64_t i, uint32_t v, bool wide) {
    if (wide)
        ((uint32_t *)a)[i] = v;
    else
        ((uint16_t *)a)[i] = (uint16_t)v;
}

/* dst (N, C, HD, WD)'s interior (h < H, w < W) = src (N, H, W, C). Grid:
 * (ceil(H*W / TILE), ceil(C / TILE), N). */
__global__ static void nhwc_to_nchw(const void *src, void *dst, int c, int h, int w, int hd, int wd,
                                    bool wide) {
    __shared__ uint32_t tile[TILE][TILE + 1];
    int64_t hw = (int64_t)h * w, n = blockIdx.z;
    int hw0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        int p = hw0 + j, ch = c0 + threadIdx.x;
        if (p < hw && ch < c) tile[j][threadIdx.x] = load(src, (n * hw + p) * c + ch, wide);
    }
    __syncthreads();
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        int ch = c0 + j, p = hw0 + threadIdx.x;
        if (p < hw && ch < c) {
            int row = p / w, col = p - row * w;
            store(dst, ((n * c + ch) * hd + row) * wd + col, tile[threadIdx.x][j], wide);
        }
    }
}

/* dst (N, H, W, C) = src (N, C, HS, WS)'s interior (h < H, w < W). */
__global__ static void nchw_to_nhwc(const void *src, void *dst, int c, int h, int w, int hs, int ws,
                                    bool wide) {
    __shared__ uint32_t tile[TILE][TILE + 1];
    int64_t hw = (int64_t)h * w, n = blockIdx.z;
    int hw0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        int ch = c0 + j, p = hw0 + threadIdx.x;
        if (p < hw && ch < c) {
            int row = p / w, col = p - row * w;
            tile[j][threadIdx.x] = load(src, ((n * c + ch) * hs + row) * ws + col, wide);
        }
    }
    __syncthreads();
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        int p = hw0 + j, ch = c0 + threadIdx.x;
        if (p < hw && ch < c) store(dst, (n * hw + p) * c + ch, tile[threadIdx.x][j], wide);
    }
}

/* The grid of a copy, or an error when a dimension does not fit. */
static int grid_of(int64_t n, int64_t c, int64_t h, int64_t w, dim3 *grid) {
    int64_t x = (h * w + TILE - 1) / TILE, y = (c + TILE - 1) / TILE;
    if (n > 65535 || y > 65535 || x > INT32_MAX || h * w > INT32_MAX || c > INT32_MAX)
        return psg_error_set("layout copy: (%lld, %lld, %lld, %lld) too large for its grid",
                             (long long)n, (long long)c, (long long)h, (long long)w);
    *grid = dim3((unsigned)x, (unsigned)y, (unsigned)n);
    return 0;
}

extern "C" int psg_cuda_nhwc_to_nchw(int gpu, int es, const void *src, void *dst, int64_t n,
                                     int64_t c, int64_t h, int64_t w, int64_t hd, int64_t wd) {
    if (n * c * h * w == 0) return 0;
    PSG_CUDA_DEV(d, gpu);
    dim3 grid;
    if (grid_of(n, c, h, w, &grid) < 0) return -1;
    dim3 block(TILE, ROWS);
    nhwc_to_nchw<<<grid, block, 0, d->compute>>>(src, dst, (int)c, (int)h, (int)w, (int)hd, (int)wd,
                                                 es == 4);
    PSG_CUDA_LAUNCHED("nhwc_to_nchw");
    return 0;
}

extern "C" int psg_cuda_nchw_to_nhwc(int gpu, int es, const void *src, void *dst, int64_t n,
                                     int64_t c, int64_t h, int64_t w, int64_t hs, int64_t ws) {
    if (n * c * h * w == 0) return 0;
    PSG_CUDA_DEV(d, gpu);
    dim3 grid;
    if (grid_of(n, c, h, w, &grid) < 0) return -1;
    dim3 block(TILE, ROWS);
    nchw_to_nhwc<<<grid, block, 0, d->compute>>>(src, dst, (int)c, (int)h, (int)w, (int)hs, (int)ws,
                                                 es == 4);
    PSG_CUDA_LAUNCHED("nchw_to_nhwc");
    return 0;
}
