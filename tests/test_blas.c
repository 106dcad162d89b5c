/* OpenBLAS's setup (ops/cpu/blas.c): which kernels replace a generic
 * fallback, that on this CPU the kernels in use are the ones it runs, and
 * that GEMMs on them match a plain loop. */
#include "ops/cpu/blas.h"
#include "ops/cpu/gemm.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void test_pick(void) {
    CHECK(!strcmp(psg_blas_pick_core("Prescott", true, true), "SkylakeX"));
    CHECK(!strcmp(psg_blas_pick_core("prescott", true, false), "Haswell"));
    CHECK(!strcmp(psg_blas_pick_core("Nehalem", true, false), "Haswell"));
    CHECK(psg_blas_pick_core("Prescott", false, false) == NULL); /* an SSE-only CPU keeps it */
    CHECK(psg_blas_pick_core("Zen", true, false) == NULL);       /* a known core is kept */
    CHECK(psg_blas_pick_core("Cooperlake", true, true) == NULL);
    CHECK(psg_blas_pick_core("Haswell", true, true) == NULL);
    CHECK(psg_blas_pick_core(NULL, true, true) == NULL);
}

/* Run before OpenBLAS's first use: the core it chose at load is switched
 * when it is a generic one and the CPU has AVX2 (the Prescott fallback ran
 * this machine's GEMMs at a fifth of their speed). */
static void test_core_fits_cpu(const char *env_core) {
    const char *core = psg_blas_core();
    printf("openblas core: %s (OPENBLAS_CORETYPE at start: %s)\n", core,
           env_core ? env_core : "unset");
    CHECK(core && *core);
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (env_core) {
        CHECK(getenv("OPENBLAS_CORETYPE") && !strcmp(getenv("OPENBLAS_CORETYPE"), env_core));
    } else if (avx2) {
        CHECK(psg_blas_pick_core(core, true, true) == NULL);
        CHECK(strcasecmp(core, "Prescott") != 0);
    }
}

/* C = A B on the kernels in use against a double loop, odd sizes, both
 * transposes, split over 2 threads. */
static void test_gemm_matches_loop(void) {
    enum { M = 67, N = 45, K = 131 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c = malloc(sizeof(float) * M * N);
    CHECK(a && b && c);
    unsigned s = 3;
    for (int i = 0; i < M * K; i++) a[i] = (float)(rand_r(&s) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < K * N; i++) b[i] = (float)(rand_r(&s) % 13) / 6.0f - 1.0f;
    psg_threadpool_t *pool = psg_threadpool_new(2);
    CHECK(pool != NULL);
    for (int t = 0; t < 2; t++) {
        /* t = 1: the same product with A given as (K, M), transposed */
        float *at = NULL;
        if (t == 1) {
            at = malloc(sizeof(float) * M * K);
            CHECK(at != NULL);
            for (int i = 0; i < M; i++)
                for (int k = 0; k < K; k++) at[k * M + i] = a[i * K + k];
        }
        psg_gemm_f32(pool, t == 1, false, M, N, K, 1.0f, t ? at : a, t ? M : K, b, N, 0.0f, c, N);
        double worst = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double ref = 0;
                for (int k = 0; k < K; k++) ref += (double)a[i * K + k] * b[k * N + j];
                double d = ref - c[i * N + j];
                if (d < 0) d = -d;
                if (d > worst) worst = d;
            }
        CHECK(worst < 1e-3);
        free(at);
    }
    psg_threadpool_destroy(&pool);
    free(a);
    free(b);
    free(c);
}

int main(void) {
    const char *env = getenv("OPENBLAS_CORETYPE");
    char *env_core = env ? strdup(env) : NULL;
    test_core_fits_cpu(env_core); /* first: nothing has used OpenBLAS yet */
    printf("%s test_core_fits_cpu\n", psg_test_failures ? "FAIL" : "ok  ");
    RUN_TEST(test_pick);
    RUN_TEST(test_gemm_matches_loop);
    free(env_core);
    return psg_test_summary();
}
