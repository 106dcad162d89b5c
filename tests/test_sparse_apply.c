/* The sparse updates against their dense equivalents on known cases: SGD, momentum,
 * Adagrad and lazy Adam change the touched rows as the dense update of the summed
 * gradient does and leave every other row (and its slots) as it was; FTRL against its
 * formula; the optimizers choose them for a sparse gradient; a NaN changes nothing. */
#include "tests/testutil.h"

#include <stdlib.h>

#define ROWS 6
#define DIM 3

/* A graph with variables var, s1, s2 (ROWS x DIM) and either the sparse update `sop` fed
 * rows and indices, or the dense `dop` fed a dense gradient. */
typedef struct {
    psg_graph_t *g;
    psg_session_t *s;
    psg_endpoint_t vals, ix, dense;
    int sparse_id, dense_id;
    psg_variable_t *v[3];
} rig_t;

static float start_value(int which, int i) {
    /* slots start positive (accumulators) and nonzero, so a dense update would move them */
    return which == 0 ? 0.1f * (float)(i % 7) - 0.3f : 0.2f + 0.01f * (float)i;
}

static void rig_new(rig_t *r, const char *sop, const char *dop, int nslots, int nscalars,
                    const float *scalars) {
    memset(r, 0, sizeof *r);
    r->g = psg_graph_new();
    psg_graph_t *g = r->g;
    psg_shape_t vs = {2, {ROWS, DIM}};
    psg_endpoint_t h[3];
    const char *names[] = {"var", "s1", "s2"};
    for (int k = 0; k < 1 + nslots; k++)
        h[k] =
            psg_variable(g, names[k], PSG_DT_F32, &vs, (psg_initializer_t){"zeros", 0, 0}, false);
    r->vals = psg_placeholder(g, "vals", PSG_DT_F32, &(psg_shape_t){2, {-1, DIM}});
    r->ix = psg_placeholder(g, "ix", PSG_DT_I64, &(psg_shape_t){1, {-1}});
    r->dense = psg_placeholder(g, "dense", PSG_DT_F32, &vs);
    psg_endpoint_t sc[8];
    for (int i = 0; i < nscalars; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "p%d", i);
        sc[i] = psg_const_scalar(g, nm, scalars[i]);
    }
    /* the dense op's inputs: handles, then the scalars with the gradient at its place */
    psg_endpoint_t in[12];
    int n = 0, gi = !strcmp(sop, "SparseApplyGradientDescent") ? 2
                    : !strcmp(sop, "SparseApplyAdam")          ? 9
                                                               : 3;
    for (int k = 0; k < 1 + nslots; k++) in[n++] = h[k];
    for (int i = 0; n < gi; i++) in[n++] = sc[i];
    int used = gi - 1 - nslots;
    psg_endpoint_t sp[12], dn[12];
    memcpy(sp, in, sizeof(psg_endpoint_t) * (size_t)n);
    memcpy(dn, in, sizeof(psg_endpoint_t) * (size_t)n);
    int ns = n, nd = n;
    sp[ns++] = r->vals;
    sp[ns++] = r->ix;
    dn[nd++] = r->dense;
    for (int i = used; i < nscalars; i++) sp[ns++] = dn[nd++] = sc[i];
    r->sparse_id = psg_apply_update(g, sop, "sparse", ns, sp, true, false, -1);
    r->dense_id = dop ? psg_apply_update(g, dop, "dense", nd, dn, true, false, -1) : -1;
    CHECK(psg_graph_error(g) == NULL);
    r->s = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(r->s) == 0);
    for (int k = 0; k < 1 + nslots; k++) {
        r->v[k] = psg_resource_find_variable(psg_session_resources(r->s), names[k]);
        for (int i = 0; i < ROWS * DIM; i++) psg_tensor_f32(r->v[k]->value)[i] = start_value(k, i);
    }
}

static void rig_free(rig_t *r) {
    psg_session_destroy(&r->s);
    psg_graph_destroy(&r->g);
}

/* Copies of var and slots (3 x ROWS x DIM). */
static void snapshot(const rig_t *r, float *out) {
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ROWS * DIM; i++)
            out[k * ROWS * DIM + i] = r->v[k] ? psg_tensor_f32(r->v[k]->value)[i] : 0;
}

static void restore(rig_t *r, const float *in) {
    for (int k = 0; k < 3; k++)
        for (int i = 0; r->v[k] && i < ROWS * DIM; i++)
            psg_tensor_f32(r->v[k]->value)[i] = in[k * ROWS * DIM + i];
}

/* The known case: rows 1, 4, 1 (a duplicate) of gradient values. */
static const int64_t IDS[] = {1, 4, 1};
static const float VALS[] = {0.5f, -1.0f, 0.25f, 2.0f, 0.1f, -0.3f, -0.2f, 0.4f, 1.5f};

static int run_sparse(rig_t *r) {
    psg_tensor_t *v =
        psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){2, {3, DIM}}, VALS, sizeof VALS);
    psg_tensor_t *ix = psg_tensor_from_data(PSG_DT_I64, &(psg_shape_t){1, {3}}, IDS, sizeof IDS);
    psg_endpoint_t f[] = {r->vals, r->ix};
    psg_tensor_t *fv[] = {v, ix};
    int rc = psg_session_run(r->s, 2, f, fv, 0, NULL, NULL, 1, &r->sparse_id);
    psg_tensor_destroy(&v);
    psg_tensor_destroy(&ix);
    return rc;
}

static void run_dense(rig_t *r) {
    float d[ROWS * DIM] = {0};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < DIM; k++) d[IDS[i] * DIM + k] += VALS[i * DIM + k];
    psg_tensor_t *t = psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){2, {ROWS, DIM}}, d, sizeof d);
    CHECK(psg_session_run(r->s, 1, &r->dense, &t, 0, NULL, NULL, 1, &r->dense_id) == 0);
    psg_tensor_destroy(&t);
}

static bool touched(int i) {
    return i / DIM == 1 || i / DIM == 4;
}

/* The sparse update against the dense one on the touched rows; untouched rows of the
 * variable and its slots keep their values. */
static void against_dense(const char *sop, const char *dop, int nslots, int nsc, const float *sc) {
    rig_t r;
    rig_new(&r, sop, dop, nslots, nsc, sc);
    float before[3 * ROWS * DIM], sparse[3 * ROWS * DIM], dense[3 * ROWS * DIM];
    snapshot(&r, before);
    CHECK(run_sparse(&r) == 0);
    snapshot(&r, sparse);
    restore(&r, before);
    run_dense(&r);
    snapshot(&r, dense);
    int bad = 0;
    for (int k = 0; k <= nslots; k++)
        for (int i = 0; i < ROWS * DIM; i++) {
            int j = k * ROWS * DIM + i;
            float want = touched(i) ? dense[j] : before[j];
            if (fabsf(sparse[j] - want) > 1e-6f * (1 + fabsf(want)) && bad++ < 4)
                fprintf(stderr, "%s: tensor %d element %d: %g, want %g\n", sop, k, i, sparse[j],
                        want);
        }
    CHECK(bad == 0);
    /* the touched rows moved */
    CHECK(sparse[1 * DIM] != before[1 * DIM] && sparse[4 * DIM] != before[4 * DIM]);
    rig_free(&r);
}

static void test_sgd(void) {
    against_dense("SparseApplyGradientDescent", "ApplyGradientDescent", 0, 1, (float[]){0.1f});
}

static void test_momentum(void) {
    against_dense("SparseApplyMomentum", "ApplyMomentum", 1, 2, (float[]){0.1f, 0.9f});
}

static void test_adagrad(void) {
    against_dense("SparseApplyAdagrad", "ApplyAdagrad", 1, 1, (float[]){0.1f});
}

static void test_lazy_adam(void) {
    /* beta1_power, beta2_power, lr, beta1, beta2, epsilon */
    against_dense("SparseApplyAdam", "ApplyAdam", 2, 6,
                  (float[]){0.81f, 0.998f, 0.01f, 0.9f, 0.999f, 1e-8f});
}

static void test_ftrl(void) {
    float p[] = {0.1f, 0.01f, 0.02f, -0.5f}; /* lr, l1, l2, lr_power */
    rig_t r;
    rig_new(&r, "SparseApplyFtrl", NULL, 2, 4, p);
    float before[3 * ROWS * DIM], after[3 * ROWS * DIM];
    snapshot(&r, before);
    CHECK(run_sparse(&r) == 0);
    snapshot(&r, after);
    int bad = 0;
    for (int i = 0; i < ROWS * DIM; i++) {
        double w = before[i], acc = before[ROWS * DIM + i], lin = before[2 * ROWS * DIM + i], g = 0;
        for (int j = 0; j < 3; j++)
            if (IDS[j] == i / DIM) g += VALS[j * DIM + i % DIM];
        if (touched(i)) {
            double acc2 = acc + g * g;
            lin += g - (sqrt(acc2) - sqrt(acc)) / p[0] * w;
            double quad = sqrt(acc2) / p[0] + 2 * p[2];
            w = fabs(lin) > p[1] ? ((lin > 0 ? p[1] : -p[1]) - lin) / quad : 0;
            acc = acc2;
        }
        double want[3] = {w, acc, lin};
        for (int k = 0; k < 3; k++)
            if (fabs(after[k * ROWS * DIM + i] - want[k]) > 1e-5 * (1 + fabs(want[k])) && bad++ < 4)
                fprintf(stderr, "ftrl: tensor %d element %d: %g, want %g\n", k, i,
                        after[k * ROWS * DIM + i], want[k]);
    }
    CHECK(bad == 0);
    rig_free(&r);
}

static void test_errors(void) {
    rig_t r;
    rig_new(&r, "SparseApplyAdagrad", NULL, 1, 1, (float[]){0.1f});
    float before[3 * ROWS * DIM], after[3 * ROWS * DIM];
    snapshot(&r, before);
    /* a NaN in the rows: refused, nothing changed */
    float vals[3 * DIM];
    memcpy(vals, VALS, sizeof vals);
    vals[5] = NAN;
    psg_tensor_t *v =
        psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){2, {3, DIM}}, vals, sizeof vals);
    psg_tensor_t *ix = psg_tensor_from_data(PSG_DT_I64, &(psg_shape_t){1, {3}}, IDS, sizeof IDS);
    psg_endpoint_t f[] = {r.vals, r.ix};
    psg_tensor_t *fv[] = {v, ix};
    CHECK(psg_session_run(r.s, 2, f, fv, 0, NULL, NULL, 1, &r.sparse_id) < 0);
    CHECK_ERROR_HAS("non-finite gradient for variable 'var'");
    snapshot(&r, after);
    CHECK(!memcmp(before, after, sizeof before));
    /* a row the variable does not have */
    psg_tensor_destroy(&ix);
    ix = psg_tensor_from_data(PSG_DT_I64, &(psg_shape_t){1, {3}}, (int64_t[]){1, 6, 0},
                              3 * sizeof(int64_t));
    fv[0] = psg_tensor_from_data(PSG_DT_F32, &(psg_shape_t){2, {3, DIM}}, VALS, sizeof VALS);
    fv[1] = ix;
    CHECK(psg_session_run(r.s, 2, f, fv, 0, NULL, NULL, 1, &r.sparse_id) < 0);
    CHECK_ERROR_HAS("index 6");
    psg_tensor_destroy(&fv[0]);
    psg_tensor_destroy(&v);
    psg_tensor_destroy(&ix);
    rig_free(&r);
}

/* An optimizer given the sparse gradient of a table updates it with the sparse op: after
 * a step only the rows looked up changed (lazy Adam's slots too), the dense weight all. */
static void test_optimizer_sparse(void) {
    const char *kinds[] = {"sgd", "momentum", "adagrad", "adam"};
    const char *ops[] = {"SparseApplyGradientDescent", "SparseApplyMomentum", "SparseApplyAdagrad",
                         "SparseApplyAdam"};
    for (int k = 0; k < 4; k++) {
        psg_graph_t *g = psg_graph_new();
        psg_endpoint_t table = psg_variable(g, "table", PSG_DT_F32, &(psg_shape_t){2, {10, 4}},
                                            (psg_initializer_t){"uniform", 0.5, 3}, true);
        psg_endpoint_t w = psg_variable(g, "w", PSG_DT_F32, &(psg_shape_t){2, {4, 1}},
                                        (psg_initializer_t){"uniform", 0.5, 4}, true);
        psg_endpoint_t ids = psg_placeholder(g, "ids", PSG_DT_I64, &(psg_shape_t){1, {-1}});
        psg_embedding_table_t t = {1, &table, 10, PSG_PARTITION_MOD, true};
        psg_endpoint_t e = psg_embedding_lookup(g, "emb", &t, ids);
        psg_endpoint_t y = psg_matmul(g, NULL, e, psg_read_variable(g, NULL, w), false, false);
        psg_endpoint_t loss = psg_sum(g, "loss", psg_square(g, NULL, y), 0, NULL, false);
        psg_optimizer_config_t oc = psg_optimizer_defaults(kinds[k]);
        psg_optimizer_t *opt = psg_optimizer_new(&oc);
        int train = -1;
        CHECK(psg_optimizer_minimize(opt, g, loss, &train) == 0);
        int found = 0;
        for (int i = 0; i < psg_graph_num_nodes(g); i++)
            found += !strcmp(psg_node_op(psg_graph_node(g, i)), ops[k]);
        CHECK(found == 1);
        psg_session_t *s = psg_session_new(g, NULL, NULL);
        CHECK(psg_session_run_init(s) == 0);
        psg_resource_mgr_t *rm = psg_session_resources(s);
        psg_tensor_t *before = psg_tensor_copy(psg_resource_find_variable(rm, "table")->value);
        psg_tensor_t *iv =
            psg_tensor_from_data(PSG_DT_I64, &(psg_shape_t){1, {4}}, (int64_t[]){7, 2, 7, 5}, 32);
        CHECK(psg_session_run(s, 1, &ids, &iv, 0, NULL, NULL, 1, &train) == 0);
        const float *a = psg_tensor_f32(psg_resource_find_variable(rm, "table")->value),
                    *b = psg_tensor_f32(before);
        for (int r = 0; r < 10; r++) {
            bool hit = r == 7 || r == 2 || r == 5, moved = memcmp(a + r * 4, b + r * 4, 16) != 0;
            CHECK(hit == moved);
        }
        psg_tensor_destroy(&iv);
        psg_tensor_destroy(&before);
        psg_optimizer_destroy(&opt);
        psg_session_destroy(&s);
        psg_graph_destroy(&g);
    }
}

/* A big table's constant-initialized slot is filled when run, not held by the graph as a
 * Const (which every RegisterGraph would carry whole): it still starts at its value. */
static void test_big_constant_init(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t v = psg_variable(g, "big", PSG_DT_F32, &(psg_shape_t){2, {100000, 17}},
                                    (psg_initializer_t){"constant", 0.25, 0}, false);
    CHECK(psg_endpoint_valid(v));
    for (int i = 0; i < psg_graph_num_nodes(g); i++)
        CHECK(strcmp(psg_node_op(psg_graph_node(g, i)), "Const"));
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(s) == 0);
    psg_variable_t *var = psg_resource_find_variable(psg_session_resources(s), "big");
    CHECK(var && psg_tensor_f32(var->value)[0] == 0.25f &&
          psg_tensor_f32(var->value)[1699999] == 0.25f);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_big_constant_init);
    RUN_TEST(test_sgd);
    RUN_TEST(test_momentum);
    RUN_TEST(test_adagrad);
    RUN_TEST(test_lazy_adam);
    RUN_TEST(test_ftrl);
    RUN_TEST(test_errors);
    RUN_TEST(test_optimizer_sparse);
    return psg_test_summary();
}
