/* bench_gemm: GFLOP/s of psgraph's MatMul (and fused Dense) through a
 * session, on 1 and 2 threads, beside cblas_sgemm called directly with
 * OpenBLAS's own threading, in the same run. One JSON line per result.
 * `bench_gemm peak`: only the 1024-cube, the machine's f32 peak as a tuned
 * sgemm reaches it (bench/peak.sh).
 * Not a training benchmark (bench/train does that). */
#include "ops/cpu/blas.h"
#include "psgraph/psgraph.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* OpenBLAS's own thread control (not in every cblas.h). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);

typedef struct {
    const char *workload;
    int64_t m, k, n;
    bool ta, tb;
    bool dense; /* the fused Dense op (bias + ReLU) instead of MatMul */
} shape_t;

static const shape_t shapes[] = {
    {"mlp fc1", 128, 784, 256, false, false, false},
    {"mlp fc1", 128, 784, 256, false, false, true},
    {"mlp fc1 dW", 784, 128, 256, true, false, false},
    {"mlp fc1 dX", 128, 256, 784, false, true, false},
    {"mlp fc2", 128, 256, 256, false, false, false},
    {"mlp fc2", 128, 256, 256, false, false, true},
    {"cnn fc1", 64, 3136, 512, false, false, false},
    {"cnn fc1 dW", 3136, 64, 512, true, false, false},
    {"cnn conv2 im2col", 12544, 800, 64, false, false, false},
    {"peak", 1024, 1024, 1024, false, false, false},
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static psg_tensor_t *random_tensor(int64_t r, int64_t c, unsigned *seed) {
    psg_shape_t s = psg_shape_2d(r, c);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &s);
    if (!t) return NULL;
    float *d = psg_tensor_f32(t);
    for (int64_t i = 0; i < r * c; i++) {
        *seed = *seed * 1103515245u + 12345u;
        d[i] = (float)((*seed >> 9) & 0xffff) / 65536.0f - 0.5f;
    }
    return t;
}

/* Runs fn until min_s has passed (at least 3 times, after 2 warm-up runs);
 * returns seconds per call, or -1 if a call fails. */
typedef int (*call_fn)(void *ctx);
static double time_calls(call_fn fn, void *ctx, double min_s) {
    for (int i = 0; i < 2; i++)
        if (fn(ctx) < 0) return -1;
    int n = 0;
    double t0 = now(), t;
    do {
        if (fn(ctx) < 0) return -1;
        n++;
        t = now() - t0;
    } while (t < min_s || n < 3);
    return t / n;
}

typedef struct {
    psg_callable_t *c;
    psg_tensor_t *feeds[3];
} graph_ctx_t;

static int run_graph(void *vctx) {
    graph_ctx_t *g = vctx;
    psg_tensor_t *out = NULL;
    int rc = psg_callable_run(g->c, g->feeds, &out);
    psg_tensor_destroy(&out);
    return rc;
}

typedef struct {
    const shape_t *s;
    const float *a, *b;
    float *c;
} blas_ctx_t;

static int run_blas(void *vctx) {
    blas_ctx_t *b = vctx;
    const shape_t *s = b->s;
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                (int)s->m, (int)s->n, (int)s->k, 1.0f, b->a, (int)(s->ta ? s->m : s->k), b->b,
                (int)(s->tb ? s->k : s->n), 0.0f, b->c, (int)s->n);
    return 0;
}

/* Seconds per call of psgraph's op for shape s on `threads` threads. */
static double time_psgraph(const shape_t *s, int threads, psg_tensor_t *a, psg_tensor_t *b,
                           psg_tensor_t *bias) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t ph[3] = {psg_placeholder(g, "a", PSG_DT_F32, &a->shape),
                            psg_placeholder(g, "b", PSG_DT_F32, &b->shape),
                            psg_placeholder(g, "bias", PSG_DT_F32, &bias->shape)};
    psg_endpoint_t y = s->dense ? psg_dense(g, "fc", ph[0], ph[1], ph[2], true)
                                : psg_matmul(g, "mm", ph[0], ph[1], s->ta, s->tb);
    psg_session_options_t opt = {.num_threads = threads};
    psg_session_t *sess = psg_endpoint_valid(y) ? psg_session_new(g, &opt, NULL) : NULL;
    int nf = s->dense ? 3 : 2;
    graph_ctx_t ctx = {sess ? psg_session_make_callable(sess, nf, ph, 1, &y, 0, NULL) : NULL,
                       {a, b, bias}};
    double t = ctx.c ? time_calls(run_graph, &ctx, 0.5) : -1;
    if (t < 0) fprintf(stderr, "bench_gemm: %s\n", psg_error_message());
    psg_callable_destroy(&ctx.c);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
    return t;
}

int main(int argc, char **argv) {
    psg_blas_init(); /* the kernels psgraph uses, for the peer figure too */
    unsigned seed = 1;
    char *cfg = openblas_get_config();
    const char *only = argc > 1 ? argv[1] : NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape_t *s = &shapes[i];
        if (only && strcmp(s->workload, only)) continue;
        psg_tensor_t *a = random_tensor(s->ta ? s->k : s->m, s->ta ? s->m : s->k, &seed);
        psg_tensor_t *b = random_tensor(s->tb ? s->n : s->k, s->tb ? s->k : s->n, &seed);
        psg_tensor_t *bias = random_tensor(1, s->n, &seed);
        float *c = malloc(sizeof(float) * (size_t)(s->m * s->n));
        if (!a || !b || !bias || !c) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            return 1;
        }
        psg_tensor_t *bias1 = psg_tensor_reshaped(bias, &(psg_shape_t){1, {s->n}});
        double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
        for (int threads = 1; threads <= 2; threads++) {
            /* psgraph keeps OpenBLAS at one thread and splits over its own pool */
            double tp = time_psgraph(s, threads, a, b, bias1);
            openblas_set_num_threads(threads);
            blas_ctx_t bc = {s, psg_tensor_f32(a), psg_tensor_f32(b), c};
            double tb = time_calls(run_blas, &bc, 0.5);
            openblas_set_num_threads(1);
            if (tp < 0) return 1;
            double gp = flops / tp * 1e-9, gb = flops / tb * 1e-9;
            printf("{\"bench\":\"gemm\",\"workload\":\"%s\",\"op\":\"%s\",\"m\":%lld,\"k\":%lld,"
                   "\"n\":%lld,\"transpose_a\":%s,\"transpose_b\":%s,\"threads\":%d,"
                   "\"psgraph_gflops\":%.1f,\"openblas_gflops\":%.1f,\"ratio\":%.3f,"
                   "\"psgraph_us\":%.1f,\"openblas_us\":%.1f,\"openblas\":\"%s\"}\n",
                   s->workload, s->dense ? "Dense+bias+relu" : "MatMul", (long long)s->m,
                   (long long)s->k, (long long)s->n, s->ta ? "true" : "false",
                   s->tb ? "true" : "false", threads, gp, gb, gp / gb, tp * 1e6, tb * 1e6,
                   cfg ? cfg : "?");
            fflush(stdout);
        }
        free(c);
        psg_tensor_destroy(&bias1);
        psg_tensor_destroy(&a);
        psg_tensor_destroy(&b);
        psg_tensor_destroy(&bias);
    }
    return 0;
}
