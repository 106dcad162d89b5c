/* Internal to psgraph: the data of `psgraph train` and the evaluation on its test set,
 * shared by the training loop (trainer.c) and the evaluator task (evaluator.c). Not the
 * readers (examples/data/) nor the batch iterator. */
#ifndef PSGRAPH_WORKER_TRAIN_DATA_H
#define PSGRAPH_WORKER_TRAIN_DATA_H

#include "psgraph/data.h"
#include "psgraph/dist_session.h"
#include "psgraph/session.h"
#include "psgraph/trainer.h"

/* Evaluation batches stay small enough that the cnn's activations do not
 * double the training RSS. */
#define PSG_TRAIN_EVAL_BATCH 250

/* Fills what c leaves to the model: the data set (inception3: synthetic; else
 * fashion-mnist), its folder, inception3's image size (299) and classes (1000), the label
 * offset (0). */
void psg_train_resolve(psg_train_config_t *c);
/* The logits of an image model: c->classes, plus TF's background class for --data
 * imagenet at label offset 0 (1001 for ImageNet). */
int psg_train_logits(const psg_train_config_t *c);

/* The training and test sets of c->data ("fashion-mnist" from c->data_dir, "synthetic"
 * from c->seed) into *train and *test (the caller destroys them). -1 with the error set
 * (an unknown data set, a missing file). */
int psg_train_load_data(const psg_train_config_t *c, psg_dataset_t **train, psg_dataset_t **test);

/* An evaluation: top-1 and top-5 of [0] the model's weights and [1] (n_models 2) their
 * moving average; -1 where there is none. */
typedef struct {
    int n_models;
    int64_t examples;
    double top1[2], top5[2];
    double accuracy; /* the reported one: top1[n_models - 1] */
} psg_train_eval_t;

/* Top-1 and top-5 over the whole of `test`, in batches (tail included), running the local
 * callable eval or (when NULL) the distributed deval: each run feeds the batch's images to
 * each of n_models (1 or 2) models and fetches their logits. -1 with the error set. */
int psg_train_evaluate(psg_callable_t *eval, psg_dist_callable_t *deval, int n_models,
                       const psg_dataset_t *test, psg_train_eval_t *r);

#endif
