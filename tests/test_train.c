/* End to end: the trainer on real Fashion-MNIST reaches an accuracy no
 * untrained net does; bad configurations fail with errors that name the option. */
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static const char *data_dir(void) {
    const char *d = getenv("PSG_FASHION_MNIST");
    return d ? d : "/usr/share/datasets/fashion-mnist";
}

static void test_mlp_learns(void) {
    psg_train_config_t c;
    psg_train_config_defaults(&c);
    c.model = "mlp";
    c.data_dir = data_dir();
    c.steps = 300;
    c.threads = 2;
    c.log_every = 100;
    c.out = fopen("/dev/null", "w");
    psg_train_result_t r;
    CHECK(psg_train(&c, &r) == 0);
    fclose(c.out);
    /* ten classes: chance is 0.10; 300 steps of the mlp reach ~0.80 */
    CHECK(r.steps == 300);
    CHECK(r.test_accuracy > 0.75);
    CHECK(r.final_loss < 0.8);
    printf("mlp after 300 steps: test accuracy %.4f, loss %.4f\n", r.test_accuracy, r.final_loss);
}

static void test_same_seed_same_result(void) {
    psg_train_result_t r[2];
    for (int i = 0; i < 2; i++) {
        psg_train_config_t c;
        psg_train_config_defaults(&c);
        c.model = "mlp";
        c.data = "synthetic";
        c.steps = 30;
        c.threads = 2;
        c.out = fopen("/dev/null", "w");
        CHECK(psg_train(&c, &r[i]) == 0);
        fclose(c.out);
    }
    CHECK(r[0].final_loss == r[1].final_loss); /* deterministic: same seed, same data order */
}

/* The mlp's loss and d(loss)/d(fc1 weights) (784 x 256, row-major) on one fixed batch,
 * built with shard_bytes, from the plain model's fc1 weight `fc1` (NULL: its own init,
 * copied out to fc1_out). Every other variable keeps its seeded init, the same in both. */
static int mlp_loss_grad(int64_t shard_bytes, const float *fc1, float *fc1_out, int *nshards,
                         float *loss, float *grad) {
    enum { B = 8, IN = 784, OUT = 256 };
    psg_graph_t *g = psg_graph_new();
    psg_model_t m;
    psg_model_options_t mo = {.dense_shard_bytes = shard_bytes};
    if (psg_model_build_with(g, "mlp", 28, 28, 1, 10, 1, &mo, &m) < 0) return -1;
    psg_endpoint_t xs[PSG_MODEL_MAX_SHARDS], gs[PSG_MODEL_MAX_SHARDS];
    int n = 0, plain = psg_graph_find(g, "model/fc1/weights");
    if (plain >= 0) xs[n++] = (psg_endpoint_t){plain, 0};
    for (char name[64]; plain < 0 && n < PSG_MODEL_MAX_SHARDS; n++) {
        snprintf(name, sizeof name, "model/fc1/weights/part_%d", n);
        int id = psg_graph_find(g, name);
        if (id < 0) break;
        xs[n] = (psg_endpoint_t){id, 0};
    }
    *nshards = n;
    if (psg_gradients(g, 1, &m.loss, NULL, n, xs, gs) < 0) return -1;
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    if (!s || psg_session_run_init(s) < 0) return -1;
    psg_resource_mgr_t *rm = psg_session_resources(s);
    int64_t col = 0;
    for (int k = 0; k < n; k++) { /* shard k holds columns [col, col + cols) */
        psg_variable_t *v =
            psg_resource_find_variable(rm, psg_node_name(psg_graph_node(g, xs[k].node)));
        int64_t cols = v->shape.dims[1];
        for (int r = 0; r < IN; r++)
            for (int c = 0; c < cols; c++) {
                float *w = &psg_tensor_f32(v->value)[r * cols + c];
                if (fc1)
                    *w = fc1[r * OUT + col + c];
                else
                    fc1_out[r * OUT + col + c] = *w;
            }
        col += cols;
    }
    psg_tensor_t *images = psg_tensor_new(PSG_DT_F32, &(psg_shape_t){4, {B, 28, 28, 1}});
    psg_tensor_t *labels = psg_tensor_new(PSG_DT_I32, &(psg_shape_t){1, {B}});
    for (int i = 0; i < B * IN; i++) psg_tensor_f32(images)[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < B; i++) ((int32_t *)labels->data)[i] = i % 10;
    psg_endpoint_t feeds[2] = {m.images, m.labels}, fetches[1 + PSG_MODEL_MAX_SHARDS] = {m.loss};
    psg_tensor_t *values[2] = {images, labels}, *out[1 + PSG_MODEL_MAX_SHARDS] = {0};
    for (int k = 0; k < n; k++) fetches[1 + k] = gs[k];
    int rc = psg_session_run(s, 2, feeds, values, 1 + n, fetches, out, 0, NULL);
    if (rc == 0) {
        *loss = psg_tensor_f32(out[0])[0];
        col = 0;
        for (int k = 0; k < n; k++) {
            int64_t cols = out[1 + k]->shape.dims[1];
            for (int r = 0; r < IN; r++)
                for (int c = 0; c < cols; c++)
                    grad[r * OUT + col + c] = psg_tensor_f32(out[1 + k])[r * cols + c];
            col += cols;
        }
    }
    for (int i = 0; i < 1 + n; i++) psg_tensor_destroy(&out[i]);
    psg_tensor_destroy(&images);
    psg_tensor_destroy(&labels);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
    return rc;
}

/* Column shards of a dense weight (a cluster's default) are the same function as the
 * whole weight: same loss, same gradient, when the shards hold its column blocks. */
static void test_sharded_dense(void) {
    static float fc1[784 * 256], g_plain[784 * 256], g_sharded[784 * 256];
    float l_plain = 0, l_sharded = 0;
    int n_plain = 0, n_sharded = 0;
    CHECK(mlp_loss_grad(0, NULL, fc1, &n_plain, &l_plain, g_plain) == 0);
    CHECK(mlp_loss_grad(256 << 10, fc1, NULL, &n_sharded, &l_sharded, g_sharded) == 0);
    CHECK(n_plain == 1 && n_sharded == 4); /* 784 x 256 x 4 bytes in shards of <= 256 KiB */
    CHECK(fabsf(l_plain - l_sharded) <= 1e-5f * fabsf(l_plain));
    double worst = 0;
    for (int i = 0; i < 784 * 256; i++) {
        double d = fabs((double)g_plain[i] - g_sharded[i]) / (fabs(g_plain[i]) + 1e-4);
        if (d > worst) worst = d;
    }
    CHECK(worst < 1e-4);
    printf("sharded fc1 (4 shards): loss %.6f vs %.6f, worst gradient difference %.2e\n", l_sharded,
           l_plain, worst);
}

static void test_bad_config(void) {
    psg_train_config_t c;
    psg_train_config_defaults(&c);
    psg_train_result_t r;
    c.out = fopen("/dev/null", "w");
    c.model = "resnet";
    CHECK(psg_train(&c, &r) < 0);
    CHECK_ERROR_HAS("unknown model 'resnet'");
    c.model = "mlp";
    c.data_dir = "/nonexistent/fmnist";
    CHECK(psg_train(&c, &r) < 0);
    CHECK_ERROR_HAS("/nonexistent/fmnist/train-images-idx3-ubyte.gz");
    c.data_dir = data_dir();
    c.optimizer = "lbfgs";
    CHECK(psg_train(&c, &r) < 0);
    CHECK_ERROR_HAS("lbfgs");
    fclose(c.out);
}

int main(void) {
    RUN_TEST(test_bad_config);
    RUN_TEST(test_sharded_dense);
    RUN_TEST(test_same_seed_same_result);
    RUN_TEST(test_mlp_learns);
    return psg_test_summary();
}
