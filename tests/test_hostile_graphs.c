/* A hostile peer's graphs against a live `psgraph server`, second round (issue 27): graphs
 * that once overflowed the planner's heap or a thread's stack, and each is registered, run
 * and answered while the server keeps serving others. */
#include "hostile_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Registers g (fetching output 0 of `fetch`) through c and runs it once; the fetched
 * tensor, or NULL with the error set. */
static psg_tensor_t *register_and_run(psg_client_t *c, psg_graph_t *g, int fetch,
                                      uint64_t *handle) {
    *handle = register_graph(c, g, fetch);
    if (!*handle) return NULL;
    psg_req_t run = {.type = PSG_REQ_RUN_GRAPH, .step = 1, .u.run = {.handle = *handle}};
    psg_msg_t *m = psg_req_encode(&run), *rep = psg_client_call(c, &m, 60000);
    psg_tensor_t *t = rep && rep->ntensors == 1 ? psg_tensor_ref(rep->tensors[0]) : NULL;
    psg_msg_destroy(&rep);
    return t;
}

static void deregister(psg_client_t *c, uint64_t handle) {
    psg_req_t d = {.type = PSG_REQ_DEREGISTER_GRAPH, .u.handle = handle};
    psg_msg_t *m = psg_req_encode(&d), *rep = psg_client_call(c, &m, 20000);
    CHECK(rep != NULL);
    psg_msg_destroy(&rep);
}

/* A NoOp whose 1000 control inputs all name one Const, and an AddN of that Const listed
 * 1000 times run after it; *fetch the AddN (3000). */
static psg_graph_t *repeated_graph(int *fetch) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t x = psg_const_scalar(g, "c", 3.0f);
    psg_node_builder_t *b = psg_node_begin(g, "NoOp", "all_c");
    for (int i = 0; i < 1000; i++) psg_node_add_control(b, x.node);
    int noop = psg_node_finish(b);
    b = psg_node_begin(g, "AddN", "sum");
    for (int i = 0; i < 1000; i++) psg_node_add_input(b, x);
    psg_node_add_control(b, noop);
    psg_node_add_control(b, noop);
    *fetch = psg_node_finish_ep(b).node;
    return g;
}

/* Finding 1: the planner's depth-first walk pushed a dependency once per time it was listed,
 * on a stack sized for each node twice: a NoOp whose control inputs all name one Const
 * wrote past it (ASan: heap-buffer-overflow; the release ps died within a few dozen). */
static void test_repeated_dependencies(void) {
    psg_client_t *c = connect_peer();
    int registered = 0, ran = 0;
    for (int k = 0; k < 60 && registered == k; k++) {
        int fetch = 0;
        psg_graph_t *g = repeated_graph(&fetch);
        uint64_t h = 0;
        psg_tensor_t *t = register_and_run(c, g, fetch, &h);
        registered += h != 0;
        if (!h) printf("  graph %d: %s\n", k, psg_error_message());
        ran += t && psg_tensor_f32(t)[0] == 3000.0f;
        psg_tensor_destroy(&t);
        if (h) deregister(c, h);
        psg_graph_destroy(&g);
    }
    printf(
        "  60 graphs of a Const listed 1000 times (controls and inputs): %d registered, %d ran\n",
        registered, ran);
    CHECK(registered == 60 && ran == 60);
    CHECK(alive());
    psg_client_destroy(&c);
}

enum { FAN = 200000 };

/* An AddN of FAN inputs, all one Const of 1 (FAN). */
static psg_graph_t *fan_in_graph(int *fetch) {
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t one = psg_const_scalar(g, "one", 1.0f);
    psg_node_builder_t *b = psg_node_begin(g, "AddN", "wide");
    for (int i = 0; i < FAN; i++) psg_node_add_input(b, one);
    *fetch = psg_node_finish_ep(b).node;
    return g;
}

/* Finding 2: a node's inputs sized arrays on the server thread's stack (shape inference) and
 * on a runner's (the executor): an AddN of 200,000 inputs overflowed them. It registers and
 * runs now, and a NoOp of 200,000 control inputs plans in linear time. */
static void test_huge_fan_in(void) {
    psg_client_t *c = connect_peer();
    int fetch = -1;
    psg_graph_t *g = fan_in_graph(&fetch);
    psg_node_builder_t *b;
    CHECK(fetch >= 0);
    uint64_t h = 0;
    psg_tensor_t *t = register_and_run(c, g, fetch, &h);
    CHECK(h != 0 && t && psg_tensor_f32(t)[0] == (float)FAN);
    psg_tensor_destroy(&t);
    if (h) deregister(c, h);
    psg_graph_destroy(&g);
    g = psg_graph_new();
    psg_endpoint_t k = psg_const_scalar(g, "k", 2.0f);
    b = psg_node_begin(g, "NoOp", "wait_all");
    for (int i = 0; i < FAN; i++) psg_node_add_control(b, k.node);
    int noop = psg_node_finish(b);
    b = psg_node_begin(g, "Identity", "after");
    psg_node_add_input(b, k);
    psg_node_add_control(b, noop);
    psg_endpoint_t after = psg_node_finish_ep(b);
    t = register_and_run(c, g, after.node, &h);
    CHECK(h != 0 && t && psg_tensor_f32(t)[0] == 2.0f);
    psg_tensor_destroy(&t);
    if (h) deregister(c, h);
    psg_graph_destroy(&g);
    CHECK(alive());
    psg_client_destroy(&c);
}

/* Answers that came to c by now (timeout_ms 0: those already there), at most `want`; the
 * handles of the registered graphs into *handles (n_handles of them). */
static int take_answers(psg_client_t *c, int want, int timeout_ms, uint64_t *handles,
                        int *n_handles) {
    int got = 0;
    psg_msg_t *rep = NULL;
    while (got < want && psg_client_recv(c, &rep, timeout_ms) == 1) {
        psg_rep_t r;
        if (rep->kind == PSG_MSG_REPLY && psg_rep_decode(rep, PSG_REQ_REGISTER_GRAPH, &r) == 0)
            handles[(*n_handles)++] = r.u.handle;
        psg_msg_destroy(&rep);
        got++;
    }
    return got;
}

/* RunGraph of the job's graph `handle` (it fetches 2.5) through c: whether it did. */
static bool job_step(psg_client_t *c, uint64_t handle, int64_t step) {
    psg_req_t run = {.type = PSG_REQ_RUN_GRAPH, .step = step, .u.run = {.handle = handle}};
    psg_msg_t *m = psg_req_encode(&run), *rep = psg_client_call(c, &m, 120000);
    bool ok = rep && rep->ntensors == 1 && psg_tensor_f32(rep->tensors[0])[0] == 2.5f;
    psg_msg_destroy(&rep);
    return ok;
}

enum { HOSTILE = 16, EACH = 4 }; /* the suite's server: --max-pending 4 */

/* The hostile connections' answers come by now (wait_ms 0: those there already); how many
 * in all so far. */
static int hostile_answers(psg_client_t **hostile, int (*got)[2], uint64_t (*handles)[EACH],
                           int wait_ms) {
    int answered = 0;
    for (int i = 0; i < HOSTILE; i++) {
        got[i][0] += take_answers(hostile[i], EACH - got[i][0], wait_ms, handles[i], &got[i][1]);
        answered += got[i][0];
    }
    return answered;
}

/* Finding 2 beside another peer: each RegisterGraph of the 200,000-input AddN was parsed,
 * inferred and planned on the server thread (~30 ms), and every other peer's request waited
 * behind it (a real job beside one such peer ran at 0.09-0.47 of its rate). A runner builds
 * them now, the runners taking the peers in turn. 16 connections queue 4 of them each (64);
 * a job's 20 steps are answered while at most a quarter of the 64 are, then its registration
 * of a second graph and a step of it while at most 3/4 are (before, each of the job's
 * requests came after one registration of every connection: 16 x 22 > 64), and then all of
 * the 64 are, registered. Progress by count, not by clock. */
static void test_registrations_hold_nobody(void) {
    enum { STEPS = 20 };
    psg_client_t *job = connect_peer();
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t y = psg_identity(g, "y", psg_const_scalar(g, "k", 2.5f));
    uint64_t h = register_graph(job, g, y.node), h2 = 0;
    CHECK(h != 0);
    int fetch = -1, sent = 0;
    psg_graph_t *wide = fan_in_graph(&fetch);
    char *bytes = NULL;
    psg_req_t r = register_req(wide, fetch, &bytes);
    psg_client_t *hostile[HOSTILE];
    for (int i = 0; i < HOSTILE; i++) {
        hostile[i] = connect_peer();
        for (int k = 0; k < EACH; k++) {
            psg_msg_t *m = psg_req_encode(&r);
            sent += m && psg_client_send(hostile[i], &m, NULL) == 0;
            psg_msg_destroy(&m);
        }
    }
    CHECK(sent == HOSTILE * EACH);
    int steps = 0;
    for (int s = 1; h && s <= STEPS; s++) steps += job_step(job, h, s);
    uint64_t handles[HOSTILE][EACH];
    int got[HOSTILE][2] = {{0}}; /* answers, handles */
    int during_steps = hostile_answers(hostile, got, handles, 0);
    int chain = -1;
    psg_graph_t *g2 = chain_graph(&chain);
    bool second = (h2 = register_graph(job, g2, chain)) != 0 && job_step(job, h2, STEPS + 1);
    int during_register = hostile_answers(hostile, got, handles, 0);
    int answered = hostile_answers(hostile, got, handles, 120000), registered = 0;
    for (int i = 0; i < HOSTILE; i++) {
        registered += got[i][1];
        for (int k = 0; k < got[i][1]; k++) deregister(hostile[i], handles[i][k]);
    }
    printf("  the job's %d steps answered while %d of %d huge registrations were, its second "
           "graph registered and run while %d were; then %d answered, %d registered\n",
           steps, during_steps, sent, during_register, answered, registered);
    CHECK(steps == STEPS && during_steps <= sent / 4);
    CHECK(second && during_register <= sent * 3 / 4);
    CHECK(answered == sent && registered == sent);
    if (h) deregister(job, h);
    if (h2) deregister(job, h2);
    for (int i = 0; i < HOSTILE; i++) psg_client_destroy(&hostile[i]);
    psg_client_destroy(&job);
    psg_graph_destroy(&g);
    psg_graph_destroy(&g2);
    psg_graph_destroy(&wide);
    free(bytes);
    CHECK(alive());
}

/* ---- graphs belong to their registrant ---- */

/* RunGraph of `handle` through c: 1 when it fetched 2.5, 0 when refused with `code`. */
static int run_chain(psg_client_t *c, uint64_t handle, psg_err_code_t code) {
    psg_req_t run = {.type = PSG_REQ_RUN_GRAPH, .step = 1, .u.run = {.handle = handle}};
    psg_msg_t *m = psg_req_encode(&run), *rep = psg_client_call(c, &m, 30000);
    int rc = rep && rep->ntensors == 1 && psg_tensor_f32(rep->tensors[0])[0] == 2.5f ? 1
             : !rep && psg_error_code() == code                                      ? 0
                                                                                     : -1;
    if (rc < 0) printf("  RunGraph %llu: %s\n", (unsigned long long)handle, psg_error_message());
    psg_msg_destroy(&rep);
    return rc;
}

/* Finding 4: handles were 1, 2, 3... and any peer could deregister (or run) any graph: a
 * worker's vanished under it. Now a handle is 63 random bits and its registrant's alone
 * (another peer is refused with `denied`); a registrant that reconnects keeps its graphs,
 * and the graphs of a connection that closed go after --graph-grace. */
static void test_graphs_belong_to_registrant(void) {
    pid_t first_pid = server_pid;
    int first_port = port;
    const char *argv[] = {"--graph-grace", "10", NULL};
    CHECK(start_server_argv(argv) == 0);
    psg_client_t *a = connect_peer(), *b = connect_peer(), *watch = connect_peer();
    int fetch = 0;
    psg_graph_t *g = chain_graph(&fetch);
    uint64_t h1 = register_graph(a, g, fetch), h2 = register_graph(a, g, fetch);
    printf("  handles %llu and %llu\n", (unsigned long long)h1, (unsigned long long)h2);
    CHECK(h1 && h2 && h1 != h2 && ((h1 ^ h2) >> 32) != 0); /* not 1, 2 */
    CHECK(run_chain(b, h1, PSG_ERR_DENIED) == 0);
    CHECK_ERROR_HAS("RunGraph: graph ");
    CHECK_ERROR_HAS(" was registered by another peer");
    psg_req_t d = {.type = PSG_REQ_DEREGISTER_GRAPH, .u.handle = h2};
    psg_msg_t *m = psg_req_encode(&d), *rep = psg_client_call(b, &m, 20000);
    CHECK(!rep && psg_error_code() == PSG_ERR_DENIED);
    CHECK(run_chain(a, h1, PSG_ERR_DENIED) == 1 && run_chain(a, h2, PSG_ERR_DENIED) == 1);
    /* a reconnects (a new connection, the same client): its graphs are still its own */
    psg_client_reset(a);
    CHECK(run_chain(a, h1, PSG_ERR_DENIED) == 1);
    int before = inspect_field(watch, "graphs");
    psg_client_destroy(&a);
    /* its connection closed: the graphs go after the grace (10 s), not before */
    CHECK(inspect_field(watch, "graphs") == before);
    int left = before;
    for (double end = psg_now_sec() + 60; left != before - 2 && psg_now_sec() < end; usleep(200000))
        left = inspect_field(watch, "graphs");
    CHECK(left == before - 2);
    CHECK(run_chain(b, h1, PSG_ERR_NOT_FOUND) == 0);
    psg_graph_destroy(&g);
    psg_client_destroy(&b);
    psg_client_destroy(&watch);
    restore_server(first_pid, first_port);
}

/* ---- a small cluster with a real job ---- */

typedef struct {
    pid_t ps;
    int ps_port, worker_port;
    char cluster[400];
} cluster_t;

/* A ps task of a one-worker cluster on 127.0.0.1, with `extra` arguments (NULL-ended), and
 * its cluster file; `port` is the ps's while it runs; its stderr in tmpdir/ps_PORT.log. */
static int cluster_start(cluster_t *c, const char *const *extra) {
    c->ps_port = psg_test_free_port();
    c->worker_port = psg_test_free_port();
    snprintf(c->cluster, sizeof c->cluster, "%s/cluster_%d.json", tmpdir, c->ps_port);
    FILE *f = fopen(c->cluster, "w");
    if (!f) return -1;
    fprintf(f, "{\"cluster\": {\"ps\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"]}}\n",
            c->ps_port, c->worker_port);
    fclose(f);
    const char *args[32] = {
        psgraph_exe, "server", "--cluster",        c->cluster, "--job",          "ps",
        "--task",    "0",      "--expect-workers", "0",        "--idle-timeout", "300"};
    int n = 12;
    for (int i = 0; extra && extra[i] && n < 31; i++) args[n++] = extra[i];
    fflush(stdout);
    char log[500];
    snprintf(log, sizeof log, "%s/ps_%d.log", tmpdir, c->ps_port);
    c->ps = fork();
    if (c->ps == 0) {
        int fd = open("/dev/null", O_WRONLY), err = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        if (err >= 0) dup2(err, 2);
        execv(psgraph_exe, (char *const *)args);
        _exit(127);
    }
    int saved = port;
    port = c->ps_port;
    bool up = false;
    for (double end = psg_now_sec() + 30; !up && psg_now_sec() < end;)
        if (!(up = alive())) usleep(100000);
    port = saved;
    return up ? 0 : -1;
}

static void cluster_stop(cluster_t *c) {
    int st = 0;
    kill(c->ps, SIGTERM);
    waitpid(c->ps, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* `psgraph train` of the mlp on synthetic data as the cluster's worker for `steps` steps;
 * its exit status, its steps a second (from the final line's examples a second), and the
 * recoveries it needed (step failures). */
static int cluster_train(const cluster_t *c, int steps, double *steps_per_sec, int *failures) {
    char log[500], cmd[1600];
    snprintf(log, sizeof log, "%s/train_%d.log", tmpdir, c->ps_port);
    snprintf(
        cmd, sizeof cmd,
        "'%s' train --model mlp --data synthetic --steps %d --batch 32 --log-every 1000 --cluster '%s' "
        "--job worker --task 0 --step-timeout 30 >'%s' 2>&1",
        psgraph_exe, steps, c->cluster, log);
    int rc = system(cmd);
    *steps_per_sec = 0;
    *failures = 0;
    FILE *f = fopen(log, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        const char *eps = strstr(line, "\"examples_per_sec\":");
        if (strstr(line, "\"event\":\"done\"") && eps) *steps_per_sec = atof(eps + 19) / 32;
        *failures += strstr(line, "recovery: step") != NULL;
    }
    if (f) fclose(f);
    if (rc != 0 || *failures) {
        snprintf(cmd, sizeof cmd, "tail -5 '%s'", log);
        if (system(cmd) != 0) printf("  (no log)\n");
    }
    return rc;
}

/* Finding 3: 64 connections from one address each registered a graph and closed; the address
 * was then refused for good ("64 connections from 127.0.0.1 hold requests here"): a real job
 * from that host failed at once. A closed connection no longer counts; its graphs wait out
 * the grace and go. */
static void test_closed_connections_lock_nobody_out(void) {
    cluster_t c;
    const char *extra[] = {"--graph-grace", "3", NULL};
    CHECK(cluster_start(&c, extra) == 0);
    int saved = port;
    port = c.ps_port;
    psg_graph_t *g = psg_graph_new();
    psg_endpoint_t k = psg_const_scalar(g, "k", 1.0f);
    int registered = 0;
    for (int i = 0; i < 100; i++) {
        psg_client_t *p = connect_peer();
        registered += register_graph(p, g, k.node) != 0;
        psg_client_destroy(&p);
    }
    printf("  100 connections from 127.0.0.1 registered %d graphs and closed\n", registered);
    CHECK(registered == 100);
    psg_client_t *p = connect_peer();
    CHECK(register_graph(p, g, k.node) != 0);
    psg_client_destroy(&p);
    double sps = 0;
    int failures = 0;
    CHECK(cluster_train(&c, 40, &sps, &failures) == 0 && failures == 0);
    psg_client_t *watch = connect_peer();
    int left = -1;
    for (double end = psg_now_sec() + 60; left != 0 && psg_now_sec() < end; usleep(200000))
        left = inspect_field(watch, "graphs");
    CHECK(left == 0); /* every closed connection's graphs, the job's too, released */
    /* a line each named at most 16 a minute (it was one a closed connection: a peer that
     * connects, registers and closes filled the ps's log) */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "grep -c ': released [0-9]* graphs* of peer ' '%s/ps_%d.log'", tmpdir,
             c.ps_port);
    FILE *f = popen(cmd, "r");
    int named = -1;
    if (!f || fscanf(f, "%d", &named) != 1) named = -1;
    if (f) pclose(f);
    printf("  %d releases named in the ps's log\n", named);
    CHECK(named >= 1 && named <= 16);
    psg_client_destroy(&watch);
    psg_graph_destroy(&g);
    port = saved;
    cluster_stop(&c);
}

/* A connection its peer closed is closed to the limits at once, though its descriptor is
 * still open here (as when ZeroMQ's I/O thread, starved of the CPU, has not closed it yet):
 * finding 3's reproducer, closing each connection once registered, was refused for
 * --max-peers-per-address in 3 of ~17 rounds under load. */
static void test_closed_connection_seen_closed(void) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), cs = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof a;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECK(ls >= 0 && cs >= 0 && bind(ls, (struct sockaddr *)&a, sizeof a) == 0 &&
          listen(ls, 1) == 0 && getsockname(ls, (struct sockaddr *)&a, &al) == 0 &&
          connect(cs, (struct sockaddr *)&a, sizeof a) == 0);
    psg_conn_t conn = {.fd = accept(ls, NULL, NULL)};
    struct stat st;
    CHECK(conn.fd >= 0 && fstat(conn.fd, &st) == 0);
    conn.ino = (uint64_t)st.st_ino;
    CHECK(psg_conn_open(&conn));
    close(cs); /* the peer closes; this end's descriptor stays open */
    struct pollfd p = {.fd = conn.fd, .events = POLLIN};
    CHECK(poll(&p, 1, 10000) == 1); /* its FIN arrived */
    CHECK(!psg_conn_open(&conn));
    close(conn.fd);
    CHECK(!psg_conn_open(&conn));
    close(ls);
}

/* Finding 5: two connections with 4 takes each waiting (up to --max-wait) held all 8
 * runners; a real job beside them ran 5 steps/s instead of 124, two steps failing on 30 s
 * Recv timeouts. A wait holds no runner now (a run is queued again when it can go on): the
 * job beside 4 connections of 8 waiting takes each finishes without a failed step. Its
 * rate beside them and alone is printed (docs: the 0.8x target), not asserted. */
static void test_waits_hold_no_runner(void) {
    cluster_t c;
    const char *extra[] = {"--max-wait", "120", "--max-pending", "16", NULL};
    CHECK(cluster_start(&c, extra) == 0);
    int saved = port;
    port = c.ps_port;
    double alone = 0, beside = 0;
    int failures = 0;
    CHECK(cluster_train(&c, 300, &alone, &failures) == 0 && failures == 0);
    enum { PEERS = 4, TAKES = 8 };
    psg_client_t *greedy[PEERS];
    int sent = 0;
    for (int i = 0; i < PEERS; i++) {
        greedy[i] = connect_peer();
        for (int k = 0; k < TAKES; k++) {
            char name[32];
            snprintf(name, sizeof name, "acc_w%d_%d", i, k);
            uint64_t h = register_take(greedy[i], name);
            if (h) send_run(greedy[i], h), sent++;
        }
    }
    CHECK(sent == PEERS * TAKES);
    usleep(500000); /* the takes are waiting */
    CHECK(cluster_train(&c, 300, &beside, &failures) == 0 && failures == 0);
    printf("{\"bench\":\"hostile_waits\",\"waiting_takes\":%d,\"steps_per_sec_alone\":%.1f,"
           "\"steps_per_sec_beside\":%.1f,\"ratio\":%.2f,\"target\":0.8}\n",
           sent, alone, beside, alone > 0 ? beside / alone : 0);
    /* the takes still wait: none was answered */
    psg_msg_t *rep = NULL;
    int answered = 0;
    for (int i = 0; i < PEERS; i++)
        while (psg_client_recv(greedy[i], &rep, 0) == 1) answered++, psg_msg_destroy(&rep);
    CHECK(answered == 0);
    for (int i = 0; i < PEERS; i++) psg_client_destroy(&greedy[i]);
    port = saved;
    cluster_stop(&c); /* SIGTERM ends the waits at once */
}

/* Steps go to the runner that went idle last: one peer's steps one after another, each
 * sent once every runner is idle again, all run on one of the 8 runners (a condition
 * variable's waiter that waited longest went round all 8, and under AddressSanitizer each
 * held its own 1 MB quarantine of freed memory). */
static void test_steps_keep_to_few_runners(void) {
    pid_t first_pid = server_pid;
    int first_port = port;
    const char *argv[] = {"--memory-limit", "256M", NULL};
    CHECK(start_server_argv(argv) == 0);
    psg_client_t *c = connect_peer();
    int fetch = -1;
    psg_graph_t *g = chain_graph(&fetch);
    uint64_t h = register_graph(c, g, fetch);
    CHECK(h != 0);
    int ran = 0;
    for (int i = 0; h && i < 32; i++) {
        /* the runner that replied is back on the idle stack (it replies, then frees) */
        for (int k = 0; k < 2000 && inspect_field(c, "runners_idle") < 8; k++) usleep(1000);
        ran += run_chain(c, h, PSG_ERR_UNKNOWN) == 1;
    }
    CHECK(ran == 32);
    long long runners = inspect_field(c, "runners"), used = inspect_field(c, "runners_used");
    printf("  runners %lld, used by 32 steps one after another: %lld\n", runners, used);
    CHECK(runners == 8 && used == 1);
    psg_graph_destroy(&g);
    psg_client_destroy(&c);
    restore_server(first_pid, first_port);
}

/* ---- a real job beside each finding's reproducer ---- */

typedef struct {
    int finding; /* 1-4 */
    atomic_bool started, stop;
    int rounds, wrong; /* reproductions, and answers not the ones expected */
    char first_wrong[256];
    pthread_t thread;
} reproducer_t;

/* A request through c that must be refused with `code` (or `alt`); false when it was not. */
static bool refused_with(psg_client_t *c, const psg_req_t *r, psg_err_code_t code,
                         psg_err_code_t alt) {
    psg_msg_t *m = psg_req_encode(r), *rep = psg_client_call(c, &m, 20000);
    bool ok = !rep && (psg_error_code() == code || psg_error_code() == alt);
    psg_msg_destroy(&rep);
    return ok;
}

/* One reproduction of finding r->finding through c (g and fetch: its graph); false when an
 * answer was not the expected one. */
static bool reproduce(reproducer_t *r, psg_client_t *c, psg_graph_t *g, int fetch) {
    uint64_t h = 0;
    if (r->finding <= 2) { /* a graph that overflowed the planner's heap, a thread's stack */
        psg_tensor_t *t = register_and_run(c, g, fetch, &h);
        bool ok = t && psg_tensor_f32(t)[0] == (r->finding == 1 ? 3000.0f : (float)FAN);
        psg_tensor_destroy(&t);
        psg_req_t d = {.type = PSG_REQ_DEREGISTER_GRAPH, .u.handle = h};
        psg_msg_t *m = h ? psg_req_encode(&d) : NULL,
                  *rep = m ? psg_client_call(c, &m, 20000) : NULL;
        ok = ok && rep;
        psg_msg_destroy(&rep);
        return ok;
    }
    if (r->finding == 3) { /* a connection that registers a graph and closes */
        psg_client_t *p = connect_peer();
        h = register_graph(p, g, fetch);
        psg_client_destroy(&p);
        return h != 0;
    }
    /* finding 4: the handles the attack guessed (1, 2, 3...), run and deregistered: refused */
    psg_req_t run = {
        .type = PSG_REQ_RUN_GRAPH, .step = 1, .u.run = {.handle = (uint64_t)r->rounds + 1}};
    psg_req_t d = {.type = PSG_REQ_DEREGISTER_GRAPH, .u.handle = (uint64_t)r->rounds + 1};
    return refused_with(c, &run, PSG_ERR_NOT_FOUND, PSG_ERR_DENIED) &&
           refused_with(c, &d, PSG_ERR_NOT_FOUND, PSG_ERR_DENIED);
}

static void *reproducer_main(void *arg) {
    reproducer_t *r = arg;
    int fetch = 0;
    psg_graph_t *g = r->finding == 1   ? repeated_graph(&fetch)
                     : r->finding == 2 ? fan_in_graph(&fetch)
                                       : chain_graph(&fetch);
    psg_client_t *c = connect_peer();
    atomic_store(&r->started, true);
    do {
        if (!reproduce(r, c, g, fetch) && r->wrong++ == 0)
            snprintf(r->first_wrong, sizeof r->first_wrong, "%s", psg_error_message());
        r->rounds++;
    } while (!atomic_load(&r->stop));
    psg_client_destroy(&c);
    psg_graph_destroy(&g);
    return NULL;
}

/* Where a run's CPU went: the ps's (from /proc), this process's (the reproducer's thread and
 * its ZeroMQ threads: nothing else runs here during a train), the trains' (waited children),
 * and the wall clock; seconds. */
typedef struct {
    double wall, ps, self, job;
} cpu_mark_t;

static cpu_mark_t cpu_mark(pid_t ps) {
    cpu_mark_t m = {.wall = psg_now_sec()};
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)ps);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    const char *q = strrchr(buf, ')'); /* then state, and utime, stime as fields 12, 13 */
    unsigned long long ut = 0, st = 0;
    if (q && sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
        m.ps = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    m.self = (double)self.ru_utime.tv_sec + (double)self.ru_stime.tv_sec +
             (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
    m.job = (double)kids.ru_utime.tv_sec + (double)kids.ru_stime.tv_sec +
            (double)(kids.ru_utime.tv_usec + kids.ru_stime.tv_usec) / 1e6;
    return m;
}

/* The bar for findings 1-4 (5: test_waits_hold_no_runner): a real job beside each
 * reproducer, looping in a thread of this process against the job's ps, finishes with no
 * failed step (no lock-out), every reproduction answered as expected and the ps alive (no
 * crash). The job's rate alone, then beside it, alternated, is printed (docs: the 0.8x
 * target; bench/hostile.sh --beside), not asserted. PSG_BESIDE_STEPS: the job's steps
 * (150). */
static void test_job_beside_reproducers(void) {
    static const char *names[] = {"", "repeated_dependencies", "fan_in_200000",
                                  "closed_connections", "guessed_handles"};
    const char *env = getenv("PSG_BESIDE_STEPS");
    int steps = env && atoi(env) > 0 ? atoi(env) : 150;
    cluster_t c;
    CHECK(cluster_start(&c, NULL) == 0);
    int saved = port;
    port = c.ps_port;
    const char *only = getenv("PSG_BESIDE_FINDINGS"); /* e.g. "3": those findings only */
    for (int finding = 1; finding <= 4; finding++) {
        if (only && !strchr(only, '0' + finding)) continue;
        double alone = 0, beside = 0;
        int failures = 0;
        cpu_mark_t m0 = cpu_mark(c.ps);
        CHECK(cluster_train(&c, steps, &alone, &failures) == 0 && failures == 0);
        cpu_mark_t m1 = cpu_mark(c.ps);
        reproducer_t r = {.finding = finding};
        bool made = pthread_create(&r.thread, NULL, reproducer_main, &r) == 0;
        CHECK(made);
        while (made && !atomic_load(&r.started)) usleep(10000);
        cpu_mark_t m2 = cpu_mark(c.ps);
        CHECK(cluster_train(&c, steps, &beside, &failures) == 0 && failures == 0);
        cpu_mark_t m3 = cpu_mark(c.ps);
        atomic_store(&r.stop, true);
        if (made) pthread_join(r.thread, NULL);
        /* the first wrong answer in the line too (bench/hostile.sh keeps only the lines) */
        for (char *q = r.first_wrong; *q; q++)
            if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '\'';
        printf("{\"bench\":\"hostile_beside\",\"finding\":%d,\"reproducer\":\"%s\","
               "\"reproductions\":%d,\"wrong\":%d,\"steps_per_sec_alone\":%.1f,"
               "\"steps_per_sec_beside\":%.1f,\"ratio\":%.2f,\"target\":0.8,"
               "\"first_wrong\":\"%s\",\"seconds_alone\":%.2f,\"seconds_beside\":%.2f,"
               "\"job_cpu_alone\":%.2f,\"job_cpu_beside\":%.2f,\"ps_cpu_alone\":%.2f,"
               "\"ps_cpu_beside\":%.2f,\"reproducer_cpu\":%.2f,\"cores\":%ld}\n",
               finding, names[finding], r.rounds, r.wrong, alone, beside,
               alone > 0 ? beside / alone : 0, r.first_wrong, m1.wall - m0.wall, m3.wall - m2.wall,
               m1.job - m0.job, m3.job - m2.job, m1.ps - m0.ps, m3.ps - m2.ps, m3.self - m2.self,
               sysconf(_SC_NPROCESSORS_ONLN));
        CHECK(r.rounds > 0 && r.wrong == 0);
        CHECK(alive());
    }
    port = saved;
    cluster_stop(&c);
}

/* ---- one memory budget for the task ---- */

/* A graph that assigns a Random of `mb` MiB of f32 to variable `var`; its Assign's id. */
static psg_graph_t *random_var_graph(const char *var, int64_t mb, int *assign) {
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(mb << 18);
    psg_node_builder_t *b = psg_node_begin(g, "Random", "r");
    psg_node_attr_str(b, "distribution", "uniform");
    psg_node_attr_shape(b, "shape", &s);
    psg_node_attr_float(b, "scale", 1.0);
    psg_node_attr_int(b, "seed", 1);
    psg_endpoint_t r = psg_node_finish_ep(b);
    psg_endpoint_t v = psg_var_handle(g, var, PSG_DT_F32, &s);
    *assign = psg_assign(g, "assign", v, r);
    return g;
}

/* Registers g (running `target`) through c and runs it; 1 when both went, 0 when one was
 * refused with code `limit` (the error kept), -1 otherwise. */
static int register_run_target(psg_client_t *c, psg_graph_t *g, int target) {
    char *bytes = NULL;
    size_t len = 0;
    CHECK(psg_graph_serialize(g, &bytes, &len) == 0);
    psg_req_t r = {.type = PSG_REQ_REGISTER_GRAPH,
                   .u.reg = {.graph = bytes, .len = len, .n_targets = 1, .targets = &target}};
    psg_msg_t *m = psg_req_encode(&r), *rep = psg_client_call(c, &m, 60000);
    free(bytes);
    psg_rep_t rr;
    uint64_t h = rep && psg_rep_decode(rep, PSG_REQ_REGISTER_GRAPH, &rr) == 0 ? rr.u.handle : 0;
    psg_msg_destroy(&rep);
    if (h) {
        psg_req_t run = {.type = PSG_REQ_RUN_GRAPH, .step = 1, .u.run = {.handle = h}};
        m = psg_req_encode(&run);
        rep = psg_client_call(c, &m, 60000);
    }
    int rc = rep ? 1 : psg_error_code() == PSG_ERR_LIMIT ? 0 : -1;
    if (rc <= 0) printf("  %s: %s\n", h ? "RunGraph" : "RegisterGraph", psg_error_message());
    psg_msg_destroy(&rep);
    return rc;
}

/* Finding 6: --memory-limit was per peer (4 peers x 480 MB reached 1.2 GB beside a limit of
 * 600 MB), counted serialized graph bytes (a graph takes ~14x as built) and nothing a step
 * made at run time. Now one budget for the task: graphs as built, every buffer of a peer's
 * steps, the requests waiting; a peer may plan at most half of it. Four peers each keeping
 * a 200 MiB variable of a Random: at most two fit, the others are refused with code
 * `limit` naming the node or the budget, and what the task holds never passes 600 MB. */
static void test_one_memory_budget(void) {
    pid_t first_pid = server_pid;
    int first_port = port;
    const char *argv[] = {"--memory-limit", "600M", "--peer-memory", "400M", NULL};
    CHECK(start_server_argv(argv) == 0);
    psg_client_t *watch = connect_peer();
    /* a graph over the peer's share, one over the task's limit: refused, named */
    int assign = 0;
    psg_graph_t *g = random_var_graph("share", 250, &assign);
    CHECK(register_run_target(watch, g, assign) == 0);
    CHECK_ERROR_HAS("--peer-memory");
    psg_graph_destroy(&g);
    g = random_var_graph("big", 400, &assign);
    CHECK(register_run_target(watch, g, assign) == 0);
    CHECK_ERROR_HAS(
        "over the task's memory limit of 629145600 bytes (--memory-limit); the largest is node 'r'");
    psg_graph_destroy(&g);
    /* a graph as built is charged as it is held: 20,000 nodes take far more than their bytes */
    g = psg_graph_new();
    psg_endpoint_t k = psg_const_scalar(g, "k", 1.0f);
    for (int i = 0; i < 20000; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        psg_identity(g, name, k);
    }
    char *bytes = NULL;
    psg_req_t reg = register_req(g, k.node, &bytes);
    long long before = inspect_field(watch, "held");
    psg_msg_t *m = psg_req_encode(&reg), *rep = psg_client_call(watch, &m, 60000);
    long long grown = inspect_field(watch, "held") - before;
    printf("  a graph of 20,001 nodes: %zu bytes serialized, %lld held as built\n", reg.u.reg.len,
           grown);
    CHECK(rep && grown > 10 * (long long)reg.u.reg.len);
    psg_msg_destroy(&rep);
    free(bytes);
    psg_graph_destroy(&g);
    double rss0 = server_rss_mb();
    int kept = 0, refused = 0;
    psg_client_t *peers[4];
    for (int i = 0; i < 4; i++) {
        char var[16];
        snprintf(var, sizeof var, "v%d", i);
        peers[i] = connect_peer();
        g = random_var_graph(var, 180, &assign);
        int rc = register_run_target(peers[i], g, assign);
        kept += rc == 1;
        refused += rc == 0;
        if (rc == 0)
            CHECK(strstr(psg_error_message(), "node 'r' (Random)") ||
                  strstr(psg_error_message(), "--memory-limit"));
        psg_graph_destroy(&g);
    }
    long long held = inspect_field(watch, "held"), peak = inspect_field(watch, "peak");
    double rss = server_rss_mb() - rss0;
    printf(
        "  4 peers x a 180 MiB variable in 600 MiB: %d kept, %d refused; the task holds %.0f MB (peak %.0f MB), "
        "RSS %+.0f MB\n",
        kept, refused, held / 1e6, peak / 1e6, rss);
    CHECK(kept >= 2 && kept <= 3 && kept + refused == 4);
    CHECK(peak > 0 && peak <= 600LL << 20);
    CHECK(!RSS_CHECKED || rss < 700);
    for (int i = 0; i < 4; i++) psg_client_destroy(&peers[i]);
    psg_client_destroy(&watch);
    CHECK(alive());
    restore_server(first_pid, first_port);
}

/* ---- codes, connections ---- */

/* Finding 9: a graph that does not parse and a feed that does not fit had no `code` (every
 * failure has one, docs/wire.md), and fetching a resource handle was answered `no_memory`
 * ("cannot build the reply"). */
static void test_every_failure_has_a_code(void) {
    psg_req_t reg = {.type = PSG_REQ_REGISTER_GRAPH,
                     .u.reg = {.graph = "\x81\xa6"
                                        "format\xa3"
                                        "bad",
                               .len = 12}};
    expect_error(&reg, PSG_ERR_BAD_REQUEST, "graph: field 'format'");
    psg_graph_t *g = psg_graph_new();
    psg_shape_t s = psg_shape_1d(4);
    psg_endpoint_t v = psg_var_handle(g, "v", PSG_DT_F32, &s);
    char *bytes = NULL;
    reg = register_req(g, v.node, &bytes);
    expect_error(&reg, PSG_ERR_BAD_REQUEST,
                 "fetch 0 is output 0 of node 'v' (VarHandle), a resource handle");
    free(bytes);
    psg_graph_destroy(&g);
    /* a feed of the wrong dtype */
    g = psg_graph_new();
    psg_endpoint_t p = psg_placeholder(g, "p", PSG_DT_F32, &s), y = psg_identity(g, "y", p);
    for (int i = 0; i < 20; i++) y = psg_identity(g, NULL, y); /* not inline */
    psg_req_t r = register_req(g, y.node, &bytes);
    psg_endpoint_t fe = {p.node, 0};
    r.u.reg.n_feeds = 1;
    r.u.reg.feeds = &fe;
    psg_client_t *c = connect_peer();
    psg_msg_t *m = psg_req_encode(&r), *rep = psg_client_call(c, &m, 20000);
    psg_rep_t rr;
    uint64_t h = rep && psg_rep_decode(rep, PSG_REQ_REGISTER_GRAPH, &rr) == 0 ? rr.u.handle : 0;
    psg_msg_destroy(&rep);
    CHECK(h != 0);
    psg_tensor_t *wrong = psg_tensor_zeros(PSG_DT_I32, &s);
    psg_req_t run = {.type = PSG_REQ_RUN_GRAPH,
                     .step = 1,
                     .u.run = {.handle = h, .n_feeds = 1, .feeds = &wrong}};
    m = psg_req_encode(&run);
    rep = psg_client_call(c, &m, 20000);
    CHECK(!rep && psg_error_code() == PSG_ERR_BAD_REQUEST);
    CHECK_ERROR_HAS("node 'p' (Placeholder): fed i32[4], expects f32[4]");
    psg_msg_destroy(&rep);
    psg_tensor_destroy(&wrong);
    psg_client_destroy(&c);
    free(bytes);
    psg_graph_destroy(&g);
}

/* Finding 8: under ulimit -n 1024, 1,100 idle TCP connections left new clients with no reply.
 * Connections are capped (--max-connections; by default what ulimit -n allows): at the cap
 * a new one closes the oldest that never finished its handshake, logged once, so 100 idle
 * sockets against a cap of 32 leave the server serving a real client. */
static void test_connection_cap(void) {
    pid_t first_pid = server_pid;
    int first_port = port;
    snprintf(server_log, sizeof server_log, "%s/cap.log", tmpdir);
    const char *argv[] = {"--max-connections", "32", NULL};
    CHECK(start_server_argv(argv) == 0);
    server_log[0] = 0;
    enum { IDLE = 100 };
    int fds[IDLE], open_fds = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    for (int i = 0; i < IDLE; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        open_fds += fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&a, sizeof a) == 0;
    }
    CHECK(open_fds == IDLE);
    usleep(500000);
    CHECK(alive()); /* a client that speaks: served */
    int closed = 0;
    for (int i = 0; i < IDLE; i++) {
        char buf[64];
        struct timeval tv = {0, 100000};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t n;
        while ((n = recv(fds[i], buf, sizeof buf, 0)) > 0) { /* ZeroMQ's greeting, then the close */
        }
        closed += n == 0;
        close(fds[i]);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "grep -c 'connections open, at its cap of 32' '%s/cap.log'", tmpdir);
    FILE *f = popen(cmd, "r");
    int lines = 0;
    if (!f || fscanf(f, "%d", &lines) != 1) lines = -1;
    if (f) pclose(f);
    printf("  %d idle connections against a cap of 32: %d closed by the server, %d log line(s)\n",
           IDLE, closed, lines);
    CHECK(closed >= IDLE - 32 && lines == 1);
    CHECK(alive());
    restore_server(first_pid, first_port);
}

/* PSG_HOSTILE_ONLY=name runs that test alone (bench/hostile.sh --waits repeats one). */
#define RUN_SOME(fn)                                                                               \
    do {                                                                                           \
        const char *only = getenv("PSG_HOSTILE_ONLY");                                             \
        if (!only || !strcmp(only, #fn)) RUN_TEST(fn);                                             \
    } while (0)

int main(int argc, char **argv) {
    if (hostile_begin(argc, argv, "hostile_graphs") < 0) return 1;
    RUN_SOME(test_repeated_dependencies);
    CHECK(!server_restart_if_dead());
    RUN_SOME(test_huge_fan_in);
    CHECK(!server_restart_if_dead());
    RUN_SOME(test_registrations_hold_nobody);
    RUN_SOME(test_graphs_belong_to_registrant);
    RUN_SOME(test_closed_connection_seen_closed);
    RUN_SOME(test_closed_connections_lock_nobody_out);
    RUN_SOME(test_waits_hold_no_runner);
    RUN_SOME(test_steps_keep_to_few_runners);
    RUN_SOME(test_job_beside_reproducers);
    RUN_SOME(test_one_memory_budget);
    RUN_SOME(test_every_failure_has_a_code);
    RUN_SOME(test_connection_cap);
    return hostile_end("hostile_graphs_sigterm");
}
