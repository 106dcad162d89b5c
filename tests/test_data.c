/* Data: the IDX reader on the real Fashion-MNIST and on broken files, the
 * epoch order, batching, sharding, prefetch against the synchronous path and
 * error propagation from the prefetch thread. */
#include "psgraph/data.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

static bool have_fashion(void) {
    return access(PSG_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0;
}

static double mean_f32(const psg_tensor_t *t) {
    double s = 0;
    for (int64_t i = 0; i < psg_tensor_numel(t); i++) s += psg_tensor_f32(t)[i];
    return s / (double)psg_tensor_numel(t);
}

static void test_fashion_mnist(void) {
    if (!have_fashion()) {
        printf("skip test_fashion_mnist: %s is missing\n", PSG_FASHION_MNIST_DIR);
        return;
    }
    psg_tensor_t *im = psg_idx_load_images(PSG_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz");
    psg_tensor_t *lb = psg_idx_load_labels(PSG_FASHION_MNIST_DIR "/train-labels-idx1-ubyte.gz");
    CHECK(im && im->dtype == PSG_DT_F32 && im->shape.rank == 4);
    CHECK(im && im->shape.dims[0] == 60000 && im->shape.dims[1] == 28 && im->shape.dims[2] == 28 &&
          im->shape.dims[3] == 1);
    CHECK(lb && lb->dtype == PSG_DT_I32 && lb->shape.rank == 1 && lb->shape.dims[0] == 60000);
    if (!im || !lb) return;
    CHECK(psg_tensor_i32(lb)[0] == 9);
    /* Fashion-MNIST's known statistics: mean 0.2860, every class 6000 times */
    CHECK_NEAR(mean_f32(im), 0.2860, 5e-4);
    float lo = 1, hi = 0;
    for (int64_t i = 0; i < psg_tensor_numel(im); i++) {
        float v = psg_tensor_f32(im)[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    CHECK(lo == 0.0f && hi == 1.0f);
    int counts[10] = {0};
    for (int i = 0; i < 60000; i++) counts[psg_tensor_i32(lb)[i]]++;
    for (int c = 0; c < 10; c++) CHECK(counts[c] == 6000);

    psg_dataset_t *train = psg_dataset_fashion_mnist(NULL, true);
    psg_dataset_t *test = psg_dataset_fashion_mnist(NULL, false);
    CHECK(train && psg_dataset_size(train) == 60000 && psg_dataset_num_classes(train) == 10);
    CHECK(test && psg_dataset_size(test) == 10000);
    psg_shape_t ex = psg_dataset_example_shape(train);
    CHECK(ex.rank == 3 && ex.dims[0] == 28 && ex.dims[1] == 28 && ex.dims[2] == 1);
    psg_tensor_t *bi = NULL, *bl = NULL;
    /* the dataset's batches (bytes scaled when batched) equal the f32 loader's */
    CHECK(psg_dataset_slice(train, 0, 2, &bi, &bl) == 0);
    CHECK(bi && bi->shape.rank == 4 && bi->shape.dims[0] == 2 && bl->shape.dims[0] == 2);
    CHECK(bi && memcmp(bi->data, im->data, 2 * 784 * sizeof(float)) == 0);
    CHECK(bl && psg_tensor_i32(bl)[0] == 9);
    psg_tensor_destroy(&bi);
    psg_tensor_destroy(&bl);
    CHECK(psg_dataset_slice(test, 0, 10000, &bi, &bl) == 0);
    CHECK(bl && psg_tensor_i32(bl)[0] == 9);
    CHECK(bi && fabs(mean_f32(bi) - 0.2868) < 1e-3);
    psg_tensor_destroy(&bi);
    psg_tensor_destroy(&bl);
    psg_dataset_destroy(&train);
    psg_dataset_destroy(&test);
    CHECK(train == NULL);
    psg_tensor_destroy(&im);
    psg_tensor_destroy(&lb);
}

/* A dataset whose example i is the image [i] and label i % 10. */
static psg_dataset_t *counting(int64_t n) {
    psg_tensor_t *im = psg_tensor_new(PSG_DT_F32, &(psg_shape_t){2, {n, 1}});
    psg_tensor_t *lb = psg_tensor_new(PSG_DT_I32, &(psg_shape_t){1, {n}});
    for (int64_t i = 0; i < n; i++) {
        psg_tensor_f32(im)[i] = (float)i;
        psg_tensor_i32(lb)[i] = (int32_t)(i % 10);
    }
    return psg_dataset_from_tensors(&im, &lb, 10);
}

static void test_epoch_order(void) {
    enum { n = 1000 };
    int64_t *a = malloc(sizeof(int64_t) * n), *b = malloc(sizeof(int64_t) * n);
    char *seen = calloc(n, 1);
    psg_data_epoch_order(n, 42, 0, true, a);
    psg_data_epoch_order(n, 42, 0, true, b);
    CHECK(memcmp(a, b, sizeof(int64_t) * n) == 0);
    psg_data_epoch_order(n, 42, 1, true, b);
    CHECK(memcmp(a, b, sizeof(int64_t) * n) != 0);
    psg_data_epoch_order(n, 43, 0, true, b);
    CHECK(memcmp(a, b, sizeof(int64_t) * n) != 0);
    int fixed = 0;
    for (int i = 0; i < n; i++) {
        CHECK(a[i] >= 0 && a[i] < n && !seen[a[i]]);
        if (a[i] >= 0 && a[i] < n) seen[a[i]] = 1;
        fixed += a[i] == i;
    }
    CHECK(fixed < 10); /* shuffled, not the identity */
    psg_data_epoch_order(n, 42, 0, false, b);
    for (int i = 0; i < n; i++) CHECK(b[i] == i);
    free(a);
    free(b);
    free(seen);
}

/* Training batches: full, every example at most once an epoch, all of them
 * when the size divides; reshuffled each epoch; labels travel with images. */
static void test_train_batches(void) {
    psg_dataset_t *ds = counting(100);
    psg_batch_iter_options_t o = psg_batch_iter_train_options(10, 7);
    o.prefetch = 0;
    psg_batch_iter_t *it = psg_batch_iter_new(ds, &o);
    CHECK(it && psg_batch_iter_batches_per_epoch(it) == 10);
    float first[2][10];
    for (int e = 0; e < 2; e++) {
        char seen[100] = {0};
        for (int k = 0; k < 10; k++) {
            psg_tensor_t *im, *lb;
            CHECK(psg_batch_iter_next(it, &im, &lb) == 1);
            CHECK(psg_batch_iter_epoch(it) == e);
            CHECK(im->shape.rank == 2 && im->shape.dims[0] == 10 && lb->shape.dims[0] == 10);
            for (int i = 0; i < 10; i++) {
                int id = (int)psg_tensor_f32(im)[i];
                CHECK(!seen[id]);
                seen[id] = 1;
                CHECK(psg_tensor_i32(lb)[i] == id % 10);
                if (k == 0) first[e][i] = (float)id;
            }
            psg_tensor_destroy(&im);
            psg_tensor_destroy(&lb);
        }
        for (int i = 0; i < 100; i++) CHECK(seen[i]);
    }
    CHECK(memcmp(first[0], first[1], sizeof first[0]) != 0);
    psg_batch_iter_destroy(&it);
    /* 103 examples: 10 full batches, the tail of 3 dropped */
    psg_dataset_t *ds2 = counting(103);
    it = psg_batch_iter_new(ds2, &o);
    CHECK(it && psg_batch_iter_batches_per_epoch(it) == 10);
    psg_batch_iter_destroy(&it);
    /* fewer examples than a batch */
    o.batch_size = 200;
    CHECK(psg_batch_iter_new(ds2, &o) == NULL);
    CHECK_ERROR_HAS("make no batch of 200");
    psg_dataset_destroy(&ds);
    psg_dataset_destroy(&ds2);
}

static void test_eval_batches_keep_the_tail(void) {
    psg_dataset_t *ds = counting(103);
    psg_batch_iter_options_t o = psg_batch_iter_eval_options(10);
    psg_batch_iter_t *it = psg_batch_iter_new(ds, &o);
    CHECK(it && psg_batch_iter_batches_per_epoch(it) == 11);
    int next = 0, batches = 0;
    psg_tensor_t *im, *lb;
    while (psg_batch_iter_next(it, &im, &lb) == 1) {
        for (int64_t i = 0; i < im->shape.dims[0]; i++) CHECK((int)psg_tensor_f32(im)[i] == next++);
        CHECK(im->shape.dims[0] == (batches == 10 ? 3 : 10));
        batches++;
        psg_tensor_destroy(&im);
        psg_tensor_destroy(&lb);
    }
    CHECK(batches == 11 && next == 103);
    CHECK(psg_batch_iter_next(it, &im, &lb) == 0 && im == NULL); /* the end stays the end */
    psg_batch_iter_destroy(&it);
    psg_dataset_destroy(&ds);
}

/* Collects the example ids a shard reads in one epoch; returns the count. */
static int read_shard(const psg_dataset_t *ds, psg_batch_iter_options_t o, int *ids) {
    psg_batch_iter_t *it = psg_batch_iter_new(ds, &o);
    int n = 0;
    psg_tensor_t *im, *lb;
    for (int64_t k = 0; it && k < psg_batch_iter_batches_per_epoch(it); k++) {
        CHECK(psg_batch_iter_next(it, &im, &lb) == 1);
        for (int64_t i = 0; im && i < im->shape.dims[0]; i++) ids[n++] = (int)psg_tensor_f32(im)[i];
        psg_tensor_destroy(&im);
        psg_tensor_destroy(&lb);
    }
    psg_batch_iter_destroy(&it);
    return n;
}

static void test_sharding(void) {
    enum { n = 50, shards = 3, b = 4 };
    psg_dataset_t *ds = counting(n);
    int ids[shards][n], count[shards];
    /* evaluation: every example exactly once across the shards */
    int seen[n] = {0};
    for (int s = 0; s < shards; s++) {
        psg_batch_iter_options_t o = psg_batch_iter_eval_options(b);
        o.num_shards = shards;
        o.shard_index = s;
        o.shuffle = true;
        o.seed = 3;
        count[s] = read_shard(ds, o, ids[s]);
        for (int i = 0; i < count[s]; i++) seen[ids[s][i]]++;
    }
    CHECK(count[0] + count[1] + count[2] == n);
    for (int i = 0; i < n; i++) CHECK(seen[i] == 1);
    /* training: shard s's batch j is the s-th block of the global batch j of
     * one reader with batch shards * b (the sync-replicas equivalence) */
    int global[n];
    psg_batch_iter_options_t g = psg_batch_iter_train_options(shards * b, 9);
    int gn = read_shard(ds, g, global);
    CHECK(gn == 48);
    for (int s = 0; s < shards; s++) {
        psg_batch_iter_options_t o = psg_batch_iter_train_options(b, 9);
        o.num_shards = shards;
        o.shard_index = s;
        count[s] = read_shard(ds, o, ids[s]);
        CHECK(count[s] == 16);
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < b; i++)
                CHECK(ids[s][j * b + i] == global[j * shards * b + s * b + i]);
    }
    psg_batch_iter_options_t bad = psg_batch_iter_train_options(b, 9);
    bad.num_shards = 3;
    bad.shard_index = 3;
    CHECK(psg_batch_iter_new(ds, &bad) == NULL);
    psg_dataset_destroy(&ds);
}

static bool same_tensor(const psg_tensor_t *a, const psg_tensor_t *b) {
    return a && b && a->dtype == b->dtype && psg_shape_equal(&a->shape, &b->shape) &&
           memcmp(a->data, b->data, psg_tensor_nbytes(a)) == 0;
}

static void test_synthetic_and_prefetch(void) {
    psg_shape_t ex = {3, {28, 28, 1}};
    psg_dataset_t *ds = psg_dataset_synthetic(500, &ex, 10, 11);
    psg_dataset_t *again = psg_dataset_synthetic(500, &ex, 10, 11);
    CHECK(ds && psg_dataset_size(ds) == 500 && psg_dataset_num_classes(ds) == 10);
    psg_tensor_t *a, *al, *b, *bl;
    CHECK(psg_dataset_slice(ds, 0, 500, &a, &al) == 0);
    CHECK(psg_dataset_slice(again, 0, 500, &b, &bl) == 0);
    CHECK(same_tensor(a, b) && same_tensor(al, bl)); /* generated once, from the seed */
    CHECK(a && a->shape.rank == 4 && a->shape.dims[1] == 28 && a->shape.dims[3] == 1);
    bool in_range = true;
    for (int i = 0; al && i < 500; i++)
        in_range &= psg_tensor_i32(al)[i] >= 0 && psg_tensor_i32(al)[i] < 10;
    CHECK(in_range);
    CHECK(a && mean_f32(a) > 0.45 && mean_f32(a) < 0.55);
    psg_tensor_destroy(&a);
    psg_tensor_destroy(&al);
    psg_tensor_destroy(&b);
    psg_tensor_destroy(&bl);
    CHECK(psg_dataset_gather(ds, 1, &(int64_t){500}, &a, &al) < 0);
    CHECK_ERROR_HAS("example 500 is outside [0, 500)");

    /* prefetch gives the same batches, epochs included, as the synchronous path */
    psg_batch_iter_options_t o = psg_batch_iter_train_options(64, 5);
    o.prefetch = 0;
    psg_batch_iter_t *sync = psg_batch_iter_new(ds, &o);
    o.prefetch = 3;
    o.pin_memory = true; /* pinned batches (host memory without a GPU): the same batches */
    psg_batch_iter_t *pre = psg_batch_iter_new(ds, &o);
    o.pin_memory = false;
    CHECK(sync && pre);
    for (int k = 0; sync && pre && k < 30; k++) {
        CHECK(psg_batch_iter_next(sync, &a, &al) == 1);
        CHECK(psg_batch_iter_next(pre, &b, &bl) == 1);
        CHECK(same_tensor(a, b) && same_tensor(al, bl));
        CHECK(psg_batch_iter_epoch(sync) == psg_batch_iter_epoch(pre) &&
              psg_batch_iter_epoch(pre) == k / 7);
        psg_tensor_destroy(&a);
        psg_tensor_destroy(&al);
        psg_tensor_destroy(&b);
        psg_tensor_destroy(&bl);
    }
    psg_batch_iter_destroy(&sync);
    psg_batch_iter_destroy(&pre); /* its thread waits on a full queue: clean stop */
    /* a limited number of epochs ends the same way on both paths */
    o = psg_batch_iter_eval_options(100);
    o.prefetch = 2;
    pre = psg_batch_iter_new(ds, &o);
    int n = 0;
    while (psg_batch_iter_next(pre, &a, &al) == 1) {
        n++;
        psg_tensor_destroy(&a);
        psg_tensor_destroy(&al);
    }
    CHECK(n == 5 && psg_batch_iter_next(pre, &a, &al) == 0);
    psg_batch_iter_destroy(&pre);
    psg_batch_iter_destroy(&pre); /* NULL-safe */
    psg_dataset_destroy(&ds);
    psg_dataset_destroy(&again);
}

/* A source that fails on its fourth batch. */
static int failing_fill(void *ctx, int n, const int64_t *indices, float *images, int32_t *labels) {
    int *calls = ctx;
    if (++*calls == 4) return psg_error_set("disk on fire at example %lld", (long long)indices[0]);
    for (int i = 0; i < n; i++) {
        images[i] = (float)indices[i];
        labels[i] = 0;
    }
    return 0;
}

static void test_prefetch_propagates_errors(void) {
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        int calls = 0;
        psg_shape_t ex = psg_shape_1d(1);
        psg_dataset_t *ds = psg_dataset_from_fn(40, &ex, 2, failing_fill, &calls);
        psg_batch_iter_options_t o = psg_batch_iter_train_options(4, 1);
        o.prefetch = prefetch;
        psg_batch_iter_t *it = psg_batch_iter_new(ds, &o);
        psg_tensor_t *im, *lb;
        for (int k = 0; k < 3; k++) {
            CHECK(psg_batch_iter_next(it, &im, &lb) == 1);
            psg_tensor_destroy(&im);
            psg_tensor_destroy(&lb);
        }
        psg_error_clear();
        CHECK(psg_batch_iter_next(it, &im, &lb) == -1 && im == NULL);
        CHECK_ERROR_HAS("dataset source: disk on fire");
        psg_error_clear();
        CHECK(psg_batch_iter_next(it, &im, &lb) == -1); /* and stays failed */
        CHECK_ERROR_HAS("disk on fire");
        psg_batch_iter_destroy(&it);
        psg_dataset_destroy(&ds);
    }
}

/* Writes `n` bytes gzip-compressed to path. */
static void write_gz(const char *path, const unsigned char *data, size_t n) {
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(gzwrite(f, data, (unsigned)n) == (int)n);
    gzclose(f);
}

static void test_broken_files(void) {
    char dir[] = "/tmp/psg_test_data_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[4][256];
    const char *names[4] = {"truncated.gz", "badmagic.gz", "images.gz", "labels.gz"};
    for (int i = 0; i < 4; i++) snprintf(path[i], sizeof path[i], "%s/%s", dir, names[i]);

    /* missing: named */
    CHECK(psg_dataset_fashion_mnist(dir, true) == NULL);
    CHECK_ERROR_HAS("train-images-idx3-ubyte.gz': cannot open");
    CHECK_ERROR_HAS(dir);

    /* truncated: the header promises 10 images of 28x28, 100 bytes follow */
    unsigned char buf[16 + 100] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
    write_gz(path[0], buf, sizeof buf);
    CHECK(psg_idx_load_images(path[0]) == NULL);
    CHECK_ERROR_HAS(path[0]);
    CHECK_ERROR_HAS("truncated: the data needs 7840 bytes, the file has 100");

    /* bad magic */
    unsigned char bad[16] = {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1};
    write_gz(path[1], bad, sizeof bad);
    CHECK(psg_idx_read(path[1]) == NULL);
    CHECK_ERROR_HAS(path[1]);
    CHECK_ERROR_HAS("bad magic 0x12345678");
    /* labels where images are expected */
    unsigned char lab[8 + 5] = {0, 0, 8, 1, 0, 0, 0, 5, 1, 2, 3, 4, 5};
    write_gz(path[3], lab, sizeof lab);
    CHECK(psg_idx_load_images(path[3]) == NULL);
    CHECK_ERROR_HAS("is not IDX images (expected 0x00000803)");

    /* 4 images against 5 labels: both files named */
    unsigned char im[16 + 4 * 4] = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2};
    write_gz(path[2], im, sizeof im);
    CHECK(psg_dataset_from_idx(path[2], path[3], 10) == NULL);
    CHECK_ERROR_HAS("has 4 images but");
    CHECK_ERROR_HAS(path[3]);
    /* a label out of range */
    im[7] = 5;
    unsigned char im5[16 + 5 * 4] = {0};
    memcpy(im5, im, 16);
    write_gz(path[2], im5, sizeof im5);
    CHECK(psg_dataset_from_idx(path[2], path[3], 5) == NULL);
    CHECK_ERROR_HAS("label 5 of example 4 is outside [0, 5)");
    psg_dataset_t *ok = psg_dataset_from_idx(path[2], path[3], 10);
    CHECK(ok && psg_dataset_size(ok) == 5);
    psg_dataset_destroy(&ok);

    /* a corrupt gzip stream */
    unsigned char junk[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff};
    FILE *f = fopen(path[0], "wb");
    CHECK(f && fwrite(junk, 1, sizeof junk, f) == sizeof junk);
    if (f) fclose(f);
    CHECK(psg_idx_read(path[0]) == NULL);
    CHECK_ERROR_HAS(path[0]);

    /* issue 20: 12 bytes, two dims of 2^32 - 1: their product overflowed an int64 */
    unsigned char huge[12] = {0, 0, 8, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    f = fopen(path[0], "wb");
    CHECK(f && fwrite(huge, 1, sizeof huge, f) == sizeof huge);
    if (f) fclose(f);
    CHECK(psg_idx_read(path[0]) == NULL);
    CHECK_ERROR_HAS("corrupt header: dim 1 is 4294967295");

    for (int i = 0; i < 4; i++) unlink(path[i]);
    CHECK(rmdir(dir) == 0);
}

/* A resumed run reads on where it stopped: start_batch k gives the batches a fresh
 * iterator gives after k, across an epoch's end, sharded and prefetched alike. */
static void test_start_batch(void) {
    psg_shape_t ex = {3, {2, 2, 1}};
    psg_dataset_t *ds = psg_dataset_synthetic(50, &ex, 10, 5);
    psg_batch_iter_options_t o = psg_batch_iter_train_options(4, 9);
    o.num_shards = 2;
    o.shard_index = 1; /* 6 batches an epoch */
    psg_batch_iter_t *fresh = psg_batch_iter_new(ds, &o);
    o.start_batch = 4;
    psg_batch_iter_t *resumed = psg_batch_iter_new(ds, &o);
    CHECK(fresh && resumed);
    psg_tensor_t *a = NULL, *al = NULL, *b = NULL, *bl = NULL;
    for (int i = 0; fresh && i < 4; i++) {
        CHECK(psg_batch_iter_next(fresh, &a, &al) == 1);
        psg_tensor_destroy(&a);
        psg_tensor_destroy(&al);
    }
    for (int i = 0; fresh && resumed && i < 5; i++) {
        CHECK(psg_batch_iter_next(fresh, &a, &al) == 1);
        CHECK(psg_batch_iter_next(resumed, &b, &bl) == 1);
        if (a && b) {
            CHECK(memcmp(a->data, b->data, psg_tensor_nbytes(a)) == 0);
            CHECK(memcmp(al->data, bl->data, psg_tensor_nbytes(al)) == 0);
            CHECK(psg_batch_iter_epoch(fresh) == psg_batch_iter_epoch(resumed));
        }
        psg_tensor_destroy(&a);
        psg_tensor_destroy(&al);
        psg_tensor_destroy(&b);
        psg_tensor_destroy(&bl);
    }
    CHECK(resumed && psg_batch_iter_epoch(resumed) == 1);
    o.start_batch = -1;
    CHECK(psg_batch_iter_new(ds, &o) == NULL);
    psg_batch_iter_destroy(&fresh);
    psg_batch_iter_destroy(&resumed);
    psg_dataset_destroy(&ds);
}

int main(void) {
    RUN_TEST(test_fashion_mnist);
    RUN_TEST(test_epoch_order);
    RUN_TEST(test_train_batches);
    RUN_TEST(test_eval_batches_keep_the_tail);
    RUN_TEST(test_sharding);
    RUN_TEST(test_start_batch);
    RUN_TEST(test_synthetic_and_prefetch);
    RUN_TEST(test_prefetch_propagates_errors);
    RUN_TEST(test_broken_files);
    return psg_test_summary();
}
