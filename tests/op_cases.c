/* The table of op cases (op, input shapes, tolerance) that every backend
 * runs: test_cuda compares each on GPU 0 against the CPU, test_op_cases checks
 * the gradients of each (fd_tol set) by finite differences on the CPU. */
#include "tests/op_cases.h"

#include "tests/testutil.h"

#include <stdlib.h>

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
static psg_endpoint_t b_maximum(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_maximum(g, "y", x[0], x[1]);
}
static psg_endpoint_t b_minimum(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_minimum(g, "y", x[0], x[1]);
}
static psg_endpoint_t b_max_rows(psg_graph_t *g, const psg_endpoint_t *x) {
    int64_t ax[1] = {-1};
    return psg_reduce_max(g, "y", x[0], 1, ax, false);
}
static psg_endpoint_t b_max_02(psg_graph_t *g, const psg_endpoint_t *x) {
    int64_t ax[2] = {0, 2};
    return psg_reduce_max(g, "y", x[0], 2, ax, true);
}
static psg_endpoint_t b_greater(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_cast(g, "y", psg_compare(g, "gt", "Greater", x[0], x[1]), PSG_DT_F32);
}
static psg_endpoint_t b_one_hot(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_one_hot(g, "y", x[0], 10, 1.0, 0.0);
}
static psg_endpoint_t b_shape(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_cast(g, "y", psg_shape_of(g, "s", x[0]), PSG_DT_F32);
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
static psg_endpoint_t b_avgpool_s1(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_avg_pool(g, "y", x[0], 3, 3, 1, 1, PSG_PADDING_SAME);
}
static psg_endpoint_t b_avgpool_valid(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_avg_pool(g, "y", x[0], 3, 3, 2, 2, PSG_PADDING_VALID);
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
/* batch norm reading a bf16 tensor itself (the Cast to f32 skipped, ops/nn.c) */
static psg_endpoint_t b_bn_bf16(psg_graph_t *g, const psg_endpoint_t *x) {
    psg_endpoint_t x16 = psg_cast(g, NULL, psg_cast(g, "h", x[0], PSG_DT_BF16), PSG_DT_F32);
    return psg_fused_batch_norm(g, "y", x16, x[1], x[2], PSG_NO_ENDPOINT, PSG_NO_ENDPOINT, 1e-3f,
                                true)
        .y;
}
static psg_endpoint_t b_addn(psg_graph_t *g, const psg_endpoint_t *x) {
    return psg_add_n(g, "y", 3, x);
}

/* The product under a 16-bit compute dtype (precision.h): f32 inputs cast
 * to it, the result cast back; the gradients built after run in it too. */
static psg_endpoint_t in_dtype(psg_graph_t *g, psg_dtype_t dt, psg_op_case_build_fn f,
                               const psg_endpoint_t *x) {
    psg_graph_set_compute_dtype(g, dt);
    psg_endpoint_t y = f(g, x);
    psg_graph_set_compute_dtype(g, PSG_DT_F32);
    return y;
}
#define IN_DTYPE(fn, dt, f)                                                                        \
    static psg_endpoint_t fn(psg_graph_t *g, const psg_endpoint_t *x) {                            \
        return in_dtype(g, dt, f, x);                                                              \
    }
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
static psg_endpoint_t b_gather(psg_graph_t *g, const psg_endpoint_t *in) {
    return psg_gather(g, NULL, in[0], in[1]);
}

const psg_op_case_t psg_op_cases[] = {
    {"Add broadcast",
     2,
     {SHAPE2(5, 3), SHAPE1(3)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_add,
     1e-5,
     true,
     1e-2},
    {"Sub", 2, {SHAPE2(5, 3), SHAPE2(5, 3)}, {PSG_CASE_F32, PSG_CASE_F32}, b_sub, 1e-5, true, 1e-2},
    {"Mul outer",
     2,
     {SHAPE2(5, 1), SHAPE2(1, 4)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_mul,
     1e-5,
     true,
     1e-2},
    {"Div",
     2,
     {SHAPE2(4, 6), SHAPE2(4, 6)},
     {PSG_CASE_F32, PSG_CASE_POSITIVE},
     b_div,
     1e-5,
     true,
     1e-2},
    {"Neg", 1, {SHAPE2(3, 7)}, {PSG_CASE_F32}, b_neg, 1e-6, true, 1e-2},
    {"Square", 1, {SHAPE2(3, 7)}, {PSG_CASE_F32}, b_square, 1e-5, true, 1e-2},
    {"Sqrt", 1, {SHAPE2(3, 7)}, {PSG_CASE_POSITIVE}, b_sqrt, 1e-5, true, 1e-2},
    {"Exp", 1, {SHAPE2(3, 7)}, {PSG_CASE_F32}, b_exp, 1e-5, true, 1e-2},
    {"Log", 1, {SHAPE2(3, 7)}, {PSG_CASE_POSITIVE}, b_log, 1e-5, true, 1e-2},
    {"Pow", 1, {SHAPE2(3, 7)}, {PSG_CASE_POSITIVE}, b_pow, 1e-5, true, 1e-2},
    {"Scale", 1, {SHAPE2(3, 7)}, {PSG_CASE_F32}, b_scale, 1e-6, true, 1e-2},
    {"Relu", 1, {SHAPE2(8, 9)}, {PSG_CASE_F32}, b_relu, 1e-6, true, 1e-2},
    {"Sigmoid", 1, {SHAPE2(8, 9)}, {PSG_CASE_F32}, b_sigmoid, 1e-5, true, 1e-2},
    {"Tanh", 1, {SHAPE2(8, 9)}, {PSG_CASE_F32}, b_tanh, 1e-5, true, 1e-2},
    {"Softmax", 1, {SHAPE2(6, 40)}, {PSG_CASE_F32}, b_softmax, 1e-5, true, 0},
    {"LogSoftmax", 1, {SHAPE2(6, 10)}, {PSG_CASE_F32}, b_log_softmax, 1e-5, true, 1e-2},
    {"SparseSoftmaxCrossEntropy",
     2,
     {SHAPE2(9, 10), SHAPE1(9)},
     {PSG_CASE_F32, PSG_CASE_LABELS},
     b_xent,
     1e-5,
     true,
     1e-2},
    {"Gather",
     2,
     {SHAPE2(10, 6), SHAPE1(9)},
     {PSG_CASE_F32, PSG_CASE_LABELS},
     b_gather,
     0,
     false,
     1e-2},
    {"L2Loss", 1, {SHAPE2(300, 70)}, {PSG_CASE_F32}, b_l2, 1e-4, true, 0},
    {"Sum rows", 1, {SHAPE2(33, 1000)}, {PSG_CASE_F32}, b_sum_rows, 1e-4, true, 0},
    {"Sum cols keep_dims", 1, {SHAPE2(5000, 7)}, {PSG_CASE_F32}, b_sum_cols, 1e-4, true, 0},
    {"Mean axes 0,2", 1, {SHAPE4(3, 4, 5, 2)}, {PSG_CASE_F32}, b_mean_02, 1e-5, true, 1e-2},
    {"Mean all", 1, {SHAPE4(3, 4, 5, 2)}, {PSG_CASE_F32}, b_mean_all, 1e-5, true, 1e-2},
    {"ArgMax", 1, {SHAPE2(17, 45)}, {PSG_CASE_F32}, b_argmax, 0, false, 0},
    {"Equal", 1, {SHAPE2(6, 6)}, {PSG_CASE_F32}, b_equal, 0, false, 0},
    {"Maximum broadcast",
     2,
     {SHAPE2(5, 3), SHAPE1(3)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_maximum,
     0,
     true,
     1e-2},
    {"Minimum",
     2,
     {SHAPE2(4, 6), SHAPE2(4, 6)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_minimum,
     0,
     true,
     1e-2},
    {"Max rows", 1, {SHAPE2(7, 9)}, {PSG_CASE_F32}, b_max_rows, 0, true, 1e-2},
    {"Max axes 0,2 keep_dims", 1, {SHAPE4(3, 4, 5, 2)}, {PSG_CASE_F32}, b_max_02, 0, true, 1e-2},
    {"Greater broadcast",
     2,
     {SHAPE2(6, 5), SHAPE2(6, 1)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_greater,
     0,
     false,
     0},
    {"OneHot", 1, {SHAPE1(9)}, {PSG_CASE_LABELS}, b_one_hot, 0, false, 0},
    {"Shape", 1, {SHAPE4(3, 4, 5, 2)}, {PSG_CASE_F32}, b_shape, 0, false, 0},
    {"MatMul",
     2,
     {SHAPE2(17, 33), SHAPE2(33, 9)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_matmul,
     1e-4,
     true,
     1e-2},
    {"MatMul transposed",
     2,
     {SHAPE2(33, 17), SHAPE2(9, 33)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_matmul_tt,
     1e-4,
     true,
     1e-2},
    {"Dense relu",
     3,
     {SHAPE2(16, 20), SHAPE2(20, 12), SHAPE1(12)},
     {PSG_CASE_F32, PSG_CASE_F32, PSG_CASE_F32},
     b_dense,
     1e-4,
     true,
     1e-2},
    {"AddN",
     3,
     {SHAPE2(4, 4), SHAPE2(4, 4), SHAPE2(4, 4)},
     {PSG_CASE_F32, PSG_CASE_F32, PSG_CASE_F32},
     b_addn,
     1e-5,
     true,
     1e-2},
    {"Concat",
     2,
     {SHAPE2(3, 2), SHAPE2(3, 5)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_concat,
     0,
     true,
     1e-2},
    {"Slice", 1, {SHAPE2(5, 6)}, {PSG_CASE_F32}, b_slice, 0, true, 1e-2},
    {"Cast f32-i32-f32", 1, {SHAPE2(5, 6)}, {PSG_CASE_F32}, b_cast, 0, false, 0},
    /* mixed precision: the roundings are the CPU's bit for bit; a 16-bit
     * product may differ by one ulp of its type (2^-8 bf16, 2^-11 f16) where
     * the f32 sums, accumulated in another order, straddle a rounding edge */
    {"Cast f32-bf16-f32", 1, {SHAPE2(50, 60)}, {PSG_CASE_F32}, b_cast_bf16, 0, true, 0},
    {"Cast f32-f16-f32", 1, {SHAPE2(50, 60)}, {PSG_CASE_F32}, b_cast_f16, 0, true, 0},
    {"MatMul bf16",
     2,
     {SHAPE2(17, 33), SHAPE2(33, 9)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_matmul_bf16,
     1e-2,
     true,
     0},
    {"MatMul bf16 transposed",
     2,
     {SHAPE2(33, 17), SHAPE2(9, 33)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_matmul_tt_bf16,
     1e-2,
     true,
     0},
    {"MatMul f16",
     2,
     {SHAPE2(17, 33), SHAPE2(33, 9)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_matmul_f16,
     2e-3,
     true,
     0},
    {"Conv2D bf16 5x5 SAME",
     2,
     {SHAPE4(2, 9, 9, 3), SHAPE4(5, 5, 3, 4)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_conv_same_bf16,
     1e-2,
     true,
     0},
    {"Conv2D bf16 3x3 s2 SAME uneven",
     2,
     {SHAPE4(2, 8, 8, 3), SHAPE4(3, 3, 3, 5)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_conv_s2_bf16,
     1e-2,
     true,
     0},
    {"Conv2D f16 3x3 s2 SAME uneven",
     2,
     {SHAPE4(2, 8, 8, 3), SHAPE4(3, 3, 3, 5)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_conv_s2_f16,
     2e-3,
     true,
     0},
    {"Conv2D 5x5 SAME",
     2,
     {SHAPE4(2, 9, 9, 3), SHAPE4(5, 5, 3, 4)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_conv_same,
     1e-4,
     true,
     1e-2},
    {"Conv2D 3x3 s2 SAME uneven",
     2,
     {SHAPE4(2, 8, 8, 3), SHAPE4(3, 3, 3, 5)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_conv_s2,
     1e-4,
     true,
     1e-2},
    {"Conv2D 1x1 (a matrix product on the GPU)",
     2,
     {SHAPE4(2, 5, 6, 7), SHAPE4(1, 1, 7, 9)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_conv_same,
     1e-4,
     true,
     1e-2},
    {"Conv2D 3x2 VALID s2x1",
     2,
     {SHAPE4(1, 9, 7, 2), SHAPE4(3, 2, 2, 3)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_conv_valid,
     1e-4,
     true,
     1e-2},
    {"MaxPool 3x3 s2 SAME", 1, {SHAPE4(2, 8, 8, 3)}, {PSG_CASE_F32}, b_maxpool, 1e-6, true, 1e-2},
    {"AvgPool 3x3 s2 SAME", 1, {SHAPE4(2, 8, 8, 3)}, {PSG_CASE_F32}, b_avgpool, 1e-5, true, 1e-2},
    /* even padding (or none): cuDNN's average pooling on a GPU */
    {"AvgPool 3x3 s1 SAME",
     1,
     {SHAPE4(2, 7, 7, 5)},
     {PSG_CASE_F32},
     b_avgpool_s1,
     1e-5,
     true,
     1e-2},
    {"AvgPool 3x3 s2 VALID",
     1,
     {SHAPE4(2, 8, 9, 3)},
     {PSG_CASE_F32},
     b_avgpool_valid,
     1e-5,
     true,
     1e-2},
    {"MaxPool 2x2 VALID", 1, {SHAPE4(2, 7, 7, 4)}, {PSG_CASE_F32}, b_maxpool2, 1e-6, true, 1e-2},
    {"BiasAdd",
     2,
     {SHAPE4(2, 3, 3, 5), SHAPE1(5)},
     {PSG_CASE_F32, PSG_CASE_F32},
     b_bias,
     1e-5,
     true,
     1e-2},
    {"FusedBatchNorm",
     3,
     {SHAPE4(4, 3, 3, 6), SHAPE1(6), SHAPE1(6)},
     {PSG_CASE_F32, PSG_CASE_POSITIVE, PSG_CASE_F32},
     b_bn,
     1e-4,
     true,
     2e-2},
    /* dx rounded to bf16 on both: one ulp (2^-8) apart where the f32 sums straddle an edge */
    {"FusedBatchNorm bf16 x",
     3,
     {SHAPE4(4, 3, 3, 6), SHAPE1(6), SHAPE1(6)},
     {PSG_CASE_F32, PSG_CASE_POSITIVE, PSG_CASE_F32},
     b_bn_bf16,
     1e-2,
     true,
     0}};
const int psg_num_op_cases = (int)(sizeof psg_op_cases / sizeof psg_op_cases[0]);

void psg_op_case_values(const psg_op_case_t *c, unsigned *seed, psg_tensor_t **values) {
    for (int i = 0; i < c->n_in; i++) {
        if (c->kinds[i] == PSG_CASE_LABELS) {
            values[i] = psg_tensor_new(PSG_DT_I32, &c->shapes[i]);
            for (int64_t j = 0; j < psg_tensor_numel(values[i]); j++)
                psg_tensor_i32(values[i])[j] = (int32_t)(rand_r(seed) % 10);
        } else {
            values[i] = psg_test_random(
                &c->shapes[i], c->kinds[i] == PSG_CASE_POSITIVE ? 0.5f : -1.0f, 1.5f, seed);
        }
    }
}
