/* psgraph compare's numbers over repeats: a sample's mean, min, max and Student's 95 %
 * interval; the machine's load and CPU times from /proc, and the part of the load that is
 * a run's own; the runs whose load stands out from the others'. Not the runs (cli/compare_cmd.c)
 * nor the plots. */
#include "cli/compare_stats.h"
#include "psgraph/error.h"

#include <ctype.h>
#include <dirent.h>
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

/* From /proc/ID/stat or /proc/P/task/T/stat: the state letter and the parent's pid (the
 * command's name, in parentheses, may hold spaces and parentheses: read after the last ')').
 * Returns 0, or -1 when the task is gone. */
static int read_stat(const char *path, char *state, long *ppid) {
    char buf[1024];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close = strrchr(buf, ')');
    return close && sscanf(close + 1, " %c %ld", state, ppid) == 2 ? 0 : -1;
}

static bool is_number(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return false;
    return true;
}

/* The threads of process pid that are runnable now. */
static int process_runnable(long pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_number(e->d_name)) continue;
        char stat[320], state = 0;
        long ppid;
        snprintf(stat, sizeof stat, "/proc/%ld/task/%s/stat", pid, e->d_name);
        count += read_stat(stat, &state, &ppid) == 0 && state == 'R';
    }
    closedir(d);
    return count;
}

int psg_tree_runnable(long root) {
    DIR *d = opendir("/proc");
    if (!d) return psg_error_set("/proc: %s", strerror(errno));
    size_t n = 0, cap = 256;
    long(*procs)[2] = malloc(sizeof *procs * cap); /* pid, ppid */
    bool ok = procs != NULL;
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (!is_number(e->d_name)) continue;
        char path[300], state;
        long ppid;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        if (read_stat(path, &state, &ppid) < 0) continue;
        if (n == cap) {
            void *more = realloc(procs, sizeof *procs * (cap *= 2));
            if (!more) {
                ok = false;
                break;
            }
            procs = more;
        }
        procs[n][0] = atol(e->d_name), procs[n][1] = ppid;
        n++;
    }
    closedir(d);
    bool *in = ok ? calloc(n ? n : 1, sizeof *in) : NULL;
    if (!in) {
        free(procs);
        return psg_error_set("/proc: out of memory listing the processes");
    }
    /* the tree: root, then every process whose parent is in it, until nothing is added */
    for (bool grew = true; grew;) {
        grew = false;
        for (size_t i = 0; i < n; i++) {
            if (in[i]) continue;
            bool child = procs[i][0] == root;
            for (size_t j = 0; !child && j < n; j++) child = in[j] && procs[j][0] == procs[i][1];
            if (child) in[i] = grew = true;
        }
    }
    int count = 0;
    for (size_t i = 0; i < n; i++)
        if (in[i]) count += process_runnable(procs[i][0]);
    free(in);
    free(procs);
    return count;
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

bool psg_compare_averaged_at(double step, long long every, long long after) {
    if (every <= 0) return true;
    long long j = (long long)step;
    return j <= after || (j - after) % every == 0;
}
