/* The nn ops: values against naive loops (a plain 7-loop convolution, pooling
 * by brute force, a two-pass batch norm), finite-difference gradient checks of
 * every differentiable op, the conv's im2col path with several bands and slices
 * against its direct kernels, and shape errors that name the node. */
#include "ops/cpu/conv2d_direct.h"
#include "psgraph/half.h"
#include "tests/gradcheck.h"
#include "tests/testutil.h"

#include <stdlib.h>

/* ---- running one small graph ---- */

static psg_tensor_t *run_graph(int n, psg_tensor_t **vals, psg_gradcheck_build_fn build, void *ctx,
                               int threads) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t ph[8];
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        ph[i] = psg_placeholder(g, name, PSG_DT_F32, &vals[i]->shape);
    }
    psg_endpoint_t y = build(g, ph, ctx);
    psg_tensor_t *out = NULL;
    if (psg_endpoint_valid(y)) {
        psg_session_options_t opt = {.num_threads = threads};
        psg_session_t *s = psg_session_new(g, &opt, NULL);
        if (psg_session_run(s, n, ph, vals, 1, &y, &out, 0, NULL) < 0) out = NULL;
        psg_session_destroy(&s);
    }
    CHECK(out != NULL);
    psg_graph_destroy(&g);
    return out;
}

/* max |a - ref| <= tol * (1 + max |ref|); a NaN is never close */
static void check_close(const char *what, const float *a, const float *ref, int64_t n, double tol) {
    double worst = 0, scale = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n && !isnan(worst); i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= worst)) worst = d, at = i;
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    psg_test_checks++;
    if (!(worst <= tol * (1 + scale))) {
        psg_test_failures++;
        fprintf(stderr, "%s: element %lld is %g, reference %g\n", what, (long long)at, a[at],
                ref[at]);
    }
}

/* ---- convolution ---- */

typedef struct {
    int n, h, w, c, kh, kw, oc, sh, sw;
    bool same;
} conv_case_t;

/* TensorFlow's arithmetic, written out again independently of ops/nn.c. */
static void out_and_pad(int in, int k, int s, bool same, int *out, int *pad) {
    *out = same ? (in + s - 1) / s : (in - k + s) / s;
    int total = (*out - 1) * s + k - in;
    *pad = same && total > 0 ? total / 2 : 0;
}

typedef struct {
    const conv_case_t *k;
    int oh, ow, pt, pl;
} geom_t;

static geom_t geom_of(const conv_case_t *k) {
    geom_t g = {.k = k};
    out_and_pad(k->h, k->kh, k->sh, k->same, &g.oh, &g.pt);
    out_and_pad(k->w, k->kw, k->sw, k->same, &g.ow, &g.pl);
    return g;
}

/* The 7 loops; mode 0: y = conv(x, w), 1: dx from dy, 2: dw from x and dy.
 * x is (N, H, W, C), w (KH, KW, C, OC), y / dy (N, OH, OW, OC) */
static void naive_conv(const geom_t *g, int mode, float *x, float *w, float *y) {
    const conv_case_t *k = g->k;
    if (mode == 1) memset(x, 0, sizeof(float) * (size_t)(k->n * k->h * k->w * k->c));
    if (mode == 2) memset(w, 0, sizeof(float) * (size_t)(k->kh * k->kw * k->c * k->oc));
    for (int n = 0; n < k->n; n++)
        for (int oh = 0; oh < g->oh; oh++)
            for (int ow = 0; ow < g->ow; ow++)
                for (int oc = 0; oc < k->oc; oc++) {
                    float *yo = &y[((n * g->oh + oh) * g->ow + ow) * k->oc + oc];
                    double s = 0;
                    for (int kh = 0; kh < k->kh; kh++)
                        for (int kw = 0; kw < k->kw; kw++)
                            for (int c = 0; c < k->c; c++) {
                                int ih = oh * k->sh - g->pt + kh, iw = ow * k->sw - g->pl + kw;
                                if (ih < 0 || ih >= k->h || iw < 0 || iw >= k->w) continue;
                                float *xi = &x[((n * k->h + ih) * k->w + iw) * k->c + c];
                                float *wi = &w[((kh * k->kw + kw) * k->c + c) * k->oc + oc];
                                if (mode == 0) s += (double)*xi * *wi;
                                if (mode == 1) *xi += *yo * *wi;
                                if (mode == 2) *wi += *yo * *xi;
                            }
                    if (mode == 0) *yo = (float)s;
                }
}

static psg_padding_t pad_of(bool same) {
    return same ? PSG_PADDING_SAME : PSG_PADDING_VALID;
}

static psg_endpoint_t build_conv(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    const conv_case_t *k = ctx;
    return psg_conv2d(g, "conv", in[0], in[1], k->sh, k->sw, pad_of(k->same));
}

static psg_endpoint_t build_conv_bi(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    const conv_case_t *k = ctx;
    return psg_conv2d_backprop_input(g, "bi", in[0], in[1], in[2], k->sh, k->sw, pad_of(k->same));
}

static psg_endpoint_t build_conv_bf(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    const conv_case_t *k = ctx;
    return psg_conv2d_backprop_filter(g, "bf", in[0], in[1], in[2], k->sh, k->sw, pad_of(k->same));
}

static const conv_case_t conv_cases[] = {
    {2, 7, 9, 3, 3, 3, 4, 1, 1, true},
    {2, 7, 9, 3, 3, 3, 4, 2, 2, true},
    {1, 8, 8, 2, 3, 3, 3, 2, 2, true}, /* odd padding total: the extra cell goes after */
    {1, 8, 8, 2, 4, 4, 3, 2, 2, true},
    {2, 7, 9, 3, 3, 2, 4, 2, 1, false},
    {1, 9, 9, 2, 1, 7, 3, 1, 1, true},
    {1, 9, 9, 2, 7, 1, 3, 1, 1, true},
    {3, 5, 5, 4, 1, 1, 6, 1, 1, false}, /* 1x1: one GEMM */
    {2, 6, 6, 4, 1, 1, 5, 2, 2, true},
    {1, 4, 4, 2, 5, 5, 3, 1, 1, true},
    {5, 9, 9, 3, 5, 5, 4, 1, 1, true},    /* uneven split of the batch */
    {3, 32, 32, 16, 3, 3, 8, 1, 1, true}, /* several im2col bands per slice */
    {2, 17, 17, 3, 3, 3, 4, 2, 2, false},
    {2, 6, 7, 16, 3, 2, 4, 1, 1, false}, /* dx as a conv with the flipped filter, VALID */
    {2, 6, 7, 16, 4, 4, 5, 1, 1, true},  /* ... SAME with an odd padding total */
    /* im2col bands that start inside an image and run into the next: forward and the
     * col2im of dx (stride 2), then the filter gradient's longer bands */
    {3, 24, 24, 64, 3, 3, 8, 2, 2, true},
    {2, 20, 20, 128, 3, 3, 4, 1, 1, true},
    /* the direct kernels (conv2d_direct.c, whole batches of >= 2 images): 80 output channels are
     * a 64-channel block and a 16-channel one, the filter's window rows come in two blocks, and
     * 100 pixels and 800 filter rows end in short tiles */
    {2, 10, 10, 32, 5, 5, 80, 1, 1, true},
    /* 40 channels padded to 48 (three vectors), odd sizes, strides 2 and 3, VALID */
    {2, 11, 13, 7, 3, 5, 40, 2, 3, false},
    /* strides longer than the window: input rows and columns no window reads */
    {2, 9, 9, 3, 1, 2, 17, 3, 3, true},
    /* conv1 of the cnn, smaller: one input channel, 32 output channels */
    {3, 12, 12, 1, 5, 5, 32, 1, 1, true},
    /* 64 output channels (a tile of 4 vectors with AVX-512) on rows of 3 and 2 pixels: the
     * smallest tiles of the widest vectors (conv2d_direct.c's tile_rows) */
    {2, 5, 3, 4, 3, 3, 64, 1, 1, true},
    {2, 4, 2, 4, 3, 3, 64, 1, 1, true},
};

/* A conv's params are prepared once per plan (ops/params.h) from the shapes
 * known at build time: with the batch unknown there, one session runs it at
 * two batch sizes, each equal to the naive loops. */
static void test_conv2d_batch_unknown_at_build(void) {
    unsigned seed = 9;
    conv_case_t k = conv_cases[1]; /* 3x3, strides 2, SAME */
    psg_graph_t *gr = psg_graph_new();
    psg_shape_t px = psg_shape_4d(-1, k.h, k.w, k.c), sw = psg_shape_4d(k.kh, k.kw, k.c, k.oc);
    psg_tensor_t *w = psg_test_random(&sw, -1, 1, &seed);
    float *wv = malloc(psg_tensor_nbytes(w));
    memcpy(wv, w->data, psg_tensor_nbytes(w));
    psg_endpoint_t x = psg_placeholder(gr, "x", PSG_DT_F32, &px);
    psg_endpoint_t y =
        psg_conv2d(gr, "conv", x, psg_const(gr, "w", &w), k.sh, k.sw, PSG_PADDING_SAME);
    psg_session_t *s = psg_session_new(gr, NULL, NULL);
    CHECK(s != NULL);
    for (int n = 1; s && n <= 3; n += 2) {
        k.n = n;
        geom_t g = geom_of(&k);
        psg_shape_t sx = psg_shape_4d(n, k.h, k.w, k.c);
        psg_tensor_t *xv = psg_test_random(&sx, -1, 1, &seed), *out = NULL;
        int64_t ny = (int64_t)n * g.oh * g.ow * k.oc;
        float *ref = malloc(sizeof(float) * (size_t)ny);
        naive_conv(&g, 0, psg_tensor_f32(xv), wv, ref);
        CHECK(psg_session_run(s, 1, &x, &xv, 1, &y, &out, 0, NULL) == 0);
        if (out) {
            CHECK(out->shape.dims[0] == n && psg_tensor_numel(out) == ny);
            if (psg_tensor_numel(out) == ny)
                check_close("conv, batch unknown", psg_tensor_f32(out), ref, ny, 1e-4);
        }
        psg_tensor_destroy(&out);
        psg_tensor_destroy(&xv);
        free(ref);
    }
    free(wv);
    psg_session_destroy(&s);
    psg_graph_destroy(&gr);
}

static void test_conv2d_values(void) {
    unsigned seed = 7;
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
        const conv_case_t *k = &conv_cases[i];
        geom_t g = geom_of(k);
        psg_shape_t sx = psg_shape_4d(k->n, k->h, k->w, k->c),
                    sw = psg_shape_4d(k->kh, k->kw, k->c, k->oc),
                    sy = psg_shape_4d(k->n, g.oh, g.ow, k->oc);
        psg_tensor_t *x = psg_test_random(&sx, -1, 1, &seed),
                     *w = psg_test_random(&sw, -1, 1, &seed);
        psg_tensor_t *dy = psg_test_random(&sy, -1, 1, &seed);
        int64_t nx = psg_shape_numel(&sx), nw = psg_shape_numel(&sw), ny = psg_shape_numel(&sy);
        float *ref_y = malloc(sizeof(float) * (size_t)ny),
              *ref_dx = malloc(sizeof(float) * (size_t)nx);
        float *ref_dw = malloc(sizeof(float) * (size_t)nw);
        naive_conv(&g, 0, psg_tensor_f32(x), psg_tensor_f32(w), ref_y);
        naive_conv(&g, 1, ref_dx, psg_tensor_f32(w), psg_tensor_f32(dy));
        naive_conv(&g, 2, psg_tensor_f32(x), ref_dw, psg_tensor_f32(dy));
        for (int threads = 1; threads <= 2; threads++) {
            char what[96];
            psg_tensor_t *fw[2] = {x, w}, *b3[3] = {x, w, dy};
            psg_tensor_t *y = run_graph(2, fw, build_conv, (void *)k, threads);
            psg_tensor_t *dx = run_graph(3, b3, build_conv_bi, (void *)k, threads);
            psg_tensor_t *dw = run_graph(3, b3, build_conv_bf, (void *)k, threads);
            snprintf(what, sizeof what, "conv case %zu, %d threads: y", i, threads);
            if (y) CHECK(psg_shape_equal(&y->shape, &sy));
            if (y) check_close(what, psg_tensor_f32(y), ref_y, ny, 1e-5);
            snprintf(what, sizeof what, "conv case %zu, %d threads: dx", i, threads);
            if (dx) check_close(what, psg_tensor_f32(dx), ref_dx, nx, 1e-5);
            snprintf(what, sizeof what, "conv case %zu, %d threads: dw", i, threads);
            if (dw) check_close(what, psg_tensor_f32(dw), ref_dw, nw, 1e-5);
            psg_tensor_destroy(&y);
            psg_tensor_destroy(&dx);
            psg_tensor_destroy(&dw);
        }
        free(ref_y);
        free(ref_dx);
        free(ref_dw);
        psg_tensor_destroy(&x);
        psg_tensor_destroy(&w);
        psg_tensor_destroy(&dy);
    }
}

/* ---- the im2col path on large images, fewer images than threads ---- */

/* Images large enough that the im2col path (conv2d.c: taken when the batch does not fill the
 * threads) cuts each slice of the batch into several bands of output pixels, and more threads
 * than images, so that the batch is split into slices whose filter gradients are summed. */
static const struct {
    conv_case_t k;
    int threads;
    const char *what;
} band_cases[] = {
    /* filter gradient rows of 576 floats: 910-pixel bands, two per 40x40 image */
    {{3, 40, 40, 64, 3, 3, 8, 1, 1, true}, 4, "3 images on 4 threads: 3 slices of 2 filter bands"},
    {{1, 40, 40, 64, 3, 3, 8, 1, 1, true},
     4,
     "1 image on 4 threads: 1 slice, split GEMMs, 2 bands"},
    {{2, 96, 96, 32, 3, 3, 16, 2, 2, true},
     3,
     "stride 2 (dx by col2im): 2 slices of 2 filter bands"},
    {{3, 37, 43, 24, 5, 3, 12, 2, 1, false}, 4, "VALID, odd sizes: forward bands end inside a row"},
};

/* sum(dy * conv(x, w)) on `threads`, in double */
static double conv_loss(const conv_case_t *k, psg_tensor_t *x, psg_tensor_t *w,
                        const psg_tensor_t *dy, int threads) {
    psg_tensor_t *fw[2] = {x, w}, *y = run_graph(2, fw, build_conv, (void *)k, threads);
    double l = 0;
    for (int64_t i = 0; y && i < psg_tensor_numel(y); i++)
        l += (double)psg_tensor_f32(y)[i] * psg_tensor_f32(dy)[i];
    psg_tensor_destroy(&y);
    return l;
}

/* Central differences of the loss at `samples` elements of t (x or w) against grad: the conv
 * is linear in each, so a step of 1 is exact up to rounding. */
static void check_differences(const char *what, const conv_case_t *k, int threads, psg_tensor_t *x,
                              psg_tensor_t *w, const psg_tensor_t *dy, psg_tensor_t *t,
                              const float *grad, int samples) {
    float *v = psg_tensor_f32(t);
    for (int s = 0; s < samples; s++) {
        int64_t i = (psg_tensor_numel(t) - 1) * s / (samples - 1);
        float keep = v[i];
        v[i] = keep + 1;
        double up = conv_loss(k, x, w, dy, threads);
        v[i] = keep - 1;
        double numeric = (up - conv_loss(k, x, w, dy, threads)) / 2;
        v[i] = keep;
        psg_test_checks++;
        if (!(fabs(grad[i] - numeric) <= 1e-3 * (1 + fabs(numeric)))) {
            psg_test_failures++;
            fprintf(stderr, "%s: element %lld: gradient %g, central difference %g\n", what,
                    (long long)i, grad[i], numeric);
        }
    }
}

/* ---- the direct forward pass of fewer images than threads: bands of output rows ---- */

/* The kernels' geometry of case k (its output and padding in g). */
static psg_nn_geom_t nn_geom_of(const conv_case_t *k, const geom_t *g) {
    return (psg_nn_geom_t){.n = k->n,
                           .h = k->h,
                           .w = k->w,
                           .c = k->c,
                           .kh = k->kh,
                           .kw = k->kw,
                           .oc = k->oc,
                           .oh = g->oh,
                           .ow = g->ow,
                           .sh = k->sh,
                           .sw = k->sw,
                           .pt = g->pt,
                           .pl = g->pl};
}

static const struct {
    conv_case_t k;
    int threads;
    bool direct; /* whether the rows go around the threads (else the im2col path) */
} row_cases[] = {
    {{1, 28, 28, 1, 5, 5, 32, 1, 1, true}, 2, true},  /* the served cnn's conv1 at batch 1 */
    {{1, 14, 14, 32, 5, 5, 64, 1, 1, true}, 2, true}, /* ... and conv2 */
    {{1, 17, 19, 3, 3, 3, 40, 2, 2, false}, 3, true}, /* 40 channels padded to 48, VALID */
    {{2, 9, 11, 8, 3, 3, 16, 1, 1, true}, 5, true},   /* 2 images of 3 bands on 5 threads */
    {{1, 3, 5, 4, 3, 3, 20, 1, 1, true}, 4, false},   /* 3 rows for 4 threads: im2col */
};

/* The forward pass on more threads than images equals the naive loops (1e-5) and, when it
 * goes around the threads by rows, the direct kernel itself on one thread (whole images)
 * exactly: the same sums in the same order (the op took the direct kernel). */
static void test_conv2d_direct_rows(void) {
    unsigned seed = 41;
    for (size_t c = 0; c < sizeof row_cases / sizeof row_cases[0]; c++) {
        const conv_case_t *k = &row_cases[c].k;
        geom_t g = geom_of(k);
        psg_nn_geom_t ng = nn_geom_of(k, &g);
        psg_threadpool_t *pool = psg_threadpool_new(row_cases[c].threads);
        CHECK(pool && psg_conv_direct_forward_applies(&ng, pool) == row_cases[c].direct &&
              !psg_conv_direct_applies(&ng, pool));
        psg_threadpool_destroy(&pool);
        psg_shape_t sx = psg_shape_4d(k->n, k->h, k->w, k->c),
                    sw = psg_shape_4d(k->kh, k->kw, k->c, k->oc);
        psg_tensor_t *fw[2] = {psg_test_random(&sx, -1, 1, &seed),
                               psg_test_random(&sw, -1, 1, &seed)};
        int64_t n = (int64_t)k->n * g.oh * g.ow * k->oc;
        float *ref = malloc(sizeof(float) * (size_t)n);
        PSG_ASSERT(ref);
        naive_conv(&g, 0, psg_tensor_f32(fw[0]), psg_tensor_f32(fw[1]), ref);
        psg_tensor_t *rows = run_graph(2, fw, build_conv, (void *)k, row_cases[c].threads);
        /* the direct kernel itself on one thread: whole images, one after another */
        psg_shape_t sy = psg_shape_4d(k->n, g.oh, g.ow, k->oc);
        psg_tensor_t *whole = psg_tensor_new(PSG_DT_F32, &sy);
        psg_threadpool_t *one = psg_threadpool_new(1);
        CHECK(whole && one &&
              psg_conv_direct_forward(one, &ng, psg_tensor_f32(fw[0]), psg_tensor_f32(fw[1]), NULL,
                                      psg_tensor_f32(whole)) == 0);
        psg_threadpool_destroy(&one);
        if (rows && whole) {
            CHECK(psg_tensor_numel(rows) == n && psg_tensor_numel(whole) == n);
            check_close("rows against the loops", psg_tensor_f32(rows), ref, n, 1e-5);
            int64_t differ = 0;
            for (int64_t i = 0; i < n; i++)
                differ += psg_tensor_f32(rows)[i] != psg_tensor_f32(whole)[i];
            if (row_cases[c].direct && differ)
                fprintf(stderr, "case %zu: %lld outputs differ from one thread's\n", c,
                        (long long)differ);
            CHECK(!row_cases[c].direct || differ == 0);
        }
        psg_tensor_destroy(&rows);
        psg_tensor_destroy(&whole);
        psg_tensor_destroy(&fw[0]);
        psg_tensor_destroy(&fw[1]);
        free(ref);
    }
}

/* The im2col path's y, dx and dw equal the direct kernels' (one thread) and the naive loops';
 * its dw and dx equal central differences of the loss. */
static void test_conv2d_im2col_bands(void) {
    unsigned seed = 37;
    for (size_t c = 0; c < sizeof band_cases / sizeof band_cases[0]; c++) {
        const conv_case_t *k = &band_cases[c].k;
        int threads = band_cases[c].threads;
        geom_t g = geom_of(k);
        /* the dispatch this case is about: im2col on `threads`, the direct kernels on one
         * (the forward pass: the direct kernel's bands of rows, test_conv2d_direct_rows) */
        psg_nn_geom_t ng = nn_geom_of(k, &g);
        psg_threadpool_t *pool = psg_threadpool_new(threads);
        CHECK(pool && !psg_conv_direct_applies(&ng, pool) && psg_conv_direct_applies(&ng, NULL));
        psg_threadpool_destroy(&pool);
        psg_shape_t sx = psg_shape_4d(k->n, k->h, k->w, k->c),
                    sw = psg_shape_4d(k->kh, k->kw, k->c, k->oc),
                    sy = psg_shape_4d(k->n, g.oh, g.ow, k->oc);
        psg_tensor_t *x = psg_test_random(&sx, -1, 1, &seed),
                     *w = psg_test_random(&sw, -1, 1, &seed);
        psg_tensor_t *dy = psg_test_random(&sy, -1, 1, &seed);
        int64_t sizes[3] = {psg_shape_numel(&sy), psg_shape_numel(&sx), psg_shape_numel(&sw)};
        float *ref[3];
        for (int i = 0; i < 3; i++) PSG_ASSERT((ref[i] = malloc(sizeof(float) * (size_t)sizes[i])));
        naive_conv(&g, 0, psg_tensor_f32(x), psg_tensor_f32(w), ref[0]);
        naive_conv(&g, 1, ref[1], psg_tensor_f32(w), psg_tensor_f32(dy));
        naive_conv(&g, 2, psg_tensor_f32(x), ref[2], psg_tensor_f32(dy));
        psg_tensor_t *fw[2] = {x, w}, *b3[3] = {x, w, dy}, *im2col[3], *direct[3];
        psg_gradcheck_build_fn builds[3] = {build_conv, build_conv_bi, build_conv_bf};
        const char *names[3] = {"y", "dx", "dw"};
        for (int i = 0; i < 3; i++) {
            char what[160];
            im2col[i] = run_graph(i ? 3 : 2, i ? b3 : fw, builds[i], (void *)k, threads);
            direct[i] = run_graph(i ? 3 : 2, i ? b3 : fw, builds[i], (void *)k, 1);
            if (!im2col[i] || !direct[i]) continue;
            CHECK(psg_tensor_numel(im2col[i]) == sizes[i] &&
                  psg_tensor_numel(direct[i]) == sizes[i]);
            snprintf(what, sizeof what, "%s: %s, im2col against the direct kernel",
                     band_cases[c].what, names[i]);
            check_close(what, psg_tensor_f32(im2col[i]), psg_tensor_f32(direct[i]), sizes[i], 1e-5);
            snprintf(what, sizeof what, "%s: %s, im2col against the loops", band_cases[c].what,
                     names[i]);
            check_close(what, psg_tensor_f32(im2col[i]), ref[i], sizes[i], 1e-5);
            snprintf(what, sizeof what, "%s: %s, direct against the loops", band_cases[c].what,
                     names[i]);
            check_close(what, psg_tensor_f32(direct[i]), ref[i], sizes[i], 1e-5);
        }
        if (im2col[2])
            check_differences(band_cases[c].what, k, threads, x, w, dy, w,
                              psg_tensor_f32(im2col[2]), 7);
        if (im2col[1])
            check_differences(band_cases[c].what, k, threads, x, w, dy, x,
                              psg_tensor_f32(im2col[1]), 4);
        for (int i = 0; i < 3; i++) {
            psg_tensor_destroy(&im2col[i]);
            psg_tensor_destroy(&direct[i]);
            free(ref[i]);
        }
        psg_tensor_destroy(&x);
        psg_tensor_destroy(&w);
        psg_tensor_destroy(&dy);
    }
}

/* The padding is zeros, exactly: an image of zeros convolves to zeros and gives a filter
 * gradient of zeros, bit for bit (a tolerance would let a padding of 1e-38 through), on the
 * im2col path (one image, two threads: wide windows, copied by memset and memcpy, and one
 * channel, copied float by float) and on the direct kernels (one thread). */
static void test_conv2d_padding_is_zero(void) {
    static const conv_case_t cases[] = {{1, 6, 6, 16, 3, 3, 4, 1, 1, true},
                                        {1, 6, 6, 1, 3, 3, 4, 1, 1, true}};
    unsigned seed = 11;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case_t *k = &cases[i];
        geom_t g = geom_of(k);
        psg_shape_t sx = psg_shape_4d(k->n, k->h, k->w, k->c),
                    sw = psg_shape_4d(k->kh, k->kw, k->c, k->oc),
                    sy = psg_shape_4d(k->n, g.oh, g.ow, k->oc);
        psg_tensor_t *x = psg_tensor_zeros(PSG_DT_F32, &sx),
                     *w = psg_test_random(&sw, -1, 1, &seed),
                     *dy = psg_test_random(&sy, -1, 1, &seed);
        for (int threads = 1; threads <= 2; threads++) {
            psg_tensor_t *fw[2] = {x, w}, *b3[3] = {x, w, dy};
            psg_tensor_t *y = run_graph(2, fw, build_conv, (void *)k, threads);
            psg_tensor_t *dw = run_graph(3, b3, build_conv_bf, (void *)k, threads);
            int64_t nonzero = 0;
            for (int64_t j = 0; y && j < psg_tensor_numel(y); j++)
                nonzero += psg_tensor_f32(y)[j] != 0;
            for (int64_t j = 0; dw && j < psg_tensor_numel(dw); j++)
                nonzero += psg_tensor_f32(dw)[j] != 0;
            CHECK(y && dw && nonzero == 0);
            if (nonzero)
                fprintf(stderr, "case %zu, %d threads: %lld values not 0 from an image of zeros\n",
                        i, threads, (long long)nonzero);
            psg_tensor_destroy(&y);
            psg_tensor_destroy(&dw);
        }
        psg_tensor_destroy(&x);
        psg_tensor_destroy(&w);
        psg_tensor_destroy(&dy);
    }
}

static void test_same_padding_arithmetic(void) {
    /* TensorFlow: out = ceil(in / s); total = max((out - 1) * s + k - in, 0); before = total / 2 */
    int out, pad;
    out_and_pad(28, 5, 1, true, &out, &pad);
    CHECK(out == 28 && pad == 2);
    out_and_pad(8, 3, 2, true, &out, &pad);
    CHECK(out == 4 && pad == 0); /* total 1: all of it after */
    out_and_pad(7, 3, 2, true, &out, &pad);
    CHECK(out == 4 && pad == 1);
    out_and_pad(299, 3, 2, false, &out, &pad);
    CHECK(out == 149 && pad == 0);
    /* and the op agrees on the shapes */
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){4, {-1, 299, 299, 3}});
    psg_endpoint_t w = psg_placeholder(g, "w", PSG_DT_F32, &(psg_shape_t){4, {3, 3, 3, 32}});
    psg_endpoint_t y = psg_conv2d(g, "c", x, w, 2, 2, PSG_PADDING_VALID);
    const psg_shape_t *s = psg_graph_shape(g, y);
    CHECK(s->dims[0] == -1 && s->dims[1] == 149 && s->dims[2] == 149 && s->dims[3] == 32);
    psg_endpoint_t p = psg_max_pool(g, "p", y, 3, 3, 2, 2, PSG_PADDING_SAME);
    s = psg_graph_shape(g, p);
    CHECK(s->dims[1] == 75 && s->dims[2] == 75 && s->dims[3] == 32);
    psg_graph_destroy(&g);
}

/* ---- pooling ---- */

typedef struct {
    int n, h, w, c, kh, kw, sh, sw;
    bool same, avg;
} pool_case_t;

/* Brute force; mode 0: y from x, 1: dx from x and dy. */
static void naive_pool(const pool_case_t *k, int mode, const float *x, float *y, float *dx,
                       const float *dy) {
    int oh_n, ow_n, pt, pl;
    out_and_pad(k->h, k->kh, k->sh, k->same, &oh_n, &pt);
    out_and_pad(k->w, k->kw, k->sw, k->same, &ow_n, &pl);
    if (mode == 1) memset(dx, 0, sizeof(float) * (size_t)(k->n * k->h * k->w * k->c));
    for (int n = 0; n < k->n; n++)
        for (int oh = 0; oh < oh_n; oh++)
            for (int ow = 0; ow < ow_n; ow++)
                for (int c = 0; c < k->c; c++) {
                    double sum = 0;
                    float best = -INFINITY;
                    int count = 0, arg = -1;
                    for (int kh = 0; kh < k->kh; kh++)
                        for (int kw = 0; kw < k->kw; kw++) {
                            int ih = oh * k->sh - pt + kh, iw = ow * k->sw - pl + kw;
                            if (ih < 0 || ih >= k->h || iw < 0 || iw >= k->w) continue;
                            int at = ((n * k->h + ih) * k->w + iw) * k->c + c;
                            sum += x[at];
                            count++;
                            if (x[at] > best) best = x[at], arg = at;
                        }
                    int o = ((n * oh_n + oh) * ow_n + ow) * k->c + c;
                    if (mode == 0) y[o] = k->avg ? (float)(sum / count) : best;
                    if (mode == 1 && !k->avg) dx[arg] += dy[o];
                    for (int kh = 0; mode == 1 && k->avg && kh < k->kh; kh++)
                        for (int kw = 0; kw < k->kw; kw++) {
                            int ih = oh * k->sh - pt + kh, iw = ow * k->sw - pl + kw;
                            if (ih < 0 || ih >= k->h || iw < 0 || iw >= k->w) continue;
                            dx[((n * k->h + ih) * k->w + iw) * k->c + c] += dy[o] / count;
                        }
                }
}

static psg_endpoint_t build_pool(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    const pool_case_t *k = ctx;
    return (k->avg ? psg_avg_pool : psg_max_pool)(g, "pool", in[0], k->kh, k->kw, k->sh, k->sw,
                                                  pad_of(k->same));
}

static psg_endpoint_t build_pool_grad(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    const pool_case_t *k = ctx;
    return (k->avg ? psg_avg_pool_grad : psg_max_pool_grad)(g, "pool_grad", in[0], in[1], k->kh,
                                                            k->kw, k->sh, k->sw, pad_of(k->same));
}

static const pool_case_t pool_cases[] = {
    {2, 7, 9, 3, 2, 2, 2, 2, false, false},
    {2, 7, 9, 3, 3, 3, 2, 2, true, false},
    {1, 8, 8, 2, 3, 3, 2, 2, true, false},
    {2, 5, 6, 3, 3, 3, 1, 1, true, false},
    {1, 28, 28, 4, 2, 2, 2, 2, true, false},
    {1, 35, 35, 2, 3, 3, 2, 2, false, false},
    {2, 7, 9, 3, 2, 2, 2, 2, false, true},
    {2, 7, 9, 3, 3, 3, 2, 2, true, true},
    {1, 8, 8, 2, 3, 3, 2, 2, true, true},
    {2, 5, 6, 3, 3, 3, 1, 1, true, true},
    {3, 8, 8, 5, 8, 8, 1, 1, false, true}, /* global average */
    /* whole vectors of channels: max pool's window in registers (pool.c's max_window) */
    {2, 7, 9, 16, 3, 3, 2, 2, true, false},
    {1, 6, 6, 32, 2, 2, 2, 2, false, false},
};

/* Max pool's gradient where windows tie (ReLU outputs: many zeros): the first
 * maximum in window order gets dy, as TensorFlow. */
static void check_max_pool_grad_ties(size_t i, const pool_case_t *k, psg_tensor_t *x,
                                     psg_tensor_t *dy) {
    float *xv = psg_tensor_f32(x);
    int64_t nx = psg_tensor_numel(x);
    for (int64_t e = 0; e < nx; e++) xv[e] = xv[e] > 0.5f ? xv[e] : 0.0f;
    float *ref_dx = malloc(sizeof(float) * (size_t)nx);
    naive_pool(k, 1, xv, NULL, ref_dx, psg_tensor_f32(dy));
    psg_tensor_t *b2[2] = {x, dy};
    psg_tensor_t *dx = run_graph(2, b2, build_pool_grad, (void *)k, 2);
    char what[64];
    snprintf(what, sizeof what, "pool case %zu, tied windows: dx", i);
    if (dx) check_close(what, psg_tensor_f32(dx), ref_dx, nx, 1e-6);
    psg_tensor_destroy(&dx);
    free(ref_dx);
}

static void test_pool_values(void) {
    unsigned seed = 11;
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
        const pool_case_t *k = &pool_cases[i];
        int oh, ow, pad;
        out_and_pad(k->h, k->kh, k->sh, k->same, &oh, &pad);
        out_and_pad(k->w, k->kw, k->sw, k->same, &ow, &pad);
        psg_shape_t sx = psg_shape_4d(k->n, k->h, k->w, k->c),
                    sy = psg_shape_4d(k->n, oh, ow, k->c);
        psg_tensor_t *x = psg_test_random(&sx, -1, 1, &seed),
                     *dy = psg_test_random(&sy, -1, 1, &seed);
        int64_t nx = psg_shape_numel(&sx), ny = psg_shape_numel(&sy);
        float *ref_y = malloc(sizeof(float) * (size_t)ny),
              *ref_dx = malloc(sizeof(float) * (size_t)nx);
        naive_pool(k, 0, psg_tensor_f32(x), ref_y, NULL, NULL);
        naive_pool(k, 1, psg_tensor_f32(x), NULL, ref_dx, psg_tensor_f32(dy));
        psg_tensor_t *b2[2] = {x, dy};
        psg_tensor_t *y = run_graph(1, &x, build_pool, (void *)k, 2);
        psg_tensor_t *dx = run_graph(2, b2, build_pool_grad, (void *)k, 2);
        char what[64];
        snprintf(what, sizeof what, "pool case %zu: y", i);
        if (y) CHECK(psg_shape_equal(&y->shape, &sy));
        if (y) check_close(what, psg_tensor_f32(y), ref_y, ny, 1e-6);
        snprintf(what, sizeof what, "pool case %zu: dx", i);
        if (dx) check_close(what, psg_tensor_f32(dx), ref_dx, nx, 1e-6);
        psg_tensor_destroy(&y);
        psg_tensor_destroy(&dx);
        free(ref_y);
        free(ref_dx);
        if (!k->avg) check_max_pool_grad_ties(i, k, x, dy);
        psg_tensor_destroy(&x);
        psg_tensor_destroy(&dy);
    }
}

/* ---- bias add ---- */

static psg_endpoint_t build_bias_add(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    (void)ctx;
    return psg_bias_add(g, "bias", in[0], in[1]);
}

static psg_endpoint_t build_bias_add_grad(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    (void)ctx;
    return psg_bias_add_grad(g, "bias_grad", in[0]);
}

static void test_bias_add_values(void) {
    unsigned seed = 3;
    const psg_shape_t shapes[] = {{3, {37, 5, 3}}, {2, {3000, 130}}};
    for (int i = 0; i < 2; i++) {
        const psg_shape_t *s = &shapes[i];
        int64_t C = s->dims[s->rank - 1], n = psg_shape_numel(s), rows = n / C;
        psg_tensor_t *x = psg_test_random(s, -1, 1, &seed);
        psg_tensor_t *b = psg_test_random(&(psg_shape_t){1, {C}}, -1, 1, &seed);
        psg_tensor_t *in[2] = {x, b};
        psg_tensor_t *y = run_graph(2, in, build_bias_add, NULL, 2);
        psg_tensor_t *db = run_graph(1, &x, build_bias_add_grad, NULL, 2);
        float *ref = malloc(sizeof(float) * (size_t)n), ref_db[130] = {0};
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < C; c++) {
                ref[r * C + c] = psg_tensor_f32(x)[r * C + c] + psg_tensor_f32(b)[c];
                ref_db[c] += psg_tensor_f32(x)[r * C + c];
            }
        if (y) check_close("bias_add", psg_tensor_f32(y), ref, n, 1e-6);
        if (db) check_close("bias_add_grad", psg_tensor_f32(db), ref_db, C, 1e-5);
        free(ref);
        psg_tensor_destroy(&y);
        psg_tensor_destroy(&db);
        psg_tensor_destroy(&x);
        psg_tensor_destroy(&b);
    }
}

/* ---- batch norm ---- */

typedef struct {
    bool training;
    int output;
} bn_ctx_t;

static psg_endpoint_t build_bn(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    const bn_ctx_t *b = ctx;
    psg_batch_norm_t r =
        psg_fused_batch_norm(g, "bn", in[0], in[1], in[2], b->training ? PSG_NO_ENDPOINT : in[3],
                             b->training ? PSG_NO_ENDPOINT : in[4], 1e-3f, b->training);
    psg_endpoint_t outs[5] = {r.y, r.batch_mean, r.batch_var, r.saved_mean, r.saved_inv_std};
    return outs[b->output];
}

static void test_batch_norm_values(void) {
    unsigned seed = 5;
    const int64_t rows = 2 * 9 * 7 * 10, C = 6; /* large enough to split over threads */
    psg_shape_t sx = psg_shape_4d(2 * 10, 9, 7, C), sc = psg_shape_1d(C);
    psg_tensor_t *x = psg_test_random(&sx, -2, 3, &seed);
    psg_tensor_t *scale = psg_test_random(&sc, 0.5f, 1.5f, &seed);
    psg_tensor_t *offset = psg_test_random(&sc, -1, 1, &seed);
    psg_tensor_t *mean = psg_test_random(&sc, -0.5f, 0.5f, &seed);
    psg_tensor_t *var = psg_test_random(&sc, 0.5f, 2, &seed);
    const float *xd = psg_tensor_f32(x), *sd = psg_tensor_f32(scale), *od = psg_tensor_f32(offset);
    float m[6], v[6], vu[6], inv[6];
    for (int c = 0; c < C; c++) { /* two passes, in double */
        double s = 0, q = 0;
        for (int64_t r = 0; r < rows; r++) s += xd[r * C + c];
        double mu = s / rows;
        for (int64_t r = 0; r < rows; r++) q += (xd[r * C + c] - mu) * (xd[r * C + c] - mu);
        m[c] = (float)mu;
        v[c] = (float)(q / rows);
        vu[c] = (float)(q / (rows - 1));
        inv[c] = (float)(1 / sqrt(q / rows + 1e-3));
    }
    float *ref = malloc(sizeof(float) * (size_t)(rows * C));
    psg_tensor_t *in[5] = {x, scale, offset, mean, var};
    for (int training = 1; training >= 0; training--) {
        for (int64_t r = 0; r < rows; r++)
            for (int c = 0; c < C; c++) {
                float mu = training ? m[c] : psg_tensor_f32(mean)[c];
                double is = training ? inv[c] : 1 / sqrt(psg_tensor_f32(var)[c] + 1e-3);
                ref[r * C + c] = (float)((xd[r * C + c] - mu) * is * sd[c] + od[c]);
            }
        bn_ctx_t b = {training, 0};
        psg_tensor_t *y = run_graph(5, in, build_bn, &b, 2);
        if (y)
            check_close(training ? "bn train y" : "bn inference y", psg_tensor_f32(y), ref,
                        rows * C, 1e-5);
        psg_tensor_destroy(&y);
    }
    bn_ctx_t b = {true, 1};
    psg_tensor_t *bm = run_graph(5, in, build_bn, &b, 2);
    b.output = 2;
    psg_tensor_t *bv = run_graph(5, in, build_bn, &b, 2);
    b.output = 4;
    psg_tensor_t *bi = run_graph(5, in, build_bn, &b, 2);
    if (bm) check_close("bn batch_mean", psg_tensor_f32(bm), m, C, 1e-5);
    if (bv) check_close("bn batch_var (unbiased)", psg_tensor_f32(bv), vu, C, 1e-5);
    if (bi) check_close("bn saved_inv_std", psg_tensor_f32(bi), inv, C, 1e-5);
    (void)v;
    psg_tensor_destroy(&bm);
    psg_tensor_destroy(&bv);
    psg_tensor_destroy(&bi);
    free(ref);
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&scale);
    psg_tensor_destroy(&offset);
    psg_tensor_destroy(&mean);
    psg_tensor_destroy(&var);
}

/* ---- gradients ---- */

static const conv_case_t grad_conv_cases[] = {
    {1, 4, 5, 2, 3, 3, 2, 1, 1, true},  {2, 5, 5, 2, 3, 3, 2, 2, 2, true},
    {1, 5, 6, 2, 2, 3, 2, 2, 1, false}, {1, 4, 6, 1, 1, 3, 2, 1, 1, true},
    {1, 5, 4, 2, 3, 1, 2, 1, 1, true},  {2, 3, 3, 3, 1, 1, 2, 1, 1, false},
};

static void test_conv2d_gradients(void) {
    unsigned seed = 21;
    for (size_t i = 0; i < sizeof grad_conv_cases / sizeof grad_conv_cases[0]; i++) {
        const conv_case_t *k = &grad_conv_cases[i];
        geom_t g = geom_of(k);
        psg_shape_t sx = psg_shape_4d(k->n, k->h, k->w, k->c),
                    sw = psg_shape_4d(k->kh, k->kw, k->c, k->oc),
                    sy = psg_shape_4d(k->n, g.oh, g.ow, k->oc);
        psg_tensor_t *x = psg_test_random(&sx, -1, 1, &seed),
                     *w = psg_test_random(&sw, -1, 1, &seed);
        psg_tensor_t *dy = psg_test_random(&sy, -1, 1, &seed);
        char label[64];
        snprintf(label, sizeof label, "Conv2D case %zu", i);
        psg_gradcheck_input_t fw[2] = {{x, true}, {w, true}};
        CHECK(psg_gradcheck(label, 2, fw, build_conv, (void *)k, 1e-2) == 0);
        snprintf(label, sizeof label, "Conv2DBackpropInput case %zu", i);
        psg_gradcheck_input_t bi[3] = {{x, false}, {w, true}, {dy, true}};
        CHECK(psg_gradcheck(label, 3, bi, build_conv_bi, (void *)k, 1e-2) == 0);
        snprintf(label, sizeof label, "Conv2DBackpropFilter case %zu", i);
        psg_gradcheck_input_t bf[3] = {{x, true}, {w, false}, {dy, true}};
        CHECK(psg_gradcheck(label, 3, bf, build_conv_bf, (void *)k, 1e-2) == 0);
        psg_tensor_destroy(&x);
        psg_tensor_destroy(&w);
        psg_tensor_destroy(&dy);
    }
}

static void test_pool_gradients(void) {
    static const pool_case_t cases[] = {
        {2, 4, 5, 2, 2, 2, 2, 2, false, false}, {1, 5, 5, 2, 3, 3, 2, 2, true, false},
        {2, 4, 5, 2, 2, 2, 2, 2, false, true},  {1, 5, 5, 2, 3, 3, 2, 2, true, true},
        {1, 4, 4, 3, 3, 3, 1, 1, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const pool_case_t *k = &cases[i];
        psg_shape_t sx = psg_shape_4d(k->n, k->h, k->w, k->c);
        psg_tensor_t *x = psg_tensor_new(PSG_DT_F32, &sx);
        /* distinct values 0.05 apart, shuffled: no ties a finite difference could flip */
        int64_t n = psg_tensor_numel(x);
        float *d = psg_tensor_f32(x);
        for (int64_t j = 0; j < n; j++) d[j] = 0.05f * (float)((j * 37) % n) - 1.0f;
        char label[64];
        snprintf(label, sizeof label, "%s case %zu", k->avg ? "AvgPool" : "MaxPool", i);
        psg_gradcheck_input_t in[1] = {{x, true}};
        CHECK(psg_gradcheck(label, 1, in, build_pool, (void *)k, 1e-2) == 0);
        if (k->avg) {
            int oh, ow, pad;
            out_and_pad(k->h, k->kh, k->sh, k->same, &oh, &pad);
            out_and_pad(k->w, k->kw, k->sw, k->same, &ow, &pad);
            unsigned seed = 9;
            psg_tensor_t *dy =
                psg_test_random(&(psg_shape_t){4, {k->n, oh, ow, k->c}}, -1, 1, &seed);
            snprintf(label, sizeof label, "AvgPoolGrad case %zu", i);
            psg_gradcheck_input_t gin[2] = {{x, false}, {dy, true}};
            CHECK(psg_gradcheck(label, 2, gin, build_pool_grad, (void *)k, 1e-2) == 0);
            psg_tensor_destroy(&dy);
        }
        psg_tensor_destroy(&x);
    }
}

static void test_bias_add_gradients(void) {
    unsigned seed = 4;
    psg_tensor_t *x = psg_test_random(&(psg_shape_t){3, {2, 3, 4}}, -1, 1, &seed);
    psg_tensor_t *b = psg_test_random(&(psg_shape_t){1, {4}}, -1, 1, &seed);
    psg_gradcheck_input_t in[2] = {{x, true}, {b, true}};
    CHECK(psg_gradcheck("BiasAdd", 2, in, build_bias_add, NULL, 1e-2) == 0);
    CHECK(psg_gradcheck("BiasAddGrad", 1, in, build_bias_add_grad, NULL, 1e-2) == 0); /* x only */
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&b);
}

static void test_batch_norm_gradients(void) {
    unsigned seed = 8;
    psg_shape_t sc = psg_shape_1d(3);
    psg_tensor_t *x = psg_test_random(&(psg_shape_t){4, {2, 3, 2, 3}}, -1, 2, &seed);
    psg_tensor_t *scale = psg_test_random(&sc, 0.5f, 1.5f, &seed);
    psg_tensor_t *offset = psg_test_random(&sc, -1, 1, &seed);
    psg_tensor_t *mean = psg_test_random(&sc, -0.5f, 0.5f, &seed);
    psg_tensor_t *var = psg_test_random(&sc, 0.5f, 2, &seed);
    psg_gradcheck_input_t in[5] = {
        {x, true}, {scale, true}, {offset, true}, {mean, false}, {var, false}};
    bn_ctx_t train = {true, 0}, infer = {false, 0};
    CHECK(psg_gradcheck("FusedBatchNorm training", 5, in, build_bn, &train, 2e-2) == 0);
    CHECK(psg_gradcheck("FusedBatchNorm inference", 5, in, build_bn, &infer, 1e-2) == 0);
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&scale);
    psg_tensor_destroy(&offset);
    psg_tensor_destroy(&mean);
    psg_tensor_destroy(&var);
}

/* y and d(sum(w * y))/dx of batch norm in training over x: with x16 set, x is the f32 Cast of
 * its 16-bit rounding (batch norm then reads the 16-bit tensor itself); else x as fed. */
static void bn_forward_backward(psg_tensor_t *x, psg_tensor_t *scale, psg_tensor_t *offset,
                                psg_tensor_t *w, psg_dtype_t x16, psg_tensor_t **y,
                                psg_tensor_t **dx) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t px = psg_placeholder(g, "x", PSG_DT_F32, &x->shape);
    psg_endpoint_t xin = x16 ? psg_cast(g, "x32", psg_cast(g, "x16", px, x16), PSG_DT_F32) : px;
    psg_tensor_t *sc = psg_tensor_ref(scale), *of = psg_tensor_ref(offset), *wc = psg_tensor_ref(w);
    psg_batch_norm_t r =
        psg_fused_batch_norm(g, "bn", xin, psg_const(g, "scale", &sc), psg_const(g, "offset", &of),
                             PSG_NO_ENDPOINT, PSG_NO_ENDPOINT, 1e-3f, true);
    /* the 16-bit x is batch norm's own input, not the Cast's f32 copy */
    CHECK(psg_graph_dtype(g, psg_node_input(psg_graph_node(g, r.y.node), 0)) ==
          (x16 ? x16 : PSG_DT_F32));
    psg_endpoint_t loss =
        psg_sum(g, "loss", psg_mul(g, "wy", r.y, psg_const(g, "w", &wc)), 0, NULL, false);
    psg_endpoint_t fetch[2] = {r.y, PSG_NO_ENDPOINT}, xs[1] = {px};
    CHECK(psg_gradients(g, 1, &loss, NULL, 1, xs, fetch + 1) == 0);
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    psg_tensor_t *out[2] = {NULL, NULL}, *feed[1] = {x};
    CHECK(s && psg_session_run(s, 1, &px, feed, 2, fetch, out, 0, NULL) == 0);
    *y = out[0];
    *dx = out[1];
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

/* Batch norm over a 16-bit x computes what it computed over x's f32 Cast, bit for bit: y the
 * same, and dx that of the f32 x rounded once to 16 bits (the Cast's gradient's rounding). */
static void test_batch_norm_reads_16bit(void) {
    unsigned seed = 12;
    psg_shape_t sx = psg_shape_4d(6, 5, 7, 4), sc = psg_shape_1d(4);
    psg_tensor_t *x = psg_test_random(&sx, -2, 3, &seed), *w = psg_test_random(&sx, -1, 1, &seed);
    psg_tensor_t *scale = psg_test_random(&sc, 0.5f, 1.5f, &seed);
    psg_tensor_t *offset = psg_test_random(&sc, -1, 1, &seed);
    const psg_dtype_t dts[2] = {PSG_DT_BF16, PSG_DT_F16};
    for (int k = 0; k < 2; k++) {
        psg_tensor_t *xr = psg_tensor_new(PSG_DT_F32, &sx); /* x rounded to 16 bits */
        for (int64_t i = 0; i < psg_tensor_numel(x); i++) {
            float v = psg_tensor_f32(x)[i];
            psg_tensor_f32(xr)[i] = dts[k] == PSG_DT_BF16 ? psg_bf16_to_f32(psg_f32_to_bf16(v))
                                                          : psg_f16_to_f32(psg_f32_to_f16(v));
        }
        psg_tensor_t *y16 = NULL, *dx16 = NULL, *y = NULL, *dx = NULL;
        bn_forward_backward(x, scale, offset, w, dts[k], &y16, &dx16);
        bn_forward_backward(xr, scale, offset, w, 0, &y, &dx);
        int64_t ybad = 0, dxbad = 0;
        for (int64_t i = 0; y16 && y && dx16 && dx && i < psg_tensor_numel(x); i++) {
            float d = psg_tensor_f32(dx)[i];
            float d16 = dts[k] == PSG_DT_BF16 ? psg_bf16_to_f32(psg_f32_to_bf16(d))
                                              : psg_f16_to_f32(psg_f32_to_f16(d));
            ybad += psg_tensor_f32(y16)[i] != psg_tensor_f32(y)[i];
            dxbad += psg_tensor_f32(dx16)[i] != d16;
        }
        CHECK(y16 && dx16 && ybad == 0 && dxbad == 0);
        if (ybad || dxbad)
            printf("  %s: %lld of y and %lld of dx differ\n", psg_dtype_name(dts[k]),
                   (long long)ybad, (long long)dxbad);
        psg_tensor_destroy(&y16);
        psg_tensor_destroy(&dx16);
        psg_tensor_destroy(&y);
        psg_tensor_destroy(&dx);
        psg_tensor_destroy(&xr);
    }
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&w);
    psg_tensor_destroy(&scale);
    psg_tensor_destroy(&offset);
}

/* ---- shape errors ---- */

static void test_shape_errors(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){4, {2, 8, 8, 3}});
    psg_endpoint_t w = psg_placeholder(g, "w", PSG_DT_F32, &(psg_shape_t){4, {3, 3, 4, 5}});
    CHECK(!psg_endpoint_valid(psg_conv2d(g, "conv1", x, w, 1, 1, PSG_PADDING_SAME)));
    CHECK_ERROR_HAS("node 'conv1' (Conv2D)");
    CHECK_ERROR_HAS("[2, 8, 8, 3] has 3 channels");
    CHECK_ERROR_HAS("[3, 3, 4, 5]");
    psg_graph_destroy(&g);

    g = psg_graph_new();
    x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){4, {2, 3, 3, 1}});
    w = psg_placeholder(g, "w", PSG_DT_F32, &(psg_shape_t){4, {5, 5, 1, 2}});
    CHECK(!psg_endpoint_valid(psg_conv2d(g, "big", x, w, 1, 1, PSG_PADDING_VALID)));
    CHECK_ERROR_HAS("node 'big' (Conv2D)");
    CHECK_ERROR_HAS("does not fit");
    psg_graph_destroy(&g);

    g = psg_graph_new();
    x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){4, {2, 8, 8, 1}});
    w = psg_placeholder(g, "w", PSG_DT_F32, &(psg_shape_t){4, {3, 3, 1, 2}});
    psg_node_builder_t *b = psg_node_begin(g, "Conv2D", "dilated");
    psg_node_add_input(b, x);
    psg_node_add_input(b, w);
    psg_node_attr_ints(b, "strides", 4, (int64_t[]){1, 1, 1, 1});
    psg_node_attr_ints(b, "dilations", 4, (int64_t[]){1, 2, 2, 1});
    psg_node_attr_str(b, "padding", "SAME");
    CHECK(psg_node_finish(b) < 0);
    CHECK_ERROR_HAS("node 'dilated' (Conv2D): dilation 2 is not supported");
    b = psg_node_begin(g, "MaxPool", "badpad");
    psg_node_add_input(b, x);
    psg_node_attr_ints(b, "ksize", 2, (int64_t[]){2, 2});
    psg_node_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    psg_node_attr_str(b, "padding", "FULL");
    CHECK(psg_node_finish(b) < 0);
    CHECK_ERROR_HAS("node 'badpad' (MaxPool): padding must be SAME or VALID, got 'FULL'");
    CHECK(!psg_endpoint_valid(psg_max_pool(g, "zero", x, 0, 2, 1, 1, PSG_PADDING_SAME)));
    CHECK_ERROR_HAS("'ksize' must be positive");
    psg_endpoint_t dy = psg_placeholder(g, "dy", PSG_DT_F32, &(psg_shape_t){4, {2, 5, 5, 1}});
    CHECK(!psg_endpoint_valid(psg_max_pool_grad(g, "mpg", x, dy, 2, 2, 2, 2, PSG_PADDING_SAME)));
    CHECK_ERROR_HAS(
        "node 'mpg' (MaxPoolGrad): dy [2, 5, 5, 1] does not match the forward output [2, 4, 4, 1]");
    psg_graph_destroy(&g);

    g = psg_graph_new();
    x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){2, {4, 5}});
    psg_endpoint_t bias = psg_placeholder(g, "b", PSG_DT_F32, &(psg_shape_t){1, {6}});
    CHECK(!psg_endpoint_valid(psg_bias_add(g, "add_bias", x, bias)));
    CHECK_ERROR_HAS("node 'add_bias' (BiasAdd): bias [6] does not match the last dim of x [4, 5]");
    psg_graph_destroy(&g);

    g = psg_graph_new();
    x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){4, {2, 4, 4, 3}});
    psg_endpoint_t s3 = psg_placeholder(g, "s", PSG_DT_F32, &(psg_shape_t){1, {3}});
    psg_endpoint_t s4 = psg_placeholder(g, "s4", PSG_DT_F32, &(psg_shape_t){1, {4}});
    psg_batch_norm_t r =
        psg_fused_batch_norm(g, "bn", x, s3, s4, PSG_NO_ENDPOINT, PSG_NO_ENDPOINT, 1e-3f, true);
    CHECK(!psg_endpoint_valid(r.y));
    CHECK_ERROR_HAS("node 'bn' (FusedBatchNorm): offset [4] does not match");
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_same_padding_arithmetic);
    RUN_TEST(test_conv2d_values);
    RUN_TEST(test_conv2d_batch_unknown_at_build);
    RUN_TEST(test_conv2d_im2col_bands);
    RUN_TEST(test_conv2d_direct_rows);
    RUN_TEST(test_conv2d_padding_is_zero);
    RUN_TEST(test_pool_values);
    RUN_TEST(test_bias_add_values);
    RUN_TEST(test_batch_norm_values);
    RUN_TEST(test_conv2d_gradients);
    RUN_TEST(test_pool_gradients);
    RUN_TEST(test_bias_add_gradients);
    RUN_TEST(test_batch_norm_gradients);
    RUN_TEST(test_batch_norm_reads_16bit);
    RUN_TEST(test_shape_errors);
    return psg_test_summary();
}
