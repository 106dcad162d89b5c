/* Direct convolution kernels (see conv2d_direct.h). Each image is copied
 * once into a zero-padded buffer; then every (kh) row of a window is KW * C
 * contiguous floats there, and one filter row (kh, kw, c) is OC contiguous
 * floats, so a tile of R output pixels times V vectors of 16 output channels
 * is R * V accumulators fed by one broadcast per pixel and V loads per filter
 * row: the GEMM micro-kernel, with im2col's copy replaced by addressing.
 * The filter gradient is the same tile turned around: R filter rows times V
 * vectors of channels, summed over the image's output pixels.
 * Not the dispatch (conv2d.c). */
#include "ops/cpu/conv2d_direct.h"
#include "ops/cpu/unroll.h"

#include "psgraph/error.h"
#include "psgraph/tensor.h"

#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

/* Sanitizer builds (debug, -O1) left the tiles' accumulators in memory, each access checked:
 * an ASan cnn step (batch 64) took 2.2 CPU s against release's 0.07, 74% of it in
 * forward_6_1 (perf), and the ASan test of the cnn ran past its budget. Built at -O3 here, as
 * in release, it takes 1.05 s; the sanitizers check this code all the same. */
#if defined(__SANITIZE_ADDRESS__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

/* 16 floats: one AVX-512 register (two AVX ones, four SSE ones elsewhere).
 * Helpers take them by pointer: by value, their ABI differs without AVX-512. */
typedef float vec_t __attribute__((vector_size(64)));
#define VL 16
#define VMAX 4  /* vectors of output channels per tile: 64 channels */
#define RMAX 12 /* pixels (forward) or filter rows (filter gradient) per tile */

/* Filter bytes per block of the forward pass's window rows: the block stays
 * in L2 while every pixel of the image goes by. */
#define W_BLOCK_BYTES (128 * 1024)

/* A padded image bigger than this goes through im2col's bands instead. */
#define MAX_PADDED_BYTES (64 * 1024 * 1024)

static inline void vload(vec_t *v, const float *p) {
    memcpy(v, p, sizeof *v);
}

static inline void vstore(float *p, const vec_t *v) {
    memcpy(p, v, sizeof *v);
}

#define SPLAT(x) ((vec_t){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x})

/* *acc += *a * *b, fused where the CPU has FMA (ISO C mode never contracts a * b + c) */
static inline void vfma(vec_t *acc, const vec_t *a, const vec_t *b) {
#if defined(__AVX512F__)
    *acc = (vec_t)_mm512_fmadd_ps((__m512)*a, (__m512)*b, (__m512)*acc);
#elif defined(__FMA__)
    __m256 a2[2], b2[2], c2[2];
    memcpy(a2, a, sizeof *a);
    memcpy(b2, b, sizeof *b);
    memcpy(c2, acc, sizeof *acc);
    c2[0] = _mm256_fmadd_ps(a2[0], b2[0], c2[0]);
    c2[1] = _mm256_fmadd_ps(a2[1], b2[1], c2[1]);
    memcpy(acc, c2, sizeof *acc);
#else
    *acc += *a * *b;
#endif
}

/* One register tile. Forward: rows are output pixels, a[r] the pixel's
 * window origin in the padded image, summed over window rows [kh0, kh1) and
 * the floats [j0, j1) of each (a window row is `row` floats, `rs` apart in
 * the image) against filter rows `ldw` apart. Filter gradient: rows are
 * filter rows, a[r] the row's offset into the padded image, summed over the
 * output pixels [oh0, oh1) x [ow0, ow1) (x `xs_h` / `xs_w` apart per output
 * row / column, dy `dy_rs` / `ldw`). The ranges leave out the windows' cells
 * that lie in the padding for every row of the tile: zeros, work saved. */
typedef struct {
    const float *a[RMAX];
    float *out[RMAX]; /* the row's V * VL results */
    const float *b;   /* filter (forward) or dy (filter gradient), at the channel block */
    int64_t ldw;
    int64_t kh0, kh1, j0, j1, rs, row;             /* forward */
    int64_t oh0, oh1, ow0, ow1, xs_h, xs_w, dy_rs; /* filter gradient */
    bool accumulate;                               /* add to out (a later block), else overwrite */
} tile_t;

static inline __attribute__((always_inline)) void tile_load(const tile_t *t, int R, int V,
                                                            vec_t acc[RMAX][VMAX]) {
    PSG_UNROLL for (int r = 0; r < R; r++) PSG_UNROLL for (int v = 0; v < V; v++) if (t->accumulate)
        vload(&acc[r][v], t->out[r] + v * VL);
    else acc[r][v] = (vec_t){0};
}

static inline __attribute__((always_inline)) void tile_store(const tile_t *t, int R, int V,
                                                             vec_t acc[RMAX][VMAX]) {
    PSG_UNROLL for (int r = 0; r < R; r++) PSG_UNROLL for (int v = 0; v < V; v++)
        vstore(t->out[r] + v * VL, &acc[r][v]);
}

static inline __attribute__((always_inline)) void forward_tile(const tile_t *t, int R, int V) {
    vec_t acc[RMAX][VMAX];
    tile_load(t, R, V, acc);
    for (int64_t kh = t->kh0; kh < t->kh1; kh++) {
        const float *a[RMAX];
        PSG_UNROLL for (int r = 0; r < R; r++) a[r] = t->a[r] + kh * t->rs;
        const float *w = t->b + (kh * t->row + t->j0) * t->ldw;
        for (int64_t j = t->j0; j < t->j1; j++, w += t->ldw) {
            vec_t b[VMAX];
            PSG_UNROLL for (int v = 0; v < V; v++) vload(&b[v], w + v * VL);
            PSG_UNROLL for (int r = 0; r < R; r++) {
                vec_t x = SPLAT(a[r][j]);
                PSG_UNROLL for (int v = 0; v < V; v++) vfma(&acc[r][v], &x, &b[v]);
            }
        }
    }
    tile_store(t, R, V, acc);
}

static inline __attribute__((always_inline)) void filter_tile(const tile_t *t, int R, int V) {
    vec_t acc[RMAX][VMAX];
    tile_load(t, R, V, acc);
    for (int64_t oh = t->oh0; oh < t->oh1; oh++) {
        int64_t i = oh * t->xs_h + t->ow0 * t->xs_w;
        const float *dy = t->b + oh * t->dy_rs + t->ow0 * t->ldw;
        for (int64_t ow = t->ow0; ow < t->ow1; ow++, i += t->xs_w, dy += t->ldw) {
            vec_t b[VMAX];
            PSG_UNROLL for (int v = 0; v < V; v++) vload(&b[v], dy + v * VL);
            PSG_UNROLL for (int r = 0; r < R; r++) {
                vec_t x = SPLAT(t->a[r][i]);
                PSG_UNROLL for (int v = 0; v < V; v++) vfma(&acc[r][v], &x, &b[v]);
            }
        }
    }
    tile_store(t, R, V, acc);
}

#if !defined(__AVX512F__) && defined(__FMA__)
/* AVX2's tiles of one vector (16 channels, two registers) a pixel or filter row, written with
 * the registers' own type: GCC keeps a vec_t of 64 bytes in memory without AVX-512, so the
 * generic tiles above would load and store every accumulator at every FMA. Same FMAs in the
 * same order, so the same results. */
static inline __attribute__((always_inline)) void tile2_load(const tile_t *t, int R,
                                                             __m256 acc[RMAX][2]) {
    PSG_UNROLL for (int r = 0; r < R; r++) {
        acc[r][0] = t->accumulate ? _mm256_loadu_ps(t->out[r]) : _mm256_setzero_ps();
        acc[r][1] = t->accumulate ? _mm256_loadu_ps(t->out[r] + 8) : _mm256_setzero_ps();
    }
}

static inline __attribute__((always_inline)) void tile2_store(const tile_t *t, int R,
                                                              __m256 acc[RMAX][2]) {
    PSG_UNROLL for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(t->out[r], acc[r][0]);
        _mm256_storeu_ps(t->out[r] + 8, acc[r][1]);
    }
}

static inline __attribute__((always_inline)) void forward_tile2(const tile_t *t, int R) {
    __m256 acc[RMAX][2];
    tile2_load(t, R, acc);
    for (int64_t kh = t->kh0; kh < t->kh1; kh++) {
        const float *a[RMAX];
        PSG_UNROLL for (int r = 0; r < R; r++) a[r] = t->a[r] + kh * t->rs;
        const float *w = t->b + (kh * t->row + t->j0) * t->ldw;
        for (int64_t j = t->j0; j < t->j1; j++, w += t->ldw) {
            __m256 b0 = _mm256_loadu_ps(w), b1 = _mm256_loadu_ps(w + 8);
            PSG_UNROLL for (int r = 0; r < R; r++) {
                __m256 x = _mm256_broadcast_ss(a[r] + j);
                acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
            }
        }
    }
    tile2_store(t, R, acc);
}

static inline __attribute__((always_inline)) void filter_tile2(const tile_t *t, int R) {
    __m256 acc[RMAX][2];
    tile2_load(t, R, acc);
    for (int64_t oh = t->oh0; oh < t->oh1; oh++) {
        int64_t i = oh * t->xs_h + t->ow0 * t->xs_w;
        const float *dy = t->b + oh * t->dy_rs + t->ow0 * t->ldw;
        for (int64_t ow = t->ow0; ow < t->ow1; ow++, i += t->xs_w, dy += t->ldw) {
            __m256 b0 = _mm256_loadu_ps(dy), b1 = _mm256_loadu_ps(dy + 8);
            PSG_UNROLL for (int r = 0; r < R; r++) {
                __m256 x = _mm256_broadcast_ss(t->a[r] + i);
                acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
            }
        }
    }
    tile2_store(t, R, acc);
}
#define FORWARD_TILE(t, R, V) ((V) == 1 ? forward_tile2(t, R) : forward_tile(t, R, V))
#define FILTER_TILE(t, R, V) ((V) == 1 ? filter_tile2(t, R) : filter_tile(t, R, V))
#else
#define FORWARD_TILE(t, R, V) forward_tile(t, R, V)
#define FILTER_TILE(t, R, V) filter_tile(t, R, V)
#endif

typedef void (*tile_fn)(const tile_t *t);

#define TILES(R, V)                                                                                \
    static void forward_##R##_##V(const tile_t *t) {                                               \
        FORWARD_TILE(t, R, V);                                                                     \
    }                                                                                              \
    static void filter_##R##_##V(const tile_t *t) {                                                \
        FILTER_TILE(t, R, V);                                                                      \
    }
TILES(2, 1)
TILES(4, 1)
TILES(6, 1)
TILES(8, 1)
TILES(12, 1)
TILES(2, 2)
TILES(4, 2)
TILES(6, 2)
TILES(8, 2)
TILES(12, 2)
TILES(2, 3)
TILES(4, 3)
TILES(6, 3)
TILES(8, 3)
TILES(2, 4)
TILES(4, 4)
TILES(6, 4)
#undef TILES

/* The tile sizes for V vectors, the largest first: R * V accumulators, V loaded vectors and
 * the broadcast fit the registers, or every FMA spills (a 6 x 4 tile on AVX2 ran at a tenth of
 * the FMA units' rate). VTILE: the most vectors a tile takes. */
#if defined(__AVX512F__)
#define VTILE 4 /* 32 registers of one vector each */
static const int tile_rows[VMAX + 1][5] = {
    {0}, {12, 8, 6, 4, 2}, {12, 8, 6, 4, 2}, {8, 6, 4, 2}, {6, 4, 2}};
#else
#define VTILE 1 /* 16 registers, two a vector: 12 accumulators, 2 loads, 1 broadcast */
static const int tile_rows[VMAX + 1][5] = {{0}, {6, 4, 2}, {0}, {0}, {0}};
#endif

static tile_fn tile_of(bool forward, int r, int v) {
#define CASE(R, V)                                                                                 \
    if (r == R && v == V) return forward ? forward_##R##_##V : filter_##R##_##V
    CASE(2, 1);
    CASE(4, 1);
    CASE(6, 1);
    CASE(8, 1);
    CASE(12, 1);
    CASE(2, 2);
    CASE(4, 2);
    CASE(6, 2);
    CASE(8, 2);
    CASE(12, 2);
    CASE(2, 3);
    CASE(4, 3);
    CASE(6, 3);
    CASE(8, 3);
    CASE(2, 4);
    CASE(4, 4);
    CASE(6, 4);
#undef CASE
    return NULL;
}

/* The rows of the next tile when `left` rows remain: as many tiles as the
 * largest size needs, evened out (14 pixels: 6, 4, 4 rather than 6, 6, 2). */
static int tile_size(int v, int64_t left) {
    const int *rows = tile_rows[v];
    int64_t tiles = (left + rows[0] - 1) / rows[0];
    int64_t want = tiles > 0 ? (left + tiles - 1) / tiles : 1;
    int r = rows[0];
    for (int i = 1; i < 5 && rows[i] > 0; i++)
        if (rows[i] >= want) r = rows[i];
    return r;
}

/* The window positions [*lo, *hi) that output o reads inside the input:
 * o * s - pad + k in [0, n_in), k in [0, k_n). */
static void taps_of_output(int64_t o, int64_t s, int64_t pad, int64_t n_in, int64_t k_n,
                           int64_t *lo, int64_t *hi) {
    int64_t first = pad - o * s, end = n_in + pad - o * s;
    *lo = first > 0 ? first : 0;
    *hi = end < k_n ? end : k_n;
    if (*hi < *lo) *hi = *lo;
}

/* The outputs [*lo, *hi) (of n_out) whose window position k reads inside the input. */
static void outputs_of_tap(int64_t k, int64_t s, int64_t pad, int64_t n_in, int64_t n_out,
                           int64_t *lo, int64_t *hi) {
    int64_t first = pad - k, end = n_in + pad - k; /* o * s in [first, end) */
    *lo = first > 0 ? (first + s - 1) / s : 0;
    *hi = end > 0 ? (end + s - 1) / s : 0;
    if (*hi > n_out) *hi = n_out;
    if (*lo > *hi) *lo = *hi;
}

/* The buffers of one part: the padded image (zeroed once: only its interior
 * is written after), a tile's worth of scratch rows and, when OC is not whole
 * vectors, one image's outputs (or dy) with OC padded to ocp. */
typedef struct {
    psg_buffer_t *buf;
    float *xp, *scratch, *wide;
} part_bufs_t;

typedef struct direct_job direct_job_t;

/* One image of a pass: n, whether it is the part's first, the part's filter
 * gradient sum (filter gradient only) and its buffers, n padded in b->xp. */
typedef void (*image_fn)(direct_job_t *j, int64_t n, bool first, float *sum, const part_bufs_t *b);

struct direct_job {
    image_fn image; /* the pass */
    psg_nn_geom_t g;
    int64_t hp, wp; /* the padded image */
    int64_t ocp;    /* OC rounded up to whole vectors */
    int64_t k;      /* KH * KW * C */
    int64_t parts;
    const float *x, *w, *dy;
    float *y, *dw;
    float *first;   /* (K, ocp): part 0's filter gradient (dw itself when OC is whole vectors) */
    float *partial; /* (parts - 1, K, ocp): the other parts' */
    const int64_t *offset;         /* (K): filter row k's offset in the padded image */
    const psg_conv_epilogue_t *ep; /* forward: FusedConv2D's, on each image's outputs */
    int failed;
};

static void job_init(direct_job_t *j, psg_threadpool_t *pool, const psg_nn_geom_t *g,
                     const float *x, image_fn image) {
    memset(j, 0, sizeof *j);
    j->image = image;
    j->x = x;
    j->g = *g;
    j->hp = (g->oh - 1) * g->sh + g->kh;
    j->wp = (g->ow - 1) * g->sw + g->kw;
    j->ocp = (g->oc + VL - 1) / VL * VL;
    j->k = g->kh * g->kw * g->c;
    int64_t threads = psg_threadpool_size(pool);
    j->parts = g->n < threads ? g->n : threads;
    if (j->parts < 1) j->parts = 1;
}

static bool padded_fits(const psg_nn_geom_t *g) {
    if (g->oh <= 0 || g->ow <= 0) return false;
    int64_t hp = (g->oh - 1) * g->sh + g->kh, wp = (g->ow - 1) * g->sw + g->kw;
    return hp * wp * g->c * (int64_t)sizeof(float) <= MAX_PADDED_BYTES;
}

bool psg_conv_direct_applies(const psg_nn_geom_t *g, psg_threadpool_t *pool) {
    return g->n >= psg_threadpool_size(pool) && padded_fits(g);
}

bool psg_conv_direct_forward_applies(const psg_nn_geom_t *g, psg_threadpool_t *pool) {
    return g->n >= 1 && g->n * g->oh >= psg_threadpool_size(pool) && padded_fits(g);
}

bool psg_conv_direct_pools(const psg_nn_geom_t *g, psg_threadpool_t *pool) {
    return psg_conv_direct_forward_applies(g, pool) && g->n >= psg_threadpool_size(pool);
}

/* Copies image n of x into xp (hp, wp, C), whose border already holds zeros.
 * Rows and columns past the last window (VALID, or strides longer than the
 * window) are left out. */
static void pad_image(const direct_job_t *j, const float *x, int64_t n, float *xp) {
    const psg_nn_geom_t *g = &j->g;
    int64_t rows = g->h < j->hp - g->pt ? g->h : j->hp - g->pt;
    int64_t cols = g->w < j->wp - g->pl ? g->w : j->wp - g->pl;
    const float *img = x + n * g->h * g->w * g->c;
    for (int64_t ih = 0; ih < rows; ih++)
        memcpy(xp + ((ih + g->pt) * j->wp + g->pl) * g->c, img + ih * g->w * g->c,
               sizeof(float) * (size_t)(cols * g->c));
}

static int part_bufs_new(const direct_job_t *j, part_bufs_t *b) {
    size_t xp = (size_t)(j->hp * j->wp * j->g.c), scratch = RMAX * VMAX * VL;
    bool pooled = j->ep && j->ep->pool; /* an image's outputs wait here for their pool */
    size_t wide = j->ocp != j->g.oc || pooled ? (size_t)(j->g.oh * j->g.ow * j->ocp) : 0;
    b->buf = psg_buffer_new(sizeof(float) * (xp + scratch + wide));
    if (!b->buf) return -1;
    memset(b->buf->data, 0, sizeof(float) * (xp + scratch + wide));
    b->xp = b->buf->data;
    b->scratch = b->xp + xp;
    b->wide = wide ? b->scratch + scratch : NULL;
    return 0;
}

/* Each part's images, one after another, on the part's own buffers. */
static void run_parts(void *ctx, int64_t part, int64_t part_end) {
    direct_job_t *j = ctx;
    for (; part < part_end; part++) {
        part_bufs_t b;
        if (part_bufs_new(j, &b) < 0) {
            j->failed = 1;
            return;
        }
        float *sum = !j->first   ? NULL
                     : part == 0 ? j->first
                                 : j->partial + (part - 1) * j->k * j->ocp;
        int64_t n0 = j->g.n * part / j->parts, n1 = j->g.n * (part + 1) / j->parts;
        for (int64_t n = n0; n < n1; n++) {
            pad_image(j, j->x, n, b.xp);
            j->image(j, n, n == n0, sum, &b);
        }
        psg_buffer_unref(&b.buf);
    }
}

/* ---- forward ---- */

/* Whether the forward pass tiles each output row on its own: then a tile's
 * window columns leave out the padding of the row's ends too, worth it when
 * the row splits into tiles of 6 pixels or more (14 with 8 channel vectors:
 * 8 + 6), not when it leaves small ones (14 with 4 vectors: 6 + 4 + 4). */
static bool tiles_per_row(int64_t ow, int v) {
    for (int64_t left = ow; left > 0;) {
        int r = tile_size(v, left);
        if (r < 6 && r < left) return false;
        left -= r;
    }
    return true;
}

/* The tiles of the output pixels [p0, p1) of one image, for window rows [kh0, kh1):
 * each tile's window rows and columns are the union of its pixels' rows and
 * columns inside the input. */
static void forward_tiles(const direct_job_t *j, const float *xp, float *yi, float *scratch, int v,
                          bool per_row, int64_t p0, int64_t p1, int64_t kh0, int64_t kh1,
                          tile_t *t) {
    const psg_nn_geom_t *g = &j->g;
    int64_t lo, hi, unused;
    for (int64_t p = p0; p < p1;) {
        int64_t oh = p / g->ow, ow = p % g->ow, left = per_row ? g->ow - ow : p1 - p;
        int R = tile_size(v, left);
        int64_t valid = R < left ? R : left, last = p + valid - 1;
        int64_t oh_last = last / g->ow, ow_last = oh_last == oh ? last % g->ow : g->ow - 1;
        taps_of_output(oh_last, g->sh, g->pt, g->h, g->kh, &lo, &unused);
        taps_of_output(oh, g->sh, g->pt, g->h, g->kh, &unused, &hi);
        t->kh0 = lo > kh0 ? lo : kh0;
        t->kh1 = hi < kh1 ? hi : kh1;
        if (t->kh1 < t->kh0) t->kh1 = t->kh0;
        taps_of_output(ow_last, g->sw, g->pl, g->w, g->kw, &lo, &unused);
        taps_of_output(oh_last == oh ? ow : 0, g->sw, g->pl, g->w, g->kw, &unused, &hi);
        t->j0 = lo * g->c;
        t->j1 = hi > lo ? hi * g->c : t->j0;
        for (int r = 0; r < R; r++) {
            int64_t q = r < valid ? p + r : p; /* past the end: a copy of the first */
            t->a[r] = xp + ((q / g->ow) * g->sh * j->wp + (q % g->ow) * g->sw) * g->c;
            t->out[r] = r < valid ? yi + q * j->ocp : scratch + r * VMAX * VL;
        }
        tile_of(true, R, v)(t);
        p += valid;
    }
}

/* One image's outputs yi (OH*OW, ocp) at pixels [p0, p1) and channels [oc0, oc1)
 * (whole tiles' channels) from its padded input xp. */
static void forward_image(const direct_job_t *j, const float *xp, float *yi, float *scratch,
                          int64_t p0, int64_t p1, int64_t oc0, int64_t oc1) {
    const psg_nn_geom_t *g = &j->g;
    int64_t row = g->kw * g->c;
    tile_t t = {.ldw = j->ocp, .rs = j->wp * g->c, .row = row};
    for (int64_t ocb = oc0; ocb < oc1; ocb += VTILE * VL) {
        int v = (int)((j->ocp - ocb) / VL < VTILE ? (j->ocp - ocb) / VL : VTILE);
        int64_t khb = W_BLOCK_BYTES / (row * v * VL * (int64_t)sizeof(float));
        if (khb < 1) khb = 1;
        t.b = j->w + ocb;
        bool per_row = tiles_per_row(g->ow, v);
        for (int64_t kh0 = 0; kh0 < g->kh; kh0 += khb) {
            t.accumulate = kh0 > 0;
            forward_tiles(j, xp, yi + ocb, scratch, v, per_row, p0, p1, kh0,
                          kh0 + khb < g->kh ? kh0 + khb : g->kh, &t);
        }
    }
}

/* Image n of the forward pass, padded in b->xp. */
static void forward_of_image(direct_job_t *j, int64_t n, bool first, float *sum,
                             const part_bufs_t *b) {
    (void)first;
    (void)sum;
    const psg_nn_geom_t *g = &j->g, *pg = j->ep ? j->ep->pool : NULL;
    int64_t npix = g->oh * g->ow;
    float *y = pg ? b->wide : j->y + n * npix * g->oc; /* the image's (OH * OW, OC) outputs */
    forward_image(j, b->xp, b->wide ? b->wide : y, b->scratch, 0, npix, 0, j->ocp);
    for (int64_t p = 0; b->wide && j->ocp != g->oc && p < npix; p++) /* rows of OC floats */
        memmove(y + p * g->oc, b->wide + p * j->ocp, sizeof(float) * (size_t)g->oc);
    if (!j->ep) return;
    psg_conv_epilogue_rows(j->ep, y, npix, g->oc); /* while the image is in cache */
    if (pg) {
        psg_nn_geom_t one = *pg;
        one.n = 1;
        psg_max_pool_rows(&one, y, j->y + n * pg->oh * pg->ow * g->oc, 0, pg->oh);
    }
}

/* The forward pass of fewer images than threads: all of them padded at once, then, a
 * tile's channels at a time, bands of output rows of each image in parallel (whole
 * images left threads idle; one parallel pass over all the channels waited, under load,
 * on a descheduled thread's half, where a pass a channel block lets the others take
 * its share of the next). */
typedef struct {
    const direct_job_t *j;
    float *xp;     /* (N, hp, wp, C): the padded images */
    float *wide;   /* (N, OH*OW, ocp) when OC is not whole vectors, else NULL */
    int64_t bands; /* of each image */
    int64_t oc0;   /* the pass's channels: [oc0, oc0 + VTILE * VL) */
} rows_job_t;

static void forward_bands(void *ctx, int64_t u0, int64_t u1) {
    const rows_job_t *r = ctx;
    const direct_job_t *j = r->j;
    const psg_nn_geom_t *g = &j->g;
    int64_t npix = g->oh * g->ow;
    float scratch[RMAX * VMAX * VL];
    for (int64_t u = u0; u < u1; u++) {
        int64_t n = u / r->bands, band = u % r->bands;
        int64_t p0 = g->oh * band / r->bands * g->ow, p1 = g->oh * (band + 1) / r->bands * g->ow;
        int64_t oc1 = r->oc0 + VTILE * VL < j->ocp ? r->oc0 + VTILE * VL : j->ocp;
        float *yi = r->wide ? r->wide + n * npix * j->ocp : j->y + n * npix * g->oc;
        forward_image(j, r->xp + n * j->hp * j->wp * g->c, yi, scratch, p0, p1, r->oc0, oc1);
        /* the band's channels are final: the epilogue while they are in cache */
        if (j->ep && !r->wide)
            psg_conv_epilogue_block(j->ep, yi + p0 * g->oc, p1 - p0, g->oc, r->oc0, oc1);
    }
}

static int forward_rows(psg_threadpool_t *pool, direct_job_t *j) {
    PSG_ASSERT(!j->ep || !j->ep->pool); /* pooled by the caller (psg_conv_direct_pools) */
    const psg_nn_geom_t *g = &j->g;
    int64_t threads = psg_threadpool_size(pool), img = j->hp * j->wp * g->c;
    size_t wide = j->ocp != g->oc ? (size_t)(g->n * g->oh * g->ow * j->ocp) : 0;
    psg_buffer_t *buf = psg_buffer_new(sizeof(float) * ((size_t)(g->n * img) + wide));
    if (!buf) return psg_error_set("out of memory for the padded images");
    rows_job_t r = {.j = j, .xp = buf->data, .wide = wide ? (float *)buf->data + g->n * img : NULL};
    memset(r.xp, 0, sizeof(float) * (size_t)(g->n * img));
    for (int64_t n = 0; n < g->n; n++) pad_image(j, j->x, n, r.xp + n * img);
    r.bands = (threads + g->n - 1) / g->n;
    if (r.bands > g->oh) r.bands = g->oh;
    for (r.oc0 = 0; r.oc0 < j->ocp; r.oc0 += VTILE * VL)
        psg_parallel_for(pool, g->n * r.bands, 1, forward_bands, &r);
    for (int64_t p = 0; r.wide && p < g->n * g->oh * g->ow; p++)
        memcpy(j->y + p * g->oc, r.wide + p * j->ocp, sizeof(float) * (size_t)g->oc);
    if (j->ep && r.wide) psg_conv_epilogue(pool, j->ep, j->y, g->n * g->oh * g->ow, g->oc);
    psg_buffer_unref(&buf);
    return 0;
}

int psg_conv_direct_forward(psg_threadpool_t *pool, const psg_nn_geom_t *g, const float *x,
                            const float *w, const psg_conv_epilogue_t *ep, float *y) {
    direct_job_t j;
    job_init(&j, pool, g, x, forward_of_image);
    j.y = y;
    j.ep = ep;
    j.w = w;
    psg_buffer_t *wb = NULL;
    if (j.ocp != g->oc) { /* the filter with OC padded to whole vectors */
        wb = psg_buffer_new(sizeof(float) * (size_t)(j.k * j.ocp));
        if (!wb) return psg_error_set("out of memory for the padded filter");
        float *wp = wb->data;
        for (int64_t k = 0; k < j.k; k++) {
            memcpy(wp + k * j.ocp, w + k * g->oc, sizeof(float) * (size_t)g->oc);
            memset(wp + k * j.ocp + g->oc, 0, sizeof(float) * (size_t)(j.ocp - g->oc));
        }
        j.w = wp;
    }
    int rc = 0;
    if (g->n < psg_threadpool_size(pool))
        rc = forward_rows(pool, &j);
    else {
        psg_parallel_for(pool, j.parts, 1, run_parts, &j);
        if (j.failed) rc = psg_error_set("out of memory for the padded image");
    }
    psg_buffer_unref(&wb);
    return rc;
}

/* ---- filter gradient ---- */

/* The output pixels a tile of filter rows [k0, k1) reads inside the input:
 * the union of its rows' ranges. */
static void tile_outputs(const direct_job_t *j, int64_t k0, int64_t k1, tile_t *t) {
    const psg_nn_geom_t *g = &j->g;
    t->oh0 = t->ow0 = INT64_MAX;
    t->oh1 = t->ow1 = 0;
    for (int64_t k = k0; k < k1; k++) {
        int64_t kh = k / (g->kw * g->c), kw = k / g->c % g->kw, lo, hi;
        outputs_of_tap(kh, g->sh, g->pt, g->h, g->oh, &lo, &hi);
        if (lo < hi && lo < t->oh0) t->oh0 = lo;
        if (hi > t->oh1) t->oh1 = hi;
        outputs_of_tap(kw, g->sw, g->pl, g->w, g->ow, &lo, &hi);
        if (lo < hi && lo < t->ow0) t->ow0 = lo;
        if (hi > t->ow1) t->ow1 = hi;
    }
    if (t->oh0 > t->oh1) t->oh0 = t->oh1;
    if (t->ow0 > t->ow1) t->ow0 = t->ow1;
}

/* Adds image n's filter gradient to dwp (K, ocp), or writes it when first.
 * Tiles stay inside one window row's KW * C filter rows when C is not
 * small: their output rows leave out all of the padding, their columns all
 * but where a tile straddles two cells, and a row (conv2: 160 filter rows)
 * leaves one short tile where single cells (32) left two. */
static void filter_image(const direct_job_t *j, const float *xp, const float *dyi, float *dwp,
                         bool first, float *scratch) {
    const psg_nn_geom_t *g = &j->g;
    tile_t t = {.ldw = j->ocp,
                .xs_h = g->sh * j->wp * g->c,
                .xs_w = g->sw * g->c,
                .dy_rs = g->ow * j->ocp,
                .accumulate = !first};
    int64_t segment = g->c >= 8 ? g->kw * g->c : j->k;
    for (int64_t ocb = 0; ocb < j->ocp; ocb += VTILE * VL) {
        int v = (int)((j->ocp - ocb) / VL < VTILE ? (j->ocp - ocb) / VL : VTILE);
        t.b = dyi + ocb;
        for (int64_t s0 = 0; s0 < j->k; s0 += segment) {
            for (int64_t k0 = s0; k0 < s0 + segment;) {
                int R = tile_size(v, s0 + segment - k0);
                int64_t k1 = k0 + R < s0 + segment ? k0 + R : s0 + segment;
                for (int r = 0; r < R; r++) {
                    int64_t k = k0 + r < k1 ? k0 + r : k0;
                    t.a[r] = xp + j->offset[k];
                    t.out[r] = k0 + r < k1 ? dwp + k * j->ocp + ocb : scratch + r * VMAX * VL;
                }
                tile_outputs(j, k0, k1, &t);
                tile_of(false, R, v)(&t);
                k0 += R;
            }
        }
    }
}

/* Image n's filter gradient, written to sum when first, else added. */
static void filter_of_image(direct_job_t *j, int64_t n, bool first, float *sum,
                            const part_bufs_t *b) {
    const psg_nn_geom_t *g = &j->g;
    int64_t npix = g->oh * g->ow;
    const float *dy = j->dy + n * npix * g->oc;
    for (int64_t p = 0; b->wide && p < npix; p++) /* the channels past OC stay zero */
        memcpy(b->wide + p * j->ocp, dy + p * g->oc, sizeof(float) * (size_t)g->oc);
    filter_image(j, b->xp, b->wide ? b->wide : dy, sum, first, b->scratch);
}

int psg_conv_direct_filter(psg_threadpool_t *pool, const psg_nn_geom_t *g, const float *x,
                           const float *dy, float *dw) {
    direct_job_t j;
    job_init(&j, pool, g, x, filter_of_image);
    j.dy = dy;
    /* part 0 sums into dw itself when its rows are OC wide, the others into their own */
    bool into_dw = j.ocp == g->oc;
    int64_t nw = j.k * j.ocp, own = into_dw ? j.parts - 1 : j.parts;
    psg_buffer_t *buf =
        psg_buffer_new(sizeof(int64_t) * (size_t)j.k + sizeof(float) * (size_t)(own * nw));
    if (!buf) return psg_error_set("out of memory for the filter gradient's partial sums");
    int64_t *offset = buf->data;
    for (int64_t kh = 0, k = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++)
            for (int64_t c = 0; c < g->c; c++) offset[k++] = (kh * j.wp + kw) * g->c + c;
    j.offset = offset;
    float *sums = (float *)(offset + j.k);
    j.first = into_dw ? dw : sums;
    j.partial = into_dw ? sums : sums + nw;
    psg_parallel_for(pool, j.parts, 1, run_parts, &j);
    if (!j.failed) {
        for (int64_t k = 0; k < j.k; k++) {
            float *restrict out = dw + k * g->oc;
            if (!into_dw) memcpy(out, j.first + k * j.ocp, sizeof(float) * (size_t)g->oc);
            for (int64_t p = 1; p < j.parts; p++) {
                const float *restrict in = j.partial + (p - 1) * nw + k * j.ocp;
                for (int64_t o = 0; o < g->oc; o++) out[o] += in[o];
            }
        }
    }
    psg_buffer_unref(&buf);
    return j.failed ? psg_error_set("out of memory for the padded image") : 0;
}
