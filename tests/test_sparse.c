/* The sparse ops: values of Gather, Unique, UnsortedSegmentSum, DynamicStitch,
 * PartitionIds and embedding lookups over partitioned variables (mod and div), finite-
 * difference checks of every gradient (variables included), and sparse gradients that
 * autodiff keeps sparse and sums by concatenation. */
#include "tests/gradcheck.h"
#include "tests/testutil.h"

#include <stdlib.h>

static psg_tensor_t *ids_i64(int n, const int64_t *v) {
    psg_shape_t s = psg_shape_1d(n);
    return psg_tensor_from_data(PSG_DT_I64, &s, v, sizeof(int64_t) * (size_t)n);
}

static psg_tensor_t *ids_i32(int n, const int32_t *v) {
    psg_shape_t s = psg_shape_1d(n);
    return psg_tensor_from_data(PSG_DT_I32, &s, v, sizeof(int32_t) * (size_t)n);
}

/* ---- gradient checks on placeholders ---- */

static psg_endpoint_t build_gather(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    (void)ctx;
    return psg_gather(g, "y", in[0], in[1]);
}

static psg_endpoint_t build_segment_sum(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    (void)ctx;
    return psg_unsorted_segment_sum(g, "y", in[0], in[1], in[2]);
}

static psg_endpoint_t build_stitch(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    (void)ctx;
    psg_endpoint_t ix[2] = {in[2], in[3]}, d[2] = {in[0], in[1]};
    return psg_dynamic_stitch(g, "y", 2, ix, d);
}

static psg_endpoint_t build_slices(psg_graph_t *g, const psg_endpoint_t *in, void *ctx) {
    (void)ctx;
    return psg_indexed_slices(g, "y", in[0], in[1], in[2]);
}

static void test_gradchecks(void) {
    unsigned seed = 7;
    psg_tensor_t *params = psg_test_random(&(psg_shape_t){2, {5, 3}}, -1, 1, &seed);
    int64_t ix2d[] = {4, 0, 4, 2, 1, 4};
    psg_tensor_t *ix =
        psg_tensor_from_data(PSG_DT_I64, &(psg_shape_t){2, {2, 3}}, ix2d, sizeof ix2d);
    psg_gradcheck_input_t gi[] = {{params, true}, {ix, false}};
    CHECK(psg_gradcheck("Gather", 2, gi, build_gather, NULL, 1e-2) == 0);

    psg_tensor_t *data = psg_test_random(&(psg_shape_t){2, {6, 2}}, -1, 1, &seed);
    psg_tensor_t *seg = ids_i32(6, (int32_t[]){2, 0, 2, -1, 3, 0});
    psg_tensor_t *num = psg_tensor_scalar_i64(4);
    psg_gradcheck_input_t si[] = {{data, true}, {seg, false}, {num, false}};
    CHECK(psg_gradcheck("UnsortedSegmentSum", 3, si, build_segment_sum, NULL, 1e-2) == 0);

    psg_tensor_t *d0 = psg_test_random(&(psg_shape_t){2, {2, 3}}, -1, 1, &seed);
    psg_tensor_t *d1 = psg_test_random(&(psg_shape_t){2, {3, 3}}, -1, 1, &seed);
    psg_tensor_t *p0 = ids_i32(2, (int32_t[]){3, 0}), *p1 = ids_i32(3, (int32_t[]){1, 4, 2});
    psg_gradcheck_input_t di[] = {{d0, true}, {d1, true}, {p0, false}, {p1, false}};
    CHECK(psg_gradcheck("DynamicStitch", 4, di, build_stitch, NULL, 1e-2) == 0);

    psg_tensor_t *vals = psg_test_random(&(psg_shape_t){2, {4, 3}}, -1, 1, &seed);
    psg_tensor_t *vix = ids_i64(4, (int64_t[]){1, 3, 1, 0});
    psg_tensor_t *like = psg_tensor_zeros(PSG_DT_F32, &(psg_shape_t){2, {5, 3}});
    psg_gradcheck_input_t ii[] = {{vals, true}, {vix, false}, {like, false}};
    CHECK(psg_gradcheck("IndexedSlices", 3, ii, build_slices, NULL, 1e-2) == 0);

    psg_tensor_t *ts[] = {params, ix, data, seg, num, d0, d1, p0, p1, vals, vix, like};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) psg_tensor_destroy(&ts[i]);
}

/* ---- values ---- */

static void test_unique_and_partition(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_I64, &(psg_shape_t){1, {-1}});
    int u = psg_unique(g, "u", x);
    int pm = psg_partition_ids(g, "pm", x, 10, 3, 1, PSG_PARTITION_MOD);
    int pd = psg_partition_ids(g, "pd", x, 10, 3, 1, PSG_PARTITION_DIV);
    CHECK(u >= 0 && pm >= 0 && pd >= 0);
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    psg_tensor_t *in = ids_i64(7, (int64_t[]){5, 3, 5, 7, 3, 4, 9});
    psg_endpoint_t f[] = {{u, 0}, {u, 1}, {pm, 0}, {pm, 1}, {pd, 0}, {pd, 1}};
    psg_tensor_t *out[6] = {0};
    CHECK(psg_session_run(s, 1, &x, &in, 6, f, out, 0, NULL) == 0);
    if (out[0]) {
        /* unique in order of first appearance, and where each id went */
        CHECK(out[0]->shape.dims[0] == 5);
        int64_t want_u[] = {5, 3, 7, 4, 9};
        int32_t want_ix[] = {0, 1, 0, 2, 1, 3, 4};
        CHECK(!memcmp(out[0]->data, want_u, sizeof want_u));
        CHECK(!memcmp(out[1]->data, want_ix, sizeof want_ix));
        /* mod: shard 1 of 3 holds 1, 4, 7 (rows 0, 1, 2) */
        int32_t mod_rows[] = {2, 1}, mod_pos[] = {3, 5};
        CHECK(out[2]->shape.dims[0] == 2 && !memcmp(out[2]->data, mod_rows, sizeof mod_rows));
        CHECK(!memcmp(out[3]->data, mod_pos, sizeof mod_pos));
        /* div: 10 rows in 3 shards are 4, 3, 3 rows: shard 1 holds 4, 5, 6 */
        int32_t div_rows[] = {1, 1, 0}, div_pos[] = {0, 2, 5};
        CHECK(out[4]->shape.dims[0] == 3 && !memcmp(out[4]->data, div_rows, sizeof div_rows));
        CHECK(!memcmp(out[5]->data, div_pos, sizeof div_pos));
    }
    for (int i = 0; i < 6; i++) psg_tensor_destroy(&out[i]);
    /* an id outside the table fails, naming it */
    psg_tensor_t *bad = ids_i64(2, (int64_t[]){1, 10});
    CHECK(psg_session_run(s, 1, &x, &bad, 1, &f[2], out, 0, NULL) < 0);
    CHECK_ERROR_HAS("id 10");
    psg_tensor_destroy(&bad);
    psg_tensor_destroy(&in);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

/* A table of `rows` x 3 in `n` shards. */
static int make_table(psg_graph_t *g, psg_partitioned_var_t *pv, psg_embedding_table_t *t,
                      int64_t rows, int n, psg_partition_strategy_t st, bool uniq) {
    psg_partitioner_t p = {.num_shards = n};
    if (psg_partitioned_variable(g, "emb", PSG_DT_F32, &(psg_shape_t){2, {rows, 3}},
                                 (psg_initializer_t){"zeros", 0, 0}, true, &p, pv) < 0)
        return -1;
    *t = (psg_embedding_table_t){pv->num_shards, pv->shards, rows, st, uniq};
    return 0;
}

/* Sets row `id` of the table (wherever the strategy put it) to id + k / 10 + 0.05 * k^2. */
static void fill_table(psg_session_t *s, const psg_partitioned_var_t *pv,
                       psg_partition_strategy_t st) {
    int n = pv->num_shards;
    for (int k = 0; k < n; k++) {
        char name[64];
        snprintf(name, sizeof name, "emb/part_%d", k);
        psg_variable_t *v = psg_resource_find_variable(psg_session_resources(s), name);
        CHECK(v != NULL);
        if (!v) return;
        for (int64_t r = 0; r < v->shape.dims[0]; r++) {
            int64_t id = st == PSG_PARTITION_MOD ? r * n + k : pv->offsets[k] + r;
            for (int c = 0; c < 3; c++)
                psg_tensor_f32(v->value)[r * 3 + c] = (float)id + 0.1f * c + 0.05f * c * c;
        }
    }
}

/* Finite differences of the scalar `loss` over every element of the table's shards,
 * against the gradients autodiff builds (each must stay an IndexedSlices). */
static void check_table_grads(const char *label, psg_graph_t *g, psg_session_t *s,
                              psg_endpoint_t loss, const psg_partitioned_var_t *pv, int nf,
                              const psg_endpoint_t *feeds, psg_tensor_t *const *vals,
                              bool want_concat) {
    int n = pv->num_shards;
    psg_endpoint_t grads[PSG_MAX_SHARDS];
    CHECK(psg_gradients(g, 1, &loss, NULL, n, pv->shards, grads) == 0);
    for (int k = 0; k < n; k++) {
        psg_endpoint_t v;
        CHECK(psg_is_indexed_slices(g, grads[k], &v, NULL, NULL)); /* carried sparse */
        if (want_concat) CHECK(!strcmp(psg_node_op(psg_graph_node(g, v.node)), "Concat"));
    }
    psg_tensor_t *ga[PSG_MAX_SHARDS] = {0};
    CHECK(psg_session_run(s, nf, feeds, vals, n, grads, ga, 0, NULL) == 0);
    int bad = 0;
    for (int k = 0; k < n && ga[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "emb/part_%d", k);
        psg_variable_t *var = psg_resource_find_variable(psg_session_resources(s), name);
        float *x = psg_tensor_f32(var->value);
        for (int64_t j = 0; j < psg_tensor_numel(var->value); j++) {
            float orig = x[j];
            double f[2], eps = 1e-2;
            for (int side = 0; side < 2; side++) {
                psg_tensor_t *y = NULL;
                x[j] = (float)(orig + (side ? -eps : eps));
                CHECK(psg_session_run(s, nf, feeds, vals, 1, &loss, &y, 0, NULL) == 0);
                f[side] = y ? psg_tensor_f32(y)[0] : 0;
                psg_tensor_destroy(&y);
            }
            x[j] = orig;
            double num = (f[0] - f[1]) / (2 * eps), an = psg_tensor_f32(ga[k])[j];
            if (fabs(num - an) > 2e-2 * (1 + fabs(num)) && bad++ < 5)
                fprintf(stderr, "%s: d/d shard %d [%lld]: analytic %g numeric %g\n", label, k,
                        (long long)j, an, num);
        }
    }
    CHECK(bad == 0);
    for (int k = 0; k < n; k++) psg_tensor_destroy(&ga[k]);
}

static void test_embedding_lookup(void) {
    for (int st = 0; st < 2; st++) {
        for (int uniq = 0; uniq < 2; uniq++) {
            psg_graph_t *g = psg_graph_new();
            psg_partitioned_var_t pv;
            psg_embedding_table_t t;
            CHECK(make_table(g, &pv, &t, 7, 3, (psg_partition_strategy_t)st, uniq) == 0);
            psg_endpoint_t ids = psg_placeholder(g, "ids", PSG_DT_I64, &(psg_shape_t){2, {-1, 2}});
            psg_endpoint_t y = psg_embedding_lookup(g, "lookup", &t, ids);
            psg_endpoint_t ids2 = psg_placeholder(g, "ids2", PSG_DT_I32, &(psg_shape_t){1, {-1}});
            psg_endpoint_t y2 = psg_embedding_lookup(g, "lookup2", &t, ids2);
            /* loss = sum(y^2) / 2 + sum(y2 * 3): two paths into each shard */
            psg_endpoint_t l1 =
                psg_scale(g, NULL, psg_sum(g, NULL, psg_square(g, NULL, y), 0, NULL, false), 0.5);
            psg_endpoint_t l2 = psg_scale(g, NULL, psg_sum(g, NULL, y2, 0, NULL, false), 3.0);
            psg_endpoint_t loss = psg_add(g, "loss", l1, l2);
            CHECK(psg_graph_error(g) == NULL);
            const psg_shape_t *ys = psg_graph_shape(g, y);
            CHECK(ys->rank == 3 && ys->dims[0] == -1 && ys->dims[1] == 2 && ys->dims[2] == 3);
            psg_session_t *s = psg_session_new(g, NULL, NULL);
            CHECK(psg_session_run_init(s) == 0);
            fill_table(s, &pv, (psg_partition_strategy_t)st);
            int64_t iv[] = {6, 0, 3, 6, 2, 5};
            psg_tensor_t *it =
                psg_tensor_from_data(PSG_DT_I64, &(psg_shape_t){2, {3, 2}}, iv, sizeof iv);
            psg_tensor_t *it2 = ids_i32(3, (int32_t[]){1, 6, 1});
            psg_endpoint_t feeds[] = {ids, ids2};
            psg_tensor_t *vals[] = {it, it2}, *out = NULL;
            CHECK(psg_session_run(s, 2, feeds, vals, 1, &y, &out, 0, NULL) == 0);
            for (int i = 0; out && i < 6; i++)
                for (int c = 0; c < 3; c++)
                    CHECK_NEAR(psg_tensor_f32(out)[i * 3 + c], iv[i] + 0.1 * c + 0.05 * c * c,
                               1e-5);
            psg_tensor_destroy(&out);
            char label[64];
            snprintf(label, sizeof label, "embedding_lookup %s%s", st ? "div" : "mod",
                     uniq ? " unique" : "");
            check_table_grads(label, g, s, loss, &pv, 2, feeds, vals, true);
            psg_tensor_destroy(&it);
            psg_tensor_destroy(&it2);
            psg_session_destroy(&s);
            psg_graph_destroy(&g);
        }
    }
}

static void test_embedding_lookup_sparse(void) {
    const char *names[] = {"sum", "mean", "sqrtn"};
    for (int comb = 0; comb < 3; comb++) {
        psg_graph_t *g = psg_graph_new();
        psg_partitioned_var_t pv;
        psg_embedding_table_t t;
        CHECK(make_table(g, &pv, &t, 5, 2, PSG_PARTITION_DIV, true) == 0);
        psg_endpoint_t ids = psg_placeholder(g, "ids", PSG_DT_I64, &(psg_shape_t){1, {-1}});
        psg_endpoint_t seg = psg_placeholder(g, "seg", PSG_DT_I32, &(psg_shape_t){1, {-1}});
        psg_endpoint_t num = psg_placeholder(g, "num", PSG_DT_I64, &(psg_shape_t){0, {0}});
        psg_endpoint_t y =
            psg_embedding_lookup_sparse(g, "bags", &t, ids, seg, num, (psg_combiner_t)comb);
        psg_endpoint_t loss = psg_sum(g, "loss", psg_square(g, NULL, y), 0, NULL, false);
        CHECK(psg_graph_error(g) == NULL);
        psg_session_t *s = psg_session_new(g, NULL, NULL);
        CHECK(psg_session_run_init(s) == 0);
        fill_table(s, &pv, PSG_PARTITION_DIV);
        /* bags: {4, 1, 4}, {}, {0, 3} over 3 segments */
        psg_tensor_t *iv = ids_i64(5, (int64_t[]){4, 1, 4, 0, 3}),
                     *sv = ids_i32(5, (int32_t[]){0, 0, 0, 2, 2});
        psg_tensor_t *nv = psg_tensor_scalar_i64(3), *out = NULL;
        psg_endpoint_t feeds[] = {ids, seg, num};
        psg_tensor_t *vals[] = {iv, sv, nv};
        CHECK(psg_session_run(s, 3, feeds, vals, 1, &y, &out, 0, NULL) == 0);
        if (out) {
            CHECK(out->shape.rank == 2 && out->shape.dims[0] == 3 && out->shape.dims[1] == 3);
            double scale0 = comb == 0 ? 1 : comb == 1 ? 1.0 / 3 : 1 / sqrt(3.0);
            double scale2 = comb == 0 ? 1 : comb == 1 ? 0.5 : 1 / sqrt(2.0);
            for (int c = 0; c < 3; c++) {
                double row = 0.1 * c + 0.05 * c * c;
                CHECK_NEAR(psg_tensor_f32(out)[c], scale0 * (9 + 3 * row), 1e-4);
                CHECK_NEAR(psg_tensor_f32(out)[3 + c], 0, 0);
                CHECK_NEAR(psg_tensor_f32(out)[6 + c], scale2 * (3 + 2 * row), 1e-4);
            }
        }
        psg_tensor_destroy(&out);
        check_table_grads(names[comb], g, s, loss, &pv, 3, feeds, vals, false);
        psg_tensor_destroy(&iv);
        psg_tensor_destroy(&sv);
        psg_tensor_destroy(&nv);
        psg_session_destroy(&s);
        psg_graph_destroy(&g);
    }
}

/* A gather reads only the rows asked for, beside the variable, and fails naming the
 * variable for a row it does not have. */
static void test_resource_gather_errors(void) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t v = psg_variable(g, "table", PSG_DT_F32, &(psg_shape_t){2, {4, 2}},
                                    (psg_initializer_t){"ones", 0, 0}, true);
    psg_endpoint_t ids = psg_placeholder(g, "ids", PSG_DT_I32, &(psg_shape_t){1, {-1}});
    psg_endpoint_t y = psg_resource_gather(g, "rows", v, ids);
    psg_session_t *s = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(s) == 0);
    psg_tensor_t *bad = ids_i32(2, (int32_t[]){3, 4}), *out = NULL;
    CHECK(psg_session_run(s, 1, &ids, &bad, 1, &y, &out, 0, NULL) < 0);
    CHECK_ERROR_HAS("variable 'table'");
    CHECK_ERROR_HAS("index 4");
    psg_tensor_destroy(&bad);
    psg_session_destroy(&s);
    psg_graph_destroy(&g);
}

/* A ps memory limit: a table of 4 shards over 2 ps tasks fits under a limit no one task
 * could hold the table under; below half the table, placement refuses, naming the
 * variable, its bytes and the limit. */
static void test_ps_memory_limit(void) {
    for (int round = 0; round < 2; round++) {
        psg_graph_t *g = psg_graph_new();
        psg_replica_setter_options_t so = {.ps_tasks = 2};
        psg_replica_setter_t *rs = psg_replica_setter_new(&so);
        psg_graph_push_replica_setter(g, rs);
        psg_partitioned_var_t pv;
        psg_partitioner_t p = {.num_shards = 4};
        CHECK(psg_partitioned_variable(g, "table", PSG_DT_F32, &(psg_shape_t){2, {1000, 16}},
                                       (psg_initializer_t){"zeros", 0, 0}, true, &p, &pv) == 0);
        psg_graph_pop_device(g);
        psg_job_spec_t jobs[] = {{"ps", 2, 0}, {"worker", 1, 0}};
        /* 64000 bytes in all: 32000 a task */
        psg_placement_options_t po = {.default_device = "/job:worker/task:0",
                                      .num_jobs = 2,
                                      .jobs = jobs,
                                      .ps_memory_limit = round == 0 ? 40000 : 30000};
        int rc = psg_place(g, &po);
        if (round == 0) {
            CHECK(rc == 0);
            CHECK(psg_replica_setter_ps_bytes(rs, 0) == 32000 &&
                  psg_replica_setter_ps_bytes(rs, 1) == 32000);
        } else {
            CHECK(rc < 0);
            CHECK_ERROR_HAS("variable 'table/part_");
            CHECK_ERROR_HAS("(16000 bytes) does not fit on /job:ps/task:");
            CHECK_ERROR_HAS("ps memory limit of 30000 bytes");
        }
        psg_replica_setter_destroy(&rs);
        psg_graph_destroy(&g);
    }
}

int main(void) {
    RUN_TEST(test_ps_memory_limit);
    RUN_TEST(test_gradchecks);
    RUN_TEST(test_unique_and_partition);
    RUN_TEST(test_embedding_lookup);
    RUN_TEST(test_embedding_lookup_sparse);
    RUN_TEST(test_resource_gather_errors);
    return psg_test_summary();
}
