/* Mixed precision: f32 <-> bf16 / f16 rounding (nearest even, NaN and Inf
 * kept), the Cast op and its gradient, the 16-bit CPU MatMul and Conv2D
 * kernels (forward and both backprops) against f32, the graph the builders
 * make (16-bit products forward and backward, f32 variables, updates and
 * everything on a ps), the f16 loss scale, and the mlp trained in mixed
 * precision against f32. */
#include "tests/testutil.h"

#include <float.h>
#include <stdlib.h>

/* ---- rounding ---- */

/* The bf16 (bf16 true) or f16 nearest to a >= 0 (finite, in range) by search,
 * ties to the even pattern: the reference the bit tricks are held to. */
static uint16_t nearest_half(double a, bool bf16, uint16_t top) {
    uint16_t lo = 0, hi = top; /* largest pattern whose value is <= a */
    while (lo < hi) {
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        double v = bf16 ? psg_bf16_to_f32(mid) : psg_f16_to_f32(mid);
        if (v <= a)
            lo = mid;
        else
            hi = (uint16_t)(mid - 1);
    }
    if (lo == top) return lo;
    double below = a - (bf16 ? psg_bf16_to_f32(lo) : psg_f16_to_f32(lo));
    double above =
        (bf16 ? psg_bf16_to_f32((uint16_t)(lo + 1)) : psg_f16_to_f32((uint16_t)(lo + 1))) - a;
    if (below < above) return lo;
    if (above < below) return (uint16_t)(lo + 1);
    return (lo & 1) ? (uint16_t)(lo + 1) : lo;
}

static void test_bf16_rounding(void) {
    CHECK(psg_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(psg_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);            /* a tie: to even, down */
    CHECK(psg_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81); /* past the tie */
    CHECK(psg_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);        /* a tie: to even, up */
    CHECK(psg_f32_to_bf16(-2.5f) == 0xc020);
    CHECK(psg_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(psg_f32_to_bf16(INFINITY) == 0x7f80 && psg_f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(psg_f32_to_bf16(FLT_MAX) == 0x7f80); /* past bf16's largest: Inf, as nearest-even says */
    CHECK(isnan(psg_bf16_to_f32(psg_f32_to_bf16(NAN))));
    /* a NaN whose payload is only in the dropped bits stays NaN (truncation gives Inf) */
    CHECK(isnan(psg_bf16_to_f32(psg_f32_to_bf16(psg_f32_from_bits(0x7f800001u)))));
    CHECK(psg_f32_to_bf16(psg_f32_from_bits(0xff800001u)) >> 15 == 1);
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = psg_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && psg_f32_to_bf16(f) != h) bad++;
    }
    CHECK(bad == 0); /* every bf16 survives f32 and back */
    unsigned seed = 7;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = ((uint32_t)rand_r(&seed) << 16 ^ (uint32_t)rand_r(&seed)) & 0x7effffffu;
        float f = psg_f32_from_bits(u);
        if (psg_f32_to_bf16(f) != nearest_half(f, true, 0x7f7f)) bad++;
        if (psg_f32_to_bf16(-f) != (0x8000 | nearest_half(f, true, 0x7f7f))) bad++;
    }
    CHECK(bad == 0);
}

static void test_f16_rounding(void) {
    CHECK(psg_f32_to_f16(1.0f) == 0x3c00 && psg_f32_to_f16(-2.0f) == 0xc000);
    CHECK(psg_f32_to_f16(2049.0f) == psg_f32_to_f16(2048.0f)); /* a tie: to even */
    CHECK(psg_f16_to_f32(psg_f32_to_f16(2051.0f)) == 2052.0f);
    CHECK(psg_f32_to_f16(65504.0f) == 0x7bff && psg_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(psg_f32_to_f16(65520.0f) == 0x7c00); /* halfway past the largest: Inf */
    CHECK(psg_f32_to_f16(-INFINITY) == 0xfc00 && isnan(psg_f16_to_f32(psg_f32_to_f16(NAN))));
    CHECK(psg_f32_to_f16(0x1p-24f) == 0x0001);     /* the smallest subnormal */
    CHECK(psg_f32_to_f16(0x1p-25f) == 0x0000);     /* a tie: to even, zero */
    CHECK(psg_f32_to_f16(0x1.8p-25f) == 0x0001);   /* past the tie */
    CHECK(psg_f32_to_f16(3 * 0x1p-25f) == 0x0002); /* a tie: to even, up */
    CHECK(psg_f16_to_f32(0x0001) == 0x1p-24f && psg_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = psg_f16_to_f32((uint16_t)h);
        if (!isnan(f) && psg_f32_to_f16(f) != h) bad++;
    }
    CHECK(bad == 0);
    unsigned seed = 8;
    for (int i = 0; i < 100000; i++) {
        /* magnitudes from 2^-27 to 65504: subnormals, normals, ties */
        float f = ldexpf((float)rand_r(&seed) / (float)RAND_MAX, rand_r(&seed) % 44 - 27);
        if (f >= 65504.0f) continue;
        if (psg_f32_to_f16(f) != nearest_half(f, false, 0x7bff)) bad++;
    }
    CHECK(bad == 0);
}

/* ---- the Cast op ---- */

static psg_tensor_t *run1(psg_graph_t *g, psg_endpoint_t ph, psg_tensor_t *v, psg_endpoint_t out) {
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    psg_tensor_t *r = NULL;
    if (!s || psg_session_run(s, 1, &ph, &v, 1, &out, &r, 0, NULL) < 0) r = NULL;
    psg_session_destroy(&s);
    return r;
}

static void test_cast_op(void) {
    const float v[8] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, INFINITY, -INFINITY,
                        NAN,  1e-40f};
    psg_shape_t s = psg_shape_1d(8);
    psg_tensor_t *x = psg_test_tensor(&s, v);
    for (int k = 0; k < 2; k++) {
        psg_dtype_t dt = k ? PSG_DT_F16 : PSG_DT_BF16;
        psg_graph_t *g = psg_graph_new();
        psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &s);
        psg_endpoint_t h = psg_cast(g, "h", ph, dt), back = psg_cast(g, "back", h, PSG_DT_F32);
        CHECK(psg_graph_dtype(g, h) == dt && psg_graph_dtype(g, back) == PSG_DT_F32);
        psg_tensor_t *o = run1(g, ph, x, back), *oh = run1(g, ph, x, h);
        CHECK(o && oh && oh->dtype == dt);
        for (int i = 0; o && oh && i < 8; i++) {
            uint16_t want = k ? psg_f32_to_f16(v[i]) : psg_f32_to_bf16(v[i]);
            float wf = k ? psg_f16_to_f32(want) : psg_bf16_to_f32(want);
            CHECK(((uint16_t *)oh->data)[i] == want);
            CHECK(isnan(wf) ? isnan(psg_tensor_f32(o)[i]) : psg_tensor_f32(o)[i] == wf);
        }
        psg_tensor_destroy(&o);
        psg_tensor_destroy(&oh);
        psg_graph_destroy(&g);
    }
    /* integers through bf16: 257 is a tie between 256 and 258, to even */
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s2 = psg_shape_1d(2);
    psg_endpoint_t ph = psg_placeholder(g, "i", PSG_DT_I32, &s2);
    psg_endpoint_t back = psg_cast(g, "back", psg_cast(g, "h", ph, PSG_DT_BF16), PSG_DT_I32);
    psg_tensor_t *xi = psg_tensor_new(PSG_DT_I32, &s2);
    psg_tensor_i32(xi)[0] = 257;
    psg_tensor_i32(xi)[1] = -3;
    psg_tensor_t *o = run1(g, ph, xi, back);
    CHECK(o && psg_tensor_i32(o)[0] == 256 && psg_tensor_i32(o)[1] == -3);
    CHECK(!psg_endpoint_valid(psg_cast(g, "bad", ph, PSG_DT_BOOL)));
    CHECK_ERROR_HAS("node 'bad' (Cast): cannot cast i32 to bool");
    psg_tensor_destroy(&o);
    psg_tensor_destroy(&xi);
    psg_tensor_destroy(&x);
    psg_graph_destroy(&g);
}

/* d sum(w * f32(half(x))) / dx by autodiff and by central differences. The
 * cast is a staircase, so the difference steps one ulp of the 16-bit type
 * from points on its grid in [1.25, 1.75], where x +- ulp are exact and the
 * derivative is w (its gradient is w rounded to the 16-bit type and back). */
static void test_cast_gradient(void) {
    for (int k = 0; k < 2; k++) {
        psg_dtype_t dt = k ? PSG_DT_F16 : PSG_DT_BF16;
        double ulp = k ? 0x1p-10 : 0x1p-7;
        psg_shape_t s = psg_shape_2d(2, 3);
        unsigned seed = 11;
        psg_tensor_t *x = psg_tensor_new(PSG_DT_F32, &s), *w = psg_test_random(&s, -1, 1, &seed);
        for (int i = 0; i < 6; i++) psg_tensor_f32(x)[i] = (float)(1.25 + (i + 1) * 4 * ulp);
        psg_graph_t *g = psg_graph_new();
        psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &s);
        psg_endpoint_t y = psg_cast(g, "y", psg_cast(g, "h", ph, dt), PSG_DT_F32);
        psg_endpoint_t loss =
            psg_sum(g, "loss", psg_mul(g, "wy", y, psg_const(g, "w", &w)), 0, NULL, false);
        psg_endpoint_t dx;
        CHECK(psg_gradients(g, 1, &loss, NULL, 1, &ph, &dx) == 0);
        CHECK(psg_graph_dtype(g, dx) == PSG_DT_F32);
        psg_tensor_t *ga = run1(g, ph, x, dx);
        CHECK(ga != NULL);
        int bad = 0;
        for (int i = 0; ga && i < 6; i++) {
            float orig = psg_tensor_f32(x)[i];
            double f[2];
            for (int side = 0; side < 2; side++) {
                psg_tensor_f32(x)[i] = (float)(orig + (side ? -ulp : ulp));
                psg_tensor_t *l = run1(g, ph, x, loss);
                f[side] = l ? psg_tensor_f32(l)[0] : NAN;
                psg_tensor_destroy(&l);
            }
            psg_tensor_f32(x)[i] = orig;
            double numeric = (f[0] - f[1]) / (2 * ulp), analytic = psg_tensor_f32(ga)[i];
            if (!(fabs(analytic - numeric) <= 1e-2 * (1 + fabs(numeric)))) {
                bad++;
                fprintf(stderr, "Cast %s: dx[%d] analytic %g numeric %g\n", psg_dtype_name(dt), i,
                        analytic, numeric);
            }
        }
        CHECK(bad == 0);
        psg_tensor_destroy(&ga);
        psg_tensor_destroy(&x);
        psg_graph_destroy(&g);
    }
}

/* ---- the 16-bit kernels against f32 ---- */

typedef psg_endpoint_t (*build2_fn)(psg_graph_t *g, psg_endpoint_t a, psg_endpoint_t b);

static psg_endpoint_t mm(psg_graph_t *g, psg_endpoint_t a, psg_endpoint_t b) {
    return psg_matmul(g, "y", a, b, false, false);
}
static psg_endpoint_t mm_tt(psg_graph_t *g, psg_endpoint_t a, psg_endpoint_t b) {
    return psg_matmul(g, "y", a, b, true, true);
}
static psg_endpoint_t conv_same(psg_graph_t *g, psg_endpoint_t a, psg_endpoint_t b) {
    return psg_conv2d(g, "y", a, b, 1, 1, PSG_PADDING_SAME);
}
static psg_endpoint_t conv_s2(psg_graph_t *g, psg_endpoint_t a, psg_endpoint_t b) {
    return psg_conv2d(g, "y", a, b, 2, 2, PSG_PADDING_SAME);
}

/* y = f(a, b) and the gradients of sum(w * y) by a and b, built under the
 * compute dtype dt; out[0..2] (host f32). Returns 0 or -1. */
static int run_mixed(psg_dtype_t dt, build2_fn f, psg_tensor_t *a, psg_tensor_t *b,
                     psg_tensor_t **out) {
    psg_graph_t *g = psg_graph_new();
    psg_graph_set_compute_dtype(g, dt);
    psg_endpoint_t ph[2] = {psg_placeholder(g, "a", PSG_DT_F32, &a->shape),
                            psg_placeholder(g, "b", PSG_DT_F32, &b->shape)};
    psg_endpoint_t fetch[3] = {f(g, ph[0], ph[1])};
    unsigned seed = 3;
    psg_tensor_t *w = psg_test_random(psg_graph_shape(g, fetch[0]), -1, 1, &seed);
    psg_endpoint_t loss =
        psg_sum(g, "loss", psg_mul(g, "wy", fetch[0], psg_const(g, "w", &w)), 0, NULL, false);
    int rc = psg_gradients(g, 1, &loss, NULL, 2, ph, fetch + 1);
    /* in the 16-bit graph every product, forward and backward, is 16-bit */
    for (int i = 0; rc == 0 && i < psg_graph_num_nodes(g); i++) {
        const psg_node_t *n = psg_graph_node(g, i);
        const char *op = psg_node_op(n);
        if (!strcmp(op, "MatMul") || !strncmp(op, "Conv2D", 6))
            CHECK(psg_node_output_dtype(n, 0) == dt);
    }
    psg_session_t *s = rc == 0 ? psg_session_new(g, NULL, NULL) : NULL;
    psg_tensor_t *vals[2] = {a, b};
    rc = s ? psg_session_run(s, 2, ph, vals, 3, fetch, out, 0, NULL) : -1;
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
    return rc;
}

/* max |x - ref| / max |ref| */
static double rel_err(const psg_tensor_t *x, const psg_tensor_t *ref) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < psg_tensor_numel(ref); i++) {
        double e = fabs((double)psg_tensor_f32(x)[i] - psg_tensor_f32(ref)[i]);
        d = e > d || e != e ? e : d;
        m = fmax(m, fabs(psg_tensor_f32(ref)[i]));
    }
    return d / (m > 0 ? m : 1);
}

static void test_half_kernels_against_f32(void) {
    static const struct {
        const char *name;
        build2_fn f;
        psg_shape_t a, b;
    } cases[] = {
        {"MatMul", mm, {2, {17, 64}}, {2, {64, 9}}},
        {"MatMul transposed", mm_tt, {2, {64, 17}}, {2, {9, 64}}},
        {"Conv2D 3x3 SAME", conv_same, {4, {2, 9, 9, 5}}, {4, {3, 3, 5, 6}}},
        {"Conv2D 3x3 s2 SAME uneven", conv_s2, {4, {2, 8, 8, 4}}, {4, {3, 3, 4, 5}}},
    };
    unsigned seed = 5;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        psg_tensor_t *a = psg_test_random(&cases[k].a, -1, 1, &seed);
        psg_tensor_t *b = psg_test_random(&cases[k].b, -1, 1, &seed);
        psg_tensor_t *ref[3] = {NULL}, *h[3] = {NULL};
        CHECK(run_mixed(PSG_DT_F32, cases[k].f, a, b, ref) == 0);
        for (int t = 0; t < 2; t++) {
            psg_dtype_t dt = t ? PSG_DT_F16 : PSG_DT_BF16;
            /* bf16 keeps 8 significant bits, f16 11: the inputs' and the result's roundings */
            double tol = t ? 2e-3 : 1.5e-2, worst = 0;
            CHECK(run_mixed(dt, cases[k].f, a, b, h) == 0);
            for (int i = 0; i < 3 && h[i] && ref[i]; i++) {
                CHECK(h[i]->dtype == PSG_DT_F32 && psg_shape_equal(&h[i]->shape, &ref[i]->shape));
                worst = fmax(worst, rel_err(h[i], ref[i]));
            }
            CHECK(worst <= tol && worst > 0);
            printf("  %-26s %-4s y, da, db vs f32: max error %.2g of the largest (tol %.0e)\n",
                   cases[k].name, psg_dtype_name(dt), worst, tol);
            for (int i = 0; i < 3; i++) psg_tensor_destroy(&h[i]);
        }
        for (int i = 0; i < 3; i++) psg_tensor_destroy(&ref[i]);
        psg_tensor_destroy(&a);
        psg_tensor_destroy(&b);
    }
}

/* ---- the graph a model gets ---- */

static bool any_dtype(const psg_graph_t *g, const psg_node_t *n, psg_dtype_t dt) {
    for (int i = 0; i < psg_node_num_outputs(n); i++)
        if (psg_node_output_dtype(n, i) == dt) return true;
    for (int i = 0; i < psg_node_num_inputs(n); i++)
        if (psg_graph_dtype(g, psg_node_input(n, i)) == dt) return true;
    return false;
}

/* Casts to dt in g; *twice gets the casts of a tensor already cast on the same device. */
static int count_casts(const psg_graph_t *g, psg_dtype_t dt, int *twice) {
    int casts = 0;
    *twice = 0;
    for (int i = 0; i < psg_graph_num_nodes(g); i++) {
        const psg_node_t *n = psg_graph_node(g, i);
        if (strcmp(psg_node_op(n), "Cast") || psg_node_output_dtype(n, 0) != dt) continue;
        casts++;
        for (int j = 0; j < i; j++) {
            const psg_node_t *o = psg_graph_node(g, j);
            if (!strcmp(psg_node_op(o), "Cast") && psg_node_output_dtype(o, 0) == dt &&
                psg_node_input(o, 0).node == psg_node_input(n, 0).node &&
                psg_node_input(o, 0).index == psg_node_input(n, 0).index &&
                !strcmp(psg_node_device(o), psg_node_device(n)))
                (*twice)++;
        }
    }
    return casts;
}

/* The model and Adam built as one worker of a cluster with 2 ps tasks. */
static void check_model_graph(const char *model, psg_dtype_t dt) {
    psg_graph_t *g = psg_graph_new();
    CHECK(psg_graph_set_compute_dtype(g, dt) == 0 && psg_graph_compute_dtype(g) == dt);
    psg_replica_setter_options_t so = {.ps_tasks = 2, .worker_device = "/job:worker/task:0"};
    psg_replica_setter_t *setter = psg_replica_setter_new(&so);
    psg_graph_push_replica_setter(g, setter);
    psg_model_t m;
    CHECK(psg_model_build(g, model, 28, 28, 1, 10, 1, &m) == 0);
    psg_optimizer_config_t oc = psg_optimizer_defaults("adam");
    psg_optimizer_t *opt = psg_optimizer_new(&oc);
    int train_op = -1;
    CHECK(psg_optimizer_minimize(opt, g, m.loss, &train_op) == 0);
    psg_graph_pop_device(g);
    int fwd = 0, bwd = 0, dense = 0, half_on_ps = 0, f32_product = 0, bad_update = 0, bad_var = 0;
    int twice = 0, casts = count_casts(g, dt, &twice);
    for (int i = 0; i < psg_graph_num_nodes(g); i++) {
        const psg_node_t *n = psg_graph_node(g, i);
        const char *op = psg_node_op(n);
        bool product = !strcmp(op, "MatMul") || !strncmp(op, "Conv2D", 6);
        if (product && any_dtype(g, n, PSG_DT_F32)) f32_product++;
        if (product && strncmp(psg_node_name(n), "gradients", 9))
            fwd++;
        else if (product)
            bwd++;
        dense += !strcmp(op, "Dense");
        if (!strncmp(psg_node_device(n), "/job:ps", 7) && any_dtype(g, n, dt)) half_on_ps++;
        if (!strncmp(op, "Apply", 5) && any_dtype(g, n, dt)) bad_update++;
        if (!strcmp(op, "VarHandle")) {
            psg_dtype_t vdt = psg_node_attr(n, "dtype")->u.dtype;
            bad_var +=
                vdt != PSG_DT_F32 && vdt != PSG_DT_I64; /* weights f32, the global step i64 */
        }
    }
    bool mlp = !strcmp(model, "mlp");
    printf("  %s %s: %d 16-bit products forward, %d backward, %d casts to %s\n", model,
           psg_dtype_name(dt), fwd, bwd, casts, psg_dtype_name(dt));
    CHECK(twice == 0);
    CHECK(fwd >= (mlp ? 3 : 2) && bwd >= 2 * fwd - 1); /* the first layer's input needs no dx */
    CHECK(dense == 0 && f32_product == 0 && half_on_ps == 0 && bad_update == 0 && bad_var == 0);
    CHECK(psg_graph_dtype(g, m.loss) == PSG_DT_F32 && psg_graph_dtype(g, m.logits) == PSG_DT_F32);
    psg_optimizer_destroy(&opt);
    psg_replica_setter_destroy(&setter);
    psg_graph_destroy(&g);
}

/* Inception's blocks feed one tensor to several branches: it is cast once. */
static void test_inception_casts_once(void) {
    psg_graph_t *g = psg_graph_new();
    CHECK(psg_graph_set_compute_dtype(g, PSG_DT_BF16) == 0);
    psg_inception3_config_t c = psg_inception3_defaults();
    c.image_size = 75;
    c.classes = 10;
    psg_inception3_t m;
    CHECK(psg_inception3_build(g, &c, &m) == 0);
    int products = 0, twice = 0;
    for (int i = 0; i < psg_graph_num_nodes(g); i++) {
        const char *op = psg_node_op(psg_graph_node(g, i));
        products += !strcmp(op, "MatMul") || !strcmp(op, "Conv2D");
    }
    int casts = count_casts(g, PSG_DT_BF16, &twice);
    printf("  inception3 forward: %d products, %d casts to bf16 (two inputs a product)\n", products,
           casts);
    CHECK(twice == 0 && casts < 2 * products);
    psg_graph_destroy(&g);
}

static void test_models_in_mixed_precision(void) {
    check_model_graph("mlp", PSG_DT_BF16);
    check_model_graph("cnn", PSG_DT_BF16);
    check_model_graph("mlp", PSG_DT_F16);
    /* f32 (the default) builds no 16-bit node at all */
    psg_graph_t *g = psg_graph_new();
    psg_model_t m;
    CHECK(psg_graph_compute_dtype(g) == PSG_DT_F32);
    CHECK(psg_model_build(g, "cnn", 28, 28, 1, 10, 1, &m) == 0);
    int half = 0;
    for (int i = 0; i < psg_graph_num_nodes(g); i++)
        half += any_dtype(g, psg_graph_node(g, i), PSG_DT_BF16);
    CHECK(half == 0);
    CHECK(psg_graph_set_compute_dtype(g, PSG_DT_F64) < 0);
    CHECK_ERROR_HAS("compute dtype must be f32, bf16 or f16, got f64");
    psg_dtype_t dt;
    CHECK(psg_precision_parse("mixed", &dt) == 0 && dt == PSG_DT_BF16);
    CHECK(psg_precision_parse("mixed-f16", &dt) == 0 && dt == PSG_DT_F16);
    CHECK(psg_precision_parse("fp8", &dt) < 0);
    CHECK_ERROR_HAS("precision 'fp8'");
    /* a 16-bit and an f32 input: an error naming the node, not a silent cast */
    psg_shape_t s = psg_shape_2d(2, 2);
    psg_endpoint_t a = psg_placeholder(g, "a", PSG_DT_F32, &s);
    psg_node_builder_t *b = psg_node_begin(g, "MatMul", "mixed_up");
    psg_node_add_input(b, a);
    psg_node_add_input(b, psg_cast(g, NULL, a, PSG_DT_BF16));
    CHECK(psg_node_finish(b) < 0);
    CHECK_ERROR_HAS("node 'mixed_up' (MatMul): input 1 is bf16, input 0 is f32");
    psg_graph_destroy(&g);
}

/* f16's static loss scale: the backward pass starts from 1024, the
 * gradients come back unscaled. */
static void test_f16_loss_scale(void) {
    psg_shape_t sa = psg_shape_2d(4, 8), sb = psg_shape_2d(8, 3);
    unsigned seed = 9;
    psg_tensor_t *a = psg_test_random(&sa, -1, 1, &seed), *b = psg_test_random(&sb, -1, 1, &seed);
    psg_tensor_t *grads[2][2] = {{NULL}};
    for (int k = 0; k < 2; k++) {
        psg_graph_t *g = psg_graph_new();
        psg_graph_set_compute_dtype(g, k ? PSG_DT_F16 : PSG_DT_F32);
        CHECK(psg_graph_loss_scale(g) == (k ? PSG_F16_LOSS_SCALE : 1.0));
        psg_endpoint_t ph[2] = {psg_placeholder(g, "a", PSG_DT_F32, &sa),
                                psg_placeholder(g, "b", PSG_DT_F32, &sb)};
        /* a loss with gradients near 1e-6: below f16's smallest normal (6e-5) */
        psg_endpoint_t y = psg_matmul(g, "y", ph[0], ph[1], false, false);
        psg_endpoint_t loss = psg_scale(g, "loss", psg_sum(g, "s", y, 0, NULL, false), 1e-6);
        psg_endpoint_t d[2];
        CHECK(psg_loss_gradients(g, loss, 2, ph, d) == 0);
        psg_session_t *s = psg_session_new(g, NULL, NULL);
        psg_tensor_t *vals[2] = {a, b};
        CHECK(s && psg_session_run(s, 2, ph, vals, 2, d, grads[k], 0, NULL) == 0);
        psg_session_destroy(&s);
        psg_graph_destroy(&g);
    }
    for (int i = 0; i < 2 && grads[0][i] && grads[1][i]; i++) {
        double e = rel_err(grads[1][i], grads[0][i]);
        printf("  f16 with loss scale %.0f: gradient %d within %.2g of f32\n", PSG_F16_LOSS_SCALE,
               i, e);
        CHECK(e < 5e-3);
    }
    for (int i = 0; i < 4; i++) psg_tensor_destroy(&grads[i / 2][i % 2]);
    psg_tensor_destroy(&a);
    psg_tensor_destroy(&b);
}

/* One f32 tensor read by two products: one cast, whose two gradients are summed in f32
 * (there is no 16-bit AddN) and match the f32 graph's at bf16 tolerance. */
static void test_shared_cast_gradient(void) {
    psg_shape_t sa = psg_shape_2d(4, 8), sb = psg_shape_2d(8, 3), sc = psg_shape_2d(5, 8);
    unsigned seed = 11;
    psg_tensor_t *v[3] = {psg_test_random(&sa, -1, 1, &seed), psg_test_random(&sb, -1, 1, &seed),
                          psg_test_random(&sc, -1, 1, &seed)};
    psg_tensor_t *grads[2][2] = {{NULL}};
    for (int k = 0; k < 2; k++) {
        psg_graph_t *g = psg_graph_new();
        psg_graph_set_compute_dtype(g, k ? PSG_DT_BF16 : PSG_DT_F32);
        psg_endpoint_t ph[3] = {psg_placeholder(g, "a", PSG_DT_F32, &sa),
                                psg_placeholder(g, "b", PSG_DT_F32, &sb),
                                psg_placeholder(g, "c", PSG_DT_F32, &sc)};
        psg_endpoint_t y1 = psg_matmul(g, "y1", ph[0], ph[1], false, false); /* b read twice */
        psg_endpoint_t y2 = psg_matmul(g, "y2", ph[2], ph[1], false, false);
        psg_endpoint_t loss = psg_add(g, "loss", psg_sum(g, "s1", y1, 0, NULL, false),
                                      psg_sum(g, "s2", psg_square(g, "sq", y2), 0, NULL, false));
        psg_endpoint_t d[2];
        psg_endpoint_t xs[2] = {ph[1], ph[0]};
        CHECK(psg_loss_gradients(g, loss, 2, xs, d) == 0);
        int twice = 0;
        if (k) CHECK(count_casts(g, PSG_DT_BF16, &twice) >= 3 && twice == 0);
        psg_session_t *s = psg_session_new(g, NULL, NULL);
        CHECK(s && psg_session_run(s, 3, ph, v, 2, d, grads[k], 0, NULL) == 0);
        psg_session_destroy(&s);
        psg_graph_destroy(&g);
    }
    for (int i = 0; i < 2 && grads[0][i] && grads[1][i]; i++) {
        double e = rel_err(grads[1][i], grads[0][i]);
        printf("  a tensor read by two bf16 products: gradient %d within %.2g of f32\n", i, e);
        CHECK(e < 2e-2);
    }
    for (int i = 0; i < 4; i++) psg_tensor_destroy(&grads[i / 2][i % 2]);
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&v[i]);
}

/* ---- end to end ---- */

static double train_mlp(const char *precision) {
    psg_train_config_t c;
    psg_train_config_defaults(&c);
    const char *dir = getenv("PSG_FASHION_MNIST");
    c.model = "mlp";
    c.data_dir = dir ? dir : "/usr/share/datasets/fashion-mnist";
    c.epochs = 1;
    c.optimizer = "adam";
    c.lr = 0.001;
    c.threads = 2;
    c.log_every = 1000;
    c.precision = precision;
    c.out = fopen("/dev/null", "w");
    psg_train_result_t r = {0};
    CHECK(psg_train(&c, &r) == 0);
    fclose(c.out);
    printf("  mlp, 1 epoch of Adam, %s: test accuracy %.4f, %.0f examples/s\n", precision,
           r.test_accuracy, r.examples_per_sec);
    return r.test_accuracy;
}

static void test_mlp_mixed_matches_f32(void) {
    double f32 = train_mlp("f32"), mixed = train_mlp("mixed");
    CHECK(f32 > 0.82 && mixed > 0.82);
    CHECK(fabs(mixed - f32) <= 0.01);
}

int main(void) {
    RUN_TEST(test_bf16_rounding);
    RUN_TEST(test_f16_rounding);
    RUN_TEST(test_cast_op);
    RUN_TEST(test_cast_gradient);
    RUN_TEST(test_half_kernels_against_f32);
    RUN_TEST(test_models_in_mixed_precision);
    RUN_TEST(test_inception_casts_once);
    RUN_TEST(test_f16_loss_scale);
    RUN_TEST(test_shared_cast_gradient);
    RUN_TEST(test_mlp_mixed_matches_f32);
    return psg_test_summary();
}
