/* Where a step's time goes, by op type: a node timing hook (session.h) that sums each
 * node's runs and time, and the FLOPs of the ops that carry them (MatMul, Conv2D and
 * its two gradients), from the graph's shapes. With psg_session_set_gpu_sync the
 * times of GPU nodes are device times. `psgraph bench --op-profile` prints it. */
#ifndef PSG_OP_PROFILE_H
#define PSG_OP_PROFILE_H

#include "psgraph/graph.h"

#include <stdint.h>
#include <stdio.h>

typedef struct psg_op_profile psg_op_profile_t;

/* An empty profile; NULL when out of memory. */
psg_op_profile_t *psg_op_profile_new(void);
void psg_op_profile_destroy(psg_op_profile_t **p);

/* A psg_node_timing_fn over a psg_op_profile_t *ctx (thread-safe). */
void psg_op_profile_node_hook(void *ctx, const char *node, const char *op, int64_t step_id,
                              int64_t start_ns, int64_t end_ns, int64_t bytes);

/* The floating-point operations of one run of node n of g, from its shapes, an unknown
 * dim counted as unknown_dim (the batch): 2·M·N·K for MatMul and Dense, 2·(output or
 * output-gradient elements)·Kh·Kw·Ci for Conv2D and its input and filter gradients; 0
 * for any other op, or a shape not known. */
double psg_node_flops(const psg_graph_t *g, const psg_node_t *n, int64_t unknown_dim);

/* One op type's share. */
typedef struct {
    char op[64];
    int64_t nodes, runs; /* distinct nodes seen, and their runs */
    double ms;           /* their summed time */
    double gflop;        /* their FLOPs (the nodes found in g), 1e9 */
} psg_op_profile_row_t;

/* The rows, most time first, in *rows (malloc'd; the caller frees it); FLOPs from g
 * (NULL: none), unknown dims counted as `batch`. Returns how many, -1 with the error
 * set when out of memory. */
int psg_op_profile_rows(psg_op_profile_t *p, const psg_graph_t *g, int64_t batch,
                        psg_op_profile_row_t **rows);

/* One JSON line per op type, most time first, then a "total" line: time and FLOPs per
 * step over `steps` steps, each op's share of the steps' wall time `wall_ms` and its
 * TFLOP/s. Nodes that ran at once on several threads each count their own time: the
 * total may pass the wall time. 0, or -1 with the error set. */
int psg_op_profile_write_json(psg_op_profile_t *p, const psg_graph_t *g, int64_t batch,
                              int64_t steps, double wall_ms, FILE *out);

#endif
