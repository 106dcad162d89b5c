/* Shared helpers of the test programs (assert counters, tensor makers). */
#include "tests/testutil.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int psg_test_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    PSG_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
               getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
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
