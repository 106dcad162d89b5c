/* `psgraph plot LOGDIR`: reads LOGDIR/metrics.jsonl and draws loss, test
 * accuracy and examples/sec against the step into a PNG with gnuplot. Not a
 * plotting library: without gnuplot on PATH it fails and says how to get it. */
#include "cli/commands.h"
#include "core/json.h"
#include "psgraph/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static bool on_path(const char *prog) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char dir[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)n, path, prog);
        if (n && access(dir, X_OK) == 0) return true;
        path += n + (path[n] == ':');
    }
    return false;
}

static double num(const psg_json_t *j, const char *key, bool *ok) {
    const psg_json_t *v = psg_json_get(j, key);
    if (!v || v->type != PSG_JSON_NUMBER) {
        *ok = false;
        return 0;
    }
    return v->number;
}

/* Splits metrics.jsonl into the data files gnuplot reads; counts the points. */
static int split_metrics(const char *metrics, const char *progress, const char *eval, int *np,
                         int *ne) {
    FILE *in = fopen(metrics, "r");
    if (!in) return psg_error_set("%s: %s", metrics, strerror(errno));
    FILE *p = fopen(progress, "w"), *e = fopen(eval, "w");
    int rc = p && e ? 0 : psg_error_set("%s: %s", progress, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    *np = *ne = 0;
    while (rc == 0 && getline(&line, &cap, in) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        psg_json_t *j = psg_json_parse(line);
        if (!j) {
            rc = psg_error_wrap("%s:%d", metrics, lineno);
            break;
        }
        const psg_json_t *ev = psg_json_get(j, "event");
        bool ok = true;
        if (ev && ev->type == PSG_JSON_STRING && !strcmp(ev->string, "progress")) {
            double s = num(j, "step", &ok), l = num(j, "loss", &ok),
                   x = num(j, "examples_per_sec", &ok);
            if (ok) fprintf(p, "%.0f %.9g %.9g\n", s, l, x), (*np)++;
        } else if (ev && ev->type == PSG_JSON_STRING && !strcmp(ev->string, "eval")) {
            double s = num(j, "step", &ok), a = num(j, "test_accuracy", &ok);
            if (ok) fprintf(e, "%.0f %.9g\n", s, a), (*ne)++;
        }
        psg_json_free(j);
    }
    free(line);
    fclose(in);
    if (p) fclose(p);
    if (e) fclose(e);
    return rc;
}

/* s inside a gnuplot single-quoted string ('' is a quote there). */
static void quoted(char *out, size_t n, const char *s) {
    size_t k = 0;
    for (; *s && k + 3 < n; s++) {
        if (*s == '\'') out[k++] = '\'';
        out[k++] = *s;
    }
    out[k] = 0;
}

int psg_cmd_plot(int argc, char **argv) {
    const char *logdir = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: psgraph plot LOGDIR [-o FILE.png]\n"
                   "  draws loss, test accuracy and examples/sec from LOGDIR/metrics.jsonl\n"
                   "  (default output LOGDIR/metrics.png); needs gnuplot (Debian: gnuplot-nox)\n");
            return 0;
        }
        if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (argv[i][0] != '-' && !logdir)
            logdir = argv[i];
        else {
            fprintf(
                stderr,
                "psgraph plot: unexpected argument '%s'\nusage: psgraph plot LOGDIR [-o FILE.png]\n",
                argv[i]);
            return 2;
        }
    }
    if (!logdir) {
        fprintf(stderr, "usage: psgraph plot LOGDIR [-o FILE.png]\n");
        return 2;
    }
    if (!on_path("gnuplot")) {
        fprintf(
            stderr,
            "psgraph plot: gnuplot is not on PATH; install it (Debian: apt-get install gnuplot-nox, "
            "or tools/install-deps.sh)\n");
        return 1;
    }
    char metrics[4096], png[4096], tmp[] = "/tmp/psg_plot_XXXXXX", pf[64], ef[64], errf[64],
                                   cmd[128];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", logdir);
    snprintf(png, sizeof png, "%s", out ? out : "");
    if (!out) snprintf(png, sizeof png, "%s/metrics.png", logdir);
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "psgraph plot: %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    snprintf(pf, sizeof pf, "%s/progress.dat", tmp);
    snprintf(ef, sizeof ef, "%s/eval.dat", tmp);
    snprintf(errf, sizeof errf, "%s/gnuplot.err", tmp);
    snprintf(cmd, sizeof cmd, "gnuplot 2>%s", errf); /* its warnings shown only if it fails */
    int np = 0, ne = 0, rc = 1;
    if (split_metrics(metrics, pf, ef, &np, &ne) < 0) {
        fprintf(stderr, "psgraph plot: %s\n", psg_error_message());
        goto done;
    }
    if (np == 0) {
        fprintf(stderr, "psgraph plot: %s has no progress records to draw\n", metrics);
        goto done;
    }
    char qpng[8192], qdir[8192];
    quoted(qpng, sizeof qpng, png);
    quoted(qdir, sizeof qdir, logdir);
    FILE *g = popen(cmd, "w");
    if (!g) {
        fprintf(stderr, "psgraph plot: cannot start gnuplot: %s\n", strerror(errno));
        goto done;
    }
    fprintf(
        g,
        "set terminal pngcairo noenhanced size 900,1100 font 'sans,10'\n"
        "set output '%s'\n"
        "set multiplot layout 3,1 title '%s'\n"
        "set grid\nset key off\nset xlabel 'step'\n"
        "set ylabel 'loss'\nplot '%s' using 1:2 with linespoints lw 2 pt 7 ps 0.5 lc rgb '#1f77b4'\n"
        "set ylabel 'test accuracy'\n",
        qpng, qdir, pf);
    if (ne)
        fprintf(g, "plot '%s' using 1:2 with linespoints lw 2 pt 7 lc rgb '#2ca02c'\n", ef);
    else
        fprintf(
            g,
            "set label 1 'no evaluation yet' at graph 0.5,0.5 center\nplot NaN\nunset label 1\n");
    fprintf(
        g,
        "set ylabel 'examples/sec'\nplot '%s' using 1:3 with linespoints lw 2 pt 7 ps 0.5 lc rgb '#d62728'\n"
        "unset multiplot\n",
        pf);
    int st = pclose(g);
    if (st != 0) {
        fprintf(stderr, "psgraph plot: gnuplot failed (status %d) drawing %s:\n",
                WIFEXITED(st) ? WEXITSTATUS(st) : st, png);
        FILE *ef_in = fopen(errf, "r");
        char buf[512];
        while (ef_in && fgets(buf, sizeof buf, ef_in)) fputs(buf, stderr);
        if (ef_in) fclose(ef_in);
        goto done;
    }
    printf("%s: loss and examples/sec at %d steps, test accuracy at %d\n", png, np, ne);
    rc = 0;
done:
    unlink(pf);
    unlink(ef);
    unlink(errf);
    rmdir(tmp);
    return rc;
}
