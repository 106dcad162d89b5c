/* Partitioning a placed graph and running the pieces in one process, each
 * on its own thread, through one rendezvous: the same values as the whole
 * graph; the rendezvous itself; Recv timeouts and step aborts. */
#include "runtime/executor.h"
#include "runtime/partition.h"
#include "psgraph/clock.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* ---- running a partition set in this process ---- */

#define MAX_TASKS 8

typedef struct {
    char task[PSG_DEVICE_NAME_MAX];
    psg_resource_mgr_t *rm;
} task_state_t;

typedef struct {
    task_state_t tasks[MAX_TASKS];
    int num_tasks;
} fake_cluster_t;

static psg_resource_mgr_t *task_rm(fake_cluster_t *c, const char *task) {
    for (int i = 0; i < c->num_tasks; i++)
        if (!strcmp(c->tasks[i].task, task)) return c->tasks[i].rm;
    PSG_ASSERT(c->num_tasks < MAX_TASKS);
    task_state_t *t = &c->tasks[c->num_tasks++];
    snprintf(t->task, sizeof t->task, "%s", task);
    t->rm = psg_resource_mgr_new();
    return t->rm;
}

static void fake_cluster_free(fake_cluster_t *c) {
    for (int i = 0; i < c->num_tasks; i++) psg_resource_mgr_destroy(&c->tasks[i].rm);
    c->num_tasks = 0;
}

typedef struct {
    psg_plan_t *plan;
    psg_run_env_t env;
    psg_tensor_t *feeds[8];
    psg_tensor_t *fetched[8];
    int rc;
    char error[1024];
} part_run_t;

static void *part_main(void *arg) {
    part_run_t *r = arg;
    r->rc = psg_plan_run_with(r->plan, &r->env, r->feeds, r->fetched);
    if (r->rc < 0) snprintf(r->error, sizeof r->error, "%s", psg_error_message());
    return NULL;
}

/* Runs every partition of set (only: those listed in `only` when not NULL)
 * for step `step` on its own thread; fetched[i] gets the step's fetch i.
 * threads: the executor threads of each partition (1: no pool). */
static int run_set(psg_partition_set_t *set, fake_cluster_t *cl, psg_rendezvous_t *rv, int64_t step,
                   psg_tensor_t *const *feeds, psg_tensor_t **fetched, int threads,
                   const bool *only) {
    int np = set->num_partitions, rc = 0;
    part_run_t *runs = calloc((size_t)np, sizeof *runs);
    pthread_t *th = calloc((size_t)np, sizeof *th);
    psg_threadpool_t **pools = calloc((size_t)np, sizeof *pools);
    char error[1024] = "";
    for (int k = 0; k < np; k++) {
        psg_partition_t *p = &set->partitions[k];
        if (only && !only[k]) continue;
        runs[k].plan = psg_plan_new(p->graph, p->num_feeds, p->feeds, p->num_fetches, p->fetches,
                                    p->num_targets, p->targets);
        if (!runs[k].plan) {
            rc = -1;
            snprintf(error, sizeof error, "%s", psg_error_message());
            continue;
        }
        if (threads > 1) pools[k] = psg_threadpool_new(threads);
        runs[k].env = (psg_run_env_t){
            .pool = pools[k], .rm = task_rm(cl, p->task), .step_id = step, .rendezvous = rv};
        for (int i = 0; i < p->num_feeds; i++) runs[k].feeds[i] = feeds[p->feed_index[i]];
    }
    bool started = rc == 0;
    for (int k = 0; started && k < np; k++)
        if (runs[k].plan) PSG_ASSERT(pthread_create(&th[k], NULL, part_main, &runs[k]) == 0);
    for (int k = 0; k < np; k++) {
        if (!runs[k].plan) continue;
        if (started) pthread_join(th[k], NULL);
        psg_partition_t *p = &set->partitions[k];
        if (runs[k].rc < 0 && !error[0]) snprintf(error, sizeof error, "%s", runs[k].error);
        if (runs[k].rc < 0) rc = -1;
        for (int i = 0; i < p->num_fetches; i++) fetched[p->fetch_index[i]] = runs[k].fetched[i];
        psg_plan_destroy(&runs[k].plan);
        psg_threadpool_destroy(&pools[k]);
    }
    psg_rendezvous_cleanup_step(rv, step);
    free(runs);
    free(th);
    free(pools);
    if (rc < 0) psg_error_set("%s", error);
    return rc;
}

/* Replaces each partition's graph by its serialized-and-read-back copy,
 * checking that the copy serializes to the same bytes. */
static void round_trip_partitions(psg_partition_set_t *set) {
    for (int k = 0; k < set->num_partitions; k++) {
        psg_partition_t *p = &set->partitions[k];
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        CHECK(psg_graph_serialize(p->graph, &a, &la) == 0);
        psg_graph_t *back = psg_graph_deserialize(a, la);
        CHECK(back != NULL);
        if (back) {
            CHECK(psg_graph_num_nodes(back) == psg_graph_num_nodes(p->graph));
            CHECK(psg_graph_serialize(back, &b, &lb) == 0);
            CHECK(la == lb && b && !memcmp(a, b, la));
            for (int i = 0; i < psg_graph_num_nodes(back); i++) {
                const psg_node_t *x = psg_graph_node(p->graph, i), *y = psg_graph_node(back, i);
                CHECK(!strcmp(psg_node_name(x), psg_node_name(y)) &&
                      !strcmp(psg_node_op(x), psg_node_op(y)));
                CHECK(!strcmp(psg_node_assigned_device(y), p->device));
            }
            psg_graph_destroy(&p->graph);
            p->graph = back;
        }
        free(a);
        free(b);
    }
}

/* ---- the model ---- */

typedef struct {
    psg_endpoint_t x;
    psg_endpoint_t fetches[5];
    int train;
} model_t;

static int assign_after(psg_graph_t *g, const char *op, const char *name, psg_endpoint_t h,
                        psg_endpoint_t v, int after) {
    psg_node_builder_t *b = psg_node_begin(g, op, name);
    psg_node_add_input(b, h);
    psg_node_add_input(b, v);
    psg_node_add_control(b, after);
    return psg_node_finish(b);
}

/* 2 ps + 1 worker: variables on the ps, the arithmetic on the worker,
 * updates back on the ps, ordered by control edges that cross devices. */
static psg_graph_t *build_model(model_t *m, psg_replica_setter_t *s) {
    psg_graph_t *g = psg_graph_new();
    psg_graph_push_replica_setter(g, s);
    psg_shape_t s23 = psg_shape_2d(2, 3), s6 = psg_shape_1d(6), s43 = psg_shape_2d(4, 3);
    m->x = psg_placeholder(g, "x", PSG_DT_F32, &s23);
    psg_endpoint_t w1 =
        psg_variable(g, "w1", PSG_DT_F32, &s23, (psg_initializer_t){"uniform", 1.0, 1}, true);
    psg_endpoint_t w2 =
        psg_variable(g, "w2", PSG_DT_F32, &s6, (psg_initializer_t){"normal", 1.0, 2}, true);
    psg_partitioned_var_t emb;
    psg_partitioned_variable(g, "emb", PSG_DT_F32, &s43, (psg_initializer_t){"uniform", 0.5, 3},
                             true, &(psg_partitioner_t){.num_shards = 2}, &emb);
    psg_endpoint_t r1 = psg_read_variable(g, "r1", w1);
    psg_endpoint_t three[3] = {m->x, r1, r1};
    psg_endpoint_t y = psg_add_n(g, "y", 3, three);
    psg_endpoint_t flat = psg_reshape(g, "flat", y, &s6);
    psg_endpoint_t r2 = psg_read_variable(g, "r2", w2);
    psg_endpoint_t two[2] = {flat, r2};
    psg_endpoint_t z = psg_add_n(g, "z", 2, two);
    psg_endpoint_t e = psg_partitioned_read(g, NULL, &emb);
    int upd1 = assign_after(g, "AssignAdd", "upd1", w1, m->x, y.node);
    int upd2 = psg_assign(g, "upd2", w2, z);
    int upd3 = assign_after(g, "AssignAdd", "upd3", emb.shards[1], m->x, e.node);
    psg_node_builder_t *b = psg_node_begin(g, "ReadVariable", "after2");
    psg_node_add_input(b, w2);
    psg_node_attr_dtype(b, "dtype", PSG_DT_F32);
    psg_node_add_control(b, upd2);
    psg_endpoint_t after2 = psg_node_finish_ep(b);
    psg_endpoint_t after2_w = psg_identity(g, "after2_w", after2);
    psg_graph_pop_device(g);
    /* the worker's copy must run on the worker though it reads a ps tensor */
    int ups[3] = {upd1, upd2, upd3};
    psg_graph_push_device(g, "/job:worker/task:0");
    m->train = psg_group(g, "train", 3, ups);
    psg_graph_pop_device(g);
    m->fetches[0] = flat;
    m->fetches[1] = z;
    m->fetches[2] = e;
    m->fetches[3] = after2;
    m->fetches[4] = after2_w;
    CHECK(psg_graph_error(g) == NULL);
    return g;
}

static int count_recvs_of(const psg_graph_t *g, const char *edge) {
    int n = 0;
    for (int i = 0; i < psg_graph_num_nodes(g); i++) {
        const psg_node_t *nd = psg_graph_node(g, i);
        if (!strcmp(psg_node_op(nd), "Recv") &&
            !strcmp(psg_node_get_str(nd, "tensor_name", ""), edge))
            n++;
    }
    return n;
}

static void compare_tensors(const psg_tensor_t *a, const psg_tensor_t *b) {
    CHECK(a && b);
    if (!a || !b) return;
    CHECK(a->dtype == b->dtype && psg_shape_equal(&a->shape, &b->shape));
    CHECK(psg_tensor_nbytes(a) == psg_tensor_nbytes(b) &&
          !memcmp(a->data, b->data, psg_tensor_nbytes(a)));
}

/* Compares every variable of the single-process run with its copy in the
 * fake cluster; returns how many copies there are (each must be on a ps). */
static int compare_variables(psg_resource_mgr_t *rref, const fake_cluster_t *cl) {
    int found = 0;
    for (int i = 0; i < psg_resource_num_variables(rref); i++) {
        psg_variable_t *v = psg_resource_variable_at(rref, i);
        for (int t = 0; t < cl->num_tasks; t++) {
            psg_variable_t *pv = psg_resource_find_variable(cl->tasks[t].rm, v->name);
            if (!pv) continue;
            found++;
            CHECK(strncmp(cl->tasks[t].task, "/job:ps/", 8) == 0);
            compare_tensors(pv->value, v->value);
        }
    }
    return found;
}

static void test_partitioned_model_matches(void) {
    psg_replica_setter_options_t so = {.ps_tasks = 2, .worker_device = "/job:worker/task:0"};
    psg_replica_setter_t *s = psg_replica_setter_new(&so);
    model_t m;
    psg_graph_t *g = build_model(&m, s);
    psg_placement_options_t po = {.default_device = "/job:worker/replica:0/task:0/device:CPU:0"};
    CHECK(psg_place(g, &po) == 0);
    const char *ps0 = "/job:ps/replica:0/task:0/device:CPU:0",
               *ps1 = "/job:ps/replica:0/task:1/device:CPU:0",
               *wk = "/job:worker/replica:0/task:0/device:CPU:0";

    /* the reference: the whole graph in one session */
    psg_session_t *ref = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(ref) == 0);

    int n_init;
    const int *init = psg_graph_collection(g, "init", &n_init);
    psg_partition_set_t *init_set = psg_partition_graph(g, 0, NULL, 0, NULL, n_init, init, NULL);
    psg_partition_set_t *set = psg_partition_graph(g, 1, &m.x, 5, m.fetches, 1, &m.train, NULL);
    CHECK(init_set && set);
    if (!init_set || !set) goto out;
    CHECK(init_set->num_partitions == 2); /* initializers live beside their variables */
    CHECK(set->num_partitions == 3);
    int kps0 = psg_partition_set_find(set, ps0),
        kps1 = psg_partition_set_find(set, "/job:ps/task:1/cpu:0"),
        kwk = psg_partition_set_find(set, wk);
    CHECK(kps0 >= 0 && kps1 >= 0 && kwk >= 0);
    if (kps0 < 0 || kps1 < 0 || kwk < 0) goto out;
    CHECK(!strcmp(set->partitions[kps1].device, ps1));
    CHECK(!strcmp(set->partitions[kps0].task, "/job:ps/replica:0/task:0"));
    /* r1 feeds two inputs of y on the worker: sent once */
    CHECK(count_recvs_of(set->partitions[kwk].graph, "r1:0") == 1);
    /* x goes to both ps (upd1, upd3), once each */
    CHECK(count_recvs_of(set->partitions[kps0].graph, "x:0") == 1);
    CHECK(count_recvs_of(set->partitions[kps1].graph, "x:0") == 1);
    /* control edges: y -> upd1 on ps0, upd* -> train on the worker */
    CHECK(count_recvs_of(set->partitions[kps0].graph, "^y") == 1);
    CHECK(count_recvs_of(set->partitions[kwk].graph, "^upd1") == 1);
    CHECK(set->partitions[kwk].num_feeds == 1 && set->partitions[kwk].num_fetches == 4);
    CHECK(set->partitions[kps1].num_fetches == 1 && set->partitions[kps1].fetch_index[0] == 3);
    int sends = 0, recvs = 0;
    for (int k = 0; k < set->num_partitions; k++) {
        sends += set->partitions[k].num_sends;
        recvs += set->partitions[k].num_recvs;
    }
    CHECK(sends == recvs && sends > 0);
    round_trip_partitions(init_set);
    round_trip_partitions(set);

    fake_cluster_t cl = {0};
    psg_rendezvous_t *rv = psg_rendezvous_new(10000);
    CHECK(run_set(init_set, &cl, rv, 0, NULL, NULL, 1, NULL) == 0);
    CHECK(cl.num_tasks == 2);
    for (int step = 1; step <= 4; step++) {
        float xv[6];
        for (int i = 0; i < 6; i++) xv[i] = (float)(step * 10 + i) * 0.25f;
        psg_tensor_t *xt = psg_test_tensor(&(psg_shape_t){2, {2, 3}}, xv);
        psg_tensor_t *want[5] = {0}, *got[5] = {0};
        CHECK(psg_session_run(ref, 1, &m.x, &xt, 5, m.fetches, want, 1, &m.train) == 0);
        for (int i = 0; i < 5; i++) {
            psg_tensor_t *copy = want[i] ? psg_tensor_copy(want[i]) : NULL;
            psg_tensor_destroy(&want[i]);
            want[i] = copy;
        }
        CHECK(run_set(set, &cl, rv, step, &xt, got, step % 2 ? 1 : 3, NULL) == 0);
        for (int i = 0; i < 5; i++) {
            compare_tensors(got[i], want[i]);
            psg_tensor_destroy(&got[i]);
            psg_tensor_destroy(&want[i]);
        }
        psg_tensor_destroy(&xt);
        CHECK(psg_rendezvous_num_pending(rv) == 0);
    }
    /* every variable ends where the single process left it, on its own ps only */
    CHECK(cl.num_tasks == 3);
    psg_resource_mgr_t *rref = psg_session_resources(ref);
    int found = compare_variables(rref, &cl);
    CHECK(found == psg_resource_num_variables(rref) && found == 4);
    psg_rendezvous_destroy(&rv);
    fake_cluster_free(&cl);
out:
    psg_partition_set_destroy(&set);
    psg_partition_set_destroy(&init_set);
    CHECK(set == NULL);
    psg_session_destroy(&ref);
    psg_graph_destroy(&g);
    psg_replica_setter_destroy(&s);
}

/* A training step with an optimizer (Momentum: slots, Apply ops taking the
 * handle as input 0, a global step) and a partitioned variable: its slots,
 * its Apply ops and its gradient slices land on the right ps, and the
 * partitioned run trains exactly as the whole graph does. */
static void test_partitioned_training_matches(void) {
    psg_replica_setter_options_t so = {.ps_tasks = 2, .worker_device = "/job:worker/task:0"};
    psg_replica_setter_t *s = psg_replica_setter_new(&so);
    psg_graph_t *g = psg_graph_new();
    psg_graph_push_replica_setter(g, s);
    psg_shape_t s43 = psg_shape_2d(4, 3), s3 = psg_shape_1d(3);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s43);
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &s3, (psg_initializer_t){"uniform", 1.0, 5}, true);
    psg_partitioned_var_t emb;
    CHECK(psg_partitioned_variable(g, "emb", PSG_DT_F32, &s43,
                                   (psg_initializer_t){"uniform", 1.0, 6}, true,
                                   &(psg_partitioner_t){.num_shards = 2}, &emb) == 0);
    psg_endpoint_t xw = psg_mul(g, "xw", x, psg_read_variable(g, "w/read", w));
    psg_endpoint_t xe = psg_mul(g, "xe", x, psg_partitioned_read(g, NULL, &emb));
    psg_endpoint_t both[2] = {psg_square(g, NULL, xw), xe};
    psg_endpoint_t loss = psg_sum(g, "loss", psg_add_n(g, NULL, 2, both), 0, NULL, false);
    psg_optimizer_config_t cfg = psg_optimizer_defaults("momentum");
    cfg.learning_rate = 0.05;
    psg_optimizer_t *opt = psg_optimizer_new(&cfg);
    int train = -1;
    CHECK(opt && psg_optimizer_minimize(opt, g, loss, &train) == 0);
    psg_graph_pop_device(g);
    CHECK(psg_graph_error(g) == NULL);
    /* slots beside their variables, each shard's on its shard's ps */
    const char *names[3] = {"w", "emb/part_0", "emb/part_1"};
    for (int i = 0; i < 3; i++) {
        char slot[64];
        snprintf(slot, sizeof slot, "%s/Momentum", names[i]);
        int v = psg_graph_find(g, names[i]), sl = psg_graph_find(g, slot);
        CHECK(v >= 0 && sl >= 0);
        if (v >= 0 && sl >= 0)
            CHECK(!strcmp(psg_node_device(psg_graph_node(g, v)),
                          psg_node_device(psg_graph_node(g, sl))));
    }
    CHECK(strcmp(psg_node_device(psg_graph_node(g, emb.shards[0].node)),
                 psg_node_device(psg_graph_node(g, emb.shards[1].node))));
    psg_placement_options_t po = {.default_device = "/job:worker/replica:0/task:0/device:CPU:0"};
    CHECK(psg_place(g, &po) == 0);
    for (int i = 0; i < psg_graph_num_nodes(g); i++) {
        const psg_node_t *n = psg_graph_node(g, i);
        if (!strncmp(psg_node_op(n), "Apply", 5))
            CHECK(!strncmp(psg_node_assigned_device(n), "/job:ps/", 8));
    }

    psg_session_t *ref = psg_session_new(g, NULL, NULL);
    CHECK(psg_session_run_init(ref) == 0);
    int n_init;
    const int *init = psg_graph_collection(g, "init", &n_init);
    psg_partition_set_t *init_set = psg_partition_graph(g, 0, NULL, 0, NULL, n_init, init, NULL);
    psg_partition_set_t *set = psg_partition_graph(g, 1, &x, 1, &loss, 1, &train, NULL);
    CHECK(init_set && set);
    fake_cluster_t cl = {0};
    psg_rendezvous_t *rv = psg_rendezvous_new(10000);
    if (init_set && set) {
        round_trip_partitions(set);
        CHECK(run_set(init_set, &cl, rv, 0, NULL, NULL, 1, NULL) == 0);
        unsigned seed = 7;
        for (int step = 1; step <= 3; step++) {
            psg_tensor_t *xt = psg_test_random(&s43, -1, 1, &seed), *want = NULL, *got = NULL;
            CHECK(psg_session_run(ref, 1, &x, &xt, 1, &loss, &want, 1, &train) == 0);
            CHECK(run_set(set, &cl, rv, step, &xt, &got, 2, NULL) == 0);
            compare_tensors(got, want);
            psg_tensor_destroy(&got);
            psg_tensor_destroy(&want);
            psg_tensor_destroy(&xt);
        }
        psg_resource_mgr_t *rref = psg_session_resources(ref);
        CHECK(compare_variables(rref, &cl) == psg_resource_num_variables(rref));
    }
    psg_rendezvous_destroy(&rv);
    fake_cluster_free(&cl);
    psg_partition_set_destroy(&set);
    psg_partition_set_destroy(&init_set);
    psg_optimizer_destroy(&opt);
    psg_session_destroy(&ref);
    psg_graph_destroy(&g);
    psg_replica_setter_destroy(&s);
}

/* Runs set for `step` and checks its two scalar fetches. */
static void expect_two_fetches(psg_partition_set_t *set, fake_cluster_t *cl, psg_rendezvous_t *rv,
                               int64_t step, psg_tensor_t *const *feeds, float want0, float want1) {
    psg_tensor_t *out[2] = {0};
    CHECK(run_set(set, cl, rv, step, feeds, out, 1, NULL) == 0);
    CHECK(out[0] && out[1] && psg_tensor_f32(out[0])[0] == want0 &&
          psg_tensor_f32(out[1])[0] == want1);
    psg_tensor_destroy(&out[0]);
    psg_tensor_destroy(&out[1]);
}

/* expect_two_fetches of one step with its one feed x, on a fresh fake cluster. */
static void expect_fed_fetches(psg_partition_set_t *set, float x, float want0, float want1) {
    fake_cluster_t cl = {0};
    psg_rendezvous_t *rv = psg_rendezvous_new(10000);
    psg_tensor_t *xv = psg_tensor_scalar_f32(x);
    expect_two_fetches(set, &cl, rv, 1, &xv, want0, want1);
    psg_tensor_destroy(&xv);
    psg_rendezvous_destroy(&rv);
    fake_cluster_free(&cl);
}

/* One partition a task (by_task, the worker's distributed session): a worker whose nodes
 * sit on its CPU:0 and CPU:1 (towers) gets one partition, each node keeping its device,
 * no Send/Recv between them; only the edge to the ps is cut. The result is the whole
 * graph's; per device (the default) the worker's two devices are two partitions. */
static void test_by_task_keeps_a_tasks_devices(void) {
    psg_graph_t *g = psg_graph_new();
    const char *w0 = "/job:worker/replica:0/task:0/device:CPU:0",
               *w1 = "/job:worker/replica:0/task:0/device:CPU:1";
    psg_graph_push_device(g, w0);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &(psg_shape_t){0, {0}});
    psg_tensor_t *two = psg_tensor_scalar_f32(2), *one = psg_tensor_scalar_f32(1),
                 *three = psg_tensor_scalar_f32(3);
    psg_endpoint_t k1 = psg_const(g, "one", &one);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, w1);
    psg_endpoint_t a = psg_mul(g, "a", x, psg_const(g, "two", &two));
    psg_graph_pop_device(g);
    psg_graph_push_device(g, w0);
    psg_endpoint_t b = psg_add(g, "b", a, k1);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, "/job:ps/replica:0/task:0/device:CPU:0");
    psg_endpoint_t c = psg_mul(g, "c", b, psg_const(g, "three", &three));
    psg_graph_pop_device(g);
    CHECK(psg_place(g, NULL) == 0);
    psg_endpoint_t fetches[2] = {c, a};
    psg_partition_set_t *per_device = psg_partition_graph(g, 1, &x, 2, fetches, 0, NULL, NULL);
    psg_partition_options_t opt = {.by_task = true};
    psg_partition_set_t *set = psg_partition_graph(g, 1, &x, 2, fetches, 0, NULL, &opt);
    CHECK(per_device && set);
    if (!per_device || !set) goto out;
    CHECK(per_device->num_partitions == 3);
    CHECK(set->num_partitions == 2);
    int kw = psg_partition_set_find(set, "/job:worker/task:0"),
        kp = psg_partition_set_find(set, "/job:ps/task:0");
    CHECK(kw >= 0 && kp >= 0);
    if (kw < 0 || kp < 0) goto out;
    const psg_graph_t *wg = set->partitions[kw].graph;
    CHECK(!strcmp(set->partitions[kw].device, w0));
    CHECK(!strcmp(psg_node_assigned_device(psg_graph_node(wg, psg_graph_find(wg, "a"))), w1));
    CHECK(!strcmp(psg_node_assigned_device(psg_graph_node(wg, psg_graph_find(wg, "b"))), w0));
    CHECK(count_recvs_of(wg, "a:0") == 0 && set->partitions[kw].num_recvs == 0);
    CHECK(count_recvs_of(set->partitions[kp].graph, "b:0") == 1);
    expect_fed_fetches(set, 5.0f, 33.0f, 10.0f);
out:
    psg_partition_set_destroy(&per_device);
    psg_partition_set_destroy(&set);
    psg_graph_destroy(&g);
}

/* By task, the reads of one variable on the ps (a read a tower) are one read: the worker's
 * partition receives its value once and both consumers use it; a read ordered by a control
 * input stays its own. Per device, each read is received. */
static void test_by_task_reads_a_variable_once(void) {
    psg_graph_t *g = psg_graph_new();
    const char *ps = "/job:ps/replica:0/task:0/device:CPU:0",
               *w0 = "/job:worker/replica:0/task:0/device:CPU:0",
               *w1 = "/job:worker/replica:0/task:0/device:CPU:1";
    psg_shape_t one = {0, {0}};
    psg_graph_push_device(g, ps);
    psg_endpoint_t v =
        psg_variable(g, "v", PSG_DT_F32, &one, (psg_initializer_t){"ones", 0, 0}, true);
    psg_endpoint_t r0 = psg_read_variable(g, "tower_0/read", v),
                   r1 = psg_read_variable(g, "tower_1/read", v);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, w0);
    psg_endpoint_t a = psg_add(g, "a", r0, r0);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, w1);
    psg_endpoint_t b = psg_mul(g, "b", r1, r1);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, NULL) == 0);
    psg_endpoint_t fetches[2] = {a, b};
    psg_partition_options_t opt = {.by_task = true};
    psg_partition_set_t *per_device = psg_partition_graph(g, 0, NULL, 2, fetches, 0, NULL, NULL);
    psg_partition_set_t *set = psg_partition_graph(g, 0, NULL, 2, fetches, 0, NULL, &opt);
    CHECK(per_device && set && set->num_partitions == 2);
    if (!per_device || !set || set->num_partitions != 2) goto out;
    int kw = psg_partition_set_find(set, "/job:worker/task:0"),
        kp = psg_partition_set_find(set, "/job:ps/task:0");
    CHECK(kw >= 0 && kp >= 0);
    if (kw < 0 || kp < 0) goto out;
    CHECK(set->partitions[kw].num_recvs == 1 && set->partitions[kp].num_sends == 1);
    CHECK(psg_graph_find(set->partitions[kp].graph, "tower_1/read") < 0);
    int recvs = 0;
    for (int k = 0; k < per_device->num_partitions; k++)
        recvs += per_device->partitions[k].num_recvs;
    CHECK(recvs == 2);
    /* the values: v = 1, a = 2, b = 1 */
    fake_cluster_t cl = {0};
    psg_rendezvous_t *rv = psg_rendezvous_new(10000);
    int n_init;
    const int *init = psg_graph_collection(g, "init", &n_init);
    psg_partition_set_t *init_set = psg_partition_graph(g, 0, NULL, 0, NULL, n_init, init, &opt);
    CHECK(init_set && run_set(init_set, &cl, rv, 1, NULL, NULL, 1, NULL) == 0);
    expect_two_fetches(set, &cl, rv, 2, NULL, 2.0f, 1.0f);
    psg_partition_set_destroy(&init_set);
    psg_rendezvous_destroy(&rv);
    fake_cluster_free(&cl);
out:
    psg_partition_set_destroy(&per_device);
    psg_partition_set_destroy(&set);
    psg_graph_destroy(&g);
}

/* A worker's Const used on the ps (an optimizer's learning rate): copied into the ps's
 * partition when its user also receives something else from the worker (the gradient),
 * which keeps that user waiting for the worker's step; sent as before when the user has
 * only constants from the worker (it would run ahead of the worker's step). The values are
 * the same either way. */
static void test_by_task_copies_a_gated_const(void) {
    psg_graph_t *g = psg_graph_new();
    const char *ps = "/job:ps/replica:0/task:0/device:CPU:0",
               *w = "/job:worker/replica:0/task:0/device:CPU:0";
    psg_shape_t scalar = {0, {0}};
    psg_graph_push_device(g, w);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &scalar);
    psg_tensor_t *three = psg_tensor_scalar_f32(3), *two = psg_tensor_scalar_f32(2);
    psg_endpoint_t lr = psg_const(g, "lr", &three), k = psg_const(g, "k", &two);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, ps);
    psg_endpoint_t gated = psg_mul(g, "gated", x, lr), alone = psg_add(g, "alone", k, k);
    psg_graph_pop_device(g);
    CHECK(psg_place(g, NULL) == 0);
    psg_endpoint_t feed = x, fetches[2] = {gated, alone};
    psg_partition_options_t opt = {.by_task = true};
    psg_partition_set_t *set = psg_partition_graph(g, 1, &feed, 2, fetches, 0, NULL, &opt);
    CHECK(set && set->num_partitions == 2);
    if (!set || set->num_partitions != 2) goto out;
    int kw = psg_partition_set_find(set, "/job:worker/task:0"),
        kp = psg_partition_set_find(set, "/job:ps/task:0");
    CHECK(kw >= 0 && kp >= 0);
    if (kw < 0 || kp < 0) goto out;
    /* x and k received; lr copied */
    CHECK(set->partitions[kp].num_recvs == 2 && set->partitions[kw].num_sends == 2);
    CHECK(psg_graph_find(set->partitions[kp].graph, "lr/_copy_1") >= 0 ||
          psg_graph_find(set->partitions[kp].graph, "lr/_copy_0") >= 0);
    expect_fed_fetches(set, 5.0f, 15.0f, 4.0f);
out:
    psg_partition_set_destroy(&set);
    psg_graph_destroy(&g);
}

/* v on ps 0, its read sent to the worker, which fetches v + v. */
static psg_graph_t *build_small(psg_endpoint_t *fetch) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t sh = psg_shape_1d(3);
    psg_graph_push_device(g, "/job:ps/task:0");
    psg_endpoint_t v =
        psg_variable(g, "v", PSG_DT_F32, &sh, (psg_initializer_t){"ones", 0, 0}, true);
    psg_endpoint_t r = psg_read_variable(g, "v/read", v);
    psg_graph_pop_device(g);
    psg_graph_push_device(g, "/job:worker/task:0");
    psg_endpoint_t two[2] = {r, r};
    *fetch = psg_add_n(g, "sum", 2, two);
    psg_graph_pop_device(g);
    return g;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void test_recv_timeout_names_the_key(void) {
    psg_endpoint_t sum;
    psg_graph_t *g = build_small(&sum);
    CHECK(psg_place(g, NULL) == 0);
    psg_partition_set_t *set = psg_partition_graph(g, 0, NULL, 1, &sum, 0, NULL, NULL);
    CHECK(set && set->num_partitions == 2);
    if (!set) goto out;
    int kwk = psg_partition_set_find(set, "/job:worker/task:0/cpu:0");
    CHECK(kwk >= 0);
    bool only[2] = {false, false};
    only[kwk] = true;
    fake_cluster_t cl = {0};
    psg_rendezvous_t *rv = psg_rendezvous_new(100);
    psg_tensor_t *out = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(run_set(set, &cl, rv, 7, NULL, &out, 1, only) < 0);
    CHECK(seconds_since(&t0) < 5.0);
    CHECK_ERROR_HAS("node 'v/read/_recv_0' (Recv)");
    CHECK_ERROR_HAS(
        "timed out after 100 ms waiting for key '/job:ps/replica:0/task:0/device:CPU:0;"
        "0000000000000000;/job:worker/replica:0/task:0/device:CPU:0;v/read:0;0:0' (step 7)");
    CHECK(out == NULL);
    psg_rendezvous_destroy(&rv);
    fake_cluster_free(&cl);
out:
    psg_partition_set_destroy(&set);
    psg_graph_destroy(&g);
}

/* The ps partition fails (v is not initialized): the worker's Recv is
 * woken by the step's abort at once, not by its (long) timeout. */
static void test_failed_partition_aborts_the_step(void) {
    psg_endpoint_t sum;
    psg_graph_t *g = build_small(&sum);
    CHECK(psg_place(g, NULL) == 0);
    psg_partition_set_t *set = psg_partition_graph(g, 0, NULL, 1, &sum, 0, NULL, NULL);
    CHECK(set != NULL);
    if (!set) goto out;
    fake_cluster_t cl = {0};
    psg_rendezvous_t *rv = psg_rendezvous_new(60000);
    psg_tensor_t *out = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(run_set(set, &cl, rv, 3, NULL, &out, 1, NULL) < 0);
    CHECK(seconds_since(&t0) < 10.0);
    CHECK_ERROR_HAS("variable 'v' is not initialized");
    CHECK(out == NULL);
    CHECK(psg_rendezvous_num_pending(rv) == 0);
    psg_rendezvous_destroy(&rv);
    fake_cluster_free(&cl);
out:
    psg_partition_set_destroy(&set);
    psg_graph_destroy(&g);
}

static void test_partition_errors(void) {
    psg_endpoint_t sum;
    psg_graph_t *g = build_small(&sum);
    CHECK(psg_partition_graph(g, 0, NULL, 1, &sum, 0, NULL, NULL) == NULL);
    CHECK_ERROR_HAS("has no complete assigned device");
    CHECK_ERROR_HAS("run psg_place first");
    CHECK(psg_place(g, NULL) == 0);
    /* a handle used on another device than its variable's */
    int r = psg_graph_find(g, "v/read");
    psg_graph_set_assigned_device(g, r, "/job:worker/replica:0/task:0/device:CPU:0");
    CHECK(psg_partition_graph(g, 0, NULL, 1, &sum, 0, NULL, NULL) == NULL);
    CHECK_ERROR_HAS(
        "node 'v' (VarHandle): its resource handle is used on '/job:worker/replica:0/task:0/device:CPU:0'");
    psg_endpoint_t bad = {999, 0};
    CHECK(psg_partition_graph(g, 0, NULL, 1, &bad, 0, NULL, NULL) == NULL);
    CHECK_ERROR_HAS("fetch 0 refers to a missing node");
    psg_graph_destroy(&g);
}

/* ---- overlapping runs of one plan, ordered per resource ---- */

#define PS_DEVICE "/job:ps/replica:0/task:0/device:CPU:0"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}
#define WORKER_DEVICE "/job:worker/replica:0/task:0/device:CPU:0"

static void edge_attrs(psg_node_builder_t *b, const char *tensor, const char *from,
                       const char *to) {
    psg_node_attr_str(b, "tensor_name", tensor);
    psg_node_attr_str(b, "send_device", from);
    psg_node_attr_int(b, "send_device_incarnation", 0);
    psg_node_attr_str(b, "recv_device", to);
}

static char *edge_key(const char *tensor, const char *from, const char *to, char *buf) {
    return psg_rendezvous_key(from, 0, to, tensor, buf, PSG_RENDEZVOUS_KEY_MAX);
}

/* A ps partition as async training makes them: it sends variable w (read only) and
 * v's value now, receives x and adds it to v after the read. */
typedef struct {
    psg_graph_t *g;
    psg_plan_t *plan;
    psg_resource_mgr_t *rm;
    psg_rendezvous_t *rv;
    psg_run_order_t *order;
} ps_step_t;

static void ps_step_init(ps_step_t *t) {
    psg_shape_t scalar = psg_shape_scalar();
    psg_graph_t *init = psg_graph_new();
    int targets[2] = {psg_assign(init, "init_v", psg_var_handle(init, "v", PSG_DT_F32, &scalar),
                                 psg_const_scalar(init, "zero", 0)),
                      psg_assign(init, "init_w", psg_var_handle(init, "w", PSG_DT_F32, &scalar),
                                 psg_const_scalar(init, "seven", 7))};
    psg_plan_t *ip = psg_plan_new(init, 0, NULL, 0, NULL, 2, targets);
    t->rm = psg_resource_mgr_new();
    CHECK(ip && psg_plan_run(ip, NULL, t->rm, 0, NULL, NULL) == 0);
    psg_plan_destroy(&ip);
    psg_graph_destroy(&init);

    psg_graph_t *g = t->g = psg_graph_new();
    psg_endpoint_t hv = psg_var_handle(g, "v", PSG_DT_F32, &scalar);
    psg_endpoint_t hw = psg_var_handle(g, "w", PSG_DT_F32, &scalar);
    /* a copy: the read itself aliases the variable, which the update changes in place */
    psg_endpoint_t v_now =
        psg_add(g, "v_now", psg_read_variable(g, "read_v", hv), psg_const_scalar(g, "z", 0));
    psg_node_builder_t *b = psg_node_begin(g, "Send", "send_w");
    psg_node_add_input(b, psg_read_variable(g, "read_w", hw));
    edge_attrs(b, "w:0", PS_DEVICE, WORKER_DEVICE);
    int send_w = psg_node_finish(b);
    b = psg_node_begin(g, "Recv", "recv_x");
    edge_attrs(b, "x:0", WORKER_DEVICE, PS_DEVICE);
    psg_node_attr_dtype(b, "dtype", PSG_DT_F32);
    psg_node_attr_shape(b, "shape", &scalar);
    psg_endpoint_t x = psg_node_finish_ep(b);
    b = psg_node_begin(g, "AssignAdd", "update_v");
    psg_node_add_input(b, hv);
    psg_node_add_input(b, x);
    psg_node_add_control(b, v_now.node);
    int update = psg_node_finish(b);
    int step_targets[2] = {send_w, update};
    t->plan = psg_plan_new(g, 0, NULL, 1, &v_now, 2, step_targets);
    CHECK(t->plan && psg_plan_can_overlap(t->plan));
    t->rv = psg_rendezvous_new(10000);
    t->order = t->plan ? psg_run_order_new(t->plan) : NULL;
    CHECK(t->order != NULL);
}

static void ps_step_free(ps_step_t *t) {
    psg_run_order_destroy(&t->order);
    psg_plan_destroy(&t->plan);
    psg_graph_destroy(&t->g);
    psg_rendezvous_destroy(&t->rv);
    psg_resource_mgr_destroy(&t->rm);
}

/* Starts step `step` of t with ticket on a thread. */
static void ps_step_start(ps_step_t *t, part_run_t *r, pthread_t *th, int64_t step,
                          psg_run_ticket_t *ticket) {
    memset(r, 0, sizeof *r);
    r->plan = t->plan;
    r->env = (psg_run_env_t){.rm = t->rm, .step_id = step, .rendezvous = t->rv, .ticket = ticket};
    PSG_ASSERT(pthread_create(th, NULL, part_main, r) == 0);
}

static float ps_step_recv_w(ps_step_t *t, int64_t step) {
    char key[PSG_RENDEZVOUS_KEY_MAX];
    psg_tensor_t *w = NULL;
    if (psg_rendezvous_recv(t->rv, step, edge_key("w:0", PS_DEVICE, WORKER_DEVICE, key), 5000, &w) <
        0)
        return -1;
    float v = psg_tensor_f32(w)[0];
    psg_tensor_destroy(&w);
    return v;
}

static void ps_step_send_x(ps_step_t *t, int64_t step, float x) {
    char key[PSG_RENDEZVOUS_KEY_MAX];
    psg_tensor_t *tx = psg_tensor_scalar_f32(x);
    CHECK(psg_rendezvous_send(t->rv, step, edge_key("x:0", WORKER_DEVICE, PS_DEVICE, key), &tx) ==
          0);
}

static float ps_step_join(part_run_t *r, pthread_t th) {
    pthread_join(th, NULL);
    CHECK(r->rc == 0);
    float v = r->fetched[0] ? psg_tensor_f32(r->fetched[0])[0] : -1;
    psg_tensor_destroy(&r->fetched[0]);
    return v;
}

static void test_overlapping_runs_keep_each_resource_in_order(void) {
    ps_step_t t = {0};
    ps_step_init(&t);
    if (!t.order) {
        ps_step_free(&t);
        return;
    }
    part_run_t r1, r2;
    pthread_t th1, th2;
    psg_run_ticket_t *t1 = psg_run_order_take(t.order), *t2 = psg_run_order_take(t.order);
    ps_step_start(&t, &r1, &th1, 1, t1);
    ps_step_start(&t, &r2, &th2, 2, t2);
    /* step 2 sends w while step 1 still waits for its x: the runs overlap */
    CHECK(ps_step_recv_w(&t, 2) == 7);
    CHECK(ps_step_recv_w(&t, 1) == 7);
    /* step 2's x first: its read and update of v must still wait for step 1's update */
    ps_step_send_x(&t, 2, 5);
    sleep_ms(50);
    ps_step_send_x(&t, 1, 3);
    CHECK(ps_step_join(&r1, th1) == 0);
    CHECK(ps_step_join(&r2, th2) == 3);
    psg_run_ticket_release(&t1);
    psg_run_ticket_release(&t2);
    CHECK(t1 == NULL);

    /* A ticket released without its run (a step that failed before it ran): the run after
     * it still waits for the one before it. v is 8 now. */
    psg_run_ticket_t *ta = psg_run_order_take(t.order), *tb = psg_run_order_take(t.order),
                     *tc = psg_run_order_take(t.order);
    ps_step_start(&t, &r1, &th1, 11, ta);
    psg_run_ticket_release(&tb);
    ps_step_start(&t, &r2, &th2, 13, tc);
    CHECK(ps_step_recv_w(&t, 13) == 7);
    ps_step_send_x(&t, 13, 100);
    sleep_ms(50);
    ps_step_send_x(&t, 11, 1);
    CHECK(ps_step_join(&r1, th1) == 8);
    CHECK(ps_step_join(&r2, th2) == 9);
    CHECK(ps_step_recv_w(&t, 11) == 7);
    psg_run_ticket_release(&ta);
    psg_run_ticket_release(&tc);

    /* A failed run opens its gates: the run after it goes on (v is 109 now). */
    psg_run_ticket_t *td = psg_run_order_take(t.order), *te = psg_run_order_take(t.order);
    ps_step_start(&t, &r1, &th1, 21, td);
    ps_step_start(&t, &r2, &th2, 22, te);
    ps_step_send_x(&t, 22, 1);
    psg_rendezvous_abort_step(t.rv, 21, "test: the worker of step 21 is gone");
    pthread_join(th1, NULL);
    CHECK(r1.rc < 0 && strstr(r1.error, "the worker of step 21 is gone"));
    psg_run_ticket_release(&td); /* as a task server does once the run returned */
    CHECK(ps_step_join(&r2, th2) == 109);
    psg_run_ticket_release(&te);
    for (int64_t s = 1; s <= 22; s++) psg_rendezvous_cleanup_step(t.rv, s);
    ps_step_free(&t);
}

static void test_runs_with_hidden_state_do_not_overlap(void) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s4 = psg_shape_make(1, (int64_t[]){4});
    psg_tensor_t *ones = psg_tensor_new(PSG_DT_F32, &s4);
    for (int i = 0; i < 4; i++) psg_tensor_f32(ones)[i] = 1;
    psg_endpoint_t drop = psg_dropout(g, "drop", psg_const(g, "ones", &ones), 0.5, 1);
    psg_plan_t *p = psg_plan_new(g, 0, NULL, 1, &drop, 0, NULL);
    CHECK(p && !psg_plan_can_overlap(p));
    CHECK(p && psg_run_order_new(p) == NULL);
    CHECK_ERROR_HAS("cannot overlap");
    psg_plan_destroy(&p);
    psg_graph_destroy(&g);
}

int main(void) {
    RUN_TEST(test_partitioned_model_matches);
    RUN_TEST(test_partitioned_training_matches);
    RUN_TEST(test_by_task_keeps_a_tasks_devices);
    RUN_TEST(test_by_task_reads_a_variable_once);
    RUN_TEST(test_by_task_copies_a_gated_const);
    RUN_TEST(test_recv_timeout_names_the_key);
    RUN_TEST(test_failed_partition_aborts_the_step);
    RUN_TEST(test_partition_errors);
    RUN_TEST(test_overlapping_runs_keep_each_resource_in_order);
    RUN_TEST(test_runs_with_hidden_state_do_not_overlap);
    return psg_test_summary();
}
