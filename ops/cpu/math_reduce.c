/* CPU kernels of the math ops that work along axes: Sum/Mean (coalesced to
 * an (A, R, B) reduction when the axes allow, split over the pool), softmax,
 * log-softmax, sparse softmax cross-entropy, L2Loss, ArgMax, Concat, Slice.
 * Not elementwise ops (math.c) and not matrix products (matmul.c). */
#include "ops/math_setup.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/math.h"
#include "ops/params.h"
#include "psgraph/error.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Sum of n contiguous floats in eight lanes, so the loop vectorizes. */
static float sum_contig(const float *restrict x, int64_t n) {
    float lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) lane[k] += x[i + k];
    float s = 0;
    for (; i < n; i++) s += x[i];
    for (int k = 0; k < 8; k++) s += lane[k];
    return s;
}

/* ---- Sum / Mean ---- */

typedef struct {
    const float *x; /* x is (A, R, B) */
    float *o;       /* o is (A, B) */
    int64_t A, R, B;
    float scale;
    bool by_rows; /* the parallel range is over A (else over B) */
} reduce_job_t;

static void reduce_block(const reduce_job_t *j, int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    int64_t R = j->R, B = j->B, nb = b1 - b0;
    for (int64_t a = a0; a < a1; a++) {
        const float *x = j->x + a * R * B + b0;
        float *restrict o = j->o + a * B + b0;
        if (B == 1) {
            o[0] = sum_contig(x, R) * j->scale;
            continue;
        }
        for (int64_t b = 0; b < nb; b++) o[b] = x[b];
        for (int64_t r = 1; r < R; r++) {
            const float *restrict xr = x + r * B;
            for (int64_t b = 0; b < nb; b++) o[b] += xr[b];
        }
        if (j->scale != 1.0f)
            for (int64_t b = 0; b < nb; b++) o[b] *= j->scale;
    }
}

static void reduce_range(void *ctx, int64_t begin, int64_t end) {
    const reduce_job_t *j = ctx;
    if (j->by_rows)
        reduce_block(j, begin, end, 0, j->B);
    else
        reduce_block(j, 0, j->A, begin, end);
}

bool psg_math_reduce_as_arb(const psg_shape_t *s, const bool *reduced, int64_t *A, int64_t *R,
                            int64_t *B) {
    int64_t size[PSG_MAX_RANK];
    bool red[PSG_MAX_RANK];
    int n = 0;
    for (int i = 0; i < s->rank; i++) {
        if (s->dims[i] == 1) continue;
        if (n > 0 && red[n - 1] == reduced[i]) {
            size[n - 1] *= s->dims[i];
            continue;
        }
        size[n] = s->dims[i];
        red[n++] = reduced[i];
    }
    *A = *R = *B = 1;
    if (n == 0) return true;
    int k = 0;
    if (!red[k]) *A = size[k++];
    if (k < n && red[k]) *R = size[k++];
    if (k < n && !red[k]) *B = size[k++];
    return k == n;
}

int psg_cpu_reduce(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    psg_reduce_setup_t s;
    if (psg_reduce_setup(c, &s) < 0) return -1;
    psg_tensor_t *out = s.out;
    const bool *reduced = s.reduced, mean = s.mean;
    int64_t n = s.n, m = s.m;
    float scale = mean ? (m ? (float)((double)m / (double)n) : 0.0f) : 1.0f;
    if (n == 0) {
        /* the mean of nothing is NaN, as numpy says; the sum is 0 */
        for (int64_t i = 0; i < m; i++) psg_tensor_f32(out)[i] = mean ? NAN : 0.0f;
        return 0;
    }
    reduce_job_t j = {psg_tensor_f32(x), psg_tensor_f32(out), 1, 1, 1, scale, true};
    if (!psg_math_reduce_as_arb(&x->shape, reduced, &j.A, &j.R, &j.B)) {
        psg_shape_t keep = x->shape;
        for (int i = 0; i < keep.rank; i++)
            if (reduced[i]) keep.dims[i] = 1;
        psg_reduce_to_shape_f32(j.x, &x->shape, j.o, &keep);
        if (mean)
            for (int64_t i = 0; i < m; i++) j.o[i] *= scale;
        return 0;
    }
    if (n < PSG_MATH_PARALLEL_MIN) {
        reduce_block(&j, 0, j.A, 0, j.B);
    } else if (j.A >= 2) {
        int64_t grain = PSG_MATH_PARALLEL_MIN / 2 / (j.R * j.B);
        psg_parallel_for(c->pool, j.A, grain > 0 ? grain : 1, reduce_range, &j);
    } else {
        j.by_rows = false;
        int64_t grain = PSG_MATH_PARALLEL_MIN / 2 / j.R;
        psg_parallel_for(c->pool, j.B, grain > 16 ? grain : 16, reduce_range, &j);
    }
    return 0;
}

int psg_cpu_reduction_size(psg_kernel_ctx_t *c) {
    psg_tensor_t *out;
    int64_t count;
    if (psg_reduction_size_setup(c, &out, &count) < 0) return -1;
    psg_tensor_f32(out)[0] = (float)count;
    return 0;
}

/* ---- row-wise ops: softmax, log-softmax, cross-entropy, argmax ---- */

typedef struct {
    const float *x; /* x is (rows, C) */
    float *y;       /* y is (rows, C) */
    int64_t C;
    /* cross-entropy only */
    float *loss;        /* loss is (rows) */
    const void *labels; /* labels is (rows), i32 or i64 */
    bool labels_i64;
    int64_t *argmax; /* argmax is (rows) */
} rows_job_t;

static float row_max(const float *restrict x, int64_t C) {
    float m = -INFINITY;
    for (int64_t k = 0; k < C; k++) m = x[k] > m ? x[k] : m;
    return m;
}

/* y = exp(x - max); returns the sum of y. */
static float row_exp(const float *restrict x, float *restrict y, int64_t C, float max) {
    for (int64_t k = 0; k < C; k++) y[k] = expf(x[k] - max);
    return sum_contig(y, C);
}

static void softmax_rows(void *ctx, int64_t begin, int64_t end) {
    const rows_job_t *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * j->C;
        float *y = j->y + r * j->C;
        float inv = 1.0f / row_exp(x, y, j->C, row_max(x, j->C));
        for (int64_t k = 0; k < j->C; k++) y[k] *= inv;
    }
}

static void log_softmax_rows(void *ctx, int64_t begin, int64_t end) {
    const rows_job_t *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * j->C;
        float *y = j->y + r * j->C;
        float max = row_max(x, j->C);
        float lse = max + logf(row_exp(x, y, j->C, max));
        for (int64_t k = 0; k < j->C; k++) y[k] = x[k] - lse;
    }
}

static int64_t label_at(const rows_job_t *j, int64_t r) {
    return j->labels_i64 ? ((const int64_t *)j->labels)[r] : ((const int32_t *)j->labels)[r];
}

static void xent_rows(void *ctx, int64_t begin, int64_t end) {
    const rows_job_t *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * j->C;
        float *y = j->y + r * j->C;
        float max = row_max(x, j->C);
        float sum = row_exp(x, y, j->C, max);
        float inv = 1.0f / sum;
        int64_t label = label_at(j, r);
        j->loss[r] = logf(sum) + max - x[label];
        for (int64_t k = 0; k < j->C; k++) y[k] *= inv;
        y[label] -= 1.0f;
    }
}

static void argmax_rows(void *ctx, int64_t begin, int64_t end) {
    const rows_job_t *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * j->C;
        int64_t best = 0;
        for (int64_t k = 1; k < j->C; k++)
            if (x[k] > x[best]) best = k;
        j->argmax[r] = best;
    }
}

static void run_rows(psg_kernel_ctx_t *c, rows_job_t *j, int64_t rows, psg_range_fn fn) {
    if (rows * j->C < PSG_MATH_PARALLEL_MIN || rows < 2) {
        fn(j, 0, rows);
        return;
    }
    int64_t grain = PSG_MATH_PARALLEL_MIN / 4 / (j->C ? j->C : 1);
    psg_parallel_for(c->pool, rows, grain > 0 ? grain : 1, fn, j);
}

int psg_cpu_softmax(psg_kernel_ctx_t *c) {
    psg_rows_setup_t s;
    if (psg_rows_setup(c, &s) < 0) return -1;
    rows_job_t j = {.x = psg_tensor_f32(c->inputs[0]), .y = psg_tensor_f32(s.out), .C = s.C};
    if (j.C == 0) return 0;
    run_rows(c, &j, s.rows, s.log ? log_softmax_rows : softmax_rows);
    return 0;
}

int psg_cpu_sparse_xent(psg_kernel_ctx_t *c) {
    const psg_tensor_t *logits = c->inputs[0], *labels = c->inputs[1];
    int64_t N = logits->shape.dims[0], C = logits->shape.dims[1];
    rows_job_t j = {.x = psg_tensor_f32(logits),
                    .C = C,
                    .labels = labels->data,
                    .labels_i64 = labels->dtype == PSG_DT_I64};
    /* labels are checked before any work, so an error names the first bad row */
    for (int64_t r = 0; r < N; r++) {
        int64_t l = label_at(&j, r);
        if (l < 0 || l >= C)
            return psg_error_set("label %lld at row %lld is outside [0, %lld)", (long long)l,
                                 (long long)r, (long long)C);
    }
    psg_tensor_t *loss = psg_kernel_alloc_output(c, 0);
    psg_tensor_t *back = loss ? psg_kernel_alloc_output(c, 1) : NULL;
    if (!back) return -1;
    j.loss = psg_tensor_f32(loss);
    j.y = psg_tensor_f32(back);
    run_rows(c, &j, N, xent_rows);
    return 0;
}

int psg_cpu_argmax(psg_kernel_ctx_t *c) {
    psg_rows_setup_t s;
    if (psg_rows_setup(c, &s) < 0) return -1;
    rows_job_t j = {.x = psg_tensor_f32(c->inputs[0]), .C = s.C, .argmax = psg_tensor_i64(s.out)};
    if (j.C == 0) return psg_error_set("ArgMax over an empty axis");
    run_rows(c, &j, s.rows, argmax_rows);
    return 0;
}

int psg_cpu_l2_loss(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    const float *restrict d = psg_tensor_f32(x);
    int64_t n = psg_tensor_numel(x);
    double total = 0;
    /* float lanes per block of 1024 vectorize; blocks add up in double */
    for (int64_t i0 = 0; i0 < n; i0 += 1024) {
        int64_t i1 = i0 + 1024 < n ? i0 + 1024 : n;
        float lane[8] = {0};
        int64_t i = i0;
        for (; i + 8 <= i1; i += 8)
            for (int k = 0; k < 8; k++) lane[k] += d[i + k] * d[i + k];
        for (; i < i1; i++) lane[0] += d[i] * d[i];
        for (int k = 0; k < 8; k++) total += lane[k];
    }
    psg_tensor_f32(out)[0] = (float)(total / 2);
    return 0;
}

/* ---- Concat, Slice ---- */

int psg_cpu_concat(psg_kernel_ctx_t *c) {
    psg_concat_setup_t s;
    if (psg_concat_setup(c, &s) < 0) return -1;
    char *o = s.out->data;
    size_t at = 0;
    for (int k = 0; k < c->num_inputs; k++) {
        const psg_tensor_t *x = c->inputs[k];
        size_t row = psg_concat_row(&s, x);
        const char *src = x->data;
        for (int64_t r = 0; r < s.outer; r++)
            memcpy(o + (size_t)r * s.out_row + at, src + (size_t)r * row, row);
        at += row;
    }
    return 0;
}

/* Copies the block `size` (rank dims) from src at src_begin to dst at
 * dst_begin; src is (src_dims), dst is (dst_dims), both row-major. */
static void copy_block(size_t es, int rank, const int64_t *size, const char *src,
                       const int64_t *src_dims, const int64_t *src_begin, char *dst,
                       const int64_t *dst_dims, const int64_t *dst_begin) {
    int64_t ss[PSG_MAX_RANK], ds[PSG_MAX_RANK], idx[PSG_MAX_RANK] = {0};
    int64_t so = 0, doff = 0, rows = 1, s1 = 1, d1 = 1;
    for (int i = rank - 1; i >= 0; i--) {
        ss[i] = s1;
        ds[i] = d1;
        s1 *= src_dims[i];
        d1 *= dst_dims[i];
        so += src_begin[i] * ss[i];
        doff += dst_begin[i] * ds[i];
    }
    if (rank == 0) {
        memcpy(dst, src, es);
        return;
    }
    for (int i = 0; i < rank; i++)
        if (size[i] == 0) return;
    for (int i = 0; i + 1 < rank; i++) rows *= size[i];
    size_t run = (size_t)size[rank - 1] * es;
    for (int64_t r = 0; r < rows; r++) {
        memcpy(dst + (size_t)doff * es, src + (size_t)so * es, run);
        for (int d = rank - 2; d >= 0; d--) {
            so += ss[d];
            doff += ds[d];
            if (++idx[d] < size[d]) break;
            so -= ss[d] * idx[d];
            doff -= ds[d] * idx[d];
            idx[d] = 0;
        }
    }
}

int psg_cpu_slice(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    int64_t zero[PSG_MAX_RANK] = {0};
    copy_block(psg_dtype_size(x->dtype), x->shape.rank, out->shape.dims, x->data, x->shape.dims,
               psg_slice_begin(c->node), out->data, out->shape.dims, zero);
    return 0;
}

/* SliceGrad(dy, x): zeros of x's shape with dy placed at the slice. */
int psg_cpu_slice_grad(psg_kernel_ctx_t *c) {
    const psg_tensor_t *dy = c->inputs[0];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    memset(out->data, 0, psg_tensor_nbytes(out));
    int64_t zero[PSG_MAX_RANK] = {0};
    copy_block(psg_dtype_size(dy->dtype), dy->shape.rank, dy->shape.dims, dy->data, dy->shape.dims,
               zero, out->data, out->shape.dims, psg_slice_begin(c->node));
    return 0;
}
