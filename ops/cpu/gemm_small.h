/* A GEMM of ours for few rows (a served batch through a fully connected layer):
 * C = alpha * A B + beta * C with A (M, K) and B (K, N) row-major read where they
 * lie, no packed copy. OpenBLAS packs B anew for every call, which for M = 8 and a
 * 3136 x 512 B (the cnn's fc1) cost twice its products. Not the general GEMM
 * (gemm.h, which calls this one for few rows). */
#ifndef PSGRAPH_OPS_CPU_GEMM_SMALL_H
#define PSGRAPH_OPS_CPU_GEMM_SMALL_H

#include <stdbool.h>
#include <stdint.h>

/* The most rows psg_gemm_small_f32 takes: past it OpenBLAS's packing pays for itself. */
#define PSG_GEMM_SMALL_MAX_M 16

/* Whether psg_gemm_small_f32 takes a product of M rows, N columns, op(A) / op(B)
 * transposed or not: M in [1, PSG_GEMM_SMALL_MAX_M], neither transposed, N >= 16. */
bool psg_gemm_small_applies(bool trans_a, bool trans_b, int64_t M, int64_t N);

/* C = alpha * A B + beta * C, row-major, one thread.
 * A is (M, K) with lda >= K, B is (K, N) with ldb >= N, C is (M, N) with ldc >= N;
 * M <= PSG_GEMM_SMALL_MAX_M. With beta 0, C is only written (NaN in it is not read).
 * Each C element sums its K products in order, fused multiply-adds where the CPU
 * has them (OpenBLAS's rounding differs by float rounding only). */
void psg_gemm_small_f32(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

#endif
