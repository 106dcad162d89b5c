/* Transport benchmark: push and pull throughput, and the round trip of a tiny request,
 * between two processes (a forked server), psgraph's wire beside raw ZeroMQ (plain
 * zmq_send/zmq_recv of one message of the same size, same processes, same run).
 * Prints one JSON line per result. Not a benchmark of a training step (that is the ps/'s).
 *
 *   transport [--sizes 4096,1048576,...] [--chunk BYTES] [--chunk-above BYTES]
 *             [--sweep-chunk] [--rtt-iters N] [--only push|pull] [--curve]
 *             [--server-netns /run/netns/NS --server-ip IP]
 * --server-netns: the server process enters that network namespace (an emulated host of
 * tools/hosts.sh) and listens on IP there; the client stays where it was started
 * (bench/hosts.sh runs it on another emulated host). Its plain servers listen there as
 * --insecure tasks do (psgraph/curve.h): plain frames are what they measure.
 *
 * --curve: the same two processes also hold a CURVE pair of each (psgraph's server with the
 * cluster's keys, raw ZeroMQ with the same keys, psgraph/curve.h); each line gives psgraph
 * with CURVE against raw ZeroMQ with CURVE (the ratio), and both without (CURVE's cost),
 * each the best of 3 rounds in which the four take turns (a load spike of a shared machine
 * then hits them alike, and the best round is the one least disturbed).
 */
#include "psgraph/curve.h"
#include "psgraph/wire.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define MAX_SIZE ((size_t)64 << 20)

/* ---- the server process ------------------------------------------------------------- */

/* Raw protocol: a 9-byte message 'P'+size asks for a message of that size; 'G'+0 is a
 * ping; any other message is a push, acknowledged with one byte. */
static void raw_serve(void *router, char *buf) {
    char id[256];
    int idn = zmq_recv(router, id, sizeof id, 0);
    if (idn < 0) return;
    int n = zmq_recv(router, buf, MAX_SIZE, 0);
    if (n < 0) return;
    zmq_send(router, id, (size_t)idn, ZMQ_SNDMORE);
    if (n == 9 && (buf[0] == 'P' || buf[0] == 'G')) {
        uint64_t size;
        memcpy(&size, buf + 1, 8);
        if (buf[0] == 'G') size = 1;
        if (size > MAX_SIZE) size = MAX_SIZE;
        zmq_send(router, buf, (size_t)size, 0);
    } else {
        zmq_send(router, "k", 1, 0);
    }
}

static int psg_serve(psg_server_t *s, psg_tensor_t **pull_cache) {
    psg_msg_t *req = NULL;
    if (psg_server_recv(s, &req, 0) <= 0) return 0;
    int quit = 0;
    psg_msg_t *rep = psg_msg_new(PSG_MSG_REPLY, NULL);
    if (req->op && strcmp(req->op, "pull") == 0) {
        size_t size = (size_t)req->step;
        int slot = 0;
        while (slot < 7 && pull_cache[slot] && psg_tensor_nbytes(pull_cache[slot]) != size) slot++;
        if (!pull_cache[slot]) {
            pull_cache[slot] = psg_tensor_zeros(PSG_DT_U8, &(psg_shape_t){1, {(int64_t)size}});
        }
        psg_msg_add_tensor(rep, "x", pull_cache[slot]);
    } else if (req->op && strcmp(req->op, "quit") == 0) {
        quit = 1;
    }
    psg_server_reply(s, req, &rep);
    psg_msg_destroy(&req);
    return quit;
}

static const char *server_netns, *server_ip = "127.0.0.1";

/* A raw ROUTER, a CURVE server with the cluster's pair of dir when dir is not NULL. */
static zsock_t *raw_router(const char *dir, int *port) {
    zsock_t *r = zsock_new(ZMQ_ROUTER);
    if (r && dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.key", dir, PSG_CURVE_CLUSTER);
        zcert_t *cert = zcert_load(path);
        if (!cert) {
            zsock_destroy(&r);
            return NULL;
        }
        zsock_set_curve_server(r, 1);
        zcert_apply(cert, r);
        zcert_destroy(&cert);
    }
    *port = r ? zsock_bind(r, "tcp://%s:*", server_ip) : -1;
    return r;
}

/* The server process: psgraph's server and a raw ROUTER, plain; with curve_dir, a CURVE
 * pair of them too. Serves until told to quit or the parent is gone. */
static void server_main(int port_pipe, const psg_wire_opts_t *opts, const char *curve_dir) {
    if (server_netns) {
        int fd = open(server_netns, O_RDONLY);
        if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
            fprintf(stderr, "transport: cannot enter %s: %s\n", server_netns, strerror(errno));
            _exit(1);
        }
        close(fd);
    }
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://%s:*", server_ip);
    psg_curve_keys_t *keys = curve_dir ? psg_curve_keys_load(curve_dir, NULL) : NULL;
    psg_wire_opts_t popts = *opts, copts = *opts;
    popts.insecure = true; /* the plain peer of the measure, on loopback or an emulated host */
    copts.keys = keys;
    int n = curve_dir ? 2 : 1;
    psg_server_t *s[2] = {psg_server_new(ep, &popts), keys ? psg_server_new(ep, &copts) : NULL};
    zsock_t *raw[2] = {NULL, NULL};
    int ports[4] = {-1, -1, -1, -1};
    for (int k = 0; k < n; k++) {
        raw[k] = raw_router(k ? curve_dir : NULL, &ports[2 * k + 1]);
        ports[2 * k] = s[k] ? psg_server_port(s[k]) : -1;
    }
    if (write(port_pipe, ports, sizeof ports) != sizeof ports) _exit(1);
    for (int k = 0; k < 2 * n; k++)
        if (ports[k] <= 0) _exit(1);
    close(port_pipe);
    char *buf = malloc(MAX_SIZE);
    memset(buf, 0, MAX_SIZE);
    psg_tensor_t *pull_cache[8] = {0};
    zmq_pollitem_t items[4];
    for (int k = 0; k < n; k++) {
        items[2 * k] = (zmq_pollitem_t){psg_server_socket(s[k]), 0, ZMQ_POLLIN, 0};
        items[2 * k + 1] = (zmq_pollitem_t){zsock_resolve(raw[k]), 0, ZMQ_POLLIN, 0};
    }
    for (int quit = 0; !quit;) {
        if (zmq_poll(items, 2 * n, 10000) <= 0) break; /* the parent is gone */
        for (int k = 0; k < n; k++) {
            if (items[2 * k + 1].revents & ZMQ_POLLIN) raw_serve(zsock_resolve(raw[k]), buf);
            if (items[2 * k].revents & ZMQ_POLLIN) quit |= psg_serve(s[k], pull_cache);
        }
    }
    for (int i = 0; i < 8; i++) psg_tensor_destroy(&pull_cache[i]);
    free(buf);
    for (int k = 0; k < 2; k++) {
        zsock_destroy(&raw[k]);
        psg_server_destroy(&s[k]);
    }
    psg_curve_keys_destroy(&keys);
    _exit(0);
}

/* ---- the client process ------------------------------------------------------------- */

typedef struct {
    psg_client_t *c;
    void *raw;
    zsock_t *raw_zs;
    char *buf;
} peer_t;

static int psg_push(peer_t *p, psg_tensor_t *t) {
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "push");
    psg_msg_add_tensor(req, "x", t);
    psg_msg_t *rep = psg_client_call(p->c, &req, 30000);
    int ok = rep != NULL;
    psg_msg_destroy(&rep);
    return ok ? 0 : -1;
}

static int psg_pull(peer_t *p, size_t size) {
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "pull");
    req->step = (int64_t)size;
    psg_msg_t *rep = psg_client_call(p->c, &req, 30000);
    int ok = rep && rep->ntensors == 1 && psg_tensor_nbytes(rep->tensors[0]) == size;
    psg_msg_destroy(&rep);
    return ok ? 0 : -1;
}

static int raw_push(peer_t *p, size_t size) {
    if (zmq_send(p->raw, p->buf, size, 0) < 0) return -1;
    char ack;
    return zmq_recv(p->raw, &ack, 1, 0) == 1 ? 0 : -1;
}

static int raw_request(peer_t *p, char cmd, size_t size) {
    char req[9];
    req[0] = cmd;
    uint64_t s64 = size;
    memcpy(req + 1, &s64, 8);
    if (zmq_send(p->raw, req, 9, 0) < 0) return -1;
    int n = zmq_recv(p->raw, p->buf, MAX_SIZE, 0);
    return n == (int)(cmd == 'G' ? 1 : size) ? 0 : -1;
}

enum { PSG_PUSH, RAW_PUSH, PSG_PULL, RAW_PULL };

static int one(peer_t *p, int mode, size_t size, psg_tensor_t *t) {
    switch (mode) {
    case PSG_PUSH: return psg_push(p, t);
    case RAW_PUSH: return raw_push(p, size);
    case PSG_PULL: return psg_pull(p, size);
    default: return raw_request(p, 'P', size);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Iterations of a round at `size`: enough for ~64 MB. */
static int round_iters(size_t size) {
    int iters = (int)((64u << 20) / size);
    if (iters < 3) iters = 3;
    if (iters > 1000) iters = 1000;
    return iters;
}

/* MB/s of `mode` at `size`: the median of 3 rounds of enough iterations for ~64 MB. */
static double throughput(peer_t *p, int mode, size_t size, psg_tensor_t *t) {
    int iters = round_iters(size);
    double rates[3];
    for (int w = 0; w < 2; w++)
        if (one(p, mode, size, t) < 0) return -1;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        for (int i = 0; i < iters; i++)
            if (one(p, mode, size, t) < 0) return -1;
        rates[r] = (double)size * iters / (now_s() - t0) / 1e6;
    }
    qsort(rates, 3, sizeof rates[0], cmp_double);
    return rates[1];
}

/* MB/s of n (peer, mode) pairs at `size` into best[]: the best of 3 rounds, in each of
 * which every pair runs once, in turn. -1 when a transfer fails. */
static int throughput_alternating(peer_t **p, const int *mode, int n, size_t size, psg_tensor_t *t,
                                  double *best) {
    int iters = round_iters(size);
    for (int k = 0; k < n; k++) {
        best[k] = 0;
        for (int w = 0; w < 2; w++)
            if (one(p[k], mode[k], size, t) < 0) return -1;
    }
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < n; k++) {
            double t0 = now_s();
            for (int i = 0; i < iters; i++)
                if (one(p[k], mode[k], size, t) < 0) return -1;
            double rate = (double)size * iters / (now_s() - t0) / 1e6;
            if (rate > best[k]) best[k] = rate;
        }
    return 0;
}

static void rtt(peer_t *p, int iters, bool curve) {
    double *lat[2] = {malloc(sizeof(double) * iters), malloc(sizeof(double) * iters)};
    for (int i = 0; i < 200; i++) { /* warm up both */
        psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "ping");
        psg_msg_t *rep = psg_client_call(p->c, &req, 5000);
        psg_msg_destroy(&rep);
        raw_request(p, 'G', 1);
    }
    for (int i = 0; i < iters; i++) {
        double t0 = now_s();
        psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "ping");
        psg_msg_t *rep = psg_client_call(p->c, &req, 5000);
        double t1 = now_s();
        psg_msg_destroy(&rep);
        raw_request(p, 'G', 1);
        double t2 = now_s();
        lat[0][i] = (t1 - t0) * 1e6;
        lat[1][i] = (t2 - t1) * 1e6;
    }
    for (int k = 0; k < 2; k++) qsort(lat[k], (size_t)iters, sizeof(double), cmp_double);
    int p50 = iters / 2, p99 = iters * 99 / 100;
    printf(
        "{\"bench\":\"transport\",\"op\":\"rtt\",\"curve\":%s,\"iters\":%d,\"psgraph_us_median\":%.1f,"
        "\"psgraph_us_p99\":%.1f,\"raw_us_median\":%.1f,\"raw_us_p99\":%.1f,"
        "\"ratio_median\":%.2f}\n",
        curve ? "true" : "false", iters, lat[0][p50], lat[0][p99], lat[1][p50], lat[1][p99],
        lat[0][p50] / lat[1][p50]);
    free(lat[0]);
    free(lat[1]);
}

/* Connects a peer to the server process's psgraph server and raw ROUTER; a CURVE client of
 * the cluster of curve_dir when it is not NULL. */
static int peer_open(peer_t *p, const int *ports, const psg_wire_opts_t *opts,
                     const char *curve_dir, psg_curve_keys_t **keys) {
    memset(p, 0, sizeof *p);
    psg_wire_opts_t o = *opts;
    if (curve_dir && !(o.keys = *keys = psg_curve_keys_load(curve_dir, NULL))) return -1;
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://%s:%d", server_ip, ports[0]);
    if (!(p->c = psg_client_new(ep, &o))) return -1;
    p->raw_zs = zsock_new(ZMQ_DEALER);
    if (!p->raw_zs) return -1;
    if (curve_dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.key", curve_dir, PSG_CURVE_CLUSTER);
        zcert_t *cert = zcert_load(path);
        if (!cert) return -1;
        zcert_apply(cert, p->raw_zs);
        zsock_set_curve_serverkey(p->raw_zs, zcert_public_txt(cert));
        zcert_destroy(&cert);
    }
    p->raw = zsock_resolve(p->raw_zs);
    snprintf(ep, sizeof ep, "tcp://%s:%d", server_ip, ports[1]);
    zsock_connect(p->raw_zs, "%s", ep);
    p->buf = malloc(MAX_SIZE);
    if (!p->buf) return -1;
    memset(p->buf, 1, MAX_SIZE);
    return 0;
}

static void peer_close(peer_t *p) {
    psg_client_destroy(&p->c);
    zsock_destroy(&p->raw_zs);
    free(p->buf);
    p->buf = NULL;
}

/* One size, one direction: psgraph and raw ZeroMQ (with curve, also both with CURVE). */
static int measure(peer_t *plain, peer_t *curve, int dir, size_t size, psg_tensor_t *t,
                   const psg_wire_opts_t *opts) {
    const char *op = dir ? "pull" : "push";
    int psg_mode = dir ? PSG_PULL : PSG_PUSH, raw_mode = dir ? RAW_PULL : RAW_PUSH;
    double ps = 1, raw = 1, cps = 1, craw = 1, best[4];
    if (curve) {
        peer_t *peers[4] = {curve, curve, plain, plain};
        int modes[4] = {psg_mode, raw_mode, psg_mode, raw_mode};
        if (throughput_alternating(peers, modes, 4, size, t, best) < 0) {
            ps = -1;
        } else {
            cps = best[0];
            craw = best[1];
            ps = best[2];
            raw = best[3];
        }
    } else {
        ps = throughput(plain, psg_mode, size, t);
        raw = throughput(plain, raw_mode, size, t);
    }
    if (ps < 0 || raw < 0 || cps < 0 || craw < 0) {
        fprintf(stderr, "transport: %s of %zu bytes failed: %s\n", op, size, psg_error_message());
        return -1;
    }
    if (!curve)
        printf("{\"bench\":\"transport\",\"op\":\"%s\",\"bytes\":%zu,\"chunk_bytes\":%zu,"
               "\"chunk_above\":%zu,\"psgraph_MBps\":%.0f,\"raw_MBps\":%.0f,\"ratio\":%.2f}\n",
               op, size, opts->chunk_bytes, opts->chunk_above, ps, raw, ps / raw);
    else
        printf(
            "{\"bench\":\"transport\",\"op\":\"%s\",\"curve\":true,\"rounds\":\"best of 3, alternating\",\"bytes\":%zu,"
            "\"psgraph_curve_MBps\":%.0f,\"raw_curve_MBps\":%.0f,\"ratio\":%.2f,"
            "\"psgraph_plain_MBps\":%.0f,\"raw_plain_MBps\":%.0f,\"curve_cost_psgraph\":%.2f,"
            "\"curve_cost_raw\":%.2f}\n",
            op, size, cps, craw, cps / craw, ps, raw, ps / cps, raw / craw);
    fflush(stdout);
    return 0;
}

static int run(const size_t *sizes, int nsizes, const psg_wire_opts_t *opts, int rtt_iters,
               const char *only, const char *curve_dir) {
    int fds[2];
    if (pipe(fds) < 0) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) { /* ZeroMQ is started after the fork, in each process */
        close(fds[0]);
        server_main(fds[1], opts, curve_dir);
    }
    close(fds[1]);
    int ports[4];
    bool up = read(fds[0], ports, sizeof ports) == sizeof ports && ports[0] > 0 && ports[1] > 0 &&
              (!curve_dir || (ports[2] > 0 && ports[3] > 0));
    close(fds[0]);
    peer_t p = {0}, pc = {0};
    psg_curve_keys_t *keys = NULL;
    if (!up || peer_open(&p, ports, opts, NULL, NULL) < 0 ||
        (curve_dir && peer_open(&pc, ports + 2, opts, curve_dir, &keys) < 0)) {
        fprintf(stderr, "transport: the server process did not start: %s\n", psg_error_message());
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < nsizes && rc == 0; i++) {
        size_t size = sizes[i];
        psg_tensor_t *t = psg_tensor_zeros(PSG_DT_U8, &(psg_shape_t){1, {(int64_t)size}});
        for (int dir = 0; dir < 2 && rc == 0; dir++)
            if (!only || !strcmp(only, dir ? "pull" : "push"))
                rc = measure(&p, curve_dir ? &pc : NULL, dir, size, t, opts) < 0;
        psg_tensor_destroy(&t);
    }
    if (rc == 0 && rtt_iters > 0) rtt(&p, rtt_iters, false);
    if (rc == 0 && rtt_iters > 0 && curve_dir) rtt(&pc, rtt_iters, true);
    psg_msg_t *req = psg_msg_new(PSG_MSG_REQUEST, "quit");
    psg_msg_t *rep = psg_client_call(p.c, &req, 2000);
    psg_msg_destroy(&rep);
    peer_close(&p);
    peer_close(&pc);
    psg_curve_keys_destroy(&keys);
    int status = 0;
    waitpid(pid, &status, 0);
    return rc;
}

/* A fresh key pair for --curve in a private folder; the folder in dir. */
static int make_keys(char *dir, size_t size) {
    char run_dir[64];
    snprintf(run_dir, sizeof run_dir, "/tmp/psg_bench_transport_XXXXXX");
    if (!mkdtemp(run_dir)) return -1;
    snprintf(dir, size, "%s/keys", run_dir);
    return psg_curve_keygen(dir, NULL);
}

static void remove_keys(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.key", dir, PSG_CURVE_CLUSTER);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s.key_secret", dir, PSG_CURVE_CLUSTER);
    unlink(path);
    rmdir(dir);
    snprintf(path, sizeof path, "%s", dir);
    char *slash = strrchr(path, '/');
    if (slash) *slash = 0;
    rmdir(path);
}

int main(int argc, char **argv) {
    size_t sizes[16] = {4096, 1 << 20, 16 << 20, 64 << 20};
    int nsizes = 4, rtt_iters = 3000;
    bool sweep = false, curve = false;
    const char *only = NULL;
    psg_wire_opts_t opts = psg_wire_opts_default();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
            opts.chunk_bytes = strtoull(argv[++i], NULL, 0);
        } else if (strcmp(argv[i], "--chunk-above") == 0 && i + 1 < argc) {
            opts.chunk_above = strtoull(argv[++i], NULL, 0);
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            nsizes = 0;
            for (char *s = argv[++i]; *s && nsizes < 16; s += *s == ',') {
                size_t v = strtoull(s, &s, 0);
                if (v == 0 || v > MAX_SIZE) {
                    fprintf(stderr, "transport: sizes are 1..%zu bytes\n", MAX_SIZE);
                    return 2;
                }
                sizes[nsizes++] = v;
            }
        } else if (strcmp(argv[i], "--sweep-chunk") == 0) {
            sweep = true;
        } else if (strcmp(argv[i], "--curve") == 0) {
            curve = true;
        } else if (strcmp(argv[i], "--server-netns") == 0 && i + 1 < argc) {
            server_netns = argv[++i];
        } else if (strcmp(argv[i], "--server-ip") == 0 && i + 1 < argc) {
            server_ip = argv[++i];
        } else if (strcmp(argv[i], "--rtt-iters") == 0 && i + 1 < argc) {
            rtt_iters = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            bool help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
            fprintf(
                help ? stdout : stderr,
                "usage: transport [--sizes N,N...] [--chunk BYTES] [--chunk-above BYTES] [--sweep-chunk] "
                "[--rtt-iters N] [--only push|pull] [--curve] [--server-netns PATH --server-ip IP]\n");
            return help ? 0 : 2;
        }
    }
    if (curve) {
        char dir[256];
        if (make_keys(dir, sizeof dir) < 0) {
            fprintf(stderr, "transport: %s\n", psg_error_message());
            return 1;
        }
        int rc = run(sizes, nsizes, &opts, rtt_iters, only, dir);
        remove_keys(dir);
        return rc;
    }
    if (!sweep) return run(sizes, nsizes, &opts, rtt_iters, only, NULL);
    /* The chunk size sweep: every large size chunked (chunk_above = chunk), no round trips. */
    size_t chunks[] = {512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20};
    size_t big[] = {16 << 20, 32 << 20, 64 << 20};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        opts.chunk_bytes = opts.chunk_above = chunks[k];
        if (run(big, 3, &opts, 0, only, NULL) != 0) return 1;
    }
    return 0;
}
