/* Shared helpers of the test programs (assert counters, tensor makers). */
#include "tests/testutil.h"

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A port the kernel found free, never one this process was given before: the port is
 * free again once its probe socket closes, so a test that asks for many (jobs of several
 * tasks each, bound later by other processes) could be given one twice. */
int psg_test_free_port(void) {
    static unsigned char given[65536 / 8];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        PSG_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                   getsockname(fd, (struct sockaddr *)&a, &len) == 0);
        close(fd);
        int port = ntohs(a.sin_port);
        pthread_mutex_lock(&lock);
        bool fresh = !(given[port / 8] & (1u << (port % 8)));
        given[port / 8] |= (unsigned char)(1u << (port % 8));
        pthread_mutex_unlock(&lock);
        if (fresh) return port;
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
