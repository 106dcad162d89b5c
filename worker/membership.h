/* The chief's set of live workers (docs/distributed.md, "Membership"): a thread asks every
 * other worker's task server whether it answers (Inspect: a new incarnation is a restart) and
 * the ps tasks who said JobDone; a worker silent for the peer timeout that did not say it is
 * done is lost. Each change is said once, naming the worker, its host and why, and counted in
 * the chief's done line; the end of the job waits for the workers neither done nor lost.
 * Internal to psgraph. Not the strategies' aggregation (sync/) nor the launcher's view of its
 * processes (cli/launch_cmd.c). */
#ifndef PSGRAPH_WORKER_MEMBERSHIP_H
#define PSGRAPH_WORKER_MEMBERSHIP_H

#include "psgraph/cluster.h"
#include "psgraph/dist_session.h"

#include <stdbool.h>

#include <stdint.h>
#include <stdio.h>

typedef struct psg_membership psg_membership_t;

/* The other workers of cluster cl (the chief job's and the worker job's tasks but `self`),
 * asked from now on, each change said on out. NULL with the error set on out of memory, a
 * bad address or a thread that does not start. */
psg_membership_t *psg_membership_new(const psg_cluster_t *cl, const char *self, FILE *out);
/* Stops the thread and closes the connections. NULL-safe; sets *m to NULL. */
void psg_membership_destroy(psg_membership_t **m);

/* Called from the membership's thread, outside its lock, when the set of live workers (the
 * chief and every other neither lost nor absent) changed: alive[r] for each rank r < n (the
 * chief's 0, the others in the cluster's order). The strategy follows it (sync's N, its
 * tokens, ssp's clocks: psg_sync_train_set_live). A failure is said on out; the next change
 * tries again. */
typedef int (*psg_membership_live_fn)(void *arg, const bool *alive, int n);
/* Sets it (before any loss: call it right after psg_membership_new). */
void psg_membership_on_live(psg_membership_t *m, psg_membership_live_fn fn, void *arg);

/* What the probes of one worker heard, any answer counted (one that joins answers before it
 * is admitted): the times are psg_membership_now_ms's. */
typedef struct {
    uint64_t inc;        /* the incarnation in its latest answer (0: it never answered) */
    int64_t answered_ms; /* that answer came */
    int64_t probed_ms;   /* the latest probe was sent, answered or not (0: none yet) */
    uint64_t left_inc;   /* the incarnation that said it leaves (0: none): its shards go back */
} psg_membership_heard_t;
/* Of worker rank r (>= 1, as on_live's alive; all 0 for another rank). The shards' hand-out
 * judges by it whether a process that holds shards is dead (worker/shard_data.c). */
void psg_membership_heard(psg_membership_t *m, int rank, psg_membership_heard_t *h);
/* The peer timeout: a process silent this long is lost. */
int psg_membership_peer_timeout_ms(const psg_membership_t *m);
/* The clock of psg_membership_heard, in ms (monotonic). */
int64_t psg_membership_now_ms(void);

/* The chief's step now: a change is said with the step it was seen at. */
void psg_membership_set_step(psg_membership_t *m, int64_t step);

/* Waits until every other worker said it is done or is lost, at most timeout_ms: 0 then; -1
 * with the error naming the workers still running (they answer) otherwise. A worker never
 * heard from is lost once it stayed silent for the peer timeout during this wait. */
int psg_membership_wait_done(psg_membership_t *m, int64_t timeout_ms);

/* The chief's end of the job, the others' end awaited: with m, until each other worker is
 * done or lost (psg_membership_wait_done), then a JobDone to the ps tasks for each lost one
 * (they stop with the job instead of waiting for it); without m (NULL), until `workers` said
 * JobDone (psg_dist_session_wait_workers). At most timeout_ms: a warning on out then, naming
 * who is awaited. Returns the workers found lost; *all_done: none was awaited in vain. */
int psg_membership_end(psg_membership_t *m, psg_dist_session_t *ds, int workers, int64_t timeout_ms,
                       FILE *out, bool *all_done);

/* The lost workers, those that left and those that never started (at most max), as task names
 * ("/job:worker/replica:0/task:2") and as said ("worker2 on h3 (not started)"); how many.
 * Neither is admitted after the end-of-job wait (one that answers then is said once). */
int psg_membership_lost(psg_membership_t *m, char (*tasks)[128], char (*who)[256], int max);

/* The done line's fields, each followed by a comma: "workers_lost":[{"task","host","why",
 * "at_step"}], "workers_left" (the same, of those that said they leave), "workers_joined":J
 * (workers not started within the peer timeout that joined later) and "membership_changes":N. */
void psg_membership_json(psg_membership_t *m, char *buf, size_t size);

#endif
