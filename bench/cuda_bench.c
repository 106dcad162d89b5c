/* The shared part of the CUDA benchmarks (cuda_bench.h): inputs that live on
 * GPU 0 as variables, and timing through a session. Not a peer: the peers
 * (cuBLAS, cuDNN called directly) are in ops/cuda/blas.cu and cudnn.cu. */
#include "bench/cuda_bench.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int psg_bench_gpu_main(int argc, char **argv, const char *name, int default_iters,
                       void (*run)(int iters)) {
    bool help = argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (help || (argc > 1 && atoi(argv[1]) <= 0)) {
        fprintf(help ? stdout : stderr,
                "usage: bench_%s [ITERS]  (default %d; one JSON line a case, psgraph beside the "
                "CUDA library called directly; a \"skipped\" line without a GPU)\n",
                name, default_iters);
        return help ? 0 : 2;
    }
    if (psg_gpu_count() <= 0 || !run) {
        printf("{\"bench\":\"%s\",\"skipped\":\"%s\"}\n", name, psg_gpu_status());
        return 0;
    }
    run(argc > 1 ? atoi(argv[1]) : default_iters);
    return 0;
}

void psg_bench_gpu_report(const char *name, const char *fields, double flop, double ours,
                          const char *peer_name, double peer) {
    if (ours > 0 && peer > 0)
        printf("{\"bench\":\"%s\",%s,\"psgraph_gflops\":%.1f,\"%s_gflops\":%.1f,\"ratio\":%.3f}\n",
               name, fields, flop / ours * 1e-9, peer_name, flop / peer * 1e-9, peer / ours);
    else
        printf("{\"bench\":\"%s\",%s,\"error\":\"%s\"}\n", name, fields, psg_error_message());
}

psg_endpoint_t psg_bench_input(psg_graph_t *g, const char *name, const psg_shape_t *shape) {
    psg_initializer_t init = {"uniform", 1.0, 1};
    psg_endpoint_t v = psg_variable(g, name, PSG_DT_F32, shape, init, false);
    return psg_read_variable(g, NULL, v);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double psg_bench_gpu_seconds(psg_graph_t *g, int target, int iters) {
    psg_placement_options_t po = {.allow_soft_placement = true};
    if (psg_graph_status(g) < 0) return -1;
    if (psg_place(g, &po) < 0) return -1;
    psg_session_options_t so = {.num_threads = 2};
    psg_session_t *s = psg_session_new(g, &so, NULL);
    psg_callable_t *c = s && psg_session_run_init(s) == 0
                            ? psg_session_make_callable(s, 0, NULL, 0, NULL, 1, &target)
                            : NULL;
    double sec = -1;
    if (c) {
        int rc = 0;
        for (int i = 0; i < 3 && rc == 0; i++) rc = psg_callable_run(c, NULL, NULL);
        if (rc == 0) rc = psg_gpu_synchronize(0);
        double t0 = now();
        for (int i = 0; i < iters && rc == 0; i++) rc = psg_callable_run(c, NULL, NULL);
        if (rc == 0) rc = psg_gpu_synchronize(0);
        if (rc == 0) sec = (now() - t0) / iters;
    }
    psg_callable_destroy(&c);
    psg_session_destroy(&s);
    return sec;
}
