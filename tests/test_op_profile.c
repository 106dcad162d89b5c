/* The op profile (runtime/op_profile.c): the FLOPs of MatMul and Conv2D from the graph's
 * shapes with the batch for the unknown dim, and a session's steps summed by op type
 * through the timing hook (runs, time, FLOPs), written as JSON lines that Python reads
 * back; `psgraph bench inception3 --op-profile` prints the same. */
#include "psgraph/op_profile.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct {
    psg_graph_t *g;
    psg_endpoint_t x, img, mm, conv;
} net_t;

/* x [?, 8] · w [8, 4]; img [?, 5, 5, 3] conv f [3, 3, 3, 2], SAME: y [?, 5, 5, 2]. */
static void net_build(net_t *n) {
    n->g = psg_graph_new();
    psg_graph_t *g = n->g;
    n->x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){2, {-1, 8}});
    n->img = psg_placeholder(g, "img", PSG_DT_F32, &(psg_shape_t){4, {-1, 5, 5, 3}});
    psg_shape_t ws = psg_shape_2d(8, 4);
    psg_tensor_t *w = psg_tensor_zeros(PSG_DT_F32, &ws);
    psg_shape_t fs = {4, {3, 3, 3, 2}};
    psg_tensor_t *f = psg_tensor_zeros(PSG_DT_F32, &fs);
    n->mm = psg_matmul(g, "mm", n->x, psg_const(g, "w", &w), false, false);
    n->conv = psg_conv2d(g, "conv", n->img, psg_const(g, "f", &f), 1, 1, PSG_PADDING_SAME);
    PSG_ASSERT(psg_graph_status(g) == 0);
}

static void test_flops(void) {
    net_t n;
    net_build(&n);
    const psg_node_t *mm = psg_graph_node(n.g, n.mm.node), *conv = psg_graph_node(n.g, n.conv.node);
    CHECK(psg_node_flops(n.g, mm, 4) == 2.0 * 4 * 4 * 8);
    CHECK(psg_node_flops(n.g, conv, 4) == 2.0 * (4 * 5 * 5 * 2) * 3 * 3 * 3);
    /* the batch not given: not known */
    CHECK(psg_node_flops(n.g, conv, -1) == 0);
    CHECK(psg_node_flops(n.g, psg_graph_node(n.g, n.x.node), 4) == 0);
    psg_graph_destroy(&n.g);
}

static void test_session_steps(void) {
    net_t n;
    net_build(&n);
    psg_session_options_t so = {.num_threads = 1};
    psg_session_t *s = psg_session_new(n.g, &so, NULL);
    PSG_ASSERT(s);
    psg_op_profile_t *p = psg_op_profile_new();
    PSG_ASSERT(p);
    psg_session_set_node_hook(s, psg_op_profile_node_hook, p);
    psg_endpoint_t feeds[2] = {n.x, n.img}, fetches[2] = {n.mm, n.conv};
    psg_callable_t *c = psg_session_make_callable(s, 2, feeds, 2, fetches, 0, NULL);
    PSG_ASSERT(c);
    psg_shape_t xs = psg_shape_2d(4, 8), is = {4, {4, 5, 5, 3}};
    psg_tensor_t *fv[2] = {psg_tensor_zeros(PSG_DT_F32, &xs), psg_tensor_zeros(PSG_DT_F32, &is)};
    for (int step = 0; step < 3; step++) {
        psg_tensor_t *out[2] = {0};
        CHECK(psg_callable_run(c, fv, out) == 0);
        psg_tensor_destroy(&out[0]);
        psg_tensor_destroy(&out[1]);
    }
    psg_op_profile_row_t *rows = NULL;
    int m = psg_op_profile_rows(p, n.g, 4, &rows);
    CHECK(m >= 2);
    int seen = 0;
    for (int i = 0; i < m; i++) {
        if (i > 0) CHECK(rows[i - 1].ms >= rows[i].ms); /* most time first */
        if (!strcmp(rows[i].op, "MatMul")) {
            CHECK(rows[i].nodes == 1 && rows[i].runs == 3 && rows[i].ms > 0);
            CHECK(fabs(rows[i].gflop - 3 * 2.0 * 4 * 4 * 8 * 1e-9) < 1e-15);
            seen++;
        }
        if (!strcmp(rows[i].op, "Conv2D")) {
            CHECK(rows[i].nodes == 1 && rows[i].runs == 3 && rows[i].ms > 0);
            CHECK(fabs(rows[i].gflop - 3 * 2.0 * 200 * 27 * 1e-9) < 1e-15);
            seen++;
        }
    }
    CHECK(seen == 2);
    free(rows);
    /* the JSON lines: one an op type, then the total, per step */
    char path[] = "/tmp/psg_op_profile_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    PSG_ASSERT(f);
    CHECK(psg_op_profile_write_json(p, n.g, 4, 3, 30.0, f) == 0);
    fclose(f);
    char cmd[1024];
    snprintf(
        cmd, sizeof cmd,
        "python3 -c 'import json, sys\n"
        "rows = [json.loads(l) for l in open(\"%s\")]\n"
        "by = {r[\"op_profile\"]: r for r in rows}\n"
        "assert rows[-1][\"op_profile\"] == \"total\"\n"
        "assert by[\"MatMul\"][\"runs_per_step\"] == 1 and abs(by[\"Conv2D\"][\"gflop_per_step\"] - 1.08e-5) < 1e-6\n"
        "assert by[\"total\"][\"step_ms\"] == 10\n"
        "assert abs(sum(r[\"ms_per_step\"] for r in rows[:-1]) - by[\"total\"][\"ms_per_step\"]) < 1e-2\n"
        "print(\"op profile json: %%d op types\" %% (len(rows) - 1))'",
        path);
    fflush(stdout);
    CHECK(system(cmd) == 0);
    unlink(path);
    psg_tensor_destroy(&fv[0]);
    psg_tensor_destroy(&fv[1]);
    psg_callable_destroy(&c);
    psg_op_profile_destroy(&p);
    psg_session_destroy(&s);
    psg_graph_destroy(&n.g);
}

int main(void) {
    RUN_TEST(test_flops);
    RUN_TEST(test_session_steps);
    return psg_test_summary();
}
