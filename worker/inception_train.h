/* Internal to psgraph: what `psgraph train --model inception3` adds to the one training
 * loop (worker/trainer.c): the model's config and TF's recipe from the options, the
 * towers' builder, the recipe's optimizer, the step's batch-norm updates and moving
 * average (one process, or a cluster's strategy), and the evaluation models (moving
 * statistics, the raw weights and their moving average) for the trainer and the
 * evaluator task. Not the loop, not the data. */
#ifndef PSGRAPH_WORKER_INCEPTION_TRAIN_H
#define PSGRAPH_WORKER_INCEPTION_TRAIN_H

#include "psgraph/graph.h"
#include "psgraph/inception3.h"
#include "psgraph/models.h"
#include "psgraph/placement.h"
#include "psgraph/towers.h"
#include "psgraph/trainer.h"
#include "worker/sync_train.h"

#include <stdio.h>

/* The evaluation models: [0] the weights, [1] their moving average (when the recipe has
 * one), each fed images and giving logits. */
typedef struct {
    int n;
    psg_endpoint_t images[2], logits[2];
} psg_eval_models_t;

typedef struct {
    psg_inception3_config_t cfg;    /* the training model's */
    psg_inception3_recipe_t recipe; /* TF's, from the options */
    psg_inception3_t towers[PSG_MAX_TOWERS];
    psg_model_stats_t stats;  /* tower 0's size */
    psg_endpoint_t *ema_vars; /* the model's variables, taken before an optimizer's slots */
    int n_ema_vars;
} psg_inception_train_t;

/* The model's config and the recipe from c: images of image_size, `classes` logits,
 * examples_per_epoch (the decay's), batch per replica and `replicas` gradients a step
 * (the decay steps are divided by them, as TF's inception_distributed_train.py).
 * Returns 0, or -1 with the error set (an option out of its range). */
int psg_inception_train_init(psg_inception_train_t *it, const psg_train_config_t *c, int image_size,
                             int classes, int64_t examples_per_epoch, int batch, int replicas);
void psg_inception_train_free(psg_inception_train_t *it);

/* The recipe's optimizer (its learning rate reads the global step: in a cluster, build it
 * under the replica device setter). New, or NULL with the error set. */
psg_optimizer_t *psg_inception_train_optimizer(psg_inception_train_t *it, psg_graph_t *g);

/* Tower k's model (psg_tower_model_fn; ctx: the psg_inception_train_t). */
int psg_inception_train_build_tower(void *ctx, psg_graph_t *g, int k, psg_model_t *m);
/* The one model of psg_replica_build (ctx: the psg_inception_train_t). */
int psg_inception_train_build_one(void *ctx, psg_graph_t *g, psg_model_t *m);

/* After the replica: in one process, *train_op (the update) becomes the step with tower
 * 0's batch-norm updates and, after both, the moving average; in a cluster (sync non-NULL),
 * the worker's steps run the batch-norm updates and the moving average follows each update
 * (the chief's, for a strategy with a chief's runner), built under `setter` (the replica
 * device setter). Returns 0, or -1 with the error set. */
int psg_inception_train_finish(psg_inception_train_t *it, psg_graph_t *g, int *train_op,
                               psg_sync_train_t *sync, psg_replica_setter_t *setter);

/* The evaluation models into g: is_training false (moving statistics, no dropout), one on
 * the weights under scope "eval", one on their moving averages under "eval_ema" when the
 * recipe has them (a graph without the training model, the evaluator's, builds both at
 * the root: the first creates the variables, the second the shadows' handles). Returns 0, or
 * -1 with the error set. */
int psg_inception_train_eval_models(const psg_inception_train_t *it, psg_graph_t *g,
                                    psg_eval_models_t *e);

/* The recipe as one line ("RMSProp(decay 0.9, momentum 0.9, epsilon 1), lr 0.045 x0.94 every
 * 2 epochs (D steps: ... / N replicas), warm-up ..., moving average 0.9999, label smoothing
 * 0.1, weight decay 4e-05"). */
void psg_inception_train_describe(const psg_inception_train_t *it, FILE *out);

#endif
