/* The CUDA backend against the CPU: one table of op cases (op, input
 * shapes, tolerance), each run with its nodes on GPU 0 and on the CPU, the
 * outputs and the gradients of sum(w * y) compared; the runtime's copies and
 * allocator; and one training step of the mlp and the cnn on the GPU against
 * the CPU, in f32 and in mixed precision (bf16 / f16 products and casts).
 * The op cases are tests/op_cases.c's, which test_op_cases checks by finite
 * differences.
 * Without a GPU it checks the errors, then skips (exit 77). */
#include "tests/op_cases.h"
#include "tests/testutil.h"

#include <stdlib.h>

#define GPU0 "/job:localhost/replica:0/task:0/device:GPU:0"

/* Assigns every node with a CUDA kernel (placeholders aside) to GPU 0. */
static void place_on_gpu(psg_graph_t *g) {
    for (int i = 0; i < psg_graph_num_nodes(g); i++) {
        const psg_node_t *n = psg_graph_node(g, i);
        if (psg_node_def(n)->cuda && strcmp(psg_node_op(n), "Placeholder"))
            psg_graph_set_assigned_device(g, i, GPU0);
    }
}

/* Runs the case on the CPU or the GPU: out[0] is y, out[1..] the gradients
 * of the f32 inputs (when c->grad). Returns the number of outputs, -1 on error. */
static int run_case(const psg_op_case_t *c, psg_tensor_t *const *values, bool gpu,
                    psg_tensor_t **out) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t in[4], fetch[5], xs[4];
    int nx = 0;
    for (int i = 0; i < c->n_in; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        in[i] = psg_placeholder(g, name, values[i]->dtype, &c->shapes[i]);
        if (c->kinds[i] != PSG_CASE_LABELS) xs[nx++] = in[i];
    }
    fetch[0] = c->build(g, in);
    int nf = 1;
    if (c->grad && psg_endpoint_valid(fetch[0])) {
        unsigned seed = 99;
        psg_tensor_t *w = psg_test_random(psg_graph_shape(g, fetch[0]), -1, 1, &seed);
        psg_endpoint_t loss =
            psg_sum(g, "loss", psg_mul(g, "wy", fetch[0], psg_const(g, "w", &w)), 0, NULL, false);
        if (psg_gradients(g, 1, &loss, NULL, nx, xs, fetch + 1) == 0) nf += nx;
    }
    if (gpu) place_on_gpu(g);
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    int rc = s && !psg_graph_error(g)
                 ? psg_session_run(s, c->n_in, in, values, nf, fetch, out, 0, NULL)
                 : -1;
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
    return rc < 0 ? -1 : nf;
}

static double max_rel_diff(const psg_tensor_t *a, const psg_tensor_t *b) {
    double worst = 0;
    for (int64_t i = 0; i < psg_tensor_numel(a); i++) {
        double x = psg_tensor_f32(a)[i], y = psg_tensor_f32(b)[i];
        double d = fabs(x - y) / (1.0 + fabs(y));
        if (!(d <= worst)) worst = d; /* NaN wins */
    }
    return worst;
}

static void test_ops_against_cpu(void) {
    unsigned seed = 5;
    for (int k = 0; k < psg_num_op_cases; k++) {
        const psg_op_case_t *c = &psg_op_cases[k];
        psg_tensor_t *values[4] = {NULL}, *cpu[5] = {NULL}, *gpu[5] = {NULL};
        psg_op_case_values(c, &seed, values);
        int n1 = run_case(c, values, false, cpu), n2 = run_case(c, values, true, gpu);
        CHECK(n1 > 0 && n1 == n2);
        double worst = 0;
        for (int i = 0; n1 > 0 && i < n1 && n1 == n2; i++) {
            CHECK(psg_shape_equal(&cpu[i]->shape, &gpu[i]->shape));
            double d = max_rel_diff(gpu[i], cpu[i]);
            worst = d > worst || d != d ? d : worst;
        }
        bool ok = n1 > 0 && n1 == n2 && worst <= c->tol;
        CHECK(ok);
        printf("  %-28s %s  outputs %d  max rel diff %.2g (tol %.0e)\n", c->name,
               ok ? "ok  " : "FAIL", n1, worst, c->tol);
        for (int i = 0; i < 5; i++) {
            psg_tensor_destroy(&cpu[i]);
            psg_tensor_destroy(&gpu[i]);
        }
        for (int i = 0; i < 4; i++) psg_tensor_destroy(&values[i]);
    }
}

static void test_copies_and_allocator(void) {
    psg_shape_t s = psg_shape_2d(64, 1000);
    unsigned seed = 3;
    psg_tensor_t *h = psg_test_random(&s, -1, 1, &seed);
    psg_tensor_t *d = psg_tensor_to_device(h, PSG_DEVICE_GPU(0));
    CHECK(d && psg_tensor_gpu(d) == 0);
    psg_tensor_t *d2 = d ? psg_tensor_to_device(d, PSG_DEVICE_GPU(psg_gpu_count() - 1)) : NULL;
    psg_tensor_t *back = d2 ? psg_tensor_to_host(d2) : NULL;
    CHECK(back && psg_tensor_on_host(back));
    if (back) CHECK(memcmp(back->data, h->data, psg_tensor_nbytes(h)) == 0);
    /* first: with one GPU, d2 is d itself (a reference, not a copy), and would keep it */
    psg_tensor_destroy(&d2);
    psg_tensor_destroy(&back);
    size_t live = psg_gpu_live_bytes(0);
    void *first = d ? d->data : NULL;
    psg_tensor_destroy(&d);
    CHECK(psg_gpu_live_bytes(0) < live);
    /* the freed block comes back for the same size: no cudaMalloc */
    psg_tensor_t *again = psg_gpu_tensor_new(0, PSG_DT_F32, &s);
    CHECK(again && again->data == first);
    CHECK(psg_gpu_synchronize(0) == 0);
    psg_tensor_destroy(&again);
    psg_tensor_destroy(&h);
}

/* A pinned host tensor goes to the GPU straight from its memory; freed at
 * once, its block is reused only after the copy, and the copy is intact. */
static void test_pinned_copy(void) {
    psg_shape_t s = psg_shape_2d(256, 1000);
    unsigned seed = 4;
    psg_tensor_t *h = psg_test_random(&s, -1, 1, &seed);
    psg_tensor_t *p = psg_tensor_new_pinned(PSG_DT_F32, &s);
    CHECK(p && psg_tensor_on_host(p));
    if (!p) return;
    memcpy(p->data, h->data, psg_tensor_nbytes(h));
    psg_tensor_t *d = psg_tensor_to_device(p, PSG_DEVICE_GPU(0));
    CHECK(d && psg_tensor_gpu(d) == 0);
    psg_tensor_destroy(&p);
    /* the next pinned block of this size must not be the one still being read */
    psg_tensor_t *q = psg_tensor_new_pinned(PSG_DT_F32, &s);
    CHECK(q != NULL);
    if (q) memset(q->data, 0xff, psg_tensor_nbytes(q));
    psg_tensor_t *back = d ? psg_tensor_to_host(d) : NULL;
    CHECK(back && memcmp(back->data, h->data, psg_tensor_nbytes(h)) == 0);
    psg_tensor_destroy(&q);
    psg_tensor_destroy(&back);
    psg_tensor_destroy(&d);
    psg_tensor_destroy(&h);
}

/* One tower on GPU 0 against the same on the CPU: 2 steps of momentum,
 * under the compute dtype dt (f32, or bf16: mixed precision, with tol). */
static void check_model(const char *model, psg_dtype_t dt, double tol) {
    float loss[2] = {0, 0};
    psg_tensor_t *w[2] = {NULL, NULL};
    for (int dev = 0; dev < 2; dev++) {
        psg_graph_t *g = psg_graph_new();
        psg_graph_set_compute_dtype(g, dt);
        psg_optimizer_config_t oc = psg_optimizer_defaults("momentum");
        oc.learning_rate = 0.05f;
        psg_optimizer_t *opt = psg_optimizer_new(&oc);
        psg_towers_t t;
        psg_towers_config_t tc = {.model = model,
                                  .height = 28,
                                  .width = 28,
                                  .channels = 1,
                                  .classes = 10,
                                  .seed = 3,
                                  .num_towers = 1,
                                  .device = dev ? PSG_TOWERS_GPU : PSG_TOWERS_CPU};
        CHECK(psg_towers_build(g, &tc, opt, &t) == 0);
        psg_session_t *s = psg_session_new(g, NULL, NULL);
        CHECK(s && psg_session_run_init(s) == 0);
        psg_endpoint_t feeds[2];
        psg_towers_feeds(&t, feeds);
        unsigned seed = 21;
        for (int step = 0; s && step < 2; step++) {
            psg_shape_t is = psg_shape_4d(16, 28, 28, 1), ls = psg_shape_1d(16);
            psg_tensor_t *v[2] = {psg_test_random(&is, 0, 1, &seed),
                                  psg_tensor_new(PSG_DT_I32, &ls)};
            for (int i = 0; i < 16; i++) psg_tensor_i32(v[1])[i] = (int32_t)(rand_r(&seed) % 10);
            psg_tensor_t *out = NULL;
            CHECK(psg_session_run(s, 2, feeds, v, 1, &t.loss, &out, 1, &t.train_op) == 0);
            if (out) loss[dev] = psg_tensor_f32(out)[0];
            psg_tensor_destroy(&out);
            psg_tensor_destroy(&v[0]);
            psg_tensor_destroy(&v[1]);
        }
        psg_variable_t *var =
            s ? psg_resource_find_variable(psg_session_resources(s), "model/fc1/weights") : NULL;
        CHECK(var != NULL);
        if (var) w[dev] = psg_tensor_to_host(var->value);
        psg_session_destroy(&s);
        psg_optimizer_destroy(&opt);
        psg_graph_destroy(&g);
    }
    CHECK_NEAR(loss[0], loss[1], tol * (1 + fabs(loss[0])));
    CHECK(w[0] && w[1]);
    if (w[0] && w[1]) {
        double d = max_rel_diff(w[1], w[0]);
        printf("  %s (%s) on GPU 0 vs CPU, 2 steps: loss %.6f vs %.6f, fc1 weights differ by "
               "%.2g\n",
               model, psg_precision_name(dt), loss[1], loss[0], d);
        CHECK(d < tol);
    }
    psg_tensor_destroy(&w[0]);
    psg_tensor_destroy(&w[1]);
}

static void test_mlp_step(void) {
    check_model("mlp", PSG_DT_F32, 1e-4);
}
static void test_cnn_step(void) {
    check_model("cnn", PSG_DT_F32, 1e-4);
}
/* bf16 products on both sides: the updates differ where a product rounds differently */
static void test_mixed_steps(void) {
    check_model("mlp", PSG_DT_BF16, 1e-2);
    check_model("cnn", PSG_DT_BF16, 1e-2);
}

/* Runs without a GPU too: a node on a GPU this process lacks is an error naming it. */
static void test_missing_gpu_names_the_node(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(3);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t y = psg_relu(g, "act", x);
    psg_graph_set_assigned_device(g, y.node, "/job:localhost/replica:0/task:0/device:GPU:9");
    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    psg_callable_t *c = psg_session_make_callable(sess, 1, &x, 1, &y, 0, NULL);
    CHECK(c == NULL);
    CHECK_ERROR_HAS("node 'act' (Relu)");
    CHECK_ERROR_HAS("no GPU 9");
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
    CHECK(psg_gpu_tensor_new(psg_gpu_count(), PSG_DT_F32, &s) == NULL);
    CHECK_ERROR_HAS("GPU");
}

int main(void) {
    RUN_TEST(test_missing_gpu_names_the_node);
    printf("devices: %s\n", psg_gpu_status());
    if (psg_gpu_count() == 0) {
        printf("test_cuda: GPU tests skipped: %s\n", psg_gpu_status());
        int rc = psg_test_summary();
        return rc ? rc : 77;
    }
    RUN_TEST(test_copies_and_allocator);
    RUN_TEST(test_pinned_copy);
    RUN_TEST(test_ops_against_cpu);
    RUN_TEST(test_mlp_step);
    RUN_TEST(test_cnn_step);
    RUN_TEST(test_mixed_steps);
    return psg_test_summary();
}
