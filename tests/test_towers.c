/* Towers over logical CPU devices: K towers of batch B give the same update
 * as one tower of batch K*B (relative tolerance 1e-5), the towers sit on their
 * devices with the variables and the average on tower 0's, and the batch is
 * split into views. Runs everywhere (no GPU needed). */
#include "tests/testutil.h"

#include <stdlib.h>

typedef struct {
    psg_graph_t *g;
    psg_optimizer_t *opt;
    psg_session_t *s;
    psg_towers_t t;
    psg_callable_t *step;
} rig_t;

static int rig_new(rig_t *r, const char *model, int towers) {
    memset(r, 0, sizeof *r);
    r->g = psg_graph_new();
    psg_optimizer_config_t oc = psg_optimizer_defaults("momentum");
    oc.learning_rate = 0.05f;
    oc.momentum = 0.9f;
    r->opt = psg_optimizer_new(&oc);
    psg_towers_config_t tc = {.model = model,
                              .height = 28,
                              .width = 28,
                              .channels = 1,
                              .classes = 10,
                              .seed = 7,
                              .num_towers = towers,
                              .device = PSG_TOWERS_CPU};
    if (!r->opt || psg_towers_build(r->g, &tc, r->opt, &r->t) < 0) return -1;
    psg_session_options_t so = {.num_threads = 2};
    r->s = psg_session_new(r->g, &so, NULL);
    if (!r->s || psg_session_run_init(r->s) < 0) return -1;
    psg_endpoint_t feeds[2 * PSG_MAX_TOWERS];
    psg_towers_feeds(&r->t, feeds);
    r->step = psg_session_make_callable(r->s, 2 * towers, feeds, 1, &r->t.loss, 1, &r->t.train_op);
    return r->step ? 0 : -1;
}

static void rig_free(rig_t *r) {
    psg_callable_destroy(&r->step);
    psg_session_destroy(&r->s);
    psg_optimizer_destroy(&r->opt);
    psg_graph_destroy(&r->g);
}

static int rig_step(rig_t *r, psg_tensor_t *images, psg_tensor_t *labels, float *loss) {
    psg_tensor_t *fv[2 * PSG_MAX_TOWERS], *out = NULL;
    if (psg_towers_split(&r->t, images, labels, fv) < 0) return -1;
    int rc = psg_callable_run(r->step, fv, &out);
    for (int i = 0; i < 2 * r->t.num_towers; i++) psg_tensor_destroy(&fv[i]);
    if (rc == 0) *loss = psg_tensor_f32(out)[0];
    psg_tensor_destroy(&out);
    return rc;
}

static psg_variable_t *var(rig_t *r, const char *name) {
    return psg_resource_find_variable(psg_session_resources(r->s), name);
}

/* The difference of two updates of one variable relative to the update's
 * size, normwise (||a - b|| / ||a - w0||, L2) and elementwise at the worst
 * element (max |a - b| / max |a - w0|). */
static void update_rel_error(const psg_tensor_t *w0, const psg_tensor_t *a, const psg_tensor_t *b,
                             double *norm, double *worst) {
    double d2 = 0, u2 = 0, dmax = 0, umax = 0;
    for (int64_t i = 0; i < psg_tensor_numel(a); i++) {
        double u = psg_tensor_f32(a)[i] - psg_tensor_f32(w0)[i];
        double d = fabs(psg_tensor_f32(a)[i] - psg_tensor_f32(b)[i]);
        d2 += d * d;
        u2 += u * u;
        dmax = d > dmax ? d : dmax;
        umax = fabs(u) > umax ? fabs(u) : umax;
    }
    *norm = u2 > 0 ? sqrt(d2 / u2) : sqrt(d2);
    *worst = umax > 0 ? dmax / umax : dmax;
}

/* K towers of batch B against one tower of batch K*B, `steps` momentum steps. */
static void check_equivalence(const char *model, int K, int B, int steps) {
    rig_t one, many;
    CHECK(rig_new(&one, model, 1) == 0);
    CHECK(rig_new(&many, model, K) == 0);
    if (!one.step || !many.step) goto out;
    int n = 0;
    const int *ids = psg_graph_collection(one.g, "trainable_variables", &n);
    psg_tensor_t *w0[16] = {0};
    CHECK(n > 0 && n <= 16);
    for (int i = 0; i < n && i < 16; i++)
        w0[i] = psg_tensor_copy(var(&one, psg_node_name(psg_graph_node(one.g, ids[i])))->value);
    unsigned seed = 11;
    for (int s = 0; s < steps; s++) {
        psg_shape_t is = psg_shape_4d(K * B, 28, 28, 1), ls = psg_shape_1d(K * B);
        psg_tensor_t *images = psg_test_random(&is, 0, 1, &seed);
        psg_tensor_t *labels = psg_tensor_new(PSG_DT_I32, &ls);
        for (int i = 0; i < K * B; i++) psg_tensor_i32(labels)[i] = (int32_t)(rand_r(&seed) % 10);
        float l1 = 0, lk = 0;
        CHECK(rig_step(&one, images, labels, &l1) == 0);
        CHECK(rig_step(&many, images, labels, &lk) == 0);
        CHECK_NEAR(l1, lk, 1e-5 * fabs(l1));
        psg_tensor_destroy(&images);
        psg_tensor_destroy(&labels);
    }
    double worst_norm = 0, worst_elem = 0;
    for (int i = 0; i < n && i < 16; i++) {
        const char *name = psg_node_name(psg_graph_node(one.g, ids[i]));
        psg_variable_t *a = var(&one, name), *b = var(&many, name);
        CHECK(a && b);
        if (a && b) {
            double e, m;
            update_rel_error(w0[i], a->value, b->value, &e, &m);
            if (e > 1e-5) fprintf(stderr, "%s: update differs by %g (relative, L2)\n", name, e);
            CHECK(e <= 1e-5);
            worst_norm = e > worst_norm ? e : worst_norm;
            worst_elem = m > worst_elem ? m : worst_elem;
        }
        psg_tensor_destroy(&w0[i]);
    }
    printf("%s: %d towers of %d vs 1 of %d, %d steps: update difference %.3g relative (L2), "
           "%.3g at the worst element\n",
           model, K, B, K * B, steps, worst_norm, worst_elem);
out:
    rig_free(&one);
    rig_free(&many);
}

static void test_mlp_towers_equal_one_big_batch(void) {
    check_equivalence("mlp", 4, 8, 3);
}
static void test_cnn_towers_equal_one_big_batch(void) {
    check_equivalence("cnn", 2, 4, 2);
}

static void test_placement(void) {
    rig_t r;
    CHECK(rig_new(&r, "mlp", 3) == 0);
    if (!r.step) goto out;
    int fc1 = psg_graph_find(r.g, "model/fc1/weights");
    int t2 = psg_graph_find(r.g, "tower_2/model/fc1/Dense");
    int avg = psg_graph_find(r.g, "average_gradients/0/sum");
    CHECK(fc1 >= 0 && t2 >= 0 && avg >= 0);
    if (fc1 < 0 || t2 < 0 || avg < 0) goto out;
    CHECK(strstr(psg_node_assigned_device(psg_graph_node(r.g, fc1)), "/device:CPU:0") != NULL);
    CHECK(strstr(psg_node_assigned_device(psg_graph_node(r.g, t2)), "/device:CPU:2") != NULL);
    CHECK(strstr(psg_node_assigned_device(psg_graph_node(r.g, avg)), "/device:CPU:0") != NULL);
    /* one set of variables for all towers */
    int n = 0;
    psg_graph_collection(r.g, "trainable_variables", &n);
    CHECK(n == 6);
out:
    rig_free(&r);
}

static void test_split(void) {
    psg_towers_t t = {.num_towers = 3};
    psg_shape_t is = psg_shape_2d(7, 2), ls = psg_shape_1d(7);
    psg_tensor_t *x = psg_tensor_new(PSG_DT_F32, &is), *y = psg_tensor_new(PSG_DT_I32, &ls);
    for (int i = 0; i < 14; i++) psg_tensor_f32(x)[i] = (float)i;
    for (int i = 0; i < 7; i++) psg_tensor_i32(y)[i] = i;
    psg_tensor_t *v[6];
    CHECK(psg_towers_split(&t, x, y, v) == 0);
    /* rows [0,2), [2,4), [4,7), sharing the batch's buffers */
    CHECK(v[0]->shape.dims[0] == 2 && v[2]->shape.dims[0] == 2 && v[4]->shape.dims[0] == 3);
    CHECK(psg_tensor_f32(v[2])[0] == 4.0f && psg_tensor_i32(v[5])[0] == 4);
    CHECK(v[4]->buf == x->buf);
    for (int i = 0; i < 6; i++) psg_tensor_destroy(&v[i]);
    psg_shape_t small = psg_shape_1d(2);
    psg_tensor_t *y2 = psg_tensor_new(PSG_DT_I32, &small);
    CHECK(psg_towers_split(&t, x, y2, v) < 0);
    CHECK_ERROR_HAS("same N");
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&y);
    psg_tensor_destroy(&y2);
}

static void test_bad_config(void) {
    psg_graph_t *g = psg_graph_new();
    psg_optimizer_config_t oc = psg_optimizer_defaults("sgd");
    psg_optimizer_t *opt = psg_optimizer_new(&oc);
    psg_towers_t t;
    psg_towers_config_t tc = {.model = "mlp",
                              .height = 28,
                              .width = 28,
                              .channels = 1,
                              .classes = 10,
                              .seed = 1,
                              .num_towers = 0,
                              .device = PSG_TOWERS_CPU};
    CHECK(psg_towers_build(g, &tc, opt, &t) < 0);
    CHECK_ERROR_HAS("--towers 0");
    tc.num_towers = psg_gpu_count() + 1;
    tc.device = PSG_TOWERS_GPU;
    CHECK(psg_towers_build(g, &tc, opt, &t) < 0);
    CHECK_ERROR_HAS("GPU");
    psg_optimizer_destroy(&opt);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_split);
    RUN_TEST(test_bad_config);
    RUN_TEST(test_placement);
    RUN_TEST(test_mlp_towers_equal_one_big_batch);
    RUN_TEST(test_cnn_towers_equal_one_big_batch);
    return psg_test_summary();
}
