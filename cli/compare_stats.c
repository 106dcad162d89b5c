/* psgraph compare's numbers over repeats: a sample's mean, min, max and Student's 95 %
 * interval; the machine's load and CPU times from /proc; the runs whose load stands out
 * from the others'. Not the runs (cli/compare_cmd.c) nor the plots. */
#include "cli/compare_stats.h"
#include "psgraph/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double psg_compare_t975(int df) {
    /* t(0.975, df) for df = 1..30; past 30, the normal's 1.96 plus the first term of the
     * expansion in 1/df (within 0.001 of the table at 30) */
    static const double t[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                               2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                               2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                               2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
    if (df < 1) return NAN;
    if (df <= 30) return t[df - 1];
    return 1.95996 + 2.3722 / (double)df;
}

psg_compare_stat_t psg_compare_stat(const double *x, int n) {
    psg_compare_stat_t s = {0};
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]) || x[i] < 0) continue;
        if (s.n == 0 || x[i] < s.min) s.min = x[i];
        if (s.n == 0 || x[i] > s.max) s.max = x[i];
        sum += x[i];
        s.n++;
    }
    if (s.n == 0) return s;
    s.mean = sum / s.n;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i]) && x[i] >= 0) sq += (x[i] - s.mean) * (x[i] - s.mean);
    double half = s.n > 1 ? psg_compare_t975(s.n - 1) * sqrt(sq / (s.n - 1)) / sqrt(s.n) : 0;
    s.lo = s.mean - half;
    s.hi = s.mean + half;
    return s;
}

int psg_compare_stat_json(char *buf, size_t size, const char *key, const psg_compare_stat_t *s,
                          const char *fmt) {
    if (s->n == 0) return snprintf(buf, size, "\"%s\":null", key);
    char v[5][40];
    const double x[5] = {s->mean, s->min, s->max, s->lo, s->hi};
    for (int i = 0; i < 5; i++) snprintf(v[i], sizeof v[i], fmt, x[i]);
    return snprintf(buf, size,
                    "\"%s\":{\"n\":%d,\"mean\":%s,\"min\":%s,\"max\":%s,\"ci95\":[%s,%s]}", key,
                    s->n, v[0], v[1], v[2], v[3], v[4]);
}

int psg_machine_sample(psg_machine_sample_t *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return psg_error_set("/proc/loadavg: %s", strerror(errno));
    double l5, l15;
    int running = 0, got = fscanf(f, "%lf %lf %lf %d/", &out->load1, &l5, &l15, &running);
    fclose(f);
    if (got != 4) return psg_error_set("/proc/loadavg: no load average in it");
    out->runnable = running > 0 ? running - 1 : 0; /* not counting the reader itself */
    f = fopen("/proc/stat", "r");
    if (!f) return psg_error_set("/proc/stat: %s", strerror(errno));
    unsigned long long user = 0, nice = 0, sys = 0, idle = 0, iow = 0, irq = 0, sirq = 0, steal = 0;
    got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iow,
                 &irq, &sirq, &steal);
    fclose(f);
    if (got < 7) return psg_error_set("/proc/stat: no 'cpu' line");
    double tick = (double)sysconf(_SC_CLK_TCK);
    if (!(tick > 0)) tick = 100;
    out->busy_sec = (double)(user + nice + sys + irq + sirq) / tick;
    out->steal_sec = (double)steal / tick;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int psg_compare_flag_loads(const double *load, int n, double margin, bool *flagged) {
    int count = 0;
    double *others = n > 1 ? malloc(sizeof(double) * (size_t)(n - 1)) : NULL;
    for (int i = 0; i < n; i++) {
        flagged[i] = false;
        if (!others) continue;
        int m = 0;
        for (int j = 0; j < n; j++)
            if (j != i) others[m++] = load[j];
        qsort(others, (size_t)m, sizeof *others, cmp_double);
        double median = m % 2 ? others[m / 2] : (others[m / 2 - 1] + others[m / 2]) / 2;
        flagged[i] = fabs(load[i] - median) > margin * fmax(median, 1);
        count += flagged[i];
    }
    free(others);
    return count;
}
