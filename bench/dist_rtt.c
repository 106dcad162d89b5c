/* Round trip of a distributed step through the task server path, between two processes
 * (a forked ps task and this worker), beside a raw ZeroMQ round trip between the same
 * two processes in the same run: a one-op step (a Const on the ps, fetched by RunGraph's
 * reply) and a step with a cross-process Recv (a variable read on the ps, pulled by the
 * worker). One JSON line per result. Not a throughput benchmark (bench_transport, dist.sh).
 *
 *   bench_dist_rtt [--iters N] [--keys DIR]
 *
 * --keys DIR: the cluster's keys (psgraph keygen DIR): every connection, the raw one too,
 * speaks CURVE with them.
 */
#include "psgraph/psgraph.h"

#include <czmq.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static int ps_main(const char *tf_config, int raw_port) {
    psg_cluster_t *c = psg_cluster_parse(tf_config, "bench");
    psg_task_server_options_t o = {.cluster = c, .expect_workers = 1, .idle_timeout_ms = 120000};
    psg_task_server_t *ts = c ? psg_task_server_new(&o) : NULL;
    if (!ts) {
        fprintf(stderr, "bench_dist_rtt: ps: %s\n", psg_error_message());
        return 1;
    }
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", raw_port);
    zsock_t *r = raw_socket(ZMQ_ROUTER, ep);
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

static void print_line(const char *what, double *v, int n, double raw_median) {
    double med, p99;
    stats(v, n, &med, &p99);
    printf(
        "{\"bench\":\"dist_step_rtt\",\"step\":\"%s\",\"curve\":%s,\"iters\":%d,\"psgraph_median_us\":%.1f,"
        "\"psgraph_p99_us\":%.1f,\"raw_zmq_median_us\":%.1f,\"ratio_to_raw\":%.2f,"
        "\"target_median_us\":150}\n",
        what, keys_dir ? "true" : "false", n, med, p99, raw_median, med / raw_median);
    fflush(stdout);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_dist_rtt [--iters N] [--keys DIR]\n"
            "  round trips of a one-op step and of a step with a cross-process Recv through\n"
            "  the task server (a forked ps task), beside raw ZeroMQ; one JSON line each\n"
            "  --iters N   round trips a measure (default 3000, at least 10)\n"
            "  --keys DIR  the cluster's CURVE keys (psgraph keygen DIR): every connection speaks\n"
            "              CURVE, the raw one too\n");
}

int main(int argc, char **argv) {
    int iters = 3000;
    for (int i = 1; i < argc; i++) {
        bool has_value = i + 1 < argc;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--iters") && has_value) {
            iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--keys") && has_value) {
            keys_dir = argv[++i];
        } else {
            fprintf(stderr, "bench_dist_rtt: unexpected '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (iters < 10) iters = 10;
    int ps_port = free_port(), w_port = free_port(), raw_port = free_port();
    char cfg[1400];
    snprintf(cfg, sizeof cfg,
             "{\"cluster\": {\"ps\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"]}, "
             "\"task\": {\"type\": \"%%s\", \"index\": 0}%s%s%s}",
             ps_port, w_port, keys_dir ? ", \"keys\": \"" : "", keys_dir ? keys_dir : "",
             keys_dir ? "\"" : "");
    char ps_cfg[1500], w_cfg[1500];
    snprintf(ps_cfg, sizeof ps_cfg, cfg, "ps");
    snprintf(w_cfg, sizeof w_cfg, cfg, "worker");
    fflush(stdout);
    pid_t pid = fork(); /* before any ZeroMQ context exists */
    if (pid == 0) _exit(ps_main(ps_cfg, raw_port));

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
    psg_graph_pop_device(g);
    psg_dist_session_options_t o = {.cluster = c, .server = ts, .step_timeout_ms = 10000};
    sess = psg_dist_session_new(g, &o);
    if (!sess || psg_dist_session_run_init(sess) < 0) goto done_sess;
    psg_dist_callable_t *one = psg_dist_session_make_callable(sess, 0, NULL, 1, &k, 0, NULL);
    psg_dist_callable_t *pull = psg_dist_session_make_callable(sess, 0, NULL, 1, &on_w, 0, NULL);
    if (!one || !pull) goto done_sess;
    double *v = malloc(sizeof(double) * (size_t)iters);
    /* raw ZeroMQ, the same two processes */
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", raw_port);
    zsock_t *d = raw_socket(ZMQ_DEALER, ep);
    void *ds = zsock_resolve(d);
    char buf[64];
    for (int i = 0; i < iters + 200; i++) {
        double t0 = now_us();
        zmq_send(ds, "ping0123", 8, 0);
        zmq_recv(ds, buf, sizeof buf, 0);
        if (i >= 200) v[i - 200] = now_us() - t0;
    }
    double raw_med, raw_p99;
    stats(v, iters, &raw_med, &raw_p99);
    zmq_send(ds, "stop", 4, 0);
    zsock_destroy(&d);
    psg_dist_callable_t *which[2] = {one, pull};
    const char *names[2] = {"one_op_on_ps", "ps_read_recv_on_worker"};
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < iters + 200; i++) {
            psg_tensor_t *out = NULL;
            double t0 = now_us();
            if (psg_dist_callable_run(which[b], NULL, &out) < 0) {
                fprintf(stderr, "bench_dist_rtt: %s\n", psg_error_message());
                free(v);
                goto done_sess;
            }
            if (i >= 200) v[i - 200] = now_us() - t0;
            psg_tensor_destroy(&out);
        }
        print_line(names[b], v, iters, raw_med);
    }
    free(v);
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
    return rc;
}
