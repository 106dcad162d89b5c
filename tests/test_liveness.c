/* Liveness with a real `psgraph server` ps process and a worker (this process): every reply
 * carries the task's incarnation; a ps paused for less than the peer timeout only delays a
 * step; a ps silent for longer fails the step with an error naming it long before the step
 * timeout (heartbeats), and is served again once it answers; a ps restarted at the same
 * address is known as a new process by its incarnation, and the session recovers from it.
 * A wait that heartbeats should end and does not fails the test in at most WATCHDOG_S, and the
 * ps dies with this process whatever ends it (never left behind stopped).
 * Not the emulated hosts' cut links (test_hosts_launch.sh). */
#include "core/json.h"
#include "tests/testutil.h"

#include <inttypes.h>
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
