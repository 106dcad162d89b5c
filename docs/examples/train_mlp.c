/* A program against the installed libpsgraph (docs/api.md): builds the MLP
 * of the model zoo on Fashion-MNIST, adds SGD with momentum, trains it for a
 * few hundred steps in this process and prints the test accuracy.
 *
 *   cc train_mlp.c $(pkg-config --cflags --libs psgraph) -o train_mlp
 *   ./train_mlp /usr/share/datasets/fashion-mnist [steps]
 *
 * Only public headers: <psgraph/psgraph.h>. Exits 1 with the error on failure. */
#include <psgraph/psgraph.h>

#include <stdio.h>
#include <stdlib.h>

#define BATCH 64

static int fail(const char *what) {
    fprintf(stderr, "train_mlp: %s: %s\n", what, psg_error_message());
    return 1;
}

/* The fraction of the test set the model classifies right. */
static double accuracy(psg_callable_t *eval, const psg_dataset_t *test) {
    psg_batch_iter_options_t o = psg_batch_iter_eval_options(1000);
    psg_batch_iter_t *it = psg_batch_iter_new(test, &o);
    psg_tensor_t *images, *labels, *correct;
    double right = 0;
    int64_t seen = 0;
    while (it && psg_batch_iter_next(it, &images, &labels) == 1) {
        psg_tensor_t *feed[2] = {images, labels};
        if (psg_callable_run(eval, feed, &correct) == 0) {
            right += psg_tensor_f32(correct)[0];
            psg_tensor_destroy(&correct);
        }
        seen += labels->shape.dims[0];
        psg_tensor_destroy(&images);
        psg_tensor_destroy(&labels);
    }
    psg_batch_iter_destroy(&it);
    return seen ? right / (double)seen : 0;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    int steps = argc > 2 ? atoi(argv[2]) : 300;
    psg_dataset_t *train = psg_dataset_fashion_mnist(dir, true);
    psg_dataset_t *test = train ? psg_dataset_fashion_mnist(dir, false) : NULL;
    if (!test) return fail(dir);

    /* the graph: the model, its loss, and one train op for SGD with momentum */
    psg_graph_t *g = psg_graph_new();
    psg_model_t m;
    psg_optimizer_config_t cfg = psg_optimizer_defaults("momentum");
    cfg.learning_rate = 0.05f;
    psg_optimizer_t *opt = psg_optimizer_new(&cfg);
    int train_op = -1;
    if (!opt || psg_model_build(g, "mlp", 28, 28, 1, 10, 1, &m) < 0 ||
        psg_optimizer_minimize(opt, g, m.loss, &train_op) < 0)
        return fail("building the graph");

    /* a session, the variables initialized, one callable per signature */
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    psg_endpoint_t feeds[2] = {m.images, m.labels};
    psg_callable_t *step =
        s ? psg_session_make_callable(s, 2, feeds, 1, &m.loss, 1, &train_op) : NULL;
    psg_callable_t *eval =
        s ? psg_session_make_callable(s, 2, feeds, 1, &m.correct, 0, NULL) : NULL;
    if (!step || !eval || psg_session_run_init(s) < 0) return fail("preparing the session");

    psg_batch_iter_options_t io = psg_batch_iter_train_options(BATCH, 1);
    psg_batch_iter_t *it = psg_batch_iter_new(train, &io);
    double first = 0, last = 0;
    for (int i = 0; it && i < steps; i++) {
        psg_tensor_t *images, *labels, *loss;
        if (psg_batch_iter_next(it, &images, &labels) != 1) return fail("reading a batch");
        psg_tensor_t *feed[2] = {images, labels};
        int rc = psg_callable_run(step, feed, &loss);
        psg_tensor_destroy(&images);
        psg_tensor_destroy(&labels);
        if (rc < 0) return fail("a training step");
        last = psg_tensor_f32(loss)[0];
        if (i == 0) first = last;
        psg_tensor_destroy(&loss);
    }
    printf("steps %d loss %.4f -> %.4f test accuracy %.4f\n", steps, first, last,
           accuracy(eval, test));

    psg_batch_iter_destroy(&it);
    psg_callable_destroy(&step);
    psg_callable_destroy(&eval);
    psg_session_destroy(&s);
    psg_optimizer_destroy(&opt);
    psg_graph_destroy(&g);
    psg_dataset_destroy(&train);
    psg_dataset_destroy(&test);
    return 0;
}
