/* Datasets: Fashion-MNIST and other IDX pairs kept in memory as bytes,
 * tensors, synthetic data for benchmarks and sources that fill examples on
 * demand; gathering examples into batch tensors; the per-epoch order.
 * Not the iterators or the prefetch thread (examples/data/batch_iter.c). */
#include "core/rng.h"
#include "psgraph/data.h"
#include "psgraph/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct psg_dataset {
    int64_t n;
    psg_shape_t example_shape;
    int64_t example_size; /* elements of one example */
    int num_classes;
    psg_tensor_t *images; /* u8 or f32 [n, ...], or NULL for a fill source */
    psg_tensor_t *labels; /* i32 [n] */
    psg_dataset_fill_fn fill;
    void *ctx;
    void (*free_ctx)(void *ctx); /* psg_dataset_own_ctx: called on destroy */
};

static psg_dataset_t *dataset_alloc(int64_t n, const psg_shape_t *example_shape, int num_classes) {
    if (n <= 0 || num_classes <= 0 || !psg_shape_is_complete(example_shape) ||
        example_shape->rank + 1 > PSG_MAX_RANK) {
        char b[PSG_SHAPE_STR_MAX];
        psg_error_set("dataset: bad size %lld, example shape %s or class count %d", (long long)n,
                      psg_shape_str(example_shape, b, sizeof b), num_classes);
        return NULL;
    }
    psg_dataset_t *ds = calloc(1, sizeof *ds);
    if (!ds) {
        psg_error_set("out of memory");
        return NULL;
    }
    ds->n = n;
    ds->example_shape = *example_shape;
    ds->example_size = psg_shape_numel(example_shape);
    ds->num_classes = num_classes;
    return ds;
}

psg_dataset_t *psg_dataset_from_tensors(psg_tensor_t **images, psg_tensor_t **labels,
                                        int num_classes) {
    psg_tensor_t *im = *images, *lb = *labels;
    *images = *labels = NULL;
    psg_dataset_t *ds = NULL;
    if (!im || !lb || (im->dtype != PSG_DT_U8 && im->dtype != PSG_DT_F32) || im->shape.rank < 1 ||
        lb->dtype != PSG_DT_I32 || lb->shape.rank != 1) {
        psg_error_set("dataset: images must be u8 or f32 [N, ...] and labels i32 [N]");
        goto fail;
    }
    if (im->shape.dims[0] != lb->shape.dims[0]) {
        psg_error_set("dataset: %lld images but %lld labels", (long long)im->shape.dims[0],
                      (long long)lb->shape.dims[0]);
        goto fail;
    }
    for (int64_t i = 0; i < lb->shape.dims[0]; i++) {
        int32_t l = psg_tensor_i32(lb)[i];
        if (l < 0 || l >= num_classes) {
            psg_error_set("dataset: label %d of example %lld is outside [0, %d)", l, (long long)i,
                          num_classes);
            goto fail;
        }
    }
    psg_shape_t ex = {.rank = im->shape.rank - 1};
    for (int i = 1; i < im->shape.rank; i++) ex.dims[i - 1] = im->shape.dims[i];
    ds = dataset_alloc(im->shape.dims[0], &ex, num_classes);
    if (!ds) goto fail;
    ds->images = im;
    ds->labels = lb;
    return ds;
fail:
    psg_tensor_destroy(&im);
    psg_tensor_destroy(&lb);
    return NULL;
}

psg_dataset_t *psg_dataset_from_idx(const char *images_path, const char *labels_path,
                                    int num_classes) {
    psg_tensor_t *im = psg_idx_read(images_path);
    if (im && im->shape.rank != 3) {
        psg_error_set("'%s': magic 0x%08x is not IDX images (expected 0x00000803)", images_path,
                      0x800 + im->shape.rank);
        psg_tensor_destroy(&im);
    }
    if (!im) return NULL;
    psg_tensor_t *lb = psg_idx_load_labels(labels_path);
    if (!lb) {
        psg_tensor_destroy(&im);
        return NULL;
    }
    if (im->shape.dims[0] != lb->shape.dims[0]) {
        psg_error_set("'%s' has %lld images but '%s' has %lld labels", images_path,
                      (long long)im->shape.dims[0], labels_path, (long long)lb->shape.dims[0]);
        psg_tensor_destroy(&im);
        psg_tensor_destroy(&lb);
        return NULL;
    }
    /* [N, R, C] bytes become examples [R, C, 1] */
    psg_shape_t s = psg_shape_4d(im->shape.dims[0], im->shape.dims[1], im->shape.dims[2], 1);
    psg_tensor_t *im4 = psg_tensor_reshaped(im, &s);
    psg_tensor_destroy(&im);
    psg_dataset_t *ds = psg_dataset_from_tensors(&im4, &lb, num_classes);
    if (!ds) psg_error_wrap("'%s'", labels_path);
    return ds;
}

psg_dataset_t *psg_dataset_fashion_mnist(const char *dir, bool train) {
    const char *d = dir ? dir : PSG_FASHION_MNIST_DIR;
    const char *split = train ? "train" : "t10k";
    size_t len = strlen(d) + 64;
    char *im = malloc(len), *lb = malloc(len);
    psg_dataset_t *ds = NULL;
    if (!im || !lb) {
        psg_error_set("out of memory");
    } else {
        snprintf(im, len, "%s/%s-images-idx3-ubyte.gz", d, split);
        snprintf(lb, len, "%s/%s-labels-idx1-ubyte.gz", d, split);
        ds = psg_dataset_from_idx(im, lb, 10);
    }
    free(im);
    free(lb);
    return ds;
}

psg_dataset_t *psg_dataset_synthetic(int64_t n, const psg_shape_t *example_shape, int num_classes,
                                     uint64_t seed) {
    psg_dataset_t *ds = dataset_alloc(n, example_shape, num_classes);
    if (!ds) return NULL;
    psg_shape_t s = {.rank = example_shape->rank + 1, .dims = {n}};
    for (int i = 0; i < example_shape->rank; i++) s.dims[i + 1] = example_shape->dims[i];
    psg_shape_t ls = psg_shape_1d(n);
    ds->images = psg_tensor_new(PSG_DT_F32, &s);
    ds->labels = psg_tensor_new(PSG_DT_I32, &ls);
    if (!ds->images || !ds->labels) {
        psg_dataset_destroy(&ds);
        return NULL;
    }
    uint64_t st = seed;
    float *im = psg_tensor_f32(ds->images);
    int64_t total = psg_tensor_numel(ds->images);
    for (int64_t i = 0; i < total; i++)
        im[i] = (float)(psg_splitmix64(&st) >> 40) * (1.0f / 16777216.0f);
    for (int64_t i = 0; i < n; i++)
        psg_tensor_i32(ds->labels)[i] = (int32_t)(psg_splitmix64(&st) % (uint64_t)num_classes);
    return ds;
}

psg_dataset_t *psg_dataset_from_fn(int64_t n, const psg_shape_t *example_shape, int num_classes,
                                   psg_dataset_fill_fn fill, void *ctx) {
    if (!fill) {
        psg_error_set("dataset: no fill function");
        return NULL;
    }
    psg_dataset_t *ds = dataset_alloc(n, example_shape, num_classes);
    if (ds) {
        ds->fill = fill;
        ds->ctx = ctx;
    }
    return ds;
}

void psg_dataset_destroy(psg_dataset_t **dsp) {
    if (!dsp || !*dsp) return;
    psg_dataset_t *ds = *dsp;
    *dsp = NULL;
    psg_tensor_destroy(&ds->images);
    psg_tensor_destroy(&ds->labels);
    if (ds->free_ctx) ds->free_ctx(ds->ctx);
    free(ds);
}

void psg_dataset_own_ctx(psg_dataset_t *ds, void (*free_ctx)(void *ctx)) {
    ds->free_ctx = free_ctx;
}

/* The pool behind psg_dataset_synthetic_pool: `count` images, labels from the index. */
typedef struct {
    psg_tensor_t *pool;
    int64_t count, size;
    int classes;
    uint64_t seed;
} pool_t;

static int pool_fill(void *ctx, int n, const int64_t *indices, float *images, int32_t *labels) {
    const pool_t *p = ctx;
    for (int i = 0; i < n; i++) {
        uint64_t st = p->seed ^ ((uint64_t)indices[i] * 0x9e3779b97f4a7c15ull);
        memcpy(images + (size_t)i * (size_t)p->size,
               psg_tensor_f32(p->pool) + (size_t)(indices[i] % p->count) * (size_t)p->size,
               sizeof(float) * (size_t)p->size);
        labels[i] = (int32_t)(psg_splitmix64(&st) % (uint64_t)p->classes);
    }
    return 0;
}

static void pool_free(void *ctx) {
    pool_t *p = ctx;
    psg_tensor_destroy(&p->pool);
    free(p);
}

psg_dataset_t *psg_dataset_synthetic_pool(int64_t n, const psg_shape_t *example_shape,
                                          int num_classes, int64_t pool, uint64_t seed) {
    pool_t *p = calloc(1, sizeof *p);
    psg_dataset_t *ds = p ? psg_dataset_from_fn(n, example_shape, num_classes, pool_fill, p) : NULL;
    if (!ds) {
        if (!p) psg_error_set("out of memory");
        free(p);
        return NULL;
    }
    psg_dataset_own_ctx(ds, pool_free);
    p->count = pool > 0 ? pool : 1;
    p->size = ds->example_size;
    p->classes = num_classes;
    p->seed = seed;
    psg_shape_t s = psg_shape_1d(p->count * p->size);
    if (!(p->pool = psg_tensor_new(PSG_DT_F32, &s))) {
        psg_dataset_destroy(&ds);
        return NULL;
    }
    uint64_t st = seed;
    float *im = psg_tensor_f32(p->pool);
    for (int64_t i = 0; i < p->count * p->size; i++)
        im[i] = (float)(psg_splitmix64(&st) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    return ds;
}

int64_t psg_dataset_size(const psg_dataset_t *ds) {
    return ds->n;
}
psg_shape_t psg_dataset_example_shape(const psg_dataset_t *ds) {
    return ds->example_shape;
}
int psg_dataset_num_classes(const psg_dataset_t *ds) {
    return ds->num_classes;
}

int psg_dataset_gather(const psg_dataset_t *ds, int n, const int64_t *indices,
                       psg_tensor_t **images, psg_tensor_t **labels) {
    *images = *labels = NULL;
    if (n <= 0) return psg_error_set("dataset: a batch needs at least one example");
    for (int i = 0; i < n; i++)
        if (indices[i] < 0 || indices[i] >= ds->n)
            return psg_error_set("dataset: example %lld is outside [0, %lld)",
                                 (long long)indices[i], (long long)ds->n);
    psg_shape_t s = {.rank = ds->example_shape.rank + 1, .dims = {n}};
    for (int i = 0; i < ds->example_shape.rank; i++) s.dims[i + 1] = ds->example_shape.dims[i];
    psg_shape_t ls = psg_shape_1d(n);
    psg_tensor_t *im = psg_tensor_new(PSG_DT_F32, &s), *lb = psg_tensor_new(PSG_DT_I32, &ls);
    if (!im || !lb) goto fail;
    int64_t es = ds->example_size;
    float *dst = psg_tensor_f32(im);
    int32_t *ldst = psg_tensor_i32(lb);
    if (ds->fill) {
        if (ds->fill(ds->ctx, n, indices, dst, ldst) < 0) {
            psg_error_wrap("dataset source");
            goto fail;
        }
        return *images = im, *labels = lb, 0;
    }
    for (int i = 0; i < n; i++) {
        int64_t k = indices[i];
        if (ds->images->dtype == PSG_DT_U8) {
            const uint8_t *src = (const uint8_t *)ds->images->data + k * es;
            for (int64_t j = 0; j < es; j++) dst[i * es + j] = (float)src[j] * (1.0f / 255.0f);
        } else {
            memcpy(dst + i * es, psg_tensor_f32(ds->images) + k * es, sizeof(float) * (size_t)es);
        }
        ldst[i] = psg_tensor_i32(ds->labels)[k];
    }
    *images = im;
    *labels = lb;
    return 0;
fail:
    psg_tensor_destroy(&im);
    psg_tensor_destroy(&lb);
    return -1;
}

int psg_dataset_slice(const psg_dataset_t *ds, int64_t start, int64_t count, psg_tensor_t **images,
                      psg_tensor_t **labels) {
    *images = *labels = NULL;
    if (start < 0 || count <= 0 || count > ds->n - start || count > INT32_MAX)
        return psg_error_set("dataset: slice [%lld, %lld) is outside [0, %lld)", (long long)start,
                             (long long)(start + count), (long long)ds->n);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)count);
    if (!idx) return psg_error_set("out of memory");
    for (int64_t i = 0; i < count; i++) idx[i] = start + i;
    int rc = psg_dataset_gather(ds, (int)count, idx, images, labels);
    free(idx);
    return rc;
}

void psg_data_epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int64_t *order) {
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    /* the epoch's stream: seed and epoch mixed, so neighbouring seeds or
     * epochs give unrelated orders */
    uint64_t st = seed * 0x9e3779b97f4a7c15ull;
    (void)psg_splitmix64(&st);
    st ^= (uint64_t)epoch * 0xd1b54a32d192ed03ull;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(psg_splitmix64(&st) % (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}
