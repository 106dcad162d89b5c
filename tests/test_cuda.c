/* The CUDA backend against the CPU: one table of op cases (op, input
 * shapes, tolerance), each run with its nodes on GPU 0 and on the CPU, the
 * outputs and the gradients of sum(w * y) compared; the runtime's copies and
 * allocator; and one training step of the mlp and the cnn on the GPU against
 * the CPU, in f32 and in mixed precision (bf16 / f16 products and casts).
 * Without a GPU it checks the errors, then skips (exit 77). */
#include "tests/testutil.h"

#include <stdlib.h>

#define GPU0 "/job:localhost/replica:0/task:0/device:GPU:0"

enum { F32, POSITIVE, LABELS };

typedef psg_endpoint_t (*build_fn)(psg_graph_t *g, const psg_endpoint_t *in);

typedef struct {
    const char *name;
    int n_in;
    psg_shape_t shapes[4];
    int kinds[4];
    build_fn build;
    double tol;
    bool grad; /* also compare d(sum(w * y))/d(each f32 input) */
} op_case_t;

#define SHAPE1(a)                                                                                  \
    {                                                                                              \
        1, {                                                                                       \
            a                                                                                      \
        }                                                                                          \
    }
#define SHAPE2(a, b)                                                                               \
    {                                                                                              \
        2, {                                                                                       \
            a, b                                                                                   \
        }                                                                                          \
    }
#define SHAPE4(a, b, c, d)                                                                         \
    {                                                                                              \
        4, {                                                                                       \
            a, b, c, d                                                                             \
        }                                                                                          \
    }

static psg_endpoint_t b_add(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_add(g, "y", x[0], x[1]);
}
static psg_endpoint_t b_sub(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_sub(g, "y", x[0], x[1]);
}
static psg_endpoint_t b_mul(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_mul(g, "y", x[0], x[1]);
}
static psg_endpoint_t b_div(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_div(g, "y", x[0], x[1]);
}
static psg_endpoint_t b_neg(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_neg(g, "y", x[0]);
}
static psg_endpoint_t b_square(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_square(g, "y", x[0]);
}
static psg_endpoint_t b_sqrt(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_sqrt(g, "y", x[0]);
}
static psg_endpoint_t b_exp(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_exp(g, "y", x[0]);
}
static psg_endpoint_t b_log(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_log(g, "y", x[0]);
}
static psg_endpoint_t b_pow(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_pow(g, "y", x[0], 1.5);
}
static psg_endpoint_t b_scale(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_scale(g, "y", x[0], -0.25);
}
static psg_endpoint_t b_relu(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_relu(g, "y", x[0]);
}
static psg_endpoint_t b_sigmoid(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_sigmoid(g, "y", x[0]);
}
static psg_endpoint_t b_tanh(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_tanh(g, "y", x[0]);
}
static psg_endpoint_t b_softmax(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_softmax(g, "y", x[0]);
}
static psg_endpoint_t b_log_softmax(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_log_softmax(g, "y", x[0]);
}
static psg_endpoint_t b_xent(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_sparse_softmax_cross_entropy(g, "y", x[0], x[1]);
}
static psg_endpoint_t b_l2(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_l2_loss(g, "y", x[0]);
}
static psg_endpoint_t b_sum_rows(psg_graph_t *g, const psg_endpoint_t *x) {
    int64_t ax[1] = {1};
    return psg_sum(g, "y", x[0], 1, ax, false);
}
static psg_endpoint_t b_sum_cols(psg_graph_t *g, const psg_endpoint_t *x) {
    int64_t ax[1] = {0};
    return psg_sum(g, "y", x[0], 1, ax, true);
}
static psg_endpoint_t b_mean_02(psg_graph_t *g, const psg_endpoint_t *x) {
    int64_t ax[2] = {0, 2}; /* not an (A, R, B) pattern: the general reduction */
    return psg_mean(g, "y", x[0], 2, ax, false);
}
static psg_endpoint_t b_mean_all(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_mean(g, "y", x[0], 0, NULL, false);
}
static psg_endpoint_t b_argmax(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_cast(g, "y", psg_argmax(g, "am", x[0]), PSG_DT_F32);
}
static psg_endpoint_t b_equal(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_cast(g, "y", psg_equal(g, "eq", psg_relu(g, "r", x[0]), x[0]), PSG_DT_F32);
}
static psg_endpoint_t b_matmul(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_matmul(g, "y", x[0], x[1], false, false);
}
static psg_endpoint_t b_matmul_tt(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_matmul(g, "y", x[0], x[1], true, true);
}
static psg_endpoint_t b_dense(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_dense(g, "y", x[0], x[1], x[2], true);
}
static psg_endpoint_t b_concat(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_concat(g, "y", 2, x, 1);
}
static psg_endpoint_t b_slice(psg_graph_t *g, const psg_endpoint_t *x) {
    int64_t begin[2] = {1, 2}, size[2] = {3, -1};
    return psg_slice(g, "y", x[0], 2, begin, size);
}
static psg_endpoint_t b_cast(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_cast(g, "y", psg_cast(g, "i", psg_scale(g, "s", x[0], 10.0), PSG_DT_I32),
                    PSG_DT_F32);
}
static psg_endpoint_t b_conv_same(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_conv2d(g, "y", x[0], x[1], 1, 1, PSG_PADDING_SAME);
}
static psg_endpoint_t b_conv_s2(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_conv2d(g, "y", x[0], x[1], 2, 2, PSG_PADDING_SAME);
}
static psg_endpoint_t b_conv_valid(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_conv2d(g, "y", x[0], x[1], 2, 1, PSG_PADDING_VALID);
}
static psg_endpoint_t b_maxpool(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_max_pool(g, "y", x[0], 3, 3, 2, 2, PSG_PADDING_SAME);
}
static psg_endpoint_t b_avgpool(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_avg_pool(g, "y", x[0], 3, 3, 2, 2, PSG_PADDING_SAME);
}
static psg_endpoint_t b_maxpool2(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_max_pool(g, "y", x[0], 2, 2, 2, 2, PSG_PADDING_VALID);
}
static psg_endpoint_t b_bias(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_bias_add(g, "y", x[0], x[1]);
}
static psg_endpoint_t b_bn(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_fused_batch_norm(g, "y", x[0], x[1], x[2], PSG_NO_ENDPOINT, PSG_NO_ENDPOINT, 1e-3f,
                                true)
        .y;
}
static psg_endpoint_t b_addn(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_add_n(g, "y", 3, x);
}

/* The product under a 16-bit compute dtype (precision.h): f32 inputs cast
 * to it, the result cast back; the gradients built after run in it too. */
static psg_endpoint_t in_dtype(psg_graph_t *g, psg_dtype_t dt, build_fn f, const psg_endpoint_t *x) {
    psg_graph_set_compute_dtype(g, dt);
    psg_endpoint_t y = f(g, x);
    psg_graph_set_compute_dtype(g, PSG_DT_F32);
    return y;
}
#define IN_DTYPE(fn, dt, f)                                                                        \
    static psg_endpoint_t fn(psg_graph_t *g, const psg_endpoint_t *x) { return in_dtype(g, dt, f, x); }
IN_DTYPE(b_matmul_bf16, PSG_DT_BF16, b_matmul)
IN_DTYPE(b_matmul_tt_bf16, PSG_DT_BF16, b_matmul_tt)
IN_DTYPE(b_matmul_f16, PSG_DT_F16, b_matmul)
IN_DTYPE(b_conv_same_bf16, PSG_DT_BF16, b_conv_same)
IN_DTYPE(b_conv_s2_bf16, PSG_DT_BF16, b_conv_s2)
IN_DTYPE(b_conv_s2_f16, PSG_DT_F16, b_conv_s2)
static psg_endpoint_t b_cast_bf16(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_cast(g, "y", psg_cast(g, "h", x[0], PSG_DT_BF16), PSG_DT_F32);
}
static psg_endpoint_t b_cast_f16(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_cast(g, "y", psg_cast(g, "h", x[0], PSG_DT_F16), PSG_DT_F32);
}
static const op_case_t cases[] = {
    {"Add broadcast", 2, {SHAPE2(5, 3), SHAPE1(3)}, {F32, F32}, b_add, 1e-5, true},
    {"Sub", 2, {SHAPE2(5, 3), SHAPE2(5, 3)}, {F32, F32}, b_sub, 1e-5, true},
    {"Mul outer", 2, {SHAPE2(5, 1), SHAPE2(1, 4)}, {F32, F32}, b_mul, 1e-5, true},
    {"Div", 2, {SHAPE2(4, 6), SHAPE2(4, 6)}, {F32, POSITIVE}, b_div, 1e-5, true},
    {"Neg", 1, {SHAPE2(3, 7)}, {F32}, b_neg, 1e-6, true},
    {"Square", 1, {SHAPE2(3, 7)}, {F32}, b_square, 1e-5, true},
    {"Sqrt", 1, {SHAPE2(3, 7)}, {POSITIVE}, b_sqrt, 1e-5, true},
    {"Exp", 1, {SHAPE2(3, 7)}, {F32}, b_exp, 1e-5, true},
    {"Log", 1, {SHAPE2(3, 7)}, {POSITIVE}, b_log, 1e-5, true},
    {"Pow", 1, {SHAPE2(3, 7)}, {POSITIVE}, b_pow, 1e-5, true},
    {"Scale", 1, {SHAPE2(3, 7)}, {F32}, b_scale, 1e-6, true},
    {"Relu", 1, {SHAPE2(8, 9)}, {F32}, b_relu, 1e-6, true},
    {"Sigmoid", 1, {SHAPE2(8, 9)}, {F32}, b_sigmoid, 1e-5, true},
    {"Tanh", 1, {SHAPE2(8, 9)}, {F32}, b_tanh, 1e-5, true},
    {"Softmax", 1, {SHAPE2(6, 40)}, {F32}, b_softmax, 1e-5, true},
    {"LogSoftmax", 1, {SHAPE2(6, 10)}, {F32}, b_log_softmax, 1e-5, true},
    {"SparseSoftmaxCrossEntropy", 2, {SHAPE2(9, 10), SHAPE1(9)}, {F32, LABELS}, b_xent, 1e-5, true},
    {"L2Loss", 1, {SHAPE2(300, 70)}, {F32}, b_l2, 1e-4, true},
    {"Sum rows", 1, {SHAPE2(33, 1000)}, {F32}, b_sum_rows, 1e-4, true},
    {"Sum cols keep_dims", 1, {SHAPE2(5000, 7)}, {F32}, b_sum_cols, 1e-4, true},
    {"Mean axes 0,2", 1, {SHAPE4(3, 4, 5, 2)}, {F32}, b_mean_02, 1e-5, true},
    {"Mean all", 1, {SHAPE4(3, 4, 5, 2)}, {F32}, b_mean_all, 1e-5, true},
    {"ArgMax", 1, {SHAPE2(17, 45)}, {F32}, b_argmax, 0, false},
    {"Equal", 1, {SHAPE2(6, 6)}, {F32}, b_equal, 0, false},
    {"MatMul", 2, {SHAPE2(17, 33), SHAPE2(33, 9)}, {F32, F32}, b_matmul, 1e-4, true},
    {"MatMul transposed", 2, {SHAPE2(33, 17), SHAPE2(9, 33)}, {F32, F32}, b_matmul_tt, 1e-4, true},
    {"Dense relu",
     3,
     {SHAPE2(16, 20), SHAPE2(20, 12), SHAPE1(12)},
     {F32, F32, F32},
     b_dense,
     1e-4,
     true},
    {"AddN", 3, {SHAPE2(4, 4), SHAPE2(4, 4), SHAPE2(4, 4)}, {F32, F32, F32}, b_addn, 1e-5, true},
    {"Concat", 2, {SHAPE2(3, 2), SHAPE2(3, 5)}, {F32, F32}, b_concat, 0, true},
    {"Slice", 1, {SHAPE2(5, 6)}, {F32}, b_slice, 0, true},
    {"Cast f32-i32-f32", 1, {SHAPE2(5, 6)}, {F32}, b_cast, 0, false},
    /* mixed precision: the roundings are the CPU's bit for bit; a 16-bit
     * product may differ by one ulp of its type (2^-8 bf16, 2^-11 f16) where
     * the f32 sums, accumulated in another order, straddle a rounding edge */
    {"Cast f32-bf16-f32", 1, {SHAPE2(50, 60)}, {F32}, b_cast_bf16, 0, true},
    {"Cast f32-f16-f32", 1, {SHAPE2(50, 60)}, {F32}, b_cast_f16, 0, true},
    {"MatMul bf16", 2, {SHAPE2(17, 33), SHAPE2(33, 9)}, {F32, F32}, b_matmul_bf16, 1e-2, true},
    {"MatMul bf16 transposed",
     2,
     {SHAPE2(33, 17), SHAPE2(9, 33)},
     {F32, F32},
     b_matmul_tt_bf16,
     1e-2,
     true},
    {"MatMul f16", 2, {SHAPE2(17, 33), SHAPE2(33, 9)}, {F32, F32}, b_matmul_f16, 2e-3, true},
    {"Conv2D bf16 5x5 SAME",
     2,
     {SHAPE4(2, 9, 9, 3), SHAPE4(5, 5, 3, 4)},
     {F32, F32},
     b_conv_same_bf16,
     1e-2,
     true},
    {"Conv2D bf16 3x3 s2 SAME uneven",
     2,
     {SHAPE4(2, 8, 8, 3), SHAPE4(3, 3, 3, 5)},
     {F32, F32},
     b_conv_s2_bf16,
     1e-2,
     true},
    {"Conv2D f16 3x3 s2 SAME uneven",
     2,
     {SHAPE4(2, 8, 8, 3), SHAPE4(3, 3, 3, 5)},
     {F32, F32},
     b_conv_s2_f16,
     2e-3,
     true},
    {"Conv2D 5x5 SAME",
     2,
     {SHAPE4(2, 9, 9, 3), SHAPE4(5, 5, 3, 4)},
     {F32, F32},
     b_conv_same,
     1e-4,
     true},
    {"Conv2D 3x3 s2 SAME uneven",
     2,
     {SHAPE4(2, 8, 8, 3), SHAPE4(3, 3, 3, 5)},
     {F32, F32},
     b_conv_s2,
     1e-4,
     true},
    {"Conv2D 3x2 VALID s2x1",
     2,
     {SHAPE4(1, 9, 7, 2), SHAPE4(3, 2, 2, 3)},
     {F32, F32},
     b_conv_valid,
     1e-4,
     true},
    {"MaxPool 3x3 s2 SAME", 1, {SHAPE4(2, 8, 8, 3)}, {F32}, b_maxpool, 1e-6, true},
    {"AvgPool 3x3 s2 SAME", 1, {SHAPE4(2, 8, 8, 3)}, {F32}, b_avgpool, 1e-5, true},
    {"MaxPool 2x2 VALID", 1, {SHAPE4(2, 7, 7, 4)}, {F32}, b_maxpool2, 1e-6, true},
    {"BiasAdd", 2, {SHAPE4(2, 3, 3, 5), SHAPE1(5)}, {F32, F32}, b_bias, 1e-5, true},
    {"FusedBatchNorm",
     3,
     {SHAPE4(4, 3, 3, 6), SHAPE1(6), SHAPE1(6)},
     {F32, POSITIVE, F32},
     b_bn,
     1e-4,
     true},
};

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
static int run_case(const op_case_t *c, psg_tensor_t *const *values, bool gpu, psg_tensor_t **out) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t in[4], fetch[5], xs[4];
    int nx = 0;
    for (int i = 0; i < c->n_in; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        in[i] = psg_placeholder(g, name, values[i]->dtype, &c->shapes[i]);
        if (c->kinds[i] != LABELS) xs[nx++] = in[i];
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
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const op_case_t *c = &cases[k];
        psg_tensor_t *values[4] = {NULL}, *cpu[5] = {NULL}, *gpu[5] = {NULL};
        for (int i = 0; i < c->n_in; i++) {
            if (c->kinds[i] == LABELS) {
                values[i] = psg_tensor_new(PSG_DT_I32, &c->shapes[i]);
                for (int64_t j = 0; j < psg_tensor_numel(values[i]); j++)
                    psg_tensor_i32(values[i])[j] = (int32_t)(rand_r(&seed) % 10);
            } else {
                values[i] = psg_test_random(&c->shapes[i], c->kinds[i] == POSITIVE ? 0.5f : -1.0f,
                                            1.5f, &seed);
            }
        }
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
        for (int i = 0; i < 4; i++)
            psg_tensor_destroy(&values[i]);
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
        psg_towers_config_t tc = {.model = model, .height = 28, .width = 28, .channels = 1,
                                  .classes = 10, .seed = 3, .num_towers = 1,
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
            for (int i = 0; i < 16; i++)
                psg_tensor_i32(v[1])[i] = (int32_t)(rand_r(&seed) % 10);
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
    RUN_TEST(test_ops_against_cpu);
    RUN_TEST(test_mlp_step);
    RUN_TEST(test_cnn_step);
    RUN_TEST(test_mixed_steps);
    return psg_test_summary();
}
