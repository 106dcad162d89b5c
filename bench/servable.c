/* A servable's plan alone, in this process: psg_servable_run on one batch of B random
 * inputs (seeded) again and again for S seconds, no HTTP, no JSON, no batcher. What
 * bench/serve.sh sets beside ONNX Runtime's own InferenceSession.run at the same batch,
 * to tell the kernels' share of the serve's gap from the serving's.
 *   bench_servable MODEL_DIR BATCH SECONDS THREADS [LANES [SPIN_US]]
 * (psg_servable_options_t's lanes and spin_us, left out: the servable's defaults.)
 * One JSON line: examples/sec, runs, p10/p50/p99 of a run (p10: the runs the machine's
 * other load disturbed least), the process's CPU ms a run. */
#include "psgraph/error.h"
#include "psgraph/servable.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (all its threads): steadier than the wall under load. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Input i of s at `batch` rows: uniform [0, 1) floats, ids 0 (any table has row 0). */
static psg_tensor_t *random_input(const psg_servable_t *s, int i, int64_t batch, unsigned *seed) {
    const psg_servable_tensor_t *in = psg_servable_input(s, i);
    psg_shape_t shape = in->shape;
    shape.dims[0] = batch;
    psg_tensor_t *t = psg_tensor_zeros(in->dtype, &shape);
    if (t && in->dtype == PSG_DT_F32) {
        float *v = psg_tensor_f32(t);
        for (int64_t k = 0; k < psg_shape_numel(&shape); k++)
            v[k] = (float)rand_r(seed) / ((float)RAND_MAX + 1.0f);
    }
    return t;
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 7) {
        fprintf(stderr,
                "usage: bench_servable MODEL_DIR BATCH SECONDS THREADS [LANES [SPIN_US]]\n");
        return 2;
    }
    int64_t batch = atoll(argv[2]);
    double secs = atof(argv[3]);
    psg_servable_options_t o = {.threads = atoi(argv[4]),
                                .lanes = argc > 5 ? atoi(argv[5]) : 0,
                                .spin_us = argc > 6 ? atoi(argv[6]) : 0};
    psg_servable_t *s = psg_servable_load(argv[1], &o);
    if (!s || batch < 1) {
        fprintf(stderr, "bench_servable: %s\n", s ? "BATCH must be >= 1" : psg_error_message());
        return 1;
    }
    unsigned seed = 1;
    psg_tensor_t *in[PSG_SERVABLE_MAX_IO] = {0}, *out[PSG_SERVABLE_MAX_IO] = {0};
    for (int i = 0; i < psg_servable_num_inputs(s); i++)
        if (!(in[i] = random_input(s, i, batch, &seed))) return 1;
    size_t cap = 1 << 16, runs = 0;
    double *lat = malloc(cap * sizeof *lat);
    if (!lat) return 1;
    int rc = psg_servable_run(s, in, out); /* warm-up: the plan's buffers */
    for (int j = 0; j < PSG_SERVABLE_MAX_IO; j++) psg_tensor_destroy(&out[j]);
    double t0 = now(), end = t0 + secs, c0 = cpu_now();
    while (rc == 0 && now() < end) {
        double a = now();
        rc = psg_servable_run(s, in, out);
        for (int j = 0; j < PSG_SERVABLE_MAX_IO; j++) psg_tensor_destroy(&out[j]);
        if (runs < cap) lat[runs] = now() - a;
        runs++;
    }
    double wall = now() - t0, cpu = cpu_now() - c0;
    if (rc < 0) {
        fprintf(stderr, "bench_servable: %s\n", psg_error_message());
        return 1;
    }
    size_t n = runs < cap ? runs : cap;
    qsort(lat, n, sizeof *lat, cmp_double);
    printf(
        "{\"bench\":\"servable_run\",\"model\":\"%s\",\"batch\":%lld,\"threads\":%d,\"lanes\":%d,"
        "\"spin_us\":%d,\"runs\":%zu,"
        "\"examples_per_sec\":%.2f,\"p10_ms\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"cpu_ms_per_run\":%.3f}\n",
        psg_servable_model(s), (long long)batch, o.threads, o.lanes > 0 ? o.lanes : 1,
        o.spin_us > 0 ? o.spin_us : 0, runs, (double)runs * (double)batch / wall,
        n ? lat[n / 10] * 1e3 : 0.0, n ? lat[n / 2] * 1e3 : 0.0,
        n ? lat[(n * 99) / 100] * 1e3 : 0.0, runs ? cpu * 1e3 / (double)runs : 0.0);
    free(lat);
    for (int i = 0; i < PSG_SERVABLE_MAX_IO; i++) psg_tensor_destroy(&in[i]);
    psg_servable_destroy(&s);
    return 0;
}
