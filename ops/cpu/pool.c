/* CPU kernels of MaxPool, AvgPool and their gradients (NHWC, f32): loops over
 * the window with the channels innermost (contiguous, vectorized), split over
 * the pool by output rows (forward) or images (backward, which scatters).
 * Not the defs (ops/nn.c). */
#include "ops/cpu/nn.h"
#include "ops/params.h"
#include "psgraph/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

typedef struct {
    psg_nn_geom_t g;
    const float *x;  /* input (N, H, W, C) */
    const float *dy; /* output gradient (N, OH, OW, C) */
    float *y;        /* output (N, OH, OW, C) */
    float *dx;       /* input gradient (N, H, W, C) */
    int failed;
} pool_job_t;

/* The valid window rows [*lo, *hi) of a window starting at input row i0. */
static void window(int64_t i0, int64_t k, int64_t n, int64_t *lo, int64_t *hi) {
    *lo = i0 < 0 ? -i0 : 0;
    *hi = i0 + k > n ? n - i0 : k;
    if (*hi < *lo) *hi = *lo;
}

static int pool_setup(psg_kernel_ctx_t *c, pool_job_t *j) {
    memset(j, 0, sizeof *j);
    const psg_nn_geom_t *g = psg_nn_kernel_geom(c, true, &j->g);
    if (!g) return -1;
    j->g = *g;
    return 0;
}

/* ---- forward: one output row (n, oh) per item ---- */

/* Channels a register holds: a window's maxima are taken this many at a time in registers,
 * and stored once (the generic loop loads and stores the output at every window cell). */
#define MAX_BLOCK 16

/* o (C) = the maxima over input rows [h0, h1) and columns [w0, w1) of image x (W cells a row, C
 * floats a cell), in the generic loop's order of comparisons: the same floats, NaN too (MAXPS
 * gives its first operand where it is greater, else the second: x > acc ? x : acc). */
static inline void max_window(const float *x, int64_t W, int64_t C, int64_t h0, int64_t h1,
                              int64_t w0, int64_t w1, float *restrict o) {
    for (int64_t c0 = 0; c0 < C; c0 += MAX_BLOCK) {
#if defined(__AVX512F__)
        __m512 acc = _mm512_set1_ps(-INFINITY);
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++)
                acc = _mm512_max_ps(_mm512_loadu_ps(x + (ih * W + iw) * C + c0), acc);
        _mm512_storeu_ps(o + c0, acc);
#elif defined(__AVX__)
        __m256 lo = _mm256_set1_ps(-INFINITY), hi = lo;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) {
                const float *xi = x + (ih * W + iw) * C + c0;
                lo = _mm256_max_ps(_mm256_loadu_ps(xi), lo);
                hi = _mm256_max_ps(_mm256_loadu_ps(xi + 8), hi);
            }
        _mm256_storeu_ps(o + c0, lo);
        _mm256_storeu_ps(o + c0 + 8, hi);
#else
        for (int i = 0; i < MAX_BLOCK; i++) o[c0 + i] = -INFINITY;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) {
                const float *xi = x + (ih * W + iw) * C + c0;
                for (int i = 0; i < MAX_BLOCK; i++)
                    o[c0 + i] = xi[i] > o[c0 + i] ? xi[i] : o[c0 + i];
            }
#endif
    }
}

/* Max or average pooling of rows [begin, end); `max` is a constant in each caller, so the
 * compiler makes one loop nest of each without a branch inside. */
static inline void pool_rows(pool_job_t *j, int64_t begin, int64_t end, bool max) {
    const psg_nn_geom_t *g = &j->g;
    const int64_t C = g->c;
    for (int64_t r = begin; r < end; r++) {
        int64_t n = r / g->oh, oh = r % g->oh, ih0 = oh * g->sh - g->pt, hlo, hhi;
        window(ih0, g->kh, g->h, &hlo, &hhi);
        for (int64_t ow = 0; ow < g->ow; ow++) {
            int64_t iw0 = ow * g->sw - g->pl, wlo, whi;
            window(iw0, g->kw, g->w, &wlo, &whi);
            float *restrict o = j->y + (r * g->ow + ow) * C;
            if (max && C % MAX_BLOCK == 0) {
                max_window(j->x + n * g->h * g->w * C, g->w, C, ih0 + hlo, ih0 + hhi, iw0 + wlo,
                           iw0 + whi, o);
                continue;
            }
            for (int64_t ch = 0; ch < C; ch++) o[ch] = max ? -INFINITY : 0.0f;
            for (int64_t kh = hlo; kh < hhi; kh++) {
                for (int64_t kw = wlo; kw < whi; kw++) {
                    const float *restrict xi = j->x + ((n * g->h + ih0 + kh) * g->w + iw0 + kw) * C;
                    if (max)
                        for (int64_t ch = 0; ch < C; ch++) o[ch] = xi[ch] > o[ch] ? xi[ch] : o[ch];
                    else
                        for (int64_t ch = 0; ch < C; ch++) o[ch] += xi[ch];
                }
            }
            if (max) continue;
            /* SAME padding: only the cells inside the input count, as TensorFlow */
            int64_t count = (hhi - hlo) * (whi - wlo);
            float inv = count > 0 ? 1.0f / (float)count : 0.0f;
            for (int64_t ch = 0; ch < C; ch++) o[ch] *= inv;
        }
    }
}

static void max_pool_rows(void *ctx, int64_t begin, int64_t end) {
    pool_rows(ctx, begin, end, true);
}
static void avg_pool_rows(void *ctx, int64_t begin, int64_t end) {
    pool_rows(ctx, begin, end, false);
}

static void run_rows(psg_threadpool_t *pool, pool_job_t *j, psg_range_fn fn) {
    int64_t rows = j->g.n * j->g.oh, work = j->g.ow * j->g.c * j->g.kh * j->g.kw;
    int64_t grain = work > 0 ? 32768 / work + 1 : rows;
    psg_parallel_for(pool, rows, grain, fn, j);
}

static int run_forward(psg_kernel_ctx_t *c, psg_range_fn fn) {
    pool_job_t j;
    if (pool_setup(c, &j) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    j.x = psg_tensor_f32(c->inputs[0]);
    j.y = psg_tensor_f32(out);
    run_rows(c->pool, &j, fn);
    return 0;
}

void psg_max_pool_rows(const psg_nn_geom_t *g, const float *x, float *y, int64_t r0, int64_t r1) {
    pool_job_t j = {.g = *g, .x = x, .y = y};
    pool_rows(&j, r0, r1, true);
}

void psg_max_pool_f32(psg_threadpool_t *pool, const psg_nn_geom_t *g, const float *x, float *y) {
    pool_job_t j = {.g = *g, .x = x, .y = y};
    run_rows(pool, &j, max_pool_rows);
}

/* inputs: x (N, H, W, C); output (N, OH, OW, C) */
int psg_cpu_max_pool(psg_kernel_ctx_t *c) {
    return run_forward(c, max_pool_rows);
}
int psg_cpu_avg_pool(psg_kernel_ctx_t *c) {
    return run_forward(c, avg_pool_rows);
}

/* ---- backward: one image per item (windows overlap, so dx rows are shared) ---- */

/* Scratch of one window's channels: the maximum so far and its position in
 * the window, both 32 bits wide so that the selects vectorize together. */
typedef struct {
    float *best;
    int32_t *arg;
} argmax_t;

/* arg[ch]: the position (kh * KW + kw) of the first maximum of channel ch in
 * the window of valid rows [hlo, hhi) and columns [wlo, whi) whose corner
 * (maybe in the padding) is at offset `at` of image img. */
static void window_argmax(const psg_nn_geom_t *g, const float *restrict img, int64_t at,
                          int64_t hlo, int64_t hhi, int64_t wlo, int64_t whi, argmax_t *m) {
    const int64_t C = g->c;
    float *restrict best = m->best;
    int32_t *restrict arg = m->arg;
    /* the first cell is the maximum so far, whatever it holds (NaN included), as TensorFlow */
    const float *restrict x0 = img + (at + (hlo * g->w + wlo) * C);
    int32_t k0 = (int32_t)(hlo * g->kw + wlo);
    for (int64_t ch = 0; ch < C; ch++) best[ch] = x0[ch], arg[ch] = k0;
    for (int64_t kh = hlo; kh < hhi; kh++) {
        for (int64_t kw = kh == hlo ? wlo + 1 : wlo; kw < whi; kw++) {
            const float *restrict xi = img + (at + (kh * g->w + kw) * C);
            int32_t k = (int32_t)(kh * g->kw + kw);
            for (int64_t ch = 0; ch < C; ch++) {
                bool gt = xi[ch] > best[ch];
                best[ch] = gt ? xi[ch] : best[ch];
                arg[ch] = gt ? k : arg[ch];
            }
        }
    }
}

/* Windows that neither overlap nor leave cells out (2x2 stride 2 on even
 * sizes): each input cell is written once, so dx needs no clearing first. */
static bool windows_tile_input(const psg_nn_geom_t *g) {
    return g->sh == g->kh && g->sw == g->kw && g->pt == 0 && g->pl == 0 && g->oh * g->sh == g->h &&
           g->ow * g->sw == g->w;
}

static void max_pool_grad_images(void *ctx, int64_t begin, int64_t end) {
    pool_job_t *j = ctx;
    const psg_nn_geom_t *g = &j->g;
    const int64_t C = g->c, img = g->h * g->w * C;
    bool tiles = windows_tile_input(g);
    argmax_t m = {malloc(sizeof(float) * (size_t)C), malloc(sizeof(int32_t) * (size_t)C)};
    if (!m.best || !m.arg) {
        j->failed = 1;
        free(m.best);
        free(m.arg);
        return;
    }
    for (int64_t n = begin; n < end; n++) {
        float *restrict dx = j->dx + n * img;
        if (!tiles) memset(dx, 0, sizeof(float) * (size_t)img);
        for (int64_t oh = 0; oh < g->oh; oh++) {
            int64_t ih0 = oh * g->sh - g->pt, hlo, hhi;
            window(ih0, g->kh, g->h, &hlo, &hhi);
            for (int64_t ow = 0; ow < g->ow; ow++) {
                int64_t iw0 = ow * g->sw - g->pl, wlo, whi;
                window(iw0, g->kw, g->w, &wlo, &whi);
                if (hlo >= hhi || wlo >= whi) continue;
                int64_t at = (ih0 * g->w + iw0) * C; /* the window's corner, maybe in the padding */
                window_argmax(g, j->x + n * img, at, hlo, hhi, wlo, whi, &m);
                const float *restrict d = j->dy + ((n * g->oh + oh) * g->ow + ow) * C;
                const int32_t *restrict arg = m.arg;
                for (int64_t kh = hlo; kh < hhi; kh++) {
                    for (int64_t kw = wlo; kw < whi; kw++) {
                        float *restrict o = dx + (at + (kh * g->w + kw) * C);
                        int32_t k = (int32_t)(kh * g->kw + kw);
                        if (tiles)
                            for (int64_t ch = 0; ch < C; ch++) o[ch] = arg[ch] == k ? d[ch] : 0.0f;
                        else
                            for (int64_t ch = 0; ch < C; ch++) o[ch] += arg[ch] == k ? d[ch] : 0.0f;
                    }
                }
            }
        }
    }
    free(m.best);
    free(m.arg);
}

static void avg_pool_grad_images(void *ctx, int64_t begin, int64_t end) {
    pool_job_t *j = ctx;
    const psg_nn_geom_t *g = &j->g;
    const int64_t C = g->c, img = g->h * g->w * C;
    for (int64_t n = begin; n < end; n++) {
        float *restrict dx = j->dx + n * img;
        memset(dx, 0, sizeof(float) * (size_t)img);
        for (int64_t oh = 0; oh < g->oh; oh++) {
            int64_t ih0 = oh * g->sh - g->pt, hlo, hhi;
            window(ih0, g->kh, g->h, &hlo, &hhi);
            for (int64_t ow = 0; ow < g->ow; ow++) {
                int64_t iw0 = ow * g->sw - g->pl, wlo, whi;
                window(iw0, g->kw, g->w, &wlo, &whi);
                int64_t count = (hhi - hlo) * (whi - wlo);
                float inv = count > 0 ? 1.0f / (float)count : 0.0f;
                const float *restrict d = j->dy + ((n * g->oh + oh) * g->ow + ow) * C;
                for (int64_t kh = hlo; kh < hhi; kh++) {
                    for (int64_t kw = wlo; kw < whi; kw++) {
                        float *restrict o = dx + ((ih0 + kh) * g->w + iw0 + kw) * C;
                        for (int64_t ch = 0; ch < C; ch++) o[ch] += d[ch] * inv;
                    }
                }
            }
        }
    }
}

static int run_backward(psg_kernel_ctx_t *c, psg_range_fn fn) {
    pool_job_t j;
    if (pool_setup(c, &j) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    j.x = psg_tensor_f32(c->inputs[0]);
    j.dy = psg_tensor_f32(c->inputs[1]);
    j.dx = psg_tensor_f32(out);
    psg_parallel_for(c->pool, j.g.n, 1, fn, &j);
    return j.failed ? psg_error_set("out of memory") : 0;
}

/* inputs: x (N, H, W, C), dy (N, OH, OW, C); output dx (N, H, W, C) */
int psg_cpu_max_pool_grad(psg_kernel_ctx_t *c) {
    return run_backward(c, max_pool_grad_images);
}
/* inputs: x (only its shape is read), dy (N, OH, OW, C); output dx (N, H, W, C) */
int psg_cpu_avg_pool_grad(psg_kernel_ctx_t *c) {
    return run_backward(c, avg_pool_grad_images);
}
