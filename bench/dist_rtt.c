/* Round trip of a distributed step through the task server path, between two processes
 * (a forked ps task and this worker), beside a raw ZeroMQ round trip between the same
 * two processes in the same run: a one-op step (a Const on the ps, fetched by RunGraph's
 * reply), a step with a cross-process Recv (a variable read on the ps, pulled by the
 * worker), and a push (a tensor of the worker's, pulled by the ps and added to a variable
 * there: the ps partition receives, so it runs on a runner thread, and its RunGraph reply
 * leaves from that thread, as a training step's updates and reads do). One JSON line per
 * result. Not a throughput benchmark (bench_transport, dist.sh).
 * The four are measured in ROUNDS rounds, each round raw, one-op, read + Recv, then the push (N
 * round trips each), so that the machine's drift falls on all four: on a quiet 2-core machine
 * raw ZeroMQ's median alone moved 83-120 us between back-to-back runs. Each line gives the
 * medians over every round, their ratio, and the ratio of each round's medians, and what the
 * worker's calling thread spent a round trip beside raw ZeroMQ's: its CPU time and how often
 * it was preempted (on a loaded machine these move far less than the times).
 *
 *   bench_dist_rtt [--iters N] [--rounds R] [--keys DIR]
 *
 * --keys DIR: the cluster's keys (psgraph keygen DIR): every connection, the raw one too,
 * speaks CURVE with them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RUSAGE_THREAD */
#endif
#include "psgraph/psgraph.h"

#include <czmq.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

/* What the calling thread spent: its CPU time and its involuntary context switches (it was
 * preempted), the figures a loaded machine moves least (the step's own work and how often
 * waking a ZeroMQ I/O thread took its core); per round trip over a measure. */
typedef struct {
    double cpu_us, preempted;
} thread_cost_t;

static thread_cost_t thread_cost(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    struct rusage u;
    getrusage(RUSAGE_THREAD, &u);
    return (thread_cost_t){(double)ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3, (double)u.ru_nivcsw};
}

/* Adds what the thread spent since `from`, per round trip of n, into *sum. */
static void add_cost(thread_cost_t *sum, thread_cost_t from, int n) {
    thread_cost_t now = thread_cost();
    sum->cpu_us += (now.cpu_us - from.cpu_us) / n;
    sum->preempted += (now.preempted - from.preempted) / n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void stats(double *v, int n, double *median, double *p99) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *median = v[n / 2];
    *p99 = v[(int)(n * 0.99)];
}

static const char *keys_dir; /* --keys: CURVE for the task servers and the raw peers */
/* --transport ipc: the tasks on Unix sockets (psgraph's stream transport unless
 * PSGRAPH_IPC=zmq), the raw peers on ZeroMQ's ipc:// in the same folder */
static bool ipc;
static char raw_ep[160];

/* The raw peer's socket: plain, or a CURVE server / client with the cluster's pair. */
static zsock_t *raw_socket(int type, const char *ep) {
    zsock_t *z = zsock_new(type);
    if (z && keys_dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.key", keys_dir, PSG_CURVE_CLUSTER);
        zcert_t *cert = zcert_load(path);
        if (cert) {
            zcert_apply(cert, z);
            if (type == ZMQ_ROUTER)
                zsock_set_curve_server(z, 1);
            else
                zsock_set_curve_serverkey(z, zcert_public_txt(cert));
        }
        zcert_destroy(&cert);
    }
    if (z && (type == ZMQ_ROUTER ? zsock_bind(z, "%s", ep) : zsock_connect(z, "%s", ep)) < 0)
        zsock_destroy(&z);
    return z;
}

/* The ps process: the task server, and a raw ZeroMQ echo beside it. */
static int ps_main(const char *tf_config) {
    psg_cluster_t *c = psg_cluster_parse(tf_config, "bench");
    psg_task_server_options_t o = {.cluster = c, .expect_workers = 1, .idle_timeout_ms = 120000};
    psg_task_server_t *ts = c ? psg_task_server_new(&o) : NULL;
    if (!ts) {
        fprintf(stderr, "bench_dist_rtt: ps: %s\n", psg_error_message());
        return 1;
    }
    zsock_t *r = raw_socket(ZMQ_ROUTER, raw_ep);
    void *s = zsock_resolve(r);
    char id[256], buf[256];
    for (;;) {
        int idn = zmq_recv(s, id, sizeof id, 0);
        int n = idn < 0 ? -1 : zmq_recv(s, buf, sizeof buf, 0);
        if (n < 0 || (n == 4 && !memcmp(buf, "stop", 4))) break;
        zmq_send(s, id, (size_t)idn, ZMQ_SNDMORE);
        zmq_send(s, buf, (size_t)n, 0);
    }
    zsock_destroy(&r);
    psg_task_server_wait(ts, 10000);
    psg_task_server_destroy(&ts);
    psg_cluster_destroy(&c);
    return 0;
}

/* n raw ZeroMQ round trips (after 200 to warm up) into v: the same two processes. */
static void measure_raw(void *ds, double *v, int n) {
    char buf[64];
    for (int i = 0; i < n + 200; i++) {
        double t0 = now_us();
        zmq_send(ds, "ping0123", 8, 0);
        zmq_recv(ds, buf, sizeof buf, 0);
        if (i >= 200) v[i - 200] = now_us() - t0;
    }
}

/* n round trips of step c (after 200 to warm up) into v, what they cost the thread into *cost. */
static int measure_step(psg_dist_callable_t *c, double *v, int n, thread_cost_t *cost) {
    thread_cost_t t = thread_cost();
    for (int i = 0; i < n + 200; i++) {
        psg_tensor_t *out = NULL;
        double t0 = now_us();
        if (psg_dist_callable_run(c, NULL, &out) < 0) {
            fprintf(stderr, "bench_dist_rtt: %s\n", psg_error_message());
            return -1;
        }
        if (i >= 200) v[i - 200] = now_us() - t0;
        psg_tensor_destroy(&out);
    }
    add_cost(cost, t, n + 200);
    return 0;
}

/* One line: v and raw hold rounds x n round trips (round r at r * n); sorts them. */
static void print_line(const char *what, double *v, double *raw, int n, int rounds,
                       thread_cost_t cost, thread_cost_t raw_cost) {
    char per[512] = "";
    size_t len = 0;
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        double m, rm, p;
        stats(v + (size_t)r * n, n, &m, &p);
        stats(raw + (size_t)r * n, n, &rm, &p);
        double ratio = m / rm;
        best = r == 0 || ratio < best ? ratio : best;
        len += (size_t)snprintf(per + len, sizeof per - len, "%s%.2f", r ? "," : "", ratio);
        if (len >= sizeof per) break;
    }
    double med, p99, raw_med, raw_p99;
    stats(v, n * rounds, &med, &p99);
    stats(raw, n * rounds, &raw_med, &raw_p99);
    const char *ipc_env = getenv("PSGRAPH_IPC");
    const char *transport = !ipc                                 ? "tcp"
                            : ipc_env && !strcmp(ipc_env, "zmq") ? "zmq_ipc"
                                                                 : "stream";
    printf("{\"bench\":\"dist_step_rtt\",\"step\":\"%s\",\"transport\":\"%s\",\"curve\":%s,"
           "\"iters\":%d,\"rounds\":%d,"
           "\"psgraph_median_us\":%.1f,\"psgraph_p99_us\":%.1f,\"raw_zmq_median_us\":%.1f,"
           "\"ratio_to_raw\":%.2f,\"ratio_per_round\":[%s],\"ratio_best_round\":%.2f,"
           "\"cpu_us_per_step\":%.2f,\"raw_cpu_us_per_step\":%.2f,\"preempted_per_step\":%.3f,"
           "\"raw_preempted_per_step\":%.3f,\"target_median_us\":150}\n",
           what, transport, keys_dir ? "true" : "false", n, rounds, med, p99, raw_med,
           med / raw_med, per, best, cost.cpu_us / rounds, raw_cost.cpu_us / rounds,
           cost.preempted / rounds, raw_cost.preempted / rounds);
    fflush(stdout);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_dist_rtt [--iters N] [--rounds R] [--keys DIR] [--transport tcp|ipc]\n"
            "  round trips of a one-op step, a step with a cross-process Recv and a push\n"
            "  applied on the ps, through the task server (a forked ps task), beside raw\n"
            "  ZeroMQ; one JSON line each\n"
            "  --iters N   round trips a measure in each round (default 3000, at least 10)\n"
            "  --rounds R  rounds, each raw ZeroMQ then the three steps (default 3, 1 to 20)\n"
            "  --keys DIR  the cluster's CURVE keys (psgraph keygen DIR): every connection speaks\n"
            "              CURVE, the raw one too\n"
            "  --transport ipc  the tasks on Unix sockets (psgraph's own stream transport;\n"
            "              PSGRAPH_IPC=zmq: ZeroMQ's ipc://), raw ZeroMQ on ipc:// too\n"
            "              (default tcp: loopback TCP for both)\n");
}

/* The command line into iters, rounds and the globals; -1: go on, else the exit status. */
static int parse_args(int argc, char **argv, int *iters, int *rounds) {
    for (int i = 1; i < argc; i++) {
        bool has_value = i + 1 < argc;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--iters") && has_value) {
            *iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--rounds") && has_value) {
            *rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--transport") && has_value) {
            ipc = !strcmp(argv[++i], "ipc");
            if (!ipc && strcmp(argv[i], "tcp")) {
                fprintf(stderr, "bench_dist_rtt: --transport is tcp or ipc, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--keys") && has_value) {
            keys_dir = argv[++i];
        } else {
            fprintf(stderr, "bench_dist_rtt: unexpected '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

int main(int argc, char **argv) {
    int iters = 3000, rounds = 3;
    int done = parse_args(argc, argv, &iters, &rounds);
    if (done >= 0) return done;
    if (iters < 10) iters = 10;
    if (rounds < 1 || rounds > 20) rounds = rounds < 1 ? 1 : 20;
    char ps_addr[128], w_addr[128], dir[] = "/tmp/psg_rtt.XXXXXX";
    if (ipc && !mkdtemp(dir)) {
        fprintf(stderr, "bench_dist_rtt: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    if (ipc) {
        snprintf(ps_addr, sizeof ps_addr, "ipc://%s/ps0", dir);
        snprintf(w_addr, sizeof w_addr, "ipc://%s/w0", dir);
        snprintf(raw_ep, sizeof raw_ep, "ipc://%s/raw", dir);
    } else {
        snprintf(ps_addr, sizeof ps_addr, "127.0.0.1:%d", free_port());
        snprintf(w_addr, sizeof w_addr, "127.0.0.1:%d", free_port());
        snprintf(raw_ep, sizeof raw_ep, "tcp://127.0.0.1:%d", free_port());
    }
    char cfg[1400];
    snprintf(cfg, sizeof cfg,
             "{\"cluster\": {\"ps\": [\"%s\"], \"worker\": [\"%s\"]}, "
             "\"task\": {\"type\": \"%%s\", \"index\": 0}%s%s%s}",
             ps_addr, w_addr, keys_dir ? ", \"keys\": \"" : "", keys_dir ? keys_dir : "",
             keys_dir ? "\"" : "");
    char ps_cfg[1500], w_cfg[1500];
    snprintf(ps_cfg, sizeof ps_cfg, cfg, "ps");
    snprintf(w_cfg, sizeof w_cfg, cfg, "worker");
    fflush(stdout);
    pid_t pid = fork(); /* before any ZeroMQ context exists */
    if (pid == 0) _exit(ps_main(ps_cfg));
    psg_cluster_t *c = psg_cluster_parse(w_cfg, "bench");
    psg_task_server_options_t so = {.cluster = c};
    psg_task_server_t *ts = c ? psg_task_server_new(&so) : NULL;
    psg_graph_t *g = psg_graph_new();
    psg_replica_setter_t *setter = c ? psg_dist_replica_setter_new(c, PSG_PS_GREEDY) : NULL;
    psg_dist_session_t *sess = NULL;
    int rc = 1;
    if (!ts || !setter) goto done;
    psg_graph_push_replica_setter(g, setter);
    psg_graph_push_device(g, "/job:ps/task:0");
    psg_endpoint_t k = psg_const_scalar(g, "k", 3.0f);
    psg_graph_pop_device(g);
    psg_shape_t s = psg_shape_1d(256);
    psg_endpoint_t w =
        psg_variable(g, "w", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    psg_endpoint_t rd = psg_read_variable(g, "rd", w);      /* on the ps */
    psg_endpoint_t on_w = psg_identity(g, "on_worker", rd); /* on the worker: a Recv */
    psg_tensor_t *ones = psg_tensor_zeros(PSG_DT_F32, &s);
    for (int i = 0; ones && i < 256; i++) ((float *)ones->data)[i] = 1.0f;
    psg_endpoint_t gv = psg_identity(g, "grad", psg_const(g, "grad_value", &ones)); /* worker */
    psg_tensor_destroy(&ones);
    psg_endpoint_t acc =
        psg_variable(g, "acc", PSG_DT_F32, &s, (psg_initializer_t){"zeros", 0, 0}, true);
    int apply = psg_assign_add(g, "apply", acc, gv); /* on the ps, beside acc: a Recv there */
    psg_graph_pop_device(g);
    psg_dist_session_options_t o = {.cluster = c, .server = ts, .step_timeout_ms = 10000};
    sess = psg_dist_session_new(g, &o);
    if (!sess || psg_dist_session_run_init(sess) < 0) goto done_sess;
    psg_dist_callable_t *one = psg_dist_session_make_callable(sess, 0, NULL, 1, &k, 0, NULL);
    psg_dist_callable_t *pull = psg_dist_session_make_callable(sess, 0, NULL, 1, &on_w, 0, NULL);
    psg_dist_callable_t *push =
        apply < 0 ? NULL : psg_dist_session_make_callable(sess, 0, NULL, 0, NULL, 1, &apply);
    if (!one || !pull || !push) goto done_sess;
    size_t all = (size_t)iters * (size_t)rounds;
    double *raw = malloc(sizeof(double) * all),
           *v[3] = {malloc(sizeof(double) * all), malloc(sizeof(double) * all),
                    malloc(sizeof(double) * all)};
    zsock_t *d = raw && v[0] && v[1] && v[2] ? raw_socket(ZMQ_DEALER, raw_ep) : NULL;
    void *ds = d ? zsock_resolve(d) : NULL;
    psg_dist_callable_t *which[3] = {one, pull, push};
    const char *names[3] = {"one_op_on_ps", "ps_read_recv_on_worker", "push_apply_on_ps"};
    bool failed = !ds;
    thread_cost_t cost[3] = {{0, 0}}, raw_cost = {0, 0};
    for (int r = 0; r < rounds && !failed; r++) {
        thread_cost_t t = thread_cost();
        measure_raw(ds, raw + (size_t)r * iters, iters);
        add_cost(&raw_cost, t, iters + 200);
        for (int b = 0; b < 3 && !failed; b++)
            failed = measure_step(which[b], v[b] + (size_t)r * iters, iters, &cost[b]) < 0;
    }
    if (ds) zmq_send(ds, "stop", 4, 0);
    zsock_destroy(&d);
    for (int b = 0; b < 3 && !failed; b++) {
        double *rawcopy = malloc(sizeof(double) * all); /* print_line sorts it */
        if (!rawcopy) break;
        memcpy(rawcopy, raw, sizeof(double) * all);
        print_line(names[b], v[b], rawcopy, iters, rounds, cost[b], raw_cost);
        free(rawcopy);
    }
    free(raw);
    for (int b = 0; b < 3; b++) free(v[b]);
    if (failed) goto done_sess;
    rc = 0;
done_sess:
    if (sess) psg_dist_session_job_done(sess);
    psg_dist_session_destroy(&sess);
done:
    if (rc) fprintf(stderr, "bench_dist_rtt: %s\n", psg_error_message());
    psg_replica_setter_destroy(&setter);
    psg_graph_destroy(&g);
    psg_task_server_destroy(&ts);
    psg_cluster_destroy(&c);
    if (rc) kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (ipc) { /* the tasks' sockets went with their servers */
        unlink(raw_ep + 6);
        rmdir(dir);
    }
    return rc;
}
