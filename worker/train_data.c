/* The data sets of `psgraph train` and the evaluation over a test set (train_data.h). */
#include "worker/train_data.h"

#include "psgraph/error.h"
#include "psgraph/imagenet.h"

#include <inttypes.h>
#include <string.h>

const char *psg_train_default_data(const char *model) {
    return model && !strcmp(model, "inception3") ? "synthetic" : "fashion-mnist";
}

void psg_train_resolve(psg_train_config_t *c) {
    bool images = c->model && !strcmp(c->model, "inception3");
    if (!c->data) c->data = psg_train_default_data(c->model);
    if (!c->data_dir && !strcmp(c->data, "fashion-mnist")) c->data_dir = PSG_FASHION_MNIST_DIR;
    if (images && c->image_size <= 0) c->image_size = 299;
    if (images && c->classes <= 0) c->classes = 1000;
    if (c->label_offset < 0) c->label_offset = 0;
}

int psg_train_logits(const psg_train_config_t *c) {
    return c->classes + (!strcmp(c->data, "imagenet") && c->label_offset == 0 ? 1 : 0);
}

static void on_skip(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "psgraph: skipped: %s\n", msg);
}

/* TF's ImageNet shards (examples/data/imagenet.c): train-* of data_dir, and eval_data (a
 * folder's validation-*, or a pattern), or data_dir's validation-*. */
static int load_imagenet(const psg_train_config_t *c, psg_dataset_t **train, psg_dataset_t **test) {
    if (!c->data_dir) return psg_error_set("--data imagenet needs --data-dir DIR (train-*)");
    psg_imagenet_options_t o = psg_imagenet_defaults(true);
    o.image_size = c->image_size;
    o.classes = psg_train_logits(c);
    o.label_offset = c->label_offset;
    o.threads = c->decode_threads > 0 ? c->decode_threads : 2;
    o.seed = c->seed;
    o.train = !c->no_distort;
    o.report = on_skip;
    if (c->compression && psg_tfrecord_compression_parse(c->compression, &o.compression) < 0)
        return psg_error_wrap("--compression");
    if (c->dct_method && psg_jpeg_dct_parse(c->dct_method, &o.dct_method) < 0)
        return psg_error_wrap("--dct-method");
    psg_imagenet_t *r = psg_imagenet_new(c->data_dir, &o);
    if (!r) return psg_error_wrap("--data-dir");
    *train = psg_imagenet_take_dataset(&r);
    if (!o.train) { /* the training set is read from train-* whatever the distortions */
        psg_dataset_destroy(train);
        char pat[4096];
        snprintf(pat, sizeof pat, "%s/train-*", c->data_dir);
        if (!(r = psg_imagenet_new(pat, &o))) return psg_error_wrap("--data-dir");
        *train = psg_imagenet_take_dataset(&r);
    }
    o.train = false;
    o.threads = 1;
    if (!(r = psg_imagenet_new(c->eval_data ? c->eval_data : c->data_dir, &o)))
        return psg_error_wrap("--eval-data");
    *test = psg_imagenet_take_dataset(&r);
    return 0;
}

int psg_train_load_data(const psg_train_config_t *c, psg_dataset_t **train, psg_dataset_t **test) {
    *train = *test = NULL;
    bool images = !strcmp(c->model, "inception3");
    if (images && strcmp(c->data, "imagenet") && strcmp(c->data, "synthetic"))
        return psg_error_set("--data %s: inception3 reads imagenet (TFRecord shards) or synthetic",
                             c->data);
    if (images && !strcmp(c->data, "synthetic")) {
        /* ImageNet's size (the decay's epochs), from 16 images */
        psg_shape_t ex = {3, {c->image_size, c->image_size, 3}};
        *train = psg_dataset_synthetic_pool(1281167, &ex, c->classes, 16, c->seed);
        *test = *train ? psg_dataset_synthetic_pool(256, &ex, c->classes, 16, c->seed + 1) : NULL;
    } else if (!strcmp(c->data, "imagenet")) {
        if (load_imagenet(c, train, test) < 0) {
            psg_dataset_destroy(train);
            return -1;
        }
    } else if (!strcmp(c->data, "fashion-mnist")) {
        *train = psg_dataset_fashion_mnist(c->data_dir, true);
        *test = *train ? psg_dataset_fashion_mnist(c->data_dir, false) : NULL;
    } else if (!strcmp(c->data, "synthetic")) {
        psg_shape_t ex = {3, {28, 28, 1}};
        *train = psg_dataset_synthetic(60000, &ex, 10, c->seed);
        *test = *train ? psg_dataset_synthetic(10000, &ex, 10, c->seed + 1) : NULL;
    } else {
        return psg_error_set(
            "--data: unknown data set '%s' (known: fashion-mnist, synthetic, imagenet)", c->data);
    }
    if (!*train || !*test) return -1;
    if (c->test_examples > 0 && c->test_examples < psg_dataset_size(*test)) { /* the first N */
        psg_tensor_t *images = NULL, *labels = NULL;
        int classes = psg_dataset_num_classes(*test);
        int rc = psg_dataset_slice(*test, 0, c->test_examples, &images, &labels);
        psg_dataset_destroy(test);
        if (rc < 0) return psg_error_wrap("--test-examples %" PRId64, c->test_examples);
        if (!(*test = psg_dataset_from_tensors(&images, &labels, classes))) return -1;
    }
    return 0;
}

/* Adds to hits[0] the examples whose label has the highest logit (the first highest, as
 * ArgMax) and to hits[1] those whose label is among the 5 highest (TF's in_top_k: ties with
 * the 5th count in). logits (n, classes), labels (n). */
static void count_hits(const psg_tensor_t *logits, const psg_tensor_t *labels, double hits[2]) {
    int64_t n = labels->shape.dims[0], classes = psg_tensor_numel(logits) / (n > 0 ? n : 1);
    for (int64_t i = 0; i < n; i++) {
        const float *l = psg_tensor_f32(logits) + i * classes;
        int32_t y = psg_tensor_i32(labels)[i];
        if (y < 0 || y >= classes) continue;
        int64_t above = 0, first = 0;
        for (int64_t k = 0; k < classes; k++) {
            above += l[k] > l[y];
            if (l[k] > l[first]) first = k;
        }
        hits[0] += first == y;
        hits[1] += above < 5;
    }
}

int psg_train_evaluate(psg_callable_t *eval, psg_dist_callable_t *deval, int n_models,
                       const psg_dataset_t *test, psg_train_eval_t *r) {
    psg_batch_iter_options_t o = psg_batch_iter_eval_options(PSG_TRAIN_EVAL_BATCH);
    psg_batch_iter_t *it = psg_batch_iter_new(test, &o);
    if (!it) return -1;
    double hits[2][2] = {{0}};
    int64_t seen = 0;
    psg_tensor_t *images = NULL, *labels = NULL;
    int rc;
    while ((rc = psg_batch_iter_next(it, &images, &labels)) == 1) {
        psg_tensor_t *feeds[2] = {images, images}, *out[2] = {NULL, NULL};
        rc = deval ? psg_dist_callable_run(deval, feeds, out) : psg_callable_run(eval, feeds, out);
        for (int m = 0; rc == 0 && m < n_models; m++) count_hits(out[m], labels, hits[m]);
        if (rc == 0) seen += labels->shape.dims[0];
        for (int m = 0; m < 2; m++) psg_tensor_destroy(&out[m]);
        psg_tensor_destroy(&images);
        psg_tensor_destroy(&labels);
        if (rc < 0) break;
    }
    psg_batch_iter_destroy(&it);
    psg_buffer_cache_trim(); /* evaluation's block sizes are not the training step's */
    if (rc < 0) return psg_error_wrap("evaluation");
    for (int m = 0; m < 2; m++) {
        r->top1[m] = m < n_models && seen ? hits[m][0] / (double)seen : -1;
        r->top5[m] = m < n_models && seen ? hits[m][1] / (double)seen : -1;
    }
    r->n_models = n_models;
    r->examples = seen;
    /* the accuracy a run reports: the moving average's when there is one (TF's eval) */
    r->accuracy = r->top1[n_models - 1];
    return 0;
}
