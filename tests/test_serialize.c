/* The msgpack form of graphs: exact round trip, and no crash on bad bytes. */
#include "core/msgpack_check.h"
#include "tests/testutil.h"

#include <stdlib.h>

static psg_graph_t *sample_graph(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_2d(-1, 3);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_graph_push_scope(g, "layer");
    psg_graph_push_device(g, "/job:ps/task:1/cpu:0");
    psg_endpoint_t w = psg_variable(g, "w", PSG_DT_F32, &(psg_shape_t){1, {3}},
                                    (psg_initializer_t){"uniform", 0.5, 7}, true);
    psg_graph_pop_device(g);
    psg_endpoint_t r = psg_read_variable(g, "read", w);
    psg_node_builder_t *bl = psg_node_begin(g, "BroadcastLike", NULL);
    psg_node_add_input(bl, r);
    psg_node_add_input(bl, x);
    psg_endpoint_t b = psg_node_finish_ep(bl);
    psg_graph_pop_scope(g);
    psg_endpoint_t xs[2] = {x, b};
    psg_endpoint_t sum = psg_add_n(g, "sum", 2, xs);
    psg_node_builder_t *nb = psg_node_begin(g, "Reshape", "flat");
    psg_node_add_input(nb, sum);
    psg_node_attr_shape(nb, "shape", &(psg_shape_t){1, {-1}});
    psg_node_attr_ints(nb, "some_ints", 3, (int64_t[]){1, -2, 3});
    psg_node_attr_floats(nb, "some_floats", 2, (double[]){0.25, -1e30});
    psg_node_attr_bool(nb, "flag", true);
    psg_node_attr_str(nb, "note", "hello");
    psg_node_add_control(nb, w.node);
    int flat = psg_node_finish(nb);
    psg_graph_set_assigned_device(g, flat, "/job:worker/task:0/cpu:0");
    return g;
}

static void test_round_trip_exact(void) {
    psg_graph_t *g = sample_graph();
    CHECK(psg_graph_error(g) == NULL);
    char *bytes = NULL;
    size_t len = 0;
    CHECK(psg_graph_serialize(g, &bytes, &len) == 0 && len > 0);
    psg_graph_t *h = psg_graph_deserialize(bytes, len);
    CHECK(h != NULL);
    if (h) {
        CHECK(psg_graph_num_nodes(h) == psg_graph_num_nodes(g));
        for (int i = 0; i < psg_graph_num_nodes(g); i++) {
            const psg_node_t *a = psg_graph_node(g, i), *b = psg_graph_node(h, i);
            CHECK(!strcmp(psg_node_name(a), psg_node_name(b)));
            CHECK(!strcmp(psg_node_op(a), psg_node_op(b)));
            CHECK(!strcmp(psg_node_device(a), psg_node_device(b)));
            CHECK(!strcmp(psg_node_assigned_device(a), psg_node_assigned_device(b)));
            CHECK(psg_node_num_inputs(a) == psg_node_num_inputs(b));
            CHECK(psg_node_num_controls(a) == psg_node_num_controls(b));
            CHECK(psg_node_num_attrs(a) == psg_node_num_attrs(b));
            for (int o = 0; o < psg_node_num_outputs(a); o++)
                CHECK(psg_shape_equal(psg_node_output_shape(a, o), psg_node_output_shape(b, o)));
        }
        /* re-serializing gives the same bytes */
        char *bytes2 = NULL;
        size_t len2 = 0;
        CHECK(psg_graph_serialize(h, &bytes2, &len2) == 0);
        CHECK(len2 == len && !memcmp(bytes, bytes2, len));
        free(bytes2);
        int n;
        psg_graph_collection(h, "trainable_variables", &n);
        CHECK(n == 1);
        /* the rebuilt graph runs and initializes the same variable value */
        psg_session_t *s1 = psg_session_new(g, NULL, NULL), *s2 = psg_session_new(h, NULL, NULL);
        psg_endpoint_t r1 = {psg_graph_find(g, "layer/read"), 0},
                       r2 = {psg_graph_find(h, "layer/read"), 0};
        psg_tensor_t *v1 = NULL, *v2 = NULL;
        CHECK(psg_session_run_init(s1) == 0 && psg_session_run_init(s2) == 0);
        CHECK(psg_session_run(s1, 0, NULL, NULL, 1, &r1, &v1, 0, NULL) == 0);
        CHECK(psg_session_run(s2, 0, NULL, NULL, 1, &r2, &v2, 0, NULL) == 0);
        CHECK(v1 && v2 && !memcmp(v1->data, v2->data, 12));
        CHECK(v1 && psg_tensor_f32(v1)[0] != 0.0f);
        psg_tensor_destroy(&v1);
        psg_tensor_destroy(&v2);
        psg_session_destroy(&s1);
        psg_session_destroy(&s2);
    }
    psg_graph_destroy(&h);
    free(bytes);
    psg_graph_destroy(&g);
}

static void test_bad_bytes(void) {
    psg_graph_t *g = sample_graph();
    char *bytes = NULL;
    size_t len = 0;
    psg_graph_serialize(g, &bytes, &len);
    /* every truncation fails cleanly */
    for (size_t cut = 0; cut < len; cut += 1 + cut / 16) {
        psg_graph_t *h = psg_graph_deserialize(bytes, cut);
        CHECK(h == NULL);
        psg_graph_destroy(&h);
    }
    /* random single-byte corruption: may succeed or fail, must not crash */
    unsigned seed = 99;
    int rejected = 0;
    for (int trial = 0; trial < 2000; trial++) {
        char *copy = malloc(len);
        memcpy(copy, bytes, len);
        for (int k = 0; k < 3; k++) {
            seed = seed * 1103515245u + 12345u;
            copy[(seed >> 8) % len] = (char)(seed >> 24);
        }
        psg_graph_t *h = psg_graph_deserialize(copy, len);
        rejected += h == NULL;
        psg_graph_destroy(&h);
        free(copy);
    }
    CHECK(rejected > 0);
    /* pure noise */
    for (int trial = 0; trial < 200; trial++) {
        char noise[256];
        for (size_t i = 0; i < sizeof noise; i++) {
            seed = seed * 1103515245u + 12345u;
            noise[i] = (char)(seed >> 24);
        }
        psg_graph_t *h = psg_graph_deserialize(noise, sizeof noise);
        CHECK(h == NULL);
        psg_graph_destroy(&h);
    }
    /* 5 bytes claiming a 4-billion-element array: rejected before any allocation */
    CHECK(psg_graph_deserialize("\xdd\xff\xff\xff\xff", 5) == NULL);
    CHECK_ERROR_HAS("cannot fit");
    CHECK(psg_msgpack_check("\x92\x01", 2, 8) < 0); /* array of 2 with 1 element */
    CHECK(psg_msgpack_check("\x91\x91\x91\x01", 4, 2) < 0);
    CHECK_ERROR_HAS("nested deeper");
    CHECK(psg_msgpack_check("\x92\x01\xa1x", 4, 8) == 0);
    CHECK(psg_graph_deserialize("\x80", 1) == NULL); /* an empty map */
    CHECK_ERROR_HAS("format");
    free(bytes);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_round_trip_exact);
    RUN_TEST(test_bad_bytes);
    return psg_test_summary();
}
