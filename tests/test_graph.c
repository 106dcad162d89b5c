/* The graph builder, the executor and autodiff, on the array ops. */
#include "tests/gradcheck.h"
#include "tests/testutil.h"

static void test_names_and_scopes(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_2d(-1, 3);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_graph_push_scope(g, "layer1");
    psg_endpoint_t a = psg_identity(g, "id", x);
    psg_endpoint_t b = psg_identity(g, "id", x);
    psg_graph_pop_scope(g);
    CHECK(strcmp(psg_node_name(psg_graph_node(g, a.node)), "layer1/id") == 0);
    CHECK(strcmp(psg_node_name(psg_graph_node(g, b.node)), "layer1/id_1") == 0);
    CHECK(psg_graph_find(g, "layer1/id_1") == b.node);
    CHECK(psg_graph_find(g, "nope") == -1);
    psg_graph_push_device(g, "/job:worker/task:0/cpu:0");
    psg_endpoint_t c = psg_identity(g, NULL, x);
    psg_graph_pop_device(g);
    CHECK(strcmp(psg_node_device(psg_graph_node(g, c.node)), "/job:worker/task:0/cpu:0") == 0);
    CHECK(strcmp(psg_node_device(psg_graph_node(g, a.node)), "") == 0);
    psg_graph_destroy(&g);
}

static void test_shape_errors_name_the_node(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s1 = psg_shape_2d(2, 3), s2 = psg_shape_2d(3, 2);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s1);
    psg_endpoint_t y = psg_placeholder(g, "y", PSG_DT_F32, &s2);
    psg_endpoint_t xs[2] = {x, y};
    psg_endpoint_t bad = psg_add_n(g, "total", 2, xs);
    CHECK(!psg_endpoint_valid(bad));
    CHECK_ERROR_HAS("node 'total' (AddN)");
    CHECK_ERROR_HAS("[3, 2]");
    int before = psg_graph_num_nodes(g);
    /* sticky: a node built on the failed one fails and keeps the first message */
    psg_endpoint_t after = psg_identity(g, "after", bad);
    CHECK(!psg_endpoint_valid(after));
    CHECK(psg_graph_num_nodes(g) == before);
    CHECK(psg_graph_error(g) && strstr(psg_graph_error(g), "node 'total' (AddN)"));
    psg_shape_t r = psg_shape_1d(7);
    psg_graph_t *g2 = psg_graph_new();
    psg_endpoint_t x2 = psg_placeholder(g2, "x", PSG_DT_F32, &s1);
    CHECK(!psg_endpoint_valid(psg_reshape(g2, "r", x2, &r)));
    CHECK_ERROR_HAS("node 'r' (Reshape): cannot reshape [2, 3]");
    psg_node_builder_t *b = psg_node_begin(g2, "NoSuchOp", "n");
    CHECK(psg_node_finish(b) < 0);
    CHECK_ERROR_HAS("unknown op 'NoSuchOp'");
    psg_graph_destroy(&g);
    psg_graph_destroy(&g2);
}

static void test_run_feeds_and_fetches(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_2d(-1, 2);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t two = psg_fill_like(g, "two", x, 2.0f);
    psg_endpoint_t xs[3] = {x, x, two};
    psg_endpoint_t sum = psg_add_n(g, "sum", 3, xs);
    psg_endpoint_t flat = psg_reshape(g, "flat", sum, &(psg_shape_t){1, {-1}});
    psg_session_options_t opt = {.num_threads = 2};
    psg_session_t *sess = psg_session_new(g, &opt, NULL);
    float v[6] = {1, 2, 3, 4, 5, 6};
    psg_tensor_t *in = psg_test_tensor(&(psg_shape_t){2, {3, 2}}, v);
    psg_tensor_t *out = NULL;
    CHECK(psg_session_run(sess, 1, &x, &in, 1, &flat, &out, 0, NULL) == 0);
    CHECK(out && out->shape.rank == 1 && out->shape.dims[0] == 6);
    for (int i = 0; out && i < 6; i++) CHECK(psg_tensor_f32(out)[i] == 2 * v[i] + 2);
    psg_tensor_destroy(&out);
    /* missing feed: named */
    CHECK(psg_session_run(sess, 0, NULL, NULL, 1, &flat, &out, 0, NULL) < 0);
    CHECK_ERROR_HAS("node 'x' (Placeholder): placeholder must be fed");
    /* wrong fed shape: named */
    psg_tensor_t *bad = psg_test_tensor(&(psg_shape_t){2, {2, 3}}, v);
    CHECK(psg_session_run(sess, 1, &x, &bad, 1, &flat, &out, 0, NULL) < 0);
    CHECK_ERROR_HAS("node 'x' (Placeholder): fed f32[2, 3], expects f32[?, 2]");
    psg_tensor_destroy(&bad);
    psg_tensor_destroy(&in);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

static void test_variables(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(3);
    psg_endpoint_t v =
        psg_variable(g, "w", PSG_DT_F32, &s, (psg_initializer_t){"ones", 0, 0}, true);
    psg_endpoint_t read = psg_read_variable(g, "read", v);
    psg_endpoint_t delta = psg_fill_like(g, "delta", read, 0.5f);
    int add = psg_assign_add(g, "add", v, delta);
    CHECK(psg_endpoint_valid(read) && add >= 0);
    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    psg_tensor_t *out = NULL;
    CHECK(psg_session_run(sess, 0, NULL, NULL, 1, &read, &out, 0, NULL) < 0);
    CHECK_ERROR_HAS("variable 'w' is not initialized");
    CHECK(psg_session_run_init(sess) == 0);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &add) == 0);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &add) == 0);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 1, &read, &out, 0, NULL) == 0);
    CHECK(out && psg_tensor_f32(out)[2] == 2.0f);
    psg_tensor_destroy(&out);
    /* a second graph shares the variable by name through the resource manager */
    psg_graph_t *g2 = psg_graph_new();
    psg_endpoint_t h2 = psg_var_handle(g2, "w", PSG_DT_F32, &s);
    psg_endpoint_t r2 = psg_read_variable(g2, "read", h2);
    psg_session_t *s2 = psg_session_new(g2, NULL, psg_session_resources(sess));
    CHECK(psg_session_run(s2, 0, NULL, NULL, 1, &r2, &out, 0, NULL) == 0);
    CHECK(out && psg_tensor_f32(out)[0] == 2.0f);
    psg_tensor_destroy(&out);
    int n;
    psg_graph_collection(g, "trainable_variables", &n);
    CHECK(n == 1);
    psg_session_destroy(&s2);
    psg_graph_destroy(&g2);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

static psg_endpoint_t broadcast_like(psg_graph_t *g, psg_endpoint_t x, psg_endpoint_t like) {
    psg_node_builder_t *b = psg_node_begin(g, "BroadcastLike", NULL);
    psg_node_add_input(b, x);
    psg_node_add_input(b, like);
    return psg_node_finish_ep(b);
}

static psg_endpoint_t build_broadcast_sum(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    (void)ctx;
    /* y = broadcast(b to x's shape) + x, summed back to b's shape + x again,
     * reshaped: exercises BroadcastLike, SumToShapeOf, AddN (two paths), Reshape */
    psg_endpoint_t bb = broadcast_like(g, in[1], in[0]);
    psg_endpoint_t two[2] = {bb, in[0]};
    psg_endpoint_t s = psg_add_n(g, NULL, 2, two);
    psg_endpoint_t back = psg_sum_to_shape_of(g, NULL, s, in[1]);
    psg_endpoint_t r = psg_reshape(g, NULL, back, &(psg_shape_t){2, {1, -1}});
    psg_endpoint_t both[2] = {r, psg_reshape(g, NULL, in[1], &(psg_shape_t){2, {1, -1}})};
    return psg_add_n(g, NULL, 2, both);
}

static void test_gradients_of_array_ops(void) {
    unsigned seed = 1;
    psg_tensor_t *x = psg_test_random(&(psg_shape_t){2, {4, 3}}, -1, 1, &seed);
    psg_tensor_t *b = psg_test_random(&(psg_shape_t){1, {3}}, -1, 1, &seed);
    psg_gradcheck_input_t in[2] = {{x, true}, {b, true}};
    CHECK(psg_gradcheck("broadcast_sum", 2, in, build_broadcast_sum, NULL, 1e-2) == 0);
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&b);
}

static void test_gradient_paths(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(2);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t z = psg_placeholder(g, "z", PSG_DT_F32, &s);
    psg_endpoint_t xx[3] = {x, x, z};
    psg_endpoint_t y = psg_add_n(g, "y", 3, xx); /* dy/dx = 2 by two paths, dy/dz = 1 */
    psg_endpoint_t unrelated = psg_placeholder(g, "u", PSG_DT_F32, &s);
    psg_endpoint_t xs[2] = {x, unrelated}, grads[2];
    CHECK(psg_gradients(g, 1, &y, NULL, 2, xs, grads) == 0);
    CHECK(psg_endpoint_valid(grads[0]));
    CHECK(!psg_endpoint_valid(grads[1])); /* y does not depend on u */
    CHECK(strncmp(psg_node_name(psg_graph_node(g, grads[0].node)), "gradients/", 10) == 0);
    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    float one[2] = {1, 1};
    psg_tensor_t *xv = psg_test_tensor(&s, one), *zv = psg_test_tensor(&s, one), *out = NULL;
    psg_endpoint_t feeds[2] = {x, z};
    psg_tensor_t *vals[2] = {xv, zv};
    CHECK(psg_session_run(sess, 2, feeds, vals, 1, &grads[0], &out, 0, NULL) == 0);
    CHECK(out && psg_tensor_f32(out)[0] == 2.0f && psg_tensor_f32(out)[1] == 2.0f);
    psg_tensor_destroy(&out);
    psg_tensor_destroy(&xv);
    psg_tensor_destroy(&zv);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

/* Many independent branches on 2 threads: results must not depend on scheduling,
 * and no buffer may outlive the step. */
static void test_parallel_branches_and_memory(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(1 << 16);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t branches[16];
    for (int i = 0; i < 16; i++) {
        psg_endpoint_t f = psg_fill_like(g, NULL, x, (float)i);
        psg_endpoint_t two[2] = {x, f};
        branches[i] = psg_add_n(g, NULL, 2, two);
    }
    psg_endpoint_t total = psg_add_n(g, "total", 16, branches);
    psg_session_options_t opt = {.num_threads = 2};
    psg_session_t *sess = psg_session_new(g, &opt, NULL);
    psg_callable_t *c = psg_session_make_callable(sess, 1, &x, 1, &total, 0, NULL);
    psg_tensor_t *xv = psg_tensor_zeros(PSG_DT_F32, &s);
    psg_tensor_f32(xv)[7] = 1;
    size_t live_before = psg_buffer_live_bytes();
    for (int step = 0; step < 50; step++) {
        psg_tensor_t *out = NULL;
        CHECK(psg_callable_run(c, &xv, &out) == 0);
        CHECK(out && psg_tensor_f32(out)[7] == 16 + 120 && psg_tensor_f32(out)[8] == 120);
        psg_tensor_destroy(&out);
        CHECK(psg_buffer_live_bytes() == live_before);
    }
    psg_tensor_destroy(&xv);
    psg_callable_destroy(&c);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

/* ---- an op family registered by the program ---- */

static int infer_twice(psg_infer_ctx_t *c) {
    c->out_dtypes[0] = c->in_dtypes[0];
    c->out_shapes[0] = c->in_shapes[0];
    return psg_infer_expect_dtype(c, 0, PSG_DT_F32);
}

static int cpu_twice(psg_kernel_ctx_t *c) {
    psg_tensor_t *y = psg_kernel_alloc_output(c, 0);
    if (!y) return -1;
    for (int64_t i = 0; i < psg_tensor_numel(y); i++)
        psg_tensor_f32(y)[i] = 2 * psg_tensor_f32(c->inputs[0])[i];
    return 0;
}

static const psg_op_def_t op_twice = {
    .name = "TestTwice", .num_inputs = 1, .num_outputs = 1, .infer = infer_twice, .cpu = cpu_twice};
static const psg_op_def_t *const test_family[] = {&op_twice, NULL};
static const psg_op_def_t op_matmul_again = {
    .name = "MatMul", .num_inputs = 2, .num_outputs = 1, .infer = infer_twice};
static const psg_op_def_t *const clashing_family[] = {&op_matmul_again, NULL};

static void test_register_family(void) {
    int before = psg_op_count();
    CHECK(psg_op_lookup("TestTwice") == NULL);
    CHECK(psg_op_register_family(test_family) == 0);
    CHECK(psg_op_lookup("TestTwice") == &op_twice && psg_op_count() == before + 1);
    /* a name taken: refused, naming it, and nothing added */
    CHECK(psg_op_register_family(clashing_family) < 0);
    CHECK(strstr(psg_error_message(), "'MatMul' is registered already") != NULL);
    CHECK(psg_op_lookup("MatMul") != &op_matmul_again && psg_op_count() == before + 1);
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_2d(2, 3);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t y = psg_op_inputs(g, "TestTwice", "y", 1, &x);
    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    psg_tensor_t *xv = psg_tensor_new(PSG_DT_F32, &s), *yv = NULL;
    for (int i = 0; i < 6; i++) psg_tensor_f32(xv)[i] = (float)i;
    CHECK(psg_session_run(sess, 1, &x, &xv, 1, &y, &yv, 0, NULL) == 0);
    CHECK(yv && psg_tensor_f32(yv)[5] == 10.0f);
    psg_tensor_destroy(&yv);
    psg_tensor_destroy(&xv);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_names_and_scopes);
    RUN_TEST(test_shape_errors_name_the_node);
    RUN_TEST(test_run_feeds_and_fetches);
    RUN_TEST(test_variables);
    RUN_TEST(test_gradients_of_array_ops);
    RUN_TEST(test_gradient_paths);
    RUN_TEST(test_parallel_branches_and_memory);
    RUN_TEST(test_register_family);
    return psg_test_summary();
}
