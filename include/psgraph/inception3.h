/* Inception-v3 as a psgraph graph (Szegedy et al. 2015, as Keras's
 * InceptionV3 and TF-slim's inception_v3 build it) and its training recipe:
 * RMSProp, staircase learning-rate decay, batch-norm moving averages and an
 * exponential moving average of the variables for evaluation.
 * Not the input pipeline (imagenet.h) and not the distributed trainer. */
#ifndef PSGRAPH_INCEPTION3_H
#define PSGRAPH_INCEPTION3_H

#include "psgraph/graph.h"
#include "psgraph/optimizer.h"

#include <stdbool.h>
#include <stdint.h>

/* the most groups a batch norm's batch is split into (virtual_batch_size) */
#define PSG_INCEPTION3_MAX_GHOSTS 64

/* Whether v (virtual_batch_size) splits a batch of `batch` images into 1 to
 * PSG_INCEPTION3_MAX_GHOSTS groups. */
static inline bool psg_inception3_virtual_batch_ok(int batch, int v) {
    return v > 0 && batch > 0 && batch % v == 0 && batch / v <= PSG_INCEPTION3_MAX_GHOSTS;
}

typedef struct {
    int image_size;         /* height = width; 299, at least 75 */
    int classes;            /* 1000 */
    bool aux_logits;        /* the auxiliary head on Mixed_6e: false */
    bool is_training;       /* batch statistics, moving-average updates, dropout: true */
    bool read_ema;          /* read each variable's ExponentialMovingAverage shadow
                             * (an evaluation graph sharing the training graph's
                             * resources): false */
    bool fused_conv;        /* not training: each conv, its batch norm and ReLU as one
                             * FusedConv2D node (the same floats, one pass over the
                             * output): false */
    float dropout_rate;     /* before the logits, training only: 0.2 (slim's keep 0.8) */
    float label_smoothing;  /* 0.1 */
    float aux_weight;       /* weight of the auxiliary loss: 0.4 */
    float weight_decay;     /* L2 on the convolution and logits weights: 4e-5 (slim) */
    float bn_decay;         /* moving-average decay of batch norm: 0.9997 (slim) */
    float bn_epsilon;       /* 0.001 */
    int virtual_batch_size; /* training: each batch norm normalizes groups of this many
                             * consecutive images of the batch ("ghost" batch norm, as TF's
                             * BatchNormalization virtual_batch_size), its moving statistics
                             * moved toward the groups' mean; 0: the whole batch */
    int batch;              /* the images a training step is fed, which virtual_batch_size
                             * must divide: needed with it (the placeholder's batch is open) */
    uint64_t seed;          /* initialization and dropout */
} psg_inception3_config_t;

/* What the builder returns: placeholders, outputs and the update ops. */
typedef struct {
    psg_endpoint_t images;     /* placeholder f32 (?, S, S, 3), pixels in [-1, 1] */
    psg_endpoint_t labels;     /* placeholder i32 (?) in [0, classes) */
    psg_endpoint_t logits;     /* (?, classes) */
    psg_endpoint_t aux_logits; /* (?, classes), or PSG_NO_ENDPOINT */
    psg_endpoint_t xent;       /* scalar: mean label-smoothed cross-entropy of the logits */
    psg_endpoint_t loss;       /* scalar: xent + aux_weight * aux xent + weight decay */
    psg_endpoint_t correct;    /* scalar f32: correct top-1 predictions in the batch */
    int bn_updates;            /* NoOp running every moving-average update; -1 when
                                * not training */
} psg_inception3_t;

/* The defaults above. */
psg_inception3_config_t psg_inception3_defaults(void);

/* Builds Inception-v3 into g under the scope "InceptionV3" with TF-slim's
 * names ("InceptionV3/Mixed_6a/Branch_1/Conv2d_0a_1x1/weights"), plus the
 * placeholders "images" and "labels" and the loss at the root. Every
 * convolution has no bias and is followed by batch norm without a scale
 * (beta only, as Keras's conv2d_bn and slim) and ReLU. The loss is the
 * cross-entropy against the smoothed target (1 - e) * onehot + e / classes,
 * built from graph ops (sparse cross-entropy and log-softmax). Returns 0, or
 * -1 with the error set (the first failing node's message). */
int psg_inception3_build(psg_graph_t *g, const psg_inception3_config_t *cfg, psg_inception3_t *m);

/* The mean over the batch of the cross-entropy of logits (N, C) against the
 * smoothed target t = (1 - smoothing) * onehot(labels) + smoothing / C,
 * built under `scope` as (1 - s) * sparse_xent + (s / C) * sum_c -log_softmax
 * (equal to the dense form, without a one-hot tensor). labels: i32 (N). A
 * scalar, or PSG_NO_ENDPOINT with the error set. */
psg_endpoint_t psg_smoothed_xent(psg_graph_t *g, const char *scope, psg_endpoint_t logits,
                                 psg_endpoint_t labels, double smoothing);

/* The size of a model, from its graph. */
typedef struct {
    int64_t params;           /* elements of every variable in "variables" (Keras's
                               * total: trainable + batch-norm moving statistics) */
    int64_t trainable;        /* of those, in "trainable_variables" */
    int64_t macs_per_example; /* forward multiply-adds of Conv2D, MatMul and Dense
                               * nodes per example (batch dim excluded) */
} psg_model_stats_t;

/* Counts g's variables and the forward multiply-adds of its nodes whose
 * names start with `prefix` (NULL: all nodes; gradient nodes are skipped by
 * their "gradients" scope). Call it after building a model and before adding
 * an optimizer (whose slots are variables too). Returns 0, or -1 with the
 * error set when a shape is not known at build time. */
int psg_model_stats(const psg_graph_t *g, const char *prefix, psg_model_stats_t *s);

/* ---- the names of keras.applications.InceptionV3 (examples/inception3_names.c) ---- */

typedef struct {
    char slim[160]; /* "InceptionV3/Mixed_5b/Branch_0/Conv2d_0a_1x1/weights" */
    char keras[64]; /* "conv2d_5/kernel" (a layer's name, its weight's); "" for none (the
                     * auxiliary head: Keras's model has none) */
    bool logits;    /* the classifier's (slim: C + 1 classes with the background, Keras's
                     * ImageNet weights: 1000): a reader may add or drop column 0 */
} psg_inception3_name_t;

/* The pairs of every model variable of cfg's Inception-v3 (built on a scratch graph), in
 * the order they are made: slim's weights, BatchNorm/{beta,moving_mean,moving_variance}
 * and Logits/Conv2d_1c_1x1/{weights,biases} against Keras's conv2d_K/kernel,
 * batch_normalization_K/{beta,moving_mean,moving_variance} and predictions/{kernel,bias}
 * (Keras's layers numbered from 0 without a suffix, as a fresh session names them).
 * *pairs is malloc'd; returns their number, or -1 with the error set. */
int psg_inception3_keras_names(const psg_inception3_config_t *cfg, psg_inception3_name_t **pairs);

/* ---- the recipe ---- */

typedef struct {
    double learning_rate;       /* 0.045 */
    double lr_decay;            /* x0.94 ... */
    double epochs_per_decay;    /* ... every 2 epochs (staircase) */
    int64_t examples_per_epoch; /* 1,281,167 (ImageNet train) */
    int batch;                  /* per worker: 32 */
    int replicas;               /* gradients aggregated per step: decay steps / replicas; 1 */
    double rmsprop_decay;       /* 0.9 */
    double momentum;            /* 0.9 */
    double epsilon;             /* 1.0 */
    double ema_decay;           /* 0.9999; 0 turns the moving average off */
    bool plain_sgd;             /* false; true: plain SGD at the decayed rate, not RMSProp */
    int64_t warmup_steps;       /* 0; > 0: the rate times min(1, (step + 1) / warmup_steps),
                                 * a linear warm-up (Goyal et al. 2017) */
} psg_inception3_recipe_t;

psg_inception3_recipe_t psg_inception3_recipe_defaults(void);

/* The batches between two learning-rate decays:
 * examples_per_epoch / batch * epochs_per_decay / replicas (at least 1). */
int64_t psg_inception3_decay_steps(const psg_inception3_recipe_t *r);

/* Adds the training step of model m to g: RMSProp on m->loss with the decayed
 * learning rate (*lr, a scalar f32, may be NULL), the batch-norm updates, and
 * after them the exponential moving average of every model variable (see
 * psg_ema_apply). *train_op: the node to run as the step's target. Returns 0
 * or -1 with the error set. */
int psg_inception3_train_op(psg_graph_t *g, const psg_inception3_recipe_t *r,
                            const psg_inception3_t *m, int *train_op, psg_endpoint_t *lr);

/* The pieces of psg_inception3_train_op, for a caller that applies the
 * gradients its own way (towers averaging them, sync replicas aggregating
 * them on the chief). */

/* The model variables the moving average covers: g's "variables" named
 * "InceptionV3/..." (batch-norm moving statistics included). Call it before
 * an optimizer adds its slots. *vars is malloc'd (the caller frees it).
 * Returns their number, or -1 with the error set. */
int psg_inception3_variables(const psg_graph_t *g, psg_endpoint_t **vars);

/* The recipe's optimizer: RMSProp at the staircase-decayed learning rate (after the
 * warm-up, when r->warmup_steps > 0), a tensor of the global step (*lr, may be NULL). New
 * (psg_optimizer_destroy); NULL with the error set. */
psg_optimizer_t *psg_inception3_optimizer(psg_graph_t *g, const psg_inception3_recipe_t *r,
                                          psg_endpoint_t *lr);

/* The step around an update `apply` (a node): grouped with bn_updates (-1:
 * none) as "train_step", and after it the moving average of vars[n] when
 * r->ema_decay > 0. *train_op: the node to run. Returns 0, or -1 with the
 * error set. */
int psg_inception3_finish_train_op(psg_graph_t *g, const psg_inception3_recipe_t *r, int apply,
                                   int bn_updates, int n, const psg_endpoint_t *vars,
                                   int *train_op);

/* Exponential moving averages, as tf.train.ExponentialMovingAverage with
 * num_updates = the global step: for each variable handle vars[i] a shadow
 * variable "<var>/ExponentialMovingAverage" (not trainable, initialized to
 * the variable's initial value) and an update, run after node `after` (-1:
 * no order), shadow -= (1 - d) * (shadow - var) with
 * d = min(decay, (1 + step) / (10 + step)). *op: a NoOp running all updates.
 * Returns 0 or -1 with the error set. */
int psg_ema_apply(psg_graph_t *g, double decay, int n, const psg_endpoint_t *vars, int after,
                  int *op);

#endif
