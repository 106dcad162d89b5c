/* The write log of chain replication (docs/replication.md, "What is forwarded"): the primary
 * records each dense update its CPU kernels apply (the op, its attributes, the variables it
 * writes, copies of its other inputs: the gradient and the hyper-parameters) and forwards
 * those instead of the written values (Adam's variable, m and v: three times the gradient's
 * bytes); the backup runs the same kernel on its copies, which are bitwise the primary's, so
 * they stay so (the update kernels are elementwise and deterministic). A variable written
 * since its last forward by anything else (an assign, a sparse update, a value put back or
 * restored, a write the log missed) is forwarded by value. Internal to ps/; not the forward's
 * transport, its ledger or the failover (ps/replicate.c). */
#ifndef PSGRAPH_PS_REPL_LOG_H
#define PSGRAPH_PS_REPL_LOG_H

#include "core/strbuf.h"
#include "ps/applied.h"
#include "ps/protocol.h"
#include "psgraph/resource.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct psg_repl_log psg_repl_log_t;
typedef struct psg_repl_plan psg_repl_plan_t;

/* The log of rm's updates, set as rm's write log (psg_resource_set_write_log), off until
 * psg_repl_log_set_on. records (may be NULL): where each update of a step with an update id
 * (psg_repl_log_step_begin) is recorded as held by the variables it writes, as it is applied
 * (logged or not), so that a value copied later comes with the records of every update in
 * it. NULL with the error set on out of memory. */
psg_repl_log_t *psg_repl_log_new(psg_resource_mgr_t *rm, psg_applied_t *records);
/* Unsets rm's write log and frees the log. NULL-safe; sets *l to NULL. */
void psg_repl_log_destroy(psg_repl_log_t **l);
/* On: the updates of this task's own variables are logged from now on. Off (no backup: its
 * next forward copies the whole shard by value): they are not, and the log is emptied. */
void psg_repl_log_set_on(psg_repl_log_t *l, bool on);
/* The run `step` (a step id) is the update (writer, seq) until psg_repl_log_step_end: each
 * update its kernels apply is logged and recorded under that id (a forward that carries
 * several steps' updates names each one's own). -1 with the error set on out of memory. */
int psg_repl_log_step_begin(psg_repl_log_t *l, int64_t step, const char *writer, int64_t seq);
void psg_repl_log_step_end(psg_repl_log_t *l, int64_t step);

/* A run (its step id) and v's count of writes before it. */
typedef struct {
    int64_t step;
    uint64_t writes;
} psg_repl_since_t;

/* Adds to m a host copy of v's value, named by v, taken under the lock that guards v: from
 * then on the backup holds every write of v so far (a logged update of v before it is not
 * replayed). With records, v's records in them (the updates the copy holds) go onto body,
 * taken under the same lock. only (may be NULL): whether the copy holds exactly one write
 * since `since` (may be NULL: false), the run's own (its value before that run is then the
 * copy's way back). -1 with the error set on out of memory. */
int psg_repl_add_value(psg_msg_t *m, psg_variable_t *v, psg_applied_t *records, psg_strbuf_t *body,
                       size_t *bytes, const psg_repl_since_t *since, bool *only);

/* The primary's forward of a step (under the replicator's lock): takes the log; each
 * variable of names (n; those skip marks left out) or of the logged updates that was written
 * by other than a logged update since its last forward (psg_variable_note_unlogged: an
 * assign, a value put back, a copy promoted), or whose logged updates do not follow its last
 * forward's, goes by value in m (its records onto body), and so do the others an update of it
 * wrote; the logged updates of the others go as replay lines ("!OP\tATTRS\tINPUTS", then
 * "\tWRITER SEQ" for an update of a step with an id) appended to body, their tensor inputs as
 * tensors named "@" in m, in the order they were applied. *count: values and updates added
 * (*replays of them updates); *plan: for psg_repl_commit. -1 with the error set. */
int psg_repl_log_forward(psg_repl_log_t *l, psg_resource_mgr_t *rm, const char *const *names,
                         const bool *skip, int n, psg_msg_t *m, psg_strbuf_t *body, int *count,
                         int *replays, size_t *bytes, psg_repl_plan_t **plan);
/* After the forward: when the backup applied it, the replayed variables' counts of writes it
 * holds move on. Frees *plan. NULL-safe. */
void psg_repl_commit(psg_repl_plan_t **plan, bool applied);

/* The backup's side: runs the replay lines of req's body on this task's backup copies, in
 * order, each with its "@" tensors (the next ones of req), by the op's CPU kernel. A line's
 * update id (WRITER SEQ) is recorded in applied as held by the copies it wrote; each copy's
 * last update in the forward, when it has an id, is kept as its last with its value before
 * it (the way back of a retry of that update alone); without an id its last is not known.
 * Only the dense update ops replay. -1 with the error set (naming the line) on a malformed
 * line or id, an unknown or refused op, a variable that is not a backup copy here, or a
 * kernel's failure. */
int psg_repl_replay(psg_repl_log_t *l, psg_resource_mgr_t *rm, psg_applied_t *applied,
                    const psg_msg_t *req, int *replayed);

#endif
