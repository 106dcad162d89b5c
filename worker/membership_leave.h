/* A worker's clean leave on SIGTERM (docs/distributed.md "Membership", docs/hosts.md
 * "Scaling in"): Kubernetes deletes a pod of a scaled-in worker Job with SIGTERM, then
 * SIGKILL after its grace period. A worker (not the chief) that gets SIGTERM ends the step in
 * progress, tells the chief's task server it leaves (a JobDone for itself, which only a
 * leaving worker sends there: the others send theirs to the ps tasks), and exits 0; the
 * chief's membership says "left", the strategy follows the live set at once and the shard it
 * held is handed out again, with no peer timeout waited for. Internal to psgraph. */
#ifndef PSGRAPH_WORKER_MEMBERSHIP_LEAVE_H
#define PSGRAPH_WORKER_MEMBERSHIP_LEAVE_H

#include "psgraph/cluster.h"

/* At most this long after SIGTERM the process ends, in the step or not (SIGALRM): a step
 * that waits for a task gone silent is not waited out; the chief then finds it lost. */
#define PSG_LEAVE_GRACE_S 10

/* Catches SIGTERM from now on: the first asks the worker to leave at its next step boundary
 * (and arms the grace); a second ends the process at once. */
void psg_membership_leave_arm(void);
/* The signal that asked this worker to leave (SIGTERM), 0: none. */
int psg_membership_leave_asked(void);
/* Tells the chief of cluster cl (the "chief" job's task 0, else worker 0) that task `self`
 * leaves, waiting at most min(peer timeout, 2 s) for its answer. 0, or -1 with the error
 * (the chief then finds the worker lost after the peer timeout). */
int psg_membership_leave_tell(const psg_cluster_t *cl, const char *self);

#endif
