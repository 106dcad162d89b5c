/* The optimizers: each update rule against a hand-computed reference over
 * three steps, each written aside (chain replication's way back) bitwise as in place, slot names
 * and placement, the init collection, global step, learning-rate schedules, convergence, the NaN
 * policy and shape errors. */
#include "tests/testutil.h"

#include <stdlib.h>

#define N 4

static const float w0[N] = {0.5f, -1.0f, 2.0f, 0.25f};
static const float grads[3][N] = {
    {0.1f, -0.2f, 0.3f, 1.5f},
    {-0.4f, 0.5f, 0.05f, -1.0f},
    {0.2f, 0.2f, -0.3f, 0.0f},
};
static const float lrs[3] = {0.1f, 0.05f, 0.2f};

static const float *var_data(psg_session_t *s, const char *name) {
    psg_variable_t *v = psg_resource_find_variable(psg_session_resources(s), name);
    return v ? psg_tensor_f32(v->value) : NULL;
}

/* The reference: the documented formulas, step by step, in float. */
static void reference(const psg_optimizer_config_t *c, float *w, float *s1, float *s2, float *b1p,
                      float *b2p, const float *g, float lr) {
    const char *k = c->kind;
    for (int i = 0; i < N; i++) {
        if (!strcmp(k, "sgd")) {
            w[i] -= lr * g[i];
        } else if (!strcmp(k, "momentum")) {
            s1[i] = s1[i] * c->momentum + g[i];
            w[i] -= c->use_nesterov ? g[i] * lr + s1[i] * c->momentum * lr : lr * s1[i];
        } else if (!strcmp(k, "rmsprop")) {
            s1[i] = c->rho * s1[i] + (1 - c->rho) * g[i] * g[i];
            s2[i] = c->momentum * s2[i] + lr * g[i] / sqrtf(s1[i] + c->epsilon);
            w[i] -= s2[i];
        } else if (!strcmp(k, "adam")) {
            float lr_t = lr * sqrtf(1 - *b2p) / (1 - *b1p);
            s1[i] += (g[i] - s1[i]) * (1 - c->beta1);
            s2[i] += (g[i] * g[i] - s2[i]) * (1 - c->beta2);
            w[i] -= lr_t * s1[i] / (sqrtf(s2[i]) + c->epsilon);
        } else if (!strcmp(k, "adagrad")) {
            s1[i] += g[i] * g[i];
            w[i] -= lr * g[i] / sqrtf(s1[i]);
        } else if (!strcmp(k, "ftrl")) { /* McMahan et al. 2013, TensorFlow's ApplyFtrl */
            double acc = s1[i] + (double)g[i] * g[i], p = -c->lr_power;
            s2[i] += (float)(g[i] - (pow(acc, p) - pow(s1[i], p)) / lr * w[i]);
            w[i] = fabsf(s2[i]) > c->l1 ? (float)(((s2[i] > 0 ? c->l1 : -c->l1) - s2[i]) /
                                                  (pow(acc, p) / lr + 2 * c->l2))
                                        : 0.0f;
            s1[i] = (float)acc;
        }
    }
    if (!strcmp(k, "adam")) {
        *b1p *= c->beta1;
        *b2p *= c->beta2;
    }
}

/* A variable set to w0 (an Assign after init, since initializers are uniform). */
static psg_endpoint_t make_w(psg_graph_t *g, int *set) {
    psg_shape_t s = psg_shape_1d(N);
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_tensor_t *t = psg_test_tensor(&s, w0);
    *set = psg_assign(g, "set_w", w, psg_const(g, "w0", &t));
    return w;
}

static void check_rule(psg_optimizer_config_t cfg, const char *slot1, const char *slot2) {
    psg_graph_t *g = psg_graph_new();
    int set;
    psg_endpoint_t w = make_w(g, &set);
    psg_shape_t s = psg_shape_1d(N), sc = psg_shape_scalar();
    psg_endpoint_t grad = psg_placeholder(g, "grad", PSG_DT_F32, &s);
    psg_endpoint_t lr = psg_placeholder(g, "lr", PSG_DT_F32, &sc);
    psg_optimizer_t *opt = psg_optimizer_new(&cfg);
    CHECK(opt != NULL);
    if (!opt) return;
    psg_optimizer_set_learning_rate_tensor(opt, lr);
    int train;
    CHECK(psg_optimizer_apply_gradients(opt, g, 1, &grad, &w, &train) == 0);
    psg_session_options_t so = {.num_threads = 2};
    psg_session_t *sess = psg_session_new(g, &so, NULL);
    CHECK(psg_session_run_init(sess) == 0);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &set) == 0);

    float rw[N], r1[N], r2[N], b1p = cfg.beta1, b2p = cfg.beta2;
    memcpy(rw, w0, sizeof rw);
    for (int i = 0; i < N; i++) {
        r1[i] = !strcmp(cfg.kind, "rmsprop") ? 1.0f
                : !strcmp(cfg.kind, "adagrad") || !strcmp(cfg.kind, "ftrl")
                    ? cfg.initial_accumulator
                    : 0.0f;
        r2[i] = 0;
    }
    psg_endpoint_t feeds[2] = {grad, lr};
    for (int step = 0; step < 3; step++) {
        psg_tensor_t *vals[2] = {psg_test_tensor(&s, grads[step]),
                                 psg_tensor_scalar_f32(lrs[step])};
        CHECK(psg_session_run(sess, 2, feeds, vals, 0, NULL, NULL, 1, &train) == 0);
        reference(&cfg, rw, r1, r2, &b1p, &b2p, grads[step], lrs[step]);
        psg_tensor_destroy(&vals[0]);
        psg_tensor_destroy(&vals[1]);
    }
    const float *vw = var_data(sess, "w");
    const float *v1 = slot1 ? var_data(sess, slot1) : NULL;
    const float *v2 = slot2 ? var_data(sess, slot2) : NULL;
    CHECK(vw && (!slot1 || v1) && (!slot2 || v2));
    for (int i = 0; vw && i < N; i++) {
        CHECK_NEAR(vw[i], rw[i], 2e-6 * (1 + fabsf(rw[i])));
        if (v1) CHECK_NEAR(v1[i], r1[i], 2e-6 * (1 + fabsf(r1[i])));
        if (v2) CHECK_NEAR(v2[i], r2[i], 2e-6 * (1 + fabsf(r2[i])));
    }
    if (!strcmp(cfg.kind, "adam")) {
        CHECK(var_data(sess, "beta1_power") && fabsf(*var_data(sess, "beta1_power") - b1p) < 1e-7f);
        CHECK(var_data(sess, "beta2_power") && fabsf(*var_data(sess, "beta2_power") - b2p) < 1e-7f);
    }
    psg_variable_t *gs = psg_resource_find_variable(psg_session_resources(sess), "global_step");
    CHECK(gs && gs->dtype == PSG_DT_I64 && psg_tensor_i64(gs->value)[0] == 3);
    psg_optimizer_destroy(&opt);
    CHECK(opt == NULL);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

/* Adam over 21 elements (the CPU kernel's 8-wide vectors and its scalar tail) against the
 * reference loop, bit for bit: the vectors do the same IEEE operations per element, so a
 * backup replaying the kernel and a run without replication hold the same bits. Each step's
 * lr_t from the beta powers as the session holds them. */
static void test_adam_vectors_bitwise(void) {
    enum { M = 21 };
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(M);
    float init[M], rw[M], rm[M] = {0}, rv[M] = {0};
    for (int i = 0; i < M; i++) init[i] = rw[i] = 0.37f * (float)(i - 9) + 0.01f;
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_tensor_t *t = psg_test_tensor(&s, init);
    int set = psg_assign(g, "set_w", w, psg_const(g, "w0", &t));
    psg_endpoint_t grad = psg_placeholder(g, "grad", PSG_DT_F32, &s);
    psg_optimizer_config_t c = psg_optimizer_defaults("adam");
    c.learning_rate = 0.01f;
    psg_optimizer_t *opt = psg_optimizer_new(&c);
    int train;
    CHECK(opt && psg_optimizer_apply_gradients(opt, g, 1, &grad, &w, &train) == 0);
    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(sess) == 0);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &set) == 0);
    for (int step = 0; step < 3; step++) {
        float gv[M];
        for (int i = 0; i < M; i++) gv[i] = 0.11f * (float)((i * 7 + step * 3) % 13) - 0.6f;
        const float *b1 = var_data(sess, "beta1_power"), *b2 = var_data(sess, "beta2_power");
        CHECK(b1 && b2);
        if (!b1 || !b2) break;
        float lr_t = c.learning_rate * sqrtf(1.0f - *b2) / (1.0f - *b1);
        for (int i = 0; i < M; i++) { /* ops/cpu/train.c's reference loop */
            float m = rm[i] + (gv[i] - rm[i]) * (1.0f - c.beta1);
            float v = rv[i] + (gv[i] * gv[i] - rv[i]) * (1.0f - c.beta2);
            rm[i] = m;
            rv[i] = v;
            rw[i] -= lr_t * m / (sqrtf(v) + c.epsilon);
        }
        psg_tensor_t *val = psg_test_tensor(&s, gv);
        CHECK(psg_session_run(sess, 1, &grad, &val, 0, NULL, NULL, 1, &train) == 0);
        psg_tensor_destroy(&val);
    }
    const float *vw = var_data(sess, "w"), *vm = var_data(sess, "w/Adam"),
                *vv = var_data(sess, "w/Adam_1");
    CHECK(vw && vm && vv);
    int differ = 0;
    for (int i = 0; vw && vm && vv && i < M; i++)
        differ +=
            memcmp(&vw[i], &rw[i], 4) || memcmp(&vm[i], &rm[i], 4) || memcmp(&vv[i], &rv[i], 4);
    CHECK(differ == 0);
    psg_optimizer_destroy(&opt);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

/* One session of rule cfg over M elements for write_aside: w, its slots and the train op. */
enum { M_ASIDE = 21 };
typedef struct {
    psg_graph_t *g;
    psg_optimizer_t *opt;
    psg_session_t *s;
    psg_endpoint_t grad;
    int train;
    psg_variable_t *v[3]; /* w and its slots (NULL past them) */
} aside_run_t;

static void aside_start(aside_run_t *r, psg_optimizer_config_t cfg, const char *slot1,
                        const char *slot2) {
    memset(r, 0, sizeof *r);
    r->g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(M_ASIDE);
    float init[M_ASIDE];
    for (int i = 0; i < M_ASIDE; i++) init[i] = 0.37f * (float)(i - 9) + 0.01f;
    psg_endpoint_t w =
        psg_variable(r->g, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_tensor_t *t = psg_test_tensor(&s, init);
    int set = psg_assign(r->g, "set_w", w, psg_const(r->g, "w0", &t));
    r->grad = psg_placeholder(r->g, "grad", PSG_DT_F32, &s);
    r->opt = psg_optimizer_new(&cfg);
    CHECK(r->opt && psg_optimizer_apply_gradients(r->opt, r->g, 1, &r->grad, &w, &r->train) == 0);
    r->s = psg_session_new(r->g, NULL, NULL);
    CHECK(psg_session_run_init(r->s) == 0);
    CHECK(psg_session_run(r->s, 0, NULL, NULL, 0, NULL, NULL, 1, &set) == 0);
    const char *names[3] = {"w", slot1, slot2};
    for (int k = 0; k < 3 && names[k]; k++) {
        r->v[k] = psg_resource_find_variable(psg_session_resources(r->s), names[k]);
        CHECK(r->v[k] != NULL);
    }
}

static void aside_step(aside_run_t *r, int step) {
    float gv[M_ASIDE];
    for (int i = 0; i < M_ASIDE; i++) gv[i] = 0.11f * (float)((i * 7 + step * 3) % 13) - 0.6f;
    psg_shape_t s = psg_shape_1d(M_ASIDE);
    psg_tensor_t *val = psg_test_tensor(&s, gv);
    CHECK(psg_session_run(r->s, 1, &r->grad, &val, 0, NULL, NULL, 1, &r->train) == 0);
    psg_tensor_destroy(&val);
}

static void aside_end(aside_run_t *r) {
    psg_optimizer_destroy(&r->opt);
    psg_session_destroy(&r->s);
    psg_graph_destroy(&r->g);
}

/* Chain replication keeps a variable's value before a step's write (ps/replicate.c: the way
 * back of a retry): an update kernel then writes a new buffer and keeps the old one, no
 * copy. Each rule written aside holds the bits of the same rule in place, and the value it
 * kept is the value before its last step, bitwise; with no keeper the kernel writes in place. */
static void check_aside(psg_optimizer_config_t cfg, const char *slot1, const char *slot2) {
    aside_run_t a, b;
    aside_start(&a, cfg, slot1, slot2);
    aside_start(&b, cfg, slot1, slot2);
    float pre[3][M_ASIDE];
    const psg_tensor_t *was[3] = {0};
    for (int step = 0; step < 3; step++) {
        if (step == 2)
            for (int k = 0; k < 3 && b.v[k]; k++) {
                memcpy(pre[k], psg_tensor_f32(a.v[k]->value), sizeof pre[k]);
                b.v[k]->keepers = 1;
                was[k] = b.v[k]->value;
            }
        aside_step(&a, step);
        aside_step(&b, step);
    }
    int differ = 0, kept = 0;
    for (int k = 0; k < 3 && a.v[k] && b.v[k]; k++) {
        differ += memcmp(psg_tensor_f32(a.v[k]->value), psg_tensor_f32(b.v[k]->value),
                         sizeof pre[k]) != 0;
        kept += b.v[k]->before == was[k] && b.v[k]->value != was[k] && b.v[k]->before &&
                !memcmp(psg_tensor_f32(b.v[k]->before), pre[k], sizeof pre[k]);
        CHECK(a.v[k]->before == NULL); /* no keeper: in place */
        b.v[k]->keepers = 0;           /* the session frees what it kept */
    }
    CHECK(differ == 0);
    CHECK(kept == 1 + (slot1 != NULL) + (slot2 != NULL));
    aside_end(&a);
    aside_end(&b);
}

static void test_write_aside_bitwise(void) {
    psg_optimizer_config_t c = psg_optimizer_defaults("sgd");
    check_aside(c, NULL, NULL);
    c = psg_optimizer_defaults("momentum");
    c.use_nesterov = true;
    check_aside(c, "w/Momentum", NULL);
    c = psg_optimizer_defaults("rmsprop");
    c.momentum = 0.9f;
    check_aside(c, "w/RMSProp", "w/RMSProp_1");
    c = psg_optimizer_defaults("adam");
    c.learning_rate = 0.01f;
    check_aside(c, "w/Adam", "w/Adam_1");
    c = psg_optimizer_defaults("adagrad");
    check_aside(c, "w/Adagrad", NULL);
    c = psg_optimizer_defaults("ftrl");
    c.l1 = 0.05f, c.l2 = 0.1f, c.lr_power = -0.7f, c.initial_accumulator = 0.5f;
    check_aside(c, "w/Ftrl", "w/Ftrl_1");
}

static void test_update_rules(void) {
    psg_optimizer_config_t c = psg_optimizer_defaults("sgd");
    check_rule(c, NULL, NULL);
    c = psg_optimizer_defaults("momentum");
    check_rule(c, "w/Momentum", NULL);
    c.use_nesterov = true;
    check_rule(c, "w/Momentum", NULL);
    c = psg_optimizer_defaults("rmsprop");
    c.momentum = 0.9f; /* Inception's recipe */
    c.epsilon = 1.0f;
    check_rule(c, "w/RMSProp", "w/RMSProp_1");
    c = psg_optimizer_defaults("rmsprop");
    check_rule(c, "w/RMSProp", "w/RMSProp_1");
    c = psg_optimizer_defaults("adam");
    check_rule(c, "w/Adam", "w/Adam_1");
    c = psg_optimizer_defaults("adagrad");
    check_rule(c, "w/Adagrad", NULL);
    c = psg_optimizer_defaults("ftrl");
    check_rule(c, "w/Ftrl", "w/Ftrl_1");
    c.l1 = 0.05f, c.l2 = 0.1f, c.lr_power = -0.7f, c.initial_accumulator = 0.5f;
    check_rule(c, "w/Ftrl", "w/Ftrl_1");
}

/* --optimizer ftrl with a sparse gradient (rows 1 and 3, row 3 twice): SparseApplyFtrl
 * updates those rows as the dense rule would with the summed gradient; the others keep
 * their values (FTRL's dense rule would move them even at a zero gradient). Bad
 * parameters are refused by name. */
static void test_ftrl_sparse_and_params(void) {
    psg_graph_t *g = psg_graph_new();
    int set;
    psg_endpoint_t w = make_w(g, &set);
    psg_shape_t vs = psg_shape_1d(3), is = psg_shape_1d(3);
    psg_tensor_t *v = psg_test_tensor(&vs, (float[]){0.3f, -0.2f, 0.5f}),
                 *ix = psg_tensor_new(PSG_DT_I32, &is);
    psg_tensor_i32(ix)[0] = 1, psg_tensor_i32(ix)[1] = 3, psg_tensor_i32(ix)[2] = 3;
    psg_endpoint_t grad =
        psg_indexed_slices(g, "grad", psg_const(g, "rows", &v), psg_const(g, "ids", &ix), w);
    psg_optimizer_config_t cfg = psg_optimizer_defaults("ftrl");
    cfg.learning_rate = 0.5f, cfg.l1 = 0.01f, cfg.l2 = 0.02f;
    psg_optimizer_t *opt = psg_optimizer_new(&cfg);
    int train = -1;
    CHECK(opt && psg_optimizer_apply_gradients(opt, g, 1, &grad, &w, &train) == 0);
    bool sparse_op = false;
    for (int i = 0; i < psg_graph_num_nodes(g); i++)
        sparse_op = sparse_op || !strcmp(psg_node_op(psg_graph_node(g, i)), "SparseApplyFtrl");
    CHECK(sparse_op);
    psg_session_options_t so = {.num_threads = 1};
    psg_session_t *sess = psg_session_new(g, &so, NULL);
    CHECK(sess && psg_session_run_init(sess) == 0);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &set) == 0);
    float rw[N], r1[N], r2[N], b = 0, gsum[N] = {0, 0.3f, 0, 0.3f};
    memcpy(rw, w0, sizeof rw);
    for (int i = 0; i < N; i++) r1[i] = cfg.initial_accumulator, r2[i] = 0;
    for (int step = 0; step < 2; step++) {
        CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &train) == 0);
        float tw[N], t1[N], t2[N];
        memcpy(tw, rw, sizeof tw), memcpy(t1, r1, sizeof t1), memcpy(t2, r2, sizeof t2);
        reference(&cfg, tw, t1, t2, &b, &b, gsum, cfg.learning_rate);
        for (int i = 1; i < N; i += 2) rw[i] = tw[i], r1[i] = t1[i], r2[i] = t2[i];
    }
    const float *vw = var_data(sess, "w"), *v2 = var_data(sess, "w/Ftrl_1");
    CHECK(vw && v2);
    for (int i = 0; vw && v2 && i < N; i++) {
        CHECK_NEAR(vw[i], rw[i], 2e-6 * (1 + fabsf(rw[i])));
        CHECK_NEAR(v2[i], r2[i], 2e-6 * (1 + fabsf(r2[i])));
    }
    CHECK(vw && vw[0] == w0[0] && vw[2] == w0[2]);
    psg_optimizer_destroy(&opt);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
    cfg = psg_optimizer_defaults("ftrl");
    cfg.lr_power = 0.5f;
    CHECK(psg_optimizer_new(&cfg) == NULL && strstr(psg_error_message(), "lr_power"));
    cfg = psg_optimizer_defaults("ftrl");
    cfg.l1 = -1;
    CHECK(psg_optimizer_new(&cfg) == NULL && strstr(psg_error_message(), "l1"));
}

static bool in_collection(psg_graph_t *g, const char *coll, int id) {
    int n;
    const int *ids = psg_graph_collection(g, coll, &n);
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* The init op of the variable whose handle is node `h`, or -1. */
static int init_of(psg_graph_t *g, int h) {
    int n;
    const int *ids = psg_graph_collection(g, "init", &n);
    for (int i = 0; i < n; i++) {
        const psg_node_t *a = psg_graph_node(g, ids[i]);
        if (psg_node_num_inputs(a) > 0 && psg_node_input(a, 0).node == h) return ids[i];
    }
    return -1;
}

static void test_slots_init_and_devices(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_2d(2, 3), sb = psg_shape_1d(3);
    psg_graph_push_device(g, "/job:ps/task:1/cpu:0");
    psg_graph_push_scope(g, "layer");
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &s, (psg_initializer_t){"ones", 0, 0}, true);
    psg_graph_pop_scope(g);
    psg_graph_pop_device(g);
    psg_endpoint_t b =
        psg_variable(g, "b", PSG_DT_F32, &sb, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_endpoint_t frozen =
        psg_variable(g, "frozen", PSG_DT_F32, &sb, (psg_initializer_t){"zeros", 0, 0}, false);
    psg_endpoint_t reads[2] = {psg_read_variable(g, NULL, b), psg_read_variable(g, NULL, frozen)};
    /* a linear loss of b and frozen (not of w): every gradient is ones */
    psg_endpoint_t loss = psg_add_n(g, "loss", 2, reads);
    psg_optimizer_config_t c = psg_optimizer_defaults("rmsprop");
    psg_optimizer_t *opt = psg_optimizer_new(&c);
    int train;
    CHECK(psg_optimizer_minimize(opt, g, loss, &train) == 0);
    CHECK(train >= 0 && !strcmp(psg_node_name(psg_graph_node(g, train)), "RMSProp"));
    /* w has no gradient (the loss does not use it): no slots, no update */
    CHECK(psg_graph_find(g, "layer/w/RMSProp") < 0);
    int ms = psg_graph_find(g, "b/RMSProp"), mom = psg_graph_find(g, "b/RMSProp_1");
    CHECK(ms >= 0 && mom >= 0);
    CHECK(psg_graph_find(g, "frozen/RMSProp") < 0);
    CHECK(psg_graph_find(g, "RMSProp/update_b") >= 0);
    CHECK(in_collection(g, "init", init_of(g, ms)) && in_collection(g, "init", init_of(g, mom)));
    CHECK(in_collection(g, "variables", ms) && !in_collection(g, "trainable_variables", ms));
    psg_endpoint_t gs = psg_global_step(g);
    CHECK(psg_endpoint_valid(gs) &&
          !strcmp(psg_node_name(psg_graph_node(g, gs.node)), "global_step"));
    CHECK(in_collection(g, "init", init_of(g, gs.node)));

    /* slots and updates beside their variable: Adam over w by a fed gradient */
    psg_optimizer_config_t ca = psg_optimizer_defaults("adam");
    psg_optimizer_t *adam = psg_optimizer_new(&ca);
    psg_endpoint_t gw = psg_placeholder(g, "gw", PSG_DT_F32, &s);
    int train2;
    CHECK(psg_optimizer_apply_gradients(adam, g, 1, &gw, &w, &train2) == 0);
    const char *names[] = {"layer/w/Adam", "layer/w/Adam_1", "Adam/update_layer/w", "beta1_power",
                           "beta2_power"};
    for (int i = 0; i < 5; i++) {
        int id = psg_graph_find(g, names[i]);
        CHECK(id >= 0);
        if (id >= 0) CHECK(!strcmp(psg_node_device(psg_graph_node(g, id)), "/job:ps/task:1/cpu:0"));
    }
    CHECK(psg_graph_find(g, "global_step_1") < 0); /* one global step, shared */

    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(sess) == 0);
    const float *msv = var_data(sess, "b/RMSProp");
    CHECK(msv && msv[0] == 1.0f && msv[2] == 1.0f); /* TensorFlow starts ms at 1 */
    CHECK(var_data(sess, "layer/w/Adam") && var_data(sess, "layer/w/Adam")[5] == 0.0f);
    CHECK(var_data(sess, "beta1_power") && *var_data(sess, "beta1_power") == 0.9f);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &train) == 0);
    CHECK(var_data(sess, "frozen")[0] == 0.0f); /* not trainable: untouched */
    CHECK(var_data(sess, "b")[0] < 0.0f);
    psg_optimizer_destroy(&adam);
    psg_optimizer_destroy(&opt);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

/* Minimizes loss with an optimizer of config c for `steps` steps; returns
 * the session (the caller destroys it). */
static psg_session_t *minimize_steps(psg_graph_t *g, psg_endpoint_t loss,
                                     const psg_optimizer_config_t *c, int steps) {
    psg_optimizer_t *opt = psg_optimizer_new(c);
    int train = -1;
    CHECK(opt && psg_optimizer_minimize(opt, g, loss, &train) == 0);
    psg_optimizer_destroy(&opt);
    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(sess) == 0);
    for (int i = 0; i < steps; i++)
        CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &train) == 0);
    return sess;
}

/* Minimizes a linear loss with SGD: each step moves w by exactly lr. */
static void test_minimize_sgd_linear(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(3);
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &s, (psg_initializer_t){"ones", 0, 0}, true);
    psg_endpoint_t r = psg_read_variable(g, NULL, w);
    psg_endpoint_t two[2] = {r, r};
    psg_endpoint_t loss = psg_add_n(g, "loss", 2, two); /* d/dw = 2 */
    psg_optimizer_config_t c = psg_optimizer_defaults("sgd");
    c.learning_rate = 0.125f;
    psg_session_t *sess = minimize_steps(g, loss, &c, 4);
    CHECK(var_data(sess, "w")[1] == 0.0f);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

/* 0.5 * ||w - t||^2 by its gradient w - t (AddN of w and -t): every rule
 * converges to t. */
static void test_converges_quadratic(void) {
    const char *kinds[] = {"sgd", "momentum", "rmsprop", "adam", "adagrad"};
    const float lr[] = {0.3f, 0.05f, 0.01f, 0.05f, 0.5f};
    const float target[N] = {1.0f, -2.0f, 0.5f, 3.0f};
    for (int k = 0; k < 5; k++) {
        psg_graph_t *g = psg_graph_new();
        int set;
        psg_endpoint_t w = make_w(g, &set);
        psg_shape_t s = psg_shape_1d(N);
        float neg[N];
        for (int i = 0; i < N; i++) neg[i] = -target[i];
        psg_tensor_t *t = psg_test_tensor(&s, neg);
        psg_endpoint_t both[2] = {psg_read_variable(g, NULL, w), psg_const(g, "minus_t", &t)};
        psg_endpoint_t grad = psg_add_n(g, "grad", 2, both);
        psg_optimizer_config_t c = psg_optimizer_defaults(kinds[k]);
        c.learning_rate = lr[k];
        psg_optimizer_t *opt = psg_optimizer_new(&c);
        int train;
        CHECK(psg_optimizer_apply_gradients(opt, g, 1, &grad, &w, &train) == 0);
        psg_session_options_t so = {.num_threads = 2};
        psg_session_t *sess = psg_session_new(g, &so, NULL);
        CHECK(psg_session_run_init(sess) == 0);
        CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &set) == 0);
        psg_callable_t *call = psg_session_make_callable(sess, 0, NULL, 0, NULL, 1, &train);
        for (int step = 0; step < 2000; step++) CHECK(psg_callable_run(call, NULL, NULL) == 0);
        const float *v = var_data(sess, "w");
        double err = 0;
        for (int i = 0; i < N; i++) err = fmax(err, fabs(v[i] - target[i]));
        if (err > 1e-2) fprintf(stderr, "%s: max error %g\n", kinds[k], err);
        CHECK(err <= 1e-2);
        psg_callable_destroy(&call);
        psg_optimizer_destroy(&opt);
        psg_session_destroy(&sess);
        psg_graph_destroy(&g);
    }
}

/* Least squares through MatMul/Sub/Mul by op name, once the math ops are in
 * the registry: minimize must find the generating weights. */
static psg_endpoint_t binop(psg_graph_t *g, const char *op, psg_endpoint_t a, psg_endpoint_t b) {
    psg_node_builder_t *nb = psg_node_begin(g, op, NULL);
    psg_node_add_input(nb, a);
    psg_node_add_input(nb, b);
    return psg_node_finish_ep(nb);
}

static void test_minimize_least_squares(void) {
    if (!psg_op_lookup("MatMul") || !psg_op_lookup("Sub") || !psg_op_lookup("Mul")) {
        printf("skip test_minimize_least_squares: MatMul/Sub/Mul not registered yet\n");
        return;
    }
    enum { M = 32, D = 3 };
    const float wt[D] = {2.0f, -1.0f, 0.5f};
    float x[M * D], y[M];
    unsigned seed = 7;
    psg_tensor_t *xr = psg_test_random(&(psg_shape_t){2, {M, D}}, -1, 1, &seed);
    memcpy(x, xr->data, sizeof x);
    psg_tensor_destroy(&xr);
    for (int i = 0; i < M; i++) {
        y[i] = 0;
        for (int j = 0; j < D; j++) y[i] += x[i * D + j] * wt[j];
    }
    psg_graph_t *g = psg_graph_new();
    psg_shape_t ws = psg_shape_2d(D, 1);
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &ws, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_tensor_t *xt = psg_test_tensor(&(psg_shape_t){2, {M, D}}, x);
    psg_tensor_t *yt = psg_test_tensor(&(psg_shape_t){2, {M, 1}}, y);
    psg_endpoint_t pred = binop(g, "MatMul", psg_const(g, "x", &xt), psg_read_variable(g, NULL, w));
    psg_endpoint_t d = binop(g, "Sub", pred, psg_const(g, "y", &yt));
    psg_endpoint_t loss = binop(g, "Mul", d, d); /* summed by autodiff's seed */
    CHECK(psg_endpoint_valid(loss));
    psg_optimizer_config_t c = psg_optimizer_defaults("momentum");
    c.learning_rate = 0.005f;
    psg_session_t *sess = minimize_steps(g, loss, &c, 500);
    const float *v = var_data(sess, "w");
    for (int j = 0; v && j < D; j++) CHECK_NEAR(v[j], wt[j], 1e-3);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

static void test_nan_policy(void) {
    for (int check = 1; check >= 0; check--) {
        psg_graph_t *g = psg_graph_new();
        int set;
        psg_endpoint_t w = make_w(g, &set);
        psg_shape_t s = psg_shape_1d(N);
        psg_endpoint_t grad = psg_placeholder(g, "grad", PSG_DT_F32, &s);
        psg_optimizer_config_t c = psg_optimizer_defaults("momentum");
        c.check_numerics = check;
        psg_optimizer_t *opt = psg_optimizer_new(&c);
        int train;
        CHECK(psg_optimizer_apply_gradients(opt, g, 1, &grad, &w, &train) == 0);
        psg_session_t *sess = psg_session_new(g, NULL, NULL);
        CHECK(psg_session_run_init(sess) == 0);
        CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &set) == 0);
        float bad[N] = {0.1f, NAN, 0.2f, 0.3f};
        psg_tensor_t *gv = psg_test_tensor(&s, bad);
        int rc = psg_session_run(sess, 1, &grad, &gv, 0, NULL, NULL, 1, &train);
        const float *v = var_data(sess, "w"), *acc = var_data(sess, "w/Momentum");
        psg_variable_t *gs = psg_resource_find_variable(psg_session_resources(sess), "global_step");
        if (check) {
            CHECK(rc < 0);
            CHECK_ERROR_HAS("node 'Momentum/update_w' (ApplyMomentum)");
            CHECK_ERROR_HAS("non-finite gradient for variable 'w': element 1 is NaN");
            for (int i = 0; i < N; i++) CHECK(v[i] == w0[i] && acc[i] == 0.0f);
            CHECK(psg_tensor_i64(gs->value)[0] == 0);
            bad[1] = INFINITY;
            memcpy(gv->data, bad, sizeof bad);
            CHECK(psg_session_run(sess, 1, &grad, &gv, 0, NULL, NULL, 1, &train) < 0);
            CHECK_ERROR_HAS("element 1 is Inf");
        } else {
            CHECK(rc == 0); /* check_numerics off: applied as is */
            CHECK(isnan(v[1]) && v[0] != w0[0]);
        }
        psg_tensor_destroy(&gv);
        psg_optimizer_destroy(&opt);
        psg_session_destroy(&sess);
        psg_graph_destroy(&g);
    }
}

/* A big gradient is scanned by several threads: the first bad element is named. */
static void test_nan_in_big_gradient(void) {
    enum { BIG = 200000 };
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(BIG);
    psg_endpoint_t w =
        psg_variable(g, "big", PSG_DT_F32, &s, (psg_initializer_t){"ones", 0, 0}, true);
    psg_endpoint_t grad = psg_placeholder(g, "grad", PSG_DT_F32, &s);
    int upd = psg_apply_gradient_descent(g, "sgd", w, psg_const_scalar(g, "lr", 0.5f), grad);
    psg_session_options_t so = {.num_threads = 4};
    psg_session_t *sess = psg_session_new(g, &so, NULL);
    CHECK(psg_session_run_init(sess) == 0);
    psg_tensor_t *gv = psg_tensor_zeros(PSG_DT_F32, &s);
    psg_tensor_f32(gv)[190000] = NAN;
    psg_tensor_f32(gv)[70001] = -INFINITY;
    CHECK(psg_session_run(sess, 1, &grad, &gv, 0, NULL, NULL, 1, &upd) < 0);
    CHECK_ERROR_HAS("variable 'big': element 70001 is Inf");
    psg_tensor_f32(gv)[70001] = 1.0f;
    psg_tensor_f32(gv)[190000] = 2.0f;
    CHECK(psg_session_run(sess, 1, &grad, &gv, 0, NULL, NULL, 1, &upd) == 0);
    const float *v = var_data(sess, "big");
    CHECK(v[0] == 1.0f && v[70001] == 0.5f && v[190000] == 0.0f);
    psg_tensor_destroy(&gv);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

static void test_shape_errors(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_2d(2, 3), wrong = psg_shape_1d(3), open = psg_shape_1d(-1);
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_endpoint_t lr = psg_const_scalar(g, "lr", 0.1f);
    psg_endpoint_t gbad = psg_placeholder(g, "gbad", PSG_DT_F32, &wrong);
    CHECK(psg_apply_gradient_descent(g, "sgd_w", w, lr, gbad) < 0);
    CHECK_ERROR_HAS("node 'sgd_w' (ApplyGradientDescent)");
    CHECK_ERROR_HAS("gradient of shape [3] does not match variable 'w' of shape [2, 3]");
    /* a non-scalar learning rate */
    psg_graph_t *g2 = psg_graph_new();
    psg_endpoint_t w2 =
        psg_variable(g2, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_endpoint_t vec = psg_placeholder(g2, "lrv", PSG_DT_F32, &wrong);
    psg_endpoint_t gw = psg_placeholder(g2, "gw", PSG_DT_F32, &s);
    CHECK(psg_apply_gradient_descent(g2, "sgd", w2, vec, gw) < 0);
    CHECK_ERROR_HAS("lr (input 1) must be a scalar f32");
    /* through the optimizer: the update node and the variable are named */
    psg_graph_t *g3 = psg_graph_new();
    psg_endpoint_t w3 =
        psg_variable(g3, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_endpoint_t g3bad = psg_placeholder(g3, "g", PSG_DT_F32, &wrong);
    psg_optimizer_config_t c = psg_optimizer_defaults("adam");
    psg_optimizer_t *opt = psg_optimizer_new(&c);
    int train;
    CHECK(psg_optimizer_apply_gradients(opt, g3, 1, &g3bad, &w3, &train) < 0 && train == -1);
    CHECK_ERROR_HAS("node 'Adam/update_w' (ApplyAdam)");
    CHECK_ERROR_HAS("variable 'w'");
    /* known only at run time: the executor names the node, the kernel the variable */
    psg_graph_t *g4 = psg_graph_new();
    psg_endpoint_t w4 =
        psg_variable(g4, "w", PSG_DT_F32, &wrong, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_endpoint_t g4open = psg_placeholder(g4, "g", PSG_DT_F32, &open);
    int upd = psg_apply_gradient_descent(g4, "sgd_w", w4, psg_const_scalar(g4, "lr", 1), g4open);
    CHECK(upd >= 0);
    psg_session_t *sess = psg_session_new(g4, NULL, NULL);
    CHECK(psg_session_run_init(sess) == 0);
    psg_tensor_t *five = psg_tensor_zeros(PSG_DT_F32, &(psg_shape_t){1, {5}});
    CHECK(psg_session_run(sess, 1, &g4open, &five, 0, NULL, NULL, 1, &upd) < 0);
    CHECK_ERROR_HAS("node 'sgd_w' (ApplyGradientDescent)");
    CHECK_ERROR_HAS("variable 'w'");
    /* bad configs */
    psg_optimizer_config_t bad = psg_optimizer_defaults("adamw");
    CHECK(psg_optimizer_new(&bad) == NULL);
    CHECK_ERROR_HAS("unknown optimizer 'adamw'");
    bad = psg_optimizer_defaults("adam");
    bad.beta1 = 1.0f;
    CHECK(psg_optimizer_new(&bad) == NULL);
    CHECK_ERROR_HAS("beta1 is out of range");
    psg_tensor_destroy(&five);
    psg_session_destroy(&sess);
    psg_optimizer_destroy(&opt);
    psg_graph_destroy(&g);
    psg_graph_destroy(&g2);
    psg_graph_destroy(&g3);
    psg_graph_destroy(&g4);
}

static void test_exponential_decay(void) {
    psg_graph_t *g = psg_graph_new();
    int set;
    psg_endpoint_t w = make_w(g, &set);
    psg_endpoint_t gs = psg_global_step(g);
    psg_endpoint_t step = psg_read_variable(g, "step", gs);
    CHECK(psg_graph_dtype(g, step) == PSG_DT_I64);
    psg_endpoint_t lr = psg_exponential_decay(g, "lr", 0.1f, step, 2, 0.5f, true);
    psg_endpoint_t smooth = psg_exponential_decay(g, "lr_smooth", 0.1f, step, 2, 0.5f, false);
    psg_shape_t s = psg_shape_1d(N);
    psg_tensor_t *ones = psg_tensor_new(PSG_DT_F32, &s);
    for (int i = 0; i < N; i++) psg_tensor_f32(ones)[i] = 1;
    psg_endpoint_t grad = psg_const(g, "grad", &ones);
    psg_optimizer_config_t c = psg_optimizer_defaults("sgd");
    psg_optimizer_t *opt = psg_optimizer_new(&c);
    psg_optimizer_set_learning_rate_tensor(opt, lr);
    int train;
    CHECK(psg_optimizer_apply_gradients(opt, g, 1, &grad, &w, &train) == 0);
    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(sess) == 0);
    CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &set) == 0);
    float expect = w0[0];
    for (int k = 0; k < 5; k++) {
        psg_tensor_t *out[2] = {NULL, NULL};
        psg_endpoint_t f[2] = {lr, smooth};
        CHECK(psg_session_run(sess, 0, NULL, NULL, 2, f, out, 0, NULL) == 0);
        float want = 0.1f * powf(0.5f, (float)(k / 2));
        CHECK(out[0] && fabsf(psg_tensor_f32(out[0])[0] - want) < 1e-7f);
        CHECK(out[1] && fabsf(psg_tensor_f32(out[1])[0] - 0.1f * powf(0.5f, k / 2.0f)) < 1e-7f);
        psg_tensor_destroy(&out[0]);
        psg_tensor_destroy(&out[1]);
        CHECK(psg_session_run(sess, 0, NULL, NULL, 0, NULL, NULL, 1, &train) == 0);
        expect -= want;
    }
    CHECK_NEAR(var_data(sess, "w")[0], expect, 1e-6);
    psg_optimizer_destroy(&opt);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

/* The updates wait for every gradient (a barrier) where a gradient may still read a
 * variable's buffer in place: one process, or towers on one task. In a cluster, where
 * every reader of a variable is on a worker and the variable on a ps, each update waits
 * only for its own gradient. */
static bool has_barrier(bool cluster) {
    psg_graph_t *g = psg_graph_new();
    psg_replica_setter_options_t so = {.ps_tasks = 1, .worker_device = "/job:worker/task:0"};
    psg_replica_setter_t *setter = cluster ? psg_replica_setter_new(&so) : NULL;
    if (setter) psg_graph_push_replica_setter(g, setter);
    psg_model_t m;
    CHECK(psg_model_build(g, "mlp", 28, 28, 1, 10, 1, &m) == 0);
    psg_optimizer_config_t oc = psg_optimizer_defaults("momentum");
    psg_optimizer_t *opt = psg_optimizer_new(&oc);
    int train_op = -1;
    CHECK(psg_optimizer_minimize(opt, g, m.loss, &train_op) == 0);
    if (setter) psg_graph_pop_device(g);
    bool found = psg_graph_find(g, "Momentum/gradients_ready") >= 0;
    psg_optimizer_destroy(&opt);
    psg_replica_setter_destroy(&setter);
    psg_graph_destroy(&g);
    return found;
}

static void test_update_barrier(void) {
    CHECK(has_barrier(false));
    CHECK(!has_barrier(true));
}

int main(void) {
    RUN_TEST(test_update_rules);
    RUN_TEST(test_adam_vectors_bitwise);
    RUN_TEST(test_write_aside_bitwise);
    RUN_TEST(test_ftrl_sparse_and_params);
    RUN_TEST(test_slots_init_and_devices);
    RUN_TEST(test_minimize_sgd_linear);
    RUN_TEST(test_converges_quadratic);
    RUN_TEST(test_minimize_least_squares);
    RUN_TEST(test_nan_policy);
    RUN_TEST(test_nan_in_big_gradient);
    RUN_TEST(test_shape_errors);
    RUN_TEST(test_exponential_decay);
    RUN_TEST(test_update_barrier);
    return psg_test_summary();
}
