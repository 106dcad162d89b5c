/* The data sets of `psgraph train` and the evaluation over a test set (train_data.h). */
#include "worker/train_data.h"

#include "psgraph/error.h"

#include <inttypes.h>
#include <string.h>

int psg_train_load_data(const psg_train_config_t *c, psg_dataset_t **train, psg_dataset_t **test) {
    *train = *test = NULL;
    if (!strcmp(c->data, "fashion-mnist")) {
        *train = psg_dataset_fashion_mnist(c->data_dir, true);
        *test = *train ? psg_dataset_fashion_mnist(c->data_dir, false) : NULL;
    } else if (!strcmp(c->data, "synthetic")) {
        psg_shape_t ex = {3, {28, 28, 1}};
        *train = psg_dataset_synthetic(60000, &ex, 10, c->seed);
        *test = *train ? psg_dataset_synthetic(10000, &ex, 10, c->seed + 1) : NULL;
    } else {
        return psg_error_set("--data: unknown data set '%s' (known: fashion-mnist, synthetic)",
                             c->data);
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

int psg_train_evaluate(psg_callable_t *eval, psg_dist_callable_t *deval, const psg_dataset_t *test,
                       double *accuracy) {
    psg_batch_iter_options_t o = psg_batch_iter_eval_options(PSG_TRAIN_EVAL_BATCH);
    psg_batch_iter_t *it = psg_batch_iter_new(test, &o);
    if (!it) return -1;
    double correct = 0;
    int64_t seen = 0;
    psg_tensor_t *images = NULL, *labels = NULL;
    int rc;
    while ((rc = psg_batch_iter_next(it, &images, &labels)) == 1) {
        psg_tensor_t *feeds[2] = {images, labels}, *out = NULL;
        rc =
            deval ? psg_dist_callable_run(deval, feeds, &out) : psg_callable_run(eval, feeds, &out);
        if (rc == 0) {
            correct += psg_tensor_f32(out)[0];
            seen += labels->shape.dims[0];
        }
        psg_tensor_destroy(&out);
        psg_tensor_destroy(&images);
        psg_tensor_destroy(&labels);
        if (rc < 0) break;
    }
    psg_batch_iter_destroy(&it);
    psg_buffer_cache_trim(); /* evaluation's block sizes are not the training step's */
    if (rc < 0) return psg_error_wrap("evaluation");
    *accuracy = seen ? correct / (double)seen : 0.0;
    return 0;
}
