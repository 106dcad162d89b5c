/* CPU kernels of Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter (NHWC,
 * f32; bf16 and f16 through f32 copies, the GPU's reference): im2col /
 * col2im per band of output pixels (across images), so the column buffer
 * stays in cache however large an image, and one psg_gemm_f32 per band;
 * 1x1 stride-1 convs are one GEMM.
 * Not the defs (ops/nn.c) and not a direct or Winograd convolution. */
#include "ops/cpu/conv2d_direct.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/half.h"
#include "ops/cpu/nn.h"
#include "ops/params.h"
#include "psgraph/error.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of the im2col buffer of one band of output pixels: about a core's
 * L2, so the GEMM reads the columns im2col has just written from cache (a
 * band of whole images would be 37 MB for Inception-v3's Conv2d_4a). The
 * filter gradient takes larger bands: its GEMM's inner dim is the band's
 * rows, and a short one costs a read and write of the whole (K, OC) result. */
#ifndef PSG_CONV_COL_BYTES
#define PSG_CONV_COL_BYTES (768 * 1024)
#endif
#ifndef PSG_CONV_FILTER_COL_BYTES
#define PSG_CONV_FILTER_COL_BYTES (2 * 1024 * 1024)
#endif

typedef struct {
    psg_nn_geom_t g;
    int64_t k;                     /* KH * KW * C: the GEMM's inner dim */
    int64_t parts;                 /* slices of the batch run in parallel */
    int64_t band;                  /* output pixels (GEMM rows) per GEMM */
    psg_threadpool_t *gemm_pool;   /* splits each GEMM when the batch is not split */
    const float *x;                /* input (N, H, W, C) */
    const float *w;                /* filter (KH, KW, C, OC) */
    const float *dy;               /* output gradient (N, OH, OW, OC) */
    float *y;                      /* output (N, OH, OW, OC) */
    float *dx;                     /* input gradient (N, H, W, C) */
    float *dw;                     /* filter gradient (KH, KW, C, OC) */
    float *partial;                /* (parts - 1, KH * KW * C, OC): filter gradient of parts 1.. */
    const psg_conv_epilogue_t *ep; /* forward: FusedConv2D's bias and ReLU, else NULL */
    int failed;
} conv_job_t;

/* The valid kernel columns [lo, hi) for an output column whose window starts
 * at input column iw0. */
static void valid_range(int64_t iw0, int64_t kw, int64_t w, int64_t *lo, int64_t *hi) {
    *lo = iw0 < 0 ? -iw0 : 0;
    *hi = iw0 + kw > w ? w - iw0 : kw;
    if (*hi < *lo) *hi = *lo;
}

/* col is (p1 - p0, KH*KW*C): row p - p0 holds the window of output pixel p
 * (image p / (OH*OW), then (oh, ow)) in (kh, kw, c) order, zeros where it
 * hangs over the padding. x is (N, H, W, C) */
static void im2col(const psg_nn_geom_t *g, const float *restrict x, int64_t p0, int64_t p1,
                   float *restrict col) {
    const int64_t C = g->c, KW = g->kw, row_len = g->kh * g->kw * g->c, ohw = g->oh * g->ow;
    int64_t n = p0 / ohw, oh = p0 % ohw / g->ow, ow = p0 % g->ow;
    for (int64_t p = p0; p < p1; p++) {
        const float *restrict img = x + n * g->h * g->w * C;
        float *restrict row = col + (p - p0) * row_len;
        int64_t iw0 = ow * g->sw - g->pl, lo, hi;
        valid_range(iw0, KW, g->w, &lo, &hi);
        for (int64_t kh = 0; kh < g->kh; kh++) {
            int64_t ih = oh * g->sh - g->pt + kh;
            float *restrict dst = row + kh * KW * C;
            if (ih < 0 || ih >= g->h) {
                memset(dst, 0, sizeof(float) * (size_t)(KW * C));
                continue;
            }
            /* the valid columns' first input (none when the window lies in the padding) */
            const float *restrict src = hi > lo ? img + (ih * g->w + iw0 + lo) * C : img;
            int64_t n_valid = (hi - lo) * C;
            if (KW * C <= 16) {
                /* few channels (conv1's one): a libc call per few floats costs more than the copy
                 */
                for (int64_t i = 0; i < lo * C; i++) dst[i] = 0;
                for (int64_t i = 0; i < n_valid; i++) dst[lo * C + i] = src[i];
                for (int64_t i = hi * C; i < KW * C; i++) dst[i] = 0;
                continue;
            }
            if (lo > 0) memset(dst, 0, sizeof(float) * (size_t)(lo * C));
            if (hi > lo) memcpy(dst + lo * C, src, sizeof(float) * (size_t)n_valid);
            if (hi < KW) memset(dst + hi * C, 0, sizeof(float) * (size_t)((KW - hi) * C));
        }
        if (++ow == g->ow && (ow = 0, ++oh == g->oh)) oh = 0, n++;
    }
}

/* The adjoint of im2col over output pixels [p0, p1): each column row added
 * back where its window came from (padding dropped). dx must hold zeros
 * (or the sums of other bands) before.
 * col is (p1 - p0, KH*KW*C), dx is (N, H, W, C) */
static void col2im(const psg_nn_geom_t *g, const float *restrict col, int64_t p0, int64_t p1,
                   float *restrict dx) {
    const int64_t C = g->c, KW = g->kw, row_len = g->kh * g->kw * g->c, ohw = g->oh * g->ow;
    int64_t n = p0 / ohw, oh = p0 % ohw / g->ow, ow = p0 % g->ow;
    for (int64_t p = p0; p < p1; p++) {
        float *restrict img = dx + n * g->h * g->w * C;
        const float *restrict row = col + (p - p0) * row_len;
        int64_t iw0 = ow * g->sw - g->pl, lo, hi;
        valid_range(iw0, KW, g->w, &lo, &hi);
        for (int64_t kh = 0; kh < g->kh; kh++) {
            int64_t ih = oh * g->sh - g->pt + kh;
            if (ih < 0 || ih >= g->h) continue;
            const float *restrict src = row + (kh * KW + lo) * C;
            float *restrict dst = img + (ih * g->w + iw0 + lo) * C;
            int64_t len = (hi - lo) * C;
            for (int64_t i = 0; i < len; i++) dst[i] += src[i];
        }
        if (++ow == g->ow && (ow = 0, ++oh == g->oh)) oh = 0, n++;
    }
}

static bool is_pointwise(const psg_nn_geom_t *g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1;
}

/* Decides how the batch is split: over the pool by images when there are
 * at least two, else one slice whose GEMMs are split over the pool; and the
 * band of output pixels whose columns fill about col_bytes. */
static void plan_job(conv_job_t *j, psg_threadpool_t *pool, int64_t col_bytes) {
    const psg_nn_geom_t *g = &j->g;
    int64_t threads = psg_threadpool_size(pool);
    j->k = g->kh * g->kw * g->c;
    j->parts = g->n < threads ? g->n : threads;
    if (j->parts < 1) j->parts = 1;
    j->gemm_pool = j->parts == 1 ? pool : NULL;
    int64_t row_bytes = j->k * (int64_t)sizeof(float);
    j->band = row_bytes > 0 ? col_bytes / row_bytes : 1;
    /* a GEMM of fewer rows spends more on packing the filter than on products */
    if (j->band < 64) j->band = 64;
    int64_t per_part = (g->n + j->parts - 1) / j->parts * g->oh * g->ow;
    if (j->band > per_part) j->band = per_part > 0 ? per_part : 1;
}

/* The output pixels [begin, end) of a part: its images' */
static void part_range(const conv_job_t *j, int64_t part, int64_t *begin, int64_t *end) {
    int64_t ohw = j->g.oh * j->g.ow;
    *begin = j->g.n * part / j->parts * ohw;
    *end = j->g.n * (part + 1) / j->parts * ohw;
}

/* One band of output pixels [p0, p1), inside the part whose pixels start at
 * `begin`; col is that part's column buffer (band rows). */
typedef void (*band_fn)(conv_job_t *j, int64_t part, int64_t begin, int64_t p0, int64_t p1,
                        float *col);

/* The body of every pass: each part of [part, part_end) gets its own column
 * buffer and walks its pixels band by band. */
static void run_parts(conv_job_t *j, int64_t part, int64_t part_end, band_fn band) {
    for (; part < part_end; part++) {
        int64_t begin, end;
        part_range(j, part, &begin, &end);
        psg_buffer_t *buf = psg_buffer_new(sizeof(float) * (size_t)(j->band * j->k));
        if (!buf) {
            j->failed = 1;
            return;
        }
        for (int64_t p0 = begin; p0 < end; p0 += j->band)
            band(j, part, begin, p0, end - p0 < j->band ? end : p0 + j->band, buf->data);
        psg_buffer_unref(&buf);
    }
}

/* ---- Conv2D ---- */

static void forward_band(conv_job_t *j, int64_t part, int64_t begin, int64_t p0, int64_t p1,
                         float *col) {
    (void)part;
    (void)begin;
    const psg_nn_geom_t *g = &j->g;
    im2col(g, j->x, p0, p1, col);
    psg_gemm_f32(j->gemm_pool, false, false, p1 - p0, g->oc, j->k, 1.0f, col, j->k, j->w, g->oc,
                 0.0f, j->y + p0 * g->oc, g->oc);
    if (j->ep) psg_conv_epilogue_rows(j->ep, j->y + p0 * g->oc, p1 - p0, g->oc);
}

static void forward_part(void *ctx, int64_t part, int64_t part_end) {
    run_parts(ctx, part, part_end, forward_band);
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

void psg_conv_epilogue_block(const psg_conv_epilogue_t *e, float *y, int64_t rows, int64_t ld,
                             int64_t c0, int64_t c1) {
    const float *restrict a = e->scale ? e->scale + c0 : NULL, *restrict b = e->bias + c0;
    int64_t n = c1 - c0;
    for (int64_t r = 0; r < rows; r++) {
        float *restrict row = y + r * ld + c0;
        if (a) { /* batch norm: the affine's float, then Relu's on it */
            for (int64_t i = 0; i < n; i++) {
                float v = row[i] * a[i] + b[i];
                row[i] = !e->relu || v > 0.0f ? v : 0.0f;
            }
        } else if (e->relu) {
            for (int64_t i = 0; i < n; i++) {
                float v = row[i] + b[i];
                row[i] = v > 0.0f ? v : 0.0f;
            }
        } else {
            for (int64_t i = 0; i < n; i++) row[i] += b[i];
        }
    }
}

void psg_conv_epilogue_rows(const psg_conv_epilogue_t *e, float *y, int64_t rows, int64_t oc) {
    psg_conv_epilogue_block(e, y, rows, oc, 0, oc);
}

typedef struct {
    const psg_conv_epilogue_t *e;
    float *y;
    int64_t oc;
} epilogue_job_t;

static void epilogue_range(void *ctx, int64_t r0, int64_t r1) {
    const epilogue_job_t *j = ctx;
    psg_conv_epilogue_rows(j->e, j->y + r0 * j->oc, r1 - r0, j->oc);
}

void psg_conv_epilogue(psg_threadpool_t *pool, const psg_conv_epilogue_t *e, float *y, int64_t rows,
                       int64_t oc) {
    epilogue_job_t j = {e, y, oc};
    psg_parallel_for(pool, rows, oc > 0 ? 32768 / oc + 1 : 1, epilogue_range, &j);
}

/* j's conv into j->y, then the epilogue j->ep's bias and ReLU (its pool only where the direct
 * kernels take it: direct_pools). */
static int conv_into(psg_kernel_ctx_t *c, conv_job_t *j, bool direct_pools) {
    const psg_nn_geom_t *g = &j->g;
    const psg_conv_epilogue_t *ep = j->ep;
    if (is_pointwise(g)) {
        psg_gemm_f32(c->pool, false, false, g->n * g->h * g->w, g->oc, g->c, 1.0f, j->x, g->c, j->w,
                     g->oc, 0.0f, j->y, g->oc);
        if (ep) psg_conv_epilogue(c->pool, ep, j->y, g->n * g->h * g->w, g->oc);
        return 0;
    }
    if (psg_conv_direct_forward_applies(g, c->pool)) {
        psg_conv_epilogue_t unpooled = ep ? *ep : (psg_conv_epilogue_t){0};
        unpooled.pool = direct_pools && ep ? ep->pool : NULL;
        return psg_conv_direct_forward(c->pool, g, j->x, j->w, ep ? &unpooled : NULL, j->y);
    }
    psg_parallel_for(c->pool, j->parts, 1, forward_part, j);
    return j->failed ? psg_error_set("out of memory for the im2col buffer") : 0;
}

/* Conv2D's output, then the epilogue ep (FusedConv2D's) when not NULL: with a pool, each
 * image pooled as the direct kernels finish it, or else the whole conv's output (a buffer)
 * pooled after it. */
static int conv_forward(psg_kernel_ctx_t *c, const psg_conv_epilogue_t *ep) {
    conv_job_t j;
    if (conv_setup(c, PSG_CONV_COL_BYTES, &j) < 0) return -1;
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    j.x = psg_tensor_f32(c->inputs[0]);
    j.w = psg_tensor_f32(c->inputs[1]);
    j.y = psg_tensor_f32(out);
    j.ep = ep;
    const psg_nn_geom_t *g = &j.g;
    int64_t outputs = g->n * g->oh * g->ow * g->oc;
    if (!ep || !ep->pool || outputs == 0)
        return conv_into(c, &j, false); /* empty: nothing to pool */
    if (!is_pointwise(g) && psg_conv_direct_pools(g, c->pool)) return conv_into(c, &j, true);
    psg_buffer_t *tb = psg_buffer_new(sizeof(float) * (size_t)outputs);
    if (!tb) return psg_error_set("out of memory for the conv's output before its pool");
    float *pooled = j.y;
    j.y = tb->data;
    int rc = conv_into(c, &j, false);
    if (rc == 0) psg_max_pool_f32(c->pool, ep->pool, j.y, pooled);
    psg_buffer_unref(&tb);
    return rc;
}

int psg_cpu_conv2d(psg_kernel_ctx_t *c) {
    if (psg_dtype_is_half(c->inputs[0]->dtype)) return psg_cpu_run_as_f32(c, psg_cpu_conv2d);
    return conv_forward(c, NULL);
}

/* FusedConv2D's batch norm (inputs scale, offset, mean, variance) as its affine: a and b of
 * OC floats each, inv the inverse deviations they come from. */
static void fold_batch_norm(const psg_kernel_ctx_t *c, float eps, float *a, float *b, float *inv) {
    int64_t oc = c->inputs[2]->shape.dims[0];
    const float *var = psg_tensor_f32(c->inputs[5]);
    for (int64_t i = 0; i < oc; i++) inv[i] = psg_batch_norm_inv_std(var[i], eps);
    psg_batch_norm_affine(oc, psg_tensor_f32(c->inputs[2]), psg_tensor_f32(c->inputs[3]),
                          psg_tensor_f32(c->inputs[4]), inv, a, b);
}

int psg_cpu_fused_conv2d(psg_kernel_ctx_t *c) {
    const psg_nn_params_t *p = psg_kernel_params(c);
    psg_conv_epilogue_t ep = {.bias = psg_tensor_f32(c->inputs[2]), .relu = p->relu};
    psg_nn_geom_t conv, pg;
    if (p->pool) { /* the pool's geometry over the conv's output */
        const psg_nn_geom_t *g = psg_nn_kernel_geom(c, false, &conv);
        if (!g) return -1;
        psg_shape_t y = psg_shape_4d(g->n, g->oh, g->ow, g->oc);
        if (psg_nn_geom(&y, p->pool_a.kh, p->pool_a.kw, g->oc, &p->pool_a, &pg) < 0) return -1;
        ep.pool = &pg;
    }
    if (c->num_inputs != 6) return conv_forward(c, &ep);
    int64_t oc = c->inputs[2]->shape.dims[0];
    float *a = malloc(sizeof(float) * (size_t)(3 * oc + 1));
    if (!a) return psg_error_set("out of memory");
    fold_batch_norm(c, p->epsilon, a, a + oc, a + 2 * oc);
    ep.scale = a;
    ep.bias = a + oc;
    int rc = conv_forward(c, &ep);
    free(a);
    return rc;
}

/* ---- Conv2DBackpropInput: dx = col2im(dy * W^T) ---- */

/* The part's dx is zeroed at its first band; each band's columns are added
 * back into it. */
static void backprop_input_band(conv_job_t *j, int64_t part, int64_t begin, int64_t p0, int64_t p1,
                                float *col) {
    (void)part;
    const psg_nn_geom_t *g = &j->g;
    if (p0 == begin) {
        int64_t ohw = g->oh * g->ow, img = g->h * g->w * g->c, b0 = begin / ohw;
        int64_t part_end = j->g.n * (part + 1) / j->parts;
        memset(j->dx + b0 * img, 0, sizeof(float) * (size_t)((part_end - b0) * img));
    }
    psg_gemm_f32(j->gemm_pool, false, true, p1 - p0, j->k, g->oc, 1.0f, j->dy + p0 * g->oc, g->oc,
                 j->w, g->oc, 0.0f, col, j->k);
    col2im(g, col, p0, p1, j->dx);
}

static void backprop_input_part(void *ctx, int64_t part, int64_t part_end) {
    run_parts(ctx, part, part_end, backprop_input_band);
}

/* With stride 1, dx is a forward conv of dy with the filter turned 180
 * degrees and its channels swapped, padded by KH-1-pt (top) and KW-1-pl
 * (left): one GEMM of inner dim KH*KW*OC per band and no scatter, faster
 * than col2im's GEMM of inner dim OC, unless C (this GEMM's width) is so
 * small that the GEMM is a matrix-vector product over a huge column buffer. */
static int backprop_input_stride1(psg_kernel_ctx_t *c, const conv_job_t *j) {
    const psg_nn_geom_t *g = &j->g;
    conv_job_t t = {.x = j->dy, .y = j->dx};
    t.g = (psg_nn_geom_t){.n = g->n,
                          .h = g->oh,
                          .w = g->ow,
                          .c = g->oc,
                          .kh = g->kh,
                          .kw = g->kw,
                          .oc = g->c,
                          .oh = g->h,
                          .ow = g->w,
                          .sh = 1,
                          .sw = 1,
                          .pt = g->kh - 1 - g->pt,
                          .pl = g->kw - 1 - g->pl};
    plan_job(&t, c->pool, PSG_CONV_COL_BYTES);
    psg_buffer_t *fb = psg_buffer_new(sizeof(float) * (size_t)(g->kh * g->kw * g->c * g->oc));
    if (!fb) return -1;
    /* wf is (KH, KW, OC, C): wf[kh][kw][o][i] = w[KH-1-kh][KW-1-kw][i][o] */
    float *restrict wf = fb->data;
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            const float *restrict src =
                j->w + ((g->kh - 1 - kh) * g->kw + g->kw - 1 - kw) * g->c * g->oc;
            float *restrict dst = wf + (kh * g->kw + kw) * g->oc * g->c;
            for (int64_t i = 0; i < g->c; i++)
                for (int64_t o = 0; o < g->oc; o++) dst[o * g->c + i] = src[i * g->oc + o];
        }
    t.w = wf;
    int rc = 0;
    if (psg_conv_direct_applies(&t.g, c->pool)) {
        rc = psg_conv_direct_forward(c->pool, &t.g, t.x, t.w, NULL, t.y);
    } else {
        psg_parallel_for(c->pool, t.parts, 1, forward_part, &t);
        if (t.failed) rc = psg_error_set("out of memory for the im2col buffer");
    }
    psg_buffer_unref(&fb);
    return rc;
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
    if (g->n * g->oh * g->ow == 0) {
        memset(j.dx, 0, sizeof(float) * (size_t)(g->n * g->h * g->w * g->c));
        return 0;
    }
    if (is_pointwise(g)) {
        psg_gemm_f32(c->pool, false, true, g->n * g->h * g->w, g->c, g->oc, 1.0f, j.dy, g->oc, j.w,
                     g->oc, 0.0f, j.dx, g->c);
        return 0;
    }
    if (g->sh == 1 && g->sw == 1 && g->c >= 16) return backprop_input_stride1(c, &j);
    psg_parallel_for(c->pool, j.parts, 1, backprop_input_part, &j);
    return j.failed ? psg_error_set("out of memory for the im2col buffer") : 0;
}

/* ---- Conv2DBackpropFilter: dW = sum over images of col^T * dy ---- */

/* Part 0 accumulates into dw, the others into their own partial sums. */
static void backprop_filter_band(conv_job_t *j, int64_t part, int64_t begin, int64_t p0, int64_t p1,
                                 float *col) {
    const psg_nn_geom_t *g = &j->g;
    float *dw = part == 0 ? j->dw : j->partial + (part - 1) * j->k * g->oc;
    im2col(g, j->x, p0, p1, col);
    psg_gemm_f32(j->gemm_pool, true, false, j->k, g->oc, p1 - p0, 1.0f, col, j->k,
                 j->dy + p0 * g->oc, g->oc, p0 == begin ? 0.0f : 1.0f, dw, g->oc);
}

static void backprop_filter_part(void *ctx, int64_t part, int64_t part_end) {
    run_parts(ctx, part, part_end, backprop_filter_band);
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
    if (g->n * g->oh * g->ow == 0) {
        memset(j.dw, 0, sizeof(float) * (size_t)nw);
        return 0;
    }
    if (is_pointwise(g)) {
        psg_gemm_f32(c->pool, true, false, g->c, g->oc, g->n * g->h * g->w, 1.0f, j.x, g->c, j.dy,
                     g->oc, 0.0f, j.dw, g->oc);
        return 0;
    }
    if (psg_conv_direct_applies(g, c->pool))
        return psg_conv_direct_filter(c->pool, g, j.x, j.dy, j.dw);
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
