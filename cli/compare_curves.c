/* psgraph compare's curves: every evaluation and every worker step of every run (from the
 * runs' metrics*.jsonl) into one CSV for a paper's own plots, each strategy's repeats
 * aggregated (mean, min, max) into gnuplot data files, and one PNG of five panels: test
 * accuracy against wall time and against the chief's steps, training loss and megabytes
 * moved against wall time, and the staleness histogram, the repeats' spread as bands. Not
 * the runs nor the JSON lines (cli/compare_cmd.c). */
#include "cli/compare_curves.h"
#include "core/json.h"
#include "psgraph/error.h"

#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIME_BINS 40
#define STALE_BINS 17 /* 0..15, and 16 or more */

typedef struct {
    double wall, step, acc;
} eval_pt_t;

/* One run's points, and its per-bin sums (filled once the run's end is known). */
typedef struct {
    eval_pt_t *ev;
    int nev, cap_ev;
    double *st_wall, *st_loss, *st_bytes; /* each worker step: when, its loss (NaN), bytes */
    int nst, cap_st;
    int64_t hist[STALE_BINS];
    double end; /* the last wall time seen */
} run_pts_t;

static double num(const psg_json_t *j, const char *key) {
    const psg_json_t *v = psg_json_get(j, key);
    return v && v->type == PSG_JSON_NUMBER ? v->number : NAN;
}

static int grow(void **p, int *cap, int n, size_t size) {
    if (n < *cap) return 0;
    int c = *cap ? *cap * 2 : 256;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return psg_error_set("out of memory");
    *p = q;
    *cap = c;
    return 0;
}

/* A CSV field: the number, or empty when not known. */
static void csv_num(FILE *f, double v, const char *fmt) {
    fputc(',', f);
    if (isfinite(v)) fprintf(f, fmt, v);
}

/* One metrics line of a run into r and a row of csv. */
static int read_line(const psg_json_t *j, run_pts_t *r, FILE *csv, const char *label, int k,
                     long long seed) {
    const psg_json_t *ev = psg_json_get(j, "event");
    if (!ev || ev->type != PSG_JSON_STRING) return 0;
    bool is_eval = !strcmp(ev->string, "eval"), is_step = !strcmp(ev->string, "sync_step");
    if (!is_eval && !is_step) return 0;
    double wall = num(j, "wall_sec");
    if (!isfinite(wall)) return 0;
    if (wall > r->end) r->end = wall;
    double step = num(j, is_eval ? "step" : "local_step"), acc = num(j, "test_accuracy"),
           loss = num(j, "loss"), push = num(j, "push_bytes"), pull = num(j, "pull_bytes"),
           stale = num(j, "staleness"), worker = is_eval ? 0 : num(j, "worker");
    if (is_eval) {
        if (!isfinite(acc) || grow((void **)&r->ev, &r->cap_ev, r->nev, sizeof *r->ev) < 0)
            return isfinite(acc) ? -1 : 0;
        r->ev[r->nev++] = (eval_pt_t){wall, step, acc};
    } else {
        int cap = r->cap_st;
        if (grow((void **)&r->st_wall, &cap, r->nst, sizeof(double)) < 0) return -1;
        cap = r->cap_st;
        if (grow((void **)&r->st_loss, &cap, r->nst, sizeof(double)) < 0) return -1;
        if (grow((void **)&r->st_bytes, &r->cap_st, r->nst, sizeof(double)) < 0) return -1;
        r->st_wall[r->nst] = wall;
        r->st_loss[r->nst] = loss;
        r->st_bytes[r->nst++] = (isfinite(push) ? push : 0) + (isfinite(pull) ? pull : 0);
        const psg_json_t *g = psg_json_get(j, "gradient");
        bool used = g && g->type == PSG_JSON_STRING && !strcmp(g->string, "used");
        if (used && isfinite(stale) && stale >= 0)
            r->hist[stale < STALE_BINS - 1 ? (int)stale : STALE_BINS - 1]++;
    }
    fprintf(csv, "\"%s\",%d,%lld,%.0f,%s", label, k, seed, worker, is_eval ? "eval" : "step");
    csv_num(csv, wall, "%.4f");
    csv_num(csv, step, "%.0f");
    csv_num(csv, acc, "%.6f");
    csv_num(csv, loss, "%.6g");
    csv_num(csv, push, "%.0f");
    csv_num(csv, pull, "%.0f");
    csv_num(csv, stale, "%.0f");
    fputc('\n', csv);
    return 0;
}

/* Every metrics*.jsonl of dir into r and csv. */
static int read_run(const char *dir, run_pts_t *r, FILE *csv, const char *label, int k,
                    long long seed) {
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/metrics*.jsonl", dir);
    glob_t gl;
    if (glob(pat, 0, NULL, &gl) != 0) return 0; /* a run that wrote nothing: no points */
    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    for (size_t f = 0; f < gl.gl_pathc && rc == 0; f++) {
        FILE *in = fopen(gl.gl_pathv[f], "r");
        if (!in) {
            rc = psg_error_set("%s: %s", gl.gl_pathv[f], strerror(errno));
            break;
        }
        while (rc == 0 && getline(&line, &cap, in) > 0) {
            /* the workers' lines start with the task: {"task":...,"event":...} parses too */
            psg_json_t *j = psg_json_parse(line);
            if (j) rc = read_line(j, r, csv, label, k, seed);
            psg_json_free(j);
        }
        fclose(in);
    }
    free(line);
    globfree(&gl);
    return rc;
}

/* mean, min, max of the n values of v that are finite; 0 when none. */
static int spread(const double *v, int n, double *mean, double *lo, double *hi) {
    int m = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        if (!m || v[i] < *lo) *lo = v[i];
        if (!m || v[i] > *hi) *hi = v[i];
        sum += v[i];
        m++;
    }
    if (m) *mean = sum / m;
    return m;
}

/* One strategy's aggregates into dat, five gnuplot data sets (index 0..4): accuracy by
 * evaluation against steps, against mean wall time; loss and cumulative MB per time bin of
 * width bin; the staleness histogram as shares of the used gradients. */
static void write_aggregates(FILE *dat, run_pts_t *runs, int nr, double bin) {
    double v[64], w[64], mean = 0, lo = 0, hi = 0, wm = 0, wl = 0, wh = 0;
    int most = 0;
    for (int k = 0; k < nr; k++)
        if (runs[k].nev > most) most = runs[k].nev;
    for (int pass = 0; pass < 2; pass++) {
        for (int e = 0; e < most; e++) {
            int m = 0;
            for (int k = 0; k < nr; k++)
                if (e < runs[k].nev) {
                    v[m] = runs[k].ev[e].acc;
                    w[m++] = pass ? runs[k].ev[e].wall : runs[k].ev[e].step;
                }
            spread(v, m, &mean, &lo, &hi);
            spread(w, m, &wm, &wl, &wh);
            fprintf(dat, "%.4f %.6f %.6f %.6f\n", wm, mean, lo, hi);
        }
        fprintf(dat, "%s\n\n", most ? "" : "0 nan nan nan");
    }
    for (int pass = 0; pass < 2; pass++) {
        double cum[64] = {0};
        int any = 0;
        for (int b = 0; b < TIME_BINS; b++) {
            double t0 = b * bin, t1 = t0 + bin;
            int m = 0;
            for (int k = 0; k < nr && m < 64; k++) {
                const run_pts_t *r = &runs[k];
                double sum = 0;
                int c = 0;
                for (int s = 0; s < r->nst; s++)
                    if (r->st_wall[s] >= t0 && r->st_wall[s] < t1) {
                        if (pass == 0 && isfinite(r->st_loss[s])) sum += r->st_loss[s], c++;
                        if (pass == 1) cum[k] += r->st_bytes[s] / 1e6;
                    }
                if (pass == 0 && c) v[m++] = sum / c;
                if (pass == 1) v[m++] = cum[k]; /* past its end a run keeps its total */
            }
            if (spread(v, m, &mean, &lo, &hi) == 0) continue;
            fprintf(dat, "%.4f %.6g %.6g %.6g\n", pass ? t1 : (t0 + t1) / 2, mean, lo, hi);
            any++;
        }
        fprintf(dat, "%s\n\n", any ? "" : "0 nan nan nan");
    }
    for (int s = 0; s < STALE_BINS; s++) {
        int m = 0;
        for (int k = 0; k < nr && m < 64; k++) {
            int64_t total = 0;
            for (int b = 0; b < STALE_BINS; b++) total += runs[k].hist[b];
            if (total) v[m++] = (double)runs[k].hist[s] / (double)total;
        }
        if (spread(v, m, &mean, &lo, &hi)) fprintf(dat, "%d %.6f %.6f %.6f\n", s, mean, lo, hi);
    }
    fprintf(dat, "\n\n");
}

static void free_run(run_pts_t *r) {
    free(r->ev);
    free(r->st_wall);
    free(r->st_loss);
    free(r->st_bytes);
}

/* The five panels, a band and a mean line a strategy. */
static int draw(const psg_compare_curve_set_t *sets, int n, const char *workdir, const char *png,
                const char *title, double target) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "gnuplot 2>'%s/gnuplot.log'", workdir);
    FILE *g = popen(cmd, "w");
    if (!g) return psg_error_set("cannot start gnuplot: %s", strerror(errno));
    fprintf(g,
            "set terminal pngcairo noenhanced size 1400,1300 font 'sans,10'\nset output '%s'\n"
            "set multiplot layout 3,2 title '%s (band: min to max over the repeats; line: mean)'\n"
            "set grid\nset key bottom right\nset style fill transparent solid 0.2 noborder\n",
            png, title);
    const char *panels[4][4] = {
        {"1", "wall time (s)", "test accuracy", "1"},
        {"0", "steps of the chief", "test accuracy", "1"},
        {"2", "wall time (s)", "training loss (mean over the workers in a time bin)", "0"},
        {"3", "wall time (s)", "MB moved by the workers (pushed + pulled, cumulative)", "0"}};
    for (int p = 0; p < 4; p++) {
        fprintf(g, "set xlabel '%s'\nset ylabel '%s'\nset key %s\nplot ", panels[p][1],
                panels[p][2],
                p == 3   ? "top left"
                : p == 2 ? "top right"
                         : "bottom right");
        if (panels[p][3][0] == '1')
            fprintf(g, "%.4f title 'target' with lines dt 2 lc rgb 'gray', ", target);
        for (int i = 0; i < n; i++)
            fprintf(g,
                    "'%s/curves_%d.dat' index %s using 1:3:4 notitle with filledcurves lc %d, "
                    "'' index %s using 1:2 title '%s' with lines lw 2 lc %d%s",
                    workdir, i, panels[p][0], i + 1, panels[p][0], sets[i].label, i + 1,
                    i + 1 < n ? ", " : "\n");
    }
    double w = 0.8 / (n > 0 ? n : 1);
    fprintf(g,
            "set xlabel 'staleness of a used gradient (16: 16 or more)'\nset ylabel 'share of "
            "the used gradients'\nset key top right\nset boxwidth %.4f\nset xrange [-0.5:16.5]\n"
            "set style fill solid 0.6\nplot ",
            w);
    for (int i = 0; i < n; i++)
        fprintf(g,
                "'%s/curves_%d.dat' index 4 using ($1 - 0.4 + %.4f):2 title '%s' with boxes lc %d, "
                "'' index 4 using ($1 - 0.4 + %.4f):2:3:4 notitle with yerrorbars lc %d pt 0%s",
                workdir, i, w * (i + 0.5), sets[i].label, i + 1, w * (i + 0.5), i + 1,
                i + 1 < n ? ", " : "\n");
    fprintf(g, "unset multiplot\n");
    int st = pclose(g);
    return st == 0 ? 0
                   : psg_error_set("gnuplot failed drawing %s (status %d; %s/gnuplot.log)", png, st,
                                   workdir);
}

int psg_compare_curves(const psg_compare_curve_set_t *sets, int n, const char *workdir,
                       const char *csv, const char *png, const char *title, double target) {
    if (n > 64) return psg_error_set("%d strategies to draw: at most 64", n);
    FILE *out = fopen(csv, "w");
    if (!out) return psg_error_set("%s: %s", csv, strerror(errno));
    fprintf(out, "strategy,repeat,seed,worker,event,wall_sec,step,test_accuracy,loss,"
                 "push_bytes,pull_bytes,staleness\n");
    int rc = 0;
    run_pts_t *all[64] = {0};
    double end = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        all[i] = calloc((size_t)sets[i].repeats, sizeof **all);
        if (!all[i]) rc = psg_error_set("out of memory");
        for (int k = 0; rc == 0 && k < sets[i].repeats; k++) {
            rc = read_run(sets[i].dirs[k], &all[i][k], out, sets[i].label, k, sets[i].seeds[k]);
            if (all[i][k].end > end) end = all[i][k].end;
        }
    }
    if (fclose(out) != 0 && rc == 0) rc = psg_error_set("%s: %s", csv, strerror(errno));
    double bin = end > 0 ? end / TIME_BINS * 1.0001 : 1;
    for (int i = 0; i < n && rc == 0; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/curves_%d.dat", workdir, i);
        FILE *dat = fopen(path, "w");
        if (!dat) {
            rc = psg_error_set("%s: %s", path, strerror(errno));
            break;
        }
        write_aggregates(dat, all[i], sets[i].repeats < 64 ? sets[i].repeats : 64, bin);
        if (fclose(dat) != 0) rc = psg_error_set("%s: %s", path, strerror(errno));
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; all[i] && k < sets[i].repeats; k++) free_run(&all[i][k]);
        free(all[i]);
    }
    return rc == 0 ? draw(sets, n, workdir, png, title, target) : -1;
}
