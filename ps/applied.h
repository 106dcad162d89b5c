/* Which update of each writer every variable holds (docs/replication.md): a worker's step
 * carries an update id (WRITER SEQ); a ps records, per variable it wrote, the writer's
 * newest SEQ, forwards the records with the values to its backup, and a step retried after
 * a failover with an id a variable holds already does not update it twice. Internal to
 * ps/; thread-safe. Not the forward itself (ps/replicate.c). */
#ifndef PSGRAPH_PS_APPLIED_H
#define PSGRAPH_PS_APPLIED_H

#include "core/strbuf.h"
#include "psgraph/tensor.h"

#include <stddef.h>
#include <stdint.h>

/* The longest writer ("/job:worker/replica:0/task:0@INCARNATION"). */
#define PSG_APPLIED_WRITER_MAX 160

typedef struct psg_applied psg_applied_t;

/* An empty table; NULL with the error set on out of memory. */
psg_applied_t *psg_applied_new(void);
/* NULL-safe; sets *a to NULL. */
void psg_applied_destroy(psg_applied_t **a);

/* The newest SEQ of `writer` that variable `var` holds, -1 when none. */
int64_t psg_applied_get(psg_applied_t *a, const char *var, const char *writer);
/* Records that var holds writer's update seq (kept when an older one is given). -1 with the
 * error set on out of memory. */
int psg_applied_set(psg_applied_t *a, const char *var, const char *writer, int64_t seq);
/* Sets the record of (var, writer) to seq, older or not (a failed retry undone). */
int psg_applied_forget(psg_applied_t *a, const char *var, const char *writer, int64_t seq);
/* Records that var was written last by (writer, seq), its value before that in *pre (taken;
 * may be NULL: not known); writer NULL: the last update is not known (a full copy). -1 with
 * the error set on out of memory. */
int psg_applied_set_last(psg_applied_t *a, const char *var, const char *writer, int64_t seq,
                         psg_tensor_t **pre);
/* var's value before its last update when that was (writer, seq) (a new reference), else
 * NULL: a step retried before any other wrote the variable starts again from there. */
psg_tensor_t *psg_applied_pre_of(psg_applied_t *a, const char *var, const char *writer,
                                 int64_t seq);
/* Appends the records of var (NULL: of every variable) to b, one a line: "VAR\tWRITER\tSEQ". */
void psg_applied_dump(psg_applied_t *a, const char *var, psg_strbuf_t *b);
/* Merges lines as psg_applied_dump writes them (from a peer: untrusted; a line starting
 * with '#' or '!' is skipped). -1 with the error
 * naming the line when one is malformed (the lines before it are merged). */
int psg_applied_merge(psg_applied_t *a, const char *text, size_t len);

/* Splits an update id "WRITER SEQ" into writer (copied into buf) and *seq (> 0). -1 with
 * the error set when it is malformed. */
int psg_applied_parse_id(const char *id, char *writer, size_t size, int64_t *seq);

#endif
