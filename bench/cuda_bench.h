/* What bench_cuda_gemm and bench_cuda_conv share: the no-GPU exit, inputs
 * as variables that live on GPU 0, and the timing of a target node run
 * through a session (framework overhead included) until the GPU is done. */
#ifndef PSGRAPH_BENCH_CUDA_BENCH_H
#define PSGRAPH_BENCH_CUDA_BENCH_H

#include "psgraph/psgraph.h"

/* Prints {"bench": name, "skipped": why} and returns true when this
 * process has no GPU (no backend, no device). */
bool psg_bench_no_gpu(const char *name);

/* A variable of `shape` (uniform in +-1) read on GPU 0: g must be built
 * under psg_graph_push_device(g, "/device:GPU:0"). */
psg_endpoint_t psg_bench_input(psg_graph_t *g, const char *name, const psg_shape_t *shape);

/* Places g (soft), initializes it, and runs the node `target` warm-up + iters
 * times back to back, then waits for GPU 0: seconds per run, -1 on error
 * (the error set). */
double psg_bench_gpu_seconds(psg_graph_t *g, int target, int iters);

#endif
