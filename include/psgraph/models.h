/* The example models of `psgraph train`, built as graphs: placeholders for a
 * batch of images and labels, the logits, the mean cross-entropy loss and
 * the count of correct predictions. Not the optimizer: the caller adds it. */
#ifndef PSGRAPH_MODELS_H
#define PSGRAPH_MODELS_H

#include "psgraph/graph.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    psg_endpoint_t images;  /* placeholder f32 (?, 28, 28, 1) */
    psg_endpoint_t labels;  /* placeholder i32 (?) */
    psg_endpoint_t logits;  /* (?, classes) */
    psg_endpoint_t loss;    /* scalar: mean cross-entropy */
    psg_endpoint_t correct; /* scalar f32: number of correct predictions in the batch */
} psg_model_t;

/* The defaults a model trains with unless told otherwise. */
typedef struct {
    int batch;
    double lr;
    double momentum;
} psg_model_defaults_t;

/* The one table of the models `psgraph train --model` knows: every message and --help that
 * lists models reads it. */
typedef struct {
    const char *name;        /* "mlp" */
    const char *description; /* one line for --help */
    psg_model_defaults_t defaults;
    bool built_here; /* false: built by its own builder, with its recipe (inception3:
                        psgraph/inception3.h, worker/inception_train.c), not psg_model_build */
} psg_model_info_t;

/* The number of models, and the i-th (0 <= i < count). */
int psg_model_count(void);
const psg_model_info_t *psg_model_info(int i);
/* The model `name`, or NULL (no error set). */
const psg_model_info_t *psg_model_find(const char *name);
/* The names joined by sep ("mlp, cnn, inception3"), into buf (returned). */
const char *psg_model_names(const char *sep, char *buf, size_t size);

/* Defaults of `name`; -1 with the error set for an unknown name, listing the known models. */
int psg_model_defaults(const char *name, psg_model_defaults_t *d);

/* How a model is built beyond its name and shape. */
typedef struct {
    /* > 0: a fully connected weight of more bytes than this is split along its output
     * columns into shards "weights/part_k" of about this size (at most
     * PSG_MODEL_MAX_SHARDS), and the layer is one product per shard, concatenated. Each
     * shard is its own variable, so in a cluster it is its own transfer and update: the
     * first shard's product runs while the next shard is still on the wire, and the last
     * gradient's transfer is a shard's, not the whole weight's (docs/distributed.md).
     * 0: one variable per weight. */
    int64_t dense_shard_bytes;
    /* An inference graph (a served model's): each conv layer's Conv2D, BiasAdd, ReLU and MaxPool as
     * one FusedConv2D node (the same floats, one pass over the output); not for training, as the
     * fused op has no gradient. */
    bool fused_conv;
} psg_model_options_t;

#define PSG_MODEL_MAX_SHARDS 8

/* Builds model `name` into g under the scope "model": its variables are
 * trainable and initialized as PyTorch initializes the same layers (uniform
 * in +-1/sqrt(fan_in)), from `seed`. A variable that g already has under its
 * name ("model/fc1/weights") is reused, as TensorFlow's AUTO_REUSE: a second
 * build under another scope is a tower sharing the first one's parameters.
 * Returns 0 or -1 with the error set. */
int psg_model_build(psg_graph_t *g, const char *name, int height, int width, int channels,
                    int classes, uint64_t seed, psg_model_t *m);
/* psg_model_build with options (NULL: the defaults, as psg_model_build). */
int psg_model_build_with(psg_graph_t *g, const char *name, int height, int width, int channels,
                         int classes, uint64_t seed, const psg_model_options_t *opt,
                         psg_model_t *m);

#endif
