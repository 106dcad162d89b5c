/* The gradient compression ops (ops/compress.c) in one process: TopKAbs keeps
 * the entries of largest magnitude (ties: the lower index), ScatterDense puts
 * them back, k = n is the tensor itself, and bad input (k out of range, an
 * index from a peer out of range) is an error naming the node, not a crash. */
#include "psgraph/ops_array.h"
#include "psgraph/session.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdint.h>

static psg_tensor_t *vec(int n, const float *v) {
    psg_shape_t s = psg_shape_1d(n);
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &s);
    for (int i = 0; i < n; i++) psg_tensor_f32(t)[i] = v[i];
    return t;
}

/* Runs topk(x, k) and its scatter back to x's shape; fetched: values, indices, dense. */
static int run_topk(const float *x, int n, int64_t k, psg_tensor_t **out) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(n);
    psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &s), v, ix;
    psg_topk_abs(g, "topk", ph, k, &v, &ix);
    psg_endpoint_t d = psg_scatter_dense(g, "dense", v, ix, &s);
    int rc = -1;
    if (!psg_graph_error(g)) {
        psg_session_t *sess = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
        psg_tensor_t *xt = vec(n, x);
        psg_endpoint_t f[3] = {v, ix, d};
        rc = sess ? psg_session_run(sess, 1, &ph, &xt, 3, f, out, 0, NULL) : -1;
        psg_tensor_destroy(&xt);
        psg_session_destroy(&sess);
    } else {
        psg_error_set("%s", psg_graph_error(g));
    }
    psg_graph_destroy(&g);
    return rc;
}

static void test_topk_keeps_the_largest_magnitudes(void) {
    const float x[6] = {0.5f, -3.0f, 2.0f, -2.0f, 0.0f, 1.0f};
    psg_tensor_t *out[3] = {0};
    CHECK(run_topk(x, 6, 3, out) == 0);
    /* |-3| first, then the tie |2| = |-2| by the lower index */
    CHECK(psg_tensor_numel(out[0]) == 3 && psg_tensor_f32(out[0])[0] == -3.0f &&
          psg_tensor_f32(out[0])[1] == 2.0f && psg_tensor_f32(out[0])[2] == -2.0f);
    CHECK(psg_tensor_i32(out[1])[0] == 1 && psg_tensor_i32(out[1])[1] == 2 &&
          psg_tensor_i32(out[1])[2] == 3);
    const float want[6] = {0, -3.0f, 2.0f, -2.0f, 0, 0};
    for (int i = 0; i < 6; i++) CHECK(psg_tensor_f32(out[2])[i] == want[i]);
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&out[i]);
}

/* Against the definition, on many entries with many ties (magnitudes of 0..6, both signs)
 * and a NaN: the k largest magnitudes in order, ties by the lower index, a NaN first. */
static void test_topk_of_many_ties_is_the_sorted_order(void) {
    enum { N = 5000, K = 1200 };
    static float x[N];
    uint32_t r = 7;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (float)((int)(r >> 24) % 7) * ((r >> 8) & 1 ? 1.0f : -1.0f);
    }
    x[4321] = NAN;
    psg_tensor_t *out[3] = {0};
    CHECK(run_topk(x, N, K, out) == 0);
    CHECK(psg_tensor_i32(out[1])[0] == 4321);
    int j = 1; /* the reference: by magnitude 6 down to 0, then by index */
    for (int m = 6; m >= 0 && j < K; m--)
        for (int i = 0; i < N && j < K; i++)
            if (i != 4321 && fabsf(x[i]) == (float)m) {
                CHECK(psg_tensor_i32(out[1])[j] == i && psg_tensor_f32(out[0])[j] == x[i]);
                j++;
            }
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&out[i]);
}

static void test_k_of_all_is_the_tensor(void) {
    const float x[5] = {1e-8f, -7.5f, 3.25f, -0.0f, 42.0f};
    psg_tensor_t *out[3] = {0};
    CHECK(run_topk(x, 5, 5, out) == 0);
    for (int i = 0; i < 5; i++) CHECK(psg_tensor_f32(out[2])[i] == x[i]);
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&out[i]);
}

static void test_bad_input_is_an_error(void) {
    const float x[3] = {1, 2, 3};
    psg_tensor_t *out[3] = {0};
    CHECK(run_topk(x, 3, 4, out) < 0);
    CHECK_ERROR_HAS("k 4 is more than the 3 elements");
    CHECK(run_topk(x, 3, 0, out) < 0);
    CHECK_ERROR_HAS("k must be >= 1");
    /* indices as a peer might send them: out of range */
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s2 = psg_shape_1d(2), s4 = psg_shape_1d(4);
    psg_endpoint_t v = psg_placeholder(g, "v", PSG_DT_F32, &s2),
                   ix = psg_placeholder(g, "ix", PSG_DT_I32, &s2);
    psg_endpoint_t d = psg_scatter_dense(g, "dense", v, ix, &s4);
    psg_session_t *sess = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
    psg_tensor_t *vt = vec(2, (float[]){1, 2}), *it = psg_tensor_new(PSG_DT_I32, &s2), *dt = NULL;
    psg_tensor_i32(it)[0] = 1;
    psg_tensor_i32(it)[1] = 9;
    psg_endpoint_t feeds[2] = {v, ix};
    psg_tensor_t *fv[2] = {vt, it};
    CHECK(psg_session_run(sess, 2, feeds, fv, 1, &d, &dt, 0, NULL) < 0);
    CHECK_ERROR_HAS("index 9 at 1 is not in [0, 4)");
    psg_tensor_destroy(&vt);
    psg_tensor_destroy(&it);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

/* With a ratio read each run (the sparsity's warm-up): max(k, ceil(ratio * n)) entries,
 * at most n, the outputs as long as that. */
static void test_ratio_sets_k_each_run(void) {
    const float x[8] = {1, -8, 3, -4, 5, 0.5f, 7, -2};
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(8), sc = psg_shape_scalar();
    psg_endpoint_t ph = psg_placeholder(g, "x", PSG_DT_F32, &s),
                   r = psg_placeholder(g, "r", PSG_DT_F32, &sc), v, ix;
    psg_topk_abs_ratio(g, "topk", ph, 2, r, &v, &ix);
    psg_endpoint_t d = psg_scatter_dense(g, "dense", v, ix, &s);
    CHECK(psg_graph_error(g) == NULL);
    psg_session_t *sess = psg_session_new(g, &(psg_session_options_t){.num_threads = 1}, NULL);
    const float ratios[4] = {0.01f, 0.5f, 0.3f, 2.0f};
    const int64_t want_k[4] = {2, 4, 3, 8}; /* the floor k, 4 of 8, ceil(2.4), all */
    for (int t = 0; t < 4; t++) {
        psg_tensor_t *xt = vec(8, x), *rt = psg_tensor_scalar_f32(ratios[t]), *out[2] = {0};
        psg_endpoint_t feeds[2] = {ph, r}, fetch[2] = {v, d};
        psg_tensor_t *fv[2] = {xt, rt};
        CHECK(psg_session_run(sess, 2, feeds, fv, 2, fetch, out, 0, NULL) == 0);
        CHECK(out[0] && psg_tensor_numel(out[0]) == want_k[t]);
        float kept = 0; /* the k largest magnitudes: 8, 7, 5, 4, 3, 2, 1, 0.5 */
        for (int i = 0; out[1] && i < 8; i++) kept += psg_tensor_f32(out[1])[i] != 0;
        CHECK(kept == (float)want_k[t] && psg_tensor_f32(out[1])[1] == -8.0f);
        for (int i = 0; i < 2; i++) psg_tensor_destroy(&out[i]);
        psg_tensor_destroy(&xt);
        psg_tensor_destroy(&rt);
    }
    psg_tensor_t *xt = vec(8, x), *rt = psg_tensor_scalar_f32(-1), *out = NULL;
    psg_endpoint_t feeds[2] = {ph, r};
    psg_tensor_t *fv[2] = {xt, rt};
    CHECK(psg_session_run(sess, 2, feeds, fv, 1, &v, &out, 0, NULL) < 0);
    CHECK_ERROR_HAS("ratio -1 is not >= 0");
    psg_tensor_destroy(&xt);
    psg_tensor_destroy(&rt);
    psg_session_destroy(&sess);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_topk_keeps_the_largest_magnitudes);
    RUN_TEST(test_topk_of_many_ties_is_the_sorted_order);
    RUN_TEST(test_k_of_all_is_the_tensor);
    RUN_TEST(test_bad_input_is_an_error);
    RUN_TEST(test_ratio_sets_k_each_run);
    return psg_test_summary();
}
