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

/* The training and test sets of c->data ("fashion-mnist" from c->data_dir, "synthetic"
 * from c->seed) into *train and *test (the caller destroys them). -1 with the error set
 * (an unknown data set, a missing file). */
int psg_train_load_data(const psg_train_config_t *c, psg_dataset_t **train, psg_dataset_t **test);

/* Test accuracy over the whole of `test`, in batches (tail included), running the local
 * callable eval or (when NULL) the distributed deval: each run feeds (images, labels) and
 * fetches the count of correct predictions. -1 with the error set. */
int psg_train_evaluate(psg_callable_t *eval, psg_dist_callable_t *deval, const psg_dataset_t *test,
                       double *accuracy);

#endif
