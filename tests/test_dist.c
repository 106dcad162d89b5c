/* The distributed runtime with real processes: two `psgraph server` ps tasks on 127.0.0.1
 * and a worker (this process, its task server in process). Placement seen through Inspect,
 * steps across processes, a live server fed hostile requests, a killed ps failing the step
 * in time with its name, two sessions of one process failing over apart, the ps exiting when
 * the job is done. Not the launcher (test_launch.sh). */
#include "net/codec.h"
#include "core/json.h"
#include "worker/dist_session_internal.h"
#include "tests/testutil.h"

#include <czmq.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *psgraph_exe;
static char tmpdir[256];
static char cluster_path[512];
static int ports[3]; /* ps0, ps1, worker0 */
static pid_t ps_pid[2];

static pid_t spawn_ps(int task) {
    char idx[16], log[600];
    snprintf(idx, sizeof idx, "%d", task);
    snprintf(log, sizeof log, "%s/ps%d.log", tmpdir, task);
    pid_t pid = fork();
    PSG_ASSERT(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execl(psgraph_exe, psgraph_exe, "server", "--cluster", cluster_path, "--job", "ps",
              "--task", idx, "--idle-timeout", "120", "--recv-timeout", "5", "--expect-workers",
              "1", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* A request to a live server and its reply (NULL with the error set). */
/* When set, call() goes through this connection: a graph is the peer's that registered it. */
static psg_client_t *sticky;

static psg_msg_t *call(int port, const char *op, psg_msg_t *m, int timeout_ms) {
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    psg_client_t *c = sticky ? sticky : psg_client_new(ep, NULL);
    if (!m) m = psg_msg_new(PSG_MSG_REQUEST, op);
    psg_msg_t *r = psg_client_call(c, &m, timeout_ms);
    if (c != sticky) psg_client_destroy(&c);
    return r;
}

static bool alive(int port) {
    psg_msg_t *r = call(port, PSG_TS_INSPECT, NULL, 2000);
    bool ok = r && r->body && strstr((const char *)r->body->data, "\"task\"");
    psg_msg_destroy(&r);
    return ok;
}

static void wait_up(int port) {
    double t0 = psg_test_now_sec();
    while (!alive(port) && psg_test_now_sec() - t0 < 10) {
    }
}

static void reap(pid_t *pid, int sig) {
    if (*pid <= 0) return;
    if (sig) kill(*pid, sig);
    waitpid(*pid, NULL, 0);
    *pid = 0;
}

/* ---- placement seen through Inspect ---- */

typedef struct {
    psg_graph_t *g;
    psg_replica_setter_t *setter;
    psg_endpoint_t x, r_small, e, after, y;
    int add, add_after_read;
} model_t;

static void build(model_t *m, const psg_cluster_t *c) {
    m->g = psg_graph_new();
    m->setter = psg_dist_replica_setter_new(c, PSG_PS_GREEDY);
    CHECK(m->setter != NULL);
    psg_graph_push_replica_setter(m->g, m->setter);
    psg_shape_t big = psg_shape_2d(64, 32), small = psg_shape_1d(10), es = psg_shape_2d(2000, 4);
    psg_endpoint_t w_big =
        psg_variable(m->g, "w_big", PSG_DT_F32, &big, (psg_initializer_t){"uniform", 1.0, 1}, true);
    psg_endpoint_t w_small =
        psg_variable(m->g, "w_small", PSG_DT_F32, &small, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_partitioned_var_t emb;
    CHECK(psg_partitioned_variable(m->g, "emb", PSG_DT_F32, &es,
                                   (psg_initializer_t){"uniform", 0.5, 3}, true,
                                   &(psg_partitioner_t){.num_shards = 2}, &emb) == 0);
    (void)w_big;
    m->x = psg_placeholder(m->g, "x", PSG_DT_F32, &small);
    psg_endpoint_t doubled = psg_scale(m->g, "doubled", m->x, 2.0); /* on the worker */
    m->add = psg_assign_add(m->g, "add", w_small, doubled);         /* on the ps */
    m->r_small = psg_read_variable(m->g, "r_small", w_small);
    m->e = psg_partitioned_read(m->g, NULL, &emb);
    /* y: w_small read on the ps, scaled on the worker; then w_small += 2x, after the read */
    m->y = psg_scale(m->g, "y", psg_read_variable(m->g, "r_small_y", w_small), 1.0);
    psg_node_builder_t *b = psg_node_begin(m->g, "AssignAdd", "add_after_read");
    psg_node_add_input(b, w_small);
    psg_node_add_input(b, doubled);
    psg_node_add_control(b, m->y.node);
    m->add_after_read = psg_node_finish(b);
    b = psg_node_begin(m->g, "ReadVariable", "after");
    psg_node_add_input(b, w_small);
    psg_node_attr_dtype(b, "dtype", PSG_DT_F32);
    psg_node_add_control(b, m->add);
    m->after = psg_node_finish_ep(b);
    psg_graph_pop_device(m->g);
    CHECK(psg_graph_error(m->g) == NULL);
}

/* True when the Inspect report lists variable `name`, initialized. */
static bool lists(const psg_json_t *report, const char *name) {
    const psg_json_t *vars = psg_json_get(report, "variables");
    for (int i = 0; vars && i < vars->count; i++) {
        const psg_json_t *n = psg_json_get(vars->items[i], "name");
        const psg_json_t *init = psg_json_get(vars->items[i], "initialized");
        if (n && !strcmp(n->string, name)) return init && init->boolean;
    }
    return false;
}

static void test_placement_and_steps(psg_dist_session_t *s, model_t *m) {
    CHECK(psg_dist_session_run_init(s) == 0);
    psg_json_t *rep[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        char task[32];
        snprintf(task, sizeof task, "/job:ps/task:%d", k);
        char *json = psg_dist_session_inspect(s, task);
        CHECK(json != NULL);
        rep[k] = json ? psg_json_parse(json) : NULL;
        CHECK(rep[k] != NULL);
        free(json);
    }
    if (!rep[0] || !rep[1]) return;
    /* every variable is on the ps its node was placed on, and only there */
    int nn = psg_graph_num_nodes(m->g), nvars = 0;
    for (int i = 0; i < nn; i++) {
        const psg_node_t *n = psg_graph_node(m->g, i);
        if (!(psg_node_def(n)->flags & PSG_OP_VARIABLE)) continue;
        nvars++;
        int k = strstr(psg_node_assigned_device(n), "/job:ps/replica:0/task:1") ? 1 : 0;
        CHECK(strstr(psg_node_assigned_device(n), "/job:ps/"));
        CHECK(lists(rep[k], psg_node_name(n)));
        CHECK(!lists(rep[1 - k], psg_node_name(n)));
    }
    CHECK(nvars == 4);

    /* the partitioned variable is spread over both */
    CHECK(lists(rep[0], "emb/part_0") != lists(rep[1], "emb/part_0"));
    CHECK(lists(rep[0], "emb/part_1") != lists(rep[1], "emb/part_1"));
    CHECK(lists(rep[0], "emb/part_0") == lists(rep[1], "emb/part_1"));
    /* greedy: the big one alone on one ps, the small ones on the other */
    CHECK(lists(rep[0], "w_big") != lists(rep[0], "w_small"));
    const psg_json_t *v0 = psg_json_get(rep[0], "variables");
    CHECK(v0 && v0->count >= 1 && psg_json_get(v0->items[0], "bytes"));
    psg_json_free(rep[0]);
    psg_json_free(rep[1]);

    /* steps: a feed from the worker updates a ps variable; reads come back */
    float ones[10];
    for (int i = 0; i < 10; i++) ones[i] = (float)i;
    psg_shape_t s10 = psg_shape_1d(10);
    psg_tensor_t *x = psg_test_tensor(&s10, ones);
    for (int step = 1; step <= 3; step++) {
        psg_endpoint_t fetch[2] = {m->after, m->e};
        psg_tensor_t *out[2] = {NULL, NULL};
        CHECK(psg_dist_session_run(s, 1, &m->x, &x, 2, fetch, out, 0, NULL) == 0);
        if (out[0]) {
            CHECK_NEAR(psg_tensor_f32(out[0])[3], 2.0 * 3 * step, 1e-6);
            CHECK(out[1] && out[1]->shape.rank == 2 && out[1]->shape.dims[0] == 2000);
        }
        psg_tensor_destroy(&out[0]);
        psg_tensor_destroy(&out[1]);
    }
    psg_tensor_destroy(&x);
    psg_tensor_t *r = NULL;
    CHECK(psg_dist_session_run(s, 0, NULL, NULL, 1, &m->r_small, &r, 0, NULL) == 0);
    if (r) CHECK_NEAR(psg_tensor_f32(r)[9], 2.0 * 9 * 3, 1e-6);
    psg_tensor_destroy(&r);
    /* a step that feeds the wrong shape fails with the node named, and the next works */
    psg_shape_t s3 = psg_shape_1d(3);
    psg_tensor_t *bad = psg_tensor_zeros(PSG_DT_F32, &s3), *o = NULL;
    CHECK(psg_dist_session_run(s, 1, &m->x, &bad, 1, &m->after, &o, 0, NULL) < 0);
    psg_tensor_destroy(&bad);
    CHECK(psg_dist_session_run(s, 0, NULL, NULL, 1, &m->r_small, &r, 0, NULL) == 0);
    psg_tensor_destroy(&r);
}

/* A step whose ps partitions receive nothing (w_small read there, scaled here): their
 * RunGraphRecv replies carry the tensors, and this worker pulls none of them. */
static void test_replies_carry_pulls(psg_dist_session_t *s, psg_task_server_t *ts, model_t *m) {
    int64_t served0, pulled0, served1, pulled1;
    psg_task_server_tensor_bytes(ts, &served0, &pulled0);
    for (int i = 0; i < 3; i++) {
        psg_tensor_t *y = NULL, *both[2] = {NULL, NULL};
        CHECK(psg_dist_session_run(s, 0, NULL, NULL, 1, &m->y, &y, 0, NULL) == 0);
        if (y) CHECK_NEAR(psg_tensor_f32(y)[9], 2.0 * 9 * 3, 1e-6);
        /* with a fetch of the other ps's shards beside it */
        psg_endpoint_t fetch[2] = {m->y, m->e};
        CHECK(psg_dist_session_run(s, 0, NULL, NULL, 2, fetch, both, 0, NULL) == 0);
        if (both[0] && both[1]) {
            CHECK(psg_tensor_f32(both[0])[9] == psg_tensor_f32(y)[9]);
            CHECK(both[1]->shape.dims[0] == 2000);
        }
        psg_tensor_destroy(&y);
        psg_tensor_destroy(&both[0]);
        psg_tensor_destroy(&both[1]);
    }
    psg_task_server_tensor_bytes(ts, &served1, &pulled1);
    CHECK(pulled1 == pulled0);
}

/* ---- overlapped steps (async training) ---- */

static int ps_of_w_small(const model_t *m) {
    const psg_node_t *v = psg_graph_node(m->g, psg_graph_find(m->g, "w_small"));
    return strstr(psg_node_assigned_device(v), "/task:1/") ? 1 : 0;
}

/* Runs c (x in, y = the variable read before its add of 2x) n times: how many read exactly
 * 18 more at element 9 than the first, a step apart; the first into *first. */
static int runs_in_order(psg_dist_callable_t *c, psg_tensor_t *x, int n, float *first) {
    int in_order = 0;
    for (int i = 0; i < n; i++) {
        psg_tensor_t *y = NULL;
        CHECK(psg_dist_callable_run(c, &x, &y) == 0);
        float y9 = y ? psg_tensor_f32(y)[9] : -1;
        if (i == 0) *first = y9;
        in_order += fabsf(y9 - (*first + 18.0f * (float)i)) < 1e-3f;
        psg_tensor_destroy(&y);
    }
    return in_order;
}

static void test_overlap(psg_dist_session_t *s, model_t *m) {
    psg_dist_callable_t *add = psg_dist_session_make_callable(s, 1, &m->x, 0, NULL, 1, &m->add);
    psg_dist_callable_t *read = psg_dist_session_make_callable(s, 0, NULL, 1, &m->r_small, 0, NULL);
    CHECK(add && read);
    if (!add || !read) return;
    psg_dist_callable_set_overlap(read, true);
    CHECK(!psg_dist_callable_overlaps(read)); /* its fetch comes from a ps */
    psg_dist_callable_set_overlap(add, true);
    CHECK(psg_dist_callable_overlaps(add));
    float v[10];
    for (int i = 0; i < 10; i++) v[i] = (float)i;
    psg_shape_t s10 = psg_shape_1d(10);
    psg_tensor_t *x = psg_test_tensor(&s10, v), *before = NULL, *after = NULL;
    CHECK(psg_dist_callable_run(read, NULL, &before) == 0);
    for (int i = 0; i < 5; i++) CHECK(psg_dist_callable_run(add, &x, NULL) == 0);
    /* another callable's run waits for the open step: every update is in */
    CHECK(psg_dist_callable_run(read, NULL, &after) == 0);
    if (before && after)
        CHECK_NEAR(psg_tensor_f32(after)[9] - psg_tensor_f32(before)[9], 2.0 * 9 * 5, 1e-3);
    psg_tensor_destroy(&before);
    psg_tensor_destroy(&after);
    /* Steps asked for one ahead (no remote feeds): each step's read on the ps still waits
     * for the step before's update, so y grows by exactly 2x a step; the step asked for
     * ahead of the last, called off by the drain, updates nothing. */
    psg_dist_callable_t *ahead =
        psg_dist_session_make_callable(s, 1, &m->x, 1, &m->y, 1, &m->add_after_read);
    CHECK(ahead != NULL);
    if (ahead) {
        psg_dist_callable_set_overlap(ahead, true);
        CHECK(psg_dist_callable_overlaps(ahead));
        float first = 0;
        CHECK(runs_in_order(ahead, x, 20, &first) == 20);
        CHECK(psg_dist_session_drain(s) == 0);
        CHECK(psg_dist_callable_run(read, NULL, &after) == 0);
        if (after) CHECK_NEAR(psg_tensor_f32(after)[9], first + 18.0 * 20, 1e-3);
        psg_tensor_destroy(&after);
    }
    /* Asked for ahead without overlap (async training's default): each run still waits for
     * its own step, y grows by exactly 2x a step, and another callable's run calls the step
     * asked for ahead off and reads every update, none more. */
    if (ahead) {
        psg_dist_callable_set_overlap(ahead, false);
        psg_dist_callable_set_ahead(ahead, true);
        CHECK(psg_dist_callable_asks_ahead(ahead));
        CHECK(!psg_dist_callable_overlaps(ahead));
        psg_tensor_t *r0 = NULL;
        CHECK(psg_dist_callable_run(read, NULL, &r0) == 0);
        float base = r0 ? psg_tensor_f32(r0)[9] : -1, first = 0;
        psg_tensor_destroy(&r0);
        CHECK(runs_in_order(ahead, x, 10, &first) == 10);
        CHECK(fabsf(first - base) < 1e-3f); /* y is read before the step's add */
        CHECK(psg_dist_callable_run(read, NULL, &after) == 0);
        if (after) CHECK_NEAR(psg_tensor_f32(after)[9], base + 18.0 * 10, 1e-3);
        psg_tensor_destroy(&after);
        /* a set_ahead off callable is not asked for ahead */
        psg_dist_callable_set_ahead(ahead, false);
        CHECK(!psg_dist_callable_asks_ahead(ahead));
    }
    /* a stopped ps: the overlapped step returns at once; waiting for it names the task */
    int k = ps_of_w_small(m);
    char task[64];
    snprintf(task, sizeof task, "/job:ps/replica:0/task:%d", k);
    kill(ps_pid[k], SIGSTOP);
    psg_test_wait_stopped(ps_pid[k]);
    CHECK(psg_dist_callable_run(add, &x, NULL) == 0);
    CHECK(psg_dist_session_drain(s) < 0);
    CHECK_ERROR_HAS(task);
    CHECK_ERROR_HAS("no reply to RunGraph");
    CHECK(psg_dist_session_drain(s) == 0); /* reported once */
    kill(ps_pid[k], SIGCONT);
    /* the session goes on: its connection to that ps is made again (a step may time out
     * while it is) */
    psg_dist_callable_set_overlap(add, false);
    bool ok = false;
    for (int i = 0; i < 3 && !ok; i++) ok = psg_dist_callable_run(add, &x, NULL) == 0;
    CHECK(ok);
    CHECK(psg_dist_callable_run(read, NULL, &after) == 0);
    psg_tensor_destroy(&after);
    psg_tensor_destroy(&x);
}

/* ---- a live server fed hostile requests ---- */

/* Sends raw frames on a fresh DEALER; returns whether any reply came within wait_ms. */
static bool raw_send(int port, int nframes, const void *const *frames, const size_t *sizes,
                     int wait_ms) {
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    zsock_t *d = zsock_new_dealer(ep);
    zsock_set_linger(d, 0);
    void *s = zsock_resolve(d);
    for (int i = 0; i < nframes; i++)
        zmq_send(s, frames[i], sizes[i], i + 1 < nframes ? ZMQ_SNDMORE : 0);
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    bool got = zmq_poll(&it, 1, wait_ms) == 1;
    zsock_destroy(&d);
    return got;
}

static psg_msg_t *req(const char *op, const char *key, int64_t step) {
    psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, op);
    if (key) psg_msg_set_key(m, key);
    m->step = step;
    return m;
}

/* The call fails with an error reply containing `want`, and the server still serves. */
static void expect_error(int port, psg_msg_t *m, const char *want) {
    psg_msg_t *r = call(port, NULL, m, 3000);
    CHECK(r == NULL);
    CHECK_ERROR_HAS(want);
    psg_msg_destroy(&r);
    CHECK(alive(port));
}

/* Random and truncated frames, and a frame beyond 64 MiB: the task server survives. */
static void hostile_frames(int port) {
    /* random bytes, as one frame and as several */
    unsigned seed = 7;
    for (int round = 0; round < 20; round++) {
        uint8_t buf[3][64];
        const void *fr[3] = {buf[0], buf[1], buf[2]};
        size_t sz[3];
        for (int f = 0; f < 3; f++) {
            sz[f] = 1 + (size_t)(rand_r(&seed) % 64);
            for (size_t i = 0; i < sz[f]; i++) buf[f][i] = (uint8_t)rand_r(&seed);
        }
        raw_send(port, 1 + round % 3, fr, sz, 20);
    }
    CHECK(alive(port));
    /* a truncated message: a header announcing a tensor (8000 bytes: a frame of its own, not
     * inside the header's) whose frame never comes */
    {
        psg_msg_t *m = req(PSG_TS_RUN_GRAPH, "1", 1);
        psg_shape_t s = psg_shape_1d(2000);
        psg_tensor_t *t = psg_tensor_zeros(PSG_DT_F32, &s);
        psg_msg_add_tensor(m, NULL, t);
        psg_tensor_destroy(&t);
        psg_wire_opts_t o = psg_wire_opts_default();
        psg_codec_out_t out = {0};
        m->kind = PSG_MSG_REQUEST;
        m->id = 5;
        CHECK(psg_codec_encode(m, NULL, &o, &out) == 0);
        CHECK(out.n >= 2);
        if (out.n >= 2) {
            const void *fr[1] = {zmq_msg_data(&out.parts[0])};
            size_t sz[1] = {zmq_msg_size(&out.parts[0])};
            CHECK(raw_send(port, 1, fr, sz, 2000)); /* answered with an error */
        }
        psg_codec_out_clear(&out);
        psg_msg_destroy(&m);
        CHECK(alive(port));
    }
    /* an oversized message: a frame beyond 64 MiB (the wire's tests cover announced sizes) */
    {
        psg_tensor_t *big = psg_tensor_new(PSG_DT_U8, &(psg_shape_t){1, {(int64_t)65 << 20}});
        CHECK(big != NULL);
        if (big) {
            memset(big->data, 0, psg_tensor_nbytes(big));
            const void *fr[1] = {big->data};
            size_t sz[1] = {psg_tensor_nbytes(big)};
            raw_send(port, 1, fr, sz, 100); /* ZeroMQ drops the connection */
        }
        psg_tensor_destroy(&big);
        CHECK(alive(port));
    }
}

/* Requests the task server refuses, each by name. */
static void hostile_requests(int port) {
    expect_error(port, req("Frobnicate", NULL, 0), "unknown request 'Frobnicate'");
    expect_error(port, req(PSG_TS_RUN_GRAPH, "999", 1), "unknown graph handle '999'");
    expect_error(port, req(PSG_TS_RUN_GRAPH, "-1", 1), "unknown graph handle");
    expect_error(port, req(PSG_TS_RUN_GRAPH, NULL, 1), "unknown graph handle");
    expect_error(port, req(PSG_TS_RECV, "garbage", 1), "malformed rendezvous key");
    expect_error(port, req(PSG_TS_RECV, NULL, 1), "Recv: no rendezvous key (the key)");
    expect_error(port,
                 req(PSG_TS_RECV,
                     "/job:ps/replica:0/task:1/device:CPU:0;0000000000000000;"
                     "/job:worker/replica:0/task:0/device:CPU:0;nothing:0;0:0",
                     1),
                 "unknown rendezvous key");
    /* a Recv of several keys: the body's unknown one is named, a byte not printable refused */
    const char *known_form = "/job:ps/replica:0/task:1/device:CPU:0;0000000000000000;"
                             "/job:worker/replica:0/task:0/device:CPU:0;nothing:0;0:0";
    psg_msg_t *m = req(PSG_TS_RECV, known_form, 1);
    const char *second = "/job:ps/replica:0/task:1/device:CPU:0;0000000000000000;"
                         "/job:worker/replica:0/task:0/device:CPU:0;second:0;0:0";
    psg_msg_set_body(m, second, strlen(second));
    expect_error(port, m, "unknown rendezvous key '/job:ps/replica:0/task:1/device:CPU:0;");
    m = req(PSG_TS_RECV, known_form, 1);
    psg_msg_set_body(m, "k\x02", 2);
    expect_error(port, m, "Recv: the body has a byte 0x02");
    expect_error(port, req(PSG_TS_REGISTER_GRAPH, NULL, 0), "RegisterGraph: no graph (the body)");
    {
        psg_msg_t *m = req(PSG_TS_REGISTER_GRAPH, NULL, 0);
        psg_msg_set_body(m, "\x93\x01\x02", 3);
        expect_error(port, m, "RegisterGraph");
    }
}

/* A graph of its own registered with wrong feeds and fetches, then run with wrong tensors. */
static void hostile_graph(int port) {
    /* a graph of its own: x (f32 [2]) -> y, to feed wrong things to */
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s2 = psg_shape_1d(2);
    psg_endpoint_t x = psg_placeholder(g, "x", PSG_DT_F32, &s2);
    psg_endpoint_t y = psg_identity(g, "y", x);
    char *bytes = NULL;
    size_t len = 0;
    CHECK(psg_graph_serialize(g, &bytes, &len) == 0);
    psg_graph_destroy(&g);
    psg_shape_t one2 = psg_shape_2d(1, 2), bad_sh = psg_shape_1d(3);
    psg_tensor_t *fe = psg_tensor_new(PSG_DT_I64, &one2), *fx = psg_tensor_new(PSG_DT_I64, &one2);
    psg_tensor_i64(fe)[0] = x.node, psg_tensor_i64(fe)[1] = 0;
    psg_tensor_i64(fx)[0] = y.node, psg_tensor_i64(fx)[1] = 0;
    psg_tensor_t *wrong_ids = psg_tensor_zeros(PSG_DT_F32, &one2);
    {
        psg_msg_t *m = req(PSG_TS_REGISTER_GRAPH, NULL, 0);
        psg_msg_set_body(m, bytes, len);
        psg_msg_add_tensor(m, "feeds", wrong_ids);
        expect_error(port, m, "'feeds' must be i64");
    }
    {
        psg_shape_t s = psg_shape_2d(1, 2);
        psg_tensor_t *oob = psg_tensor_new(PSG_DT_I64, &s);
        psg_tensor_i64(oob)[0] = 1000, psg_tensor_i64(oob)[1] = 0;
        psg_msg_t *m = req(PSG_TS_REGISTER_GRAPH, NULL, 0);
        psg_msg_set_body(m, bytes, len);
        psg_msg_add_tensor(m, "fetches", oob);
        psg_tensor_destroy(&oob);
        expect_error(port, m, "which the graph does not have");
    }
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    sticky = psg_client_new(ep, NULL); /* registers and runs: the graph is its own */
    psg_msg_t *m = req(PSG_TS_REGISTER_GRAPH, NULL, 0);
    psg_msg_set_body(m, bytes, len);
    psg_msg_add_tensor(m, "feeds", fe);
    psg_msg_add_tensor(m, "fetches", fx);
    psg_msg_t *r = call(port, NULL, m, 3000);
    CHECK(r && r->key);
    char handle[32] = "0";
    if (r && r->key) snprintf(handle, sizeof handle, "%s", r->key);
    psg_msg_destroy(&r);
    /* a good run, then wrong dtype, wrong shape, wrong count */
    float v[2] = {1.5f, -2.0f};
    psg_tensor_t *good = psg_test_tensor(&s2, v), *f64 = psg_tensor_zeros(PSG_DT_F64, &s2);
    psg_tensor_t *shape3 = psg_tensor_zeros(PSG_DT_F32, &bad_sh);
    m = req(PSG_TS_RUN_GRAPH, handle, 11);
    psg_msg_add_tensor(m, NULL, good);
    r = call(port, NULL, m, 3000);
    CHECK(r && r->ntensors == 1 && psg_tensor_f32(r->tensors[0])[1] == -2.0f);
    psg_msg_destroy(&r);
    m = req(PSG_TS_RUN_GRAPH, handle, 12);
    psg_msg_add_tensor(m, NULL, f64);
    expect_error(port, m, "fed f64[2], expects f32[2]");
    m = req(PSG_TS_RUN_GRAPH, handle, 13);
    psg_msg_add_tensor(m, NULL, shape3);
    expect_error(port, m, "fed f32[3], expects f32[2]");
    m = req(PSG_TS_RUN_GRAPH, handle, 14);
    expect_error(port, m, "got 0 feeds, it takes 1");
    /* RunGraphRecv: a key the graph does not send, no key, an empty key */
    const char *recv_bodies[3][2] = {{"\n/job:ps/replica:0/task:0/device:CPU:0;0000000000000000;"
                                      "/job:worker/replica:0/task:0/device:CPU:0;y:0;0:0",
                                      "it sends no '/job:ps"},
                                     {"", "no key to send back"},
                                     {"u 1\n", "key 0 of 0 bytes"}};
    for (int i = 0; i < 3; i++) {
        m = req(PSG_TS_RUN_GRAPH_RECV, handle, 16 + i);
        psg_msg_add_tensor(m, NULL, good);
        if (recv_bodies[i][0][0]) psg_msg_set_body(m, recv_bodies[i][0], strlen(recv_bodies[i][0]));
        expect_error(port, m, recv_bodies[i][1]);
    }
    psg_client_destroy(&sticky);
    m = req(PSG_TS_RUN_GRAPH, handle, 15);
    psg_msg_add_tensor(m, NULL, good);
    expect_error(port, m, "was registered by another peer"); /* another connection's run */
    psg_tensor_destroy(&good);
    psg_tensor_destroy(&f64);
    psg_tensor_destroy(&shape3);
    psg_tensor_destroy(&fe);
    psg_tensor_destroy(&fx);
    psg_tensor_destroy(&wrong_ids);
    free(bytes);
}

static void test_hostile(int port) {
    hostile_frames(port);
    hostile_requests(port);
    hostile_graph(port);
    psg_msg_t *r;
    /* the report counts what was refused */
    r = call(port, PSG_TS_INSPECT, NULL, 3000);
    CHECK(r && r->body && strstr((const char *)r->body->data, "\"rejected\":"));
    psg_msg_destroy(&r);
}

/* ---- a killed ps ---- */

/* Kills the ps holding w_small; returns its index. */
static int test_killed_ps(psg_dist_session_t *s, model_t *m) {
    int k = ps_of_w_small(m);
    char task[64];
    snprintf(task, sizeof task, "/job:ps/replica:0/task:%d", k);
    reap(&ps_pid[k], SIGKILL);
    float z[10] = {0};
    psg_shape_t s10 = psg_shape_1d(10);
    psg_tensor_t *x = psg_test_tensor(&s10, z), *out = NULL;
    double t0 = psg_test_now_sec();
    int rc = psg_dist_session_run(s, 1, &m->x, &x, 1, &m->after, &out, 0, NULL);
    double dt = psg_test_now_sec() - t0;
    CHECK(rc < 0);
    CHECK_ERROR_HAS(task);
    printf("killed ps: the step failed after %.2f s: %s\n", dt, psg_error_message());
    CHECK(dt < 6.0);
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&out);
    return k;
}

/* Two sessions of one process on one graph, as a sync chief's runner beside its worker's
 * loop: the first failed the killed ps k over to the other ps, the second did not and placed
 * the graph again since (ps k back in its nodes' devices). A callable the first builds then
 * has no partition on ps k: its RegisterGraph went to the dead ps when it partitioned the
 * graph as the second had placed it (CI, test_replication's sync failover). */
static void test_sessions_place_apart(psg_dist_session_t *s, psg_task_server_t *ts, model_t *m,
                                      const psg_cluster_t *c, int killed) {
    psg_dist_session_options_t o = {
        .cluster = c, .server = ts, .step_timeout_ms = 2000, .id_stream = 1};
    psg_dist_session_t *other = psg_dist_session_new(m->g, &o);
    CHECK(other != NULL);
    CHECK(psg_dist_session_failover(s, killed, 1 - killed) == 0);
    CHECK(other && psg_dist_session_place(other) == 0);
    char dead[64];
    snprintf(dead, sizeof dead, "/job:ps/replica:0/task:%d", killed);
    /* a signature no test ran before: built now, not one rebuilt by the failover */
    psg_endpoint_t fetch[2] = {m->y, m->r_small};
    psg_dist_callable_t *cb = psg_dist_session_make_callable(s, 0, NULL, 2, fetch, 0, NULL);
    CHECK(cb != NULL);
    if (!cb) printf("  make_callable after the other session placed: %s\n", psg_error_message());
    for (int k = 0; cb && k < cb->set->num_partitions; k++) {
        if (!strcmp(cb->set->partitions[k].task, dead))
            printf("  a partition on %s, failed over\n", dead);
        CHECK(strcmp(cb->set->partitions[k].task, dead) != 0);
    }
    psg_dist_session_destroy(&other);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_dist PATH/TO/psgraph\n");
        return 2;
    }
    psgraph_exe = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/psg_test_dist_XXXXXX");
    PSG_ASSERT(mkdtemp(tmpdir));
    snprintf(cluster_path, sizeof cluster_path, "%s/cluster.json", tmpdir);
    for (int i = 0; i < 3; i++) ports[i] = psg_test_free_port();
    FILE *f = fopen(cluster_path, "w");
    fprintf(
        f,
        "{\"cluster\": {\"ps\": [\"127.0.0.1:%d\", \"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"]}}\n",
        ports[0], ports[1], ports[2]);
    fclose(f);
    for (int k = 0; k < 2; k++) ps_pid[k] = spawn_ps(k);
    wait_up(ports[0]);
    wait_up(ports[1]);

    psg_cluster_t *c = psg_cluster_from_file(cluster_path, "worker", 0);
    CHECK(c != NULL);
    psg_task_server_options_t so = {.cluster = c, .recv_timeout_ms = 2000};
    psg_task_server_t *ts = c ? psg_task_server_new(&so) : NULL;
    CHECK(ts != NULL);
    model_t m = {0};
    psg_dist_session_t *s = NULL;
    if (ts) {
        build(&m, c);
        psg_dist_session_options_t o = {.cluster = c, .server = ts, .step_timeout_ms = 2000};
        s = psg_dist_session_new(m.g, &o);
        CHECK(s != NULL);
    }
    if (s) {
        {
            int before = psg_test_failures;
            test_placement_and_steps(s, &m);
            printf("%s test_placement_and_steps\n", psg_test_failures == before ? "ok  " : "FAIL");
            before = psg_test_failures;
            test_replies_carry_pulls(s, ts, &m);
            printf("%s test_replies_carry_pulls\n", psg_test_failures == before ? "ok  " : "FAIL");
            before = psg_test_failures;
            test_overlap(s, &m);
            printf("%s test_overlap\n", psg_test_failures == before ? "ok  " : "FAIL");
            before = psg_test_failures;
            test_hostile(ports[1]);
            test_hostile(ports[0]);
            printf("%s test_hostile\n", psg_test_failures == before ? "ok  " : "FAIL");
            before = psg_test_failures;
            int killed = test_killed_ps(s, &m);
            printf("%s test_killed_ps\n", psg_test_failures == before ? "ok  " : "FAIL");
            before = psg_test_failures;
            test_sessions_place_apart(s, ts, &m, c, killed);
            printf("%s test_sessions_place_apart\n", psg_test_failures == before ? "ok  " : "FAIL");
            /* the job is done: the other ps (expecting one worker) exits by itself */
            int other = 1 - killed;
            before = psg_test_failures;
            psg_dist_session_job_done(s);
            int st = -1;
            double t0 = psg_test_now_sec();
            while (psg_test_now_sec() - t0 < 5 && waitpid(ps_pid[other], &st, WNOHANG) == 0)
                usleep(20000);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            if (WIFEXITED(st)) ps_pid[other] = 0;
            printf("%s test_job_done_stops_ps\n", psg_test_failures == before ? "ok  " : "FAIL");
        }
    }
    psg_dist_session_destroy(&s);
    psg_graph_destroy(&m.g);
    psg_replica_setter_destroy(&m.setter);
    psg_task_server_destroy(&ts);
    psg_cluster_destroy(&c);
    reap(&ps_pid[0], SIGKILL);
    reap(&ps_pid[1], SIGKILL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
    return psg_test_summary();
}
