/* bench_conv: Conv2D forward, backprop-input and backprop-filter of the cnn's
 * two conv layers (batch 64; PSG_BENCH_THREADS threads, default 2) run as
 * psgraph ops, beside OpenBLAS's cblas_sgemm of the same GEMM size (as many
 * OpenBLAS threads) in the same run. Times are the median and the best of
 * REPS runs (the best is what a shared machine disturbs least); with one
 * thread they are the process's CPU time, which a busy machine's other
 * processes do not add to ("clock" in the JSON), else wall time.
 * One JSON line per result. Not a training benchmark. */
#include "ops/cpu/blas.h"
#include "psgraph/psgraph.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 20

static int threads = 2;

typedef struct {
    const char *name;
    int n, h, w, c, k, oc;
} layer_t;

static double now(void) {
    struct timespec ts;
    clock_gettime(threads == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double median, best;
} timing_t;

static timing_t summary(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return (timing_t){t[n / 2], t[0]};
}

static psg_tensor_t *random_tensor(const psg_shape_t *s, unsigned *seed) {
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, s);
    if (!t) return NULL;
    float *d = psg_tensor_f32(t);
    for (int64_t i = 0; i < psg_tensor_numel(t); i++) {
        *seed = *seed * 1103515245u + 12345u;
        d[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return t;
}

/* Seconds of one run of the callable. */
static timing_t time_callable(psg_callable_t *c, psg_tensor_t **feeds) {
    double t[REPS];
    for (int r = -3; r < REPS; r++) {
        psg_tensor_t *out = NULL;
        double t0 = now();
        if (psg_callable_run(c, feeds, &out) < 0) {
            fprintf(stderr, "bench_conv: %s\n", psg_error_message());
            exit(1);
        }
        if (r >= 0) t[r] = now() - t0;
        psg_tensor_destroy(&out);
    }
    return summary(t, REPS);
}

/* Seconds of cblas_sgemm: C (M, N) = op(A) op(B), inner dim K. */
static timing_t time_sgemm(bool ta, bool tb, int M, int N, int K, const float *A, const float *B,
                           float *C) {
    double t[REPS];
    for (int r = -3; r < REPS; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 0.0f, C, N);
        if (r >= 0) t[r] = now() - t0;
    }
    return summary(t, REPS);
}

static void bench_layer(const layer_t *L) {
    unsigned seed = 1;
    psg_shape_t sx = psg_shape_4d(L->n, L->h, L->w, L->c);
    psg_shape_t sw = psg_shape_4d(L->k, L->k, L->c, L->oc);
    psg_shape_t sy = psg_shape_4d(L->n, L->h, L->w, L->oc); /* SAME, stride 1 */
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t ph[3] = {psg_placeholder(g, "x", PSG_DT_F32, &sx),
                            psg_placeholder(g, "w", PSG_DT_F32, &sw),
                            psg_placeholder(g, "dy", PSG_DT_F32, &sy)};
    psg_endpoint_t ops[3] = {
        psg_conv2d(g, "forward", ph[0], ph[1], 1, 1, PSG_PADDING_SAME),
        psg_conv2d_backprop_input(g, "backprop_input", ph[0], ph[1], ph[2], 1, 1, PSG_PADDING_SAME),
        psg_conv2d_backprop_filter(g, "backprop_filter", ph[0], ph[1], ph[2], 1, 1,
                                   PSG_PADDING_SAME)};
    if (psg_graph_error(g)) {
        fprintf(stderr, "bench_conv: %s\n", psg_graph_error(g));
        exit(1);
    }
    psg_tensor_t *feeds[3] = {random_tensor(&sx, &seed), random_tensor(&sw, &seed),
                              random_tensor(&sy, &seed)};
    psg_session_options_t opt = {.num_threads = threads};
    psg_session_t *s = psg_session_new(g, &opt, NULL);
    int M = L->n * L->h * L->w, K = L->k * L->k * L->c, N = L->oc;
    double flops = 2.0 * M * N * K;
    /* A: the columns (M, K) or dy (M, OC); B: the filter (K, OC) or dy (M, OC) */
    size_t wide = (size_t)M * (size_t)(K > N ? K : N);
    float *A = malloc(sizeof(float) * wide), *B = malloc(sizeof(float) * wide);
    float *C = malloc(sizeof(float) * wide);
    for (size_t i = 0; i < wide; i++) A[i] = (float)(i % 7) * 0.1f, B[i] = (float)(i % 5) * 0.1f;
    static const char *const pass[3] = {"forward", "backprop_input", "backprop_filter"};
    for (int p = 0; p < 3; p++) {
        psg_callable_t *c = psg_session_make_callable(s, 3, ph, 1, &ops[p], 0, NULL);
        openblas_set_num_threads(1); /* psgraph splits over its own pool */
        timing_t t = time_callable(c, feeds);
        psg_callable_destroy(&c);
        openblas_set_num_threads(threads);
        timing_t tb;
        if (p == 0) /* (M, K) x (K, OC) */
            tb = time_sgemm(false, false, M, N, K, A, B, C);
        else if (p == 1) /* (M, OC) x (K, OC)^T */
            tb = time_sgemm(false, true, M, K, N, A, B, C);
        else /* (M, K)^T x (M, OC) */
            tb = time_sgemm(true, false, K, N, M, A, B, C);
        openblas_set_num_threads(1);
        printf("{\"bench\":\"conv\",\"layer\":\"%s\",\"pass\":\"%s\",\"batch\":%d,\"threads\":%d,"
               "\"input\":[%d,%d,%d,%d],\"filter\":[%d,%d,%d,%d],\"gemm_mnk\":[%d,%d,%d],"
               "\"ms\":%.3f,\"best_ms\":%.3f,\"gflops\":%.1f,\"best_gflops\":%.1f,"
               "\"openblas_ms\":%.3f,\"openblas_best_ms\":%.3f,\"openblas_gflops\":%.1f,"
               "\"ratio\":%.2f,\"best_ratio\":%.2f,\"clock\":\"%s\"}\n",
               L->name, pass[p], L->n, threads, L->n, L->h, L->w, L->c, L->k, L->k, L->c, L->oc,
               p == 2 ? K : M, p == 1 ? K : N,
               p == 0   ? K
               : p == 1 ? N
                        : M,
               t.median * 1e3, t.best * 1e3, flops / t.median * 1e-9, flops / t.best * 1e-9,
               tb.median * 1e3, tb.best * 1e3, flops / tb.median * 1e-9, tb.median / t.median,
               tb.best / t.best, threads == 1 ? "cpu" : "wall");
        fflush(stdout);
    }
    free(A);
    free(B);
    free(C);
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&feeds[i]);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

int main(void) {
    const char *env = getenv("PSG_BENCH_THREADS");
    if (env && atoi(env) > 0) threads = atoi(env);
    psg_blas_init(); /* the kernels psgraph uses, for the peer figure too */
    static const layer_t layers[] = {
        {"conv1", 64, 28, 28, 1, 5, 32},
        {"conv2", 64, 14, 14, 32, 5, 64},
    };
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) bench_layer(&layers[i]);
    return 0;
}
