/* CUDA kernels of MaxPool, AvgPool and their gradients (NHWC, f32) with
 * TensorFlow's window rules, which cuDNN's pooling cannot give for SAME
 * padding that is uneven (more after than before): forward a thread per
 * output, backward a thread per input cell gathering from the windows that
 * hold it (no atomics: deterministic). MaxPool's gradient first finds each
 * window's first maximum once (a pass per output), so the gather reads one
 * offset a window instead of searching the window again for every cell in
 * it (an H100, Inception-v3 batch 128: 10 ms a MaxPoolGrad before). Average
 * pooling goes to cuDNN where its windows are TensorFlow's (cudnn.cu), these
 * kernels otherwise. Not convolution (cudnn.cu). */
#include "ops/cuda/common.h"

#include <math.h>

/* The valid window rows [*lo, *hi) of a window starting at input row i0. */
__device__ static inline void window(int64_t i0, int64_t k, int64_t n, int64_t *lo, int64_t *hi) {
    *lo = i0 < 0 ? -i0 : 0;
    *hi = i0 + k > n ? n - i0 : k;
    if (*hi < *lo) *hi = *lo;
}

/* (b, row, col, ch) of index i of an (N, rows, cols, c) tensor. narrow (the
 * tensor has < 2^32 elements): in 32-bit arithmetic, as 64-bit division is
 * emulated in tens of instructions, which these memory-bound kernels felt. */
__device__ static inline void nhwc_index(int64_t i, int64_t rows, int64_t cols, int64_t c,
                                         bool narrow, int64_t *b, int64_t *row, int64_t *col,
                                         int64_t *ch) {
    if (narrow) {
        uint32_t u = (uint32_t)i, q = u / (uint32_t)c, q2 = q / (uint32_t)cols;
        *ch = u - q * (uint32_t)c;
        *col = q - q2 * (uint32_t)cols;
        *row = q2 % (uint32_t)rows;
        *b = q2 / (uint32_t)rows;
    } else {
        *ch = i % c;
        *col = (i / c) % cols;
        *row = (i / (c * cols)) % rows;
        *b = i / (c * cols * rows);
    }
}

/* a / b of non-negative a and b, in 32 bits when narrow (as nhwc_index) */
__device__ static inline int64_t div_nn(int64_t a, int64_t b, bool narrow) {
    return narrow ? (int64_t)((uint32_t)a / (uint32_t)b) : a / b;
}

/* y (N, OH, OW, C) from x (N, H, W, C) */
__global__ static void pool_kernel(bool max, psg_cu_geom_t g, const float *x, float *y, int64_t n,
                                   bool narrow) {
    PSG_GRID_STRIDE(i, n) {
        int64_t b, oh, ow, ch;
        nhwc_index(i, g.oh, g.ow, g.c, narrow, &b, &oh, &ow, &ch);
        int64_t ih0 = oh * g.sh - g.pt, iw0 = ow * g.sw - g.pl, hlo, hhi, wlo, whi;
        window(ih0, g.kh, g.h, &hlo, &hhi);
        window(iw0, g.kw, g.w, &wlo, &whi);
        float acc = max ? -INFINITY : 0.0f;
        for (int64_t kh = hlo; kh < hhi; kh++)
            for (int64_t kw = wlo; kw < whi; kw++) {
                float v = x[((b * g.h + ih0 + kh) * g.w + iw0 + kw) * g.c + ch];
                acc = max ? (v > acc ? v : acc) : acc + v;
            }
        int64_t count = (hhi - hlo) * (whi - wlo);
        y[i] = max ? acc : (count > 0 ? acc * (1.0f / (float)count) : 0.0f);
    }
}

extern "C" int psg_cuda_pool(int gpu, bool max, const psg_cu_geom_t *g, const float *x, float *y) {
    PSG_CUDA_DEV(d, gpu);
    int64_t n = g->n * g->oh * g->ow * g->c;
    if (n == 0) return 0;
    int done = max ? 0 : psg_cudnn_avg_pool(gpu, g, x, NULL, y);
    if (done != 0) return done < 0 ? -1 : 0;
    bool narrow = g->n * g->h * g->w * g->c <= (int64_t)UINT32_MAX && n <= (int64_t)UINT32_MAX;
    pool_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(max, *g, x, y, n, narrow);
    PSG_CUDA_LAUNCHED("pool");
    return 0;
}

/* The input offset of the first maximum of output window (b, oh, ow, ch), -1 if empty. */
__device__ static int64_t window_argmax(const psg_cu_geom_t &g, const float *x, int64_t b,
                                        int64_t oh, int64_t ow, int64_t ch) {
    int64_t ih0 = oh * g.sh - g.pt, iw0 = ow * g.sw - g.pl, hlo, hhi, wlo, whi;
    window(ih0, g.kh, g.h, &hlo, &hhi);
    window(iw0, g.kw, g.w, &wlo, &whi);
    int64_t arg = -1;
    float best = -INFINITY;
    for (int64_t kh = hlo; kh < hhi; kh++)
        for (int64_t kw = wlo; kw < whi; kw++) {
            int64_t off = ((b * g.h + ih0 + kh) * g.w + iw0 + kw) * g.c + ch;
            if (arg < 0 || x[off] > best) arg = off, best = x[off];
        }
    return arg;
}

/* arg (N, OH, OW, C): the input offset of each window's first maximum */
__global__ static void window_argmax_kernel(psg_cu_geom_t g, const float *x, int64_t *arg,
                                            int64_t n, bool narrow) {
    PSG_GRID_STRIDE(i, n) {
        int64_t b, oh, ow, ch;
        nhwc_index(i, g.oh, g.ow, g.c, narrow, &b, &oh, &ow, &ch);
        arg[i] = window_argmax(g, x, b, oh, ow, ch);
    }
}

/* dx (N, H, W, C): each input cell sums dy over the windows that hold it
 * (max: only those whose first maximum it is, from arg). dy (N, OH, OW, C) */
__global__ static void pool_grad_kernel(bool max, psg_cu_geom_t g, const int64_t *arg,
                                        const float *dy, float *dx, int64_t n, bool narrow) {
    PSG_GRID_STRIDE(i, n) {
        int64_t b, ih, iw, ch;
        nhwc_index(i, g.h, g.w, g.c, narrow, &b, &ih, &iw, &ch);
        /* output rows whose window [oh*sh - pt, oh*sh - pt + kh) holds ih */
        int64_t oh0 = ih + g.pt - g.kh + 1, oh1 = ih + g.pt;
        oh0 = oh0 <= 0 ? 0 : div_nn(oh0 + g.sh - 1, g.sh, narrow);
        oh1 = oh1 < 0 ? -1 : div_nn(oh1, g.sh, narrow);
        if (oh1 >= g.oh) oh1 = g.oh - 1;
        int64_t ow0 = iw + g.pl - g.kw + 1, ow1 = iw + g.pl;
        ow0 = ow0 <= 0 ? 0 : div_nn(ow0 + g.sw - 1, g.sw, narrow);
        ow1 = ow1 < 0 ? -1 : div_nn(ow1, g.sw, narrow);
        if (ow1 >= g.ow) ow1 = g.ow - 1;
        float acc = 0.0f;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                int64_t o = ((b * g.oh + oh) * g.ow + ow) * g.c + ch;
                float d = dy[o];
                if (max) {
                    if (arg[o] == i) acc += d;
                } else {
                    int64_t hlo, hhi, wlo, whi;
                    window(oh * g.sh - g.pt, g.kh, g.h, &hlo, &hhi);
                    window(ow * g.sw - g.pl, g.kw, g.w, &wlo, &whi);
                    int64_t count = (hhi - hlo) * (whi - wlo);
                    acc += count > 0 ? d * (1.0f / (float)count) : 0.0f;
                }
            }
        dx[i] = acc;
    }
}

extern "C" int psg_cuda_pool_grad(int gpu, bool max, const psg_cu_geom_t *g, const float *x,
                                  const float *dy, float *dx) {
    PSG_CUDA_DEV(d, gpu);
    int64_t n = g->n * g->h * g->w * g->c, n_out = g->n * g->oh * g->ow * g->c;
    if (n == 0) return 0;
    int done = max || n_out == 0 ? 0 : psg_cudnn_avg_pool(gpu, g, x, dy, dx);
    if (done != 0) return done < 0 ? -1 : 0;
    bool narrow = n <= (int64_t)UINT32_MAX && n_out <= (int64_t)UINT32_MAX;
    int64_t *arg = NULL;
    void *hint = NULL;
    if (max && n_out > 0) {
        arg = (int64_t *)psg_cuda_alloc(gpu, sizeof(int64_t) * (size_t)n_out, &hint);
        if (!arg) return -1;
        window_argmax_kernel<<<psg_cuda_blocks(n_out), PSG_CUDA_THREADS, 0, d->compute>>>(
            *g, x, arg, n_out, narrow);
    }
    pool_grad_kernel<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(max, *g, arg, dy, dx,
                                                                              n, narrow);
    if (arg) psg_cuda_free(arg, hint); /* stream-ordered: reused only by later work */
    PSG_CUDA_LAUNCHED("pool_grad");
    return 0;
}
