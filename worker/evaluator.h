/* Internal to psgraph: TensorFlow's evaluator task (train_and_evaluate) for `psgraph
 * train`: a process whose TF_CONFIG task is {"type": "evaluator"} (listed as a job of the
 * cluster or not) trains nothing; it watches --logdir, evaluates each new checkpoint on the
 * test set once, writes the results to metrics.evaluator.jsonl and to TensorBoard in
 * LOGDIR/eval, and exits when the job ends. Not the training loop (trainer.c). */
#ifndef PSGRAPH_WORKER_EVALUATOR_H
#define PSGRAPH_WORKER_EVALUATOR_H

#include "psgraph/trainer.h"

#include <stdbool.h>

/* True when c names a cluster (TF_CONFIG, or --cluster with --job) whose task for this
 * process is the evaluator. */
bool psg_evaluator_wanted(const psg_train_config_t *c);

/* Runs the evaluator of c's job until it ends: the job's last checkpoint (at its final
 * step, --steps or --epochs as the workers were given) is evaluated, or the chief wrote
 * its final record to metrics.jsonl after this evaluator started and no newer checkpoint
 * is left. r gets the last checkpoint's step and accuracy. -1 with the error set (no
 * --logdir, no ps job, a checkpoint of another model, nothing new in the logdir for
 * PSG_EVALUATOR_IDLE_SECS). */
int psg_evaluator_run(const psg_train_config_t *c, psg_train_result_t *r);

/* How long the evaluator waits without a new checkpoint or a new metrics record before it
 * gives up on a job that is gone. */
#define PSG_EVALUATOR_IDLE_SECS 900.0

#endif
