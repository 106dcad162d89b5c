/* Towers, as TensorFlow's multi-GPU CIFAR-10 example: the model built once
 * per device of one process ("/device:GPU:k", or logical "/device:CPU:k"),
 * each tower fed its slice of the batch, the towers' gradients averaged
 * in-graph on the variables' device, and one gradient per variable handed to
 * the optimizer. Not data parallelism across processes (sync/, worker/). */
#ifndef PSGRAPH_TOWERS_H
#define PSGRAPH_TOWERS_H

#include "psgraph/graph.h"
#include "psgraph/models.h"
#include "psgraph/optimizer.h"

#define PSG_MAX_TOWERS 16

typedef enum {
    PSG_TOWERS_CPU = 0, /* tower k on "/device:CPU:k": host memory, CPU kernels */
    PSG_TOWERS_GPU,     /* tower k on "/device:GPU:k" */
} psg_towers_device_t;

/* Builds tower k's model into g, called under the tower's scope and device
 * function; a variable g already has under its root name must be reused
 * (tower 0's), as psg_model_build does. Returns 0, or -1 with the error set. */
typedef int (*psg_tower_model_fn)(void *ctx, psg_graph_t *g, int k, psg_model_t *m);

typedef struct {
    const char *model; /* "mlp" | "cnn" (psg_model_build), unless build is set */
    int height, width, channels, classes;
    uint64_t seed;
    int num_towers; /* 1..PSG_MAX_TOWERS */
    psg_towers_device_t device;
    psg_tower_model_fn build; /* NULL: psg_model_build of model */
    void *build_ctx;          /* build's, borrowed */
    /* where ops that create or use a variable go: NULL, tower 0's device; a
     * cluster's worker gives "/device:CPU:0", so that under the replica device
     * setter the variables sit on a ps task's CPU whatever the towers' device */
    const char *variable_device;
    int64_t dense_shard_bytes; /* psg_model_options_t's, for psg_model_build */
} psg_towers_config_t;

typedef struct {
    int num_towers;
    psg_model_t towers[PSG_MAX_TOWERS]; /* each with its own images/labels placeholders */
    psg_endpoint_t loss;                /* scalar: the mean of the towers' losses */
    psg_endpoint_t correct;             /* scalar f32: correct predictions over all towers */
    int train_op; /* applies the averaged gradients, advances the global step; -1: not built */
    /* tower 0's device: where the average lives, and the variables and slots
     * unless the config's variable_device says otherwise */
    char variable_device[64];
} psg_towers_t;

/* Builds c->num_towers copies of the model into g (tower 0 under no scope,
 * so its names are the single-device ones; tower k > 0 under "tower_k"),
 * all sharing tower 0's variables; differentiates each tower's loss on its
 * device; averages the gradients of each variable on the variables' device
 * ("average_gradients/..."); adds opt's update of every trainable variable;
 * and places g (psg_place, soft placement: an op with no GPU kernel runs on
 * the CPU). Returns 0, or -1 with the error set (a bad config, a GPU tower
 * when this process has fewer GPUs, a build error). */
int psg_towers_build(psg_graph_t *g, const psg_towers_config_t *c, psg_optimizer_t *opt,
                     psg_towers_t *t);

/* psg_towers_build without the optimizer, for a caller that applies the
 * gradients itself (sync replicas): builds the towers and, for each
 * trainable variable vars[i], the towers' mean gradient grads[i] on tower
 * 0's device (PSG_NO_ENDPOINT when the loss does not depend on it), and the
 * towers' loss and correct; t->train_op is -1. Under the replica device
 * setter tower 0's device is on this worker ("/job:worker/task:i/device:CPU:0"
 * or GPU:0), so one gradient per variable goes to the ps. Does not place g.
 * *grads and *vars are new arrays of *n the caller frees. Returns 0, or -1
 * with the error set (and nothing to free). */
int psg_towers_build_gradients(psg_graph_t *g, const psg_towers_config_t *c, psg_towers_t *t,
                               int *n, psg_endpoint_t **grads, psg_endpoint_t **vars);

/* The 2 * num_towers feed endpoints, in the order psg_towers_split fills:
 * images of tower 0, labels of tower 0, images of tower 1, ... */
void psg_towers_feeds(const psg_towers_t *t, psg_endpoint_t *feeds);

/* Splits a batch (images (N, ...), labels (N)) into the towers' feeds, in
 * psg_towers_feeds's order: tower k gets rows [k*N/K, (k+1)*N/K), as views
 * of the batch's buffers (no copy). values[] gets 2 * num_towers new
 * references the caller destroys. Returns 0, or -1 with the error set (fewer
 * rows than towers, mismatched rows). */
int psg_towers_split(const psg_towers_t *t, psg_tensor_t *images, psg_tensor_t *labels,
                     psg_tensor_t **values);

#endif
