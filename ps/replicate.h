/* Chain replication of a ps task's shard (docs/replication.md), internal to ps/: the
 * variables each registered graph writes, the forward of their values to the backup (the
 * next ps task in the ring) after a step and before its reply, the full copy of the shard
 * when the backup was lost or restarted (re-replication), and the backup's side (the
 * Replicate request). Not the worker's failover (worker/failover.c). */
#ifndef PSGRAPH_PS_REPLICATE_H
#define PSGRAPH_PS_REPLICATE_H

#include "core/strbuf.h"
#include "ps/protocol.h"

#include <stdbool.h>
#include <stdint.h>

struct psg_task_server;
typedef struct psg_ts_repl psg_ts_repl_t;
typedef struct psg_ts_undo psg_ts_undo_t;

/* The replicator of a ps task whose cluster keeps 2 replicas: a connection to its backup,
 * made now (it connects in the background). *out is NULL (and 0 returned) for a task
 * without a backup. -1 with the error set on out of memory or a bad address. */
int psg_ts_repl_new(struct psg_task_server *ts, psg_ts_repl_t **out);
/* Closes the connection. NULL-safe; sets *r to NULL. */
void psg_ts_repl_destroy(psg_ts_repl_t **r);
/* The backup's task ("/job:ps/replica:0/task:1"), or "" without one. */
const char *psg_ts_repl_backup(const psg_ts_repl_t *r);

/* The names of the variables graph g writes (an update, an assign, a step increment: the
 * handle inputs of its writing ops), as pointers into g's strings, each once: *names
 * malloc'd (NULL when none). -1 on out of memory. */
int psg_ts_repl_written(const psg_graph_t *g, const char ***names, int *n);
/* The names of the variables graph g's VarHandles name (read or written), as above. */
int psg_ts_repl_handles(const psg_graph_t *g, const char ***names, int *n);

/* After a step that wrote the n variables `names` (and *undo from psg_ts_repl_begin, taken:
 * its values put back, the others recorded as holding the update): their values (taken under their
 * update locks, in one order for all steps, so the backup sees every variable's states in order)
 * are applied on the backup before this returns. A variable that was a backup copy here
 * is promoted to this task's shard first (the workers failed over to this task). When the
 * backup does not answer, the shard goes on without one (said once on stderr) and the
 * next step after a second copies the whole shard to it again once it answers (said
 * too). Never fails the step. */
void psg_ts_replicate(struct psg_task_server *ts, const char *const *names, int n,
                      psg_ts_undo_t **undo);

/* Before the run `step` (its step id) of a step with update id `update` ("WRITER SEQ"; ""
 * none) of a graph writing the n variables `names`: *out (NULL when there is nothing to
 * record) keeps each one's value before the run; one whose last update is this one is rolled
 * back to its value before it (run again from there); one that holds this update and was
 * written since by another is left alone by the run's kernels (psg_variable_note_write), so no
 * variable gets an update twice and none loses another's. -1 with the error set on a
 * malformed id or out of memory. */
int psg_ts_repl_begin(struct psg_task_server *ts, const char *update, int64_t step,
                      const char *const *names, int n, psg_ts_undo_t **out);
/* After a step that failed: puts back the values only it wrote (one another's update landed
 * on too keeps it, and holds this update from then on) and frees *u. NULL-safe. */
void psg_ts_repl_abort(struct psg_task_server *ts, const char *const *names, psg_ts_undo_t **u);

/* The Replicate request's handler (the backup's side), on the server thread: key "update"
 * or "full", the values as tensors named by their variables (each created when absent,
 * marked a backup copy and overwritten) and the updates to replay; answered once taken,
 * applied in order by a thread of the backup's own (ps/repl_queue.h). A variable of this
 * task's own shard is refused: the primary's next forward gets the error. */
void psg_ts_on_replicate(struct psg_task_server *ts, psg_msg_t **req, psg_req_t *r);
/* Before the server thread handles request r: every forward taken before it applied,
 * unless r is a forward (queued after them) or a Recv (it reads no variable). */
void psg_ts_repl_before(struct psg_task_server *ts, const psg_req_t *r);

/* What the task forwarded and replayed, as a JSON object onto b (Inspect's "replication"):
 * forwards acknowledged, updates replayed by the backup, variables sent by value, tensor
 * bytes sent, and updates this task replayed as a backup. */
void psg_ts_repl_stats(psg_ts_repl_t *r, psg_strbuf_t *b);

#endif
