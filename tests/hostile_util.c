/* A live `psgraph server` for the tests of hostile peers (test_hostile, test_hostile_graphs):
 * starting it with small limits, requests through the protocol table on fresh or given
 * connections, its memory from /proc. Not the tests themselves. */
#include "hostile_util.h"

#include "ops/state/sync_resources.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

const char *psgraph_exe;
char tmpdir[256], logdir[300];
pid_t server_pid;
int port;
char server_log[400];

/* Starts `psgraph server` on a free port with `argv` after its own arguments (NULL-ended);
 * reads the port it prints. */
int start_server_argv(const char *const *argv) {
    const char *args[64] = {psgraph_exe,      "server",
                            "--task-name",    "/job:ps/task:0",
                            "--listen",       "tcp://127.0.0.1:0",
                            "--recv-timeout", "2",
                            "--logdir",       logdir,
                            "--idle-timeout", "300"};
    int n = 12;
    for (int i = 0; argv[i] && n < 63; i++) args[n++] = argv[i];
    args[n] = NULL;
    int p[2];
    if (pipe(p) < 0) return -1;
    fflush(stdout);
    server_pid = fork();
    if (server_pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        if (server_log[0]) {
            int fd = open(server_log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd >= 0) dup2(fd, 2);
        }
        unsetenv("PSGRAPH_KEYS");
        execv(psgraph_exe, (char *const *)args);
        _exit(127);
    }
    close(p[1]);
    char buf[512] = "";
    size_t n_read = 0;
    for (ssize_t k; n_read < sizeof buf - 1 && !strchr(buf, '\n') &&
                    (k = read(p[0], buf + n_read, sizeof buf - 1 - n_read)) > 0;)
        n_read += (size_t)k, buf[n_read] = 0;
    close(p[0]);
    const char *at = strstr(buf, "tcp://127.0.0.1:");
    port = at ? atoi(at + 16) : 0;
    return port > 0 ? 0 : -1;
}

int start_server_keyed(const char *max_pending, const char *max_graphs, const char *max_wait,
                       const char *keys) {
    const char *argv[] = {"--memory-limit",
                          "256M",
                          "--max-pending",
                          max_pending,
                          "--max-graphs",
                          max_graphs,
                          "--max-wait",
                          max_wait,
                          keys ? "--keys" : NULL,
                          keys,
                          NULL};
    return start_server_argv(argv);
}

int start_server_with(const char *max_pending, const char *max_graphs, const char *max_wait) {
    return start_server_keyed(max_pending, max_graphs, max_wait, NULL);
}

int start_server(void) {
    return start_server_with("4", "8", "2");
}

/* Stops the server a test started for itself; the suite's (pid, port) is current again. */
void restore_server(pid_t first_pid, int first_port) {
    kill(server_pid, SIGTERM);
    waitpid(server_pid, NULL, 0);
    server_pid = first_pid;
    port = first_port;
}

/* The server's resident memory in MB (from /proc). */
double server_rss_mb(void) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)server_pid);
    FILE *f = fopen(path, "r");
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    return kb / 1024;
}

psg_client_t *connect_peer(void) {
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    return psg_client_new(ep, NULL);
}

/* A request through the protocol table on a fresh connection; the reply or NULL. */
psg_msg_t *call(const psg_req_t *r, int timeout_ms) {
    psg_client_t *c = connect_peer();
    psg_msg_t *m = psg_req_encode(r);
    psg_msg_t *rep = m ? psg_client_call(c, &m, timeout_ms) : NULL;
    psg_client_destroy(&c);
    return rep;
}

bool alive(void) {
    psg_req_t r = {.type = PSG_REQ_INSPECT};
    psg_msg_t *m = call(&r, 10000);
    bool ok = m && m->body && strstr((const char *)m->body->data, "\"task\"");
    psg_msg_destroy(&m);
    return ok;
}

/* The call fails with `code` and a message containing `want`, and the server still serves. */
void expect_error(const psg_req_t *r, psg_err_code_t code, const char *want) {
    psg_msg_t *m = call(r, 20000);
    CHECK(m == NULL);
    CHECK_ERROR_HAS(want);
    if (psg_error_code() != code)
        fprintf(stderr, "  code %s, wanted %s\n", psg_error_code_name(psg_error_code()),
                psg_error_code_name(code));
    CHECK(psg_error_code() == code);
    psg_msg_destroy(&m);
    CHECK(alive());
}

/* Serializes g into a RegisterGraph request (fetching output 0 of node `fetch` when >= 0). */
psg_req_t register_req(psg_graph_t *g, int fetch, char **bytes) {
    size_t len = 0;
    CHECK(psg_graph_serialize(g, bytes, &len) == 0);
    static psg_endpoint_t fx;
    fx = (psg_endpoint_t){fetch, 0};
    psg_req_t r = {.type = PSG_REQ_REGISTER_GRAPH};
    r.u.reg =
        (psg_req_register_t){.graph = *bytes, .len = len, .n_fetches = fetch >= 0, .fetches = &fx};
    return r;
}

/* Registers g through `via` (NULL: a fresh connection); its handle, 0 with the error set. */
uint64_t register_graph(psg_client_t *via, psg_graph_t *g, int fetch) {
    char *bytes = NULL;
    psg_req_t r = register_req(g, fetch, &bytes);
    psg_msg_t *req = via ? psg_req_encode(&r) : NULL;
    psg_msg_t *m = !via ? call(&r, 20000) : req ? psg_client_call(via, &req, 20000) : NULL;
    psg_rep_t rep;
    uint64_t h = m && psg_rep_decode(m, PSG_REQ_REGISTER_GRAPH, &rep) == 0 ? rep.u.handle : 0;
    psg_msg_destroy(&m);
    free(bytes);
    return h;
}

/* Finding 3: a take with timeout_ms 0 (once: no deadline, on the server thread). */
uint64_t register_take(psg_client_t *via, const char *acc) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(2);
    psg_endpoint_t h = psg_accumulator_op(g, acc, &s, 1);
    psg_endpoint_t t = psg_accumulator_take_op(g, NULL, h, 1, 0);
    uint64_t handle = register_graph(via, g, t.node);
    psg_graph_destroy(&g);
    return handle;
}

psg_client_t *connect_as(const psg_curve_keys_t *k) {
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    psg_wire_opts_t o = psg_wire_opts_default();
    o.keys = k;
    return psg_client_new(ep, &o);
}

/* Sends a RunGraph of `handle` through c (its reply comes later). */
void send_run(psg_client_t *c, uint64_t handle) {
    psg_req_t run = {.type = PSG_REQ_RUN_GRAPH, .step = 1, .u.run = {.handle = handle}};
    psg_msg_t *m = psg_req_encode(&run);
    CHECK(psg_client_send(c, &m, NULL) == 0);
}

/* Inspect's "field" through c (-1: no answer); the replies before it are dropped. */
long long inspect_field(psg_client_t *c, const char *field) {
    psg_req_t in = {.type = PSG_REQ_INSPECT};
    psg_msg_t *m = psg_req_encode(&in), *rep = psg_client_call(c, &m, 20000);
    char want[64];
    snprintf(want, sizeof want, "\"%s\":", field);
    const char *at = rep && rep->body ? strstr((const char *)rep->body->data, want) : NULL;
    long long v = at ? atoll(at + strlen(want)) : -1;
    psg_msg_destroy(&rep);
    return v;
}

/* Sends SIGTERM to pid and waits up to 30 s (a margin for a loaded machine: the bench
 * holds it to 2 s) for its exit; prints how long it took as the bench line `what`. Returns
 * what waitpid returned (0: still running), its status in *st. */
pid_t sigterm_and_wait(pid_t pid, const char *what, int *st) {
    double t_term = psg_now_sec();
    kill(pid, SIGTERM);
    pid_t w = 0;
    *st = 0;
    for (double end = t_term + 30; (w = waitpid(pid, st, WNOHANG)) == 0 && psg_now_sec() < end;)
        usleep(5000);
    printf("{\"bench\":\"%s\",\"seconds_to_exit\":%.3f}\n", what, psg_now_sec() - t_term);
    return w;
}

bool server_restart_if_dead(void) {
    int st = 0;
    if (waitpid(server_pid, &st, WNOHANG) != server_pid) return false;
    printf("  the server had exited (status 0x%x): started again for the next test\n", st);
    return start_server() == 0;
}

int hostile_begin(int argc, char **argv, const char *name) {
    psgraph_exe = argc > 1 ? argv[1] : "psgraph";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/psg_%s_XXXXXX", name);
    if (!mkdtemp(tmpdir)) return -1;
    snprintf(logdir, sizeof logdir, "%s/logdir", tmpdir);
    signal(SIGPIPE, SIG_IGN);
    if (start_server() == 0) return 0;
    fprintf(stderr, "psgraph server did not start\n");
    return -1;
}

int hostile_end(const char *what) {
    int st = 0;
    pid_t w = sigterm_and_wait(server_pid, what, &st);
    CHECK(w == server_pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (w != server_pid) kill(server_pid, SIGKILL), waitpid(server_pid, &st, 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    CHECK(system(cmd) == 0);
    return psg_test_summary();
}

/* A graph that fetches 2.5 through a chain of identities (too long to run inline). */
psg_graph_t *chain_graph(int *fetch) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_const_scalar(g, "c", 2.5f);
    for (int i = 0; i < 20; i++) {
        char name[16];
        snprintf(name, sizeof name, "id%d", i);
        x = psg_identity(g, name, x);
    }
    *fetch = x.node;
    return g;
}
