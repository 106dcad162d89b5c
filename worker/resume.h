/* Internal to psgraph: which checkpoint of a --logdir a training run resumes from
 * (docs/checkpoints.md, "Resume"): the newest that verifies; none when the logdir holds
 * none; and when it holds checkpoints of which none verifies, a stop naming each file and
 * why, unless the user asked for a fresh start (--fresh-start). Shared by the one-process
 * hooks (train_hooks.c) and the cluster's chief (cluster_ckpt.c). Not the restore itself. */
#ifndef PSGRAPH_WORKER_RESUME_H
#define PSGRAPH_WORKER_RESUME_H

#include "psgraph/checkpoint.h"

#include <stdbool.h>
#include <stdio.h>

/* Opens the newest committed checkpoint of logdir that verifies into *ck (1), each newer
 * one that does not reported on out ("... is incomplete or corrupt, using an older one").
 * 0 with *ck NULL when there is none to resume from: no checkpoint, or (fresh_start) none
 * that verifies, said on out. -1 with the error naming every checkpoint and why it does
 * not verify when there are checkpoints, none verifies and fresh_start is false. */
int psg_resume_open_latest(const char *logdir, bool fresh_start, FILE *out, psg_checkpoint_t **ck);

#endif
