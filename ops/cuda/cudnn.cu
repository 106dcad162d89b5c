/* Conv2D and its two gradients, and average pooling, through cuDNN (the one
 * file that includes it): f32 in FMA math (no TF32, as the CPU's f32), or bf16 / f16 on
 * tensor cores with an f32 compute type (mixed precision), the filter turned
 * from psgraph's (KH, KW, C, OC) to cuDNN's, SAME padding that is larger
 * after than before made even by a zero-padded copy of the input, and per
 * shape the descriptors and each direction's algorithm (cudnnFind*Ex once,
 * heuristics as the fallback) cached for the process.
 *
 * Layout: psgraph's tensors are NHWC. cuDNN's FMA (non-TF32) kernels are far
 * slower on NHWC f32 than on NCHW (an H100, Inception-v3 at batch 128: the
 * 93 Conv2DBackpropInput took 844 ms of a 1,080 ms step in NHWC), so an f32
 * convolution runs in NCHW between cudnnTransformTensor copies of its
 * operands, as PyTorch's f32 convolutions do. 16-bit ones stay NHWC, the
 * tensor cores' own layout. PSG_CUDNN_LAYOUT=nhwc|nchw forces one layout
 * for every dtype (for measuring one against the other); =auto times both
 * for each shape and direction on its first call and keeps the faster (the
 * copies cost some shapes more than NHWC's slower kernels do);
 * PSG_CUDNN_LAYOUT_LOG=1 prints each such choice on stderr. */
#include "ops/cuda/common.h"

#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A cuDNN call that must succeed, as PSG_CUDA_CHECK. */
#define PSG_CUDNN_CHECK(call)                                                                      \
    do {                                                                                           \
        cudnnStatus_t psg_s_ = (call);                                                             \
        if (psg_s_ != CUDNN_STATUS_SUCCESS)                                                        \
            return psg_error_set("%s: %s (%d)", #call, cudnnGetErrorString(psg_s_), (int)psg_s_);  \
    } while (0)

/* The most workspace an algorithm may ask for. */
#define WORKSPACE_MAX ((size_t)512 << 20)

/* ---- handles ---- */

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static cudnnHandle_t handles[PSG_CUDA_MAX_GPUS];

/* gpu's cuDNN handle on its compute stream; the caller holds d->lock, which
 * serializes every cuBLAS and cuDNN call of the GPU. */
static int handle_of(int gpu, psg_cuda_dev_t *d, cudnnHandle_t *h) {
    pthread_mutex_lock(&handles_lock);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (!handles[gpu]) {
        s = cudnnCreate(&handles[gpu]);
        if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(handles[gpu], d->compute);
        if (s != CUDNN_STATUS_SUCCESS && handles[gpu]) {
            cudnnDestroy(handles[gpu]);
            handles[gpu] = NULL;
        }
    }
    *h = handles[gpu];
    pthread_mutex_unlock(&handles_lock);
    PSG_CUDNN_CHECK(s);
    return 0;
}

/* ---- per-shape plans ---- */

enum { FWD, BWD_DATA, BWD_FILTER };

typedef struct plan {
    int gpu;
    int dtype; /* PSG_CU_F32, PSG_CU_BF16 or PSG_CU_F16 */
    psg_cu_geom_t g;
    int64_t eh, ew; /* rows / columns of zeros added after the input */
    bool nchw;      /* cuDNN works on NCHW copies of the NHWC operands */
    int pick[3];    /* auto layout, per direction: PICK_NCHW, PICK_NHWC or PICK_UNKNOWN */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    /* nchw: the NHWC operands as strided views (x, y, psgraph's filter),
     * the unpadded part of the padded NCHW input, the NCHW filter */
    cudnnTensorDescriptor_t x_nhwc, y_nhwc, w_hwcn, x_part, w_nchw;
    bool found[3];
    int algo[3];
    size_t workspace[3];
    struct plan *next;
} plan_t;

static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;
static plan_t *plans;

static bool same_geom(const psg_cu_geom_t *a, const psg_cu_geom_t *b) {
    return a->n == b->n && a->h == b->h && a->w == b->w && a->c == b->c && a->kh == b->kh &&
           a->kw == b->kw && a->oc == b->oc && a->oh == b->oh && a->ow == b->ow && a->sh == b->sh &&
           a->sw == b->sw && a->pt == b->pt && a->pl == b->pl;
}

static bool fits_int(const psg_cu_geom_t *g) {
    const int64_t v[] = {g->n, g->h, g->w, g->c, g->kh, g->kw, g->oc, g->oh, g->ow, g->sh, g->sw};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] > INT32_MAX || v[i] < 0) return false;
    return true;
}

/* Bytes per element of a conv dtype. */
static size_t elem_size(int dtype) {
    return dtype == PSG_CU_F32 ? 4 : 2;
}

static cudnnDataType_t cudnn_type(int dtype) {
    return dtype == PSG_CU_BF16  ? CUDNN_DATA_BFLOAT16
           : dtype == PSG_CU_F16 ? CUDNN_DATA_HALF
                                 : CUDNN_DATA_FLOAT;
}

enum { LAYOUT_NHWC, LAYOUT_NCHW, LAYOUT_AUTO };
enum { PICK_UNKNOWN, PICK_NCHW, PICK_NHWC };

/* How convolutions of dtype pick their layout (see the top). */
static int layout_mode(int dtype) {
    const char *env = getenv("PSG_CUDNN_LAYOUT");
    if (env && strcmp(env, "nchw") == 0) return LAYOUT_NCHW;
    if (env && strcmp(env, "nhwc") == 0) return LAYOUT_NHWC;
    if (env && strcmp(env, "auto") == 0) return LAYOUT_AUTO;
    return dtype == PSG_CU_F32 ? LAYOUT_NCHW : LAYOUT_NHWC;
}

/* The descriptors of the convolution g on tensors of `dtype`, NHWC or NCHW,
 * on an input with eh rows and ew columns added after. f32: FMA math (no
 * TF32); bf16 / f16: cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF configs (16-bit
 * tensors, f32 compute type) on tensor cores. */
static int descriptors(int dtype, bool nchw, const psg_cu_geom_t *g, int64_t eh, int64_t ew,
                       cudnnTensorDescriptor_t *xd, cudnnTensorDescriptor_t *yd,
                       cudnnFilterDescriptor_t *wd, cudnnConvolutionDescriptor_t *cd) {
    cudnnDataType_t t = cudnn_type(dtype);
    cudnnTensorFormat_t f = nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
    PSG_CUDNN_CHECK(cudnnCreateTensorDescriptor(xd));
    PSG_CUDNN_CHECK(cudnnCreateTensorDescriptor(yd));
    PSG_CUDNN_CHECK(cudnnCreateFilterDescriptor(wd));
    PSG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(cd));
    PSG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(*xd, f, t, (int)g->n, (int)g->c, (int)(g->h + eh),
                                               (int)(g->w + ew)));
    PSG_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(*yd, f, t, (int)g->n, (int)g->oc, (int)g->oh, (int)g->ow));
    PSG_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(*wd, t, f, (int)g->oc, (int)g->c, (int)g->kh, (int)g->kw));
    PSG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(*cd, (int)g->pt, (int)g->pl, (int)g->sh,
                                                    (int)g->sw, 1, 1, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
    PSG_CUDNN_CHECK(cudnnSetConvolutionMathType(*cd, dtype == PSG_CU_F32 ? CUDNN_FMA_MATH
                                                                         : CUDNN_TENSOR_OP_MATH));
    return 0;
}

/* A 4-d view (n, c, h, w) with these element strides. */
static int view(cudnnTensorDescriptor_t *d, int dtype, int64_t n, int64_t c, int64_t h, int64_t w,
                int64_t sn, int64_t sc, int64_t sh, int64_t sw) {
    PSG_CUDNN_CHECK(cudnnCreateTensorDescriptor(d));
    PSG_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(*d, cudnn_type(dtype), (int)n, (int)c, (int)h,
                                                 (int)w, (int)sn, (int)sc, (int)sh, (int)sw));
    return 0;
}

/* The strided views an NCHW plan copies its operands through. */
static int nchw_views(plan_t *p) {
    const psg_cu_geom_t *g = &p->g;
    int64_t hp = g->h + p->eh, wp = g->w + p->ew;
    if (g->n * g->c * hp * wp > INT32_MAX || g->n * g->oc * g->oh * g->ow > INT32_MAX)
        return psg_error_set("convolution too large for cuDNN's 32-bit strides");
    int t = p->dtype;
    if (view(&p->x_nhwc, t, g->n, g->c, g->h, g->w, g->h * g->w * g->c, 1, g->w * g->c, g->c) < 0 ||
        view(&p->x_part, t, g->n, g->c, g->h, g->w, g->c * hp * wp, hp * wp, wp, 1) < 0 ||
        view(&p->y_nhwc, t, g->n, g->oc, g->oh, g->ow, g->oh * g->ow * g->oc, 1, g->ow * g->oc,
             g->oc) < 0 ||
        view(&p->w_hwcn, t, g->oc, g->c, g->kh, g->kw, 1, g->oc, g->kw * g->c * g->oc,
             g->c * g->oc) < 0 ||
        view(&p->w_nchw, t, g->oc, g->c, g->kh, g->kw, g->c * g->kh * g->kw, g->kh * g->kw, g->kw,
             1) < 0)
        return -1;
    return 0;
}

static int plan_init(plan_t *p) {
    const psg_cu_geom_t *g = &p->g;
    int64_t e = (g->oh - 1) * g->sh + g->kh - g->h - 2 * g->pt;
    p->eh = e > 0 ? e : 0;
    e = (g->ow - 1) * g->sw + g->kw - g->w - 2 * g->pl;
    p->ew = e > 0 ? e : 0;
    if (descriptors(p->dtype, p->nchw, g, p->eh, p->ew, &p->xd, &p->yd, &p->wd, &p->cd) < 0)
        return -1;
    if (p->nchw && nchw_views(p) < 0) return -1;
    int n, c, h, w;
    PSG_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &n, &c, &h, &w));
    if (h != g->oh || w != g->ow)
        return psg_error_set("cuDNN's output %dx%d differs from %lldx%lld (internal error)", h, w,
                             (long long)g->oh, (long long)g->ow);
    return 0;
}

static void plan_free(plan_t *p) {
    cudnnTensorDescriptor_t views[] = {p->x_nhwc, p->y_nhwc, p->w_hwcn, p->x_part, p->w_nchw};
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
        if (views[i]) cudnnDestroyTensorDescriptor(views[i]);
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
    free(p);
}

/* The plan of one geometry, dtype and layout on one GPU, made on first use.
 * NULL with the error set. */
static plan_t *plan_get(int gpu, int dtype, const psg_cu_geom_t *g, bool nchw) {
    if (!fits_int(g)) {
        psg_error_set("convolution too large for cuDNN's 32-bit dims");
        return NULL;
    }
    if (dtype != PSG_CU_F32 && dtype != PSG_CU_BF16 && dtype != PSG_CU_F16) {
        psg_error_set("convolution: dtype %d is not f32, bf16 or f16", dtype);
        return NULL;
    }
    pthread_mutex_lock(&plans_lock);
    plan_t *p = plans;
    while (p && !(p->gpu == gpu && p->dtype == dtype && p->nchw == nchw && same_geom(&p->g, g)))
        p = p->next;
    if (!p) {
        p = (plan_t *)calloc(1, sizeof *p);
        if (!p) {
            psg_error_set("out of memory");
        } else {
            p->gpu = gpu;
            p->dtype = dtype;
            p->g = *g;
            p->nchw = nchw;
            if (plan_init(p) < 0) {
                plan_free(p);
                p = NULL;
            } else {
                p->next = plans;
                plans = p;
            }
        }
    }
    pthread_mutex_unlock(&plans_lock);
    return p;
}

/* ---- algorithms ---- */

/* The buffers of one call, in cuDNN's layouts, of the plan's dtype. */
typedef struct {
    const void *x;  /* (N, H+eh, W+ew, C) */
    const void *w;  /* (OC, KH, KW, C) */
    const void *dy; /* (N, OH, OW, OC) */
    void *y;        /* forward output (N, OH, OW, OC) */
    void *dx;       /* (N, H+eh, W+ew, C) */
    void *dw;       /* (OC, KH, KW, C) */
} bufs_t;

/* Picks p's algorithm for `dir` once: cudnnFind*Ex on these buffers within
 * WORKSPACE_MAX (their contents are then overwritten by the real call),
 * else the heuristics' first that fits. Caller holds the GPU's lock. */
static int find_algo(cudnnHandle_t h, plan_t *p, int dir, const bufs_t *b) {
    if (p->found[dir]) return 0;
    void *hint = NULL;
    size_t ws = WORKSPACE_MAX;
    void *work = psg_cuda_alloc(p->gpu, ws, &hint);
    if (!work) {
        ws = 0;
        psg_error_clear();
    }
    int got = 0;
    cudnnStatus_t s;
    size_t need = 0;
    int algo = -1;
    if (dir == FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[8];
        s = cudnnFindConvolutionForwardAlgorithmEx(h, p->xd, b->x, p->wd, b->w, p->cd, p->yd, b->y,
                                                   8, &got, r, work, ws);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got && algo < 0; i++)
            if (r[i].status == CUDNN_STATUS_SUCCESS) algo = r[i].algo, need = r[i].memory;
        if (algo < 0) {
            s = cudnnGetConvolutionForwardAlgorithm_v7(h, p->xd, p->wd, p->cd, p->yd, 8, &got, r);
            for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got && algo < 0; i++)
                if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].memory <= ws)
                    algo = r[i].algo, need = r[i].memory;
        }
    } else if (dir == BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[8];
        s = cudnnFindConvolutionBackwardDataAlgorithmEx(h, p->wd, b->w, p->yd, b->dy, p->cd, p->xd,
                                                        b->dx, 8, &got, r, work, ws);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got && algo < 0; i++)
            if (r[i].status == CUDNN_STATUS_SUCCESS) algo = r[i].algo, need = r[i].memory;
        if (algo < 0) {
            s = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->wd, p->yd, p->cd, p->xd, 8, &got,
                                                            r);
            for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got && algo < 0; i++)
                if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].memory <= ws)
                    algo = r[i].algo, need = r[i].memory;
        }
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[8];
        s = cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p->xd, b->x, p->yd, b->dy, p->cd,
                                                          p->wd, b->dw, 8, &got, r, work, ws);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got && algo < 0; i++)
            if (r[i].status == CUDNN_STATUS_SUCCESS) algo = r[i].algo, need = r[i].memory;
        if (algo < 0) {
            s = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->xd, p->yd, p->cd, p->wd, 8,
                                                              &got, r);
            for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got && algo < 0; i++)
                if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].memory <= ws)
                    algo = r[i].algo, need = r[i].memory;
        }
    }
    if (work) psg_cuda_free(work, hint);
    PSG_CUDNN_CHECK(s);
    if (algo < 0) return psg_error_set("cuDNN has no algorithm for this convolution");
    p->algo[dir] = algo;
    p->workspace[dir] = need;
    p->found[dir] = true;
    return 0;
}

/* Runs p in direction dir on b under the GPU's lock. */
static int run_conv(int gpu, plan_t *p, int dir, const bufs_t *b) {
    PSG_CUDA_DEV(d, gpu);
    const float one = 1.0f, zero = 0.0f; /* float scaling for f32, bf16 and f16 data alike */
    pthread_mutex_lock(&d->lock);
    cudnnHandle_t h;
    int rc = handle_of(gpu, d, &h);
    if (rc == 0) rc = find_algo(h, p, dir, b);
    void *work = NULL, *hint = NULL;
    if (rc == 0 && p->workspace[dir] > 0) {
        work = psg_cuda_alloc(gpu, p->workspace[dir], &hint);
        if (!work) rc = -1;
    }
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (rc == 0 && dir == FWD)
        s = cudnnConvolutionForward(h, &one, p->xd, b->x, p->wd, b->w, p->cd,
                                    (cudnnConvolutionFwdAlgo_t)p->algo[dir], work,
                                    p->workspace[dir], &zero, p->yd, b->y);
    else if (rc == 0 && dir == BWD_DATA)
        s = cudnnConvolutionBackwardData(h, &one, p->wd, b->w, p->yd, b->dy, p->cd,
                                         (cudnnConvolutionBwdDataAlgo_t)p->algo[dir], work,
                                         p->workspace[dir], &zero, p->xd, b->dx);
    else if (rc == 0)
        s = cudnnConvolutionBackwardFilter(h, &one, p->xd, b->x, p->yd, b->dy, p->cd,
                                           (cudnnConvolutionBwdFilterAlgo_t)p->algo[dir], work,
                                           p->workspace[dir], &zero, p->wd, b->dw);
    if (work) psg_cuda_free(work, hint); /* stream-ordered: reused only by later work */
    pthread_mutex_unlock(&d->lock);
    if (rc < 0) return -1;
    PSG_CUDNN_CHECK(s);
    return 0;
}

/* ---- layouts ---- */

/* to (OC, KH*KW*C) from w (KH*KW*C, OC), or back when back; elements of
 * 4 bytes (f32, wide) or 2 (bf16, f16), moved as bits */
__global__ static void filter_transpose(const void *from, void *to, int64_t khwc, int64_t oc,
                                        bool back, bool wide) {
    PSG_GRID_STRIDE(i, khwc * oc) {
        int64_t o = i / khwc, r = i % khwc; /* i indexes (OC, KHWC) */
        int64_t src = back ? i : r * oc + o, dst = back ? r * oc + o : i;
        if (wide)
            ((uint32_t *)to)[dst] = ((const uint32_t *)from)[src];
        else
            ((uint16_t *)to)[dst] = ((const uint16_t *)from)[src];
    }
}

static int transpose(int gpu, int dtype, const void *from, void *to, const psg_cu_geom_t *g,
                     bool back) {
    PSG_CUDA_DEV(d, gpu);
    int64_t khwc = g->kh * g->kw * g->c, n = khwc * g->oc;
    if (n == 0) return 0;
    filter_transpose<<<psg_cuda_blocks(n), PSG_CUDA_THREADS, 0, d->compute>>>(
        from, to, khwc, g->oc, back, elem_size(dtype) == 4);
    PSG_CUDA_LAUNCHED("filter_transpose");
    return 0;
}

/* Device scratch of one call, freed (stream-ordered) at the end. */
typedef struct {
    void *p[3], *hint[3];
    int n;
} scratch_t;

/* A block of n elements of es bytes. */
static void *scratch(int gpu, scratch_t *s, int64_t n, size_t es) {
    void *p = psg_cuda_alloc(gpu, es * (size_t)(n > 0 ? n : 1), &s->hint[s->n]);
    if (p) s->p[s->n++] = p;
    return p;
}

static void scratch_free(scratch_t *s) {
    for (int i = 0; i < s->n; i++) psg_cuda_free(s->p[i], s->hint[i]);
    s->n = 0;
}

/* dst (view dd) = src (view sd), on the GPU's compute stream. */
static int transform(int gpu, cudnnTensorDescriptor_t sd, const void *src,
                     cudnnTensorDescriptor_t dd, void *dst) {
    PSG_CUDA_DEV(d, gpu);
    const float one = 1.0f, zero = 0.0f;
    pthread_mutex_lock(&d->lock);
    cudnnHandle_t h;
    int rc = handle_of(gpu, d, &h);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (rc == 0) s = cudnnTransformTensor(h, &one, sd, src, &zero, dd, dst);
    pthread_mutex_unlock(&d->lock);
    if (rc < 0) return -1;
    PSG_CUDNN_CHECK(s);
    return 0;
}

/* An NCHW plan's copy of the filter w (KH, KW, C, OC): (OC, C, KH, KW). */
static void *filter_nchw(int gpu, const plan_t *p, scratch_t *s, const void *w) {
    const psg_cu_geom_t *g = &p->g;
    void *wn = scratch(gpu, s, g->kh * g->kw * g->c * g->oc, elem_size(p->dtype));
    return wn && transform(gpu, p->w_hwcn, w, p->w_nchw, wn) == 0 ? wn : NULL;
}

/* An NCHW plan's copy of the input x, with its padding's zeros. */
static void *input_nchw(int gpu, const plan_t *p, scratch_t *s, const void *x) {
    const psg_cu_geom_t *g = &p->g;
    size_t es = elem_size(p->dtype);
    int64_t n = g->n * g->c * (g->h + p->eh) * (g->w + p->ew);
    void *xn = scratch(gpu, s, n, es);
    if (!xn) return NULL;
    if ((p->eh || p->ew) && psg_cuda_memset0(gpu, xn, es * (size_t)n) < 0) return NULL;
    return transform(gpu, p->x_nhwc, x, p->x_part, xn) == 0 ? xn : NULL;
}

/* An NCHW plan's copy of the output gradient dy. */
static void *output_nchw(int gpu, const plan_t *p, scratch_t *s, const void *dy) {
    const psg_cu_geom_t *g = &p->g;
    void *yn = scratch(gpu, s, g->n * g->oc * g->oh * g->ow, elem_size(p->dtype));
    return yn && transform(gpu, p->y_nhwc, dy, p->yd, yn) == 0 ? yn : NULL;
}

/* The three directions on NCHW copies; the result copied back to NHWC. */
static int conv_nchw(int gpu, plan_t *p, int dir, const void *x, const void *w, const void *dy,
                     void *out) {
    const psg_cu_geom_t *g = &p->g;
    size_t es = elem_size(p->dtype);
    scratch_t s = {{NULL}, {NULL}, 0};
    bufs_t b = {NULL, NULL, NULL, NULL, NULL, NULL};
    int rc = -1;
    if (dir == FWD) {
        b.w = filter_nchw(gpu, p, &s, w);
        b.x = b.w ? input_nchw(gpu, p, &s, x) : NULL;
        b.y = b.x ? scratch(gpu, &s, g->n * g->oc * g->oh * g->ow, es) : NULL;
        if (b.y && run_conv(gpu, p, FWD, &b) == 0) rc = transform(gpu, p->yd, b.y, p->y_nhwc, out);
    } else if (dir == BWD_DATA) {
        b.w = filter_nchw(gpu, p, &s, w);
        b.dy = b.w ? output_nchw(gpu, p, &s, dy) : NULL;
        b.dx = b.dy ? scratch(gpu, &s, g->n * g->c * (g->h + p->eh) * (g->w + p->ew), es) : NULL;
        if (b.dx && run_conv(gpu, p, BWD_DATA, &b) == 0)
            rc = transform(gpu, p->x_part, b.dx, p->x_nhwc, out); /* the padding's cells dropped */
    } else {
        b.x = input_nchw(gpu, p, &s, x);
        b.dy = b.x ? output_nchw(gpu, p, &s, dy) : NULL;
        b.dw = b.dy ? scratch(gpu, &s, g->kh * g->kw * g->c * g->oc, es) : NULL;
        if (b.dw && run_conv(gpu, p, BWD_FILTER, &b) == 0)
            rc = transform(gpu, p->w_nchw, b.dw, p->w_hwcn, out);
    }
    scratch_free(&s);
    return rc;
}

/* x with eh rows and ew columns of zeros after: into xe, (N, H+eh, W+ew, C) */
static int pad_input(int gpu, const plan_t *p, const void *x, void *xe) {
    const psg_cu_geom_t *g = &p->g;
    int64_t size[4] = {g->n, g->h, g->w, g->c}, full[4] = {g->n, g->h + p->eh, g->w + p->ew, g->c};
    int64_t zero[4] = {0, 0, 0, 0};
    size_t es = elem_size(p->dtype);
    if (psg_cuda_memset0(gpu, xe, es * (size_t)(full[0] * full[1] * full[2] * full[3])) < 0)
        return -1;
    return psg_cuda_copy_block(gpu, (int)es, 4, size, x, size, zero, xe, full, zero);
}

/* The forward convolution on the NHWC operands. */
static int forward_nhwc(int gpu, plan_t *p, const void *x, const void *w, void *y) {
    const psg_cu_geom_t *g = &p->g;
    size_t es = elem_size(p->dtype);
    scratch_t s = {{NULL}, {NULL}, 0};
    bufs_t b = {x, NULL, NULL, y, NULL, NULL};
    void *wk = scratch(gpu, &s, g->kh * g->kw * g->c * g->oc, es);
    int rc = wk ? transpose(gpu, p->dtype, w, wk, g, false) : -1;
    b.w = wk;
    if (rc == 0 && (p->eh || p->ew)) {
        void *xe = scratch(gpu, &s, g->n * (g->h + p->eh) * (g->w + p->ew) * g->c, es);
        rc = xe ? pad_input(gpu, p, x, xe) : -1;
        b.x = xe;
    }
    if (rc == 0) rc = run_conv(gpu, p, FWD, &b);
    scratch_free(&s);
    return rc;
}

/* The input gradient on the NHWC operands. */
static int backprop_input_nhwc(int gpu, plan_t *p, const void *w, const void *dy, void *dx) {
    const psg_cu_geom_t *g = &p->g;
    size_t es = elem_size(p->dtype);
    scratch_t s = {{NULL}, {NULL}, 0};
    bufs_t b = {NULL, NULL, dy, NULL, dx, NULL};
    void *wk = scratch(gpu, &s, g->kh * g->kw * g->c * g->oc, es);
    int rc = wk ? transpose(gpu, p->dtype, w, wk, g, false) : -1;
    b.w = wk;
    bool padded = p->eh || p->ew;
    if (rc == 0 && padded) {
        b.dx = scratch(gpu, &s, g->n * (g->h + p->eh) * (g->w + p->ew) * g->c, es);
        if (!b.dx) rc = -1;
    }
    if (rc == 0) rc = run_conv(gpu, p, BWD_DATA, &b);
    if (rc == 0 && padded) {
        /* the padding's rows and columns are dropped */
        int64_t size[4] = {g->n, g->h, g->w, g->c}, zero[4] = {0, 0, 0, 0};
        int64_t full[4] = {g->n, g->h + p->eh, g->w + p->ew, g->c};
        rc = psg_cuda_copy_block(gpu, (int)es, 4, size, b.dx, full, zero, dx, size, zero);
    }
    scratch_free(&s);
    return rc;
}

/* The filter gradient on the NHWC operands. */
static int backprop_filter_nhwc(int gpu, plan_t *p, const void *x, const void *dy, void *dw) {
    const psg_cu_geom_t *g = &p->g;
    size_t es = elem_size(p->dtype);
    scratch_t s = {{NULL}, {NULL}, 0};
    bufs_t b = {x, NULL, dy, NULL, NULL, NULL};
    b.dw = scratch(gpu, &s, g->kh * g->kw * g->c * g->oc, es);
    int rc = b.dw ? 0 : -1;
    if (rc == 0 && (p->eh || p->ew)) {
        void *xe = scratch(gpu, &s, g->n * (g->h + p->eh) * (g->w + p->ew) * g->c, es);
        rc = xe ? pad_input(gpu, p, x, xe) : -1;
        b.x = xe;
    }
    if (rc == 0) rc = run_conv(gpu, p, BWD_FILTER, &b);
    if (rc == 0) rc = transpose(gpu, p->dtype, b.dw, dw, g, true);
    scratch_free(&s);
    return rc;
}

/* Direction dir of plan p: x, w, dy as the direction reads them, into out. */
static int conv_run(int gpu, plan_t *p, int dir, const void *x, const void *w, const void *dy,
                    void *out) {
    if (p->nchw) return conv_nchw(gpu, p, dir, x, w, dy, out);
    if (dir == FWD) return forward_nhwc(gpu, p, x, w, out);
    if (dir == BWD_DATA) return backprop_input_nhwc(gpu, p, w, dy, out);
    return backprop_filter_nhwc(gpu, p, x, dy, out);
}

/* Milliseconds of the fastest of three calls of direction dir of p (after a
 * first that finds its algorithm); the GPU's other work in between only adds. */
static int best_ms(int gpu, plan_t *p, int dir, const void *x, const void *w, const void *dy,
                   void *out, float *ms) {
    PSG_CUDA_DEV(d, gpu);
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = conv_run(gpu, p, dir, x, w, dy, out);
    if (rc == 0 && (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess))
        rc = psg_error_set("convolution layout: cudaEventCreate failed");
    *ms = 1e30f;
    for (int i = 0; rc == 0 && i < 3; i++) {
        float t = 0;
        cudaEventRecord(e0, d->compute);
        rc = conv_run(gpu, p, dir, x, w, dy, out);
        cudaEventRecord(e1, d->compute);
        if (rc == 0 && (cudaEventSynchronize(e1) != cudaSuccess ||
                        cudaEventElapsedTime(&t, e0, e1) != cudaSuccess))
            rc = psg_error_set("convolution layout: timing failed");
        if (rc == 0 && t < *ms) *ms = t;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return rc;
}

/* Direction dir of the convolution g: in the layout PSG_CUDNN_LAYOUT says, or
 * with auto in the faster one for this shape and direction, timed once. */
static int conv_dir(int gpu, int dtype, const psg_cu_geom_t *g, int dir, const void *x,
                    const void *w, const void *dy, void *out) {
    int mode = layout_mode(dtype);
    plan_t *p = plan_get(gpu, dtype, g, mode != LAYOUT_NHWC);
    if (!p) return -1;
    if (mode != LAYOUT_AUTO) return conv_run(gpu, p, dir, x, w, dy, out);
    plan_t *q = plan_get(gpu, dtype, g, false);
    if (!q) return -1;
    int pick = __atomic_load_n(&p->pick[dir], __ATOMIC_ACQUIRE);
    if (pick != PICK_UNKNOWN) return conv_run(gpu, pick == PICK_NCHW ? p : q, dir, x, w, dy, out);
    float nchw_ms, nhwc_ms;
    if (best_ms(gpu, p, dir, x, w, dy, out, &nchw_ms) < 0 ||
        best_ms(gpu, q, dir, x, w, dy, out, &nhwc_ms) < 0)
        return -1;
    pick = nchw_ms <= nhwc_ms ? PICK_NCHW : PICK_NHWC;
    __atomic_store_n(&p->pick[dir], pick, __ATOMIC_RELEASE);
    const char *log = getenv("PSG_CUDNN_LAYOUT_LOG");
    if (log && !strcmp(log, "1"))
        fprintf(stderr,
                "{\"conv_layout\":\"%s\",\"dir\":%d,\"dtype\":%d,\"n\":%lld,\"h\":%lld,\"w\":%lld,"
                "\"c\":%lld,\"kh\":%lld,\"kw\":%lld,\"oc\":%lld,\"stride\":%lld,\"nchw_ms\":%.3f,"
                "\"nhwc_ms\":%.3f}\n",
                pick == PICK_NCHW ? "nchw" : "nhwc", dir, dtype, (long long)g->n, (long long)g->h,
                (long long)g->w, (long long)g->c, (long long)g->kh, (long long)g->kw,
                (long long)g->oc, (long long)g->sh, nchw_ms, nhwc_ms);
    /* the last call was q's: out holds the result either way */
    return 0;
}

extern "C" int psg_cuda_conv2d(int gpu, int dtype, const psg_cu_geom_t *g, const void *x,
                               const void *w, void *y) {
    if (g->n * g->oh * g->ow * g->oc == 0) return 0;
    return conv_dir(gpu, dtype, g, FWD, x, w, NULL, y);
}

extern "C" int psg_cuda_conv2d_backprop_input(int gpu, int dtype, const psg_cu_geom_t *g,
                                              const void *w, const void *dy, void *dx) {
    if (g->n * g->h * g->w * g->c == 0) return 0;
    return conv_dir(gpu, dtype, g, BWD_DATA, NULL, w, dy, dx);
}

extern "C" int psg_cuda_conv2d_backprop_filter(int gpu, int dtype, const psg_cu_geom_t *g,
                                               const void *x, const void *dy, void *dw) {
    int64_t nw = g->kh * g->kw * g->c * g->oc;
    if (nw == 0) return 0;
    if (g->n == 0) return psg_cuda_memset0(gpu, dw, elem_size(dtype) * (size_t)nw);
    return conv_dir(gpu, dtype, g, BWD_FILTER, x, NULL, dy, dw);
}

/* ---- the benchmark peer: cuDNN alone ---- */

typedef struct {
    cudnnHandle_t h;
    cudaStream_t st;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    float *x, *w, *y;
    void *work;
    size_t ws;
} peer_t;

static int peer_setup(int gpu, const psg_cu_geom_t *g, peer_t *p) {
    if (!fits_int(g)) return psg_error_set("convolution too large for cuDNN's 32-bit dims");
    if (!psg_cuda_dev(gpu)) return -1;
    PSG_CUDA_CHECK(cudaStreamCreate(&p->st));
    PSG_CUDNN_CHECK(cudnnCreate(&p->h));
    PSG_CUDNN_CHECK(cudnnSetStream(p->h, p->st));
    if (descriptors(PSG_CU_F32, true, g, 0, 0, &p->xd, &p->yd, &p->wd, &p->cd) < 0) return -1;
    PSG_CUDA_CHECK(cudaMalloc(&p->x, sizeof(float) * (size_t)(g->n * g->h * g->w * g->c)));
    PSG_CUDA_CHECK(cudaMalloc(&p->w, sizeof(float) * (size_t)(g->kh * g->kw * g->c * g->oc)));
    PSG_CUDA_CHECK(cudaMalloc(&p->y, sizeof(float) * (size_t)(g->n * g->oh * g->ow * g->oc)));
    PSG_CUDA_CHECK(cudaMemset(p->x, 0, sizeof(float) * (size_t)(g->n * g->h * g->w * g->c)));
    PSG_CUDA_CHECK(cudaMemset(p->w, 0, sizeof(float) * (size_t)(g->kh * g->kw * g->c * g->oc)));
    PSG_CUDA_CHECK(cudaMemset(p->y, 0, sizeof(float) * (size_t)(g->n * g->oh * g->ow * g->oc)));
    p->ws = WORKSPACE_MAX;
    PSG_CUDA_CHECK(cudaMalloc(&p->work, p->ws));
    return 0;
}

static void peer_free(peer_t *p) {
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
    cudaFree(p->x);
    cudaFree(p->w);
    cudaFree(p->y);
    cudaFree(p->work);
    if (p->h) cudnnDestroy(p->h);
    if (p->st) cudaStreamDestroy(p->st);
}

/* One call of the best algorithm of dir (found by the first call). */
static int peer_run(peer_t *p, int dir, int *algo) {
    const float one = 1.0f, zero = 0.0f;
    int got = 0;
    if (*algo < 0) {
        if (dir == 0) {
            cudnnConvolutionFwdAlgoPerf_t r;
            PSG_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
                p->h, p->xd, p->x, p->wd, p->w, p->cd, p->yd, p->y, 1, &got, &r, p->work, p->ws));
            *algo = got ? (int)r.algo : 0;
        } else if (dir == 1) {
            cudnnConvolutionBwdDataAlgoPerf_t r;
            PSG_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
                p->h, p->wd, p->w, p->yd, p->y, p->cd, p->xd, p->x, 1, &got, &r, p->work, p->ws));
            *algo = got ? (int)r.algo : 0;
        } else {
            cudnnConvolutionBwdFilterAlgoPerf_t r;
            PSG_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                p->h, p->xd, p->x, p->yd, p->y, p->cd, p->wd, p->w, 1, &got, &r, p->work, p->ws));
            *algo = got ? (int)r.algo : 0;
        }
    }
    if (dir == 0)
        PSG_CUDNN_CHECK(cudnnConvolutionForward(p->h, &one, p->xd, p->x, p->wd, p->w, p->cd,
                                                (cudnnConvolutionFwdAlgo_t)*algo, p->work, p->ws,
                                                &zero, p->yd, p->y));
    else if (dir == 1)
        PSG_CUDNN_CHECK(cudnnConvolutionBackwardData(p->h, &one, p->wd, p->w, p->yd, p->y, p->cd,
                                                     (cudnnConvolutionBwdDataAlgo_t)*algo, p->work,
                                                     p->ws, &zero, p->xd, p->x));
    else
        PSG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(p->h, &one, p->xd, p->x, p->yd, p->y, p->cd,
                                                       (cudnnConvolutionBwdFilterAlgo_t)*algo,
                                                       p->work, p->ws, &zero, p->wd, p->w));
    return 0;
}

extern "C" double psg_cuda_peer_conv_seconds(int gpu, const psg_cu_geom_t *g, int dir, int iters) {
    peer_t p;
    memset(&p, 0, sizeof p);
    cudaEvent_t e0 = NULL, e1 = NULL;
    double sec = -1;
    int algo = -1, rc = peer_setup(gpu, g, &p);
    if (rc == 0 && (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess))
        rc = psg_error_set("peer conv: cudaEventCreate failed");
    for (int i = -3; rc == 0 && i < iters; i++) {
        if (i == 0) cudaEventRecord(e0, p.st);
        rc = peer_run(&p, dir, &algo);
    }
    float ms = 0;
    if (rc == 0) {
        cudaEventRecord(e1, p.st);
        if (cudaEventSynchronize(e1) == cudaSuccess &&
            cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
            sec = (double)ms * 1e-3 / (iters > 0 ? iters : 1);
        else
            psg_error_set("peer conv: timing failed");
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    peer_free(&p);
    return sec;
}

/* ---- average pooling ---- */

/* Whether cuDNN's average pooling computes TensorFlow's for g: cuDNN pads as much after as
 * before, so its windows are g's when its output size is g's (no padding, or even SAME
 * padding as a 3x3 stride-1 window's); both count the cells inside the input only.
 * PSG_CUDNN_POOL=0 keeps every pooling on pool.cu's kernels (to measure one against the
 * other). */
static bool avg_pool_fits(const psg_cu_geom_t *g) {
    static int enabled = -1;
    if (enabled < 0) {
        const char *e = getenv("PSG_CUDNN_POOL");
        enabled = !(e && !strcmp(e, "0"));
    }
    if (!enabled || !fits_int(g) || g->pt < 0 || g->pl < 0 || g->pt >= g->kh || g->pl >= g->kw)
        return false;
    return g->sh > 0 && g->sw > 0 && 1 + (g->h + 2 * g->pt - g->kh) / g->sh == g->oh &&
           1 + (g->w + 2 * g->pl - g->kw) / g->sw == g->ow;
}

/* x (N, H, W, C) -> y (N, OH, OW, C), or with dy (N, OH, OW, C) given, the gradient dx of x's
 * shape into out: NHWC descriptors, no copies. */
static int avg_pool_run(int gpu, const psg_cu_geom_t *g, const float *x, const float *dy,
                        float *out) {
    PSG_CUDA_DEV(d, gpu);
    cudnnTensorDescriptor_t xd = NULL, yd = NULL;
    cudnnPoolingDescriptor_t pd = NULL;
    cudnnStatus_t s = cudnnCreateTensorDescriptor(&xd);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&yd);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreatePoolingDescriptor(&pd);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, (int)g->n,
                                       (int)g->c, (int)g->h, (int)g->w);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, (int)g->n,
                                       (int)g->c, (int)g->oh, (int)g->ow);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                                        CUDNN_NOT_PROPAGATE_NAN, (int)g->kh, (int)g->kw, (int)g->pt,
                                        (int)g->pl, (int)g->sh, (int)g->sw);
    int rc = 0;
    if (s == CUDNN_STATUS_SUCCESS) {
        const float one = 1.0f, zero = 0.0f;
        pthread_mutex_lock(&d->lock);
        cudnnHandle_t h;
        rc = handle_of(gpu, d, &h);
        if (rc == 0 && !dy)
            s = cudnnPoolingForward(h, pd, &one, xd, x, &zero, yd, out);
        else if (rc == 0) /* average pooling reads neither y nor x: dy stands for y */
            s = cudnnPoolingBackward(h, pd, &one, yd, dy, yd, dy, xd, x, &zero, xd, out);
        pthread_mutex_unlock(&d->lock);
    }
    if (pd) cudnnDestroyPoolingDescriptor(pd);
    if (yd) cudnnDestroyTensorDescriptor(yd);
    if (xd) cudnnDestroyTensorDescriptor(xd);
    if (rc < 0) return -1;
    PSG_CUDNN_CHECK(s);
    return 1;
}

extern "C" int psg_cudnn_avg_pool(int gpu, const psg_cu_geom_t *g, const float *x, const float *dy,
                                  float *out) {
    return avg_pool_fits(g) ? avg_pool_run(gpu, g, x, dy, out) : 0;
}
