/* Builders of the sparse ops: Gather (of a tensor, or of a variable's rows beside the
 * variable), Unique, UnsortedSegmentSum, DynamicStitch, PartitionIds, and the sparse
 * gradient value IndexedSlices; embedding_lookup over a partitioned variable (TensorFlow's
 * "mod" and "div" strategies) and embedding_lookup_sparse with its combiners.
 * The sparse updates (SparseApply*) are built by psg_apply_update (ops_train.h) with their
 * op name. Each builder returns the new node's output, or PSG_NO_ENDPOINT with the graph's
 * error set. */
#ifndef PSGRAPH_OPS_SPARSE_H
#define PSGRAPH_OPS_SPARSE_H

#include "psgraph/graph.h"

#include <stdbool.h>

/* params[indices]: params (N, d...) and indices (i32 or i64) of any shape give
 * indices.shape + (d...). An index outside [0, N) fails the step, naming it.
 * The gradient of params is an IndexedSlices (rows of the incoming gradient + indices). */
psg_endpoint_t psg_gather(psg_graph_t *g, const char *name, psg_endpoint_t params,
                          psg_endpoint_t indices);
/* The rows `indices` of the variable behind `handle`, read beside the variable (on its
 * ps): only those rows leave it. Its gradient with respect to the handle is an
 * IndexedSlices over the variable, which an optimizer applies as a sparse update. */
psg_endpoint_t psg_resource_gather(psg_graph_t *g, const char *name, psg_endpoint_t handle,
                                   psg_endpoint_t indices);

/* A sparse gradient value (TensorFlow's IndexedSlices): values (n, d...) are rows of a
 * tensor shaped like `like` (a tensor, or a variable handle: its variable's shape), at
 * rows indices (n) (duplicates add). Output 0 is that tensor made dense (zeros, rows
 * added), so any op may read it; autodiff sums IndexedSlices by concatenation and the
 * optimizers update only the rows (they read inputs 0 and 1, and the dense output is
 * never computed). */
psg_endpoint_t psg_indexed_slices(psg_graph_t *g, const char *name, psg_endpoint_t values,
                                  psg_endpoint_t indices, psg_endpoint_t like);
/* True when e is output 0 of an IndexedSlices node; then *values, *indices and *like are
 * its inputs (each may be NULL). */
bool psg_is_indexed_slices(const psg_graph_t *g, psg_endpoint_t e, psg_endpoint_t *values,
                           psg_endpoint_t *indices, psg_endpoint_t *like);

/* The sum of n sparse gradients of one tensor (IndexedSlices with the same `like`): an
 * IndexedSlices of their rows and indices concatenated, not made dense. PSG_NO_ENDPOINT,
 * with no error, when any of them is not such (autodiff then adds dense values). */
psg_endpoint_t psg_sparse_sum(psg_graph_t *g, int n, const psg_endpoint_t *grads);

/* Unique values of x (n), i32 or i64, in order of first appearance: output 0 (u), and
 * output 1 ({node, 1}, i32 (n)) the position in output 0 of each x[i]. Returns the node
 * id, or -1. */
int psg_unique(psg_graph_t *g, const char *name, psg_endpoint_t x);
/* out[s] = sum of data[i] over segment_ids[i] == s: data (n..., d...), segment_ids
 * (n...) i32 or i64, num_segments a scalar i32 or i64; out is (num_segments, d...).
 * A negative id drops its row; one >= num_segments fails the step. */
psg_endpoint_t psg_unsorted_segment_sum(psg_graph_t *g, const char *name, psg_endpoint_t data,
                                        psg_endpoint_t segment_ids, psg_endpoint_t num_segments);
/* out[indices[k][i]] = data[k][i] for n pairs (indices i32 (m_k), data (m_k, d...));
 * the indices together must cover 0 .. sum m_k - 1. */
psg_endpoint_t psg_dynamic_stitch(psg_graph_t *g, const char *name, int n,
                                  const psg_endpoint_t *indices, const psg_endpoint_t *data);

typedef enum {
    PSG_PARTITION_MOD = 0, /* id goes to shard id % n, row id / n */
    PSG_PARTITION_DIV,     /* contiguous ranges: the first rows % n shards one row longer */
} psg_partition_strategy_t;

/* The ids (n) of a table of `rows` rows split in num_shards shards that shard `shard`
 * holds: output 0, their rows within the shard (m, i32); output 1 ({node, 1}, i32 (m))
 * their positions in ids. An id outside [0, rows) fails the step. Returns the node id. */
int psg_partition_ids(psg_graph_t *g, const char *name, psg_endpoint_t ids, int64_t rows,
                      int num_shards, int shard, psg_partition_strategy_t strategy);

/* A table split in n shards along its rows (the shards of psg_partitioned_variable,
 * or n == 1 and a single variable). */
typedef struct {
    int num_shards;
    const psg_endpoint_t *shards; /* variable handles, (rows_k, d...) */
    int64_t rows;                 /* the table's rows (the sum of the shards') */
    psg_partition_strategy_t strategy;
    bool unique; /* look each id up once a step (Unique first): only unique rows travel */
} psg_embedding_table_t;

/* The rows of the table for ids (any shape, i32 or i64): ids.shape + (d...). Each shard's
 * rows are read beside it (ResourceGather) and stitched back in ids' order; the gradient
 * of each shard is an IndexedSlices of the rows its ids touched. At most one dim of ids
 * may be unknown when built. */
psg_endpoint_t psg_embedding_lookup(psg_graph_t *g, const char *name,
                                    const psg_embedding_table_t *table, psg_endpoint_t ids);

typedef enum {
    PSG_COMBINER_SUM = 0,
    PSG_COMBINER_MEAN,  /* divided by the count of ids of the segment */
    PSG_COMBINER_SQRTN, /* divided by the square root of that count */
} psg_combiner_t;

/* A bag of ids per segment (TensorFlow's embedding_lookup_sparse of a SparseTensor with
 * rows segment_ids): ids (nnz), segment_ids (nnz) in [0, num_segments) (a scalar
 * endpoint), their rows combined per segment: (num_segments, d). An empty segment is 0. */
psg_endpoint_t psg_embedding_lookup_sparse(psg_graph_t *g, const char *name,
                                           const psg_embedding_table_t *table, psg_endpoint_t ids,
                                           psg_endpoint_t segment_ids, psg_endpoint_t num_segments,
                                           psg_combiner_t combiner);
/* The weight of each id of a bag under `combiner`: (nnz, 1) f32 (1, 1/count or
 * 1/sqrt(count) of its segment). Not differentiable. */
psg_endpoint_t psg_segment_weights(psg_graph_t *g, const char *name, psg_endpoint_t segment_ids,
                                   psg_endpoint_t num_segments, psg_combiner_t combiner);

/* ---- sparse updates ----
 * Each changes only the rows `indices` (n, i32 or i64) of a variable and its slots, by the
 * gradient rows `grad` (n, d...); duplicate ids are summed first. Inputs in order (build
 * them with psg_apply_update, ops_train.h, which records the variable's name):
 *  SparseApplyGradientDescent: var, lr, grad, indices            var -= lr * g
 *  SparseApplyMomentum: var, accum, lr, grad, indices, momentum  (as ApplyMomentum)
 *  SparseApplyAdagrad: var, accum, lr, grad, indices             (as ApplyAdagrad)
 *  SparseApplyFtrl: var, accum, linear, grad, indices, lr, l1, l2, lr_power (TensorFlow's FTRL)
 *  SparseApplyAdam: var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
 *    indices: lazy Adam, ApplyAdam's formula on the touched rows only. */

/* The sparse update of a dense update op ("ApplyAdam" -> "SparseApplyAdam"), or NULL when
 * it has none (its gradient is then made dense). Inputs: the dense op's, with the gradient
 * replaced by the rows and the indices. */
const char *psg_sparse_apply_op(const char *dense_op);

/* "mod" / "div" into *s: 0, or -1 with the error naming the value. */
int psg_partition_strategy_parse(const char *name, psg_partition_strategy_t *s);

#endif
