/* End to end: the trainer on real Fashion-MNIST reaches an accuracy no
 * untrained net does; bad configurations fail with errors that name the option. */
#include "tests/testutil.h"

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
    RUN_TEST(test_same_seed_same_result);
    RUN_TEST(test_mlp_learns);
    return psg_test_summary();
}
