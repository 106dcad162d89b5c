/* Internal to psgraph: what the single-process training loop does around its
 * steps besides training — restore from and save checkpoints to --logdir,
 * TensorBoard scalars, the timeline of chosen steps. Not the loop itself
 * (worker/trainer.c) and not the distributed runtime's hooks. */
#ifndef PSGRAPH_WORKER_TRAIN_HOOKS_H
#define PSGRAPH_WORKER_TRAIN_HOOKS_H

#include "psgraph/session.h"
#include "psgraph/task_server.h"
#include "psgraph/trainer.h"
#include "worker/cluster_ckpt.h"
#include "worker/train_data.h"
#include "worker/worker_task.h"

#include <stdint.h>
#include <stdio.h>

typedef struct psg_train_hooks psg_train_hooks_t;

/* Set up after the session's init ran: restores the newest checkpoint of
 * c->logdir that verifies (reporting skipped ones and the restore on out),
 * opens the event file. *start_step receives the global step to go on from
 * (0 without a checkpoint). metrics (may be NULL) gets checkpoint records.
 * c is borrowed: it must outlive the hooks. NULL with the error set on failure. */
psg_train_hooks_t *psg_train_hooks_new(const psg_train_config_t *c, psg_session_t *sess, FILE *out,
                                       FILE *metrics, int64_t *start_step);
void psg_train_hooks_destroy(psg_train_hooks_t **h);

/* In a cluster: the hooks take cc (owned from now on, may be NULL): after_step and end
 * forward to it, recover calls it. The chief's hooks also write TensorBoard scalars to
 * c->logdir. With c->trace_path, the traced steps' nodes of this task's server are
 * recorded as trace pid `trace_pid`, written to "<trace_path>.<tag>.json" (tag "worker1"),
 * and the chief has every ps record the same steps. c and server are borrowed. -1 with
 * the error set when the event file or the trace cannot be made. */
int psg_train_hooks_set_cluster(psg_train_hooks_t *h, psg_cluster_ckpt_t *cc, bool chief,
                                const psg_train_config_t *c, psg_task_server_t *server,
                                int trace_pid, const char *task, const char *tag);
/* A worker task's cluster part, as every training loop starts it: its checkpoints (the
 * chief restores the latest or runs the initializers; *start_step the step) and
 * psg_train_hooks_set_cluster under the task's trace pid and tag ("worker1"). c, w, ds,
 * out and metrics are borrowed. -1 with the error naming the task. */
int psg_train_hooks_join_cluster(psg_train_hooks_t *h, const psg_train_config_t *c,
                                 const psg_worker_task_t *w, psg_dist_session_t *ds, FILE *out,
                                 FILE *metrics, int64_t *start_step);
/* After step `step` (0-based) failed in a cluster: 0 when it may be retried (the cluster
 * recovered), -1 otherwise (the error set; always -1 for one process). */
int psg_train_hooks_recover(psg_train_hooks_t *h, int64_t step);

/* Before step `step` (0-based) runs: turns the timeline on for traced steps. */
void psg_train_hooks_before_step(psg_train_hooks_t *h, int64_t step);
/* After `done` steps in all: timeline off, a checkpoint when one is due (in a cluster, none
 * from the last step on: psg_train_hooks_final_checkpoint writes that one). */
int psg_train_hooks_after_step(psg_train_hooks_t *h, int64_t done);
/* The loop's last step (in a cluster the chief's final checkpoint follows the others'
 * end, not its own last step); 0: unknown. */
void psg_train_hooks_set_last_step(psg_train_hooks_t *h, int64_t last);
/* TensorBoard scalars of a progress line and of an evaluation ("accuracy"; topk: also
 * "top1", "top5" and, with a moving average, "top1_ema", "top5_ema"). */
int psg_train_hooks_progress(psg_train_hooks_t *h, int64_t step, double loss, double lr,
                             double examples_per_sec);
int psg_train_hooks_eval(psg_train_hooks_t *h, int64_t step, const psg_train_eval_t *e, bool topk);
/* secs as "1h02m03s" / "2m03s" / "3s" into buf (returned), for the progress line's ETA. */
const char *psg_train_hooks_eta(double secs, char *buf, size_t size);
/* At the end of training at global step `step`: the last checkpoint (one process), the
 * trace file. */
int psg_train_hooks_end(psg_train_hooks_t *h, int64_t step);
/* In a cluster, the chief once every worker is done and the ps tasks applied every
 * update: the final checkpoint, named by the job's global step `step` (what the chief then
 * evaluates is what it holds). 0 elsewhere (not the chief, no --logdir, one process). */
int psg_train_hooks_final_checkpoint(psg_train_hooks_t *h, int64_t step);

#endif
