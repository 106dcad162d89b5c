/* The GEMM for few rows (ops/cpu/gemm_small.c) against OpenBLAS's sgemm and a
 * double loop: every row count it takes, column counts with and without a tail
 * of fewer than 16, inner dims across its blocks of B's rows, strides past the
 * matrices' widths, alpha and beta; psg_gemm_f32 at the cnn's fc1 product
 * (8 x 3136 times 3136 x 512) split over a pool. */
#include "ops/cpu/blas.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/gemm_small.h"
#include "tests/testutil.h"

#include <cblas.h>
#include <stdlib.h>

static float *random_floats(int64_t n, unsigned seed) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    CHECK(p != NULL);
    for (int64_t i = 0; p && i < n; i++) p[i] = (float)(rand_r(&seed) % 2001) / 1000.0f - 1.0f;
    return p;
}

/* max over C of |got - want| / (alpha's sum of |a||b| + |beta c|): the error
 * relative to the size of what the element sums, in double. */
static double worst_vs_loop(int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta, const float *C0,
                            const float *C, int64_t ldc) {
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)A[i * lda + k] * B[k * ldb + j];
                s += p;
                mag += fabs(p);
            }
            double c0 = beta == 0.0f ? 0.0 : (double)beta * C0[i * ldc + j];
            double want = alpha * s + c0, scale = fabs(alpha) * mag + fabs(c0);
            double d = fabs(C[i * ldc + j] - want) / (scale > 0 ? scale : 1.0);
            if (d > worst) worst = d;
        }
    return worst;
}

/* One product through psg_gemm_small_f32 and through cblas_sgemm: both within
 * 1e-5 of the loop, each other within 1e-5 of the largest |C|; the cells past
 * N in each row of C (ldc > N) untouched. */
static void check_product(int64_t M, int64_t N, int64_t K, float alpha, float beta, int64_t pad) {
    int64_t lda = K + pad, ldb = N + pad, ldc = N + pad;
    float *A = random_floats(M * lda, 1), *B = random_floats(K * ldb, 2);
    float *C0 = random_floats(M * ldc, 3), *C = malloc(sizeof(float) * (size_t)(M * ldc));
    float *R = malloc(sizeof(float) * (size_t)(M * ldc));
    CHECK(A && B && C0 && C && R);
    memcpy(C, C0, sizeof(float) * (size_t)(M * ldc));
    if (beta == 0.0f) /* beta 0: C's old values are not read, NaN included */
        for (int64_t i = 0; i < M * ldc; i++)
            if (i % ldc < N) C[i] = NAN;
    memcpy(R, C0, sizeof(float) * (size_t)(M * ldc));
    CHECK(psg_gemm_small_applies(false, false, M, N));
    psg_gemm_small_f32(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
                (int)lda, B, (int)ldb, beta, R, (int)ldc);
    double ours = worst_vs_loop(M, N, K, alpha, A, lda, B, ldb, beta, C0, C, ldc);
    double blas = worst_vs_loop(M, N, K, alpha, A, lda, B, ldb, beta, C0, R, ldc);
    double big = 0, diff = 0;
    int untouched = 1;
    for (int64_t i = 0; i < M * ldc; i++) {
        if (i % ldc >= N) {
            untouched &= C[i] == C0[i];
            continue;
        }
        if (fabs(R[i]) > big) big = fabs(R[i]);
        if (fabs(C[i] - R[i]) > diff) diff = fabs(C[i] - R[i]);
    }
    if (!(ours <= 1e-5 && blas <= 1e-5 && diff <= 1e-5 * big && untouched))
        printf("M %lld N %lld K %lld alpha %g beta %g pad %lld: ours %.3g openblas %.3g, "
               "max|ours - openblas| / max|C| %.3g\n",
               (long long)M, (long long)N, (long long)K, alpha, beta, (long long)pad, ours, blas,
               big > 0 ? diff / big : diff);
    CHECK(ours <= 1e-5);
    CHECK(blas <= 1e-5);
    CHECK(diff <= 1e-5 * big);
    CHECK(untouched);
    free(A);
    free(B);
    free(C0);
    free(C);
    free(R);
}

static void test_every_row_count(void) {
    for (int64_t M = 1; M <= PSG_GEMM_SMALL_MAX_M; M++) {
        check_product(M, 16, 37, 1.0f, 0.0f, 0);
        check_product(M, 45, 129, 1.0f, 1.0f, 3); /* a tail of 13 columns, strides past widths */
    }
}

static void test_inner_dims_and_scalars(void) {
    const int64_t ks[] = {1, 2, 511, 512, 513, 1100};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        check_product(8, 40, ks[i], 1.0f, 0.0f, 0);
        check_product(5, 24, ks[i], 0.5f, -2.0f, 1);
        check_product(16, 17, ks[i], -1.0f, 1.0f, 0);
    }
    check_product(3, 33, 0, 1.0f, 0.5f, 0); /* K = 0: C = beta C */
    check_product(8, 512, 3136, 1.0f, 1.0f, 0);
}

static void test_applies(void) {
    CHECK(psg_gemm_small_applies(false, false, 8, 512));
    CHECK(!psg_gemm_small_applies(true, false, 8, 512));
    CHECK(!psg_gemm_small_applies(false, true, 8, 512));
    CHECK(!psg_gemm_small_applies(false, false, PSG_GEMM_SMALL_MAX_M + 1, 512));
    CHECK(!psg_gemm_small_applies(false, false, 8, 15));
    CHECK(!psg_gemm_small_applies(false, false, 0, 512));
}

/* The served cnn's fc1 at batch 8 through psg_gemm_f32 on a pool of 2 (its
 * columns split, each slice on the small GEMM) and through one cblas_sgemm. */
static void test_fc1_through_the_pool(void) {
    enum { M = 8, N = 512, K = 3136 };
    float *x = random_floats(M * K, 4), *w = random_floats((int64_t)K * N, 5);
    float *y = malloc(sizeof(float) * M * N), *r = malloc(sizeof(float) * M * N);
    CHECK(x && w && y && r);
    psg_threadpool_t *pool = psg_threadpool_new(2);
    CHECK(pool != NULL);
    psg_gemm_f32(pool, false, false, M, N, K, 1.0f, x, K, w, N, 0.0f, y, N);
    psg_blas_init();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, x, K, w, N, 0.0f, r, N);
    double big = 0, diff = 0;
    for (int i = 0; i < M * N; i++) {
        if (fabs(r[i]) > big) big = fabs(r[i]);
        if (fabs(y[i] - r[i]) > diff) diff = fabs(y[i] - r[i]);
    }
    printf("fc1 8 x 3136 x 512: max|ours - openblas| / max|C| = %.3g\n", diff / big);
    CHECK(big > 0 && diff <= 1e-5 * big);
    psg_threadpool_destroy(&pool);
    free(x);
    free(w);
    free(y);
    free(r);
}

int main(void) {
    psg_blas_init();
    RUN_TEST(test_applies);
    RUN_TEST(test_every_row_count);
    RUN_TEST(test_inner_dims_and_scalars);
    RUN_TEST(test_fc1_through_the_pool);
    return psg_test_summary();
}
