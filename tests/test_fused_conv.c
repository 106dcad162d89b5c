/* FusedConv2D (ops/nn.c, ops/cpu/conv2d.c): bit for bit the floats of Conv2D, BiasAdd (or
 * FusedBatchNorm in inference), Relu and MaxPool one after another, on every path of the CPU conv
 * (direct kernels over whole images, each pooled as it is finished; over bands of rows when the
 * batch is smaller than the pool; im2col + GEMM; a 1x1 conv's one GEMM), with one thread and with
 * two; and a bias or a pool that does not fit refused naming the node. */
#include "tests/testutil.h"

#include <string.h>

typedef struct {
    int n, h, w, c, k, oc, stride;
    bool same;
} case_t;

static const case_t cases[] = {
    {8, 14, 14, 32, 5, 64, 1, true}, /* the cnn's conv2 at a served batch of 8: direct */
    {8, 28, 28, 1, 5, 32, 1, true},  /* its conv1 */
    {1, 28, 28, 1, 5, 32, 1, true},  /* a batch of one on two threads: bands of rows */
    {2, 11, 13, 7, 3, 40, 2, false}, /* 40 channels padded to 48 inside the direct kernel */
    {3, 5, 5, 4, 1, 6, 1, false},    /* 1x1: one GEMM */
    {1, 3, 3, 5, 3, 7, 1, false},    /* one output row on two threads: im2col + GEMM */
    {0, 8, 8, 3, 3, 16, 1, true},    /* an empty batch: an empty answer, not an error */
};

typedef struct {
    const case_t *k;
    bool fused, relu, bn;         /* bn: a batch norm (args 1-4) in place of the bias (arg 0) */
    const psg_fused_pool_t *pool; /* NULL: none */
} build_t;

static const psg_fused_pool_t pools[] = {
    {2, 2, 2, 2, PSG_PADDING_VALID}, /* the cnn's */
    {3, 3, 2, 2, PSG_PADDING_SAME},  /* windows over the edge, and overlapping */
};

static psg_padding_t pad_of(bool same) {
    return same ? PSG_PADDING_SAME : PSG_PADDING_VALID;
}

enum { N_ARGS = 5 }; /* bias; the batch norm's scale, offset, mean, variance */
#define EPSILON 1e-3

/* y of case k, fused or as separate ops, on `threads` threads; args[N_ARGS] as above. */
static psg_tensor_t *run(const build_t *b, psg_tensor_t *x, psg_tensor_t *w, psg_tensor_t **args,
                         int threads) {
    const case_t *k = b->k;
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t in[2 + N_ARGS];
    psg_tensor_t *vals[2 + N_ARGS] = {x, w};
    in[0] = psg_placeholder(g, "x", PSG_DT_F32, &x->shape);
    in[1] = psg_placeholder(g, "w", PSG_DT_F32, &w->shape);
    for (int i = 0; i < N_ARGS; i++) {
        char name[16];
        snprintf(name, sizeof name, "arg%d", i);
        in[2 + i] = psg_placeholder(g, name, PSG_DT_F32, &args[i]->shape);
        vals[2 + i] = args[i];
    }
    const psg_endpoint_t *a = in + 2;
    psg_fused_bn_t bn = {a[1], a[2], a[3], a[4], EPSILON};
    psg_padding_t pad = pad_of(k->same);
    psg_endpoint_t y;
    if (b->fused && b->bn) {
        y = psg_fused_conv2d_batch_norm(g, "conv", in[0], in[1], &bn, k->stride, k->stride, pad,
                                        b->relu, b->pool);
    } else if (b->fused) {
        y = psg_fused_conv2d(g, "conv", in[0], in[1], a[0], k->stride, k->stride, pad, b->relu,
                             b->pool);
    } else {
        y = psg_conv2d(g, "conv", in[0], in[1], k->stride, k->stride, pad);
        y = b->bn ? psg_fused_batch_norm(g, "bn", y, a[1], a[2], a[3], a[4], EPSILON, false).y
                  : psg_bias_add(g, "bias", y, a[0]);
        if (b->relu) y = psg_relu(g, "relu", y);
        if (b->pool)
            y = psg_max_pool(g, "pool", y, b->pool->kh, b->pool->kw, b->pool->stride_h,
                             b->pool->stride_w, b->pool->padding);
    }
    psg_tensor_t *out = NULL;
    psg_session_options_t opt = {.num_threads = threads};
    psg_session_t *s = psg_session_new(g, &opt, NULL);
    CHECK(s != NULL);
    if (s && psg_session_run(s, 2 + N_ARGS, in, vals, 1, &y, &out, 0, NULL) < 0) out = NULL;
    CHECK(out != NULL);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
    return out;
}

static psg_tensor_t *random_tensor(psg_shape_t shape, uint64_t *seed) {
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &shape);
    float *v = psg_tensor_f32(t);
    for (int64_t i = 0; i < psg_tensor_numel(t); i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((*seed >> 40) & 0xffff) / 32768.0f - 1.0f; /* [-1, 1): about half < 0 */
    }
    return t;
}

static void test_fused_equals_separate_ops(void) {
    uint64_t seed = 7;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const case_t *k = &cases[i];
        psg_tensor_t *x = random_tensor(psg_shape_4d(k->n, k->h, k->w, k->c), &seed);
        psg_tensor_t *w = random_tensor(psg_shape_4d(k->k, k->k, k->c, k->oc), &seed);
        psg_tensor_t *args[N_ARGS];
        for (int a = 0; a < N_ARGS; a++) args[a] = random_tensor(psg_shape_1d(k->oc), &seed);
        float *var = psg_tensor_f32(args[4]);
        for (int64_t c = 0; c < k->oc; c++) var[c] = var[c] * var[c] + 0.01f; /* positive */
        for (int v = 0; v < 12; v++) { /* ReLU or not, no pool or two pools, bias or bn */
            bool relu = v % 2, bn = v >= 6;
            const psg_fused_pool_t *pool = v % 6 < 2 ? NULL : &pools[(v % 6 - 2) / 2];
            if (pool && (k->h < 4 || k->w < 4)) continue; /* a conv output too small to pool */
            for (int threads = 1; threads <= 2; threads++) {
                build_t sep = {k, false, relu, bn, pool}, fused = {k, true, relu, bn, pool};
                psg_tensor_t *want = run(&sep, x, w, args, threads);
                psg_tensor_t *got = run(&fused, x, w, args, threads);
                bool same = want && got && psg_tensor_numel(want) == psg_tensor_numel(got) &&
                            memcmp(psg_tensor_f32(want), psg_tensor_f32(got),
                                   sizeof(float) * (size_t)psg_tensor_numel(got)) == 0;
                int64_t zeros = 0;
                for (int64_t e = 0; got && e < psg_tensor_numel(got); e++)
                    zeros += psg_tensor_f32(got)[e] == 0.0f;
                CHECK(same);
                /* the ReLU did cut: outputs are 0 with it, almost none without */
                CHECK(!got || psg_tensor_numel(got) == 0 ||
                      (relu ? zeros > 0 : zeros < psg_tensor_numel(got) / 4));
                if (!same)
                    fprintf(stderr, "  case %zu (%d threads): fused != conv + %s%s%s\n", i, threads,
                            bn ? "batch norm" : "bias", relu ? " + relu" : "",
                            pool ? " + max pool" : "");
                psg_tensor_destroy(&want);
                psg_tensor_destroy(&got);
            }
        }
        psg_tensor_destroy(&x);
        psg_tensor_destroy(&w);
        for (int a = 0; a < N_ARGS; a++) psg_tensor_destroy(&args[a]);
    }
}

static void test_bias_must_fit(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){4, {1, 6, 6, 3}});
    psg_endpoint_t w = psg_placeholder(g, "w", PSG_DT_F32, &(psg_shape_t){4, {3, 3, 3, 8}});
    psg_endpoint_t b = psg_placeholder(g, "b", PSG_DT_F32, &(psg_shape_t){1, {7}});
    CHECK(!psg_endpoint_valid(
        psg_fused_conv2d(g, "conv1", x, w, b, 1, 1, PSG_PADDING_SAME, true, NULL)));
    CHECK_ERROR_HAS("node 'conv1' (FusedConv2D): bias [7] does not match the output channels");
    /* a VALID pool window larger than the conv's 6 x 6 output */
    psg_endpoint_t b8 = psg_placeholder(g, "b8", PSG_DT_F32, &(psg_shape_t){1, {8}});
    psg_fused_pool_t big = {7, 7, 1, 1, PSG_PADDING_VALID};
    CHECK(!psg_endpoint_valid(
        psg_fused_conv2d(g, "conv2", x, w, b8, 1, 1, PSG_PADDING_SAME, true, &big)));
    CHECK_ERROR_HAS("node 'conv2' (FusedConv2D)");
    CHECK_ERROR_HAS("VALID window of 7 does not fit an input of 6");
    /* a batch norm's statistics of the wrong size, and a node of neither form */
    psg_fused_bn_t bn = {b8, b8, b, b8, 1e-3};
    CHECK(!psg_endpoint_valid(
        psg_fused_conv2d_batch_norm(g, "conv3", x, w, &bn, 1, 1, PSG_PADDING_SAME, true, NULL)));
    CHECK_ERROR_HAS("node 'conv3' (FusedConv2D): mean [7] does not match the output channels");
    psg_node_builder_t *nb = psg_node_begin(g, "FusedConv2D", "conv4");
    psg_node_add_input(nb, x);
    psg_node_add_input(nb, w);
    psg_node_attr_ints(nb, "strides", 2, (int64_t[]){1, 1});
    psg_node_attr_str(nb, "padding", "SAME");
    CHECK(!psg_endpoint_valid(psg_node_finish_ep(nb)));
    CHECK_ERROR_HAS("node 'conv4' (FusedConv2D): 2 inputs: x, filter and a bias");
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_fused_equals_separate_ops);
    RUN_TEST(test_bias_must_fit);
    return psg_test_summary();
}
