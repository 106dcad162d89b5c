/* The one GEMM entry point of the CPU kernels: row-major sgemm through
 * OpenBLAS (or, for a slice of at most 16 rows, gemm_small.h's GEMM, which
 * does not pack B), split across psgraph's pool (OpenBLAS itself runs one
 * thread, so its threads never fight the executor's for the cores). */
#ifndef PSGRAPH_OPS_CPU_GEMM_H
#define PSGRAPH_OPS_CPU_GEMM_H

#include "psgraph/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

/* C = alpha * op(A) * op(B) + beta * C, row-major.
 * op(A) is (M,K): A is (M,K) with lda >= K, or (K,M) with lda >= M if trans_a.
 * op(B) is (K,N): B is (K,N) with ldb >= N, or (N,K) with ldb >= K if trans_b.
 * C is (M,N) with ldc >= N. Splits M (or N when M is small) over the pool. */
void psg_gemm_f32(psg_threadpool_t *pool, bool trans_a, bool trans_b, int64_t M, int64_t N,
                  int64_t K, float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float beta, float *C, int64_t ldc);

#endif
