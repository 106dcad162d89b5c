/* What bench_cuda_gemm and bench_cuda_conv share: the no-GPU exit, inputs
 * as variables that live on GPU 0, and the timing of a target node run
 * through a session (framework overhead included) until the GPU is done. */
#ifndef PSGRAPH_BENCH_CUDA_BENCH_H
#define PSGRAPH_BENCH_CUDA_BENCH_H

#include "psgraph/psgraph.h"

/* The main of a GPU bench: {"bench": name, "skipped": why} when this process
 * has no GPU (no backend, no device), else run(iters), iters argv[1] or
 * default_iters. Returns the exit code, 0. run is NULL in a build without CUDA. */
int psg_bench_gpu_main(int argc, char **argv, const char *name, int default_iters,
                       void (*run)(int iters));

/* One JSON line of bench `name`: `fields` (the JSON members naming the case,
 * no braces), then the GFLOP/s of psgraph and of the peer (`peer_name`, e.g.
 * "cublas") for `flop` a run and their ratio; the error instead when either
 * timing failed (<= 0 seconds). */
void psg_bench_gpu_report(const char *name, const char *fields, double flop, double ours,
                          const char *peer_name, double peer);

/* A variable of `shape` (uniform in +-1) read on GPU 0: g must be built
 * under psg_graph_push_device(g, "/device:GPU:0"). */
psg_endpoint_t psg_bench_input(psg_graph_t *g, const char *name, const psg_shape_t *shape);

/* Places g (soft), initializes it, and runs the node `target` warm-up + iters
 * times back to back, then waits for GPU 0: seconds per run, -1 on error
 * (the error set). */
double psg_bench_gpu_seconds(psg_graph_t *g, int target, int iters);

#endif
