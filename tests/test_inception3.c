/* Inception-v3: the published size (parameters, multiply-adds), the
 * label-smoothed loss against its dense form, a few training steps on a fixed
 * batch at 75 x 75, the moving averages, the recipe's decay steps, "ghost" batch norm over
 * virtual batches, and the cluster simulator's basic properties. Small enough for ASan in seconds.
 */
#include "psgraph/simulate.h"
#include "tests/gradcheck.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

static void test_size_matches_keras(void) {
    psg_inception3_config_t c = psg_inception3_defaults();
    psg_graph_t *g = psg_graph_new();
    psg_inception3_t m;
    CHECK(psg_inception3_build(g, &c, &m) == 0);
    psg_model_stats_t s;
    CHECK(psg_model_stats(g, NULL, &s) == 0);
    /* Keras InceptionV3(include_top=True): 23,851,784 in all, of which
     * 23,817,352 trainable and 34,432 the moving mean and variance of 17,216
     * batch-norm channels (scale=False: no gamma) */
    CHECK(s.params == 23851784);
    CHECK(s.trainable == 23817352);
    CHECK(s.params - s.trainable == 2 * 17216);
    CHECK(fabs((double)s.macs_per_example / 5.7e9 - 1.0) < 0.02);
    const psg_shape_t *ls = psg_graph_shape(g, m.logits);
    CHECK(ls->rank == 2 && ls->dims[1] == 1000);
    CHECK(psg_graph_find(g, "InceptionV3/Mixed_6b/Branch_2/Conv2d_0b_7x1/weights") >= 0);
    printf("inception3: %lld parameters, %.3f G multiply-adds per image\n", (long long)s.params,
           (double)s.macs_per_example / 1e9);
    psg_graph_destroy(&g);

    /* the auxiliary head adds parameters, not to the main count */
    c.aux_logits = true;
    c.classes = 10;
    g = psg_graph_new();
    CHECK(psg_inception3_build(g, &c, &m) == 0);
    CHECK(psg_endpoint_valid(m.aux_logits));
    psg_graph_destroy(&g);

    c = psg_inception3_defaults();
    c.image_size = 74;
    g = psg_graph_new();
    CHECK(psg_inception3_build(g, &c, &m) < 0);
    CHECK_ERROR_HAS("minimum of 75");
    psg_graph_destroy(&g);
}

static psg_endpoint_t build_smoothed(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    (void)ctx;
    return psg_smoothed_xent(g, "loss", in[0], in[1], 0.1);
}

static void test_smoothed_loss_is_dense_form(void) {
    enum { N = 3, C = 5 };
    const float logits[N * C] = {0.5f, -1, 2, 0, 0.25f, 3, 1, -2, 0.5f, 0, -1, -1, 4, 2, 1};
    const int32_t labels[N] = {2, 0, 4};
    psg_tensor_t *lt = psg_test_tensor(&(psg_shape_t){2, {N, C}}, logits);
    psg_tensor_t *yt =
        psg_tensor_from_data(PSG_DT_I32, &(psg_shape_t){1, {N}}, labels, sizeof labels);
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &lt->shape);
    psg_endpoint_t y = psg_placeholder(g, "y", PSG_DT_I32, &yt->shape);
    psg_endpoint_t loss = psg_smoothed_xent(g, "loss", x, y, 0.1);
    psg_session_t *s = psg_session_new(g, &(psg_session_options_t){1}, NULL);
    psg_endpoint_t feeds[2] = {x, y};
    psg_tensor_t *fv[2] = {lt, yt}, *out = NULL;
    CHECK(psg_session_run(s, 2, feeds, fv, 1, &loss, &out, 0, NULL) == 0);
    double want = 0;
    for (int i = 0; i < N; i++) {
        double mx = -1e30, z = 0;
        for (int c = 0; c < C; c++) mx = fmax(mx, logits[i * C + c]);
        for (int c = 0; c < C; c++) z += exp(logits[i * C + c] - mx);
        for (int c = 0; c < C; c++) {
            double t = (c == labels[i] ? 0.9 : 0.0) + 0.1 / C;
            want -= t * (logits[i * C + c] - mx - log(z));
        }
    }
    want /= N;
    CHECK(out != NULL);
    if (out) CHECK_NEAR(psg_tensor_f32(out)[0], want, 1e-5);
    psg_tensor_destroy(&out);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
    psg_gradcheck_input_t in[2] = {{lt, true}, {yt, false}};
    CHECK(psg_gradcheck("smoothed xent", 2, in, build_smoothed, NULL, 2e-2) == 0);
    psg_tensor_destroy(&lt);
    psg_tensor_destroy(&yt);
}

/* A batch of B images S x S in [-1, 1] and labels i % classes. */
static void fixed_batch(int B, int S, int classes, psg_tensor_t **img, psg_tensor_t **lab) {
    unsigned seed = 7;
    *img = psg_test_random(&(psg_shape_t){4, {B, S, S, 3}}, -1, 1, &seed);
    *lab = psg_tensor_new(PSG_DT_I32, &(psg_shape_t){1, {B}});
    for (int i = 0; i < B; i++) psg_tensor_i32(*lab)[i] = i % classes;
}

static void test_loss_decreases_on_fixed_batch(void) {
    psg_inception3_config_t c = psg_inception3_defaults();
    c.image_size = 75;
    c.classes = 5;
    c.dropout_rate = 0;
    c.weight_decay = 0;
    c.aux_logits = true; /* exercised, at its reduced 3 x 3 kernels */
    psg_graph_t *g = psg_graph_new();
    psg_inception3_t m;
    CHECK(psg_inception3_build(g, &c, &m) == 0);
    psg_inception3_recipe_t r = psg_inception3_recipe_defaults();
    r.learning_rate = 0.01;
    int op = -1;
    psg_endpoint_t lr;
    CHECK(psg_inception3_train_op(g, &r, &m, &op, &lr) == 0);
    psg_session_t *s = psg_session_new(g, &(psg_session_options_t){2}, NULL);
    CHECK(psg_session_run_init(s) == 0);
    psg_endpoint_t feeds[2] = {m.images, m.labels}, fetch[2] = {m.xent, lr};
    psg_callable_t *step = psg_session_make_callable(s, 2, feeds, 2, fetch, 1, &op);
    CHECK(step != NULL);
    psg_tensor_t *img, *lab;
    fixed_batch(4, 75, 5, &img, &lab);
    double first = 0, last = 0, best = 1e30;
    for (int i = 0; step && i < 6; i++) {
        psg_tensor_t *fv[2] = {img, lab}, *out[2] = {NULL, NULL};
        CHECK(psg_callable_run(step, fv, out) == 0);
        if (!out[0]) break;
        last = psg_tensor_f32(out[0])[0];
        if (i == 0) first = last;
        if (last < best) best = last;
        CHECK(isfinite(last));
        CHECK_NEAR(psg_tensor_f32(out[1])[0], 0.01, 1e-9);
        psg_tensor_destroy(&out[0]);
        psg_tensor_destroy(&out[1]);
    }
    printf("75x75 batch 4: loss %.4f -> %.4f after 6 steps (best %.4f)\n", first, last, best);
    /* batch norm over 4 images with momentum makes the curve bumpy: the
     * best loss of the run, not the last, shows that it learns */
    CHECK(best < 0.7 * first);

    /* evaluation reads the moving averages: a second graph over the same resources */
    psg_inception3_config_t ec = c;
    ec.is_training = false;
    ec.read_ema = true;
    psg_graph_t *eg = psg_graph_new();
    psg_inception3_t em;
    CHECK(psg_inception3_build(eg, &ec, &em) == 0);
    psg_session_t *es = psg_session_new(eg, &(psg_session_options_t){2}, psg_session_resources(s));
    psg_endpoint_t efeeds[2] = {em.images, em.labels};
    psg_tensor_t *fv[2] = {img, lab}, *out = NULL;
    CHECK(psg_session_run(es, 2, efeeds, fv, 1, &em.logits, &out, 0, NULL) == 0);
    if (out) {
        bool finite = true;
        for (int64_t i = 0; i < psg_tensor_numel(out); i++)
            finite &= isfinite(psg_tensor_f32(out)[i]);
        CHECK(finite);
    }
    /* served: each conv, its batch norm, ReLU (and the stem's max pools) one FusedConv2D node,
     * the same logits bit for bit */
    psg_inception3_config_t fc = ec;
    fc.fused_conv = true;
    psg_graph_t *fg = psg_graph_new();
    psg_inception3_t fm;
    CHECK(psg_inception3_build(fg, &fc, &fm) == 0);
    int fused_nodes = 0;
    for (int i = 0; i < psg_graph_num_nodes(fg); i++)
        fused_nodes += !strcmp(psg_node_op(psg_graph_node(fg, i)), "FusedConv2D");
    CHECK(fused_nodes == 96); /* every conv but the logits': 94, and the aux head's 2 */
    psg_session_t *fs = psg_session_new(fg, &(psg_session_options_t){2}, psg_session_resources(s));
    psg_endpoint_t ffeeds[2] = {fm.images, fm.labels};
    psg_tensor_t *fout = NULL;
    CHECK(psg_session_run(fs, 2, ffeeds, fv, 1, &fm.logits, &fout, 0, NULL) == 0);
    CHECK(out && fout && psg_tensor_numel(out) == psg_tensor_numel(fout) &&
          !memcmp(psg_tensor_f32(out), psg_tensor_f32(fout),
                  sizeof(float) * (size_t)psg_tensor_numel(out)));
    psg_tensor_destroy(&fout);
    psg_session_destroy(&fs);
    psg_graph_destroy(&fg);
    fc.is_training = true;
    fg = psg_graph_new();
    CHECK(psg_inception3_build(fg, &fc, &fm) < 0);
    CHECK_ERROR_HAS("fused_conv is for inference");
    psg_graph_destroy(&fg);
    psg_tensor_destroy(&out);
    psg_session_destroy(&es);
    psg_graph_destroy(&eg);

    psg_tensor_destroy(&img);
    psg_tensor_destroy(&lab);
    psg_callable_destroy(&step);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

static void test_ema_follows_formula(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t v = psg_variable(g, "v", PSG_DT_F32, &(psg_shape_t){1, {2}},
                                    (psg_initializer_t){"constant", 2.0, 0}, true);
    psg_tensor_t *inc = psg_tensor_new(PSG_DT_F32, &(psg_shape_t){1, {2}});
    psg_tensor_f32(inc)[0] = 1;
    psg_tensor_f32(inc)[1] = -1;
    int add = psg_assign_add(g, "bump", v, psg_const(g, "inc", &inc));
    int tick = psg_increment_variable(g, "tick", psg_global_step(g), 1);
    int both[2] = {add, tick};
    int step_op = psg_group(g, "step", 2, both);
    int ema = -1;
    CHECK(psg_ema_apply(g, 0.5, 1, &v, step_op, &ema) == 0);
    psg_session_t *s = psg_session_new(g, &(psg_session_options_t){1}, NULL);
    CHECK(psg_session_run_init(s) == 0);
    psg_variable_t *sh =
        psg_resource_find_variable(psg_session_resources(s), "v/ExponentialMovingAverage");
    CHECK(sh && psg_tensor_f32(sh->value)[0] == 2.0f); /* starts at the initial value */
    double want0 = 2, want1 = 2, v0 = 2, v1 = 2;
    for (int step = 0; step < 4; step++) {
        CHECK(psg_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &ema) == 0);
        v0 += 1;
        v1 -= 1;
        double d = fmin(0.5, (2.0 + step) / (11.0 + step)); /* the step after its increment */
        want0 = d * want0 + (1 - d) * v0;
        want1 = d * want1 + (1 - d) * v1;
    }
    if (sh) {
        CHECK_NEAR(psg_tensor_f32(sh->value)[0], want0, 1e-5);
        CHECK_NEAR(psg_tensor_f32(sh->value)[1], want1, 1e-5);
    }
    CHECK(psg_ema_apply(g, 1.5, 1, &v, step_op, &ema) < 0);
    CHECK_ERROR_HAS("decay 1.5");
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

static void test_recipe(void) {
    psg_inception3_recipe_t r = psg_inception3_recipe_defaults();
    CHECK(r.batch == 32 && r.learning_rate == 0.045 && r.epsilon == 1.0 && r.momentum == 0.9);
    /* 1,281,167 / 32 = 40036.5 batches an epoch, decay every 2 epochs */
    CHECK(psg_inception3_decay_steps(&r) == 80072);
    r.replicas = 50;
    CHECK(psg_inception3_decay_steps(&r) == 1601);
}

static void test_simulator(void) {
    psg_sim_config_t c = psg_sim_defaults();
    c.tail = PSG_SIM_TAIL_PARETO; /* a heavy tail: stragglers dominate */
    c.steps = 400;
    psg_sim_result_t r0, r4, r1;
    CHECK(psg_sim_run(&c, 50, 0, &r0) == 0);
    CHECK(psg_sim_run(&c, 50, 4, &r4) == 0);
    CHECK(psg_sim_run(&c, 1, 0, &r1) == 0);
    CHECK(r4.steps_per_sec > r0.steps_per_sec);      /* backups cut the tail */
    CHECK(r0.speedup <= 50.0 && r4.speedup <= 54.0); /* at most the machines used */
    CHECK(r0.speedup > 1.0);
    CHECK_NEAR(r1.speedup, 1.0, 1e-9);
    /* without a tail, backups only add traffic */
    c.tail = PSG_SIM_TAIL_NONE;
    CHECK(psg_sim_run(&c, 50, 0, &r0) == 0);
    CHECK(psg_sim_run(&c, 50, 4, &r4) == 0);
    CHECK(r4.steps_per_sec <= r0.steps_per_sec * 1.0001);
    c.step_ms = -1;
    CHECK(psg_sim_run(&c, 4, 0, &r0) < 0);
    CHECK_ERROR_HAS("step");
}

/* The training graph's logits and loss for images (B x 75 x 75) with a virtual batch size
 * of v (0: none); *logits and *xent set, false on failure. */
static bool train_forward(int v, psg_tensor_t *img, psg_tensor_t *lab, float *logits, float *xent) {
    psg_inception3_config_t c = psg_inception3_defaults();
    c.image_size = 75;
    c.classes = 5;
    c.dropout_rate = 0;
    c.virtual_batch_size = v;
    c.batch = (int)img->shape.dims[0];
    psg_graph_t *g = psg_graph_new();
    psg_inception3_t m;
    bool ok = psg_inception3_build(g, &c, &m) == 0;
    psg_session_t *s = ok ? psg_session_new(g, &(psg_session_options_t){2}, NULL) : NULL;
    psg_endpoint_t feeds[2] = {m.images, m.labels}, fetch[2] = {m.logits, m.xent};
    psg_tensor_t *fv[2] = {img, lab}, *out[2] = {NULL, NULL};
    ok = s && psg_session_run_init(s) == 0 &&
         psg_session_run(s, 2, feeds, fv, 2, fetch, out, 0, NULL) == 0;
    if (ok) {
        memcpy(logits, psg_tensor_f32(out[0]), psg_tensor_nbytes(out[0]));
        *xent = psg_tensor_f32(out[1])[0];
    }
    psg_tensor_destroy(&out[0]);
    psg_tensor_destroy(&out[1]);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
    return ok;
}

/* "Ghost" batch norm (virtual_batch_size): a batch of 8 in groups of 4 computes, image for
 * image, what the plain model computes on each half alone (a sync worker's batch), its loss
 * their mean; groups of the whole batch are the plain model; a size that does not divide
 * the batch is refused. */
static void test_virtual_batch(void) {
    enum { B = 8, H = B / 2, C = 5 };
    psg_tensor_t *img, *lab, *half_img[2], *half_lab[2];
    fixed_batch(B, 75, C, &img, &lab);
    for (int h = 0; h < 2; h++) {
        half_img[h] = psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){4, {H, 75, 75, 3}},
                                           psg_tensor_f32(img) + h * H * 75 * 75 * 3,
                                           H * 75 * 75 * 3 * sizeof(float));
        half_lab[h] = psg_tensor_from_data(PSG_DT_I32, &(psg_shape_t){1, {H}},
                                           psg_tensor_i32(lab) + H * h, H * sizeof(int32_t));
    }
    float ghost[B * C], whole[B * C], plain[B * C], halves[B * C], xg, xw, xp, xh[2];
    CHECK(train_forward(H, img, lab, ghost, &xg));
    CHECK(train_forward(B, img, lab, whole, &xw));
    CHECK(train_forward(0, img, lab, plain, &xp));
    for (int h = 0; h < 2; h++)
        CHECK(train_forward(0, half_img[h], half_lab[h], halves + h * H * C, &xh[h]));
    double far = 0, moved = 0;
    for (int i = 0; i < B * C; i++) {
        far = fmax(far, fabs(ghost[i] - halves[i]) / fmax(1.0, fabs(halves[i])));
        moved = fmax(moved, fabs(ghost[i] - plain[i]));
        CHECK(whole[i] == plain[i]);
    }
    printf("virtual batch %d of %d: logits within %.2g of each half alone, %.3g from the whole "
           "batch's; loss %.5f, the halves' mean %.5f\n",
           H, B, far, moved, xg, (xh[0] + xh[1]) / 2);
    CHECK(far <= 1e-4);
    CHECK(moved > 1e-3); /* the groups' statistics are not the batch's */
    CHECK_NEAR(xg, (xh[0] + xh[1]) / 2, 1e-4);
    CHECK(xw == xp);
    float unused[B * C], x;
    CHECK(!train_forward(3, img, lab, unused, &x));
    CHECK_ERROR_HAS("virtual batch size of 3");
    for (int h = 0; h < 2; h++) {
        psg_tensor_destroy(&half_img[h]);
        psg_tensor_destroy(&half_lab[h]);
    }
    psg_tensor_destroy(&img);
    psg_tensor_destroy(&lab);
}

int main(void) {
    RUN_TEST(test_size_matches_keras);
    RUN_TEST(test_smoothed_loss_is_dense_form);
    RUN_TEST(test_ema_follows_formula);
    RUN_TEST(test_recipe);
    RUN_TEST(test_loss_decreases_on_fixed_batch);
    RUN_TEST(test_virtual_batch);
    RUN_TEST(test_simulator);
    return psg_test_summary();
}
