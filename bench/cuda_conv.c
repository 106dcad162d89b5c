/* bench_cuda_conv: psgraph's Conv2D and its two gradients on GPU 0 (a
 * session running the node, inputs already on the GPU) beside cuDNN called
 * directly with its fastest algorithm, in the same run: GFLOP/s of each and
 * the ratio, one JSON line per shape and direction. Exits 0 with a
 * "skipped" line when there is no GPU. */
#include "bench/cuda_bench.h"
#include <stdio.h>

#ifdef PSG_HAVE_CUDA
#include "ops/cuda/launch.h"

typedef struct {
    const char *workload;
    int64_t n, h, w, c, k, oc; /* k x k, stride 1, SAME (odd k: even padding) */
} conv_t;

static const conv_t convs[] = {
    {"cnn conv1", 64, 28, 28, 1, 5, 32},
    {"cnn conv2", 64, 14, 14, 32, 5, 64},
    {"inception 3x3", 32, 35, 35, 64, 3, 96},
    {"inception 1x1", 32, 35, 35, 192, 1, 64},
};

static const char *const dirs[] = {"forward", "backprop_input", "backprop_filter"};

static void run(int iters) {
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        const conv_t *v = &convs[i];
        psg_cu_geom_t geo = {v->n, v->h, v->w, v->c, v->k,           v->k,          v->oc,
                             v->h, v->w, 1,    1,    (v->k - 1) / 2, (v->k - 1) / 2};
        for (int dir = 0; dir < 3; dir++) {
            psg_graph_t *g = psg_graph_new();
            psg_graph_push_device(g, "/device:GPU:0");
            psg_shape_t xs = psg_shape_4d(v->n, v->h, v->w, v->c);
            psg_shape_t ws = psg_shape_4d(v->k, v->k, v->c, v->oc);
            psg_shape_t ys = psg_shape_4d(v->n, v->h, v->w, v->oc);
            psg_endpoint_t x = psg_bench_input(g, "x", &xs), w = psg_bench_input(g, "w", &ws);
            psg_endpoint_t y;
            if (dir == 0)
                y = psg_conv2d(g, "y", x, w, 1, 1, PSG_PADDING_SAME);
            else if (dir == 1)
                y = psg_conv2d_backprop_input(g, "y", x, w, psg_bench_input(g, "dy", &ys), 1, 1,
                                              PSG_PADDING_SAME);
            else
                y = psg_conv2d_backprop_filter(g, "y", x, w, psg_bench_input(g, "dy", &ys), 1, 1,
                                               PSG_PADDING_SAME);
            psg_graph_pop_device(g);
            double ours = psg_bench_gpu_seconds(g, y.node, iters);
            double peer = psg_cuda_peer_conv_seconds(0, &geo, dir, iters);
            double flop = 2.0 * (double)(v->n * v->h * v->w * v->oc) * (double)(v->k * v->k * v->c);
            char fields[160];
            snprintf(fields, sizeof fields, "\"workload\":\"%s\",\"direction\":\"%s\"", v->workload,
                     dirs[dir]);
            psg_bench_gpu_report("cuda_conv", fields, flop, ours, "cudnn", peer);
            psg_graph_destroy(&g);
        }
    }
}
#else
static void (*const run)(int iters) = NULL;
#endif

int main(int argc, char **argv) {
    return psg_bench_gpu_main(argc, argv, "cuda_conv", 30, run);
}
