/* Internal to psgraph: the metrics files of a training job's --logdir, one writer per
 * file (docs/checkpoints.md): the chief (or the one process) writes metrics.jsonl, every
 * other task metrics.<tag>.jsonl ("metrics.worker1.jsonl", "metrics.evaluator.jsonl").
 * Each record is one JSON object a line, naming its task, written with one write(2) on a
 * file opened O_APPEND, so no line is ever torn. Not the TensorBoard files (summary.c). */
#ifndef PSGRAPH_WORKER_METRICS_LOG_H
#define PSGRAPH_WORKER_METRICS_LOG_H

#include "worker/worker_task.h"

#include <stdbool.h>
#include <stdio.h>

/* The task a single process's records name (TensorFlow's name of a local task). */
#define PSG_METRICS_LOCAL_TASK "/job:localhost/replica:0/task:0"

/* Opens the metrics file of `tag` in logdir (created if absent): metrics.jsonl when tag
 * is NULL (the chief, or one process), else metrics.<tag>.jsonl. The stream takes lines
 * as fprintf writes them; each whole line that starts with '{' goes out as one write()
 * with "task":"<task>" first in the object. fclose flushes and closes it. NULL with the
 * error naming the file on failure. */
FILE *psg_metrics_open(const char *logdir, const char *tag, const char *task);

/* The metrics file of a training process: metrics.jsonl for one process (its records name
 * PSG_METRICS_LOCAL_TASK) and for the chief, metrics.<job><index>.jsonl for another worker. */
FILE *psg_metrics_open_worker(const char *logdir, const psg_worker_task_t *w);

#endif
