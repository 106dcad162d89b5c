/* psg_gemm_f32: cblas_sgemm per slice of rows (or columns) on the pool; a slice of
 * few rows goes to psg_gemm_small_f32 (no packing of B). */
#include "ops/cpu/gemm.h"

#include "ops/cpu/blas.h"
#include "ops/cpu/gemm_small.h"

#include <cblas.h>

typedef struct {
    bool ta, tb, split_rows;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
} gemm_job_t;

static void gemm_slice(void *ctx, int64_t begin, int64_t end) {
    const gemm_job_t *j = ctx;
    enum CBLAS_TRANSPOSE ta = j->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = j->tb ? CblasTrans : CblasNoTrans;
    if (j->split_rows) {
        /* rows [begin, end) of op(A) and C */
        const float *a = j->ta ? j->A + begin : j->A + begin * j->lda;
        if (psg_gemm_small_applies(j->ta, j->tb, end - begin, j->N)) {
            psg_gemm_small_f32(end - begin, j->N, j->K, j->alpha, a, j->lda, j->B, j->ldb, j->beta,
                               j->C + begin * j->ldc, j->ldc);
            return;
        }
        cblas_sgemm(CblasRowMajor, ta, tb, (int)(end - begin), (int)j->N, (int)j->K, j->alpha, a,
                    (int)j->lda, j->B, (int)j->ldb, j->beta, j->C + begin * j->ldc, (int)j->ldc);
    } else {
        /* columns [begin, end) of op(B) and C */
        const float *b = j->tb ? j->B + begin * j->ldb : j->B + begin;
        if (psg_gemm_small_applies(j->ta, j->tb, j->M, end - begin)) {
            psg_gemm_small_f32(j->M, end - begin, j->K, j->alpha, j->A, j->lda, b, j->ldb, j->beta,
                               j->C + begin, j->ldc);
            return;
        }
        cblas_sgemm(CblasRowMajor, ta, tb, (int)j->M, (int)(end - begin), (int)j->K, j->alpha, j->A,
                    (int)j->lda, b, (int)j->ldb, j->beta, j->C + begin, (int)j->ldc);
    }
}

void psg_gemm_f32(psg_threadpool_t *pool, bool trans_a, bool trans_b, int64_t M, int64_t N,
                  int64_t K, float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    psg_blas_init();
    gemm_job_t j = {trans_a, trans_b, M >= N, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
    int threads = psg_threadpool_size(pool);
    /* Below ~1 MFLOP a split costs more than it saves. */
    if (threads == 1 || 2.0 * (double)M * (double)N * (double)K < 2e6) {
        gemm_slice(&j, 0, j.split_rows ? M : N);
        return;
    }
    int64_t n = j.split_rows ? M : N;
    int64_t grain = n / threads;
    psg_parallel_for(pool, n, grain > 0 ? grain : 1, gemm_slice, &j);
}
