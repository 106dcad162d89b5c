/* Training data: the IDX reader (Fashion-MNIST), in-memory and synthetic
 * datasets, and batch iterators with per-epoch shuffling by seed, sharding
 * across workers and a background prefetch thread. Batches are tensors ready
 * to feed placeholders. Not a general input pipeline (no decoding, no
 * augmentation) and not graph ops. */
#ifndef PSGRAPH_DATA_H
#define PSGRAPH_DATA_H

#include "psgraph/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- IDX files (gzip or plain, read through zlib) ---- */

/* The whole IDX file at `path` as a u8 tensor of the file's dims. Fails, with
 * an error naming the file, when it is missing, its magic is not an unsigned
 * byte IDX (0x0000 08 nd, 1 <= nd <= 4), a dim is 0 or absurd, or the data is
 * shorter than the header says (truncated) or the gzip stream is corrupt. */
psg_tensor_t *psg_idx_read(const char *path);
/* IDX images (magic 0x00000803, [N, R, C]) as f32 [N, R, C, 1] scaled to [0, 1]. */
psg_tensor_t *psg_idx_load_images(const char *path);
/* IDX labels (magic 0x00000801, [N]) as i32 [N]. */
psg_tensor_t *psg_idx_load_labels(const char *path);

/* ---- datasets: N examples, each an image of a fixed shape and a label ---- */

typedef struct psg_dataset psg_dataset_t;

#define PSG_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Fashion-MNIST's train (60000) or test (10000) split from `dir` (NULL:
 * PSG_FASHION_MNIST_DIR), files {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
 * Images are kept as bytes (47 MB for train) and scaled when batched. Fails
 * naming the file on a missing or corrupt file, a count mismatch between
 * images and labels, or a label outside [0, 10). */
psg_dataset_t *psg_dataset_fashion_mnist(const char *dir, bool train);
/* A dataset from an images and a labels IDX file (num_classes: labels must
 * lie in [0, num_classes)). */
psg_dataset_t *psg_dataset_from_idx(const char *images_path, const char *labels_path,
                                    int num_classes);
/* A dataset over images (u8, scaled by 1/255, or f32, as is: [N, ...]) and
 * labels (i32 [N], each in [0, num_classes)). Takes both (*images and *labels
 * set NULL, also on failure). */
psg_dataset_t *psg_dataset_from_tensors(psg_tensor_t **images, psg_tensor_t **labels,
                                        int num_classes);
/* n random examples for benchmarks, generated once from seed: images f32 of
 * example_shape (e.g. [28, 28, 1]) uniform in [0, 1), labels uniform in
 * [0, num_classes). */
psg_dataset_t *psg_dataset_synthetic(int64_t n, const psg_shape_t *example_shape, int num_classes,
                                     uint64_t seed);
/* A dataset whose examples a function makes on demand (a reader of files too
 * big for memory): fill writes the examples indices[0..n) into images
 * (n x example size, f32) and labels (n); it returns 0, or -1 with the error
 * set. It may run on the prefetch thread. ctx is borrowed. */
typedef int (*psg_dataset_fill_fn)(void *ctx, int n, const int64_t *indices, float *images,
                                   int32_t *labels);
psg_dataset_t *psg_dataset_from_fn(int64_t n, const psg_shape_t *example_shape, int num_classes,
                                   psg_dataset_fill_fn fill, void *ctx);
void psg_dataset_destroy(psg_dataset_t **ds);
/* From now on destroying ds calls free_ctx on the ctx given to psg_dataset_from_fn (the
 * dataset owns its source). */
void psg_dataset_own_ctx(psg_dataset_t *ds, void (*free_ctx)(void *ctx));
/* n examples made on demand from `pool` random images (f32 of example_shape, uniform in
 * [-1, 1), made once from seed), example i being image i % pool with a label drawn from
 * (seed, i) in [0, num_classes): a data set of any size in little memory, for benchmarks
 * (tf_cnn_benchmarks' synthetic images). */
psg_dataset_t *psg_dataset_synthetic_pool(int64_t n, const psg_shape_t *example_shape,
                                          int num_classes, int64_t pool, uint64_t seed);

int64_t psg_dataset_size(const psg_dataset_t *ds);
/* One example's shape ([28, 28, 1] for Fashion-MNIST). */
psg_shape_t psg_dataset_example_shape(const psg_dataset_t *ds);
int psg_dataset_num_classes(const psg_dataset_t *ds);
/* The examples indices[0..n) as a batch: images f32 [n, ...example shape],
 * labels i32 [n], both new (the caller owns them). -1 with the error set on
 * an index out of range or a failing source. */
int psg_dataset_gather(const psg_dataset_t *ds, int n, const int64_t *indices,
                       psg_tensor_t **images, psg_tensor_t **labels);
/* The examples [start, start + count) in order, as psg_dataset_gather. */
int psg_dataset_slice(const psg_dataset_t *ds, int64_t start, int64_t count, psg_tensor_t **images,
                      psg_tensor_t **labels);

/* The order of epoch `epoch` over n examples: 0..n-1 when !shuffle, else a
 * permutation that depends only on (seed, epoch). order holds n entries. */
void psg_data_epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int64_t *order);

/* ---- batch iterators ---- */

typedef struct {
    int batch_size; /* > 0 */
    bool shuffle;   /* each epoch in psg_data_epoch_order(seed, epoch) */
    uint64_t seed;
    bool drop_remainder; /* only full batches (training); false keeps the tail */
    int num_shards;      /* workers reading this dataset (<= 1: one) */
    int shard_index;     /* this worker, in [0, num_shards) */
    int64_t num_epochs;  /* then psg_batch_iter_next returns 0; 0: forever */
    int prefetch;        /* batches a background thread keeps ready; 0: none */
    int64_t start_batch; /* the first batch returned is this one of the sequence (0-based,
                            epochs included): a resumed run reads on where it stopped */
    bool pin_memory;     /* batches in pinned host memory (psg_tensor_new_pinned), copied to a
                            GPU without a staging copy on the step's time: for a GPU consumer */
} psg_batch_iter_options_t;

/* Training: shuffled by seed, full batches only, forever, 2 batches prefetched. */
psg_batch_iter_options_t psg_batch_iter_train_options(int batch_size, uint64_t seed);
/* Evaluation: in order, one epoch, the last partial batch included, no prefetch. */
psg_batch_iter_options_t psg_batch_iter_eval_options(int batch_size);

/* Sharding: an epoch's order is cut into blocks of batch_size; block k goes
 * to shard k % num_shards, so the shards' batches j together are the global
 * batch j of size num_shards * batch_size of one process reading it all (the
 * sync-replicas equivalence). With drop_remainder every shard gets
 * floor(n / (num_shards * batch_size)) batches an epoch; without, the blocks
 * that exist, the last one short. Every example is read once an epoch
 * across the shards. */
typedef struct psg_batch_iter psg_batch_iter_t;

/* An iterator over ds (borrowed: it must outlive the iterator). With
 * prefetch > 0 it starts a thread that makes the next batches into a
 * bounded queue; the batches are the same as without. NULL with the error
 * set on bad options or an empty epoch (fewer examples than one batch with
 * drop_remainder). */
psg_batch_iter_t *psg_batch_iter_new(const psg_dataset_t *ds, const psg_batch_iter_options_t *opt);
/* The next batch: *images f32 [B, ...], *labels i32 [B] (new; the caller
 * owns them). Returns 1, 0 at the end (after num_epochs; again on every later
 * call), or -1 with the error set (an error of the prefetch thread is passed
 * on here, and again on later calls). */
int psg_batch_iter_next(psg_batch_iter_t *it, psg_tensor_t **images, psg_tensor_t **labels);
/* The epoch of the batch last returned (0-based). */
int64_t psg_batch_iter_epoch(const psg_batch_iter_t *it);
/* Batches this shard reads per epoch. */
int64_t psg_batch_iter_batches_per_epoch(const psg_batch_iter_t *it);
/* Stops and joins the prefetch thread and frees the queued batches. NULL-safe. */
void psg_batch_iter_destroy(psg_batch_iter_t **it);

#endif
