/* The floor under a one-host transport (issue 33): the round trip of one message of N bytes
 * between two processes over raw ZeroMQ (DEALER to ROUTER, ipc and loopback tcp: what psgraph's
 * wire rides on) beside a plain socket driven by the two processes' own threads (a Unix stream
 * socket and a loopback TCP socket, an 8-byte length before each message): what a transport
 * that bypasses ZeroMQ's I/O threads could reach. Each round measures the four in turn; each
 * line gives the best round's median of each and the plain socket's time over ZeroMQ's.
 *
 *   bench_socket_floor [--sizes 64,4096,1048576] [--iters N] [--rounds R]
 */
#include <czmq.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { ZMQ_IPC, ZMQ_TCP, UNIX_STREAM, TCP_STREAM, N_KINDS };
static const char *kind_name[N_KINDS] = {"zmq_ipc", "zmq_tcp", "unix_stream", "tcp_stream"};
#define MAX_SIZES 16

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* n bytes written (w) or read in full; -1 on an error or a closed peer */
static int full_io(int fd, void *p, size_t n, bool w) {
    char *c = p;
    while (n > 0) {
        ssize_t r = w ? write(fd, c, n) : read(fd, c, n);
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* A plain socket's server: each length-prefixed message sent back; ends when the peer closes. */
static void stream_serve(int fd, size_t max) {
    char *b = malloc(max);
    uint64_t n;
    while (b && full_io(fd, &n, 8, false) == 0 && n <= max && full_io(fd, b, n, false) == 0 &&
           full_io(fd, &n, 8, true) == 0 && full_io(fd, b, n, true) == 0) {
    }
    free(b);
}

/* ZeroMQ's server: each message sent back to its sender; ends on a 0-byte message. */
static void zmq_serve(const char *ep) {
    zsock_t *r = zsock_new(ZMQ_ROUTER);
    if (!r || zsock_bind(r, "%s", ep) < 0) {
        fprintf(stderr, "socket_floor: cannot bind %s\n", ep);
        return;
    }
    void *s = zsock_resolve(r);
    for (;;) {
        zmq_msg_t id, m;
        zmq_msg_init(&id);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&id, s, 0) < 0 || zmq_msg_recv(&m, s, 0) < 0) break;
        if (zmq_msg_size(&m) == 0) { /* the stop */
            zmq_msg_close(&id);
            zmq_msg_close(&m);
            break;
        }
        zmq_msg_send(&id, s, ZMQ_SNDMORE);
        zmq_msg_send(&m, s, 0);
    }
    zsock_destroy(&r);
}

typedef struct {
    pid_t pid[N_KINDS];
    int fd[2]; /* the client ends of the Unix and the TCP stream */
    zsock_t *zs[2];
} peers_t;

/* The four servers, each a process forked before this one touches ZeroMQ (a forked child
 * must not use its parent's context), and the client ends. */
static int peers_open(peers_t *p, size_t max) {
    char ipc[64];
    snprintf(ipc, sizeof ipc, "ipc:///tmp/psg-socket-floor-%d", (int)getpid());
    int zport = 0, sv[2], lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return -1;
    /* ZeroMQ's tcp port: a port the kernel picks, closed again for the server to bind */
    struct sockaddr_in z = a;
    int zfd = socket(AF_INET, SOCK_STREAM, 0);
    z.sin_port = 0;
    alen = sizeof z;
    if (zfd < 0 || bind(zfd, (struct sockaddr *)&z, sizeof z) < 0 ||
        getsockname(zfd, (struct sockaddr *)&z, &alen) < 0)
        return -1;
    zport = ntohs(z.sin_port);
    close(zfd);
    char ztcp[64];
    snprintf(ztcp, sizeof ztcp, "tcp://127.0.0.1:%d", zport);
    for (int k = 0; k < N_KINDS; k++) {
        p->pid[k] = fork();
        if (p->pid[k] < 0) return -1;
        if (p->pid[k] > 0) continue;
        /* a server holds only its own end: the others' peers see their ends close */
        if (k != UNIX_STREAM) close(sv[1]);
        if (k != TCP_STREAM) close(lfd);
        close(sv[0]);
        if (k == ZMQ_IPC || k == ZMQ_TCP) {
            zmq_serve(k == ZMQ_IPC ? ipc : ztcp);
        } else if (k == UNIX_STREAM) {
            stream_serve(sv[1], max);
        } else {
            int c = accept(lfd, NULL, NULL), one = 1;
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            stream_serve(c, max);
        }
        _exit(0);
    }
    close(sv[1]);
    p->fd[0] = sv[0];
    p->fd[1] = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(p->fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(p->fd[1], (struct sockaddr *)&a, sizeof a) < 0) return -1;
    close(lfd);
    p->zs[0] = zsock_new(ZMQ_DEALER);
    p->zs[1] = zsock_new(ZMQ_DEALER);
    if (!p->zs[0] || !p->zs[1] || zsock_connect(p->zs[0], "%s", ipc) < 0 ||
        zsock_connect(p->zs[1], "%s", ztcp) < 0)
        return -1;
    return 0;
}

static void peers_close(peers_t *p) {
    for (int i = 0; i < 2; i++) {
        if (p->zs[i]) { /* the stop, delivered before the socket goes (no reply waited for) */
            zsock_set_linger(p->zs[i], 2000);
            zmq_send(zsock_resolve(p->zs[i]), "", 0, 0);
        }
        zsock_destroy(&p->zs[i]);
        if (p->fd[i] >= 0) close(p->fd[i]);
    }
    for (int k = 0; k < N_KINDS; k++)
        if (p->pid[k] > 0) waitpid(p->pid[k], NULL, 0);
}

/* One round trip of size bytes over kind; -1 on an error. */
static int round_trip(peers_t *p, int kind, char *buf, size_t size) {
    if (kind == ZMQ_IPC || kind == ZMQ_TCP) {
        void *s = zsock_resolve(p->zs[kind == ZMQ_TCP]);
        zmq_msg_t m;
        zmq_msg_init(&m);
        int rc = zmq_send(s, buf, size, 0) < 0 || zmq_msg_recv(&m, s, 0) < 0 ? -1 : 0;
        zmq_msg_close(&m);
        return rc;
    }
    int fd = p->fd[kind == TCP_STREAM];
    uint64_t n = size;
    return full_io(fd, &n, 8, true) || full_io(fd, buf, size, true) || full_io(fd, &n, 8, false) ||
                   n != size || full_io(fd, buf, size, false)
               ? -1
               : 0;
}

/* The median round trip (µs) of iters, after a warm-up; < 0 on an error. */
static double median_us(peers_t *p, int kind, char *buf, size_t size, int iters, double *v) {
    for (int i = -iters / 10; i < iters; i++) {
        double t = now_us();
        if (round_trip(p, kind, buf, size) < 0) return -1;
        if (i >= 0) v[i] = now_us() - t;
    }
    qsort(v, (size_t)iters, sizeof *v, cmp_double);
    return v[iters / 2];
}

int main(int argc, char **argv) {
    size_t sizes[MAX_SIZES] = {64, 4096, 1048576};
    int nsizes = 3, iters = 3000, rounds = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            nsizes = 0;
            for (char *s = strtok(argv[++i], ","); s && nsizes < MAX_SIZES; s = strtok(NULL, ","))
                sizes[nsizes++] = (size_t)strtoull(s, NULL, 10);
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else {
            bool help = !strcmp(argv[i], "--help");
            fprintf(help ? stdout : stderr,
                    "usage: bench_socket_floor [--sizes 64,4096,...] [--iters N] [--rounds R]\n");
            return help ? 0 : 2;
        }
    }
    size_t max = 1;
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] < 1 || sizes[i] > ((size_t)64 << 20)) {
            fprintf(stderr, "socket_floor: sizes are 1..%zu bytes\n", (size_t)64 << 20);
            return 2;
        }
        if (sizes[i] > max) max = sizes[i];
    }
    if (iters < 10 || rounds < 1) {
        fprintf(stderr, "socket_floor: --iters is at least 10, --rounds at least 1\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    peers_t p = {{0}, {-1, -1}, {NULL, NULL}};
    char *buf = calloc(1, max);
    double *v = malloc(sizeof(double) * (size_t)iters);
    if (!buf || !v || peers_open(&p, max) < 0) {
        fprintf(stderr, "socket_floor: cannot start the servers\n");
        peers_close(&p);
        return 1;
    }
    int rc = 0;
    for (int s = 0; s < nsizes && !rc; s++) {
        /* large messages take longer: about 0.5 s a kind a round */
        int n = sizes[s] > 65536 ? (int)(iters / (sizes[s] / 65536 + 1)) : iters;
        if (n < 10) n = 10;
        double best[N_KINDS];
        for (int k = 0; k < N_KINDS; k++) best[k] = 1e300;
        for (int r = 0; r < rounds && !rc; r++)
            for (int k = 0; k < N_KINDS && !rc; k++) {
                double m = median_us(&p, k, buf, sizes[s], n, v);
                if (m < 0) {
                    fprintf(stderr, "socket_floor: %s of %zu bytes failed\n", kind_name[k],
                            sizes[s]);
                    rc = 1;
                } else if (m < best[k]) {
                    best[k] = m;
                }
            }
        if (rc) break;
        printf("{\"bench\":\"socket_floor\",\"bytes\":%zu,\"iters\":%d,\"rounds\":%d", sizes[s], n,
               rounds);
        for (int k = 0; k < N_KINDS; k++) printf(",\"%s_us\":%.1f", kind_name[k], best[k]);
        printf(",\"unix_over_zmq_ipc\":%.3f,\"tcp_over_zmq_tcp\":%.3f}\n",
               best[UNIX_STREAM] / best[ZMQ_IPC], best[TCP_STREAM] / best[ZMQ_TCP]);
        fflush(stdout);
    }
    peers_close(&p);
    free(buf);
    free(v);
    return rc;
}
