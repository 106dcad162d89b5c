/* The timeline: the Chrome trace writer, the executor's timing hook (one
 * event for every op of a traced step, none when off) and `psgraph train
 * --trace`, each trace loaded back with Python's json. Not the launcher's
 * merge of several tasks' traces. */
#include "runtime/executor.h"
#include "psgraph/trace.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Python's json checks the file: every X event well formed; for each listed
 * step, `per_step` events with distinct names (0: skip that check). */
static int check_json(const char *path, int per_step, const char *steps) {
    char cmd[2048];
    snprintf(
        cmd, sizeof cmd,
        "python3 -c 'import json, sys, collections\n"
        "d = json.load(open(\"%s\")); ev = d[\"traceEvents\"]\n"
        "x = [e for e in ev if e[\"ph\"] == \"X\"]\n"
        "named = {e[\"tid\"] for e in ev if e[\"ph\"] == \"M\" and e[\"name\"] == \"thread_name\"}\n"
        "assert any(e[\"ph\"] == \"M\" and e[\"name\"] == \"process_name\" for e in ev)\n"
        "assert x and all(e[\"dur\"] >= 0 and e[\"ts\"] > 1.6e15 and e[\"args\"][\"op\"] and e[\"tid\"] in named for e in x)\n"
        "by = collections.defaultdict(list)\n"
        "[by[e[\"args\"][\"step\"]].append(e[\"name\"]) for e in x]\n"
        "want = [%s]; n = %d\n"
        "for s in want:\n"
        "  assert n == 0 or (len(by[s]) == n and len(set(by[s])) == n), (s, len(by[s]), n)\n"
        "assert n == 0 or sorted(by) == want, sorted(by)\n"
        "assert len({tuple(sorted(by[s])) for s in want}) <= 1\n"
        "print(\"trace json: %%d events, steps %%s, %%d tracks\" %% (len(x), sorted(by), len(named)))'",
        path, steps, per_step);
    fflush(stdout);
    return system(cmd);
}

static void test_parse_steps(void) {
    int64_t a = 0, b = 0;
    CHECK(psg_trace_parse_steps("3:4", &a, &b) == 0 && a == 3 && b == 4);
    CHECK(psg_trace_parse_steps("7", &a, &b) == 0 && a == 7 && b == 7);
    CHECK(psg_trace_parse_steps("0:1", &a, &b) < 0);
    CHECK(psg_trace_parse_steps("5:4", &a, &b) < 0);
    CHECK(psg_trace_parse_steps("3:", &a, &b) < 0);
    CHECK(psg_trace_parse_steps("x", &a, &b) < 0);
    CHECK_ERROR_HAS("'x'");
}

static void *add_events(void *arg) {
    psg_trace_t *t = arg;
    for (int i = 0; i < 100; i++) {
        char name[32];
        snprintf(name, sizeof name, "n\"%d", i); /* a quote, escaped in the JSON */
        psg_trace_event(t, name, "Op", 1000 * i, 1000 * i + 500);
    }
    return NULL;
}

static void test_writer(void) {
    psg_trace_t *t = psg_trace_new(3, "/job:ps/replica:0/task:1", "CPU:0");
    CHECK(t);
    if (!t) return;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, add_events, t);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(psg_trace_num_events(t) == 200 && psg_trace_dropped(t) == 0);
    char path[] = "/tmp/psg_trace_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(psg_trace_write(t, path) == 0);
    CHECK(check_json(path, 0, "0") == 0);
    CHECK(psg_trace_write(t, "/dev/null/dir/trace.json") < 0);
    CHECK_ERROR_HAS("/dev/null/dir/trace.json");
    unlink(path);
    psg_trace_destroy(&t);
    CHECK(!t);
}

typedef struct {
    psg_graph_t *g;
    psg_optimizer_t *opt;
    psg_session_t *sess;
    psg_callable_t *step;
    psg_endpoint_t feeds[2], loss;
    int train_op;
    int plan_nodes; /* the ops one training step executes */
} mlp_t;

static int mlp_setup(mlp_t *m, int threads) {
    memset(m, 0, sizeof *m);
    m->g = psg_graph_new();
    psg_model_t md;
    if (psg_model_build(m->g, "mlp", 28, 28, 1, 10, 1, &md) < 0) return -1;
    psg_optimizer_config_t oc = psg_optimizer_defaults("momentum");
    m->opt = psg_optimizer_new(&oc);
    if (!m->opt || psg_optimizer_minimize(m->opt, m->g, md.loss, &m->train_op) < 0) return -1;
    psg_session_options_t so = {.num_threads = threads};
    m->sess = psg_session_new(m->g, &so, NULL);
    if (!m->sess || psg_session_run_init(m->sess) < 0) return -1;
    m->feeds[0] = md.images;
    m->feeds[1] = md.labels;
    m->loss = md.loss;
    m->step = psg_session_make_callable(m->sess, 2, m->feeds, 1, &m->loss, 1, &m->train_op);
    psg_plan_t *p = psg_plan_new(m->g, 2, m->feeds, 1, &m->loss, 1, &m->train_op);
    m->plan_nodes = p ? psg_plan_num_nodes(p) : -1;
    psg_plan_destroy(&p);
    return m->step ? 0 : -1;
}

static void mlp_free(mlp_t *m) {
    psg_callable_destroy(&m->step);
    psg_session_destroy(&m->sess);
    psg_optimizer_destroy(&m->opt);
    psg_graph_destroy(&m->g);
}

static int mlp_run(mlp_t *m) {
    psg_shape_t is = psg_shape_4d(16, 28, 28, 1), ls = psg_shape_1d(16);
    psg_tensor_t *images = psg_tensor_zeros(PSG_DT_F32, &is),
                 *labels = psg_tensor_zeros(PSG_DT_I32, &ls);
    psg_tensor_t *fv[2] = {images, labels}, *loss = NULL;
    int rc = psg_callable_run(m->step, fv, &loss);
    psg_tensor_destroy(&loss);
    psg_tensor_destroy(&images);
    psg_tensor_destroy(&labels);
    return rc;
}

static void test_executor_hook(void) {
    mlp_t m;
    CHECK(mlp_setup(&m, 2) == 0);
    psg_trace_t *t = psg_trace_new(0, "/job:localhost/replica:0/task:0", "CPU:0");
    CHECK(t && m.plan_nodes > 10);
    if (!t || m.plan_nodes <= 10) {
        mlp_free(&m);
        psg_trace_destroy(&t);
        return;
    }
    CHECK(mlp_run(&m) == 0);
    CHECK(psg_trace_num_events(t) == 0);
    psg_session_set_node_hook(m.sess, psg_trace_node_hook, t);
    for (int s = 2; s <= 3; s++) {
        psg_trace_set_step(t, s);
        CHECK(mlp_run(&m) == 0);
    }
    psg_session_set_node_hook(m.sess, NULL, NULL);
    CHECK(mlp_run(&m) == 0); /* off again: no events */
    CHECK(psg_trace_num_events(t) == 2 * m.plan_nodes);
    char path[] = "/tmp/psg_trace_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(psg_trace_write(t, path) == 0);
    CHECK(check_json(path, m.plan_nodes, "2, 3") == 0);
    unlink(path);
    psg_trace_destroy(&t);
    mlp_free(&m);
}

static void test_train_trace(void) {
    mlp_t m;
    CHECK(mlp_setup(&m, 1) == 0);
    int per_step = m.plan_nodes;
    mlp_free(&m);
    char path[] = "/tmp/psg_trace_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    psg_train_config_t c;
    psg_train_config_defaults(&c);
    c.model = "mlp";
    c.data = "synthetic";
    c.steps = 6;
    c.threads = 2;
    c.trace_path = path;
    c.trace_first = 3;
    c.trace_last = 4;
    c.out = tmpfile();
    psg_train_result_t r;
    CHECK(psg_train(&c, &r) == 0);
    fclose(c.out);
    CHECK(check_json(path, per_step, "3, 4") == 0);
    unlink(path);
}

int main(void) {
    RUN_TEST(test_parse_steps);
    RUN_TEST(test_writer);
    RUN_TEST(test_executor_hook);
    RUN_TEST(test_train_trace);
    return psg_test_summary();
}
