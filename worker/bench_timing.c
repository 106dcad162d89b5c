/* The benchmark side of the training loop (bench_timing.h): timed steps after the
 * warm-up, the op profile, the step times file and the final JSON line. */
#include "worker/bench_timing.h"

#include "ops/cpu/blas.h"
#include "psgraph/error.h"
#include "psgraph/op_profile.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct psg_bench_timing {
    const psg_train_config_t *c;
    double *ms; /* each timed step's */
    int64_t n, cap;
    double timed_sec;
    psg_op_profile_t *profile;
    psg_session_t *profiled; /* the session the profile's hook is on (borrowed) */
};

psg_bench_timing_t *psg_bench_timing_new(const psg_train_config_t *c) {
    psg_bench_timing_t *b = calloc(1, sizeof *b);
    if (!b) psg_error_set("out of memory");
    if (b) b->c = c;
    return b;
}

void psg_bench_timing_destroy(psg_bench_timing_t **bp) {
    if (!bp || !*bp) return;
    psg_bench_timing_t *b = *bp;
    if (b->profiled) psg_session_set_node_hook(b->profiled, NULL, NULL);
    psg_op_profile_destroy(&b->profile);
    free(b->ms);
    free(b);
    *bp = NULL;
}

int psg_bench_timing_before_step(psg_bench_timing_t *b, int64_t step, psg_session_t *sess,
                                 bool gpu) {
    if (!b->c->op_profile || !sess || step != b->c->bench_warmup) return 0;
    if (!(b->profile = psg_op_profile_new())) return -1;
    psg_session_set_node_hook(sess, psg_op_profile_node_hook, b->profile);
    psg_session_set_gpu_sync(sess, gpu);
    b->profiled = sess;
    return 0;
}

int psg_bench_timing_after_step(psg_bench_timing_t *b, int64_t step, double dt) {
    if (step < b->c->bench_warmup) return 0;
    if (b->n == b->cap) {
        int64_t cap = b->cap ? 2 * b->cap : 64;
        double *nm = realloc(b->ms, (size_t)cap * sizeof *nm);
        if (!nm) return psg_error_set("out of memory");
        b->ms = nm;
        b->cap = cap;
    }
    b->ms[b->n++] = dt * 1e3;
    b->timed_sec += dt;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --step-times FILE: each timed step's milliseconds, one a line (psgraph simulate --samples). */
static int write_step_times(const char *path, const double *ms, int64_t n) {
    FILE *f = fopen(path, "w");
    if (!f) return psg_error_set("--step-times %s: %s", path, strerror(errno));
    for (int64_t i = 0; i < n; i++) fprintf(f, "%.3f\n", ms[i]);
    if (fclose(f) != 0) return psg_error_set("--step-times %s: %s", path, strerror(errno));
    return 0;
}

int psg_bench_timing_report(psg_bench_timing_t *b, const psg_bench_line_t *l, FILE *out) {
    if (b->c->step_times && write_step_times(b->c->step_times, b->ms, b->n) < 0) return -1;
    if (b->profile && psg_op_profile_write_json(b->profile, l->g, l->profile_batch, b->n,
                                                b->timed_sec * 1e3, out) < 0)
        return psg_error_wrap("--op-profile");
    double ips = b->timed_sec > 0 ? (double)b->n * l->per_step / b->timed_sec
                                  : l->job_steps_per_sec * l->per_step,
           median = 0, p90 = 0;
    double *sorted = b->n ? malloc(sizeof *sorted * (size_t)b->n) : NULL;
    if (sorted) {
        memcpy(sorted, b->ms, sizeof *sorted * (size_t)b->n);
        qsort(sorted, (size_t)b->n, sizeof *sorted, cmp_double);
        median = sorted[(b->n - 1) / 2];
        p90 = sorted[(int64_t)ceil(0.9 * (double)(b->n - 1))];
        free(sorted);
    }
    bool fwd = !strcmp(l->mode, "forward");
    char med[32] = "null", p90s[32] = "null"; /* null: no step of its own timed */
    if (b->n) {
        snprintf(med, sizeof med, "%.1f", median);
        snprintf(p90s, sizeof p90s, "%.1f", p90);
    }
    fprintf(out, "total images/sec: %.2f\n", ips);
    fprintf(out,
            "{\"bench\":\"%s\",\"device\":\"%s\",\"precision\":\"%s\",\"towers\":%d,%s"
            "\"mode\":\"%s\",\"data\":\"%s\",\"batch\":%d,\"image_size\":%d,\"classes\":%d,"
            "\"threads\":%d,\"warmup_steps\":%d,\"steps\":%lld,\"images_per_sec\":%.3f,"
            "\"step_ms_median\":%s,\"step_ms_p90\":%s,\"final_loss\":%.4f,\"params\":%lld,"
            "\"macs_per_image\":%lld,\"gmacs_per_sec\":%.2f,\"blas\":\"%s\"}\n",
            l->model, l->device, l->precision, l->towers, l->cluster, l->mode, l->data, l->batch,
            l->image_size, l->classes, l->threads, b->c->bench_warmup, (long long)b->n, ips, med,
            p90s, l->final_loss, (long long)l->params, (long long)l->macs_per_image,
            ips * (double)l->macs_per_image * (fwd ? 1 : 3) / 1e9, psg_blas_core());
    fflush(out);
    return 0;
}
