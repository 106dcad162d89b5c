/* Device names, the replica device setter, partitioned variables and the
 * placement pass. */
#include "tests/testutil.h"

static const char *dev_of(const psg_graph_t *g, psg_endpoint_t e) {
    return psg_node_device(psg_graph_node(g, e.node));
}

static const char *assigned(const psg_graph_t *g, const char *name) {
    int id = psg_graph_find(g, name);
    return id < 0 ? "(missing)" : psg_node_assigned_device(psg_graph_node(g, id));
}

static void check_canonical(const char *in, const char *want) {
    char buf[PSG_DEVICE_NAME_MAX];
    int rc = psg_device_name_canonical(in, buf, sizeof buf);
    CHECK(rc == 0);
    if (rc == 0 && strcmp(buf, want))
        fprintf(stderr, "canonical('%s') = '%s', want '%s'\n", in, buf, want);
    CHECK(rc == 0 && !strcmp(buf, want));
}

static void check_bad(const char *in, const char *why) {
    psg_device_name_t d;
    CHECK(psg_device_name_parse(in, &d) < 0);
    char quoted[200];
    snprintf(quoted, sizeof quoted, "invalid device name '%s'", in);
    CHECK_ERROR_HAS(quoted);
    CHECK_ERROR_HAS(why);
}

static void test_device_names(void) {
    psg_device_name_t d;
    CHECK(psg_device_name_parse("/job:ps/task:0/cpu:0", &d) == 0);
    CHECK(d.has_job && !strcmp(d.job, "ps") && d.has_task && d.task == 0 && !d.has_replica);
    CHECK(d.has_type && !strcmp(d.type, "CPU") && d.has_id && d.id == 0);
    CHECK(psg_device_name_parse("/job:worker/replica:0/task:1/device:GPU:0", &d) == 0);
    CHECK(psg_device_name_is_complete(&d) && d.task == 1 && !strcmp(d.type, "GPU"));
    check_canonical("/job:ps/task:0/cpu:0", "/job:ps/task:0/device:CPU:0");
    check_canonical("/job:worker/replica:0/task:1/device:GPU:0",
                    "/job:worker/replica:0/task:1/device:GPU:0");
    check_canonical("/job:ps", "/job:ps");
    check_canonical("/cpu:0", "/device:CPU:0");
    check_canonical("/gpu:1", "/device:GPU:1");
    check_canonical("/GPU:1", "/device:GPU:1");
    check_canonical("/task:3/job:ps", "/job:ps/task:3");
    check_canonical("/job:ps/device:CPU:*", "/job:ps/device:CPU:*");
    check_canonical("", "");
    check_bad("/job:ps/tsk:0", "unknown field 'tsk'");
    check_bad("/job:ps/task:x", "bad task index 'x'");
    check_bad("job:ps", "expected '/'");
    check_bad("/job:ps/task:0/task:1", "given twice");
    check_bad("/device:GPU", "needs TYPE:INDEX");
    check_bad("/job:/task:0", "bad job name ''");
    check_bad("/job:ps//task:0", "empty part");
    check_bad("/job:ps/cpu:-1", "bad device index '-1'");
    check_bad("/job:ps/", "empty part");

    char buf[PSG_DEVICE_NAME_MAX];
    CHECK(psg_device_name_merge_str("/job:ps/task:1", "/cpu:0", buf, sizeof buf) == 0);
    CHECK(!strcmp(buf, "/job:ps/task:1/device:CPU:0"));
    CHECK(psg_device_name_merge_str("/job:ps/task:1", "/task:3", buf, sizeof buf) == 0);
    CHECK(!strcmp(buf, "/job:ps/task:3"));
    CHECK(psg_device_name_merge_str("/job:ps", "/job:bad!", buf, sizeof buf) < 0);
    CHECK_ERROR_HAS("'/job:bad!'");
    psg_device_name_t a, b;
    psg_device_name_parse("/job:ps/task:1", &a);
    psg_device_name_parse("/job:ps/cpu:0", &b);
    CHECK(psg_device_name_compatible(&a, &b));
    psg_device_name_parse("/job:ps/task:2", &b);
    CHECK(!psg_device_name_compatible(&a, &b));
    psg_device_name_parse("/job:ps/replica:0/task:1/gpu:0", &a);
    psg_device_name_parse("/job:ps/replica:0/task:1/cpu:0", &b);
    CHECK(psg_device_name_same_task(&a, &b));
    CHECK(!strcmp(psg_device_name_task_str(&a, buf, sizeof buf), "/job:ps/replica:0/task:1"));
}

/* Nested device specs merge as nested tf.device: the inner fills in or overrides. */
static void test_device_stack(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(2);
    psg_graph_push_device(g, "/job:ps");
    psg_graph_push_device(g, "/task:2");
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, "/job:ps/task:0");
    psg_graph_push_device(g, "/gpu:0");
    psg_endpoint_t y = psg_identity(g, "y", x);
    psg_graph_pop_device(g);
    psg_graph_pop_device(g);
    psg_endpoint_t z = psg_identity(g, "z", x);
    psg_graph_pop_device(g);
    psg_node_builder_t *b = psg_node_begin(g, "Identity", "explicit");
    psg_node_add_input(b, x);
    psg_node_set_device(b, "/cpu:0");
    psg_graph_push_device(g, "/job:worker/task:1");
    int e = psg_node_finish(b);
    psg_graph_pop_device(g);
    CHECK(!strcmp(dev_of(g, x), "/job:ps/task:2"));
    CHECK(!strcmp(dev_of(g, y), "/job:ps/task:0/device:GPU:0"));
    CHECK(!strcmp(dev_of(g, z), "/job:ps"));
    CHECK(e >= 0 &&
          !strcmp(psg_node_device(psg_graph_node(g, e)), "/job:worker/task:1/device:CPU:0"));
    psg_graph_destroy(&g);
}

/* Variables of 400, 200, 120, 40, 240 and 20 bytes over 3 ps tasks. */
static void build_sized_vars(psg_graph_t *g, psg_endpoint_t *v) {
    static const int64_t floats[6] = {100, 50, 30, 10, 60, 5};
    static const char *names[6] = {"a", "b", "c", "d", "e", "f"};
    for (int i = 0; i < 6; i++) {
        psg_shape_t s = psg_shape_1d(floats[i]);
        v[i] = psg_variable(g, names[i], PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    }
}

static void check_tasks(const psg_graph_t *g, const psg_endpoint_t *v, const int *want, int n) {
    for (int i = 0; i < n; i++) {
        char expect[64];
        snprintf(expect, sizeof expect, "/job:ps/task:%d", want[i]);
        if (strcmp(dev_of(g, v[i]), expect))
            fprintf(stderr, "variable %d on '%s', want '%s'\n", i, dev_of(g, v[i]), expect);
        CHECK(!strcmp(dev_of(g, v[i]), expect));
    }
}

static void test_setter_strategies(void) {
    /* greedy: a->0; b->1; c->2; d->2 (120 < 200); e->2 (160 < 200); f->1 (200 < 400) */
    psg_replica_setter_options_t opt = {.ps_tasks = 3, .worker_device = "/job:worker/task:1"};
    psg_replica_setter_t *s = psg_replica_setter_new(&opt);
    psg_graph_t *g = psg_graph_new();
    psg_graph_push_replica_setter(g, s);
    psg_endpoint_t v[6];
    build_sized_vars(g, v);
    psg_shape_t sh = psg_shape_1d(100);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &sh);
    psg_endpoint_t r = psg_read_variable(g, "a_read", v[0]);
    int upd = psg_assign_add(g, "a_update", v[0], x);
    /* a slot of a: beside a, its bytes counted on ps 0 */
    psg_endpoint_t slot =
        psg_variable(g, "a/Momentum", PSG_DT_F32, &sh, (psg_initializer_t){"zeros", 0, 0}, false);
    psg_graph_pop_device(g);
    int want_greedy[6] = {0, 1, 2, 2, 2, 1};
    check_tasks(g, v, want_greedy, 6);
    CHECK(psg_replica_setter_ps_bytes(s, 0) == 800);
    CHECK(psg_replica_setter_ps_bytes(s, 1) == 220);
    CHECK(psg_replica_setter_ps_bytes(s, 2) == 400);
    CHECK(!strcmp(dev_of(g, slot), "/job:ps/task:0"));
    CHECK(!strcmp(dev_of(g, x), "/job:worker/task:1"));
    CHECK(!strcmp(dev_of(g, r), "/job:ps/task:0"));
    CHECK(upd >= 0 && !strcmp(psg_node_device(psg_graph_node(g, upd)), "/job:ps/task:0"));
    /* the initializer sits with its variable */
    CHECK(!strcmp(psg_node_device(psg_graph_node(g, psg_graph_find(g, "e/initial_value"))),
                  "/job:ps/task:2"));
    CHECK(!strcmp(psg_node_device(psg_graph_node(g, psg_graph_find(g, "a/Momentum/init"))),
                  "/job:ps/task:0"));
    psg_placement_options_t popt = {.default_device = "/job:worker/replica:0/task:1/device:CPU:0"};
    CHECK(psg_place(g, &popt) == 0);
    CHECK(!strcmp(assigned(g, "a"), "/job:ps/replica:0/task:0/device:CPU:0"));
    CHECK(!strcmp(assigned(g, "a_read"), "/job:ps/replica:0/task:0/device:CPU:0"));
    CHECK(!strcmp(assigned(g, "a/Momentum"), "/job:ps/replica:0/task:0/device:CPU:0"));
    CHECK(!strcmp(assigned(g, "f"), "/job:ps/replica:0/task:1/device:CPU:0"));
    CHECK(!strcmp(assigned(g, "x"), "/job:worker/replica:0/task:1/device:CPU:0"));
    psg_graph_destroy(&g);
    psg_replica_setter_destroy(&s);
    CHECK(s == NULL);

    opt.strategy = PSG_PS_ROUND_ROBIN;
    s = psg_replica_setter_new(&opt);
    g = psg_graph_new();
    psg_graph_push_replica_setter(g, s);
    build_sized_vars(g, v);
    /* an explicit task wins and takes no turn */
    psg_graph_push_device(g, "/job:ps/task:2");
    psg_endpoint_t pinned =
        psg_variable(g, "pinned", PSG_DT_F32, &sh, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_graph_pop_device(g);
    psg_endpoint_t after =
        psg_variable(g, "after", PSG_DT_F32, &sh, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_graph_pop_device(g);
    int want_rr[6] = {0, 1, 2, 0, 1, 2};
    check_tasks(g, v, want_rr, 6);
    CHECK(!strcmp(dev_of(g, pinned), "/job:ps/task:2"));
    CHECK(!strcmp(dev_of(g, after), "/job:ps/task:0"));
    psg_graph_destroy(&g);
    psg_replica_setter_destroy(&s);

    /* no ps: everything on the worker */
    opt = (psg_replica_setter_options_t){.ps_tasks = 0};
    s = psg_replica_setter_new(&opt);
    g = psg_graph_new();
    psg_graph_push_replica_setter(g, s);
    build_sized_vars(g, v);
    psg_graph_pop_device(g);
    CHECK(!strcmp(dev_of(g, v[3]), "/job:worker"));
    psg_graph_destroy(&g);
    psg_replica_setter_destroy(&s);

    opt = (psg_replica_setter_options_t){.ps_tasks = 1, .ps_device = "/job:ps/tusk:0"};
    CHECK(psg_replica_setter_new(&opt) == NULL);
    CHECK_ERROR_HAS("replica device setter: invalid device name '/job:ps/tusk:0'");
}

/* A GPU tower's device function inside the replica setter, as a GPU worker's towers
 * (worker/towers.c): variables on "/device:CPU:0", other ops on the GPU. */
static const char *gpu_tower_fn(void *ctx, const psg_graph_t *g, const psg_node_t *n) {
    (void)ctx;
    (void)g;
    if (psg_node_device(n)[0]) return NULL;
    return psg_node_def(n)->flags & PSG_OP_VARIABLE ? "/device:CPU:0" : "/device:GPU:0";
}

/* A variable's initial value stays on the variable's ps device, not the GPU the tower's
 * scope names (found on an H100: 'beta/initial_value' went to the ps's GPU 0). */
static void test_setter_under_a_gpu_tower(void) {
    psg_replica_setter_options_t opt = {.ps_tasks = 1, .worker_device = "/job:worker/task:0"};
    psg_replica_setter_t *s = psg_replica_setter_new(&opt);
    psg_graph_t *g = psg_graph_new();
    psg_graph_push_replica_setter(g, s);
    psg_graph_push_device_fn(g, gpu_tower_fn, NULL);
    psg_shape_t sh = psg_shape_1d(4);
    psg_endpoint_t beta =
        psg_variable(g, "beta", PSG_DT_F32, &sh, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    psg_graph_pop_device(g);
    CHECK(!strcmp(dev_of(g, beta), "/job:ps/task:0/device:CPU:0"));
    CHECK(!strcmp(psg_node_device(psg_graph_node(g, psg_graph_find(g, "beta/initial_value"))),
                  "/job:ps/task:0/device:CPU:0"));
    CHECK(!strcmp(dev_of(g, x), "/job:worker/task:0/device:GPU:0"));
    psg_graph_destroy(&g);
    psg_replica_setter_destroy(&s);
}

/* Variables past 2^48 bytes (2^62 here, or a size that overflows) count as 2^48 each: greedy
 * still spreads them, and the sums stay exact. */
static void test_setter_huge_variables(void) {
    psg_replica_setter_options_t opt = {.ps_tasks = 2};
    psg_replica_setter_t *s = psg_replica_setter_new(&opt);
    psg_graph_t *g = psg_graph_new();
    psg_graph_push_replica_setter(g, s);
    psg_shape_t huge = psg_shape_2d((int64_t)1 << 30, (int64_t)1 << 30),
                overflow = psg_shape_2d((int64_t)1 << 40, (int64_t)1 << 22),
                small = psg_shape_1d(4);
    psg_endpoint_t v[3] = {
        psg_variable(g, "huge", PSG_DT_F32, &huge, (psg_initializer_t){"zeros", 0, 0}, true),
        psg_variable(g, "overflow", PSG_DT_F32, &overflow, (psg_initializer_t){"zeros", 0, 0},
                     true),
        psg_variable(g, "small", PSG_DT_F32, &small, (psg_initializer_t){"zeros", 0, 0}, true),
    };
    psg_graph_pop_device(g);
    int want[3] = {0, 1, 0};
    check_tasks(g, v, want, 3);
    CHECK(psg_replica_setter_ps_bytes(s, 0) == ((int64_t)1 << 48) + 16);
    CHECK(psg_replica_setter_ps_bytes(s, 1) == (int64_t)1 << 48);
    psg_graph_destroy(&g);
    psg_replica_setter_destroy(&s);
}

static void test_partitioned_variable(void) {
    psg_replica_setter_options_t opt = {.ps_tasks = 2};
    psg_replica_setter_t *s = psg_replica_setter_new(&opt);
    psg_graph_t *g = psg_graph_new();
    psg_graph_push_replica_setter(g, s);
    psg_partitioned_var_t pv;
    psg_shape_t full = psg_shape_2d(5, 2);
    psg_partitioner_t two = {.num_shards = 2};
    CHECK(psg_partitioned_variable(g, "emb", PSG_DT_F32, &full,
                                   (psg_initializer_t){"uniform", 1.0, 3}, true, &two, &pv) == 0);
    psg_endpoint_t read = psg_partitioned_read(g, NULL, &pv);
    psg_endpoint_t gy = psg_placeholder(g, "gy", PSG_DT_F32, &full);
    psg_endpoint_t grads[2];
    CHECK(psg_gradients(g, 1, &read, &gy, 2, pv.shards, grads) == 0);
    psg_graph_pop_device(g);
    CHECK(pv.num_shards == 2 && pv.offsets[0] == 0 && pv.offsets[1] == 3 && pv.offsets[2] == 5);
    CHECK(!strcmp(psg_node_name(psg_graph_node(g, pv.shards[1].node)), "emb/part_1"));
    CHECK(!strcmp(dev_of(g, pv.shards[0]), "/job:ps/task:0"));
    CHECK(!strcmp(dev_of(g, pv.shards[1]), "/job:ps/task:1"));
    CHECK(!strcmp(psg_node_device(psg_graph_node(g, psg_graph_find(g, "emb/part_1/read"))),
                  "/job:ps/task:1"));
    CHECK(!strcmp(dev_of(g, read), "/job:worker"));
    CHECK(psg_graph_shape(g, read)->dims[0] == 5);
    CHECK(psg_place(g, NULL) == 0);

    psg_session_t *sess = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(sess) == 0);
    float gv[10];
    for (int i = 0; i < 10; i++) gv[i] = (float)(i + 1);
    psg_tensor_t *gt = psg_test_tensor(&full, gv);
    psg_endpoint_t fetch[3] = {grads[0], grads[1], read};
    psg_tensor_t *out[3] = {0};
    CHECK(psg_session_run(sess, 1, &gy, &gt, 3, fetch, out, 0, NULL) == 0);
    if (out[0] && out[1] && out[2]) {
        CHECK(out[0]->shape.dims[0] == 3 && out[1]->shape.dims[0] == 2);
        for (int i = 0; i < 6; i++) CHECK(psg_tensor_f32(out[0])[i] == gv[i]);
        for (int i = 0; i < 4; i++) CHECK(psg_tensor_f32(out[1])[i] == gv[6 + i]);
        /* the read is the shards, stacked */
        psg_variable_t *p0 = psg_resource_find_variable(psg_session_resources(sess), "emb/part_0");
        psg_variable_t *p1 = psg_resource_find_variable(psg_session_resources(sess), "emb/part_1");
        CHECK(p0 && p1);
        for (int i = 0; p0 && p1 && i < 10; i++)
            CHECK(psg_tensor_f32(out[2])[i] ==
                  (i < 6 ? psg_tensor_f32(p0->value)[i] : psg_tensor_f32(p1->value)[i - 6]));
    }
    for (int i = 0; i < 3; i++) psg_tensor_destroy(&out[i]);
    psg_tensor_destroy(&gt);
    psg_session_destroy(&sess);

    /* by size: 160 bytes in shards of at least 48 -> 3 shards of 4, 3, 3 rows */
    psg_shape_t tall = psg_shape_2d(10, 4);
    psg_partitioner_t by_size = {.min_shard_bytes = 48};
    CHECK(psg_partitioned_variable(g, "tall", PSG_DT_F32, &tall, (psg_initializer_t){"zeros", 0, 0},
                                   true, &by_size, &pv) == 0);
    CHECK(pv.num_shards == 3 && pv.offsets[1] == 4 && pv.offsets[2] == 7 && pv.offsets[3] == 10);
    by_size.max_shards = 2;
    CHECK(psg_partitioned_variable(g, "capped", PSG_DT_F32, &tall,
                                   (psg_initializer_t){"zeros", 0, 0}, true, &by_size, &pv) == 0);
    CHECK(pv.num_shards == 2);
    psg_partitioner_t none = {0};
    CHECK(psg_partitioned_variable(g, "none", PSG_DT_F32, &tall, (psg_initializer_t){"zeros", 0, 0},
                                   true, &none, &pv) < 0);
    CHECK_ERROR_HAS("partitioned variable 'none'");
    /* the edges: one row (one shard, whatever is asked), no bytes at all, PSG_MAX_SHARDS
     * shards and one more */
    psg_shape_t one_row = psg_shape_2d(1, 4), empty = psg_shape_2d(5, 0),
                many = psg_shape_2d(100, 1);
    CHECK(psg_partitioned_variable(g, "one_row", PSG_DT_F32, &one_row,
                                   (psg_initializer_t){"zeros", 0, 0}, true, &two, &pv) == 0 &&
          pv.num_shards == 1);
    CHECK(psg_partitioned_variable(g, "empty", PSG_DT_F32, &empty,
                                   (psg_initializer_t){"zeros", 0, 0}, true, &by_size, &pv) == 0 &&
          pv.num_shards == 1 && pv.offsets[1] == 5);
    psg_partitioner_t max = {.num_shards = PSG_MAX_SHARDS};
    CHECK(psg_partitioned_variable(g, "max", PSG_DT_F32, &many, (psg_initializer_t){"zeros", 0, 0},
                                   true, &max, &pv) == 0 &&
          pv.num_shards == PSG_MAX_SHARDS);
    max.num_shards++;
    CHECK(psg_partitioned_variable(g, "over", PSG_DT_F32, &many, (psg_initializer_t){"zeros", 0, 0},
                                   true, &max, &pv) < 0);
    CHECK_ERROR_HAS("partitioned variable 'over': 65 shards, at most 64");
    psg_graph_destroy(&g);
    psg_replica_setter_destroy(&s);
}

static void test_placement_errors(void) {
    psg_shape_t sh = psg_shape_1d(4);
    psg_graph_t *g = psg_graph_new();
    psg_graph_push_device(g, "/job:ps/task:0");
    psg_endpoint_t v = psg_var_handle(g, "v", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, "/job:worker/task:0");
    psg_read_variable(g, "r", v);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, NULL) < 0);
    CHECK_ERROR_HAS(
        "node 'r' (ReadVariable) uses the resource of 'v' (VarHandle) and must sit beside it");
    CHECK_ERROR_HAS("/job:worker/task:0");
    psg_graph_destroy(&g);

    g = psg_graph_new();
    psg_graph_push_device(g, "/job:ps/tsk:1");
    psg_placeholder(g, "p", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, NULL) < 0);
    CHECK_ERROR_HAS("node 'p' (Placeholder): invalid device name '/job:ps/tsk:1'");
    psg_graph_destroy(&g);

    psg_job_spec_t jobs[2] = {{"ps", 2, 0}, {"worker", 1, 1}};
    psg_placement_options_t opt = {
        .default_device = "/job:worker/task:0", .num_jobs = 2, .jobs = jobs};
    g = psg_graph_new();
    psg_graph_push_device(g, "/job:ps/task:5");
    psg_var_handle(g, "far", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, &opt) < 0);
    CHECK_ERROR_HAS(
        "node 'far' (VarHandle): device '/job:ps/replica:0/task:5/device:CPU:0' does not exist: job 'ps' has 2 tasks");
    psg_graph_destroy(&g);
    /* ... in a cluster of one job, of one task: checked too, and said in the singular */
    psg_job_spec_t alone[1] = {{"worker", 1, 0}};
    psg_placement_options_t one = {
        .default_device = "/job:worker/task:0", .num_jobs = 1, .jobs = alone};
    g = psg_graph_new();
    psg_graph_push_device(g, "/job:worker/task:1");
    psg_placeholder(g, "next", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, &one) < 0);
    CHECK(!strcmp(psg_error_message(), "node 'next' (Placeholder): device "
                                       "'/job:worker/replica:0/task:1/device:CPU:0' does not "
                                       "exist: job 'worker' has 1 task"));
    psg_graph_destroy(&g);

    g = psg_graph_new();
    psg_graph_push_device(g, "/job:chief");
    psg_placeholder(g, "c", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, &opt) < 0);
    CHECK_ERROR_HAS("names job 'chief', which the cluster does not have");
    psg_graph_destroy(&g);

    g = psg_graph_new();
    psg_placeholder(g, "x", PSG_DT_F32, &sh);
    psg_graph_push_device(g, "/gpu:0");
    /* Random has no GPU kernel in any build (AddN has one with CUDA) */
    psg_node_builder_t *rb = psg_node_begin(g, "Random", "sum");
    psg_node_attr_str(rb, "distribution", "uniform");
    psg_node_attr_shape(rb, "shape", &sh);
    psg_node_finish(rb);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, &opt) < 0);
    CHECK_ERROR_HAS("node 'sum' (Random): no GPU kernel for this op");
    opt.allow_soft_placement = true;
    CHECK(psg_place(g, &opt) == 0);
    CHECK(!strcmp(assigned(g, "sum"), "/job:worker/replica:0/task:0/device:CPU:0"));
    CHECK(!strcmp(assigned(g, "x"), "/job:worker/replica:0/task:0/device:CPU:0"));
    psg_graph_destroy(&g);

    /* a GPU the task does not have, named with the task's count (without the CUDA backend,
     * no op has a GPU kernel: that comes first) */
    g = psg_graph_new();
    psg_graph_push_device(g, "/job:worker/task:0/device:GPU:1");
    psg_placeholder(g, "g1", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    opt.allow_soft_placement = false;
    CHECK(psg_place(g, &opt) < 0);
#ifdef PSG_HAVE_CUDA
    CHECK_ERROR_HAS(
        "node 'g1' (Placeholder): device '/job:worker/replica:0/task:0/device:GPU:1' does not exist: "
        "job 'worker' has 1 GPU per task");
#else
    CHECK_ERROR_HAS("node 'g1' (Placeholder): no GPU kernel for this op");
#endif
    psg_graph_destroy(&g);

    /* the ps memory limit: the graph's first node a variable over it; a variable at the limit
     * with a read beside it (not a variable: not counted) fits */
    psg_placement_options_t mem = {
        .default_device = "/job:worker/task:0", .num_jobs = 2, .jobs = jobs, .ps_memory_limit = 16};
    g = psg_graph_new();
    psg_graph_push_device(g, "/job:ps/task:1");
    psg_var_handle(g, "big", PSG_DT_F32, &(psg_shape_t){1, {5}});
    psg_graph_pop_device(g);
    CHECK(psg_place(g, &mem) < 0);
    CHECK_ERROR_HAS(
        "variable 'big' (20 bytes) does not fit on /job:ps/task:1: its variables would take 20 bytes, "
        "over the ps memory limit of 16 bytes a task (2 ps tasks, 20 bytes of variables in all)");
    psg_graph_destroy(&g);
    g = psg_graph_new();
    psg_graph_push_device(g, "/job:ps/task:0");
    v = psg_var_handle(g, "fits", PSG_DT_F32, &sh);
    psg_read_variable(g, "fits_read", v);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, &mem) == 0);
    psg_graph_destroy(&g);
}

/* What a node gets when it does not say: a default device without a task is task 0; a group
 * takes what any member asks for. */
static void test_placement_defaults(void) {
    psg_shape_t sh = psg_shape_1d(4);
    /* a default device without a task: task 0 */
    psg_graph_t *g = psg_graph_new();
    psg_placeholder(g, "anywhere", PSG_DT_F32, &sh);
    psg_placement_options_t no_task = {.default_device = "/job:worker"};
    CHECK(psg_place(g, &no_task) == 0);
    CHECK(!strcmp(assigned(g, "anywhere"), "/job:worker/replica:0/task:0/device:CPU:0"));
    psg_graph_destroy(&g);

    /* a group takes what any member asks for */
    g = psg_graph_new();
    psg_endpoint_t v = psg_var_handle(g, "v", PSG_DT_F32, &sh);
    psg_graph_push_device(g, "/job:ps/task:1");
    psg_read_variable(g, "r", v);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, NULL) == 0);
    CHECK(!strcmp(assigned(g, "v"), "/job:ps/replica:0/task:1/device:CPU:0"));
    psg_graph_destroy(&g);
}

/* The edges: the task one past the last, a default device without a job, and which member a
 * conflict names. */
static void test_placement_edges(void) {
    psg_shape_t sh = psg_shape_1d(4);
    psg_job_spec_t jobs[2] = {{"ps", 2, 0}, {"worker", 1, 1}};
    psg_placement_options_t opt = {
        .default_device = "/job:worker/task:0", .num_jobs = 2, .jobs = jobs};
    psg_graph_t *g;
    psg_endpoint_t v;

    /* the task one past the last (tasks count from 0): refused too; the last one is there */
    g = psg_graph_new();
    psg_graph_push_device(g, "/job:ps/task:2");
    psg_var_handle(g, "next", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, &opt) < 0);
    CHECK_ERROR_HAS("node 'next' (VarHandle): device '/job:ps/replica:0/task:2/device:CPU:0' "
                    "does not exist: job 'ps' has 2 tasks");
    psg_graph_destroy(&g);
    g = psg_graph_new();
    psg_graph_push_device(g, "/job:ps/task:1");
    psg_var_handle(g, "last", PSG_DT_F32, &sh);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, &opt) == 0);
    CHECK(!strcmp(assigned(g, "last"), "/job:ps/replica:0/task:1/device:CPU:0"));
    psg_graph_destroy(&g);

    /* a default device without a job (a bare device type): the local job */
    g = psg_graph_new();
    psg_placeholder(g, "local", PSG_DT_F32, &sh);
    psg_placement_options_t no_job = {.default_device = "/device:CPU:0"};
    CHECK(psg_place(g, &no_job) == 0);
    CHECK(!strcmp(assigned(g, "local"), "/job:localhost/replica:0/task:0/device:CPU:0"));
    psg_graph_destroy(&g);

    /* two asks that differ name the member that asked first (the variable), not a later one
     * that agreed with it */
    g = psg_graph_new();
    psg_graph_push_device(g, "/job:ps/task:0");
    v = psg_var_handle(g, "v", PSG_DT_F32, &sh);
    psg_read_variable(g, "agrees", v);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, "/job:worker/task:0");
    psg_read_variable(g, "differs", v);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, NULL) < 0);
    CHECK_ERROR_HAS("node 'differs' (ReadVariable) uses the resource of 'v' (VarHandle) and must "
                    "sit beside it, but asks for '/job:worker/task:0' while 'v' asks for "
                    "'/job:ps/task:0'");
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_device_names);
    RUN_TEST(test_device_stack);
    RUN_TEST(test_setter_strategies);
    RUN_TEST(test_setter_under_a_gpu_tower);
    RUN_TEST(test_setter_huge_variables);
    RUN_TEST(test_partitioned_variable);
    RUN_TEST(test_placement_errors);
    RUN_TEST(test_placement_defaults);
    RUN_TEST(test_placement_edges);
    return psg_test_summary();
}
