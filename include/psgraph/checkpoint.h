/* Checkpoints: the variables of resource managers (optimizer slots and
 * global_step included) as safetensors files, one per ps shard, committed by a
 * JSON index; atomic writes, verification, keep-last-K, and the saver policy
 * of a training loop. Not the transport: the multi-process runtime asks each ps
 * to write its shard and the chief to write the index (docs/checkpoints.md). */
#ifndef PSGRAPH_CHECKPOINT_H
#define PSGRAPH_CHECKPOINT_H

#include "psgraph/resource.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Names inside a checkpoint directory, for step S of N shards:
 *   model.ckpt-S-0000k-of-0000N.safetensors   one shard (k < N)
 *   model.ckpt-S.index.json                   the index: the commit point
 * A checkpoint exists once its index exists; shard files without an index
 * are an unfinished save. */
#define PSG_CKPT_PREFIX "model.ckpt"
#define PSG_CKPT_NAME_MAX 128

/* What a ps reports after writing its shard: what the index records. */
typedef struct {
    char file[PSG_CKPT_NAME_MAX]; /* base name inside the directory */
    uint64_t size;                /* bytes of the whole file */
    uint32_t crc32;               /* zlib crc32 of the whole file */
    uint64_t tensor_bytes;        /* bytes of tensor data */
    int num_tensors;
    char **names; /* the tensors' names (owned; freed by psg_checkpoint_shard_clear) */
} psg_checkpoint_shard_t;

/* Frees what s owns and zeroes it. NULL-safe. */
void psg_checkpoint_shard_clear(psg_checkpoint_shard_t *s);
/* Reads a shard's report as a SaveShard reply carries it (docs/distributed.md): `line`
 * "FILE SIZE CRC32 TENSOR_BYTES" (crc32 in hex) and the tensor names, one a line, in the
 * len bytes at names. Fills *s (the caller clears it, also on failure). -1 with the error
 * set on a malformed line or out of memory. */
int psg_checkpoint_shard_parse(psg_checkpoint_shard_t *s, const char *line, const char *names,
                               size_t len);

/* Writes every initialized variable of rm as shard `shard` of `num_shards` of
 * the checkpoint at `step` in dir (which must exist): temp file, fsync, rename,
 * fsync of dir. Each variable is copied with its optimizer slots under its lock (one
 * update of the variable and its slots, never half of one; not one step across
 * variables when updates run concurrently), and written from the copy.
 * Fills *out (caller clears it). Returns 0, or -1 with the error naming the file;
 * on failure no file of that name is left behind. */
int psg_checkpoint_write_shard(psg_resource_mgr_t *rm, const char *dir, int64_t step, int shard,
                               int num_shards, psg_checkpoint_shard_t *out);

/* Writes the index of the checkpoint at `step` from the shards' reports,
 * atomically: the save is committed when this returns 0. Fails (naming the
 * tensor) if two shards hold the same tensor. */
int psg_checkpoint_write_index(const char *dir, int64_t step, int num_shards,
                               const psg_checkpoint_shard_t *shards);

/* Makes folder dir and its missing parents (as TensorFlow's makedirs: `--logdir runs/x` in a
 * fresh folder). -1 with the error naming it when it cannot be made or is not a folder. */
int psg_logdir_make(const char *dir);

/* The whole save of one process: the shards of rms[0..num_shards) (written in
 * parallel when more than one), then the index, then prunes to the last `keep`
 * checkpoints (keep <= 0: keep all). Creates dir if absent. *seconds (may be
 * NULL) receives the wall time of the save. */
int psg_checkpoint_save(const char *dir, int64_t step, int num_shards,
                        psg_resource_mgr_t *const *rms, int keep, double *seconds);

/* Deletes all but the newest `keep` committed checkpoints of dir, with their
 * shard files, and shard or temp files of unfinished saves older than the
 * oldest kept one (never newer ones: a save may be under way). */
int psg_checkpoint_prune(const char *dir, int keep);

/* ---- reading ---- */

typedef struct psg_checkpoint psg_checkpoint_t;

/* Opens and verifies a checkpoint: `path` is an index (…index.json) or one
 * shard file (…safetensors). With an index, every shard (shard < 0) or only
 * shard `shard` is checked: the file exists, its size and crc32 match the
 * index, its header parses, its tensors match the index's weight_map. Every
 * shard file's data is checked against the data_crc32 of its own header.
 * NULL with the error naming the file and what is wrong. The files are read
 * into memory; the caller destroys the result. */
psg_checkpoint_t *psg_checkpoint_open(const char *path, int shard);
void psg_checkpoint_destroy(psg_checkpoint_t **ck);

/* The global step the checkpoint was written at. */
int64_t psg_checkpoint_step(const psg_checkpoint_t *ck);
/* The path it was opened from. */
const char *psg_checkpoint_path(const psg_checkpoint_t *ck);
/* How many of ck's files were verified against a checksum when opened (their header's
 * data_crc32, or the index's crc32 of the whole file): all, for psgraph's checkpoints; none
 * for a safetensors file another writer made (Python's carry no data_crc32: only its sizes,
 * offsets and layout could be checked). *num_files (may be NULL) gets the number of files. */
int psg_checkpoint_num_verified(const psg_checkpoint_t *ck, int *num_files);

/* One tensor of an opened checkpoint (borrowed from ck). */
typedef struct {
    const char *name;
    psg_dtype_t dtype;
    psg_shape_t shape;
    size_t nbytes;
    const char *file; /* base name of its shard file */
    const void *data; /* nbytes of little-endian data, valid while ck is open */
} psg_checkpoint_entry_t;

int psg_checkpoint_num_tensors(const psg_checkpoint_t *ck);
/* The i-th tensor, in file order (shard by shard). */
void psg_checkpoint_entry(const psg_checkpoint_t *ck, int i, psg_checkpoint_entry_t *e);
/* The index of tensor `name`, or -1 (no error set). */
int psg_checkpoint_find(const psg_checkpoint_t *ck, const char *name);
/* A copy of tensor `name` (caller owns it); NULL with the error if absent. */
psg_tensor_t *psg_checkpoint_read(const psg_checkpoint_t *ck, const char *name);

/* Assigns every tensor of ck to the variable of the same name in rm, created
 * when absent, and marks it initialized. Fails, naming the tensor, if a
 * variable exists with another dtype or shape (nothing is written then).
 * With require_all, every initialized variable of rm must be in ck (else
 * fails naming it: the checkpoint is of another model). */
int psg_checkpoint_restore(const psg_checkpoint_t *ck, psg_resource_mgr_t *rm, bool require_all);

/* Called for each checkpoint skipped by psg_checkpoint_open_latest: its path
 * and why (the error message of psg_checkpoint_open). */
typedef void (*psg_checkpoint_skip_fn)(void *ctx, const char *path, const char *why);

/* Opens the newest committed checkpoint of dir that verifies (all shards, or
 * only `shard` when >= 0), reporting each newer one that does not to skip
 * (may be NULL). Returns 1 with *out set, 0 when there is none (a missing dir
 * included), -1 on an error reading dir. */
int psg_checkpoint_open_latest(const char *dir, int shard, psg_checkpoint_skip_fn skip, void *ctx,
                               psg_checkpoint_t **out);

/* ---- the saver policy of a training loop ---- */

typedef struct {
    int64_t every_steps; /* > 0: save when the step is a multiple of it */
    double every_secs;   /* > 0: save when this long has passed since the last save */
    int keep;            /* checkpoints kept (default 5) */
} psg_checkpoint_policy_t;

/* Parses "N" (steps) or "Ns" / "Nm" (seconds, minutes) into p's interval.
 * -1 with the error quoting s otherwise. */
int psg_checkpoint_policy_parse(const char *s, psg_checkpoint_policy_t *p);

/* True when a save is due at `step` (the step just finished), given the step
 * and monotonic time of the last save. */
bool psg_checkpoint_policy_due(const psg_checkpoint_policy_t *p, int64_t step, int64_t last_step,
                               double now, double last_time);

/* crc32 (zlib's) of the tensor bytes of rm's variables in ck's file order, as
 * psg_checkpoint_open checked it for ck: after a restore the two are equal.
 * *match receives whether they are. */
int psg_checkpoint_verify_restored(const psg_checkpoint_t *ck, psg_resource_mgr_t *rm, bool *match);

#endif
