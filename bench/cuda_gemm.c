/* bench_cuda_gemm: psgraph's MatMul on GPU 0 (a session running the node,
 * inputs already on the GPU) beside cublasSgemm called directly, in the same
 * run: GFLOP/s of each and their ratio, one JSON line per shape. Exits 0
 * with a "skipped" line when there is no GPU. */
#include "bench/cuda_bench.h"
#include <stdio.h>

#ifdef PSG_HAVE_CUDA
#include "ops/cuda/launch.h"

typedef struct {
    const char *workload;
    int64_t m, k, n;
    bool ta, tb;
} shape_t;

static const shape_t shapes[] = {
    {"mlp fc1", 128, 784, 256, false, false},
    {"cnn fc1", 64, 3136, 512, false, false},
    {"cnn fc1 dW", 3136, 64, 512, true, false},
    {"cnn fc1 dX", 64, 512, 3136, false, true},
    {"square 1024", 1024, 1024, 1024, false, false},
    {"square 4096", 4096, 4096, 4096, false, false},
};

static void run(int iters) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape_t *s = &shapes[i];
        psg_graph_t *g = psg_graph_new();
        psg_graph_push_device(g, "/device:GPU:0");
        psg_shape_t as = s->ta ? psg_shape_2d(s->k, s->m) : psg_shape_2d(s->m, s->k);
        psg_shape_t bs = s->tb ? psg_shape_2d(s->n, s->k) : psg_shape_2d(s->k, s->n);
        psg_endpoint_t y = psg_matmul(g, "y", psg_bench_input(g, "a", &as),
                                      psg_bench_input(g, "b", &bs), s->ta, s->tb);
        psg_graph_pop_device(g);
        double ours = psg_bench_gpu_seconds(g, y.node, iters);
        double peer = psg_cuda_peer_gemm_seconds(0, s->m, s->n, s->k, s->ta, s->tb, iters);
        char fields[160];
        snprintf(fields, sizeof fields, "\"workload\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld",
                 s->workload, (long long)s->m, (long long)s->k, (long long)s->n);
        psg_bench_gpu_report("cuda_gemm", fields, 2.0 * (double)s->m * (double)s->n * (double)s->k,
                             ours, "cublas", peer);
        psg_graph_destroy(&g);
    }
}
#else
static void (*const run)(int iters) = NULL;
#endif

int main(int argc, char **argv) {
    return psg_bench_gpu_main(argc, argv, "cuda_gemm", 50, run);
}
