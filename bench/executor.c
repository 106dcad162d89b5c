/* Per-node overhead of the executor: a step of N tiny Add nodes in a chain
 * (nothing to overlap) and N independent ones (all ready at once), on 1 and
 * 2 threads. One JSON line per case; bench/executor.sh adds PyTorch's
 * per-op eager overhead beside it. */
#include "psgraph/psgraph.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_case(const char *shape, int n, int threads, int steps) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(16);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t cur = x;
    psg_endpoint_t *leaves = calloc((size_t)n, sizeof *leaves);
    for (int i = 0; i < n; i++) {
        if (shape[0] == 'c')
            cur = psg_add(g, NULL, cur, x);
        else
            leaves[i] = psg_add(g, NULL, x, x);
    }
    psg_endpoint_t out = shape[0] == 'c' ? cur : psg_add_n(g, "sum", n, leaves);
    psg_session_options_t opt = {.num_threads = threads};
    psg_session_t *sess = psg_session_new(g, &opt, NULL);
    psg_callable_t *c = sess ? psg_session_make_callable(sess, 1, &x, 1, &out, 0, NULL) : NULL;
    psg_tensor_t *xv = psg_tensor_zeros(PSG_DT_F32, &s);
    if (!c || !xv) {
        fprintf(stderr, "bench_executor: %s\n", psg_error_message());
        return -1;
    }
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (int i = 0; i < steps; i++) {
            psg_tensor_t *y = NULL;
            if (psg_callable_run(c, &xv, &y) < 0) {
                fprintf(stderr, "bench_executor: %s\n", psg_error_message());
                return -1;
            }
            psg_tensor_destroy(&y);
        }
        double dt = (now() - t0) / steps;
        if (dt < best) best = dt;
    }
    int nodes = n + (shape[0] == 'c' ? 0 : 1);
    printf("{\"bench\":\"executor\",\"graph\":\"%s\",\"nodes\":%d,\"threads\":%d,"
           "\"step_us\":%.1f,\"us_per_node\":%.3f}\n",
           shape, nodes, threads, best * 1e6, best * 1e6 / nodes);
    psg_tensor_destroy(&xv);
    psg_callable_destroy(&c);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
    free(leaves);
    return 0;
}

int main(void) {
    const char *shapes[2] = {"chain", "wide"};
    for (int s = 0; s < 2; s++)
        for (int t = 1; t <= 2; t++)
            if (run_case(shapes[s], 1000, t, 200) < 0) return 1;
    return 0;
}
