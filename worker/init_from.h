/* Internal to psgraph: `psgraph train --init-from FILE.safetensors` (docs/checkpoints.md,
 * "Starting from other weights"): weights by name from a safetensors file any writer made
 * (Python's safetensors, psgraph's own shards), as the initial values of the variables of
 * the same names — TensorFlow's init_from_checkpoint, which overrides initializers —
 * with shapes and dtypes checked, any layout of a variable into any other (a whole weight
 * into the column parts "weights/part_k" the model makes of it, parts into a whole, n parts
 * into m), and a report of the matched, missing and
 * unexpected names as PyTorch's load_state_dict gives. Not a resume: a checkpoint of
 * --logdir, when there is one, is restored over these values. */
#ifndef PSGRAPH_WORKER_INIT_FROM_H
#define PSGRAPH_WORKER_INIT_FROM_H

#include "psgraph/graph.h"
#include "psgraph/inception3.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct psg_init_from psg_init_from_t;

/* Opens and checks the file (safetensors framing, header, offsets; a psgraph shard's
 * data crc32) — a .safetensors file, a psgraph checkpoint index, or the index of a sharded
 * file (model.safetensors.index.json: its weight_map's files beside it) — and makes it the source
 * of g's initial values from now on (build the model after this). NULL with the error naming the
 * file. */
psg_init_from_t *psg_init_from_new(const char *path, bool strict, psg_graph_t *g);
/* Detaches from the graph and frees. NULL-safe. */
void psg_init_from_destroy(psg_init_from_t **f);

/* Other names the file may hold variables under (Inception-v3's Keras names for its slim
 * ones, psg_inception3_keras_names): a variable pairs[i].slim that the file lacks is read
 * from its tensor pairs[i].keras; a classifier's (pairs[i].logits) whose last dim is one
 * less or more than the variable's gets TF's background class as a zero column 0, or
 * loses column 0 (Keras's 1000 ImageNet classes against slim's 1001). Call it before the
 * model is built; the pairs are copied. 0, or -1 with the error set. */
int psg_init_from_alias(psg_init_from_t *f, int n, const psg_inception3_name_t *pairs);

/* After the model is built: prints on out how many of the file's tensors were matched
 * and names the missing ones (trainable variables of g not in the file: they keep their
 * initializers) and the unexpected ones (tensors of the file that are no variable of g;
 * a global_step is not loaded, not unexpected: a run from other weights starts at 0).
 * 0, or -1 with the error naming them when strict and any is missing or unexpected. A
 * shape or dtype mismatch fails earlier, at the variable's creation, strict or not. */
int psg_init_from_report(psg_init_from_t *f, FILE *out);

#endif
