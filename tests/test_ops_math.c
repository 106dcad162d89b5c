/* The math ops: forward values against naive loops or hand-computed numbers,
 * a finite-difference gradient check for every differentiable op and
 * variant, and shape / value errors that name the node. */
#include "tests/gradcheck.h"
#include "tests/testutil.h"

#include <stdlib.h>

/* ---- helpers ---- */

/* Runs g for one fetch with n feeds on `threads` threads; the fetched tensor
 * (caller owns) or NULL. */
static psg_tensor_t *run_n(psg_graph_t *g, int n, const psg_endpoint_t *ph,
                           psg_tensor_t *const *vals, psg_endpoint_t out, int threads) {
    psg_session_options_t opt = {.num_threads = threads};
    psg_session_t *s = psg_session_new(g, &opt, NULL);
    psg_tensor_t *r = NULL;
    if (!s || psg_session_run(s, n, ph, vals, 1, &out, &r, 0, NULL) < 0) r = NULL;
    psg_session_destroy(&s);
    return r;
}

static psg_tensor_t *rnd(int rank, const int64_t *dims, float lo, float hi, unsigned *seed) {
    psg_shape_t s = psg_shape_make(rank, dims);
    return psg_test_random(&s, lo, hi, seed);
}

/* Random values whose magnitude is in [0.2, 1): no kinks near zero for Relu
 * and no tiny divisors. */
static psg_tensor_t *rnd_away(int rank, const int64_t *dims, unsigned *seed) {
    psg_tensor_t *t = rnd(rank, dims, -1, 1, seed);
    float *d = psg_tensor_f32(t);
    for (int64_t i = 0; i < psg_tensor_numel(t); i++)
        d[i] = (d[i] < 0 ? -0.2f : 0.2f) + 0.8f * d[i];
    return t;
}

static int max_abs_diff_ok(const float *a, const float *b, int64_t n, double tol) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - (double)b[i]) <= tol * (1 + fabs((double)b[i])))) {
            fprintf(stderr, "  element %lld: got %.7g, want %.7g\n", (long long)i, a[i], b[i]);
            return 0;
        }
    return 1;
}

/* out[i] = f(a[ia], b[ib]) with numpy broadcasting, by index arithmetic. */
static void naive_broadcast(char op, const psg_tensor_t *a, const psg_tensor_t *b, float *out,
                            psg_shape_t *os) {
    psg_shape_broadcast(&a->shape, &b->shape, os);
    int64_t n = psg_shape_numel(os);
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, ia = 0, ib = 0, ma = 1, mb = 1;
        for (int d = os->rank - 1; d >= 0; d--) {
            int64_t idx = rem % os->dims[d];
            rem /= os->dims[d];
            int da = d - (os->rank - a->shape.rank), db = d - (os->rank - b->shape.rank);
            if (da >= 0) {
                ia += (a->shape.dims[da] == 1 ? 0 : idx) * ma;
                ma *= a->shape.dims[da];
            }
            if (db >= 0) {
                ib += (b->shape.dims[db] == 1 ? 0 : idx) * mb;
                mb *= b->shape.dims[db];
            }
        }
        float x = psg_tensor_f32(a)[ia], y = psg_tensor_f32(b)[ib];
        out[i] = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : x / y;
    }
}

/* ---- gradcheck build functions ---- */

typedef struct {
    const char *op;
    /* attributes some ops take */
    double f;
    bool b1, b2;
    int n_axes;
    int64_t axes[4];
    int64_t begin[4], size[4];
} op_ctx_t;

static psg_endpoint_t build_op(psg_graph_t *g, const psg_endpoint_t *in, void *vctx) {
    const op_ctx_t *c = vctx;
    const char *op = c->op;
    if (!strcmp(op, "Add")) return psg_add(g, NULL, in[0], in[1]);
    if (!strcmp(op, "Sub")) return psg_sub(g, NULL, in[0], in[1]);
    if (!strcmp(op, "Mul")) return psg_mul(g, NULL, in[0], in[1]);
    if (!strcmp(op, "Div")) return psg_div(g, NULL, in[0], in[1]);
    if (!strcmp(op, "Pow")) return psg_pow(g, NULL, in[0], c->f);
    if (!strcmp(op, "Scale")) return psg_scale(g, NULL, in[0], c->f);
    if (!strcmp(op, "ReluGrad")) return psg_relu_grad(g, NULL, in[0], in[1]);
    if (!strcmp(op, "SigmoidGrad")) return psg_sigmoid_grad(g, NULL, in[0], in[1]);
    if (!strcmp(op, "TanhGrad")) return psg_tanh_grad(g, NULL, in[0], in[1]);
    if (!strcmp(op, "Xent")) return psg_sparse_softmax_cross_entropy(g, NULL, in[0], in[1]);
    if (!strcmp(op, "Sum")) return psg_sum(g, NULL, in[0], c->n_axes, c->axes, c->b1);
    if (!strcmp(op, "Mean")) return psg_mean(g, NULL, in[0], c->n_axes, c->axes, c->b1);
    if (!strcmp(op, "ExpandDims")) return psg_expand_dims(g, NULL, in[0], c->n_axes, c->axes);
    if (!strcmp(op, "MatMul")) return psg_matmul(g, NULL, in[0], in[1], c->b1, c->b2);
    if (!strcmp(op, "Dense")) return psg_dense(g, NULL, in[0], in[1], in[2], c->b1);
    if (!strcmp(op, "Concat")) return psg_concat(g, NULL, 3, in, (int)c->f);
    if (!strcmp(op, "Slice")) return psg_slice(g, NULL, in[0], c->n_axes, c->begin, c->size);
    if (!strcmp(op, "SliceGrad")) {
        /* SliceGrad(x0, x1) through its own builder path: the gradient of a Slice of x1 */
        psg_node_builder_t *b = psg_node_begin(g, "SliceGrad", NULL);
        psg_node_add_input(b, in[0]);
        psg_node_add_input(b, in[1]);
        psg_node_attr_ints(b, "begin", c->n_axes, c->begin);
        psg_node_attr_ints(b, "size", c->n_axes, c->size);
        return psg_node_finish_ep(b);
    }
    if (!strcmp(op, "Cast")) return psg_cast(g, NULL, in[0], PSG_DT_F32);
    psg_node_builder_t *b = psg_node_begin(g, op, NULL); /* unary, by name */
    psg_node_add_input(b, in[0]);
    return psg_node_finish_ep(b);
}

static int check_grad(const char *label, const op_ctx_t *ctx, int n, psg_tensor_t **xs,
                      const bool *diff) {
    psg_gradcheck_input_t in[4];
    for (int i = 0; i < n; i++) in[i] = (psg_gradcheck_input_t){xs[i], diff ? diff[i] : true};
    return psg_gradcheck(label, n, in, build_op, (void *)ctx, 1e-2);
}

/* ---- elementwise ---- */

static void test_binary_broadcasting(void) {
    static const struct {
        int ra;
        int64_t a[4];
        int rb;
        int64_t b[4];
    } cases[] = {
        {2, {2, 3}, 2, {2, 3}},    {2, {2, 3}, 1, {3}},          {1, {3}, 2, {2, 3}},
        {2, {2, 3}, 2, {2, 1}},    {2, {1, 3}, 2, {4, 1}},       {3, {2, 1, 3}, 2, {4, 1}},
        {0, {0}, 2, {2, 3}},       {2, {2, 3}, 0, {0}},          {3, {2, 3, 4}, 3, {2, 1, 4}},
        {2, {300, 200}, 1, {200}}, {2, {300, 200}, 2, {300, 1}}, {1, {70000}, 1, {70000}},
    };
    const char *ops[4] = {"Add", "Sub", "Mul", "Div"};
    const char sym[4] = {'+', '-', '*', '/'};
    unsigned seed = 7;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        psg_tensor_t *a = rnd_away(cases[k].ra, cases[k].a, &seed);
        psg_tensor_t *b = rnd_away(cases[k].rb, cases[k].b, &seed);
        for (int o = 0; o < 4; o++) {
            psg_graph_t *g = psg_graph_new();
            psg_endpoint_t ph[2] = {psg_placeholder(g, "a", PSG_DT_F32, &a->shape),
                                    psg_placeholder(g, "b", PSG_DT_F32, &b->shape)};
            op_ctx_t ctx = {.op = ops[o]};
            psg_endpoint_t y = build_op(g, ph, &ctx);
            psg_tensor_t *vals[2] = {a, b};
            psg_tensor_t *out = run_n(g, 2, ph, vals, y, 2);
            psg_shape_t os;
            psg_shape_broadcast(&a->shape, &b->shape, &os);
            float *want = malloc(sizeof(float) * (size_t)psg_shape_numel(&os));
            naive_broadcast(sym[o], a, b, want, &os);
            CHECK(out && psg_shape_equal(&out->shape, &os));
            if (out && psg_shape_equal(&out->shape, &os)) {
                int ok = max_abs_diff_ok(psg_tensor_f32(out), want, psg_shape_numel(&os), 1e-6);
                if (!ok) fprintf(stderr, "  case %zu op %s\n", k, ops[o]);
                CHECK(ok);
            }
            free(want);
            psg_tensor_destroy(&out);
            psg_graph_destroy(&g);
        }
        psg_tensor_destroy(&a);
        psg_tensor_destroy(&b);
    }
}

static void test_unary_values(void) {
    float v[6] = {0.25f, 1.0f, 2.0f, 0.5f, 3.0f, 1.5f}, n[6] = {-2, -0.5f, 0, 0.5f, 2, 40};
    psg_shape_t s = psg_shape_2d(2, 3);
    const char *ops[] = {"Neg", "Square", "Sqrt", "Exp", "Log", "Relu", "Sigmoid", "Tanh"};
    for (int o = 0; o < 8; o++) {
        for (int which = 0; which < 2; which++) {
            const float *x = which ? n : v;
            if (which && (!strcmp(ops[o], "Sqrt") || !strcmp(ops[o], "Log"))) continue;
            psg_graph_t *g = psg_graph_new();
            psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &s);
            op_ctx_t ctx = {.op = ops[o]};
            psg_endpoint_t y = build_op(g, &ph, &ctx);
            psg_tensor_t *xt = psg_test_tensor(&s, x);
            psg_tensor_t *out = run_n(g, 1, &ph, &xt, y, 1);
            CHECK(out != NULL);
            for (int i = 0; out && i < 6; i++) {
                double e, xi = x[i];
                switch (o) {
                case 0: e = -xi; break;
                case 1: e = xi * xi; break;
                case 2: e = sqrt(xi); break;
                case 3: e = exp(xi); break;
                case 4: e = log(xi); break;
                case 5: e = xi > 0 ? xi : 0; break;
                case 6: e = 1 / (1 + exp(-xi)); break;
                default: e = tanh(xi); break;
                }
                CHECK_NEAR(psg_tensor_f32(out)[i], e, 1e-5 * (1 + fabs(e)));
            }
            psg_tensor_destroy(&out);
            psg_tensor_destroy(&xt);
            psg_graph_destroy(&g);
        }
    }
    /* Pow and Scale take their constant from an attribute */
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t p = psg_pow(g, "p", ph, 1.5), sc = psg_scale(g, "s", ph, -3.0);
    psg_tensor_t *xt = psg_test_tensor(&s, v);
    psg_tensor_t *po = run_n(g, 1, &ph, &xt, p, 1), *so = run_n(g, 1, &ph, &xt, sc, 1);
    for (int i = 0; po && so && i < 6; i++) {
        CHECK_NEAR(psg_tensor_f32(po)[i], pow(v[i], 1.5), 1e-5);
        CHECK_NEAR(psg_tensor_f32(so)[i], -3.0 * v[i], 1e-6);
    }
    CHECK(po && so);
    psg_tensor_destroy(&po);
    psg_tensor_destroy(&so);
    psg_tensor_destroy(&xt);
    psg_graph_destroy(&g);
}

static void test_elementwise_gradients(void) {
    unsigned seed = 11;
    static const struct {
        int ra;
        int64_t a[3];
        int rb;
        int64_t b[3];
    } shapes[] = {
        {2, {2, 3}, 2, {2, 3}}, {2, {2, 3}, 1, {3}},    {1, {3}, 2, {2, 3}},
        {2, {2, 3}, 2, {2, 1}}, {2, {1, 3}, 2, {4, 1}}, {0, {0}, 2, {2, 3}},
    };
    const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    for (int o = 0; o < 4; o++) {
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            psg_tensor_t *xs[2] = {rnd_away(shapes[k].ra, shapes[k].a, &seed),
                                   rnd_away(shapes[k].rb, shapes[k].b, &seed)};
            char label[64];
            snprintf(label, sizeof label, "%s case %zu", ops[o], k);
            op_ctx_t ctx = {.op = ops[o]};
            CHECK(check_grad(label, &ctx, 2, xs, NULL) == 0);
            psg_tensor_destroy(&xs[0]);
            psg_tensor_destroy(&xs[1]);
        }
    }
    int64_t d[2] = {3, 4};
    const char *un[] = {"Neg",     "Square", "Sqrt",    "Exp",        "Log",    "Relu",
                        "Sigmoid", "Tanh",   "Softmax", "LogSoftmax", "L2Loss", "Cast"};
    for (int o = 0; o < 12; o++) {
        bool positive = !strcmp(un[o], "Sqrt") || !strcmp(un[o], "Log");
        psg_tensor_t *x = positive ? rnd(2, d, 0.5f, 2.0f, &seed) : rnd_away(2, d, &seed);
        op_ctx_t ctx = {.op = un[o]};
        CHECK(check_grad(un[o], &ctx, 1, &x, NULL) == 0);
        psg_tensor_destroy(&x);
    }
    psg_tensor_t *x = rnd(2, d, 0.5f, 2.0f, &seed);
    op_ctx_t pw = {.op = "Pow", .f = 2.5}, p2 = {.op = "Pow", .f = 2},
             sc = {.op = "Scale", .f = -1.5};
    CHECK(check_grad("Pow 2.5", &pw, 1, &x, NULL) == 0);
    CHECK(check_grad("Pow 2", &p2, 1, &x, NULL) == 0);
    CHECK(check_grad("Scale", &sc, 1, &x, NULL) == 0);
    psg_tensor_destroy(&x);
    /* the activation backprops, by both inputs (ReluGrad: by dy only) */
    psg_tensor_t *ab[2] = {rnd_away(2, d, &seed), rnd(2, d, 0.1f, 0.9f, &seed)};
    op_ctx_t sg = {.op = "SigmoidGrad"}, tg = {.op = "TanhGrad"}, rg = {.op = "ReluGrad"};
    CHECK(check_grad("SigmoidGrad", &sg, 2, ab, NULL) == 0);
    CHECK(check_grad("TanhGrad", &tg, 2, ab, NULL) == 0);
    bool dy_only[2] = {true, false};
    psg_tensor_t *rab[2] = {ab[0], rnd_away(2, d, &seed)};
    CHECK(check_grad("ReluGrad", &rg, 2, rab, dy_only) == 0);
    psg_tensor_destroy(&rab[1]);
    psg_tensor_destroy(&ab[0]);
    psg_tensor_destroy(&ab[1]);
}

/* ---- softmax and losses ---- */

static void test_softmax_values(void) {
    /* a huge row checks the max subtraction; the reference is computed by hand */
    float x[6] = {1, 2, 3, 1000, 1001, 1002};
    psg_shape_t s = psg_shape_2d(2, 3);
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t sm = psg_softmax(g, "sm", ph), lsm = psg_log_softmax(g, "lsm", ph);
    psg_tensor_t *xt = psg_test_tensor(&s, x);
    psg_tensor_t *a = run_n(g, 1, &ph, &xt, sm, 1), *b = run_n(g, 1, &ph, &xt, lsm, 1);
    double z = 1 + exp(1) + exp(2);
    double want[3] = {1 / z, exp(1) / z, exp(2) / z};
    CHECK(a && b);
    for (int i = 0; a && b && i < 6; i++) {
        CHECK_NEAR(psg_tensor_f32(a)[i], want[i % 3], 1e-6);
        CHECK_NEAR(psg_tensor_f32(b)[i], log(want[i % 3]),
                   i < 3 ? 1e-6 : 1e-4); /* float ulp at 1000 */
    }
    psg_tensor_destroy(&a);
    psg_tensor_destroy(&b);
    psg_tensor_destroy(&xt);
    psg_graph_destroy(&g);
}

static void test_sparse_xent(void) {
    unsigned seed = 3;
    int64_t d[2] = {4, 5};
    psg_tensor_t *logits = rnd(2, d, -3, 3, &seed);
    psg_shape_t ls = psg_shape_1d(4);
    for (int wide = 0; wide < 2; wide++) {
        psg_dtype_t dt = wide ? PSG_DT_I64 : PSG_DT_I32;
        psg_tensor_t *labels = psg_tensor_new(dt, &ls);
        int64_t lab[4] = {0, 4, 2, 2};
        for (int i = 0; i < 4; i++) {
            if (wide)
                psg_tensor_i64(labels)[i] = lab[i];
            else
                psg_tensor_i32(labels)[i] = (int32_t)lab[i];
        }
        psg_graph_t *g = psg_graph_new();
        psg_endpoint_t ph[2] = {psg_placeholder(g, "logits", PSG_DT_F32, &logits->shape),
                                psg_placeholder(g, "labels", dt, &ls)};
        psg_endpoint_t loss = psg_sparse_softmax_cross_entropy(g, "xent", ph[0], ph[1]);
        psg_endpoint_t back = {loss.node, 1};
        psg_tensor_t *vals[2] = {logits, labels};
        psg_tensor_t *lo = run_n(g, 2, ph, vals, loss, 1), *bo = run_n(g, 2, ph, vals, back, 1);
        CHECK(lo && bo);
        for (int r = 0; lo && bo && r < 4; r++) {
            const float *x = psg_tensor_f32(logits) + r * 5;
            double z = 0;
            for (int k = 0; k < 5; k++) z += exp(x[k]);
            CHECK_NEAR(psg_tensor_f32(lo)[r], log(z) - x[lab[r]], 1e-5);
            for (int k = 0; k < 5; k++)
                CHECK_NEAR(psg_tensor_f32(bo)[r * 5 + k], exp(x[k]) / z - (k == lab[r]), 1e-6);
        }
        psg_tensor_destroy(&lo);
        psg_tensor_destroy(&bo);
        /* gradient by the logits (the labels are not differentiable) */
        op_ctx_t ctx = {.op = "Xent"};
        bool diff[2] = {true, false};
        psg_tensor_t *xs[2] = {logits, labels};
        CHECK(check_grad(wide ? "Xent i64" : "Xent i32", &ctx, 2, xs, diff) == 0);
        /* an out-of-range label names its value and row */
        if (wide)
            psg_tensor_i64(labels)[1] = 7;
        else
            psg_tensor_i32(labels)[1] = -1;
        lo = run_n(g, 2, ph, vals, loss, 1);
        CHECK(lo == NULL);
        CHECK_ERROR_HAS("node 'xent' (SparseSoftmaxCrossEntropyWithLogits)");
        CHECK_ERROR_HAS(wide ? "label 7 at row 1 is outside [0, 5)" : "label -1 at row 1");
        psg_tensor_destroy(&labels);
        psg_graph_destroy(&g);
    }
    /* float labels are refused when built */
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t l = psg_placeholder(g, "l", PSG_DT_F32, &logits->shape);
    psg_endpoint_t y = psg_placeholder(g, "y", PSG_DT_F32, &ls);
    CHECK(!psg_endpoint_valid(psg_sparse_softmax_cross_entropy(g, "bad", l, y)));
    CHECK_ERROR_HAS(
        "node 'bad' (SparseSoftmaxCrossEntropyWithLogits): labels (input 1) must be i32 or i64");
    psg_graph_destroy(&g);
    psg_tensor_destroy(&logits);
}

/* ---- reductions ---- */

static void test_reductions(void) {
    unsigned seed = 5;
    int64_t d[3] = {2, 3, 4};
    psg_tensor_t *x = rnd(3, d, -1, 1, &seed);
    const float *xv = psg_tensor_f32(x);
    static const struct {
        int n;
        int64_t axes[3];
    } cases[] = {{0, {0}},    {1, {0}},     {1, {1}},      {1, {-1}},
                 {2, {0, 2}}, {2, {-1, 1}}, {3, {0, 1, 2}}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        bool red[3] = {cases[k].n == 0, cases[k].n == 0, cases[k].n == 0};
        for (int i = 0; i < cases[k].n; i++) red[(cases[k].axes[i] + 3) % 3] = true;
        for (int mean = 0; mean < 2; mean++) {
            for (int keep = 0; keep < 2; keep++) {
                psg_graph_t *g = psg_graph_new();
                psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &x->shape);
                psg_endpoint_t y = mean ? psg_mean(g, "r", ph, cases[k].n, cases[k].axes, keep)
                                        : psg_sum(g, "r", ph, cases[k].n, cases[k].axes, keep);
                psg_tensor_t *out = run_n(g, 1, &ph, &x, y, 1);
                CHECK(out != NULL);
                /* naive: out index from the kept coordinates */
                float want[24] = {0};
                int count = 1;
                for (int i = 0; i < 3; i++) count *= red[i] ? (int)d[i] : 1;
                int ostride[3], s = 1;
                for (int i = 2; i >= 0; i--) {
                    ostride[i] = red[i] ? 0 : s;
                    s *= red[i] ? 1 : (int)d[i];
                }
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 3; b++)
                        for (int c = 0; c < 4; c++)
                            want[a * ostride[0] + b * ostride[1] + c * ostride[2]] +=
                                xv[(a * 3 + b) * 4 + c] / (mean ? (float)count : 1.0f);
                int expect_rank = keep ? 3 : 3 - (cases[k].n ? cases[k].n : 3);
                CHECK(out && out->shape.rank == expect_rank);
                if (out) CHECK(max_abs_diff_ok(psg_tensor_f32(out), want, s, 1e-5));
                psg_tensor_destroy(&out);
                psg_graph_destroy(&g);
                char label[64];
                snprintf(label, sizeof label, "%s case %zu keep %d", mean ? "Mean" : "Sum", k,
                         keep);
                op_ctx_t ctx = {.op = mean ? "Mean" : "Sum", .b1 = keep, .n_axes = cases[k].n};
                memcpy(ctx.axes, cases[k].axes, sizeof cases[k].axes);
                CHECK(check_grad(label, &ctx, 1, &x, NULL) == 0);
            }
        }
    }
    psg_tensor_destroy(&x);
    /* big enough to split over the pool, both ways */
    int64_t big[2] = {512, 300};
    psg_tensor_t *bx = rnd(2, big, -1, 1, &seed);
    for (int axis = 0; axis < 2; axis++) {
        psg_graph_t *g = psg_graph_new();
        psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &bx->shape);
        int64_t ax = axis;
        psg_endpoint_t y = psg_sum(g, "s", ph, 1, &ax, false);
        psg_tensor_t *out = run_n(g, 1, &ph, &bx, y, 2);
        CHECK(out && out->shape.dims[0] == big[1 - axis]);
        for (int64_t i = 0; out && i < big[1 - axis]; i++) {
            double acc = 0;
            for (int64_t r = 0; r < big[axis]; r++)
                acc += psg_tensor_f32(bx)[axis ? i * 300 + r : r * 300 + i];
            CHECK_NEAR(psg_tensor_f32(out)[i], acc, 1e-3);
        }
        psg_tensor_destroy(&out);
        psg_graph_destroy(&g);
    }
    psg_tensor_destroy(&bx);
    /* errors name the node */
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){2, {2, 3}});
    int64_t bad = 2, twice[2] = {1, -1};
    CHECK(!psg_endpoint_valid(psg_sum(g, "s", ph, 1, &bad, false)));
    CHECK_ERROR_HAS("node 's' (Sum): axis 2 is out of range for rank 2");
    CHECK(!psg_endpoint_valid(psg_mean(g, "m", ph, 2, twice, false)));
    CHECK_ERROR_HAS("node 'm' (Mean): axis -1 is repeated");
    psg_graph_destroy(&g);
}

/* Mean over a dim unknown when built: the gradient divides by the count at run time. */
static void test_mean_gradient_unknown_batch(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){2, {-1, 3}});
    int64_t ax0 = 0;
    psg_endpoint_t m = psg_mean(g, "m", x, 1, &ax0, false);
    psg_endpoint_t total = psg_sum(g, "t", m, 0, NULL, false);
    psg_endpoint_t dx;
    CHECK(psg_gradients(g, 1, &total, NULL, 1, &x, &dx) == 0);
    psg_tensor_t *xv = psg_tensor_zeros(PSG_DT_F32, &(psg_shape_t){2, {5, 3}});
    psg_tensor_t *out = run_n(g, 1, &x, &xv, dx, 1);
    CHECK(out && out->shape.dims[0] == 5);
    for (int i = 0; out && i < 15; i++) CHECK_NEAR(psg_tensor_f32(out)[i], 0.2, 1e-7);
    psg_tensor_destroy(&out);
    psg_tensor_destroy(&xv);
    psg_graph_destroy(&g);
}

/* ---- matrix products ---- */

static void naive_matmul(const psg_tensor_t *a, const psg_tensor_t *b, bool ta, bool tb, float *c,
                         int64_t *m_out, int64_t *n_out) {
    int64_t M = ta ? a->shape.dims[1] : a->shape.dims[0],
            K = ta ? a->shape.dims[0] : a->shape.dims[1];
    int64_t N = tb ? b->shape.dims[0] : b->shape.dims[1];
    const float *A = psg_tensor_f32(a), *B = psg_tensor_f32(b);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc +=
                    (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
            c[i * N + j] = (float)acc;
        }
    *m_out = M;
    *n_out = N;
}

static void test_matmul(void) {
    unsigned seed = 9;
    for (int big = 0; big < 2; big++) {
        int64_t M = big ? 96 : 3, K = big ? 200 : 4, N = big ? 130 : 5;
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t da[2] = {ta ? K : M, ta ? M : K}, db[2] = {tb ? N : K, tb ? K : N};
            psg_tensor_t *xs[2] = {rnd(2, da, -1, 1, &seed), rnd(2, db, -1, 1, &seed)};
            psg_graph_t *g = psg_graph_new();
            psg_endpoint_t ph[2] = {psg_placeholder(g, "a", PSG_DT_F32, &xs[0]->shape),
                                    psg_placeholder(g, "b", PSG_DT_F32, &xs[1]->shape)};
            psg_endpoint_t y = psg_matmul(g, "mm", ph[0], ph[1], ta, tb);
            psg_tensor_t *out = run_n(g, 2, ph, xs, y, 2);
            float *want = malloc(sizeof(float) * (size_t)(M * N));
            int64_t m, n;
            naive_matmul(xs[0], xs[1], ta, tb, want, &m, &n);
            CHECK(out && out->shape.dims[0] == M && out->shape.dims[1] == N);
            if (out) CHECK(max_abs_diff_ok(psg_tensor_f32(out), want, M * N, 1e-4));
            free(want);
            psg_tensor_destroy(&out);
            psg_graph_destroy(&g);
            if (!big) {
                char label[32];
                snprintf(label, sizeof label, "MatMul ta=%d tb=%d", ta, tb);
                op_ctx_t ctx = {.op = "MatMul", .b1 = ta, .b2 = tb};
                CHECK(check_grad(label, &ctx, 2, xs, NULL) == 0);
            }
            psg_tensor_destroy(&xs[0]);
            psg_tensor_destroy(&xs[1]);
        }
    }
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t a = psg_placeholder(g, "a", PSG_DT_F32, &(psg_shape_t){2, {2, 3}});
    psg_endpoint_t b = psg_placeholder(g, "b", PSG_DT_F32, &(psg_shape_t){2, {4, 5}});
    psg_endpoint_t v = psg_placeholder(g, "v", PSG_DT_F32, &(psg_shape_t){1, {3}});
    CHECK(!psg_endpoint_valid(psg_matmul(g, "mm", a, b, false, false)));
    CHECK_ERROR_HAS("node 'mm' (MatMul): [2, 3] x [4, 5]: inner dimensions 3 and 4 do not match");
    CHECK(!psg_endpoint_valid(psg_matmul(g, "mt", a, b, false, true)));
    CHECK_ERROR_HAS("node 'mt' (MatMul): [2, 3] x [4, 5]^T: inner dimensions 3 and 5");
    CHECK(!psg_endpoint_valid(psg_matmul(g, "mv", a, v, false, false)));
    CHECK_ERROR_HAS("node 'mv' (MatMul): [2, 3] x [3]: both inputs must have rank 2");
    psg_graph_destroy(&g);
}

static void test_dense(void) {
    unsigned seed = 13;
    /* small (one thread does all), and the mlp's first layer (split by rows) */
    int64_t shapes[2][3] = {{3, 4, 5}, {128, 784, 256}};
    for (int s = 0; s < 2; s++) {
        int64_t N = shapes[s][0], K = shapes[s][1], M = shapes[s][2];
        int64_t dx[2] = {N, K}, dw[2] = {K, M};
        psg_tensor_t *xs[3] = {rnd(2, dx, -1, 1, &seed), rnd(2, dw, -0.1f, 0.1f, &seed),
                               rnd(1, &M, -0.5f, 0.5f, &seed)};
        for (int relu = 0; relu < 2; relu++) {
            psg_graph_t *g = psg_graph_new();
            psg_endpoint_t ph[3] = {psg_placeholder(g, "x", PSG_DT_F32, &xs[0]->shape),
                                    psg_placeholder(g, "w", PSG_DT_F32, &xs[1]->shape),
                                    psg_placeholder(g, "b", PSG_DT_F32, &xs[2]->shape)};
            psg_endpoint_t y = psg_dense(g, "fc", ph[0], ph[1], ph[2], relu);
            psg_tensor_t *out = run_n(g, 3, ph, xs, y, 2);
            float *want = malloc(sizeof(float) * (size_t)(N * M));
            int64_t m, n;
            naive_matmul(xs[0], xs[1], false, false, want, &m, &n);
            for (int64_t i = 0; i < N * M; i++) {
                want[i] += psg_tensor_f32(xs[2])[i % M];
                if (relu && want[i] < 0) want[i] = 0;
            }
            CHECK(out && out->shape.dims[0] == N && out->shape.dims[1] == M);
            if (out) CHECK(max_abs_diff_ok(psg_tensor_f32(out), want, N * M, 1e-4));
            free(want);
            psg_tensor_destroy(&out);
            psg_graph_destroy(&g);
            if (s == 0) {
                op_ctx_t ctx = {.op = "Dense", .b1 = relu};
                CHECK(check_grad(relu ? "Dense relu" : "Dense", &ctx, 3, xs, NULL) == 0);
            }
        }
        for (int i = 0; i < 3; i++) psg_tensor_destroy(&xs[i]);
    }
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){2, {-1, 3}});
    psg_endpoint_t w = psg_placeholder(g, "w", PSG_DT_F32, &(psg_shape_t){2, {3, 4}});
    psg_endpoint_t b = psg_placeholder(g, "b", PSG_DT_F32, &(psg_shape_t){1, {5}});
    CHECK(!psg_endpoint_valid(psg_dense(g, "fc", x, w, b, true)));
    CHECK_ERROR_HAS("node 'fc' (Dense): bias [5] does not match w [3, 4]");
    psg_graph_destroy(&g);
}

/* ---- shapes, randomness, types ---- */

static void test_concat_slice(void) {
    unsigned seed = 17;
    int64_t da[2] = {2, 3}, db[2] = {2, 1}, dc[2] = {2, 2};
    psg_tensor_t *xs[3] = {rnd(2, da, -1, 1, &seed), rnd(2, db, -1, 1, &seed),
                           rnd(2, dc, -1, 1, &seed)};
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t ph[3];
    for (int i = 0; i < 3; i++) ph[i] = psg_placeholder(g, NULL, PSG_DT_F32, &xs[i]->shape);
    psg_endpoint_t y = psg_concat(g, "cat", 3, ph, -1);
    psg_tensor_t *out = run_n(g, 3, ph, xs, y, 1);
    CHECK(out && out->shape.dims[0] == 2 && out->shape.dims[1] == 6);
    for (int r = 0; out && r < 2; r++)
        for (int k = 0; k < 6; k++) {
            float want = k < 3   ? psg_tensor_f32(xs[0])[r * 3 + k]
                         : k < 4 ? psg_tensor_f32(xs[1])[r]
                                 : psg_tensor_f32(xs[2])[r * 2 + k - 4];
            CHECK(psg_tensor_f32(out)[r * 6 + k] == want);
        }
    psg_tensor_destroy(&out);
    op_ctx_t cat = {.op = "Concat", .f = 1};
    CHECK(check_grad("Concat axis 1", &cat, 3, xs, NULL) == 0);
    /* axis 0 */
    int64_t d0[2][2] = {{1, 3}, {3, 3}};
    psg_tensor_t *ys[3] = {xs[0], rnd(2, d0[0], -1, 1, &seed), rnd(2, d0[1], -1, 1, &seed)};
    op_ctx_t cat0 = {.op = "Concat", .f = 0};
    CHECK(check_grad("Concat axis 0", &cat0, 3, ys, NULL) == 0);
    CHECK(!psg_endpoint_valid(psg_concat(g, "bad", 3, ph, 0)));
    CHECK_ERROR_HAS("node 'bad' (Concat): input 1 has shape [2, 1], which does not fit [2, 3]");
    psg_graph_destroy(&g);
    /* Slice: a block of a [3, 4, 5] */
    int64_t d3[3] = {3, 4, 5};
    psg_tensor_t *x = rnd(3, d3, -1, 1, &seed);
    op_ctx_t sl = {.op = "Slice", .n_axes = 3, .begin = {1, 0, 2}, .size = {2, -1, 2}};
    g = psg_graph_new();
    psg_endpoint_t xp = psg_placeholder(g, "x", PSG_DT_F32, &x->shape);
    psg_endpoint_t s = build_op(g, &xp, &sl);
    out = run_n(g, 1, &xp, &x, s, 1);
    CHECK(out && out->shape.dims[0] == 2 && out->shape.dims[1] == 4 && out->shape.dims[2] == 2);
    for (int a = 0; out && a < 2; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 2; c++)
                CHECK(psg_tensor_f32(out)[(a * 4 + b) * 2 + c] ==
                      psg_tensor_f32(x)[((a + 1) * 4 + b) * 5 + c + 2]);
    psg_tensor_destroy(&out);
    int64_t b0[3] = {2, 0, 0}, s0[3] = {2, 1, 1};
    CHECK(!psg_endpoint_valid(psg_slice(g, "bad", xp, 3, b0, s0)));
    CHECK_ERROR_HAS("node 'bad' (Slice): slice [2, +2) of axis 0 is outside its size 3");
    psg_graph_destroy(&g);
    CHECK(check_grad("Slice", &sl, 1, &x, NULL) == 0);
    int64_t dd[3] = {2, 4, 2};
    psg_tensor_t *sg[2] = {rnd(3, dd, -1, 1, &seed), x};
    op_ctx_t slg = sl;
    slg.op = "SliceGrad";
    bool diff[2] = {true, false};
    CHECK(check_grad("SliceGrad", &slg, 2, sg, diff) == 0);
    psg_tensor_destroy(&sg[0]);
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&ys[1]);
    psg_tensor_destroy(&ys[2]);
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&xs[i]);
    /* ExpandDims, and its gradient */
    int64_t d2[2] = {2, 3}, axes[2] = {0, 2};
    psg_tensor_t *e = rnd(2, d2, -1, 1, &seed);
    op_ctx_t ed = {.op = "ExpandDims", .n_axes = 2, .axes = {0, 2}};
    g = psg_graph_new();
    xp = psg_placeholder(g, "x", PSG_DT_F32, &e->shape);
    psg_endpoint_t ex = psg_expand_dims(g, "e", xp, 2, axes);
    const psg_shape_t *es = psg_graph_shape(g, ex);
    CHECK(es->rank == 4 && es->dims[0] == 1 && es->dims[1] == 2 && es->dims[2] == 1 &&
          es->dims[3] == 3);
    psg_graph_destroy(&g);
    CHECK(check_grad("ExpandDims", &ed, 1, &e, NULL) == 0);
    psg_tensor_destroy(&e);
}

static void test_l2_argmax_cast_equal(void) {
    float x[6] = {1, -2, 3, 0.5f, 7, 7};
    psg_shape_t s = psg_shape_2d(2, 3);
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t l2 = psg_l2_loss(g, "l2", ph), am = psg_argmax(g, "am", ph);
    psg_endpoint_t ci = psg_cast(g, "ci", ph, PSG_DT_I32), cl = psg_cast(g, "cl", ph, PSG_DT_I64);
    psg_endpoint_t back = psg_cast(g, "back", ci, PSG_DT_F32);
    psg_endpoint_t eq =
        psg_equal(g, "eq", am, psg_cast(g, NULL, psg_const_scalar(g, "two", 2), PSG_DT_I64));
    psg_endpoint_t acc = psg_mean(g, "acc", psg_cast(g, NULL, eq, PSG_DT_F32), 0, NULL, false);
    psg_tensor_t *xt = psg_test_tensor(&s, x);
    psg_tensor_t *o = run_n(g, 1, &ph, &xt, l2, 1);
    CHECK(o && o->shape.rank == 0 && psg_tensor_f32(o)[0] == (1 + 4 + 9 + 0.25f + 49 + 49) / 2);
    psg_tensor_destroy(&o);
    o = run_n(g, 1, &ph, &xt, am, 1);
    CHECK(o && o->dtype == PSG_DT_I64 && o->shape.rank == 1 && o->shape.dims[0] == 2);
    CHECK(o && psg_tensor_i64(o)[0] == 2 && psg_tensor_i64(o)[1] == 1); /* ties: first */
    psg_tensor_destroy(&o);
    o = run_n(g, 1, &ph, &xt, ci, 1);
    CHECK(o && o->dtype == PSG_DT_I32 && psg_tensor_i32(o)[1] == -2 && psg_tensor_i32(o)[3] == 0);
    psg_tensor_destroy(&o);
    o = run_n(g, 1, &ph, &xt, cl, 1);
    CHECK(o && o->dtype == PSG_DT_I64 && psg_tensor_i64(o)[4] == 7);
    psg_tensor_destroy(&o);
    o = run_n(g, 1, &ph, &xt, back, 1);
    CHECK(o && o->dtype == PSG_DT_F32 && psg_tensor_f32(o)[2] == 3.0f &&
          psg_tensor_f32(o)[3] == 0.0f);
    psg_tensor_destroy(&o);
    o = run_n(g, 1, &ph, &xt, acc, 1);
    CHECK(o && psg_tensor_f32(o)[0] == 0.5f);
    psg_tensor_destroy(&o);
    /* saturating, NaN-safe float to int */
    psg_tensor_f32(xt)[0] = 1e20f;
    psg_tensor_f32(xt)[1] = NAN;
    o = run_n(g, 1, &ph, &xt, ci, 1);
    CHECK(o && psg_tensor_i32(o)[0] == 2147483647 && psg_tensor_i32(o)[1] == 0);
    psg_tensor_destroy(&o);
    CHECK(!psg_endpoint_valid(psg_cast(g, "bad", ph, PSG_DT_BOOL)));
    CHECK_ERROR_HAS("node 'bad' (Cast): cannot cast f32 to bool");
    psg_tensor_destroy(&xt);
    psg_graph_destroy(&g);
}

static void test_dropout(void) {
    psg_shape_t s = psg_shape_1d(100000);
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_endpoint_t y = psg_dropout(g, "drop", x, 0.25, 42);
    psg_endpoint_t mask = {y.node, 1};
    psg_endpoint_t w = psg_placeholder(g, "w", PSG_DT_F32, &s);
    psg_endpoint_t loss = psg_sum(g, "loss", psg_mul(g, NULL, y, w), 0, NULL, false);
    psg_endpoint_t dx;
    CHECK(psg_gradients(g, 1, &loss, NULL, 1, &x, &dx) == 0);
    unsigned seed = 19;
    psg_tensor_t *xv = psg_test_random(&s, 0.5f, 1.5f, &seed),
                 *wv = psg_test_random(&s, -1, 1, &seed);
    psg_session_options_t opt = {.num_threads = 2};
    psg_session_t *sess = psg_session_new(g, &opt, NULL);
    psg_endpoint_t feeds[2] = {x, w}, fetch[3] = {y, mask, dx};
    psg_tensor_t *vals[2] = {xv, wv};
    psg_callable_t *c = psg_session_make_callable(sess, 2, feeds, 3, fetch, 0, NULL);
    psg_tensor_t *first_mask = NULL;
    for (int step = 0; step < 2; step++) {
        psg_tensor_t *out[3] = {0};
        CHECK(c && psg_callable_run(c, vals, out) == 0);
        if (!out[0]) break;
        const float *yy = psg_tensor_f32(out[0]), *m = psg_tensor_f32(out[1]),
                    *d = psg_tensor_f32(out[2]);
        int64_t kept = 0, bad = 0;
        for (int64_t i = 0; i < 100000; i++) {
            float keep = 1.0f / 0.75f;
            if (m[i] != 0 && m[i] != keep) bad++;
            kept += m[i] != 0;
            if (yy[i] != psg_tensor_f32(xv)[i] * m[i]) bad++;
            if (d[i] != psg_tensor_f32(wv)[i] * m[i]) bad++; /* the gradient reuses the mask */
        }
        CHECK(bad == 0);
        CHECK(kept > 74000 && kept < 76000);
        if (step == 0) {
            first_mask = psg_tensor_ref(out[1]);
        } else {
            CHECK(memcmp(first_mask->data, out[1]->data, psg_tensor_nbytes(out[1])) != 0);
        }
        for (int i = 0; i < 3; i++) psg_tensor_destroy(&out[i]);
    }
    psg_tensor_destroy(&first_mask);
    CHECK(!psg_endpoint_valid(psg_dropout(g, "bad", x, 1.0, 1)));
    CHECK_ERROR_HAS("node 'bad' (Dropout): rate 1 is outside [0, 1)");
    psg_callable_destroy(&c);
    psg_session_destroy(&sess);
    psg_tensor_destroy(&xv);
    psg_tensor_destroy(&wv);
    psg_graph_destroy(&g);
}

static void test_shape_errors(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t a = psg_placeholder(g, "a", PSG_DT_F32, &(psg_shape_t){2, {2, 3}});
    psg_endpoint_t b = psg_placeholder(g, "b", PSG_DT_F32, &(psg_shape_t){2, {4, 3}});
    psg_endpoint_t i = psg_placeholder(g, "i", PSG_DT_I64, &(psg_shape_t){2, {2, 3}});
    CHECK(!psg_endpoint_valid(psg_add(g, "sum", a, b)));
    CHECK_ERROR_HAS("node 'sum' (Add): shapes [2, 3] and [4, 3] cannot broadcast");
    CHECK(!psg_endpoint_valid(psg_mul(g, "prod", a, i)));
    CHECK_ERROR_HAS("node 'prod' (Mul): input 1 must be f32, got i64");
    CHECK(!psg_endpoint_valid(psg_relu_grad(g, "rg", a, b)));
    CHECK_ERROR_HAS("node 'rg' (ReluGrad): inputs must have one shape");
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_binary_broadcasting);
    RUN_TEST(test_unary_values);
    RUN_TEST(test_elementwise_gradients);
    RUN_TEST(test_softmax_values);
    RUN_TEST(test_sparse_xent);
    RUN_TEST(test_reductions);
    RUN_TEST(test_mean_gradient_unknown_batch);
    RUN_TEST(test_matmul);
    RUN_TEST(test_dense);
    RUN_TEST(test_concat_slice);
    RUN_TEST(test_l2_argmax_cast_equal);
    RUN_TEST(test_dropout);
    RUN_TEST(test_shape_errors);
    return psg_test_summary();
}
