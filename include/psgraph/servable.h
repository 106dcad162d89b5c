/* A servable: a trained model ready to answer, from a checkpoint of `psgraph train`
 * (one process or a cluster: shards of a checkpoint, column shards of a weight and row
 * shards of a table merged). The model's inference graph is built by the same code that
 * trained it with is_training false (batch norm on its moving statistics, no dropout)
 * and, when the checkpoint keeps them, the moving averages of the weights (Inception-v3's
 * recipe); its signature names the inputs and outputs as TensorFlow Serving's
 * "serving_default" does. What export, serve and predict share. Not HTTP. */
#ifndef PSGRAPH_SERVABLE_H
#define PSGRAPH_SERVABLE_H

#include "psgraph/graph.h"
#include "psgraph/onnx.h"
#include "psgraph/resource.h"
#include "psgraph/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct psg_servable psg_servable_t;

/* The most inputs or outputs a signature has. */
#define PSG_SERVABLE_MAX_IO 4

/* How to load: what the checkpoint does not say. Zero-initialize for the defaults. */
typedef struct {
    const char *model;           /* NULL: known from the checkpoint's tensor names */
    int height, width, channels; /* 0: from the weights where they tell (mlp, cnn:
                                    28 x 28 x 1 when that fits), else 299 x 299 x 3 */
    int threads;                 /* compute threads; <= 0: 1 */
    /* > 1: a batch of 2 rows or more has its rows cut over this many single-threaded plans
     * run side by side; <= 1: one plan, its kernels split over `threads` threads (what a
     * batch of 1 row always gets) */
    int lanes;
    /* during a run, how long an idle compute thread polls for the next kernel's share
     * before it sleeps (psg_threadpool_set_spin); <= 0: it sleeps at once */
    int spin_us;
    const char *partition_strategy; /* how a row-sharded table was split: "mod" (NULL) or "div" */
    bool no_ema;                    /* use the raw weights even when moving averages are kept */
} psg_servable_options_t;

/* One tensor of the signature. */
typedef struct {
    const char *name; /* "images", "logits", "probabilities" */
    psg_dtype_t dtype;
    psg_shape_t shape; /* dim 0 is the batch: -1 */
    psg_endpoint_t endpoint;
} psg_servable_tensor_t;

/* Loads `path`: a log directory (its newest checkpoint that verifies) or a checkpoint's
 * index (…index.json) or shard file. NULL with the error naming the file and what is
 * wrong (a damaged checkpoint, an unknown model, a missing or mis-shaped tensor). */
psg_servable_t *psg_servable_load(const char *path, const psg_servable_options_t *opt);
void psg_servable_destroy(psg_servable_t **s);

/* The model's name ("cnn"), the checkpoint it came from and its global step (the
 * version a server gives it). */
const char *psg_servable_model(const psg_servable_t *s);
const char *psg_servable_checkpoint(const psg_servable_t *s);
int64_t psg_servable_step(const psg_servable_t *s);
/* Whether the weights are the moving averages. */
bool psg_servable_uses_ema(const psg_servable_t *s);

int psg_servable_num_inputs(const psg_servable_t *s);
const psg_servable_tensor_t *psg_servable_input(const psg_servable_t *s, int i);
int psg_servable_num_outputs(const psg_servable_t *s);
const psg_servable_tensor_t *psg_servable_output(const psg_servable_t *s, int i);
/* The index of the input or output named `name`, or -1. */
int psg_servable_find_output(const psg_servable_t *s, const char *name);

/* Runs the model on one batch: inputs[i] for input i (borrowed; every one with the same
 * batch), outputs[j] gets a new tensor for output j (the caller destroys them). Runs of
 * one servable are serialized (a lock); several servables run in parallel. Returns 0, or
 * -1 with the error set (naming the input whose dtype or shape is wrong). */
int psg_servable_run(psg_servable_t *s, psg_tensor_t *const *inputs, psg_tensor_t **outputs);

/* Checks inputs against the signature as psg_servable_run does (dtype, shape, one batch;
 * wide-deep's ids in the table's range): 0, or -1 with the error set, code
 * PSG_ERR_BAD_REQUEST, naming the input. */
int psg_servable_check_inputs(const psg_servable_t *s, psg_tensor_t *const *inputs);

/* Writes the servable as an ONNX model (psgraph/onnx.h) at `path`. */
int psg_servable_export_onnx(const psg_servable_t *s, const char *path);

/* The graph and the variables' values (borrowed from s), for psg_onnx_export and tests. */
const psg_graph_t *psg_servable_graph(const psg_servable_t *s);
psg_resource_mgr_t *psg_servable_values(const psg_servable_t *s);

#endif
