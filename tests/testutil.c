/* Shared helpers of the test programs (assert counters, tensor makers). */
#include "tests/testutil.h"
#include "tests/tensor_pattern.h"

#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The lowest port of the kernel's ephemeral range (outgoing connections take their local
 * port there), 32768 when it cannot be read. */
static int ephemeral_low(void) {
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int lo = 0, hi = 0;
    if (f && fscanf(f, "%d %d", &lo, &hi) != 2) lo = 0;
    if (f) fclose(f);
    return lo > 11000 && lo <= 65535 ? lo : 32768;
}

/* A port free now, below the kernel's ephemeral range, never one this process was given
 * before. Below that range, because a connection this machine makes (a client's, or a
 * reconnect to a task that is down) takes its local port from it: a port drawn there by
 * bind(0) could be taken so before its server binds it ("Address already in use", CI). Drawn
 * at random from [10000, that range) with a stream seeded by the pid, so that tests running
 * side by side draw apart; the port is free again once its probe socket closes, so a test
 * that asks for many is never given one twice. */
int psg_test_free_port(void) {
    static unsigned char given[65536 / 8];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t stream;
    int lo = ephemeral_low();
    for (;;) {
        pthread_mutex_lock(&lock);
        if (!stream) stream = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
        stream = stream * 6364136223846793005ull + 1442695040888963407ull;
        int port = 10000 + (int)((stream >> 33) % (uint64_t)(lo - 10000));
        bool fresh = !(given[port / 8] & (1u << (port % 8)));
        given[port / 8] |= (unsigned char)(1u << (port % 8));
        pthread_mutex_unlock(&lock);
        if (!fresh) continue;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        PSG_ASSERT(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                .sin_port = htons((uint16_t)port)};
        bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) return port;
    }
}

double psg_test_now_sec(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int psg_test_failures;
int psg_test_checks;

int psg_test_summary(void) {
    printf("%d checks, %d failed\n", psg_test_checks, psg_test_failures);
    return psg_test_failures ? 1 : 0;
}

psg_tensor_t *psg_test_tensor(const psg_shape_t *shape, const float *values) {
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, shape);
    if (t) memcpy(t->data, values, psg_tensor_nbytes(t));
    return t;
}

psg_tensor_t *psg_test_random(const psg_shape_t *shape, float lo, float hi, unsigned *seed) {
    psg_tensor_t *t = psg_tensor_new(PSG_DT_F32, shape);
    if (!t) return NULL;
    float *d = psg_tensor_f32(t);
    for (int64_t i = 0; i < psg_tensor_numel(t); i++) {
        *seed = *seed * 1103515245u + 12345u;
        d[i] = lo + (hi - lo) * (float)((*seed >> 8) & 0xffffff) / 16777216.0f;
    }
    return t;
}

void psg_test_wait_stopped(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        buf[n] = 0;
        const char *close = strrchr(buf, ')');
        if (close && close[1] == ' ' && close[2] == 'T') return;
        usleep(2000);
    }
}

psg_tensor_t *psg_test_patterned(psg_dtype_t dt, psg_shape_t shape, unsigned seed) {
    psg_tensor_t *t = psg_tensor_new(dt, &shape);
    if (!t) return NULL;
    uint8_t *p = t->data;
    size_t n = psg_tensor_nbytes(t);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (uint8_t)(x >> 24);
    }
    if (dt == PSG_DT_BOOL)
        for (size_t i = 0; i < n; i++) p[i] &= 1;
    return t;
}

bool psg_test_same_tensor(const psg_tensor_t *a, const psg_tensor_t *b) {
    return a && b && a->dtype == b->dtype && psg_shape_equal(&a->shape, &b->shape) &&
           memcmp(a->data, b->data, psg_tensor_nbytes(a)) == 0;
}
