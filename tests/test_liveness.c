/* Liveness with a real `psgraph server` ps process and a worker (this process): every reply
 * carries the task's incarnation; a ps paused for less than the peer timeout only delays a
 * step; a ps silent for longer fails the step with an error naming it long before the step
 * timeout (heartbeats), and is served again once it answers; a ps restarted at the same
 * address is known as a new process by its incarnation, and the session recovers from it.
 * A wait that heartbeats should end and does not fails the test in at most WATCHDOG_S, and the
 * ps dies with this process whatever ends it (never left behind stopped).
 * First, in this process with no ps: a client finds a restarted server again by itself; a
 * peer gone down is waited for until the peer timeout (one back before it takes the send),
 * one replaced by another cluster's CURVE server is lost at the peer timeout.
 * Not the emulated hosts' cut links (test_hosts_launch.sh). */
#include "core/json.h"
#include "net/codec.h"
#include "psgraph/wire.h"
#include "tests/testutil.h"

#include <czmq.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define PEER_TIMEOUT_S 2
/* 10x the peer timeout: a step failed by the step timeout rather than by heartbeats (a lost
 * connection not noticed) fails the silent-ps test by its message, after 20 s */
#define STEP_TIMEOUT_MS 20000
/* under meson's 120 s: whatever still waits then fails here, naming its test, ps killed */
#define WATCHDOG_S 100
#define STR_(x) #x
#define STR(x) STR_(x)

static const char *psgraph_exe;
static char tmpdir[256], cluster_path[512];
static int ports[2]; /* ps0, worker0 */
static pid_t ps_pid;
static const char *volatile running = "start"; /* the test the watchdog names */

static void on_watchdog(int sig) {
    (void)sig;
    static const char a[] = "FAIL ", b[] = ": still waiting after the watchdog's " STR(
                                         WATCHDOG_S) " s (a wait that "
                                                     "heartbeats should end); the ps's log is in ";
    /* only async-signal-safe calls: write, strlen, kill, _exit */
    if (write(2, a, sizeof a - 1) < 0 || write(2, running, strlen(running)) < 0 ||
        write(2, b, sizeof b - 1) < 0 || write(2, tmpdir, strlen(tmpdir)) < 0 ||
        write(2, "\n", 1) < 0) {
    }
    if (ps_pid > 0) kill(ps_pid, SIGKILL);
    _exit(1);
}

static pid_t spawn_ps(void) {
    char log[600];
    snprintf(log, sizeof log, "%s/ps0.log", tmpdir);
    pid_t parent = getpid();
    pid_t pid = fork();
    PSG_ASSERT(pid >= 0);
    if (pid == 0) {
        /* killed when this test dies, however (meson's timeout, a crash): stopped or not */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        FILE *f = freopen(log, "a", stdout);
        (void)f;
        dup2(1, 2);
        execl(psgraph_exe, psgraph_exe, "server", "--cluster", cluster_path, "--job", "ps",
              "--task", "0", "--idle-timeout", "120", "--recv-timeout", "3", "--expect-workers",
              "1", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits until the ps answers Inspect on a fresh connection. */
static void wait_up(void) {
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[0]);
    for (double t0 = psg_test_now_sec(); psg_test_now_sec() - t0 < 10;) {
        psg_client_t *c = psg_client_new(ep, NULL);
        psg_msg_t *m = psg_msg_new(PSG_MSG_REQUEST, PSG_TS_INSPECT);
        psg_msg_t *r = c ? psg_client_call(c, &m, 1000) : NULL;
        psg_msg_destroy(&m);
        psg_client_destroy(&c);
        bool up = r != NULL;
        psg_msg_destroy(&r);
        if (up) return;
    }
}

typedef struct {
    psg_graph_t *g;
    psg_replica_setter_t *setter;
    psg_endpoint_t x, after; /* after: w read on the ps once w += x ran there */
} model_t;

static void build(model_t *m, const psg_cluster_t *c) {
    m->g = psg_graph_new();
    m->setter = psg_dist_replica_setter_new(c, PSG_PS_GREEDY);
    CHECK(m->setter != NULL);
    psg_graph_push_replica_setter(m->g, m->setter);
    psg_shape_t s4 = psg_shape_1d(4);
    psg_endpoint_t w =
        psg_variable(m->g, "w", PSG_DT_F32, &s4, (psg_initializer_t){"zeros", 0, 0}, true);
    m->x = psg_placeholder(m->g, "x", PSG_DT_F32, &s4);
    int add = psg_assign_add(m->g, "add", w, m->x);
    psg_node_builder_t *b = psg_node_begin(m->g, "ReadVariable", "after");
    psg_node_add_input(b, w);
    psg_node_attr_dtype(b, "dtype", PSG_DT_F32);
    psg_node_add_control(b, add);
    m->after = psg_node_finish_ep(b);
    psg_graph_pop_device(m->g);
    CHECK(psg_graph_error(m->g) == NULL);
}

/* One step w += 1; *w0 receives w[0] after it. */
static int step(psg_dist_session_t *s, const model_t *m, float *w0) {
    float ones[4] = {1, 1, 1, 1};
    psg_shape_t s4 = psg_shape_1d(4);
    psg_tensor_t *x = psg_test_tensor(&s4, ones), *out = NULL;
    int rc = psg_dist_session_run(s, 1, &m->x, &x, 1, &m->after, &out, 0, NULL);
    if (rc == 0 && w0) *w0 = psg_tensor_f32(out)[0];
    psg_tensor_destroy(&x);
    psg_tensor_destroy(&out);
    return rc;
}

/* Every reply carries the ps's incarnation, as its Inspect report names it. */
static void test_incarnation(psg_dist_session_t *s, const model_t *m, uint64_t *inc) {
    float w0 = 0;
    CHECK(step(s, m, &w0) == 0 && w0 == 1.0f);
    *inc = psg_dist_session_incarnation(s, "/job:ps/task:0");
    CHECK(*inc != 0 && *inc != psg_wire_incarnation());
    char *json = psg_dist_session_inspect(s, "/job:ps/task:0");
    psg_json_t *report = json ? psg_json_parse(json) : NULL;
    const psg_json_t *field = report ? psg_json_get(report, "incarnation") : NULL;
    char want[32];
    snprintf(want, sizeof want, "%016" PRIx64, *inc);
    CHECK(field && field->type == PSG_JSON_STRING && !strcmp(field->string, want));
    psg_json_free(report);
    free(json);
}

/* A ps paused for less than the peer timeout: the step waits for it and goes on. */
static void test_short_pause(psg_dist_session_t *s, const model_t *m) {
    kill(ps_pid, SIGSTOP);
    psg_test_wait_stopped(ps_pid);
    pid_t waker = fork();
    PSG_ASSERT(waker >= 0);
    if (waker == 0) {
        usleep(300000); /* well within the peer timeout, also on a loaded machine */
        kill(ps_pid, SIGCONT);
        _exit(0);
    }
    float w0 = 0;
    int rc = step(s, m, &w0);
    if (rc < 0) fprintf(stderr, "  paused ps: %s\n", psg_error_message());
    CHECK(rc == 0 && w0 == 2.0f);
    waitpid(waker, NULL, 0);
    kill(ps_pid, SIGCONT);
}

/* A ps silent for longer: the step fails naming it and the lost connection, not at the step
 * timeout; once it answers again, steps go on with its values (the same process). */
static void test_silent_ps(psg_dist_session_t *s, const model_t *m, uint64_t inc) {
    kill(ps_pid, SIGSTOP);
    psg_test_wait_stopped(ps_pid);
    double t0 = psg_test_now_sec();
    int rc = step(s, m, NULL);
    double dt = psg_test_now_sec() - t0;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ports[0]);
    int before = psg_test_failures;
    CHECK(rc < 0);
    CHECK_ERROR_HAS("/job:ps/replica:0/task:0");
    CHECK_ERROR_HAS(addr);
    CHECK_ERROR_HAS("lost the connection");
    CHECK(psg_error_code() == PSG_ERR_UNAVAILABLE);
    printf("silent ps (peer timeout %d s, step timeout %d s): the step failed after %.2f s: %s\n",
           PEER_TIMEOUT_S, STEP_TIMEOUT_MS / 1000, dt, psg_error_message());
    kill(ps_pid, SIGCONT);
    if (psg_test_failures != before) return; /* the loss went unnoticed: no recovery to check */
    float w0 = 0;
    rc = -1;
    for (int tries = 0; tries < 20 && rc < 0; tries++) rc = step(s, m, &w0);
    CHECK(rc == 0 && w0 >= 3.0f); /* its variable kept its value */
    CHECK(psg_dist_session_incarnation(s, "/job:ps/task:0") == inc);
}

/* A ps killed and started again at the same address: the step names the restart, the
 * incarnation is new, and registering again with fresh variables recovers the session. */
static void test_restarted_ps(psg_dist_session_t *s, const model_t *m, uint64_t inc) {
    kill(ps_pid, SIGKILL);
    waitpid(ps_pid, NULL, 0);
    ps_pid = spawn_ps();
    wait_up();
    int rc = step(s, m, NULL);
    CHECK(rc < 0);
    CHECK_ERROR_HAS("/job:ps/replica:0/task:0");
    CHECK_ERROR_HAS("restarted");
    printf("restarted ps: %s\n", psg_error_message());
    uint64_t now = psg_dist_session_incarnation(s, "/job:ps/task:0");
    CHECK(now != 0 && now != inc);
    CHECK(psg_dist_session_reregister(s) == 0);
    CHECK(psg_dist_session_run_init_on(s, "/job:ps/task:0") == 0);
    float w0 = 0;
    CHECK(step(s, m, &w0) == 0 && w0 == 1.0f); /* its variables start again */
}

/* ---- a peer that goes down and comes back, in this process (no ps) ---- */

/* A server bound again on ep after delay_ms (a thread: the client waits meanwhile). */
typedef struct {
    char ep[256];
    int delay_ms;
    const psg_wire_opts_t *o;
    psg_server_t *s;
} rebind_t;

static void *rebind_later(void *arg) {
    rebind_t *r = arg;
    zclock_sleep(r->delay_ms);
    for (int i = 0; i < 500 && !(r->s = psg_server_new(r->ep, r->o)); i++) zclock_sleep(10);
    return NULL;
}

/* A connection that went down is waited for until the peer timeout: a peer back before it
 * takes the send (one replaced by a server that refuses every handshake: test_curve). */
static void test_down_until_peer_timeout(void) {
    psg_wire_opts_t o = psg_wire_opts_default();
    /* the server is back 1.2 s after the disconnect, reconnects try at 1.55, 2.55, 3.55 s... */
    o.peer_timeout_ms = 5000;
    o.timeout_ms = 9000;
    rebind_t r = {.delay_ms = 1000, .o = &o, .s = psg_server_new("tcp://127.0.0.1:0", &o)};
    CHECK(r.s);
    if (!r.s) return;
    snprintf(r.ep, sizeof r.ep, "%s", psg_server_endpoint(r.s));
    psg_client_t *c = psg_client_new(r.ep, &o);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "hello"), *got = NULL;
    CHECK(c && psg_client_send(c, &req, NULL) == 0);
    CHECK(psg_server_recv(r.s, &got, 5000) == 1);
    psg_msg_destroy(&got);
    CHECK(psg_client_recv(c, &got, 0) == 0); /* no reply: nothing in flight after this */
    psg_server_destroy(&r.s);
    zclock_sleep(200); /* the disconnect seen */
    pthread_t th;
    CHECK(pthread_create(&th, NULL, rebind_later, &r) == 0);
    req = psg_msg_new(PSG_MSG_REQUEST, "back");
    int64_t t0 = psg_codec_now_ms();
    int rc = psg_client_send(c, &req, NULL);
    pthread_join(th, NULL);
    CHECK(rc == 0 && r.s && psg_server_recv(r.s, &got, 5000) == 1 && got &&
          !strcmp(got->op, "back"));
    if (rc < 0)
        fprintf(stderr, "send after %lld ms: %s\n", (long long)(psg_codec_now_ms() - t0),
                psg_error_message());
    psg_msg_destroy(&got);
    CHECK(psg_client_recv(c, &got, 0) == 0);
    psg_server_destroy(&r.s);
    psg_client_destroy(&c);
}

static void test_reconnect(void) {
    psg_server_t *s = psg_server_new("127.0.0.1:0", NULL);
    CHECK(s);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", psg_server_endpoint(s));
    psg_client_t *c = psg_client_new(ep, NULL);
    for (int round = 0; round < 3; round++) {
        psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "ping");
        uint64_t id;
        CHECK(psg_client_send(c, &req, &id) == 0);
        psg_msg_t *got = NULL;
        CHECK(psg_server_recv(s, &got, 3000) == 1);
        CHECK(got->op && strcmp(got->op, "ping") == 0 && got->id == id);
        psg_msg_t *rep = psg_msg_new(PSG_MSG_REPLY, NULL);
        CHECK(psg_server_reply(s, got, &rep) == 0);
        psg_msg_destroy(&got);
        CHECK(psg_client_recv(c, &rep, 3000) == 1 && rep->id == id);
        psg_msg_destroy(&rep);
        /* The server restarts on the same port; the client finds it again by itself. (A
         * request sent at the very moment a peer dies is lost, as over any socket: the
         * caller sees a timeout naming the peer. A restart takes longer than this pause.) */
        psg_server_destroy(&s);
        /* ZeroMQ closes the old listener in the background: wait for the port. */
        for (int i = 0; i < 200 && !(s = psg_server_new(ep, NULL)); i++) zclock_sleep(10);
        CHECK(s);
        zclock_sleep(100);
    }
    psg_server_destroy(&s);
    psg_client_destroy(&c);
}

/* A peer replaced on its address by another cluster's server (each handshake refused: a
 * disconnect of a connection that never came up) is lost at the peer timeout from when the
 * first one went down, as a silent peer is: the refusals do not start the wait again. */
static void test_replaced_by_other_cluster(void) {
    char cmd[1200], dir_a[400], dir_b[400];
    snprintf(dir_a, sizeof dir_a, "%s/lost_a", tmpdir);
    snprintf(dir_b, sizeof dir_b, "%s/lost_b", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' keygen '%s' >/dev/null && '%s' keygen '%s' >/dev/null",
             psgraph_exe, dir_a, psgraph_exe, dir_b);
    CHECK(system(cmd) == 0);
    psg_curve_keys_t *a = psg_curve_keys_load(dir_a, NULL), *b = psg_curve_keys_load(dir_b, NULL);
    PSG_ASSERT(a && b);
    psg_wire_opts_t o = psg_wire_opts_default(), other;
    o.keys = a;
    o.peer_timeout_ms = 3000;
    o.timeout_ms = 9000;
    other = o;
    other.keys = b;
    psg_server_t *s = psg_server_new("tcp://127.0.0.1:0", &o);
    PSG_ASSERT(s);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", psg_server_endpoint(s));
    psg_client_t *c = psg_client_new(ep, &o);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "Inspect"), *got = NULL;
    CHECK(c && psg_client_send(c, &req, NULL) == 0 && psg_server_recv(s, &got, 10000) == 1);
    psg_msg_destroy(&got);
    psg_server_destroy(&s);
    /* the loss seen (the Inspect never answered): the connection is down from now */
    CHECK(c && psg_client_recv(c, &got, 10000) < 0 && !got);
    CHECK_ERROR_HAS("lost the connection to the peer with 1 request");
    for (int i = 0; i < 500 && !(s = psg_server_new(ep, &other)); i++) usleep(10000);
    CHECK(s != NULL);
    /* ZeroMQ's I/O thread takes the dead connection's pipe away on its own time: a send before
     * that goes into it (test_wire's test_send_to_lost_peer) */
    usleep(300000);
    req = psg_msg_new(PSG_MSG_REQUEST, "Inspect");
    CHECK(c && psg_client_send(c, &req, NULL) < 0 && !req);
    CHECK_ERROR_HAS("cannot reach the peer to send Inspect: its connection has been down for the "
                    "peer timeout (3000 ms)");
    psg_msg_destroy(&req);
    psg_client_destroy(&c);
    psg_server_destroy(&s);
    psg_curve_keys_destroy(&a);
    psg_curve_keys_destroy(&b);
}

static void run_tests(psg_cluster_t *c) {
    psg_task_server_options_t so = {.cluster = c, .recv_timeout_ms = 3000};
    psg_task_server_t *ts = psg_task_server_new(&so);
    CHECK(ts != NULL);
    if (!ts) return;
    model_t m = {0};
    build(&m, c);
    psg_dist_session_options_t o = {.cluster = c, .server = ts, .step_timeout_ms = STEP_TIMEOUT_MS};
    psg_dist_session_t *s = psg_dist_session_new(m.g, &o);
    CHECK(s != NULL && psg_dist_session_run_init(s) == 0);
    uint64_t inc = 0;
    if (s) {
        int before = psg_test_failures;
#define REPORT(name)                                                                               \
    do {                                                                                           \
        printf("%s %s\n", psg_test_failures == before ? "ok  " : "FAIL", name);                    \
        fflush(stdout);                                                                            \
        before = psg_test_failures;                                                                \
    } while (0)
        running = "test_incarnation";
        test_incarnation(s, &m, &inc);
        REPORT("test_incarnation");
        running = "test_short_pause";
        test_short_pause(s, &m);
        REPORT("test_short_pause");
        running = "test_silent_ps";
        test_silent_ps(s, &m, inc);
        REPORT("test_silent_ps");
        running = "test_restarted_ps";
        test_restarted_ps(s, &m, inc);
        REPORT("test_restarted_ps");
        running = "the end";
#undef REPORT
        psg_dist_session_job_done(s);
    }
    psg_dist_session_destroy(&s);
    psg_graph_destroy(&m.g);
    psg_replica_setter_destroy(&m.setter);
    psg_task_server_destroy(&ts);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_liveness PATH/TO/psgraph\n");
        return 2;
    }
    psgraph_exe = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/psg_test_liveness_XXXXXX");
    PSG_ASSERT(mkdtemp(tmpdir));
    signal(SIGALRM, on_watchdog);
    alarm(WATCHDOG_S);
    snprintf(cluster_path, sizeof cluster_path, "%s/cluster.json", tmpdir);
    for (int i = 0; i < 2; i++) ports[i] = psg_test_free_port();
    FILE *f = fopen(cluster_path, "w");
    PSG_ASSERT(f);
    fprintf(
        f,
        "{\"cluster\": {\"ps\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"]}, \"peer_timeout\": %d}\n",
        ports[0], ports[1], PEER_TIMEOUT_S);
    fclose(f);
    running = "test_reconnect";
    RUN_TEST(test_reconnect);
    running = "test_down_until_peer_timeout";
    RUN_TEST(test_down_until_peer_timeout);
    running = "test_replaced_by_other_cluster";
    RUN_TEST(test_replaced_by_other_cluster);
    fflush(stdout); /* not printed again by the ps's fork */
    ps_pid = spawn_ps();
    wait_up();
    psg_cluster_t *c = psg_cluster_from_file(cluster_path, "worker", 0);
    CHECK(c != NULL && psg_cluster_peer_timeout_ms(c) == PEER_TIMEOUT_S * 1000);
    if (c) run_tests(c);
    psg_cluster_destroy(&c);
    if (ps_pid > 0) {
        kill(ps_pid, SIGCONT);
        kill(ps_pid, SIGKILL);
        waitpid(ps_pid, NULL, 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
    return psg_test_summary();
}
