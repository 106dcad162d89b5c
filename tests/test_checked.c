/* core/: checked arithmetic and the string map, and the places that take a size from
 * bytes through them (shape numel, window geometry, reshape inference) and the duplicate
 * checks that use the map (JSON keys, cluster addresses). Issue 20's findings 2 and 6. */
#include "core/checked.h"
#include "core/strmap.h"
#include "core/json.h"
#include "ops/cpu/nn.h"
#include "testutil.h"

#include <stdlib.h>

static void test_ckd(void) {
    int64_t r;
    CHECK(!psg_ckd_mul_i64(&r, 1 << 20, 1 << 20) && r == (int64_t)1 << 40);
    CHECK(psg_ckd_mul_i64(&r, 5, INT64_MAX));
    CHECK(psg_ckd_add_i64(&r, INT64_MAX, 1));
    CHECK(psg_ckd_sub_i64(&r, INT64_MIN, 1));
    uint64_t u;
    CHECK(psg_ckd_mul_u64(&u, (uint64_t)1 << 62, 4)); /* [2^40, 2^22] f32 in bytes */
    int64_t dims[] = {3, 4, 5};
    CHECK(!psg_ckd_product_i64(&r, dims, 3) && r == 60);
    int64_t neg[] = {3, -1};
    CHECK(psg_ckd_product_i64(&r, neg, 2));
}

static void test_shape_numel_overflow(void) {
    /* an AccumulatorHandle of shape [5, INT64_MAX] in a registered graph */
    psg_shape_t s = psg_shape_2d(5, INT64_MAX);
    CHECK(psg_shape_numel(&s) == -1);
    CHECK(!psg_shape_is_complete(&s));
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, &s);
    CHECK(!t);
    CHECK_ERROR_HAS("overflows");
    s = psg_shape_2d((int64_t)1 << 32, (int64_t)1 << 31);
    CHECK(psg_shape_numel(&s) == -1);
    s = psg_shape_2d(7, 9);
    CHECK(psg_shape_numel(&s) == 63);
}

static void test_window_overflow(void) {
    int64_t out = 0, pad = 0;
    /* MaxPool with strides [INT64_MAX, 1], SAME: one window */
    CHECK(psg_nn_out_size(8, 2, INT64_MAX, true, &out, &pad) == 0 && out == 1 && pad == 0);
    CHECK(psg_nn_out_size(INT64_MAX, INT64_MAX, 1, true, &out, &pad) < 0);
    CHECK_ERROR_HAS("overflows");
    CHECK(psg_nn_out_size(10, 3, 0, false, &out, &pad) < 0);
    CHECK_ERROR_HAS("stride 0");
    CHECK(psg_nn_out_size(10, 3, 2, false, &out, &pad) == 0 && out == 4);
    CHECK(psg_nn_out_size(10, 3, 2, true, &out, &pad) == 0 && out == 5 && pad == 0);
}

static void test_reshape_overflow(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t in = psg_shape_2d(4, 4);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &in);
    psg_shape_t bad = {.rank = 3, .dims = {INT64_MAX, 4, -1}};
    psg_endpoint_t y = psg_reshape(g, "y", x, &bad);
    CHECK(y.node < 0);
    CHECK(strstr(psg_graph_error(g), "overflows"));
    psg_shape_t good = {.rank = 2, .dims = {2, -1}};
    y = psg_reshape(g, "y2", x, &good);
    CHECK(y.node >= 0);
    psg_graph_destroy(&g);
}

static void test_strmap(void) {
    psg_strmap_t *m = psg_strmap_new();
    char keys[5000][16];
    for (int i = 0; i < 5000; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        CHECK(psg_strmap_put(m, keys[i], i) == -1);
    }
    CHECK(psg_strmap_count(m) == 5000);
    CHECK(psg_strmap_put(m, "k4321", 9) == 4321);
    CHECK(psg_strmap_get(m, "k17") == 17 && psg_strmap_get(m, "nope") == -1);
    psg_strmap_destroy(&m);
    psg_strmap_destroy(&m);
}

/* A 1 MB object of 100 k keys (the parser's quadratic case): parsed, and a duplicate as
 * its very last key found and named. The time goes to bench/limits.c, not here. */
static void test_json_many_keys(void) {
    int n = 100000;
    char *s = malloc((size_t)n * 16 + 64), *p = s;
    p += sprintf(p, "{");
    for (int i = 0; i < n; i++) p += sprintf(p, "%s\"k%d\":%d", i ? "," : "", i, i);
    char *end = p;
    sprintf(p, "}");
    psg_json_t *j = psg_json_parse(s);
    CHECK(j && j->count == n);
    CHECK(j && psg_json_get(j, "k99999") && psg_json_get(j, "k99999")->number == 99999);
    psg_json_free(j);
    sprintf(end, ",\"k12345\":0}");
    CHECK(!psg_json_parse(s));
    CHECK_ERROR_HAS("duplicate key \"k12345\"");
    free(s);
}

static void test_cluster_many_addresses(void) {
    int n = 20000;
    char *s = malloc((size_t)n * 24 + 256), *p = s;
    p += sprintf(p, "{\"cluster\":{\"worker\":[");
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s\"10.%d.%d.1:2222\"", i ? "," : "", i / 256, i % 256);
    p += sprintf(p, "],\"ps\":[\"10.0.7.1:2222\"]}}");
    psg_cluster_t *c = psg_cluster_parse(s, "test");
    CHECK(!c);
    CHECK_ERROR_HAS("is also cluster.worker[7]: duplicate address");
    psg_cluster_destroy(&c);
    sprintf(strstr(s, "\"ps\":[") + 6, "\"10.200.7.1:2222\"]}}");
    c = psg_cluster_parse(s, "test");
    CHECK(c);
    psg_cluster_destroy(&c);
    free(s);
}

int main(void) {
    RUN_TEST(test_ckd);
    RUN_TEST(test_shape_numel_overflow);
    RUN_TEST(test_window_overflow);
    RUN_TEST(test_reshape_overflow);
    RUN_TEST(test_strmap);
    RUN_TEST(test_json_many_keys);
    RUN_TEST(test_cluster_many_addresses);
    return psg_test_summary();
}
