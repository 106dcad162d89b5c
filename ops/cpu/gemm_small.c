/* psg_gemm_small_f32 (see gemm_small.h): passes over up to 512 columns of C whose sums
 * stay in a buffer of the stack; each pass walks B's rows 128 at a time, across all its
 * columns in blocks of 16, with tiles of up to 6 rows of A: 12 accumulators of 8 floats,
 * two loads of B and one broadcast of A a step, as in the direct convolution's tiles
 * (conv2d_direct.c). Each C element sums its products in k order (sums kept as floats
 * between steps: no rounding of their own). Not the general GEMM (gemm.c).
 * On this machine's EPYC (thread CPU time, 8 x 3136 times 3136 x 512, B in cache):
 * 0.58 ms against OpenBLAS's 0.78 (which packs B each call). */
#include "ops/cpu/gemm_small.h"
#include "ops/cpu/unroll.h"

#include <string.h>

#if defined(__FMA__)
#include <immintrin.h>
#endif

#define NB 16  /* columns of C per tile: two vectors of 8 floats */
#define NC 512 /* columns of C per pass over A: their sums (M, NC), 32 KB at most */
#define KB 128 /* rows of B per step of a pass */
#define KC 512 /* rows of B per copy of the last columns (fewer than NB): 32 KB */
#define RMAX 6 /* rows of A per tile */

/* v8_fma takes vectors by pointer: by value, their ABI differs without AVX. */
typedef float v8_t __attribute__((vector_size(32)));

/* *acc += *a * *b, fused where the CPU has FMA (ISO C mode never contracts a * b + c) */
static inline void v8_fma(v8_t *acc, const v8_t *a, const v8_t *b) {
#if defined(__FMA__)
    __m256 x, y, z;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    memcpy(&z, acc, sizeof z);
    z = _mm256_fmadd_ps(x, y, z);
    memcpy(acc, &z, sizeof z);
#else
    *acc += *a * *b;
#endif
}

/* acc's R rows (ldacc apart, NB floats each) += A's rows [0, R) (lda apart) times B's
 * rows [k0, k1) (ldb apart) at the block's columns; written, not added, when first. */
static inline __attribute__((always_inline)) void tile(int R, const float *a, int64_t lda,
                                                       const float *b, int64_t ldb, int64_t k0,
                                                       int64_t k1, float *acc, int64_t ldacc,
                                                       bool first) {
    v8_t c[RMAX][2];
    PSG_UNROLL for (int r = 0; r < R; r++) {
        if (first) {
            c[r][0] = (v8_t){0};
            c[r][1] = (v8_t){0};
        } else {
            memcpy(&c[r][0], acc + r * ldacc, sizeof(v8_t));
            memcpy(&c[r][1], acc + r * ldacc + 8, sizeof(v8_t));
        }
    }
    const float *bk = b + k0 * ldb;
    for (int64_t k = k0; k < k1; k++, bk += ldb) {
        v8_t b0, b1;
        memcpy(&b0, bk, sizeof(v8_t));
        memcpy(&b1, bk + 8, sizeof(v8_t));
#if defined(__AVX__)
        /* in registers: folded into each FMA, B's loads were 2R a step where 2 do */
        __asm__("" : "+x"(b0), "+x"(b1));
#endif
        __builtin_prefetch(bk + 2 * NB); /* this row's next blocks: the pass reads them next */
        PSG_UNROLL for (int r = 0; r < R; r++) {
            float s = a[r * lda + k];
            v8_t x = {s, s, s, s, s, s, s, s};
            v8_fma(&c[r][0], &x, &b0);
            v8_fma(&c[r][1], &x, &b1);
        }
    }
    PSG_UNROLL for (int r = 0; r < R; r++) {
        memcpy(acc + r * ldacc, &c[r][0], sizeof(v8_t));
        memcpy(acc + r * ldacc + 8, &c[r][1], sizeof(v8_t));
    }
}

typedef void (*tile_fn)(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t k0,
                        int64_t k1, float *acc, int64_t ldacc, bool first);

#define TILE(R)                                                                                    \
    static void tile_##R(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t k0,     \
                         int64_t k1, float *acc, int64_t ldacc, bool first) {                      \
        tile(R, a, lda, b, ldb, k0, k1, acc, ldacc, first);                                        \
    }
TILE(1)
TILE(2)
TILE(3)
TILE(4)
TILE(5)
TILE(6)
#undef TILE

static const tile_fn tiles[RMAX + 1] = {NULL, tile_1, tile_2, tile_3, tile_4, tile_5, tile_6};

bool psg_gemm_small_applies(bool trans_a, bool trans_b, int64_t M, int64_t N) {
    return !trans_a && !trans_b && M >= 1 && M <= PSG_GEMM_SMALL_MAX_M && N >= NB;
}

/* acc (M, nb * NB) = A (M, K) times the nb * NB columns of B at b (ldb apart), or added
 * to acc unless first. KB rows of B at a time across all the columns: KB streams through
 * B's rows, each row's columns read in order (a block's column of B read down its K rows
 * crossed a page every other row, where no prefetcher follows); tiles of rows evened
 * out (8 rows: 4 + 4, not 6 + 2) read the KB rows again from L1. */
static void pass(int64_t M, int64_t K, const float *A, int64_t lda, const float *b, int64_t ldb,
                 int64_t nb, float *acc, bool first) {
    int64_t ntiles = (M + RMAX - 1) / RMAX, rows = (M + ntiles - 1) / ntiles, ldacc = nb * NB;
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
        int64_t k1 = K - k0 < KB ? K : k0 + KB;
        for (int64_t j = 0; j < nb; j++)
            for (int64_t r0 = 0; r0 < M; r0 += rows) {
                int64_t R = M - r0 < rows ? M - r0 : rows;
                tiles[R](A + r0 * lda, lda, b + j * NB, ldb, k0, k1, acc + r0 * ldacc + j * NB,
                         ldacc, first && k0 == 0);
            }
    }
}

/* C's columns [n0, n0 + width) = alpha * acc + beta * C; acc is (M, width), ldacc apart */
static void write_cols(int64_t M, int64_t width, float alpha, const float *acc, int64_t ldacc,
                       float beta, float *C, int64_t ldc, int64_t n0) {
    for (int64_t r = 0; r < M; r++) {
        float *restrict c = C + r * ldc + n0;
        const float *restrict s = acc + r * ldacc;
        if (beta == 0.0f)
            for (int64_t i = 0; i < width; i++) c[i] = alpha * s[i];
        else
            for (int64_t i = 0; i < width; i++) c[i] = alpha * s[i] + beta * c[i];
    }
}

void psg_gemm_small_f32(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    float acc[PSG_GEMM_SMALL_MAX_M * NC];
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        memset(acc, 0, sizeof acc);
        for (int64_t n0 = 0; n0 < N; n0 += NC)
            write_cols(M, N - n0 < NC ? N - n0 : NC, alpha, acc, NC, beta, C, ldc, n0);
        return;
    }
    int64_t whole = N / NB * NB;
    for (int64_t n0 = 0; n0 < whole; n0 += NC) {
        int64_t nb = (whole - n0 < NC ? whole - n0 : NC) / NB;
        pass(M, K, A, lda, B + n0, ldb, nb, acc, true);
        write_cols(M, nb * NB, alpha, acc, nb * NB, beta, C, ldc, n0);
    }
    if (whole == N) return;
    /* the last columns, fewer than NB: B's KC rows at a time copied into a zero-padded block */
    int64_t width = N - whole;
    float panel[KC * NB];
    memset(panel, 0, sizeof panel);
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kn = K - k0 < KC ? K - k0 : KC;
        for (int64_t k = 0; k < kn; k++)
            memcpy(panel + k * NB, B + (k0 + k) * ldb + whole, sizeof(float) * (size_t)width);
        pass(M, kn, A + k0, lda, panel, NB, 1, acc, k0 == 0);
    }
    write_cols(M, width, alpha, acc, NB, beta, C, ldc, whole);
}
