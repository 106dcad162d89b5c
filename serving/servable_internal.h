/* Internal to servables: what a checkpoint says about its model, and its values put in
 * the variables of an inference graph (serving/servable_values.c). */
#ifndef PSGRAPH_SERVING_SERVABLE_INTERNAL_H
#define PSGRAPH_SERVING_SERVABLE_INTERNAL_H

#include "psgraph/checkpoint.h"
#include "psgraph/graph.h"
#include "psgraph/resource.h"

#include <stdbool.h>
#include <stddef.h>

/* The model of `psgraph train` whose checkpoint ck is, from its tensor names: "mlp",
 * "cnn", "inception3" or "wide-deep". -1 with the error listing what was looked for. */
int psg_serving_detect_model(const psg_checkpoint_t *ck, char *model, size_t size);

/* The shape of tensor `name` in ck, its column or row shards ("name/part_k") added up;
 * -1 (no error set) when ck has neither. */
int psg_serving_tensor_shape(const psg_checkpoint_t *ck, const char *name, psg_shape_t *shape);

/* Whether ck keeps moving averages ("…/ExponentialMovingAverage" tensors). */
bool psg_serving_has_ema(const psg_checkpoint_t *ck);

/* Gives every VarHandle of g a value in rm from ck: the tensor of the variable's name, or
 * its shards merged: column shards (one weight split along its columns, `psgraph train`'s
 * --shard-bytes) or row shards (a partitioned table, split by `strategy`, "mod" or "div").
 * -1 with the error naming the variable: missing, or of another dtype or shape. */
int psg_serving_fill_values(const psg_graph_t *g, const psg_checkpoint_t *ck,
                            psg_resource_mgr_t *rm, const char *strategy);

#endif
