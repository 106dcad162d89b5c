/* CPU kernels of the sparse ops (ops/sparse.c holds their defs). */
#ifndef PSGRAPH_OPS_CPU_SPARSE_H
#define PSGRAPH_OPS_CPU_SPARSE_H

#include "psgraph/kernel.h"

int psg_cpu_gather(psg_kernel_ctx_t *c);
int psg_cpu_resource_gather(psg_kernel_ctx_t *c);
int psg_cpu_indexed_slices(psg_kernel_ctx_t *c);
int psg_cpu_unique(psg_kernel_ctx_t *c);
int psg_cpu_unsorted_segment_sum(psg_kernel_ctx_t *c);
int psg_cpu_dynamic_stitch(psg_kernel_ctx_t *c);
int psg_cpu_partition_ids(psg_kernel_ctx_t *c);
int psg_cpu_segment_weights(psg_kernel_ctx_t *c);

/* An open-addressing map from int64 ids to dense slots 0..n-1, in order of first
 * appearance (Unique, and the sparse updates' sum of duplicate rows). */
typedef struct {
    int64_t *keys;
    int32_t *slot;
    int64_t cap;
    int32_t n;
} psg_id_map_t;

/* A map with room for `expected` ids. -1 with the error set on out of memory. */
int psg_id_map_init(psg_id_map_t *m, int64_t expected);
void psg_id_map_free(psg_id_map_t *m);
/* The slot of id, a new one (n, then n + 1) when absent. */
int32_t psg_id_map_put(psg_id_map_t *m, int64_t id);

/* The i-th element of an i32 or i64 tensor. */
static inline int64_t psg_index_at(const psg_tensor_t *t, int64_t i) {
    return t->dtype == PSG_DT_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

#endif
