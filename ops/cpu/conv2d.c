/* CPU kernels of Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter (NHWC,
 * f32; bf16 and f16 through f32 copies, the GPU's reference): im2col /
 * col2im per chunk of images, so the column buffer stays in cache, and one
 * psg_gemm_f32 per chunk; 1x1 stride-1 convs are one GEMM.
 * Not the defs (ops/nn.c) and not a direct or Winograd convolution. */
#include "ops/cpu/gemm.h"
#include "ops/cpu/half.h"
#include "ops/cpu/nn.h"
#include "ops/params.h"
#include "psgraph/error.h"

#include <string.h>

/* Bytes of the im2col buffer of one chunk of images: about a core's L2, so
 * the GEMM reads the columns im2col has just written from cache. The filter
 * gradient takes larger chunks: its GEMM's inner dim is the chunk's rows,
 * and a short one costs a read and write of the whole (K, OC) result each. */
#ifndef PSG_CONV_COL_BYTES
#define PSG_CONV_COL_BYTES (768 * 1024)
#endif
#ifndef PSG_CONV_FILTER_COL_BYTES
#define PSG_CONV_FILTER_COL_BYTES (2 * 1024 * 1024)
#endif

typedef struct {
    psg_nn_geom_t g;
    int64_t k;                   /* KH * KW * C: the GEMM's inner dim */
    int64_t parts;               /* slices of the batch run in parallel */
    int64_t chunk;               /* images per GEMM */
    psg_threadpool_t *gemm_pool; /* splits each GEMM when the batch is not split */
    const float *x;              /* input (N, H, W, C) */
    const float *w;              /* filter (KH, KW, C, OC) */
    const float *dy;             /* output gradient (N, OH, OW, OC) */
    float *y;                    /* output (N, OH, OW, OC) */
    float *dx;                   /* input gradient (N, H, W, C) */
    float *dw;                   /* filter gradient (KH, KW, C, OC) */
    float *partial;              /* (parts - 1, KH * KW * C, OC): filter gradient of parts 1.. */
    int failed;
} conv_job_t;

/* The valid kernel columns [lo, hi) for an output column whose window starts
 * at input column iw0. */
static void valid_range(int64_t iw0, int64_t kw, int64_t w, int64_t *lo, int64_t *hi) {
    *lo = iw0 < 0 ? -iw0 : 0;
    *hi = iw0 + kw > w ? w - iw0 : kw;
    if (*hi < *lo) *hi = *lo;
}

/* col is (OH*OW, KH*KW*C), row (oh, ow) holding the window of x at (oh, ow)
 * in (kh, kw, c) order, zeros where it hangs over the padding.
 * x is (H, W, C) */
static void im2col(const psg_nn_geom_t *g, const float *restrict x, float *restrict col) {
    const int64_t C = g->c, KW = g->kw, row_len = g->kh * g->kw * g->c;
    for (int64_t oh = 0; oh < g->oh; oh++) {
        for (int64_t ow = 0; ow < g->ow; ow++) {
            float *restrict row = col + (oh * g->ow + ow) * row_len;
            int64_t iw0 = ow * g->sw - g->pl, lo, hi;
            valid_range(iw0, KW, g->w, &lo, &hi);
            for (int64_t kh = 0; kh < g->kh; kh++) {
                int64_t ih = oh * g->sh - g->pt + kh;
                float *restrict dst = row + kh * KW * C;
                if (ih < 0 || ih >= g->h) {
                    memset(dst, 0, sizeof(float) * (size_t)(KW * C));
                    continue;
                }
                if (lo > 0) memset(dst, 0, sizeof(float) * (size_t)(lo * C));
                if (hi > lo)
                    memcpy(dst + lo * C, x + (ih * g->w + iw0 + lo) * C,
                           sizeof(float) * (size_t)((hi - lo) * C));
                if (hi < KW) memset(dst + hi * C, 0, sizeof(float) * (size_t)((KW - hi) * C));
            }
        }
    }
}

/* The adjoint of im2col: dx = 0, then each column row added back where its
 * window came from (padding dropped).
 * col is (OH*OW, KH*KW*C), dx is (H, W, C) */
static void col2im(const psg_nn_geom_t *g, const float *restrict col, float *restrict dx) {
    const int64_t C = g->c, KW = g->kw, row_len = g->kh * g->kw * g->c;
    memset(dx, 0, sizeof(float) * (size_t)(g->h * g->w * C));
    for (int64_t oh = 0; oh < g->oh; oh++) {
        for (int64_t ow = 0; ow < g->ow; ow++) {
            const float *restrict row = col + (oh * g->ow + ow) * row_len;
            int64_t iw0 = ow * g->sw - g->pl, lo, hi;
            valid_range(iw0, KW, g->w, &lo, &hi);
            for (int64_t kh = 0; kh < g->kh; kh++) {
                int64_t ih = oh * g->sh - g->pt + kh;
                if (ih < 0 || ih >= g->h) continue;
                const float *restrict src = row + (kh * KW + lo) * C;
                float *restrict dst = dx + (ih * g->w + iw0 + lo) * C;
                int64_t n = (hi - lo) * C;
                for (int64_t i = 0; i < n; i++) dst[i] += src[i];
            }
        }
    }
}

static bool is_pointwise(const psg_nn_geom_t *g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1;
}

/* Decides how the batch is split: over the pool by images when there are
 * at least two, else one slice whose GEMMs are split over the pool. */
static void plan_job(conv_job_t *j, psg_threadpool_t *pool, int64_t col_bytes) {
    const psg_nn_geom_t *g = &j->g;
    int64_t threads = psg_threadpool_size(pool);
    j->k = g->kh * g->kw * g->c;
    j->parts = g->n < threads ? g->n : threads;
    if (j->parts < 1) j->parts = 1;
    j->gemm_pool = j->parts == 1 ? pool : NULL;
    int64_t per_image = g->oh * g->ow * j->k * (int64_t)sizeof(float);
    j->chunk = per_image > 0 ? col_bytes / per_image : 1;
    if (j->chunk < 1) j->chunk = 1;
}

static void part_range(const conv_job_t *j, int64_t part, int64_t *begin, int64_t *end) {
    *begin = j->g.n * part / j->parts;
    *end = j->g.n * (part + 1) / j->parts;
}

static float *new_col(const conv_job_t *j, psg_buffer_t **buf) {
    int64_t rows = j->chunk * j->g.oh * j->g.ow;
    *buf = psg_buffer_new(sizeof(float) * (size_t)(rows * j->k));
    return *buf ? (*buf)->data : NULL;
}

/* One chunk of nb images from b0, inside the part whose images start at
 * `begin`; col is that part's column buffer. */
typedef void (*chunk_fn)(conv_job_t *j, int64_t part, int64_t begin, int64_t b0, int64_t nb,
                         float *col);

/* The body of every pass: each part of [part, part_end) gets its own column
 * buffer and walks its images chunk by chunk. */
static void run_parts(conv_job_t *j, int64_t part, int64_t part_end, chunk_fn chunk) {
    for (; part < part_end; part++) {
        int64_t begin, end;
        part_range(j, part, &begin, &end);
        psg_buffer_t *buf;
        float *col = new_col(j, &buf);
        if (!col) {
            j->failed = 1;
            return;
        }
        for (int64_t b0 = begin; b0 < end; b0 += j->chunk)
            chunk(j, part, begin, b0, end - b0 < j->chunk ? end - b0 : j->chunk, col);
        psg_buffer_unref(&buf);
    }
}

/* ---- Conv2D ---- */

static void forward_chunk(conv_job_t *j, int64_t part, int64_t begin, int64_t b0, int64_t nb,
                          float *col) {
    (void)part;
    (void)begin;
    const psg_nn_geom_t *g = &j->g;
    const int64_t in_img = g->h * g->w * g->c, rows_img = g->oh * g->ow;
    for (int64_t i = 0; i < nb; i++)
        im2col(g, j->x + (b0 + i) * in_img, col + i * rows_img * j->k);
    psg_gemm_f32(j->gemm_pool, false, false, nb * rows_img, g->oc, j->k, 1.0f, col, j->k, j->w,
                 g->oc, 0.0f, j->y + b0 * rows_img * g->oc, g->oc);
}

static void forward_part(void *ctx, int64_t part, int64_t part_end) {
    run_parts(ctx, part, part_end, forward_chunk);
}

/* The job of the conv on inputs[0] (x or its shape) and inputs[1] (the
 * filter or its shape), its geometry from the node's prepared params. */
static int conv_setup(psg_kernel_ctx_t *c, int64_t col_bytes, conv_job_t *j) {
    memset(j, 0, sizeof *j);
    const psg_nn_geom_t *g = psg_nn_kernel_geom(c, false, &j->g);
    if (!g) return -1;
    j->g = *g;
    plan_job(j, c->pool, col_bytes);
    return 0;
}

int psg_cpu_conv2d(psg_kernel_ctx_t *c) {
    if (psg_dtype_is_half(c->inputs[0]->dtype)) return psg_cpu_run_as_f32(c, psg_cpu_conv2d);
    conv_job_t j;
    if (conv_setup(c, PSG_CONV_COL_BYTES, &j) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    j.x = psg_tensor_f32(c->inputs[0]);
    j.w = psg_tensor_f32(c->inputs[1]);
    j.y = psg_tensor_f32(out);
    const psg_nn_geom_t *g = &j.g;
    if (is_pointwise(g)) {
        psg_gemm_f32(c->pool, false, false, g->n * g->h * g->w, g->oc, g->c, 1.0f, j.x, g->c, j.w,
                     g->oc, 0.0f, j.y, g->oc);
        return 0;
    }
    psg_parallel_for(c->pool, j.parts, 1, forward_part, &j);
    return j.failed ? psg_error_set("out of memory for the im2col buffer") : 0;
}

/* ---- Conv2DBackpropInput: dx = col2im(dy * W^T) ---- */

static void backprop_input_chunk(conv_job_t *j, int64_t part, int64_t begin, int64_t b0,
                                 int64_t nb, float *col) {
    (void)part;
    (void)begin;
    const psg_nn_geom_t *g = &j->g;
    const int64_t in_img = g->h * g->w * g->c, rows_img = g->oh * g->ow;
    psg_gemm_f32(j->gemm_pool, false, true, nb * rows_img, j->k, g->oc, 1.0f,
                 j->dy + b0 * rows_img * g->oc, g->oc, j->w, g->oc, 0.0f, col, j->k);
    for (int64_t i = 0; i < nb; i++)
        col2im(g, col + i * rows_img * j->k, j->dx + (b0 + i) * in_img);
}

static void backprop_input_part(void *ctx, int64_t part, int64_t part_end) {
    run_parts(ctx, part, part_end, backprop_input_chunk);
}

/* With stride 1, dx is a forward conv of dy with the filter turned 180
 * degrees and its channels swapped, padded by KH-1-pt (top) and KW-1-pl
 * (left): one GEMM of inner dim KH*KW*OC per chunk and no scatter, faster
 * than col2im's GEMM of inner dim OC, unless C (this GEMM's width) is so
 * small that the GEMM is a matrix-vector product over a huge column buffer. */
static int backprop_input_stride1(psg_kernel_ctx_t *c, const conv_job_t *j) {
    const psg_nn_geom_t *g = &j->g;
    conv_job_t t = {.x = j->dy, .y = j->dx};
    t.g = (psg_nn_geom_t){.n = g->n, .h = g->oh, .w = g->ow, .c = g->oc, .kh = g->kh,
                          .kw = g->kw, .oc = g->c, .oh = g->h, .ow = g->w, .sh = 1, .sw = 1,
                          .pt = g->kh - 1 - g->pt, .pl = g->kw - 1 - g->pl};
    plan_job(&t, c->pool, PSG_CONV_COL_BYTES);
    psg_buffer_t *fb = psg_buffer_new(sizeof(float) * (size_t)(g->kh * g->kw * g->c * g->oc));
    if (!fb) return -1;
    /* wf is (KH, KW, OC, C): wf[kh][kw][o][i] = w[KH-1-kh][KW-1-kw][i][o] */
    float *restrict wf = fb->data;
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            const float *restrict src = j->w + ((g->kh - 1 - kh) * g->kw + g->kw - 1 - kw) * g->c * g->oc;
            float *restrict dst = wf + (kh * g->kw + kw) * g->oc * g->c;
            for (int64_t i = 0; i < g->c; i++)
                for (int64_t o = 0; o < g->oc; o++) dst[o * g->c + i] = src[i * g->oc + o];
        }
    t.w = wf;
    psg_parallel_for(c->pool, t.parts, 1, forward_part, &t);
    psg_buffer_unref(&fb);
    return t.failed ? psg_error_set("out of memory for the im2col buffer") : 0;
}

/* inputs: x (only its shape is read), filter (KH, KW, C, OC), dy (N, OH, OW, OC) */
int psg_cpu_conv2d_backprop_input(psg_kernel_ctx_t *c) {
    if (psg_dtype_is_half(c->inputs[0]->dtype))
        return psg_cpu_run_as_f32(c, psg_cpu_conv2d_backprop_input);
    conv_job_t j;
    if (conv_setup(c, PSG_CONV_COL_BYTES, &j) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    j.w = psg_tensor_f32(c->inputs[1]);
    j.dy = psg_tensor_f32(c->inputs[2]);
    j.dx = psg_tensor_f32(out);
    const psg_nn_geom_t *g = &j.g;
    if (is_pointwise(g)) {
        psg_gemm_f32(c->pool, false, true, g->n * g->h * g->w, g->c, g->oc, 1.0f, j.dy, g->oc,
                     j.w, g->oc, 0.0f, j.dx, g->c);
        return 0;
    }
    if (g->sh == 1 && g->sw == 1 && g->c >= 16) return backprop_input_stride1(c, &j);
    psg_parallel_for(c->pool, j.parts, 1, backprop_input_part, &j);
    return j.failed ? psg_error_set("out of memory for the im2col buffer") : 0;
}

/* ---- Conv2DBackpropFilter: dW = sum over images of col^T * dy ---- */

/* Part 0 accumulates into dw, the others into their own partial sums. */
static void backprop_filter_chunk(conv_job_t *j, int64_t part, int64_t begin, int64_t b0,
                                  int64_t nb, float *col) {
    const psg_nn_geom_t *g = &j->g;
    const int64_t in_img = g->h * g->w * g->c, rows_img = g->oh * g->ow;
    float *dw = part == 0 ? j->dw : j->partial + (part - 1) * j->k * g->oc;
    for (int64_t i = 0; i < nb; i++)
        im2col(g, j->x + (b0 + i) * in_img, col + i * rows_img * j->k);
    psg_gemm_f32(j->gemm_pool, true, false, j->k, g->oc, nb * rows_img, 1.0f, col, j->k,
                 j->dy + b0 * rows_img * g->oc, g->oc, b0 == begin ? 0.0f : 1.0f, dw, g->oc);
}

static void backprop_filter_part(void *ctx, int64_t part, int64_t part_end) {
    run_parts(ctx, part, part_end, backprop_filter_chunk);
}

/* inputs: x (N, H, W, C), filter (only its shape is read), dy (N, OH, OW, OC) */
int psg_cpu_conv2d_backprop_filter(psg_kernel_ctx_t *c) {
    if (psg_dtype_is_half(c->inputs[0]->dtype))
        return psg_cpu_run_as_f32(c, psg_cpu_conv2d_backprop_filter);
    conv_job_t j;
    if (conv_setup(c, PSG_CONV_FILTER_COL_BYTES, &j) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    j.x = psg_tensor_f32(c->inputs[0]);
    j.dy = psg_tensor_f32(c->inputs[2]);
    j.dw = psg_tensor_f32(out);
    const psg_nn_geom_t *g = &j.g;
    int64_t nw = j.k * g->oc;
    if (g->n == 0) {
        memset(j.dw, 0, sizeof(float) * (size_t)nw);
        return 0;
    }
    if (is_pointwise(g)) {
        psg_gemm_f32(c->pool, true, false, g->c, g->oc, g->n * g->h * g->w, 1.0f, j.x, g->c, j.dy,
                     g->oc, 0.0f, j.dw, g->oc);
        return 0;
    }
    psg_buffer_t *pbuf = NULL;
    if (j.parts > 1) {
        pbuf = psg_buffer_new(sizeof(float) * (size_t)((j.parts - 1) * nw));
        if (!pbuf) return -1;
        j.partial = pbuf->data;
    }
    psg_parallel_for(c->pool, j.parts, 1, backprop_filter_part, &j);
    for (int64_t p = 1; p < j.parts; p++) {
        const float *restrict src = j.partial + (p - 1) * nw;
        float *restrict dst = j.dw;
        for (int64_t i = 0; i < nw; i++) dst[i] += src[i];
    }
    psg_buffer_unref(&pbuf);
    return j.failed ? psg_error_set("out of memory for the im2col buffer") : 0;
}
