/* CPU kernels of the matrix products: MatMul through psg_gemm_f32 (bf16 and
 * f16 through f32 copies: the reference of the GPU's 16-bit GEMM), and the
 * fused Dense layer (bias and ReLU applied to each slice of rows right after
 * its GEMM, while it is in cache) with its backprop (ReLU mask and bias
 * gradient in one pass). Not convolution (the nn ops). */
#include "ops/math_setup.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/half.h"
#include "ops/cpu/math.h"
#include "ops/params.h"
#include "psgraph/error.h"

#include <string.h>

/* Below this many flops one thread does the whole product (as psg_gemm_f32). */
#define DENSE_SPLIT_FLOPS 2e6

int psg_cpu_matmul(psg_kernel_ctx_t *c) {
    const psg_tensor_t *a = c->inputs[0], *b = c->inputs[1];
    if (psg_dtype_is_half(a->dtype)) return psg_cpu_run_as_f32(c, psg_cpu_matmul);
    psg_matmul_setup_t s;
    if (psg_matmul_setup(c, &s) < 0) return -1;
    psg_tensor_t *out = s.out;
    bool ta = s.ta, tb = s.tb;
    int64_t M = s.M, N = s.N, K = s.K;
    if (M == 0 || N == 0) return 0;
    if (K == 0) {
        memset(out->data, 0, psg_tensor_nbytes(out));
        return 0;
    }
    psg_gemm_f32(c->pool, ta, tb, M, N, K, 1.0f, psg_tensor_f32(a), a->shape.dims[1],
                 psg_tensor_f32(b), b->shape.dims[1], 0.0f, psg_tensor_f32(out), N);
    return 0;
}

typedef struct {
    const float *x; /* x is (N, K) */
    const float *w; /* w is (K, M) */
    const float *b; /* b is (M) */
    float *y;       /* y is (N, M) */
    int64_t N, K, M;
    bool relu;
} dense_job_t;

static void dense_relu(float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

/* Rows [r0, r1): y = bias, y += x w (GEMM with beta 1), then ReLU, while the
 * slice is still in cache. */
static void dense_rows(void *ctx, int64_t r0, int64_t r1) {
    const dense_job_t *j = ctx;
    int64_t M = j->M;
    float *y = j->y + r0 * M;
    for (int64_t r = 0; r < r1 - r0; r++) memcpy(y + r * M, j->b, sizeof(float) * (size_t)M);
    if (j->K > 0)
        psg_gemm_f32(NULL, false, false, r1 - r0, M, j->K, 1.0f, j->x + r0 * j->K, j->K, j->w, M,
                     1.0f, y, M);
    if (j->relu) dense_relu(y, (r1 - r0) * M);
}

int psg_cpu_dense(psg_kernel_ctx_t *c) {
    const psg_tensor_t *x = c->inputs[0], *w = c->inputs[1], *b = c->inputs[2];
    psg_tensor_t *out = psg_kernel_alloc_output(c, 0);
    if (!out) return -1;
    dense_job_t j = {psg_tensor_f32(x), psg_tensor_f32(w),
                     psg_tensor_f32(b), psg_tensor_f32(out),
                     x->shape.dims[0],  x->shape.dims[1],
                     w->shape.dims[1],  ((const psg_matmul_params_t *)psg_kernel_params(c))->relu};
    if (j.N == 0 || j.M == 0) return 0;
    int threads = psg_threadpool_size(c->pool);
    double flops = 2.0 * (double)j.N * (double)j.M * (double)j.K;
    if (threads == 1 || flops < DENSE_SPLIT_FLOPS) {
        dense_rows(&j, 0, j.N);
    } else if (j.N >= 8 * (int64_t)threads) {
        /* one slice of rows per thread: each does bias, GEMM and ReLU on its own */
        psg_parallel_for(c->pool, j.N, (j.N + threads - 1) / threads, dense_rows, &j);
    } else {
        /* few rows: let psg_gemm_f32 split the columns, then one ReLU pass */
        for (int64_t r = 0; r < j.N; r++) memcpy(j.y + r * j.M, j.b, sizeof(float) * (size_t)j.M);
        psg_gemm_f32(c->pool, false, false, j.N, j.M, j.K, 1.0f, j.x, j.K, j.w, j.M, 1.0f, j.y,
                     j.M);
        if (j.relu) dense_relu(j.y, j.N * j.M);
    }
    return 0;
}

typedef struct {
    const float *dy; /* dy is (N, M) */
    const float *y;  /* y is (N, M), Dense's output */
    float *dz;       /* dz is (N, M); NULL without ReLU (dz is dy) */
    float *db;       /* db is (M) */
    int64_t N, M;
} dense_back_job_t;

/* Columns [c0, c1): dz = dy * (y > 0) and db = the column sums of dz. */
static void dense_back_cols(void *ctx, int64_t c0, int64_t c1) {
    const dense_back_job_t *j = ctx;
    int64_t M = j->M, n = c1 - c0;
    float *restrict db = j->db + c0;
    for (int64_t k = 0; k < n; k++) db[k] = 0.0f;
    for (int64_t r = 0; r < j->N; r++) {
        const float *restrict dy = j->dy + r * M + c0;
        if (j->dz) {
            const float *restrict y = j->y + r * M + c0;
            float *restrict dz = j->dz + r * M + c0;
            for (int64_t k = 0; k < n; k++) {
                float v = y[k] > 0.0f ? dy[k] : 0.0f;
                dz[k] = v;
                db[k] += v;
            }
        } else {
            for (int64_t k = 0; k < n; k++) db[k] += dy[k];
        }
    }
}

int psg_cpu_dense_backprop(psg_kernel_ctx_t *c) {
    const psg_tensor_t *dy = c->inputs[0], *y = c->inputs[1];
    bool relu;
    psg_tensor_t *dz, *db;
    if (psg_dense_backprop_setup(c, &relu, &dz, &db) < 0) return -1;
    dense_back_job_t j = {psg_tensor_f32(dy), psg_tensor_f32(y), relu ? psg_tensor_f32(dz) : NULL,
                          psg_tensor_f32(db), dy->shape.dims[0], dy->shape.dims[1]};
    if (j.N * j.M < PSG_MATH_PARALLEL_MIN)
        dense_back_cols(&j, 0, j.M);
    else
        psg_parallel_for(c->pool, j.M, 32, dense_back_cols, &j);
    return 0;
}
